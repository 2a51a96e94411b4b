"""Per-rank init/progress stage from NCCL INFO lines and torch work records (what a hang diagnosis reads).

NCCL logs a communicator's init in a fixed order (``init.cc`` ``ncclCommInitRankFunc`` -> ``initTransportsRank``):
bootstrap (version banner, ``Bootstrap: Using``, NET plugin/``NET/Socket``/``NET/IB : Using``, ``Init START``),
topology and graph search (``=== System``, ``Pattern N, ...``, ``comm .. nNodes``), channel setup (``Channel NN/MM :
0 1 2``, ``Ring``, ``Trees``, ``N coll channels``), connections (``Channel NN/M : a[x] -> b[y] via P2P/IPC``,
``SHM/direct``, ``NET/Socket/0``, ``NET/IB/0/GDRDMA``, ``CollNet``, NVLS multicast), ``Connected all rings/trees``,
``Init COMPLETE``; then collectives (COLL ``AllReduce: opCount N``; torch ``WorkNCCL(SeqNum=N``). The formats of
every release are in ``../shared/reference/nccl_key_lines.json``; the grammar types them (docs/events.md).

Which event kind means which stage is the table ``KIND_STAGE`` (data, not code paths). A process's stage only moves
forward (a later ``Init START`` of a new communicator restarts it), except that connecting and ``Connected all ...``
alternate (rings, then trees, then NVLS). Memory: one entry per process.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .intern import host as _host, interned
from .model import Event, Loc, Stage
from .packed import pack

if TYPE_CHECKING:  # pragma: no cover
    from .job import JobBuilder

#: Event kind -> the stage it shows the process reached (exact kinds; ``KIND_PREFIX_STAGE`` for families).
KIND_STAGE: dict[str, Stage] = {
    "nccl.version": Stage.BOOTSTRAP,
    "nccl.git_version": Stage.BOOTSTRAP,
    "nccl.cuda_driver": Stage.BOOTSTRAP,
    "nccl.env": Stage.BOOTSTRAP,
    "nccl.net.using": Stage.BOOTSTRAP,
    "nccl.init.start": Stage.BOOTSTRAP,
    "nccl.comm.config": Stage.BOOTSTRAP,
    "nccl.comm.topology": Stage.TOPOLOGY,
    "nccl.channel": Stage.CHANNELS,
    "nccl.ring": Stage.CHANNELS,
    "nccl.tree": Stage.CHANNELS,
    "nccl.trees": Stage.CHANNELS,
    "nccl.channels.count": Stage.CHANNELS,
    "nccl.transport": Stage.CONNECT,
    "nccl.connected": Stage.CONNECTED,
    "nccl.init.complete": Stage.INIT_COMPLETE,
    "nccl.coll": Stage.COLLECTIVE,
    "torch.watchdog.timeout": Stage.COLLECTIVE,
    "torch.work.status": Stage.COLLECTIVE,
}
KIND_PREFIX_STAGE: tuple[tuple[str, Stage], ...] = (
    ("nccl.bootstrap", Stage.BOOTSTRAP),
    ("nccl.net.", Stage.BOOTSTRAP),
    ("nccl.plugin", Stage.BOOTSTRAP),
    ("nccl.topo.", Stage.TOPOLOGY),
)
#: Generic INFO bodies (``nccl.info``) that mark a stage: message prefix -> (stage, transport). NVLS is set up
#: after the rings and trees are connected (``transport/nvls.cc``, 2.17+).
INFO_STAGE: tuple[tuple[str, Stage, str | None], ...] = (
    ("NVLS multicast support is", Stage.TOPOLOGY, None),
    ("NVLS Creating Multicast group", Stage.CONNECT, "NVLS"),
    ("NVLS Created Multicast group", Stage.CONNECT, "NVLS"),
    ("NVLS comm ", Stage.CONNECT, "NVLS"),
    # the multicast buffers being allocated, bound and mapped (nvls.cc nvlsGroupBindMem / nvlsGroupMapMem, 2.17+):
    # a hang in cuMulticastBindMem (fabric manager, multicast objects in a container) stops right after these
    ("NVLS group ", Stage.CONNECT, "NVLS"),
    ("NVLS importing shareableHandle", Stage.CONNECT, "NVLS"),
    ("NVLS Bind mem ", Stage.CONNECT, "NVLS"),
    ("NVLS Mapped ", Stage.CONNECT, "NVLS"),
    ("NVLS rank ", Stage.CONNECT, "NVLS"),
    ("Connected NVLS", Stage.CONNECTED, "NVLS"),
    ("Connected binomial trees", Stage.CONNECTED, None),
    ("Connected collnet", Stage.CONNECTED, "COLLNET"),
    ("Setting affinity for GPU", Stage.TOPOLOGY, None),
)
#: INFO texts known by a fragment inside them rather than their start.
INFO_FRAGMENT_STAGE: tuple[tuple[str, Stage, str | None], ...] = (
    # NCCL 2.4-2.6 initTransportsRank, "Using %d threads, Min Comp Cap %d, Trees %s": printed once the ring and
    # tree connections are set up, just before Init COMPLETE.
    (" threads, Min Comp Cap ", Stage.CONNECTED, None),
)
#: Every prefix of ``INFO_STAGE`` (one C ``startswith`` rejects the ~20 untyped INFO lines a rank prints that
#: show no stage, before the loop that finds which one it is)
_INFO_PREFIXES = tuple(p for p, _, _ in INFO_STAGE)
_ALTERNATE = (Stage.CONNECT, Stage.CONNECTED)


def transport_base(t: str) -> str:
    """``P2P/IPC/read`` -> ``P2P/IPC``; ``NET/IB/0/GDRDMA`` -> ``NET/IB``; ``SHM/direct/direct`` -> ``SHM``;
    ``COLLNET/SHARP/0`` -> ``COLLNET``; ``direct shared memory`` (<= 2.12) -> ``SHM``."""
    t = t.strip()
    if t.startswith("direct shared memory"):
        return "SHM"
    parts = t.split("/")
    if parts[0] in ("P2P", "NET") and len(parts) > 1:
        return "/".join(parts[:2]).split()[0]
    return parts[0].split()[0].upper() if parts[0] else t


_NO_STAGE: set[str] = set()  # kinds that never show a stage (the hot path skips them with one set lookup)


def stage_of(ev: Event) -> tuple[Stage, str | None] | None:
    """The stage (and, for connections, the transport) an event shows, or None."""
    k = ev.kind
    if k in _NO_STAGE:
        return None
    st = KIND_STAGE.get(k)
    if st is None:
        if k == "nccl.info":
            msg = str(ev.fields.get("msg", ""))
            if msg.startswith(_INFO_PREFIXES):
                for prefix, s, tr in INFO_STAGE:
                    if msg.startswith(prefix):
                        return s, tr
            for frag, s, tr in INFO_FRAGMENT_STAGE:
                if frag in msg:
                    return s, tr
            return None
        for prefix, s in KIND_PREFIX_STAGE:
            if k.startswith(prefix):
                return s, None
        if len(_NO_STAGE) < 4096:
            _NO_STAGE.add(k)
        return None
    if st is Stage.CONNECT:
        t = ev.fields.get("transport") or ev.fields.get("via")
        return st, transport_base(str(t)) if t else None
    if k == "nccl.coll":
        n = ev.fields.get("op_count")
        return (Stage.STEADY if isinstance(n, int) and n >= 1 else Stage.COLLECTIVE), None
    if k.startswith("torch."):
        seq, done = ev.fields.get("seq"), ev.fields.get("last_completed")
        if (isinstance(done, int) and done >= 1) or (isinstance(seq, int) and seq > 1):
            return Stage.STEADY, None
        return Stage.COLLECTIVE, None
    return st, None


def may_show_stage(kind: str) -> bool:
    """Whether ``stage_of`` can give a stage for some event of ``kind`` (False: never, whatever its fields)."""
    return kind in KIND_STAGE or kind == "nccl.info" or any(kind.startswith(prefix) for prefix, _ in KIND_PREFIX_STAGE)


#: Chatter kinds whose line names the printing process's own rank (``own_rank``): never a "fixed" stage.
OWN_RANK_KINDS = frozenset({"nccl.ring", "nccl.tree", "nccl.trees"})


def fixed_stage(kind: str) -> Stage | None:
    """The stage EVERY event of ``kind`` shows, whatever its fields, where that event names no rank of its own
    (``own_rank``) and no transport; None otherwise. A run of such events of one process, with no other event
    between them, moves the process exactly as its first and last events do (triage.py relies on it)."""
    if kind in ("nccl.info", "nccl.coll", "nccl.transport") or kind in OWN_RANK_KINDS or kind.startswith("torch."):
        return None
    st = KIND_STAGE.get(kind)
    if st is None:
        for prefix, s in KIND_PREFIX_STAGE:
            if kind.startswith(prefix):
                st = s
                break
    return None if st is None or st is Stage.CONNECT or kind == "nccl.init.start" else st


def own_rank(ev: Event) -> int | None:
    """The rank of the process that printed a ring/tree/connection line: the ``Ring``/``Tree`` line's own rank
    (event ``rank``), a connection's sender (``p2p.cc``/``shm.cc`` print on the send side; ``[send]``) or, for
    ``[receive]``, its receiver."""
    k = ev.kind
    if k == "nccl.transport":
        who = ev.fields.get("dst") if ev.fields.get("direction") == "receive" else ev.fields.get("src")
        return who if isinstance(who, int) else None
    if k in OWN_RANK_KINDS and ev.rank is not None:
        return ev.rank
    return None


#: Stage-moving events between two sweeps of ``StageTracker`` (a power of two).
SWEEP = 256
#: The transports processes connected with, one frozenset object per distinct set (every process of a node uses the
#: same ones: one 216-byte set per process otherwise); bounded: past this many a new set is kept as it is.
_TRANSPORT_SETS: dict[frozenset, frozenset] = {}



def _transports(got: frozenset) -> frozenset:
    return interned(_TRANSPORT_SETS, got, 4096)  # one object per distinct set of transports


class StageTracker:
    """Feeds on every event; keeps, per process (host, pid) or per rank, the last stage reached and its line."""

    __slots__ = ("_procs", "_adds", "_gen", "_now", "_prev", "_last")

    def __init__(self) -> None:
        # key -> [stage, event, transport of the last connection, own rank (from the process's own lines, for unmapped
        # pids), every transport it connected with (a shared frozenset; None: none yet), the sweep in which the event was set]
        self._procs: dict[Any, list[Any]] = {}
        self._adds = 0
        self._gen = 0
        self._now: list[list[Any]] = []  # the entries whose event was set in this sweep's period / in the last one
        self._prev: list[list[Any]] = []
        self._last: list[Any] | None = None  # the entry ``add`` set last (``repoint``)

    def add(self, ev: Event, builder: "JobBuilder") -> None:
        got = stage_of(ev)
        if got is None:
            return
        st, transport = got
        if ev.kind.startswith("torch."):
            r = builder.rank_of(ev)
            if r is None:
                return
            key: Any = ("rank", r)
        elif ev.pid is not None:
            # per GPU of the process: one process may drive several (nccl-tests -g N), each GPU its own rank
            key = (ev.host, ev.pid) if ev.cuda_dev is None else (ev.host, ev.pid, ev.cuda_dev)
        elif ev.rank is not None:
            key = ("rank", ev.rank)
        elif ev.cuda_dev is not None and ev.fields.get("prefix") == "partial":
            # "[1] NCCL INFO ...": a paste that kept only the device of NCCL's "host:pid:tid [dev]" head. One process
            # per GPU is the rule, so the device stands for the process; its own lines name its rank (``own_rank``).
            key = ("dev", ev.host, ev.cuda_dev)
        else:
            return
        self._adds += 1
        if not self._adds & (SWEEP - 1):
            self._sweep()
        cur = self._procs.get(key)
        if cur is None:
            if len(self._procs) < 65536:
                # one host string for all its processes' keys
                if key[0].__class__ is str and key[0] not in ("rank", "dev"):
                    key = (_host(key[0]), *key[1:])
                self._procs[key] = cur = [st, ev, transport, None, None, self._gen]
                self._now.append(cur)
                self._last = cur
            else:
                return
        if cur[3] is None:
            cur[3] = own_rank(ev)
        if transport:
            seen = cur[4]
            if seen is None:
                cur[4] = _transports(frozenset((transport,)))
            elif transport not in seen and len(seen) < 16:
                cur[4] = _transports(seen | {transport})
        if cur[1] is ev:
            return
        old_st, old_ev = cur[0], cur[1]
        if old_ev.path == ev.path and ev.line < old_ev.line:
            return  # a line held back by the parser (compacted chatter), older than what the process did since
        if ev.kind == "nccl.init.start" and old_st >= Stage.INIT_COMPLETE:
            cur[0], cur[1], cur[2], cur[5] = Stage.BOOTSTRAP, ev, None, self._gen  # a new communicator's init
            cur[4] = None
            self._now.append(cur)
            self._last = cur
        elif st >= old_st or (st in _ALTERNATE and old_st in _ALTERNATE):
            cur[0], cur[1], cur[5] = st, ev, self._gen
            self._now.append(cur)
            self._last = cur
            if st is Stage.CONNECT:
                cur[2] = transport or cur[2]

    def repoint(self, ev: Event, held: Any) -> None:
        """The rule engine keeps ``ev`` (the event ``add`` saw last) as ``held``, packed: the entry ``ev`` set holds that
        object too (one packed copy, not a second one at the next sweep; at 1,000 ranks every rank's last torch work
        record is both)."""
        cur = self._last
        if cur is not None and cur[1] is ev:
            cur[1] = held

    def _sweep(self) -> None:
        """Pack (packed.py) the events set in the period before this one that no stage change replaced since: each
        process's line stays what it is, in a fraction of the memory (at 1,000 ranks 3.5 MiB of whole events
        otherwise). At most the events of two periods (2 x ``SWEEP``) are held whole, at any number of ranks; a sweep
        costs what the period's changes were."""
        gen = self._gen
        for cur in self._prev:
            if cur[5] < gen and cur[1].__class__ is Event:
                cur[1] = pack(cur[1])
        self._prev, self._now = self._now, []
        self._gen = gen + 1

    def apply(self, builder: "JobBuilder") -> None:
        """Write each rank's furthest stage into its ``RankInfo`` (processes mapped to ranks by their pid); keep every
        process's own entry in ``builder.proc_stages`` (the hang predicates pick the job's processes from them)."""
        procs: list[tuple[int, list[Any]]] = []
        unranked: list[tuple[Any, list[Any]]] = []
        torch_seen: dict[int, list[Any]] = {}
        for key, cur in self._procs.items():
            if key[0] == "rank":
                torch_seen[key[1]] = cur
                continue
            pt = builder.procs
            hit = pt.dev_rank(key[0], key[1], key[2]) if len(key) == 3 and pt.multi(key[0], key[1]) else None
            hit = hit or pt.rank(key[0], key[1]) or pt.rank(None, key[1])
            # NCCL < 2.18.3 logs no Init START: a process stuck in init never maps to a rank by its pid; then the
            # rank its own ring/tree/connection lines name is the one (``own_rank``).
            r = hit[0] if hit is not None else cur[3]
            if r is not None:
                procs.append((r, cur))
            elif len(unranked) < 64:
                unranked.append((key, cur))  # a paste of a process's lines that name no rank (hang-nvls-log-ends)
        builder.proc_stages = [(r, _entry(cur)) for r, cur in procs]
        builder.unranked_stages = [(key, _entry(cur)) for key, cur in unranked]
        builder.torch_stages = {r: _entry(cur) for r, cur in torch_seen.items()}
        builder.rank_stages = collapse(builder.proc_stages, builder.torch_stages)
        for r, (st, ev, transport) in builder.rank_stages.items():
            info = builder.job.ranks.get(r)
            if info is None:
                continue  # a rank known only from its own connection lines: the hang predicates see it, the table not
            info.stage = st
            info.stage_loc = Loc(ev.path, ev.line)
            info.stage_transport = transport


StageEntry = tuple[Stage, Event, "str | None"]


def _entry(cur: list[Any]) -> StageEntry:
    # Where a process still connects, its transport is the one of its last line (the parser always keeps a process's
    # last chatter line); past that, every transport it used (compaction keeps the first line of each, so this does
    # not depend on how the input was cut into parallel ranges).
    return cur[0], cur[1], cur[2] if cur[0] is Stage.CONNECT else (", ".join(sorted(cur[4] or ())) or None)


def collapse(procs: list[tuple[int, StageEntry]], torch_stages: dict[int, StageEntry]) -> dict[int, StageEntry]:
    """Per rank, the furthest of its processes' stages; torch's records only move a rank whose NCCL init is complete
    or absent (torch enqueues its first collective before NCCL's lazy init of the communicator runs: a watchdog
    report of SeqNum 1 says nothing about init)."""
    best: dict[int, StageEntry] = {}
    for r, e in procs:
        have = best.get(r)
        if have is None or e[0] > have[0]:
            best[r] = e
    for r, e in torch_stages.items():
        have = best.get(r)
        if have is None:
            best[r] = e
        elif have[0] >= Stage.INIT_COMPLETE and e[0] > have[0]:
            best[r] = (e[0], e[1], have[2])
    return best
