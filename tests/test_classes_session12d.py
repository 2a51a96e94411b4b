"""The failure classes behind the misses of the development sets fixtures/blind14 and fixtures/blind15 fixed in
session 12 by dev12d (docs/classes-session12d.md), each in several forms (prefixes, versions, wordings) with healthy
twins that must stay null, plus the public fixture: aws-ofi-nccl's test logger and NCCL's "Last error:" behind
pdsh's node prefix, a launcher's ssh connection failure, Horovod's stall report
with ranks in different collectives, vLLM's custom all-reduce CUDACHECK without "Cuda error", an NCCL result string
quoted alone on a line, and an interface-address lookup failing in the program."""
from __future__ import annotations

from pathlib import Path

import pytest

from nccl_analyzer.analysis import analyze, analyze_text

FIX = Path(__file__).resolve().parent.parent / "fixtures"


def _root(log: str):
    d = analyze_text(log)
    return d, (d.root_cause.id if d.root_cause else None)


def _fixture_root(glob: str):
    (case,) = sorted(FIX.glob(glob))
    d = analyze([str(case / "log.txt")])
    return d, (d.root_cause.id if d.root_cause else None)


# -- 1. pdsh's "<node>: " prefix (DeepSpeed's multi-node runner) ---------------------------------------------------
@pytest.mark.parametrize("prefix", ["10.3.35.83: ", "192.168.1.51: ", "worker-1: ", ""])
def test_ofi_test_logger_behind_a_node_prefix_is_ib_rdma(prefix):
    log = (f"{prefix}INFO: Function: ofi_init Line: 1102: NET/OFI Setting RDMAV_FORK_SAFE environment variable to 1.\n"
           f"{prefix}WARN: Function: find_ofi_provider Line: 543: NET/OFI Couldn't find any optimal provider\n")
    assert _root(log)[1] == "ib_rdma"


def test_ofi_test_logger_info_alone_is_no_failure():
    assert _root("10.3.35.83: INFO: Function: ofi_init Line: 686: NET/OFI Selected Provider is efa\n")[1] is None


@pytest.mark.parametrize("prefix", ["192.168.1.51: ", "10.0.0.7: ", "1.2.3.4: "])
def test_last_error_behind_an_ip_node_prefix_is_read(prefix):
    log = (f"{prefix}RuntimeError: NCCL error in: /opt/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1269, "
           "internal error, NCCL version 2.14.3\n"
           f"{prefix}ncclInternalError: Internal check failed.\n{prefix}Last error:\n"
           f"{prefix}Failed to CUDA calloc async 1920 bytes\n")
    assert _root(log)[1] == "cuda_oom"


def test_an_ip_at_the_start_of_a_program_line_is_not_a_prefix_without_colon_space():
    # "10.0.0.1:29500" is an address, not pdsh's "<node>: "; the healthy line stays healthy
    assert _root("10.0.0.1:29500 is the master address\n")[1] is None


def test_pdsh_fixtures():
    assert _fixture_root("blind14/awsofinccl67_*")[1] == "ib_rdma"
    assert _fixture_root("blind14/deepspeed3827_*")[1] == "cuda_oom"


# -- 2. the launcher's ssh to a node failed -------------------------------------------------------------------------
@pytest.mark.parametrize("line", [
    "ssh: connect to host 192.168.0.119 port 12345: Connection refused",
    "ssh: connect to host gpu-node-2 port 22: Connection timed out",
    "node3: ssh: connect to host node3 port 22: No route to host",
    "ssh: connect to host 10.0.0.5 port 2222: Network is unreachable",
    "ssh: Could not resolve hostname gpu-node-07: Name or service not known",
])
def test_ssh_connect_failure_is_rendezvous_unreachable(line):
    d, rid = _root("Launching horovodrun task function was not successful:\n" + line + "\n")
    assert rid == "rendezvous_unreachable"
    assert d.root_cause.rule == "launcher-ssh-connect-failed"


def test_ssh_known_hosts_notice_is_no_failure():
    assert _root("Warning: Permanently added '[10.3.60.130]:2022' (RSA) to the list of known hosts.\n")[1] is None


def test_ssh_failure_then_the_group_came_up_is_not_the_rule():
    log = ("ssh: connect to host 10.1.2.3 port 22: Connection refused\n"
           "[I1202 10:00:00.473372963 ProcessGroupNCCL.cpp:988] [PG ID 0 PG GUID 0 Rank 1] ProcessGroupNCCL "
           "initialization options: size: 2, global rank: 1, TIMEOUT(ms): 600000, USE_HIGH_PRIORITY_STREAM: 0, "
           "SPLIT_FROM: 0, SPLIT_COLOR: -2, PG Name: 0\n")
    d, _ = _root(log)
    assert d.root_cause is None or d.root_cause.rule != "launcher-ssh-connect-failed"


def test_ssh_fixture():
    assert _fixture_root("blind14/horovod1226_*")[1] == "rendezvous_unreachable"


# -- 3. Lightning: some ranks of the world stated, the log ends. Session 12 left this "no failure" (one node's part
# of a job cannot be told from a hang by absence alone); session 15 reads it as hang-init-log-ends reads an NCCL init
# that stops: the missing members never joined, at the lowest confidence, said to rest on the absence of progress
# (docs/classes-session15.md). --------------------------------------------------------------------------------------
def test_ranks_of_one_node_then_the_log_ends_is_a_low_confidence_hang():
    d, rid = _fixture_root("blind14/lightning8707_*")
    assert rid == "rendezvous_unreachable" and d.root_cause.confidence <= 0.2
    assert "absence of progress" in d.root_cause.explanation


