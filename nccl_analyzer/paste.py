"""Pasted logs -> the lines the program printed: undo what issue threads, forums and tickets do to a log.

People paste logs indented (2/4 spaces, tabs), quoted (``> ``, ``>> ``), inside Markdown fences (```` ``` ````,
``~~~``) or ``<details>``/``<pre>``, behind line-number gutters (``12 | ``, ``  12: ``, ``12<TAB>``),
HTML-escaped (``&lt;``), with GitHub's auto-links inside file names (``[net_ib.cc:101](http://net_ib.cc:101/)``),
hard-wrapped at the terminal width, with ``[...]`` / ``<snip>`` elisions, in reverse order, and with ranks
interleaved in the middle of a line. ``detect`` looks at the first ``SAMPLE_BYTES`` of a source and returns a
``Plan`` only when the text looks pasted, so a raw log keeps the plain fast path in ``sources.iter_source``.

A plan yields ``(lineno, text, raw, truncated)``: ``text`` is what the grammars should see, ``raw`` the line as
it is in the file (evidence quotes it), ``lineno`` its number in the file. Decoration lines (fences, tags) come
out as blank text (they end a block, as a blank line would); elisions are dropped so a traceback cut by
``[...]`` stays one block; a hard-wrapped line and its continuations come out once, under the first line's
number (its ``raw`` is that first line as it is in the file); a line that holds two ranks' output comes out once per part, both under its number.
"""
from __future__ import annotations

import itertools
import re
from operator import itemgetter
from dataclasses import dataclass
from typing import Iterable, Iterator

class _Rx:
    """A regex compiled on first use: most runs read raw logs and never need most of these, and compiling them all
    at import would add to every run's start-up."""

    __slots__ = ("pattern", "flags", "_rx")

    def __init__(self, pattern: str, flags: int = 0):
        self.pattern, self.flags, self._rx = pattern, flags, None

    def get(self) -> re.Pattern:
        rx = self._rx
        if rx is None:
            rx = self._rx = re.compile(self.pattern, self.flags)
        return rx

    def match(self, *args):
        return self.get().match(*args)

    def fullmatch(self, *args):
        return self.get().fullmatch(*args)

    def search(self, *args):
        return self.get().search(*args)

    def finditer(self, *args):
        return self.get().finditer(*args)

    def sub(self, *args, **kwargs):
        return self.get().sub(*args, **kwargs)


#: Bytes of a source's head looked at to decide whether it is a paste.
SAMPLE_BYTES = 64 * 1024
#: A paste is normalised in windows of this many lines (reversal and wrap width are per window).
WINDOW_LINES = 200_000


_FENCE = _Rx(r"[ \t]*(?:`{3,}|~{3,})[ \t]*[\w+.#-]*[ \t]*$")
# HTML a Markdown renderer keeps: <details>, <summary>...</summary>, <pre>, <code>, <br>, <p>, <blockquote>.
_TAGS = r"</?(?:details|summary|pre|code|br|p|blockquote|div|span|tt|samp|kbd)\b[^<>]*>"
_LEAD_TAGS = _Rx(r"[ \t]*(?:(?:" + _TAGS + r")[ \t]*)+")
_SUMMARY = _Rx(r"[ \t]*(?:<details\b[^<>]*>[ \t]*)?<summary\b[^<>]*>.*?</summary>[ \t]*", re.I)
_TRAIL_TAGS = _Rx(r"(?:[ \t]*(?:" + _TAGS + r"))+[ \t]*$", re.I)
_QUOTE = _Rx(r"(?:[ \t]{0,3}>(?: |$|(?=>)))+")
# A gutter: "12 | text", "12| text", "  12: text", "12<TAB>text" (the number is checked to count up).
_GUTTER = _Rx(r"[ \t]*(\d{1,7})(?: ?\| ?|: |:$|\t| ?│ ?)")
_ELISION = _Rx(
    r"[ \t]*(?:\[\s*(?:\.{3,}|…|snip(?:ped)?|truncated|omitted|cut|more|\.\.\. ?\d+ (?:more )?lines?[\w ]*)[^\]]{0,40}\]"
    r"|\.{3,}|…|<\s*(?:snip(?:ped)?|\.{3,}|…)\s*>|\(\s*(?:\.{3,}|…|snip(?:ped)?)\s*\)|--\s*snip\s*--"
    r"|\.{3,} ?\(?\d+ (?:more )?lines? (?:omitted|removed|skipped|truncated)\)?)[ \t]*$", re.I)
