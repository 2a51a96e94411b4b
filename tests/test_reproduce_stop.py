"""--reproduce says only what it showed: NOT APPLICABLE for program faults, a generic-timeout note for gloo
watchdog staging, and SIGTERM / Ctrl-C during a real torchrun run stop every process of it."""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nccl_analyzer.model import Diagnosis, Fix, JobModel, RankInfo, RootCause
from nccl_analyzer.reproduce import LocalInfo, stage
from nccl_analyzer.reproduce.compare import FIXED, NOT_APPLICABLE, Verdict, judge_control
from nccl_analyzer.reproduce.plan import GENERIC_TIMEOUT, SCENARIOS
from nccl_analyzer.reproduce.run import RunResult

ROOT = Path(__file__).resolve().parents[1]
SLEEPS = ROOT / "fixtures" / "cases" / "cpu_gloo_rank3_sleeps" / "log.txt"
HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is not installed (torch==2.13.0 gives a CPU build)")
CPU = LocalInfo(torch=True, gpus=0, interfaces=("lo", "eth0"), default_interface="eth0")
ONE_GPU = LocalInfo(torch=True, gpus=2, interfaces=("lo", "eth0"), default_interface="eth0")


def _diag(root: str, backend: str = "gloo") -> Diagnosis:
    infos = {r: RankInfo(rank=r, host="node-0", last_collective={"op": "ALLREDUCE", "numel": 64, "dtype": "Float"})
             for r in range(2)}
    job = JobModel(ranks=infos, backend=backend, world_size=2)
    rc = RootCause(id=root, title=root, confidence=0.9, ranks=(1,), hosts=("node-0",), evidence=(), explanation="",
                   fix=Fix(summary="fix it"))
    return Diagnosis(inputs=[], root_cause=rc, findings=[], job=job)


@pytest.mark.parametrize("root", ["app_exception", "peer_exit", "collective_mismatch", "invalid_usage", "cuda_error",
                                  "cuda_oom", "watchdog_timeout"])
def test_program_faults_are_marked(root):
    """Causes whose fix run can only leave our planted fault out say what the fault is (-> NOT APPLICABLE)."""
    assert SCENARIOS[root].program_fault


@pytest.mark.parametrize("root", ["socket_interface", "port_conflict", "rendezvous_unreachable", "duplicate_gpu",
                                  "gpu_visibility", "ib_rdma", "p2p_ipc", "shm"])
def test_setting_fixes_are_not_marked(root):
    """Causes whose fix run applies the proposed setting to the same mechanism can still be FIXED."""
    assert not SCENARIOS[root].program_fault


def _result(rc: int | None, tmp_path: Path) -> RunResult:
    log = tmp_path / "fix.log"
    log.write_text("done\n")
    return RunResult(rc, False, 2.0, str(log), str(tmp_path / "p.json"), ("x",))


def test_judge_control_is_never_fixed(tmp_path):
    ok = judge_control("one rank raises RuntimeError", "do not raise", "app_exception", _result(0, tmp_path),
                       Verdict(None, None, None))
    assert ok[0] == NOT_APPLICABLE and ok[0] != FIXED
    assert ok[1].startswith("the fix is in your program: the reproduction showed that one rank raises RuntimeError "
                            "gives app_exception here")
    assert "finished cleanly" in ok[1] and "communication setup itself works" in ok[1]
    bad = judge_control("one rank raises RuntimeError", "do not raise", "app_exception", _result(1, tmp_path),
                        Verdict("peer_exit", None, None))
    assert bad[0] == NOT_APPLICABLE and "did not finish cleanly either" in bad[1] and "peer_exit" in bad[1]


def test_gloo_watchdog_staging_says_it_is_a_generic_timeout():
    staging, _ = stage(_diag("watchdog_timeout"), CPU)
    assert staging.plan.backend == "gloo" and GENERIC_TIMEOUT in staging.notes
    assert "not the same hang" in GENERIC_TIMEOUT


def test_nccl_watchdog_staging_on_gpus_has_no_generic_note():
    staging, _ = stage(_diag("watchdog_timeout", backend="nccl"), ONE_GPU)
    assert staging.plan.backend == "nccl" and GENERIC_TIMEOUT not in staging.notes


# ------------------------------------------------------------------------------------ real runs, signals

def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            rest = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if rest[0] == "Z" else rest[19]


def _descendants(root: int) -> dict[int, str]:
    parent = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as fh:
                    rest = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parent[int(name)] = int(rest[1])
    found, todo = {}, [root]
    while todo:
        p = todo.pop()
        for child, par in parent.items():
            if par == p and child not in found:
                st = _start_time(child)
                if st:
                    found[child] = st
                    todo.append(child)
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.slow
@needs_torch
@pytest.mark.parametrize("sig,status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_signal_during_reproduce_stops_every_worker(sig, status, tmp_path):
    """A real torchrun/gloo reproduction (rank 1 sleeps 12 s) is interrupted once its ranks run: the CLI exits
    128+signal, says so, writes the report, and no process of the run is left (ranks run in sessions of their own,
    so the whole tree is checked in /proc, not only our process group)."""
    out = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "nccl_analyzer", str(SLEEPS), "--reproduce", "--timeout", "300",
                             "--format", "json", "-o", str(out)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: dict[int, str] = {}
    deadline = time.monotonic() + 300
    ranks = []
    while time.monotonic() < deadline and proc.poll() is None:
        seen.update(_descendants(proc.pid))
        ranks = [p for p in seen if "nccl_analyzer.reproduce.worker" in _cmdline(p) and "--launch" not in _cmdline(p)]
        if len(ranks) >= 2:
            break
        time.sleep(0.2)
    assert proc.poll() is None and len(ranks) >= 2, f"the ranks never started: {proc.communicate()}"
    time.sleep(1.0)  # let the ranks get into their collective
    seen.update(_descendants(proc.pid))
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == status, stderr
    assert "Traceback" not in stderr
    assert f"interrupted by {signal.Signals(sig).name}" in stderr and "processes were stopped" in stderr, stderr
    alive = {p: _cmdline(p) for p, st in seen.items() if _start_time(p) == st}
    assert alive == {}, f"left running: {alive}"
    rep = json.loads(out.read_text())["reproduction"]
    assert rep["outcome"] == "INCONCLUSIVE" and signal.Signals(sig).name in rep["reason"]
