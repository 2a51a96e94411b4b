"""The failure classes of session 13's dev13a (launchers and non-PyTorch bindings: Open MPI's runtime and TCP
transport, Legion, pdsh's node labels, NCCL's proxy Connect in a torch error;
docs/classes-session13a.md), each written from the program's own message format, plus the fixture itself, with
healthy or other-cause twins that must not match."""
from __future__ import annotations

from pathlib import Path

import pytest

from class_helpers import root as _root
from nccl_analyzer.analysis import analyze
from nccl_analyzer.paste.detect import plan_for

FIX = Path(__file__).resolve().parent.parent / "fixtures"


def _fixture(name: str):
    d = analyze([str(FIX / name / "log.txt")])
    return d.root_cause.id if d.root_cause else None, (d.root_cause.rule if d.root_cause else None)


def _lines(d) -> list[int]:
    return sorted(e.line for e in d.root_cause.evidence)


# -- pdsh's "<node>: " labels with host names ---------------------------------------------------------------------
PDSH = (
    "gpu-b2: Last error:\n"
    "gpu-b2: Net : Call to connect to 10.2.0.7<41133> failed : Connection refused\n"
    "gpu-b1: gpu-b1:3311:3390 [2] NCCL INFO Channel 00 : 2[41000] -> 3[61000] via P2P/IPC\n"
    "gpu-b1: gpu-b1:3311:3390 [2] NCCL INFO Connected all rings\n"
)


def test_pdsh_host_labels_are_stripped(tmp_path):
    plan = plan_for(PDSH.splitlines())
    assert plan is not None and plan.nodes == frozenset({"gpu-b1", "gpu-b2"})
    f = tmp_path / "pdsh.log"
    f.write_text(PDSH)
    d = analyze([str(f)])
    assert d.root_cause.id == "network_connect"
    assert _lines(d) == [2]


def test_pdsh_labels_without_a_confirming_host_are_kept():
    # words programs print before ": " are no node labels: nothing is stripped
    lines = ["WARNING: the learning rate is high", "WARNING: gradient norm 12.5", "Error: retrying the download"]
    plan = plan_for(lines)
    assert plan is None or not plan.nodes


def test_pdsh_label_alone_on_few_lines_is_kept():
    lines = ["node1: starting", "plain line one", "plain line two", "plain line three", "plain line four"]
    plan = plan_for(lines)
    assert plan is None or not plan.nodes


def test_last_error_head_alone_takes_its_next_line():
    d, root = _root("Last error:\nNet : Call to recv from 10.0.0.9<50211> failed : Connection refused\n")
    assert root == "network_connect"
    assert _lines(d) == [1]


# -- Open MPI's runtime: daemons that cannot connect or never start (rendezvous_unreachable) ------------------------
OOB = """------------------------------------------------------------
A process or daemon was unable to complete a TCP connection
to another process:
  Local host:    trainer-a
  Remote host:   trainer-b
This is usually caused by a firewall on the remote host. Please
check that any firewall (e.g., iptables) has been disabled and
try again.
------------------------------------------------------------
"""


@pytest.mark.parametrize("log", [
    OOB,
    "debug1: Sending command: orted -mca ess env\n" + OOB + "debug2: channel 0: rcvd eof\n",
    "--------------------------------------------------------------------------\n"
    "ORTE was unable to reliably start one or more daemons.\nThis usually is caused by:\n",
    "PRTE was unable to reliably start one or more daemons.\n",
])
def test_ompi_daemons_unreachable(log):
    d, root = _root(log)
    assert root == "rendezvous_unreachable"
    assert d.root_cause.rule == "launcher-ompi-daemon-unreachable"


def test_ompi_oob_failure_then_nccl_up_is_not_the_launch():
    d, root = _root(OOB + "n1:100:100 [0] NCCL INFO comm 0x5 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE\n")
    assert d.root_cause is None or d.root_cause.rule != "launcher-ompi-daemon-unreachable"


def test_ompi_lost_daemon_later_is_not_the_launch():
    d, root = _root("ORTE has lost communication with a remote daemon.\n")
    assert d.root_cause is not None and d.root_cause.rule != "launcher-ompi-daemon-unreachable"


