"""Session 7b's classes (docs/classes-session7b.md): the misses of fixtures/blind7h and of the older used sets
(blind7, blind5h, blind5, blind2, public6, healthy7). Each log is written here after what NCCL / PyTorch / vLLM /
Ray / the log viewers print, not copied from a fixture."""
from __future__ import annotations

import pytest

from nccl_analyzer.analysis import analyze_text
from nccl_analyzer.engine.loader import load_rules

RULES = load_rules()


def _rc(log: str):
    d = analyze_text(log, rules=RULES)
    return d.root_cause


# -- vLLM's multiproc executor prefix "(VllmWorker rank=N pid=N) " ------------------------------------------------
VLLM_V1_OOM = """\
(VllmWorker rank=3 pid=5121)   File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2760, in all_reduce
(VllmWorker rank=3 pid=5121)     work = group.allreduce([tensor], opts)
(VllmWorker rank=3 pid=5121) torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5
(VllmWorker rank=3 pid=5121) ncclUnhandledCudaError: Call to CUDA function failed.
(VllmWorker rank=3 pid=5121) Last error:
(VllmWorker rank=3 pid=5121) Cuda failure 'out of memory'
"""


def test_vllm_v1_worker_prefix_is_stripped_like_rays():
    """vLLM v1's MultiprocExecutor prefixes a worker's output with "(VllmWorker rank=N pid=N) " (no comma, unlike
    SkyPilot's "(head, rank=0, pid=N)"). A paste that starts mid-traceback has no header to
    group the block by: only with the prefix stripped is the "Last error:" block read the "Last error:" block is read and the OOM is named."""
    rc = _rc(VLLM_V1_OOM)
    assert rc is not None and rc.id == "cuda_oom"


# -- ESC in caret notation ("^[") before a glog head ---------------------------------------------------------------
def test_a_caret_escape_before_a_c10_head_is_dropped():
    """A terminal echoes an escape it does not interpret as "^[": "^[[E socket.cpp:N] [c10d] ..." is c10's
    "[E ...]" head behind it, and the store connect timeout under it is read."""
    log = ("INFO 05-02 10:11:12 selector.py:15] Using XFormers backend.\n"
           "^[[0m^[[E socket.cpp:957] [c10d] The client socket has timed out after 900s while trying to connect to "
           "(10.1.2.3, 29500).\n")
    rc = _rc(log)
    assert rc is not None and rc.id == "rendezvous_unreachable"


def test_a_caret_colour_code_alone_is_no_text():
    from nccl_analyzer.clean import printable
    assert printable("^[[31mERROR^[[0m: boom ^[[K") == "ERROR: boom "
    assert printable("^[[E socket.cpp:1] x") == "[E socket.cpp:1] x"


# -- a log viewer's table with the row expanded: "| <time><msg> | <msg>" ----------------------------------------------
def test_a_cloudwatch_row_glued_and_doubled_is_read_once():
    """AWS CloudWatch's console, a row expanded and copied: the time stamp glued to the message, then the message
    column again. The record is read as the program wrote it (here torch's watchdog line, whose "[rank1]:" head
    only counts at a line's start)."""
    row = ("[rank1]:[E1103 08:10:00.000000000 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation "
           "timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 "
           "milliseconds before timing out.")
    log = ("  | 2025-03-01T08:00:00.100Z | [rank1]:[I1103 08:00:00.000000000 ProcessGroupNCCL.cpp:900] [PG 0 Rank 1] "
           "ProcessGroupNCCL initialization options: size: 2\n"
           f"  | 2025-03-01T08:10:00.020Z{row} | {row}\n")
    d = analyze_text(log, rules=RULES)
    assert d.root_cause is not None and d.root_cause.id == "watchdog_timeout"
    assert not d.root_cause.rule.startswith("failsafe")


# -- libfabric's own warn / error lines -------------------------------------------------------------------------
LIBFABRIC_END = """\
ip-10-0-1-5:201:201 [0] NCCL INFO Bootstrap : Using ens5:10.0.1.5<0>
ip-10-0-1-5:201:201 [0] NCCL INFO cudaDriverVersion 12020
NCCL version 2.19.3+cuda12.2
libfabric:207:1712000000::efa:core:efa_device_list_initialize():82<warn> No EFA device found
libfabric:207:1712000000::core:core:fi_getinfo_():1338<warn> fi_getinfo: provider efa output empty list
"""


def test_a_log_ending_on_a_libfabric_warn_is_the_fabric():
    rc = _rc(LIBFABRIC_END)
    assert rc is not None and rc.id == "ib_rdma"


