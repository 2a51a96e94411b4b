"""Session 12c's classes (docs/classes-session12c.md), from what CPython / torch / NCCL do, not one log: a lost
connection or an NCCL argument-check failure the program caught and went on from (no failure; the NCCL WARN that
torch's exception quotes as its "Last error" goes with it), and the program's own faulthandler hang watchdog that
ended a rank (watchdog_timeout, that rank)."""
from __future__ import annotations

from pathlib import Path

import pytest

from nccl_analyzer.analysis import analyze, analyze_text

ROOT = Path(__file__).resolve().parent.parent
_MP = "torch/distributed/elastic/multiprocessing/api.py"


def _root(log: str):
    d = analyze_text(log)
    return d, (d.root_cause.id if d.root_cause else None)


def _failed(local_rank: int, code: int = 1) -> str:
    return (f"E1203 09:00:0{local_rank}.100000 4100 {_MP}:1002] failed (exitcode: {code}) local_rank: {local_rank} "
            f"(pid: 51{local_rank}0) of binary: /usr/bin/python3\n")


_STEPS = "".join(f"[rank0] step {i} loss 1.{i}3\n" for i in range(6))


# -- a connection error a background thread / the program's handler printed, then the job went on ----------------
def _thread_tb(exc: str, name: str = "prefetch", py: str = "/usr/lib/python3.11") -> str:
    return (f"Exception in thread {name}:\nTraceback (most recent call last):\n"
            f'  File "{py}/threading.py", line 1045, in _bootstrap_inner\n    self.run()\n'
            f'  File "{py}/threading.py", line 982, in run\n    self._target(*self._args, **self._kwargs)\n'
            f'  File "/srv/job/loader.py", line 88, in prefetch\n    chunk = sock.recv(1 << 20)\n{exc}\n')


@pytest.mark.parametrize("exc", [
    "ConnectionResetError: [Errno 104] Connection reset by peer",
    "BrokenPipeError: [Errno 32] Broken pipe",
    "ConnectionResetError: [Errno 104] Connection reset by peer: s3://bucket/shard-0007",
])
def test_thread_connection_error_then_training_goes_on_is_no_failure(exc):
    d, rid = _root(_thread_tb(exc) + "[rank0] prefetch failed; loading synchronously\n" + _STEPS + "training done\n")
    assert rid is None, d.root_cause


def test_handled_connection_error_printed_by_logging_exception_is_no_failure():
    log = ("2026-12-03 10:00:00,100 ERROR upload failed, will retry next epoch\nTraceback (most recent call last):\n"
           '  File "/srv/job/ckpt.py", line 40, in upload\n    conn.sendall(blob)\n'
           "ConnectionResetError: [Errno 104] Connection reset by peer\n" + _STEPS)
    assert _root(log)[1] is None


def test_thread_connection_error_then_the_rank_dies_stays_a_failure():
    """The twin: the same thread's error, then the worker fails (torchrun's report): not caught."""
    log = _thread_tb("ConnectionResetError: [Errno 104] Connection reset by peer") + _STEPS + _failed(0)
    assert _root(log)[1] is not None


def test_connection_error_with_no_output_after_it_stays_a_failure():
    log = "[rank0] step 0 loss 1.2\n" + _thread_tb("ConnectionResetError: [Errno 104] Connection reset by peer")
    assert _root(log)[1] == "peer_exit"


def test_uncaught_gloo_connection_error_then_other_output_stays_a_failure():
    """Top-level (the script's <module>) gloo error: it ended that process; other ranks' lines after it change nothing."""
    log = ("[rank1]: Traceback (most recent call last):\n"
           '[rank1]:   File "/srv/job/train.py", line 12, in <module>\n[rank1]:     dist.all_reduce(t)\n'
           "[rank1]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
           "[10.0.0.3]:41522\n" + _STEPS)
    assert _root(log)[1] is not None


