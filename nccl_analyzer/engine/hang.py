"""Predicates for hangs with no error line: where the ranks furthest behind stopped (stage.py) and who they are."""
from __future__ import annotations

import fnmatch
import re
from typing import Any

from ..model import Stage
from ..stage import collapse
from .predicate import PredContext, PredResult, _rank_list, _who, predicate

#: Exit statuses that are the job being torn down or aborted, not a rank failing by itself: SIGTERM/SIGINT from
#: torchrun or the user, SIGABRT from torch's watchdog taking the process down after a timeout.
TEARDOWN_EXITS = frozenset({0, -15, -2, -6})
#: Event kinds that show a timeout fired (then a rank's non-zero exit is the consequence of the hang).
TIMEOUT_KINDS = ("torch.watchdog", "torch.work.status", "torch.heartbeat", "torch.store.timeout", "torch.gloo.error")

_STAGE_WORDS = {
    Stage.BOOTSTRAP: "bootstrap (Init START / bootstrap interface; exchanging addresses with its peers)",
    Stage.TOPOLOGY: "topology detection / graph search",
    Stage.CHANNELS: "channel setup (rings/trees computed, no connection yet)",
    Stage.CONNECT: "connecting channels",
    Stage.CONNECTED: "after connecting channels",
    Stage.INIT_COMPLETE: "Init COMPLETE (before any collective)",
    Stage.COLLECTIVE: "its first collective",
    Stage.STEADY: "steady state",
}


def _stage_words(st: Stage, transport: str | None) -> str:
    words = _STAGE_WORDS.get(st, st.label)
    if transport and st in (Stage.CONNECT, Stage.CONNECTED):
        words += f" via {transport}"
    return words


def _own_exit(b: Any, events: list[Any]) -> bool:
    """Some rank ended by itself (an exit code > 0 or a crash signal; torchrun's ChildFailedError entries and its
    ``failed (exitcode: N) local_rank: R`` lines): that is a failure, not a hang."""
    codes = [e.get("exitcode") for e in b.exits.values()]
    codes += [e.get("exitcode") for e in events if e.kind == "torch.elastic.worker_failed"]
    for code in codes:
        try:
            if int(code) not in TEARDOWN_EXITS:
                return True
        except (TypeError, ValueError):
            continue
    return False


def _job_pids(ctx: PredContext) -> frozenset[int]:
    """The worker pids torchrun names (SIGTERM teardown, ``failed (exitcode ...) (pid: P)``, ChildFailedError)."""
    pids = {e.pid for e in ctx.events if e.kind.startswith("torch.elastic.") and e.pid is not None}
    pids |= {int(e["pid"]) for e in ctx.builder.exits.values() if e.get("pid") is not None}
    return frozenset(pids)


def _job_stages(ctx: PredContext) -> dict[int, tuple[Stage, Any, str | None]]:
    """The stages of the job's own processes. Where torchrun names its workers' pids (SIGTERM teardown,
    ChildFailedError, ``failed (exitcode ...) (pid: P)``), only those processes count; else, where torch lines name
    ranks (``[rank3]:``, watchdog records), only those ranks: NCCL lines of other jobs or other tools in the same
    output say nothing about this job's hang."""
    b = ctx.builder
    pids = _job_pids(ctx)
    if pids:
        return collapse([(r, v) for r, v in b.proc_stages if v[1].pid in pids], b.torch_stages)
    named = {r for r, c in b.collectives.items() if str(c.get("source", "")).startswith("torch.")}
    named |= {r for r in (b.rank_of(e) for e in ctx.events if e.kind.startswith(("torch.", "python."))) if r is not None}
    if named:
        return {r: v for r, v in b.rank_stages.items() if r in named}
    return b.rank_stages


def _own_tails(b: Any, path: str, job_pids: frozenset[int] | None) -> list[list[int]]:
    """The remembered program-output lines of ``path`` that may be the job's: where torchrun names the job's pids,
    not those printed amid another process's NCCL lines (a process of no torchrun-named pid: another job sharing
    the console); else all of them."""
    ctx = (b.text_ctx or {}).get(path)
    if not job_pids or ctx is None:
        return [b.text_tail.get(path, [])]
    return [lines for pid, lines in ctx.items() if pid is None or pid in job_pids]


