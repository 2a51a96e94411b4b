"""Classes found on the development set fixtures/healthy7 (issue 9 §4-§5): the culprit of a console-only torchrun
log, a runner's stream tag before every line, NCCL WARNs after which NCCL carries on. Each log here is written for
the test (or produced by a real gloo job), not copied from a fixture."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nccl_analyzer.analysis import analyze, analyze_text
from nccl_analyzer.engine.loader import load_rules

from jobs.jobkit import ROOT, env, free_port, needs_torch, run_job, torchrun

RULES = load_rules()

# torch >= 2.5 (glog records with the agent's pid): one agent, four workers, local rank 2 exits by itself
AGENT = 48812
CONSOLE = (
    "step 118 loss 2.31\n"
    f"W0517 09:12:40.101000 {AGENT} torch/distributed/elastic/multiprocessing/api.py:897] Sending process 48830 "
    "closing signal SIGTERM\n"
    f"W0517 09:12:40.102000 {AGENT} torch/distributed/elastic/multiprocessing/api.py:897] Sending process 48831 "
    "closing signal SIGTERM\n"
    f"W0517 09:12:40.102000 {AGENT} torch/distributed/elastic/multiprocessing/api.py:897] Sending process 48833 "
    "closing signal SIGTERM\n"
    f"E0517 09:12:41.377000 {AGENT} torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) "
    "local_rank: 2 (pid: 48832) of binary: /opt/venv/bin/python3\n"
    "Traceback (most recent call last):\n"
    '  File "/opt/venv/bin/torchrun", line 8, in <module>\n'
    "    sys.exit(main())\n"
)


def test_console_only_log_names_the_local_rank_as_the_global_rank_on_one_node():
    """torchrun's summary (rank : R (local_rank: K)) is not in the paste; with one agent and nothing of a second
    node, the agent's local rank 2 is global rank 2 (torchelastic assigns base_global_rank + local_rank)."""
    d = analyze_text(CONSOLE, rules=RULES)
    assert d.root_cause is not None and d.root_cause.id == "peer_exit"
    assert d.root_cause.ranks == (2,), d.root_cause.title
    assert "rank 2" in d.root_cause.title


def test_a_signal_death_of_a_console_only_log_names_that_rank():
    log = CONSOLE.replace("failed (exitcode: 1) local_rank: 2", "failed (exitcode: -11) local_rank: 2")
    d = analyze_text(log, rules=RULES)
    assert d.root_cause is not None and d.root_cause.ranks == (2,), d.root_cause.title
    assert "SIGSEGV" in d.root_cause.title


@pytest.mark.parametrize("other_node", [
    # another agent (a second node's console in the same paste)
    "W0517 09:12:40.200000 51770 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 51790 "
    "closing signal SIGTERM\n",
    # a worker's own line with a global rank beyond this agent's four workers
    "[rank6]:[I517 09:02:11.415000000 ProcessGroupNCCL.cpp:905] [PG ID 0 PG GUID 0 Rank 6] ProcessGroupNCCL "
    "initialization options: size: 8, global rank: 6, TIMEOUT(ms): 600000\n",
    # NCCL's Init line of a communicator larger than this node
    "node7:48832:48840 [2] NCCL INFO comm 0x55d0 rank 10 nranks 16 cudaDev 2 nvmlDev 2 busId 41000 commId 0x1f - "
    "Init COMPLETE\n",
])
def test_local_rank_is_not_claimed_as_global_rank_when_the_input_shows_another_node(other_node):
    d = analyze_text(other_node + CONSOLE, rules=RULES)
    assert d.root_cause is not None
    assert 2 not in d.root_cause.ranks or d.root_cause.ranks == (10,), d.root_cause


def test_a_runners_stream_tag_before_every_line_is_read_through():
    """A runner that prefixes each line of its child's output with the stream name ("stderr: ") must not turn
    torchrun's own traceback into an application exception named "stderr"."""
    tagged = "".join(f"stderr: {s}\n" for s in CONSOLE.splitlines())
    d = analyze_text(tagged, rules=RULES)
    plain = analyze_text(CONSOLE, rules=RULES)
    assert d.root_cause is not None and d.root_cause.id == plain.root_cause.id == "peer_exit"
    assert d.root_cause.ranks == (2,)
    assert "stderr" not in d.root_cause.title


