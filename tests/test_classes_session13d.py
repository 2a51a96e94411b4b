"""The failure classes behind the misses of the real H200 captures (blind_h200k .. blind_h200n) fixed in session 13 by
dev13d (docs/classes-session13d.md), on small synthetic logs written from the message formats, each with a near-miss
that must not move: NCCL's refusal of a sparse all_reduce, DistributedSampler's own rank check, torch.cuda's sync
debug mode "error", a rank whose own uncaught traceback says why it exited (never "peer exit" in a 1-rank job), and
the world size of a job whose NCCL communicators are all 1-rank subgroups."""
from __future__ import annotations

from nccl_analyzer.analysis import analyze_text

_ELASTIC = "torch/distributed/elastic/multiprocessing/api.py"


def _diag(log: str):
    d = analyze_text(log)
    return d, (d.root_cause.id if d.root_cause else None)


def _tb(rank: int, exc: str, frames: str = "") -> str:
    p = f"[rank{rank}]: "
    return (f"{p}Traceback (most recent call last):\n"
            f"{p}  File \"/srv/job/train.py\", line 40, in <module>\n"
            f"{p}    main()\n"
            + "".join(p + ln + "\n" for ln in frames.splitlines())
            + f"{p}{exc}\n")


def _failed(local_rank: int, pid: int, code: int = 1) -> str:
    return (f"E1204 10:00:05.100000 900 {_ELASTIC}:986] failed (exitcode: {code}) local_rank: {local_rank} "
            f"(pid: {pid}) of binary: /usr/bin/python3\n")


def _evidence_lines(d) -> list[int]:
    return [e.line for e in d.root_cause.evidence]


# -- 1. ProcessGroupNCCL::allreduce_sparse: NCCL has no sparse collectives ------------------------------------------
_SPARSE_FRAMES = ('  File "/srv/job/train.py", line 31, in sync_grads\n'
                  '    dist.all_reduce(emb.weight.grad)\n'
                  '  File "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py", line 3068, in '
                  'all_reduce\n'
                  '    work = group.allreduce([tensor], opts)')


def test_nccl_refusing_a_sparse_gradient_all_reduce_is_invalid_usage():
    log = _tb(0, "RuntimeError: NCCL does not support all_reduce with sparse tensors. Please use dense tensors "
                 "instead.", _SPARSE_FRAMES) + _failed(0, 4242)
    d, root = _diag(log)
    assert root == "invalid_usage", d.root_cause
    assert d.root_cause.rule == "torch-invalid-argument"
    assert d.root_cause.ranks == (0,)
    assert 8 in _evidence_lines(d)  # the exception line


def test_a_dense_all_reduce_of_a_1_rank_job_that_finishes_is_no_failure():
    log = ("trainer[0] step 0: all_reduce embedding grad layout=torch.strided\n"
           "trainer[0] step 1: all_reduce embedding grad layout=torch.strided\n"
           "trainer[0] done\n")
    assert _diag(log)[1] is None


# -- 2. DistributedSampler's own argument check is the program's data setup, no collective ------------------------
_SAMPLER_FRAMES = ('  File "/srv/job/data.py", line 12, in build_loader\n'
                   '    sampler = DistributedSampler(ds, num_replicas=cfg.dp_size, rank=rank)\n'
                   '  File "/usr/lib/python3/site-packages/torch/utils/data/distributed.py", line 84, in __init__\n'
                   '    raise ValueError(')


def test_distributed_sampler_rank_outside_its_num_replicas_is_app_exception():
    log = (_tb(3, "ValueError: Invalid rank 3, rank should be in the interval [0, 1]", _SAMPLER_FRAMES)
           + _failed(3, 5003))
    d, root = _diag(log)
    assert root == "app_exception", d.root_cause
    assert d.root_cause.ranks == (3,)
    assert 8 in _evidence_lines(d)


def test_distributed_sampler_check_with_a_two_digit_rank_is_app_exception_too():
    # the rule's "Invalid rank N" must not take "Invalid rank 1" of "Invalid rank 12, rank should be ..."
    log = _tb(12, "ValueError: Invalid rank 12, rank should be in the interval [0, 7]", _SAMPLER_FRAMES)
    assert _diag(log)[1] == "app_exception"


