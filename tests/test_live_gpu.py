"""Live use with real NCCL jobs on a GPU (pipe and launch); skipped where there is no CUDA GPU.

Run on a GPU machine: python -m pytest -m gpu tests/test_live_gpu.py  (LIVE_GPU_RECORD=DIR keeps the outputs)
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from jobs.jobkit import ROOT, analyzer, env, final_verdict, held_port, run_job, torchrun

JOB = ROOT / "tests" / "jobs" / "nccl_job.py"


def _gpus() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


pytestmark = [pytest.mark.gpu, pytest.mark.slow,
              pytest.mark.skipif(_gpus() < 1, reason="needs an NVIDIA GPU with CUDA torch (NCCL backend)")]

#: taxonomy id -> (nccl_job.py mode, hold the master port first, extra env)
CASES = {
    "app_exception": ("raise", False, {}),
    "cuda_oom": ("oom", False, {}),
    "port_conflict": ("ok", True, {}),
    "watchdog_timeout": ("hang", False, {"JOB_TIMEOUT": "8"}),
}


def _torchrun(mode: str, port: int) -> list[str]:
    return torchrun(mode, 1, port, script=JOB)


def _record(name: str, **files: bytes | str) -> None:
    out = os.environ.get("LIVE_GPU_RECORD")
    if not out:
        return
    d = Path(out) / name
    d.mkdir(parents=True, exist_ok=True)
    for fname, data in files.items():
        (d / fname.replace("_", ".", 1)).write_bytes(data if isinstance(data, bytes) else data.encode())


@pytest.mark.parametrize("cause", sorted(CASES))
def test_pipe_nccl_job(cause, tmp_path):
    mode, hold, extra = CASES[cause]
    with held_port(hold) as port:
        # a real shell pipeline, as a user types it; tee keeps what torchrun wrote for the byte comparison
        raw = tmp_path / "raw.log"
        cmd = " ".join(_torchrun(mode, port)) + f" 2>&1 | tee {raw} | " + " ".join(analyzer("-"))
        proc = run_job(["bash", "-o", "pipefail", "-c", cmd], merged=False, text=False,
                       env=env(NCCL_DEBUG="INFO", **extra))
    _record(f"pipe_{cause}", stdout_log=proc.stdout, stderr_txt=proc.stderr, raw_log=raw.read_bytes())
    assert proc.stdout == raw.read_bytes(), "the pass-through is byte-identical"
    verdict = final_verdict(proc.stderr.decode())
    assert f"error[{cause}]" in verdict, proc.stderr.decode()[-3000:]
    if not hold:  # with the port taken, torchrun fails in the rendezvous: no rank ever starts NCCL
        assert b"NCCL INFO" in proc.stdout


@pytest.mark.parametrize("cause", ["app_exception", "cuda_oom"])
def test_launch_nccl_job(cause, tmp_path):
    mode, hold, extra = CASES[cause]
    logdir = tmp_path / "launch"
    with held_port(hold) as port:
        proc = run_job(analyzer("launch", "--log-dir", str(logdir), "--", *_torchrun(mode, port)), merged=False,
                       text=False, env=env(**extra))
    _record(f"launch_{cause}", stdout_log=proc.stdout, stderr_txt=proc.stderr,
            job_log=(logdir / "job.log").read_bytes())
    assert proc.returncode == 1, "launch exits with torchrun's status"
    assert "NCCL_DEBUG=INFO" in proc.stderr.decode(), "launch says what it added to the environment"
    assert f"error[{cause}]" in final_verdict(proc.stderr.decode())
    assert b"NCCL INFO" in (logdir / "job.log").read_bytes()
    assert (logdir / "report.txt").exists()
    shutil.rmtree(logdir)
