"""Events -> JobModel: ranks, hosts, pids, GPUs, versions, communicators, progress (streaming, bounded memory)."""
from __future__ import annotations

from typing import Any

from .agents import SIGTERM, ElasticAgents
from .job_nccl import NcclHandlers
from .job_procs import ErrorOrder, ProcTable
from .job_procs import Proc as _Proc
from .lineref import LineEvidence, LineRefs
from .messages import Tables, load_tables
from .job_torch import TorchHandlers
from .job_values import (_PID_CAP, _TIMELINE_KINDS, COLLECTIVE_FUNCS, ERROR_KINDS_PREFIX,  # noqa: F401
                         MAX_WORLD, TIMELINE_CAP, RecordTable, Timelines, _error_evidence, one_or_more, _shared, _shared_time, time_key,
                         traceback_collective, version_number)
from .model import Event, JobModel, RankInfo
from .stage import KIND_PREFIX_STAGE, KIND_STAGE, StageTracker, may_show_stage

#: The timeline of every ``RankInfo`` while the model is read (each rank's entries are in ``Timelines``; ``build`` gives
#: each its own list). Never changed.
_NO_TIMELINE: list[dict[str, Any]] = []
#: Kinds whose ``JobBuilder.plan`` each builder keeps (more are planned again at each event).
_PLAN_CAP = 4096


