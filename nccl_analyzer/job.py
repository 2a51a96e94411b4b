"""Events -> JobModel: ranks, hosts, pids, GPUs, versions, communicators, progress (streaming, bounded memory)."""
from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from .agents import ElasticAgents
from .model import Event, Evidence, JobModel, RankInfo
from .packed import pack
from .stage import KIND_PREFIX_STAGE, KIND_STAGE, StageTracker

#: Entries kept per rank timeline; processes (pids, hosts) and communicators remembered at most.
TIMELINE_CAP = 64
_PID_CAP = 65536
_COMM_CAP = 4096
#: Larger "nranks" / rank numbers are not a job's (the largest runs have ~10^5 ranks): a mangled number.
MAX_WORLD = 1 << 20
#: A timeline entry's keys, in order (the builder holds an entry as a tuple of these values until ``build``).
_TIMELINE_KEYS = ("kind", "path", "line", "time", "what")
_LABELS: dict[str, str] = {}
_TIMES: dict[str, str] = {}  # timeline times, one string object per distinct time (many ranks log the same second)


def _shared(label: str) -> str:
    """One string object per distinct timeline label (bounded: past 4,096 labels a label is kept as it is)."""
    got = _LABELS.get(label)
    if got is None:
        if len(_LABELS) >= 4096:
            return label
        got = _LABELS[label] = label
    return got


_VALUES: dict[Any, Any] = {}


def _interned(cache: dict, v: Any) -> Any:
    """The one object ``cache`` holds equal to ``v`` (``v`` itself the first time; bounded: past 65,536 entries a
    value is kept as it is)."""
    got = cache.get(v)
    if got is None:
        if len(cache) < 65536:
            cache[v] = v
        return v
    return got


def _shared_value(v: Any) -> Any:
    """One object per distinct short string or int of the per-rank records (every rank's watchdog entry holds the
    same op, sizes and timeout)."""
    if v.__class__ is not int and (v.__class__ is not str or len(v) > 64):
        return v
    return _interned(_VALUES, v)


def _shared_time(t: str | None) -> str | None:
    """One string object per distinct timeline time."""
    return None if t is None else _interned(_TIMES, t)


_VERSION_NUM = re.compile(r"(\d+\.\d+\.\d+)")
_BANNER_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+\S*)")
# Collective names as they appear in torch.distributed frames (distributed_c10d.py function names).
COLLECTIVE_FUNCS = frozenset({
    "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "_all_gather_base", "reduce_scatter",
    "reduce_scatter_tensor", "_reduce_scatter_base", "all_to_all", "all_to_all_single", "reduce", "gather",
    "scatter", "barrier", "send", "recv", "isend", "irecv", "batch_isend_irecv", "all_gather_object",
    "broadcast_object_list", "monitored_barrier", "gather_object", "scatter_object_list", "all_reduce_coalesced",
})
# distributed_c10d's helpers of all_gather_object & co. that pickle / unpickle outside any communication
_SERIALISE_FUNCS = frozenset({"_object_to_tensor", "_tensor_to_object"})
# The c10d kinds that mean "this rank hit a failure" (first error per rank, culprit/victim assignment).
ERROR_KINDS_PREFIX = ("nccl.warn.", "torch.watchdog", "torch.heartbeat", "torch.nccl_error", "torch.store.",
                      "torch.cuda.", "torch.desync", "python.traceback", "python.exception")
_TIMELINE_KINDS = ("nccl.init.start", "nccl.init.complete", "torch.elastic.", "torch.work.status")


