"""An NCCL WARN pasted without its prefix (the message alone) -> the ``nccl.warn.*`` event that WARN would be.

People paste only the text of a WARN ("NET/IB : Got completion from peer 10.0.0.2<43215> with error 12, opcode 0,
len 0, vendor err 129", "Error while creating shared memory segment /dev/shm/nccl-x (size 9637888)"): no
``host:pid:tid [dev] file:line NCCL WARN`` before it, so no NCCL grammar rule sees it. The line is that WARN when
it is the whole of one of NCCL's own WARN formats (any release 2.3.5 .. 2.30.7: ``messages/nccl_warn_formats.json``,
generated from the reference catalogue by benchmarks/warn_formats.py). Which formats take part is data; this module
only turns a printf format into a pattern and says what the line is. The source file, when every release printed the
format from one file, is what the catalogue says printed it (``file_from = "catalogue"``): the message tables
classify a WARN by its file (transport/shm.cc -> shm), and the text said nothing else about it.
"""
from __future__ import annotations

import json
import re
from functools import lru_cache

from ..model import Event, Line
from ..resources import messages_dir
from .nccl_body import parse_body
from .nccl_warn import _file_family

#: The file of formats (one ``[fmt, [files]]`` a row).
FORMATS_FILE = "nccl_warn_formats.json"
#: A pasted WARN is one line of at most a few hundred characters; longer lines are not looked at (regex cost).
MAX_LEN = 2048

_CONV = re.compile(r"%%|%[-+ #0]*(\*|\d+)?(?:\.(?:\*|\d+))?(?:hh|h|ll|l|z|j|t|L|q)?([diouxXeEfgGcspnm])|\{name\}")
_NUM = r"\s*[-+]?\d+"
_PATTERN = {"d": _NUM, "i": _NUM, "u": _NUM, "o": r"\s*\d+", "x": r"\s*(?:0x)?[0-9a-fA-F]+",
            "X": r"\s*(?:0x)?[0-9a-fA-F]+", "e": r"\s*[-+]?(?:[\d.]+(?:[eE][-+]?\d+)?|-?nan|-?inf)",
            "p": r"(?:0x[0-9a-fA-F]+|\(nil\)|0)", "c": r".", "n": ""}
_PATTERN.update(f=_PATTERN["e"], E=_PATTERN["e"], g=_PATTERN["e"], G=_PATTERN["e"])
_ANY = ".*?"
#: The key a format and a line are looked up by: the first word (after one opening bracket).
_KEY = re.compile(r"\[?([A-Za-z]+)")


def format_regex(fmt: str) -> re.Pattern[str]:
    """The pattern a whole message printed by printf format ``fmt`` matches (runs of ``%s`` become one ``.*?``)."""
    out: list[str] = []
    pos = 0
    for m in _CONV.finditer(fmt):
        out.append(re.escape(fmt[pos:m.start()]).replace("\\ ", r"\s+"))
        pos = m.end()
        tok = m.group(0)
        if tok == "%%":
            out.append("%")
            continue
        pat = _ANY if tok == "{name}" or m.group(2) in "sm" else _PATTERN[m.group(2)]  # %m: glibc's strerror(errno)
        if m.group(1) == "*" and pat != _ANY:
            pat = r"\s*" + pat
        if pat == _ANY and out and out[-1] == _ANY:
            continue  # "(%s)%s%s%s%s": one lazy run, not five (no backtracking blow-up on a line that fails)
        out.append(pat)
    out.append(re.escape(fmt[pos:]).replace("\\ ", r"\s+"))
    return re.compile("".join(out).rstrip() + r"\s*[.!]?", re.S)


@lru_cache(maxsize=1)
def _index() -> dict[str, tuple[tuple[str, tuple[str, ...]], ...]]:
    """First word -> the formats (and their files) that begin with it."""
    try:
        rows = json.loads((messages_dir() / FORMATS_FILE).read_text(encoding="utf-8"))["formats"]
    except (OSError, ValueError, KeyError):
        return {}
    index: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for fmt, files in rows:
        m = _KEY.match(fmt)
        if m:
            index.setdefault(m[1], []).append((fmt, tuple(files)))
    return {k: tuple(v) for k, v in index.items()}


@lru_cache(maxsize=4096)
def _compiled(fmt: str) -> re.Pattern[str]:
    return format_regex(fmt)


def match_bare_warn(text: str) -> tuple[str, tuple[str, ...]] | None:
    """``(format, files)`` of the NCCL WARN format that the whole of ``text`` is, or None."""
    body = text.strip()
    if len(body) > MAX_LEN:
        return None
    m = _KEY.match(body)
    if m is None:
        return None
    for fmt, files in _index().get(m[1], ()):
        if _compiled(fmt).fullmatch(body):
            return fmt, files
    return None


class BareWarnParser:
    """``feed(line)`` -> ``[Event]`` for a line that is an NCCL WARN message without its prefix, else None."""

    __slots__ = ()

    def feed(self, line: Line) -> list[Event] | None:
        found = match_bare_warn(line.text)
        if found is None:
            return None
        fmt, files = found
        msg = line.text.strip()
        kind, rank, cached = parse_body("WARN", msg)
        fields = dict(cached)
        if len({f.rsplit(".", 1)[0] for f in files}) == 1:
            # every release printed it from one file (net_ib.cu, renamed net_ib.cc, is one): the catalogue's file
            fields["file"] = files[0]
            fields["file_from"] = "catalogue"
            if kind == "nccl.warn.other":
                family = _file_family(files[0])
                if family:
                    kind = "nccl.warn." + family
        fields["prefix"] = "stripped"
        fields["format"] = fmt
        return [Event(kind=kind, path=line.path, line=line.lineno, text=line.raw, rank=line.rank if rank is None
                      else rank, time=line.time, fields=fields)]