# -- 4. Horovod's stall report: two tensors with no ready rank in common --------------------------------------------
HEAD = ("WARNING: One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are "
        "waiting for remainder of ranks for more than 60 seconds. This may indicate that different ranks are trying to "
        "submit different tensors or that only subset of ranks is submitting tensors, which will cause deadlock. ")


@pytest.mark.parametrize("ops", [
    "Stalled ops: HorovodAllreduce_loss_Mean_0 [ready ranks: 3], Opt_Allreduce/HorovodAllreduce_grad_0 [ready ranks: 2, 0, 1]",
    "Stalled ops:\nHorovodAllgather_a_0 [ready ranks: 0, 1],\nHorovodBroadcast_b_0 [ready ranks: 2, 3],\n",
    "Stalled ops: HorovodAllreduce_model_1_gradients_AddN_4_0 [ready ranks: 0], HorovodAllreduce_model_gradients_AddN_4_0 [ready ranks: 1]",
])
def test_disjoint_ready_sets_are_collective_mismatch(ops):
    assert _root(HEAD + ops + "\n")[1] == "collective_mismatch"


def test_the_stall_warning_alone_stays_healthy():
    assert _root(HEAD + "\n")[1] != "collective_mismatch"  # horovod#2843: transient, the run completed


# Session 16 (docs/classes-session16-dev16c.md): a stall report whose ready sets overlap, or that has one rank ahead,
# is not the disjoint-sets signature; session 12 kept it as it was. Where the report with its tensor rows is the last
# thing in the log, session 16 reads it as hang-horovod-stall-log-ends does (a subset of ranks never submitted: Horovod's
# own reading, at 0.38, said to rest on the absence of progress); followed by training progress it stays as it was.
PROGRESS = "".join(f"Epoch 1 step {i} loss 0.{i}\n" for i in range(100, 110))


@pytest.mark.parametrize("ops", [
    "Stalled ops: HorovodAllreduce_a_0 [ready ranks: 1], HorovodAllreduce_b_0 [ready ranks: 1]",  # one rank ahead
    "Stalled ops: HorovodAllreduce_a_0 [ready ranks: 0, 1], HorovodAllreduce_b_0 [ready ranks: 1, 2]",  # overlap
])
def test_stall_reports_without_disjoint_sets(ops):
    d, rid = _root(HEAD + ops + "\n")
    assert rid == "collective_mismatch" and d.root_cause.rule == "hang-horovod-stall-log-ends"
    assert d.root_cause.confidence < 0.5 and "absence of progress" in d.root_cause.explanation
    assert _root(HEAD + ops + "\n" + PROGRESS)[1] != "collective_mismatch"


def test_horovod_fixtures():
    d, rid = _fixture_root("blind14/horovod336_*")
    assert rid == "collective_mismatch"
    assert _fixture_root("blind3/horovod2843_*")[1] is None


# -- 5. vLLM custom all-reduce CUDACHECK without "Cuda error " -------------------------------------------------------
@pytest.mark.parametrize("line", [
    "Failed: /workspace/csrc/custom_all_reduce.cuh:368 'invalid argument'",
    "2025-04-23T03:35:43.390Z  INFO dynamo_engine_vllm::worker: VLLM: Failed: /workspace/csrc/custom_all_reduce.cuh:368 'invalid argument'",
    "(VllmWorker rank=1 pid=2699412) Failed: /opt/vllm/csrc/custom_all_reduce.cuh:307 'invalid resource handle'",
    "Failed: Cuda error /opt/vllm/csrc/custom_all_reduce.cuh:318 'invalid resource handle'",
])
def test_custom_allreduce_check_is_p2p_ipc(line):
    assert _root(line + "\n")[1] == "p2p_ipc"


def test_custom_allreduce_fixture():
    assert _fixture_root("blind15/dynamo787_*")[1] == "p2p_ipc"


# -- 6. ncclGetErrorString's text quoted alone on a line --------------------------------------------------------------
@pytest.mark.parametrize("line,want", [
    ("  'unhandled cuda error (run with NCCL_DEBUG=INFO for details)'", "cuda_error"),
    ("'unhandled system error (run with NCCL_DEBUG=INFO for details)'", "other"),
    ('"remote process exited or there was a network error"', "peer_exit"),
])
def test_quoted_nccl_result_string_is_a_failure(line, want):
    assert _root("  Failed, NCCL error src/CKKS/Context.cu:725\n" + line + "\n")[1] == want


def test_quoted_common_words_alone_stay_healthy():
    assert _root("'internal error'\n")[1] is None


def test_quoted_result_fixture_is_not_no_failure():
    assert _fixture_root("blind15/fideslib14_*")[1] is not None


# -- 7. the program's own interface-address lookup ---------------------------------------------------------------------
TB = ("[rank{r}]: Traceback (most recent call last):\n"
      "[rank{r}]:   File \"/usr/local/lib/python3.10/dist-packages/transformer_engine/pytorch/module/base.py\", line 144, in initialize_ub\n"
      "[rank{r}]:     fcntl.ioctl(\n"
      "[rank{r}]: OSError: {msg}\n")


@pytest.mark.parametrize("msg", ["[Errno 19] No such device", "[Errno 99] Cannot assign requested address",
                                 "Invalid network interface: eth"])
def test_interface_lookup_failure_is_socket_interface(msg):
    assert _root(TB.format(r=1, msg=msg))[1] == "socket_interface"


def test_enodev_elsewhere_is_not_an_interface():
    log = ("Traceback (most recent call last):\n  File \"/opt/app/io.py\", line 12, in open_dev\n"
           "    os.open(\"/dev/nvidia9\", os.O_RDWR)\nOSError: [Errno 19] No such device\n")
    assert _root(log)[1] != "socket_interface"


def test_interface_lookup_fixture():
    assert _fixture_root("blind14/transformerengine1170_*")[1] == "socket_interface"
