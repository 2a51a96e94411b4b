"""Live use: pass a job's output through unchanged while analyzing it; say the verdict as soon as it shows."""
from __future__ import annotations

import os
import re
import select
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import IO, Any, BinaryIO, Callable, Iterator, TextIO

from .errors import InputError
from .model import Diagnosis, RootCause
from .sources import MAX_LINE, Source, clean_line, expand_inputs, iter_source, nothing_to_analyze

#: Bytes asked for per read. A pipe hands over what it holds (up to this), so a line is passed on as soon
#: as the writer wrote it, progress-bar redraws without a newline included.
CHUNK = 64 * 1024
#: Seconds between provisional verdict checks while only ordinary events arrive (and while idle).
CHECK_INTERVAL = 0.5
#: Least seconds between two checks triggered by error-ish events (a traceback storm of 1000 ranks).
URGENT_GAP = 0.05
#: When the input has been quiet this long, close the multi-line events still open (``Analyzer.flush``).
#: The parsers hold a finished traceback open until a line that ends it arrives (a ``[rank2]:`` traceback
#: until rank 2 writes again) and hold the events after it back for order; a job that fails and then
#: hangs or restarts would otherwise show nothing until the end. A process writes a traceback in one go,
#: so 2 s of silence means it is complete.
IDLE_FLUSH = 2.0
#: A provisional block is shown this long after the check that found it, if the input has not ended by
#: then: torchrun tears a failed job down within a fraction of a second, and a block printed just
#: before the final verdict would only repeat it.
SHOW_DELAY = 0.3
#: At most this many provisional blocks per run; after that only the final verdict.
MAX_BLOCKS = 5
#: A new block for the same root cause needs at least this much more confidence.
CONFIDENCE_STEP = 0.15

_TRUNCATED = b"\x00TRUNCATED"  # the marker sources.read_raw_lines puts on a cut line; clean_line reads it
_ERRORISH = re.compile(r"warn|err|traceback|timeout|elastic|fail|exception|abort|signal|exit|kill|mismatch|"
                       r"oom|refused|closed|reset|desync")
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


class LineSplitter:
    """Cuts a byte stream that arrives in arbitrary chunks into lines, with bounded memory.

    ``feed(chunk)`` yields ``(log_bytes, line)`` pairs: ``log_bytes`` is the stream's content in order (write
    it to a log and the log is byte-identical), ``line`` is the raw line for ``clean_line`` (newline kept),
    or None for the rest of an over-long line. A line longer than ``limit`` is handed on when it passes the
    limit, cut and marked truncated the way ``sources.read_raw_lines`` marks it, and its rest is skipped.
    """

    __slots__ = ("limit", "_buf", "_cut")

    def __init__(self, limit: int = MAX_LINE):
        self.limit = limit
        self._buf = bytearray()
        self._cut = False  # inside the rest of an over-long line whose head was handed on

    def feed(self, chunk: bytes) -> Iterator[tuple[bytes, bytes | None]]:
        start = 0
        find = chunk.find
        while True:
            nl = find(b"\n", start)
            if nl < 0:
                break
            piece = chunk[start:nl + 1]
            start = nl + 1
            if self._cut:
                self._cut = False
                yield piece, None
                continue
            if self._buf:
                self._buf += piece
                piece = bytes(self._buf)
                self._buf.clear()
            yield piece, (piece if len(piece) <= self.limit else piece[:self.limit] + _TRUNCATED)
        if start < len(chunk):
            rest = chunk[start:] if start else chunk
            if self._cut:
                yield rest, None
                return
            self._buf += rest
            if len(self._buf) > self.limit:
                data = bytes(self._buf)
                self._buf.clear()
                self._cut = True
                yield data, data[:self.limit] + _TRUNCATED

    def flush(self) -> Iterator[tuple[bytes, bytes | None]]:
        """The last line when the stream ended without a newline."""
        self._cut = False
        if self._buf:
            data = bytes(self._buf)
            self._buf.clear()
            yield data, data