NCCL_HEAD = "gpu3:2231:2231 [0] "


@pytest.mark.parametrize("warn,entry", [
    ("transport/shm.cc:298 NCCL WARN Ignoring SHM locality, must be 1 (sender side) or 2 (receiver side, default)",
     "shm-locality-ignored"),
    ("mem_manager.cc:832 NCCL WARN MemManager: Cannot re-import peer buffer from rank 9 (different node) using POSIX "
     "FD - skipping", "memmanager-reimport-skipped"),
])
def test_nccl_warns_after_which_nccl_goes_on_are_dismissed_as_harmless(warn, entry):
    log = (f"{NCCL_HEAD}NCCL INFO Bootstrap : Using eth0:10.0.0.3<0>\n{NCCL_HEAD}{warn}\n"
           f"{NCCL_HEAD}NCCL INFO comm 0x5a1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x7 - Init COMPLETE\n"
           "epoch 0 step 10 loss 0.71\n")
    d = analyze_text(log, rules=RULES)
    assert d.root_cause is None, d.root_cause
    assert [x.reason for x in d.dismissed] and all(entry in x.reason for x in d.dismissed), d.dismissed


def _torchrun_console(mode: str, tmp_path: Path) -> str:
    log = tmp_path / f"{mode}.log"
    run_job(torchrun(mode, 2, free_port(), script=ROOT / "tests" / "jobs" / "failsafe_job.py"), env=env(), cwd=ROOT,
            log=log)
    return log.read_text()


@needs_torch
@pytest.mark.slow
def test_real_job_pasted_without_torchruns_summary_still_names_the_crashed_rank(tmp_path):
    """A real gloo job whose rank 1 dies by SIGSEGV; the paste stops where torchrun's own traceback begins (its
    summary with ``rank : 1 (local_rank: 1)`` is what pastes lose): the verdict still names rank 1."""
    out = _torchrun_console("segv", tmp_path)
    assert "local_rank: 1" in out and "Failures:" in out
    cut = out[: out.index("failed (exitcode:")]
    cut += out[out.index("failed (exitcode:"):].split("\n", 1)[0] + "\n"
    d = analyze_text(cut, rules=RULES)
    assert d.root_cause is not None and d.root_cause.ranks == (1,), d.root_cause
    full = analyze_text(out, rules=RULES)
    assert full.root_cause is not None and full.root_cause.ranks == (1,)


EXIT_CUDA = ("epoch 9 step 400 loss 0.42\nsaved checkpoint ckpt/epoch9.pt\n"
             "terminate called after throwing an instance of 'c10::CUDAError'\n"
             "  what():  CUDA error: driver shutting down\n"
             "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
             "might be incorrect.\n")


def test_a_cuda_call_after_the_runtime_unloaded_at_exit_is_teardown():
    """cudaErrorCudartUnloading ("driver shutting down") is raised only while a process exits (a destructor's CUDA
    call after the runtime went away): alone, it says the process ended, not that it failed."""
    d = analyze_text(EXIT_CUDA, rules=RULES)
    assert d.root_cause is None, d.root_cause
    assert [x.reason.split(":")[0] for x in d.dismissed] == ["teardown"]
    assert "cuda-driver-shutting-down" in d.dismissed[0].reason


def test_nccls_own_exit_time_driver_shutting_down_warn_is_teardown_too():
    log = ("step 99 loss 0.1\n"
           "gpu3:2231:2260 [0] include/alloc.h:250 NCCL WARN Cuda failure 'driver shutting down'\n")
    d = analyze_text(log, rules=RULES)
    assert d.root_cause is None, d.root_cause


def test_driver_shutting_down_after_a_real_error_keeps_the_real_error():
    log = ("Traceback (most recent call last):\n  File \"train.py\", line 40, in <module>\n    batch = data[key]\n"
           "KeyError: 'labels'\n" + EXIT_CUDA.split("saved checkpoint ckpt/epoch9.pt\n", 1)[1])
    d = analyze_text(log, rules=RULES)
    assert d.root_cause is not None and d.root_cause.id == "app_exception", d.root_cause
    assert "KeyError" in d.root_cause.title


