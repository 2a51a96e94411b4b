"""A rule's slots: the matches each selector keeps, in columns (feed order, event, captures, key index)."""
from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, Iterator

from ..intern import interned
from ..model import Event
from .loader import Rule
from .match import Selector

#: Matched events kept per rule, per selector, per rank (or process): enough evidence, bounded memory.
CAP_PER_KEY = 50
#: Distinct ranks/processes tracked per rule selector.
CAP_KEYS = 4096
#: The captures of a match that captured nothing, shared by all such matches (read only: 135k empty dicts and as many
#: tuples at 1,000 ranks otherwise).
_NO_CAPS: dict[str, Any] = {}
#: Stands for a match's ``_match_text`` (the text a body regex matched) in the captures a slot keeps: only the
#: matches a hit's bound values come from read it, and ``_resolved`` tests those again (the same event, the same
#: selector: the same text). At 1,000 ranks 13,000 matched texts of 100-500 characters are not kept.
_LAZY = object()


#: Capture-name tuples and short captured values, one object per distinct one (bounded: past this many a new one is
#: kept as it is). Every rank's watchdog line captures the same ``op_type`` and often the same ``seq``.
_SHARED: dict[Any, Any] = {}
_SHARED_CAP = 65536
_SHARE_LEN = 64


def _share(v: Any) -> Any:
    return interned(_SHARED, v, _SHARED_CAP)


#: A slot's ``KeyCounts`` turns from a dict into a byte per key index once it holds this many keys, when their
#: indexes lie within ``DENSITY`` times their number of each other (every rank's key, the usual case).
DENSE_FROM = 64
DENSITY = 4
assert CAP_PER_KEY < 255  # a count + 1 is one byte


class KeyCounts:
    """Key index -> matches a slot keeps of that key, keys in the order they first matched (what a dict of them
    gives). A dict while the keys are few or their indexes scattered; past ``DENSE_FROM`` close ones, a bytearray
    indexed by ``kid - lo`` holding count + 1 (0: absent) and the key indexes in first-match order in an ``array``:
    5-6 bytes a key instead of ~40 (at 1,000 ranks a dozen slots hold every rank's key)."""

    __slots__ = ("_d", "_lo", "_hi", "_b", "_order")

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self._d: dict[int, int] | None = {}
        self._lo = self._hi = 0
        self._b: bytearray | None = None
        self._order: array | None = None

    def get(self, kid: int, default: Any = None) -> Any:
        d = self._d
        if d is not None:
            return d.get(kid, default)
        i = kid - self._lo
        b = self._b
        if 0 <= i < len(b):  # type: ignore[arg-type]
            v = b[i]  # type: ignore[index]
            if v:
                return v - 1
        return default

    def __getitem__(self, kid: int) -> int:
        v = self.get(kid)
        if v is None:
            raise KeyError(kid)
        return v

    def __setitem__(self, kid: int, n: int) -> None:
        d = self._d
        if d is not None:
            if not d:
                self._lo = self._hi = kid
            elif kid < self._lo:
                self._lo = kid
            elif kid > self._hi:
                self._hi = kid
            d[kid] = n
            if len(d) >= DENSE_FROM and self._hi - self._lo < DENSITY * len(d):
                self._dense()
            return
        b, lo = self._b, self._lo
        i = kid - lo
        if 0 <= i < len(b):  # type: ignore[arg-type]
            if not b[i]:  # type: ignore[index]
                self._order.append(kid)  # type: ignore[union-attr]
            b[i] = n + 1  # type: ignore[index]
            return
        new_lo, new_hi = min(lo, kid), max(lo + len(b) - 1, kid)  # type: ignore[arg-type]
        if new_hi - new_lo < DENSITY * (len(self._order) + 1):  # type: ignore[arg-type]
            if kid < lo:
                self._b = bytearray(lo - kid) + b  # type: ignore[operator]
                self._lo = kid
            else:
                b.extend(bytes(kid - lo - len(b) + 1))  # type: ignore[union-attr, arg-type]
            self._b[kid - self._lo] = n + 1  # type: ignore[index]
            self._order.append(kid)  # type: ignore[union-attr]
        else:  # a key index far from the others: a dict again
            self._d = {k: self._b[k - lo] - 1 for k in self._order}  # type: ignore[index, union-attr]
            self._lo, self._hi = min(new_lo, lo), new_hi
            self._b = self._order = None
            self._d[kid] = n

    def _dense(self) -> None:
        d, lo = self._d, self._lo
        b = bytearray(self._hi - lo + 1)
        for k, n in d.items():  # type: ignore[union-attr]
            b[k - lo] = n + 1
        self._b, self._order, self._d = b, array("i", d), None  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self._d) if self._d is not None else len(self._order)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[int]:
        return iter(self._d if self._d is not None else self._order)  # type: ignore[arg-type]

    def items(self) -> Iterator[tuple[int, int]]:
        for k in self:
            yield k, self.get(k)


