"""The failure classes behind the misses of the session-5 fresh sets (fixtures/blind5, fixtures/blind_h200f;
docs/classes-session5b.md), each built from what the program that prints the line does, not from one pasted log:
NCCL falling back from a NET plugin whose init failed, ProcessGroupNCCL's own argument checks, the frames of a
c10::Error thrown by the watchdog's checkTimeout, MPICH/Hydra's termination banner, the dynamic loader's
"undefined symbol" for an NCCL function, the interpreter failing to start the script, a CUDACHECK-style
"Failed: Cuda error" text, the legacy launcher's "died with <Signals.SIG...>", a Ray worker that died, and NCCL's
sockets bound to the loopback interface while a peer on another host is dialled."""
from __future__ import annotations

import pytest

from nccl_analyzer.analysis import analyze_text


def _root(log: str):
    d = analyze_text(log)
    return d, (d.root_cause.id if d.root_cause else None)


# -- NCCL 2.28+: a NET plugin's init failed and NCCL went on with the next one (plugin/net.cc) ------------------
_NET_FALLBACK = """\
gpu7:2210:2210 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so
gpu7:2210:2210 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.
gpu7:2210:2210 [0] NCCL INFO transport/net_ib/init.cc:291 -> 3
gpu7:2210:2210 [0] NCCL INFO Failed to initialize NET plugin IB
gpu7:2210:2210 [0] NCCL INFO NET/Socket : Using [0]eth0:10.1.2.7<0>
gpu7:2210:2210 [0] NCCL INFO Initialized NET plugin Socket
gpu7:2210:2210 [0] NCCL INFO Using network Socket
gpu7:2210:2210 [0] NCCL INFO ncclCommInitRankConfig comm 0x5581c0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x77 - Init START
gpu7:2210:2210 [0] NCCL INFO Channel 00/02 : 0 1
gpu7:2210:2210 [0] NCCL INFO ncclCommInitRankConfig comm 0x5581c0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x77 - Init COMPLETE
"""


def test_a_net_plugin_init_that_nccl_fell_back_from_is_no_failure():
    d, root = _root(_NET_FALLBACK)
    assert root is None
    reasons = [x.reason for x in d.dismissed]
    assert any("init.cc:291 -> 3" in e.text for x in d.dismissed for e in x.evidence)
    assert any(r.startswith("harmless") and "next NET plugin" in r for r in reasons)


def test_a_trace_before_a_real_warn_still_counts():
    # the same trace with no "Failed to initialize NET plugin" after it is still an error line
    log = _NET_FALLBACK.replace("gpu7:2210:2210 [0] NCCL INFO Failed to initialize NET plugin IB\n", "")
    log = log.replace(" - Init COMPLETE", " - Init START")
    _, root = _root(log)
    assert root == "ib_rdma"


# -- ProcessGroupNCCL's argument checks (ValueError / TypeError from C10_THROW_ERROR) ---------------------------
@pytest.mark.parametrize("msg", [
    "ValueError: Cannot use ReduceOp.BOR with NCCL",
    "ValueError: input tensor must be the same size as output size times world size",
    "ValueError: output tensor size must be equal to world_size times input tensor size",
    "TypeError: output tensor must have the same type as input tensor",
])
def test_processgroupnccl_argument_checks_are_invalid_usage(msg):
    log = ("[rank1]: Traceback (most recent call last):\n"
           '[rank1]:   File "/srv/job/step.py", line 52, in <module>\n'
           "[rank1]:     dist.all_reduce(mask, op=dist.ReduceOp.BOR)\n"
           '[rank1]:   File "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py", line 2808, in all_reduce\n'
           "[rank1]:     work = group.allreduce([tensor], opts)\n"
           f"[rank1]: {msg}\n"
           "E1130 08:00:01.000000 77 torch/distributed/elastic/multiprocessing/api.py:882] failed (exitcode: 1) "
           "local_rank: 1 (pid: 91) of binary: /usr/bin/python3\n")
    d, root = _root(log)
    assert root == "invalid_usage"
    assert d.root_cause.ranks == (1,)


