"""Line boundaries a paste got wrong: the width a hard wrap cut lines at and the rejoined record; a line
that holds a second record (another rank's or another process's, glued in) split in parts."""
from __future__ import annotations

from .rx import _GLUED_RANK, _K8S_TIME, _LAUNCH, _RECORD, _TB_HEADER, _Rx


#: Terminal / viewer widths a hard wrap is believed at even when only two lines show it.
_WIDTHS = frozenset((80, 100, 120, 132, 160, 200))


def _wrap_width(lines: list[str]) -> int:
    """The width lines were cut at: several lines exactly as long as the longest, mostly followed by a
    non-record; 0 if none."""
    if len(lines) < 2:
        return 0
    # a CRLF file's lines still end in "\r" here; the rows _rejoin measures no longer do
    lengths = [len(s) - (s[-1:] == "\r") for s in lines]
    width = max(lengths)
    if width < 60:
        return 0
    hits = lengths.count(width) - (lengths[-1] == width)
    if hits < (1 if width in _WIDTHS else 2):
        return 0
    at: list[int] = []
    i = -1
    while len(at) < 8:
        try:
            i = lengths.index(width, i + 1, len(lengths) - 1)
        except ValueError:
            break
        at.append(i)
    cont = sum(1 for i in at if _continuation(lines[i], lines[i + 1]) is not None)
    # at a usual terminal width one wrapped line is enough; at another width two that both continue (a short
    # paste from a wide terminal, py4cast#116: 204 columns), or most of several
    if hits < 3 and width not in _WIDTHS:
        return width if cont == len(at) else 0
    return width if (cont * 2 >= len(at) if hits < 3 else cont * 2 > len(at)) else 0


def _rule_line(s: str) -> bool:
    """A line that is one border character repeated ('=====', '-----', '*****'): a box drawn by the program."""
    return len(s) >= 10 and s[0] in "=-*#~_+" and s.count(s[0]) == len(s)


def _continues(s: str) -> bool:
    return bool(s) and not s.startswith("  ") and not s.isspace() and _RECORD.match(s) is None


def _continuation(prev: str, nxt: str) -> int | None:
    """Where the rest of ``prev`` starts in ``nxt`` when ``nxt`` continues it (else None).

    A terminal wraps the finished line, so the continuation has no launcher prefix; a worker's own console
    (rich, loguru at 80 columns) wraps before torchrun --tee / srun --label / kubectl add theirs, so each piece
    has the same prefix as the one before (a kubectl time may differ): then the rest starts after it.
    """
    if nxt[:12] == prev[:12] or not nxt:
        return None  # the same head again ("node5:240:240 [6] NCCL INFO ..."): the next record of one process
    if _rule_line(prev):
        return None  # a box border printed at its own width (MPICH/Hydra's 85 '=', torchelastic's 60), not cut text
    cut = _LAUNCH.match(nxt).end()
    if cut:
        head = _LAUNCH.match(prev).end()
        if not head or _K8S_TIME.sub("", prev[:head]) != _K8S_TIME.sub("", nxt[:cut]):
            return None
    return cut if _continues(nxt[cut:]) else None


def _rejoin(rows: list[list], width: int) -> list[list]:
    out: list[list] = []
    last = ""  # the physical line the joined row ends with
    for r in rows:
        if len(last) == width and out:
            cut = _continuation(last, r[1])
            if cut is not None:
                out[-1][1] += r[1][cut:]  # the evidence still quotes the first line as it is in the file
                last = r[1]
                continue
        out.append(r)
        last = r[1]
    return out


# A Python exception line ("RuntimeError: ...", "torch.distributed.DistNetworkError: ..."): Python prints its message on
# one line; where the lines after it are pieces of that message, a person (or a viewer) wrapped it at the words.
_EXC_HEAD = _Rx(r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt): \S")
#: How far short of the width a word-wrapped line may end (the next word, up to this long, did not fit).
_WORD_SLACK = 16


def _word_cut(prev: str, nxt: str, width: int) -> int | None:
    """Where the rest of ``prev`` starts in ``nxt`` when a word wrap at ``width`` broke the line there: ``nxt``
    continues it, and its first word would not have fitted behind ``prev`` (a line ending a sentence is no cut)."""
    if len(prev) < width - _WORD_SLACK or prev.endswith((" ", ".", "!", "?")):
        return None
    cut = _continuation(prev, nxt)
    if cut is None:
        return None
    return cut if len(prev) + 1 + len(nxt[cut:].split(" ", 1)[0]) > width else None


