"""Failure classes of multi-rank CPU (gloo) jobs, on real torchrun jobs run here (issue 9): the mechanism's own
message decides the cause and, where the message names it, the culprit rank. The captured runs of the same worker
are labeled cases (fixtures/cases/cpu_gloo_*; made by fixtures/cases/_capture/gloo2/capture_gloo2.sh)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobs.jobkit import env, free_port, needs_torch, run_job, torchrun  # noqa: E402

from nccl_analyzer.analysis import analyze  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "fixtures" / "cases" / "_capture" / "gloo2" / "gloo2_worker.py"


def _run(tmp_path: Path, mode: str, nproc: int = 4, **envs: str) -> Path:
    out = run_job(torchrun(mode, nproc, free_port(), script=WORKER), merged=False, cwd=tmp_path,
                  env=env(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **envs))
    assert out.returncode != 0, out.stdout + out.stderr
    log = tmp_path / "log.txt"
    log.write_text(out.stdout + out.stderr)
    return log


@needs_torch
@pytest.mark.parametrize("mode,nproc,want,ranks", [
    # rank 0's monitored barrier names the rank that never checked in; the others only report rank 0's error
    ("monitored_barrier", 4, "watchdog_timeout", (2,)),
    # gloo's own argument check raises on the rank that made the bad call; its peers lose their connection
    ("allgather_list", 3, "invalid_usage", (1,)),
    # SIGKILL while inside a collective: torchrun's report names the killed rank, the others see resets
    ("kill_mid_allreduce", 3, "host_oom", (2,)),
])
def test_live_gloo_failure_class_and_culprit(tmp_path, mode, nproc, want, ranks):
    d = analyze([str(_run(tmp_path, mode, nproc, PG_TIMEOUT="20"))])
    assert d.root_cause is not None and d.root_cause.id == want, d.root_cause
    assert d.root_cause.ranks == ranks, d.root_cause.title


@needs_torch
def test_live_rank_leaving_with_status_0_blames_no_victim(tmp_path):
    # rank 3 exits 0 before the barrier: the ranks in torchrun's report are the ones that lost their peer, so no rank
    # of the report is the culprit (the one that left is in no line the analyzer can read as a rank's)
    d = analyze([str(_run(tmp_path, "exit0", 4))])
    assert d.root_cause is not None and d.root_cause.id == "peer_exit"
    assert not set(d.root_cause.ranks) & {0, 1, 2}, d.root_cause.ranks
