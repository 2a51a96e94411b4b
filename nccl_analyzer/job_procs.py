"""The job model's per-process state: one slotted record per process instead of a dict entry (and a key tuple) per
process in each of seven tables, and each rank's first-error order in two arrays.

What the records hold is what these tables held, with the same lookups (``JobBuilder`` and ``stage.py`` read them):

- ``(host, pid) -> (rank, nranks)``: the process's rank in the largest communicator it joined; ``(None, pid)``: the
  rank of that pid on any host (the first host's, or torchrun's report), which is also the entry of a process whose
  host is unknown (``rank`` / ``set_rank`` with host ``None``);
- ``(host, pid)`` -> the NCCL version it printed, its first GPU, its Init lines ``(commId, rank, busId)``, and per GPU
  its rank (one process driving several GPUs: ``multi``);
- ``pid`` -> torchrun's global rank of that worker, the host NCCL's line prefix gave that pid.

At 1,000 ranks these were 0.9 KiB a rank (``docs/speed.md``, session 7). The caps (``_PID_CAP`` entries per table)
are counted as before, table by table.
"""
from __future__ import annotations

from array import array
from typing import Any, Iterator

#: ``error_ranks`` times: no timestamp.
_NO_TIME = float("nan")


class Proc:
    """One NCCL process (``host``, and the pid it is filed under). The first record of a pid (``ProcTable.head``)
    also holds what is per pid whatever the host: ``anyr``, ``elastic``, ``nhost``."""

    __slots__ = ("host", "rank", "version", "dev", "devr", "devs", "inits", "anyr", "elastic", "nhost", "nxt")

    def __init__(self, host: str | None) -> None:
        self.host = host
        self.rank: tuple[int, int] | None = None  # (rank, nranks)
        self.version: str | None = None
        self.dev: int | None = None  # the first GPU it logged an Init for
        self.devr: tuple[int, int] | None = None  # (rank, nranks) of that GPU
        self.devs: dict[int, tuple[int, int]] | None = None  # the other GPUs' (one process, several GPUs)
        self.inits: list[tuple[str, int, str | None]] | None = None
        self.anyr: tuple[int, int] | None = None  # (head only) the pid's rank on any host
        self.elastic: int | None = None  # (head only) torchrun's global rank of this pid
        self.nhost: str | None = None  # (head only) the host NCCL's prefix last gave this pid
        self.nxt: Proc | None = None  # the next record of the same pid (another host)


class _Ints:
    """A column of ints read from a log (pids, ranks): 8 bytes each in an ``array("q")`` until a value does not fit
    in 64 bits (a mangled log's pid of 10^22), then a plain list for the whole column."""

    __slots__ = ("_a",)

    def __init__(self) -> None:
        self._a: Any = array("q")

    def append(self, v: int) -> None:
        try:
            self._a.append(v)
        except OverflowError:
            self._a = list(self._a)
            self._a.append(v)

    def __iter__(self) -> Iterator[int]:
        return iter(self._a)

    def tolist(self) -> list[int]:
        return list(self._a)


