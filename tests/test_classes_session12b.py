"""The failure classes behind misses of the development sets fixtures/blind13 and fixtures/blind13h fixed in
session 12 by dev12b (docs/classes-session12b.md), each from what the program that prints the text does, with small
logs in the real formats (other prefixes, versions, rank counts) plus the public fixture, and healthy twins that
must stay as they were."""
from __future__ import annotations

from pathlib import Path

import pytest

from nccl_analyzer.analysis import analyze, analyze_text

FIX = Path(__file__).resolve().parent.parent / "fixtures"


def _root(log: str):
    d = analyze_text(log)
    return d, (d.root_cause.id if d.root_cause else None)


def _fixture_root(rel: str):
    d = analyze([str(FIX / rel / "log.txt")])
    return d, (d.root_cause.id if d.root_cause else None)


# -- 1. ProcessGroupWrapper's "Running collective" fingerprints differ at one sequence number ------------------------
def _fp(prefix: str, rank: int, seq: int, op: str, shape: str, dtype: str = "Float", tail: str = ")") -> str:
    return (f"{prefix}[Rank {rank}] Running collective: CollectiveFingerPrint(SequenceNumber={seq}, OpType={op}, "
            f"TensorShape={shape}, TensorDtypes={dtype}, TensorDeviceTypes=cuda{tail}")


_PREFIXES = [
    lambda r: f"[rank{r}]:[I1017 19:34:58.923985894 ProcessGroupWrapper.cpp:587] ",   # torch 2.4+ glog, rank prefix
    lambda r: f"I1129 13:58:58.693624 {1000 + r} ProcessGroupWrapper.cpp:620] ",      # torch 1.13-2.1 glog
    lambda r: f"[default{r}]:[I ProcessGroupWrapper.cpp:563] ",                      # torchrun --tee, short glog
]


@pytest.mark.parametrize("prefix", _PREFIXES)
@pytest.mark.parametrize("odd", [
    ("ALLREDUCE", "[77, 1]", "Float"),      # another length
    ("BROADCAST", "[100, 1]", "Float"),     # another op
    ("ALLREDUCE", "[100, 1]", "Half"),      # another dtype
])
def test_running_fingerprints_that_differ_are_a_collective_mismatch(prefix, odd):
    lines = [_fp(prefix(r), r, 38, "ALLREDUCE", "[100, 1]") for r in (0, 1, 3)]
    lines.insert(2, _fp(prefix(2), 2, 38, *odd))
    d, root = _root("\n".join(lines) + "\n")
    assert root == "collective_mismatch"
    assert d.root_cause.rule == "torch-fingerprints-differ"
    assert d.root_cause.ranks == (2,) or list(d.root_cause.ranks) == [2]


@pytest.mark.parametrize("prefix", _PREFIXES)
def test_running_fingerprints_that_agree_stay_healthy(prefix):
    lines = []
    for seq, op, shape in ((5, "ALLREDUCE", "[4096]"), (6, "BROADCAST", "[16]"), (7, "ALLGATHER", "[8, 2]")):
        lines += [_fp(prefix(r), r, seq, op, shape) for r in range(4)]
    lines.append(_fp(prefix(0), 0, 8, "REDUCE", "[3]"))  # rank 0 ahead: another number, not another collective
    d, root = _root("\n".join(lines) + "\n")
    assert root is None


def test_two_groups_with_one_number_say_nothing():
    pre = _PREFIXES[0]
    lines = [_fp(pre(0), 0, 3, "ALLREDUCE", "[8]"), _fp(pre(2), 0, 3, "ALLGATHER", "[4]"),
             _fp(pre(1), 1, 3, "ALLREDUCE", "[8]"), _fp(pre(3), 1, 3, "ALLGATHER", "[4]")]
    assert _root("\n".join(lines) + "\n")[1] is None


def test_ptychi47_fixture():
    d, root = _fixture_root("blind13/ptychi47_pr_allreduce_buffer_lengths_differ_77_vs_100_processgroupwrapper")
    assert root == "collective_mismatch"
    assert list(d.root_cause.ranks) == [2]


