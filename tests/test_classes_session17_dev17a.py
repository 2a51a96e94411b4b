"""Session 17 dev17a's classes (docs/classes-session17-dev17a.md): healthy runs whose scary line the job got past.

1. A torchelastic restart the job got past, shown by the worker the agent reported failed printing again (its
   torchrun ``[defaultN]:`` local rank, a ``[rankN]:`` prefix or a ``[rankN]`` tag): the agent logs
   ``failed (exitcode ...)`` only after it stopped every worker of the attempt, so that rank's later output is a new
   attempt's (restarts.py). Near misses: the restarted attempt fails again (a second failed line and torchrun's
   ChildFailedError report), only other ranks print after the failure (a log cut before torchrun's report), the
   dead worker's last two buffered lines only, an error line after the restart.
2. c10d's TCPStore bind error that c10d itself ignores under TORCHELASTIC_USE_AGENT_STORE (TCPStore.cpp): harmless.
   Near misses: the same line followed by the rank's own crash; a bind failure c10d does not ignore.
3. NCCL's remote-allocator service thread (bootstrap.cc) dropping one request: its "[Rem Allocator] Allocation failed"
   WARN and what the same thread printed just before (a recv's "Connection closed by remote peer", "Cuda failure 'out
   of memory'", return-code traces) are no failure of the process. Near misses: another thread's OOM right before
   it, the main thread failing after it, the same WARNs with no allocator line.
4. A crash report of no known rank (faulthandler) that every rank of the job outlived (each prints on, no error
   follows, torchrun reports no failed worker): a helper subprocess. Near misses: torchrun reports the worker that
   crashed, only one rank prints after it, an error follows, too few lines.

Logs built here from the formats (torch/distributed/elastic/multiprocessing/api.py, c10d TCPStore.cpp), not copied.
"""
from __future__ import annotations

import pytest

from class_helpers import root as _root

_BANNER = ("W1203 13:36:41.189000 9739 torch/distributed/run.py:874] *****************************************\n"
           "W1203 13:36:41.189000 9739 torch/distributed/run.py:874] Setting OMP_NUM_THREADS environment variable for "
           "each process to be 1 in default, to avoid your system being overloaded, please further tune the variable "
           "for optimal performance in your application as needed. \n")
_TERM = ("W1203 13:36:49.249000 9739 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 9828 "
         "closing signal SIGTERM\n")


def _failed(code: int, rank: int, pid: int = 9829, t: str = "13:36:49.502000") -> str:
    return (f"E1203 {t} 9739 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: {code}) "
            f"local_rank: {rank} (pid: {pid}) of binary: /venv/bin/python3\n")


def _steps(fmt: str, ranks: tuple[int, ...], n: int = 5) -> str:
    return "".join(fmt.format(r=r, s=s) for s in range(n) for r in ranks)


_REPORT = ("Traceback (most recent call last):\n"
           '  File "/venv/bin/torchrun", line 8, in <module>\n'
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
           "  time      : 2026-12-03_13:37:01\n"
           "  host      : node-0\n"
           "  rank      : 1 (local_rank: 1)\n"
           "  exitcode  : -9 (pid: 9901)\n"
           "  error_file: <N/A>\n"
           "  traceback : Signal 9 (SIGKILL) received by PID 9901\n"
           "============================================================\n")


# -- class 1: a restart shown by the failed worker printing again -------------------------------------------------
@pytest.mark.parametrize("fmt", ["[default{r}]:[rank{r}] step {s} loss 1.25\n",   # torchrun --tee: local rank prefix
                                 "[rank{r}] step {s} loss 1.25\n",                # the script's own [rankN] tag
                                 "2026-12-03 13:36:55,491 INFO [rank{r}] train: step {s} loss 0.31\n"])
@pytest.mark.parametrize("code", [-9, -6, 1])
def test_failed_worker_printing_again_is_a_recovered_restart(fmt, code):
    log = _BANNER + "[rank0] attempt 0: preparing data\n" + _TERM + _failed(code, 1) + _steps(fmt, (0, 1)) \
        + "training done\n"
    d, rid = _root(log)
    assert rid is None
    assert any("prints" in (x.reason or "") and "local rank 1" in (x.reason or "") for x in d.dismissed)


