"""How many one-line pastes of a failure the analyzer answers "no failure" (issue 9 part 1, docs/classes-session6b.md).

Three groups, each line analyzed alone (no prefix, context or traceback): every NCCL 2.30.7 WARN call site's message
without its prefix (those the message table calls harmless or teardown in their file are left out: "no failure" is
right for them), CUDA / NCCL error strings as people quote them, and one-line errors of torch, torchelastic,
launchers, Ray and other frameworks (the lists below, written after their sources). Prints the count per group
and the lines answered "no failure"; run it on two commits to compare.

    python benchmarks/short_pastes.py [-v]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from nccl_analyzer.analysis import analyze_text  # noqa: E402
from nccl_analyzer.engine.loader import load_rules  # noqa: E402
from nccl_analyzer.messages import load_tables  # noqa: E402
from test_classification import REF, instantiate  # noqa: E402

CUDA_AND_NCCL_STRINGS = [
    'peer access is not supported between these two devices',
    'peer access is not supported between these two device',
    'an illegal memory access was encountered',
    'device-side assert triggered',
    'no kernel image is available for execution on the device',
    'uncorrectable ECC error encountered',
    'uncorrectable NVLink error detected during the execution',
    'unspecified launch failure',
    'misaligned address',
    'too many resources requested for launch',
    'the launch timed out and was terminated',
    'an illegal instruction was encountered',
    'invalid device function',
    'no CUDA-capable device is detected',
    'CUDA-capable device(s) is/are busy or unavailable',
    'all CUDA-capable devices are busy or unavailable',
    'system has unsupported display driver / cuda driver combination',
    'forward compatibility was attempted on non supported HW',
    'invalid device ordinal',
    'peer mapping resources exhausted',
    'device kernel image is invalid',
    'hardware stack error',
    'invalid program counter',
    'CUDA driver is a stub library',
    'operation not permitted when stream is capturing',
    'CUDA driver version is insufficient for CUDA runtime version',
    'the provided PTX was compiled with an unsupported toolchain.',
    'a PTX JIT compilation failed',
    'CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.56 GiB already allocated; 3.50 MiB free; 14.60 GiB reserved in total by PyTorch)',
    'CUDA out of memory. Tried to allocate 1.25 GiB. GPU 1 has a total capacity of 93.02 GiB of which 1.18 GiB is free.',
    'CUDA error: an illegal memory access was encountered',
    'CUDA error: out of memory',
    'CUDA error: device-side assert triggered',
    'CUDA error: peer access is not supported between these two devices',
    'RuntimeError: CUDA error: invalid device ordinal',
    'RuntimeError: CUDA error: no kernel image is available for execution on the device',
    'cudaErrorIllegalAddress: an illegal memory access was encountered',
    "Cuda failure 'peer access is not supported between these two devices'",
    "Cuda failure 217 'peer access is not supported between these two devices'",
    'CUDA_ERROR_ILLEGAL_ADDRESS',
    'unhandled cuda error',
    'unhandled system error',
    'internal error',
    'remote process exited or there was a network error',
    'unhandled cuda error (run with NCCL_DEBUG=INFO for details)',
    'unhandled system error (run with NCCL_DEBUG=INFO for details)',
    'internal error - please report this issue to the NCCL developers',
    'invalid usage (run with NCCL_DEBUG=WARN for details)',
    'invalid argument (run with NCCL_DEBUG=WARN for details)',
    'ncclUnhandledCudaError: Call to CUDA function failed.',
    'ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.',
    'ncclInternalError: Internal check failed.',
    'ncclInvalidUsage: This usually reflects invalid usage of NCCL library.',
    'ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.',
    'NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3',
    'NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5',
]

ONE_LINE_ERRORS = [
    'Watchdog caught collective operation timeout: WorkNCCL(SeqNum=880, OpType=BROADCAST, NumelIn=131137536, NumelOut=131137536, Timeout(ms)=1800000) ran for 1800648 milliseconds before timing out.',
    '[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600511 milliseconds before timing out.',
    'NCCL watchdog thread terminated with exception: [Rank 6] Watchdog caught collective operation timeout',
    'Heartbeat monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=2',
    "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued collectives.",
    'Timed out after 901 seconds waiting for clients. 1/2 clients joined.',
    'The client socket has timed out after 600000ms while trying to connect to (172.17.0.9, 46229).',
    'The server socket has failed to listen on any local network address. The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).',
    'Address already in use',
    'wait timeout after 600000ms, keys: /default_pg//0',
    'Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?',
    'Socket Timeout',
    'The connection to the C10d store has failed. See inner exception for details.',
    'Connection refused',
    'Connection reset by peer',
    'failed (exitcode: 1) local_rank: 0 (pid: 2113) of binary: /usr/bin/python3',
    'failed (exitcode: -9) local_rank: 0 (pid: 2113) of binary: /usr/bin/python3',
    'failed (exitcode: -11) local_rank: 3 (pid: 2113) of binary: /usr/bin/python3',
    'exitcode  : -9 (pid: 80751)',
    'Signal 9 (SIGKILL) received by PID 80751',
    'torch.distributed.elastic.multiprocessing.errors.ChildFailedError:',
    'ChildFailedError',
    '[default] Worker group FAILED. 3/3 attempts left; will restart worker group',
    'process 1 terminated with signal SIGKILL',
    'process 0 terminated with exit code 1',
    '-- Process 1 terminated with the following error:',
    'NCCL communicator was aborted on rank 2.  Original reason for failure was: [Rank 2] Watchdog caught collective operation timeout',
    'Detected mismatch between collectives on ranks. Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=1, OpType=ALLREDUCE, TensorShape=[1], TensorDtypes=Float, TensorDeviceTypes=TensorOptions(dtype=float)), but Rank 1 is running collective: CollectiveFingerPrint(SequenceNumber=1, OpType=BROADCAST)',
    'Default process group has not been initialized, please make sure to call init_process_group.',
    "Distributed package doesn't have NCCL built in",
    'ProcessGroupNCCL is only supported with GPUs, no GPUs found!',
    'Tensors must be CUDA and dense',
    'Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a000',
    'Bootstrap : no socket interface found',
    'NET/Socket : no interface found',
    'socketStartConnect: Connect to 10.0.0.2<43215> failed : No route to host',
    'Error while creating shared memory segment /dev/shm/nccl-JPV3xz (size 9637888)',
    "Failed to bind NVLink SHARP (NVLS) Multicast memory of size 1073741824 : CUDA error 801 'operation not supported'",
    'unhandled cuda error, NCCL version 2.19.3',
    'A worker died or was killed while executing a task by an unexpected system error. To troubleshoot the problem, check the logs for the dead worker.',
    'The actor died unexpectedly before finishing this task.',
    'ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.',
    'Worker 0 has failed.',
    'Task was killed due to the node running low on memory.',
    'Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file.',
    'The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR',
    'train.py: error: unrecognized arguments: --local-rank=1',
    'train.py: error: the following arguments are required: --data',
    "main.py: error: argument --lr: invalid float value: 'abc'",
    'Segmentation fault (core dumped)',
    'Killed',
    'Bus error (core dumped)',
    'Aborted (core dumped)',
    'Fatal Python error: Segmentation fault',
    "terminate called after throwing an instance of 'c10::DistBackendError'",
    "terminate called after throwing an instance of 'std::runtime_error'",
    'what():  NCCL error: unhandled system error',
    'RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1269, unhandled cuda error, NCCL version 2.14.3',
    'ValueError: host not found: Name or service not known',
    'RuntimeError: Address already in use',
    'RuntimeError: connect() timed out.',
    'RuntimeError: [/opt/conda/conda-bld/pytorch_1656352465323/work/third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.2]:60520',
    'RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation to complete',
    "torch.distributed.DistBackendError: [3] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got error: Connection reset by peer",
    'srun: error: node7: task 3: Exited with exit code 1',
    'slurmstepd: error: Detected 1 oom_kill event in StepId=123.0. Some of the step tasks have been OOM Killed.',
    'mpirun noticed that process rank 3 with PID 0 on node node7 exited on signal 9 (Killed).',
    'jaxlib.xla_extension.XlaRuntimeError: INTERNAL: external/xla/xla/service/gpu/nccl_utils.cc:297: NCCL operation ncclCommInitRank(&comm, nranks, id, rank) failed: unhandled cuda error',
    'XlaRuntimeError: INTERNAL: Failed to initialize NCCL',
    'cupy_backends.cuda.libs.nccl.NcclError: NCCL_ERROR_UNHANDLED_CUDA_ERROR: unhandled cuda error',
    'horovod.common.exceptions.HorovodInternalError: ncclCommInitRank failed: unhandled cuda error',
    'paddle.fluid.core_avx.ExternalError: Nccl error, unhandled system error',
    'ExternalError: NCCL error(2), unhandled system error.',
    'ncclCommInitRank failed: internal error',
    'CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.',
    'RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`',
    'CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, opb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)`',
    'torch.cuda.OutOfMemoryError: CUDA out of memory.',
    'OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB',
    'NCCL Error 2: unhandled system error',
    'NCCL WARN NET/IB : Got completion from peer 10.0.0.2<43215> with error 12, opcode 0, len 0, vendor err 129',
    'NET/IBP:Got completion from peer 7.6.13.83<36315> with status=12 opcode=32698 len=32696 vendor err 129 (Send)',
    'transport retry counter exceeded',
    'ibv_create_qp failed',
    'Failed to initialize any NET plugin',
    'undefined symbol: ncclCommRegister',
    'libnccl.so.2: cannot open shared object file: No such file or directory',
    'ImportError: libnccl.so.2: cannot open shared object file: No such file or directory',
    'OSError: libcudart.so.12: cannot open shared object file: No such file or directory',
]


def warn_bodies() -> list[str]:
    tables = load_tables()
    out = []
    with open(REF / "nccl_log_formats.jsonl", encoding="utf-8") as fh:
        for row in map(json.loads, fh):
            if row["level"] != "WARN":
                continue
            body = instantiate(row["fmt"]).strip().split("\n", 1)[0]
            m = tables.nccl_warn(row["file"].removeprefix("src/"), body)
            if body and not (m is not None and (m.harmless or m.teardown)):
                out.append(body)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    rules = load_rules()
    for name, lines in (("NCCL 2.30.7 WARN messages without prefix", warn_bodies()),
                        ("CUDA / NCCL error strings", CUDA_AND_NCCL_STRINGS),
                        ("one-line errors of torch, launchers, frameworks", ONE_LINE_ERRORS)):
        nulls = [ln for ln in lines if analyze_text(ln + "\n", rules=rules).root_cause is None]
        print(f"{name}: {len(nulls)} of {len(lines)} answered 'no failure'")
        if args.verbose:
            for ln in nulls:
                print(f"    {ln[:140]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