def _progress_after(b: Any, stage_events: list[Any], ends: list[Any], job_pids: frozenset[int] | None = None) -> bool:
    """The program printed output of its own (training steps, prints) between a stuck rank's last stage line and the
    job's end in the same input: progress NCCL's lines do not show (no COLL subsystem), so no hang. True also when
    it cannot tell (inputs parsed in worker processes; more output after the end than remembered)."""
    from ..classify import TEXT_TAIL

    tails = b.text_tail
    if tails is None:
        return True
    for ev in stage_events:
        for tail in _own_tails(b, ev.path, job_pids):
            if _tail_progress(tail, ev, ends, TEXT_TAIL):
                return True
    return False


def _tail_progress(tail: list[int], ev: Any, ends: list[Any], cap: int) -> bool:
    end = min((e.line for e in ends if e.path == ev.path and e.line > ev.line), default=None)
    if any(ev.line < t and (end is None or t < end) for t in tail):
        return True
    return len(tail) >= cap and tail[0] > ev.line  # more output after it than remembered: cannot tell


def _one_node_gpus(b: Any, stages: dict[int, tuple[Stage, Any, str | None]], want: Any) -> int | None:
    """With ``one_node = N``: every NCCL line of the job comes from one host and at least N GPUs (processes, or GPUs
    of one process) are in it; the count, else None. Without the option: 0 (no test)."""
    if not want:
        return 0
    hosts = {v[1].host for v in stages.values()} | set(b.hosts)
    if None in hosts or len(hosts) != 1:
        return None
    gpus = {(v[1].pid, v[1].cuda_dev) for v in stages.values()}
    return len(gpus) if len(gpus) >= int(want) else None


@predicate
def stuck_stage(ctx: PredContext, **args: Any) -> PredResult | None:
    """The ranks furthest behind stopped in one of ``stages`` (a list of ``Stage`` labels).

    Options: ``transport`` (regex on the last connection's transport of those ranks, e.g. ``^P2P/(IPC|CUMEM)``);
    ``others_done`` (some other rank got to Init COMPLETE or beyond); ``none_beyond`` (a stage label no rank got
    past, e.g. ``collective``: the whole job stopped there); ``quiet_after`` (the program printed nothing of its own
    after those ranks' stage lines: no training output); ``peers_connecting`` (with ``connect`` in ``stages``: ranks
    still in channel setup while every other rank is connecting count as connecting too, with the others'
    transport); ``setup_kinds`` (event kind globs, one of which the input must hold: the channels NCCL computed
    before connecting them, which every version prints at INFO; connection lines without them are lines picked
    out of a log, not a console that stopped); ``one_node`` (a number N: every NCCL line is from one host, where at
    least N GPUs, ranks of their own, stopped: the GPUs talk over the node's own paths, binds ``n_gpus``). Fails when a rank ended by itself (exit code > 0 or a
    crash signal) and no timeout fired: that rank's failure, not a hang, is the story.
    """
    b = ctx.builder
    setup = args.get("setup_kinds")
    if setup and not any(fnmatch.fnmatchcase(k, g) for g in setup for k in b.kinds):
        return None
    stages = _job_stages(ctx)
    procs: dict[int, str] = {}
    if not stages and args.get("unranked") and not b.rank_stages:
        # no line names any rank (a paste of one process's NCCL lines): the processes themselves, named by host:pid
        stages = {}  # (a new dict: _job_stages may hand back the builder's own)
        for i, (key, entry) in enumerate(getattr(b, "unranked_stages", ())):
            stages[i] = entry
            procs[i] = f"process {key[0]}:{key[1]}" + (f" (GPU {key[2]})" if len(key) == 3 else "")
    if not stages:
        return None
    if _own_exit(b, ctx.events) and not any(e.kind.startswith(TIMEOUT_KINDS) for e in ctx.events):
        return None
    lo = min(v[0] for v in stages.values())
    want = {str(s) for s in (args.get("stages") or ())}
    behind = tuple(sorted(r for r, v in stages.items() if v[0] == lo))
    if lo is Stage.CHANNELS and args.get("peers_connecting") and "connect" in want:
        # The ranks behind computed their channels and printed no connection yet while the others are connecting
        # (none got further): the job is in its connection phase, stuck with the transport the others print.
        conn = tuple(sorted(r for r, v in stages.items() if v[0] is Stage.CONNECT))
        if conn and all(v[0] <= Stage.CONNECT for v in stages.values()):
            lo, behind = Stage.CONNECT, tuple(sorted(behind + conn))
    if lo.label not in want:
        return None
    ahead = tuple(sorted(r for r, v in stages.items() if v[0] >= Stage.INIT_COMPLETE))
    if args.get("others_done") and not ahead:
        return None
    beyond = args.get("none_beyond")
    if beyond and any(v[0] > Stage[str(beyond).upper()] for v in stages.values()):
        return None
    transports = sorted({t for r in behind if stages[r][2] for t in stages[r][2].split(", ")})
    pat = args.get("transport")
    if pat:
        transports = [t for t in transports if re.search(str(pat), t)]
        if not transports:
            return None
    gpus = _one_node_gpus(b, stages, args.get("one_node"))
    if gpus is None:
        return None
    if args.get("quiet_after") and _progress_after(b, [stages[r][1] for r in behind], ctx.events, _job_pids(ctx)):
        return None
    first_timeout: dict[str, int] = {}
    for e in ctx.events:
        if e.kind.startswith(TIMEOUT_KINDS) and e.line < first_timeout.get(e.path, e.line + 1):
            first_timeout[e.path] = e.line
    if first_timeout and all(stages[r][1].line > first_timeout.get(stages[r][1].path, stages[r][1].line)
                             for r in behind):
        # every stuck rank's last stage line comes after the timeout was already reported in the same input: those
        # processes were still getting on when it fired (another job's processes in a shared console), so where
        # they stopped does not explain it
        return None
    first = stages[behind[0]][1]
    transport = transports[0] if transports else None
    bound: dict[str, Any] = {
        "stuck": _rank_list(behind), "stuck_who": _who(behind), "stage": lo.label,
        "stage_words": _stage_words(lo, transport), "stage_line": f"{first.path}:{first.line}",
    }
    if transport:
        bound["transport"] = transport
    if gpus:
        bound["n_gpus"] = gpus
    if ahead and lo < Stage.INIT_COMPLETE:
        bound["done_who"] = _who(ahead)
    evidence = [stages[r][1] for r in behind[:4]]
    if procs:
        bound["stuck"] = bound["stuck_who"] = ", ".join(procs[r] for r in behind[:4]) + (" ..." if len(behind) > 4 else "")
        bound.pop("done_who", None)
        return PredResult(bound=bound, ranks=(), evidence=evidence)
    return PredResult(bound=bound, ranks=behind, evidence=evidence)


