"""Inputs that cannot be one job: per-input facts (commIds, world sizes, hosts, time span, rank 0) and the warning."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from .job import time_key
from .model import Event

# Only timestamps with a year are compared across inputs: glog's "MMDD hh:mm:ss" has none (job.time_key).
_FULL_DATE = re.compile(r"\[?\d{4}-\d\d-\d\d")
_INIT_KINDS = ("nccl.init.start", "nccl.init.complete")
#: Caps that keep the per-input facts small on huge inputs.
_CAP = 64


@dataclass(slots=True)
class InputFacts:
    """What one input says about the job it comes from."""

    comm_ids: set[str] = field(default_factory=set)
    world_sizes: set[int] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    rank0: set[tuple[str | None, int]] = field(default_factory=set)  # (host, pid) of the process with rank 0
    first_time: str | None = None
    last_time: str | None = None

    def span(self) -> tuple[float, float] | None:
        if not self.first_time or not _FULL_DATE.match(self.first_time) or not _FULL_DATE.match(self.last_time or ""):
            return None
        a, b = time_key(self.first_time), time_key(self.last_time)
        if a is None or b is None:
            return None
        return (min(a, b), max(a, b))


class JobSplitCheck:
    """Collects ``InputFacts`` per input path from the event stream; ``warnings()`` names inputs that look like
    separate jobs (so that one job's error is not shown as a symptom of another's)."""

    __slots__ = ("facts",)

    def __init__(self) -> None:
        self.facts: dict[str, InputFacts] = {}

    def observe(self, ev: Event) -> None:
        """Fold one event in (cheap: a dict lookup, a set add, two string stores)."""
        f = self.facts.get(ev.path)
        if f is None:
            f = self.facts[ev.path] = InputFacts()
        if ev.host and len(f.hosts) < _CAP:
            f.hosts.add(ev.host)
        if ev.time:
            if f.first_time is None:
                f.first_time = ev.time
            f.last_time = ev.time
        if ev.kind in _INIT_KINDS:
            comm = ev.get("comm_id")
            if comm and len(f.comm_ids) < _CAP:
                f.comm_ids.add(str(comm))
            n = ev.get("nranks")
            if isinstance(n, int) and n > 0 and len(f.world_sizes) < _CAP:
                f.world_sizes.add(n)
            if ev.get("rank") == 0 and ev.pid is not None:
                f.rank0.add((ev.host, ev.pid))

    def warnings(self) -> list[str]:
        """One warning when some two inputs disagree on two or more of: communicators, world size, hosts and
        time, rank 0's process; else nothing. A per-rank or per-node split of one job agrees on all."""
        paths = list(self.facts)
        for i, a in enumerate(paths):
            for b in paths[i + 1:]:
                why = reasons(self.facts[a], self.facts[b])
                if len(why) >= 2:
                    return [f"{a} and {b} look like two different jobs ({'; '.join(why)}), yet they are analyzed as "
                            "one: the verdict may blame one job for the other's failure. Analyze each job on its "
                            "own (one nccl-analyze run per job)."]
        return []


def reasons(a: InputFacts, b: InputFacts) -> list[str]:
    """Why inputs ``a`` and ``b`` cannot come from one job (empty when nothing says so)."""
    out = []
    comms_apart = bool(a.comm_ids and b.comm_ids and not a.comm_ids & b.comm_ids)
    if comms_apart:
        out.append("no NCCL communicator (commId) in common")
    if a.world_sizes and b.world_sizes and not a.world_sizes & b.world_sizes:
        out.append(f"world size {_nums(a.world_sizes)} vs {_nums(b.world_sizes)}")
    sa, sb = a.span(), b.span()
    if a.hosts and b.hosts and not a.hosts & b.hosts and sa and sb and (sa[1] < sb[0] or sb[1] < sa[0]):
        out.append("other hosts, at times that do not overlap")
    if comms_apart and a.rank0 and b.rank0 and not a.rank0 & b.rank0:
        out.append(f"each has its own rank 0 ({_proc(a.rank0)} vs {_proc(b.rank0)})")
    return out


def _nums(values: set[int]) -> str:
    return "/".join(str(v) for v in sorted(values))


def _proc(procs: set[tuple[str | None, int]]) -> str:
    host, pid = sorted(procs, key=lambda p: (str(p[0]), p[1]))[0]
    return f"pid {pid} on {host}" if host else f"pid {pid}"
