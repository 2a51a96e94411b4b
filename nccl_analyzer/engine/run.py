"""Streaming matcher: events -> per-rule capped evidence -> rule hits (with bound values) at the end."""
from __future__ import annotations

import re
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from ..model import Event, Evidence, Finding, Fix
from .match import PREDICATES, PredContext, Selector, event_lines
from .loader import Rule, placeholders
from ..packed import FULL_KEEP, pack

if TYPE_CHECKING:  # pragma: no cover
    from ..job import JobBuilder

#: Matched events kept per rule, per selector, per rank (or process): enough evidence, bounded memory.
CAP_PER_KEY = 50
#: Distinct ranks/processes tracked per rule selector.
CAP_KEYS = 4096
#: Evidence lines quoted per finding.
EVIDENCE_CAP = 6
#: The captures of a match that captured nothing, shared by all such matches (read only: 135k empty dicts and as many
#: tuples at 1,000 ranks otherwise).
_NO_CAPS: dict[str, Any] = {}
#: Stands for a match's ``_match_text`` (the text a body regex matched) in the captures a slot keeps: only the
#: matches a hit's bound values come from read it, and ``_resolved`` tests those again (the same event, the same
#: selector: the same text). At 1,000 ranks 13,000 matched texts of 100-500 characters are not kept.
_LAZY = object()


#: Capture-name tuples and short captured values, one object per distinct one (bounded: past this many a new one is
#: kept as it is). Every rank's watchdog line captures the same ``op_type`` and often the same ``seq``.
_SHARED: dict[Any, Any] = {}
_SHARED_CAP = 65536
_SHARE_LEN = 64


def _share(v: Any) -> Any:
    got = _SHARED.get(v)
    if got is None:
        if len(_SHARED) < _SHARED_CAP:
            _SHARED[v] = v
        return v
    return got


@dataclass(slots=True)
class _Slot:
    part: str  # all | any | none
    index: int
    selector: Selector
    #: the matcher's keys (rank, else process, else path), each once: a slot names a key by its index there
    ring: list[Any] = field(default_factory=list)
    #: The matches kept, in input order, column by column: feed order (``seqs``), the event (``held``), the captures
    #: (``caps``: None, or the capture names, one tuple per distinct set of names, then the values) and the key's
    #: index (``kidx``). ``kcount``: matches kept per key index, keys in the order they first matched. ``items`` /
    #: ``by_key`` read them back as (seq, event, captures, key) tuples. Columns instead of a tuple and a dict per
    #: match, and a key index instead of a key object and a dict entry per slot: at 1,000 ranks 30,000 tuples,
    #: 13,000 dicts and 20,000 key tuples fewer.
    seqs: array = field(default_factory=lambda: array("q"))
    held: list[Event] = field(default_factory=list)
    caps: list[tuple[Any, ...] | None] = field(default_factory=list)
    kidx: array = field(default_factory=lambda: array("i"))
    kcount: dict[int, int] = field(default_factory=dict)
    count: int = 0  # matches
    stored: int = 0  # matches kept

    def put(self, seq: int, ev: Event, caps: dict[str, Any], kid: int) -> None:
        """Keep one match (``kid``: its key's index in ``ring``, already in ``kcount``)."""
        self.seqs.append(seq)
        self.held.append(ev)
        self.kidx.append(kid)
        self.kcount[kid] += 1
        self.stored += 1
        if not caps:
            self.caps.append(None)
            return
        if "_match_text" in caps:
            caps["_match_text"] = _LAZY
        got = (_share(tuple(caps)), *(_share(v) if v.__class__ is str and len(v) < _SHARE_LEN else v
                                      for v in caps.values()))
        if all(v.__class__ is str or v is _LAZY for v in caps.values()):
            got = _share(got)  # (every rank's match of one line often captures the same values: one tuple)
        self.caps.append(got)

    @property
    def keys(self) -> dict[Any, int]:
        """Matches kept per key, keys in the order they first matched."""
        ring = self.ring
        return {ring[k]: n for k, n in self.kcount.items()}

    @property
    def items(self) -> list[tuple[int, Event, dict[str, Any], Any]]:
        """The matches kept, in input order, each (seq, event, captures, key)."""
        ring = self.ring
        return [(seq, ev, _NO_CAPS if c is None else dict(zip(c[0], c[1:])), ring[k])
                for seq, ev, c, k in zip(self.seqs, self.held, self.caps, self.kidx)]

    def clear(self) -> None:
        del self.seqs[:], self.held[:], self.caps[:], self.kidx[:]
        self.kcount.clear()

    @property
    def by_key(self) -> dict[Any, list[tuple[int, Event, dict[str, Any], Any]]]:
        """The matches kept, grouped by key: keys in the order they first matched, each key's in input order."""
        ring = self.ring
        out: dict[Any, list[tuple[int, Event, dict[str, Any], Any]]] = {ring[k]: [] for k in self.kcount}
        for it in self.items:
            out[it[3]].append(it)
        return out


