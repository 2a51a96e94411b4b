"""A rule's slots: the matches each selector keeps, in columns (feed order, event, captures, key index)."""
from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

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
    got = _SHARED.get(v)
    if got is None:
        if len(_SHARED) < _SHARED_CAP:
            _SHARED[v] = v
        return v
    return got


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
    kcount: dict[int, int] = field(default_factory=dict)
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
