"""Predicates for torchelastic restarts: which worker failure came first when the agent restarted its group."""
from __future__ import annotations

from typing import Any

from .predicate import PredContext, PredResult, predicate

_FAILED = "torch.elastic.worker_failed"


@predicate
def first_attempt(ctx: PredContext, **args: Any) -> PredResult | None:
    """The worker(s) whose failure started the job's end when torchelastic restarted the group: each agent logs
    ``failed (exitcode: N) local_rank: R ...`` once per attempt (``PContext._poll`` reports the first worker it saw
    fail, then the agent ends the others and, with restarts left, starts the group again), so a second such line of
    the same agent process (host, its pid in the log prefix) is a LATER attempt, and the ChildFailedError report at the end describes
    only the last attempt. Blames the first line of each agent; None when no agent printed more than one (no
    restart seen: the matched ranks stand)."""
    per_agent: dict[tuple[str, Any, Any], list[Any]] = {}
    for ev in ctx.events:
        agent = ev.fields.get("agent_pid")  # the logging process's pid (ev.pid is the worker's)
        if ev.kind == _FAILED and agent is not None:
            per_agent.setdefault((ev.path, ev.host, agent), []).append(ev)
    if not any(len(v) > 1 for v in per_agent.values()):
        return None
    firsts = [min(v, key=lambda e: e.line) for v in per_agent.values()]
    ranks = tuple(sorted({r for r in (ctx.builder.rank_of(e) for e in firsts) if r is not None}))
    if not ranks:
        return None
    first = min(firsts, key=lambda e: e.line)
    return PredResult(bound={"exitcode": first.fields.get("exitcode"), "attempts": max(map(len, per_agent.values()))},
                      ranks=ranks, evidence=sorted(firsts, key=lambda e: e.line))


_SIGTERM = "torch.elastic.sigterm"


@predicate
def signal_not_from_agent(ctx: PredContext, exitcode: int = -15, **args: Any) -> PredResult | None:
    """The first failed worker died by the signal the agent itself tears a group down with (SIGTERM), yet the agent
    did not send it to that worker. ``PContext._poll`` (torch/distributed/elastic/multiprocessing/api.py) sees a
    worker fail, then ``close()`` logs ``Sending process P closing signal SIGTERM`` for every worker still running,
    then logs ``failed (exitcode: N) local_rank: R (pid: P)`` for the FIRST failure by time. A first failure of -15
    whose pid is not among the pids that same agent (its pid in the log prefix) sent SIGTERM to, where it did send
    some, was signalled from outside the job (a preemption, a scheduler, someone's kill). Blames that worker."""
    sent: dict[tuple[str, Any, Any], set[Any]] = {}
    for ev in ctx.events:
        if ev.kind == _SIGTERM:
            sent.setdefault((ev.path, ev.host, ev.fields.get("agent_pid")), set()).add(ev.fields.get("worker_pid"))
    hits = []
    for ev in ctx.events:
        if ev.kind != _FAILED or ev.fields.get("exitcode") != exitcode:
            continue
        pids = sent.get((ev.path, ev.host, ev.fields.get("agent_pid")))
        pid = ev.fields.get("worker_pid")
        if pids and pid is not None and pid not in pids:
            hits.append(ev)
    if not hits:
        return None
    ranks = tuple(sorted({r for r in (ctx.builder.rank_of(e) for e in hits) if r is not None}))
    return PredResult(bound={"signal": "SIGTERM"}, ranks=ranks, evidence=hits)
