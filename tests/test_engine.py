"""Loader validation (path:line), selectors, predicates, the streaming matcher and its memory bounds."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from nccl_analyzer.analysis import Analyzer, hits_for_text, lines_of_text
from nccl_analyzer.engine import check_rules, compile_selector, load_rules, parse_rule
from nccl_analyzer.engine.match import SelectorError, field_value
from nccl_analyzer.engine.run import CAP_PER_KEY
from nccl_analyzer.errors import RuleError
from nccl_analyzer.model import Event

GOOD = textwrap.dedent('''\
    id = "nccl-test-thing"
    taxonomy = "other"
    title = "thing on {host}"
    status = "test"
    role = "root"
    severity = "error"
    confidence = 0.5
    description = "d"
    falsepositives = ["unknown"]
    references = ["https://example.org/x"]

    [match]
    [[match.all]]
    kind = "nccl.warn.*"
    msg = '~thing (?P<what>\\w+)'

    [fix]
    summary = "fix {what}"

    [[example]]
    expect = "match"
    log = \'\'\'
    node1:1:1 [0] init.cc:1 NCCL WARN thing broke
    \'\'\'

    [[example]]
    expect = "no-match"
    log = \'\'\'
    node1:1:1 [0] NCCL INFO thing broke
    \'\'\'
    ''')


def write(tmp_path: Path, text: str, name: str = "nccl-test-thing") -> Path:
    d = tmp_path / "nccl"
    d.mkdir(exist_ok=True)
    p = d / f"{name}.toml"
    p.write_text(text)
    return p


def test_good_rule_loads_and_checks(tmp_path):
    p = write(tmp_path, GOOD)
    rule = parse_rule(p)
    assert rule.id == "nccl-test-thing" and rule.family == "nccl"
    assert check_rules([rule]) == []


@pytest.mark.parametrize("old,new,key", [
    ('taxonomy = "other"', 'taxonomy = "bogus"', "taxonomy"),
    ('confidence = 0.5', 'confidence = 1.5', "confidence"),
    ('role = "root"', 'role = "boss"', "role"),
    ('falsepositives = ["unknown"]', 'falsepositives = []', "falsepositives"),
    ("msg = '~thing (?P<what>\\w+)'", "msg = '~thing (unclosed'", "msg"),
])
def test_schema_errors_name_path_and_line(tmp_path, old, new, key):
    assert old in GOOD
    p = write(tmp_path, GOOD.replace(old, new))
    with pytest.raises(RuleError) as ei:
        parse_rule(p)
    err = ei.value
    assert err.path == str(p)
    want = next(i for i, line in enumerate(GOOD.replace(old, new).splitlines(), 1) if line.startswith(key))
    assert err.line == want, str(err)
    assert str(err).startswith(f"{p}:{want}:")


def test_toml_syntax_error_has_line(tmp_path):
    p = write(tmp_path, GOOD.replace('severity = "error"', 'severity = "error'))
    with pytest.raises(RuleError) as ei:
        parse_rule(p)
    assert ei.value.line == 6


def test_id_must_equal_stem_and_family(tmp_path):
    p = write(tmp_path, GOOD, name="nccl-other-name")
    with pytest.raises(RuleError, match="stem"):
        parse_rule(p)


def test_missing_no_match_example_is_an_error(tmp_path):
    text = GOOD.split("[[example]]\nexpect = \"no-match\"")[0]
    p = write(tmp_path, text)
    with pytest.raises(RuleError, match="no-match"):
        parse_rule(p)


def test_failing_example_is_reported(tmp_path):
    p = write(tmp_path, GOOD.replace("NCCL WARN thing broke", "NCCL WARN other failure"))
    problems = check_rules([parse_rule(p)])
    assert len(problems) == 1 and "expects match" in problems[0].message
    assert problems[0].line > 1


def test_extra_rule_dir_overrides_and_env_list(tmp_path):
    write(tmp_path, GOOD)
    rules = load_rules((str(tmp_path),))
    assert "nccl-test-thing" in {r.id for r in rules}
    rules2 = load_rules((), env_dirs=str(tmp_path))
    assert "nccl-test-thing" in {r.id for r in rules2}
    with pytest.raises(RuleError):
        load_rules((str(tmp_path / "missing"),))


def test_selector_ops():
    ev = Event(kind="nccl.warn.socket", path="p", line=1, text="t", rank=3,
               fields={"msg": "Connect to 10.0.0.2<43215> failed : No route to host", "code": 5})
    memo: dict = {}
    assert compile_selector({"kind": "nccl.warn.*", "msg": "~Connect to (?P<peer>\\S+) failed"}, "s").test(ev, memo) \
        == {"peer": "10.0.0.2<43215>"}
    assert compile_selector({"kind": "nccl.warn.*", "code": ">= 5"}, "s").test(ev, memo) == {}
    assert compile_selector({"kind": "nccl.warn.*", "code": "< 5"}, "s").test(ev, memo) is None
    assert compile_selector({"kind": "x", "rank": [1, 3]}, "s").test(ev, memo) == {}
    assert compile_selector({"kind": "x", "msg": "!~refused"}, "s").test(ev, memo) == {}
    assert compile_selector({"kind": "x", "missing": "!~refused"}, "s").test(ev, memo) == {}
    assert compile_selector({"kind": "x", "missing": "abc"}, "s").test(ev, memo) is None
    sel = compile_selector({"kind": ["nccl.warn.*", "torch.*"]}, "s")
    assert sel.accepts_kind("torch.cuda.oom") and not sel.accepts_kind("nccl.info")
    with pytest.raises(SelectorError):
        compile_selector({"msg": "x"}, "s")


def test_body_virtual_field_joins_lines():
    ev = Event(kind="python.traceback", path="p", line=1, text="Traceback (most recent call last):",
               fields={"lines": ["Traceback (most recent call last):", "KeyError: 'x'"], "message": "'x'",
                       "exc_type": "KeyError", "frames": [{"file": "a.py", "line": 1, "function": "f"}]})
    assert "KeyError: 'x'" in field_value(ev, "body")
    assert field_value(ev, "exc") == "KeyError: 'x'"
    assert field_value(ev, "last_frame_func") == "f"


def test_group_by_rank_and_none(tmp_path):
    rules = [parse_rule(write(tmp_path, GOOD.replace("[[match.all]]", 'group_by = "rank"\n[[match.none]]\nkind = "nccl.info"\nmsg = "~all good"\n\n[[match.all]]')))]
    log = ("a:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 10 - Init START\n"
           "a:2:2 [1] NCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 1 busId 20 - Init START\n"
           "a:1:1 [0] init.cc:1 NCCL WARN thing one\n"
           "a:2:2 [1] init.cc:1 NCCL WARN thing two\n"
           "a:2:2 [1] NCCL INFO all good\n")
    hits = hits_for_text(log, rules)
    assert [h.ranks for h in hits] == [(0,)], "rank 1's WARN is cancelled by its own none-event"


def test_memory_is_bounded_per_rule_and_rank(tmp_path):
    rules = [parse_rule(write(tmp_path, GOOD))]
    a = Analyzer(rules=rules)
    line = "node1:7:7 [0] init.cc:1 NCCL WARN thing broke\n"
    for ln in lines_of_text(line * (CAP_PER_KEY * 4)):
        a.feed(ln)
    kept = sum(len(v) for st in a.matcher._states for sl in st.slots for v in sl.by_key.values())
    assert kept == CAP_PER_KEY
    assert a.matcher._states[0].slots[0].count == CAP_PER_KEY * 4
    d = a.finish()
    assert d.root_cause is not None and d.root_cause.fix.summary == "fix broke"
