"""Session 13, dev13f (docs/classes-session13f.md): a connection to NCCL's listening socket that closes before it
sent the job's magic number (NCCL 2.22 .. 2.26 socketFinalizeAccept) is a connection from outside the job, not a
peer that exited; plus guards for the peer_exit readings this round left alone on purpose (Ray's worker-death
report, the heartbeat monitor's store polls), which must not drift to a guessed cause."""
from __future__ import annotations

from pathlib import Path

import pytest

from class_helpers import root as _root
from nccl_analyzer.analysis import analyze

FIX = Path(__file__).resolve().parent.parent / "fixtures"


def _closed_before_magic(prefix: str, magic_line: int, finalize_line: int, state_line: int, caller: str) -> str:
    return (f"{prefix}misc/socket.cc:{'50' if magic_line < 470 else '71'} NCCL WARN socketProgress: Connection closed "
            "by remote peer 10.20.0.9<40112>\n"
            f"{prefix}NCCL INFO misc/socket.cc:{'59' if magic_line < 470 else '80'} -> 6\n"
            f"{prefix}NCCL INFO misc/socket.cc:{magic_line} -> 6\n"
            f"{prefix}NCCL INFO misc/socket.cc:{finalize_line} -> 6\n"
            f"{prefix}NCCL INFO misc/socket.cc:{state_line} -> 6\n"
            f"{prefix}NCCL INFO {caller} -> 6\n")


# (magic recv, socketFinalizeAccept call, socketProgressState call in ncclSocketAccept) per release
_RELEASES = [(430, 564, 668, "bootstrap.cc:652"),   # 2.22
             (431, 566, 670, "proxy.cc:1490"),      # 2.23
             (474, 628, 731, "bootstrap.cc:701"),   # 2.24 / 2.25
             (475, 629, 732, "transport/net_socket.cc:390")]  # 2.26


@pytest.mark.parametrize("prefix", ["gpu-a:2201:2290 [3] ", "[0] "])
@pytest.mark.parametrize("lines", _RELEASES)
def test_connection_closed_before_the_magic_is_a_foreign_connection(prefix, lines):
    d, rid = _root(_closed_before_magic(prefix, *lines))
    assert rid == "other"
    assert d.root_cause.rule == "nccl-socket-closed-before-magic"
    assert [e.line for e in d.root_cause.evidence][:1] == [1]
    assert 3 in [e.line for e in d.root_cause.evidence]


def test_peer_closed_mid_transfer_stays_peer_exit():
    # near miss: the same WARN, but the trace goes through socketRecv / bootstrap's data recv, not the handshake
    log = ("gpu-a:2201:2290 [3] misc/socket.cc:71 NCCL WARN socketProgress: Connection closed by remote peer "
           "10.20.0.9<40112>\n"
           "gpu-a:2201:2290 [3] NCCL INFO misc/socket.cc:80 -> 6\n"
           "gpu-a:2201:2290 [3] NCCL INFO misc/socket.cc:845 -> 6\n"
           "gpu-a:2201:2290 [3] NCCL INFO bootstrap.cc:92 -> 6\n")
    d, rid = _root(log)
    assert rid == "peer_exit"
    assert d.root_cause.rule != "nccl-socket-closed-before-magic"


def test_one_handshake_line_alone_is_not_enough():
    # only the magic-recv line of the trace, without socketFinalizeAccept's caller: not the handshake's fingerprint
    log = ("gpu-a:2201:2290 [3] misc/socket.cc:71 NCCL WARN socketProgress: Connection closed by remote peer "
           "10.20.0.9<40112>\n"
           "gpu-a:2201:2290 [3] NCCL INFO misc/socket.cc:80 -> 6\n"
           "gpu-a:2201:2290 [3] NCCL INFO misc/socket.cc:474 -> 6\n"
           "gpu-a:2201:2290 [3] NCCL INFO bootstrap.cc:92 -> 6\n")
    d, rid = _root(log)
    assert d.root_cause.rule != "nccl-socket-closed-before-magic"


def test_healthy_init_with_these_line_numbers_in_info_is_no_failure():
    log = ("gpu-a:2201:2201 [0] NCCL INFO Bootstrap : Using eth0:10.20.0.8<0>\n"
           "gpu-a:2201:2201 [0] NCCL INFO NCCL version 2.25.1+cuda12.8\n"
           "gpu-a:2201:2201 [0] NCCL INFO comm 0x55d0 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE\n")
    _, rid = _root(log)
    assert rid is None


def test_fixture_nccl1612():
    d = analyze([str(FIX / "blind2" / "nccl1612_bootstrap_closed_before_magic_scan" / "log.txt")])
    assert d.root_cause.id == "other"
    assert d.root_cause.rule == "nccl-socket-closed-before-magic"


# -- guards: readings left alone on purpose (docs/classes-session13f.md) ---------------------------------------------
_RAY_DIED = ("(raylet) A worker died or was killed while executing a task by an unexpected system error. To "
             "troubleshoot the problem, check the logs for the dead worker. Worker exit type: SYSTEM_ERROR Worker exit "
             "detail: Worker unexpectedly exits with a connection error code 2. End of file. There are some potential "
             "root causes. (1) The process is killed by SIGKILL by OOM killer due to high memory usage. (2) ray stop "
             "--force is called. (3) The worker is crashed unexpectedly due to SIGSEGV or other unexpected errors.\n")


def test_ray_system_error_death_report_lists_causes_and_stays_peer_exit():
    _, rid = _root(_RAY_DIED)
    assert rid == "peer_exit"


def test_ray_memory_monitor_kill_is_host_oom():
    log = ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory. Memory on the "
           "node (IP: 10.0.0.5, ID: 3f2a) where the task was running was 61.2GB / 64.0GB (0.956), which exceeds the "
           "memory usage threshold of 0.95. Ray killed this worker (ID: 9c1e) because it was the most recently "
           "scheduled task.\n")
    _, rid = _root(log)
    assert rid == "host_oom"


def test_should_dump_store_poll_with_a_lost_store_stays_peer_exit():
    log = ('[rank3]:[W0412 09:41:07.112233445 ProcessGroupNCCL.cpp:1771] [PG ID 0 PG GUID 0 Rank 3] Failed to check '
           'the "should dump" flag on TCPStore, (maybe TCPStore server has shut down too early), with error: '
           'Connection reset by peer\n'
           '[rank5]:[W0412 09:41:07.190011223 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=41, '
           'addr=[node2]:51022, remote=[node1]:29500): Connection reset by peer\n')
    _, rid = _root(log)
    assert rid == "peer_exit"