TEE = ("[default1]:Traceback (most recent call last):\n"
       '[default1]:  File "/work/train.py", line 52, in <module>\n'
       '[default1]:    batch = next(it)["labels"]\n'
       "[default1]:KeyError: 'labels'\n"
       f"W0517 09:12:40.101000 {AGENT} torch/distributed/elastic/multiprocessing/api.py:897] Sending process 48830 "
       "closing signal SIGTERM\n"
       f"E0517 09:12:41.377000 {AGENT} torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) "
       "local_rank: 1 (pid: 48831) of binary: /opt/venv/bin/python3\n")


def test_an_exception_under_torchruns_default_tag_names_that_rank_on_one_node():
    """torchrun --tee's default tag "[${role_name}${local_rank}]:" is the only thing saying whose exception it is."""
    d = analyze_text(TEE, rules=RULES)
    assert d.root_cause is not None and d.root_cause.id == "app_exception"
    assert d.root_cause.ranks == (1,), d.root_cause.title


@pytest.mark.parametrize("tag", ["[trainer1|5]:", "trainer/1 [1]:"])
def test_a_custom_or_torchx_tag_is_not_read_as_the_global_rank(tag):
    """A --log-line-prefix-template with two numbers, or torchx's role/replica prefix (a replica is a node): which
    number is the local rank on which node is unknown, so no rank is claimed from the tag."""
    d = analyze_text(TEE.replace("[default1]:", tag), rules=RULES)
    assert d.root_cause is not None and d.root_cause.id == "app_exception"
    assert d.root_cause.ranks == (), d.root_cause.title


SPAWN_JOB = '''
import os, sys
import torch.multiprocessing as mp


def worker(i):
    if i == 1:
        sys.stdout.flush()
        os._exit(3)  # leaves by itself: nothing goes through spawn's error queue


if __name__ == "__main__":
    mp.spawn(worker, nprocs=2, join=True)
'''


@needs_torch
def test_a_real_spawn_child_that_exits_by_itself_is_not_an_application_exception(tmp_path):
    """torch.multiprocessing.spawn's parent raises ProcessExitedException('process 1 terminated with exit code 3'):
    the parent's report of child 1, whose reason is not in the output, not an application error."""
    job = tmp_path / "spawn_job.py"
    job.write_text(SPAWN_JOB)
    proc = run_job([sys.executable, str(job)], merged=False, env=env())
    out = proc.stdout + proc.stderr
    assert "process 1 terminated with exit code 3" in out, out
    d = analyze_text(out, rules=RULES)
    assert d.root_cause is not None and d.root_cause.id == "peer_exit", d.root_cause
    assert "process 1" in d.root_cause.title and "code 3" in d.root_cause.title


RICH = ("Loading checkpoint shards: 100%|##########| 4/4 [00:41<00:00, 10.30s/it]\n"
        "                    WARNING  Sending process 3110 closing signal SIGTERM         api.py:699\n"
        "                    WARNING  Sending process 3112 closing signal SIGTERM         api.py:699\n"
        "[03/14/24 10:21:07] ERROR    failed (exitcode: -9) local_rank: 1 (pid: 3111) of  api.py:673\n"
        "                             binary: /usr/bin/python3\n")


def test_torchelastic_records_rendered_by_richs_handler_are_read():
    """accelerate launch with rich installed renders torchelastic's log records with RichHandler ("[time] LEVEL
    message   api.py:673", wrapped after "of"): the SIGKILL of local rank 1 is a failure, not "no failure"."""
    d = analyze_text(RICH, rules=RULES)
    assert d.root_cause is not None and d.root_cause.id == "host_oom", d.root_cause
    assert d.root_cause.ranks == (1,)
    assert d.root_cause.evidence[0].line == 4


def test_a_rich_info_record_is_not_a_failure():
    log = "[03/14/24 10:20:01] INFO     Using RTX 4090 x2, world size 2                      launch.py:112\n"
    assert analyze_text(log, rules=RULES).root_cause is None
