"""Session 6b's classes (docs/classes-session6b.md): short failing pastes are never "no failure" (an NCCL WARN
without its prefix, a CUDA / NCCL error string, a launcher's or framework's one-line error), and the classes behind
the misses of fixtures/blind6 and fixtures/blind7. Each log is written here after what NCCL / PyTorch / CUDA print,
not copied from a fixture."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from nccl_analyzer.analysis import analyze_text
from nccl_analyzer.engine.loader import load_rules
from nccl_analyzer.messages import load_tables
from nccl_analyzer.parse.bare_warn import MIN_LETTERS, format_regex, letters, match_bare_warn

from jobs.jobkit import ROOT
from test_classification import REF, instantiate

RULES = load_rules()
TABLES = load_tables()


def _rc(log: str):
    d = analyze_text(log, rules=RULES)
    return d.root_cause


# -- NCCL WARN bodies pasted without the prefix ------------------------------------------------------------------
def test_the_shipped_format_file_is_generated_from_the_catalogue():
    """messages/nccl_warn_formats.json is what benchmarks/warn_formats.py writes from the reference catalogue."""
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "warn_formats.py"), "--check"], capture_output=True)
    assert r.returncode == 0, "messages/nccl_warn_formats.json is stale: run python benchmarks/warn_formats.py --write"


def reads_alone(fmt: str) -> bool:
    """bare_warn's own filter of the shipped formats: it begins with a word and has MIN_LETTERS letters."""
    return letters(fmt) >= MIN_LETTERS and re.match(r"\[?[A-Za-z]", fmt) is not None


def test_every_shipped_newest_warn_body_alone_is_a_failure_or_dismissed():
    """Each NCCL 2.30.7 WARN whose format the shipped file holds and bare_warn reads alone, pasted as its message alone (no host:pid:tid, no
    file:line, no "NCCL WARN"), gets a root cause citing it, or is dismissed where the table calls it harmless."""
    shipped = {fmt: files for fmt, files in json.loads((ROOT / "messages" / "nccl_warn_formats.json").read_text())["formats"]}
    offenders, n = [], 0
    with open(REF / "nccl_log_formats.jsonl", encoding="utf-8") as fh:
        for row in map(json.loads, fh):
            fmt = row["fmt"].split("\n", 1)[0].strip()
            if row["level"] != "WARN" or fmt not in shipped or not reads_alone(fmt):
                continue
            n += 1
            body = instantiate(fmt).strip()
            d = analyze_text(body + "\n", rules=RULES)
            # without its file a message is harmless only where every file that prints the format calls it so
            ms = [TABLES.nccl_warn(f, body) for f in shipped[fmt]]
            if all(m is not None and (m.harmless or m.teardown) for m in ms):
                ok = d.root_cause is None and len(d.dismissed) == 1
            else:
                ok = d.root_cause is not None and any(e.line == 1 for e in d.root_cause.evidence)
            if not ok:
                offenders.append(f"  {row['file']}: {body[:90]} -> {d.root_cause and d.root_cause.id}")
    assert n > 650
    assert not offenders, f"{len(offenders)} of {n} bare WARN bodies not accounted for:\n" + "\n".join(offenders[:40])


def test_a_format_pattern_matches_its_whole_message_only():
    rx = format_regex("NET/IB : Got completion from peer %s with error %d, opcode %d, len %d, vendor err %d (%s)%s%s%s%s")
    assert rx.fullmatch("NET/IB : Got completion from peer 10.1.1.2<5561> with error 12, opcode 1, len 0, vendor err 129 (Recv)")
    assert not rx.fullmatch("NET/IB : Got completion from peer 10.1.1.2<5561> with error twelve")
    assert match_bare_warn("the training loop finished epoch 3") is None
    assert match_bare_warn("Error while creating shared memory segment /dev/shm/nccl-abc (size 9637888)")[1] \
        == ("include/shm.h", "misc/shmutils.cc")


@pytest.mark.parametrize("body,want", [
    ("Error while creating shared memory segment /dev/shm/nccl-Z4wq1a (size 9637888)", "shm"),
    ("NET/IB : Got completion from peer 10.1.1.2<5561> with error 12, opcode 1, len 0, vendor err 129", "ib_rdma"),
    ("socketStartConnect: Connect to 10.1.1.2<40611> failed : No route to host", "network_connect"),
    ("Bootstrap : no socket interface found", "socket_interface"),
    ("Duplicate GPU detected : rank 3 and rank 1 both on CUDA device 3b000", "duplicate_gpu"),
    ("Cuda failure 'an illegal memory access was encountered'", "cuda_error"),
    ("Cuda failure 217 'peer access is not supported between these two devices'", "p2p_ipc"),
])
def test_a_warn_message_alone_is_read_as_that_warn(body, want):
    rc = _rc(body + "\n")
    assert rc is not None and rc.id == want, rc and (rc.id, rc.title)