# -- a c10::Error's frames when the paste starts below its message -----------------------------------------------
def test_frames_of_an_error_thrown_by_checktimeout_are_a_timeout():
    log = ("frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f10 in /opt/torch/lib/libc10.so)\n"
           "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
           "std::ratio<1l, 1000l> > >) + 0x1d2 (0x7f11 in /opt/torch/lib/libtorch_cuda.so)\n"
           "frame #2: c10d::ProcessGroupNCCL::Watchdog::runLoop() + 0x8d0 (0x7f12 in /opt/torch/lib/libtorch_cuda.so)\n"
           "\n"
           "terminate called after throwing an instance of 'c10::DistBackendError'\n")
    _, root = _root(log)
    assert root == "watchdog_timeout"


# -- MPICH / Intel MPI (Hydra) termination banner -----------------------------------------------------------------
@pytest.mark.parametrize("tail,want", [
    ("YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Bus error (signal 7)", "shm"),
    ("YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)", "host_oom"),
    ("YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Segmentation fault (signal 11)", "other"),
    ("", "peer_exit"),
])
def test_hydra_bad_termination_banner(tail, want):
    log = ("rank 3 step 1200\n\n"
           "===================================================================================\n"
           "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
           "=   PID 81822 RUNNING AT node12\n"
           "=   EXIT CODE: 135\n"
           "=   CLEANING UP REMAINING PROCESSES\n"
           "=   YOU CAN IGNORE THE BELOW CLEANUP MESSAGES\n"
           "===================================================================================\n"
           f"{tail}\n")
    _, root = _root(log)
    assert root == want


# -- the dynamic loader cannot resolve an NCCL function (dlerror() text, also outside a traceback) --------------
def test_dlopen_undefined_nccl_symbol_is_a_version_mismatch():
    _, root = _root("OSError: /opt/conda/lib/python3.10/site-packages/torch/lib/libtorch_cuda.so: undefined symbol: "
                    "ncclCommWindowRegister\n")
    assert root == "version_mismatch"
    _, root = _root("/usr/local/lib/python3.11/dist-packages/torch/lib/libtorch_cuda.so: undefined symbol: ncclMemAlloc\n")
    assert root == "version_mismatch"


# -- the interpreter could not start the program ------------------------------------------------------------------
@pytest.mark.parametrize("line", [
    "/usr/bin/python3: can't open file '/workspace/train_ddp.py': [Errno 2] No such file or directory",
    "/opt/venv/bin/python: No module named trainer.main",
])
def test_python_cannot_start_the_script_is_a_launch_error(line):
    log = (f"{line}\n"
           "E1201 10:00:02.100000 300 torch/distributed/elastic/multiprocessing/api.py:882] failed (exitcode: 2) "
           "local_rank: 0 (pid: 301) of binary: /usr/bin/python3\n")
    d, root = _root(log)
    assert root == "other"  # session 11: no application exception was raised (docs/classes-session11c.md)
    assert d.root_cause.rule == "python-cannot-start-program"
    assert d.root_cause.ranks == (0,)  # the worker torchrun reports, by its local rank (the input shows one node)


# -- a CUDACHECK-style "Failed: Cuda error <file>:<line> '<cudaGetErrorString>'" ----------------------------------
def test_cudacheck_text_with_peer_access_unsupported_is_p2p():
    log = ("[tp0] building custom all-reduce\n"
           "Failed: Cuda error /build/csrc/custom_ar.cuh:211 'peer access is not supported between these two devices'\n"
           "Failed: Cuda error /build/csrc/custom_ar.cuh:211 'peer access is not supported between these two devices'\n")
    _, root = _root(log)
    assert root == "p2p_ipc"
    _, root = _root("Failed: Cuda error /src/alloc.cu:88 'an illegal memory access was encountered'\n")
    assert root == "cuda_error"


# -- torch.distributed.launch (<= 1.8): "Command '[...]' died with <Signals.SIGSEGV: 11>." ------------------------
@pytest.mark.parametrize("sig,want", [("SIGSEGV: 11", "other"), ("SIGBUS: 7", "shm"), ("SIGKILL: 9", "host_oom")])
def test_legacy_launcher_signal_death(sig, want):
    log = ("Traceback (most recent call last):\n"
           '  File "/usr/lib/python3.8/runpy.py", line 194, in _run_module_as_main\n'
           '    return _run_code(code, main_globals, None,\n'
           '  File "/usr/lib/python3.8/site-packages/torch/distributed/launch.py", line 256, in main\n'
           "    raise subprocess.CalledProcessError(returncode=process.returncode,\n"
           f"subprocess.CalledProcessError: Command '['/usr/bin/python', '-u', 'train.py', '--local_rank=1']' died with <Signals.{sig}>.\n")
    _, root = _root(log)
    assert root == want


