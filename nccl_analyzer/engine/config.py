"""Predicates on how the job was set up: one GPU per process, one NCCL version, nccl-tests on one node,
communicator init, socket interfaces and NCCL environment variables."""
from __future__ import annotations

import re
from typing import Any

from .predicate import PredContext, PredResult, _rank_list, predicate
from .virtual import field_value


@predicate
def busid_shared_by_ranks_on_host(ctx: PredContext) -> PredResult | None:
    """Two or more processes initialised NCCL on the same GPU (busId) of one host."""
    b = ctx.builder
    for (host, bus, comm), pids in sorted(b.busid_pids.items()):
        if len(pids) >= 2:
            evs = list(b.busid_events.get((host, bus, comm), []))
            ranks = tuple(sorted({r for r in (b.rank_of(e) for e in evs) if r is not None}))
            return PredResult(bound={"bus_id": bus, "host": host, "dup_ranks": ", ".join(map(str, ranks))},
                              ranks=ranks, evidence=evs[:4])
    return None


@predicate
def nccl_versions_differ(ctx: PredContext) -> PredResult | None:
    """Processes of the job report different NCCL versions (major.minor.patch)."""
    from ..job import version_number

    b = ctx.builder
    nums: dict[str, list[str]] = {}
    for v in b.versions_by_proc:
        nums.setdefault(version_number(v) or v, []).append(v)
    if len(nums) < 2:
        return None
    ev = [b.version_events[v] for vs in nums.values() for v in vs if v in b.version_events]
    ranks = tuple(sorted({r for r in (b.rank_of(e) for e in ev) if r is not None}))
    by_num: dict[str, set[int]] = {}
    for r, info in b.job.ranks.items():
        if info.nccl_version:
            by_num.setdefault(version_number(info.nccl_version) or info.nccl_version, set()).add(r)
    if len(by_num) > 1:
        # The odd ones out: every rank not on the majority's version (on a tie, the version of the lowest rank,
        # where the job's store and rank 0 live, is the reference).
        ref = max(by_num, key=lambda n: (len(by_num[n]), -min(by_num[n])))
        ranks = tuple(sorted(r for n, rs in by_num.items() if n != ref for r in rs))
    who = "; ".join(f"{n} on {', '.join(sorted(set().union(*(b.versions_by_proc[v] for v in vs))))[:80]}"
                    for n, vs in sorted(nums.items()))
    return PredResult(bound={"versions": ", ".join(sorted(nums)), "who": who}, ranks=ranks, evidence=ev[:4])


@predicate
def nccltests_one_node(ctx: PredContext) -> PredResult | None:
    """Every rank of nccl-tests' device list is on one host (or, in the NCCL 1.x tests' list, which names no host,
    in one process): the GPUs talk over the node's own data paths (P2P / SHM over PCIe or NVLink), no network."""
    ranks = [e for e in ctx.events if e.kind == "nccltests.rank"]
    if not ranks or len({e.host for e in ranks}) > 1:
        return None
    gpus = sorted({str(e.get("gpu") or "").strip() for e in ranks} - {""})
    bound = {"n_gpus": len({e.get("rank") for e in ranks}), "gpu_models": ", ".join(gpus[:3]) or "GPUs"}
    head = [e for e in ctx.events if e.kind == "nccltests.header"]
    return PredResult(bound=bound, evidence=head[:1] + ranks[:3])


@predicate
def no_init_complete(ctx: PredContext, **args: Any) -> PredResult | None:
    """Some communicator's init started on a rank that never logged Init COMPLETE."""
    b = ctx.builder
    stuck: set[int] = set()
    any_complete = False
    for comm, states in b.init.items():
        for r, s in states.items():
            if s == "complete":
                any_complete = True
            else:
                grank = b.job.communicators.get(comm, {}).get("ranks", {}).get(r, r)
                stuck.add(grank)
    if not stuck:
        return None
    if args.get("others_complete") and not any_complete:
        return None
    if args.get("nccl_evidence_on_stuck"):
        # The rule's NCCL lines (e.g. P2P channel setup) must come from a rank that is itself stuck in init: a
        # rank stuck before reaching them says nothing about what its peers set up.
        own = {b.rank_of(e) for e in ctx.events if e.kind.startswith("nccl.")}
        stuck &= own
        if not stuck:
            return None
    return PredResult(bound={"stuck": ", ".join(map(str, sorted(stuck)))}, ranks=tuple(sorted(stuck)))


@predicate
def socket_interfaces(ctx: PredContext, **args: Any) -> PredResult | None:
    """Binds the interface the environment asked for and the ones NCCL saw (for the fix text); always passes."""
    b = ctx.builder
    bound: dict[str, Any] = {}
    for name in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        if name in b.env:
            bound.setdefault("ifname", b.env[name])
            bound.setdefault("ifname_var", name)
    for ev in ctx.events:
        for key in ("ifname", "iface"):
            if ev.get(key) and "ifname" not in bound:
                bound["ifname"] = ev.get(key)
    seen = sorted({i for v in b.ifaces.values() for i in v if i != bound.get("ifname")})
    if seen:
        bound["interfaces"] = ", ".join(seen)
    hosts = sorted({e.host for e in ctx.events if e.host})
    if hosts:
        bound["host"] = hosts[0]
    return PredResult(bound=bound)