_READY_RANKS = re.compile(r"([\w./:-]+) \[ready ranks: (\d+(?:, ?\d+)*)\]")


@predicate
def horovod_disjoint_ready(ctx: PredContext) -> PredResult | None:
    """Horovod's stall report (``Stalled ops: T [ready ranks: 0, 1], ...``, horovod/common/operations.cc before the
    stall_inspector.cc of 0.16.1) lists two stalled tensors that no rank is ready for both of: the ranks wait in
    different collectives (each side submitted one the other side never will), not for one slow rank that is
    behind on all of them (it is in no ready list)."""
    ready: dict[str, tuple[frozenset[int], Any]] = {}
    for ev in ctx.events:
        for name, ranks in _READY_RANKS.findall(ev.text or ""):
            ready[name] = (frozenset(int(r) for r in ranks.split(",")), ev)
    groups: dict[frozenset[int], tuple[str, Any]] = {}
    for name, (ranks, ev) in ready.items():
        groups.setdefault(ranks, (name, ev))
    sets = sorted(groups, key=lambda s: (len(s), sorted(s)))
    for i, a in enumerate(sets):
        for b in sets[i + 1:]:
            if a.isdisjoint(b):
                (ta, ea), (tb, eb) = groups[a], groups[b]
                return PredResult(bound={"tensor_a": ta, "ranks_a": _rank_list(tuple(sorted(a))),
                                         "tensor_b": tb, "ranks_b": _rank_list(tuple(sorted(b)))},
                                  ranks=tuple(sorted(a)), evidence=[ea] if ea is eb else sorted([ea, eb], key=lambda e: (e.path, e.line)))
    return None


_STALL_ROW = re.compile(r"([\w./:-]+) \[(ready|missing) ranks: (\d+(?:, ?\d+)*)\]")


