"""Dispatch each line to the parser that owns it; everything else becomes a ``text`` event."""
from __future__ import annotations

from .model import Event, Line
from .parse.nccl import NcclParser
from .parse.torch import TorchParser


class EventStream:
    """Turns the lines of ONE input stream into events (parsers keep per-stream state).

    Args:
        keep_text: also return ``text`` events for lines no grammar recognizes (the ``events`` export
            wants them; the analysis does not, and skipping them is most of the speed on big logs).
    """

    __slots__ = ("_nccl", "_torch", "keep_text", "counts")

    def __init__(self, keep_text: bool = False):
        self._nccl = NcclParser()
        self._torch = TorchParser()
        self.keep_text = keep_text
        self.counts = {"lines": 0, "text": 0}

    def feed(self, line: Line) -> list[Event]:
        self.counts["lines"] += 1
        events = self._nccl.feed(line)
        if events is not None:
            return events
        events = self._torch.feed(line)
        if events is not None:
            return events
        self.counts["text"] += 1
        if self.keep_text:
            return [Event(kind="text", path=line.path, line=line.lineno, text=line.raw, rank=line.rank,
                          time=line.time)]
        return []

    def flush(self) -> list[Event]:
        return self._nccl.flush() + self._torch.flush()
