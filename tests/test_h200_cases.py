"""Real single-GPU captures (fixtures/cases/h200_*): the verdict is right for the right reason (ranks, title,
evidence, fix), not only the taxonomy id that `eval` checks."""
from __future__ import annotations

from pathlib import Path

from nccl_analyzer.analysis import analyze
from nccl_analyzer.engine.run import render_title

CASES = Path(__file__).resolve().parent.parent / "fixtures" / "cases"


def _rc(name):
    d = analyze([str(CASES / name)])
    assert d.root_cause is not None
    return d, d.root_cause


def test_one_rank_world_watchdog_names_the_rank_itself():
    for name in ("h200_watchdog_timeout", "h200_watchdog_fr_heartbeat"):
        _, rc = _rc(name)
        assert rc.id == "watchdog_timeout" and rc.ranks == (0,)
        assert "unknown" not in rc.title and "only rank" in rc.title


def test_rank_less_traceback_is_attributed_to_torchruns_first_failed_rank():
    d, rc = _rc("h200_local_rank_ordinal")
    assert rc.id == "gpu_visibility" and rc.ranks == (1,)
    assert {r.rank: r.role for r in d.job.ranks.values()} == {0: "victim", 1: "culprit"}
    assert all(1 not in f.ranks for f in d.findings if f.role == "cascade")


def test_ranks_named_by_the_message_itself():
    _, rc = _rc("h200_nodebug_duplicate_gpu")
    assert rc.id == "duplicate_gpu" and rc.ranks == (0, 1)


def test_label_line_is_not_evidence():
    _, rc = _rc("h200_nccl_oom_init")
    assert rc.id == "cuda_oom"
    assert all(e.text.strip() != "Last error:" for e in rc.evidence)
    assert any("Cuda failure 'out of memory'" == e.text for e in rc.evidence)


def test_nccl_comm_id_port_taken():
    _, rc = _rc("h200_nccl_comm_id_port_taken")
    assert rc.id == "port_conflict" and "{" not in rc.title and "NCCL_COMM_ID=127.0.0.1:29612" in rc.title
    assert "NCCL_COMM_ID" in rc.fix.summary


def test_title_without_a_bound_placeholder_drops_its_parenthesis():
    assert render_title("The port is already in use (port {port})", {}) == "The port is already in use"
    assert render_title("The port is already in use (port {port})", {"port": 1}) == \
        "The port is already in use (port 1)"
    assert render_title("Rank {rank} failed", {}) == "Rank ? failed"
