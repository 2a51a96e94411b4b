"""Inputs -> clean ``Line`` objects: files, directories, globs, .gz, stdin (the cleaning of dirty text and wrapper
prefixes: clean.py)."""
from __future__ import annotations

import glob
import gzip
import itertools
import os
import re
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator, Union

from . import paste
from .binary import SNIFF_BYTES, ELF_WHY, sniff_binary
from .clean import _clean_full, clean_text, printable  # noqa: F401 (the line cleaning; re-exported as before)
from .errors import InputError
from .model import Line

#: Longest line kept; the rest of a longer line is dropped (and the line marked truncated).
MAX_LINE = 64 * 1024


_LOGDIR_RANK = re.compile(r"attempt_\d+/(\d+)/(?:stdout|stderr)\.log$")
_RANK_IN_NAME = re.compile(r"(?:^|[._/-])rank[_-]?(\d+)(?:[._/-]|$)")


@dataclass(slots=True)
class Source:
    """One input stream. ``local_rank`` comes from a torchrun ``--log-dir`` path (attempt_N/<rank>/)."""

    path: str  # as shown to the user; "-" or --stdin-name for standard input
    real: str | None  # filesystem path, None for stdin
    local_rank: int | None = None
    rank: int | None = None
    lines: int = 0
    warnings: list[str] = field(default_factory=list)
    srun: bool = False  # an srun --label prefix was seen: every later "N: " head is one (continuation lines too)
    binary: str | None = None  # why the start looks binary (the lines are still read: text may follow junk)
    skipped: str | None = None  # why nothing was read at all (an ELF file / core dump)
    events: int = 0  # events the analysis got from this source (set at its end; decides a binary's fate)
    cut_lines: int = 0  # lines longer than MAX_LINE, cut to it
    first_cut: int = 0  # 1-based number of the first such line (0: none)
    fast: bool = True  # raw lines may take the fast path (triage.py); False where lines are rewritten first
    nodes: frozenset[str] = frozenset()  # pdsh's node labels taken off its lines (paste.Plan.nodes): a multi-node run

    def note_cut(self, lineno: int) -> None:
        """Count one over-long line cut to ``MAX_LINE`` (``lineno``: its number in this source)."""
        self.cut_lines += 1
        if not self.first_cut:
            self.first_cut = lineno

    def finish_warnings(self) -> None:
        """Turn the counts gathered while reading into the source's warnings (once, at its end)."""
        if self.cut_lines:
            msg = (f"{self.cut_lines} line(s) longer than {MAX_LINE // 1024} KiB cut to {MAX_LINE // 1024} KiB "
                   f"(first: {self.path}:{self.first_cut}); the rest of each was not analyzed")
            if msg not in self.warnings:
                self.warnings.append(msg)
        if self.skipped is None and self.lines == 0 and "input is empty" not in self.warnings:
            self.warnings.append("input is empty")

    def finish_binary(self) -> None:
        """The warning for a source whose start looked binary, once its events are counted."""
        if self.binary is None or self.skipped is not None:
            return
        if self.events:
            msg = f"starts like binary data ({self.binary}); analyzed the {self.events} event(s) found in its text"
        else:
            msg = f"skipped: {self.binary}"
        if msg not in self.warnings:
            self.warnings.append(msg)

    @property
    def analyzable(self) -> bool:
        """Whether the source gave the analysis anything: lines, and events too when it looked binary."""
        return self.skipped is None and self.lines > 0 and (self.binary is None or self.events > 0)


#: What the library API takes as inputs: one path (str or os.PathLike) or an iterable of them.
Inputs = Union[str, "os.PathLike[str]", Iterable[Union[str, "os.PathLike[str]"]]]


