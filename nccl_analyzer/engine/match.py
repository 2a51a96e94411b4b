"""Event selectors (kind glob + field tests) and the named job-model predicates rules may call."""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from ..model import Event
from ..ranks import rank_ranges
from .prefilter import required

if TYPE_CHECKING:  # pragma: no cover
    from ..job import JobBuilder

_NUM_OP = re.compile(r"^(>=|<=|>|<|==|!=)\s*(-?\d+(?:\.\d+)?)$")
#: Fields computed from an event rather than read from ``Event.fields`` (see docs in the rule README).
VIRTUAL_FIELDS = ("body", "text", "exc", "frames_text", "last_frame_file", "last_frame_func", "kind")


class SelectorError(ValueError):
    """A selector that does not compile; ``key`` names the offending field."""

    def __init__(self, msg: str, key: str = ""):
        super().__init__(msg)
        self.key = key


@dataclass(frozen=True, slots=True)
class FieldTest:
    """One ``field = value`` test: equality, ``~regex``, ``!~regex``, numeric ``>= N``, or any-of a list."""

    field: str
    op: str  # eq | ne | re | nre | num | any
    value: Any = None
    alts: tuple["FieldTest", ...] = ()
    need: tuple[str, ...] | None = None  # re/nre: literals one of which any match contains (prefilter.py)

    def check(self, ev: Event, memo: dict[str, Any]) -> dict[str, Any] | None:
        """Captured named groups ({} when none) if the event passes; None if not."""
        if self.op == "any":
            for alt in self.alts:
                got = alt.check(ev, memo)
                if got is not None:
                    return got
            return None
        name = self.field
        if name in memo:  # a virtual field (body, exc, ...) computed for this event by an earlier test
            v = memo[name]
        else:
            v = field_value(ev, name, memo)
        if v.__class__ is str and self.op == "re":
            # the common test (a regex on the body or a message), first: the literal prefilter, then the regex
            need = self.need
            if need is not None:
                for x in need:
                    if x in v:
                        break
                else:
                    return None
            m = self.value.search(v)
            if not m:
                return None
            caps = {k: val for k, val in m.groupdict().items() if val is not None} if self.value.groupindex else {}
            if name == "body":
                caps["_match_text"] = m.group(0)
            return caps
        if self.op == "nre":
            if v is None:
                return {}
            s = str(v)
            if self.need is not None:
                for x in self.need:  # (a loop, not any(): this runs ~600k times at 1,000 ranks)
                    if x in s:
                        break
                else:
                    return {}
            return {} if not self.value.search(s) else None
        if v is None:
            return {} if self.op == "ne" else None
        if self.op == "re":
            s = str(v)
            if self.need is not None:
                for x in self.need:
                    if x in s:
                        break
                else:
                    return None
            m = self.value.search(s)
            if not m:
                return None
            caps = {k: val for k, val in m.groupdict().items() if val is not None}
            if self.field in ("body",):
                caps["_match_text"] = m.group(0)
            return caps
        if self.op == "num":
            op, num = self.value
            try:
                x = float(v)
            except (TypeError, ValueError):
                return None
            ok = {">=": x >= num, "<=": x <= num, ">": x > num, "<": x < num, "==": x == num, "!=": x != num}[op]
            return {} if ok else None
        if self.op == "eq":
            return {} if _eq(v, self.value) else None
        if self.op == "ne":
            return {} if not _eq(v, self.value) else None
        return None


def _eq(v: Any, want: Any) -> bool:
    if isinstance(want, bool):
        return bool(v) is want if isinstance(v, bool) else str(v).lower() == str(want).lower()
    if isinstance(want, (int, float)):
        try:
            return float(v) == float(want)
        except (TypeError, ValueError):
            return False
    return str(v) == str(want)


@dataclass(frozen=True, slots=True)
class Selector:
    """Which events a rule slot accepts: a kind glob (or list of globs) and field tests."""

    name: str
    kinds: tuple[str, ...]
    tests: tuple[FieldTest, ...] = ()
    _kind_re: re.Pattern[str] | None = field(default=None, compare=False)

    def accepts_kind(self, kind: str) -> bool:
        """Whether the kind globs accept this event kind."""
        return bool(self._kind_re.match(kind)) if self._kind_re is not None else True

    def test(self, ev: Event, memo: dict[str, Any]) -> dict[str, Any] | None:
        """Captured values if every field test passes, else None (the kind is checked by the caller)."""
        tests = self.tests
        if len(tests) == 1:
            return tests[0].check(ev, memo)  # (a new dict, or None: no copy needed)
        caps: dict[str, Any] = {}
        for t in tests:
            got = t.check(ev, memo)
            if got is None:
                return None
            caps.update(got)
        return caps


