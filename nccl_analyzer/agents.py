"""The global rank of a torchrun worker that torchrun's agent names only by its local rank.

torchrun's agent logs ``failed (exitcode: N) local_rank: K (pid: P) of binary: ...`` (torch/distributed/elastic/
multiprocessing/api.py) and ``Sending process P closing signal SIGTERM`` for the others, but the global rank of
worker K only in its failure report (``rank : R (local_rank: K)``), which pastes and console-only logs often lack.
The agent assigns global ranks per node (torch/distributed/elastic/agent/server/api.py, ``_assign_worker_ranks``:
the group rank's base, the sum of the local world sizes of the nodes before it, plus the local rank), so on a
job of one node the global rank IS the local rank. ``ElasticAgents`` keeps what the agents' lines show and says
``local_rank`` -> global rank only when nothing in the input shows a second node: one agent, one host, no known
rank or world size beyond the agent's own workers. Bounded: a few sets of pids.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .model import Event

if TYPE_CHECKING:  # pragma: no cover
    from .job import JobBuilder

#: Worker pids / agents kept (a log of a huge job only needs to show there is more than one agent).
_CAP = 4096
#: The agent's "Sending process P closing signal SIGTERM" line (the failed workers' kinds come from the message
#: tables: ``Tables.worker_failed``, messages/events.toml ``[restarted] worker``).
SIGTERM = "torch.elastic.sigterm"


class ElasticAgents:
    """What torchrun's agents logged about their workers: which agents, which worker pids, which local ranks."""

    __slots__ = ("agents", "workers", "local_ranks", "hosts", "top", "failed", "kinds", "nodes")

    def __init__(self, worker_failed: frozenset[str] = frozenset()) -> None:
        """``worker_failed``: the kinds of the agent's per-worker failure line (``Tables.worker_failed``)."""
        self.failed = frozenset(worker_failed)
        self.kinds = self.failed | {SIGTERM}  # the agent's lines about its workers
        self.agents: set[tuple[str | None, int]] = set()  # (host, agent pid) of agents that printed their pid
        self.workers: set[int] = set()  # worker pids the agents named (teardown and failures)
        self.local_ranks: set[int] = set()  # local ranks of failed workers and of workers' tagged output
        self.hosts: set[str] = set()
        # pdsh's node labels the input's lines carried (sources.Source.nodes): pdsh runs the command on a list of
        # nodes, and DeepSpeed's runner uses it only for a job of more than one node, so a local rank under such a
        # label ("node2: [default0]:", "gpu-a1: ... '--local_rank=3'") is one node's worker, not a global rank
        self.nodes: frozenset[str] = frozenset()
        self.top = -1  # the highest global rank any other event of the input carries (JobBuilder.add sets it)

    def add(self, ev: Event) -> None:
        """Fold in one event the job builder reads (any kind: ranks and local ranks of all of them count)."""
        if ev.kind not in self.kinds:
            if ev.rank is not None and ev.rank > self.top:
                self.top = ev.rank
            lr = ev.fields.get("local_rank")
            if lr is not None and len(self.local_ranks) < _CAP:
                self.local_ranks.add(int(lr))
            return
        agent = ev.fields.get("agent_pid")
        if agent is not None and len(self.agents) < _CAP:
            self.agents.add((ev.host, int(agent)))
        if ev.host and len(self.hosts) < _CAP:
            self.hosts.add(ev.host)
        if ev.pid is not None and len(self.workers) < _CAP:
            self.workers.add(int(ev.pid))
        lr = ev.fields.get("local_rank")
        if lr is not None and ev.kind in self.failed and len(self.local_ranks) < _CAP:
            self.local_ranks.add(int(lr))

    def one_node(self, builder: "JobBuilder") -> bool:
        """Whether the input shows one node only: at most one agent and one host, and no rank, communicator or
        world size larger than the agent's own workers (torchrun names every worker it stops or loses)."""
        if len(self.agents) > 1 or len(self.hosts | set(builder.hosts)) > 1 or self.nodes:
            return False
        local = max(len(self.workers), max(self.local_ranks, default=-1) + 1)
        if local <= 0:
            return False
        job = builder.job
        if self.top >= local or any(r >= local for r in job.ranks):
            return False
        if any(int(c.get("nranks") or 0) > local for c in job.communicators.values()):
            return False
        world = builder.env.get("WORLD_SIZE")
        return not (world is not None and str(world).isdigit() and int(world) > local)

    def global_rank(self, ev: Event, builder: "JobBuilder") -> int | None:
        """The global rank of the worker an event names only by its local rank (torchrun's ``failed ... local_rank:
        K``, DeepSpeed's ``--local_rank=K``, a worker's own line under torchrun's ``[defaultK]:`` tag), where the
        input shows one node."""
        if ev.kind == SIGTERM:
            return None
        lr = ev.fields.get("local_rank")
        if lr is None or not self.one_node(builder):
            return None
        return int(lr)