def as_specs(inputs: Inputs) -> list[str]:
    """Normalize the API's inputs to a list of path strings: ``"run.log"``, ``Path("run.log")``, or a list of
    either (``"-"`` is standard input). A bare string is one path, never a sequence of characters.

    Raises:
        TypeError: something that is neither a path nor an iterable of paths (bytes included).
    """
    if isinstance(inputs, (str, os.PathLike)):
        return [os.fspath(inputs)]
    if isinstance(inputs, (bytes, bytearray)):
        raise TypeError("inputs: give a path as str or pathlib.Path, not bytes")
    try:
        items = list(inputs)
    except TypeError:
        raise TypeError(f"inputs: expected a path or a list of paths, got {type(inputs).__name__}") from None
    out = []
    for item in items:
        if not isinstance(item, (str, os.PathLike)):
            raise TypeError(f"inputs: expected paths (str or pathlib.Path), got {type(item).__name__}: {item!r}")
        out.append(os.fspath(item))
    return out


def expand_inputs(specs: list[str] | tuple[str, ...], stdin_name: str = "-") -> list[Source]:
    """Resolve files, directories (recursively), globs and ``-`` into sources, in a stable order.

    Raises:
        InputError: a path that does not exist, a glob that matches nothing, or nothing readable.
    """
    out: list[Source] = []
    seen: set[str] = set()

    def add(path: str) -> None:
        key = os.path.realpath(path)
        if key in seen:
            return
        seen.add(key)
        out.append(_source_for(path))

    for spec in specs:
        if spec == "-":
            out.append(Source(path=stdin_name, real=None))
            continue
        if os.path.isdir(spec):
            files = sorted(p for p in Path(spec).rglob("*") if p.is_file() and _is_log_candidate(p))
            if not files:
                raise InputError("nothing to analyze: the directory holds no log-like file", path=spec)
            for p in files:
                add(str(p))
        elif os.path.isfile(spec):
            add(spec)
        elif glob.has_magic(spec):
            matches = sorted(m for m in glob.glob(spec, recursive=True) if os.path.isfile(m))
            if not matches:
                raise InputError("no file matches this pattern", path=spec)
            for m in matches:
                add(m)
        elif os.path.exists(spec):
            raise InputError("not a regular file or directory", path=spec)
        else:
            raise InputError("no such file or directory", path=spec)
    return out


def _is_log_candidate(p: Path) -> bool:
    # In a directory, skip what is clearly not a log: labels, reports, archives we can't read, binaries.
    name = p.name
    if name.startswith(".") or name == "label.json":
        return False
    return p.suffix.lower() not in {".json", ".html", ".xml", ".png", ".jpg", ".pkl", ".pt", ".so", ".zip", ".tar", ".tgz"}


def _source_for(path: str) -> Source:
    src = Source(path=path, real=path)
    norm = path.replace(os.sep, "/")
    m = _LOGDIR_RANK.search(norm)
    if m:
        src.local_rank = int(m.group(1))
    else:
        m = _RANK_IN_NAME.search(Path(norm).name)
        if m:
            src.rank = int(m.group(1))
    return src


def open_binary(src: Source) -> BinaryIO:
    if src.real is None:
        return sys.stdin.buffer
    try:
        with open(src.real, "rb") as probe:
            magic = probe.read(2)
        if magic == b"\x1f\x8b":
            return gzip.open(src.real, "rb")  # type: ignore[return-value]
        return open(src.real, "rb", buffering=1 << 20)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=src.path) from exc


def sniff_source(src: Source) -> str | None:
    """Read the first bytes of a file source: set ``src.binary`` when they look binary, and ``src.skipped`` (with
    a warning; nothing is read later) for an ELF file.

    Standard input is not sniffed here (its bytes cannot be read twice); ``read_text_lines`` checks it.
    """
    if src.real is None or src.binary is not None:
        return src.binary
    stream = open_binary(src)
    try:
        head = b""
        read = getattr(stream, "read1", stream.read)
        while len(head) < SNIFF_BYTES:
            piece = read(SNIFF_BYTES)
            if not piece:
                break
            head += piece
    except (EOFError, zlib.error, gzip.BadGzipFile, OSError):
        return None  # read_text_lines reports the read error with what it could read
    finally:
        stream.close()
    _mark_binary(src, sniff_binary(head))
    return src.binary


