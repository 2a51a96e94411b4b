"""The failure classes behind the misses of the development sets fixtures/blind10h and fixtures/blind10 fixed in
session 11 (docs/classes-session11a.md), each from what the program that prints the text does, with small logs in
the real formats (several prefixes and versions) plus the public fixture: DeepSpeed's launcher killing its workers
after one died without a word, JAX's RegisterTask failure in TSL's gRPC status form, the NCCL examples' NCCLCHECK
line, and a traceback cut while its rank waited in a barrier."""
from __future__ import annotations

from pathlib import Path

import pytest

from nccl_analyzer.analysis import analyze, analyze_text

FIX = Path(__file__).resolve().parent.parent / "fixtures"


def _root(log: str):
    d = analyze_text(log)
    return d, (d.root_cause.id if d.root_cause else None)


def _file_root(tmp_path, log: str):
    """Through a file, as the CLI reads it (a pasted, indented log is recognised as a paste there)."""
    f = tmp_path / "log.txt"
    f.write_text(log)
    d = analyze([str(f)])
    return d, (d.root_cause.id if d.root_cause else None)


def _fixture_root(rel: str):
    d = analyze([str(FIX / rel / "log.txt")])
    return d, (d.root_cause.id if d.root_cause else None)


# -- 1. DeepSpeed's launcher (launch.py sigkill_handler) kills its workers after one died silently -----------------
@pytest.mark.parametrize("lines", [
    # DeepSpeed 0.14 (launch.py:315), one worker
    ["[2024-01-22 16:50:44,316] [INFO] [utils.py:799:see_memory_usage] CPU Virtual Memory: used = 26.4 GB, percent = 84.6%",
     "[2024-01-22 16:50:49,553] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 1080504"],
    # DeepSpeed 0.6 (launch.py:178), two workers, after a checkpoint load
    ["[2022-05-15 00:12:51,292] [INFO] [engine.py:2754:_get_all_zero_checkpoint_state_dicts] successfully read 2 ZeRO state_dicts for rank 0",
     "[2022-05-15 00:12:57,785] [INFO] [launch.py:178:sigkill_handler] Killing subprocess 97277",
     "[2022-05-15 00:12:57,786] [INFO] [launch.py:178:sigkill_handler] Killing subprocess 97278"],
    # torchrun-style rank prefix and an indented paste
    ["[rank0]:[2023-04-14 13:11:27,879] [INFO] [launch.py:428:sigkill_handler] Killing subprocess 13266"],
    ["    [2023-04-14 13:11:27,879] [INFO] [launch.py:428:sigkill_handler] Killing subprocess 13266",
     "    [2023-04-14 13:11:27,880] [INFO] [launch.py:428:sigkill_handler] Killing subprocess 13267"],
])
def test_deepspeed_launcher_kill_without_worker_error_is_host_oom(lines, tmp_path):
    d, root = _file_root(tmp_path, "\n".join(lines) + "\n")
    assert root == "host_oom"
    assert d.root_cause.rule == "launcher-deepspeed-kill-silent"


def test_deepspeed_launcher_kill_after_a_traceback_is_the_traceback():
    log = ("Traceback (most recent call last):\n"
           '  File "train.py", line 12, in <module>\n'
           "    main()\n"
           "ValueError: bad batch size\n"
           "[2023-04-14 13:11:27,879] [INFO] [launch.py:428:sigkill_handler] Killing subprocess 13266\n")
    d, root = _root(log)
    assert root == "app_exception"
    assert d.root_cause.rule != "launcher-deepspeed-kill-silent"


def test_deepspeed_launcher_kill_with_return_code_line_defers_to_it():
    log = ("[2024-01-22 16:50:49,553] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 1080504\n"
           "[2024-01-22 16:50:49,555] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', "
           "'--local_rank=0'] exits with return code = 1\n")
    d, root = _root(log)
    assert root == "peer_exit"
    assert d.root_cause.rule != "launcher-deepspeed-kill-silent"


def test_deepspeed_launcher_itself_interrupted_is_not_host_oom():
    log = ("[2023-04-14 13:11:27,879] [INFO] [launch.py:428:sigkill_handler] Killing subprocess 13266\n"
           "[2023-04-14 13:11:27,880] [INFO] [launch.py:437:sigkill_handler] Main process received SIGINT, exiting\n")
    d, root = _root(log)
    assert root != "host_oom"


@pytest.mark.parametrize("rel", ["blind10h/deepspeed4571_offload_cpu_memory_killing_subprocess",
                                 "blind10/deepspeed1956_resume_checkpoint_zero_state_killing_subprocess"])
def test_deepspeed_kill_fixtures(rel):
    _, root = _fixture_root(rel)
    assert root == "host_oom"


