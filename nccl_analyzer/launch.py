"""``nccl-analyze launch -- CMD``: run a job with NCCL debug output on, tee and analyze it, then the verdict."""
from __future__ import annotations

import os
import selectors
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO, Callable, TextIO

from . import procs
from .errors import AnalyzerError
from .live import (CHECK_INTERVAL, CHUNK, LineSplitter, LiveAnalysis, TextOut, _make_analyzer, _PassThrough,
                   format_final)
from .flight.events import discover
from .sources import Source

#: What ``launch`` adds to the job's environment unless the variable is set already (even to "").
#: name -> (value, why). ``{log_dir}`` is the absolute log folder.
DEBUG_ENV: dict[str, tuple[str, str]] = {
    "NCCL_DEBUG": ("INFO", "NCCL's init lines (version, interfaces, transports, ranks, devices) are the evidence "
                           "most rules need; WARN alone names the failing call but not the setup behind it"),
    "TORCH_NCCL_DUMP_ON_TIMEOUT": ("1", "on a watchdog timeout each rank writes its Flight Recorder trace "
                                        "(which collective it was in): the way to tell a lagging rank"),
    "TORCH_FR_DUMP_TEMP_FILE": ("{log_dir}/fr_trace_rank_", "puts those Flight Recorder dumps next to job.log "
                                                          "instead of /tmp"),
    "PYTHONUNBUFFERED": ("1", "the workers' print() output reaches the console and the log when it is written, "
                              "in order with NCCL's lines, not in a block when a worker exits"),
}
#: Set by the user under another name: then we leave ours out (torch reads either name).
_ALIASES = {"TORCH_FR_DUMP_TEMP_FILE": ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE",)}
# Deliberately NOT set (see docs/live.md): TORCH_DISTRIBUTED_DEBUG=DETAIL (finds collective mismatches but
# adds a check to every collective: slows a real job), TORCH_SHOW_CPP_STACKTRACES=1 (dozens of C++ frames
# per rank, no rule reads them), TORCH_NCCL_ASYNC_ERROR_HANDLING (the default, 3, already tears the job
# down on an NCCL error), TORCH_NCCL_TRACE_BUFFER_SIZE (2000 by default since torch 2.5; the old name
# draws a deprecation warning from newer torch), NCCL_DEBUG_SUBSYS (NCCL's default INIT,BOOTSTRAP,ENV
# is the right amount; ALL floods the log).

#: After the command exited, how long something may keep its output pipes open before we stop it.
LEFTOVER_GRACE = 2.0
#: After SIGTERM to leftovers, how long before SIGKILL.
KILL_AFTER = 3.0
REPORT_EXT = {"text": "txt", "json": "json", "markdown": "md", "html": "html"}
_FORWARDED = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)


def debug_environment(environ: Any, log_dir: Path) -> tuple[dict[str, str], list[tuple[str, str]],
                                                             list[tuple[str, str]]]:
    """The job's environment: ``environ`` plus ``DEBUG_ENV`` where not set.

    Returns:
        (environment, [(name, value) added], [(name, value) the user had set and we kept]).
    """
    env = dict(environ)
    added: list[tuple[str, str]] = []
    kept: list[tuple[str, str]] = []
    for name, (value, _why) in DEBUG_ENV.items():
        for alias in (name, *_ALIASES.get(name, ())):
            if alias in env:
                kept.append((alias, env[alias]))
                break
        else:
            env[name] = value.format(log_dir=str(log_dir))
            added.append((name, env[name]))
    return env, added, kept


