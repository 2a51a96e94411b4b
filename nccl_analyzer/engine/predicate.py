"""The predicate registry (``PREDICATES``, ``@predicate``): what a predicate sees and returns, and the
rank-naming helpers predicates share. Importing it registers every predicate module (collective, config, hang,
named, attempts)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from ..model import Event
from ..ranks import rank_ranges

if TYPE_CHECKING:  # pragma: no cover
    from ..job import JobBuilder


@dataclass(slots=True)
class PredContext:
    """What a predicate sees: the job model builder and the events this rule matched in this group."""

    builder: "JobBuilder"
    events: list[Event]
    group: Any = None


@dataclass(slots=True)
class PredResult:
    """A passing predicate: values for the fix text, the ranks it blames, and evidence events."""

    bound: dict[str, Any] = field(default_factory=dict)
    ranks: tuple[int, ...] = ()
    evidence: list[Event] = field(default_factory=list)


Predicate = Callable[..., "PredResult | None"]
PREDICATES: dict[str, Predicate] = {}


def predicate(fn: Predicate) -> Predicate:
    """Register a predicate under its function name."""
    PREDICATES[fn.__name__] = fn
    return fn


def _odd_ones(key: dict[int, Any]) -> tuple[list[list[int]], tuple[int, ...] | None]:
    """The ranks grouped by what each called (largest group first), and the odd ones out: every rank outside the
    largest group, where that group is a strict majority. With no majority (1 vs 1, 2 vs 2) the log cannot tell
    which side is wrong: None, and every rank stays named."""
    by_key: dict[Any, list[int]] = {}
    for r in sorted(key):
        by_key.setdefault(key[r], []).append(r)
    groups = sorted(by_key.values(), key=lambda rs: (-len(rs), rs[0]))
    if len(groups[0]) > len(groups[1]):
        return groups, tuple(sorted(r for rs in groups[1:] for r in rs))
    return groups, None


def _who(ranks: tuple[int, ...]) -> str:
    """"rank 3" or "ranks 0-7, 9": ``_rank_list`` with its noun."""
    return f"rank{'s' if len(ranks) > 1 else ''} {_rank_list(ranks)}"


def _rank_list(ranks: tuple[int, ...]) -> str:
    """"3", "3, 5" or "0-7, 9" for a bound value read by a person."""
    return rank_ranges(ranks, ", ")


from . import collective as _collective  # noqa: E402,F401  (registers the collective and culprit predicates)
from . import config as _config  # noqa: E402,F401  (registers the job-setup predicates)
from . import hang as _hang  # noqa: E402,F401  (registers the hang predicates)
from . import named as _named  # noqa: E402,F401  (registers the named-rank predicates)
from . import attempts as _attempts  # noqa: E402,F401  (registers the torchelastic restart predicates)
