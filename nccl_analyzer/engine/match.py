"""Event selectors: a kind glob (or list of globs) and field tests (equality, ``~regex``, numeric), compiled
from a rule's ``[[match.*]]`` tables. Field access lives in virtual.py, the predicates in predicate.py and the
modules it registers; their names are re-exported here for the importers of the old single module."""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from typing import Any

from ..model import Event
from .collective import MAX_LOCAL_WORKERS, _lagging_bound, _missing_ranks, _unlisted_workers  # noqa: F401
from .predicate import PREDICATES, PredContext, PredResult, _odd_ones, _rank_list, _who, predicate  # noqa: F401
from .prefilter import required
from .virtual import VIRTUAL_FIELDS, event_lines, field_value  # noqa: F401


_NUM_OP = re.compile(r"^(>=|<=|>|<|==|!=)\s*(-?\d+(?:\.\d+)?)$")


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


def body_need(sel: Selector) -> frozenset[str] | None:
    """The literals one of which an event's ``body`` must contain for ``sel`` to accept it (its first ``~regex``
    test on ``body`` fails without one: ``FieldTest.check``'s prefilter), or None when no test says."""
    for t in sel.tests:
        if t.op == "re" and t.field == "body" and t.need is not None:
            return frozenset(t.need)
    return None


#: Digit runs, for the shape of a body (every rank's copy of one message differs in its numbers only).
_DIGITS = re.compile(r"\d+")
#: Body shapes whose literals a dispatch remembers (per kind; past this many it starts over), and the longest body
#: it remembers one of.
SHAPES_CAP = 64
SHAPE_LEN = 4096


class KindDispatch:
    """The slots whose kind globs accept one event kind (in the matcher's order), with their body prefilters
    merged: each literal any of them needs is looked for in an event's body once, and only the slots one of whose
    literals is there (or that need none) are tested. The same slots accept the same events as testing them all.

    Which digit-free literals a body holds is remembered by its shape (its digit runs each made one ``0``): such a
    literal is in a body exactly when it is in the body's shape (it lies between two digit runs of both)."""

    __slots__ = ("slots", "_gates", "_lits", "_plain", "_digits", "_shapes")

    def __init__(self, slots: list[Any]):
        self.slots = slots
        self._gates = [body_need(sl.selector) for sl in slots]
        self._lits = tuple(sorted({x for g in self._gates if g is not None for x in g}))
        self._plain = tuple(x for x in self._lits if not _DIGITS.search(x))
        self._digits = tuple(x for x in self._lits if _DIGITS.search(x))
        self._shapes: dict[str, frozenset[str]] = {}

    def select(self, ev: Event, memo: dict[str, Any]) -> list[Any]:
        """The slots worth testing ``ev`` against (``memo``: the event's virtual fields, shared with the tests)."""
        if not self._lits:
            return self.slots
        body = memo["body"] if "body" in memo else field_value(ev, "body", memo)
        if len(body) > SHAPE_LEN:
            present = {x for x in self._lits if x in body}
        else:
            shape = _DIGITS.sub("0", body)
            plain = self._shapes.get(shape)
            if plain is None:
                if len(self._shapes) >= SHAPES_CAP:
                    self._shapes.clear()
                plain = self._shapes[shape] = frozenset(x for x in self._plain if x in shape)
            present = plain.union(x for x in self._digits if x in body) if self._digits else plain
        if not present:
            return [sl for sl, g in zip(self.slots, self._gates) if g is None]
        return [sl for sl, g in zip(self.slots, self._gates) if g is None or not g.isdisjoint(present)]


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


def kind_matches(globs: tuple[str, ...], kind: str) -> bool:
    """fnmatch over several globs (used by tests and rule tooling)."""
    return any(fnmatch.fnmatchcase(kind, g) for g in globs)