def run(command: list[str] | tuple[str, ...], *, log_dir: str | os.PathLike | None = None, fmt: str = "text",
        html_path: str | None = None, debug_env: bool = True, rules_dirs: Any = (),
        stdout: BinaryIO | None = None, stderr: TextIO | None = None, color: bool = False,
        verbose: bool = False) -> int:
    """Run COMMAND in its own process group, tee and analyze its output, print the verdict; return its status.

    The child's stdout goes to ``stdout`` and its stderr to ``stderr``, both byte-identical and as they
    come; both also go, line by line, into ``<log_dir>/job.log``. The report is written to
    ``<log_dir>/report.txt`` (and ``report.<ext>`` for another ``fmt``; ``html_path`` too). SIGINT,
    SIGTERM and SIGHUP are passed on to the job's process group (a third Ctrl-C kills it); processes of
    the group still running after the command ended are stopped.

    Args:
        command: the program and its arguments (``torchrun ...``).
        log_dir: where job.log and the report go; default ``./nccl-analyze-YYYYmmdd-HHMMSS``.
        fmt: the report file's format besides text (text, json, markdown, html).
        html_path: also write an HTML report here.
        debug_env: add ``DEBUG_ENV`` to the job's environment (where the user has not set them).
        rules_dirs: extra rule folders.
        stdout: binary stream for the job's stdout (default ``sys.stdout.buffer``).
        stderr: text stream for the job's stderr and our messages (its ``.buffer`` is used for bytes).
        color: ANSI colour in our blocks.
        verbose: the final verdict lists all findings.

    Returns:
        The command's exit status; 128+N when a signal N killed it.

    Raises:
        AnalyzerError: the command does not exist or cannot run, or the log folder cannot be made.
    """
    argv = [str(a) for a in command]
    if not argv:
        raise AnalyzerError("nothing to launch: put the command after --, e.g. "
                            "nccl-analyze launch -- torchrun --nproc_per_node=2 train.py")
    _resolve(argv[0])
    shown_dir, out_dir = _make_log_dir(log_dir)
    err = TextOut(stderr if stderr is not None else sys.stderr)
    out = _PassThrough(stdout if stdout is not None else sys.stdout.buffer)
    if debug_env:
        env, added, kept = debug_environment(os.environ, out_dir)
    else:
        env, added, kept = dict(os.environ), [], []
    job_log = shown_dir / "job.log"
    err.text(_start_message(argv, added, kept, debug_env, job_log))

    src = Source(path=str(job_log), real=None)
    analyzer = _make_analyzer(rules_dirs)
    analyzer.add_sources([src])
    live = LiveAnalysis(analyzer, err, color=color, note="provisional: the job is still running")
    started = time.monotonic()
    wall_start = time.time()
    with open(out_dir / "job.log", "wb") as log:
        proc = _spawn(argv, env)
        forward = _Forwarder(proc.pid)
        try:
            with _forwarding(forward):
                status = _pump(proc, log, src, live, out, err, forward)
        except BaseException:
            # Our own failure (or a signal before the handlers were in place): leave no job behind.
            _stop_group(proc.pid, err, quiet=True)
            raise
    elapsed = time.monotonic() - started

    # the Flight Recorder dumps this job wrote next to job.log (TORCH_FR_DUMP_TEMP_FILE above; found by content,
    # written since it started: an earlier run's dumps in the same folder are not this job's)
    analyzer.add_flight_dumps(discover([], [str(p) for p in sorted(out_dir.iterdir()) if p.is_file()
                                           and p.name != "job.log" and p.stat().st_mtime >= wall_start - 1]))
    diagnosis = live.finish()
    written = _write_reports(diagnosis, out_dir, shown_dir, fmt, html_path, err)
    err.text(format_final(diagnosis, live.lines, verbose=verbose, color=color))
    err.text(f"nccl-analyze: the command exited with status {status}{_status_note(status)} after "
             f"{elapsed:.1f} s; log and report: {', '.join(str(p) for p in [job_log, *written])}\n")
    return status


def _status_note(status: int) -> str:
    if status > 128:
        try:
            return f" ({signal.Signals(status - 128).name})"
        except ValueError:
            return ""
    return ""


def _resolve(name: str) -> str:
    """The executable the command names, or an AnalyzerError saying it is not there."""
    if os.sep in name or (os.altsep and os.altsep in name):
        if not os.path.exists(name):
            raise AnalyzerError(f"cannot launch {name!r}: no such file")
        if os.path.isdir(name) or not os.access(name, os.X_OK):
            raise AnalyzerError(f"cannot launch {name!r}: not an executable file")
        return name
    found = shutil.which(name)
    if found is None:
        raise AnalyzerError(f"cannot launch {name!r}: command not found (is it on PATH? is the right "
                            "environment active?)")
    return found