# -- 2. JAX: RegisterTask failing, in TSL's gRPC status form -------------------------------------------------------
@pytest.mark.parametrize("prefix", ["", "> ", "    "])
@pytest.mark.parametrize("service,target", [
    ("tensorflow.CoordinationService", "unknown_target_for_coordination_leader"),
    ("xla.coordination.CoordinationService", "coordination_service"),
])
def test_register_task_grpc_form_is_rendezvous_unreachable(prefix, service, target):
    log = (f"{prefix}Additional GRPC error information from remote target {target} while calling /{service}/RegisterTask:\n"
           f'{prefix}:{{"created":"@1712965181.656280441","description":"Deadline Exceeded","grpc_status":4}}\n'
           f"{prefix}2024-04-12 23:39:41.656900: E external/xla/xla/pjrt/distributed/client.cc:96] Coordination service "
           "agent in error status: DEADLINE_EXCEEDED: Deadline Exceeded\n")
    d, root = _root(log)
    assert root == "rendezvous_unreachable"
    assert d.root_cause.rule == "jax-coordinator-unreachable"


def test_grpc_form_of_a_later_rpc_is_not_the_rendezvous():
    log = ("W0826 01:39:27.598081 2064395 pjrt_client.cc:1604] WatchJobStateAsync failed for task 0: CANCELLED: CANCELLED\n"
           "Additional GRPC error information from remote target coordination_service while calling "
           "/tensorflow.CoordinationService/WatchJobState:\n")
    _, root = _root(log)
    assert root != "rendezvous_unreachable"


def test_register_task_fixture():
    _, root = _fixture_root("blind10h/paxml77_1024_gpus_register_task_deadline_exceeded_quoted")
    assert root == "rendezvous_unreachable"


# -- 3. The NCCL examples' NCCLCHECK: "Failed, NCCL error <file>:<line> '<ncclGetErrorString>'" --------------------
@pytest.mark.parametrize("line,want", [
    ("Failed, NCCL error TransformerEngine/transformer_engine/pytorch/csrc/userbuffers/userbuffers-host.cpp:223 ''", "other"),
    ("Failed, NCCL error src/main.cu:88 'unhandled cuda error'", "cuda_error"),
    ("[rank3]: Failed, NCCL error allreduce.cu:41 'invalid usage'", "invalid_usage"),
    ("  Failed, NCCL error /opt/app/comm.cpp:120 'internal error'", "other"),
])
def test_ncclcheck_line_is_a_failure(line, want):
    _, root = _root("Starting the communicators\n" + line + "\n")
    assert root == want


def test_ncclcheck_fixture_is_not_no_failure():
    # label invalid_usage (a TE maintainer: userbuffers assumes TP size == world size); the log says only that an
    # NCCL call in userbuffers failed with an empty result string
    _, root = _fixture_root("blind10h/te994_userbuffers_tp_overlap_tp4_world8_nccl_error")
    assert root is not None


# -- 4. A traceback cut while its rank waited in a barrier ---------------------------------------------------------
_CUT_IN_MAIN_PROCESS_FIRST = (
    '  File "run_clm.py", line 414, in main\n'
    '    with training_args.main_process_first(desc="dataset map tokenization"):\n'
    '  File "/usr/lib/python3.8/contextlib.py", line 113, in __enter__\n'
    "    return next(self.gen)\n")


@pytest.mark.parametrize("log", [
    "Traceback (most recent call last):\n" + _CUT_IN_MAIN_PROCESS_FIRST,
    "[rank1]: Traceback (most recent call last):\n" + "".join("[rank1]: " + l + "\n" for l in _CUT_IN_MAIN_PROCESS_FIRST.splitlines()),
    ("Traceback (most recent call last):\n"
     '  File "train.py", line 80, in <module>\n'
     "    accelerator.wait_for_everyone()\n"
     '  File "/usr/lib/python3/site-packages/accelerate/accelerator.py", line 2301, in wait_for_everyone\n'
     "    wait_for_everyone()\n"),
    ("Traceback (most recent call last):\n"
     '  File "train.py", line 31, in <module>\n'
     "    torch.distributed.barrier()\n"),
])
def test_traceback_cut_in_barrier_is_watchdog(log):
    _, root = _root(log)
    assert root == "watchdog_timeout"


def test_traceback_cut_elsewhere_stays_other():
    log = ("Traceback (most recent call last):\n"
           '  File "train.py", line 31, in <module>\n'
           "    model = build_model(cfg)\n")
    _, root = _root(log)
    assert root == "other"


def test_barrier_fixture():
    _, root = _fixture_root("blind10h/transformers17106_main_process_first_tokenization_ranks_waiting_interleaved")
    assert root == "watchdog_timeout"


@pytest.mark.parametrize("first,want", [
    ("Bus error (core dumped)", "shm"),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "cuda_error"),
])
def test_deepspeed_launcher_kill_after_a_crash_is_the_crash(first, want):
    d, root = _root(first + "\n[2023-04-14 13:11:27,879] [INFO] [launch.py:428:sigkill_handler] Killing subprocess 13266\n")
    assert root == want
    assert d.root_cause.rule != "launcher-deepspeed-kill-silent"