def test_world_size_one_restart_after_traceback_is_recovered():
    # blind_h200k/k18's shape: the one rank raises, the agent reports it, the restarted rank trains on
    log = ("[rank0]: Traceback (most recent call last):\n"
           '[rank0]:   File "/job/train.py", line 199, in main\n'
           "[rank0]:     with open(path) as f:\n"
           "[rank0]: FileNotFoundError: [Errno 2] No such file or directory: 'shard_index.json'\n"
           + _failed(1, 0, pid=604)
           + _steps("2026-12-02 17:18:15,491 INFO [rank{r}] train: step {s} loss 0.31\n", (0,), 6))
    assert _root(log)[1] is None


def test_restart_that_fails_again_stays_a_failure():
    # the same failure, attempt 1 runs a little and fails again: torchrun's report ends the console
    log = _BANNER + _TERM + _failed(-9, 1) + _steps("[default{r}]:[rank{r}] step {s} loss 1.25\n", (0, 1)) \
        + _TERM + _failed(-9, 1, pid=9901, t="13:37:01.100000") + _REPORT
    assert _root(log)[1] == "host_oom"


def test_only_other_ranks_after_the_failure_stays_a_failure():
    # a log cut before torchrun's report: rank 0 still printing is no sign that rank 1 was started again
    log = _BANNER + _TERM + _failed(-9, 1) + _steps("[default{r}]:[rank{r}] step {s} loss 1.25\n", (0,))
    assert _root(log)[1] == "host_oom"


def test_two_buffered_lines_of_the_dead_worker_stay_a_failure():
    # a console's stdout buffer can flush the dead worker's own last lines after the agent's line: two are no restart
    log = _BANNER + _TERM + _failed(-9, 1) + "[default1]:[rank1] step 4 loss 1.25\n[default1]:[rank1] step 5 loss 1.2\n" \
        + _steps("step {s} | loss 1.{r}\n", (0,), 3)
    assert _root(log)[1] == "host_oom"


def test_error_after_the_restart_stays_a_failure():
    log = _BANNER + _TERM + _failed(-9, 1) + _steps("[rank{r}] step {s} loss 1.25\n", (0, 1)) \
        + "[rank1]:[E1203 13:37:00.100000 9950 ProcessGroupGloo.cpp:144] Gloo connectFullMesh failed with " \
          "[../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error\n"
    assert _root(log)[1] is not None


def test_several_agents_are_no_one_rank():
    # two nodes' agents in one file: node 1's local rank 1 is not node 0's rank 1
    other = _failed(-9, 0, pid=7001).replace(" 9739 ", " 8811 ")
    log = _BANNER + _TERM + other + _failed(-9, 1) + _steps("[rank{r}] step {s} loss 1.25\n", (0, 1))
    assert _root(log)[1] == "host_oom"


# -- class 2: the TCPStore bind error c10d ignores ----------------------------------------------------------------
_IGNORED = ("[rank0]:[E1206 14:24:05.280350548 TCPStore.cpp:277] [c10d] The server socket on 49481 has failed to "
            "bind. TORCHELASTIC_USE_AGENT_STORE is enabled so ignoring the error.\n")


def test_agent_store_bind_error_c10d_ignores_is_harmless():
    log = _IGNORED + _steps("2026-12-06 14:24:05,452 [INFO] rank={r} trainer: step {s} loss 0.04\n", (0, 1), 2)
    d, rid = _root(log)
    assert rid is None
    assert any("TORCHELASTIC_USE_AGENT_STORE" in (x.reason or "") for x in d.dismissed)


def test_agent_store_bind_error_then_the_rank_crashes_is_that_crash():
    log = _IGNORED + ("[rank0]: Traceback (most recent call last):\n"
                      '[rank0]:   File "/job/train.py", line 40, in <module>\n'
                      "[rank0]:     main()\n"
                      "[rank0]: KeyError: 'lr'\n") + _failed(1, 0, pid=733)
    assert _root(log)[1] == "app_exception"


def test_bind_error_c10d_does_not_ignore_stays_an_error():
    # the same C10D_ERROR form without the agent-store clause is no line c10d says it ignores
    log = "[rank0]:[E1206 14:24:05.280350548 TCPStore.cpp:277] [c10d] The server socket on 49481 has failed to bind.\n"
    assert _root(log)[1] is not None