# -- an NCCL argument-check failure the program caught ---------------------------------------------------------------
def _bad_root_log(root: int = 3, coll: str = "Broadcast", after: str = _STEPS, nranks: int = 2) -> str:
    warn = f"{coll} : invalid root {root} (root should be in the 0..{nranks - 1} range)"
    return (_STEPS[:60]
            + f"[2026-12-03 10:51:26] vm:904:904 [0] misc/argcheck.cc:48 NCCL WARN {warn}\n"
            "vm:904:904 [0] NCCL INFO enqueue.cc:2643 -> 4\nvm:904:904 [0] NCCL INFO enqueue.cc:2655 -> 4\n"
            "2026-12-03 10:51:26,606 ERROR [rank0] train: broadcast failed, falling back to rank 0:\n"
            "Traceback (most recent call last):\n"
            '  File "/srv/job/train.py", line 231, in main\n    dist.broadcast(t, src=root)\n'
            '  File "/opt/venv/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py", line 2968, in '
            "broadcast\n    work = group.broadcast([tensor], opts)\n"
            "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
            "ProcessGroupNCCL.cpp:3780, invalid argument (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9\n"
            f"ncclInvalidArgument: Invalid value for an argument.\nLast error:\n{warn}\n\n" + after)


@pytest.mark.parametrize("coll,root", [("Broadcast", 3), ("Reduce", 5)])
def test_caught_invalid_root_then_training_goes_on_is_no_failure(coll, root):
    d, rid = _root(_bad_root_log(root, coll))
    assert rid is None, d.root_cause


def test_invalid_root_that_ends_the_job_stays_invalid_usage():
    """The twin: the exception is not caught (torchrun reports the worker failed): the argument check is the cause."""
    d, rid = _root(_bad_root_log(after="") + _failed(0))
    assert rid == "invalid_usage"


def test_invalid_root_warn_alone_stays_invalid_usage():
    log = (_STEPS + "vm:904:904 [0] misc/argcheck.cc:48 NCCL WARN Broadcast : invalid root 3 (root should be in the "
           "0..1 range)\nvm:904:904 [0] NCCL INFO enqueue.cc:2643 -> 4\n")
    assert _root(log)[1] == "invalid_usage"


# -- faulthandler's hang watchdog (dump_traceback_later(..., exit=True)) -------------------------------------------
def _dump(timeout: str = "0:00:08", prefix: str = "") -> str:
    return "".join(f"{prefix}{x}\n" for x in (
        f"Timeout ({timeout})!", "Thread 0x00007fefe6a65b80 (most recent call first):",
        '  File "/srv/job/train.py", line 228 in read_manifest', '  File "/srv/job/train.py", line 335 in <module>'))


@pytest.mark.parametrize("timeout,prefix,rank", [("0:00:08", "", 2), ("0:10:00.250000", "[default1]:", 1),
                                                  ("1:30:00", "[rank3]:", 3)])
def test_faulthandler_timeout_exit_is_a_hang_of_that_rank(timeout, prefix, rank):
    d, rid = _root(_STEPS + _dump(timeout, prefix) + _failed(rank))
    assert rid == "watchdog_timeout"
    assert list(d.root_cause.ranks) == [rank]


def test_faulthandler_repeating_dump_of_a_live_process_is_no_failure():
    d, rid = _root(_dump("0:00:02") + _STEPS + _dump("0:00:02") + "training done\n")
    assert rid is None, d.root_cause


def test_faulthandler_dump_then_a_python_exception_is_the_exception():
    tb = ("Traceback (most recent call last):\n  File \"/srv/job/train.py\", line 12, in <module>\n    load()\n"
          "ValueError: bad shard index 7\n")
    assert _root(_dump() + tb + _failed(0))[1] == "app_exception"


def test_faulthandler_dump_then_a_sigkill_is_not_the_watchdog():
    """exit=True ends the process with status 1; a worker killed by SIGKILL (-9) was not ended by the watchdog."""
    assert _root(_STEPS + _dump() + _failed(0, -9))[1] != "watchdog_timeout"


