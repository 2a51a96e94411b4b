"""Error lines no grammar owns (crash reports, shell/launcher/MPI messages, nccl-tests, other bindings) -> ``error.text``.

Which lines these are is data (``messages/text.toml``: a keyword prefilter, then one regex per family); this
parser only says what the line is (``family`` + the regex's named groups). What each family means is read by
the fail-safe from the same table.
"""
from __future__ import annotations

import re

from ..messages import Tables, load_tables
from ..model import Event, Line

#: Digit runs: a line's shape has each made one ``0`` (every rank's "[rank5]:step 120 loss 2.345" has one shape).
_DIGITS = re.compile(r"\d+")
#: Shapes remembered as holding no keyword (past this many it starts over), and the longest line whose shape is.
SHAPES_CAP = 1024
SHAPE_LEN = 512


class ErrorTextParser:
    """``feed(line)`` -> ``[Event]`` for a recognised error line, else None (stateless, one line at a time).

    A line that holds no keyword of the table is none of its entries (``Tables.match_text``'s prefilter). That is
    remembered by the line's shape: a keyword without digits is in a line exactly when it is in its shape (it lies
    between two digit runs of both); the keywords with digits are looked for in each line."""

    __slots__ = ("_tables", "_plain", "_digits", "_none")

    def __init__(self, tables: Tables | None = None):
        self._tables = tables or load_tables()
        kw = self._tables.text_keywords
        self._plain = tuple(k for k in kw if not _DIGITS.search(k))
        self._digits = tuple(k for k in kw if _DIGITS.search(k))
        self._none: set[str] = set()  # shapes of lines that held no digit-free keyword

    def feed(self, line: Line) -> list[Event] | None:
        text = line.text
        if len(text) <= SHAPE_LEN:
            shape = _DIGITS.sub("0", text)
            if shape in self._none:
                for k in self._digits:
                    if k in text:
                        break
                else:
                    return None
            else:
                for k in self._plain:
                    if k in shape:
                        break
                else:
                    if len(self._none) >= SHAPES_CAP:
                        self._none.clear()
                    self._none.add(shape)
        found = self._tables.match_text(text)
        if found is None:
            return None
        entry, m = found
        fields = {k: v for k, v in m.groupdict().items() if v is not None}
        fields["family"] = entry.name
        if text not in line.raw:
            # a paste form undone (HTML escapes, URL encoding): the evidence quotes the line as pasted, rules read
            # the text the program wrote (``body``)
            fields["unescaped"] = text
        return [Event("error.text", line.path, line.lineno, line.raw, rank=line.rank, time=line.time, fields=fields)]
