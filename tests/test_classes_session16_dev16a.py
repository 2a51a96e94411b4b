"""Session 16 dev16a's class (docs/classes-session16-dev16a.md): a CUDA failure raised inside NCCL's shared-memory
transport helpers (include/shm.h shmOpen, misc/shmutils.cc, transport/shm.c*: cudaHostRegister /
cudaHostGetDevicePointer on the /dev/shm segment) is the SHM transport failing, not a generic CUDA fault; and NCCL
2.3's `.cu` file names of the transports count in the return-code trace table. Logs built here from NCCL's formats,
not copied from fixtures; each has a near miss that keeps its old answer."""
from __future__ import annotations

import pytest

from class_helpers import root as _root

_RING = ("nodeA:7619:7637 [2] NCCL INFO Ring 00 : 2[2] -> 1[1] via direct shared memory\n"
         "nodeA:7619:7637 [2] NCCL INFO Ring 00 : 2 -> 3 [send] via NET/Socket/0\n")


@pytest.mark.parametrize("file", ["include/shm.h:42", "misc/shmutils.cc:100", "transport/shm.cc:211"])
def test_cuda_failure_in_shm_helper_is_shm(file):
    d, rid = _root(_RING + f"nodeA:7619:7637 [2] {file} NCCL WARN Cuda failure 'invalid argument'\n")
    assert rid == "shm"


def test_nccl23_shm_trace_cu_file_is_shm():
    log = _RING + ("nodeA:7619:7637 [2] include/shm.h:42 NCCL WARN Cuda failure 'invalid argument'\n"
                   "nodeA:7619:7637 [2] NCCL INFO transport/shm.cu:187 -> 1\nnodeA:7619:7637 [2] NCCL INFO init.cu:658 -> 1\n")
    assert _root(log)[1] == "shm"


def test_cuda_failure_elsewhere_stays_cuda_error():
    # the same CUDA text from enqueue / transport.cc (not the shm helpers) keeps its generic reading
    d, rid = _root(_RING + "nodeA:7619:7637 [2] transport.cc:154 NCCL WARN Cuda failure 'invalid argument'\n")
    assert rid == "cuda_error"


def test_oom_in_shm_helper_stays_cuda_oom():
    d, rid = _root(_RING + "nodeA:7619:7637 [2] transport/shm.cc:211 NCCL WARN Cuda failure 'out of memory'\n")
    assert rid == "cuda_oom"


def test_healthy_shm_ring_is_no_failure():
    log = _RING + "nodeA:7619:7637 [2] NCCL INFO comm 0x7f8 rank 2 nranks 6 cudaDev 2 nvmlDev 2 - Init COMPLETE\n"
    assert _root(log)[1] is None
