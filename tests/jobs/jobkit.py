"""Helpers for the live/launch tests: real torchrun jobs on CPU (gloo), ports, analyzer commands."""
from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import sys
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]
JOBS = Path(__file__).resolve().parent
GLOO_JOB = JOBS / "gloo_job.py"
SLOW_WRITER = JOBS / "slow_writer.py"

HAVE_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed here (pip install torch==2.13.0, CPU)")

#: taxonomy id -> (gloo_job.py mode, ranks, extra env, hold the master port first)
SCENARIOS = {
    "app_exception": ("raise", 4, {}, False),
    "collective_mismatch": ("mismatch", 2, {"JOB_TIMEOUT": "5"}, False),
    "port_conflict": ("ok", 2, {}, True),
}
#: what torchrun exits with in each scenario (a failed worker or rendezvous: 1)
EXIT = {"app_exception": 1, "collective_mismatch": 1, "port_conflict": 1}


def env(**extra: str) -> dict[str, str]:
    """The environment for subprocesses: this checkout importable, no colour, stable output."""
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e["NO_COLOR"] = "1"
    e.pop("FORCE_COLOR", None)
    e.pop("NCCL_ANALYZER_RULES", None)
    e.update(extra)
    return e


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def held_port(hold: bool) -> Iterator[int]:
    """A port for MASTER_PORT; with ``hold`` another socket listens on it for the duration (EADDRINUSE)."""
    if not hold:
        yield free_port()
        return
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        yield s.getsockname()[1]
    finally:
        s.close()


def torchrun(mode: str, nproc: int, port: int) -> list[str]:
    """The torchrun command line, found through this interpreter (no `torchrun` script needed on PATH)."""
    return [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", "--master_addr=127.0.0.1",
            f"--master_port={port}", str(GLOO_JOB), mode]


def analyzer(*args: str) -> list[str]:
    return [sys.executable, "-m", "nccl_analyzer", *args]


def final_verdict(stderr: str) -> str:
    """The final verdict block the live modes print on stderr (empty if there is none)."""
    head = "nccl-analyze ══ verdict"
    return stderr[stderr.rindex(head):] if head in stderr else ""
