"""Predicates on collectives and the ranks behind a timeout: hang evidence, ranks in different collectives or
with different sizes, and the lagging, silent, missing and exited ranks."""
from __future__ import annotations

import fnmatch
import re
from typing import TYPE_CHECKING, Any

from .predicate import PredContext, PredResult, _odd_ones, _rank_list, _who, predicate

if TYPE_CHECKING:  # pragma: no cover
    from ..job import JobBuilder


@predicate
def hang_evidence(ctx: PredContext, kinds: list[str] | None = None, first_error: str | None = None,
                  collective_traceback: bool = False) -> PredResult | None:
    """The job really hung, not just dumped mid-run: a matched event says ``overdue = true`` (a Flight Recorder
    dump proves the op pending for a whole timeout), or the logs hold an event of one of ``kinds`` (globs), or
    some rank's first error matches the regex ``first_error``, or (``collective_traceback``) a rank's traceback
    ended inside a collective call (gloo raises its timeout there). A dump taken on a healthy job also ends in a
    pending op; this tells the two apart. Blames nothing itself."""
    if any(ev.fields.get("overdue") is True for ev in ctx.events):
        return PredResult(bound={"hang_evidence": "the dump shows the op pending for longer than its timeout"})
    b = ctx.builder
    for k in sorted(b.kinds):
        if any(fnmatch.fnmatchcase(k, g) for g in kinds or ()):
            return PredResult(bound={"hang_evidence": f"the log shows {k}"})
    if first_error:
        rx = re.compile(first_error)
        for r in sorted(b.job.ranks):
            err = b.job.ranks[r].first_error
            if err is not None and rx.search(err.text):
                return PredResult(bound={"hang_evidence": f"rank {r}'s first error: {err.text[:160]}"})
    if collective_traceback and b.tb_collectives:
        r, op = sorted(b.tb_collectives.items())[0]
        return PredResult(bound={"hang_evidence": f"rank {r}'s traceback ends in {op}"})
    return None


def _norm_op(op: Any) -> str:
    return re.sub(r"[^a-z]", "", str(op).lower()).replace("tensor", "").replace("base", "")


#: Collectives whose root sends (``_norm_op`` names, the ``_object_list`` forms included): each receiver exchanges data
#: with the root (or its tree parent) only, so it may finish while other ranks still wait.
_ROOT_SENDS = ("broadcast", "scatter")
#: gloo's wait of a rank that still had data to send (``unbound_buffer.cc``: waitSend)
_SENDING = re.compile(r"Timed out waiting \d+ms for send operation")


def _root_still_sending(ctx: PredContext, op: str, ranks: list[int]) -> bool:
    """The majority waits in a broadcast / scatter and one of them timed out SENDING in it: the root is among them and
    its data went out to some ranks, so a rank found past the call may be a receiver that got its part and went on."""
    if not op.startswith(_ROOT_SENDS):
        return False
    b = ctx.builder
    return any(b.rank_of(ev) in ranks and _SENDING.search(str(ev.fields.get("message") or ev.text or ""))
               for ev in ctx.events)


@predicate
def ranks_in_different_collectives(ctx: PredContext) -> PredResult | None:
    """Ranks stopped in different collectives (traceback frames, or watchdog OpType at the same SeqNum)."""
    b = ctx.builder
    ops: dict[int, str] = dict(b.tb_collectives)
    seqs: dict[int, Any] = {}
    for r, c in b.collectives.items():
        if c.get("op_type") and str(c.get("source", "")).startswith("torch."):
            ops.setdefault(r, str(c["op_type"]))
            seqs[r] = c.get("seq")
    if len(ops) < 2:
        return None
    norm = {r: _norm_op(o) for r, o in ops.items()}
    if len(set(norm.values())) < 2:
        return _sizes_differ(ctx)
    known_seqs = {seqs[r] for r in ops if seqs.get(r) is not None}
    if len(known_seqs) > 1:
        return None  # different ops at different SeqNums: ranks are at different points (lagging), not a mismatch
    groups, blamed = _odd_ones(norm)
    if blamed is not None and _root_still_sending(ctx, norm[groups[0][0]], groups[0]):
        # A receiver of a broadcast / scatter is done once its own part came from the root, and goes on to the next
        # call while the ranks whose transfer did not happen still wait. With the root itself in the majority (stuck
        # sending), a rank found past the call is not shown to be the one whose call differs (a root argument that
        # differs on a rank of the majority strands them the same way): no odd one out. A majority that only waits
        # to receive (no root among them) keeps it: the rank elsewhere is the root that called something else.
        blamed = None
    bound: dict[str, Any] = {"ops": ", ".join(f"{_who(tuple(rs))}: {ops[rs[0]]}" for rs in groups)}
    if blamed is not None:
        bound["odd_who"] = _who(blamed)
        bound["odd_story"] = (f"{_who(blamed)} called {', '.join(sorted({ops[r] for r in blamed}))} while "
                              f"{_who(tuple(groups[0]))} called {ops[groups[0][0]]}")
    return _blame_first(ctx, bound, blamed or tuple(sorted(ops)))