class JobBuilder(NcclHandlers, TorchHandlers):
    """Builds a ``JobModel`` from events, one at a time, keeping only aggregates.

    Memory is bounded by the number of ranks/processes, not by the number of events: each rank keeps a
    capped timeline, each pid a handful of values.
    """

    def __init__(self, tables: Tables | None = None) -> None:
        """``tables``: the message tables of the analysis (``analysis.Analyzer`` passes its own; default the built-in
        ones): which kinds are the agent's per-worker failure lines (``Tables.worker_failed``)."""
        self.tables = tables or load_tables()
        self._worker_failed = self.tables.worker_failed
        self.job = JobModel()
        self.events = 0
        self._transport_seen: set[int] = set()
        self.kinds: dict[str, int] = {}
        self._plans: dict[str, tuple] = {}  # kind -> ``plan(kind)``
        # one record per process (job_procs.py): (host, pid) -> (rank, nranks), the NCCL version it printed, its
        # GPUs and their ranks, its Init lines; pid -> torchrun's global rank of that worker, the host NCCL's line
        # prefix gave it
        self.procs = ProcTable()
        self._elastic_top = -1  # the highest rank torchrun reported
        self._elastic_pids: set[int] = set()  # worker pids torchrun names (teardown, failures, its report)
        self.agents = ElasticAgents(self._worker_failed)  # torchrun agents and their workers (a local rank's global rank: agents.py)
        self._built = False  # build() ran: the whole input is in, so agents.py may judge "one node"
        self._stated: set[int] = set()  # ranks some event states itself (not inferred from a local rank / spawn index)
        self.sigterm_pids: set[int] = set()  # worker pids torchrun says it sent SIGTERM ("Sending process N closing ...")
        self._comm_pids: dict[str, set[int]] = {}  # commId -> pids of the processes that joined it
        # torch.multiprocessing.spawn names the failed child by its process index, the ``i`` of ``fn(i, *args)``
        # that programs pass on as their rank: (path, first line, last line, index) of the lines that are that child's
        self._spawn_lines: list[tuple[str, int, int, int]] = []
        self._spawn_next: dict[str, int] = {}  # path -> index of the child whose traceback the parent prints next
        self.init: dict[str, dict[int, str]] = {}  # comm_id -> rank -> started|complete
        # (host, busId) -> global ranks on that GPU (``one_or_more_add``: a rank, or a set of them; ``busids``)
        self._bus_ranks: dict[tuple[str, str], Any] = {}
        # (host, busId, comm) -> the first Init START line of each process on that GPU in that communicator: the
        # event, or a list of them (``busid_pids``, ``busid_events``)
        self._gpu_inits: dict[tuple[str, str, str], Any] = {}
        self.versions_by_proc: dict[str, set[str]] = {}  # version -> {"host:pid" or "rank N"}
        self.version_events: dict[str, Event] = {}  # first line that showed each version (evidence)
        self.env_events: dict[str, list[Event]] = {}
        self.collectives: RecordTable = RecordTable()  # rank -> last collective seen (a dict)
        self.tb_collectives: dict[int, str] = {}  # rank -> collective function its traceback stopped in
        self.exits: RecordTable = RecordTable()  # rank -> ChildFailedError entry (a dict)
        self.error_ranks = ErrorOrder()  # rank -> first error (time, seq)
        self.env: dict[str, str] = {}
        self.hosts: set[str] = set()
        self.ifaces: dict[str, set[str]] = {}  # host -> interfaces NCCL reported using/seeing
        self.lagging: set[int] = set()
        self.timelines = Timelines()  # each rank's timeline until ``build`` (``RankInfo.timeline``)
        self.stages = StageTracker()
        self.lines = LineRefs()  # files whose lines evidence may refer to (lineref.py: each rank's first error)
        # rank -> (stage, the line that shows it, transport), filled by build(); also ranks known only from their own
        # connection lines (NCCL < 2.18.3 logs no Init START to map a stuck process's pid to its rank)
        self.rank_stages: dict[int, tuple[Any, Event, str | None]] = {}
        self.proc_stages: list[tuple[int, tuple[Any, Event, str | None]]] = []  # (rank, entry) per NCCL process
        self.agent_failed: list[Event] = []  # torchrun agents' "failed (exitcode: N) local_rank: K" lines
        self.unranked_stages: list[tuple[tuple, tuple[Any, Event, str | None]]] = []  # NCCL processes of no known rank
        self.world_inferred = False  # world_size is only "highest rank seen + 1" (no line states it)
        self.torch_stages: dict[int, tuple[Any, Event, str | None]] = {}  # rank -> entry from torch's work records
        self.text_tail: dict[str, list[int]] | None = None  # path -> last lines of the program's own output
        # path -> pid of the NCCL process printing just before them (None: none / a torch line) -> those lines
        self.text_ctx: dict[str, dict[int | None, list[int]]] | None = None

    @property
    def busids(self) -> dict[tuple[str, str], set[int]]:
        """(host, busId) -> the global ranks that initialised NCCL on that GPU (per communicator: ``busid_pids``)."""
        return {k: one_or_more(v) for k, v in self._bus_ranks.items()}

    @property
    def busid_pids(self) -> dict[tuple[str, str, str], set[int]]:
        """(host, busId, commId) -> the pids of the processes that initialised that communicator on that GPU."""
        return {k: {e.pid for e in (v if v.__class__ is list else (v,))} for k, v in self._gpu_inits.items()}

    @property
    def busid_events(self) -> dict[tuple[str, str, str], list[Event]]:
        """(host, busId, commId) -> the first Init START line of each of those processes (evidence)."""
        return {k: list(v) if v.__class__ is list else [v] for k, v in self._gpu_inits.items()}

    # -- identity ------------------------------------------------------------------------------------------
    def rank_of(self, ev: Event) -> int | None:
        """The global rank an event belongs to: its own ``rank``, else what its pid maps to."""
        if ev.rank is not None and not ev.kind.startswith("nccl.init"):
            return ev.rank
        if ev.pid is not None:
            head = self.procs.by_pid.get(ev.pid)
            hit = er = None
            if head is not None:
                er = head.elastic
                if ev.host is not None:
                    own = head
                    while own is not None and own.host != ev.host:
                        own = own.nxt
                    hit = None if own is None else own.rank
                if hit is None:
                    hit = head.anyr
            # torchrun reports the worker's global rank (RANK); NCCL's Init line the rank in that communicator,
            # the global one only for a communicator of the whole job. One of fewer ranks than torchrun's
            # highest reported rank is a subgroup (a 1-rank NCCL group per process beside a gloo world).
            if er is not None and (hit is None or (hit[0] != er and hit[1] <= self._elastic_top)):
                self._stated.add(er)  # torchrun's failure report states it
                return er
            if hit is not None:
                self._stated.add(hit[0])  # the process's NCCL Init line states it
                if ev.cuda_dev is not None and self.procs.multi(ev.host, ev.pid):
                    got = self.procs.dev_rank(ev.host, ev.pid, ev.cuda_dev)
                    return (hit if got is None else got)[0]
                return hit[0]
        if ev.rank is None and self._spawn_lines:
            for path, lo, hi, idx in self._spawn_lines:
                if ev.path == path and lo <= ev.line <= hi:
                    if idx not in self._stated:  # no line states this rank (yet): the report says what it rests on
                        self.job.extra.setdefault("rank_basis", {})[idx] = "spawn"
                    return idx
        if ev.rank is None and self._built and "local_rank" in ev.fields:
            r = self.agents.global_rank(ev, self)  # only its local rank is printed: known on one node
            if r is not None and r not in self._stated:  # no line states this global rank: the report says so
                self.job.extra.setdefault("rank_basis", {})[r] = "local_rank"
            return r
        return ev.rank

    def _rank(self, r: int) -> RankInfo:
        info = self.job.ranks.get(r)
        if info is None:
            info = RankInfo(rank=r, timeline=_NO_TIMELINE)  # (its own list from ``build``: 56 bytes a rank till then)
            self.job.ranks[r] = info
        return info

    # -- feeding -------------------------------------------------------------------------------------------
    @staticmethod
    def reads(kind: str) -> bool:
        """Whether events of ``kind`` change the model beyond being counted (triage.py skips the others)."""
        if kind in _HANDLERS or kind.startswith(ERROR_KINDS_PREFIX) or kind.startswith(_TIMELINE_KINDS):
            return True
        # The per-rank stage (stage.py) moves on topology, channel and ring/tree lines too.
        if kind in KIND_STAGE or any(kind.startswith(prefix) for prefix, _ in KIND_PREFIX_STAGE):
            return True
        return any(kind.startswith(prefix) for prefix, _ in _PREFIX_HANDLERS)

    @staticmethod
    def stage_only(kind: str) -> bool:
        """Whether the per-rank stage (stage.py) is all that reads events of ``kind`` (triage.py then parses only
        the first and last line of each run of them)."""
        if kind in _HANDLERS or kind.startswith(ERROR_KINDS_PREFIX) or kind.startswith(_TIMELINE_KINDS):
            return False
        if any(kind.startswith(prefix) for prefix, _ in _PREFIX_HANDLERS):
            return False
        return kind in KIND_STAGE or any(kind.startswith(prefix) for prefix, _ in KIND_PREFIX_STAGE)

    @staticmethod
    def plan(kind: str) -> tuple[Any, bool, bool, bool, bool, bool]:
        """What ``add`` does with an event of ``kind`` beyond counting it, from the handler tables (``_HANDLERS``,
        ``_PREFIX_HANDLERS``), the error and torchrun kinds and the stage tables: (its handler or None, an NCCL
        line (its pid's host), states its rank (not an Init line), torchrun's, an error, may show a stage)."""
        handler = _HANDLERS.get(kind)
        if handler is None:
            for prefix, h in _PREFIX_HANDLERS:
                if kind.startswith(prefix):
                    handler = h
                    break
        return (handler, kind.startswith("nccl."), not kind.startswith("nccl.init"),
                kind.startswith("torch.elastic."), kind.startswith(ERROR_KINDS_PREFIX), may_show_stage(kind))

    def add(self, ev: Event) -> None:
        """Fold one event into the model."""
        self.events += 1
        k = ev.kind
        plan = self._plans.get(k)
        if plan is None:
            plan = self.plan(k)
            if len(self._plans) < _PLAN_CAP:
                self._plans[k] = plan
        handler, nccl, stated, elastic, error, staged = plan
        if stated and ev.rank is not None:
            self._stated.add(ev.rank)  # a line states this rank itself (a rank prefix, torch's own "rank N")
        self.kinds[k] = self.kinds.get(k, 0) + 1
        if ev.host:
            if len(self.hosts) < _PID_CAP:
                self.hosts.add(ev.host)
            procs = self.procs
            if nccl and ev.pid is not None and procs.n_host < _PID_CAP:
                head = procs.by_pid.get(ev.pid)
                if head is None:
                    head = procs.by_pid[ev.pid] = _Proc(ev.host)
                if head.nhost is None:
                    procs.n_host += 1
                head.nhost = ev.host
        if handler is not None:
            handler(self, ev)
        if elastic:
            if ev.pid is not None and len(self._elastic_pids) < _PID_CAP:
                self._elastic_pids.add(ev.pid)
                if k == SIGTERM:
                    self.sigterm_pids.add(ev.pid)
        if k in self._worker_failed and len(self.agent_failed) < 64:
            # torchrun's "failed (exitcode: N) local_rank: K" (diagnose's culprit fallback)
            self.agent_failed.append(ev)
        self.agents.add(ev)
        if error:
            self._first_error(ev)
        if staged:
            self.stages.add(ev, self)

    def _timeline(self, ev: Event, what: str | None = None) -> None:
        # held in ``Timelines`` (the label shared: every rank's "transport P2P/IPC" is the same text) until ``build``
        # makes the entry dicts
        time, label = _shared_time(ev.time), _shared(what or ev.kind)
        r = self.rank_of(ev)
        if r is None:
            return  # every caller has a rank (an Init line's pid has just been mapped to its rank)
        self._rank(r)
        self.timelines.put(r, ev.kind, ev.path, ev.line, time, label, True)

    def _first_error(self, ev: Event) -> None:
        if ev.kind == "python.traceback" and "ChildFailedError" in str(ev.get("exc_type", "")):
            return
        r = self.rank_of(ev)
        if r is None:
            return
        info = self._rank(r)
        if info.first_error is None:
            info.first_error = self.lines.ref(_error_evidence(ev))  # (by reference where its file can be read again)
            info.first_error_kind = ev.kind
            self.error_ranks[r] = (time_key(ev.time), self.events)
            self._timeline(ev, "first error")

    def build(self) -> JobModel:
        """The model so far (may be called repeatedly; the builder keeps accepting events)."""
        job = self.job
        self._built = True
        self.lines.resolve()  # (the first errors' texts, read back from their files: lineref.py)
        for info in self.job.ranks.values():
            if info.first_error.__class__ is LineEvidence:  # the model leaves as plain evidence (the redactor, the
                info.first_error = info.first_error.evidence()  # renderers and pickles walk dataclasses)
        basis = job.extra.get("rank_basis")
        for r in [r for r in basis or () if r in self._stated]:
            del basis[r]  # a later line stated the rank the spawn index gave
        job.env = dict(self.env)
        for host, pid, version in list(self.procs.versions()):
            hit = self.procs.rank(host, pid)
            if hit is not None and version:
                ri = self._rank(hit[0])
                ri.nccl_version = ri.nccl_version or version
        if job.backend is None:
            if any(k.startswith("nccl.") for k in self.kinds):
                job.backend = "nccl"
            elif any("gloo" in str(v) for v in self.tb_collectives.values()):
                job.backend = "gloo"
        if self._elastic_pids and self._comm_pids:
            # Where torchrun names its workers' pids, a communicator none of them joined is another job's (other
            # processes' output in the same log): its size is not this job's world size.
            own = [c for c, pids in self._comm_pids.items() if pids & self._elastic_pids]
            foreign = [c for c, pids in self._comm_pids.items() if pids and not pids & self._elastic_pids]
            if foreign:
                sizes = [int(job.communicators[c].get("nranks") or 0) for c in own if c in job.communicators]
                sizes += [r + 1 for r in self.exits if r < MAX_WORLD]
                job.world_size = max(sizes) if sizes and max(sizes) > 0 else None
                job.extra["foreign_communicators"] = sorted(foreign)[:16]
        if (job.world_size is None or self.world_inferred) and job.ranks and max(job.ranks) < MAX_WORLD:
            job.world_size = max(job.ranks) + 1
            self.world_inferred = True
        elif job.ranks and job.world_size and job.world_size <= max(job.ranks) < MAX_WORLD \
                and "foreign_communicators" not in job.extra:
            # Every NCCL communicator seen is smaller than the job (a rank past its nranks printed, or torchrun
            # reported, something): subgroups (dist.new_subgroups, one 1-rank NCCL group per process beside a gloo
            # default group), not the world. The world is then what the ranks seen say, no line states it.
            job.world_size = max(job.ranks) + 1
            self.world_inferred = True
        for r, coll in self.collectives.items():
            info = self._rank(r)
            info.last_collective = {k: v for k, v in coll.items() if k not in ("line", "path")}
        self.stages.apply(self)
        for r, info in job.ranks.items():
            tl = self.timelines.dicts(r)
            if tl is not None:
                info.timeline = tl
            elif info.timeline is _NO_TIMELINE:
                info.timeline = []
        job.extra["hosts"] = sorted(self.hosts)
        job.extra["interfaces"] = {h: sorted(v) for h, v in sorted(self.ifaces.items())}
        job.extra["init"] = {c: {"nranks": job.communicators.get(c, {}).get("nranks"),
                                 "started": sorted(r for r, s in st.items()),
                                 "complete": sorted(r for r, s in st.items() if s == "complete")}
                             for c, st in self.init.items()}
        job.extra["exits"] = {r: {k: v for k, v in e.items() if k not in ("text",)} for r, e in sorted(self.exits.items())}
        job.extra["versions_by_process"] = {v: sorted(w)[:16] for v, w in sorted(self.versions_by_proc.items())}
        job.extra["lagging_ranks"] = sorted(self.lagging)
        job.extra["event_kinds"] = dict(sorted(self.kinds.items()))
        for info in job.ranks.values():
            if info.init_state == "started" and info.first_error is not None and \
                    (info.first_error_kind or "").startswith("nccl.warn"):
                info.init_state = "failed"
        return job



_HANDLERS = {
    "nccl.version": JobBuilder._on_version,
    "nccl.init.start": JobBuilder._on_init,
    "nccl.init.complete": JobBuilder._on_init,
    "nccl.env": JobBuilder._on_env,
    "nccl.transport": JobBuilder._on_transport,
    "nccl.coll": JobBuilder._on_coll,
    "nccl.cuda_driver": JobBuilder._on_driver,
    "nccl.info": JobBuilder._on_network,
    "torch.watchdog.timeout": JobBuilder._on_watchdog,
    "torch.work.status": JobBuilder._on_watchdog,
    "torch.desync": JobBuilder._on_desync,
    "python.traceback": JobBuilder._on_traceback,
    "torch.elastic.child_failed": JobBuilder._on_child_failed,
    "torch.log": JobBuilder._on_torch_log,
    "torch.pg.init": JobBuilder._on_torch_log,
}
_PREFIX_HANDLERS = (
    ("nccl.net", JobBuilder._on_network),
    ("nccl.bootstrap", JobBuilder._on_network),
    ("nccl.init.", JobBuilder._on_init),
)