def test_a_bare_warn_inside_a_healthy_run_is_dismissed_when_harmless():
    log = "Failed to open libibverbs.so[.1]\nstep 10 loss 2.31\nstep 20 loss 2.07\n"
    d = analyze_text(log, rules=RULES)
    assert d.root_cause is None and d.dismissed


# -- CUDA / NCCL error strings and one-line errors of launchers and frameworks ---------------------------------
@pytest.mark.parametrize("line,want", [
    ("peer access is not supported between these two devices", "p2p_ipc"),
    ("peer access is not supported between these two device", "p2p_ipc"),
    ("an illegal memory access was encountered", "cuda_error"),
    ("device-side assert triggered", "cuda_error"),
    ("unspecified launch failure", "cuda_error"),
    ("uncorrectable ECC error encountered", "cuda_error"),
    ("invalid device ordinal", "gpu_visibility"),
    ("no CUDA-capable device is detected", "gpu_visibility"),
    ("no kernel image is available for execution on the device", "version_mismatch"),
    ("system has unsupported display driver / cuda driver combination", "version_mismatch"),
    ("unhandled system error (run with NCCL_DEBUG=INFO for details)", "other"),
    ("unhandled cuda error, NCCL version 2.19.3", "cuda_error"),
    ("remote process exited or there was a network error", "peer_exit"),
    ("transport retry counter exceeded", "ib_rdma"),
    ("NET/IBext:Got completion from peer 10.4.0.7<40611> with status=12 opcode=1 len=0 vendor err 129 (Send)", "ib_rdma"),
    ("undefined symbol: ncclCommWindowRegister", "version_mismatch"),
    ("Address already in use", "port_conflict"),
    ("The connection to the C10d store has failed. See inner exception for details.", "rendezvous_unreachable"),
    ("process 2 terminated with signal SIGKILL", "host_oom"),
    ("process 1 terminated with exit code 1", "peer_exit"),
    ("exitcode  : -9 (pid: 41877)", "host_oom"),
    ("Default process group has not been initialized, please make sure to call init_process_group.", "invalid_usage"),
    ("CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, opa, opb, m, n, k, &falpha, a)`", "cuda_error"),
    ("A worker died or was killed while executing a task by an unexpected system error. To troubleshoot the problem, "
     "check the logs for the dead worker. Worker exit type: SYSTEM_ERROR", "peer_exit"),
    ("Task was killed due to the node running low on memory.", "host_oom"),
    ("finetune.py: error: the following arguments are required: --data_path", "app_exception"),
    ("!!!!!!! Segfault encountered !!!!!!!", "other"),
])
def test_a_one_line_error_paste_is_never_no_failure(line, want):
    rc = _rc(line + "\n")
    assert rc is not None and rc.id == want, rc and (rc.id, rc.title)


@pytest.mark.parametrize("log", [
    # torch tries IPv4 after this warning (macOS hosts without an IPv6 address): a healthy single-process run
    "[W1202 10:01:44.118000 socket.cpp:755] [c10d] The IPv6 network addresses of (mbp.local, 51533) cannot be "
    "retrieved (gai error: 8 - nodename nor servname provided, or not known).\n",
    "epoch 1: no error in the validation set, accuracy 0.93\n",
    "usage: train.py [-h] [--lr LR]\n",
])
def test_scary_but_healthy_lines_stay_null(log):
    assert _rc(log) is None


# -- the classes behind blind6 / blind7 misses --------------------------------------------------------------------
def test_argparse_rejecting_the_launchers_local_rank_is_the_program_not_a_lost_peer():
    log = """\
usage: pretrain.py [-h] [--batch-size N] [--local_rank LOCAL_RANK] DATA
pretrain.py: error: unrecognized arguments: --local-rank=0
usage: pretrain.py [-h] [--batch-size N] [--local_rank LOCAL_RANK] DATA
pretrain.py: error: unrecognized arguments: --local-rank=1
[2025-03-04 10:11:12,345] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: 2) local_rank: 0 (pid: 8812) of binary: /opt/conda/bin/python
"""
    rc = _rc(log)
    assert rc.id == "app_exception" and "--local-rank" in rc.title


def test_an_unresolvable_store_host_is_rendezvous_not_the_program():
    log = """\
Traceback (most recent call last):
  File "/workspace/dist_main.py", line 88, in worker
    dist.init_process_group("nccl", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=4)
  File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", line 455, in init_process_group
    store, rank, world_size = next(rendezvous_iterator)
  File "/usr/lib/python3/dist-packages/torch/distributed/rendezvous.py", line 130, in _tcp_rendezvous_handler
    store = TCPStore(result.hostname, result.port, world_size, start_daemon, timeout)
ValueError: host not found: Name or service not known
"""
    rc = _rc(log)
    assert rc.id == "rendezvous_unreachable" and rc.confidence >= 0.8


