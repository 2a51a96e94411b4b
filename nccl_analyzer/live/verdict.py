"""The verdict side of live use: ``LiveAnalysis`` decides when to ask for a provisional root cause and
which to show; the provisional and final blocks it and the CLI print on stderr."""
from __future__ import annotations

import re
import time
from typing import Any, Callable

from ..model import Diagnosis, RootCause
from ..sources import Source, clean_line
from .stream import _TRUNCATED, TextOut


#: Seconds between provisional verdict checks while only ordinary events arrive (and while idle).
CHECK_INTERVAL = 0.5
#: Least seconds between two checks triggered by error-ish events (a traceback storm of 1000 ranks).
URGENT_GAP = 0.05
#: When the input has been quiet this long, close the multi-line events still open (``Analyzer.flush``).
#: The parsers hold a finished traceback open until a line that ends it arrives (a ``[rank2]:`` traceback
#: until rank 2 writes again) and hold the events after it back for order; a job that fails and then
#: hangs or restarts would otherwise show nothing until the end. A process writes a traceback in one go,
#: so 2 s of silence means it is complete.
IDLE_FLUSH = 2.0
#: A provisional block is shown this long after the check that found it, if the input has not ended by
#: then: torchrun tears a failed job down within a fraction of a second, and a block printed just
#: before the final verdict would only repeat it.
SHOW_DELAY = 0.3
#: At most this many provisional blocks per run; after that only the final verdict.
MAX_BLOCKS = 5
#: A new block for the same root cause needs at least this much more confidence.
CONFIDENCE_STEP = 0.15

_ERRORISH = re.compile(r"warn|err|traceback|timeout|elastic|fail|exception|abort|signal|exit|kill|mismatch|"
                       r"oom|refused|closed|reset|desync")


class LiveAnalysis:
    """Feeds lines to an ``Analyzer`` and prints a provisional verdict block when a root cause shows.

    ``provisional()`` is asked right after an error-ish event (warn, error, traceback, timeout, elastic,
    ...; at most every ``URGENT_GAP`` s), otherwise at most every ``CHECK_INTERVAL`` s, and from ``idle()``
    while no input arrives. A block is printed once, and again only for a different root cause or one
    with clearly higher confidence (``CONFIDENCE_STEP``), ``MAX_BLOCKS`` times at most.
    """

    def __init__(self, analyzer: Any, out: "TextOut", *, color: bool = False,
                 note: str = "provisional: more output may change it",
                 clock: Callable[[], float] = time.monotonic):
        self.analyzer = analyzer
        self.out = out
        self.color = color
        self.note = note
        self.lines = 0
        self.blocks = 0
        self.shown: RootCause | None = None
        self._pending: tuple[RootCause, int, float] | None = None  # (root, lines, found at)
        self._clock = clock
        self._last = clock()
        self._dirty = False
        self._urgent = False
        self._kind_cache: dict[str, bool] = {}
        self._last_line = self._last
        self._fed_at_batch = 0
        self._settled = True  # nothing fed since the last idle flush

    def feed_raw(self, src: Source, raw: bytes) -> None:
        """Clean one raw line of ``src`` (numbering it) and analyze it."""
        src.lines += 1
        if raw.endswith(_TRUNCATED):
            src.note_cut(src.lines)
        self.feed(clean_line(raw, src, src.lines))

    def feed(self, line: Any) -> None:
        self.lines += 1
        self._settled = False
        self._events(self.analyzer.feed(line))

    def _events(self, events: list) -> None:
        if not events:
            return
        self._dirty = True
        cache = self._kind_cache
        for ev in events:
            hot = cache.get(ev.kind)
            if hot is None:
                hot = cache[ev.kind] = bool(_ERRORISH.search(ev.kind))
            if hot:
                self._urgent = True
                break
        now = self._clock()
        gap = now - self._last
        if gap >= CHECK_INTERVAL or (self._urgent and gap >= URGENT_GAP):
            self._check(now)
        if self._pending is not None:
            self._show(now)

    def idle(self) -> None:
        """Call after each batch of lines and while input pauses.

        Runs a check that was held back, shows a block whose ``SHOW_DELAY`` passed, and after
        ``IDLE_FLUSH`` s of silence closes what the parsers hold open.
        """
        if not self._settled:
            now = self._clock()
            if self.lines != self._fed_at_batch:
                self._fed_at_batch = self.lines
                self._last_line = now
            elif now - self._last_line >= IDLE_FLUSH:
                self._settled = True
                self._events(self.analyzer.flush())
        if self._dirty:
            now = self._clock()
            gap = now - self._last
            if gap >= CHECK_INTERVAL or (self._urgent and gap >= URGENT_GAP):
                self._check(now)
        if self._pending is not None:
            self._show(self._clock())

    def _check(self, now: float) -> None:
        self._last = now
        self._dirty = self._urgent = False
        if self.blocks >= MAX_BLOCKS:
            return
        root = self.analyzer.provisional()
        if root is None:
            self._pending = None
            return
        if _better(root, self.shown):
            if self._pending is None or root != self._pending[0]:
                self._pending = (root, self.lines, now)
        else:
            self._pending = None

    def _show(self, now: float) -> None:
        root, lines, found = self._pending  # type: ignore[misc]
        if now - found < SHOW_DELAY:
            return
        self._pending = None
        self.shown = root
        self.blocks += 1
        self.out.text(format_provisional(root, lines, note=self.note, color=self.color))

    def finish(self) -> Diagnosis:
        """The final Diagnosis; a provisional block not shown yet is dropped (the final verdict follows)."""
        self._pending = None
        return self.analyzer.finish()