@dataclass(slots=True)
class _RuleState:
    rule: Rule
    slots: list[_Slot]
    dirty: bool = False
    #: A rule grouped by job whose ``none`` selector matched can never hit again (``none`` selectors are not
    #: skipped): its slots keep that one event and take no more.
    dead: bool = False


@dataclass(slots=True)
class Hit:
    """A rule that matched in one group: its events (key event first), bound values and blamed ranks."""

    rule: Rule
    group: Any
    events: list[Event]
    seq: int  # feed order of the key event
    time: float | None
    ranks: tuple[int, ...]
    hosts: tuple[str, ...]
    bound: dict[str, Any]
    evidence: tuple[Evidence, ...]
    count: int = 1  # matched events in the group
    event_ranks: tuple[int, ...] = ()  # ranks of the matched events (``ranks`` may be a predicate's culprits)
    victims_only: bool = False  # the matched events' ranks are victims: only a predicate may name culprits

    @property
    def key(self) -> Event | None:
        return self.events[0] if self.events else None

    def finding(self, role: str | None = None, confidence: float | None = None) -> Finding:
        """This hit as a model ``Finding``."""
        return Finding(rule=self.rule.id, id=self.rule.taxonomy, role=role or self.rule.role,
                       title=render_title(self.rule.title, self.bound),
                       severity=self.rule.severity,
                       confidence=self.rule.confidence if confidence is None else confidence,
                       ranks=self.ranks, hosts=self.hosts, evidence=self.evidence,
                       explanation=render_template(self.rule.description, self.bound) or self.rule.description,
                       fix=make_fix(self.rule, self.bound), time=self.key.time if self.key else None,
                       bound={k: v for k, v in self.bound.items() if not k.startswith("_")})


def render_title(s: str, bound: dict[str, Any]) -> str:
    """A title with its placeholders filled. An optional part (``[ on rank {rank}]``, or a parenthesised one,
    ``"... in use (port {port})"``) whose placeholder the log did not bind is dropped; any other unbound one
    reads ``?``."""
    out = render_template(s, bound)
    if out:
        return out
    s = _optional_parts(s, bound)
    def unbound(m: re.Match) -> bool:
        return any(bound.get(n) in (None, "") for n in placeholders(m.group(0)))
    s = re.sub(r"\s*\([^()]*\{\w+\}[^()]*\)", lambda m: "" if unbound(m) else m.group(0), s)
    return re.sub(r"\{(\w+)\}", lambda m: str(bound[m.group(1)]) if bound.get(m.group(1)) not in (None, "") else "?", s)


#: ``[ ... {name} ... ]``: a template part that only reads when the log gave every value it names.
_OPTIONAL = re.compile(r"\[([^\[\]]*\{\w+\}[^\[\]]*)\]")