@predicate
def horovod_stall_log_ends(ctx: PredContext) -> PredResult | None:
    """Horovod's stall report names stalled tensors with the ranks ready for them or missing from them
    (``T [missing ranks: 3, 6]``, ``T [ready ranks: 1]``; horovod/common/operations.cc before 0.16.1 and
    stall_inspector.cc after) and is the last thing in the log: the program printed nothing of its own after it (a
    transient stall is followed by the training's output, horovod#2843). Blames the ranks missing from every stalled
    tensor where the report says ``missing ranks``; a ``ready ranks`` report names no missing rank without the world
    size, so it blames none. Binds ``n_tensors``, ``tensor``, ``stall_story``."""
    rows: list[tuple[str, str, frozenset[int], Any]] = []
    for ev in ctx.events:
        for name, side, ranks in _STALL_ROW.findall(ev.text or ""):
            rows.append((name, side, frozenset(int(r) for r in ranks.split(",")), ev))
    if not rows:
        return None  # the warning's head alone names no tensor and no rank
    last = max((r[3] for r in rows), key=lambda e: (e.path, e.line))
    if _progress_after(ctx.builder, [last], []):
        return None
    names = sorted({r[0] for r in rows})
    missing = [r[2] for r in rows if r[1] == "missing"]
    ready = [r[2] for r in rows if r[1] == "ready"]
    blamed: tuple[int, ...] = ()
    if missing and not ready:
        blamed = tuple(sorted(frozenset.intersection(*missing)))
        story = (f"rank{'s' if len(blamed) != 1 else ''} {_rank_list(blamed)} never submitted "
                 f"{len(names)} stalled tensor{'s' if len(names) != 1 else ''}" if blamed else
                 f"{len(names)} stalled tensors wait for different ranks")
    elif ready and not missing and len(set(ready)) == 1:
        story = (f"{len(names)} stalled tensor{'s' if len(names) != 1 else ''} ready on rank"
                 f"{'s' if len(ready[0]) != 1 else ''} {_rank_list(tuple(sorted(ready[0])))} only")
    else:
        story = f"{len(names)} stalled tensors submitted by a subset of ranks"
    evidence = sorted({id(r[3]): r[3] for r in rows}.values(), key=lambda e: (e.path, e.line))[:4]
    return PredResult(bound={"n_tensors": len(names), "tensor": names[0], "stall_story": story},
                      ranks=blamed, evidence=evidence)


def _p2ptest_gpus(events: list[Any]) -> tuple[int, str]:
    """The number of GPUs and their models that the test's device lines list ("GPUs" where none is shown)."""
    devices = [e for e in events if e.kind == "cudasample.p2p.device"]
    return len({int(e.get("device")) for e in devices}), ", ".join(sorted({str(e.get("gpu")) for e in devices})) or "GPUs"


def _p2ptest_matrices(events: list[Any]) -> dict[str, dict[int, list[float]]]:
    """The p2pBandwidthLatencyTest matrices the matched rows hold: matrix key -> source GPU -> values."""
    out: dict[str, dict[int, list[float]]] = {}
    for ev in events:
        if ev.kind == "cudasample.p2p.row":
            out.setdefault(str(ev.get("matrix")), {})[int(ev.get("device"))] = list(ev.get("values") or ())
    return out


