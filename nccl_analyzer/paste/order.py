"""Bottom-up pastes: a cheap hint on the sample, then the full check (tracebacks that close with their header,
frames after the exception, WARN chains above their WARN, times that count down)."""
from __future__ import annotations

from .rx import _EXC, _FRAME, _NCCL_RESULT, _TIME, _TRACE, _Rx


def _head_time(s: str) -> str | None:
    """The time a line starts with (ISO, bracketed ISO, glog), as comparable text; None without one."""
    if s[4:5] == "-" and s[:4].isdigit() or s[:1] == "[" and s[5:6] == "-" \
            or s[:1] in "IWEF" and s[1:5].isdigit() and s[5:6] == " ":
        m = _TIME.search(s, 0, 48)
        return m.group(0).lstrip("IWEF") if m else None
    return None


def _reversed_text(text: str, lines: list[str]) -> bool:
    """Cheap look for a bottom-up paste; the full check (``_reversed``) only where a sign of one is found."""
    if _reversal_hint(text):
        return _reversed([[i, s, s, False, 0] for i, s in enumerate(lines, 1)])
    # only times to go by (at a line's head): look closer only if the first one is later than the last one
    first = next(filter(None, map(_head_time, lines[:4])), None)
    if first is None:
        return False
    last = next(filter(None, map(_head_time, reversed(lines[-4:]))), None)
    if last is None or last >= first:
        return False
    return _reversed([[i, s, s, False, 0] for i, s in enumerate(lines, 1)])


def _reversal_hint(text: str) -> bool:
    """A traceback header right after a frame, ``Last error:`` before its ``ncclXxx:`` line, or an exception
    line just above a frame (the first few of each)."""
    for mark in ("Traceback (most recent call last)", "Last error:", 'File "', "NCCL WARN "):
        p = -1
        for _ in range(4):
            p = text.find(mark, p + 1)
            if p < 0:
                break
            ls = text.rfind("\n", 0, p) + 1
            le = text.find("\n", p)
            le = len(text) if le < 0 else le
            if mark[0] == "F":
                end = ls - 1
                for _ in range(2):  # the exception line, then the frame's code line, then the frame (bottom-up)
                    if end <= 0:
                        break
                    start = text.rfind("\n", 0, end) + 1
                    prev = _unwrap(text[start:end])
                    if prev and _EXC.match(prev) and not prev.startswith("Traceback"):
                        return True
                    end = start - 1
                continue
            nxt_end = text.find("\n", le + 1)
            nxt = _unwrap(text[le + 1:len(text) if nxt_end < 0 else nxt_end])
            if mark[0] == "N":
                # the line above a WARN is its return-code chain: bottom-up (the chain follows the WARN)
                prev = _unwrap(text[text.rfind("\n", 0, max(ls - 1, 0)) + 1:max(ls - 1, 0)]) if ls else ""
                if _TRACE.search(prev) and not _TRACE.search(nxt):
                    return True
            elif mark[0] == "T":
                if nxt and not _FRAME.match(nxt):
                    prev = text[text.rfind("\n", 0, max(ls - 1, 0)) + 1:max(ls - 1, 0)].strip()
                    if _FRAME.match(prev) or prev[:1] in "\"'" or prev.endswith(")"):
                        return True
            elif _NCCL_RESULT.match(nxt):
                return True
    return False


_WRAPPER = _Rx(r"\s*(?:\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-]\d\d:?\d\d) )?(?:\[[\w|.-]+\]: ?|\d{1,5}: )*")


def _unwrap(s: str) -> str:
    """A line without its launcher prefixes ("[trainer0|0]:", "[rank3]: ", srun's "3: "), stripped."""
    return s[_WRAPPER.match(s).end():].strip()


def _reversed(rows: list[list]) -> bool:
    """Pasted bottom-up: tracebacks close with their header, frames follow the exception, times go down."""
    texts = [_unwrap(r[1]) for r in rows if r[1].strip()]
    back = fwd = 0
    for i, s in enumerate(texts):
        nxt = texts[i + 1] if i + 1 < len(texts) else ""
        if s.startswith("Traceback (most recent call last)"):
            if _FRAME.match(nxt):
                fwd += 1
            elif i and _FRAME.match(texts[i - 1]) or i > 1 and _FRAME.match(texts[i - 2]):
                back += 1
        elif s.startswith("Last error:") and not s[11:].strip():
            if _NCCL_RESULT.match(nxt):
                back += 1
            elif i and _NCCL_RESULT.match(texts[i - 1]):
                fwd += 1
        elif " NCCL WARN " in s or s.startswith("NCCL WARN "):
            # NCCL prints a WARN, then its return-code chain "NCCL INFO misc/socket.cc:570 -> 2" (NCCLCHECK)
            if _TRACE.search(nxt):
                fwd += 1
            elif i and _TRACE.search(texts[i - 1]):
                back += 1
        elif _EXC.match(s):
            after = texts[i + 1:i + 3]
            if after and any(_FRAME.match(a) for a in after) and not any(a.startswith("Traceback") for a in after):
                back += 1
            elif i and _FRAME.match(texts[i - 1]) or i > 1 and _FRAME.match(texts[i - 2]):
                fwd += 1
    if back and back > fwd:
        return True
    if back or fwd:
        return False
    # times: a paste with only timestamps to go by is reversed if they mostly count down
    prev = None
    up = down = 0
    for s in texts:
        key = _head_time(s)
        if key is None:
            continue
        if prev is not None:
            if key > prev:
                up += 1
            elif key < prev:
                down += 1
        prev = key
    return down >= 3 and down > 4 * up
