"""The one set of helpers for tests that run real jobs (torchrun / gloo on CPU, mp.spawn, plain processes): ports
from the OS, the torchrun command line, one way to launch a job, time it out and collect its output, and the
analyzer's command line. Every test file that runs a real job uses these (no file keeps its own port range).
"""
from __future__ import annotations

import contextlib
import errno
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator, Sequence

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
    """A port the OS hands out (``bind(..., 0)``), free on every IPv4 address and, where the host has IPv6, every
    IPv6 one: a TCPStore listens on all addresses. No fixed range, so parallel runs of the suite cannot collide."""
    for _ in range(20):
        with socket.socket(socket.AF_INET) as s4:
            s4.bind(("", 0))
            port = s4.getsockname()[1]
        try:
            with socket.socket(socket.AF_INET6) as s6:
                s6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                s6.bind(("::", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                continue  # taken on IPv6: ask again (any other error: no IPv6 on this host)
        return port
    raise RuntimeError("the OS gave no port free on both IPv4 and IPv6 in 20 tries")


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A port that refuses every connection for the duration: bound by us (so no other process can listen on it),
    never listened on, so a connect to 127.0.0.1 on it gets ECONNREFUSED at once."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    try:
        yield s.getsockname()[1]
    finally:
        s.close()


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


def torchrun(mode: str | None, nproc: int, port: int, script: Path = GLOO_JOB, opts: Sequence[str] = ()) -> list[str]:
    """The torchrun command line, found through this interpreter (no `torchrun` script needed on PATH): ``nproc``
    workers of ``script`` (argument ``mode`` unless None), the store on 127.0.0.1:``port``, torchrun's ``opts``."""
    return [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", "--master_addr=127.0.0.1",
            f"--master_port={port}", *opts, str(script), *([mode] if mode is not None else [])]


#: How long a real job may take before the test fails (and the job's whole process group is killed). The jobs take
#: seconds alone; the margin is for 2 cores shared with other test runs.
JOB_TIMEOUT = 300.0

#: c10d's TCPStore when its port was taken between free_port() and its bind (another process got it first).
PORT_LOST = "failed to listen on any local network address"


def run_job(cmd: Sequence[str], *, cwd: Path | str | None = None, env: dict[str, str] | None = None,
            timeout: float = JOB_TIMEOUT, merged: bool = True, text: bool = True,
            log: Path | None = None) -> subprocess.CompletedProcess:
    """Run a real job to its end and collect its output.

    The job gets its own session: on a timeout its whole process group (torchrun's workers included) is killed and
    the test fails with the job's last output, so no worker is left behind to load the machine.

    Args:
        merged: stdout and stderr as one console (``2>&1``, in the order written) in ``.stdout``; else apart.
        text: decode the output (str) or keep the bytes.
        log: also write the console there: ``stdout`` (merged) or ``stdout + stderr`` (apart).
    """
    proc = subprocess.Popen([str(c) for c in cmd], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if merged else subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        try:  # a process of another session may still hold the pipe: read what there is, not forever
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            out = b""
        tail = (out or b"")[-3000:].decode(errors="replace")
        pytest.fail(f"the job did not finish in {timeout:.0f} s: {' '.join(map(str, cmd))}\n{tail}")
    res = subprocess.CompletedProcess(list(cmd), proc.returncode, out, err)
    if text:
        res.stdout = out.decode(errors="replace")
        res.stderr = err.decode(errors="replace") if err is not None else None
    if log is not None:
        console = res.stdout if merged else res.stdout + res.stderr
        (log.write_text if text else log.write_bytes)(console)
    return res


def run_on_a_free_port(build: Callable[[int], Sequence[str]], attempts: int = 3,
                       env: dict[str, str] | Callable[[int], dict[str, str]] | None = None,
                       **kw) -> subprocess.CompletedProcess:
    """(Text output only.) ``run_job(build(port))`` on a port from free_port() (``env`` a dict, or a function of
    the port); again on a new port (up to ``attempts`` runs) where the job's store lost its port to another process
    between the check and its bind (PORT_LOST in its output)."""
    for _ in range(attempts):
        port = free_port()
        res = run_job(build(port), env=env(port) if callable(env) else env, **kw)
        if PORT_LOST not in res.stdout + (res.stderr or ""):
            break
    return res


def wait_for(path: Path, needle: bytes, timeout: float = JOB_TIMEOUT) -> bytes:
    """What ``path`` holds once ``needle`` is in it (a line a running process wrote): the test waits on that line,
    not for a guessed number of seconds; ``timeout`` only ends a wait that would never end."""
    deadline = time.monotonic() + timeout
    data = b""
    while time.monotonic() < deadline:
        data = path.read_bytes() if path.exists() else b""
        if needle in data:
            return data
        time.sleep(0.05)
    raise AssertionError(f"{needle!r} not in {path} after {timeout} s: {data[-2000:]!r}")


def analyzer(*args: str) -> list[str]:
    return [sys.executable, "-m", "nccl_analyzer", *args]


def final_verdict(stderr: str) -> str:
    """The final verdict block the live modes print on stderr (empty if there is none)."""
    head = "nccl-analyze ══ verdict"
    return stderr[stderr.rindex(head):] if head in stderr else ""