# -- 2. NCCL proxies of one node all report the same local rank gone -------------------------------------------------
@pytest.mark.parametrize("prefix", [
    lambda h, p, d: f"{h}:{p}:{p + 900} [{d}] ",
    lambda h, p, d: f"[2025-03-02 10:11:12] {h}:{p}:{p + 900} [{d}] ",
    lambda h, p, d: f"[rank{d}]:{h}:{p}:{p + 900} [{d}] ",
])
@pytest.mark.parametrize("gone,others", [(7, range(7)), (0, (1, 2, 3)), (3, (0, 1))])
def test_proxies_naming_one_local_rank_is_that_peer_gone(prefix, gone, others):
    lines = [prefix("gpu-a", 300 + d, d) + f"NCCL INFO [Service thread] Connection closed by localRank {gone}"
             for d in others]
    d, root = _root("\n".join(lines) + "\n")
    assert root == "peer_exit"
    assert list(d.root_cause.ranks) == [gone]


@pytest.mark.parametrize("lines", [
    # processes leaving one after the other: more than one local rank named
    ["n1:6727:7168 [1] NCCL INFO [Service thread] Connection closed by localRank 2",
     "n1:6728:7169 [2] NCCL INFO [Service thread] Connection closed by localRank 2",
     "n1:6727:7168 [1] NCCL INFO [Service thread] Connection closed by localRank 0"],
    # one process only
    ["n1:6727:7168 [1] NCCL INFO [Service thread] Connection closed by localRank 2",
     "n1:6727:7168 [1] NCCL INFO [Service thread] Connection closed by localRank 2"],
    # two nodes: a local rank names no global one
    ["n1:6727:7168 [1] NCCL INFO [Service thread] Connection closed by localRank 0",
     "n2:6728:7169 [2] NCCL INFO [Service thread] Connection closed by localRank 0"],
    # the connection that never said who it was (exit without destroying the communicators, nccl#851)
    ["n1:6727:7168 [1] NCCL INFO [Service thread] Connection closed by localRank -1",
     "n1:6728:7169 [2] NCCL INFO [Service thread] Connection closed by localRank -1"],
])
def test_proxy_closes_that_name_no_single_peer_stay_healthy(lines):
    assert _root("\n".join(lines) + "\n")[1] is None


def test_sglang5013_fixture():
    d, root = _fixture_root(
        "blind13h/sglang5013_a100_tp8_rank7_segfault_service_thread_connection_closed_by_localrank7")
    assert root == "peer_exit"
    assert list(d.root_cause.ranks) == [7]


# -- 3. connection lines picked out of a log (a topology question) are no "log ends while connecting" ---------------
_CONN = {
    "p2p_ipc": ["Channel 00/0 : 0[1a000] -> 1[1b000] via P2P/IPC", "Channel 00/0 : 1[1b000] -> 0[1a000] via P2P/IPC"],
    "shm": ["Channel 00/0 : 0[1a000] -> 1[1b000] via SHM/direct/direct", "Channel 00/0 : 1[1b000] -> 0[1a000] via SHM/direct/direct"],
    "network_connect": ["Channel 00/0 : 0[1a000] -> 1[1b000] [send] via NET/Socket/0",
                        "Channel 00/0 : 1[1b000] -> 0[1a000] [send] via NET/Socket/0"],
    "ib_rdma": ["Channel 00/0 : 0[1a000] -> 1[1b000] [send] via NET/IB/0/GDRDMA",
                "Channel 00/0 : 1[1b000] -> 0[1a000] [send] via NET/IB/0/GDRDMA"],
}
_SETUP = {
    "rings 2.7+": ["Channel 00/02 :    0   1", "Trees [0] 1/-1/-1->0->-1 [1] 1/-1/-1->0->-1"],
    "Init START 2.19+": [f"comm 0x55d0c1e{r} rank {r} nranks 2 cudaDev {r} nvmlDev {r} busId 1{'ab'[r]}000 "
                         "commId 0x7e11c0d2a4b3f001 - Init START" for r in (0, 1)],
    "channel counts 2.19+": ["2 coll channels, 0 collnet channels, 0 nvls channels, 2 p2p channels, 2 p2p channels per peer"],
}
# lines printed after the connections, each rank's phase marker (2.9+): placed after the connection lines
_AFTER = {"connected all rings 2.9+": ["Connected all rings"]}


