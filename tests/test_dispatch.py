"""The rule engine's per-kind dispatch (engine/match.KindDispatch): an event is tested only against the slots whose
kind globs accept its kind, and of those only against the ones one of whose body literals its body holds (their
``~regex`` on ``body`` cannot match otherwise). Derived from the loaded rules: every slot a full test accepts, the
dispatch offers (real rule files, the events of real fixture logs)."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from nccl_analyzer.analysis import Analyzer, hits_for_text
from nccl_analyzer.engine.loader import load_rules
from nccl_analyzer.engine.match import KindDispatch, body_need, compile_selector
from nccl_analyzer.engine.run import Matcher
from nccl_analyzer.sources import expand_inputs

ROOT = Path(__file__).resolve().parent.parent
CASES = sorted(p for p in (ROOT / "fixtures" / "cases").iterdir() if (p / "label.json").exists())


class _Recorder(Analyzer):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list = []

    def add_event(self, ev) -> None:  # type: ignore[no-untyped-def]
        self.seen.append(ev)
        super().add_event(ev)


def _events(case: Path) -> list:
    a = _Recorder()
    srcs = expand_inputs([str(case)])
    a.add_sources(srcs)
    for s in srcs:
        a.run_source(s)
    a.finish()
    return a.seen


@pytest.fixture(scope="module")
def matcher() -> Matcher:
    return Matcher(load_rules(()))


def test_body_need_is_the_body_regex_prefilter() -> None:
    sel = compile_selector({"kind": "torch.*", "body": "~Watchdog caught (?P<op>\\w+) timeout"}, "s")
    assert body_need(sel) == frozenset({"Watchdog caught "})
    assert body_need(compile_selector({"kind": "torch.*", "msg": "~Watchdog caught"}, "s")) is None
    assert body_need(compile_selector({"kind": "torch.*", "body": "!~Watchdog caught"}, "s")) is None
    assert body_need(compile_selector({"kind": "torch.*"}, "s")) is None


@pytest.mark.parametrize("chunk", range(3))
def test_the_dispatch_offers_every_slot_that_accepts_an_event(matcher: Matcher, chunk: int) -> None:
    tested = offered_less = 0
    dispatch: dict[str, KindDispatch] = {}  # one per kind across the cases, as in a run (its body shapes remembered)
    for case in CASES[chunk::12]:  # (a quarter of the cases, in three parts)
        for ev in _events(case):
            slots = matcher._slots_for(ev.kind)
            d = dispatch.get(ev.kind) or dispatch.setdefault(ev.kind, KindDispatch(slots))
            memo: dict = {}
            offered = {id(sl) for sl in d.select(ev, memo)}
            for sl in slots:
                ok = sl.selector.test(ev, {}) is not None
                tested += ok
                assert not ok or id(sl) in offered, (case.name, ev.kind, ev.line, sl.selector)
            offered_less += len(offered) < len(slots)
    assert tested > 0 and offered_less > 0  # slots accepted events, and the dispatch left some out: both ran


def test_a_body_shape_remembers_only_digit_free_literals(matcher: Matcher) -> None:
    # two texts of one shape (they differ in digits): a literal with a digit is looked for in each
    from nccl_analyzer.model import Event
    d = KindDispatch(matcher._slots_for("torch.elastic.signal"))
    assert any(any(c.isdigit() for c in x) for x in d._lits)
    rule = "elastic-child-sigkill"
    ids = []
    for sig in ("9", "15", "9"):
        ev = Event("torch.elastic.signal", "x.log", 1, f"Signal {sig} (SIGKILL) received by PID 4121")
        ids.append({matcher._slot_state[id(sl)].rule.id for sl in d.select(ev, {})})
    assert len(d._shapes) == 1
    assert rule in ids[0] and rule not in ids[1] and ids[2] == ids[0]


def test_a_new_rule_for_any_text_is_offered_its_events(tmp_path: Path) -> None:
    # a rule reading a text no built-in rule reads: the dispatch is derived from the loaded rules, so it gets it
    src = (ROOT / "rules" / "torch" / "torch-store-wait-timeout.toml").read_text()
    head = src[:src.index("[[example]]")]
    head = head.replace('id = "torch-store-wait-timeout"', 'id = "test-quux-frobnicated"')
    head = head.replace("'~wait timeout after (?P<timeout_ms>\\d+)ms, keys: (?P<store_keys>[^\\n]+)'",
                        "'~Quux frobnicated (?P<store_keys>\\w+) after (?P<timeout_ms>\\d+)'")
    assert "Quux" in head
    head += textwrap.dedent('''
        [[example]]
        expect = "match"
        name = "the text"
        log = "RuntimeError: Quux frobnicated widget after 30"

        [[example]]
        expect = "no-match"
        name = "another text"
        log = "RuntimeError: Qux frobnicated widget after 30"
    ''')
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test-quux-frobnicated.toml").write_text(head)
    rules = [r for r in load_rules((str(tmp_path),)) if r.id == "test-quux-frobnicated"]
    text = ("[rank0]:[E1201 10:00:00.000000000 ProcessGroupNCCL.cpp:1000] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
            "Process group watchdog thread terminated with exception: Quux frobnicated widget after 30\n")
    hits = hits_for_text(text, rules)
    assert [h.rule.id for h in hits] == ["test-quux-frobnicated"]
    assert not hits_for_text(text.replace("Quux", "Qux"), rules)