@predicate
def p2ptest_bandwidth_collapse(ctx: PredContext, **args: Any) -> PredResult | None:
    """CUDA's p2pBandwidthLatencyTest measured a GPU pair slower with peer-to-peer on than off: in its
    ``P2P=Enabled`` bandwidth matrix (uni- or bidirectional) a pair whose value is below ``ratio`` (default 0.25)
    times the same pair's ``P2P=Disabled`` value (a copy staged through host memory), where the test's access lines
    do not say ``CANNOT`` for it (then the enabled run falls back to the same staged copy). Direct P2P over PCIe is
    faster than a copy through the host unless the platform reroutes it (PCIe ACS sending it up to the root complex,
    the IOMMU translating it): the P2P path is broken. Binds ``pairs`` ("0->1 2.60 vs 13.15 GB/s, ..."), ``n_pairs``,
    ``n_gpus``, ``gpu_models``."""
    ratio = float(args.get("ratio", 0.25))
    mats = _p2ptest_matrices(ctx.events)
    cannot = {(int(e.get("device")), int(e.get("peer"))) for e in ctx.events
              if e.kind == "cudasample.p2p.access" and e.get("can") is False}
    slow: list[tuple[float, int, int, float, float]] = []
    for direction in ("unidirectional", "bidirectional"):
        on, off = mats.get(f"{direction}-bandwidth-p2p", {}), mats.get(f"{direction}-bandwidth-nop2p", {})
        for i, vals in on.items():
            for j, v in enumerate(vals):
                if i == j or (i, j) in cannot or i not in off or j >= len(off[i]):
                    continue
                ref = off[i][j]
                if ref > 0 and v < ratio * ref:
                    slow.append((v / ref, i, j, v, ref))
    if not slow:
        return None
    slow.sort()
    pairs = ", ".join(f"{i}->{j} {v:.2f} vs {ref:.2f} GB/s" for _, i, j, v, ref in slow[:4])
    n_gpus, models = _p2ptest_gpus(ctx.events)
    on_rows = [e for e in ctx.events if e.kind == "cudasample.p2p.row" and str(e.get("matrix")).endswith("-p2p")]
    off_rows = [e for e in ctx.events if e.kind == "cudasample.p2p.row" and str(e.get("matrix")).endswith("-nop2p")]
    evidence = sorted(off_rows[:2] + on_rows[:2], key=lambda e: (e.path, e.line))
    return PredResult(bound={"pairs": pairs, "n_pairs": len({(i, j) for _, i, j, _, _ in slow}),
                             "n_gpus": n_gpus or len(mats.get("unidirectional-bandwidth-p2p", {})),
                             "gpu_models": models},
                      ranks=(), evidence=evidence)


@predicate
def p2ptest_stopped(ctx: PredContext) -> PredResult | None:
    """CUDA's p2pBandwidthLatencyTest printed a matrix's title and then nothing: no row of it (the sample measures
    every pair first and prints the rows after), no later title, no other output of the program. Binds ``matrix``
    (the title), ``n_gpus``, ``gpu_models``; evidence: the title and the test's last peer-access line."""
    test = sorted((e for e in ctx.events if e.kind.startswith("cudasample.p2p.")), key=lambda e: (e.path, e.line))
    if not test or test[-1].kind != "cudasample.p2p.title":
        return None
    title = test[-1]
    if _progress_after(ctx.builder, [title], []):
        return None
    n_gpus, models = _p2ptest_gpus(test)
    access = [e for e in test if e.kind == "cudasample.p2p.access"]
    return PredResult(bound={"matrix": (title.text or "").strip(), "n_gpus": n_gpus, "gpu_models": models},
                      ranks=(), evidence=([access[-1]] if access else []) + [title])


@predicate
def log_ends_at_match(ctx: PredContext, **args: Any) -> PredResult | None:
    """The last of the events the rule matched is the end of the story: the program printed nothing of its own after
    it (``_progress_after``, the test ``quiet_after`` of ``stuck_stage`` makes). For warnings that a tool prints while
    it keeps waiting (XLA's rendezvous "may be stuck"), which clear when the wait ends and the program goes on.
    Option ``bind`` (a regex with named groups, or a list of them, each searched in the last event's text): the
    values for the finding's text. ``min_hosts`` (a number): NCCL lines from at least that many hosts are in the input; binds ``hosts``."""
    if not ctx.events:
        return None
    last = max(ctx.events, key=lambda e: (e.path, e.line))
    if _progress_after(ctx.builder, [last], []):
        return None
    bound: dict[str, Any] = {}
    want = args.get("min_hosts")
    if want:
        hosts = sorted(h for h in ctx.builder.hosts if h)
        if len(hosts) < int(want):
            return None
        bound["hosts"] = ", ".join(hosts[:4]) + (" ..." if len(hosts) > 4 else "")
        bound["n_hosts"] = len(hosts)
    pats = args.get("bind") or ()
    for pat in [pats] if isinstance(pats, str) else pats:
        m = re.search(str(pat), last.text or "")
        if m:
            bound.update({k: v for k, v in m.groupdict().items() if v is not None})
    evidence = sorted(ctx.events, key=lambda e: (e.path, e.line))[-4:]
    return PredResult(bound=bound, evidence=evidence)
