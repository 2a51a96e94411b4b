"""The failure classes behind the misses of the sets released in session 9 (fixtures/blind8h, blind9h, blind_h200i)
and public6 (docs/classes-session9a.md), each from what NCCL / PyTorch / the tool that prints the text does, with
small logs written for the test in the real formats: CUDA failures of NCCL's P2P transport, NCCL's kernel lookup
failing without a file:line, the custom all-reduce's CUDACHECK quoted without "Failed: ", a launch script's
resolver failing on the master's name, torch.distributed's own argument checks, init_process_group's device_id
range check, a traceback cut at torch.cuda.set_device, NVML not seeing a GPU NCCL puts on the node."""
from __future__ import annotations

import pytest

from nccl_analyzer.analysis import analyze_text


def _root(log: str):
    d = analyze_text(log)
    return d, (d.root_cause.id if d.root_cause else None)


# -- 1. CUDA failures of NCCL's P2P transport (src/transport/p2p.cc) -----------------------------------------------
@pytest.mark.parametrize("warn", [
    "[2025-06-11 08:14:02] gpu07:2201:2260 [1] transport/p2p.cc:402 NCCL WARN Cuda failure 1 'invalid argument'",
    "gpu07:2201:2260 [1] transport/p2p.cc:289 NCCL WARN Cuda failure 'invalid device pointer'",
])
def test_p2p_transport_cuda_failure_is_p2p(warn):
    log = ("\n" + warn + "\n"
           "gpu07:2201:2260 [1] NCCL INFO init.cc:262 -> 1\n"
           "\n"
           "gpu07:2201:2260 [1] init.cc:2057 NCCL WARN commReclaim: cleanup comm 0x55aa rank 1 failed in destroy/abort, "
           "error 1\n")
    d, root = _root(log)
    assert root == "p2p_ipc"
    assert d.root_cause.rule == "nccl-p2p-transport-cuda-failure"
    assert "NCCL_P2P_DISABLE" in d.root_cause.fix.summary


def test_p2p_transport_sticky_fault_stays_cuda_error():
    log = "\ngpu07:2201:2260 [1] transport/p2p.cc:289 NCCL WARN Cuda failure 'an illegal memory access was encountered'\n"
    _, root = _root(log)
    assert root == "cuda_error"


def test_cuda_failure_of_another_nccl_file_is_not_p2p():
    log = "\ngpu07:2201:2260 [1] misc/strongstream.cc:110 NCCL WARN Cuda failure 1 'invalid argument'\n"
    _, root = _root(log)
    assert root != "p2p_ipc"


# -- 2. NCCL's kernel lookup failing, printed without a file:line --------------------------------------------------
def test_named_symbol_without_file_is_arch_missing():
    log = ("RuntimeError: NCCL Error 1: unhandled cuda error\n"
           "\n"
           "box9:7001:7001 [0] NCCL WARN Cuda failure 'named symbol not found'\n"
           "box9:7001:7001 [0] NCCL INFO Bootstrap : Using eth0:172.17.0.3<0>\n"
           "NCCL version 2.14.3+cuda11.8\n")
    d, root = _root(log)
    assert root == "version_mismatch"
    assert d.root_cause.rule == "nccl-kernel-arch-missing"


def test_driver_api_named_symbol_without_file_is_not_arch_missing():
    # cudawrap.h's CUCHECK form (with the error number) is a driver call, not the kernel lookup
    log = "\nbox9:7001:7001 [0] NCCL WARN Cuda failure 500 'named symbol not found'\n"
    d, _ = _root(log)
    assert d.root_cause is None or d.root_cause.rule != "nccl-kernel-arch-missing"


# -- 3. the custom all-reduce's CUDACHECK quoted without "Failed: " ------------------------------------------------
def test_custom_allreduce_message_without_failed_prefix_is_p2p():
    d, root = _root("Cuda error /opt/vllm/csrc/custom_all_reduce.cuh:143 'invalid resource handle'\n")
    assert root == "p2p_ipc"
    assert d.root_cause.rule == "serving-custom-allreduce-ipc"


