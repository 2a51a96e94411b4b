"""``Plan``: what to undo in one source, applied window by window: decorations (tags, quotes, fences, HTML
escapes, auto-links, gutters, indentation, stray indents) undone, elisions dropped, order, wraps and glued
records fixed."""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Iterable, Iterator

from .boundary import _rejoin, _rejoin_words, _unglue
from .order import _reversed
from .rx import (_AUTOLINK, _BRACKET_GUTTER, _ELISION, _FENCE, _FLUSH_HEADS, _GUTTER, _HANG_NOTE, _LAUNCH, _LEAD_TAGS, _LINE_LINK, _PROSE_QUOTE, _QUOTE,
                 _SUMMARY, _TRAIL_TAGS)


# A percent-encoded space, quote mark or separator (what a URL-encoded line of text must have: it has no literal space).
_PERCENT = re.compile(r"%(?:20|22|27|3[AaDd]|2[CcFf]|5[BbDd])")

#: A paste is normalised in windows of this many lines (reversal and wrap width are per window).
WINDOW_LINES = 200_000


_FLAGS = ("html", "fences", "tags", "quotes", "gutter", "indent", "elisions", "links", "glued", "wrap", "stray",
          "words", "prose", "urlenc", "notes", "jsonl", "nodes")


@dataclass(slots=True)
class Plan:
    """What to undo in one source (each flag was seen in its sample)."""

    html: bool = False
    fences: bool = False
    tags: bool = False
    quotes: bool = False
    gutter: bool = False
    bracketed: bool = False  # the gutter is "[N] " (a log viewer's), not "N | "
    indent: bool = False
    elisions: bool = False
    links: bool = False
    glued: bool = False
    wrap: bool = False
    stray: bool = False
    words: bool = False  # an exception's message word-wrapped (at ``width``): its pieces are joined with a space
    prose: bool = False  # sentences that quote a whole log line ("I get `[E... file.cpp:N] ...` when ...")
    notes: bool = False  # a reader's "*hangs*" / "<nothing, forever>" line: blanked, it is no program output
    urlenc: bool = False  # lines percent-encoded as in a URL ("undefined%20symbol:%20ncclCommRegister")
    jsonl: bool = False  # JSON-lines records: a multi-line string field (a logged traceback) is unpacked to lines
    width: int = 0  # the width a hard wrap cut lines at (or the word wrap broke them at)
    hosts: frozenset[str] = frozenset()  # NCCL host names seen at line starts (where a glued head begins)
    nodes: frozenset[str] = frozenset()  # pdsh's "<node>: " labels in front of every line (detect._pdsh_nodes)
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
        elif self.words:
            rows = _rejoin_words(rows, self.width)
        for lineno, text, raw, truncated, _ in rows:
            if self.urlenc and "\n" in text:
                for part in text.split("\n"):
                    yield lineno, part, raw, truncated
                continue
            if self.jsonl and text[:2] == '{"' and "\\n" in text:
                parts = _json_record(text)
                if parts is not None:
                    for part in parts:
                        yield lineno, part, raw, truncated
                    continue
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
            if self.urlenc and "%" in s:
                s = _unquote(s)
            if self.html and "&" in s:
                s = _unescape(s)
            if self.links and "](" in s:
                m = _LINE_LINK.match(s) if s[:1] == "[" else None
                s = m.group(1) if m else _AUTOLINK.sub(_unlink, s)
            if self.nodes and s[:1].isalpha():
                i = s.find(": ", 1, 66)
                if i > 0 and s[:i] in self.nodes:
                    s = s[i + 2:]  # pdsh's node label (the node's name is not a rank; NCCL's head names the host)
            if self.prose and s[:1].isalpha():
                m = _PROSE_QUOTE.match(s)
                if m:
                    s = m.group(2)  # the log line the sentence quotes (evidence keeps the sentence)
            r[1] = s
        if self.gutter:
            _strip_gutter(rows, _BRACKET_GUTTER if self.bracketed else _GUTTER)
        if self.elisions:
            for r in rows:
                if r[1] and _ELISION.match(r[1]):
                    r[4] = 2
        if self.notes:
            for r in rows:
                if r[1] and len(r[1]) < 48 and _HANG_NOTE.match(r[1]):
                    r[1], r[4] = "", 1
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


def _json_record(s: str) -> list[str] | None:
    """A JSON-lines record with a multi-line string field, as the lines a plain formatter would print: the record
    without those fields, then each field's lines (logging.Formatter.format appends the formatted exception after
    the message). None when the line is no JSON object or has no such field."""
    import json  # only JSON-lines sources need it

    try:
        rec = json.loads(s)
    except ValueError:
        return None
    if not isinstance(rec, dict):
        return None
    multi = [k for k, v in rec.items() if isinstance(v, str) and "\n" in v]
    if not multi:
        return None
    out = [json.dumps({k: v for k, v in rec.items() if k not in multi}, ensure_ascii=False)]
    for k in multi:
        out += [_printable(part) for part in rec[k].rstrip("\n").split("\n")]
    return out


def _unescape(s: str) -> str:
    import html  # only pastes need it (html.entities is a large table to import)

    return html.unescape(s)


def _unquote(s: str) -> str:
    """A line copied out of a URL (a search link, a tracker's query string): every space is "%20", so a line with a
    literal space was not encoded. Its encoded line breaks ("%0A") become lines of their own (same line number)."""
    if " " in s.strip() or _PERCENT.search(s) is None:
        return s
    from urllib.parse import unquote  # only pastes need it

    out = unquote(s.replace("%0D", "").replace("%0d", ""))
    return "\n".join(map(_printable, out.split("\n")))  # ``_window`` yields each line the break ("%0A") ends


def _printable(s: str) -> str:
    # The same cleaning sources.clean_text does before it reads prefixes (evidence quotes this text); imported
    # here because sources imports this module.
    from ..sources import printable

    return printable(s)


def _unlink(m: re.Match) -> str:
    # GitHub turns "net_ib.cc:101" into "[net_ib.cc:101](http://net_ib.cc:101/)"; keep a link only if its
    # text is not its own target.
    text, target = m.group(1), m.group(2)
    return text if target.rstrip("/") == text.rstrip("/") else m.group(0)


def _strip_gutter(rows: list[list], gutter=_GUTTER) -> None:
    for r in rows:
        s = r[1]
        m = gutter.match(s)
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
