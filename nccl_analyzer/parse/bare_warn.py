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
#: A format (and a line) must begin with a word (after one opening bracket): its letters.
_KEY = re.compile(r"\[?([A-Za-z]+)")


#: A format alone on a line is read as NCCL's only with this many letters of its own text ("Error : %s" is too few).
MIN_LETTERS = 16


def letters(fmt: str) -> int:
    """The letters of a format's own text (conversions left out)."""
    return sum(c.isalpha() for c in _CONV.sub("", fmt))


def literal(fmt: str) -> int:
    """The characters of a format's own text, blanks and conversions left out (how specific a format is)."""
    return len("".join(_CONV.sub(" ", fmt).split()))


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
        if pat == _ANY and out and out[-1].endswith(r"\s+"):
            # " %s " printed with an empty string leaves two blanks, which a paste often makes one ("connecting to
            # address  with family 0"): the blank before the run may be the one after it
            out[-1] = out[-1][:-3] + r"\s*"
        out.append(pat)
    out.append(re.escape(fmt[pos:]).replace("\\ ", r"\s+"))
    return re.compile("".join(out).rstrip() + r"\s*[.!]?", re.S)


_Formats = tuple[tuple[str, str, tuple[str, ...]], ...]
#: Where a format's own leading text ends (its first conversion, or a run of spaces the pattern lets vary).
_LEAD_END = re.compile(r"%|\{name\}|\s{2,}")


def _lead(fmt: str) -> str:
    """The literal text a message of ``fmt`` starts with (a cheap ``startswith`` before the pattern)."""
    return _LEAD_END.split(fmt, 1)[0].rstrip()


#: At most this many leading words make a format's key (longer leads are cut to it).
_KEY_WORDS = 6


@lru_cache(maxsize=1)
def _index() -> tuple[dict[str, _Formats], dict[str, _Formats], frozenset[str]]:
    """The formats (with their leading text and files) by the whole words their leading text begins with (at most
    ``_KEY_WORDS``; a word the first conversion runs into, "status=%d", is left out); the few whose first word already
    runs into a conversion ("nvml%s() failed: %s") by that word's first two letters (tried by prefix)."""
    try:
        rows = json.loads((messages_dir() / FORMATS_FILE).read_text(encoding="utf-8"))["formats"]
    except (OSError, ValueError, KeyError):
        return {}, {}, frozenset()
    index: dict[str, list[tuple[str, str, tuple[str, ...]]]] = {}
    prefixed: dict[str, list[tuple[str, str, tuple[str, ...]]]] = {}
    for fmt, files in rows:
        m = _KEY.match(fmt)
        if m is None or letters(fmt) < MIN_LETTERS:
            continue  # a format that begins with a conversion ("%s: %s") or has few letters could be any line
        lead = _lead(fmt)
        words = lead.split()
        if len(lead) < len(fmt) and not fmt[len(lead)].isspace():
            words = words[:-1]  # the last word runs into the conversion: not whole
        if not words:
            prefixed.setdefault(m[1][:2], []).append((m[1], fmt, tuple(files)))
        else:
            index.setdefault(" ".join(words[:_KEY_WORDS]), []).append((lead, fmt, tuple(files)))
    first = frozenset(k.split(" ", 1)[0] for k in index)  # a line whose first word is none of these is no WARN
    return {k: tuple(v) for k, v in index.items()}, {k: tuple(v) for k, v in prefixed.items()}, first


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
    index, prefixed, first = _index()
    words = body.split(None, _KEY_WORDS)[:_KEY_WORDS]
    for k in range(len(words) if words[0] in first else 0, 0, -1):  # at most six dict lookups
        for lead, fmt, files in index.get(" ".join(words[:k]), ()):
            if body.startswith(lead) and _compiled(fmt).fullmatch(body):
                return fmt, files
    for key, fmt, files in prefixed.get(m[1][:2], ()):
        if m[1].startswith(key) and _compiled(fmt).fullmatch(body):
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
        families = {_file_family(f) for f in files}
        if len({f.rsplit(".", 1)[0] for f in files}) == 1 or (len(families) == 1 and None not in families):
            # every release printed it from one file (net_ib.cu, renamed net_ib.cc, is one), or from files of one
            # subsystem (net_ib.cc, split into net_ib/init.cc in 2.28): the catalogue's (first) file
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