def test_generic_cudacheck_without_failed_prefix_is_an_error_line():
    # another extension's CUDACHECK text without the prefix was not an error line at all before
    _, root = _root("Cuda error /src/kernels/topk.cu:52 'an illegal memory access was encountered'\n")
    assert root == "cuda_error"


# -- 4. a launch script's resolver cannot resolve the master's name -------------------------------------------------
_TORCHRUN_CUT = (
    "Traceback (most recent call last):\n"
    '  File "/opt/env/bin/torchrun", line 8, in <module>\n'
    "    sys.exit(main())\n"
    '  File "/opt/env/lib/python3.11/site-packages/torch/distributed/run.py", line 892, in run\n'
    "    elastic_launch(\n"
    '  File "/opt/env/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 268, in launch_agent\n'
    "    result = agent.run()\n")


@pytest.mark.parametrize("line", [
    "nslookup: can't resolve 'pjob-4c1-master-0': Name does not resolve",
    "** server can't find pjob-4c1-master-0: NXDOMAIN",
    "ping: pjob-4c1-master-0: Name or service not known",
])
def test_master_name_unresolved_is_rendezvous_unreachable(line):
    d, root = _root(line + "\nwaiting for master\n\n" + _TORCHRUN_CUT)
    assert root == "rendezvous_unreachable"
    assert d.root_cause.rule == "launcher-host-name-unresolved"


def test_name_that_resolved_later_is_no_failure():
    log = ("nslookup: can't resolve 'pjob-4c1-master-0': Name does not resolve\n"
           "waiting for master\n"
           "[I1202 10:00:00.473372963 ProcessGroupNCCL.cpp:988] [PG ID 0 PG GUID 0 Rank 1] ProcessGroupNCCL "
           "initialization options: size: 2, global rank: 1, TIMEOUT(ms): 600000, USE_HIGH_PRIORITY_STREAM: 0, "
           "SPLIT_FROM: 0, SPLIT_COLOR: -2, PG Name: 0\n"
           "step 1 loss 2.31\n")
    _, root = _root(log)
    assert root is None


# -- 5. torch.distributed's own argument checks (distributed_c10d.py ValueError / TypeError) -----------------------
def test_c10d_argument_check_is_invalid_usage():
    log = ("[rank0]: Traceback (most recent call last):\n"
           '[rank0]:   File "/srv/job/model.py", line 77, in init_parallel\n'
           "[rank0]:     tp = dist.new_group(ranks)\n"
           '[rank0]:   File "/usr/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py", line 5510, in '
           "_new_group_with_tag\n"
           "[rank0]:     raise ValueError(\n"
           "[rank0]: ValueError: the new group's world size should be less or equal to the world size set by "
           "init_process_group\n")
    d, root = _root(log)
    assert root == "invalid_usage"
    assert d.root_cause.rule == "torch-c10d-argument-check"
    assert 0 in d.root_cause.ranks


def test_value_error_of_the_program_stays_app_exception():
    log = ("[rank0]: Traceback (most recent call last):\n"
           '[rank0]:   File "/srv/job/model.py", line 77, in init_parallel\n'
           "[rank0]:     tp_size = int(cfg['tp'])\n"
           "[rank0]: ValueError: invalid literal for int() with base 10: 'auto'\n")
    _, root = _root(log)
    assert root == "app_exception"


# -- 6. init_process_group(device_id=...) beyond the visible GPUs --------------------------------------------------
def test_device_id_out_of_range_is_gpu_visibility():
    log = ("Traceback (most recent call last):\n"
           '  File "/srv/job/train.py", line 30, in main\n'
           '    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))\n'
           '  File "/usr/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py", line 1763, in '
           "init_process_group\n"
           "    raise ValueError(\n"
           "ValueError: device_id cuda:2 is out of range. Please use a device index less than the number of "
           "accelerators available: 2.\n")
    d, root = _root(log)
    assert root == "gpu_visibility"
    assert d.root_cause.rule == "torch-device-id-out-of-range"