_AUTOLINK = _Rx(r"\[([^\[\]()\s]+)\]\((?:https?://)?([^()\s]+?)/?\)")

# What starts a log record (after the paste decorations are gone): a wrapped line's continuation never does.
_RECORD = _Rx(
    r"(?:\[[^\]]{1,40}\] ?)?[\w.-]+:\d+:\d+ (?:\[\d+\] )?|\[(?:rank|default|[A-Za-z_]+)\d+\]:|\[?\d{4}-\d\d-\d\d"
    r"|[IWEF]\d{4} \d\d:|Traceback \(most|  File \"|File \"[^\"]+\", line \d|frame #\d+:|terminate called |  what\(\): "
    r"|\[[IWEF] [\w.]+:\d+\] |[A-Za-z][\w.]*[\d-][\w.-]*: |Exception raised from |[A-Za-z_][\w.]*(?:Error|Exception|Warning|Interrupt|Exit)(?::|$)|NCCL (?:INFO|WARN|version)"
    r"|Last error:|nccl[A-Z]\w*: |(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)[: ]|\d\d:\d\d:\d\d|[\w./-]+\.(?:cc|cu|h|cpp|c|py):\d+ "
    r"|\s*\d{1,5}: |\*{3} |={3,}|-{3,}|\$ |\(\w+ pid=")
# Heads that never start indented in a real log: a stray indent in front of them is the paste's.
_FLUSH_HEADS = _Rx(
    r"[ \t]+(?=Last error:|Traceback \(most recent call last\):|NCCL (?:INFO|WARN) |\[rank\d+\]:|\[default\d+\]:"
    r"|terminate called |[\w.-]+:\d+:\d+ \[\d+\] NCCL |[IWEF]\d{4} \d\d:\d\d:\d\d)")
_TRACE = _Rx(r"NCCL INFO \S+:\d+(?: \(\w+\))? -> \d")
_EXC = _Rx(r"[\w.]*(?:Error|Exception|Interrupt)(?::|$)")
_FRAME = _Rx(r"\s*File \"[^\"]*\", line \d+")
# ncclResult_t names as torch prints them before "Last error:" (the detail after it may start "ncclSocketInit: ").
_NCCL_RESULT = _Rx(r"nccl(?:UnhandledCudaError|SystemError|InternalError|InvalidArgument|InvalidUsage"
                          r"|RemoteError|InProgress|Timeout): ")
# An ISO date-time or a glog "I1201 13:53:17.123" head; compared as text (one paste uses one format).
_TIME = _Rx(r"(?:\d{4}-\d\d-\d\d[ T_]|(?<!\w)[IWEF]\d{4} )\d\d:\d\d:\d\d(?:[.,]\d+)?")
# A second record glued into a line: another rank's "[rankN]:" or another process's NCCL prefix.
_GLUED_RANK = _Rx(r"\[rank\d+\]:")
_TWO_NCCL = _Rx(r" NCCL (?:INFO|WARN) [^\n]* NCCL (?:INFO|WARN) ")
# Launcher prefixes outside the job's own text (sources.py strips them): kubectl time, srun label, torchrun tag.
_K8S_TIME = _Rx(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d) ")
_LAUNCH = _Rx(r"(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d) )?(?: {0,4}\d{1,5}: )?"
                     r"(?:\[[A-Za-z_][\w-]*?\d+(?:\|\d+)?\]:)?(?:\[rank\d+\]: ?)?")