def test_a_libfabric_warn_the_job_got_past_is_dismissed():
    """The same warn, then NCCL connecting its rings and finishing init in the same process: not the failure."""
    log = LIBFABRIC_END + (
        "ip-10-0-1-5:201:215 [0] NCCL INFO NET/OFI Selected Provider is tcp\n"
        "ip-10-0-1-5:201:215 [0] NCCL INFO Channel 00/02 :    0   1\n"
        "ip-10-0-1-5:201:215 [0] NCCL INFO Connected all rings\n"
        "ip-10-0-1-5:201:215 [0] NCCL INFO comm 0x55d0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 10 commId 0x1a - Init COMPLETE\n")
    d = analyze_text(log, rules=RULES)
    assert d.root_cause is None
    assert any("libfabric" in e.text for g in d.dismissed for e in g.evidence)


# -- text copied out of a URL: every space "%20" ------------------------------------------------------------------
@pytest.mark.parametrize("line, want", [
    ("/opt/conda/lib/python3.10/site-packages/torch/lib/libtorch_cuda.so:%20undefined%20symbol:%20ncclCommWindowRegister",
     "version_mismatch"),
    ("torch.distributed.DistBackendError:%20NCCL%20error%20in:%20/pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:317,"
     "%20unhandled%20system%20error%20(run%20with%20NCCL_DEBUG=INFO%20for%20details),%20NCCL%20version%202.20.5%0A"
     "ncclSystemError:%20System%20call%20(e.g.%20socket,%20malloc)%20or%20external%20library%20call%20failed%20or%20"
     "device%20error.%20%0ALast%20error:%0ANET/IB%20:%20No%20device%20found.", "ib_rdma"),
])
def test_a_url_encoded_error_line_is_read_decoded(line, want, tmp_path):
    """A paste is undone where a source is read (sources -> paste), so these go through a file."""
    from nccl_analyzer.analysis import analyze
    p = tmp_path / "issue.txt"
    p.write_text(line + "\n")
    d = analyze([str(p)])
    assert d.root_cause is not None and d.root_cause.id == want
    assert not d.root_cause.rule.startswith("failsafe")
    assert "%20" in d.root_cause.evidence[0].text  # the evidence quotes the line as pasted


def test_percent_signs_in_plain_text_are_not_decoded():
    from nccl_analyzer.paste import plan_for
    assert plan_for(["Epoch 1: 50%|#####     | 50/100 [00:10<00:10, 5.00it/s]", "loss%20 is a name"]) is None \
        or not plan_for(["Epoch 1: 50%|#####     | 50/100 [00:10<00:10, 5.00it/s]", "loss%20 is a name"]).urlenc


# -- misc/cudawrap.cc: an entry point found, its status left unset ------------------------------------------------
CUDAWRAP_HEAD = """\
gpu-node-7:9011:9011 [0] NCCL INFO Bootstrap : Using ens3:10.4.0.7<0>
gpu-node-7:9011:9011 [0] NCCL INFO cudaDriverVersion 12020
gpu-node-7:9011:9011 [0] misc/cudawrap.cc:188 NCCL WARN Retrieve cuDeviceGet failed with 0 status {status}
gpu-node-7:9011:9011 [0] misc/cudawrap.cc:246 NCCL WARN CUDA some PFN functions not found in the library
NCCL version 2.20.5+cuda12.2
gpu-node-7:9011:9011 [0] NCCL INFO Comm config Blocking set to 1
gpu-node-7:9012:9012 [1] NCCL INFO cudaDriverVersion 12020
"""


def test_an_entry_point_whose_status_is_garbage_is_harmless():
    """cudaGetDriverEntryPoint returned cudaSuccess (0) and left driverStatus unset (not 0, 1 or 2): NCCL loaded
    the function and goes on; the summary WARN after it says nothing of its own."""
    d = analyze_text(CUDAWRAP_HEAD.format(status=21845), rules=RULES)
    assert d.root_cause is None
    assert len([e for g in d.dismissed for e in g.evidence]) == 2


@pytest.mark.parametrize("status", ["1", "2"])
def test_an_entry_point_really_not_found_stays_a_failure(status):
    """status 1 / 2 (symbol not found / version not sufficient) is a real miss: not dismissed."""
    rc = _rc(CUDAWRAP_HEAD.format(status=status))
    assert rc is not None and rc.id == "cuda_error"


