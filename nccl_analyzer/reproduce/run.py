"""Run a plan: the fixed worker in its own session, a clean environment, a time limit, and no process left behind."""
from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator, Mapping

from .. import procs
from ..errors import ReproduceError
from .envcheck import BASE_ENV_KEYS, validate_env
from .plan import INSTALL_HINT, WORKER_MODULE, Plan
from .staging import LocalInfo

MARKER = "NCCL_ANALYZER_REPRO_ID"  # set in every child; finds stragglers that left our process tree
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder holding nccl_analyzer/
TERM_GRACE_S = 3.0


@dataclass(frozen=True)
class RunResult:
    returncode: int | None  # None when killed at the time limit
    timed_out: bool
    duration: float
    log_path: str
    plan_path: str
    argv: tuple[str, ...]
    marker: str = ""  # the value of MARKER in every process of this run

    def tail(self, lines: int = 40, chars: int = 4000) -> str:
        try:
            text = Path(self.log_path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])[-chars:]


def child_env(plan: Plan, base_env: Mapping[str, str], marker: str) -> dict[str, str]:
    """A clean environment: a few of our own variables, then the plan's whitelisted, validated ones."""
    env = {k: base_env[k] for k in BASE_ENV_KEYS if k in base_env}
    paths = [PACKAGE_ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != PACKAGE_ROOT]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    kept, _ = validate_env(plan.env)  # validated again: a Plan may have been built by hand
    env.update(kept)
    env.update({"NCCL_DEBUG": "INFO", "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
                "OMP_NUM_THREADS": kept.get("OMP_NUM_THREADS", "1"), MARKER: marker})
    if "NCCL_NVLS_ENABLE" not in env:
        env["NCCL_NVLS_ENABLE"] = "0"  # never multicast from a reproduction
    return env


def worker_argv(plan_path: str) -> list[str]:
    return [sys.executable, "-m", WORKER_MODULE, "--launch", "--plan", plan_path]


def run_plan(plan: Plan, *, workdir: str, label: str, timeout: float, base_env: Mapping[str, str] | None = None,
             progress: IO[str] | None = None) -> RunResult:
    """Run ``plan`` once; the worker's combined output goes to ``<workdir>/<label>.log``.

    Raises:
        ReproduceError: the worker could not be started at all.
    """
    workdir = os.path.abspath(workdir)
    os.makedirs(workdir, exist_ok=True)
    plan_path = os.path.join(workdir, f"{label}.plan.json")
    log_path = os.path.join(workdir, f"{label}.log")
    Path(plan_path).write_text(plan.to_json(), encoding="utf-8")
    marker = uuid.uuid4().hex
    env = child_env(plan, os.environ if base_env is None else base_env, marker)
    argv = worker_argv(plan_path)
    if progress is not None:
        what = "reproduce" if label == "reproduce" else f"reproduce ({label})"
        progress.write(f"{what}: running {plan.nproc} rank(s) ({plan.backend}) ...")
        progress.flush()
    start = time.monotonic()
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.Popen(argv, env=env, cwd=workdir, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            raise ReproduceError(f"could not start the reproduction worker: {exc}") from None
        timed_out = False
        stopped_by: int | None = None
        try:
            returncode: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            returncode = None
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP through stop_signals()
            stopped_by = getattr(exc, "signum", signal.SIGINT)
            returncode = None
        finally:
            # Also after a normal exit: torchrun starts its ranks in sessions of their own, so a rank can outlive
            # the launcher; everything carrying our marker goes. On an interruption too, before we go.
            with _signals_held():
                kill_tree(proc, marker)
        if timed_out:
            log.write(f"\n[reproduce] time limit of {timeout:g} s reached; all processes killed\n".encode())
        if stopped_by is not None:
            name = signal.Signals(stopped_by).name
            log.write(f"\n[reproduce] interrupted by {name}; all processes stopped\n".encode())
            raise RunInterrupted(stopped_by, label, time.monotonic() - start, log_path)
    duration = time.monotonic() - start
    if progress is not None:
        progress.write(f" {duration:.1f} s{' (time limit)' if timed_out else ''}\n")
        progress.flush()
    return RunResult(returncode, timed_out, duration, log_path, plan_path, tuple(argv), marker)


# ---------------------------------------------------------------------------------------------------------------
# Interruption: SIGINT / SIGTERM / SIGHUP while a run is under way stop its whole process tree, then us
# ---------------------------------------------------------------------------------------------------------------

_SIGNAL_STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}


class Stopped(KeyboardInterrupt):
    """Raised by our handler for SIGTERM/SIGHUP (SIGINT raises KeyboardInterrupt itself) to leave a wait."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class RunInterrupted(KeyboardInterrupt):
    """A reproduction run was cut short by a signal; its processes were stopped. ``exit_code`` is 128+signal."""

    def __init__(self, signum: int, label: str, duration: float, log_path: str):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.label = label
        self.duration = duration
        self.log_path = log_path
        self.exit_code = _SIGNAL_STATUS.get(signum, 128 + int(signum))

    def reason(self) -> str:
        run = "the reproduction run" if self.label == "reproduce" else f"the {self.label} run"
        return (f"interrupted by {signal.Signals(self.signum).name} {self.duration:.1f} s into {run}; all of its "
                "processes were stopped; nothing was concluded")


def _raise_stopped(signum: int, frame: object) -> None:
    raise Stopped(signum)


@contextmanager
def stop_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``Stopped`` (a KeyboardInterrupt) for the duration, so that a run's ``finally``
    stops its process tree instead of the interpreter dying at once and leaving the ranks behind (main thread
    only; elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            old[sig] = signal.signal(sig, _raise_stopped)
        except (OSError, ValueError):
            pass
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


@contextmanager
def _signals_held() -> Iterator[None]:
    """Defer SIGINT/SIGTERM/SIGHUP while the process tree is being stopped (a second Ctrl-C must not cut the
    cleanup short); a signal that came meanwhile is raised afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    except (OSError, ValueError, AttributeError):  # pragma: no cover - not POSIX
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, sigs)