def test_a_collective_s_own_rank_checks_stay_invalid_usage():
    assert _diag(_tb(1, "RuntimeError: ProcessGroupGloo::broadcast: invalid root rank: 5"))[1] == "invalid_usage"
    assert _diag(_tb(2, "ValueError: Rank 8 is out of range. Valid ranks are 0 to 3"))[1] == "invalid_usage"


# -- 3. torch.cuda.set_sync_debug_mode("error") -----------------------------------------------------------------------
def test_sync_debug_mode_error_raising_is_app_exception_not_a_peer_exit():
    log = (_tb(0, "RuntimeError: called a synchronizing CUDA operation",
               '  File "/srv/job/train.py", line 77, in step\n    acc = (pred == y).float().mean().item()')
           + _failed(0, 4243))
    d, root = _diag(log)
    assert root == "app_exception", d.root_cause
    assert d.root_cause.rule == "python-cuda-sync-debug-error"
    assert d.root_cause.ranks == (0,)
    assert 6 in _evidence_lines(d)


def test_sync_debug_mode_warn_is_no_failure():
    log = ("/srv/job/train.py:77: UserWarning: called a synchronizing CUDA operation (Triggered internally at "
           "/pytorch/c10/cuda/CUDAFunctions.cpp:186.)\n"
           "  acc = (pred == y).float().mean().item()\n"
           "step 0 loss 0.41\nstep 1 loss 0.38\nstep 2 loss 0.35\ndone\n")
    assert _diag(log)[1] is None


# -- 4. a rank's own uncaught traceback says why it exited -----------------------------------------------------------
def test_the_only_rank_s_unrecognised_exception_is_that_exception_never_a_peer_exit():
    # one rank, an exception no rule knows whose message names NCCL: the job has no peer that could have exited
    log = _tb(0, "RuntimeError: NCCL backend cannot reduce a frobnicated tensor") + _failed(0, 4244)
    d, root = _diag(log)
    assert root is not None and root != "peer_exit", d.root_cause
    assert d.root_cause.ranks == (0,)
    assert 5 in _evidence_lines(d) or 1 in _evidence_lines(d)  # the traceback (header or exception line)


def test_a_worker_that_exited_with_no_traceback_is_still_elastic_child_failed():
    d, root = _diag("step 0 loss 0.4\n" + _failed(0, 4245))
    assert root == "peer_exit"
    assert d.root_cause.rule == "elastic-child-failed"


def test_another_rank_s_traceback_does_not_hide_a_rank_that_exited_silently():
    # rank 0's traceback cancels only rank 0's exit; rank 1 exited 1 with nothing printed: still found
    log = (_tb(0, "KeyError: 'labels'") + _failed(0, 5000)
           + f"E1204 10:00:05.200000 900 {_ELASTIC}:986] failed (exitcode: 1) local_rank: 1 (pid: 5001) of binary: "
             "/usr/bin/python3\n")
    d, _ = _diag(log)
    rules = {f.rule for f in d.findings}
    assert "elastic-child-failed" in rules
    ecf = next(f for f in d.findings if f.rule == "elastic-child-failed")
    assert 0 not in ecf.ranks


# -- 5. NCCL's 1-rank subgroups are not the world --------------------------------------------------------------------
def _init(pid: int, comm: str, state: str) -> str:
    return (f"vm:{pid}:{pid} [0] NCCL INFO ncclCommInitRankConfig comm {comm} rank 0 nranks 1 cudaDev 0 nvmlDev 0 "
            f"busId 60 commId 0x{pid:x}77 - Init {state}\n")


def _mixed_wait_timeout() -> str:
    # two ranks, a gloo default group over both and one 1-rank NCCL group per process (dist.new_subgroups); rank 0's
    # work.wait(timeout) expires because rank 1 is late
    return (_init(660, "0x2c04bfc0", "START") + _init(661, "0x1f87b0b0", "START")
            + _init(660, "0x2c04bfc0", "COMPLETE") + _init(661, "0x1f87b0b0", "COMPLETE")
            + "[rank0]: Traceback (most recent call last):\n"
              "[rank0]:   File \"/srv/job/train.py\", line 191, in main\n"
              "[rank0]:     w.wait(timeout=datetime.timedelta(seconds=5))\n"
              "[rank0]: RuntimeError: Operation timed out!\n"
            + f"W1204 10:00:54.798000 900 {_ELASTIC}:1012] Sending process 661 closing signal SIGTERM\n"
            + _failed(0, 660) + _report())


