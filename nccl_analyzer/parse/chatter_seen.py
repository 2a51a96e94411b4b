"""The chatter keys compact mode has seen, per process: what ``NcclParser._chatter_seen`` (and the parallel path's
``ChatterMerge.seen``) hold.

Compact mode turns the first line of each (host, pid, chatter key) into an event and counts the rest
(``NcclParser.feed``). A set of those triples held a 3-tuple, a copy of the host string, the pid's int and the key's
string per triple: 250 bytes a triple, five or six triples a process (``Ring``, ``Tree``, ``AllReduce:``, one per
transport), ~1 KiB a rank (docs/memory.md). Here a process is one ``(host, pid)`` tuple whose value is the frozenset
of its keys, one shared object per distinct set (every process of a node has the same keys): ~150 bytes a process.
It answers ``in``, ``add`` and ``len`` as the set did (``len``: the number of triples, which the caps count).
"""
from __future__ import annotations

from typing import Any

from ..intern import host as _host, interned
from ..model import Line

#: The distinct key sets (bounded: past this many a new one is kept as it is).
_SETS: dict[frozenset, frozenset] = {}
_SETS_CAP = 4096


class ChatterSeen:
    """A set of ``(host, pid, key)`` triples, stored as ``(host, pid) -> frozenset of keys``."""

    __slots__ = ("_by", "_n")

    def __init__(self) -> None:
        self._by: dict[tuple[Any, Any], frozenset] = {}
        self._n = 0

    def __contains__(self, key: tuple) -> bool:
        got = self._by.get((key[0], key[1]))
        return got is not None and key[2] in got

    def add(self, key: tuple) -> None:
        host, pid, k = key
        proc = (host, pid)
        got = self._by.get(proc)
        if got is None:
            new = frozenset((k,))
            proc = (_host(host), pid)
        elif k in got:
            return
        else:
            new = got | {k}
        self._by[proc] = interned(_SETS, new, _SETS_CAP)
        self._n += 1

    def __len__(self) -> int:
        return self._n

    def __iter__(self):  # type: ignore[no-untyped-def]
        for (host, pid), keys in self._by.items():
            for k in keys:
                yield (host, pid, k)

    def clear(self) -> None:
        self._by.clear()
        self._n = 0


class DeferredChatter:
    """A chatter line a worker process (``parallel.parse_unit``) sends unparsed: the first line of a (process,
    chatter key) in its range, or the range's last chatter line of a process.

    Every range sends these again for its processes, and the main process's ``ChatterMerge`` keeps only the ones
    one process would have kept (at 1,000 ranks with 2 workers, 5,126 of 24,596): the others are dropped
    unread, so parsing them in the worker and pickling the events was wasted. ``ChatterMerge`` parses the kept ones
    with ``NcclParser`` (``event``) from the same ``Line``: the same event the worker would have built. It has what
    the input-order heap and the range's re-basing read of an event: ``line``, ``pid``, ``end_line``, ``fields``.
    """

    __slots__ = ("line", "host", "pid", "ckey", "path", "text", "raw", "rank", "local_rank", "time", "truncated")
    kind = "nccl.chatter.deferred"
    end_line = None
    fields: dict = {}  # (read-only: nothing writes an event's fields; ``_rebased`` reads "line_numbers")

    def __init__(self, line: Any, host: str, pid: int, ckey: str) -> None:
        self.line = line.lineno
        self.host, self.pid, self.ckey = host, pid, ckey
        self.path, self.text, self.raw = line.path, line.text, line.raw
        self.rank, self.local_rank, self.time, self.truncated = line.rank, line.local_rank, line.time, line.truncated

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (_deferred, (self.line, self.host, self.pid, self.ckey, self.path, self.text, self.raw, self.rank,
                            self.local_rank, self.time, self.truncated))

    def as_line(self) -> Any:
        """The ``Line`` it was made of (its line number re-based if the range's was)."""
        return Line(self.path, self.line, self.text, self.raw, self.rank, self.local_rank, self.time, self.truncated)


def _deferred(line: int, host: str, pid: int, ckey: str, path: str, text: str, raw: str, rank: Any, local_rank: Any,
              time: Any, truncated: bool) -> DeferredChatter:
    d = DeferredChatter.__new__(DeferredChatter)
    d.line, d.host, d.pid, d.ckey, d.path, d.text, d.raw = line, host, pid, ckey, path, text, raw
    d.rank, d.local_rank, d.time, d.truncated = rank, local_rank, time, truncated
    return d