def time_key(value: str | None) -> float | None:
    """Seconds (comparable within one log) from the timestamps NCCL, glog, torchelastic and k8s write.

    Formats: ``2026-11-29 13:53:17[.123]``, ``2026-11-29T13:53:17.1Z``, ``2026-11-29_13:53:17`` (ChildFailedError),
    glog/c10 ``1129 13:53:17.629000`` (MMDD, no year: the year 2000 is assumed, so only compare these with
    each other and with same-day full dates by their time of day). Returns None when unparseable.
    """
    if not value:
        return None
    v = value.strip().strip("[]").strip()
    m = re.match(r"(\d{4})-(\d\d)-(\d\d)[ T_](\d\d):(\d\d):(\d\d(?:\.\d+)?)", v)
    m2 = re.match(r"(\d\d)-(\d\d)[ T_](\d\d):(\d\d):(\d\d(?:\.\d+)?)", v) if not m else None
    if m:
        y, mo, d, hh, mi, ss = m.groups()
    elif m2:
        mo, d, hh, mi, ss = m2.groups()
        y = "2000"
    else:
        m = re.match(r"[IWEF]?(\d{1,2})(\d\d) (\d\d):(\d\d):(\d\d(?:\.\d+)?)", v)
        if not m:
            return None
        mo, d, hh, mi, ss = m.groups()
        y = "2000"
    try:
        base = datetime(int(y), int(mo), int(d), int(hh), int(mi))
    except ValueError:
        return None
    # Day resolution is what ordering across formats can rely on; year-less stamps compare by day-of-year.
    day = base.timetuple().tm_yday
    return day * 86400.0 + int(hh) * 3600 + int(mi) * 60 + float(ss)


def version_number(v: str | None) -> str | None:
    """``2.28.9+cuda13.0`` -> ``2.28.9``."""
    if not v:
        return None
    m = _VERSION_NUM.search(v)
    return m.group(1) if m else v


_TRANSPORT_BASE: dict[str, str] = {}


