"""Classes behind the misses of the real-job sets fixtures/blind_cpu1 (gloo CPU jobs) and fixtures/blind_h200e (H200
captures, JAX), docs/realjobs-classes.md. Each log is small and written from what PyTorch / gloo / XLA print (the texts
checked against torch 2.13's own files); the live test runs a real gloo torchrun job.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobs.jobkit import env, free_port, needs_torch, run_job, torchrun  # noqa: E402

from nccl_analyzer.analysis import analyze  # noqa: E402

_TEARDOWN = ("W1201 20:14:10.105000 21410 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 21413 "
             "closing signal SIGTERM\n"
             "E1201 20:14:10.137000 21410 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: {code}) "
             "local_rank: {lr} (pid: 21414) of binary: /usr/bin/python3\n")
_PEER_CLOSED = ("[rank{r}]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:547] Connection closed by "
                "peer [127.0.0.1]:60597\n")


def _diag(tmp_path: Path, text: str):
    log = tmp_path / "log.txt"
    log.write_text(text)
    return analyze([str(log)], workers=1)


def test_cpu_allocator_enomem_is_host_memory(tmp_path):
    """c10 alloc_cpu.cpp: DefaultCPUAllocator's ENOMEM (a memory cap, a full host) is host memory, not the program's
    own exception and not GPU memory."""
    d = _diag(tmp_path,
              "[rank1]: Traceback (most recent call last):\n"
              '[rank1]:   File "/srv/train.py", line 216, in hook\n'
              "[rank1]:     torch.empty(8 << 30, dtype=torch.uint8).fill_(0)\n"
              "[rank1]: RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
              "memory: you tried to allocate 8589934592 bytes. Error code 12 (Cannot allocate memory)\n"
              + _PEER_CLOSED.format(r=0) + _TEARDOWN.format(code=1, lr=1))
    rc = d.root_cause
    assert rc is not None and rc.id == "host_oom", rc
    assert rc.ranks == (1,)
    assert "8589934592 bytes" in rc.title


def test_all_to_all_split_sizes_are_invalid_usage(tmp_path):
    """c10d Utils.hpp checkSplitSizes: split sizes that do not add up to dim 0 are the caller's wrong arguments."""
    d = _diag(tmp_path,
              "[rank0]: Traceback (most recent call last):\n"
              '[rank0]:   File "/srv/train.py", line 156, in main\n'
              "[rank0]:     dist.all_to_all_single(out, inp, output_split_sizes=[12], input_split_sizes=[12])\n"
              '[rank0]:   File "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py", line 4829, in '
              "all_to_all_single\n"
              "[rank0]:     work = group.alltoall_base(\n"
              "[rank0]: RuntimeError: Split sizes doesn't match total dim 0 size\n"
              + _TEARDOWN.format(code=1, lr=0))
    rc = d.root_cause
    assert rc is not None and rc.id == "invalid_usage", rc
    assert rc.ranks == (0,)


_DDP_TB = (
    "[rank0]: Traceback (most recent call last):\n"
    '[rank0]:   File "/srv/train.py", line 149, in main\n'
    '[rank0]:     ddp(torch.randn(4, 16, device="cuda")).sum().backward()\n'
    '[rank0]:   File "/usr/lib/python3/site-packages/torch/nn/parallel/distributed.py", line 1598, in _pre_forward\n'
    "[rank0]:     moved_inputs, moved_kwargs = _to_kwargs(\n"
    '[rank0]:   File "/usr/lib/python3/site-packages/torch/distributed/utils.py", line 116, in to_map\n'
    "[rank0]:     stream = _get_stream(target_device)\n"
    '[rank0]:   File "{file}", line 174, in {func}\n'
    "[rank0]:     if _streams[device.index] is None:\n"
    "[rank0]: IndexError: list index out of range\n")


def test_ddp_device_past_the_visible_gpus_is_gpu_visibility(tmp_path):
    """torch/nn/parallel/_functions.py _get_stream indexes a list of device_count() streams: an IndexError raised in
    that frame is a device index no visible GPU has (DDP(device_ids=[n]) with n >= device_count())."""
    d = _diag(tmp_path, _DDP_TB.format(file="/usr/lib/python3/site-packages/torch/nn/parallel/_functions.py",
                                       func="_get_stream") + _TEARDOWN.format(code=1, lr=0))
    rc = d.root_cause
    assert rc is not None and rc.id == "gpu_visibility", rc
    assert rc.ranks == (0,)


def test_an_index_error_in_the_programs_own_frame_stays_the_programs(tmp_path):
    d = _diag(tmp_path, _DDP_TB.format(file="/srv/data.py", func="_get_stream") + _TEARDOWN.format(code=1, lr=0))
    assert d.root_cause is not None and d.root_cause.id == "app_exception", d.root_cause


_JAX = ("F1201 20:03:32.366977     477 client.h:86] Terminating process because the JAX distributed service detected "
        "fatal errors. This most likely indicates that another task died; see the other task logs for more details. "
        "absl::Status: DEADLINE_EXCEEDED: Deadline Exceeded\n\nRPC: /xla.coordination.CoordinationService/{rpc}\n"
        "=== Source Location Trace: === \n"
        "external/xla+/xla/pjrt/distributed/coordination/coordination_service_error_util.cc:64\n\n"
        "*** Check failure stack trace: ***\n"
        "    @     0x7fb6322d4d32  xla::CoordinationServiceAgent::Connect()\n")


