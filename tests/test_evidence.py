"""Evidence is quoted verbatim: for every labeled case, each quoted line is the input's line at that number."""
from __future__ import annotations

import functools
from pathlib import Path

import pytest

from nccl_analyzer.analysis import analyze
from nccl_analyzer.engine.loader import load_rules
from nccl_analyzer.flight.reader import read_dump, sniff
from nccl_analyzer.sources import clean_text, Source

ROOT = Path(__file__).resolve().parent.parent
CASES = sorted(p.parent for p in (ROOT / "fixtures").rglob("label.json"))


@functools.lru_cache(maxsize=1)
def _rules():
    return load_rules(())


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_evidence_lines_are_verbatim_and_correctly_numbered(case):
    d = analyze([str(case)], rules=_rules())
    assert d.stats["parser_errors"] == 0, "a parser raised on a real line (see TorchParser.feed)"
    quoted = [e for f in d.findings for e in f.evidence]
    if d.root_cause:
        quoted += list(d.root_cause.evidence)
    cache: dict[str, list[str]] = {}
    for ev in quoted:
        if sniff(ev.path):
            # a Flight Recorder dump has no lines: line = the entry number, text = "rank N: " + that entry's summary
            entry = read_dump(ev.path).entries[ev.line - 1]
            assert ev.text.split(": ", 1)[1].startswith(entry.summary()), f"{ev.path}:{ev.line} quotes {ev.text!r}"
            continue
        if ev.path not in cache:
            raw = Path(ev.path).read_bytes().decode("utf-8", "replace").split("\n")
            cache[ev.path] = [clean_text(s, Source(ev.path, None), i + 1).raw for i, s in enumerate(raw)]
        lines = cache[ev.path]
        assert 1 <= ev.line <= len(lines), (ev.path, ev.line)
        assert lines[ev.line - 1] == ev.text, f"{ev.path}:{ev.line} quotes {ev.text!r}"
