"""Predicates that blame the ranks a message itself names ("... from rank 0", "Ranks 1, 3 failed to ...")."""
from __future__ import annotations

import re
from typing import Any

from .match import PredContext, PredResult, _rank_list, _who, field_value, predicate

_NUMS = re.compile(r"(\d+)(?:\s*-\s*(\d+))?")
#: The most ranks one message may name (a range "0-100000" in a corrupt line must not build a huge tuple).
MAX_NAMED = 4096


@predicate
def ranks_in_text(ctx: PredContext, regex: str = "", **args: Any) -> PredResult | None:
    """The ranks that group 1 of ``regex`` names in the matched events' text ("3", "1, 3", "0-7, 9"): a message
    that says who failed (gloo's monitoredBarrier, a launcher's "task 3 exited"). Fails when none names one."""
    rx = re.compile(regex)
    named: set[int] = set()
    evidence = []
    for ev in ctx.events:
        body = field_value(ev, "body")
        m = rx.search(str(body or ""))
        if m is None or not m.groups() or m.group(1) is None:
            continue
        for a, b in _NUMS.findall(m.group(1)):
            lo = int(a)
            hi = int(b) if b else lo
            if hi < lo or hi - lo > MAX_NAMED:
                continue
            named.update(range(lo, hi + 1))
            if len(named) > MAX_NAMED:
                return None
        evidence.append(ev)
    if not named:
        return None
    ranks = tuple(sorted(named))
    return PredResult(bound={"named_ranks": _rank_list(ranks), "named_who": _who(ranks)}, ranks=ranks,
                      evidence=evidence[:1])