def _report() -> str:
    def entry(i: int, rank: int, code: int, pid: int, tb: str) -> str:
        return (f"[{i}]:\n  time      : 2026-12-04_10:00:54\n  host      : vm\n  rank      : {rank} (local_rank: {rank})\n"
                f"  exitcode  : {code} (pid: {pid})\n  error_file: <N/A>\n  traceback : {tb}\n")
    return ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n" + "=" * 60 + "\ntrain.py FAILED\n"
            + "-" * 60 + "\nFailures:\n" + entry(1, 1, -15, 661, "Signal 15 (SIGTERM) received by PID 661")
            + "-" * 60 + "\nRoot Cause (first observed failure):\n"
            + entry(0, 0, 1, 660, "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html")
            + "=" * 60 + "\n")


def test_work_wait_timeout_names_the_late_rank_when_nccl_groups_are_1_rank_subgroups():
    d, root = _diag(_mixed_wait_timeout())
    assert root == "watchdog_timeout", d.root_cause
    assert d.root_cause.ranks == (1,)
    assert d.job.world_size == 2


def test_a_1_rank_nccl_job_keeps_world_size_1():
    d, _ = _diag(_init(700, "0x1", "START") + _init(700, "0x1", "COMPLETE") + "step 0 loss 0.3\ndone\n")
    assert d.root_cause is None
    assert d.job.world_size == 1


def test_a_victim_s_exit_after_its_own_traceback_stays_a_listed_consequence():
    # rank 0 raises, rank 1 loses it in gloo and exits 1 with its own traceback: both exits are listed, as the
    # exceptions' consequences, and the explanation still names rank 1 a victim
    log = (_tb(0, "KeyError: 'labels'") + _failed(0, 5000)
           + _tb(1, "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:547] Connection closed by "
                    "peer [127.0.0.1]:53385")
           + f"E1204 10:00:05.200000 900 {_ELASTIC}:986] failed (exitcode: 1) local_rank: 1 (pid: 5001) of binary: "
             "/usr/bin/python3\n")
    d, root = _diag(log)
    assert root == "app_exception" and d.root_cause.ranks == (0,)
    own = [f for f in d.findings if f.rule == "elastic-child-failed-own-traceback"]
    assert own and {r for f in own for r in f.ranks} == {0, 1}
    assert all(f.rule != "elastic-child-failed" for f in d.findings)
    assert "Rank 1 then failed as a consequence" in d.root_cause.explanation


# -- review fix 4: with several torchrun agents (nodes), "local_rank: K" is no global rank --------------------------
def _agent_failed(agent: int, t: str, local_rank: int, pid: int) -> str:
    return (f"E1203 13:45:{t} {agent} {_ELASTIC}:869] failed (exitcode: 1) local_rank: {local_rank} (pid: {pid}) "
            "of binary: /usr/bin/python\n")


def test_a_global_rank_s_traceback_does_not_cancel_other_agents_local_rank_failures():
    # two agents (two nodes) each report local_rank 0; the [rank0]: traceback is global rank 0, of one of them: the
    # other node's first failure (agent 911, earlier, no traceback) stays (the start code cancelled both)
    log = (_tb(0, "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
                  "ProcessGroupNCCL.cpp:3356, remote process exited or there was a network error, NCCL version 2.21.5")
           + _agent_failed(497, "15.847000", 0, 648) + _agent_failed(911, "14.100000", 0, 1210))
    d, root = _diag(log)
    assert root == "peer_exit"
    lines = sorted(ln for f in d.findings for ln in (e.line for e in f.evidence))
    assert 5 in lines and 6 in lines
    assert any(f.rule == "elastic-child-failed" for f in d.findings)


def test_one_agent_s_local_rank_failure_is_still_cancelled_by_its_rank_s_traceback():
    # one agent (one node): local rank 0 is global rank 0; its traceback says why (a guard of the none_scope)
    d, _ = _diag(_tb(0, "KeyError: 'labels'") + _agent_failed(497, "15.847000", 0, 648))
    assert not any(f.rule == "elastic-child-failed" for f in d.findings)
