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
from .prefilter import flat, formula, meets, required
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
    #: re: what any match needs in full (``prefilter.formula``: all of an alternative's literals, ``flat``), when that
    #: says more than ``need``; tested after it, before the regex
    strict: Any = None

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
            if self.strict is not None and not meets(self.strict, v):
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
            if self.strict is not None and not meets(self.strict, s):
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
#: Slot lists a dispatch remembers by the literals present (past this many it starts over).
PICKED_CAP = 256


def field_need(sel: Selector) -> tuple[str, frozenset[str]] | None:
    """A field and the literals one of which its value must contain for ``sel`` to accept an event: the
    ``body_need``, else the first ``~regex`` test's with a prefilter on any field (``msg`` on NCCL INFO lines). A
    value without one fails that test (``FieldTest.check``: its prefilter; a missing field fails a ``~`` test)."""
    got = body_need(sel)
    if got is not None:
        return "body", got
    for t in sel.tests:
        if t.op == "re" and t.need is not None:
            return t.field, frozenset(t.need)
    return None


_NONE: frozenset[str] = frozenset()


class KindDispatch:
    """The slots whose kind globs accept one event kind (in the matcher's order), with their prefilters merged per
    field (``field_need``): each literal any of them needs is looked for in an event's field once, and only the
    slots one of whose literals is there (or that need none) are tested. The same slots accept the same events as
    testing them all.

    Which digit-free literals a value holds is remembered by its shape (its digit runs each made one ``0``): such a
    literal is in a value exactly when it is in the value's shape (it lies between two digit runs of both)."""

    __slots__ = ("slots", "_gates", "_fields", "_lits", "_picked")

    def __init__(self, slots: list[Any]):
        self.slots = slots
        self._gates = [field_need(sl.selector) for sl in slots]
        #: field -> (its literals, the digit-free ones, the ones with digits, shape -> the digit-free ones it holds)
        self._fields: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], dict[str, frozenset[str]]]] = {}
        for f in dict.fromkeys(g[0] for g in self._gates if g is not None):
            lits = tuple(sorted({x for g in self._gates if g is not None and g[0] == f for x in g[1]}))
            self._fields[f] = (lits, tuple(x for x in lits if not _DIGITS.search(x)),
                               tuple(x for x in lits if _DIGITS.search(x)), {})
        self._lits = self._fields["body"][0] if "body" in self._fields else ()  # (tests read the body's)
        #: the literals present (per field, in ``_fields``' order) -> the slots they select (every rank's copy of
        #: a message holds the same ones: the list is made once, not one set test per slot per event)
        self._picked: dict[Any, list[Any]] = {}

    def select(self, ev: Event, memo: dict[str, Any]) -> list[Any]:
        """The slots worth testing ``ev`` against (``memo``: the event's virtual fields, shared with the tests)."""
        if not self._fields:
            return self.slots
        present: dict[str, frozenset[str]] = {}
        for f, (lits, plain_lits, digit_lits, shapes) in self._fields.items():
            v = memo[f] if f in memo else field_value(ev, f, memo)
            if v is None:
                present[f] = _NONE
                continue
            if v.__class__ is not str:
                v = str(v)
            if len(v) > SHAPE_LEN:
                present[f] = frozenset(x for x in lits if x in v)
                continue
            shape = _DIGITS.sub("0", v)
            plain = shapes.get(shape)
            if plain is None:
                if len(shapes) >= SHAPES_CAP:
                    shapes.clear()
                plain = shapes[shape] = frozenset(x for x in plain_lits if x in shape)
            present[f] = plain.union(x for x in digit_lits if x in v) if digit_lits else plain
        key = tuple(present.values()) if len(present) > 1 else present[f]
        got = self._picked.get(key)
        if got is None:
            if len(self._picked) >= PICKED_CAP:
                self._picked.clear()
            got = self._picked[key] = [sl for sl, g in zip(self.slots, self._gates)
                                       if g is None or not g[1].isdisjoint(present[g[0]])]
        return got

    @property
    def _shapes(self) -> dict[str, frozenset[str]]:
        """The body shapes remembered (tests)."""
        return self._fields["body"][3] if "body" in self._fields else {}


def _strict(rx: re.Pattern[str]) -> Any:
    """``rx``'s whole requirement (``prefilter.formula``) when it asks more than one literal of a set (some
    alternative needs two literals or more: an ``&``), else None (``need`` says as much)."""
    f = formula(rx)

    def has_and(x: Any) -> bool:
        return x.__class__ is not str and (x[0] == "&" or any(has_and(p) for p in x[1]))

    return flat(f) if f is not None and has_and(f) else None


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
            need = required(rx)
            return FieldTest(name, "nre" if neg else "re", rx, need=need,
                             strict=None if neg else _strict(rx))
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