@predicate
def env_setting(ctx: PredContext, **args: Any) -> PredResult | None:
    """The job's NCCL environment (as NCCL logged it) sets ``var`` (optionally to a value matching ``value``).

    In a rule: ``predicates = [{ name = "env_setting", var = "NCCL_COMM_ID" }]`` (``name`` names the predicate).
    """
    name = str(args.get("var", args.get("name", "")))
    b = ctx.builder
    if name not in b.env:
        return None
    val = b.env[name]
    want = args.get("value")
    if want is not None and not re.search(str(want), val):
        return None
    return PredResult(bound={name: val, "env_value": val}, evidence=list(b.env_events.get(name, []))[:1])


@predicate
def hosts_differ(ctx: PredContext, classes: dict[str, str] | None = None, **args: Any) -> PredResult | None:
    """Hosts of one job that set something up differently: each matched line goes into the first of ``classes``
    (name -> regex on its message: an NCCL line's text after its prefix) whose regex it matches; passes when at
    least two hosts each have lines of one class only and those classes differ (a host that printed two classes, or
    lines without a host, decide nothing). Binds `hosts_story` ("node-a: internal; node-b: plugin") and names no
    rank (the setup is the host's, not a rank's)."""
    rxs = [(name, re.compile(rx)) for name, rx in (classes or {}).items()]
    seen: dict[str, set[str]] = {}
    first: dict[tuple[str, str], Any] = {}
    for ev in ctx.events:
        if not ev.host:
            continue
        text = str(ev.fields.get("msg") or field_value(ev, "body") or "")  # an NCCL line's message after its prefix
        name = next((n for n, rx in rxs if rx.search(text)), None)
        if name is None:
            continue
        seen.setdefault(ev.host, set()).add(name)
        first.setdefault((ev.host, name), ev)
    one = {h: next(iter(ns)) for h, ns in seen.items() if len(ns) == 1}
    if len(set(one.values())) < 2:
        return None
    hosts = sorted(one, key=lambda h: (one[h], h))
    story = "; ".join(f"{h}: {one[h]}" for h in hosts[:8]) + ("; ..." if len(hosts) > 8 else "")
    by_class: dict[str, Any] = {}
    for h in hosts:
        by_class.setdefault(one[h], first[(h, one[h])])
    return PredResult(bound={"hosts_story": story}, evidence=sorted(by_class.values(), key=lambda e: (e.path, e.line)))


@predicate
def rank_started_twice(ctx: PredContext) -> PredResult | None:
    """One global rank given to two processes, so that other ranks of the world were given to none: the matched
    events state each process's global rank and the world size (a launcher's start-up line, once per process)."""
    seen: dict[int, dict[int, list]] = {}  # world size -> global rank -> the events stating it
    for ev in ctx.events:
        size, rank = field_value(ev, "size"), field_value(ev, "global_rank")
        if isinstance(size, int) and isinstance(rank, int) and 0 <= rank < size:
            seen.setdefault(size, {}).setdefault(rank, []).append(ev)
    for size, by_rank in sorted(seen.items()):
        twice = tuple(r for r, evs in sorted(by_rank.items()) if len(evs) >= 2)
        missing = size - len(by_rank)
        if twice and missing > 0:  # every rank stated again with none missing is a restart, not this
            never = tuple(r for r in range(size) if r not in by_rank)
            return PredResult(bound={"dup_ranks": _rank_list(twice), "never_ranks": _rank_list(never),
                                     "world_size": size},
                              ranks=twice, evidence=[e for r in twice for e in by_rank[r][:2]][:4])
    return None


@predicate
def members_never_joined(ctx: PredContext) -> PredResult | None:
    """Fewer processes stated their global rank than the world size they state (a launcher's start-up line, once
    per process, printed before init_process_group), none of them twice, and the program printed nothing of its own
    after the last of them: the stated ranks wait in the rendezvous for members that never came."""
    from .hang import _progress_after

    seen: dict[int, dict[int, Any]] = {}  # world size -> global rank -> the event stating it
    for ev in ctx.events:
        size, rank = field_value(ev, "size"), field_value(ev, "global_rank")
        if isinstance(size, int) and isinstance(rank, int) and 0 <= rank < size:
            if rank in seen.setdefault(size, {}):
                return None  # a rank stated twice: a restart, or rank_started_twice's story
            seen[size][rank] = ev
    if len(seen) != 1:
        return None  # two world sizes: two runs in one input
    size, by_rank = next(iter(seen.items()))
    if not 0 < len(by_rank) < size:
        return None
    last = max(by_rank.values(), key=lambda e: (e.path, e.line))
    if _progress_after(ctx.builder, [last], []):
        return None
    never = tuple(r for r in range(size) if r not in by_rank)
    joined = tuple(sorted(by_rank))
    return PredResult(bound={"joined_ranks": _rank_list(joined), "never_ranks": _rank_list(never),
                             "joined_n": len(joined), "world_size": size},
                      ranks=never, evidence=[by_rank[r] for r in joined[:4]])
