"""Pipe mode (``... 2>&1 | nccl-analyze -``): files first, then stdin read chunk by chunk, passed through and
analyzed live; SIGINT/SIGTERM/SIGHUP end it with the verdict of what was read (``Interrupted``)."""
from __future__ import annotations

import os
import select
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Any, BinaryIO, Callable, Iterator, TextIO

from ..errors import InputError
from ..model import Diagnosis
from ..sources import Source, expand_inputs, iter_source, nothing_to_analyze
from .stream import CHUNK, LineSplitter, TextOut, _PassThrough
from .verdict import CHECK_INTERVAL, LiveAnalysis, format_final


_SIGNAL_STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}
if hasattr(signal, "SIGHUP"):
    _SIGNAL_STATUS[signal.SIGHUP] = 129


class Interrupted(KeyboardInterrupt):
    """The input was cut short by SIGINT/SIGTERM/SIGHUP; the verdict of what was seen is in ``diagnosis``.

    A KeyboardInterrupt, so a caller that only knows Ctrl-C still exits 130; ``exit_code`` is 128+signal.
    """

    def __init__(self, diagnosis: Diagnosis, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.diagnosis = diagnosis
        self.signum = signum
        self.exit_code = _SIGNAL_STATUS.get(signum, 128 + int(signum))


# -- signals ---------------------------------------------------------------------------------------------

class _Stop(Exception):
    """Raised from our signal handler to leave a blocking wait."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class StopFlag:
    """Which stop signal arrived; ``waiting`` marks where the handler may raise (a blocking select)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.waiting = False

    def __call__(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum
        if self.waiting:
            self.waiting = False
            raise _Stop(signum)


@contextmanager
def catch_stop_signals(signals: tuple[int, ...]) -> Iterator[StopFlag]:
    """Turn SIGINT/SIGTERM/SIGHUP into a flag for the duration (main thread only; else no handlers)."""
    flag = StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    old = {}
    for sig in signals:
        try:
            old[sig] = signal.signal(sig, flag)
        except (OSError, ValueError):
            pass
    try:
        yield flag
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def stop_signals() -> tuple[int, ...]:
    return tuple(_SIGNAL_STATUS)


# -- pipe mode -------------------------------------------------------------------------------------------

def _make_analyzer(rules_dirs: Any) -> Any:
    from ..analysis import Analyzer

    return Analyzer(rules_dirs=tuple(rules_dirs or ()))


def run_pipe(inputs: list[str] | tuple[str, ...], *, rules_dirs: Any = (), stdin_name: str = "-",
             quiet: bool = False, stdout: BinaryIO | None = None, stderr: TextIO | None = None,
             color: bool = False, verbose: bool = False, final: bool = True,
             stdin: BinaryIO | None = None) -> Diagnosis:
    """Analyze INPUTs with ``-`` among them: stdin is passed through to ``stdout`` and analyzed live.

    Files given besides ``-`` are analyzed first. Everything read from stdin is written to ``stdout``
    byte-identical and flushed as it arrives (not with ``quiet``). A verdict block goes to ``stderr`` as
    soon as the evidence names a root cause; at the end (unless ``quiet`` or not ``final``) the final
    verdict in text goes to ``stderr`` too: stdout belongs to the pass-through.

    If stdout is closed early (``| head``) the pass-through stops quietly and the analysis goes on to
    the end of input (``tee -p``): the job upstream is not killed by SIGPIPE because of a pager.

    Args:
        inputs: paths and ``-``.
        rules_dirs: extra rule folders.
        stdin_name: the name standard input gets in evidence.
        quiet: no pass-through and no final verdict on stderr (provisional blocks still come).
        stdout: where the pass-through goes (binary; default ``sys.stdout.buffer``).
        stderr: where verdict blocks go (text; default ``sys.stderr``).
        color: ANSI colour in the blocks on stderr.
        verbose: the final verdict lists all findings.
        final: print the final verdict on stderr at the end (the CLI turns it off when it writes the
            report to stdout itself, i.e. with ``quiet``).
        stdin: read this instead of ``sys.stdin.buffer`` (tests).

    Returns:
        The Diagnosis of everything read.

    Raises:
        Interrupted: SIGINT/SIGTERM/SIGHUP arrived; the verdict of what was seen was printed already and
            is in ``.diagnosis``; exit with ``.exit_code``.
        InputError: a file input that does not exist.
    """
    stdout = stdout if stdout is not None else sys.stdout.buffer
    err = TextOut(stderr if stderr is not None else sys.stderr)
    sources = expand_inputs(list(inputs), stdin_name=stdin_name)
    files = [s for s in sources if s.real is not None]
    stdin_src = next((s for s in sources if s.real is None), None)
    ordered = files + ([stdin_src] if stdin_src is not None else [])
    analyzer = _make_analyzer(rules_dirs)
    analyzer.add_sources(ordered)
    live = LiveAnalysis(analyzer, err, color=color)
    signum: int | None = None
    with catch_stop_signals(stop_signals()) as flag:
        try:
            for src in files:
                for line in iter_source(src):
                    live.feed(line)
                    if flag.signum is not None:
                        raise _Stop(flag.signum)
                analyzer.flush(src.path)  # a traceback at the end of one file ends there
            if stdin_src is not None:
                _pump_stdin(stdin if stdin is not None else sys.stdin.buffer, stdin_src, live,
                            None if quiet else stdout, flag)
        except _Stop as stop:
            signum = stop.signum
        except KeyboardInterrupt:  # no handler installed (not the main thread)
            signum = signal.SIGINT
    diagnosis = live.finish()
    empty = nothing_to_analyze(ordered) if signum is None else None
    if empty:
        raise InputError(empty)
    note = ""
    if signum is not None:
        name = signal.Signals(signum).name
        note = f"stopped by {name}"
        diagnosis.warnings.append(f"input stopped by {name} after {live.lines} lines; the verdict covers what "
                                  "was read until then")
    if final and not quiet:
        err.text(format_final(diagnosis, live.lines, verbose=verbose, color=color, note=note))
    if signum is not None:
        raise Interrupted(diagnosis, signum)
    return diagnosis


def _pump_stdin(stream: BinaryIO, src: Source, live: LiveAnalysis, passthrough: BinaryIO | None,
                flag: StopFlag) -> None:
    """Read stdin chunk by chunk: pass each chunk on at once, analyze the complete lines."""
    out = _PassThrough(passthrough) if passthrough is not None else None
    splitter = LineSplitter()
    read = _chunk_reader(stream, flag, live)
    while True:
        if flag.signum is not None:
            raise _Stop(flag.signum)
        data = read()
        if not data:
            break
        if out is not None:
            out.write(data)
        for _, raw in splitter.feed(data):
            if raw is not None:
                live.feed_raw(src, raw)
        live.idle()
    for _, raw in splitter.flush():
        if raw is not None:
            live.feed_raw(src, raw)
    src.finish_warnings()


def _chunk_reader(stream: BinaryIO, flag: StopFlag, live: LiveAnalysis) -> Callable[[], bytes]:
    """A function returning the next chunk (b"" at end), waking every CHECK_INTERVAL to run held checks."""
    # select + os.read on the descriptor (nothing has read stdin before us, so the buffered reader holds
    # nothing): the wait wakes up every CHECK_INTERVAL, and a signal can end it.
    try:
        fd: int | None = stream.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None
    if fd is None:
        read1 = getattr(stream, "read1", None) or stream.read
        return lambda: read1(CHUNK)

    def read() -> bytes:
        while True:
            flag.waiting = True
            try:
                ready, _, _ = select.select([fd], [], [], CHECK_INTERVAL)
            except _Stop:
                raise
            except (OSError, ValueError):  # not selectable: block in read
                ready = [fd]
            finally:
                flag.waiting = False
            if flag.signum is not None:
                raise _Stop(flag.signum)
            if ready:
                try:
                    return os.read(fd, CHUNK)
                except OSError as exc:
                    live.out.text(f"nccl-analyze: reading standard input failed: {exc}\n")
                    return b""
            live.idle()

    return read