# -- a send / recv order deadlock: every rank in recv (or every rank in send) ----------------------------------------
_C10D = "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def _p2p_tb(rank: int, op: str = "recv", ms: int = 8000) -> str:
    line = {"recv": ("2573", "pg.recv([tensor], group_src_rank, tag).wait()", "78"),
            "send": ("2510", "default_pg.send([tensor], group_dst_rank, tag).wait()", "129")}[op]
    return (f"[rank{rank}]: Traceback (most recent call last):\n"
            f'[rank{rank}]:   File "/srv/job/train.py", line 40, in exchange\n[rank{rank}]:     dist.{op}(buf, {rank ^ 1})\n'
            f'[rank{rank}]:   File "{_C10D}", line {line[0]}, in {op}\n[rank{rank}]:     {line[1]}\n'
            f"[rank{rank}]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:{line[2]}] "
            f"Timed out waiting {ms}ms for {op} operation to complete\n")


@pytest.mark.parametrize("op,world", [("recv", 2), ("recv", 4), ("send", 2)])
def test_every_rank_in_the_same_p2p_direction_is_a_deadlock(op, world):
    d, rid = _root("".join(_p2p_tb(r, op, 8000 + 100 * r) for r in range(world)))
    assert rid == "collective_mismatch"
    assert d.root_cause.rule == "torch-p2p-order-deadlock"
    assert list(d.root_cause.ranks) == list(range(world))


def test_two_ranks_in_recv_while_a_third_is_reported_is_not_the_deadlock():
    """Ranks 0 and 1 wait in recv, rank 2 (torchrun's report names it) never reached a p2p call: a rank that lags."""
    entry = "  time      : 2026-12-03_09:00:09\n  host      : node3\n  rank      : {r} (local_rank: {r})\n" \
            "  exitcode  : {c} (pid: 517{r})\n  error_file: <N/A>\n  traceback : -\n"
    report = ("Traceback (most recent call last):\n  File \"/usr/bin/torchrun\", line 8, in <module>\n    sys.exit(main())\n"
              "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n" + "=" * 60 + "\ntrain.py FAILED\n"
              + "-" * 60 + "\nFailures:\n[1]:\n" + entry.format(r=2, c=-15) + "-" * 60
              + "\nRoot Cause (first observed failure):\n[0]:\n" + entry.format(r=0, c=1) + "=" * 60 + "\n")
    log = _p2p_tb(0) + _p2p_tb(1) + report
    d, rid = _root(log)
    assert d.root_cause is None or d.root_cause.rule != "torch-p2p-order-deadlock"


def test_recv_and_send_is_the_different_collectives_rule():
    d, rid = _root(_p2p_tb(0, "recv") + _p2p_tb(1, "send"))
    assert rid == "collective_mismatch" and d.root_cause.rule == "torch-ranks-different-collectives"


def test_both_in_recv_after_a_lost_peer_is_not_the_deadlock():
    """Not timeouts: both ranks lost the connection in recv (a peer went away), so no deadlock is shown."""
    log = "".join(_p2p_tb(r).replace("Timed out waiting 8000ms for recv operation to complete",
                                     "Connection closed by peer [10.0.0.3]:41522") for r in range(2))
    d, rid = _root(log)
    assert d.root_cause is None or d.root_cause.rule != "torch-p2p-order-deadlock"


# -- new_group's store wait timed out: the ranks' group creation differs -------------------------------------------
def _group_tb(outer: str, rank: int = 1, err: str = "wait timeout after 15000ms, keys: /default_pg/0//3//cpu//0/0") -> str:
    p = f"[rank{rank}]:"
    frames = {"new_group": [("new_group", "5442"), ("_new_group_with_tag", "5533")],
              "new_subgroups": [("new_subgroups", "5700"), ("new_group", "5442"), ("_new_group_with_tag", "5533")],
              "init_process_group": [("init_process_group", "1838")]}[outer]
    body = "".join(f'{p}   File "{_C10D}", line {ln}, in {fn}\n{p}     x()\n' for fn, ln in frames)
    return (f"{p} Traceback (most recent call last):\n{p}   File \"/srv/job/train.py\", line 203, in main\n"
            f"{p}     dist.{outer}()\n" + body
            + f'{p}   File "{_C10D}", line 2087, in _new_process_group_helper\n{p}     backend_class = ProcessGroupGloo(\n'
            f"{p} torch.distributed.DistStoreError: {err}\n")