# -- 7. a traceback cut at torch.cuda.set_device -------------------------------------------------------------------
def test_cut_traceback_at_set_device_is_gpu_visibility():
    log = ("[rank7]: Traceback (most recent call last):\n"
           '[rank7]:   File "/srv/job/train.py", line 200, in <module>\n'
           "[rank7]:     main()\n"
           '[rank7]:   File "/srv/job/utils/dist.py", line 18, in init_device\n'
           "[rank7]:     torch.cuda.set_device(local_rank)\n")
    d, root = _root(log)
    assert root == "gpu_visibility"
    assert d.root_cause.rule == "torch-set-device-cut"
    assert d.root_cause.ranks == (7,)


def test_cut_traceback_elsewhere_is_not_gpu_visibility():
    log = ("[rank7]: Traceback (most recent call last):\n"
           '[rank7]:   File "/srv/job/train.py", line 200, in <module>\n'
           "[rank7]:     main()\n"
           '[rank7]:   File "/srv/job/utils/dist.py", line 18, in init_device\n'
           "[rank7]:     model = build(cfg)\n")
    _, root = _root(log)
    assert root != "gpu_visibility"


# -- 8. NVML does not see a GPU NCCL puts on this node -------------------------------------------------------------
def test_nvml_gpu_not_found_is_gpu_visibility():
    log = ("\nhostq:610:702 [1] misc/nvmlwrap.cc:187 NCCL WARN nvmlDeviceGetHandleByPciBusId() failed: Not Found\n"
           "hostq:610:702 [1] NCCL INFO graph/xml.cc:850 -> 2\n"
           "hostq:610:702 [1] NCCL INFO graph/topo.cc:696 -> 2\n"
           "hostq:610:702 [1] NCCL INFO init.cc:1012 -> 2\n")
    d, root = _root(log)
    assert root == "gpu_visibility"
    assert d.root_cause.rule == "nccl-nvml-gpu-not-found"


# -- 9. the same handler printing the same caught exception again (a retry loop) -----------------------------------
def _handled_tb(n: int) -> str:
    return (f"2026-01-05 10:00:0{n},100 ERROR [rank1] telemetry: push failed (try {n}), retrying\n"
            "Traceback (most recent call last):\n"
            '  File "/srv/job/telemetry.py", line 41, in push\n'
            '    requests.post(URL, json=payload, timeout=1)\n'
            '  File "/srv/job/telemetry.py", line 12, in post\n'
            "    raise ConnectionRefusedError(111, 'Connection refused')\n"
            "ConnectionRefusedError: [Errno 111] Connection refused\n")


def test_repeated_handled_traceback_of_a_retry_loop_is_no_failure():
    steps = "".join(f"2026-01-05 10:00:05,{i:03d} INFO [rank0] train: step {i} loss 0.{i}1\n" for i in range(6))
    log = _handled_tb(1) + steps + _handled_tb(2) + "2026-01-05 10:00:09,000 WARNING [rank1] telemetry: giving up\n"
    _, root = _root(log)
    assert root is None


def test_same_exception_escaping_after_the_handled_one_stays_a_failure():
    steps = "".join(f"2026-01-05 10:00:05,{i:03d} INFO [rank0] train: step {i} loss 0.{i}1\n" for i in range(6))
    escaped = ("Traceback (most recent call last):\n"
               '  File "/srv/job/main.py", line 90, in <module>\n'
               "    run()\n"
               '  File "/srv/job/telemetry.py", line 12, in post\n'
               "    raise ConnectionRefusedError(111, 'Connection refused')\n"
               "ConnectionRefusedError: [Errno 111] Connection refused\n")
    _, root = _root(_handled_tb(1) + steps + escaped)
    assert root is not None