def _make_log_dir(log_dir: str | os.PathLike | None) -> tuple[Path, Path]:
    """(the folder as shown to the user, its absolute path)."""
    if log_dir is None:
        base = "nccl-analyze-" + time.strftime("%Y%m%d-%H%M%S")
        shown = Path(base)
        n = 1
        while shown.exists():  # two launches in one second
            n += 1
            shown = Path(f"{base}-{n}")
    else:
        shown = Path(log_dir)
    try:
        shown.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AnalyzerError(f"cannot make the log folder: {exc.strerror or exc}", path=str(shown)) from exc
    if not os.access(shown, os.W_OK):
        raise AnalyzerError("the log folder is not writable", path=str(shown))
    return shown, shown.absolute()


def _start_message(argv: list[str], added: list[tuple[str, str]], kept: list[tuple[str, str]], debug_env: bool,
                   job_log: Path) -> str:
    lines = [f"nccl-analyze: launching {shlex.join(argv)}"]
    if added:
        lines.append("nccl-analyze: added to its environment: " + " ".join(f"{k}={shlex.quote(v)}" for k, v in added))
    if kept:
        lines.append("nccl-analyze: kept your " + " ".join(f"{k}={shlex.quote(v)}" for k, v in kept))
    if not debug_env:
        lines.append("nccl-analyze: environment passed on unchanged (--no-debug-env)")
    lines.append(f"nccl-analyze: all output also goes to {job_log}")
    return "\n".join(lines) + "\n"


def _spawn(argv: list[str], env: dict[str, str]) -> subprocess.Popen:
    # Its own process group: Ctrl-C at the terminal reaches only us (the job is not in the terminal's
    # foreground group), we pass it on exactly once, and killpg reaches the workers torchrun started.
    if sys.version_info >= (3, 11):
        group: dict[str, Any] = {"process_group": 0}
    else:  # pragma: no cover
        group = {"preexec_fn": os.setpgrp}
    try:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, bufsize=0,
                                close_fds=True, **group)
    except FileNotFoundError as exc:
        raise AnalyzerError(f"cannot launch {argv[0]!r}: {exc.strerror or 'not found'}") from exc
    except PermissionError as exc:
        raise AnalyzerError(f"cannot launch {argv[0]!r}: permission denied") from exc
    except OSError as exc:
        raise AnalyzerError(f"cannot launch {argv[0]!r}: {exc.strerror or exc}") from exc