#: Terminal / viewer widths a hard wrap is believed at even when only two lines show it.
_WIDTHS = frozenset((80, 100, 120, 132, 160, 200))
_FLAGS = ("html", "fences", "tags", "quotes", "gutter", "indent", "elisions", "links", "glued", "wrap", "stray")


@dataclass(slots=True)
class Plan:
    """What to undo in one source (each flag was seen in its sample)."""

    html: bool = False
    fences: bool = False
    tags: bool = False
    quotes: bool = False
    gutter: bool = False
    indent: bool = False
    elisions: bool = False
    links: bool = False
    glued: bool = False
    wrap: bool = False
    stray: bool = False
    width: int = 0  # the width a hard wrap cut lines at
    hosts: frozenset[str] = frozenset()  # NCCL host names seen at line starts (where a glued head begins)
    count: int = 0  # lines read so far (sources.iter_source reports it as the source's line count)

    def reasons(self) -> list[str]:
        """The decorations this plan undoes, by name (for tests and the events export)."""
        return [name for name in _FLAGS if getattr(self, name)]

    def normalise(self, items: Iterable[tuple[str, bool]]) -> Iterator[tuple[int, str, str, bool]]:
        """``(lineno, text, raw, truncated)`` for every line of ``items`` (``(line, truncated)`` pairs)."""
        it = iter(items)
        base = 0
        while True:
            window = list(itertools.islice(it, WINDOW_LINES))
            if not window:
                return
            base += len(window)
            self.count = base
            yield from self._window(window, base - len(window))

    def _window(self, window: list[tuple[str, bool]], base: int) -> Iterator[tuple[int, str, str, bool]]:
        rows: list[list] = []  # [lineno, text, raw, truncated, kind]; kind: 0 line, 1 decoration, 2 elision
        for i, (s, truncated) in enumerate(window, base + 1):
            raw = _printable(s)
            rows.append([i, raw, raw, truncated, 0])
        self._undecorate(rows)
        rows = [r for r in rows if r[4] != 2]
        if _reversed(rows):
            rows.reverse()
        if self.wrap:
            rows = _rejoin(rows, self.width)
        for lineno, text, raw, truncated, _ in rows:
            if self.glued and len(text) > 8:
                parts = _unglue(text, self.hosts)
                if parts is not None:
                    for part in parts:
                        yield lineno, part, raw, truncated
                    continue
            yield lineno, text, raw, truncated

    def _undecorate(self, rows: list[list]) -> None:
        for r in rows:
            s = r[1]
            if not s:
                continue
            if self.tags and "<" in s:
                s = _SUMMARY.sub("", s, count=1) if "<summary" in s.lower() else s
                m = _LEAD_TAGS.match(s)
                if m:
                    s = s[m.end():]
                m = _TRAIL_TAGS.search(s)
                if m:
                    s = s[:m.start()]
                if not s.strip() and r[1].strip():
                    r[1], r[4] = "", 1
                    continue
            if self.quotes and s.lstrip(" \t")[:1] == ">":
                m = _QUOTE.match(s)
                if m:
                    s = s[m.end():]
            if self.fences and ("`" in s or "~" in s) and _FENCE.match(s):
                r[1], r[4] = "", 1
                continue
            if self.html and "&" in s:
                s = _unescape(s)
            if self.links and "](" in s:
                s = _AUTOLINK.sub(_unlink, s)
            r[1] = s
        if self.gutter:
            _strip_gutter(rows)
        if self.elisions:
            for r in rows:
                if r[1] and _ELISION.match(r[1]):
                    r[4] = 2
        if self.indent or self.fences or self.quotes or self.tags:
            _dedent([r for r in rows if r[4] != 2])  # an elision inside an indented block does not split it
        for r in rows:
            s = r[1]
            cut = _LAUNCH.match(s).end() if s[:1] not in " \t" else 0
            if s[cut:cut + 1] in (" ", "\t"):
                # a stray indent before a head that never starts indented (also behind a launcher prefix)
                m = _FLUSH_HEADS.match(s, cut)
                if m:
                    r[1] = s[:cut] + s[m.end():]