def test_a_privileged_store_port_is_a_port_problem_not_an_unreachable_store():
    log = ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
           "The server socket has failed to bind to [::]:80 (errno: 13 - Permission denied). The server socket has "
           "failed to bind to 0.0.0.0:80 (errno: 13 - Permission denied).\n")
    rc = _rc(log)
    assert rc.id == "port_conflict" and "80" in rc.title


def test_a_log_that_stops_at_the_nvls_bind_is_an_nvls_hang():
    log = ("dgx-a:7702:7770 [3] NCCL INFO NVLS comm 0x55c1 headRank 3 nHeads 4 buffSize 1048576 memSize 2097152 "
           "nvlsPerRankSize 134217728 nvlsTotalSize 536870912\n"
           "dgx-a:7702:7770 [3] NCCL INFO NVLS Bind mem 0x9c0000000 UC handle 0x7f55 MC handle 0x7f66 size 536870912\n")
    rc = _rc(log)
    assert rc.id == "nvls_multicast" and rc.confidence <= 0.35 and rc.ranks == ()


def test_nccl_built_without_the_gpus_arch_is_a_version_mismatch():
    log = "\nnode3:4410:4410 [2] enqueue.cc:58 NCCL WARN Cuda failure 'named symbol not found'\n"
    assert _rc(log).id == "version_mismatch"
    log = ("Traceback (most recent call last):\n  File \"infer.py\", line 9, in <module>\n    y = model(x.cuda())\n"
           "RuntimeError: CUDA error: no kernel image is available for execution on the device\n")
    assert _rc(log).id == "version_mismatch"


def test_peer_access_raised_by_the_shm_transport_is_shm():
    log = "\n[2025-09-30 11:02:13] node:990:1021 [2] transport/shm.cc:590 NCCL WARN Cuda failure 217 'peer access is not supported between these two devices'\n"
    rc = _rc(log)
    assert rc.id == "shm" and "NCCL_CUMEM_HOST_ENABLE" in rc.fix.env
    log = "\nnode:990:1021 [2] transport/p2p.cc:304 NCCL WARN Cuda failure 'peer access is not supported between these two devices'\n"
    assert _rc(log).id == "p2p_ipc"


def test_a_crash_in_nccls_cumem_path_names_it():
    log = """\
!!!!!!! Segfault encountered !!!!!!!
  File "<unknown>", line 0, in cuMemMap
  File "misc/cudawrap.cc", line 92, in ncclCuMemEnable()
  File "init.cc", line 1850, in ncclCommInitRank
"""
    rc = _rc(log)
    assert rc.id == "nvls_multicast" and "cuMem" in rc.title


def test_an_abort_whose_reason_is_a_timed_out_wait_is_a_timeout():
    log = ("NCCL communicator was aborted on rank 3. Original reason for failure was: Work: WorkNCCL(OpType=BROADCAST, "
           "TensorShape=[64], Timeout(ms)=5000) timed out in call to wait().\n")
    assert _rc(log).id == "watchdog_timeout"


def test_a_hard_wrapped_watchdog_line_is_a_timeout():
    log = """\
[E1107 03:12:44.120333 ProcessGroupNCCL.cpp:607] [Rank 2] Watchdog
caught collective operation timeout: WorkNCCL(SeqNum=41,
OpType=ALLGATHER, NumelIn=4096, NumelOut=16384, Timeout(ms)=60000) ran for
60012 milliseconds before timing out.
"""
    assert _rc(log).id == "watchdog_timeout"


def test_rccl_iommu_warning_alone_reads_peer_to_peer():
    log = ('\nmi300:120:120 [0] /opt/rocm/share/rccl/src/init.cc:179 NCCL WARN Missing "iommu=pt" from kernel command '
           'line which can lead to system instablity or hang!\nmi300:120:120 [0] NCCL INFO Bootstrap : Using eth0:10.2.0.4<0>\n')
    assert _rc(log).id == "p2p_ipc"


def test_a_rankless_cause_takes_the_worker_torchrun_saw_fail_by_itself():
    """Console-only: the CUDA error has no rank prefix; torchrun's agent names local rank 1 failing and SIGTERMs 0."""
    log = """\
RuntimeError: CUDA error: invalid device ordinal
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
W1202 09:00:01.000000 311 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 320 closing signal SIGTERM
E1202 09:00:01.300000 311 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 1 (pid: 321) of binary: /usr/bin/python3
"""
    rc = _rc(log)
    assert rc.id == "gpu_visibility" and rc.ranks == (1,)
    two = log + "E1202 09:00:01.400000 311 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 0 (pid: 320) of binary: /usr/bin/python3\n"
    assert _rc(two).ranks == ()  # two workers failed by themselves: the input does not say which one is the cause