def _better(new: RootCause, old: RootCause | None) -> bool:
    if old is None:
        return True
    if new.id != old.id:
        return True
    return new.confidence >= old.confidence + CONFIDENCE_STEP


_BOLD, _RED, _YELLOW, _DIM, _RESET = "\x1b[1m", "\x1b[31m", "\x1b[33m", "\x1b[2m", "\x1b[0m"
_RULE = "─" * 72


def format_provisional(root: RootCause, lines: int, *, note: str, color: bool = False) -> str:
    """The block printed on stderr while the job still runs (plain text; ANSI colour with ``color``)."""
    head = f"nccl-analyze ── root cause so far: {root.id} (after {lines:,} lines) "
    head += "─" * max(3, 72 - len(head))
    body = [f"  {root.title}  (confidence {root.confidence:.2f})"]
    where = []
    if root.ranks:
        where.append("rank" + ("s " if len(root.ranks) > 1 else " ") + ", ".join(map(str, root.ranks[:16]))
                     + (" ..." if len(root.ranks) > 16 else ""))
    if root.hosts:
        where.append("host" + ("s " if len(root.hosts) > 1 else " ") + ", ".join(root.hosts[:8])
                     + (" ..." if len(root.hosts) > 8 else ""))
    if where:
        body.append("  " + "; ".join(where))
    for ev in root.evidence[:3]:
        text = ev.text if len(ev.text) <= 160 else ev.text[:157] + "..."
        body.append(f"  {ev.path}:{ev.line}: {text}")
    if root.fix and root.fix.summary:
        body.append(f"  fix: {root.fix.summary}")
    body.append(f"  ({note})")
    if color:
        head = f"{_BOLD}{_YELLOW}{head}{_RESET}"
        return "\n" + head + "\n" + "\n".join(body) + f"\n{_YELLOW}{_RULE}{_RESET}\n\n"
    return "\n" + head + "\n" + "\n".join(body) + "\n" + _RULE + "\n\n"


def format_final(diagnosis: Diagnosis, lines: int, *, verbose: bool = False, color: bool = False,
                 note: str = "") -> str:
    """The final verdict, framed so it stands out from the job's own output."""
    from .. import render

    text = render.render(diagnosis, "text", verbose=verbose, color=color)
    head = f"nccl-analyze ══ verdict ({lines:,} lines{'; ' + note if note else ''}) "
    head += "═" * max(3, 72 - len(head))
    if color:
        tint = _RED if diagnosis.root_cause else _BOLD
        head = f"{_BOLD}{tint}{head}{_RESET}"
    if not text.endswith("\n"):
        text += "\n"
    return "\n" + head + "\n" + text