class JobBuilder:
    """Builds a ``JobModel`` from events, one at a time, keeping only aggregates.

    Memory is bounded by the number of ranks/processes, not by the number of events: each rank keeps a
    capped timeline, each pid a handful of values.
    """

    def __init__(self) -> None:
        self.job = JobModel()
        self.events = 0
        self._transport_seen: set[int] = set()
        self._pid_host: dict[int, str] = {}  # pid -> hostname from NCCL's line prefix
        self.kinds: dict[str, int] = {}
        self._pid_rank: dict[tuple[str | None, int], tuple[int, int]] = {}  # (host,pid) -> (rank, nranks)
        self._pid_version: dict[tuple[str | None, int], str] = {}  # (host, pid) -> the NCCL version it printed
        self._elastic_rank: dict[int, int] = {}  # worker pid -> global rank, as torchrun's failure report says
        self._elastic_top = -1  # the highest rank torchrun reported
        self._elastic_pids: set[int] = set()  # worker pids torchrun names (teardown, failures, its report)
        self.agents = ElasticAgents()  # torchrun agents and their workers (a local rank's global rank: agents.py)
        self._built = False  # build() ran: the whole input is in, so agents.py may judge "one node"
        self._stated: set[int] = set()  # ranks some event states itself (not inferred from a local rank / spawn index)
        self.sigterm_pids: set[int] = set()  # worker pids torchrun says it sent SIGTERM ("Sending process N closing ...")
        self._comm_pids: dict[str, set[int]] = {}  # commId -> pids of the processes that joined it
        # torch.multiprocessing.spawn names the failed child by its process index, the ``i`` of ``fn(i, *args)``
        # that programs pass on as their rank: (path, first line, last line, index) of the lines that are that child's
        self._spawn_lines: list[tuple[str, int, int, int]] = []
        self._spawn_next: dict[str, int] = {}  # path -> index of the child whose traceback the parent prints next
        # One process driving several GPUs (nccl-tests -g N, a single-process multi-GPU program): one Init line per
        # GPU, each its own rank. (host, pid, cudaDev) -> (rank, nranks); the (host, pid) that logged several GPUs.
        self._dev_rank: dict[tuple[str | None, int, int], tuple[int, int]] = {}
        self._pid_devs: dict[tuple[str | None, int], int] = {}  # (host, pid) -> the first GPU it logged an Init for
        self.multi_gpu: set[tuple[str | None, int]] = set()
        # (host, pid) -> (commId, rank, busId) of each Init line it logged (to re-map a subgroup's Init logged first)
        self._proc_inits: dict[tuple[str | None, int], list[tuple[str, int, str | None]]] = {}
        self.init: dict[str, dict[int, str]] = {}  # comm_id -> rank -> started|complete
        self.busids: dict[tuple[str, str], set[int]] = {}  # (host, busId) -> global ranks (per comm -> see comms)
        self.busid_pids: dict[tuple[str, str, str], set[int]] = {}  # (host, busId, comm) -> pids on that GPU
        self.busid_events: dict[tuple[str, str, str], list[Event]] = {}  # first Init START lines per GPU (evidence)
        self.versions_by_proc: dict[str, set[str]] = {}  # version -> {"host:pid" or "rank N"}
        self.version_events: dict[str, Event] = {}  # first line that showed each version (evidence)
        self.env_events: dict[str, list[Event]] = {}
        self.collectives: dict[int, dict[str, Any]] = {}  # rank -> last collective seen
        self.tb_collectives: dict[int, str] = {}  # rank -> collective function its traceback stopped in
        self.exits: dict[int, dict[str, Any]] = {}  # rank -> ChildFailedError entry
        self.error_ranks: dict[int, tuple[float | None, int]] = {}  # rank -> first error (time, seq)
        self.env: dict[str, str] = {}
        self.hosts: set[str] = set()
        self.ifaces: dict[str, set[str]] = {}  # host -> interfaces NCCL reported using/seeing
        self.lagging: set[int] = set()
        self.stages = StageTracker()
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

    # -- identity ------------------------------------------------------------------------------------------
    def rank_of(self, ev: Event) -> int | None:
        """The global rank an event belongs to: its own ``rank``, else what its pid maps to."""
        if ev.rank is not None and not ev.kind.startswith("nccl.init"):
            return ev.rank
        if ev.pid is not None:
            hit = self._pid_rank.get((ev.host, ev.pid))
            if hit is None:
                hit = self._pid_rank.get((None, ev.pid))
            er = self._elastic_rank.get(ev.pid)
            # torchrun reports the worker's global rank (RANK); NCCL's Init line the rank in that communicator,
            # the global one only for a communicator of the whole job. One of fewer ranks than torchrun's
            # highest reported rank is a subgroup (a 1-rank NCCL group per process beside a gloo world).
            if er is not None and (hit is None or (hit[0] != er and hit[1] <= self._elastic_top)):
                self._stated.add(er)  # torchrun's failure report states it
                return er
            if hit is not None:
                self._stated.add(hit[0])  # the process's NCCL Init line states it
                if ev.cuda_dev is not None and (ev.host, ev.pid) in self.multi_gpu:
                    return self._dev_rank.get((ev.host, ev.pid, ev.cuda_dev), hit)[0]
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
            info = RankInfo(rank=r)
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

    def add(self, ev: Event) -> None:
        """Fold one event into the model."""
        self.events += 1
        k = ev.kind
        if ev.rank is not None and not k.startswith("nccl.init"):
            self._stated.add(ev.rank)  # a line states this rank itself (a rank prefix, torch's own "rank N")
        self.kinds[k] = self.kinds.get(k, 0) + 1
        if ev.host:
            if len(self.hosts) < _PID_CAP:
                self.hosts.add(ev.host)
            if ev.pid is not None and k.startswith("nccl.") and len(self._pid_host) < _PID_CAP:
                self._pid_host[ev.pid] = ev.host
        handler = _HANDLERS.get(k)
        if handler is None:
            for prefix, h in _PREFIX_HANDLERS:
                if k.startswith(prefix):
                    handler = h
                    break
        if handler is not None:
            handler(self, ev)
        if k.startswith("torch.elastic.") and ev.pid is not None and len(self._elastic_pids) < _PID_CAP:
            self._elastic_pids.add(ev.pid)
            if k == "torch.elastic.sigterm":
                self.sigterm_pids.add(ev.pid)
        if k == "torch.elastic.worker_failed" and len(self.agent_failed) < 64:
            self.agent_failed.append(ev)  # torchrun's "failed (exitcode: N) local_rank: K" (diagnose's culprit fallback)
        self.agents.add(ev)
        if k.startswith(ERROR_KINDS_PREFIX):
            self._first_error(ev)
        self.stages.add(ev, self)

    def _timeline(self, ev: Event, what: str | None = None) -> None:
        # held as a tuple with the label shared (``_shared``) until ``build`` makes it the entry dict: a tuple is a
        # third of a dict's size, and every rank's "transport P2P/IPC" is the same text
        entry = (ev.kind, ev.path, ev.line, _shared_time(ev.time), _shared(what or ev.kind))
        r = self.rank_of(ev)
        if r is None:
            return  # every caller has a rank (an Init line's pid has just been mapped to its rank)
        tl = self._rank(r).timeline
        if len(tl) < TIMELINE_CAP:
            tl.append(entry)
        else:
            tl[-1] = entry  # keep the latest event visible at the end

    def _first_error(self, ev: Event) -> None:
        if ev.kind == "python.traceback" and "ChildFailedError" in str(ev.get("exc_type", "")):
            return
        r = self.rank_of(ev)
        if r is None:
            return
        info = self._rank(r)
        if info.first_error is None:
            info.first_error = _error_evidence(ev)
            info.first_error_kind = ev.kind
            self.error_ranks[r] = (time_key(ev.time), self.events)
            self._timeline(ev, "first error")

    def _proc_version(self, ev: Event) -> str | None:
        return self._pid_version.get((ev.host, ev.pid or 0))

    # -- handlers ------------------------------------------------------------------------------------------
    def _on_version(self, ev: Event) -> None:
        # Read the version from the printed text first: it is what the line says (and parse/nccl.py 's body cache
        # has been seen to hand back the fields of an earlier banner with other digits).
        m = _BANNER_VERSION.search(str(ev.get("msg") or ev.text or ""))
        v = m.group(1) if m else ev.get("version")
        if not v:
            return
        v = str(v)
        if v not in self.job.nccl_versions:
            self.job.nccl_versions.append(v)
        who = f"{ev.host}:{ev.pid}" if ev.pid is not None else f"{ev.path}"
        self.versions_by_proc.setdefault(v, set()).add(who)
        self.version_events.setdefault(v, ev)
        if ev.pid is not None:
            key = (ev.host, ev.pid or 0)
            if key in self._pid_version or len(self._pid_version) < _PID_CAP:
                self._pid_version[key] = _shared(v)
            r = self.rank_of(ev)
            if r is not None:
                self._rank(r).nccl_version = v

    def _on_driver(self, ev: Event) -> None:
        v = ev.get("driver_version")
        if v is not None and self.job.cuda_driver is None:
            self.job.cuda_driver = str(v)

    def _on_init(self, ev: Event) -> None:
        rank = ev.get("rank")
        if rank is None:
            return
        rank = int(rank)
        nranks = int(ev.get("nranks", 0) or 0)
        comm = str(ev.get("comm_id") or ev.get("comm") or "?")  # 2.8-2.15 Init COMPLETE lines have no commId
        complete = ev.kind.endswith("complete")
        if ev.pid is not None:
            key = (ev.host, ev.pid)
            prev = self._pid_rank.get(key)
            # The process's global rank: its rank in the largest communicator it joined (the default PG).
            if prev is None or nranks > prev[1]:
                got = self._pid_rank[key] = (rank, nranks)
                anyhost = self._pid_rank.get((None, ev.pid))
                if anyhost is None or anyhost == prev:
                    self._pid_rank[(None, ev.pid)] = got  # (the same tuple)
                if prev is not None and prev[0] != rank:
                    self._regrank(key, prev[0], rank)
            grank = self._pid_rank[key][0]
            dev = ev.get("cuda_dev")
            dev = ev.cuda_dev if dev is None else int(dev)
            if dev is not None and len(self._dev_rank) < _PID_CAP:
                dk = (ev.host, ev.pid, dev)
                if dk not in self._dev_rank or nranks > self._dev_rank[dk][1]:
                    self._dev_rank[dk] = (rank, nranks)
                if self._pid_devs.setdefault(key, dev) != dev:  # a second GPU of one process
                    self.multi_gpu.add(key)
                if key in self.multi_gpu and self._dev_rank[dk][1] >= self._pid_rank[key][1]:
                    grank = self._dev_rank[dk][0]  # this GPU's rank in the process's largest communicator
        else:
            grank = rank
        if nranks > MAX_WORLD:
            nranks = 0  # a mangled number (a log cut mid-digit, "nranks 99999999999"): no world size
        if nranks > 0 and (self.job.world_size is None or nranks > self.job.world_size):
            self.job.world_size = nranks
        if comm not in self.job.communicators and len(self.job.communicators) < _COMM_CAP:
            self.job.communicators[comm] = {"nranks": nranks, "ranks": {}, "complete": 0}
        c = self.job.communicators.get(comm)
        if ev.pid is not None and len(self._proc_inits) < _PID_CAP:
            inits = self._proc_inits.setdefault((ev.host, ev.pid), [])
            if len(inits) < 64:
                bus_of = ev.get("bus_id", ev.get("busId"))
                inits.append((comm, rank, None if bus_of is None else str(bus_of)))
        if c is not None and ev.pid is not None:
            pids = self._comm_pids.setdefault(comm, set())
            if len(pids) < 1024:
                pids.add(ev.pid)
        states = self.init.setdefault(comm, {}) if comm in self.job.communicators else {}
        if complete:
            if states.get(rank) != "complete":
                states[rank] = "complete"
                if c is not None:  # (a count kept as it goes: summing the states per Init line is quadratic in ranks)
                    c["complete"] += 1
        else:
            states.setdefault(rank, "started")
            if len(c["ranks"]) < 1024:
                c["ranks"][rank] = grank
        info = self._rank(grank)
        info.host = info.host or ev.host
        info.pid = info.pid if info.pid is not None else ev.pid
        cuda_dev = ev.get("cuda_dev")
        if cuda_dev is not None and info.cuda_dev is None:
            info.cuda_dev = int(cuda_dev)
        bus = ev.get("bus_id")
        if bus is not None:
            bus = str(bus)
            if info.bus_id is None:
                info.bus_id = bus
            if ev.host is not None or ev.pid is not None:
                host = ev.host or "?"
                self.busids.setdefault((host, bus), set()).add(grank)
                bk = (host, bus, comm)  # (one key object for both tables)
                if ev.pid is not None and len(self.busid_pids) < _COMM_CAP:
                    # Per communicator: two processes of ONE comm on one GPU. Separate jobs that reuse a GPU one
                    # after the other (concatenated NCCL_DEBUG_FILEs) have different commIds.
                    pids = self.busid_pids.setdefault(bk, set())
                    if ev.pid not in pids and len(pids) < 64:
                        pids.add(ev.pid)
                        self.busid_events.setdefault(bk, []).append(pack(ev))  # (evidence only)
        version = self._proc_version(ev)
        if version and not info.nccl_version:
            info.nccl_version = version
        if complete:
            info.init_state = "complete"
        elif info.init_state in ("unknown",):
            info.init_state = "started"
        self._timeline(ev, "init complete" if complete else "init start")

    def _on_env(self, ev: Event) -> None:
        name, value = ev.get("name"), ev.get("value")
        if name and len(self.env) < 512:
            self.env[str(name)] = str(value)
            lst = self.env_events.setdefault(str(name), [])
            if len(lst) < 2:
                lst.append(ev)

    def _on_network(self, ev: Event) -> None:
        net = ev.get("network")
        if net:
            self.job.network.setdefault("network", str(net))
        ifs = ev.get("interfaces")
        if isinstance(ifs, list):
            names = [str(i.get("name")) for i in ifs if isinstance(i, dict) and i.get("name")]
            if names:
                self.ifaces.setdefault(ev.host or "?", set()).update(names[:16])
                if ev.kind.startswith("nccl.bootstrap"):
                    self.job.network.setdefault("bootstrap", ", ".join(
                        f"{i.get('name')}:{i.get('addr')}" for i in ifs[:4] if isinstance(i, dict)))
            return
        oob = ev.get("oob_interface")
        if oob:
            self.ifaces.setdefault(ev.host or "?", set()).add(str(oob))
        # A line the grammar cannot type (cut short, a network name with a space: "Using network AWS Libfabric")
        if ev.kind == "nccl.info":
            msg = str(ev.get("msg", ""))
            m = re.match(r"(?:Bootstrap ?: Using|NET/Socket : Using|NET/IB : Using.*OOB)\s*(.*)", msg)
            if m:
                names = re.findall(r"(?:\[\d+\])?([A-Za-z][\w.\-]*?):\d", m.group(1))
                if names:
                    self.ifaces.setdefault(ev.host or "?", set()).update(names[:16])
                if msg.startswith("Bootstrap"):
                    self.job.network.setdefault("bootstrap", m.group(1).strip())
            m = re.match(r"Using network (.*\S)", msg)  # the plugin's name, e.g. "AWS Libfabric" (aws-ofi-nccl)
            if m:
                self.job.network.setdefault("network", m.group(1))

    def _on_transport(self, ev: Event) -> None:
        # Hot: a big job logs one line per channel and peer. Only the first transport line per rank goes
        # into the timeline and each transport kind into the network summary.
        t = ev.fields.get("transport")
        if not t:
            return
        base = _TRANSPORT_BASE.get(t)
        if base is None:
            t = str(t)
            base = t.split("/")[0] if "/" in t else t
            if base == "P2P" or base == "NET":
                base = "/".join(t.split("/")[:2])
            if len(_TRANSPORT_BASE) < 4096:
                _TRANSPORT_BASE[t] = base
            tr = self.job.network.setdefault("transports", [])
            if base not in tr and len(tr) < 16:
                tr.append(base)
        elif base not in self.job.network.get("transports", ()):
            tr = self.job.network.setdefault("transports", [])
            if len(tr) < 16:
                tr.append(base)
        r = self.rank_of(ev)
        if r is not None and r not in self._transport_seen:
            self._transport_seen.add(r)
            info = self._rank(r)
            if len(info.timeline) < TIMELINE_CAP:
                self._timeline(ev, "transport " + base)

    def _on_coll(self, ev: Event) -> None:
        r = self.rank_of(ev)
        if r is None:
            return
        op = ev.get("op")
        entry = {"op_type": _shared_value(op), "source": "nccl.coll", "line": ev.line}
        for name in ("op_count", "count", "datatype"):
            if ev.get(name) is not None:
                entry[name] = _shared_value(ev.get(name))
        prev = self.collectives.get(r)
        if prev is not None and str(prev.get("source", "")).startswith("torch."):
            # The watchdog's report of where this rank stopped (op, SeqNum, last completed) stays: a later NCCL call
            # line of the same process is another communicator's (a subgroup) or the abort path, not progress.
            return
        self.collectives[r] = entry

    def _on_watchdog(self, ev: Event) -> None:
        r = self.rank_of(ev)
        if r is None:
            return
        entry: dict[str, Any] = {"source": ev.kind, "line": ev.line, "path": ev.path}
        for name in ("seq", "op_type", "numel_in", "numel_out", "timeout_ms", "elapsed_ms", "last_enqueued",
                     "last_completed"):
            v = ev.get(name)
            if v is not None:
                entry[name] = _shared_value(v)
        prev = self.collectives.get(r) or {}
        merged = {**prev, **entry} if prev.get("source", "").startswith("torch.") else entry
        self.collectives[r] = merged
        # (the rank's ``last_collective`` is made from ``collectives`` by ``build``: no copy per rank meanwhile)
        self._timeline(ev, "watchdog timeout" if ev.kind == "torch.watchdog.timeout" else ev.kind)

    def _on_desync(self, ev: Event) -> None:
        lag = ev.get("lagging_ranks")  # parse/torch/body.py
        if isinstance(lag, (list, tuple)):
            for x in lag[:1024]:
                try:
                    self.lagging.add(int(x))
                except (TypeError, ValueError):
                    continue
        self._on_watchdog(ev) if ev.get("seq") is not None else None

    def _on_traceback(self, ev: Event) -> None:
        exc = str(ev.get("exc_type", ""))
        if "ChildFailedError" in exc:
            return
        if ev.rank is None and ev.pid is None and len(self._spawn_lines) < 64:
            self._spawn_child(ev, exc)
        r = self.rank_of(ev)
        coll = traceback_collective(ev)
        if r is not None and coll:
            self.tb_collectives[r] = coll
            info = self._rank(r)
            if not info.last_collective:
                info.last_collective = {"op_type": coll, "source": "traceback"}
        if r is not None:
            self._timeline(ev, f"{exc.rsplit('.', 1)[-1]}")

    def _spawn_child(self, ev: Event, exc: str) -> None:
        """torch.multiprocessing.spawn's parent reports the child that failed first (ProcessContext.join): by its
        index in ProcessExitedException ("process 2 terminated with signal SIGSEGV" / "with exit code 1"), or in
        ProcessRaisedException's message ("-- Process 1 terminated with the following error:") followed by the
        child's own traceback, which the parent prints (its first frame spawn.py's ``_wrap``). The index is the
        rank a spawned program is given; the lines that report it become that rank's."""
        msg = str(ev.get("message") or "")
        end = ev.end_line or ev.line
        if exc.endswith("ProcessExitedException"):
            m = re.match(r"process (\d+) terminated with (?:signal|exit code)", msg)
            if m:
                self._spawn_lines.append((ev.path, ev.line, end, int(m.group(1))))
            return
        if exc.endswith("ProcessRaisedException"):
            m = re.search(r"-- Process (\d+) terminated with the following error", msg)
            if m:
                self._spawn_next[ev.path] = int(m.group(1))
            return
        idx = self._spawn_next.pop(ev.path, None)
        frames = ev.get("frames") or []
        first = frames[0] if frames and isinstance(frames[0], dict) else {}
        if idx is not None and str(first.get("file", "")).endswith("multiprocessing/spawn.py") \
                and first.get("function") == "_wrap":
            self._spawn_lines.append((ev.path, ev.line, end, idx))

    def _on_child_failed(self, ev: Event) -> None:
        rank = ev.get("rank")
        if rank is None:
            return
        rank = int(rank)
        entry = {k: _shared_value(ev.get(k)) for k in ("exitcode", "signal", "pid", "host", "local_rank", "time")
                 if ev.get(k) is not None}
        if ev.get("root_cause") is not None:
            entry["first_observed"] = bool(ev.get("root_cause"))
        entry["line"] = ev.line
        entry["path"] = ev.path
        entry["text"] = ev.text
        self.exits[rank] = entry
        info = self._rank(rank)
        if entry.get("exitcode") is not None:
            info.exit_code = int(entry["exitcode"])
        if info.pid is None and entry.get("pid") is not None:
            info.pid = int(entry["pid"])
        if info.host is None and entry.get("host"):
            host = str(entry["host"])
            if host in ("localhost", "127.0.0.1") and entry.get("pid") is not None:
                # torchelastic often reports "localhost"; NCCL's prefix has the real hostname of that pid
                pid = int(entry["pid"])
                host = self._pid_host.get(pid, host)
            info.host = host
        if entry.get("local_rank") is not None and info.local_rank is None:
            info.local_rank = int(entry["local_rank"])
        if entry.get("pid") is not None:
            self._pid_rank.setdefault((None, int(entry["pid"])), (rank, 0))
            if len(self._elastic_rank) < _PID_CAP:
                self._elastic_rank[int(entry["pid"])] = rank
                self._elastic_top = max(self._elastic_top, rank)
        tl = info.timeline
        if len(tl) < TIMELINE_CAP:
            t = ev.get("time")
            tl.append((ev.kind, ev.path, ev.line, _shared_time(t) if t.__class__ is str else t,
                       _shared(f"exit {entry.get('exitcode')}")))

    def _on_torch_log(self, ev: Event) -> None:
        msg = str(ev.get("msg", ""))
        m = re.search(r"NCCL version:? (\d+\.\d+\.\d+)", msg)
        if m and "ProcessGroupNCCL" in msg:
            r = self.rank_of(ev)
            who = f"rank {r}" if r is not None else ev.path
            self.versions_by_proc.setdefault(m.group(1), set()).add(who)
            self.version_events.setdefault(m.group(1), ev)
            if self.job.backend is None:
                self.job.backend = "nccl"
        m = re.search(r"TIMEOUT\(ms\): (\d+)", msg)
        if m:
            self.job.extra.setdefault("pg_timeout_ms", int(m.group(1)))
        if self.job.torch_version is None:
            m = re.search(r"\btorch(?:==| version:? )(\d+\.\d+\.\d+\S*)", msg)
            if m:
                self.job.torch_version = m.group(1)

    def _regrank(self, key: tuple[str | None, int], old: int, new: int) -> None:
        """A process first logged the Init of a smaller communicator (a subgroup created before the default group's
        lazy init, rank ``old`` there) and now that of a larger one (global rank ``new``): what its earlier Init lines
        gave rank ``old`` was this process's, not that rank's."""
        host, pid = key
        owners = [k for k, v in self._pid_rank.items() if v[0] == old and k != key and k[0] is not None]
        owner_buses = {b for k in owners for _, _, b in self._proc_inits.get(k, ())}
        for comm, r, bus in self._proc_inits.get(key, ()):
            c = self.job.communicators.get(comm)
            if c is not None and c["ranks"].get(r) == old:
                c["ranks"][r] = new
            ranks = self.busids.get((host or "?", bus)) if bus is not None else None
            if ranks is not None and old in ranks and bus not in owner_buses:
                ranks.discard(old)
                ranks.add(new)
        info = self.job.ranks.get(old)
        if info is None or info.pid != pid or info.host != host:
            return
        if owners:
            info.pid = info.host = info.cuda_dev = info.bus_id = None  # rank ``old`` is another process's
            return
        del self.job.ranks[old]
        moved = self._rank(new)
        for entry in info.timeline:
            if len(moved.timeline) < TIMELINE_CAP:
                moved.timeline.append(entry)

    # -- result --------------------------------------------------------------------------------------------
    def build(self) -> JobModel:
        """The model so far (may be called repeatedly; the builder keeps accepting events)."""
        job = self.job
        self._built = True
        basis = job.extra.get("rank_basis")
        for r in [r for r in basis or () if r in self._stated]:
            del basis[r]  # a later line stated the rank the spawn index gave
        job.env = dict(self.env)
        for (host, pid), version in list(self._pid_version.items()):
            hit = self._pid_rank.get((host, pid))
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
        for r, coll in self.collectives.items():
            info = self._rank(r)
            info.last_collective = {k: v for k, v in coll.items() if k not in ("line", "path")}
        self.stages.apply(self)
        for info in job.ranks.values():
            tl = info.timeline
            for i, e in enumerate(tl):
                if e.__class__ is tuple:
                    tl[i] = dict(zip(_TIMELINE_KEYS, e))
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


