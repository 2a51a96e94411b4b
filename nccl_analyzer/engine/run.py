"""Streaming matcher: events -> per-rule capped evidence -> rule hits (with bound values) at the end."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ..model import Event
from ..packed import FULL_KEEP, LONG_EVENT, pack
from .fix import RENAMED_ENV, make_fix, render_template, render_title  # noqa: F401  (re-exported)
from .hit import EVIDENCE_CAP, Hit, group_hit, key_line, quote  # noqa: F401  (re-exported)
from .loader import Rule
from .match import KindDispatch
from .slot import _NO_CAPS, CAP_KEYS, CAP_PER_KEY, _RuleState, _Slot, none_record  # noqa: F401  (re-exported)

if TYPE_CHECKING:  # pragma: no cover
    from ..job import JobBuilder


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
        self._dispatch: dict[str, KindDispatch] = {}  # kind -> its slots and their merged body prefilter (match.py)
        self._slot_state: dict[int, _RuleState] = {}
        for st in self._states:
            for sl in st.slots:
                self._slot_state[id(sl)] = st
        self.seq = 0
        #: what the slots hold for the event ``add`` saw last (it, or it packed; None: no slot kept it)
        self.held_last: Any = None
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
        d = self._dispatch.get(ev.kind)
        if d is None:
            d = KindDispatch(self._slots_for(ev.kind))
            if len(self._dispatch) < 100000:
                self._dispatch[ev.kind] = d
        if not d.slots:
            self.held_last = None
            return
        memo: dict[str, Any] = {}
        slots = d.select(ev, memo)
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
            self.held_last = None
            return
        held: Any = ev
        if all(sl.part == "none" for sl, _, _ in took):
            # only ``none`` slots keep it: evaluation reads its group, rank and path, never its text or fields
            held = none_record(ev)
            self.held_last = None
        else:
            if all(sl.stored >= FULL_KEEP for sl, _, _ in took) or len(ev.fields.get("lines") or ()) > LONG_EVENT:
                # nccl_analyzer/packed.py: every slot holds the same object, whole or packed (a block of many lines
                # packed at once: torchrun's ChildFailedError traceback lists every failed rank, 7 lines each)
                held = packed if packed is not None else pack(ev)
            self.held_last = held
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
        seq, ev, caps = keep.seqs[i], keep.held[i], None if keep.caps is None else keep.caps[i]
        keep.clear()
        keep.kcount[first] = 0
        keep.put(seq, ev, _NO_CAPS if caps is None else dict(zip(caps[0], caps[1:])), first)
        keep.stored -= 1  # (``put`` counts it again)
        gone = {id(sl) for sl in st.slots}
        for kind, lst in self._by_kind.items():
            if any(id(sl) in gone for sl in lst):
                self._by_kind[kind] = [sl for sl in lst if id(sl) not in gone]
        self._dispatch.clear()  # (rebuilt from ``_by_kind`` as kinds come)

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
        return group_hit(st, g, per_slot, builder, time_key)
