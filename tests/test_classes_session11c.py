"""Session 11c's classes (docs/classes-session11c.md), from what torchelastic / torch / the kernel do, not one log:
a torchelastic restart the job got past (no failure), the culprit of an unranked cause after a restart, a worker
ended by SIGXCPU / SIGXFSZ, the open-file limit (EMFILE), the DataLoader's own timeout, an invalid
PYTORCH_CUDA_ALLOC_CONF, and the interpreter that could not start the script (other)."""
from __future__ import annotations

import pytest

from nccl_analyzer.analysis import analyze_text

_AGENT = "torch/distributed/elastic/agent/server/api.py"
_MP = "torch/distributed/elastic/multiprocessing/api.py"


def _root(log: str):
    d = analyze_text(log)
    return d, (d.root_cause.id if d.root_cause else None)


def _failed(pid: int, local_rank: int, code: int = 1, agent: int = 4100) -> str:
    return (f"E1203 09:00:0{local_rank}.100000 {agent} {_MP}:1002] failed (exitcode: {code}) local_rank: {local_rank} "
            f"(pid: {pid}) of binary: /usr/bin/python3\n")


_APP_TB = """\
Traceback (most recent call last):
  File "/srv/job/train.py", line 77, in <module>
    main()
  File "/srv/job/train.py", line 41, in main
    shards = json.load(open(index_path))
FileNotFoundError: [Errno 2] No such file or directory: 'index/shards.json'
"""