def _compile_test(name: str, value: Any) -> FieldTest:
    if isinstance(value, list):
        if not value:
            raise SelectorError(f"field '{name}': empty list", name)
        return FieldTest(name, "any", alts=tuple(_compile_test(name, v) for v in value))
    if isinstance(value, str):
        if value.startswith("!~") or value.startswith("~"):
            neg = value.startswith("!~")
            pat = value[2:] if neg else value[1:]
            try:
                rx = re.compile(pat)
            except re.error as exc:
                raise SelectorError(f"field '{name}': bad regex {pat!r}: {exc}", name) from exc
            return FieldTest(name, "nre" if neg else "re", rx, need=required(rx))
        m = _NUM_OP.match(value)
        if m:
            return FieldTest(name, "num", (m.group(1), float(m.group(2))))
        if value.startswith("!="):
            return FieldTest(name, "ne", value[2:].strip())
        return FieldTest(name, "eq", value)
    if isinstance(value, (bool, int, float)):
        return FieldTest(name, "eq", value)
    raise SelectorError(f"field '{name}': use a string, number, boolean or a list of them", name)


def compile_selector(sel: dict[str, Any], name: str) -> Selector:
    """A ``[[match.all]]``-style table -> ``Selector``.

    Raises:
        SelectorError: a missing ``kind``, a bad glob or regex, an unsupported value.
    """
    kinds = sel.get("kind")
    if isinstance(kinds, str):
        kinds = [kinds]
    if not kinds or not isinstance(kinds, list) or not all(isinstance(k, str) and k for k in kinds):
        raise SelectorError("a selector needs 'kind' (a glob such as \"nccl.warn.*\", or a list of them)", "kind")
    for k in kinds:
        if not re.fullmatch(r"[a-z0-9_.*?\[\]-]+", k):
            raise SelectorError(f"kind {k!r} is not a dotted event kind or glob", "kind")
    kind_re = re.compile("|".join(fnmatch.translate(k) for k in kinds))
    tests = []
    for key, value in sel.items():
        if key in ("kind", "label"):
            continue
        if not re.fullmatch(r"[A-Za-z_]\w*", key):
            raise SelectorError(f"field name {key!r} is not an identifier", key)
        tests.append(_compile_test(key, value))
    return Selector(name=str(sel.get("label", name)), kinds=tuple(kinds), tests=tuple(tests), _kind_re=kind_re)


# -- event field access -----------------------------------------------------------------------------------------
def event_lines(ev: Event) -> list[str]:
    """All verbatim lines of an event (multi-line events keep them in ``fields['lines']``)."""
    lines = ev.fields.get("lines")
    if isinstance(lines, (list, tuple)) and lines:
        return [str(x) for x in lines]
    return [ev.text]


def field_value(ev: Event, name: str, memo: dict[str, Any] | None = None) -> Any:
    """A field, an event attribute, or a virtual field (``body``, ``exc``, ``last_frame_file`` ...)."""
    if name not in VIRTUAL_FIELDS:
        return ev.get(name)
    if memo is not None and name in memo:
        return memo[name]
    if name == "text":
        v: Any = ev.text
    elif name == "kind":
        v = ev.kind
    elif name == "body":
        parts = event_lines(ev)
        body = "\n".join(parts)
        for f in ("msg", "message", "what", "error", "last_error", "detail", "cuda_error"):
            x = ev.fields.get(f)
            if isinstance(x, str) and x and x not in body:
                body += "\n" + x
        for c in ev.fields.get("chain") or []:
            if isinstance(c, dict):
                x = f"{c.get('exc_type', '')}: {c.get('message', '')}"
                if x not in body:
                    body += "\n" + x
        v = body
    elif name == "exc":
        et, msg = ev.fields.get("exc_type"), ev.fields.get("message")
        v = f"{et}: {msg}" if et else None
    else:
        frames = [_frame(f) for f in ev.fields.get("frames") or []]
        frames = [f for f in frames if f is not None]
        if name == "frames_text":
            v = "\n".join(f"{f[0]}:{f[1]}" for f in frames) if frames else None
        elif not frames:
            v = None
        else:
            v = frames[-1][0] if name == "last_frame_file" else frames[-1][1]
    if memo is not None:
        memo[name] = v
    return v


