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
