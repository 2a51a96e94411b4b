"""The fail-safe: every error-level line is evidence of a finding or ``dismissed`` with a reason; a log with an
unaccounted error line never gets "no failure" (it gets a low-confidence root cause inferred from that line).

What a line means comes from the message tables (``messages/*.toml``, ``messages.py``); ``ledger.py`` keeps the
ledger of error lines (``ErrorLedger``, re-exported here) and settles those the input explains; this module does
the bookkeeping at the end (``account``: each line is evidence, dismissed, or the root cause inferred from it).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .ledger import CAP, ErrorLedger, _Err, _TRACE  # noqa: F401 (re-exported: callers import them from here)
from .model import Dismissed, Evidence, Fix, RootCause

if TYPE_CHECKING:  # pragma: no cover
    from .diagnose import Verdict

#: Dismissal groups listed in the output (the rest are counted in ``stats.error_lines``).
LIST_CAP = 50
#: Lines quoted per dismissal group.
QUOTE_CAP = 5
#: Confidence of a root cause inferred from one unrecognised line (a specific id / ``other``-like ids).
INFERRED_CONFIDENCE = 0.4
INFERRED_CONFIDENCE_VAGUE = 0.3
_VAGUE = frozenset({"other", "peer_exit", "watchdog_timeout"})


def _evidence(e: _Err) -> Evidence:
    return Evidence(e.path, e.line, e.text)


def _clip(text: str, n: int = 110) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


def account(ledger: ErrorLedger, verdict: "Verdict") -> tuple[RootCause | None, list[Dismissed], dict[str, int]]:
    """Match every kept error line to the findings' evidence; the rest is dismissed or, with no root cause,
    becomes one (inferred, low confidence). Returns (root cause, dismissed groups, counts for ``stats``)."""
    cited: set[tuple[str, int]] = set()
    lines_by_path: dict[str, list[int]] = {}
    findings = list(verdict.findings)
    # With no root cause, a consequence (cascade) finding explains nothing: its lines still need a cause.
    for f in (findings if verdict.root is not None else ()):
        for ev in f.evidence:
            cited.add((ev.path, ev.line))
            lines_by_path.setdefault(ev.path, []).append(ev.line)
    if verdict.root is not None:
        for ev in verdict.root.evidence:
            cited.add((ev.path, ev.line))
            lines_by_path.setdefault(ev.path, []).append(ev.line)
    cited_keys: set[str] = set()
    loose: list[_Err] = []
    errs = sorted(ledger.errors, key=lambda e: e.seq)
    for e in errs:
        if e.settled is None and _is_cited(e, cited, lines_by_path):
            cited_keys.add(e.key)
    evidence_n = 0
    for e in errs:
        if e.settled is not None:
            continue
        if e.key in cited_keys or _is_cited(e, cited, lines_by_path):
            evidence_n += 1
        elif e.kind == _TRACE and e.parent is not None and e.parent.settled is None:
            continue  # decided with its WARN below
        else:
            loose.append(e)
    for e in errs:  # the traces of a WARN that is evidence are evidence too
        if e.kind == _TRACE and e.parent is not None and e.settled is None and e.parent.settled is None \
                and (e.parent.key in cited_keys or _is_cited(e.parent, cited, lines_by_path)):
            cited_keys.add(e.key)
            evidence_n += 1
    root = verdict.root
    used: set[int] = set()
    if root is None and loose:
        root, used = _infer(loose)
        traces = {e.seq for e in errs if e.kind == _TRACE and e.parent is not None and e.parent.seq in used}
        used |= traces
        evidence_n += len(used)
    groups: dict[tuple[str, str], list[_Err]] = {}
    for e in errs:
        if e.seq in used:
            continue
        reason = e.settled
        if reason is None:
            if e.key in cited_keys or _is_cited(e, cited, lines_by_path):
                continue
            cause = f"{root.id} ({root.rule or 'inferred'})" if root is not None else "none"
            reason = (f"not cited by a finding: the table reads it as {e.meaning.id} ({e.meaning.entry}); the root "
                      f"cause, {cause}, rests on other lines")
        groups.setdefault((reason, e.key), []).append(e)
    out = []
    for (reason, _), members in sorted(groups.items(), key=lambda kv: (kv[1][0].path, kv[1][0].line, kv[0][0])):
        first = members[0]
        out.append(Dismissed(tuple(_evidence(m) for m in members[:QUOTE_CAP]), reason, len(members),
                             first.meaning.id if first.meaning.harmless is None else None))
    counts = {"seen": ledger.seen, "kept": len(ledger.errors), "evidence": evidence_n,
              "dismissed": sum(d.count for d in out), "dismissed_groups": len(out), "listed": min(len(out), LIST_CAP)}
    return root, out[:LIST_CAP], counts


def _is_cited(e: _Err, cited: set[tuple[str, int]], lines_by_path: dict[str, list[int]]) -> bool:
    if (e.path, e.line) in cited:
        return True
    if e.end > e.line:
        return any(e.line <= n <= e.end for n in lines_by_path.get(e.path, ()))
    return False


def _infer(loose: list[_Err]) -> tuple[RootCause, set[int]]:
    """A root cause from unaccounted error lines: the first line with a specific meaning (else the first line),
    with the other lines of the same meaning as further evidence."""
    # a teardown line (torchrun's SIGTERMs, a proxy losing its local rank) is a consequence: any other line first
    cands = [e for e in loose if not e.meaning.teardown] or loose
    # a specific id first; then one that still says something (a peer exited, a timeout) over "other"
    best = next((e for e in cands if e.meaning.id not in _VAGUE), None) \
        or next((e for e in cands if e.meaning.id not in (None, "other")), cands[0])
    tid = best.meaning.id or "other"
    every = [e for e in loose if e.meaning.id == tid]
    same = every[:QUOTE_CAP]
    if best not in same:
        same = [best, *same[: QUOTE_CAP - 1]]
    # every rank / host that printed a line of this meaning, not only the quoted ones
    ranks = tuple(sorted({e.rank for e in (*every, best) if e.rank is not None}))
    hosts = tuple(sorted({e.host for e in (*every, best) if e.host}))
    conf = INFERRED_CONFIDENCE_VAGUE if tid in _VAGUE else INFERRED_CONFIDENCE
    note = f" ({best.meaning.note})" if best.meaning.note else ""
    explanation = (f"No rule recognised this failure, but the log has an error line that nothing explains. The "
                   f"message table entry {best.meaning.entry} classifies it as {tid}{note}. This verdict rests on "
                   f"that line alone: read it (and the lines around it) before acting on it.")
    fix = Fix(summary="No specific fix: the cause is inferred from an unrecognised error line. Read the quoted line; "
                      "rerun with NCCL_DEBUG=INFO (and TORCH_DISTRIBUTED_DEBUG=DETAIL) for more context.")
    root = RootCause(id=tid, title=f"Inferred from an unrecognised error line: {_clip(_body_text(best))}",
                     confidence=conf, ranks=ranks, hosts=hosts, evidence=tuple(_evidence(e) for e in same),
                     explanation=explanation, fix=fix, rule=f"failsafe:{best.meaning.entry}")
    return root, {e.seq for e in (*every, best)}


def _body_text(e: _Err) -> str:
    return e.body.strip() or e.text.strip()