# -- Open MPI daemons of different builds (version_mismatch) ------------------------------------------------------
@pytest.mark.parametrize("log", [
    "[node-c:2231] [[5101,0],2] ORTE_ERROR_LOG: Data unpack would read past end of buffer in file grpcomm_direct.c at "
    "line 355\n",
    "An internal error has occurred in ORTE:\n\n[[5101,0],2] FORCE-TERMINATE AT Data unpack would read past end of "
    "buffer:-26 - error grpcomm_direct.c(359)\n",
    "[node-a:77] [[5101,0],0] ORTE_ERROR_LOG: Data unpack would read past end of buffer in file "
    "base/plm_base_launch_support.c at line 1230\n"
    "--------------------------------------------------------------------------\n"
    "ORTE was unable to reliably start one or more daemons.\n",
    "[node-a.example:152058] PMIX ERROR: PMIX_ERR_UNPACK_READ_PAST_END_OF_BUFFER in file base/plm_base_launch_support.c"
    " at line 1578\n",
])
def test_ompi_unpack_past_end_is_build_mismatch(log):
    d, root = _root(log)
    assert root == "version_mismatch"
    assert d.root_cause.rule == "launcher-ompi-build-mismatch"
    assert _lines(d)[0] in (1, 3)


def test_ompi_unpack_in_show_help_is_not_a_version_reading():
    d, root = _root("[griffin:02621] [[54251,0],0] ORTE_ERROR_LOG: Data unpack would read past end of buffer in file "
                    "util/show_help.c at line 507\n")
    assert root == "other"  # an error line, but no build mismatch


# -- Open MPI's TCP BTL: a wrong interface (socket_interface) or a failed connect (network_connect) -----------------
def test_btl_tcp_unexpected_process_is_wrong_interface():
    d, root = _root("[hostA][[812,1],0][btl_tcp_endpoint.c:796:mca_btl_tcp_endpoint_complete_connect] connect() to "
                    "172.17.0.1 failed: Connection refused (111)\n"
                    "[hostA][[812,1],0][btl_tcp_endpoint.c:638:mca_btl_tcp_endpoint_recv_connect_ack] received "
                    "unexpected process identifier [[812,1],2]\n")
    assert root == "socket_interface"
    assert d.root_cause.rule == "launcher-ompi-tcp-wrong-peer"
    assert 2 in _lines(d)


@pytest.mark.parametrize("log", [
    "[hostA][[812,1],0][btl_tcp_endpoint.c:803:mca_btl_tcp_endpoint_complete_connect] connect() to 10.3.0.12 failed: "
    "No route to host (113)\n",
    "--------------------------------------------------------------------------\n"
    "WARNING: Open MPI failed to TCP connect to a peer MPI process.  This\nshould not happen.\n",
])
def test_btl_tcp_connect_failed_is_network_connect(log):
    d, root = _root(log)
    assert root == "network_connect"
    assert d.root_cause.rule == "launcher-ompi-tcp-connect-failed"


def test_btl_tcp_verbose_connect_completed_is_no_failure():
    _, root = _root("[hostA:812] btl:tcp: connect() to 10.3.0.12:1024 completed (complete_connect), sending connect "
                    "ACK\n")
    assert root is None


# -- Legion's runtime error (app_exception) ------------------------------------------------------------------------
def test_legion_error_then_nccl_error_is_the_application():
    d, root = _root(
        "[0 - 7f3a00c2e840]    5.100200 {5}{runtime}: [error 482] LEGION ERROR: Invalid mapper output from invocation "
        "of 'map_task' on mapper Test Mapper. (from file /src/runtime.cc:12)\n"
        "*** Caught a fatal signal (proc 1): SIGABRT(6)\n"
        "Failed, NCCL error /src/model.cc:604 'unhandled system error (run with NCCL_DEBUG=INFO for details)'\n")
    assert root == "app_exception"
    assert d.root_cause.rule == "runtime-legion-error"
    assert _lines(d) == [1]


def test_legion_warning_is_no_failure():
    _, root = _root("[0 - 7f3a00c2e840]    5.100200 {4}{runtime}: [warning 1071] LEGION WARNING: Region requirement 0 "
                    "has no fields. (from file /src/runtime.cc:99)\n")
    assert root is None


# -- NCCL's proxy Connect in a torch error's Last error (network_connect) ------------------------------------------
PROXY = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, "
         "internal error, NCCL version 2.14.3\nncclInternalError: Internal check failed.\nLast error:\n"
         "Proxy Call to rank {r} failed ({op})\n")


def test_torch_error_proxy_connect_is_network_connect():
    d, root = _root(PROXY.format(r=3, op="Connect"))
    assert root == "network_connect"
    assert d.root_cause.rule == "torch-nccl-proxy-connect-failed"


