"""nccl-analyzer: tells why a multi-GPU (NCCL / torch.distributed) job died.

Library API (no torch, no printing)::

    from nccl_analyzer import analyze, load_events
    diagnosis = analyze(["run.log"])          # -> Diagnosis (see model.py)
    df = load_events(["run.log"])             # -> pandas.DataFrame, one row per event
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["analyze", "load_events", "__version__"]

if TYPE_CHECKING:  # pragma: no cover
    from .model import Diagnosis


def analyze(paths: list[str], **kwargs: Any) -> "Diagnosis":
    """Analyze files/dirs/globs (or "-") and return the Diagnosis."""
    from .analysis import analyze as _analyze

    return _analyze(list(paths), **kwargs)


def load_events(paths: list[str], keep_text: bool = False):
    """Parse inputs into a pandas DataFrame of events (columns: kind, path, line, host, pid, ... fields)."""
    from .export import events_dataframe

    return events_dataframe(list(paths), keep_text=keep_text)
