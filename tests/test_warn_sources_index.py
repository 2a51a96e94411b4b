"""``messages.warn_sources`` tries only the formats whose head a text starts with: it must give what trying every
format of the catalogue, most literal first, gives (the definition), on every format's own instances and on texts
that are near misses of them."""
from __future__ import annotations

import json
import re

import pytest

from nccl_analyzer import messages
from nccl_analyzer.parse.bare_warn import FORMATS_FILE, format_regex, literal
from nccl_analyzer.resources import messages_dir

_ROWS = json.loads((messages_dir() / FORMATS_FILE).read_text(encoding="utf-8"))["formats"]
_ALL = sorted(((format_regex(fmt), tuple(files), literal(fmt)) for fmt, files in _ROWS), key=lambda t: -t[2])
_VALUE = {"d": "12", "i": "-3", "u": "7", "o": "17", "x": "2a000", "X": "0x1F", "e": "1.5", "f": "0.25", "g": "3",
          "G": "4", "E": "2e5", "c": "q", "p": "0x7f00deadbeef", "n": "", "s": "NET/IB : mlx5_0", "m": "No such file"}
_CONV = re.compile(r"%%|%[-+ #0]*(\*|\d+)?(?:\.(?:\*|\d+))?(?:hh|h|ll|l|z|j|t|L|q)?([diouxXeEfgGcspnm])|\{name\}")


def _every_format(msg: str) -> tuple[str, ...]:
    msg = msg.strip()
    best = None
    files: set[str] = set()
    for rx, fs, n in _ALL:
        if best is not None and n < best:
            break
        if rx.fullmatch(msg):
            best = n
            files.update(fs)
    return tuple(sorted(files))


def _instance(fmt: str) -> str:
    return _CONV.sub(lambda m: "%" if m.group(0) == "%%" else _VALUE.get(m.group(2) or "s", "x"), fmt)


def _texts(rows: list) -> list[str]:
    out = []
    for fmt, _ in rows:
        t = _instance(fmt)
        out += [t, "  " + t + " ", t + ".", t[1:], "x" + t, t[:len(t) // 2], t.replace(" ", "   ", 1), t.lower()]
    return out


def test_the_catalogue_has_formats_of_every_head_class() -> None:
    formats, by_key, short = messages._warn_sources()
    assert len(formats) == len(_ROWS) > 500
    assert short and by_key  # formats with a head shorter than the key ("%s : ..."), and keyed ones


@pytest.mark.parametrize("chunk", range(8))
def test_indexed_lookup_is_the_full_lookup(chunk: int) -> None:
    rows = _ROWS[chunk::8]
    texts = _texts(rows)
    found = 0
    for t in texts:
        messages.warn_sources.cache_clear()
        got = messages.warn_sources(t)
        assert got == _every_format(t), t
        found += bool(got)
    assert found > len(rows)  # most instances are found: the comparison is not of empty results