_FIRST = itemgetter(0)


def _unescape(s: str) -> str:
    import html  # only pastes need it (html.entities is a large table to import)

    return html.unescape(s)


def _head_time(s: str) -> str | None:
    """The time a line starts with (ISO, bracketed ISO, glog), as comparable text; None without one."""
    if s[4:5] == "-" and s[:4].isdigit() or s[:1] == "[" and s[5:6] == "-" \
            or s[:1] in "IWEF" and s[1:5].isdigit() and s[5:6] == " ":
        m = _TIME.search(s, 0, 48)
        return m.group(0).lstrip("IWEF") if m else None
    return None


def _printable(s: str) -> str:
    # The same cleaning sources.clean_text does before it reads prefixes (evidence quotes this text); imported
    # here because sources imports this module.
    from .sources import printable

    return printable(s)


def _unlink(m: re.Match) -> str:
    # GitHub turns "net_ib.cc:101" into "[net_ib.cc:101](http://net_ib.cc:101/)"; keep a link only if its
    # text is not its own target.
    text, target = m.group(1), m.group(2)
    return text if target.rstrip("/") == text.rstrip("/") else m.group(0)


def detect(items: Iterable[tuple[str, bool]]) -> tuple[list[tuple[str, bool]], Iterator[tuple[str, bool]], Plan | None]:
    """Read a source's head (about ``SAMPLE_BYTES``) and decide whether it is a paste.

    Returns:
        (the head's items, the iterator of the rest, a Plan or None for a raw log).
    """
    it = iter(items)
    head: list[tuple[str, bool]] = []
    lines: list[str] = []
    size = 0
    while size < SAMPLE_BYTES:  # whole chunks of lines, taken and measured in C
        chunk = list(itertools.islice(it, 128))
        if not chunk:
            break
        head += chunk
        texts = list(map(_FIRST, chunk))
        lines += texts
        size += len("\n".join(texts)) + 1
    return head, it, plan_for(lines)