def _proc_lines(bodies: list[str]) -> list[str]:
    return [f"gpu2-ru7:{2142 + i % 2}:{2554 + i % 2} [{i % 2}] NCCL INFO {b}" for i, b in enumerate(bodies)]


@pytest.mark.parametrize("want", sorted(_CONN))
@pytest.mark.parametrize("setup", sorted(_SETUP))
def test_log_ending_while_connecting_after_its_setup_still_names_the_transport(want, setup):
    setup_lines = _SETUP[setup] if len(_SETUP[setup]) == 2 and setup.startswith("Init") else _SETUP[setup] * 2
    log = "\n".join(_proc_lines(setup_lines + _CONN[want])) + "\n"
    d, root = _root(log)
    assert root == want
    assert d.root_cause.rule.endswith("-log-ends")


@pytest.mark.parametrize("want", sorted(_CONN))
def test_log_ending_after_connected_all_rings_still_names_the_transport(want):
    # nccl#733's kept chunk: ring connections, one rank's "Connected all rings", then nothing (its trees never came)
    log = "\n".join(_proc_lines(_CONN[want] + _AFTER["connected all rings 2.9+"])) + "\n"
    d, root = _root(log)
    assert root == want
    assert d.root_cause.rule.endswith("-log-ends")


@pytest.mark.parametrize("want", sorted(_CONN))
@pytest.mark.parametrize("form", ["prefixed", "device only", "numbered", "with the interface lines"])
def test_connection_lines_alone_are_an_excerpt_not_a_hang(want, form):
    lines = _proc_lines(_CONN[want])
    if form == "device only":
        lines = [f"[{i % 2}] NCCL INFO {b}" for i, b in enumerate(_CONN[want])]
    elif form == "numbered":
        lines = ["line content"] + [f"{i + 1}  [{i % 2}] NCCL INFO {b}" for i, b in enumerate(_CONN[want])]
    elif form == "with the interface lines":
        lines = _proc_lines(["Bootstrap : Using [0]eth0:10.30.0.127<0>", "NET/Socket : Using [0]eth0:10.30.0.127<0>"]) + lines
    assert _root("\n".join(lines) + "\n")[1] is None


@pytest.mark.parametrize("rel", [
    "blind13h/nccl385_question_ring_sequence_two_nodes_p2p_ipc_net_ib_gdrdma_numbered",
    "blind13/nccl278_question_two_nics_only_net_socket_0_used_two_nodes",
])
def test_topology_question_fixtures_are_healthy(rel):
    assert _fixture_root(rel)[1] is None


# -- 4. DeepSpeed's "<cmd> exits with return code = N" with its command list broken over two lines -----------------
_DS_HEAD = ("[2024-02-06 06:23:39,510] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', "
            "'--local_rank=7', '--deepspeed', 'ds.json', '--save_total_limi")


@pytest.mark.parametrize("code,want", [(-9, "host_oom"), (-7, "shm"), (1, "peer_exit")])
@pytest.mark.parametrize("tail", [
    "t', '1', '--learning_rate', '2e-3', '--report_to', 'wandb'] exits with return code = {code}",
    "wandb'] exits with return code = {code}",
    "'] exits with return code = {code}",
])
def test_deepspeed_return_code_with_its_command_list_wrapped(code, want, tail):
    d, root = _root(_DS_HEAD + "\n" + tail.format(code=code) + "\n")
    assert root == want


def test_deepspeed_return_code_in_prose_stays_prose():
    # a sentence that mentions the phrase is no log line (no list repr before it)
    assert _root("The launcher said the job exits with return code = -9 after a while, I think.\n")[1] is None


def test_llava1085_fixture():
    assert _fixture_root("blind13h/llava1085_wsl_pretrain_deepspeed_local_rank7_exits_return_code_minus9")[1] == "host_oom"


# -- 5. a system / remote error up through NCCL 2.4-2.12's network-plugin wrappers (include/net.h) -------------------
_NET_HEAD = ["dgxa100:1050:1315 [0] NCCL INFO Channel 00/0 : 0[90000] -> 1[1000] [send] via NET/Socket/0",
             "dgxa100:1050:1315 [0] NCCL INFO Channel 01/0 : 0[90000] -> 1[1000] [send] via NET/Socket/1"]