@pytest.mark.parametrize("outer,err", [
    ("new_group", "wait timeout after 15000ms, keys: /default_pg/0//3//cpu//0/0"),
    ("new_subgroups", "wait timeout after 1800000ms, keys: /default_pg/0//5//cuda//0/1"),
    ("new_group", "Socket Timeout"),
])
def test_new_group_store_timeout_is_a_group_creation_mismatch(outer, err):
    d, rid = _root(_STEPS + _group_tb(outer, 1, err) + _failed(1))
    assert rid == "collective_mismatch"
    assert list(d.root_cause.ranks) == [1]


def test_init_process_group_store_timeout_stays_the_rendezvous():
    """The twin: the same wait inside init_process_group is the job's rendezvous (rule torch-store-wait-timeout)."""
    d, rid = _root(_group_tb("init_process_group", 1, "wait timeout after 30000ms, keys: /default_pg/0//cpu//0/1"))
    assert rid == "rendezvous_unreachable"


# -- an async collective's work.wait(timeout) ran out: "Operation timed out!" (c10d Work::wait) ----------------------
def _wait_tb(rank: int = 0, exc: str = "RuntimeError", prefix: bool = True) -> str:
    p = f"[rank{rank}]: " if prefix else ""
    return (f"{p}Traceback (most recent call last):\n{p}  File \"/srv/job/train.py\", line 191, in main\n"
            f"{p}    work.wait(timeout=datetime.timedelta(seconds=5))\n{p}{exc}: Operation timed out!\n")


def _report(entries: list[tuple[int, int]]) -> str:
    entry = "  time      : 2026-12-03_09:00:09\n  host      : node3\n  rank      : {r} (local_rank: {r})\n" \
            "  exitcode  : {c} (pid: 517{r})\n  error_file: <N/A>\n  traceback : -\n"
    (r0, c0), rest = entries[0], entries[1:]
    fails = "".join(f"[{i + 1}]:\n" + entry.format(r=r, c=c) for i, (r, c) in enumerate(rest)) or "  <NO_OTHER_FAILURES>\n"
    return ("Traceback (most recent call last):\n  File \"/usr/bin/torchrun\", line 8, in <module>\n    sys.exit(main())\n"
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n" + "=" * 60 + "\ntrain.py FAILED\n"
            + "-" * 60 + "\nFailures:\n" + fails + "-" * 60
            + "\nRoot Cause (first observed failure):\n[0]:\n" + entry.format(r=r0, c=c0) + "=" * 60 + "\n")


@pytest.mark.parametrize("exc", ["RuntimeError", "torch.distributed.DistBackendError"])
def test_work_wait_timeout_blames_the_rank_that_did_not_time_out(exc):
    log = _STEPS + "[rank1]: writing eval predictions to disk\n" + _wait_tb(0, exc) + _report([(0, 1), (1, -15)])
    d, rid = _root(log)
    assert rid == "watchdog_timeout" and d.root_cause.rule == "torch-work-wait-timeout"
    assert list(d.root_cause.ranks) == [1]


def test_operation_timed_out_with_more_text_is_not_the_work_wait():
    log = _wait_tb(0, prefix=False).replace("Operation timed out!", "Operation timed out! (fetching https://x/shard)")
    d, rid = _root(log + _failed(0))
    assert d.root_cause is None or d.root_cause.rule != "torch-work-wait-timeout"


# -- the fixtures ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case,want,ranks", [
    ("blind_cpu5/15_healthy_thread_exception", None, None),
    ("blind_h200l/l16_healthy_caught_bad_root", None, None),
    ("blind_cpu5/10_faulthandler_watchdog_rank2", "watchdog_timeout", [2]),
    ("blind_cpu4/05_p2p_both_recv_first", "collective_mismatch", None),
    ("blind_h200l/l12_extra_new_group_rank1", "collective_mismatch", [1]),
])
def test_fixture(case, want, ranks):
    d = analyze([str(ROOT / "fixtures" / case / "log.txt")])
    assert (d.root_cause.id if d.root_cause else None) == want, d.root_cause
    if ranks is not None:
        assert list(d.root_cause.ranks) == ranks
