"""Pasted logs -> the lines the program printed: undo what issue threads, forums and tickets do to a log.

People paste logs indented (2/4 spaces, tabs), quoted (``> ``, ``>> ``), inside Markdown fences (```` ``` ````,
``~~~``) or ``<details>``/``<pre>``, behind line-number gutters (``12 | ``, ``  12: ``, ``12<TAB>``),
HTML-escaped (``&lt;``), with GitHub's auto-links inside file names (``[net_ib.cc:101](http://net_ib.cc:101/)``),
hard-wrapped at the terminal width, with ``[...]`` / ``<snip>`` elisions, in reverse order, and with ranks
interleaved in the middle of a line. ``detect`` looks at the first ``SAMPLE_BYTES`` of a source and returns a
``Plan`` only when the text looks pasted, so a raw log keeps the plain fast path in ``sources.iter_source``.

A plan yields ``(lineno, text, raw, truncated)``: ``text`` is what the grammars should see, ``raw`` the line as
it is in the file (evidence quotes it), ``lineno`` its number in the file. Decoration lines (fences, tags) come
out as blank text (they end a block, as a blank line would); elisions are dropped so a traceback cut by
``[...]`` stays one block; a hard-wrapped line and its continuations come out once, under the first line's
number (its ``raw`` is that first line as it is in the file); a line that holds two ranks' output comes out once per part, both under its number.

The package, by responsibility: ``rx`` (the lazily compiled patterns), ``detect`` (``detect`` / ``plan_for``:
is a sample a paste, and of which form), ``plan`` (``Plan``: windows, decorations undone, indentation and
gutters), ``boundary`` (hard-wrapped lines rejoined, glued records split), ``order`` (bottom-up pastes).
"""
from __future__ import annotations

from .boundary import _wrap_width  # noqa: F401  (tests read it as paste._wrap_width)
from .detect import SAMPLE_BYTES, detect, plan_for
from .plan import WINDOW_LINES, Plan

__all__ = ["SAMPLE_BYTES", "WINDOW_LINES", "Plan", "detect", "plan_for"]
