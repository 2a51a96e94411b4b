"""Attempts torchelastic restarted and that the job then got past: their error lines are no failure of the job.

``torchrun --max-restarts=N`` (``SimpleElasticAgent._invoke_run``, torch/distributed/elastic/agent/server/api.py)
logs ``failed (exitcode: N) local_rank: R ...`` for the first worker of an attempt that failed; with restarts left
it logs (INFO) ``[role] Worker group FAILED. k/N attempts left; will restart worker group`` and starts every
worker again; with none left it stops the workers and the launcher raises ``ChildFailedError``, whose report (the
``Root Cause (first observed failure)`` block) ends the console. When every worker of an attempt exits 0 it logs
(INFO) ``[role] worker group successfully finished.``.

So an input that shows a failed attempt and, after the last one, either the agent's success line, or (torchrun at
its default WARNING level prints neither the restart nor the success line) more output with no error line and no
``ChildFailedError`` report, is a job torchelastic recovered: what the first attempt(s) printed is dismissed. That
more output shows a restart only where the input shows the agent restarting (its INFO line), or where the worker the
agent reported failed prints again: the agent logs ``failed (exitcode ...)`` after ``PContext.close()`` stopped
every worker of the attempt (torch/distributed/elastic/multiprocessing/api.py ``_poll``), so lines of that local
rank after it come from a worker started again (at least ``min_lines`` of them: a console's stdout buffer may flush a
few of the dead worker's own last lines late). Which
event kinds play which part is data: ``messages/events.toml`` ``[restarted]``. One input (path) at a time: a file
of a job whose launcher report is elsewhere (per-rank logs) is left as it is.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Restarts:
    """Per input: where the last failed attempt ended, the last success line, whether a final failure report shows."""

    failed: frozenset[str]
    succeeded: frozenset[str]
    final: frozenset[str]
    min_lines: int = 3
    restart: frozenset[str] = frozenset()  # the agent's own "will restart worker group" line
    # the agent's own bookkeeping records ("Stopping worker group", "Rendezvous'ing worker group", "Starting worker
    # group"): kinds, and a pattern their ``logger`` field must match. Such lines after a failed attempt are no
    # output of a new attempt's workers.
    agent_kinds: frozenset[str] = frozenset()
    agent_logger: Any = None
    last_agent: dict[str, int] = field(default_factory=dict)
    last_failed: dict[str, int] = field(default_factory=dict)
    last_success: dict[str, int] = field(default_factory=dict)
    ended_failed: set[str] = field(default_factory=set)
    restarted: set[str] = field(default_factory=set)  # paths that show the agent restarting a worker group
    # path -> the local rank of the worker of its last failed-worker line, and the agents (pids) that reported one
    failed_rank: dict[str, int] = field(default_factory=dict)
    agents: dict[str, set[int]] = field(default_factory=dict)
    # path -> rank -> the last line numbers of program output that names that rank (classify.EventStream.rank_tail;
    # set by the analysis before ``recovered`` is asked; None: not known, inputs parsed in worker processes)
    rank_tail: dict[str, dict[int, list[int]]] | None = None

    def reads(self, kind: str) -> bool:
        return kind in self.restart or kind in self.failed or kind in self.succeeded or kind in self.final \
            or kind in self.agent_kinds

    def add(self, ev: Any) -> None:
        kind, path, end = ev.kind, ev.path, ev.end_line or ev.line
        if kind in self.agent_kinds:
            logger = ev.fields.get("logger")
            if self.agent_logger is not None and logger and self.agent_logger.search(str(logger)):
                self.last_agent[path] = max(end, self.last_agent.get(path, 0))
            return
        if kind in self.restart:
            self.restarted.add(path)
        if kind in self.failed:
            if end > self.last_failed.get(path, 0):
                self.last_failed[path] = end
                rank = ev.fields.get("local_rank")
                if isinstance(rank, int):
                    self.failed_rank[path] = rank
                else:
                    self.failed_rank.pop(path, None)
                agent = ev.fields.get("agent_pid")
                if agent is not None:
                    got = self.agents.setdefault(path, set())
                    if len(got) < 2:
                        got.add(agent)
        elif kind in self.succeeded:
            self.last_success[path] = max(end, self.last_success.get(path, 0))
        elif kind in self.final:
            self.ended_failed.add(path)

    def recovered(self, path: str, error_lines: list[tuple[int, bool]], last_line: int) -> tuple[int, str] | None:
        """(the last line of the failed attempts, the dismissal reason) when ``path`` shows a restart the job got
        past, else None. ``error_lines``: (line, harmless) of every error line of ``path``."""
        cut = self.last_failed.get(path)
        if cut is None or path in self.ended_failed:
            return None
        ok = self.last_success.get(path, 0)
        if ok > cut:
            return cut, (f"a failed attempt torchelastic restarted: the agent reported the next attempt's worker group "
                         f"successfully finished (line {ok})")
        again = 0 if path in self.restarted else self._again(path, cut)
        if path not in self.restarted and again < self.min_lines:
            # clean output after a failed worker alone is no restart: a log cut before torchrun's report, with other
            # ranks' output after it, reads the same (tests/test_robustness.py, the noise transformation)
            return None
        # count only what follows the agent's own records of the restart: a log that ends on "Starting worker group"
        # shows no worker of the new attempt getting anywhere
        after = last_line - max(cut, self.last_agent.get(path, 0))
        if after < self.min_lines or any(n > cut and not harmless for n, harmless in error_lines):
            return None
        if again:
            return cut, (f"a failed attempt torchelastic restarted: the worker it reported failed at line {cut} (local "
                         f"rank {self.failed_rank[path]}) prints {again} more lines after it (a worker the agent "
                         "stopped prints again only when started again), with no error line and no ChildFailedError "
                         "report (torchrun prints one when no restart is left)")
        return cut, (f"a failed attempt torchelastic restarted: {after} more lines of output follow line "
                     f"{cut} with no error line and no ChildFailedError report (torchrun prints one when no restart "
                     "is left)")

    def _again(self, path: str, cut: int) -> int:
        """How many lines of output the worker of the last failed-worker line of ``path`` printed after it (0 where
        that is unknown, or where the input shows several agents: their local ranks are no one rank)."""
        rank = self.failed_rank.get(path)
        if rank is None or self.rank_tail is None or len(self.agents.get(path, ())) > 1:
            return 0
        return sum(1 for n in self.rank_tail.get(path, {}).get(rank, ()) if n > cut)
