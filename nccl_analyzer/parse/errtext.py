"""Error lines no grammar owns (crash reports, shell/launcher/MPI messages, nccl-tests, other bindings) -> ``error.text``.

Which lines these are is data (``messages/text.toml``: a keyword prefilter, then one regex per family); this
parser only says what the line is (``family`` + the regex's named groups). What each family means is read by
the fail-safe from the same table.
"""
from __future__ import annotations

from ..messages import Tables, load_tables
from ..model import Event, Line


class ErrorTextParser:
    """``feed(line)`` -> ``[Event]`` for a recognised error line, else None (stateless, one line at a time)."""

    __slots__ = ("_tables",)

    def __init__(self, tables: Tables | None = None):
        self._tables = tables or load_tables()

    def feed(self, line: Line) -> list[Event] | None:
        text = line.text
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