# ---------------------------------------------------------------------------------------------------------------
# Process cleanup (Linux /proc; elsewhere only the process group is signalled)
# ---------------------------------------------------------------------------------------------------------------

def _proc_stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time) of a live process, or None."""
    rest = procs.stat(pid)
    if rest is None or len(rest) < 20 or rest[0] == "Z":
        return None
    return int(rest[1]), rest[19]


_all_pids = procs.all_pids


def descendants(root: int) -> dict[int, str]:
    """Every live descendant of ``root``: pid -> start time (to avoid signalling a reused pid)."""
    parent: dict[int, int] = {}
    start: dict[int, str] = {}
    for pid in _all_pids():
        st = _proc_stat(pid)
        if st:
            parent[pid], start[pid] = st
    found: dict[int, str] = {}
    todo = [root]
    while todo:
        p = todo.pop()
        for child, par in parent.items():
            if par == p and child not in found:
                found[child] = start[child]
                todo.append(child)
    return found


def marked(marker: str) -> dict[int, str]:
    """Live processes whose environment carries ``MARKER=marker``."""
    needle = f"{MARKER}={marker}".encode()
    found: dict[int, str] = {}
    me = os.getpid()
    for pid in _all_pids():
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            st = _proc_stat(pid)
            if st:
                found[pid] = st[1]
    return found


def _signal_all(targets: Mapping[int, str], sig: int) -> None:
    for pid, started in targets.items():
        st = _proc_stat(pid)
        if st is None or st[1] != started:
            continue
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def kill_tree(proc: subprocess.Popen, marker: str) -> None:
    """SIGTERM the worker's process group and every descendant or marked process, then SIGKILL what is left."""
    targets = {**descendants(proc.pid), **marked(marker)}
    alive = proc.poll() is None
    if alive or targets:
        if alive:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
        _signal_all(targets, signal.SIGTERM)
        deadline = time.monotonic() + TERM_GRACE_S
        while time.monotonic() < deadline:
            proc.poll()
            if proc.returncode is not None and not any(_same(p, s) for p, s in targets.items()):
                break
            time.sleep(0.05)
        targets.update(descendants(proc.pid))
        targets.update(marked(marker))
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _signal_all(targets, signal.SIGKILL)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - a process that ignores SIGKILL (D state)
        pass


def _same(pid: int, started: str) -> bool:
    st = _proc_stat(pid)
    return st is not None and st[1] == started


# ---------------------------------------------------------------------------------------------------------------
# What this machine has
# ---------------------------------------------------------------------------------------------------------------

def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def local_info(base_env: Mapping[str, str] | None = None, *, probe_torch: bool = True) -> LocalInfo:
    """Torch, GPU count (in a subprocess: the analysis process never imports torch), interfaces, HCAs."""
    has_torch = torch_available()
    gpus = 0
    version = None
    env = {k: v for k, v in (os.environ if base_env is None else base_env).items() if k in BASE_ENV_KEYS}
    if has_torch and probe_torch:
        code = "import torch; print(torch.__version__); print(torch.cuda.device_count())"
        try:
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
            lines = out.stdout.split()
            if out.returncode == 0 and len(lines) >= 2:
                version, gpus = lines[-2], int(lines[-1])
        except (OSError, subprocess.TimeoutExpired, ValueError):
            pass
    elif shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], env=env, capture_output=True, text=True, timeout=30)
            gpus = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
        except (OSError, subprocess.TimeoutExpired):
            pass
    try:
        interfaces = tuple(name for _, name in socket.if_nameindex())
    except OSError:
        interfaces = ("lo",)
    return LocalInfo(torch=has_torch, gpus=gpus, interfaces=interfaces or ("lo",),
                     default_interface=_default_interface(), hcas=_hcas(), torch_version=version)


def _default_interface() -> str | None:
    try:
        with open("/proc/net/route", encoding="ascii") as fh:
            for line in fh.readlines()[1:]:
                cols = line.split()
                if len(cols) > 2 and cols[1] == "00000000":
                    return cols[0]
    except OSError:
        pass
    return None


def _hcas() -> tuple[str, ...]:
    try:
        return tuple(sorted(os.listdir("/sys/class/infiniband")))
    except OSError:
        return ()


def require_torch(info: LocalInfo) -> None:
    """Raise ReproduceError (exit 4) when torch is missing: the reproduction cannot run at all."""
    if not info.torch:
        raise ReproduceError(f"--reproduce needs PyTorch in this Python ({sys.executable}): {INSTALL_HINT} "
                             "(on a GPU machine install a CUDA build of torch first)")