# -- Ray: the actor's worker process died --------------------------------------------------------------------------
def test_ray_actor_died_is_a_peer_exit():
    log = ("Traceback (most recent call last):\n"
           '  File "/app/driver.py", line 40, in <module>\n'
           "    ray.get(refs)\n"
           "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
           "\tclass_name: Trainer\n"
           "\tactor_id: 5f1c0a\n"
           "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
           "Worker unexpectedly exits with a connection error code 2. End of file.\n")
    _, root = _root(log)
    assert root == "peer_exit"


# -- NCCL's sockets on loopback while it dials a peer that is not on this host -----------------------------------
_LOOPBACK = """\
node-b:5120:5120 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to lo
node-b:5120:5120 [0] NCCL INFO Bootstrap : Using lo:127.0.0.1<0>
node-b:5120:5120 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>
node-b:5120:5120 [0] NCCL INFO Using network Socket
node-b:5120:5188 [0] NCCL INFO socketPollConnect: connect returned Connection refused, retrying (1/34) after sleep for 100 msec
node-b:5120:5188 [0] NCCL INFO socketPollConnect: connect returned Connection refused, retrying (2/34) after sleep for 200 msec
"""


def test_loopback_interface_with_refused_connects_is_the_interface():
    d, root = _root(_LOOPBACK)
    assert root == "socket_interface"
    assert d.root_cause.rule == "nccl-socket-loopback-peer"


def test_loopback_retry_that_succeeded_is_no_failure():
    log = _LOOPBACK + ("node-b:5120:5120 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 1 nranks 2 cudaDev 0 busId 1000 "
                       "commId 0x9 - Init COMPLETE\n")
    _, root = _root(log)
    assert root is None


# -- torchelastic's failure summary with its column layout lost in the paste --------------------------------------
_SUMMARY = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
pretrain.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2025-03-02_11:40:09
  host      : gpu-node-4
  rank      : 3 (local_rank: 3)
  exitcode  : -9 (pid: 77120)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 77120
============================================================
"""


@pytest.mark.parametrize("how", ["dedented", "collapsed"])
def test_a_flattened_torchelastic_summary_still_names_the_rank(how):
    lines = _SUMMARY.splitlines()
    if how == "dedented":  # Markdown / a log viewer trimmed the leading spaces
        lines = [ln.lstrip() for ln in lines]
    else:  # runs of spaces collapsed to one
        lines = [" ".join(ln.split(" ")) if not ln.startswith("  ") else " " + " ".join(ln.split()) for ln in lines]
    d, root = _root("\n".join(lines) + "\n")
    assert root == "host_oom"
    assert d.root_cause.ranks == (3,)


# -- a box border is no hard-wrapped line (paste.py) ----------------------------------------------------------------
def test_a_border_at_the_wrap_width_does_not_swallow_the_next_line():
    border = "=" * 85
    log = (f"{border}\n=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   EXIT CODE: 135\n{border}\n"
           "APPLICATION TERMINATED WITH THE EXIT STRING: Bus error (signal 7)\n")
    d, root = _root(log)
    assert root == "shm"
    assert d.root_cause.evidence[0].text.startswith("APPLICATION TERMINATED")


# -- Ray's own out-of-memory kill is the host's memory -------------------------------------------------------------
def test_ray_oom_kill_is_host_memory():
    log = ("Traceback (most recent call last):\n"
           '  File "/app/driver.py", line 40, in <module>\n'
           "    ray.get(refs)\n"
           "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
           "Memory on the node (IP: 10.0.0.5) where the task was running was 61.2GB / 62.0GB (0.98), which exceeds the "
           "memory usage threshold of 0.95. Ray killed this worker because it was the most recently scheduled task.\n")
    _, root = _root(log)
    assert root == "host_oom"


# -- torchelastic's "Signal N (SIG...) received by PID" quoted outside a summary ----------------------------------
@pytest.mark.parametrize("sig,want", [("9 (SIGKILL)", "host_oom"), ("7 (SIGBUS)", "shm"), ("11 (SIGSEGV)", "other")])
def test_a_lone_elastic_signal_line_is_no_healthy_log(sig, want):
    _, root = _root(f"  traceback : Signal {sig} received by PID 90211\n")
    assert root == want
