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
    """A worker failure of -15 (SIGTERM) reported by an agent that, in the same attempt, sent SIGTERM to some of its
    workers but not to this one. ``PContext._poll`` (torch/distributed/elastic/multiprocessing/api.py) sees a worker
    fail, then ``close()`` logs ``Sending process P closing signal SIGTERM`` for every worker still running, then it
    logs ``failed (exitcode: N) local_rank: R (pid: P)`` for the FIRST failure by time; so an attempt's SIGTERM lines
    are that agent's (host, its pid in the log prefix) lines after its previous ``failed`` line (an earlier attempt,
    before a restart) and before this one. What this checks is only that: the agent tore the attempt down (some
    SIGTERM lines), and the first failure was a -15 it did not send. The claim that the signal came from outside the
    job (a preemption, a scheduler, someone's kill) rests on ``_poll``'s order: the first failure is never among the
    workers it signals in that attempt, so the pid test itself rarely excludes anything. An excerpt without the
    agent's SIGTERM lines gives None. Blames that worker."""
    per_agent: dict[tuple[str, Any, Any], dict[int, Any]] = {}
    # the rule matches -15 failures only: the agent's other failure lines (the job builder keeps them) end attempts too
    for ev in list(ctx.events) + list(getattr(ctx.builder, "agent_failed", ())):
        if ev.kind in (_SIGTERM, _FAILED):
            per_agent.setdefault((ev.path, ev.host, ev.fields.get("agent_pid")), {})[ev.line] = ev
    hits = []
    for evs in per_agent.values():
        sent: set[Any] = set()  # the pids this agent signalled in the current attempt
        for ev in sorted(evs.values(), key=lambda e: e.line):
            if ev.kind == _SIGTERM:
                sent.add(ev.fields.get("worker_pid"))
                continue
            pid = ev.fields.get("worker_pid")
            if ev.fields.get("exitcode") == exitcode and sent and pid is not None and pid not in sent:
                hits.append(ev)
            sent = set()  # the agent's failure line ends the attempt: a restart's SIGTERMs are the next one's
    if not hits:
        return None
    hits.sort(key=lambda e: e.line)
    ranks = tuple(sorted({r for r in (ctx.builder.rank_of(e) for e in hits) if r is not None}))
    return PredResult(bound={"signal": "SIGTERM"}, ranks=ranks, evidence=hits)
