"""Inputs that cannot be one job are named in a warning (text and JSON); a per-rank split of one job is not."""
from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from nccl_analyzer.analysis import analyze
from nccl_analyzer.cli import main
from nccl_analyzer.jobs import InputFacts, reasons

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "fixtures" / "h200-nccl-2.28.9"
DUP = H200 / "04_duplicate_gpu" / "log.txt"
OOM = H200 / "06_oom" / "log.txt"
MARK = "look like two different jobs"


def _job_warnings(d) -> list[str]:
    return [w for w in d.warnings if MARK in w]


def test_two_real_jobs_given_together_warn_in_json_and_text():
    res = CliRunner().invoke(main, [str(DUP), str(OOM), "--format", "json"])
    doc = json.loads(res.stdout)
    found = [w for w in doc["warnings"] if MARK in w]
    assert len(found) == 1, doc["warnings"]
    w = found[0]
    assert str(DUP) in w and str(OOM) in w
    assert "no NCCL communicator (commId) in common" in w and "world size 2 vs 1" in w
    assert "each has its own rank 0 (pid 588 on vm vs pid 680 on vm)" in w
    assert "Analyze each job on its own" in w
    text = CliRunner().invoke(main, [str(DUP), str(OOM)])
    assert f"warning: {w}" in text.stdout


def test_per_rank_split_of_one_job_does_not_warn(tmp_path):
    """04_duplicate_gpu split by process (pid 588 = rank 0, 589 = rank 1) into two files, as NCCL_DEBUG_FILE
    would write them: the same job, so no warning."""
    lines = DUP.read_text().splitlines(keepends=True)
    files = {"588": [], "589": []}
    for ln in lines:
        m = re.search(r"vm:(58[89]):", ln)
        files[m.group(1) if m else "588"].append(ln)
    paths = []
    for pid, part in files.items():
        p = tmp_path / f"nccl.{pid}.log"
        p.write_text("".join(part))
        paths.append(p)
    d = analyze(paths)
    assert d.root_cause.id == "duplicate_gpu"
    assert _job_warnings(d) == []


def test_rank_prefix_split_of_a_real_gloo_job_does_not_warn(tmp_path):
    """A real 4-rank torchrun job cut into one file per "[rankN]:" prefix (lines without one go to rank 0's)."""
    src = ROOT / "fixtures" / "cases" / "cpu_gloo_rank3_sleeps" / "log.txt"
    parts: dict[str, list[str]] = {}
    for ln in src.read_text().splitlines(keepends=True):
        m = re.match(r"\[rank(\d+)\]:", ln)
        parts.setdefault(m.group(1) if m else "0", []).append(ln)
    assert len(parts) >= 3
    paths = []
    for r, part in sorted(parts.items()):
        p = tmp_path / f"rank{r}.log"
        p.write_text("".join(part))
        paths.append(p)
    d = analyze(paths)
    assert d.root_cause.id == "watchdog_timeout" and _job_warnings(d) == []


def test_one_signal_alone_is_not_enough():
    a = InputFacts(comm_ids={"0x1"}, world_sizes={8}, hosts={"n1"})
    b = InputFacts(comm_ids={"0x2"}, world_sizes={8}, hosts={"n2"})  # an elastic restart or a sub-group only
    assert reasons(a, b) == ["no NCCL communicator (commId) in common"]


def test_hosts_apart_need_times_apart():
    a = InputFacts(hosts={"n1"}, first_time="2026-11-29 10:00:00", last_time="2026-11-29 10:05:00")
    b = InputFacts(hosts={"n2"}, first_time="2026-11-29 10:01:00", last_time="2026-11-29 10:02:00")
    assert reasons(a, b) == []  # two nodes of one job, at the same time
    b.first_time, b.last_time = "2026-11-29 11:00:00", "2026-11-29 11:02:00"
    assert reasons(a, b) == ["other hosts, at times that do not overlap"]
    # glog times have no year: never compared across inputs
    a.first_time, a.last_time = "I1129 10:00:00.1", "I1129 10:05:00.1"
    assert reasons(a, b) == []
