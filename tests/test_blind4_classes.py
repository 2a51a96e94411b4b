"""The failure classes behind fixtures/blind4's misses (docs/blind4-classes.md), each from what NCCL / PyTorch / CUDA
do when they print the line, with small logs written for the test (not the fixtures' text): an HCA NCCL skips at
init, the proxy's unknown-command teardown, the heartbeat monitor's "should dump" store warning at exit, NCCL /
torch / CUDA texts pasted without the prefix a grammar needs, NVLS's bind failure quoted bare, and a proxy Connect
call that failed."""
from __future__ import annotations

import pytest

from nccl_analyzer.analysis import analyze_text
from nccl_analyzer.engine.loader import load_rules

RULES = load_rules()


def diag(text: str):
    return analyze_text(text, rules=RULES)


def cause(text: str) -> str | None:
    d = diag(text)
    return d.root_cause.id if d.root_cause else None


# --- 1. NCCL skips an IB device it cannot open (net_ib ncclIbInit: WARN + continue) -------------------------------
IB_SKIP = (
    "\ntrainer-0:5120:5120 [2] misc/ibvwrap.cc:196 NCCL WARN Call to ibv_open_device failed\n"
    "\ntrainer-0:5120:5120 [2] transport/net_ib.cc:152 NCCL WARN NET/IB : Unable to open device mlx5_7\n"
    "trainer-0:5120:5120 [2] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_2:1/RoCE ; OOB eth0:10.0.4.17<0>\n"
    "trainer-0:5120:5120 [2] NCCL INFO Using network IB\n"
)


def test_ib_device_skipped_at_init_is_harmless():
    d = diag(IB_SKIP)
    assert d.root_cause is None
    assert d.findings == [] or all(f.rule_id != "nccl-ib-verbs-error" for f in d.findings)
    reasons = [x.reason for x in d.dismissed]
    assert len(reasons) == 2 and all(r.startswith("harmless: NCCL could not open one InfiniBand") for r in reasons)


def test_ib_device_skip_does_not_hide_a_real_verbs_error():
    # near misses: another verbs call failing, and a completion error after the skip
    assert cause("\nn1:77:90 [0] misc/ibvwrap.cc:212 NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate "
                 "memory\n") == "ib_rdma"
    assert cause(IB_SKIP + "\ntrainer-0:5120:5188 [2] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from "
                 "peer 10.0.4.18<41002> with error 12, opcode 0, len 0, vendor err 129 (Recv)\n") == "ib_rdma"


# --- 2. the proxy service thread's "Unknown command" (proxy.cc: closeConn = 1, the thread goes on) ------------------
UNKNOWN_CMD = (
    "Epoch 9 done, saving checkpoint\n"
    "worker-3:41:388 [0] NCCL INFO [Service thread] Connection closed by localRank -1\n"
    "\nworker-3:41:388 [0] proxy.cc:1471 NCCL WARN [Service thread] Unknown command 23117 from localRank -1\n"
)


def test_proxy_unknown_command_at_exit_is_teardown():
    d = diag(UNKNOWN_CMD)
    assert d.root_cause is None
    assert [x.reason.split(":")[0] for x in d.dismissed] == ["teardown"]
    assert "Unknown command" in d.dismissed[0].evidence[0].text


def test_proxy_unknown_command_beside_a_failure_is_not_dismissed_as_exit():
    d = diag(UNKNOWN_CMD + "\nworker-3:41:41 [0] enqueue.cc:1420 NCCL WARN Cuda failure 'an illegal memory access "
                           "was encountered'\n")
    assert d.root_cause is not None and d.root_cause.id == "cuda_error"


# --- 3. ProcessGroupNCCL's heartbeat monitor: the store is gone at exit ("should dump" flag) ----------------------
SHOULD_DUMP = (
    '[rank3]:[W0412 09:41:07.112233445 ProcessGroupNCCL.cpp:1662] [PG ID 0 PG GUID 0 Rank 3] Failed to check the '
    '"should dump" flag on TCPStore, (maybe TCPStore server has shut down too early), with error: Broken pipe\n'
    "[rank3]:[W0412 09:41:07.190011223 TCPStore.cpp:106] [c10d] sendBytes failed on SocketImpl(fd=41, "
    "addr=[node2]:51022, remote=[node1]:29500): Broken pipe\n"
    "Exception raised from sendBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:653 (most recent call first):\n"
    "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98 (0x7f01 in /venv/torch/lib/libc10.so)\n"
)