class _Forwarder:
    """Signal handler: pass SIGINT/SIGTERM/SIGHUP to the job's process group; a third SIGINT is SIGKILL.

    It only signals and counts; messages are printed by the loop (printing from a handler can re-enter
    the stream being written).
    """

    def __init__(self, pgid: int):
        self.pgid = pgid
        self.received: list[int] = []

    def __call__(self, signum: int, frame: Any) -> None:
        self.received.append(signum)
        sig = signum
        if signum == signal.SIGINT and self.received.count(signal.SIGINT) >= 3:
            sig = signal.SIGKILL
        try:
            os.killpg(self.pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass


class _forwarding:
    """Context manager installing ``_Forwarder`` for the forwarded signals (main thread only)."""

    def __init__(self, handler: _Forwarder):
        self.handler = handler
        self.old: dict[int, Any] = {}

    def __enter__(self) -> "_forwarding":
        if threading.current_thread() is threading.main_thread():
            for sig in _FORWARDED:
                try:
                    self.old[sig] = signal.signal(sig, self.handler)
                except (OSError, ValueError):
                    pass
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self.old.items():
            signal.signal(sig, old)


def _pump(proc: subprocess.Popen, log: BinaryIO, src: Source, live: LiveAnalysis, out: _PassThrough,
          err: TextOut, forward: _Forwarder) -> int:
    """Tee the child's two pipes until both close; stop leftovers; return the exit status."""
    assert proc.stdout is not None and proc.stderr is not None
    streams: dict[int, tuple[LineSplitter, Callable[[bytes], None]]] = {
        proc.stdout.fileno(): (LineSplitter(), out.write),
        proc.stderr.fileno(): (LineSplitter(), err.raw),
    }
    sel = selectors.DefaultSelector()
    for fd in streams:
        sel.register(fd, selectors.EVENT_READ)
    told = 0
    exited_at: float | None = None
    termed = killed = False
    try:
        while sel.get_map():
            for key, _ in sel.select(CHECK_INTERVAL):
                splitter, tee = streams[key.fd]
                try:
                    data = os.read(key.fd, CHUNK)
                except OSError:
                    data = b""
                if not data:
                    sel.unregister(key.fd)
                    for log_bytes, raw in splitter.flush():
                        log.write(log_bytes if log_bytes.endswith(b"\n") else log_bytes + b"\n")
                        if raw is not None:
                            live.feed_raw(src, raw)
                    continue
                tee(data)
                for log_bytes, raw in splitter.feed(data):
                    log.write(log_bytes)
                    if raw is not None:
                        live.feed_raw(src, raw)
            log.flush()  # so `tail -f job.log` follows along
            live.idle()
            if len(forward.received) > told:
                told = _tell_signals(forward, told, err)
            now = time.monotonic()
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and sel.get_map():
                # The command is gone but something it started still holds its output open.
                if not termed and now - exited_at >= LEFTOVER_GRACE:
                    termed = True
                    err.text(f"nccl-analyze: the command exited but processes it started still run; "
                             f"sending SIGTERM to process group {proc.pid}\n")
                    _killpg(proc.pid, signal.SIGTERM)
                elif termed and not killed and now - exited_at >= LEFTOVER_GRACE + KILL_AFTER:
                    killed = True
                    _killpg(proc.pid, signal.SIGKILL)
                elif killed and now - exited_at >= LEFTOVER_GRACE + KILL_AFTER + 2:
                    break  # a pipe held by something we cannot kill (another group): stop waiting
    finally:
        sel.close()
        proc.stdout.close()
        proc.stderr.close()
    rc = proc.wait()
    _stop_group(proc.pid, err)
    return rc if rc >= 0 else 128 - rc


def _tell_signals(forward: _Forwarder, told: int, err: TextOut) -> int:
    for signum in forward.received[told:]:
        name = signal.Signals(signum).name
        if signum == signal.SIGINT and forward.received.count(signal.SIGINT) >= 3:
            err.text("\nnccl-analyze: third SIGINT: killed the job (SIGKILL)\n")
            break
        extra = "; Ctrl-C twice more kills it" if signum == signal.SIGINT else ""
        err.text(f"\nnccl-analyze: passed {name} on to the job{extra}\n")
    return len(forward.received)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_members(pgid: int) -> list[int] | None:
    """Live (not zombie) processes of the group, from /proc; None where /proc cannot tell."""
    if not os.path.isdir("/proc"):
        return None
    members = []
    for pid in procs.all_pids():
        fields = procs.stat(pid)  # state ppid pgrp ...
        if fields is not None and len(fields) >= 3 and int(fields[2]) == pgid and fields[0] != "Z":
            members.append(pid)
    return members


def _group_alive(pgid: int) -> bool:
    members = _group_members(pgid)
    if members is not None:
        return bool(members)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stop_group(pgid: int, err: TextOut, quiet: bool = False) -> None:
    """No orphans: SIGTERM what is left of the job's process group, SIGKILL it after KILL_AFTER s."""
    if not _group_alive(pgid):
        return
    if not quiet:
        err.text(f"nccl-analyze: processes of the job outlived it; stopping process group {pgid}\n")
    _killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + KILL_AFTER
    while time.monotonic() < deadline:
        if not _group_alive(pgid):
            return
        time.sleep(0.05)
    _killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline and _group_alive(pgid):
        time.sleep(0.05)


def _write_reports(diagnosis: Any, out_dir: Path, shown_dir: Path, fmt: str, html_path: str | None,
                   err: TextOut) -> list[Path]:
    """report.txt, report.<ext> for ``fmt``, and ``html_path``; a failed write is said, not raised."""
    from . import render

    targets: list[tuple[str, Path, Path]] = [("text", out_dir / "report.txt", shown_dir / "report.txt")]
    if fmt != "text":
        name = f"report.{REPORT_EXT.get(fmt, fmt)}"
        targets.append((fmt, out_dir / name, shown_dir / name))
    if html_path:
        targets.append(("html", Path(html_path), Path(html_path)))
    written = []
    for target_fmt, path, shown in targets:
        try:
            path.write_text(render.render(diagnosis, target_fmt), encoding="utf-8")
            written.append(shown)
        except OSError as exc:
            err.text(f"nccl-analyze: cannot write {shown}: {exc.strerror or exc}\n")
    return written

