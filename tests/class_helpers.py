"""Helpers shared by the class test files (tests/test_classes_session*.py)."""
from __future__ import annotations

from nccl_analyzer.analysis import analyze_text


def root(log: str):
    """The diagnosis of ``log`` (read as pasted text) and its root cause id (None: no failure)."""
    d = analyze_text(log)
    return d, (d.root_cause.id if d.root_cause else None)