class LiveAnalysis:
    """Feeds lines to an ``Analyzer`` and prints a provisional verdict block when a root cause shows.

    ``provisional()`` is asked right after an error-ish event (warn, error, traceback, timeout, elastic,
    ...; at most every ``URGENT_GAP`` s), otherwise at most every ``CHECK_INTERVAL`` s, and from ``idle()``
    while no input arrives. A block is printed once, and again only for a different root cause or one
    with clearly higher confidence (``CONFIDENCE_STEP``), ``MAX_BLOCKS`` times at most.
    """

    def __init__(self, analyzer: Any, out: "TextOut", *, color: bool = False,
                 note: str = "provisional: more output may change it",
                 clock: Callable[[], float] = time.monotonic):
        self.analyzer = analyzer
        self.out = out
        self.color = color
        self.note = note
        self.lines = 0
        self.blocks = 0
        self.shown: RootCause | None = None
        self._pending: tuple[RootCause, int, float] | None = None  # (root, lines, found at)
        self._clock = clock
        self._last = clock()
        self._dirty = False
        self._urgent = False
        self._kind_cache: dict[str, bool] = {}
        self._last_line = self._last
        self._fed_at_batch = 0
        self._settled = True  # nothing fed since the last idle flush

    def feed_raw(self, src: Source, raw: bytes) -> None:
        """Clean one raw line of ``src`` (numbering it) and analyze it."""
        src.lines += 1
        if raw.endswith(_TRUNCATED):
            src.note_cut(src.lines)
        self.feed(clean_line(raw, src, src.lines))

    def feed(self, line: Any) -> None:
        self.lines += 1
        self._settled = False
        self._events(self.analyzer.feed(line))

    def _events(self, events: list) -> None:
        if not events:
            return
        self._dirty = True
        cache = self._kind_cache
        for ev in events:
            hot = cache.get(ev.kind)
            if hot is None:
                hot = cache[ev.kind] = bool(_ERRORISH.search(ev.kind))
            if hot:
                self._urgent = True
                break
        now = self._clock()
        gap = now - self._last
        if gap >= CHECK_INTERVAL or (self._urgent and gap >= URGENT_GAP):
            self._check(now)
        if self._pending is not None:
            self._show(now)

    def idle(self) -> None:
        """Call after each batch of lines and while input pauses.

        Runs a check that was held back, shows a block whose ``SHOW_DELAY`` passed, and after
        ``IDLE_FLUSH`` s of silence closes what the parsers hold open.
        """
        if not self._settled:
            now = self._clock()
            if self.lines != self._fed_at_batch:
                self._fed_at_batch = self.lines
                self._last_line = now
            elif now - self._last_line >= IDLE_FLUSH:
                self._settled = True
                self._events(self.analyzer.flush())
        if self._dirty:
            now = self._clock()
            gap = now - self._last
            if gap >= CHECK_INTERVAL or (self._urgent and gap >= URGENT_GAP):
                self._check(now)
        if self._pending is not None:
            self._show(self._clock())

    def _check(self, now: float) -> None:
        self._last = now
        self._dirty = self._urgent = False
        if self.blocks >= MAX_BLOCKS:
            return
        root = self.analyzer.provisional()
        if root is None:
            self._pending = None
            return
        if _better(root, self.shown):
            if self._pending is None or root != self._pending[0]:
                self._pending = (root, self.lines, now)
        else:
            self._pending = None

    def _show(self, now: float) -> None:
        root, lines, found = self._pending  # type: ignore[misc]
        if now - found < SHOW_DELAY:
            return
        self._pending = None
        self.shown = root
        self.blocks += 1
        self.out.text(format_provisional(root, lines, note=self.note, color=self.color))

    def finish(self) -> Diagnosis:
        """The final Diagnosis; a provisional block not shown yet is dropped (the final verdict follows)."""
        self._pending = None
        return self.analyzer.finish()


def _better(new: RootCause, old: RootCause | None) -> bool:
    if old is None:
        return True
    if new.id != old.id:
        return True
    return new.confidence >= old.confidence + CONFIDENCE_STEP


