"""nccl-analyzer: tells why a multi-GPU (NCCL / torch.distributed) job died.

Library API (no torch, no printing, no exits; see docs/api.md)::

    from nccl_analyzer import analyze, load_events
    diagnosis = analyze("run.log")            # -> Diagnosis (see model.py); also Path, or a list of either
    df = load_events(["rank0.log", Path("rank1.log")])   # -> pandas.DataFrame, one row per event
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

__version__ = "0.1.0"
__all__ = ["analyze", "load_events", "iter_events", "__version__"]

if TYPE_CHECKING:  # pragma: no cover
    import pandas

    from .model import Diagnosis, Event
    from .sources import Inputs


def analyze(paths: "Inputs", **kwargs: Any) -> "Diagnosis":
    """Analyze logs and return the diagnosis.

    Args:
        paths: one input or a list of inputs, each a ``str`` or ``pathlib.Path``: a file (plain or ``.gz``), a
            folder of per-rank logs (searched recursively), a glob (``"logs/rank*.log"``), or ``"-"`` for
            standard input. A string is always one path.
        **kwargs: passed to ``analysis.analyze``: ``rules_dirs`` (extra rule folders, same forms as
            ``paths``), ``stdin_name``, ``rules``, ``workers``.

    Returns:
        The ``Diagnosis``: ``root_cause`` (None for a healthy log), ``findings``, ``job``, ``warnings``.

    Raises:
        InputError: a missing input, a glob matching nothing, or nothing to analyze (every input empty or
            binary). ``errors.AnalyzerError`` is the base class of everything the API raises on bad input.
        RuleError: an invalid rule file in ``rules_dirs``.
        TypeError: ``paths`` is neither a path nor a list of paths.
    """
    from .analysis import analyze as _analyze

    return _analyze(paths, **kwargs)


def load_events(paths: "Inputs", keep_text: bool = False) -> "pandas.DataFrame":
    """Parse inputs into a pandas DataFrame of events (needs pandas).

    Args:
        paths: as for ``analyze``.
        keep_text: also keep lines no grammar recognized (kind ``text``).

    Returns:
        One row per event; columns ``kind, path, line, end_line, host, pid, tid, rank, cuda_dev, time`` and
        one column per kind-specific field.

    Raises:
        InputError: as for ``analyze`` (an empty or binary input gives an empty frame, not an error).
        TypeError: as for ``analyze``.
    """
    from .export import events_dataframe

    return events_dataframe(paths, keep_text=keep_text)


def iter_events(paths: "Inputs", keep_text: bool = True, stdin_name: str = "-") -> Iterator["Event"]:
    """The typed events of ``paths``, streaming, in input order (see docs/events.md for the kinds).

    Args:
        paths: as for ``analyze``.
        keep_text: also yield ``text`` events for lines no grammar recognized.
        stdin_name: the name standard input gets in ``Event.path``.

    Yields:
        ``Event`` objects (``kind``, ``path``, ``line``, ``host``, ``rank``, ... and ``fields``).

    Raises:
        InputError, TypeError: as for ``analyze``.
    """
    from .export import iter_events as _iter_events

    return _iter_events(paths, keep_text=keep_text, stdin_name=stdin_name)
