"""A one-line progress indicator on stderr for long analyses (the CLI uses it only on a TTY)."""
from __future__ import annotations

import time
from typing import Callable, TextIO

#: Seconds between redraws; a redraw costs a write syscall, so a 10 GB log does not pay per line.
INTERVAL = 0.1
#: Wait this long before the first draw: a quick analysis shows no flicker at all.
DELAY = 0.5


class Progress:
    """Redraws ``lines, MB read, lines/s`` in place (carriage return) on ``stream``.

    ``update(lines, bytes)`` takes running totals (not increments) and is cheap enough to call for
    every line (a clock read, ~0.1 us); it redraws at most every ``INTERVAL`` seconds.
    ``done()`` erases the line, so what follows (the verdict) starts on a clean line.

    Args:
        stream: a text stream, normally ``sys.stderr``; the caller decides whether it is a TTY.
        label: the word in front of the counts.
        clock: injectable monotonic clock (tests).
    """

    __slots__ = ("stream", "label", "_clock", "_start", "_next", "_width", "_shown", "_closed")

    def __init__(self, stream: TextIO, label: str = "nccl-analyze: reading",
                 clock: Callable[[], float] = time.monotonic):
        self.stream = stream
        self.label = label
        self._clock = clock
        self._start = clock()
        self._next = self._start + DELAY
        self._width = 0
        self._shown = False
        self._closed = False

    def update(self, lines: int, bytes: int = 0) -> None:  # noqa: A002 - the documented keyword
        """Report running totals; redraws only when ``INTERVAL`` has passed since the last draw."""
        if self._closed:
            return
        now = self._clock()
        if now < self._next:
            return
        self._next = now + INTERVAL
        self._draw(self._format(lines, bytes, now - self._start))

    def done(self) -> None:
        """Erase the indicator (if it was ever drawn); later updates are ignored."""
        if self._closed:
            return
        self._closed = True
        if self._shown:
            self._write("\r" + " " * self._width + "\r")

    def _format(self, lines: int, nbytes: int, elapsed: float) -> str:
        text = f"{self.label} {lines:,} lines"
        if nbytes:
            text += f", {nbytes / 1e6:,.1f} MB"
        if elapsed >= 1:
            text += f" ({lines / elapsed:,.0f} lines/s)"
        return text

    def _draw(self, text: str) -> None:
        pad = max(0, self._width - len(text))
        self._width = max(self._width, len(text))
        self._shown = True
        self._write("\r" + text + " " * pad)

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            # A closed or broken stderr must not stop the analysis; the indicator just goes away.
            self._closed = True

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.done()