def _optional_parts(s: str, bound: dict[str, Any]) -> str:
    """Square-bracketed parts that hold a placeholder: kept (without the brackets) when all their placeholders
    are bound, dropped otherwise. Brackets without a placeholder are literal text."""
    return _OPTIONAL.sub(lambda m: "" if any(bound.get(n) in (None, "") for n in placeholders(m.group(1)))
                         else m.group(1), s)


def render_template(s: str, bound: dict[str, Any]) -> str:
    """``{name}`` -> bound value; "" when a placeholder has no value (the caller keeps its generic text).

    A part in square brackets that names a placeholder is optional: it is left out when the log did not give
    its value (``"Rank[ {rank}] ran out"`` reads ``"Rank ran out"`` without a rank)."""
    s = _optional_parts(s, bound)
    names = placeholders(s)
    if not names:
        return s
    if any(bound.get(n) in (None, "") for n in names):
        return ""
    return re.sub(r"\{(\w+)\}", lambda m: str(bound[m.group(1)]), s)


#: Environment variables torch renamed: old name -> (new name, first torch version that reads the new one).
RENAMED_ENV = {"TORCH_NCCL_TRACE_BUFFER_SIZE": ("TORCH_FR_BUFFER_SIZE", (2, 11))}


def _version_tuple(v: str | None) -> tuple[int, ...] | None:
    m = re.match(r"(\d+)\.(\d+)", v or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def make_fix(rule: Rule, bound: dict[str, Any], torch_version: str | None = None) -> Fix:
    """The rule's fix, tailored with the bound values where the rule gives a ``bound_summary``.

    Args:
        rule: the matched rule.
        bound: values the log gave (placeholders).
        torch_version: the job's torch version when the log shows it: a renamed variable (``RENAMED_ENV``)
            is given under the name that torch reads; unknown, under both names.
    """
    fx = rule.fix
    templates = fx.get("bound_summary") or []
    if isinstance(templates, str):
        templates = [templates]
    summary = next((s for s in (render_template(t, bound) for t in templates) if s), "") \
        or render_template(fx["summary"], bound) \
        or re.sub(r"\{(\w+)\}", r"<\1>", _optional_parts(fx["summary"], bound))
    # An env value that needs a value the log does not show is left out: scripts (and --verify-fix) apply
    # fix.env as it is, so a placeholder there would be worse than nothing; the summary says what to set.
    env = {k: r for k, r in ((k, render_template(v, bound)) for k, v in fx.get("env", {}).items()) if r}
    # Likewise a command that still needs a value the log does not show would not run as printed: left out
    # (a rule writes ``cmd[ | grep {x}]`` to keep the command without the value).
    cmds = [c for c in (render_template(c, bound) for c in fx.get("commands", [])) if c]
    have = _version_tuple(torch_version)
    for old, (new, since) in RENAMED_ENV.items():
        if old not in env:
            continue
        if have is not None and have < since:
            continue
        value = env.pop(old)
        env[new] = value
        if have is None:  # older torch reads only the old name, newer only the new one: set both
            env[old] = value
        said = [f"{new}={value}" + (f" ({old}={value} before torch {since[0]}.{since[1]})" if have is None else "")]
        summary = re.sub(rf"\b{old}(?:={re.escape(value)}\b)?", lambda m: said.pop() if said else new, summary)
        cmds = [c.replace(old, new) for c in cmds]
    return Fix(summary=summary, env=env, commands=tuple(cmds))


def _raw_key(ev: Event) -> Any:
    if ev.rank is not None:
        return ev.rank
    if ev.pid is not None:
        return (ev.host, ev.pid)
    return ev.path


class Matcher:
    """Feeds events to every rule; keeps, per rule selector and rank, the first ``CAP_PER_KEY`` matches."""

    def __init__(self, rules: list[Rule]):
        self.rules = list(rules)
        self._keys: list[Any] = []  # every key a slot kept a match of, once (``_Slot.ring``)
        self._kid: dict[Any, int] = {}  # key -> its index in ``_keys``
        self._states = [_RuleState(r, [_Slot(part, i, s, self._keys) for part in ("all", "any", "none")
                                       for i, s in enumerate(getattr(r.match, part))]) for r in self.rules]
        self._by_kind: dict[str, list[_Slot | None]] = {}
        self._slot_state: dict[int, _RuleState] = {}
        for st in self._states:
            for sl in st.slots:
                self._slot_state[id(sl)] = st
        self.seq = 0
        self.dirty = False

    def _slots_for(self, kind: str) -> list[_Slot]:
        got = self._by_kind.get(kind)
        if got is None:
            got = [sl for st in self._states if not st.dead for sl in st.slots if sl.selector.accepts_kind(kind)]
            if len(self._by_kind) < 100000:
                self._by_kind[kind] = got  # type: ignore[assignment]
        return got  # type: ignore[return-value]

    def reads(self, kind: str) -> bool:
        """Whether any rule selector accepts events of ``kind``."""
        return bool(self._slots_for(kind))

    def add(self, ev: Event, packed: Any = None) -> None:
        """Test one event against every selector whose kind glob accepts it (``packed``: the same event packed,
        when it came so: held instead of packing it again)."""
        self.seq += 1
        slots = self._slots_for(ev.kind)
        if not slots:
            return
        memo: dict[str, Any] = {}
        key = kid = None
        took: list[tuple[_Slot, _RuleState, dict[str, Any]]] = []
        for sl in slots:
            caps = sl.selector.test(ev, memo)
            if caps is None:
                continue
            st = self._slot_state[id(sl)]
            if st.dead:
                continue
            sl.count += 1
            if key is None:
                key = _raw_key(ev)
                kid = self._kid.get(key)
            n = None if kid is None else sl.kcount.get(kid)
            if n is None:
                if len(sl.kcount) >= CAP_KEYS:
                    continue
                if kid is None:  # (a key is kept once some slot keeps a match of it: bounded by the slots' caps)
                    kid = self._kid[key] = len(self._keys)
                    self._keys.append(key)
                n = sl.kcount[kid] = 0
            if n < CAP_PER_KEY:
                took.append((sl, st, caps))
        if not took:
            return
        held: Any = ev
        if all(sl.stored >= FULL_KEEP for sl, _, _ in took):
            # nccl_analyzer/packed.py: every slot holds the same object, whole or packed
            held = packed if packed is not None else pack(ev)
        for sl, st, caps in took:
            if st.dead:  # killed by an earlier slot of this same event
                continue
            sl.put(self.seq, held, caps, kid)
            st.dirty = True
            if st.rule.role == "root" and sl.part != "none":
                self.dirty = True
            if sl.part == "none" and st.rule.match.group_by == "job" and st.rule.match.none_scope == "job":
                self._kill(st, sl)

    def _kill(self, st: _RuleState, keep: _Slot) -> None:
        """``st``'s rule is grouped by job and its ``none`` slot ``keep`` matched: no later event can make it hit,
        so its other matches are dropped and its slots leave the kind index (``keep``'s one match stays, so
        ``hits`` still finds the rule cancelled)."""
        st.dead = True
        for sl in st.slots:
            if sl is not keep:
                sl.clear()
        # the first match kept is the first of the first key (keys are in the order they first matched)
        first = next(iter(keep.kcount))
        i = list(keep.kidx).index(first)
        seq, ev, caps = keep.seqs[i], keep.held[i], keep.caps[i]
        keep.clear()
        keep.kcount[first] = 0
        keep.put(seq, ev, _NO_CAPS if caps is None else dict(zip(caps[0], caps[1:])), first)
        keep.stored -= 1  # (``put`` counts it again)
        gone = {id(sl) for sl in st.slots}
        for kind, lst in self._by_kind.items():
            if any(id(sl) in gone for sl in lst):
                self._by_kind[kind] = [sl for sl in lst if id(sl) not in gone]

    # -- evaluation ------------------------------------------------------------------------------------------------
    def hits(self, builder: "JobBuilder", roles: tuple[str, ...] | None = None,
             skip: Callable[[Event], bool] | None = None) -> list[Hit]:
        """Every (rule, group) that matches given everything fed so far.

        ``skip``: events that do not count as matches of an ``all``/``any`` selector (the fail-safe's caught
        exceptions and retries that later succeeded); ``none`` selectors still see them.
        """
        from ..job import time_key

        out: list[Hit] = []
        for st in self._states:
            if roles is not None and st.rule.role not in roles:
                continue
            out.extend(self._rule_hits(st, builder, time_key, skip))
        self.dirty = False
        return out

    def _group_of(self, rule: Rule, ev: Event, builder: "JobBuilder") -> Any:
        g = rule.match.group_by
        if g == "job":
            return "job"
        r = builder.rank_of(ev)
        if g == "rank":
            if r is not None:
                return r
            return (ev.host, ev.pid) if ev.pid is not None else ev.path
        host = ev.host
        if host is None and r is not None and r in builder.job.ranks:
            host = builder.job.ranks[r].host
        return host or ev.path

    def _rule_hits(self, st: _RuleState, builder: "JobBuilder", time_key: Any,
                   skip: Callable[[Event], bool] | None = None) -> list[Hit]:
        rule = st.rule
        m = rule.match
        groups: dict[Any, dict[int, list[tuple[int, Event, dict[str, Any]]]]] = {}
        for si, sl in enumerate(st.slots):
            skipping = skip is not None and sl.part != "none"
            for lst in sl.by_key.values():  # (grouped by key, as the matches were once kept)
                for item in lst:
                    if skipping and skip(item[1]):
                        continue
                    g = self._group_of(rule, item[1], builder)
                    groups.setdefault(g, {}).setdefault(si, []).append(item)
        if not groups and m.predicates and not m.all and not m.any:
            groups["job"] = {}
        hits: list[Hit] = []
        for g, per_slot in groups.items():
            hit = self._group_hit(st, g, per_slot, builder, time_key)
            if hit is not None:
                hits.append(hit)
        return hits

    def _group_hit(self, st: _RuleState, g: Any, per_slot: dict[int, list[tuple[int, Event, dict[str, Any]]]],
                   builder: "JobBuilder", time_key: Any) -> Hit | None:
        rule = st.rule
        m = rule.match
        all_idx = [i for i, sl in enumerate(st.slots) if sl.part == "all"]
        any_idx = [i for i, sl in enumerate(st.slots) if sl.part == "any"]
        none_idx = [i for i, sl in enumerate(st.slots) if sl.part == "none"]
        if m.none_scope == "rank":
            per_slot = _cancel_same_rank(per_slot, none_idx, builder)
        else:
            for i in none_idx:
                if per_slot.get(i):
                    return None
        for i in all_idx:
            if not per_slot.get(i):
                return None
        if any_idx and not any(per_slot.get(i) for i in any_idx):
            return None

        def order(item: tuple[int, Event, dict[str, Any]]) -> tuple[float, int]:
            return (item[0], 0)

        chosen: list[tuple[int, Event, dict[str, Any]]] = []
        slots = st.slots
        if m.ordered:
            last = -1
            for i in all_idx:
                cand = sorted((it for it in per_slot[i] if it[0] > last), key=order)
                if not cand:
                    return None
                chosen.append(_resolved(cand[0], slots[i]))
                last = cand[0][0]
        else:
            chosen = [_resolved(min(per_slot[i], key=order), slots[i]) for i in all_idx]
        anys = sorted(((it, i) for i in any_idx for it in per_slot.get(i, [])), key=lambda p: order(p[0]))
        if anys:
            chosen.append(_resolved(anys[0][0], slots[anys[0][1]]))
        if m.within is not None and len(chosen) > 1:
            times = [time_key(it[1].time) for it in chosen]
            known = [t for t in times if t is not None]
            if len(known) >= 2 and max(known) - min(known) > m.within:
                return None
        bound: dict[str, Any] = {}
        for it in chosen:
            for k, v in it[2].items():
                bound.setdefault(k, v)
        events_all = sorted({id(it[1]): it for i in all_idx + any_idx for it in per_slot.get(i, [])}.values(),
                            key=order)
        for it in events_all:
            for k, v in it[2].items():
                if k != "_match_text":
                    bound.setdefault(k, v)
        ranks: set[int] = set()
        for it in events_all:
            r = builder.rank_of(it[1])
            if r is not None:
                ranks.add(r)
        pred_ranks: tuple[int, ...] | None = None
        pred_ev: list[Event] = []
        victims_only = False
        lead_pred = False
        ctx = PredContext(builder=builder, events=[it[1] for it in events_all], group=g)
        for name, args in m.predicates:
            a = dict(args)
            optional = bool(a.pop("optional", False))
            # blame_only: the lines matched are what the victims print (a lost connection); the culprit is only
            # the rank(s) this predicate names, never the reporting ranks themselves.
            victims_only = victims_only or bool(a.pop("blame_only", False))
            # evidence_first: the predicate's lines (e.g. where a stuck rank stopped) are quoted before the matched ones
            lead_pred = lead_pred or bool(a.pop("evidence_first", False))
            res = PREDICATES[name](ctx, **a)
            if res is None:
                if optional:
                    continue
                return None
            for k, v in res.bound.items():
                bound.setdefault(k, v)
            if res.ranks:
                pred_ranks = res.ranks if pred_ranks is None else pred_ranks
            pred_ev.extend(res.evidence)
        event_ranks = tuple(sorted(ranks))
        if pred_ranks is not None:
            ranks = set(pred_ranks)
        elif victims_only:
            ranks = set()
        if not ranks:
            # Capture groups named rank_<x> are ranks the message itself names (``rank 1 and rank 0``): they
            # blame those ranks when the matched lines carry no rank prefix of their own.
            for k, v in bound.items():
                if k.startswith("rank_") and str(v).isdigit():
                    ranks.add(int(v))
        key_item = min(chosen, key=order) if chosen else None
        key_ev = key_item[1] if key_item else (pred_ev[0] if pred_ev else None)
        ordered_events: list[Event] = []
        if key_ev is not None:
            ordered_events.append(key_ev)
        seen_ids = {id(ev) for ev in ordered_events}
        for ev in [it[1] for it in chosen] + pred_ev + [it[1] for it in events_all]:
            if id(ev) not in seen_ids:
                seen_ids.add(id(ev))
                ordered_events.append(ev)
        if not ordered_events:
            return None
        hosts = set()
        for ev in ordered_events:
            if ev.host:
                hosts.add(ev.host)
        for r in ranks:
            info = builder.job.ranks.get(r)
            if info is not None and info.host:
                hosts.add(info.host)
        if ranks:
            bound.setdefault("rank", sorted(ranks)[0])
            bound.setdefault("ranks", ", ".join(map(str, sorted(ranks))))
        if hosts:
            bound.setdefault("host", sorted(hosts)[0])
        key = ordered_events[0]
        for ev in ordered_events[:4]:
            for fname, v in ev.fields.items():
                if v is not None and not isinstance(v, (list, dict, tuple)) and len(str(v)) < 200:
                    bound.setdefault(fname, v)
        seq = key_item[0] if key_item else 0
        if lead_pred and pred_ev:
            lead = {id(ev) for ev in pred_ev}
            evidence = quote(pred_ev + [ev for ev in ordered_events if id(ev) not in lead], bound)
        else:
            evidence = quote(ordered_events, bound)
        count = sum(len(v) for i, v in per_slot.items() if i in all_idx or i in any_idx)
        return Hit(rule=rule, group=g, events=ordered_events, seq=seq, time=time_key(key.time),
                   ranks=tuple(sorted(ranks)), hosts=tuple(sorted(hosts)), bound=bound, evidence=evidence, count=count,
                   event_ranks=event_ranks, victims_only=victims_only and pred_ranks is None)


def _resolved(item: tuple[int, Event, dict[str, Any], Any], sl: _Slot) -> tuple[int, Event, dict[str, Any], Any]:
    """``item`` with its ``_match_text`` (kept as ``_LAZY``) found again: the slot's selector tests the event again."""
    caps = item[2]
    if caps.get("_match_text") is not _LAZY:
        return item
    again = sl.selector.test(item[1], {}) or {}
    caps = {k: (again.get("_match_text") if v is _LAZY else v) for k, v in caps.items()}
    return (item[0], item[1], caps, item[3])


_LABEL_LINE = re.compile(r"^(?:\[\w+\d*\]:\s?)?[A-Za-z][\w ]{0,30}:\s*$")
_EXC_LINE = re.compile(r"^(?:\[\w+\d*\]:\s?)?(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Interrupt|Exit)\b\w*:")


def key_line(ev: Event, bound: dict[str, Any] | None = None) -> Evidence:
    """The most telling single line of an event: for a traceback its exception line, for a regex match on the
    body the line that matched; else the event's first line."""
    lines = event_lines(ev)
    if len(lines) > 1:
        target = (bound or {}).get("_match_text")
        idx = None
        if target:
            tl = [t for t in str(target).split("\n") if t.strip()]
            # A label line ("Last error:") is not the telling line: the one after it is.
            if len(tl) > 1 and _LABEL_LINE.match(tl[0]):
                tl = tl[1:]
            first = tl[0] if tl else ""
            for i, line in enumerate(lines):
                if first and first in line:
                    idx = i
                    break
        if idx is None and ev.kind.startswith("python."):
            for i in range(len(lines) - 1, -1, -1):
                if _EXC_LINE.match(lines[i]):
                    idx = i
                    break
        if idx is not None:
            exc_line = ev.fields.get("exc_line")
            if isinstance(exc_line, int) and lines[idx] == ev.fields.get("exc_text"):
                return Evidence(ev.path, exc_line, lines[idx])
            numbers = ev.fields.get("line_numbers")
            if numbers and idx < len(numbers):
                return Evidence(ev.path, numbers[idx], lines[idx])
            return Evidence(ev.path, ev.line + idx, lines[idx])
    return Evidence(ev.path, ev.line, ev.text)


def quote(events: list[Event], bound: dict[str, Any] | None = None) -> tuple[Evidence, ...]:
    """Evidence lines: the key event's telling line first, then one per further event (deduplicated)."""
    out: list[Evidence] = []
    seen: set[str] = set()
    for i, ev in enumerate(events):
        ln = key_line(ev, bound if i == 0 else None)
        norm = re.sub(r"^\[[^\]]*\] ?|^\S+:\d+:\d+ ", "", ln.text)
        if norm in seen:
            continue
        seen.add(norm)
        out.append(ln)
        if len(out) >= EVIDENCE_CAP:
            break
    return tuple(out)


def _cancel_same_rank(per_slot: dict[int, list[tuple[int, Event, dict[str, Any]]]], none_idx: list[int],
                      builder: "JobBuilder") -> dict[int, list[tuple[int, Event, dict[str, Any]]]]:
    """``none_scope = "rank"``: a ``none`` match cancels the matches of its own rank only (a match of no known rank:
    those of its input file). Returns the other slots' matches that stay."""
    ranks: set[int] = set()
    paths: set[str] = set()
    for i in none_idx:
        for it in per_slot.get(i, ()):
            r = builder.rank_of(it[1])
            if r is not None:
                ranks.add(r)
            paths.add(it[1].path)
    if not paths:
        return per_slot
    out = {}
    for i, items in per_slot.items():
        if i in none_idx:
            continue
        keep = []
        for it in items:
            r = builder.rank_of(it[1])
            if not (r in ranks if r is not None else it[1].path in paths):
                keep.append(it)
        out[i] = keep
    return out
