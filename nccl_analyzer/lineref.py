"""Evidence kept by reference: (path, line) of a file that can be read again, the text read back when a report (or
a predicate) asks for it.

Each rank's first error (``RankInfo.first_error``) is a quoted line, ~250 bytes of text at 1,000 ranks on 1,000
ranks; where the input is a file whose lines are what the reader made of its bytes (``sources.plain_raw``: not
standard input, not a paste that paste.py rewrites, not binary at its head), the job model keeps only where the
line is. The text comes back from the same reader (``sources.read_text_blocks``, numbered as ``read_text_lines``
numbers lines, cut as it cuts them) and the same cleaning (``clean.clean_text``'s ``raw``): the text the event had,
byte for byte. All the lines asked for in one file are read in one pass (the first time one is asked for), then
kept: the report needs them all.

Standard input and live input are not files that can be read again: their evidence stays whole (``ref`` returns it
as it is).
"""
from __future__ import annotations

import zlib
from array import array
from typing import Any

from .errors import InputError
from .model import Evidence
from .sources import MAX_LINE, Source, clean_text, open_binary, read_text_blocks


class LineRefs:
    """The files whose lines may be kept by reference (one analysis: ``JobBuilder.lines``), the line numbers asked
    for so far (8 bytes each) and, once read, their texts."""

    __slots__ = ("_srcs", "_want", "_crc", "_got")

    def __init__(self) -> None:
        self._srcs: dict[str, Source | None] = {}  # path -> the file (None: two inputs of one path: never by reference)
        self._want: dict[str, array] = {}  # path -> line numbers referred to, not read yet
        self._crc: dict[str, array] = {}  # path -> the CRC-32 of each of those lines' text (4 bytes a line)
        self._got: dict[str, dict[int, str]] = {}  # path -> line -> text, read

    def register(self, src: Source) -> None:
        """``src`` is a file read by the plain reader (``sources.plain_raw``): its lines may be referred to."""
        have = self._srcs.get(src.path, src)
        self._srcs[src.path] = src if have is src or (have is not None and have.real == src.real) else None

    def ref(self, ev: Evidence) -> Any:
        """``ev``, or a reference to its line where its file can be read again."""
        if self._srcs.get(ev.path) is None or ev.line < 1:
            return ev
        want = self._want.get(ev.path)
        if want is None:
            want = self._want[ev.path] = array("q")
            self._crc[ev.path] = array("I")
        want.append(ev.line)
        self._crc[ev.path].append(_crc(ev.text))
        return LineEvidence(ev.path, ev.line, self)

    def resolve(self) -> None:
        """Read back every line referred to and not read yet (``JobBuilder.build``: at the end of the input, while
        the files are surely there; the report needs the texts)."""
        for path in [p for p, w in self._want.items() if w]:
            self._read(path)

    def text(self, path: str, line: int) -> str:
        got = self._got.get(path)
        if got is None or line not in got:
            self._read(path)
            got = self._got[path]
        return got[line]

    def _read(self, path: str) -> None:
        """Read every line of ``path`` asked for so far, in one pass, as the reader numbered and cut them."""
        src = self._srcs[path]
        assert src is not None
        crcs = dict(zip(self._want.pop(path, ()), self._crc.pop(path, ())))
        wanted = set(crcs)
        marks = sorted(wanted)  # (to skip a block holding none of them without testing each)
        at = 0
        got = self._got.setdefault(path, {})
        probe = Source(path=src.path, real=src.real)  # (cut-line warnings go to a copy, not to the input's)
        try:
            stream = open_binary(probe)
        except OSError as exc:
            raise InputError(f"{path}: cannot be read again for the evidence it holds ({exc.strerror or exc})") from None
        n = 0
        try:
            for item in read_text_blocks(stream, probe):
                if not wanted:
                    break
                if item.__class__ is str:
                    k = item.count("\n") + 1  # type: ignore[union-attr]
                    while at < len(marks) and marks[at] <= n:
                        at += 1
                    if at == len(marks) or marks[at] > n + k:
                        n += k
                        continue
                    for s in item.split("\n"):  # type: ignore[union-attr]
                        n += 1
                        if n in wanted:
                            cut = len(s) > MAX_LINE
                            got[n] = clean_text(s[:MAX_LINE] if cut else s, probe, n, cut).raw
                            wanted.discard(n)
                else:
                    n += 1
                    if n in wanted:
                        got[n] = clean_text(item[0], probe, n, item[1]).raw  # type: ignore[index]
                        wanted.discard(n)
        finally:
            stream.close()
        if wanted or any(_crc(got[n]) != c for n, c in crcs.items()):
            # never quote a line other than the one read: the file was cut or rewritten while it was analyzed
            raise InputError(f"{path}: changed while it was analyzed (its lines are not those read); analyze a copy "
                             "that stays as it is")


def _crc(text: str) -> int:
    return zlib.crc32(text.encode("utf-8", "replace"))


class LineEvidence:
    """An ``Evidence`` whose text is read back from its file when asked for (``LineRefs``): 56 bytes instead of the
    evidence and its text. Reads, compares and serialises as the ``Evidence`` it stands for."""

    __slots__ = ("path", "line", "_refs")

    def __init__(self, path: str, line: int, refs: LineRefs) -> None:
        self.path, self.line, self._refs = path, line, refs

    @property
    def text(self) -> str:
        return self._refs.text(self.path, self.line)

    def evidence(self) -> Evidence:
        return Evidence(self.path, self.line, self.text)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "text": self.text}

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Evidence, LineEvidence)):
            return (self.path, self.line, self.text) == (other.path, other.line, other.text)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.path, self.line, self.text))

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (Evidence, (self.path, self.line, self.text))  # (pickled as the evidence it stands for)

    def __repr__(self) -> str:
        return f"LineEvidence(path={self.path!r}, line={self.line}, text=...)"
