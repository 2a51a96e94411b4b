"""Session 7's classes behind the misses of fixtures/blind6h and the older used sets (docs/classes-session7.md). Each
log is written here after what NCCL / PyTorch / CPython / the launchers print, not copied from a fixture."""
from __future__ import annotations

import pytest

from nccl_analyzer.analysis import analyze_text
from nccl_analyzer.engine.loader import load_rules

RULES = load_rules()


def _d(log: str):
    return analyze_text(log, rules=RULES)


def _id(log: str):
    rc = _d(log).root_cause
    return rc.id if rc is not None else None


# -- class 1: ProcessGroupWrapper's mismatch text with a wrap's padding inside its words -------------------------
def test_class1_fingerprint_mismatch_with_wrap_padding_is_a_mismatch():
    log = ("Detected mismatch between collectives on ranks. Rank 1 is running coll     ective: "
           "CollectiveFingerPrint(SequenceNumber=7, OpType=BROADCAST, TensorShape=[     4], TensorDtypes=Float), but "
           "Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=7, OpType=ALLGA     THER)\n")
    assert _id(log) == "collective_mismatch"


def test_class1_the_sentence_in_prose_without_the_ranks_is_not_read_as_the_check():
    assert _id("we never saw Detected mismatch between collectives on ranks in our runs\n") is None


# -- class 2: an exception raised in an atexit handler (CPython < 3.12's report) -----------------------------------
ATEXIT = """epoch 3: loss 0.412
training finished, saving model.pt
Error in atexit._run_exitfuncs:
Traceback (most recent call last):
  File "/usr/lib/python3.8/multiprocessing/popen_fork.py", line 27, in poll
    pid, sts = os.waitpid(self.pid, flag)
  File "/opt/venv/lib/python3.8/site-packages/torch/utils/data/_utils/signal_handling.py", line 66, in handler
    _error_if_any_worker_fails()
RuntimeError: DataLoader worker (pid 4312) is killed by signal: Terminated.
"""


def test_class2_atexit_traceback_after_the_run_is_dismissed():
    d = _d(ATEXIT)
    assert d.root_cause is None
    assert any("atexit" in x.reason for x in d.dismissed)


def test_class2_a_traceback_without_the_atexit_header_is_still_a_failure():
    assert _id(ATEXIT.replace("Error in atexit._run_exitfuncs:\n", "")) is not None


# -- class 3: an undefined symbol of any library (build vs run-time versions) --------------------------------------
def test_class3_extension_undefined_cuda_runtime_symbol_is_version_mismatch():
    log = """Traceback (most recent call last):
  File "train.py", line 4, in <module>
    import apex_C
ImportError: /opt/venv/lib/python3.9/site-packages/apex_C.cpython-39-x86_64-linux-gnu.so: undefined symbol: __cudaRegisterFatBinaryEnd
"""
    d = _d(log)
    assert d.root_cause.id == "version_mismatch"
    assert d.root_cause.rule == "python-extension-undefined-symbol"


def test_class3_ld_so_report_alone_is_version_mismatch():
    assert _id("python3: symbol lookup error: /opt/x/lib/libtorch_ext.so: undefined symbol: _ZN3c1010TensorImplD2Ev\n") \
        == "version_mismatch"


def test_class3_nccl_symbols_stay_with_the_nccl_rule():
    log = "ImportError: /opt/venv/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so: undefined symbol: ncclCommShrink\n"
    assert _d(log).root_cause.rule == "torch-nccl-undefined-symbol"


# -- class 4: launchers' exit-status texts read by the signal --------------------------------------------------
@pytest.mark.parametrize("line, want", [
    ("exits with return code = -9", "host_oom"),
    ('"exits with return code = -9."', "host_oom"),
    ("`exits with return code = -7`", "shm"),
    ("exits with return code = -11", "other"),
    ("exits with return code = 1", "peer_exit"),
    ("subprocess.CalledProcessError: Command '['/usr/bin/python', '-u', 'train.py', '--local_rank=1']' "
     "returned non-zero exit status -9.", "host_oom"),
    ("subprocess.CalledProcessError: Command '['/usr/bin/python', '-u', 'train.py']' returned non-zero exit status -7.",
     "shm"),
])
def test_class4_launcher_exit_status_alone(line, want):
    assert _id(line + "\n") == want


@pytest.mark.parametrize("line, want", [
    ("command terminated with exit code 137", "host_oom"),
    ("Error: Process completed with exit code 137.", "host_oom"),
    ("trainer-1 exited with code 137", "host_oom"),
    ("trainer-1 exited with code 135", "shm"),
    ("command terminated with exit code 139", "other"),
])
def test_class4_runtime_exit_status_128_plus_signal(line, want):
    assert _id(line + "\n") == want


def test_class4_runtime_exit_status_zero_or_plain_is_not_read_as_a_signal():
    assert _id("trainer-1 exited with code 0\n") is None


def test_class4_srun_task_out_of_memory():
    d = _d("srun: error: gpu-017: task 5: Out Of Memory\n")
    assert d.root_cause.id == "host_oom"
    assert d.root_cause.rule == "launcher-task-oom"


def test_class4_the_phrase_inside_prose_is_no_log_line():
    assert _id("my job exits with return code = -9 although the node has 2 TB of RAM\n") is None


def test_class4_a_positive_called_process_status_is_still_the_exception():
    assert _id("subprocess.CalledProcessError: Command 'make' returned non-zero exit status 2.\n") == "app_exception"


