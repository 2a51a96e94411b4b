"""The byte side of live use: a stream cut into lines with bounded memory, the stdout pass-through, and our
own output on stderr, each quiet once its pipe is closed."""
from __future__ import annotations

import os
from typing import IO, BinaryIO, Iterator, TextIO

from ..sources import MAX_LINE


#: Bytes asked for per read. A pipe hands over what it holds (up to this), so a line is passed on as soon
#: as the writer wrote it, progress-bar redraws without a newline included.
CHUNK = 64 * 1024

_TRUNCATED = b"\x00TRUNCATED"  # the marker sources.read_raw_lines puts on a cut line; clean_line reads it


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