_CHILD_FAILED = """\
Traceback (most recent call last):
  File "/usr/bin/torchrun", line 8, in <module>
    sys.exit(main())
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-03_09:00:09
  host      : node3
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 5170)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


# -- a torchelastic restart the job got past ----------------------------------------------------------------------
def test_restart_with_the_agents_success_line_is_no_failure():
    log = (_APP_TB + _failed(5101, 1)
           + f"I1203 09:00:01.200000 4100 {_AGENT}:942] [trainer] Worker group FAILED. 2/2 attempts left; will "
             "restart worker group\n"
           + "epoch 0 step 10 loss 2.31\nepoch 0 step 20 loss 2.02\n"
           + f"I1203 09:05:00.000000 4100 {_AGENT}:932] [trainer] worker group successfully finished. Waiting 300 "
             "seconds for other agents to finish.\n")
    d, root = _root(log)
    assert root is None
    assert any("torchelastic restarted" in x.reason and "successfully finished" in x.reason for x in d.dismissed)


def test_failed_worker_then_clean_output_without_the_agent_s_restart_line_is_still_the_failure():
    # torchrun's default log level prints neither the restart nor the success line, so a restarted attempt's output
    # and other ranks' output after a log cut before torchrun's report look the same: without the agent's restart
    # (or success) line the failure stands (tests/test_robustness.py's noise transformation appends 3k-20k lines of
    # other ranks' output after such logs; treating that as a recovery answered "no failure" on 10 of them)
    log = _APP_TB + _failed(5101, 0) + "".join(f"step {i} loss 0.{40 - i}\n" for i in range(6))
    d, root = _root(log)
    assert root == "app_exception", d.dismissed


def test_restart_whose_last_attempt_failed_is_still_a_failure():
    log = (_APP_TB + _failed(5101, 0) + "step 0 loss 0.4\nstep 1 loss 0.3\nstep 2 loss 0.3\n"
           + _APP_TB.replace("[Errno 2]", "[Errno 2] again") + _failed(5170, 0) + _CHILD_FAILED)
    _, root = _root(log)
    assert root == "app_exception"


def test_failed_worker_then_an_unparsed_rich_traceback_box_is_no_recovery():
    # accelerate renders the launcher's ChildFailedError in a rich box: no traceback grammar reads it, but the box's
    # top border is an error line, so the output after the failed worker is no clean new attempt
    log = (_failed(7001, 1, code=-9)
           + "╭───────────────────── Traceback (most recent call last) ──────────────────────╮\n"
           + "│ /usr/bin/accelerate:8 in <module>                                            │\n"
           + "│                                                                              │\n"
           + "│   5 from accelerate.commands.accelerate_cli import main                      │\n")
    _, root = _root(log)
    assert root == "host_oom"


# -- the culprit of an unranked cause when torchelastic restarted -------------------------------------------------
def test_unranked_cause_after_a_restart_blames_the_worker_the_agent_reported_after_it():
    # attempt 0: local rank 1 raises before init_process_group (no [rankN]: prefix); attempt 1: local rank 0 fails
    # to connect; the final report names attempt 1's rank 0 only
    lock = _APP_TB.replace("FileNotFoundError: [Errno 2] No such file or directory: 'index/shards.json'",
                           "RuntimeError: dataset index is locked by another process; try again")
    log = (lock + _failed(5101, 1)
           + f"I1203 09:00:01.200000 4100 {_AGENT}:942] [default] Worker group FAILED. 1/1 attempts left; will "
             "restart worker group\n"
           + _failed(5170, 0) + _CHILD_FAILED)
    d, root = _root(log)
    assert root == "app_exception"
    assert d.root_cause.ranks == (1,)


# -- resource limits of the environment ---------------------------------------------------------------------------
@pytest.mark.parametrize("code,sig", [(-24, "SIGXCPU"), (-25, "SIGXFSZ")])
def test_worker_ended_by_a_resource_limit_signal_is_other(code, sig):
    log = ("[rank1]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
           "[10.0.0.5]:41000\n" + _failed(6200, 0, code=code)
           + _CHILD_FAILED.replace("exitcode  : 1 (pid: 5170)", f"exitcode  : {code} (pid: 6200)  ({sig})")
           .replace("traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
                    f"traceback : Signal {-code} ({sig}) received by PID 6200"))
    d, root = _root(log)
    assert root == "other"
    assert d.root_cause.rule == "elastic-child-rlimit-signal"
    assert d.root_cause.ranks == (0,)


@pytest.mark.parametrize("line", [
    "RuntimeError: [enforce fail at ../gloo/transport/tcp/loop.cc:105] fd_ != -1. -1 vs -1. epoll_create: Too many open files",
    "OSError: [Errno 24] Too many open files: '/data/train/shard_0042.bin'",
])
def test_open_file_limit_is_other(line):
    log = ("[rank2]: Traceback (most recent call last):\n[rank2]:   File \"/srv/train.py\", line 9, in <module>\n"
           "[rank2]:     setup()\n" + f"[rank2]: {line}\n" + _failed(6300, 2))
    d, root = _root(log)
    assert root == "other"
    assert d.root_cause.rule == "python-open-files-limit"
    assert d.root_cause.ranks == (2,)


def test_other_oserror_is_not_the_open_file_limit():
    log = ("[rank2]: Traceback (most recent call last):\n[rank2]:   File \"/srv/train.py\", line 9, in <module>\n"
           "[rank2]:     save()\n[rank2]: OSError: [Errno 28] No space left on device\n" + _failed(6300, 2))
    d, _ = _root(log)
    assert d.root_cause is not None and d.root_cause.rule != "python-open-files-limit"


# -- the DataLoader's own timeout ---------------------------------------------------------------------------------
@pytest.mark.parametrize("secs", ["3", "120.0"])
def test_dataloader_timeout_is_the_application_not_a_communication_timeout(secs):
    log = ("[rank0]: Traceback (most recent call last):\n"
           "[rank0]:   File \"/srv/train.py\", line 113, in main\n[rank0]:     for batch in loader:\n"
           "[rank0]:   File \"/usr/lib/python3/site-packages/torch/utils/data/dataloader.py\", line 1468, in _get_data\n"
           "[rank0]:     raise RuntimeError(\n"
           f"[rank0]: RuntimeError: DataLoader timed out after {secs} seconds\n"
           "[rank1]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:547] Connection closed by "
           "peer [127.0.0.1]:46239\n" + _failed(887, 0))
    d, root = _root(log)
    assert root == "app_exception"
    assert d.root_cause.rule == "python-dataloader-timeout"
    assert d.root_cause.ranks == (0,)


# -- the allocator's settings ------------------------------------------------------------------------------------
@pytest.mark.parametrize("line", [
    "ValueError: Unrecognized key 'max_split_mb' in CUDA allocator config.",
    "RuntimeError: Unrecognized key 'expandable_segment' in Accelerator allocator config.",
    "RuntimeError: Unrecognized CachingAllocator option: garbage_collection",
])
def test_invalid_alloc_conf_is_other(line):
    log = ("Traceback (most recent call last):\n  File \"/srv/train.py\", line 28, in init\n"
           "    torch.cuda.set_device(dev)\n  File \"/usr/lib/python3/site-packages/torch/cuda/__init__.py\", line 478, "
           "in _lazy_init\n    torch._C._cuda_init()\n" + line + "\n" + _failed(788, 0))
    d, root = _root(log)
    assert root == "other"
    assert d.root_cause.rule == "torch-alloc-conf-invalid"


# -- the one label per class decisions ---------------------------------------------------------------------------
def test_no_default_process_group_is_invalid_usage():
    log = ("[rank2]: Traceback (most recent call last):\n[rank2]:   File \"/srv/train.py\", line 50, in resume\n"
           "[rank2]:     world = dist.get_world_size()\n"
           "[rank2]: ValueError: Default process group has not been initialized, please make sure to call "
           "init_process_group.\n" + _failed(900, 2))
    _, root = _root(log)
    assert root == "invalid_usage"


def test_script_that_cannot_be_opened_is_other():
    log = ("/usr/bin/python3: can't open file '/srv/job/train_main.py': [Errno 2] No such file or directory\n"
           + _failed(611, 1, code=2) + _failed(609, 0, code=2))
    d, root = _root(log)
    assert root == "other"
    assert d.root_cause.rule == "python-cannot-start-program"


def test_a_pasted_failed_worker_line_followed_by_the_poster_s_words_is_no_recovered_restart():
    """A restart the job got past needs more of the job's output after the failed attempt: in a paste, the fence's
    closing marker, a blank line and the poster's question are not that (CI caught it: tests/test_paste_forms.py)."""
    from nccl_analyzer.analysis import analyze_text as _analyze
    failed = ("E1202 17:18:10.096000 545 torch/distributed/elastic/multiprocessing/api.py:986] failed (exitcode: 1) "
              "local_rank: 0 (pid: 604) of binary: /usr/bin/python")
    log = ("Hi, my job stops after a few minutes. This is what I see:\n\n```\n" + failed + "\n```\n\n"
           "Any idea what is wrong? Thanks!\n")
    d = _analyze(log)
    assert d.root_cause is not None and d.root_cause.id == "peer_exit", d.dismissed
