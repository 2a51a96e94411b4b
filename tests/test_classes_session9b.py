"""Session 9 (dev9b): launcher and crash reports read as the culprit, not as a generic peer exit
(docs/classes-session9b.md). Each log is built from the format the tool prints (the source file is named beside
each test): Open MPI's / PRRTE's process reports, srun's task reports and slurmstepd's time limit, torchelastic's
ChildFailedError block with its lines glued together, Horovod's stall inspector."""
from __future__ import annotations

import pytest

from nccl_analyzer.analysis import analyze_text
from nccl_analyzer.export import iter_events

SEP = "-" * 74


def _root(log: str):
    d = analyze_text(log)
    return d.root_cause


def _child_entries(tmp_path, log: str) -> list:
    f = tmp_path / "log.txt"
    f.write_text(log)
    return [e for e in iter_events([str(f)], keep_text=False) if e.kind == "torch.elastic.child_failed"]


# -- Open MPI mpirun (orte/tools/orterun/help-orterun.txt [orterun:proc-aborted-strsignal], 1.x .. 4.x) -----------
@pytest.mark.parametrize("num,name,rule", [
    (11, "Segmentation fault", "crash-signal"),
    (6, "Aborted", "crash-abort"),
    (4, "Illegal instruction", "crash-signal"),
    (7, "Bus error", "crash-sigbus"),
])
def test_mpirun_signal_is_the_crash_on_that_rank(num, name, rule):
    log = (f"{SEP}\nPrimary job  terminated normally, but 1 process returned\n"
           f"a non-zero exit code. Per user-direction, the job has been aborted.\n{SEP}\n{SEP}\n"
           f"mpirun noticed that process rank 3 with PID 48121 on node gpu-07 exited on signal {num} ({name}).\n{SEP}\n")
    r = _root(log)
    assert r is not None and r.rule == rule
    assert r.id != "peer_exit"
    assert r.ranks == (3,)


def test_mpirun_signal_report_and_notice_name_the_rank():
    # opal/util/stacktrace.c's report ("[host:pid] Signal: ...") has no rank; mpirun's notice of the same PID has
    log = ("[gpu01:12345] *** Process received signal ***\n"
           "[gpu01:12345] Signal: Segmentation fault (11)\n"
           "[gpu01:12345] Signal code: Address not mapped (1)\n"
           "[gpu01:12345] [ 1] /usr/lib/libnccl.so.2(+0x5a3b1)[0x7f1b0c25a3b1]\n"
           "[gpu01:12345] *** End of error message ***\n"
           f"{SEP}\nmpirun noticed that process rank 3 with PID 12345 on node gpu01 exited on signal 11 "
           f"(Segmentation fault).\n{SEP}\n")
    r = _root(log)
    assert r.id == "other" and r.ranks == (3,)


# -- PRRTE prterun (Open MPI 5: src/docs/show-help-files/help-prun.txt, the text wrapped after "exited on") ----------
def test_prterun_wrapped_signal_report_is_read_whole():
    log = (f"{SEP}\nprterun noticed that process rank 2 with PID 4567 on node gpu02 exited on\n"
           f"signal 11 (Segmentation fault).\n{SEP}\n")
    r = _root(log)
    assert r is not None and r.rule == "crash-signal"
    assert r.ranks == (2,) and "SIGSEGV" in r.title


def test_prterun_wrapped_sigkill_says_oom_killer_or_scheduler():
    log = f"{SEP}\nprterun noticed that process rank 0 with PID 2231 on node gpu03 exited on\nsignal 9 (Killed).\n{SEP}\n"
    r = _root(log)
    assert r.rule == "launcher-task-killed" and r.id == "host_oom" and r.ranks == (0,)
    assert "host OOM killer or the scheduler" in r.title


def test_prterun_wrapped_sigterm_is_the_task_ending():
    log = f"prterun noticed that process rank 1 with PID 2231 on node gpu03 exited on\nsignal 15 (Terminated).\n"
    r = _root(log)
    assert r.rule == "launcher-task-exited" and r.ranks == (1,)
    assert "signal 15" in r.title