@pytest.mark.parametrize("trace", [
    ["include/net.h:25 -> 2", "transport/net.cc:515 -> 2"],                 # 2.12 sendProxyConnect -> ncclNetConnect
    ["include/net.h:26 -> 2", "transport/net.cc:640 -> 2"],                 # another wrapper (accept) of the list
    ["include/net.h:25 -> 6", "transport/net.cc:515 -> 6", "proxy.cc:1035 -> 6"],  # ncclRemoteError
])
@pytest.mark.parametrize("pre", ["dgxa100:1050:1316 [0] NCCL INFO ", "[0] NCCL INFO ",
                                 "[2022-07-01 10:00:00] dgxa100:1050:1316 [0] NCCL INFO "])
def test_net_plugin_wrapper_system_error_is_network_connect(trace, pre):
    d, root = _root("\n".join(_NET_HEAD + [pre + t for t in trace]) + "\n")
    assert root == "network_connect"


def test_net_plugin_wrapper_after_an_ib_trace_is_the_ib_error():
    lines = _NET_HEAD + ["dgxa100:1050:1316 [0] NCCL INFO transport/net_ib.cc:695 -> 2",
                         "dgxa100:1050:1316 [0] NCCL INFO include/net.h:25 -> 2",
                         "dgxa100:1050:1316 [0] NCCL INFO transport/net.cc:515 -> 2"]
    assert _root("\n".join(lines) + "\n")[1] == "ib_rdma"


def test_net_plugin_wrapper_cuda_error_stays_a_cuda_error():
    lines = _NET_HEAD + ["dgxa100:1050:1316 [0] NCCL INFO include/net.h:25 -> 1"]
    assert _root("\n".join(lines) + "\n")[1] == "cuda_error"


def test_nccl697_fixture():
    d, root = _fixture_root("blind13/nccl697_two_nodes_docker_bridge_interfaces_net_socket_connect_system_error")
    assert root == "network_connect"


# -- 6. NCCL <= 2.4's bootstrap (bootstrap.cu) losing a connection during init ---------------------------------------
@pytest.mark.parametrize("warn,traces", [
    ("include/socket.h:371 WARN Connection closed by remote peer",                         # 2.2 (no "NCCL" word)
     ["INFO transport/net_socket.cu:166 -> 2", "INFO bootstrap.cu:45 -> 2 [Net]", "INFO bootstrap.cu:259 -> 2"]),
    ("include/socket.h:390 NCCL WARN Call to recv failed : Connection reset by peer",       # 2.3
     ["NCCL INFO transport/net_socket.cu:163 -> 2", "NCCL INFO bootstrap.cu:40 -> 2 [Net]",
      "NCCL INFO bootstrap.cu:236 -> 2", "NCCL INFO init.cu:640 -> 2"]),
])
@pytest.mark.parametrize("head", ["node2:4411:4470 [0] ", "[1,3]<stderr>:node2:4411:4470 [0] "])
def test_legacy_bootstrap_lost_connection_is_network_connect(warn, traces, head):
    lines = [head + warn] + [head + t for t in traces]
    d, root = _root("\n".join(lines) + "\n")
    assert root == "network_connect"
    assert d.root_cause.rule == "nccl-legacy-bootstrap-peer-closed"


def test_legacy_bootstrap_lost_connection_after_a_crash_is_not_this_rule():
    lines = ["node2:4412:4412 [1] NCCL INFO NET : Using interface eth0:10.0.0.2<0>",
             "Caught signal 11 (Segmentation fault: address not mapped to object at address 0x17)",
             "node2:4411:4470 [0] include/socket.h:371 WARN Connection closed by remote peer",
             "node2:4411:4470 [0] INFO bootstrap.cu:45 -> 2 [Net]"]
    d, root = _root("\n".join(lines) + "\n")
    assert d.root_cause is None or d.root_cause.rule != "nccl-legacy-bootstrap-peer-closed"


def test_horovod666_fixture():
    d, root = _fixture_root("blind13/horovod666_two_servers_bootstrap_connection_closed_by_remote_peer_freeze")
    assert root == "network_connect"
