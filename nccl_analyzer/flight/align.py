"""Align Flight Recorder dumps across ranks the way torch's fr_trace does, and say what went wrong.

Per process group, each rank's collectives are keyed by ``collective_seq_id`` (entries sharing one id on a rank
are one coalesced group), p2p ops by ``p2p_seq_id``. For every sequence id the ranks that recorded it are
compared (op, sizes, dtypes, the user's call site); ranks of the group that have a dump whose window covers the
id but never recorded it did not call it; ranks without a dump are unknown (the culprit often writes none).
The first id not finished by every rank is the stuck collective; its culprits are, in order of certainty, the
odd ones out of a mismatch, the ranks that never called it, the ranks without a dump, the ranks whose op never
started while the others' did, else every waiting rank.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .reader import Dump, Entry, Frame

#: Ops whose input (resp. output) sizes legitimately differ between ranks (fr_trace's exceptions).
_FREE_INPUT = ("all_to_all", "all_to_allv", "alltoall", "alltoall_base", "scatter")
_FREE_OUTPUT = ("all_to_all", "all_to_allv", "alltoall", "alltoall_base", "gather")
#: Last collectives shown per rank.
TAIL = 6
_LIB_PARTS = ("/site-packages/", "/dist-packages/", "/torch/", "/lib/python3")


def user_frame(frames: tuple[Frame, ...]) -> Frame | None:
    """The innermost frame outside torch, site-packages and the standard library (the user's call site)."""
    for f in frames:
        name = f.filename.replace("\\", "/")
        if name.startswith("<") or any(p in name for p in _LIB_PARTS):
            continue
        return f
    return frames[-1] if frames else None


def site_text(f: Frame | None) -> str | None:
    return f"{f.filename}:{f.line} ({f.name})" if f else None


class Op:
    """One rank's op at one sequence id (a coalesced group counts as one op); its properties are computed once
    (alignment compares every rank's op at every id)."""

    __slots__ = ("rank", "entries", "first", "name", "sizes", "dtypes", "done", "state", "site", "sig")

    def __init__(self, rank: int, entries: list[Entry]):
        self.rank = rank
        self.entries = entries
        self.first = entries[0]
        members = [e for e in entries if e.op != "coalesced"]
        ops = [e.op for e in members]
        self.name = ops[0] if len(ops) == 1 else "coalesced[" + ",".join(ops) + "]"
        self.sizes = tuple((e.input_sizes, e.output_sizes) for e in members)
        self.dtypes = tuple(sorted({d for e in entries for d in e.input_dtypes + e.output_dtypes}))
        self.done = all(e.done for e in entries)
        states = {e.state for e in entries}
        self.state = "completed" if states == {"completed"} else (
            "started" if "started" in states or "completed" in states else "scheduled")
        self.site = user_frame(self.first.frames)
        # what must agree across ranks, plus whether it finished: equal signatures need no closer look
        self.sig = (self.name, self.sizes, self.dtypes, (self.site.filename, self.site.line) if self.site else None,
                    self.done)


@dataclass(slots=True)
class SeqReport:
    """What the alignment found at one sequence id of one process group."""

    kind: str  # mismatch | missing | no_dump | not_started | waiting
    pg: str
    pg_desc: str
    seq: int
    p2p: bool
    op: str
    profiling_name: str
    culprits: list[int]
    waiting: list[int]  # ranks that recorded it and did not finish it
    done: list[int]
    missing: list[int]  # have a dump covering this id, never recorded it
    no_dump: list[int]
    what: list[str] = field(default_factory=list)  # for a mismatch: op | size | dtype
    values: dict[int, str] = field(default_factory=dict)  # rank -> what it called (mismatch)
    sites: dict[int, str] = field(default_factory=dict)  # rank -> user call site of its op here
    entries: dict[int, Entry] = field(default_factory=dict)  # rank -> its (first) entry here
    time_ns: int | None = None
    overdue: bool = False  # a dump shows the op still pending a whole timeout after it was created

    def to_dict(self) -> dict[str, Any]:
        return {"overdue": self.overdue, "kind": self.kind, "pg": self.pg, "pg_desc": self.pg_desc, "seq": self.seq, "p2p": self.p2p,
                "op": self.op, "profiling_name": self.profiling_name, "culprits": self.culprits,
                "waiting": self.waiting, "done": self.done, "missing": self.missing, "no_dump": self.no_dump,
                "what": self.what, "values": {str(k): v for k, v in sorted(self.values.items())},
                "sites": {str(k): v for k, v in sorted(self.sites.items())}}


@dataclass(slots=True)
class Alignment:
    """The result over all dumps."""

    dumps: list[Dump]
    ranks: list[int]  # every rank the dumps' process groups name
    with_dump: list[int]
    without_dump: list[int]
    stuck: SeqReport | None  # the first collective not finished by every rank (earliest over groups)
    mismatches: list[SeqReport]
    divergence: SeqReport | None  # earliest id where one rank called from another line than the rest
    per_rank: dict[int, dict[str, Any]]
    warnings: list[str] = field(default_factory=list)
    behind: dict[str, Any] | None = None  # in the stuck group: the rank(s) furthest back, and where

    def to_dict(self) -> dict[str, Any]:
        return {
            "dumps": [{"path": d.path, "rank": d.rank, "format": d.format, "version": d.version,
                       "entries": len(d.entries), "comm_lib_version": d.comm_lib_version} for d in self.dumps],
            "ranks": self.ranks, "with_dump": self.with_dump, "without_dump": self.without_dump,
            "stuck": self.stuck.to_dict() if self.stuck else None,
            "mismatches": [m.to_dict() for m in self.mismatches],
            "divergence": self.divergence.to_dict() if self.divergence else None,
            "per_rank": {str(r): v for r, v in sorted(self.per_rank.items())},
            "warnings": self.warnings, "behind": self.behind,
        }


def align(dumps: list[Dump]) -> Alignment:
    """Align one job's dumps (one per rank; a rank without a dump is simply absent)."""
    warnings: list[str] = []
    by_rank: dict[int, Dump] = {}
    for d in dumps:
        if d.rank is None:
            warnings.append(f"{d.path}: the file name carries no rank (torch names dumps <prefix><rank>); not aligned")
        elif d.rank in by_rank:
            warnings.append(f"{d.path}: a second dump for rank {d.rank} (first: {by_rank[d.rank].path}); not used")
        else:
            by_rank[d.rank] = d
    groups = _groups(by_rank)
    all_ranks: set[int] = set(by_rank)
    for g in groups.values():
        all_ranks |= set(g["ranks"])
    stuck_list: list[SeqReport] = []
    mismatches: list[SeqReport] = []
    divergences: list[SeqReport] = []
    for key, g in sorted(groups.items()):
        if g["p2p"]:
            st = _p2p_stuck(key, g, by_rank)
            if st:
                stuck_list.append(st)
        if g["coll"]:
            st, mm, dv = _scan(key, g, g["coll"], by_rank, False)
            if st:
                stuck_list.append(st)
            mismatches.extend(mm)
            if dv:
                divergences.append(dv)
    stuck = min(stuck_list, key=_when) if stuck_list else None
    behind = None
    if stuck is not None:
        stuck.overdue = _overdue(stuck, by_rank)
        behind = _behind(groups[(stuck.pg, stuck.pg_desc)]["p2p" if stuck.p2p else "coll"])
    divergence = min(divergences, key=_when) if divergences else None
    without = sorted(all_ranks - set(by_rank))
    return Alignment(dumps=dumps, ranks=sorted(all_ranks), with_dump=sorted(by_rank), without_dump=without,
                     stuck=stuck, mismatches=mismatches, divergence=divergence, per_rank=_per_rank(by_rank),
                     warnings=warnings, behind=behind)


def _behind(ops: dict[int, dict[int, list[Entry]]]) -> dict[str, Any] | None:
    """The rank(s) stuck earliest in one group: each rank's position is its first unfinished id, or one past its
    last id when it finished everything it recorded; the lowest position wins."""
    if not any(e.state != "scheduled" for t in ops.values() for es in t.values() for e in es):
        return None  # gloo: no CUDA events, and 'retired' is also set on a failed op: no reliable progress
    pos: dict[int, int] = {}
    for r, table in ops.items():
        pending = [s for s, es in table.items() if not all(e.done for e in es)]
        pos[r] = min(pending) if pending else max(table) + 1
    if not pos:
        return None
    low = min(pos.values())
    return {"seq": low, "ranks": sorted(r for r, p in pos.items() if p == low),
            "positions": {str(r): p for r, p in sorted(pos.items())}}


def _overdue(f: SeqReport, by_rank: dict[int, Dump]) -> bool:
    """Whether a dump proves the stuck op overdue: some timestamp it holds (any entry's creation, start or
    completion, on the same host's clock) is at least the op's timeout after the op was created. A dump taken
    on a healthy job has a pending last op too; only this, or a failure in the logs, tells a hang from a
    snapshot."""
    timeouts = [e.timeout_ms for e in f.entries.values() if e.timeout_ms]
    if f.time_ns is None or not timeouts:
        return False
    latest = max((t for d in by_rank.values() for e in d.entries
                  for t in (e.time_created_ns, e.time_started_ns, e.time_completed_ns) if t), default=0)
    return latest - f.time_ns >= min(timeouts) * 1_000_000


def _when(f: SeqReport) -> tuple:
    return (f.time_ns if f.time_ns is not None else math.inf, f.seq)


def _groups(by_rank: dict[int, Dump]) -> dict[tuple[str, str], dict[str, Any]]:
    """(pg name, desc) -> {"ranks": global ranks, "coll": {rank: {seq: [entries]}}, "p2p": {...}}."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for rank, d in by_rank.items():
        for e in d.entries:
            g = groups.setdefault((e.pg_name, e.pg_desc), {"ranks": set(), "coll": {}, "p2p": {}})
            table = g["p2p" if e.is_p2p else "coll"].setdefault(rank, {})
            table.setdefault(e.p2p_seq if e.is_p2p else e.seq, []).append(e)
    for (name, _desc), g in groups.items():
        for d in by_rank.values():
            cfg = d.pg_config.get(name)
            if cfg is None and len(d.pg_config) == 1:
                # gloo (torch 2.13) records its ranks under an empty name while entries say '0'
                cfg = next(iter(d.pg_config.values()))
            if cfg:
                g["ranks"] |= set(cfg["ranks"])
        if not g["ranks"]:
            g["ranks"] = {r for r in by_rank if r in g["coll"] or r in g["p2p"]}
        g["ranks"] = sorted(g["ranks"])
    return groups


def _scan(key: tuple[str, str], g: dict[str, Any], ops: dict[int, dict[int, list[Entry]]], by_rank: dict[int, Dump],
          p2p: bool) -> tuple[SeqReport | None, list[SeqReport], SeqReport | None]:
    members = g["ranks"]
    lo = {r: min(t) for r, t in ops.items()}
    hi = {r: max(t) for r, t in ops.items()}
    seqs = sorted({s for t in ops.values() for s in t})
    stuck: SeqReport | None = None
    mismatches: list[SeqReport] = []
    divergence: SeqReport | None = None
    no_dump = [r for r in members if r not in by_rank]
    with_dump = [r for r in members if r in by_rank]
    for s in seqs:
        here = {r: Op(r, ops[r][s]) for r in ops if s in ops[r]}
        if len({o.sig for o in here.values()}) == 1 and next(iter(here.values())).done and \
                all(r in here for r in with_dump):
            continue  # every rank with a dump recorded the same call and finished it: nothing to report
        missing = [r for r in members if r in by_rank and r not in here and (r not in lo or lo[r] <= s)]
        # a rank whose ring buffer starts after s overwrote it: it is no evidence either way
        missing = [r for r in missing if r not in hi or s > hi[r]]
        f = _finding(key, s, p2p, here, missing, no_dump)
        if not p2p and f.kind == "mismatch":
            mismatches.append(f)
        if divergence is None and not p2p:
            divergence = _divergence(key, s, here, missing, no_dump)
        if stuck is None and (f.waiting or f.missing or f.kind == "mismatch"):
            stuck = f
    return stuck, mismatches, divergence


_P2P = re.compile(r"(send|recv) (\d+)(->|<-)(\d+)")


def _p2p_stuck(key: tuple[str, str], g: dict[str, Any], by_rank: dict[int, Dump]) -> SeqReport | None:
    """The oldest p2p op still pending, paired with its peer: a send ``a->b`` needs a recv ``b<-a`` on b (and the
    other way round). A peer that has a dump and never posted the matching op is the culprit; one with no dump is
    unknown. (p2p_seq_id counts a rank's own p2p ops, so ops are paired by direction and peer, not by id.)"""
    members = g["ranks"]
    pending: list[tuple[int, int, Op]] = []
    for r, table in g["p2p"].items():
        for s in sorted(table):
            op = Op(r, table[s])
            if not op.done:
                pending.append((op.first.time_created_ns or 0, r, op))
                break
    for _, r, op in sorted(pending):
        for e in op.entries:
            m = _P2P.search(e.profiling_name)
            if not m:
                continue
            kind, peer = m.group(1), _peer_of(e, members)
            want = "recv" if kind == "send" else "send"
            if peer is None or peer == r:
                continue
            report = _finding(key, e.p2p_seq, True, {r: op}, [], [])
            report.waiting = [r]
            if peer not in by_rank:
                report.kind, report.culprits, report.no_dump = "no_dump", [peer], [peer]
                return report
            # every matching op the peer posted (done or not) against every op of this kind this rank posted to it
            # the peer's half of a pending op is pending too (a half cannot finish alone); no pending half on the
            # peer means it never posted it (counting all halves would trip over ring buffers that dropped old ones)
            halves = [x for x in by_rank[peer].entries if x.is_p2p and (x.pg_name, x.pg_desc) == key
                      and x.op == want and _peer_of(x, members) == r and not x.done]
            if not halves:
                report.kind, report.culprits, report.missing = "missing", [peer], [peer]
            else:  # both sides posted their half and wait: neither is the odd one out
                report.culprits = sorted({r, peer})
            return report
    return None


def _peer_of(e: Entry, members: list[int]) -> int | None:
    m = _P2P.search(e.profiling_name)
    if not m:
        return None
    other = int(m.group(4))
    return members[other] if other < len(members) else other


def _finding(key: tuple[str, str], s: int, p2p: bool, here: dict[int, Op], missing: list[int],
             no_dump: list[int]) -> SeqReport:
    waiting = sorted(r for r, o in here.items() if not o.done)
    done = sorted(r for r, o in here.items() if o.done)
    what: list[str] = []
    values: dict[int, str] = {}
    culprits: list[int] = []
    names = {r: o.name for r, o in here.items()}
    common = Counter(names.values()).most_common(1)[0][0]
    if not p2p and len(here) > 1:
        for label, get in (("op", lambda o: o.name), ("size", _size_key), ("dtype", lambda o: o.dtypes)):
            odd = _odd_ones(here, get)
            if odd:
                what.append(label)
                culprits = culprits or odd
                if label == "op":
                    break  # another op has other sizes and dtypes anyway
        if what:
            values = {r: _describe(o) for r, o in here.items()}
    if what:
        kind = "mismatch"
    elif missing:
        kind, culprits = "missing", list(missing)
    elif waiting and no_dump:
        kind, culprits = "no_dump", list(no_dump)
    elif waiting:
        started = [r for r in waiting if here[r].state == "started"]
        unstarted = [r for r in waiting if here[r].state == "scheduled"]
        if started and unstarted:
            kind, culprits = "not_started", unstarted
        else:
            kind, culprits = "waiting", waiting
    else:
        kind = "ok"
    first = here[min(here)].first
    times = [o.first.time_created_ns for o in here.values() if o.first.time_created_ns]
    return SeqReport(kind=kind, pg=key[0], pg_desc=key[1], seq=s, p2p=p2p, op=common,
                   profiling_name=first.profiling_name, culprits=sorted(culprits), waiting=waiting, done=done,
                   missing=sorted(missing), no_dump=sorted(no_dump), what=what, values=values,
                   sites={r: site_text(o.site) for r, o in here.items() if o.site},
                   entries={r: o.first for r, o in here.items()}, time_ns=min(times) if times else None)


def _size_key(o: Op) -> tuple:
    op = o.name
    return tuple(((() if op in _FREE_INPUT else i), (() if op in _FREE_OUTPUT else out)) for i, out in o.sizes)


def _odd_ones(here: dict[int, Op], get) -> list[int]:
    """Ranks whose value differs from the most common one (all but the first value's ranks on a tie)."""
    vals = {r: get(o) for r, o in here.items()}
    counts = Counter(vals.values())
    if len(counts) < 2:
        return []
    top, n = counts.most_common(1)[0]
    if list(counts.values()).count(n) > 1:  # a tie: no majority, name every side but the lowest rank's
        top = vals[min(vals)]
    return sorted(r for r, v in vals.items() if v != top)


def _describe(o: Op) -> str:
    sizes = ";".join(",".join("x".join(map(str, s)) for s in i) for i, _ in o.sizes) or "-"
    return f"{o.name} [{sizes}] {','.join(o.dtypes) or '-'}"


def _divergence(key: tuple[str, str], s: int, here: dict[int, Op], missing: list[int],
                no_dump: list[int]) -> SeqReport | None:
    sites = {r: (o.site.filename, o.site.line) for r, o in here.items() if o.site}
    if len(sites) < 3:  # with two ranks there is no majority to call one of them odd
        return None
    odd = _odd_ones({r: here[r] for r in sites}, lambda o: (o.site.filename, o.site.line))
    if not odd or len(odd) * 2 >= len(sites):
        return None
    f = _finding(key, s, False, here, missing, no_dump)
    f.kind, f.culprits, f.what = "divergence", odd, ["call site"]
    return f


def _per_rank(by_rank: dict[int, Dump]) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for r, d in sorted(by_rank.items()):
        tail = []
        for e in d.entries[-TAIL:]:
            site = user_frame(e.frames)
            tail.append({"pg": e.pg_name, "seq": e.p2p_seq if e.is_p2p else e.seq, "p2p": e.is_p2p,
                         "op": e.profiling_name, "state": e.state, "retired": e.retired, "done": e.done,
                         "sizes": _describe(Op(r, [e])).split(" ", 1)[1], "site": site_text(site),
                         "time_ns": e.time_created_ns, "index": e.index})
        pending = [e for e in d.entries if not e.done]
        first_pending = pending[0] if pending else None
        out[r] = {"path": d.path, "entries": len(d.entries), "tail": tail,
                  "pending": ({"pg": first_pending.pg_name, "seq": first_pending.seq, "op": first_pending.profiling_name,
                               "site": site_text(user_frame(first_pending.frames))} if first_pending else None),
                  "last": tail[-1] if tail else None}
    return out
