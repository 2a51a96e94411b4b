"""Culprit classes found on the fixtures/cpu2 development set of real gloo jobs (issue 9 §4, docs/culprit-session4.md):
the rank that caused the failure, not the ranks that reported it.

- TORCH_DISTRIBUTED_DEBUG=DETAIL: every rank reports "Detected mismatch between collectives"; the odd one out is the
  rank whose CollectiveFingerPrint differs from the majority's.
- torch.multiprocessing.spawn names the failed child by its process index (the rank a spawned program is given):
  "-- Process N terminated with the following error:" + the child's traceback, or "process N terminated with
  signal SIGSEGV".
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobs.jobkit import env, free_port, needs_torch, run_job, torchrun  # noqa: E402

from nccl_analyzer.analysis import analyze  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "fixtures" / "cpu2" / "cpu2_worker.py"

_FP = ("CollectiveFingerPrint(SequenceNumber=6, OpType={op}, TensorShape=[{n}], TensorDtypes=Float, "
       "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cpu, layout=Strided (default)))")


def _mismatch(me: int, op: int | str, other: int, op2: str, n: int = 4, n2: int = 4) -> str:
    return (f"[rank{me}]: RuntimeError: Detected mismatch between collectives on ranks. Rank {me} is running "
            f"collective: {_FP.format(op=op, n=n)}, but Rank {other} is running collective: "
            f"{_FP.format(op=op2, n=n2)}.Collectives differ in the following aspects: \t Op type: {op}vs {op2}\n")


def _diag(tmp_path: Path, text: str):
    log = tmp_path / "log.txt"
    log.write_text(text)
    return analyze([str(log)])


def test_detail_mismatch_names_the_odd_one_out(tmp_path):
    text = (_mismatch(0, "ALLREDUCE", 2, "BROADCAST") + _mismatch(1, "ALLREDUCE", 2, "BROADCAST")
            + _mismatch(3, "ALLREDUCE", 2, "BROADCAST") + _mismatch(2, "BROADCAST", 0, "ALLREDUCE"))
    d = _diag(tmp_path, text)
    assert d.root_cause.id == "collective_mismatch"
    assert d.root_cause.ranks == (2,)
    assert "rank 2 ran BROADCAST where ranks 0-1, 3 ran ALLREDUCE" in d.root_cause.explanation


def test_detail_mismatch_by_shape_names_the_odd_one_out(tmp_path):
    text = (_mismatch(0, "ALLREDUCE", 1, "ALLREDUCE", 16, 64) + _mismatch(2, "ALLREDUCE", 1, "ALLREDUCE", 16, 64)
            + _mismatch(1, "ALLREDUCE", 0, "ALLREDUCE", 64, 16))
    d = _diag(tmp_path, text)
    assert d.root_cause.ranks == (1,)
    assert "other tensors" in d.root_cause.explanation


def test_detail_mismatch_without_a_majority_names_both_sides(tmp_path):
    d = _diag(tmp_path, _mismatch(0, "ALLREDUCE", 1, "BROADCAST") + _mismatch(1, "BROADCAST", 0, "ALLREDUCE"))
    assert d.root_cause.id == "collective_mismatch"
    assert d.root_cause.ranks == (0, 1)


_SPAWN_PARENT = '''Traceback (most recent call last):
  File "/srv/train.py", line 101, in <module>
    mp.spawn(worker, args=(4,), nprocs=4)
  File "/usr/lib/python3/site-packages/torch/multiprocessing/spawn.py", line 340, in spawn
    return start_processes(fn, args, nprocs, join, daemon, start_method="spawn")
  File "/usr/lib/python3/site-packages/torch/multiprocessing/spawn.py", line 296, in start_processes
    while not context.join():
  File "/usr/lib/python3/site-packages/torch/multiprocessing/spawn.py", line 211, in join
    raise {exc}
'''


def test_spawn_raised_child_is_its_process_index(tmp_path):
    text = (_SPAWN_PARENT.format(exc="ProcessRaisedException(msg, error_index, failed_process.pid)")
            + "torch.multiprocessing.spawn.ProcessRaisedException: \n\n-- Process 3 terminated with the following error:\n"
            + 'Traceback (most recent call last):\n'
            + '  File "/usr/lib/python3/site-packages/torch/multiprocessing/spawn.py", line 87, in _wrap\n    fn(i, *args)\n'
            + '  File "/srv/train.py", line 40, in worker\n    batch = shards[key]\n'
            + "KeyError: 'shard-005'\n")
    d = _diag(tmp_path, text)
    assert d.root_cause.id == "app_exception"
    assert d.root_cause.ranks == (3,)


def test_spawn_raised_without_the_process_line_names_no_rank(tmp_path):
    # the child's traceback alone (no "-- Process N" line above it) says nothing about which process it was
    text = ('Traceback (most recent call last):\n'
            '  File "/usr/lib/python3/site-packages/torch/multiprocessing/spawn.py", line 87, in _wrap\n    fn(i, *args)\n'
            '  File "/srv/train.py", line 40, in worker\n    batch = shards[key]\n'
            "KeyError: 'shard-005'\n")
    d = _diag(tmp_path, text)
    assert d.root_cause.id == "app_exception"
    assert d.root_cause.ranks == ()


@pytest.mark.parametrize("signal,want", [("SIGSEGV", "other"), ("SIGBUS", "other"), ("SIGKILL", "host_oom")])
def test_spawn_child_signal_names_its_process_index(tmp_path, signal, want):
    text = (_SPAWN_PARENT.format(exc="ProcessExitedException(")
            + f"torch.multiprocessing.spawn.ProcessExitedException: process 2 terminated with signal {signal}\n")
    d = _diag(tmp_path, text)
    assert d.root_cause.id == want
    assert d.root_cause.ranks == (2,)
    assert signal in d.root_cause.title


@needs_torch
@pytest.mark.slow
@pytest.mark.parametrize("mode,want", [("valueerror", "app_exception"), ("segv", "other")])
def test_live_spawn_child_failure_names_its_rank(tmp_path, mode, want):
    out = run_job([sys.executable, str(WORKER), mode], merged=False, cwd=tmp_path,
                  env=env(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", SPAWN="3", CULPRIT="2",
                          SPAWN_PORT=str(free_port()), PG_TIMEOUT="20"))
    assert out.returncode != 0, out.stdout + out.stderr
    d = _diag(tmp_path, out.stdout + out.stderr)
    assert d.root_cause is not None and d.root_cause.id == want, d.root_cause
    assert d.root_cause.ranks == (2,), d.root_cause.title


@needs_torch
@pytest.mark.slow
def test_live_detail_mismatch_names_the_odd_one_out(tmp_path):
    out = run_job(torchrun("mismatch", 3, free_port(), script=WORKER), merged=False, cwd=tmp_path,
                  env=env(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", TORCH_DISTRIBUTED_DEBUG="DETAIL", MANUAL="1",
                          CULPRIT="1", PG_TIMEOUT="20"))
    assert out.returncode != 0, out.stdout + out.stderr
    d = _diag(tmp_path, out.stdout + out.stderr)
    assert d.root_cause.id == "collective_mismatch", d.root_cause
    assert d.root_cause.ranks == (1,), d.root_cause.title


def _report(*entries: tuple[int, int, int]) -> str:
    """A torchrun ChildFailedError report: (rank, local_rank, exitcode) per listed worker, the first the root."""
    def one(i, r, lr, code):
        sig = "  (SIGTERM)" if code == -15 else ""
        tb = f"Signal 15 (SIGTERM) received by PID {900 + r}" if code == -15 else \
            "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
        return (f"[{i}]:\n  time      : 2026-12-01_16:52:32\n  host      : localhost\n  rank      : {r} (local_rank: {lr})\n"
                f"  exitcode  : {code} (pid: {900 + r}){sig}\n  error_file: <N/A>\n  traceback : {tb}\n")
    root, rest = entries[0], entries[1:]
    return ("Traceback (most recent call last):\n  File \"/usr/bin/torchrun\", line 8, in <module>\n    sys.exit(main())\n"
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n" + "=" * 60 + "\ntrain.py FAILED\n"
            + "-" * 60 + "\nFailures:\n" + "".join(one(i + 1, *e) for i, e in enumerate(rest))
            + "-" * 60 + "\nRoot Cause (first observed failure):\n" + one(0, *root) + "=" * 60 + "\n")


def _closed(rank: int, port: int) -> str:
    return (f"[rank{rank}]: Traceback (most recent call last):\n"
            f"[rank{rank}]:   File \"/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py\", line 3075, in all_reduce\n"
            f"[rank{rank}]:     work.wait()\n"
            f"[rank{rank}]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:547] Connection closed by peer [127.0.0.1]:{port}\n")


def test_worker_left_out_of_torchruns_report_exited_0_and_is_the_lost_peer(tmp_path):
    # rank 1 returned (exit 0) while ranks 0 and 2 were in all_reduce: torchrun lists every worker that did not
    # succeed, so local_rank 1 missing between 0 and 2 is the one that left (fixtures/blind_h200c c28)
    d = _diag(tmp_path, _closed(0, 55727) + _closed(2, 8942) + _report((0, 0, 1), (2, 2, 1)))
    assert d.root_cause.id == "peer_exit"
    assert d.root_cause.ranks == (1,)


def test_report_of_another_node_names_no_rank_of_this_one(tmp_path):
    # node 1's agent (global ranks 2, 3 = local 0, 1): ranks 0 and 1 run under the other agent, not left out here
    d = _diag(tmp_path, _closed(2, 5001) + _closed(3, 5002) + _report((2, 0, 1), (3, 1, 1)))
    assert d.root_cause is not None
    assert 0 not in d.root_cause.ranks and 1 not in d.root_cause.ranks


def test_highest_local_rank_left_out_is_not_certain(tmp_path):
    # the report cannot show that a local rank above the highest listed one existed
    d = _diag(tmp_path, _closed(0, 5001) + _closed(1, 5002) + _report((0, 0, 1), (1, 1, 1)))
    assert d.root_cause is not None
    assert 2 not in d.root_cause.ranks


def test_report_that_leaves_out_the_workers_it_terminated_names_no_unlisted_rank(tmp_path):
    # older torchelastic listed only the workers that failed before it tore the group down: the SIGTERMed worker
    # (pid 901, local_rank 1) is not in the report, so a missing local rank says nothing
    sigterm = ("W1201 16:52:32.100000 854 torch/distributed/elastic/multiprocessing/api.py:1028] "
               "Sending process 901 closing signal SIGTERM\n")
    d = _diag(tmp_path, _closed(0, 55727) + _closed(2, 8942) + sigterm + _report((0, 0, 1), (2, 2, 1)))
    assert d.root_cause is not None
    assert 1 not in d.root_cause.ranks


def test_unlisted_workers_ignore_a_local_rank_no_host_runs():
    """A mangled local rank (a paste's or a corrupt log's huge number) is no gap to fill below it: before the cap
    the loop walked every local rank under it (a fuzz input with local_rank 10**22 never finished)."""
    from types import SimpleNamespace

    from nccl_analyzer.engine.match import MAX_LOCAL_WORKERS, _unlisted_workers

    huge = MAX_LOCAL_WORKERS * 1000
    b = SimpleNamespace(exits={huge: {"local_rank": huge, "pid": 7, "path": "log.txt"}}, sigterm_pids=set())
    assert _unlisted_workers(b, set()) == []
    # a real agent's gap is still found: local ranks 0 and 2 listed, 1 missing
    b = SimpleNamespace(exits={0: {"local_rank": 0, "pid": 5, "path": "log.txt"},
                               2: {"local_rank": 2, "pid": 6, "path": "log.txt"}}, sigterm_pids=set())
    assert _unlisted_workers(b, set()) == [1]
