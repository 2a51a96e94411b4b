"""Session 15's classes (docs/classes-session15.md): error lines people paste alone, in shapes no grammar reads whole,
are answered (issue 9: never "no failure" on a failing log), and a torchelastic restart whose log ends on the agent's
own bookkeeping is no recovered job. Each log is built here from what torch / NCCL / CPython print, not copied from a
fixture; each class has a healthy or prose counterpart that must stay "no failure"."""
from __future__ import annotations

import pytest

from class_helpers import root as _root
from nccl_analyzer.parse.bare_warn import match_bare_warn

_API = "torch.distributed.elastic.multiprocessing.api"
_AGENT = "torch.distributed.elastic.agent.server.api"
_STEPS = "".join(f"epoch 1 iter {i}/900 loss 0.{i}2 lr 1e-4\n" for i in range(4))


# -- 1. torchelastic's failed-worker line in shapes the grammar does not read whole ------------------------------------
@pytest.mark.parametrize("line", [
    f"{_API}:failed (exitcode: -9) local_rank: 3",  # logger name without the level, cut after the local rank
    f"{_API}:failed (exitcode: -9) local_rank: 3 (pid: 4242) of binary: /usr/bin/python3",
    "failed (exitcode: -9) local_rank: 0",  # a title
    f"[job-master-0] [2026-03-30 19:24:42,731] {_API}: [ERROR] failed (exitcode: -9) for binary located at "
    "/opt/conda/bin/python3.10 with local_rank: 0 (process ID: 71) [job-master-0]",  # a vendor build's wording
])
def test_failed_worker_line_sigkill_alone_is_host_oom(line):
    d, rid = _root(line + "\n")
    assert rid == "host_oom"
    assert d.root_cause.confidence <= 0.5 and [e.line for e in d.root_cause.evidence] == [1]


@pytest.mark.parametrize("code,want", [(-7, "shm"), (-11, "other"), (1, "peer_exit")])
def test_failed_worker_line_other_codes(code, want):
    assert _root(f"{_API}:failed (exitcode: {code}) local_rank: 1\n")[1] == want


def test_failed_worker_line_quoted_in_a_sentence_is_no_evidence():
    # the entries are anchored at the line's start: prose that quotes the text is no log line
    assert _root("I think the job failed (exitcode: -9) local_rank: 0 because of memory, any idea?\n")[1] is None


# -- 2. c10d's bind failure with the address left out ------------------------------------------------------------------
def test_bind_failure_without_address_is_port_conflict():
    d, rid = _root("The server socket has failed to bind to (errno: 98 - Address already in use)\n")
    assert rid == "port_conflict"


def test_bind_failure_other_errno_is_not_port_conflict():
    _, rid = _root("The server socket has failed to bind to (errno: 13 - Permission denied)\n")
    assert rid != "port_conflict"


# -- 3. NCCL's shared-memory launch check (enqueue.cc): the release predates the GPU ----------------------------------
@pytest.mark.parametrize("log", [
    "ncclMaxSharedMem 82240 exceeds device/fn maxSharedMem 79856\n",  # 2.25.1's INFO text, pasted alone
    "gpu7:881:881 [0] NCCL INFO NCCL version 2.26.2+cuda12.8\n"
    "gpu7:881:881 [0] enqueue.cc:1424 NCCL WARN cudaArch 1200 ncclMaxSharedMem 82240 exceeds device/fn maxSharedMem 79856\n"
    "gpu7:881:881 [0] NCCL INFO enqueue.cc:1500 -> 5\n",
    "gpu7:881:881 [0] enqueue.cc:1610 NCCL WARN cudaArch 1200 dynamic smem 99328 exceeds device/fn maxSharedMem 101376\n",
])
def test_smem_check_is_version_mismatch(log):
    assert _root(log)[1] == "version_mismatch"


def test_other_enqueue_warn_stays_invalid_usage():
    log = "gpu7:881:881 [0] enqueue.cc:2071 NCCL WARN Invalid root 5: the communicator has 4 ranks\n"
    assert _root(log)[1] == "invalid_usage"


# -- 4. NCCL 1.x and Paddle's enforce texts ----------------------------------------------------------------------------
def test_nccl1_warn_lines_are_an_nccl_failure():
    log = ("WARN src/core.cu:225 failed to allocate 4096 byte device buffer\n"
           "WARN src/core.cu:596 rank 3 failed to allocate device buffer\n"
           "NCCL Init failed (10) 'cuda malloc failed'\n")
    d, rid = _root(log)
    assert rid is not None and d.root_cause.confidence <= 0.5


def test_nccl1_init_failed_reads_the_error_string():
    assert _root("NCCL Init failed (4) 'invalid argument'\n")[1] == "invalid_usage"


def test_paddle_enforce_nccl_error_string():
    assert _root("invalid argument at [/paddle/paddle/operators/nccl_op.cu.cc:193]\n")[1] == "invalid_usage"
    assert _root("unhandled system error at [/paddle/fluid/platform/nccl_helper.h:105]\n")[1] is not None


def test_bracketed_at_in_a_training_line_is_nothing():
    assert _root("saved checkpoint at [/ckpt/step_100.pt]\n" + _STEPS)[1] is None


