"""What rule evaluation reads of the matches the rule engine keeps, slot by slot, derived from the loaded rules.

    python benchmarks/slot_reads.py LOG        # e.g. /tmp/nccl-bench-real-2.28-1000r.log

Reads LOG in one process (as ``state_size.py`` does), then, for every rule slot that kept matches, prints what
``engine/hit.py``'s evaluation reads of them (``group_hit`` and ``_cancel_same_rank``), from the rule's own
``[match]`` table and its predicates' code:

- ``all`` / ``any`` slots: every kept event is a candidate evidence line (``quote`` deduplicates their texts until
  ``EVIDENCE_CAP`` distinct ones: how many it reads depends on the texts), every one gives ranks (``rank_of`` at
  evaluation, when the pid -> rank map is complete) and hosts, the first of each capture name binds it, the first
  four ordered events' fields bind too; a predicate that reads ``ctx.events`` reads them all;
- ``none`` slots: only the group (``rank_of`` unless the rule groups by job) or, with ``none_scope = "rank"``, the
  rank and path of each match: never the text or the fields.

Then the bytes: the kept events that only ``none`` slots hold (what holding them as text-less records would save),
and the events that ``all``/``any`` slots of rules without an event-reading predicate hold (what would have to be
re-read from the file, by reference, to keep them out of memory).
"""
from __future__ import annotations

import inspect
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from nccl_analyzer.engine.predicate import PREDICATES  # noqa: E402
from state_size import deep_size, read  # noqa: E402


def reads_events(name: str) -> bool:
    """Whether predicate ``name`` reads the matched events (``ctx.events``) or only the job model."""
    fn = PREDICATES[name]
    try:
        src = inspect.getsource(fn)
    except (OSError, TypeError):
        return True  # unknown: assume it does
    # or passes ctx on to a helper, which may (counted as reading them)
    return "ctx.events" in src or "ctx)" in src or "ctx," in src


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    a = read(argv[0])
    m = a.matcher
    holders: dict[int, list[str]] = {}
    events: dict[int, object] = {}
    rows = []
    for st in m._states:
        rule = st.rule
        preds = [(n, reads_events(n)) for n, _ in rule.match.predicates]
        for sl in st.slots:
            if not sl.held:
                continue
            for ev in sl.held:
                holders.setdefault(id(ev), []).append(sl.part)
                events[id(ev)] = ev
            if sl.part == "none":
                need = "group key" if rule.match.group_by != "job" else "presence"
                if rule.match.none_scope == "rank":
                    need = "rank + path"
            else:
                need = "events (evidence texts, ranks, hosts, captures)"
                if any(r for _, r in preds):
                    need += "; predicate reads all"
            caps = any(t.op == "re" and t.value.groupindex for t in sl.selector.tests)
            rows.append((rule.id, f"{sl.part}{sl.index}", len(sl.held), rule.match.group_by, rule.match.none_scope,
                         ",".join(f"{n}{'*' if r else ''}" for n, r in preds) or "-", "yes" if caps else "no", need))
    rows.sort(key=lambda r: -r[2])
    print(f"{'rule/slot':<52}{'kept':>7}  group  none   captures  predicates (* reads ctx.events)  -> what evaluation reads")
    for rid, slot, n, g, ns, preds, caps, need in rows:
        print(f"{rid + '/' + slot:<52}{n:>7}  {g:<6} {ns:<6} {caps:<9} {preds:<34} {need}")
    seen: set[int] = set()
    deep_size(a.rules, seen)
    only_none = [events[i] for i, parts in holders.items() if all(p == "none" for p in parts)]
    b_none = sum(deep_size(e, seen) for e in only_none)
    print(f"\nevents kept: {len(events)} distinct; held by none slots only: {len(only_none)} ({b_none / 2**20:.2f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
