"""A rule regex's whole literal requirement (engine/prefilter.formula, flat, meets; FieldTest.strict) and the
dispatch's gates on fields other than ``body`` (engine/match.field_need, KindDispatch): neither ever turns away a
value its regex matches (real rule files, the lines and events of real fixture logs), and both turn away what the
single literal set let through."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from nccl_analyzer.analysis import Analyzer
from nccl_analyzer.engine.match import FieldTest, KindDispatch, compile_selector, field_need
from nccl_analyzer.engine.prefilter import flat, formula, meets, required
from nccl_analyzer.engine.run import Matcher
from nccl_analyzer.engine.loader import load_rules
from nccl_analyzer.model import Event

from test_dispatch import CASES, _events

ROOT = Path(__file__).resolve().parent.parent


def _re_tests() -> list[FieldTest]:
    out: list[FieldTest] = []

    def walk(t: FieldTest) -> None:
        if t.op == "any":
            for alt in t.alts:
                walk(alt)
        elif t.op == "re":
            out.append(t)

    for st in Analyzer().matcher._states:
        for sl in st.slots:
            for t in sl.selector.tests:
                walk(t)
    return out


@pytest.mark.parametrize("pattern,want", [
    (r"abc\d+defg", ("&", ("defg", "abc"))),  # a sequence needs each run (the longest tested first)
    (r"abc|defg", ("|", ("abc", "defg"))),
    (r"Process\w+::\w+: (?:invalid|unsupported)\b", ("&", ("Process", ("|", ("invalid", "unsupported"))))),
    (r"(?:abc)?defg", "defg"),  # an optional part needs nothing
    (r"x(?:abc)+", "abc"),  # a repeat of at least one needs its part
    (r"abc(?i:defg)", "abc"),  # a case-insensitive group needs nothing this test sees
    (r"(?i)abcdef", None),
    (r"ab|abcdef", None),  # an alternative needing nothing testable: the alternation needs nothing
    (r"[Ii]nvalid rank \d+", "nvalid rank "),
])
def test_formula(pattern: str, want: object) -> None:
    assert formula(re.compile(pattern)) == want


def test_flat_weakens_only_deeper_nesting() -> None:
    f = ("|", ("abc", ("&", ("defg", ("|", ("xyz", ("&", ("uvw", "rst"))))))))
    assert flat(f) == ((("abc",),), (("defg",), ("xyz", "uvw")))
    assert meets(flat(f), "..abc..") and meets(flat(f), "defg uvw") and not meets(flat(f), "defg rst")
    assert not meets(flat(f), "xyz uvw")  # the second alternative needs defg too


def test_a_rule_regex_never_fails_its_strict_test_where_it_matches() -> None:
    # every line of the fixture logs (held-out sets excluded) and every event value a rule regex matches
    tests = [t for t in _re_tests() if t.strict is not None]
    assert len(tests) > 40  # most alternations with a multi-literal alternative get one
    lines: list[str] = []
    for p in sorted((ROOT / "fixtures").rglob("*")):
        rel = p.relative_to(ROOT / "fixtures").parts
        if p.is_file() and not rel[0].startswith("blind") and p.suffix in (".txt", ".log"):
            lines.extend(p.read_text(encoding="utf-8", errors="replace").splitlines())
    assert len(lines) > 10000
    checked = 0
    for t in tests:
        for line in lines:
            if t.value.search(line):
                checked += 1
                assert meets(t.strict, line), (t.value.pattern, line)
    assert checked > 500
    from nccl_analyzer.engine.virtual import field_value
    checked = 0
    for case in CASES[::12]:
        for ev in _events(case):
            for t in tests:
                v = field_value(ev, t.field, {})
                if v is not None and t.value.search(str(v)):
                    checked += 1
                    assert meets(t.strict, str(v)), (case.name, t.value.pattern, ev.kind, ev.line)
    assert checked > 50


def test_the_strict_test_turns_away_a_watchdog_record_that_names_processgroup() -> None:
    # torch-invalid-argument's alternation: one alternative's best literal is "ProcessGroup", which every watchdog
    # record holds; that alternative also needs ": invalid" / "unsupported" / "requires", which this one lacks
    sel = next(sl.selector for st in Analyzer().matcher._states if st.rule.id == "torch-invalid-argument"
               for sl in st.slots if any(t.op == "re" and t.field == "body" for t in sl.selector.tests))
    t = next(t for t in sel.tests if t.op == "re" and t.field == "body")
    body = ("[rank3]:[E1202 10:00:00.000000000 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000)")
    assert any(x in body for x in t.need)  # the single literal set lets it through
    assert not meets(t.strict, body) and t.value.search(body) is None
    bad = "ProcessGroupNCCL::allreduce: invalid tensor type"
    assert meets(t.strict, bad) and t.value.search(bad)
    ev = Event("torch.log", "x.log", 1, bad)
    assert sel.test(ev, {}) is not None


def test_required_is_unchanged_by_the_formula() -> None:
    # (the dispatch merges ``required``'s literals: the formula only adds a test after them)
    rx = re.compile(r"Process\w+::\w+: (?:invalid|unsupported)\b|Rank \d+ is out of range")
    assert required(rx) == ("Process", " is out of range")


def test_the_dispatch_gates_nccl_info_slots_by_their_msg() -> None:
    m = Matcher(load_rules(()))
    slots = m._slots_for("nccl.info")
    d = KindDispatch(slots)
    assert "msg" in d._fields and len(slots) >= 3
    rule_of = {id(sl): m._slot_state[id(sl)].rule.id for sl in slots}
    info = Event("nccl.info", "x.log", 1, "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
                 fields={"msg": "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC"})
    none_ib = Event("nccl.info", "x.log", 2, "h:1:2 [0] NCCL INFO NET/IB : No device found.",
                    fields={"msg": "NET/IB : No device found."})
    got = d.select(info, {})
    assert len(got) < len(slots)
    assert "nccl-ib-requested-no-device" in {rule_of[id(sl)] for sl in d.select(none_ib, {})}
    assert "nccl-ib-requested-no-device" not in {rule_of[id(sl)] for sl in got if field_need(sl.selector)}
    # every slot whose full test accepts the event is offered, and a missing msg gates its slots off
    for ev in (info, none_ib):
        offered = {id(sl) for sl in d.select(ev, {})}
        assert all(id(sl) in offered for sl in slots if sl.selector.test(ev, {}) is not None)
    bare = Event("nccl.info", "x.log", 3, "h:1:2 [0] NCCL INFO x")
    assert all(field_need(sl.selector) is None or field_need(sl.selector)[0] != "msg" for sl in d.select(bare, {}))
    # the same literals present: the same list, made once
    again = Event("nccl.info", "x.log", 4, "", fields={"msg": "Channel 07/0 : 3[3] -> 4[4] via P2P/IPC"})
    assert d.select(again, {}) is got


def test_field_need_prefers_body_then_any_field() -> None:
    assert field_need(compile_selector({"kind": "x", "msg": "~Watchdog caught", "body": "~timeout after"}, "s")) \
        == ("body", frozenset({"timeout after"}))
    assert field_need(compile_selector({"kind": "x", "msg": "~Watchdog caught"}, "s")) == \
        ("msg", frozenset({"Watchdog caught"}))
    assert field_need(compile_selector({"kind": "x", "msg": "!~Watchdog caught"}, "s")) is None