def _frame(fr: Any) -> tuple[str, str] | None:
    if isinstance(fr, dict):
        return (str(fr.get("file") or fr.get("path") or fr.get("filename") or ""),
                str(fr.get("func") or fr.get("function") or fr.get("name") or ""))
    if isinstance(fr, (list, tuple)) and len(fr) >= 3:
        return str(fr[0]), str(fr[2])
    if isinstance(fr, str):
        m = re.search(r'File "([^"]+)", line \d+, in (\S+)', fr)
        if m:
            return m.group(1), m.group(2)
    return None


# -- predicates ------------------------------------------------------------------------------------------------
@dataclass(slots=True)
class PredContext:
    """What a predicate sees: the job model builder and the events this rule matched in this group."""

    builder: "JobBuilder"
    events: list[Event]
    group: Any = None


@dataclass(slots=True)
class PredResult:
    """A passing predicate: values for the fix text, the ranks it blames, and evidence events."""

    bound: dict[str, Any] = field(default_factory=dict)
    ranks: tuple[int, ...] = ()
    evidence: list[Event] = field(default_factory=list)


Predicate = Callable[..., "PredResult | None"]
PREDICATES: dict[str, Predicate] = {}


def predicate(fn: Predicate) -> Predicate:
    """Register a predicate under its function name."""
    PREDICATES[fn.__name__] = fn
    return fn


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


@predicate
def busid_shared_by_ranks_on_host(ctx: PredContext) -> PredResult | None:
    """Two or more processes initialised NCCL on the same GPU (busId) of one host."""
    b = ctx.builder
    for (host, bus, comm), pids in sorted(b.busid_pids.items()):
        if len(pids) >= 2:
            evs = list(b.busid_events.get((host, bus, comm), []))
            ranks = tuple(sorted({r for r in (b.rank_of(e) for e in evs) if r is not None}))
            return PredResult(bound={"bus_id": bus, "host": host, "dup_ranks": ", ".join(map(str, ranks))},
                              ranks=ranks, evidence=evs[:4])
    return None


@predicate
def nccl_versions_differ(ctx: PredContext) -> PredResult | None:
    """Processes of the job report different NCCL versions (major.minor.patch)."""
    from ..job import version_number

    b = ctx.builder
    nums: dict[str, list[str]] = {}
    for v in b.versions_by_proc:
        nums.setdefault(version_number(v) or v, []).append(v)
    if len(nums) < 2:
        return None
    ev = [b.version_events[v] for vs in nums.values() for v in vs if v in b.version_events]
    ranks = tuple(sorted({r for r in (b.rank_of(e) for e in ev) if r is not None}))
    by_num: dict[str, set[int]] = {}
    for r, info in b.job.ranks.items():
        if info.nccl_version:
            by_num.setdefault(version_number(info.nccl_version) or info.nccl_version, set()).add(r)
    if len(by_num) > 1:
        # The odd ones out: every rank not on the majority's version (on a tie, the version of the lowest rank,
        # where the job's store and rank 0 live, is the reference).
        ref = max(by_num, key=lambda n: (len(by_num[n]), -min(by_num[n])))
        ranks = tuple(sorted(r for n, rs in by_num.items() if n != ref for r in rs))
    who = "; ".join(f"{n} on {', '.join(sorted(set().union(*(b.versions_by_proc[v] for v in vs))))[:80]}"
                    for n, vs in sorted(nums.items()))
    return PredResult(bound={"versions": ", ".join(sorted(nums)), "who": who}, ranks=ranks, evidence=ev[:4])


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
    bound: dict[str, Any] = {"ops": ", ".join(f"{_who(tuple(rs))}: {ops[rs[0]]}" for rs in groups)}
    if blamed is not None:
        bound["odd_who"] = _who(blamed)
        bound["odd_story"] = (f"{_who(blamed)} called {', '.join(sorted({ops[r] for r in blamed}))} while "
                              f"{_who(tuple(groups[0]))} called {ops[groups[0][0]]}")
    return _blame_first(ctx, bound, blamed or tuple(sorted(ops)))


