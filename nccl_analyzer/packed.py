"""Events held in compressed form: the same values, a fraction of the memory.

Two holders keep many events that nothing reads again for a while:

- the rule engine's slots (engine/run.py): at 1,000 ranks about 15,000 events that nothing else keeps (watchdog
  records, C++ traces, ``terminate called`` blocks: one to six KiB each, most of it ``fields``: the verbatim
  lines, and the message joined again). Past its first ``FULL_KEEP`` matches a slot holds such an event packed;
- the input-order heap of ``classify.EventStream``: while a multi-line block is open (a traceback whose process
  may still print a chained one) every later event waits there, 10,000 of them at 1,000 ranks. Past
  ``HOLD_PACK`` waiting events, the later ones wait packed and are unpacked when released.

A ``PackedEvent`` keeps the attributes as they are and ``fields`` pickled (compressed with zlib when long);
``fields`` gives a dict equal to the original, order included, every time it is read, so no result changes.
"""
from __future__ import annotations

import pickle
import zlib
from typing import Any

from .model import Event, EventAccess

#: Pickles longer than this are compressed (zlib level 1: about 20 µs for the 0.8 KiB of an average event, which
#: shrinks to 0.35 KiB; a short pickle is kept as it is).
ZIP_OVER = 512
_PICKLED = pickle.dumps(None, pickle.HIGHEST_PROTOCOL)[0]  # a pickle's first byte (a zlib stream starts with 0x78)
#: Events the input-order heap holds whole before it packs the later ones.
HOLD_PACK = 256
#: A slot keeps the first this many events it matches whole; later ones are packed (when no other slot keeps them
#: whole: every slot holds the same object, so identity and order are unchanged).
FULL_KEEP = 64


class PackedEvent(EventAccess):
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
        b = self._blob
        return pickle.loads(b if b[0] == _PICKLED else zlib.decompress(b))

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
        blob = pickle.dumps(ev.fields, pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError):
        return ev
    if len(blob) > ZIP_OVER:
        blob = zlib.compress(blob, 1)
    return PackedEvent(ev, blob)


def unpack(ev: Event | PackedEvent) -> Event:
    """An ``Event`` for ``ev`` (``ev`` itself unless packed)."""
    return ev.unpacked() if isinstance(ev, PackedEvent) else ev