def test_should_dump_store_warning_at_exit_is_no_failure():
    assert cause(SHOULD_DUMP) is None


def test_peer_reset_without_the_monitor_warning_is_still_peer_exit():
    # near miss: the same store warning without the heartbeat monitor giving up, and an NCCL reset
    assert cause("[rank3]:[W0412 09:41:07.190011223 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=41, "
                 "addr=[node2]:51022, remote=[node1]:29500): Connection reset by peer\n") == "peer_exit"
    assert cause("\nnode2:900:950 [1] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer "
                 "node1<40112>\n") == "peer_exit"


# --- 4. texts of NCCL / torch / CUDA pasted without the prefix the grammars need -------------------------------
@pytest.mark.parametrize("text,want", [
    # NCCL init.cc's WARN text alone (the prefix not copied)
    ("Duplicate GPU detected : rank 3 and rank 1 both on CUDA device 41000\n", "duplicate_gpu"),
    # TORCH_DISTRIBUTED_DEBUG=DETAIL fingerprint check, re-raised inside the program's own message behind a prefix
    ("1 :Error in Trainer.training_step: Detected mismatch between collectives on ranks. Rank 1 is running "
     "collective: CollectiveFingerPrint(SequenceNumber=88, OpType=ALLREDUCE, TensorShape=[1024], "
     "TensorDtypes=Float), but Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=88, "
     "OpType=BROADCAST, TensorShape=[1024], TensorDtypes=Float).\n", "collective_mismatch"),
    # cudaErrorInsufficientDriver (35) in a glog CHECK of another framework, behind mpirun's --timestamp-output
    # --tag-output prefix
    ("Wed Mar  3 11:02:41 2021[1,3]<stderr>:F0303 11:02:41.118277  9912 gpu_info.cc:88] Check failed: cudaSuccess "
     "== e (0 vs. 35) Cuda Error: CUDA driver version is insufficient for CUDA runtime version\n"
     "Wed Mar  3 11:02:41 2021[1,3]<stderr>:*** Check failure stack trace: ***\n", "version_mismatch"),
    # transport/nvls.cc's bind failure quoted without prefix: NVLS's, not a generic CUDA error
    ("    Failed to bind NVLink SHARP (NVLS) Multicast memory of size 2097152 : CUDA error 401 'operation not "
     "permitted when stream is capturing'.\n", "nvls_multicast"),
], ids=["duplicate-gpu-text", "collective-fingerprint-mismatch", "cuda-insufficient-driver", "nvls-bind-failed"])
def test_bare_texts_get_their_cause(text, want):
    assert cause(text) == want


def test_nvls_bind_that_proceeds_without_nvls_is_harmless():
    d = diag("Failed to bind NVLink SHARP (NVLS) Multicast memory of size 2097152 : CUDA error 801 'operation not "
             "supported'. Proceeding without NVLS support.\n")
    assert d.root_cause is None


def test_mismatch_prose_without_a_fingerprint_is_not_a_finding():
    # near miss: a sentence that mentions the check but is no report of it
    assert cause("we enabled TORCH_DISTRIBUTED_DEBUG=DETAIL to see whether ranks mismatch\n") is None


# --- 5. a proxy Connect call that failed (proxy.cc ncclProxyCall, 2.12 .. 2.17) ----------------------------------
def test_proxy_call_connect_failed_is_network_connect():
    log = ("(RayWorker pid=3321, ip=10.2.0.9) ncclInternalError: Internal check failed.\n"
           "(RayWorker pid=3321, ip=10.2.0.9) Last error:\n"
           "(RayWorker pid=3321, ip=10.2.0.9) Proxy Call to rank 5 failed (Connect)\n")
    assert cause(log) == "network_connect"
    # the WARN itself, with its prefix
    assert cause("\nnode4:311:311 [1] proxy.cc:884 NCCL WARN Proxy Call to rank 5 failed (Connect)\n") \
        == "network_connect"
