"""Lines around quoted evidence, read back from the input file when it is still there (best effort)."""
from __future__ import annotations

import os
from typing import Iterable

from ..errors import AnalyzerError
from ..model import Diagnosis, Evidence
from ..sources import Source, clean_line, open_binary, read_raw_lines

#: Defaults: lines either side, evidence items given context, longest line kept.
RADIUS = 3
MAX_ITEMS = 24
MAX_LINE = 2000

Excerpts = dict[tuple[str, int], list[tuple[int, str]]]


def diagnosis_evidence(d: Diagnosis) -> list[Evidence]:
    """Evidence in report order: the root cause's, then the findings' (no repeats)."""
    seen: set[tuple[str, int]] = set()
    out: list[Evidence] = []
    groups = [d.root_cause.evidence] if d.root_cause else []
    groups += [f.evidence for f in d.findings]
    for group in groups:
        for e in group:
            if (e.path, e.line) not in seen:
                seen.add((e.path, e.line))
                out.append(e)
    return out


def read_excerpts(evidence: Iterable[Evidence], radius: int = RADIUS, max_items: int = MAX_ITEMS,
                  max_line: int = MAX_LINE) -> Excerpts:
    """``(path, line) -> [(lineno, raw), ...]`` for evidence whose file is readable.

    A file that is gone, unreadable, or no longer holds the quoted text at that line gives no excerpt
    (the report then shows the quoted line alone); this never raises for input problems.
    """
    wanted: dict[str, list[Evidence]] = {}
    for e in list(evidence)[:max_items]:
        if e.line > 0:
            wanted.setdefault(e.path, []).append(e)
    out: Excerpts = {}
    for path, items in wanted.items():
        try:
            if not os.path.isfile(path):
                continue
            out.update(_read_file(path, items, radius, max_line))
        except (OSError, AnalyzerError, ValueError, EOFError):
            continue
    return out


def _read_file(path: str, items: list[Evidence], radius: int, max_line: int) -> Excerpts:
    windows = [(max(e.line - radius, 1), e.line + radius) for e in items]
    last = max(hi for _, hi in windows)
    needed: dict[int, str] = {}
    src = Source(path=path, real=path)
    stream = open_binary(src)
    try:
        lineno = 0
        for raw in read_raw_lines(stream, src):
            lineno += 1
            if lineno > last:
                break
            if any(lo <= lineno <= hi for lo, hi in windows):
                text = clean_line(raw, src, lineno).raw
                needed[lineno] = text if len(text) <= max_line else text[:max_line] + "\u2026"
    finally:
        stream.close()
    out: Excerpts = {}
    for e, (lo, hi) in zip(items, windows):
        at = needed.get(e.line)
        # The file changed since the analysis (or is another file of that name): show no stale context.
        if at is None or not _same(at, e.text, max_line):
            continue
        out[(e.path, e.line)] = [(n, needed[n]) for n in range(lo, hi + 1) if n in needed]
    return out


def _same(line: str, quoted: str, max_line: int) -> bool:
    a, b = line.rstrip(), quoted.rstrip()
    return a == b or a[:max_line] == b[:max_line] or (len(b) > 20 and (a.startswith(b) or b.startswith(a)))
