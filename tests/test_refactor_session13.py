"""Session 13 review follow-ups (ref13): the shared parsers and data-driven kinds keep every result, and the forms
they now share are read alike (docs/review-session13.md)."""
from __future__ import annotations

import pytest

from nccl_analyzer.analysis import analyze_text
from nccl_analyzer.engine import named


# -- 1. one CollectiveFingerPrint field parser (ProcessGroupWrapper.cpp operator<<) --------------------------------
@pytest.mark.parametrize("text, want", [
    # with tensors: ", " between the fields
    ("SequenceNumber=6, OpType=ALLREDUCE, TensorShape=[4, 32], TensorDtypes=Float, TensorDeviceTypes=TensorOptions("
     "dtype=float (default), device=cuda:0)", {"SequenceNumber": "6", "OpType": "ALLREDUCE", "TensorShape": "[4, 32]",
                                              "TensorDtypes": "Float", "TensorDeviceTypes": "TensorOptions"}),
    # without tensors (barrier, uneven ops): no separator after the number
    ("SequenceNumber=4OpType=BARRIER)", {"SequenceNumber": "4", "OpType": "BARRIER"}),
    # only the first fingerprint of the text
    ("SequenceNumber=1OpType=BARRIER), but Rank 2 is running collective: CollectiveFingerPrint(SequenceNumber=0, "
     "OpType=ALLREDUCE)", {"SequenceNumber": "1", "OpType": "BARRIER"}),
])
def test_fingerprint_fields_both_printed_forms(text, want):
    assert named._fp_fields(text) == want


def _mismatch(rank: int, mine: str, other: int, theirs: str) -> str:
    return (f"[rank{rank}]: RuntimeError: Detected mismatch between collectives on ranks. Rank {rank} is running "
            f"collective: CollectiveFingerPrint({mine}), but Rank {other} is running collective: "
            f"CollectiveFingerPrint({theirs}).")


BARRIER = "SequenceNumber=4OpType=BARRIER"
ALLREDUCE = ("SequenceNumber=4, OpType=ALLREDUCE, TensorShape=[4], TensorDtypes=Float, TensorDeviceTypes="
             "TensorOptions(dtype=float (default), device=cuda:2)")


def test_mismatch_messages_read_a_tensorless_fingerprint_too():
    # ranks 0, 1, 3 run a barrier (printed without a separator), rank 2 an all_reduce: each reports the mismatch
    # it saw; the odd one out is rank 2 only when the barrier fingerprints are read as well
    lines = [_mismatch(r, BARRIER, 2, ALLREDUCE) for r in (0, 1, 3)] + [_mismatch(2, ALLREDUCE, 0, BARRIER)]
    d = analyze_text("\n".join(lines) + "\n")
    assert d.root_cause is not None and d.root_cause.id == "collective_mismatch"
    assert tuple(d.root_cause.ranks) == (2,)


# -- 3. the restart and worker-failure kinds come from the tables the analysis was given -------------------------
_AGENT = "torch/distributed/elastic/agent/server/api.py"
_MP = "torch/distributed/elastic/multiprocessing/api.py"


def _failed(pid: int, local_rank: int) -> str:
    return (f"E1203 09:00:0{local_rank}.100000 4100 {_MP}:1002] failed (exitcode: 1) local_rank: {local_rank} "
            f"(pid: {pid}) of binary: /usr/bin/python3\n")


_RESTARTED = (
    "Traceback (most recent call last):\n"
    '  File "/srv/job/train.py", line 77, in <module>\n'
    "    main()\n"
    "RuntimeError: dataset index is locked by another process; try again\n"
    + _failed(5101, 1)
    + f"I1203 09:00:01.200000 4100 {_AGENT}:942] [default] Worker group FAILED. 1/1 attempts left; will restart "
      "worker group\n"
    + _failed(5170, 0)
    + "Traceback (most recent call last):\n"
    '  File "/usr/bin/torchrun", line 8, in <module>\n'
    "    sys.exit(main())\n"
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
    "============================================================\n"
    "train.py FAILED\n"
    "------------------------------------------------------------\n"
    "Failures:\n"
    "  <NO_OTHER_FAILURES>\n"
    "------------------------------------------------------------\n"
    "Root Cause (first observed failure):\n"
    "[0]:\n"
    "  time      : 2026-12-03_09:00:09\n"
    "  host      : node3\n"
    "  rank      : 0 (local_rank: 0)\n"
    "  exitcode  : 1 (pid: 5170)\n"
    "  error_file: <N/A>\n"
    "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
    "============================================================\n")