@predicate
def ranks_all_in_one_p2p_direction(ctx: PredContext) -> PredResult | None:
    """Every rank of the job (0 .. world size - 1, at least 2) stopped in the same point-to-point direction, all in
    recv or all in send (their tracebacks): a send / recv order deadlock, each rank waiting for a peer that is itself
    waiting; each of them must have a matched event (the rule's timeout lines). Blames every rank (the program's
    p2p order, not one rank)."""
    b = ctx.builder
    ops = {r: _norm_op(o) for r, o in b.tb_collectives.items()}
    world = b.job.world_size or 0
    if world < 2 or set(ops) != set(range(world)) or len(set(ops.values())) != 1 \
            or not set(ops) <= {b.rank_of(e) for e in ctx.events}:  # each rank's own matched (timeout) line
        return None
    op = next(iter(ops.values()))
    if op not in ("recv", "send", "irecv", "isend"):
        return None
    return PredResult(bound={"p2p_op": op.lstrip("i"), "p2p_who": _who(tuple(sorted(ops)))}, ranks=tuple(sorted(ops)),
                      evidence=list(ctx.events)[:4])


def _blame_first(ctx: PredContext, bound: dict[str, Any], blamed: tuple[int, ...]) -> PredResult:
    """The predicate's result naming ``blamed``, with their events first in the evidence."""
    b = ctx.builder
    ev = [e for e in ctx.events if b.rank_of(e) in blamed] + [e for e in ctx.events if b.rank_of(e) not in blamed]
    return PredResult(bound=bound, ranks=blamed, evidence=ev[:4])


#: Collectives whose input has the same element count on every rank (torch checks nothing across ranks; NCCL
#: matches calls by order): all_to_all(_single) and send/recv take uneven sizes, so they are not compared.
_SAME_SIZE_OPS = frozenset(("allreduce", "broadcast", "reduce", "allgather", "reducescatter", "coalesced"))


def _sizes_differ(ctx: PredContext) -> PredResult | None:
    """The watchdog of every rank shown stopped in the same op at the same SeqNum, but NumelIn differs: the ranks
    are reducing different tensors at the same call index (the shape mismatch TORCH_DISTRIBUTED_DEBUG=DETAIL
    reports as 'Detected mismatch between collectives ... Tensor Shapes'), e.g. gradient buckets that differ
    because a layer (an unused MoE expert) took no part in the backward pass on some ranks."""
    b = ctx.builder
    sizes: dict[int, int] = {}
    seqs, opnames = set(), set()
    for r, c in b.collectives.items():
        if c.get("source") != "torch.watchdog.timeout" or c.get("numel_in") is None or c.get("seq") is None:
            continue
        seqs.add(c["seq"])
        opnames.add(_norm_op(c.get("op_type")))
        sizes[r] = int(c["numel_in"])
    if len(sizes) < 2 or len(seqs) != 1 or len(opnames) != 1 or not opnames <= _SAME_SIZE_OPS \
            or len(set(sizes.values())) < 2:
        return None
    op = next(str(c["op_type"]) for r, c in b.collectives.items() if r in sizes)
    groups, blamed = _odd_ones(sizes)
    bound: dict[str, Any] = {"ops": ", ".join(f"{_who(tuple(rs))}: {op} of {sizes[rs[0]]} elements" for rs in groups)}
    if blamed is not None:
        bound["odd_who"] = _who(blamed)
        bound["odd_story"] = (f"at SeqNum {next(iter(seqs))} {_who(blamed)} passed a tensor of "
                              f"{', '.join(str(sizes[r]) for r in blamed)} elements while {_who(tuple(groups[0]))} "
                              f"passed {sizes[groups[0][0]]}")
    return _blame_first(ctx, bound, blamed or tuple(sorted(sizes)))


