"""Root vs cascade across ranks, rank roles, evidence quoting, fix tailoring, healthy logs, provisional verdicts."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from nccl_analyzer.analysis import Analyzer, analyze, lines_of_text
from nccl_analyzer.model import SCHEMA

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "fixtures" / "h200-nccl-2.28.9"
CASES = ROOT / "fixtures" / "cases"
HEALTHY = ["01_ok_subsys_all", "07_net_socket_lo", "09_timestamp", "10_debug_file_contents", "14_topo_dump",
           "16_coll_subsys"]


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_logs_have_no_root_cause(name):
    d = analyze([str(H200 / name)])
    assert d.root_cause is None
    assert all(f.role != "root" for f in d.findings)


def test_oom_on_one_rank_is_root_and_timeouts_are_cascade():
    d = analyze([str(CASES / "syn_oom_rank3_watchdog_cascade")])
    rc = d.root_cause
    assert rc is not None and rc.id == "cuda_oom" and rc.ranks == (3,)
    roles = {r.rank: r.role for r in d.job.ranks.values()}
    assert roles[3] == "culprit" and {roles[r] for r in (0, 1, 2)} == {"victim"}
    cascade = [f for f in d.findings if f.id == "watchdog_timeout"]
    assert cascade and all(f.role == "cascade" for f in cascade)
    assert sum(f.role == "root" for f in d.findings) == 1
    assert "victim" in rc.explanation  # torchrun's first observed failure (rank 0) is called out as a victim


def test_lagging_rank_is_named_for_a_plain_timeout():
    d = analyze([str(CASES / "syn_watchdog_rank5_missing")])
    assert d.root_cause.id == "watchdog_timeout" and d.root_cause.ranks == (5,)
    d = analyze([str(CASES / "syn_watchdog_rank2_behind")])
    assert d.root_cause.ranks == (2,)


def test_app_exception_beats_the_victims_and_quotes_the_exception_line():
    d = analyze([str(CASES / "syn_app_assert_rank5")])
    rc = d.root_cause
    assert rc.id == "app_exception" and rc.ranks == (5,)
    key = rc.evidence[0]
    assert key.text.startswith("[rank5]: AssertionError")
    lines = (CASES / "syn_app_assert_rank5" / "log.txt").read_text().splitlines()
    assert lines[key.line - 1] == key.text  # verbatim, right line number


def test_evidence_is_verbatim_and_fix_uses_bound_values():
    d = analyze([str(H200 / "02_bad_ifname")])
    rc = d.root_cause
    text = (H200 / "02_bad_ifname" / "log.txt").read_text().splitlines()
    for e in rc.evidence:
        assert text[e.line - 1] == e.text
    assert "no socket interface found" in rc.evidence[0].text
    assert "eth9" in rc.fix.summary and "vm" in rc.fix.summary


def test_fix_lists_the_interfaces_the_log_shows():
    from nccl_analyzer.analysis import analyze_text
    log = ("vm:516:516 [0] NCCL INFO NET/Socket : Using [0]eth0:192.0.2.2<0> [1]ib0:10.0.0.2<0>\n"
           "vm:517:517 [1] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth9\n\n"
           "vm:517:517 [1] bootstrap.cc:114 NCCL WARN Bootstrap : no socket interface found\n")
    rc = analyze_text(log).root_cause
    assert rc.id == "socket_interface"
    assert "eth9" in rc.fix.summary and "eth0, ib0" in rc.fix.summary


def test_gloo_mismatch_names_both_collectives():
    d = analyze([str(H200 / "11_mismatch_gloo")])
    assert d.root_cause.id == "collective_mismatch"
    assert "all_reduce" in d.root_cause.title and "broadcast" in d.root_cause.title


def test_duplicate_gpu_job_model():
    d = analyze([str(H200 / "04_duplicate_gpu")])
    assert d.root_cause.id == "duplicate_gpu"
    ranks = d.job.ranks
    assert ranks[0].bus_id == ranks[1].bus_id == "60" and ranks[0].pid != ranks[1].pid


def test_json_contract_shape_and_determinism():
    a = analyze([str(H200 / "06_oom")]).to_dict()
    b = analyze([str(H200 / "06_oom")]).to_dict()
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert a["schema"] == SCHEMA
    assert set(a["root_cause"]) >= {"id", "title", "confidence", "ranks", "hosts", "evidence", "explanation", "fix"}
    assert set(a["root_cause"]["fix"]) == {"summary", "env", "commands"}
    for f in a["findings"]:
        assert f["role"] in ("root", "symptom", "cascade")
    assert a["job"]["nccl_versions"] == ["2.28.9+cuda13.0"]


def test_confidence_is_lower_for_weak_evidence():
    strong = analyze([str(H200 / "04_duplicate_gpu")]).root_cause.confidence
    weak = analyze([str(CASES / "syn_watchdog_stuck_heartbeat")]).root_cause.confidence
    assert strong > 0.9 and weak < 0.7


def test_provisional_verdict_appears_as_soon_as_the_evidence_does():
    a = Analyzer()
    lines = lines_of_text((H200 / "02_bad_ifname" / "log.txt").read_text(), "live")
    seen_at = None
    for ln in lines:
        a.feed(ln)
        p = a.provisional()
        if p is not None and seen_at is None:
            seen_at = ln.lineno
    assert seen_at is not None and seen_at <= 5  # the WARN is line 4
    assert a.finish().root_cause.id == "socket_interface"


def test_per_rank_files_from_torchrun_log_dir(tmp_path):
    src = (CASES / "syn_oom_rank3_watchdog_cascade" / "log.txt").read_text().splitlines()
    per: dict[int, list[str]] = {}
    import re
    for line in src:
        m = re.match(r"\[rank(\d)\]:", line) or re.match(r"gpu-node1:51(\d\d)", line)
        r = int(m.group(1)) % 100 if m else 0
        per.setdefault(r, []).append(line)
    for r, ls in per.items():
        (tmp_path / f"rank{r}.log").write_text("\n".join(ls) + "\n")
    d = analyze([str(tmp_path)])
    assert d.root_cause.id == "cuda_oom" and 3 in d.root_cause.ranks
