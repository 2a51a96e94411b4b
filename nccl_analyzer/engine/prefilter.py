"""Literal prefilters for rule regexes: substrings one of which every match must contain.

A rule's ``field = "~regex"`` test runs against every event its kind glob accepts; on a big job that is one
``re.search`` per rule per torch event (tens of thousands, on bodies of kilobytes), and almost all fail. If every
match of the regex contains one of a few literal strings, a ``str.__contains__`` per literal (C speed) rejects the
event first; the regex only runs where one of them is present. Sound by construction: ``required`` only returns
literals that any match includes, so a value without all of them cannot match (``in`` tests the whole value, a
superset of any match). Case-insensitive patterns, and patterns whose required text is shorter than ``MIN_LEN``,
get no prefilter.
"""
from __future__ import annotations

import re
from typing import Any

try:  # Python 3.11+
    import re._parser as _sre  # type: ignore[import-not-found]
    from re._constants import BRANCH, IN, LITERAL, MAX_REPEAT, MIN_REPEAT, SUBPATTERN  # type: ignore
except ImportError:  # pragma: no cover - older Pythons
    import sre_parse as _sre  # type: ignore[no-redef]
    from sre_constants import BRANCH, IN, LITERAL, MAX_REPEAT, MIN_REPEAT, SUBPATTERN  # type: ignore

#: Shortest literal worth a prefilter (a 1-2 character test would pass almost every value).
MIN_LEN = 3
#: Most alternatives a prefilter tests (more and the ``in`` tests cost what the regex does).
MAX_ALTS = 32


def _parsed(rx: re.Pattern[str]) -> list[tuple[Any, Any]] | None:
    """``rx``'s parse tree (the ``re`` module's own parser), or None when no literal test can stand for it: a
    case-insensitive or bytes pattern, or one the parser cannot read (it compiled: no prefilter then)."""
    if rx.flags & re.IGNORECASE or not isinstance(rx.pattern, str):
        return None
    try:
        return list(_sre.parse(rx.pattern, rx.flags))
    except Exception:  # noqa: BLE001 - a parser we cannot read means no prefilter
        return None


def required(rx: re.Pattern[str]) -> tuple[str, ...] | None:
    """Literals one of which every match of ``rx`` contains, or None when there is no useful set."""
    parsed = _parsed(rx)
    if parsed is None:
        return None
    got = _seq(parsed)
    if got is None or not got or len(got) > MAX_ALTS or min(len(s) for s in got) < MIN_LEN:
        return None
    return got