# -- class 5: a traceback cut inside torchelastic's rendezvous store call ---------------------------------------
CUT_RDZV = """  File "/opt/venv/lib/python3.10/site-packages/torch/distributed/elastic/rendezvous/dynamic_rendezvous.py", line 1112, in next_rendezvous
    self._op_executor.run(join_op, deadline, self._get_deadline)
  File "/opt/venv/lib/python3.10/site-packages/torch/distributed/elastic/rendezvous/dynamic_rendezvous.py", line 603, in run
    has_set = self._state_holder.sync()
  File "/opt/venv/lib/python3.10/site-packages/torch/distributed/elastic/rendezvous/dynamic_rendezvous.py", line 407, in sync
    get_response = self._backend.get_state()
  File "/opt/venv/lib/python3.10/site-packages/torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py", line 73, in get_state
    base64_state: bytes = self._call_store("get", self._key)
  File "/opt/venv/lib/python3.10/site-packages/torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py", line 115, in _call_store
"""


def test_class5_traceback_cut_in_the_rendezvous_store_call():
    assert _id("Traceback (most recent call last):\n" + CUT_RDZV) == "rendezvous_unreachable"


def test_class5_a_traceback_cut_elsewhere_stays_other():
    log = """Traceback (most recent call last):
  File "train.py", line 88, in <module>
    main()
  File "train.py", line 61, in main
"""
    assert _id(log) == "other"


# -- class 6: NCCL 2.3 / 2.4's loopback interface and connect timeout ----------------------------------------
def test_class6_nccl23_loopback_interface_with_refused_connect_timeout():
    log = """node-b:4410:4462 [0] NCCL INFO NET : Using interface lo:127.0.0.1<0>
node-b:4410:4462 [0] NCCL INFO NET : Using interface eth0:10.8.0.12<0>
node-b:4410:4462 [0] NCCL INFO NET/Socket : 2 interfaces found

node-b:4410:4462 [0] include/socket.h:361 NCCL WARN Call to connect timeout : Connection refused
node-b:4410:4462 [0] NCCL INFO transport/net_socket.cu:139 -> 2
node-b:4410:4462 [0] NCCL INFO bootstrap.cu:19 -> 2
"""
    d = _d(log)
    assert d.root_cause.id == "socket_interface"
    assert d.root_cause.rule == "nccl-socket-loopback-peer"


def test_class6_refused_connect_timeout_on_a_routable_interface_is_no_loopback_verdict():
    log = """node-b:4410:4462 [0] NCCL INFO NET : Using interface eth0:10.8.0.12<0>
node-b:4410:4462 [0] include/socket.h:361 NCCL WARN Call to connect timeout : Connection refused
"""
    assert _d(log).root_cause.rule != "nccl-socket-loopback-peer"


# -- class 7: torch's NCCL error text wrapped after "NCCL error in:" ------------------------------------------
def test_class7_wrapped_nccl_error_location_line_gives_the_error_string():
    log = """[rank3]:[E1104 09:12:40.120334 ProcessGroupNCCL.cpp:1380] [PG ID 0 PG GUID 0(default_pg) Rank 3] Exception thrown when waiting for future ProcessGroup abort: NCCL error in:
/opt/pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:402, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.27.5
"""
    assert _id(log) == "invalid_usage"


# -- class 8 (reverted by the lead): a faulthandler dump whose header is not in the paste ---------------------------
# faulthandler also dumps the threads of a live process (dump_traceback, dump_traceback_later's "Timeout (h:mm:ss)!",
# register(SIGUSR1)): without its "Fatal Python error: <signal>" header a dump does not say that the process crashed.
FAULT_DUMP = """Thread 0x00007f1b2c7fe640 (most recent call first):
  File "/usr/lib/python3.10/threading.py", line 324 in wait
  File "/usr/lib/python3.10/threading.py", line 973 in _bootstrap

Current thread 0x00007f1b9a3c1740 (most recent call first):
  File "/opt/venv/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 2423 in broadcast
  File "/work/train.py", line 51 in setup
"""


def test_class8_a_thread_dump_without_its_header_is_not_called_a_crash():
    assert _d(FAULT_DUMP).root_cause is None  # (with the reverted class: other, "a native crash", at 0.3)


def test_a_faulthandler_timer_dump_in_a_job_that_goes_on_stays_healthy():
    log = ("2026-12-01 10:00:01,000 INFO train: step 4 loss 0.3100\nTimeout (0:00:05)!\n" + FAULT_DUMP +
           "2026-12-01 10:00:09,000 INFO train: step 5 loss 0.3000\n2026-12-01 10:00:10,000 INFO train: eval done\n")
    assert _d(log).root_cause is None


def test_class8_a_dump_with_its_header_is_one_crash_report_with_its_signal():
    d = _d("Fatal Python error: Segmentation fault\n\n" + FAULT_DUMP)
    assert d.root_cause.rule == "crash-signal"
    assert "SIGSEGV" in d.root_cause.title


# -- class 9: the hosts of one job load different NET plugins -------------------------------------------------
PLUGINS = """node-a:3301:3350 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation
node-a:3301:3350 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.1.0.1<0>
node-c:8120:8170 [0] NCCL INFO NET/Plugin: Loaded net plugin NCCL RDMA Plugin v7 (v7)
node-c:8120:8170 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.1.0.3<0>
"""


def test_class9_hosts_with_different_net_plugins():
    d = _d(PLUGINS)
    assert d.root_cause.id == "ib_rdma"
    assert d.root_cause.rule == "nccl-net-plugin-differs-across-hosts"
    assert "node-a" in d.root_cause.title and "node-c" in d.root_cause.title


def test_class9_the_same_plugin_everywhere_is_no_finding():
    same = PLUGINS.replace("NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",
                           "NCCL INFO NET/Plugin: Loaded net plugin NCCL RDMA Plugin v7 (v7)")
    assert _d(same).root_cause is None