def _analyze(log: str, tables=None):
    from nccl_analyzer.analysis import Analyzer, lines_of_text

    a = Analyzer(tables=tables)
    for line in lines_of_text(log, "-"):
        a.feed(line)
    return a.finish()


def test_restart_kinds_are_the_tables_of_the_analysis():
    import dataclasses

    from nccl_analyzer.messages import load_tables

    t = load_tables()
    assert t.worker_failed == frozenset({"torch.elastic.worker_failed"})  # events.toml [restarted] worker
    # the built-in tables: the unranked cause is attempt 0's, whose worker the agent reported next (local rank 1)
    d = _analyze(_RESTARTED, t)
    assert d.root_cause.id == "app_exception" and d.root_cause.ranks == (1,)
    assert d == _analyze(_RESTARTED)  # (the default is the built-in tables)
    # tables whose restart line is another kind: no restart shows, the final report's rank stands
    other = dataclasses.replace(t, restarted=t.restarted[:4] + (frozenset({"x.restart"}),))
    assert _analyze(_RESTARTED, other).root_cause.ranks == (0,)
    # tables with no per-worker failure kind: the job model keeps no agent line, the report's rank stands
    none = dataclasses.replace(t, worker_failed=frozenset())
    assert _analyze(_RESTARTED, none).root_cause.ranks == (0,)


def test_the_agents_read_the_worker_failure_kinds_of_the_tables():
    import dataclasses

    from nccl_analyzer.job import JobBuilder
    from nccl_analyzer.messages import load_tables

    t = load_tables()
    assert JobBuilder(t).agents.failed == t.worker_failed
    other = dataclasses.replace(t, worker_failed=frozenset({"x.worker_failed"}))
    b = JobBuilder(other)
    assert b.agents.failed == {"x.worker_failed"} and "torch.elastic.worker_failed" not in b.agents.kinds


def test_a_process_group_created_settles_a_store_retry_of_no_rank_by_the_tables():
    # events.toml [progress] unranked: init_process_group creating its group is the step after its store connection
    # succeeded, so an unranked connect retry before it (an input of several processes) is no failure
    import dataclasses

    from nccl_analyzer.messages import load_tables

    log = ("[W502 09:20:01.118220412 socket.cpp:755] [c10d] The client socket has failed to connect to "
           "[node0.cluster]:29500 (errno: 111 - Connection refused).\n"
           "[I502 09:20:08.302533395 ProcessGroupNCCL.cpp:988] [PG ID 0 PG GUID 0(default_pg) Rank 1] "
           "ProcessGroupNCCL initialization options: size: 2, global rank: 1, TIMEOUT(ms): 600000, "
           "USE_HIGH_PRIORITY_STREAM: 0, SPLIT_FROM: 0, SPLIT_COLOR: -2, PG Name: 0\n"
           "node1:5120:5177 [0] NCCL INFO ncclCommInitRank comm 0x55aa10c0 rank 1 nranks 2 cudaDev 0 nvmlDev 0 "
           "busId 7000 commId 0x51f0aa0e3c7d1b20 - Init COMPLETE\n"
           "node0:5110:5170 [0] NCCL INFO ncclCommInitRank comm 0x55aa10c0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 "
           "busId 7000 commId 0x51f0aa0e3c7d1b20 - Init COMPLETE\n"
           "step 100 loss 3.112\nstep 200 loss 2.871\ntraining finished\n")
    t = load_tables()
    assert t.progress_unranked == frozenset({"torch.pg.init"})
    d = _analyze(log, t)
    assert d.root_cause is None
    assert [(x.evidence[0].line, x.reason.startswith("a retry that later succeeded")) for x in d.dismissed] == [(1, True)]
    d = _analyze(log, dataclasses.replace(t, progress_unranked=frozenset()))
    assert d.root_cause.id == "rendezvous_unreachable" and d.root_cause.evidence[0].line == 1