# -- mpirun's first non-zero exit ([orterun:non-zero-exit]; PRRTE [prun:non-zero-exit]) ----------------------------
def test_mpirun_first_nonzero_process_names_its_rank():
    log = (f"{SEP}\nPrimary job  terminated normally, but 1 process returned\n"
           f"a non-zero exit code. Per user-direction, the job has been aborted.\n{SEP}\n{SEP}\n"
           "mpirun detected that one or more processes exited with non-zero status, thus causing\n"
           "the job to be terminated. The first process to do so was:\n\n"
           f"  Process name: [[47061,1],3]\n  Exit code:    1\n{SEP}\n")
    r = _root(log)
    assert r.rule == "launcher-mpirun-first-nonzero" and r.id == "peer_exit" and r.ranks == (3,)


def test_mpirun_summary_alone_names_no_rank():
    r = _root("Primary job  terminated normally, but 1 process returned\n"
              "a non-zero exit code. Per user-direction, the job has been aborted.\n")
    assert r.id == "peer_exit" and r.rule != "launcher-mpirun-first-nonzero"


# -- srun (the task's strsignal() text, "(core dumped)" when it dumped core) ---------------------------------------
@pytest.mark.parametrize("what,rule", [
    ("Segmentation fault (core dumped)", "crash-signal"),
    ("Segmentation fault", "crash-signal"),
    ("Aborted (core dumped)", "crash-abort"),
    ("Illegal instruction", "crash-signal"),
])
def test_srun_task_signal_is_the_crash_on_that_rank(what, rule):
    log = (f"srun: error: gpu-a02: task 3: {what}\n"
           "srun: launch/slurm: _step_signal: Terminating StepId=4721.0\n"
           "srun: error: gpu-a01: tasks 0-1: Terminated\n")
    r = _root(log)
    assert r.rule == rule and r.ranks == (3,)
    assert r.id != "peer_exit"


def test_srun_task_exit_code_stays_the_task_exit():
    r = _root("srun: error: gpu-a02: task 3: Exited with exit code 1\n")
    assert r.rule == "launcher-task-exited" and r.ranks == (3,)


def test_srun_killed_with_oom_kill_events_is_the_oom_killer():
    log = ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=123456.0. Some of your processes may have been "
           "killed by the cgroup out-of-memory handler.\nsrun: error: gpu-a01: task 2: Killed\n")
    r = _root(log)
    assert r.rule == "launcher-task-killed-oom" and r.id == "host_oom" and r.ranks == (2,)


def test_srun_killed_without_oom_evidence_is_not_said_to_be_oom():
    r = _root("srun: error: gpu-a01: task 6: Killed\n")
    assert r.rule == "launcher-task-killed"
    assert "host OOM killer or the scheduler" in r.title


@pytest.mark.parametrize("line", [
    "slurmstepd: error: *** JOB 123456 ON gpu-a01 CANCELLED AT 2024-05-01T10:00:00 DUE TO TIME LIMIT ***",
    "slurmstepd: error: *** STEP 123456.0 ON gpu-a01 CANCELLED AT 2024-05-01T10:00:00 DUE TO TIME LIMIT ***",
    "srun: error: *** STEP 8812.0 CANCELLED AT 2019-03-02T11:20:01 DUE TO TIME LIMIT ***",
])
def test_slurm_time_limit_is_named(line):
    r = _root(f"{line}\nsrun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n"
              "srun: error: gpu-a01: tasks 0-7: Terminated\n")
    assert r.rule == "launcher-slurm-time-limit" and r.id == "other"
    assert "time limit" in r.title


def test_slurm_cancel_by_hand_is_no_time_limit():
    r = _root("slurmstepd: error: *** JOB 123456 ON gpu-a01 CANCELLED AT 2024-05-01T10:00:00 ***\n")
    assert r is None or r.rule != "launcher-slurm-time-limit"


# -- torchelastic's ChildFailedError (torch/distributed/elastic/multiprocessing/errors/__init__.py) glued ------------
_EQ, _DASH = "=" * 60, "-" * 60


def test_child_failed_fields_glued_on_one_line():
    log = (f"torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n{_EQ}\ntrain.py FAILED\n{_DASH}\n"
           f"Failures:\n  <NO_OTHER_FAILURES>\n{_DASH}\nRoot Cause (first observed failure):\n[0]:\n"
           "  time      : 2024-05-01_10:00:00\n  host      : gpu-a01\n"
           "  rank      : 3 (local_rank: 3)  exitcode  : -11 (pid: 123)\n"
           f"  error_file: <N/A>\n  traceback : Signal 11 (SIGSEGV) received by PID 123\n{_EQ}\n")
    r = _root(log)
    assert r.rule == "crash-signal" and r.ranks == (3,)