def _mark_binary(src: Source, why: str | None) -> None:
    if why is None or src.binary is not None:
        return
    src.binary = why
    if why == ELF_WHY:
        src.skipped = why
        src.warnings.append(f"skipped: {why}")


def nothing_to_analyze(sources: list[Source]) -> str | None:
    """The one-line reason when no source gave the analysis anything (all empty or binary), else None."""
    if any(s.analyzable for s in sources):
        return None
    why = [f"{s.path}: {s.binary or 'input is empty'}" for s in sources[:3]]
    more = f" (+{len(sources) - 3} more)" if len(sources) > 3 else ""
    return "nothing to analyze: " + "; ".join(why) + more


def read_raw_lines(stream: BinaryIO, src: Source) -> Iterator[bytes]:
    """Yield raw lines (bytes, newline kept) one at a time with bounded memory (used by the live pipe)."""
    readline = stream.readline
    n = 0
    try:
        while True:
            b = readline(MAX_LINE)
            if not b:
                return
            n += 1
            if len(b) == MAX_LINE and not b.endswith(b"\n"):
                # Over-long line: keep the head, skip the rest up to the newline.
                while True:
                    rest = readline(MAX_LINE)
                    if not rest or rest.endswith(b"\n"):
                        break
                src.note_cut(n)
                yield b + _TRUNC_MARK
                continue
            yield b
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        src.warnings.append(f"input ends early (truncated or corrupt gzip: {exc}); analyzed what was readable")
    except OSError as exc:
        src.warnings.append(f"read error after {src.lines} lines: {exc}; analyzed what was readable")


_TRUNC_MARK = b"\x00TRUNCATED"
BLOCK = 1 << 20


def read_text_lines(stream: BinaryIO, src: Source, sniff: bool = True) -> Iterator[tuple[str, bool]]:
    """Yield (decoded line without newline, truncated) reading 1 MiB blocks (``read_text_blocks``): bounded
    memory, fast. Lines over ``MAX_LINE`` are cut and counted (``Source.note_cut``); ``sniff`` as there."""
    n = 0  # lines yielded so far (for the cut-line warning)
    for item in read_text_blocks(stream, src, sniff):
        if item.__class__ is str:
            for s in item.split("\n"):  # type: ignore[union-attr]
                n += 1
                if len(s) > MAX_LINE:
                    src.note_cut(n)
                    yield s[:MAX_LINE], True
                else:
                    yield s, False
        else:
            n += 1
            if item[1]:
                src.note_cut(n)
            yield item  # type: ignore[misc]


