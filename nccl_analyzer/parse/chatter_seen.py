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