def test_child_failed_block_on_the_exception_line():
    log = (f"torch.distributed.elastic.multiprocessing.errors.ChildFailedError: {_EQ} train.py FAILED {_DASH} "
           f"Failures:   <NO_OTHER_FAILURES> {_DASH} Root Cause (first observed failure): [0]:   time      : "
           "2024-05-01_10:00:00   host      : gpu-a01   rank      : 3 (local_rank: 3)   exitcode  : -11 (pid: 123)"
           f"   error_file: <N/A>   traceback : Signal 11 (SIGSEGV) received by PID 123 {_EQ}\n")
    r = _root(log)
    assert r.rule == "crash-signal" and r.ranks == (3,)


def test_child_failed_failures_table_collapsed(tmp_path):
    log = (f"torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n{_EQ}\ntrain.py FAILED\n{_DASH}\n"
           "Failures:\n[1]:  time      : 2024-05-01_10:00:00  host      : gpu-a01  rank      : 1 (local_rank: 1)  "
           "exitcode  : -15 (pid: 124)  error_file: <N/A>  traceback : Signal 15 (SIGTERM) received by PID 124\n"
           f"{_DASH}\nRoot Cause (first observed failure):\n[0]:\n  time      : 2024-05-01_10:00:00  host      : gpu-a01\n"
           "  rank      : 3 (local_rank: 3)  exitcode  : 1 (pid: 123)\n"
           "  error_file: <N/A>  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
           f"{_EQ}\n")
    d = analyze_text(log)
    assert d.root_cause.rule == "elastic-child-failed" and d.root_cause.ranks == (3,)
    entries = _child_entries(tmp_path, log)  # both sections' entries
    assert sorted((e.rank, e.fields.get("exitcode")) for e in entries) == [(1, -15), (3, 1)]


def test_child_failed_glued_keeps_its_traceback_text_whole(tmp_path):
    # a field key inside the traceback value ("host: ...") is the value's text, not a new field
    log = ("Root Cause (first observed failure):\n[0]:\n  time      : 2024-05-01_10:00:00  host      : gpu-a01  "
           "rank      : 2 (local_rank: 2)  exitcode  : 1 (pid: 77)  error_file: /tmp/e.json  "
           "traceback : RuntimeError: cannot reach host : store-0\n")
    (e,) = _child_entries(tmp_path, log)
    assert e.rank == 2 and e.host == "gpu-a01"
    assert e.fields["traceback"] == "RuntimeError: cannot reach host : store-0"


# -- Horovod (horovod/common/stall_inspector.cc, common.h SHUT_DOWN_ERROR) ------------------------------------------
_STALL = ("[2024-03-02 10:11:12.000000: {lvl} horovod/common/stall_inspector.cc:107] One or more tensors were submitted "
          "to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of ranks for more "
          "than 60 seconds. This may indicate that different ranks are trying to submit different tensors or that "
          "only subset of ranks is submitting tensors, which will cause deadlock.\nMissing ranks:\n{rank}: "
          "[DistributedAdam_Allreduce/HorovodAllreduce_grads_0]\n")
_SHUT = ("tensorflow.python.framework.errors_impl.UnknownError: Horovod has been shut down. This was caused by an "
         "exception on one of the ranks or an attempt to allreduce, allgather or broadcast a tensor after one of the "
         "ranks finished execution. If the shutdown was caused by an exception, you should see the exception in the "
         "log before the first shutdown message.\n")


def test_horovod_stall_shutdown_is_the_cause_of_the_shut_down_errors():
    log = (_STALL.format(lvl="E", rank="3!") + 'One or more rank (marked by "!") is stalled for longer than 120 '
           "seconds. Will shutdown.\n" + _SHUT)
    r = _root(log)
    assert r.rule == "hang-horovod-stall-shutdown" and r.id == "watchdog_timeout"
    assert "120" in r.title


def test_horovod_stall_warning_alone_stays_healthy():
    assert _root(_STALL.format(lvl="W", rank="3")) is None


def test_horovod_shut_down_alone_stays_peer_exit():
    assert _root(_SHUT).id == "peer_exit"
