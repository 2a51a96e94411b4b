"""Events held in compressed form: the same values, a fraction of the memory.

Two holders keep many events that nothing reads again for a while:

- the rule engine's slots (engine/run.py): at 1,000 ranks about 17,000 events that nothing else keeps (watchdog
  records, C++ traces, ``terminate called`` blocks: one to six KiB each, most of it ``fields``: the verbatim
  lines, and the message joined again). Past its first ``FULL_KEEP`` matches a slot holds such an event packed;
- the input-order heap of ``classify.EventStream``: while a multi-line block is open (a traceback whose process
  may still print a chained one) every later event waits there, 10,000 of them at 1,000 ranks. Past
  ``HOLD_PACK`` waiting events, the later ones wait packed and are unpacked when released.

A ``PackedEvent`` keeps the small attributes (kind, path, line, host, pid, rank, cuda_dev, end_line) as they are
and its ``text``, ``time``, ``tid`` and ``fields`` in one pickle, deflated against a preset dictionary: the first
packed event of the same kind (``_DICTS``). Every rank prints the same lines with other numbers in them, so what is left of
an event is mostly its numbers: at 1,000 ranks the 16,869 events the rule engine holds take 1.6 MB of blobs instead
of 6.8 MB of fields blobs plus 3.0 MB of texts. ``fields`` gives a dict equal to the original, order included, a new
one every time it is read, so no result changes.
"""
from __future__ import annotations

import pickle
import zlib
from typing import Any

from .intern import interned
from .model import Event, EventAccess

#: Events the input-order heap holds whole before it packs the later ones.
HOLD_PACK = 256
#: A slot keeps the first this many events it matches whole; later ones are packed (when no other slot keeps them
#: whole: every slot holds the same object, so identity and order are unchanged).
FULL_KEEP = 64
#: A multi-line event of more lines than this is packed by a slot whatever it has kept before (``FULL_KEEP``): at
#: 1,000 ranks torchrun's ChildFailedError traceback is 7,000 lines, 0.9 MiB whole, and grows with the ranks.
LONG_EVENT = 64
#: An event with no fields and a text shorter than this is held as it is (nothing to gain).
SMALL_TEXT = 64
#: Kinds with a preset dictionary of their own (past that, an event of a new kind is deflated without one).
DICT_KINDS = 1024
#: Bytes of the first event's pickle kept as its kind's dictionary (deflate looks back 32 KiB at most).
_DICT_BYTES = 32768
#: A kind's dictionary grows by the pickles that deflate poorly against it, up to this many bytes.
_GROW_TO = 16384
_DICTS: dict[str, bytes] = {}
#: The (kind, dictionary) and (path, host) tuples of packed events, one object each (bounded: past this many a new
#: one is its own tuple).
_HEADS: dict[Any, Any] = {}
_HEADS_CAP = 65536
_NO_DICT = b""
_PROTO = pickle.HIGHEST_PROTOCOL
#: The blob decoded last and what it decoded to: reading ``text``, ``time`` and ``fields`` of one event in a row
#: (evidence quoting does) inflates it once.
_LAST: tuple[Any, tuple[str, Any, Any, bytes]] = (None, ("", None, None, b""))


class PackedEvent(EventAccess):
    """An ``Event`` whose text, time and fields are stored deflated (read-only: the matcher never changes an
    event)."""

    # (kind, dictionary) and (path, host) are one shared tuple each (``_HEADS``: a few per kind and per host): 96
    # bytes an event instead of 112 (at 1,000 ranks ~17,000 events)
    __slots__ = ("_kz", "_ph", "line", "pid", "rank", "cuda_dev", "end_line", "_blob")

    def __init__(self, ev: Event, blob: bytes, zdict: bytes):
        self._kz = interned(_HEADS, (ev.kind, zdict), _HEADS_CAP)
        self._ph = interned(_HEADS, (ev.path, ev.host), _HEADS_CAP)
        self.line, self.pid, self.rank = ev.line, ev.pid, ev.rank
        self.cuda_dev, self.end_line = ev.cuda_dev, ev.end_line
        self._blob = blob

    @property
    def kind(self) -> str:
        return self._kz[0]

    @property
    def _zdict(self) -> bytes:
        return self._kz[1]

    @property
    def path(self) -> str:
        return self._ph[0]

    @property
    def host(self) -> str | None:
        return self._ph[1]

    def _decoded(self) -> tuple[str, Any, Any, bytes]:
        global _LAST
        last = _LAST
        if last[0] is self._blob:
            return last[1]
        zd = self._kz[1]
        d = zlib.decompressobj(-15, zd) if zd else zlib.decompressobj(-15)
        got = pickle.loads(d.decompress(self._blob) + d.flush())
        _LAST = (self._blob, got)
        return got

    @property
    def text(self) -> str:
        return self._decoded()[0]

    @property
    def time(self) -> str | None:
        return self._decoded()[1]

    @property
    def tid(self) -> int | None:
        return self._decoded()[2]

    @property
    def fields(self) -> dict[str, Any]:
        return pickle.loads(self._decoded()[3])

    def unpacked(self) -> Event:
        """The event as an ``Event`` again (a new object, equal to the one packed)."""
        text, time, tid, fields = self._decoded()
        return Event(kind=self.kind, path=self.path, line=self.line, text=text, host=self.host, pid=self.pid,
                     tid=tid, rank=self.rank, cuda_dev=self.cuda_dev, time=time, fields=pickle.loads(fields),
                     end_line=self.end_line)


#: The event packed last and its packed form: the job model and the rule engine both keeping one event hold one
#: packed object.
_MEMO: tuple[Any, Any] = (None, None)


def pack(ev: Event) -> Event | PackedEvent:
    """``ev`` packed; ``ev`` itself when its fields do not pickle or it is small (nothing to gain)."""
    global _MEMO
    memo = _MEMO
    if memo[0] is ev:
        return memo[1]
    got = _pack(ev)
    _MEMO = (ev, got)
    return got


def _pack(ev: Event) -> Event | PackedEvent:
    if ev.__class__ is not Event:
        return ev  # packed already
    if not ev.fields and len(ev.text) < SMALL_TEXT:
        return ev
    try:
        payload = pickle.dumps((ev.text, ev.time, ev.tid, pickle.dumps(ev.fields, _PROTO)), _PROTO)
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError):
        return ev
    zdict = _DICTS.get(ev.kind)
    if zdict is None:
        zdict = _NO_DICT
        if len(_DICTS) < DICT_KINDS:
            zdict = _DICTS[ev.kind] = payload[-_DICT_BYTES:]
    c = zlib.compressobj(1, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, zdict) if zdict else \
        zlib.compressobj(1, zlib.DEFLATED, -15, 9)
    blob = c.compress(payload) + c.flush()
    if zdict and len(blob) * 4 > len(payload) and len(zdict) + len(payload) <= _GROW_TO:
        # a line of this kind the dictionary does not know yet (one kind, several messages: the Flight Recorder's
        # "signal dumping" / "preparing to dump" / "dumping"): later ones deflate against it too. The events packed
        # so far keep the dictionary they were packed with.
        _DICTS[ev.kind] = zdict + payload
    return PackedEvent(ev, blob, zdict)


def unpack(ev: Event | PackedEvent) -> Event:
    """An ``Event`` for ``ev`` (``ev`` itself unless packed)."""
    return ev.unpacked() if isinstance(ev, PackedEvent) else ev
