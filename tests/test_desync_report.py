"""The desync report of TORCH_NCCL_DESYNC_DEBUG=1 (torch/csrc/distributed/c10d/TraceUtils.h, retrieveDesyncReport):
its lagging-rank lines name the culprit; a report that lists every rank names none."""
from __future__ import annotations

from nccl_analyzer.analysis import analyze_text

HEAD = ("node1:2210:2210 [0] NCCL INFO comm 0x55a3c2e0 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 18000 "
        "commId 0x4d1c9e2f00a1b2c3 - Init START\n"
        "node1:2210:2210 [0] NCCL INFO comm 0x55a3c2e0 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 18000 "
        "commId 0x4d1c9e2f00a1b2c3 - Init COMPLETE\n"
        "[rank0]:[E ProcessGroupNCCL.cpp:563] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL("
        "SeqNum=12, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)=600000) ran for 600086 milliseconds before "
        "timing out.\n"
        "[rank0]:[E ProcessGroupNCCL.cpp:1582] [PG 0 Rank 0] Desync report:\n"
        "\t - [0] Timeout at collective: ALLREDUCE, #12\n"
        "\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:\n")


def test_joined_and_finished_lines_name_the_lagging_ranks():
    d = analyze_text(HEAD + "\t   - [1] joined but didn't finish collective #11 (count from 1)\n"
                            "\t     [3] finished collective #11, but didn't join collective #12 (count from 1)\n")
    rc = d.root_cause
    assert rc is not None and rc.id == "watchdog_timeout"
    assert rc.ranks == (1, 3)


def test_finished_line_alone_names_its_rank():
    d = analyze_text(HEAD + "\t     [3] finished collective #11, but didn't join collective #12 (count from 1)\n")
    assert d.root_cause.id == "watchdog_timeout" and d.root_cause.ranks == (3,)
    assert "lagging rank 3" in d.root_cause.title


def test_every_rank_joined_names_no_culprit():
    d = analyze_text(HEAD + "\t   - [0, 1, 2, 3] joined but didn't finish collective #12 (count from 1)\n")
    rc = d.root_cause
    assert rc is not None and rc.id == "watchdog_timeout"
    assert "lagging" not in rc.title