#: The fields of a ``none_record`` that has no ``local_rank`` (read only).
_NO_FIELDS: dict[str, Any] = {}


def none_record(ev: Event) -> Event:
    """What a ``none`` slot keeps of a match no other slot keeps: the event without its text, time and fields. Of a
    ``none`` match evaluation (hit.py) reads only whether the group has one, its group (``JobBuilder.rank_of``: kind,
    path, line, host, pid, rank, GPU and whether the fields name a ``local_rank``) and, with ``none_scope = "rank"``,
    its rank and path; it is never evidence and binds nothing (at 1,000 ranks every rank's ``NET/IB : Using`` line,
    0.4 KiB a rank, that only ``nccl-ib-requested-no-device``'s ``none`` matches)."""
    f = ev.fields
    return Event(ev.kind, ev.path, ev.line, "", host=ev.host, pid=ev.pid, rank=ev.rank, cuda_dev=ev.cuda_dev,
                 fields={"local_rank": f["local_rank"]} if "local_rank" in f else _NO_FIELDS, end_line=ev.end_line)


@dataclass(slots=True)
class _Slot:
    part: str  # all | any | none
    index: int
    selector: Selector
    #: the matcher's keys (rank, else process, else path), each once: a slot names a key by its index there
    ring: list[Any] = field(default_factory=list)
    #: The matches kept, in input order, column by column: feed order (``seqs``), the event (``held``), the captures
    #: (``caps``: None, or the capture names, one tuple per distinct set of names, then the values) and the key's
    #: index (``kidx``). ``kcount``: matches kept per key index, keys in the order they first matched. ``items`` /
    #: ``by_key`` read them back as (seq, event, captures, key) tuples. Columns instead of a tuple and a dict per
    #: match, and a key index instead of a key object and a dict entry per slot: at 1,000 ranks 30,000 tuples,
    #: 13,000 dicts and 20,000 key tuples fewer.
    seqs: array = field(default_factory=lambda: array("q"))
    held: list[Event] = field(default_factory=list)
    caps: list[tuple[Any, ...] | None] | None = None  # (None: no match kept captured anything; 8 bytes a match)
    kidx: array = field(default_factory=lambda: array("i"))
    kcount: KeyCounts = field(default_factory=KeyCounts)
    count: int = 0  # matches
    stored: int = 0  # matches kept

    def put(self, seq: int, ev: Event, caps: dict[str, Any], kid: int) -> None:
        """Keep one match (``kid``: its key's index in ``ring``, already in ``kcount``)."""
        self.seqs.append(seq)
        self.held.append(ev)
        self.kidx.append(kid)
        self.kcount[kid] += 1
        self.stored += 1
        if not caps:
            if self.caps is not None:
                self.caps.append(None)
            return
        if "_match_text" in caps:
            caps["_match_text"] = _LAZY
        got = (_share(tuple(caps)), *(_share(v) if v.__class__ is str and len(v) < _SHARE_LEN else v
                                      for v in caps.values()))
        if all(v.__class__ is str or v is _LAZY for v in caps.values()):
            got = _share(got)  # (every rank's match of one line often captures the same values: one tuple)
        if self.caps is None:
            self.caps = [None] * (len(self.held) - 1)
        self.caps.append(got)

    @property
    def keys(self) -> dict[Any, int]:
        """Matches kept per key, keys in the order they first matched."""
        ring = self.ring
        return {ring[k]: n for k, n in self.kcount.items()}

    @property
    def items(self) -> list[tuple[int, Event, dict[str, Any], Any]]:
        """The matches kept, in input order, each (seq, event, captures, key)."""
        ring = self.ring
        return [(seq, ev, _NO_CAPS if c is None else dict(zip(c[0], c[1:])), ring[k])
                for seq, ev, c, k in zip(self.seqs, self.held, repeat(None) if self.caps is None else self.caps,
                                         self.kidx)]

    def clear(self) -> None:
        del self.seqs[:], self.held[:], self.kidx[:]
        self.caps = None
        self.kcount.clear()

    @property
    def by_key(self) -> dict[Any, list[tuple[int, Event, dict[str, Any], Any]]]:
        """The matches kept, grouped by key: keys in the order they first matched, each key's in input order."""
        ring = self.ring
        out: dict[Any, list[tuple[int, Event, dict[str, Any], Any]]] = {ring[k]: [] for k in self.kcount}
        for it in self.items:
            out[it[3]].append(it)
        return out


@dataclass(slots=True)
class _RuleState:
    rule: Rule
    slots: list[_Slot]
    dirty: bool = False
    #: A rule grouped by job whose ``none`` selector matched can never hit again (``none`` selectors are not
    #: skipped): its slots keep that one event and take no more.
    dead: bool = False
