"""Session 17 (dev17c): failing logs that were answered "no failure" -- torch's "NCCL error in:" behind the program's
own words with a result string NCCL does not print, XLA's rendezvous "may be stuck" warning that ends the log, and
NCCL's socket interfaces including lo on a job across hosts that ends in init. Small logs built here (not copies of
fixtures), each class with near misses that must stay as they are."""
from __future__ import annotations

from pathlib import Path

from nccl_analyzer import analyze


def _diag(tmp_path: Path, text: str):
    p = tmp_path / "log.txt"
    p.write_text(text)
    return analyze([str(p)])


def _verdict(tmp_path: Path, text: str):
    return _diag(tmp_path, text).root_cause


# --- 1. torch's C10D_NCCL_CHECK text behind the program's own words -------------------------------------------------

def test_torch_nccl_error_in_with_unknown_result_string_is_a_failure(tmp_path):
    rc = _verdict(tmp_path, "fail to init... err= NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:272, "
                            "unhandeled sytem error\n")
    assert rc is not None and rc.id == "other"
    assert rc.rule == "failsafe:text:torch-nccl-error-in-text"


def test_torch_nccl_error_in_with_known_result_string_keeps_its_meaning(tmp_path):
    # the result string is still looked up (nccl.toml): a CUDA failure stays cuda_error
    rc = _verdict(tmp_path, "caught: NCCL error in: /opt/torch/csrc/distributed/c10d/NCCLUtils.hpp:219, "
                            "unhandled cuda error, NCCL version 2.14.3\n")
    assert rc is not None and rc.id == "cuda_error"


def test_words_about_nccl_errors_without_the_check_format_stay_healthy(tmp_path):
    assert _verdict(tmp_path, "If you see an NCCL error in the output, rerun with NCCL_DEBUG=INFO\nstep 10 loss 1.2\n") is None


# --- 2. XLA's rendezvous warning --------------------------------------------------------------------------------------

XLA_STUCK = ("2024-07-29 17:14:59.920189: E external/xla/xla/service/rendezvous.cc:38] This thread has been waiting "
             "for `initialize clique for rank 1; clique=devices=[0,1]; stream=0; run_id=7` for 10 seconds and may be "
             "stuck. Expected 2 threads to join the rendezvous, but not all of them arrived on time.\n")


def test_xla_rendezvous_stuck_ending_the_log_is_a_hang(tmp_path):
    rc = _verdict(tmp_path, "I0729 17:14:40 jax startup\n" + XLA_STUCK)
    assert rc is not None and rc.id == "watchdog_timeout"
    assert rc.rule == "jax-rendezvous-stuck-log-ends"
    assert rc.confidence <= 0.35
    assert "initialize clique for rank 1" in rc.title


def test_xla_rendezvous_unstuck_is_no_failure_and_dismissed(tmp_path):
    d = _diag(tmp_path, XLA_STUCK + "2024-07-29 17:15:02.000001: E external/xla/xla/service/rendezvous.cc:44] Thread "
                                    "is unstuck! Warning above was a false-positive. Perhaps the timeout is too short.\n")
    assert d.root_cause is None
    assert any("xla-rendezvous-stuck" in g.reason for g in d.dismissed)


def test_xla_rendezvous_stuck_then_progress_is_no_failure(tmp_path):
    assert _verdict(tmp_path, XLA_STUCK + "step 1 loss 2.30\nstep 2 loss 2.28\n") is None


def test_xla_rendezvous_termination_is_watchdog_timeout(tmp_path):
    rc = _verdict(tmp_path, XLA_STUCK + "2024-07-29 17:19:59.920189: E external/xla/xla/service/rendezvous.cc:52] "
                                        "Termination timeout for `initialize clique for rank 1` of 300 seconds exceeded."
                                        " Exiting to ensure a consistent program state.\n")
    assert rc is not None and rc.id == "watchdog_timeout"
    assert rc.rule != "jax-rendezvous-stuck-log-ends"


# --- 3. lo among NCCL's socket interfaces on a job across hosts, the log ends in init ---------------------------------

