"""The matcher's memory bounds that must not change any result: a job-grouped rule whose ``none`` selector matched
drops what it held and takes no more events; matches that captured nothing share one tuple per event."""
from __future__ import annotations

from nccl_analyzer.analysis import Analyzer, lines_of_text
from nccl_analyzer.engine import parse_rule
from nccl_analyzer.engine.run import _NO_CAPS

from test_engine import GOOD, write

# the WARN is a match; a later "all good" INFO line of any process cancels the rule for the whole job
JOB_NONE = GOOD.replace("[[match.all]]", '[[match.none]]\nkind = "nccl.info"\nmsg = "~all good"\n\n[[match.all]]')
WARNS = "".join(f"a:{p}:{p} [0] init.cc:1 NCCL WARN thing broke\n" for p in range(1, 30))


def _feed(rules, text):
    a = Analyzer(rules=rules)
    for ln in lines_of_text(text):
        a.feed(ln)
    return a


def _kept(a):
    return sum(len(v) for st in a.matcher._states for sl in st.slots for v in sl.by_key.values())


def test_a_cancelled_job_rule_keeps_one_event_and_never_hits(tmp_path):
    rules = [parse_rule(write(tmp_path, JOB_NONE))]
    a = _feed(rules, WARNS)
    assert _kept(a) == 29 and [h.rule.id for h in a.hits()] == ["nccl-test-thing"]
    a = _feed(rules, WARNS + "a:1:1 [0] NCCL INFO all good\n" + WARNS)
    assert _kept(a) == 1, "the none match only: the WARNs before it are dropped, the ones after not taken"
    assert a.hits() == []
    assert a.finish().root_cause.rule != "nccl-test-thing"


def test_a_rank_grouped_rule_is_not_cancelled_for_other_ranks(tmp_path):
    rules = [parse_rule(write(tmp_path, JOB_NONE.replace("[match]", '[match]\ngroup_by = "rank"')))]
    log = ("a:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 10 - Init START\n"
           "a:2:2 [1] NCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 1 busId 20 - Init START\n"
           "a:1:1 [0] init.cc:1 NCCL WARN thing one\n"
           "a:2:2 [1] NCCL INFO all good\n"
           "a:2:2 [1] init.cc:1 NCCL WARN thing two\n")
    a = _feed(rules, log)
    assert [h.ranks for h in a.hits()] == [(0,)]
    assert not a.matcher._states[0].dead


def test_matches_without_captures_share_one_item(tmp_path):
    two = GOOD.replace("msg = '~thing (?P<what>\\w+)'", "msg = '~thing'") + \
        '\n[[match.any]]\nkind = "nccl.warn.*"\n'
    two = two.replace("[fix]", '[[match.any]]\nkind = "nccl.warn.*"\nmsg = "~broke"\n\n[fix]')
    a = _feed([parse_rule(write(tmp_path, two))], "a:1:1 [0] init.cc:1 NCCL WARN thing broke\n")
    items = [it for st in a.matcher._states for sl in st.slots for v in sl.by_key.values() for it in v]
    assert len(items) >= 2 and all(it is items[0] for it in items) and items[0][2] is _NO_CAPS