class ProcTable:
    """pid -> its records (one per host it was seen on, chained), with the counts the old tables' caps read."""

    __slots__ = ("by_pid", "n_version", "n_devrank", "n_inits", "n_elastic", "n_host", "version_order",
                 "version_pids")

    def __init__(self) -> None:
        self.by_pid: dict[int, Proc] = {}
        self.n_version = self.n_devrank = self.n_inits = self.n_elastic = self.n_host = 0
        self.version_order: list[Proc] = []  # the records in the order their version was first set
        self.version_pids = _Ints()  # and their pids

    def set_version(self, host: str | None, pid: int, v: str, cap: int) -> None:
        """``_pid_version[(host, pid)] = v`` where the table had the key or fewer than ``cap`` keys."""
        p = self.find(host, pid)
        if p is not None and p.version is not None:
            p.version = v
        elif self.n_version < cap:
            p = self.get(host, pid)
            p.version = v
            self.n_version += 1
            self.version_order.append(p)
            self.version_pids.append(pid)

    def versions(self) -> Iterator[tuple[str | None, int, str]]:
        """(host, pid, version) in the order the versions were first set."""
        for p, pid in zip(self.version_order, self.version_pids):
            yield p.host, pid, p.version  # type: ignore[misc]

    def head(self, pid: int, create: bool = False) -> Proc | None:
        p = self.by_pid.get(pid)
        if p is None and create:
            p = self.by_pid[pid] = Proc(None)
        return p

    def find(self, host: str | None, pid: int) -> Proc | None:
        p = self.by_pid.get(pid)
        while p is not None and p.host != host:
            p = p.nxt
        return p

    def get(self, host: str | None, pid: int) -> Proc:
        """The record of (``host``, ``pid``), made if there is none."""
        p = self.by_pid.get(pid)
        if p is None:
            p = self.by_pid[pid] = Proc(host)
            return p
        if p.host is None and host is not None and p.nxt is None and p.rank is None and p.version is None \
                and p.dev is None and p.inits is None:
            p.host = host  # a head made for the pid alone (torchrun's report, a line prefix) that no process of
            return p       # unknown host holds anything in: this process's record (one record, not two)
        while p.host != host:
            if p.nxt is None:
                p.nxt = Proc(host)
                return p.nxt
            p = p.nxt
        return p

    def rank(self, host: str | None, pid: int) -> tuple[int, int] | None:
        """What ``_pid_rank[(host, pid)]`` held (host None: the pid's any-host entry)."""
        if host is None:
            p = self.by_pid.get(pid)
            return None if p is None else p.anyr
        p = self.find(host, pid)
        return None if p is None else p.rank

    def set_rank(self, host: str | None, pid: int, got: tuple[int, int]) -> None:
        if host is None:
            self.head(pid, True).anyr = got  # type: ignore[union-attr]
        else:
            self.get(host, pid).rank = got

    def dev_rank(self, host: str | None, pid: int, dev: int) -> tuple[int, int] | None:
        """What ``_dev_rank[(host, pid, dev)]`` held."""
        p = self.find(host, pid)
        if p is None or p.dev is None:
            return None
        if p.dev == dev:
            return p.devr
        return None if p.devs is None else p.devs.get(dev)

    def multi(self, host: str | None, pid: int) -> bool:
        """The process logged Init lines for two GPUs or more (``multi_gpu``)."""
        p = self.find(host, pid)
        return p is not None and p.devs is not None

    def records(self) -> Iterator[Proc]:
        for p in self.by_pid.values():
            while p is not None:
                yield p
                p = p.nxt

    def keyed(self) -> Iterator[tuple[tuple[str | None, int], Proc]]:
        for pid, p in self.by_pid.items():
            q: Proc | None = p
            while q is not None:
                yield (q.host, pid), q
                q = q.nxt

    # -- the old tables, read-only (tests, and whatever reads them by name) ------------------------------------
    def pid_rank(self) -> dict[tuple[str | None, int], tuple[int, int]]:
        out: dict[tuple[str | None, int], tuple[int, int]] = {}
        for (host, pid), p in self.keyed():
            if host is not None and p.rank is not None:
                out[(host, pid)] = p.rank
            h = self.by_pid[pid]
            if h.anyr is not None:
                out[(None, pid)] = h.anyr
        return out

    def dev_ranks(self) -> dict[tuple[str | None, int, int], tuple[int, int]]:
        out: dict[tuple[str | None, int, int], tuple[int, int]] = {}
        for (host, pid), p in self.keyed():
            if p.dev is not None and p.devr is not None:
                out[(host, pid, p.dev)] = p.devr
            for d, v in (p.devs or {}).items():
                out[(host, pid, d)] = v
        return out


class ErrorOrder:
    """rank -> (time, feed order) of its first error (``JobBuilder.error_ranks``), in three arrays: 24 bytes a rank
    instead of a dict entry, a tuple, a float and an int (~170). Setting appends (``JobBuilder`` sets a rank once,
    when its first error comes; set again, the later value counts, in the first one's place, as in a dict); reading
    (``items``, ``[]``: tests and reports, not the hot path) makes the dict."""

    __slots__ = ("_ranks", "_times", "_seqs")

    def __init__(self) -> None:
        self._ranks, self._times, self._seqs = _Ints(), array("d"), array("q")

    def __setitem__(self, r: int, v: tuple[float | None, int]) -> None:
        self._ranks.append(r)
        self._times.append(_NO_TIME if v[0] is None else v[0])
        self._seqs.append(v[1])

    def as_dict(self) -> dict[int, tuple[float | None, int]]:
        out: dict[int, tuple[float | None, int]] = {}
        for r, t, n in zip(self._ranks, self._times, self._seqs):
            out[r] = (None if t != t else t, n)
        return out

    def __getitem__(self, r: int) -> tuple[float | None, int]:
        return self.as_dict()[r]

    def get(self, r: int, default: Any = None) -> Any:
        return self.as_dict().get(r, default)

    def __contains__(self, r: object) -> bool:
        return r in self._ranks.tolist()

    def __len__(self) -> int:
        return len(self.as_dict())

    def __iter__(self) -> Iterator[int]:
        return iter(self.as_dict())

    def items(self) -> Iterator[tuple[int, tuple[float | None, int]]]:
        return iter(self.as_dict().items())