# -- class 3: the remote-allocator service thread dropping one request ---------------------------------------------
_H = "node-a:39:298 [0]"  # the service thread
_DROPPED = (f"{_H} include/socket.h:423 NCCL WARN Net : Connection closed by remote peer 10.0.0.4<52638>\n"
            f"{_H} NCCL INFO include/socket.h:445 -> 2\n"
            f"{_H} NCCL INFO bootstrap.cc:229 -> 2\n"
            f"{_H} bootstrap.cc:279 NCCL WARN [Rem Allocator] Allocation failed (segment 0, fd 130)\n"
            f"{_H} include/alloc.h:48 NCCL WARN Cuda failure 'out of memory'\n"
            f"{_H} NCCL INFO bootstrap.cc:231 -> 1\n"
            f"{_H} bootstrap.cc:279 NCCL WARN [Rem Allocator] Allocation failed (segment 0, fd 130)\n")
_TRAIN = "Train Epoch: 1 [0/246000 (0%)]\tLoss: 0.036680\nTrain Epoch: 1 [2700/246000 (18%)]\tLoss: 0.000002\n"


def test_rem_allocator_dropped_request_is_no_failure():
    d, rid = _root(_DROPPED + _TRAIN)
    assert rid is None
    assert any("service thread dropped" in (x.reason or "") for x in d.dismissed)


def test_other_threads_oom_before_the_allocator_line_stays_cuda_oom():
    log = ("node-a:39:39 [0] include/alloc.h:48 NCCL WARN Cuda failure 'out of memory'\n"
           "node-a:39:39 [0] NCCL INFO transport/p2p.cc:209 -> 1\n") + _DROPPED
    assert _root(log)[1] == "cuda_oom"


def test_main_thread_failing_after_the_allocator_line_is_that_failure():
    log = _DROPPED + ("node-a:39:39 [0] include/alloc.h:48 NCCL WARN Cuda failure 'out of memory'\n"
                      "node-a:39:39 [0] NCCL INFO transport/p2p.cc:209 -> 1\n"
                      "node-a:39:39 [0] NCCL INFO init.cc:1120 -> 1\n")
    assert _root(log)[1] == "cuda_oom"


def test_same_warns_without_the_allocator_line_stay_a_failure():
    log = "".join(s + "\n" for s in _DROPPED.splitlines() if "Rem Allocator" not in s) + _TRAIN
    assert _root(log)[1] == "cuda_oom"


# -- class 4: a crashed helper every rank outlived ----------------------------------------------------------------
_SEGV = ("Fatal Python error: Segmentation fault\n\n"
         "Current thread 0x00007f88767ffb80 (most recent call first):\n"
         '  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at\n'
         '  File "<string>", line 1 in <module>\n')
_HELPER = "2026-12-06 14:20:38,958 WARNING [metrics] rank 0: native metrics helper exited with -11 (SIGSEGV)\n"


def test_crash_every_rank_outlived_is_no_failure():
    log = _BANNER + _SEGV + _HELPER + _steps("[rank{r}] step {s} loss 1.25\n", (0, 1), 5) + "training done\n"
    d, rid = _root(log)
    assert rid is None
    assert any("none of the ranks" in (x.reason or "") for x in d.dismissed)


def test_crash_torchrun_reports_stays_a_failure():
    log = _BANNER + _SEGV + _steps("[rank{r}] step {s} loss 1.25\n", (0, 1), 5) + _TERM + _failed(-11, 1)
    assert _root(log)[1] is not None


def test_crash_only_one_rank_prints_after_stays_a_failure():
    # the other rank may be the one that crashed (a log cut before torchrun's report)
    log = _BANNER + _SEGV + _steps("[rank{r}] step {s} loss 1.25\n", (0,), 5)
    assert _root(log)[1] is not None


def test_crash_then_an_error_stays_a_failure():
    log = _BANNER + _SEGV + _steps("[rank{r}] step {s} loss 1.25\n", (0, 1), 5) + (
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/job/train.py", line 73, in train\n'
        "[rank1]:     loss.backward()\n"
        "[rank1]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
        "[127.0.0.1]:26309\n")
    assert _root(log)[1] is not None


def test_crash_too_few_lines_after_stays_a_failure():
    log = _BANNER + _SEGV + _steps("[rank{r}] step {s} loss 1.25\n", (0, 1), 2)
    assert _root(log)[1] is not None
