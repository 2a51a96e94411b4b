"""The failure classes behind session 9's dev9c misses of fixtures/blind10 and fixtures/blind11
(docs/classes-session9c.md), each written from the program's own message format, not copied from a pasted log:
a CUDA failure raised by NCCL's P2P transport, TensorRT-LLM's CUDA runtime error line, an RDMA queue pair that does
not reach RTR, vLLM finding no device, JAX's PJRT plugin API version check, and Markdown bold over a line's head."""
from __future__ import annotations

import pytest

from nccl_analyzer.analysis import analyze_text


def _root(log: str):
    d = analyze_text(log)
    return d, (d.root_cause.id if d.root_cause else None)


# -- NCCL's P2P transport (src/transport/p2p.cc): its CUDACHECK / CUCHECK are all P2P / IPC mapping calls ---------------
@pytest.mark.parametrize("body", ["Cuda failure 'invalid argument'", "Cuda failure 1 'invalid argument'",
                                  "Cuda failure 801 'operation not supported'"])
def test_p2p_transport_cuda_failure_is_p2p_ipc(body):
    log = ("gpu-a:7001:7044 [1] NCCL INFO Allocated shareable buffer 0x7e0a00000 size 2097152 ipcDesc 0x7f11c804f050\n"
           f"gpu-a:7000:7042 [0] transport/p2p.cc:281 NCCL WARN {body}\n")
    d, root = _root(log)
    assert root == "p2p_ipc"
    assert d.root_cause.rule == "nccl-p2p-transport-cuda-failure"


def test_cuda_failure_elsewhere_and_oom_in_p2p_keep_their_reading():
    _, root = _root("gpu-a:7000:7042 [0] misc/strongstream.cc:88 NCCL WARN Cuda failure 'invalid argument'\n")
    assert root not in (None, "p2p_ipc")
    _, root = _root("gpu-a:7000:7042 [0] transport/p2p.cc:281 NCCL WARN Cuda failure 2 'out of memory'\n")
    assert root == "cuda_oom"
    # a peer ordinal this process cannot see (one GPU per task) is GPU visibility, read by torch-gpu-visibility alone
    d, root = _root("gpu-a:7000:7042 [0] transport/p2p.cc:275 NCCL WARN Cuda failure 101 'invalid device ordinal'\n")
    assert root == "gpu_visibility"
    assert all(f.rule != "nccl-p2p-transport-cuda-failure" for f in d.findings)


# -- TensorRT-LLM's check_cuda_error: "[TensorRT-LLM][ERROR] CUDA runtime error in <call>: <error string>" ------------
def test_trtllm_cuda_runtime_error_read_by_its_cuda_text():
    _, root = _root("[TensorRT-LLM][ERROR] CUDA runtime error in cudaDeviceEnablePeerAccess(peer, 0): "
                    "peer access is not supported between these two devices\n")
    assert root == "p2p_ipc"
    d, root = _root("[TensorRT-LLM][ERROR] CUDA runtime error in cudaMemcpyAsync(dst, src, n, kind, stream): "
                    "an illegal memory access was encountered\n")
    assert root == "cuda_error"


# -- an RDMA queue pair that does not reach RTR (ibv_modify_qp), in a library's own words ------------------------
def test_modify_qp_to_rtr_failure_is_ib_rdma():
    log = ("link_layer: Ethernet (RoCE)\nport_state: ACTIVE\n"
           "Failed to modify QP to RTR: Connection timed out\nerrno: 110\n")
    d, root = _root(log)
    assert root == "ib_rdma"
    assert d.root_cause.rule == "fabric-verbs-modify-qp-failed"
    _, root = _root("Modified QP to RTR\nModified QP to RTS\n")
    assert root is None


# -- vLLM's DeviceConfig finding no device (Ray actor with num_gpus=0, empty CUDA_VISIBLE_DEVICES) ----------------
@pytest.mark.parametrize("msg", ["No supported device detected.", "Failed to infer device type"])
def test_vllm_no_supported_device_is_gpu_visibility(msg):
    log = ("Traceback (most recent call last):\n"
           '  File "/srv/engine.py", line 21, in __init__\n'
           "    self.llm = vllm.LLM(model=path, tensor_parallel_size=2)\n"
           '  File "/opt/venv/lib/python3.10/site-packages/vllm/config.py", line 501, in __init__\n'
           f'    raise RuntimeError("{msg}")\n'
           f"RuntimeError: {msg}\n")
    d, root = _root(log)
    assert root == "gpu_visibility"
    assert d.root_cause.rule == "serving-no-supported-device"


# -- JAX's PJRT plugin API version check (xla/pjrt/pjrt_api.cc) -------------------------------------------------------
def test_pjrt_plugin_api_version_mismatch_is_version_mismatch():
    _, root = _root("jaxlib.xla_extension.XlaRuntimeError: INVALID_ARGUMENT: Mismatched PJRT plugin PJRT API "
                    "version (0.47) and framework PJRT API version 0.40).\n")
    assert root == "version_mismatch"
    _, root = _root("RuntimeError: Unable to initialize backend 'cuda': FAILED_PRECONDITION: No visible GPU devices.\n")
    assert root != "version_mismatch"


# -- Markdown bold over the head of a line only -------------------------------------------------------------------
def test_bold_over_the_head_of_a_torchrun_failure_line_is_dropped():
    log = ("**ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 1 (pid: 4411) "
           "of binary:** /opt/venv/bin/python3\n")
    d, root = _root(log)
    assert root == "host_oom"
    # glog's "*** ... ***" banner is not emphasis
    d, root = _root("*** SIGTERM received at time=1700000000 on cpu 3 ***\n")
    assert root != "host_oom"
