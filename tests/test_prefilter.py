"""The rule engine's literal prefilter (engine/prefilter.py) never rejects a value its regex would match."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from nccl_analyzer.analysis import Analyzer
from nccl_analyzer.engine.prefilter import required

ROOT = Path(__file__).resolve().parent.parent


def _tests():
    out = []

    def walk(t):
        if t.op == "any":
            for alt in t.alts:
                walk(alt)
        elif t.op in ("re", "nre"):
            out.append(t)

    for st in Analyzer().matcher._states:
        for sl in st.slots:
            for t in sl.selector.tests:
                walk(t)
    return out


def _lines() -> list[str]:
    lines = []
    for p in sorted((ROOT / "fixtures").rglob("*")):
        rel = p.relative_to(ROOT / "fixtures").parts
        if p.is_file() and not rel[0].startswith("blind") and p.suffix in (".txt", ".log"):
            lines.extend(p.read_text(encoding="utf-8", errors="replace").splitlines())
    return lines


def test_most_rule_regexes_get_a_prefilter():
    tests = _tests()
    assert len(tests) > 50
    assert sum(t.need is not None for t in tests) > len(tests) * 0.7


def test_prefilter_never_rejects_a_fixture_line_its_regex_matches():
    lines = _lines()
    assert len(lines) > 10000
    checked = 0
    for t in _tests():
        if t.need is None:
            continue
        for line in lines:
            if t.value.search(line):
                checked += 1
                assert any(x in line for x in t.need), (t.value.pattern, t.need, line)
    assert checked > 1000  # the rules' regexes do match fixture lines: the check is not vacuous


@pytest.mark.parametrize("pattern,need", [
    (r"abc(?:def|xyz)+ghi", ("abc",)),
    (r"Watchdog caught (?P<x>\w+)|Heartbeat monitor", ("Watchdog caught ", "Heartbeat monitor")),
    (r"[T]imeout after \d+", ("Timeout after ",)),
    (r"a\d+bcd", ("bcd",)),
    (r"(?:foo|ba)r", None),  # "ba" + "r": no literal of 3 characters every match holds
    (r"(?i)timeout", None),  # case-insensitive: no prefilter
    (r"x(?=abcd)", None),  # a lookahead's text is not part of the match
    (r"(?:abc)?def", ("def",)),  # an optional part is not required
    (r"ab(?i:cdef)", None),
])
def test_required(pattern, need):
    assert required(re.compile(pattern)) == need


def test_required_literals_are_in_every_match():
    rx = re.compile(r"(ncclRemoteError|Connection closed by peer \[|Read error \[[^\]]*\]:\d+)")
    need = required(rx)
    assert need is not None
    for s in ("x ncclRemoteError y", "Connection closed by peer [10.0.0.1]", "Read error [a]:12"):
        assert rx.search(s) and any(x in s for x in need)
