"""Event field access for selectors and predicates: stored fields, event attributes and the virtual fields
(``body``, ``exc``, ``frames_text``, ``frames_code``, ``last_frame_file`` ...) computed from an event."""
from __future__ import annotations

import re
from typing import Any

from ..model import Event


#: Fields computed from an event rather than read from ``Event.fields`` (see docs in the rule README).
VIRTUAL_FIELDS = ("body", "text", "exc", "frames_text", "frames_code", "last_frame_file", "last_frame_func", "kind")


def event_lines(ev: Event) -> list[str]:
    """All verbatim lines of an event (multi-line events keep them in ``fields['lines']``)."""
    lines = ev.fields.get("lines")
    if isinstance(lines, (list, tuple)) and lines:
        return [str(x) for x in lines]
    return [ev.text]


def field_value(ev: Event, name: str, memo: dict[str, Any] | None = None) -> Any:
    """A field, an event attribute, or a virtual field (``body``, ``exc``, ``last_frame_file`` ...)."""
    if name not in VIRTUAL_FIELDS:
        return ev.get(name)
    if memo is not None and name in memo:
        return memo[name]
    if name == "text":
        v: Any = ev.text
    elif name == "kind":
        v = ev.kind
    elif name == "body":
        parts = event_lines(ev)
        body = "\n".join(parts)
        for f in ("msg", "message", "what", "error", "last_error", "detail", "cuda_error", "unescaped"):
            x = ev.fields.get(f)
            if isinstance(x, str) and x and x not in body:
                body += "\n" + x
        for c in ev.fields.get("chain") or []:
            if isinstance(c, dict):
                x = f"{c.get('exc_type', '')}: {c.get('message', '')}"
                if x not in body:
                    body += "\n" + x
        v = body
    elif name == "exc":
        et, msg = ev.fields.get("exc_type"), ev.fields.get("message")
        v = f"{et}: {msg}" if et else None
    elif name == "frames_code":
        # the source lines Python printed under the frames (what each frame was executing), one per line
        codes = [str(f.get("code")) for f in ev.fields.get("frames") or [] if isinstance(f, dict) and f.get("code")]
        v = "\n".join(codes) if codes else None
    else:
        frames = [_frame(f) for f in ev.fields.get("frames") or []]
        frames = [f for f in frames if f is not None]
        if name == "frames_text":
            v = "\n".join(f"{f[0]}:{f[1]}" for f in frames) if frames else None
        elif not frames:
            v = None
        else:
            v = frames[-1][0] if name == "last_frame_file" else frames[-1][1]
    if memo is not None:
        memo[name] = v
    return v


def _frame(fr: Any) -> tuple[str, str] | None:
    if isinstance(fr, dict):
        return (str(fr.get("file") or fr.get("path") or fr.get("filename") or ""),
                str(fr.get("func") or fr.get("function") or fr.get("name") or ""))
    if isinstance(fr, (list, tuple)) and len(fr) >= 3:
        return str(fr[0]), str(fr[2])
    if isinstance(fr, str):
        m = re.search(r'File "([^"]+)", line \d+, in (\S+)', fr)
        if m:
            return m.group(1), m.group(2)
    return None
