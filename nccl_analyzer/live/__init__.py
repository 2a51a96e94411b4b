"""Live use: pass a job's output through unchanged while analyzing it; say the verdict as soon as it shows.

The package, by responsibility: ``stream`` (the byte side: chunks cut into lines, the stdout pass-through,
our stderr output), ``verdict`` (``LiveAnalysis``: when to check, what to show; the provisional and final
blocks), ``pipe`` (``run_pipe``: stdin read chunk by chunk, the stop signals, ``Interrupted``).
"""
from __future__ import annotations

from .pipe import _make_analyzer  # noqa: F401  (launch.py reads it as live._make_analyzer)
from .pipe import Interrupted, StopFlag, catch_stop_signals, run_pipe, stop_signals
from .stream import _PassThrough  # noqa: F401  (launch.py reads it as live._PassThrough)
from .stream import CHUNK, LineSplitter, TextOut
from .verdict import (CHECK_INTERVAL, CONFIDENCE_STEP, IDLE_FLUSH, MAX_BLOCKS, SHOW_DELAY, URGENT_GAP, LiveAnalysis,
                      format_final, format_provisional)

__all__ = ["CHECK_INTERVAL", "CHUNK", "CONFIDENCE_STEP", "IDLE_FLUSH", "MAX_BLOCKS", "SHOW_DELAY", "URGENT_GAP",
           "Interrupted", "LineSplitter", "LiveAnalysis", "StopFlag", "TextOut", "catch_stop_signals", "format_final",
           "format_provisional", "run_pipe", "stop_signals"]