def read_text_blocks(stream: BinaryIO, src: Source, sniff: bool = False,
                     controls: list[bool] | None = None) -> Iterator[str | tuple[str, bool]]:
    """Decoded input in 1 MiB pieces: a ``str`` of whole lines (joined by newlines, no final one; a line in it
    may be longer than MAX_LINE: the reader cuts it), or a ``(line, truncated)`` tuple for the head of a line
    longer than a block and for a last line without newline. Bounded memory.

    ``controls``: for each ``str`` piece, just before it is yielded, whether it holds a control character
    other than tab and newline (one ``bytes.translate`` of the raw piece, ~1 GB/s; ``triage.scan`` then need not
    test every line it skips for one: a control byte is never part of a multi-byte UTF-8 sequence, and
    decoding never makes one).

    With ``sniff`` the first block is checked for binary content (``sniff_binary``): ``binary`` is set (the
    lines are still read: a log may follow junk); an ELF file yields nothing and gets ``skipped``.

    Decoding a whole block at once is several times cheaper than per line; blocks are cut after their last
    newline so no UTF-8 sequence is split (a newline byte is never inside a multi-byte sequence).
    """
    # read1: one decompression/IO step per call, so a truncated gzip loses only its last step's bytes.
    read = getattr(stream, "read1", stream.read)
    pending = b""  # start of a line whose end is not read yet (at most MAX_LINE bytes kept)
    skipping = False  # inside an over-long line whose head was already yielded
    first = sniff
    late: BaseException | None = None  # a read error met while topping up the first block, raised after it
    try:
        while True:
            if late is not None:
                raise late
            block = read(BLOCK)
            if not block:
                break
            if first:
                first = False
                while len(block) < SNIFF_BYTES:  # read1 may return a short first piece (gzip, pipes)
                    try:
                        more = read(BLOCK)
                    except (EOFError, zlib.error, gzip.BadGzipFile, OSError) as exc:
                        late = exc
                        break
                    if not more:
                        break
                    block += more
                _mark_binary(src, sniff_binary(block))
                if src.skipped is not None:
                    return
            if skipping:
                nl = block.find(b"\n")
                if nl < 0:
                    continue
                block = block[nl + 1:]
                skipping = False
            cut = block.rfind(b"\n")
            if cut < 0:
                pending += block
                if len(pending) > MAX_LINE:
                    yield pending[:MAX_LINE].decode("utf-8", "replace"), True
                    pending = b""
                    skipping = True
                continue
            chunk = pending + block[:cut]
            pending = block[cut + 1:]
            if controls is not None:
                controls.append(bool(chunk.translate(None, _NOT_CONTROL)))
            yield chunk.decode("utf-8", "replace")
            if len(pending) > MAX_LINE:
                yield pending[:MAX_LINE].decode("utf-8", "replace"), True
                pending = b""
                skipping = True
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        src.warnings.append(f"input ends early (truncated or corrupt gzip: {exc}); analyzed what was readable")
    except OSError as exc:
        src.warnings.append(f"read error after {src.lines} lines: {exc}; analyzed what was readable")
    if pending:
        yield pending.decode("utf-8", "replace"), False


#: Every byte but the control characters (tab and newline kept): ``bytes.translate(None, _NOT_CONTROL)`` leaves
#: only the control bytes.
_NOT_CONTROL = bytes(i for i in range(256) if not (i < 9 or 10 < i < 32 or i == 127))


def plain_raw(src: Source) -> bool:
    """Whether a source's lines may take the fast path (triage.py): a file (not standard input, which cannot be
    read twice) whose start is neither binary nor a paste that paste.py rewrites (detected on the same head)."""
    if not src.fast or src.real is None or src.binary is not None or src.skipped is not None:
        return False
    stream = open_binary(src)
    try:
        probe = Source(path=src.path, real=src.real)
        _head, _rest, plan = paste.detect(read_text_lines(stream, probe, sniff=False))
    finally:
        stream.close()
    return plan is None


def clean_line(b: bytes, src: Source, lineno: int) -> Line:
    """Decode one raw line (bytes, newline optional) and split off wrapper prefixes."""
    truncated = False
    if b.endswith(_TRUNC_MARK):
        b = b[: -len(_TRUNC_MARK)]
        truncated = True
    s = b.decode("utf-8", "replace")
    if s.endswith("\n"):
        s = s[:-1]
    return clean_text(s, src, lineno, truncated)




def iter_source(src: Source) -> Iterator[Line]:
    """Clean lines of one source, streaming."""
    stream = open_binary(src)
    lineno = 0
    try:
        head, rest, plan = paste.detect(read_text_lines(stream, src))
        if plan is not None:
            # A pasted log (indented, quoted, fenced, wrapped, reversed, ...): paste.py undoes that; the line
            # keeps its number and its text as in the file for the evidence.
            for lineno, s, raw, truncated in plan.normalise(itertools.chain(head, rest)):
                line = clean_text(s, src, lineno, truncated)
                line.raw = raw
                yield line
            lineno = plan.count
            src.nodes = plan.nodes
            head = rest = ()
        for items in (head, rest):  # the rest straight from the reader (a chain would cost ~1% per line)
            for s, truncated in items:
                lineno += 1
                yield clean_text(s, src, lineno, truncated)
    finally:
        if src.real is not None:
            stream.close()
        src.lines = lineno
    src.finish_warnings()


def iter_lines(sources: list[Source]) -> Iterator[Line]:
    """All lines of all sources, one source after the other."""
    for src in sources:
        yield from iter_source(src)
