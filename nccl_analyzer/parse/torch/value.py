"""Tuning limits, the signal and size tables, and the small token -> value helpers the transformers share."""
from __future__ import annotations

import re
from typing import Any

MAX_BLOCK_LINES = 200  # lines kept in fields["lines"] of one multi-line event
_IDLE_LINES = 400  # an unfinished traceback that saw nothing for this many input lines is closed
_CACHE_MAX = 8192

_SIGNUM = {"SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGILL": 4, "SIGTRAP": 5, "SIGABRT": 6, "SIGBUS": 7,
           "SIGFPE": 8, "SIGKILL": 9, "SIGUSR1": 10, "SIGSEGV": 11, "SIGUSR2": 12, "SIGPIPE": 13,
           "SIGALRM": 14, "SIGTERM": 15, "SIGXCPU": 24}
_SIGNAME = {v: k for k, v in _SIGNUM.items()}
_UNITS = {"B": 1, "bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "PiB": 1 << 50,
          "EiB": 1 << 60, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}


def _int(tok: Any) -> int:
    return int(str(tok))


def _size_bytes(size: str) -> int | None:
    m = re.match(r"(\d+(?:\.\d+)?) ?(\w+)", size)
    if not m or m.group(2) not in _UNITS:
        return None
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def _signame(name: str) -> str:
    return name.split(".", 1)[1] if name.startswith("Signals.") else name


def _split_hostport(addr: str) -> tuple[str | None, int | None]:
    """``[::]:29500`` / ``0.0.0.0:29500`` / ``[node0]:29500`` / ``100.64.0.1:59782`` -> host, port."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        return addr or None, None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host or None, int(port)


def _pg(children: list) -> tuple[dict, list]:
    """Split the leading process-group prefix dicts from the other children."""
    pg: dict[str, Any] = {}
    rest = []
    for c in children:
        if isinstance(c, dict) and c.get("_pg"):
            pg.update(c)
        else:
            rest.append(c)
    pg.pop("_pg", None)
    return pg, rest


def _text(tok: Any) -> str | None:
    if tok is None:
        return None
    s = str(tok).strip()
    return s or None


# ``raise RuntimeError("text")`` / ``raise errors.ConfigError(f"...")`` / ``raise ValueError`` -- a class (its last
# dotted part capitalised), not ``raise exc`` / ``raise self.error`` / a bare ``raise`` (those do not name the type)
_RAISE = re.compile(r"raise\s+(?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*)\s*(?:$|\(|from\b)")
_RAISE_LITERAL = re.compile(r"""\(\s*[rRuUfFbB]{0,2}(?P<q>["'])(?P<text>.*)(?P=q)\s*(?:[,)%]|\.format\b)""")
# ``assert cond, "text"`` raises AssertionError with that text (``assert cond`` with none)
_ASSERT = re.compile(r"""assert\b\s*(?P<cond>.*?)(?:,\s*[rRuUfFbB]{0,2}(?P<q>["'])(?P<text>.*)(?P=q)\s*)?$""")


def raise_statement(code: Any) -> tuple[str, str] | None:
    """A frame's source line that is a ``raise`` of a named exception class (or an ``assert``) -> (class, message
    literal or "").

    Python's traceback shows, for its innermost frame, the line that raised: when the exception line itself is not in
    the input (the output or the paste was cut after the frames), a ``raise Name(...)`` there still says what was raised
    (and a failed ``assert`` raises AssertionError).
    """
    if not isinstance(code, str):
        return None
    m = _RAISE.match(code.strip())
    if m is None:
        a = _ASSERT.match(code.strip())
        return ("AssertionError", a.group("text") or "") if a and a.group("cond") else None
    lit = _RAISE_LITERAL.match(code.strip(), m.end() - 1) if code.strip()[m.end() - 1:m.end()] == "(" else None
    return m.group("type"), (lit.group("text") if lit else "")
