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
