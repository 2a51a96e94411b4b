"""Evaluation: one rule's matches in one group -> a ``Hit`` (bound values, blamed ranks and hosts, evidence)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..model import Event, Evidence, Finding
from .fix import make_fix, render_template, render_title
from .loader import Rule
from .predicate import PREDICATES, PredContext
from .slot import _LAZY, _RuleState, _Slot
from .virtual import event_lines

if TYPE_CHECKING:  # pragma: no cover
    from ..job import JobBuilder

#: Evidence lines quoted per finding.
EVIDENCE_CAP = 6


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


def group_hit(st: _RuleState, g: Any, per_slot: dict[int, list[tuple[int, Event, dict[str, Any]]]],
              builder: "JobBuilder", time_key: Any) -> Hit | None:
    """The hit of rule state ``st`` in group ``g`` (``per_slot``: slot index -> that group's matches), or None."""
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
    those of its input file; an agent's local-rank line where several agents are seen: none). Returns the other
    slots' matches that stay."""
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
    # A torchrun agent's line names its worker by LOCAL rank (``local_rank: K``); with several agents in the input
    # (nodes) the global rank it stands for is unknown (agents.py), so a traceback of global rank N is not known to be
    # that worker's: such a line is not cancelled by its input file (one agent: local rank = the input's ranks).
    several = len(builder.agents.agents) > 1
    out = {}
    for i, items in per_slot.items():
        if i in none_idx:
            continue
        keep = []
        for it in items:
            r = builder.rank_of(it[1])
            if r is None and several and it[1].fields.get("local_rank") is not None:
                keep.append(it)
            elif not (r in ranks if r is not None else it[1].path in paths):
                keep.append(it)
        out[i] = keep
    return out