class TextOut:
    """Our own messages on stderr; quiet if stderr is gone (a closed terminal must not stop the analysis).

    With ``binary`` (a launched job's stderr pass-through goes here too) text is encoded into the same
    byte stream, so the order of our blocks and the job's lines is kept.
    """

    def __init__(self, stream: TextIO | None):
        self.stream = stream
        self.binary: BinaryIO | None = getattr(stream, "buffer", None) if stream is not None else None
        self.broken = stream is None

    def text(self, s: str) -> None:
        if self.binary is not None:
            self.raw(s.encode("utf-8", "replace"))
            return
        if self.broken:
            return
        try:
            self.stream.write(s)  # type: ignore[union-attr]
            self.stream.flush()  # type: ignore[union-attr]
        except (OSError, ValueError):
            self.broken = True

    def raw(self, b: bytes) -> None:
        if self.broken:
            return
        try:
            if self.binary is not None:
                self.binary.write(b)
                self.binary.flush()
            else:
                self.stream.write(b.decode("utf-8", "replace"))  # type: ignore[union-attr]
                self.stream.flush()  # type: ignore[union-attr]
        except (OSError, ValueError):
            self.broken = True
            _silence(self.binary or self.stream)


def _silence(stream: IO | None) -> None:
    # After EPIPE, data may still sit in the stream's buffer and Python's exit-time flush would print
    # "Exception ignored ... BrokenPipeError". Point the descriptor at /dev/null: that flush then succeeds.
    # (The recipe of the Python docs, "Note on SIGPIPE".)
    try:
        fd = stream.fileno()  # type: ignore[union-attr]
    except (AttributeError, OSError, ValueError):
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    except OSError:
        pass


_BOLD, _RED, _YELLOW, _DIM, _RESET = "\x1b[1m", "\x1b[31m", "\x1b[33m", "\x1b[2m", "\x1b[0m"
_RULE = "─" * 72


def format_provisional(root: RootCause, lines: int, *, note: str, color: bool = False) -> str:
    """The block printed on stderr while the job still runs (plain text; ANSI colour with ``color``)."""
    head = f"nccl-analyze ── root cause so far: {root.id} (after {lines:,} lines) "
    head += "─" * max(3, 72 - len(head))
    body = [f"  {root.title}  (confidence {root.confidence:.2f})"]
    where = []
    if root.ranks:
        where.append("rank" + ("s " if len(root.ranks) > 1 else " ") + ", ".join(map(str, root.ranks[:16]))
                     + (" ..." if len(root.ranks) > 16 else ""))
    if root.hosts:
        where.append("host" + ("s " if len(root.hosts) > 1 else " ") + ", ".join(root.hosts[:8])
                     + (" ..." if len(root.hosts) > 8 else ""))
    if where:
        body.append("  " + "; ".join(where))
    for ev in root.evidence[:3]:
        text = ev.text if len(ev.text) <= 160 else ev.text[:157] + "..."
        body.append(f"  {ev.path}:{ev.line}: {text}")
    if root.fix and root.fix.summary:
        body.append(f"  fix: {root.fix.summary}")
    body.append(f"  ({note})")
    if color:
        head = f"{_BOLD}{_YELLOW}{head}{_RESET}"
        return "\n" + head + "\n" + "\n".join(body) + f"\n{_YELLOW}{_RULE}{_RESET}\n\n"
    return "\n" + head + "\n" + "\n".join(body) + "\n" + _RULE + "\n\n"


def format_final(diagnosis: Diagnosis, lines: int, *, verbose: bool = False, color: bool = False,
                 note: str = "") -> str:
    """The final verdict, framed so it stands out from the job's own output."""
    from . import render

    text = render.render(diagnosis, "text", verbose=verbose, color=color)
    head = f"nccl-analyze ══ verdict ({lines:,} lines{'; ' + note if note else ''}) "
    head += "═" * max(3, 72 - len(head))
    if color:
        tint = _RED if diagnosis.root_cause else _BOLD
        head = f"{_BOLD}{tint}{head}{_RESET}"
    if not text.endswith("\n"):
        text += "\n"
    return "\n" + head + "\n" + text


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
    from .analysis import Analyzer

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


class _PassThrough:
    """stdout pass-through; on a closed pipe it stops quietly and the analysis goes on."""

    def __init__(self, stream: BinaryIO):
        self.stream = stream
        self.closed = False

    def write(self, data: bytes) -> None:
        if self.closed:
            return
        try:
            self.stream.write(data)
            self.stream.flush()
        except (OSError, ValueError):
            self.closed = True
            _silence(self.stream)