# -- a SIGABRT whose stack runs through ProcessGroupNCCL's watchdog thread -----------------------------------------
WATCHDOG_STACK_C10 = """\
frame #3: c10d::ProcessGroupNCCL::watchdogHandler() + 0x1a4 (0x7f0c1d2a1b34 in /usr/local/lib/python3.11/dist-packages/torch/lib/libtorch_cuda.so)
frame #4: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x12c (0x7f0c1d2a2e1c in /usr/local/lib/python3.11/dist-packages/torch/lib/libtorch_cuda.so)
frame #5: <unknown function> + 0xdc253 (0x7f0c5e8dc253 in /lib/x86_64-linux-gnu/libstdc++.so.6)
frame #6: <unknown function> + 0x94ac3 (0x7f0c60894ac3 in /lib/x86_64-linux-gnu/libc.so.6)

E0301 12:00:00.123000 4711 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -6) local_rank: 3 (pid: 4715) of binary: /usr/bin/python
"""

WATCHDOG_STACK_SYMBOLS = """\
(TrainWorker pid=2201, ip=10.0.0.4) /opt/venv/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so(+0x11a0c3f) [0x7fa21c9a0c3f] c10d::ProcessGroupNCCL::Watchdog::run()
(TrainWorker pid=2201, ip=10.0.0.4) /lib/x86_64-linux-gnu/libc.so.6(clone+0x44) [0x7fa2610a5a04] __clone
(TrainWorker pid=2201, ip=10.0.0.4) *** SIGABRT received at time=1750000000 on cpu 3 ***
(TrainWorker pid=2201, ip=10.0.0.4) PC: @     0x7fa2610169fc  (unknown)  pthread_kill
"""


@pytest.mark.parametrize("log", [WATCHDOG_STACK_C10, WATCHDOG_STACK_SYMBOLS], ids=["c10-frames-torchrun", "symbols-absl"])
def test_an_abort_from_the_watchdog_thread_is_the_watchdog(log):
    rc = _rc(log)
    assert rc is not None and rc.id == "watchdog_timeout" and rc.rule == "crash-abort-watchdog-thread"


def test_an_abort_on_another_thread_stays_the_generic_abort():
    log = WATCHDOG_STACK_SYMBOLS.replace("c10d::ProcessGroupNCCL::Watchdog::run()", "myext::Loader::worker()")
    rc = _rc(log)
    assert rc is not None and rc.rule == "crash-abort"


def test_a_watchdog_thread_in_a_profiler_dump_is_no_error_line():
    """py-spy's dump of a live job lists the watchdog thread too (no "frame #N:", no "(+0x..) [0x..]"): not a crash."""
    log = ("Thread 4715 (idle): \"MainThread\"\n"
           "    c10d::ProcessGroupNCCL::ncclCommWatchdog (libtorch_cuda.so)\n"
           "    execute_native_thread_routine (libstdc++.so.6.0.30)\n")
    d = analyze_text(log, rules=RULES)
    assert d.root_cause is None


# -- a paste that lost its line breaks: NCCL records run together on one line --------------------------------------
FLATTENED = ("nodeA:3101:3101 [0] NCCL INFO Bootstrap : Using eno1:192.168.1.20<0> "
             "nodeA:3101:3101 [0] NCCL INFO cudaDriverVersion 12040 NCCL version 2.19.3+cuda12.3 "
             "nodeA:3102:3102 [1] NCCL INFO Bootstrap : Using eno1:192.168.1.20<0> "
             "nodeA:3101:3120 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC "
             "nodeA:3102:3121 [1] transport/p2p.cc:275 NCCL WARN Cuda failure 'peer access is not supported between these two devices' "
             "nodeA:3102:3121 [1] NCCL INFO transport/p2p.cc:327 -> 1\n")


def test_a_flattened_paste_is_split_into_its_records(tmp_path):
    from nccl_analyzer.analysis import analyze
    p = tmp_path / "issue.txt"
    p.write_text(FLATTENED)
    d = analyze([str(p)])
    assert d.root_cause is not None and d.root_cause.id == "p2p_ipc"
    assert d.root_cause.rule.startswith("nccl-")  # the WARN's own rule, read from its own record


def test_libfabric_probing_absent_memory_interfaces_is_harmless():
    """ofi_hmem_init warns for each memory interface it was built with that the host lacks, and goes on; a warn that
    says nothing failed is no error line at all."""
    log = ("libfabric:3305:1712000000::core:core:ofi_hmem_init():418<warn> Failed to initialize hmem iface FI_HMEM_ZE: No data available\n"
           "libfabric:3305:1712000000::core:core:ofi_hmem_init():418<warn> Failed to initialize hmem iface FI_HMEM_NEURON: No data available\n"
           "libfabric:3305:1712000000::efa:domain:efa_domain_open():77<warn> FI_EFA_USE_DEVICE_RDMA is set\n")
    d = analyze_text(log, rules=RULES)
    assert d.root_cause is None and len([e for g in d.dismissed for e in g.evidence]) == 2