def test_jax_register_task_failure_is_a_rendezvous_problem(tmp_path):
    """XLA's coordination-service client could not register (RegisterTask) with the coordinator: no rendezvous."""
    d = _diag(tmp_path, _JAX.format(rpc="RegisterTask"))
    rc = d.root_cause
    assert rc is not None and rc.id == "rendezvous_unreachable", rc
    assert rc.rule == "jax-coordinator-unreachable"


def test_jax_heartbeat_failure_is_not_the_rendezvous(tmp_path):
    d = _diag(tmp_path, _JAX.format(rpc="Heartbeat"))
    assert d.root_cause is None or d.root_cause.id != "rendezvous_unreachable", d.root_cause


_EXIT_MSG = ("epoch 0 step 3/8 loss 1.4524 lr 0.05\n"
             "ERROR: validation manifest /data/val/manifest.jsonl has 0 records for split 'val'\n"
             + _PEER_CLOSED.format(r=0) + _PEER_CLOSED.format(r=1))


def test_a_worker_that_stops_itself_after_an_error_message_is_the_application(tmp_path):
    """No traceback: the program printed why and called sys.exit(2); torchrun reports that worker's status."""
    d = _diag(tmp_path, _EXIT_MSG + _TEARDOWN.format(code=2, lr=2))
    rc = d.root_cause
    assert rc is not None and rc.id == "app_exception", rc
    assert rc.ranks == (2,)
    assert "validation manifest" in rc.title


def test_an_exit_after_an_error_message_that_aborts_at_teardown_is_the_application(tmp_path):
    """Seen live: sys.exit(2) without destroy_process_group, then std::terminate at interpreter exit
    ("terminate called without an active exception"): torchrun reports -6, the reason is still the message."""
    d = _diag(tmp_path, "ERROR: manifest /data/val.jsonl has 0 records\n"
                        "terminate called without an active exception\n"
              + _PEER_CLOSED.format(r=0) + _TEARDOWN.format(code=-6, lr=1))
    rc = d.root_cause
    assert rc is not None and rc.id == "app_exception", rc
    assert rc.ranks == (1,)


def test_an_error_message_before_a_signal_death_is_not_the_reason(tmp_path):
    d = _diag(tmp_path, _EXIT_MSG + _TEARDOWN.format(code=-9, lr=2))
    assert d.root_cause is not None and d.root_cause.rule != "elastic-child-exit-message", d.root_cause


def test_an_error_message_beside_the_workers_own_traceback_is_not_the_reason(tmp_path):
    """The worker raised: its traceback is the reason, the ERROR line is something else it printed."""
    d = _diag(tmp_path, "ERROR: could not reach the metrics server\n"
                        "[rank1]: Traceback (most recent call last):\n"
                        '[rank1]:   File "/srv/train.py", line 40, in load_batch\n'
                        "[rank1]:     return shards[idx]\n"
                        "[rank1]: IndexError: list index out of range\n" + _TEARDOWN.format(code=1, lr=1))
    assert d.root_cause is not None and d.root_cause.rule == "python-app-exception", d.root_cause
    assert not any(f.rule.startswith("elastic-child-exit-message") for f in d.findings), d.findings


def test_an_error_message_alone_is_no_failure(tmp_path):
    d = _diag(tmp_path, "ERROR: could not reach the metrics server, continuing without it\n"
                        "epoch 3 step 100 loss 0.21\nepoch 3 step 101 loss 0.20\n")
    assert d.root_cause is None, d.root_cause


def test_gloo_received_size_enforce_does_not_blame_the_receiver(tmp_path):
    """gloo pair.cc's size enforce fires on the rank that RECEIVED the other-sized message (it aborts): that rank is
    a victim, and the message names no sender."""
    d = _diag(tmp_path,
              "terminate called after throwing an instance of 'gloo::EnforceNotMet'\n"
              "  what():  [enforce fail at /pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:456] "
              "op.preamble.length <= op.nbytes. 44 vs 4. Received data size doesn't match expected size. Is there a "
              "distributed collective mismatch in your code?\n"
              + _PEER_CLOSED.format(r=1) + _PEER_CLOSED.format(r=2)
              + "E1201 20:12:15.450000 20756 torch/distributed/elastic/multiprocessing/api.py:1002] failed "
                "(exitcode: -6) local_rank: 0 (pid: 20759) of binary: /usr/bin/python3\n")
    rc = d.root_cause
    assert rc is not None and rc.id == "collective_mismatch", rc
    assert 0 not in rc.ranks
    assert "TORCH_DISTRIBUTED_DEBUG=DETAIL (ProcessGroupWrapper)" not in rc.explanation


_WORKER = '''
import os, sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(4)
dist.all_reduce(t)
if rank == 1:
    print("ERROR: manifest /data/val.jsonl has 0 records", file=sys.stderr, flush=True)
    sys.exit(2)
dist.all_reduce(t)
'''


@needs_torch
@pytest.mark.slow
def test_live_worker_exit_after_message_names_that_rank(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(_WORKER)
    out = run_job(torchrun(None, 2, free_port(), script=script), merged=False, cwd=tmp_path,
                  env=env(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1"))
    assert out.returncode != 0, out.stdout + out.stderr
    d = _diag(tmp_path, out.stdout + out.stderr)
    assert d.root_cause is not None and d.root_cause.id == "app_exception", (d.root_cause, out.stderr[-2000:])
    assert d.root_cause.ranks == (1,), d.root_cause.title