def _word_wrap_width(lines: list[str]) -> int:
    """The width an exception's message was word-wrapped at: an exception line and at least two pieces after it, each
    broken where the next word would not have fitted in the widest line (60 .. 200 columns), one of them short of
    that width (a hard wrap cuts every piece at the width exactly, mid-word: ``_wrap_width``'s); 0 if none."""
    lines = [s[:-1] if s[-1:] == "\r" else s for s in lines]
    width = max(map(len, lines), default=0)
    if not 60 <= width <= 200:
        return 0
    for i in range(len(lines) - 2):
        if _EXC_HEAD.match(lines[i]) and _word_cut(lines[i], lines[i + 1], width) is not None \
                and _word_cut(lines[i + 1], lines[i + 2], width) is not None \
                and min(len(lines[i]), len(lines[i + 1])) < width:
            return width
    return 0


def _rejoin_words(rows: list[list], width: int) -> list[list]:
    """Join the pieces of word-wrapped exception messages (a space where the wrap took one)."""
    out: list[list] = []
    last: str | None = None  # the physical line the joined row ends with, inside a message being joined
    for r in rows:
        text = r[1][:-1] if r[1][-1:] == "\r" else r[1]
        if last is not None and out:
            cut = _word_cut(last, text, width)
            if cut is not None:
                out[-1][1] += " " + text[cut:]  # the evidence still quotes the first line as it is in the file
                last = text
                continue
        out.append(r)
        last = text if _EXC_HEAD.match(text) else None
    return out


def _tb_cut(text: str) -> int | None:
    """Where a traceback starts in a line that lost its line breaks: Python ends the line after its header
    "Traceback (most recent call last):", so a header with other text before it (not a launcher's prefix, not
    torch's "Original Traceback") and more after it is a record flattened into the line ("... failed (exitcode:
    -9) ... Traceback (most recent call last): File ..."); None otherwise."""
    i = text.find(_TB_HEADER)
    if i <= 0 or not text[i + len(_TB_HEADER):].strip():
        return None
    before = text[:i]
    if not before.strip() or before.endswith("Original ") or _RANK_END.search(before) \
            or _LAUNCH.fullmatch(before) is not None:
        return None  # "[rank2]: " before it is the rank cut's (it keeps whose traceback it is)
    return i


def _unglue(text: str, hosts: frozenset[str] = frozenset()) -> list[str] | None:
    """Split a line that holds a second record: ``[rank1]:[rank0]: Traceback``, ``...[rank2]: Traceback``,
    ``...Channel 00host2:9:9 [1] NCCL WARN ...`` (another process's NCCL line written into an unfinished one) or
    ``... of binary: /x/python Traceback (most recent call last): File ...`` (a paste that lost its line breaks).

    ``hosts`` are the host names seen at line starts: where a glued head's host runs into the text before it
    ("00host2"), the known name says where it begins.
    """
    cuts: list[int] = []
    if _TB_HEADER in text:
        i = _tb_cut(text)
        if i is not None:
            cuts.append(i)
    if "[rank" in text:
        for m in _GLUED_RANK.finditer(text, 1):
            before = text[:m.start()]
            if _RANK_ONLY.fullmatch(before) or not before.endswith(("]:", "] ", ": ")) and before.strip():
                cuts.append(m.start())
    if text.count(" NCCL ") > 1:
        i = text.find(" NCCL ")
        while i >= 0:
            # the head ends right before " NCCL " and is short: look only there (a search from 0 for every
            # " NCCL " of a 64 KiB line was quadratic: found by benchmarks/fuzz.py)
            m = _HEAD_BEFORE.search(text, max(0, i - 512), i)
            if m is not None and m.start() > 0:
                host = m.group(1)
                start = m.start()
                for k in range(len(host)):
                    if host[k:] in hosts:
                        start = m.start() + k
                        break
                else:
                    if text[start - 1:start].isalnum():
                        start = -1
                if start > 0:
                    cuts.append(start)
            i = text.find(" NCCL ", i + 6)
    if not cuts:
        return None
    bounds = [0, *sorted(set(cuts)), len(text)]
    parts = [text[a:b] for a, b in zip(bounds, bounds[1:])]
    # an empty "[rank1]:" left in front of another rank's record carries nothing of its own
    return [p for p in parts if p.strip() and not _RANK_ONLY.fullmatch(p.strip())]


_RANK_ONLY = _Rx(r"\[rank\d+\]:")
_RANK_END = _Rx(r"\[rank\d+\]: ?$")
_HEAD_BEFORE = _Rx(r"([\w.-]+):\d+:\d+ \[\d+\](?: [^\s:()]+:\d+(?: \([^()\s]*\))?)?$")