def plan_for(lines: list[str]) -> Plan | None:
    """The Plan for a sample of lines, or None when nothing in it looks pasted.

    Runs once per source on its head, so a raw log must be turned down with a few C-level scans: one-character
    finds (memchr) for the rare marks (```` ` ````, ``~``, ``&``, ``…``) and a few substring tests on the first
    ``_CLOSE_BYTES``; per-line work only where one of those found something.
    """
    if not lines:
        return None
    text = "\n".join(lines)
    if text.find("\x1b") >= 0:  # colour codes: judge the text a terminal shows
        lines = [_printable(s) for s in lines]
        text = "\n".join(lines)
    near = text[:_CLOSE_BYTES]
    starts = set(map(_FIRST, filter(None, lines[:128])))  # the first characters of the first lines
    plan = Plan()
    if text.find("`") >= 0 and "```" in text or text.find("~") >= 0 and "~~~" in text:
        plan.fences = any(_FENCE.match(s) for s in lines if "``" in s or "~~" in s)
    if text.find("&") >= 0:
        plan.html = "&lt;" in text or "&gt;" in text or "&quot;" in text and '"' not in text \
            or ("&#39;" in text or "&#x27;" in text) and "'" not in text
    if plan.fences or plan.html or "<" in starts:
        low = text.lower()
        plan.tags = any(t in low for t in _TAG_MARKS)
    nonempty: list[str] | None = None
    if ">" in starts or " " in starts and "\n >" in near:
        nonempty = [s for s in lines if s.strip()]
        quoted = sum(1 for s in nonempty if s.lstrip(" \t")[:1] == ">")
        plan.quotes = quoted == len(nonempty) or quoted >= 2 and (quoted * 5 >= len(nonempty) or ">>" in text)
    first = _first_nonempty(lines)
    if first[:1] in " \t" or _BLOCK_AFTER_BLANK.search(near):
        nonempty = nonempty or [s for s in lines if s.strip()]
        indented = sum(1 for s in nonempty if s[:1] in " \t")
        plan.indent = indented * 10 >= len(nonempty) * 9 or indented >= 2 and _code_blocks_in_prose(lines)
    if first[:1].isdigit() or first[:1] in " \t" and first.lstrip()[:1].isdigit():
        nonempty = nonempty or [s for s in lines if s.strip()]
        plan.gutter = _has_gutter(nonempty)
    # GitHub's auto-links ("[net_ib.cc:101](http://net_ib.cc:101/)") are made in rendered text: quoted or plain
    plan.links = (plan.quotes or plan.indent) and "](http" in near and _AUTOLINK.search(text) is not None
    if text.find("\u2026") >= 0 or "." in starts or "<" in starts or "[" in starts and "\n[..." in near \
            or " " in starts and ("\n ..." in near or "\n [..." in near):
        plan.elisions = any(_ELISION.match(s) for s in lines
                            if len(s) < 48 and ("." in s or "\u2026" in s or "snip" in s))
    if "[" in starts and "]:[rank" in near:
        plan.glued = _rank_rank(near)
    # a stray indent before "Last error:" (GitHub keeps one leading space of a re-flowed traceback)
    plan.stray = " " in starts and "\n Last error:" in near or text.startswith(" Last error:")
    decorated = plan.fences or plan.tags or plan.html or plan.quotes or plan.indent or plan.gutter or plan.links \
        or plan.stray
    if decorated or plan.glued:
        # a paste may also hold another process's NCCL line written into an unfinished one
        plan.hosts = frozenset(m.group(1) for m in map(_LINE_HOST.match, lines) if m)
        plan.glued = plan.glued or any(_unglue(s, plan.hosts) for s in lines if s.count(" NCCL ") > 1)
    # a hard wrap shows on every screenful: the first lines tell (max/len over a whole sample cost as much as
    # the rest of this function)
    plan.width = _wrap_width(_content(lines[:_WRAP_LINES], plan) if decorated else lines[:_WRAP_LINES])
    plan.wrap = plan.width > 0
    if not (decorated or plan.elisions or plan.glued or plan.wrap or _reversed_text(near, lines)):
        return None
    return plan


# An indented line right after a blank one (CRLF kept): where a Markdown indented code block may start.
_BLOCK_AFTER_BLANK = _Rx(r"\n[ \t]*\r?\n(?:    |\t)\S")
#: The multi-character tests of ``plan_for`` read only this much of the sample (they cost a pass each).
_CLOSE_BYTES = 8 * 1024
#: Lines of the sample that the hard-wrap test reads.
_WRAP_LINES = 160
_TAG_MARKS = ("<details", "<summary", "<pre>", "</pre>", "<br>", "<br/>", "</code>", "<blockquote")


def _code_blocks_in_prose(lines: list[str]) -> bool:
    """Markdown indented code blocks between lines of prose: every indented run has a blank line (or the sample's
    edge) on both sides, so no indented line touches an unindented one. A raw log's indented lines (traceback
    frames, continuation lines) always follow their unindented head directly."""
    prev = ""
    for s in lines:
        if s.strip() and prev.strip() and (s[:1] in " \t") != (prev[:1] in " \t"):
            return False
        prev = s
    return True


def _rank_rank(text: str) -> bool:
    """ "[rank1]:[rank0]: ..." somewhere: one rank's prefix with another rank's record glued right behind it."""
    p = text.find("]:[rank")
    for _ in range(64):
        if p < 0:
            return False
        q = text.rfind("[rank", max(0, p - 12), p)
        if q >= 0 and text[q + 5:p].isdigit():
            return True
        p = text.find("]:[rank", p + 1)
    return False


def _first_nonempty(lines: list[str]) -> str:
    for s in lines:
        if s.strip():
            return s
    return ""


def _content(lines: list[str], plan: Plan) -> list[str]:
    rows = [[i, s, s, False, 0] for i, s in enumerate(lines, 1)]
    plan._undecorate(rows)
    return [r[1] for r in rows if r[4] == 0]