@predicate
def lowest_seqnum_rank(ctx: PredContext) -> PredResult | None:
    """The rank(s) whose last collective is furthest behind (watchdog SeqNum / last completed work)."""
    b = ctx.builder
    pos: dict[int, float] = {}
    for r, c in b.collectives.items():
        v = c.get("last_completed")
        if v is None and c.get("seq") is not None:
            v = float(c["seq"]) - 1  # the timed-out op did not complete
        if v is not None:
            try:
                pos[r] = float(v)
            except (TypeError, ValueError):
                continue
    if not pos:
        return None
    lo = min(pos.values())
    behind = tuple(sorted(r for r, v in pos.items() if v == lo))
    bound: dict[str, Any] = {"seq": int(lo) + 1}
    if len(set(pos.values())) > 1:
        bound.update(_lagging_bound(b, behind, "lagging {who}"))
        return PredResult(bound=bound, ranks=behind)
    missing = _missing_ranks(b, set(pos))
    if missing:
        bound.update(_lagging_bound(b, missing, "lagging {who}"))
        return PredResult(bound=bound, ranks=missing)
    if b.job.world_size == 1 and len(pos) == 1:
        # A world of one rank waits for no peer: its own GPU stream (a long or hung kernel queued before the
        # collective) kept the collective from finishing.
        bound.update(_lagging_bound(b, behind, "rank {list} is the only rank: GPU work it queued before did not finish"))
        bound["only_rank"] = behind[0]
        return PredResult(bound=bound, ranks=behind)
    # no rank is behind the others: "lagging" stays unbound and the rule's text leaves that part out
    return PredResult(bound=bound, ranks=())


def _lagging_bound(b: "JobBuilder", ranks: tuple[int, ...], what: str) -> dict[str, Any]:
    """``lagging`` ("1, 2"), ``lagging_who`` ("ranks 1, 2"), ``lagging_what`` (``what`` filled) and, for one
    rank whose pid the log shows, ``lagging_pid``."""
    lst = _rank_list(ranks)
    who = _who(ranks)
    out: dict[str, Any] = {"lagging": lst, "lagging_who": who, "lagging_what": what.format(who=who, list=lst)}
    info = b.job.ranks.get(ranks[0]) if len(ranks) == 1 else None
    if info is not None and info.pid is not None:
        out["lagging_pid"] = info.pid
    return out


def _missing_ranks(b: "JobBuilder", reporting: set[int]) -> tuple[int, ...]:
    # a world size no line states (only "highest rank seen + 1") names no rank that exists for sure
    world = 0 if getattr(b, "world_inferred", False) else (b.job.world_size or 0)
    known = set(b.job.ranks) | set(range(world))
    lag = set(b.lagging)
    if lag and not (known and known <= lag):  # a desync report naming every rank (all stuck in one) names no culprit
        return tuple(sorted(lag))
    if world and len(reporting) < world and 2 * len(reporting) >= world:
        # Ranks that said nothing about the timed-out collective while (most of) their peers reported it. When
        # most of the world is silent, the input is one or a few ranks' output (a partial paste, one node's
        # log): silence then says nothing about who lagged.
        return tuple(sorted(r for r in known if r not in reporting and r < world))
    return ()


@predicate
def silent_ranks(ctx: PredContext, **args: Any) -> PredResult | None:
    """Ranks of the job that did NOT report the matched timeouts: the suspects, since every rank that did report
    one was waiting for a peer (gloo names no sequence number, so this is what tells culprit from victims).
    When every known rank reported, they are the ranks named (e.g. all stuck in mismatched collectives)."""
    b = ctx.builder
    reporting = {r for r in (b.rank_of(e) for e in ctx.events) if r is not None}
    if not reporting:
        return None
    # a world size no line states (only "highest rank seen + 1") names no rank that exists for sure; a rank past a
    # stated world size is another job's (a communicator none of this job's processes joined)
    world = 0 if getattr(b, "world_inferred", False) else (b.job.world_size or 0)
    known = {r for r in set(b.job.ranks) | set(range(world)) if not world or r < world}
    silent = tuple(sorted(r for r in known if r not in reporting))
    if silent and world and 2 * len(reporting) < world:
        # Most of the world said nothing: the input is one or a few ranks' output (a partial paste, one node's log),
        # and silence says nothing about who lagged (as _missing_ranks).
        return None
    if silent and any(e.pid is not None and b.rank_of(e) is None for e in ctx.events):
        # Some reporting process's rank is unknown (its Init line is not in the input: a log cut at the start):
        # it is one of the "silent" ranks, and which one the log does not say.
        return None
    if silent:
        return PredResult(bound={"lagging": _rank_list(silent)}, ranks=silent)
    return PredResult(bound={}, ranks=tuple(sorted(reporting)))


