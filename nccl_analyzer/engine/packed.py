"""Events the matcher holds in compressed form: the same values, a fraction of the memory.

At 1,000 ranks the rule slots hold about 15,000 events that nothing else keeps (watchdog records, C++ traces,
``terminate called`` blocks: one to six KiB each, most of it ``fields``: the verbatim lines and the message
joined again). Past its first ``FULL_KEEP`` matches, a slot is unlikely to need an event's fields (evaluation
reads a few attributes of every matched event and the fields of only the first few), so such an event is held as
a ``PackedEvent``: its attributes as they are and its ``fields`` pickled and zlib-compressed (about 360 bytes).
``fields`` decompresses them again, equal to the original, every time it is read, so every result is the same.
"""
from __future__ import annotations

import pickle
import zlib
from typing import Any

from ..model import Event, Loc, _EVENT_ATTRS

#: A slot keeps the first this many events it matches whole; later ones are packed (when no other slot keeps them
#: whole: every slot holds the same object, so identity and order are unchanged).
FULL_KEEP = 64


class PackedEvent:
    """An ``Event`` whose ``fields`` are stored compressed (read-only: the matcher never changes an event)."""

    __slots__ = ("kind", "path", "line", "text", "host", "pid", "tid", "rank", "cuda_dev", "time", "end_line",
                 "_blob")

    def __init__(self, ev: Event, blob: bytes):
        self.kind, self.path, self.line, self.text = ev.kind, ev.path, ev.line, ev.text
        self.host, self.pid, self.tid, self.rank = ev.host, ev.pid, ev.tid, ev.rank
        self.cuda_dev, self.time, self.end_line = ev.cuda_dev, ev.time, ev.end_line
        self._blob = blob

    @property
    def fields(self) -> dict[str, Any]:
        return pickle.loads(zlib.decompress(self._blob))

    @property
    def loc(self) -> Loc:
        return Loc(self.path, self.line)

    def get(self, name: str, default: Any = None) -> Any:
        """As ``Event.get``."""
        if name in _EVENT_ATTRS:
            value = getattr(self, name)
            return default if value is None else value
        return self.fields.get(name, default)

    def unpacked(self) -> Event:
        """The event as an ``Event`` again (a new object, equal to the one packed)."""
        return Event(kind=self.kind, path=self.path, line=self.line, text=self.text, host=self.host, pid=self.pid,
                     tid=self.tid, rank=self.rank, cuda_dev=self.cuda_dev, time=self.time, fields=self.fields,
                     end_line=self.end_line)


def pack(ev: Event) -> Event | PackedEvent:
    """``ev`` packed; ``ev`` itself when its fields do not pickle or are small (nothing to gain)."""
    if not ev.fields:
        return ev
    try:
        blob = zlib.compress(pickle.dumps(ev.fields, pickle.HIGHEST_PROTOCOL), 1)
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError):
        return ev
    return PackedEvent(ev, blob)