# -- 5. torchelastic's signal text in lower case (OCR, lower-casing pastes) ---------------------------------------------
def test_lower_case_signal_text():
    assert _root("traceback : signal 9 (SIGKILL) received by PID 36071\n")[1] == "host_oom"


# -- 6. a bare WARN whose %s was printed empty (two blanks made one by the paste) --------------------------------------
def test_bare_warn_with_an_empty_string_field_matches_its_format():
    line = "ncclSocketInit: connecting to address with family 0 is neither AF_INET(2) nor AF_INET6(10)"
    found = match_bare_warn(line)
    assert found is not None and "family %d" in found[0]
    assert _root(line + "\n")[1] is not None


# -- 7. TCPStore's wrong reply and CPython's fatal-error report --------------------------------------------------------
def test_store_wrong_reply_is_rendezvous_unreachable():
    assert _root("RuntimeError: Stop_waiting response is expected\n")[1] == "rendezvous_unreachable"


def test_extension_modules_line_is_a_native_crash():
    log = ('  File "/work/train.py", line 160 in sync_params\n'
           '  File "/work/train.py", line 99 in step\n'
           "\n"
           "Extension modules: numpy.core._multiarray_umath, torch._C, torch._C._fft (total: 3)\n")
    d, rid = _root(log)
    assert rid == "other" and 4 in [e.line for e in d.root_cause.evidence]


def test_live_thread_dump_without_extension_modules_stays_null():
    # faulthandler.dump_traceback() of a live process prints stacks only: no crash
    log = ("Thread 0x00007f11 (most recent call first):\n"
           '  File "/work/train.py", line 12 in loop\n' + _STEPS)
    assert _root(log)[1] is None


# -- 8. a restart whose log ends on the agent's own records ------------------------------------------------------------
def _restart(after: str) -> str:
    return (_STEPS +
            f"ERROR:{_API}:failed (exitcode: -9) local_rank: 1 (pid: 20277) of binary: /usr/bin/python\n"
            f"ERROR:torch.distributed.elastic.agent.server.local_elastic_agent:[default] Worker group failed\n"
            f"INFO:{_AGENT}:[default] Worker group FAILED. 3/3 attempts left; will restart worker group\n"
            f"INFO:{_AGENT}:[default] Stopping worker group\n"
            f"INFO:{_AGENT}:[default] Rendezvous'ing worker group\n"
            f"INFO:{_AGENT}:[default] Rendezvous complete for workers. Result:\n"
            "  restart_count=1\n  master_addr=127.0.0.1\n  master_port=29500\n  group_rank=0\n"
            "  group_world_size=1\n  local_ranks=[0, 1]\n\n"
            f"INFO:{_AGENT}:[default] Starting worker group\n" + after)


def test_restart_that_ends_on_starting_worker_group_is_the_failure():
    d, rid = _root(_restart(""))
    assert rid == "host_oom" and d.root_cause.ranks == (1,)


def test_restart_whose_workers_then_train_is_recovered():
    assert _root(_restart(_STEPS))[1] is None



# -- 9. fewer members started than the world size, and the log ends there (a rendezvous that never completes) --------
def _members(ranks, size, head="Initializing distributed"):
    return "".join(f"{head}: GLOBAL_RANK: {r}, MEMBER: {r + 1}/{size}\n" for r in ranks)


def test_members_never_joined_names_the_missing_ranks():
    d, rid = _root("GPU available: True, used: True\n" + _members(range(4), 8, "initializing ddp"))
    assert rid == "rendezvous_unreachable"
    assert d.root_cause.ranks == (4, 5, 6, 7) and d.root_cause.confidence <= 0.5


def test_members_then_training_is_healthy():
    assert _root(_members(range(4, 8), 8) + "All distributed processes registered. Starting with 8 processes\n"
                 + _STEPS)[1] is None


def test_all_members_started_is_not_this():
    assert _root(_members(range(2), 2))[1] is None


# -- 10. Open MPI's signal report cut after its header; glog CHECK failures --------------------------------------------
def test_ompi_signal_header_alone_is_a_crash():
    log = ("node3:4242:4250 [0] NCCL INFO RAS client listening socket at ::1<28028>\n"
           "[node3:4242] *** Process received signal ***\n")
    d, rid = _root(log)
    assert rid == "other" and [e.line for e in d.root_cause.evidence] == [2]


def test_ompi_signal_report_with_its_signal_line_names_the_signal():
    log = "[node3:4242] *** Process received signal ***\n[node3:4242] Signal: Segmentation fault (11)\n"
    d, rid = _root(log)
    assert rid == "other" and "Segmentation fault" in d.root_cause.title


@pytest.mark.parametrize("line", [
    "F0404 10:13:38.892127 12760 parallel.cpp:91] Check failed: result == ncclSuccess (1 vs. 0)  unhandled cuda error",
    "_Check_ failed: result == ncclSuccess (1 vs. 0)  unhandled cuda _error_",  # markdown emphasis of a paste
])
def test_glog_check_failed_is_a_failure(line):
    d, rid = _root(line + "\n")
    assert rid is not None and d.root_cause.confidence <= 0.5


def test_check_failed_in_prose_is_nothing():
    assert _root("The unit test said the Check failed: but it passed on retry\n" + _STEPS)[1] is None