@predicate
def exited_peers(ctx: PredContext, **args: Any) -> PredResult | None:
    """The peer(s) that went away: ranks torchrun saw exit on their own (an error code, or a signal other than
    the SIGTERM/SIGINT it sends when tearing the group down) that are not among the ranks reporting the lost
    connection. Falls back to the ranks that reported nothing at all."""
    b = ctx.builder
    reporting = {r for r in (b.rank_of(e) for e in ctx.events) if r is not None}
    gone = []
    for r, entry in b.exits.items():
        code = entry.get("exitcode")
        if r in reporting or code is None:
            continue
        try:
            code = int(code)
        except (TypeError, ValueError):
            continue
        if code > 0 or code not in (0, -2, -15):
            gone.append(r)
    if not gone:
        gone = _unlisted_workers(b, reporting)
    if gone:
        ranks = tuple(sorted(gone))
        return PredResult(bound={"peer_ranks": _rank_list(ranks), "peer_who": _who(ranks)}, ranks=ranks)
    res = silent_ranks(ctx)
    if res is not None and res.bound.get("lagging"):
        return PredResult(bound={"peer_ranks": res.bound["lagging"], "peer_who": _who(res.ranks)}, ranks=res.ranks)
    return None


#: The most workers one torchrun agent is taken to run (``--nproc_per_node``: one host's GPUs or CPU workers).
MAX_LOCAL_WORKERS = 4096


def _unlisted_workers(b: "JobBuilder", reporting: set[int]) -> list[int]:
    """Workers one torchrun agent's failure report leaves out although it lists a higher local rank: the agent lists
    every worker of its group that did not succeed (exit status, or the SIGTERM it sent), so a local rank missing
    below the highest listed one ended with exit status 0 -- while its peers were still in a collective, the peer
    that went away. Global rank = the listed rank - its local_rank + the missing local rank (one agent's workers are
    consecutive global ranks); ranks that reported the lost peer themselves are never it. Only where the report
    lists every worker torchrun says it sent SIGTERM: torchelastic's SubprocessContext._poll records the exit codes
    of the workers it terminated since torch 2.x; an older report leaves them out, and a missing local rank may then
    be one of them."""
    listed = {int(e["pid"]) for e in b.exits.values() if e.get("pid") is not None}
    if getattr(b, "sigterm_pids", set()) - listed:
        return []
    groups: dict[tuple[Any, int], set[int]] = {}
    for r, entry in b.exits.items():
        lr = entry.get("local_rank")
        if lr is None:
            continue
        try:
            base = int(r) - int(lr)
            groups.setdefault((entry.get("path"), base), set()).add(int(lr))
        except (TypeError, ValueError):
            continue
    out = []
    for (_, base), locals_ in groups.items():
        if max(locals_) > MAX_LOCAL_WORKERS:
            continue  # no agent runs that many workers on one host: a mangled number, not a gap to fill
        for lr in range(max(locals_)):
            if lr not in locals_ and base + lr not in reporting and base + lr not in b.exits and base >= 0:
                out.append(base + lr)
    return out


@predicate
def rank_missing_from_collective(ctx: PredContext) -> PredResult | None:
    """Some ranks of the world never reported the collective the others timed out in (or desync names them)."""
    b = ctx.builder
    reporting = {r for r, c in b.collectives.items() if str(c.get("source", "")).startswith("torch.")}
    if not reporting and not b.lagging:
        return None
    missing = _missing_ranks(b, reporting)
    if not missing:
        return None
    return PredResult(bound={"missing": ", ".join(map(str, missing))}, ranks=missing)


@predicate
def peers_ended_cleanly(ctx: PredContext) -> PredResult | None:
    """The rank that lost its peer is the only worker torchrun saw fail, and the agent's other workers ended with
    exit status 0 before it: the peers did not die, they finished (or stopped calling collectives) while this rank
    was still in one. torchelastic's report lists every worker of the group that did not succeed
    (``_unlisted_workers``), so a local rank missing below the listed one ended cleanly; with no SIGTERM sent
    (torchrun tears a group down only after a failure it saw) no peer was still running when this rank failed.
    One agent and one host only: a report of one host says nothing of another host's ranks. Names the rank that
    failed (its collective sequence has a call its peers never made, or they skipped one it made)."""
    b = ctx.builder
    reporting = {r for r in (b.rank_of(e) for e in ctx.events) if r is not None}
    if len(reporting) != 1 or len(b.exits) != 1 or b.sigterm_pids or len(b.hosts) > 1:
        return None
    (rank,) = reporting
    if rank not in b.exits:
        return None
    try:
        code = int(b.exits[rank].get("exitcode"))
    except (TypeError, ValueError):
        return None
    if code <= 0:
        return None  # killed by a signal: not the exception its lost connection raised
    clean = _unlisted_workers(b, reporting)
    if not clean:
        return None
    peers = tuple(sorted(clean))
    return PredResult(bound={"clean_peers": _who(peers)}, ranks=(rank,))