def test_torch_error_proxy_connect_after_peer_closed_is_peer_exit():
    d, root = _root("n1:61:62 [1] misc/socket.cc:538 NCCL WARN Net : Connection closed by remote peer n2<59227>\n"
                    + PROXY.format(r=1, op="Connect"))
    assert root == "peer_exit"


def test_torch_error_proxy_other_op_is_not_this_rule():
    d, root = _root(PROXY.format(r=1, op="Close"))
    assert d.root_cause is not None and d.root_cause.rule != "torch-nccl-proxy-connect-failed"


# -- the development cases ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,want,rule", [
    ("blind14h/horovod2043_mpirun_orte_tcp_connection_firewall_ssh_debug_interleaved", "rendezvous_unreachable",
     "launcher-ompi-daemon-unreachable"),
    ("blind14h/horovod414_docker_mpirun_btl_tcp_connect_virbr0_192_168_122_1_refused", "socket_interface",
     "launcher-ompi-tcp-wrong-peer"),
    ("blind14h/horovod637_cpu_three_nodes_orte_data_unpack_grpcomm_direct_mpi_mismatch", "version_mismatch",
     "launcher-ompi-build-mismatch"),
    ("blind15/flexflow1480_multinode_legion_error_67_mapper_sigabrt_then_nccl_system_error", "app_exception",
     "runtime-legion-error"),
    ("blind15h/ray40758_docker_cloud_vm_torchtrainer_proxy_call_rank0_failed_connect_rich_box", "network_connect",
     "torch-nccl-proxy-connect-failed"),
    ("blind15/gptneox1147_two_nodes_net_recv_connection_refused_internal_error", "network_connect", None),
])
def test_development_cases(name, want, rule):
    got, got_rule = _fixture(name)
    assert got == want
    if rule:
        assert got_rule == rule


# -- launch failures of Open MPI, Slurm, pdsh and Horovod's gloo runner: error lines, never "no failure" -------------
@pytest.mark.parametrize("log,want", [
    ("There are not enough slots available in the system to satisfy the 16\nslots that were requested by the "
     "application:\n", "other"),
    ("mpirun was unable to launch the specified application as it could not access\nor execute an executable:\n",
     "app_exception"),
    ("It looks like MPI_INIT failed for some reason; your parallel process is\nlikely to abort.\n", "other"),
    ("An ORTE daemon has unexpectedly failed after launch and before\ncommunicating back to mpirun.\n",
     "rendezvous_unreachable"),
    ("mpirun has exited due to process rank 5 with PID 0 on\nnode gpu2 exiting improperly.\n", "peer_exit"),
    ("srun: error: Unable to create step for job 88123: More processors requested than permitted\n", "other"),
    ("slurmstepd: error: execve(): train.sh: No such file or directory\n", "app_exception"),
    ("srun: error: Node failure on gpu-r07\n", "peer_exit"),
    ("pdsh@gpu-a0: gpu-a3: ssh exited with exit code 255\n", "rendezvous_unreachable"),
    ("pdsh@gpu-a0: gpu-a3: ssh exited with exit code 1\n", "peer_exit"),
    ("Process 2 exit with status code 1.\nTerminating remaining workers after failure of Process 2.\n", "peer_exit"),
])
def test_launcher_failure_texts_are_failures(log, want):
    d, root = _root(log)
    assert root == want
    assert d.root_cause.evidence and d.root_cause.evidence[0].line == 1


@pytest.mark.parametrize("log", [
    "srun: Step created for StepId=88123.0\n",
    "Process 2 exit with status code 0.\n",
    "pdsh@gpu-a0: gpu-a3: connected\n",
])
def test_launcher_healthy_texts_are_no_failure(log):
    _, root = _root(log)
    assert root is None


def test_pdsh_deepspeed_runner_line_is_read(tmp_path):
    f = tmp_path / "ds.log"
    f.write_text("gpu-a1: [2024-01-01 10:00:00,123] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', "
                 "'train.py', '--local_rank=3'] exits with return code = 1\n"
                 "pdsh@gpu-a0: gpu-a1: ssh exited with exit code 1\n")
    d = analyze([str(f)])
    assert d.root_cause.rule == "elastic-child-failed"
    # DeepSpeed runs pdsh only for a job of more than one node: local rank 3 of gpu-a1 is no global rank
    assert list(d.root_cause.ranks) == []


