"""The failure classes of session 13's dev13e (issue 9: never "no failure" on a failing log; docs/classes-session13e.md),
each written from the program's own message format, with healthy twins that must not match."""
from __future__ import annotations

from nccl_analyzer.analysis import analyze_text

A = "INFO:torch.distributed.elastic.agent.server.api:"


def _root(log: str):
    d = analyze_text(log)
    return d, (d.root_cause.id if d.root_cause else None)


# -- 1. a torchelastic restart that the log shows begun, not got past ----------------------------------------------
def _restart(after: str) -> str:
    return (
        "step 1200 loss 0.71\n"
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 1 (pid: 4242) of binary: /usr/bin/python\n"
        "ERROR:torch.distributed.elastic.agent.server.local_elastic_agent:[default] Worker group failed\n"
        f"{A}[default] Worker group FAILED. 2/2 attempts left; will restart worker group\n"
        f"{A}[default] Stopping worker group\n"
        f"{A}[default] Rendezvous'ing worker group\n"
        f"{A}[default] Rendezvous complete for workers. Result:\n"
        "  restart_count=1\n  master_addr=127.0.0.1\n  master_port=29500\n  group_rank=0\n  group_world_size=1\n"
        "  local_ranks=[0, 1]\n  role_ranks=[0, 1]\n  global_ranks=[0, 1]\n  role_world_sizes=[2, 2]\n"
        "  global_world_sizes=[2, 2]\n\n"
        f"{A}[default] Starting worker group\n" + after)


def test_restart_records_alone_are_no_recovery():
    d, rid = _root(_restart(""))
    assert rid == "host_oom"
    assert d.root_cause.ranks == (1,)
    assert 2 in [e.line for e in d.root_cause.evidence]


def test_restart_with_the_next_attempts_output_is_recovered():
    # the restarted workers print their training output: the job got past the failed attempt (no false alarm)
    d, rid = _root(_restart("".join(f"step {i} loss 0.6{i}\n" for i in range(1, 6))))
    assert rid is None
    assert any(g["reason"].startswith("a failed attempt torchelastic restarted") for g in d.to_dict()["dismissed"])


def test_agent_records_before_an_earlier_failure_do_not_hide_later_output():
    # a first restart's records, then a second failure: the cut is the second failure, output after it counts
    log = _restart("step 1 loss 0.6\n") + _restart("".join(f"step {i} loss 0.5{i}\n" for i in range(1, 6)))
    d, rid = _root(log)
    assert rid is None


# -- 2. Lightning's start-up lines show rank 0 and part of the world, then the log stops -------------------------
def _members(ranks, size, old=False):
    head = "initializing ddp" if old else "Initializing distributed"
    return "".join(f"{head}: GLOBAL_RANK: {r}, MEMBER: {r + 1}/{size}\n" for r in ranks)


def test_world_short_at_end_names_the_missing_ranks():
    log = "GPU available: True, used: True\n" + _members([2, 0, 1, 3], 8, old=True)
    d, rid = _root(log)
    assert rid == "rendezvous_unreachable"
    assert d.root_cause.rule == "launcher-world-short-at-end"
    assert d.root_cause.ranks == (4, 5, 6, 7)
    assert sorted(e.line for e in d.root_cause.evidence) == [2, 3, 4, 5]


def test_world_assembled_is_no_hang():
    log = _members([0, 1], 4) + ("-" * 80 + "\ndistributed_backend=nccl\n"
                                 "All distributed processes registered. Starting with 4 processes\n" + "-" * 80 + "\n")
    _, rid = _root(log)
    assert rid is None


def test_other_nodes_log_and_full_world_do_not_match():
    assert _root(_members([4, 5, 6, 7], 8))[1] is None  # node 1's log: rank 0's wait is not shown here
    assert _root(_members([0, 1, 2, 3], 4))[1] is None  # every rank announced
    # NCCL lines after the start-up lines: the store rendezvous completed, NCCL is initialising
    log = _members([0, 1], 4) + "node1:77:77 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
    assert _root(log)[1] is None