def _odd_ones(key: dict[int, Any]) -> tuple[list[list[int]], tuple[int, ...] | None]:
    """The ranks grouped by what each called (largest group first), and the odd ones out: every rank outside the
    largest group, where that group is a strict majority. With no majority (1 vs 1, 2 vs 2) the log cannot tell
    which side is wrong: None, and every rank stays named."""
    by_key: dict[Any, list[int]] = {}
    for r in sorted(key):
        by_key.setdefault(key[r], []).append(r)
    groups = sorted(by_key.values(), key=lambda rs: (-len(rs), rs[0]))
    if len(groups[0]) > len(groups[1]):
        return groups, tuple(sorted(r for rs in groups[1:] for r in rs))
    return groups, None


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
def nccltests_one_node(ctx: PredContext) -> PredResult | None:
    """Every rank of nccl-tests' device list is on one host (or, in the NCCL 1.x tests' list, which names no host,
    in one process): the GPUs talk over the node's own data paths (P2P / SHM over PCIe or NVLink), no network."""
    ranks = [e for e in ctx.events if e.kind == "nccltests.rank"]
    if not ranks or len({e.host for e in ranks}) > 1:
        return None
    gpus = sorted({str(e.get("gpu") or "").strip() for e in ranks} - {""})
    bound = {"n_gpus": len({e.get("rank") for e in ranks}), "gpu_models": ", ".join(gpus[:3]) or "GPUs"}
    head = [e for e in ctx.events if e.kind == "nccltests.header"]
    return PredResult(bound=bound, evidence=head[:1] + ranks[:3])


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


def _who(ranks: tuple[int, ...]) -> str:
    """"rank 3" or "ranks 0-7, 9": ``_rank_list`` with its noun."""
    return f"rank{'s' if len(ranks) > 1 else ''} {_rank_list(ranks)}"


def _rank_list(ranks: tuple[int, ...]) -> str:
    """"3", "3, 5" or "0-7, 9" for a bound value read by a person."""
    return rank_ranges(ranks, ", ")


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
def no_init_complete(ctx: PredContext, **args: Any) -> PredResult | None:
    """Some communicator's init started on a rank that never logged Init COMPLETE."""
    b = ctx.builder
    stuck: set[int] = set()
    any_complete = False
    for comm, states in b.init.items():
        for r, s in states.items():
            if s == "complete":
                any_complete = True
            else:
                grank = b.job.communicators.get(comm, {}).get("ranks", {}).get(r, r)
                stuck.add(grank)
    if not stuck:
        return None
    if args.get("others_complete") and not any_complete:
        return None
    if args.get("nccl_evidence_on_stuck"):
        # The rule's NCCL lines (e.g. P2P channel setup) must come from a rank that is itself stuck in init: a
        # rank stuck before reaching them says nothing about what its peers set up.
        own = {b.rank_of(e) for e in ctx.events if e.kind.startswith("nccl.")}
        stuck &= own
        if not stuck:
            return None
    return PredResult(bound={"stuck": ", ".join(map(str, sorted(stuck)))}, ranks=tuple(sorted(stuck)))


@predicate
def socket_interfaces(ctx: PredContext, **args: Any) -> PredResult | None:
    """Binds the interface the environment asked for and the ones NCCL saw (for the fix text); always passes."""
    b = ctx.builder
    bound: dict[str, Any] = {}
    for name in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        if name in b.env:
            bound.setdefault("ifname", b.env[name])
            bound.setdefault("ifname_var", name)
    for ev in ctx.events:
        for key in ("ifname", "iface"):
            if ev.get(key) and "ifname" not in bound:
                bound["ifname"] = ev.get(key)
    seen = sorted({i for v in b.ifaces.values() for i in v if i != bound.get("ifname")})
    if seen:
        bound["interfaces"] = ", ".join(seen)
    hosts = sorted({e.host for e in ctx.events if e.host})
    if hosts:
        bound["host"] = hosts[0]
    return PredResult(bound=bound)


@predicate
def env_setting(ctx: PredContext, **args: Any) -> PredResult | None:
    """The job's NCCL environment (as NCCL logged it) sets ``var`` (optionally to a value matching ``value``).

    In a rule: ``predicates = [{ name = "env_setting", var = "NCCL_COMM_ID" }]`` (``name`` names the predicate).
    """
    name = str(args.get("var", args.get("name", "")))
    b = ctx.builder
    if name not in b.env:
        return None
    val = b.env[name]
    want = args.get("value")
    if want is not None and not re.search(str(want), val):
        return None
    return PredResult(bound={name: val, "env_value": val}, evidence=list(b.env_events.get(name, []))[:1])


def kind_matches(globs: tuple[str, ...], kind: str) -> bool:
    """fnmatch over several globs (used by tests and rule tooling)."""
    return any(fnmatch.fnmatchcase(kind, g) for g in globs)
from . import hang as _hang  # noqa: E402,F401  (registers the hang predicates)
from . import named as _named  # noqa: E402,F401  (registers the named-rank predicates)
from . import attempts as _attempts  # noqa: E402,F401  (registers the torchelastic restart predicates)