def test_logger_names_are_no_node_labels():
    lines = ["torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: 1) local_rank: 0 (pid: 7) of "
             "binary: /usr/bin/python",
             "torch.distributed.elastic.multiprocessing.errors: [ERROR] see the traceback above"]
    plan = plan_for(lines)
    assert plan is None or not plan.nodes


# ---- review fixes (docs/classes-session13a.md "Review fixes") ----

_PDSH_HEAD = "".join(f"gpu-a1: gpu-a1:15874:17284 [0] NCCL INFO Channel 0{i}/02 : 0 1\ngpu-a2: step {i}\n"
                     for i in range(1, 7))


def test_pdsh_exception_type_is_no_node_label(tmp_path):
    # the launching node's own unlabelled traceback between pdsh's lines: "RuntimeError" is no node
    log = (_PDSH_HEAD + "Traceback (most recent call last):\n  File \"/srv/app/flags.py\", line 40, in sync_flags\n"
           "    dist.all_reduce(ok, op=dist.ReduceOp.BOR)\n"
           "RuntimeError: Cannot use ReduceOp.BOR with non-integral dtype\n")
    plan = plan_for(log.splitlines())
    assert plan is not None and plan.nodes == frozenset({"gpu-a1", "gpu-a2"})
    f = tmp_path / "pdsh.log"
    f.write_text(log)
    d = analyze([str(f)])
    assert d.root_cause.rule == "torch-reduce-op-unsupported"
    assert _lines(d) == [16]


def test_pdsh_dotted_exception_types_are_no_node_labels():
    lines = (_PDSH_HEAD + "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1275, unhandled cuda "
             "error\ntorch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1275, unhandled cuda error\n"
             "subprocess.CalledProcessError: Command '['pdsh', '-w', 'gpu-a1,gpu-a2']' returned non-zero exit status 1."
             "\nsubprocess.CalledProcessError: again\n").splitlines()
    plan = plan_for(lines)
    assert plan is not None and plan.nodes == frozenset({"gpu-a1", "gpu-a2"})


def test_pdsh_node_local_ranks_name_no_global_rank(tmp_path):
    # torchrun's "[default0]:" under two nodes' labels: two different global ranks, neither known
    tb = ("{n}: [default0]:Traceback (most recent call last):\n{n}: [default0]:  File \"/srv/train.py\", line 40, in "
          "<module>\n{n}: [default0]:    dist.all_reduce(t)\n"
          "{n}: [default0]:RuntimeError: CUDA error: an illegal memory access was encountered\n")
    f = tmp_path / "a.log"
    f.write_text(tb.format(n="node1") + tb.format(n="node2") + "node1: [default1]:hello\nnode2: [default1]:hello\n")
    d = analyze([str(f)])
    assert d.root_cause.id == "cuda_error"
    assert list(d.root_cause.ranks) == []


_HVD_TEARDOWN = ("Process 0 exit with status code 1.\nTerminating remaining workers after failure of Process 0.\n"
                 "Process 1 exit with status code {c}.\nProcess 2 exit with status code {c}.\n")


@pytest.mark.parametrize("code", ["-9", "-15"])
def test_horovod_teardown_victims_are_consequences(code):
    # Horovod's gloo runner SIGTERMs / SIGKILLs the other workers after the first failure: no OOM, Process 0 failed
    d, root = _root(_HVD_TEARDOWN.format(c=code))
    assert root == "peer_exit"
    assert d.root_cause.evidence[0].line == 1
    assert "Process 0" in d.root_cause.evidence[0].text


def test_horovod_killed_worker_is_no_oom():
    # a SIGKILL alone is Horovod's own teardown (after a failure, or horovodrun stopped), not the OOM killer
    _, root = _root("Process 2 exit with status code -9.\n")
    assert root != "host_oom"


def test_horovod_stream_prefix_keeps_the_rank():
    # safe_shell_exec's "[{index}]<stderr>:" prefix: the worker's own traceback, rank = Horovod's index
    log = ("[1]<stderr>:Traceback (most recent call last):\n[1]<stderr>:  File \"/srv/train.py\", line 40, in <module>\n"
           "[1]<stderr>:    step()\n[1]<stderr>:ValueError: batch shape mismatch in collate\n"
           "Process 1 exit with status code 1.\nTerminating remaining workers after failure of Process 1.\n"
           "Process 0 exit with status code -9.\n")
    d, root = _root(log)
    assert d.root_cause.rule == "python-app-exception"
    assert list(d.root_cause.ranks) == [1]
    assert _lines(d)[0] == 1