LO_TWO_HOSTS = (
    "c1:4880:5140 [1] NCCL INFO comm 0x7f19bc4046d0 rank 3 nranks 4\n"
    "c1:4880:5140 [1] NCCL INFO NET : Using interface lo:127.0.0.1<0>\n"
    "c1:4880:5140 [1] NCCL INFO NET : Using interface eth0:10.1.0.12<0>\n"
    "c1:4880:5140 [1] NCCL INFO NET/Socket : 2 interfaces found\n"
    "c2:2494:2756 [1] NCCL INFO comm 0x7f2bd8406d50 rank 1 nranks 4\n"
    "c2:2494:2756 [1] NCCL INFO NET : Using interface lo:127.0.0.1<0>\n"
    "c2:2494:2756 [1] NCCL INFO NET : Using interface eth0:10.1.0.7<0>\n"
    "c2:2494:2756 [1] NCCL INFO NET/Socket : 2 interfaces found\n"
    "c2:2494:2756 [1] NCCL INFO CUDA Dev 1, IP Interfaces : lo(SOC) eth0(SOC)\n"
)


def test_loopback_interface_across_hosts_log_ends_is_socket_interface(tmp_path):
    rc = _verdict(tmp_path, LO_TWO_HOSTS)
    assert rc is not None and rc.id == "socket_interface"
    assert rc.rule == "hang-socket-loopback-hosts-log-ends"
    assert rc.confidence <= 0.35


def test_loopback_interface_later_in_the_list_across_hosts(tmp_path):
    rc = _verdict(tmp_path, "a1:11:11 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0> [1]lo:127.0.0.1<0>\n"
                            "a2:12:12 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0> [1]lo:127.0.0.1<0>\n")
    assert rc is not None and rc.rule == "hang-socket-loopback-hosts-log-ends"


def test_loopback_interface_on_one_host_stays_healthy(tmp_path):
    one = "".join(l for l in LO_TWO_HOSTS.splitlines(keepends=True) if l.startswith("c1:"))
    assert _verdict(tmp_path, one) is None


def test_loopback_interface_across_hosts_then_init_complete_stays_healthy(tmp_path):
    rc = _verdict(tmp_path, LO_TWO_HOSTS
                  + "c1:4880:5140 [1] NCCL INFO comm 0x7f19bc4046d0 rank 3 nranks 4 cudaDev 1 busId 2000 - Init COMPLETE\n"
                  + "c2:2494:2756 [1] NCCL INFO comm 0x7f2bd8406d50 rank 1 nranks 4 cudaDev 1 busId 2000 - Init COMPLETE\n")
    assert rc is None


def test_loopback_interface_across_hosts_then_training_stays_healthy(tmp_path):
    assert _verdict(tmp_path, LO_TWO_HOSTS + "epoch 0 step 100 loss 2.01\nepoch 0 step 200 loss 1.87\n") is None


def test_routable_interfaces_across_hosts_stay_healthy(tmp_path):
    assert _verdict(tmp_path, LO_TWO_HOSTS.replace("lo:127.0.0.1", "ib0:192.168.5.3")) is None


def test_loopback_with_refused_connects_stays_the_stronger_rule(tmp_path):
    rc = _verdict(tmp_path, LO_TWO_HOSTS + "c2:2494:2756 [1] include/socket.h:361 NCCL WARN Call to connect timeout : "
                                           "Connection refused\nc2:2494:2756 [1] NCCL INFO bootstrap.cu:19 -> 2\n")
    assert rc is not None and rc.rule == "nccl-socket-loopback-peer"


# --- 4. slurmd's start-up notices in its own daemon log: counted, and dismissed with their reason ----------------------

SLURMD = ("[2020-12-30T05:11:27.540] error: Domain socket directory /var/spool/slurmd: No such file or directory\n"
          "[2020-12-30T05:11:27.552] error: Node configuration differs from hardware: Procs=16:16(hw) Boards=1:1(hw)\n"
          "[2020-12-30T05:11:27.642] slurmd started on Wed, 30 Dec 2020 05:11:27 +0000\n"
          "[2020-12-30T05:11:51.873] Launching batch job 25 for UID 1000\n")


def test_slurmd_startup_notices_are_dismissed_with_their_reason(tmp_path):
    d = _diag(tmp_path, SLURMD)
    assert d.root_cause is None
    assert sum(g.count for g in d.dismissed if "slurmd-startup-notice" in g.reason) == 2


def test_slurmstepd_oom_in_the_same_log_is_still_a_failure(tmp_path):
    rc = _verdict(tmp_path, SLURMD + "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=25.batch. Some of your "
                                     "processes may have been killed by the cgroup out-of-memory handler.\n")
    assert rc is not None and rc.id == "host_oom"
