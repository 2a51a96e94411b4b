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


def required(rx: re.Pattern[str]) -> tuple[str, ...] | None:
    """Literals one of which every match of ``rx`` contains, or None when there is no useful set."""
    if rx.flags & re.IGNORECASE or not isinstance(rx.pattern, str):
        return None
    try:
        parsed = _sre.parse(rx.pattern, rx.flags)
    except Exception:  # noqa: BLE001 - the pattern compiled; a parser we cannot read means no prefilter
        return None
    got = _seq(list(parsed))
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
