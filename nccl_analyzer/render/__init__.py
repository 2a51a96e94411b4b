"""Renderers: one Diagnosis -> text, json, markdown or html (strings; nothing here prints or recomputes)."""
from __future__ import annotations

from ..model import Diagnosis

FORMATS = ("text", "json", "markdown", "html")


def render(diagnosis: Diagnosis, fmt: str, *, verbose: bool = False, color: bool = False) -> str:
    """Render ``diagnosis`` in ``fmt`` (text | json | markdown | html).

    Args:
        diagnosis: the one Diagnosis every format reads.
        fmt: output format.
        verbose: text only: add all findings, the cascade and the per-rank summary.
        color: text only: ANSI colour (the CLI decides: tty, NO_COLOR, FORCE_COLOR, TERM=dumb).

    Raises:
        ValueError: unknown format.
    """
    if fmt == "text":
        from .text import render_text

        return render_text(diagnosis, verbose=verbose, color=color)
    if fmt == "json":
        from .json import render_json

        return render_json(diagnosis)
    if fmt in ("markdown", "md"):
        from .markdown import render_markdown

        return render_markdown(diagnosis)
    if fmt == "html":
        from .html import render_html

        return render_html(diagnosis)
    raise ValueError(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")


def render_text(diagnosis: Diagnosis, *, verbose: bool = False, color: bool = False) -> str:
    return render(diagnosis, "text", verbose=verbose, color=color)


def render_json(diagnosis: Diagnosis) -> str:
    return render(diagnosis, "json")


def render_markdown(diagnosis: Diagnosis) -> str:
    return render(diagnosis, "markdown")


def render_html(diagnosis: Diagnosis) -> str:
    return render(diagnosis, "html")
