"""The failure classes behind session 11's dev11b misses of fixtures/blind11h (docs/classes-session11b.md), each
written from the program's own message format in several phrasings and prefixes, plus the fixture itself: an RDMA
memory registration refused by the locked-memory limit (UCX), a GPU the driver can no longer reach (nvidia-smi /
NVML), a kernel library's own CUDA check ("CUDA Error: <string>"), and gloo's full-mesh connect ending with
"no error"."""
from __future__ import annotations

from pathlib import Path

import pytest

from nccl_analyzer.analysis import analyze, analyze_text

FIX = Path(__file__).resolve().parent.parent / "fixtures"


def _root(log: str):
    d = analyze_text(log)
    return d, (d.root_cause.id if d.root_cause else None)


def _fixture(name: str):
    d = analyze([str(FIX / name / "log.txt")])
    return d.root_cause.id if d.root_cause else None, (d.root_cause.rule if d.root_cause else None)


# -- RDMA memory registration refused by RLIMIT_MEMLOCK (UCX's ib_md.c advice, its failed verbs call) ----------------
_UCP = ["[gpu3:811] pml_ucx.c:309  Error: Failed to create UCP worker\n",
        "[1733200000.3] [gpu3:811:0]  ucp_worker.c:1750 Failed to create UCP context\n"]


@pytest.mark.parametrize("ucp", _UCP)
@pytest.mark.parametrize("head", [
    "[1733200000.1] [gpu3:811:0]  ib_md.c:293  UCX  ERROR ibv_reg_mr(address=0x7f0, length=4096, access=0xf) failed: "
    "Cannot allocate memory : Please set max locked memory (ulimit -l) to 'unlimited' (current: 64 kbytes)\n",
    "UCX  ERROR mlx5_1: mlx5dv_devx_umem_reg(size=65536 access=0x0) failed: Cannot allocate memory\n",
    "[rank2]: allocate memory : Please set max locked memory (ulimit -l) to 'unlimited' (current: 8192 kbytes)\n",
    "2024-05-01T10:00:00.000Z worker-1 UCX  ERROR ibv_reg_mr_iova2(address=0x1, length=8, access=0x1) failed: "
    "Bad address\n",
])
def test_rdma_registration_refused_is_ib_rdma(head, ucp):
    d, root = _root(head + ucp)
    assert root == "ib_rdma"
    assert d.root_cause.rule == "fabric-rdma-memlock"


def test_memlock_advice_alone_is_no_failure():
    # UCX prints it for a resource it then does without (public6 ucx8746: the benchmark ran)
    _, root = _root("[1668693503.4] [amp:11:0]  ib_log.c:246  UCX  ERROR mlx5_0: ibv_create_cq() failed: Cannot "
                    "allocate memory. Please set max locked memory (ulimit -l) to 'unlimited' (current: 64 kbytes)\n"
                    "# OSU MPI Broadcast Latency Test v6.1\n")
    assert root is None


def test_ucx_info_lines_are_no_failure():
    _, root = _root("[1733200000.1] [gpu3:811:0]  ucp_context.c:1969 UCX  INFO  Version 1.16.0\n"
                    "[1733200000.2] [gpu3:811:0]  parser.c:2036 UCX  INFO  UCX_* env variable: UCX_TLS=rc,sm\n")
    assert root is None


# -- nvidia-smi / NVML: a GPU the driver can no longer reach --------------------------------------------------------
@pytest.mark.parametrize("line", [
    "Unable to determine the device handle for GPU0000:03:00.0: Unknown Error",
    "Unable to determine the device handle for GPU 0000:3B:00.0: GPU is lost.  Reboot the system to recover this GPU",
    "[node12] Unable to determine the device handle for gpu 0000:89:00.0: Unknown Error",
])
def test_nvml_lost_gpu_is_cuda_error(line):
    d, root = _root("$ nvidia-smi\n" + line + "\n")
    assert root == "cuda_error"
    assert d.root_cause.rule == "torch-gpu-lost"


def test_nvml_permission_error_is_not_a_lost_gpu():
    d, root = _root("Unable to determine the device handle for GPU 0000:3B:00.0: Insufficient Permissions\n")
    assert all(f.rule != "torch-gpu-lost" for f in d.findings)
    assert root != "cuda_error"


# -- a kernel library's own CUDA check: "CUDA Error: <cudaGetErrorString> (<code>) <file>: line <n> at function ..." --
@pytest.mark.parametrize("log", [
    "CUDA Error: an illegal memory access was encountered (700) /opt/flashinfer/attention/prefill.cuh: line 2349 at "
    "function cudaLaunchKernel((void*)kernel, nblks, nthrs, args, smem_size, stream)\n",
    "[2025-04-22 15:12:46 TP1] CUDA Error: unspecified launch failure (719) /srv/ext/kernels.cu: line 88 at function "
    "cudaStreamSynchronize(stream)\n",
    "  CUDA Error: misaligned address (716) /srv/ext/gemm.cuh: line 12 at function cudaMemcpyAsync(dst, src, n, k, s)\n",
])
def test_library_cuda_check_is_cuda_error(log):
    d, root = _root(log)
    assert root == "cuda_error"
    assert d.root_cause.rule == "torch-library-cuda-check"


def test_library_cuda_check_out_of_memory_is_not_a_cuda_fault():
    d, root = _root("CUDA Error: out of memory (2) /srv/ext/alloc.h: line 40 at function cudaMalloc(&p, n)\n")
    assert root == "cuda_oom"
    assert all(f.rule != "torch-library-cuda-check" for f in d.findings)


# -- gloo's full-mesh connect ending with "no error" ----------------------------------------------------------------
@pytest.mark.parametrize("line", [
    "RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error",
    "[rank5]: RuntimeError: Gloo connectFullMesh failed with "
    "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:144] no error",
    "ERROR 05-29 04:08:22 worker_base.py:145] RuntimeError: Gloo connectFullMesh failed with "
    "[../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error",
    "[E1202 17:36:14.013148287 ProcessGroupGloo.cpp:67] Gloo connectFullMesh failed with "
    "[../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error",
])
def test_gloo_connect_no_error_is_socket_interface(line):
    d, root = _root(line + "\n")
    assert root == "socket_interface"
    assert d.root_cause.rule == "gloo-connect-no-error"


def test_gloo_connect_refused_keeps_its_reading():
    d, _ = _root("RuntimeError: Gloo connectFullMesh failed with [/pytorch/third_party/gloo/gloo/transport/tcp/"
                 "pair.cc:152] timed out connecting: SO_ERROR: Connection refused, remote=[127.0.0.1]:21399\n")
    assert all(f.rule != "gloo-connect-no-error" for f in d.findings)


# -- the development fixtures these classes fix ---------------------------------------------------------------------
@pytest.mark.parametrize("name,want,rule", [
    ("blind11h/mlperfauto664_ucx_memlock_container", "ib_rdma", "fabric-rdma-memlock"),
    ("blind11h/returnn1486_hang_gpu_unknown_error_pcie_aer", "cuda_error", "torch-gpu-lost"),
    ("blind11h/sglang5491_eagle_illegal_memory_access_flashinfer", "cuda_error", "torch-library-cuda-check"),
    ("blind11h/sglang3226_gloo_connectfullmesh_title_line", "socket_interface", "gloo-connect-no-error"),
])
def test_fixtures(name, want, rule):
    assert _fixture(name) == (want, rule)