def traceback_collective(ev: Event) -> str | None:
    """The torch.distributed collective a traceback stopped in (innermost distributed_c10d frame); None when the
    innermost one is an object collective's (de)serialisation: the rank raised pickling its object, not waiting."""
    frames = ev.get("frames") or []
    name = None
    for fr in frames:  # the traceback parser's frames: {"file", "line", "function"}
        if isinstance(fr, dict) and "distributed_c10d" in str(fr.get("file")):
            if fr.get("function") in COLLECTIVE_FUNCS:
                name = fr["function"]
            elif fr.get("function") in _SERIALISE_FUNCS:
                return None
    if name is None:
        for line in ev.get("lines") or []:
            m = re.search(r'distributed_c10d\.py", line \d+, in (\w+)', str(line))
            if m and m.group(1) in COLLECTIVE_FUNCS:
                name = m.group(1)
    return name


def _error_evidence(ev: Event) -> Evidence:
    """The line that says what went wrong: for a traceback its exception line (``torch.OutOfMemoryError: ...``),
    not its first (``Traceback (most recent call last):``)."""
    lines = ev.get("lines")
    numbers = ev.get("line_numbers")
    exc = str(ev.get("exc_type") or "")
    if ev.kind == "python.traceback" and exc and isinstance(lines, list) and isinstance(numbers, list) \
            and len(lines) == len(numbers):
        short = exc.rsplit(".", 1)[-1]
        for text, n in zip(reversed(lines), reversed(numbers)):
            if isinstance(text, str) and isinstance(n, int) and (exc in text or f"{short}:" in text):
                return Evidence(ev.path, n, text)
    return Evidence(ev.path, ev.line, ev.text)


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