def _better(a: tuple[str, ...] | None, b: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """The more selective of two candidate sets (longest shortest literal, then fewer alternatives)."""
    if a is None or len(a) > MAX_ALTS:
        return b if b is not None and len(b) <= MAX_ALTS else None
    if b is None or len(b) > MAX_ALTS:
        return a
    ka, kb = (min(map(len, a)), -len(a)), (min(map(len, b)), -len(b))
    return b if kb > ka else a


def _seq(items: list[tuple[Any, Any]]) -> tuple[str, ...] | None:
    """Required set of a sequence: its best literal run, or the best required set of one of its parts."""
    best: tuple[str, ...] | None = None
    run: list[str] = []

    def close() -> None:
        nonlocal best, run
        if run:
            best = _better(best, ("".join(run),))
            run = []

    for op, av in items:
        if op is LITERAL:
            run.append(chr(av))
            continue
        if op is IN and len(av) == 1 and av[0][0] is LITERAL:  # [x]: one literal character
            run.append(chr(av[0][1]))
            continue
        close()
        if op is SUBPATTERN:
            add_flags = av[1]
            if add_flags & re.IGNORECASE:
                return None  # (?i:...) inside: give up rather than reason about case folding
            best = _better(best, _seq(list(av[3])))
        elif op is BRANCH:
            alts: list[str] = []
            for branch in av[1]:
                got = _seq(list(branch))
                if got is None:
                    alts = []
                    break
                alts.extend(got)
            else:
                best = _better(best, tuple(dict.fromkeys(alts)) if alts else None)
        elif op in (MAX_REPEAT, MIN_REPEAT):
            lo, _hi, sub = av
            if lo >= 1:
                best = _better(best, _seq(list(sub)))
        # anything else (classes, anchors, lookarounds, back-references): no literal, the run is broken
    close()
    return best


# -- the whole requirement (every literal a match needs, per alternative) ----------------------------------------
#
# ``required`` keeps ONE set of literals (the best one) and any of them lets a value through: for an alternation it
# is one literal per alternative, so a body that holds any alternative's most common word reaches the regex
# (``torch-invalid-argument``'s 25 alternatives include ``ProcessGroup``, which every watchdog record names: at
# 1,000 ranks ~10,000 searches of kilobyte bodies that all fail). ``formula`` keeps what each alternative needs in
# full: ALL of its literal runs (a sequence needs each of its parts), ANY of an alternation's alternatives. A value
# for which the formula is false cannot hold a match (each literal is in the match, hence in the value).

#: Most literals a formula holds (past that, none is kept: its tests would cost what the regex does).
MAX_FORMULA = 256

def formula(rx: re.Pattern[str]) -> Any:
    """What every match of ``rx`` needs: a literal (str), ``("&", parts)`` (each part) or ``("|", parts)`` (one of
    them); None when it needs nothing a literal test can see (or the formula would be too big)."""
    parsed = _parsed(rx)
    if parsed is None:
        return None
    got = _f_seq(parsed)
    if got is None or _size(got) > MAX_FORMULA:
        return None
    return got


def _size(f: Any) -> int:
    return 1 if f.__class__ is str else sum(_size(p) for p in f[1])


def _f_join(op: str, parts: list[Any]) -> Any:
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    if op == "&":  # the longest literal first: the likeliest to be missing, so the test stops soonest
        parts = sorted(parts, key=lambda p: -len(p) if p.__class__ is str else 0)
    return (op, tuple(parts))


def _f_seq(items: list[tuple[Any, Any]]) -> Any:
    """A sequence needs each of its parts: its literal runs (``MIN_LEN`` characters or more) and what its
    groups, alternations and repeats of at least one need."""
    parts: list[Any] = []
    run: list[str] = []

    def close() -> None:
        if len(run) >= MIN_LEN:
            parts.append("".join(run))
        run.clear()

    for op, av in items:
        if op is LITERAL:
            run.append(chr(av))
            continue
        if op is IN and len(av) == 1 and av[0][0] is LITERAL:
            run.append(chr(av[0][1]))
            continue
        close()
        got = None
        if op is SUBPATTERN:
            if not av[1] & re.IGNORECASE:  # (?i:...): it needs nothing this test can see
                got = _f_seq(list(av[3]))
        elif op is BRANCH:
            alts = [_f_seq(list(b)) for b in av[1]]
            if all(a is not None for a in alts):
                got = _f_join("|", alts)
        elif op in (MAX_REPEAT, MIN_REPEAT) and av[0] >= 1:
            got = _f_seq(list(av[2]))
        # anything else (classes, anchors, lookarounds, back-references): needs nothing testable, breaks the run
        if got is not None:
            parts.append(got)
    close()
    return _f_join("&", parts)


def flat(f: Any) -> tuple[tuple[tuple[str, ...], ...], ...]:
    """Formula ``f`` as alternatives of clauses of literals (``meets``): a value meets it when, for some alternative,
    each of its clauses has one of its literals in the value. Deeper nesting is weakened (an ``&`` inside an
    alternation of a clause stands for its first part): what ``f`` accepts, ``flat(f)`` accepts."""
    alts = f[1] if f.__class__ is not str and f[0] == "|" else (f,)
    return tuple(tuple(_clauses(a)) for a in alts)


def _clauses(f: Any) -> list[tuple[str, ...]]:
    if f.__class__ is str:
        return [(f,)]
    if f[0] == "&":
        return [c for p in f[1] for c in _clauses(p)]
    return [_clause(f)]


def _clause(f: Any) -> tuple[str, ...]:
    if f.__class__ is str:
        return (f,)
    if f[0] == "&":
        return _clause(f[1][0])  # (one part of it is needed: a weaker test)
    return tuple(dict.fromkeys(x for p in f[1] for x in _clause(p)))


def meets(alts: tuple[tuple[tuple[str, ...], ...], ...], v: str) -> bool:
    """Whether ``v`` meets flattened formula ``alts`` (``flat``): false means its regex cannot match in ``v``."""
    for clauses in alts:
        for clause in clauses:
            for x in clause:
                if x in v:
                    break
            else:
                break
        else:
            return True
    return False