def _has_gutter(nonempty: list[str]) -> bool:
    """Most lines behind a number that counts up by one (never backwards, unlike srun's rank labels)."""
    if len(nonempty) < 3 and not all(_GUTTER.match(s) and s.lstrip()[:2] in ("1 ", "1\t", "1|") for s in nonempty[:1]):
        return False  # a short paste: only "1 | ..." / "1<TAB>..." (srun's "1: " is a rank label)
    prev = None
    up = down = hits = 0
    for s in nonempty:
        if not (s[:1].isdigit() or s[:1] in " \t"):
            continue
        m = _GUTTER.match(s)
        if m is None:
            continue
        hits += 1
        n = int(m.group(1))
        if prev is not None:
            if n == prev + 1:
                up += 1
            elif n <= prev:
                down += 1
        prev = n
    return hits * 10 >= len(nonempty) * 6 and up * 10 >= (hits - 1) * 8 and down <= 1


def _strip_gutter(rows: list[list]) -> None:
    for r in rows:
        s = r[1]
        m = _GUTTER.match(s)
        if m:
            r[1] = s[m.end():]


def _dedent(rows: list[list]) -> None:
    """Remove the indentation common to each indented block that stands on its own.

    A block is a run of indented lines with a blank line, a decoration or the window's edge before and after it
    (a Markdown indented code block, or a whole pasted file). A traceback's frames follow their unindented
    ``Traceback`` header, so they are not a block and keep their indentation.
    """
    n = len(rows)
    i = 0
    while i < n:
        if not (rows[i][1][:1] in " \t" and rows[i][1].strip()):
            i += 1
            continue
        start = i
        if start > 0 and rows[start - 1][1].strip():
            while i < n and (rows[i][1][:1] in " \t" or not rows[i][1].strip()):
                i += 1
            continue
        end = i
        while end < n and (rows[end][1][:1] in " \t" or not rows[end][1].strip()) and rows[end][4] != 1:
            end += 1
        if end < n and rows[end][1].strip():
            # the run ends on an unindented line: only its part before the last blank line is a block
            last_blank = max((j for j in range(start, end) if not rows[j][1].strip()), default=None)
            if last_blank is None:
                i = end
                continue
            end = last_blank
        block = [rows[j][1] for j in range(start, end) if rows[j][1].strip()]
        common = _common_ws(block)
        if common:
            k = len(common)
            for j in range(start, end):
                s = rows[j][1]
                rows[j][1] = s[k:] if s.startswith(common) else s.lstrip(" \t")
        i = end


def _common_ws(block: list[str]) -> str:
    if not block:
        return ""
    first = block[0]
    lead = first[:len(first) - len(first.lstrip(" \t"))]
    for s in block[1:]:
        k = 0
        while k < len(lead) and k < len(s) and s[k] == lead[k]:
            k += 1
        lead = lead[:k]
        if not lead:
            return ""
    return lead if (len(lead) >= 2 or "\t" in lead) else ""


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


def _unglue(text: str, hosts: frozenset[str] = frozenset()) -> list[str] | None:
    """Split a line that holds a second record: ``[rank1]:[rank0]: Traceback``, ``...[rank2]: Traceback`` or
    ``...Channel 00host2:9:9 [1] NCCL WARN ...`` (another process's NCCL line written into an unfinished one).

    ``hosts`` are the host names seen at line starts: where a glued head's host runs into the text before it
    ("00host2"), the known name says where it begins.
    """
    cuts: list[int] = []
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
_HEAD_BEFORE = _Rx(r"([\w.-]+):\d+:\d+ \[\d+\](?: [^\s:()]+:\d+(?: \([^()\s]*\))?)?$")
_LINE_HOST = _Rx(r"(?:\[[^\]]{1,40}\] ?)?([A-Za-z][\w.-]*):\d+:\d+ \[\d+\] NCCL ")


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
