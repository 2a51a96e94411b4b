"""Inputs -> clean ``Line`` objects: files, directories, globs, .gz, stdin; dirty text; wrapper prefixes."""
from __future__ import annotations

import glob
import gzip
import os
import re
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterator

from .errors import InputError
from .model import Line

#: Longest line kept; the rest of a longer line is dropped (and the line marked truncated).
MAX_LINE = 64 * 1024

# CSI / OSC / single-char escapes, as terminals, `rich`, glog colour and `ls --color` emit them.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_CTRL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

# Wrapper prefixes, outermost first. Each may appear once, in this order, before the payload:
#   2026-11-29T13:53:17.123456789Z   kubectl logs --timestamps / docker logs -t (RFC 3339)
#   [default3]:                       torchrun --tee / --redirects (role + local rank, no space)
#   [rank3]:                          torch >= 2.3 excepthook / c10 logger once a default PG exists
#   "  3: "                           srun --label (rank, right-aligned)
#   [trainer0|0]:                     launchers that add a replica index to the role tag (nccl#1837)
#   [155] / [80746]                   a bare number: mpirun/launcher process tags, log viewers' line numbers
#                                     (nccl#302, LlamaFactory#7396); dropped, never read as a rank
_CONTAINER_TS = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)) ")
_ROLE = re.compile(r"\[([A-Za-z_][\w-]*?)(\d+)(?:\|\d+)?\]:")
_TAG = re.compile(r"\[\d{1,7}\] ")
_SRUN = re.compile(r" {0,4}(\d{1,5}): ")
_PREFIX_START = frozenset("0123456789[ ")
_SRUN_START = frozenset("0123456789 ")

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
                raise InputError("directory holds no log files", path=spec)
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


def read_raw_lines(stream: BinaryIO, src: Source) -> Iterator[bytes]:
    """Yield raw lines (bytes, newline kept) one at a time with bounded memory (used by the live pipe)."""
    readline = stream.readline
    try:
        while True:
            b = readline(MAX_LINE)
            if not b:
                return
            if len(b) == MAX_LINE and not b.endswith(b"\n"):
                # Over-long line: keep the head, skip the rest up to the newline.
                while True:
                    rest = readline(MAX_LINE)
                    if not rest or rest.endswith(b"\n"):
                        break
                yield b + _TRUNC_MARK
                continue
            yield b
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        src.warnings.append(f"input ends early (truncated or corrupt gzip: {exc}); analyzed what was readable")
    except OSError as exc:
        src.warnings.append(f"read error after {src.lines} lines: {exc}; analyzed what was readable")


_TRUNC_MARK = b"\x00TRUNCATED"
BLOCK = 1 << 20


def read_text_lines(stream: BinaryIO, src: Source) -> Iterator[tuple[str, bool]]:
    """Yield (decoded line without newline, truncated) reading 1 MiB blocks: bounded memory, fast.

    Decoding a whole block at once is several times cheaper than per line; blocks are cut after their last
    newline so no UTF-8 sequence is split (a newline byte is never inside a multi-byte sequence).
    """
    # read1: one decompression/IO step per call, so a truncated gzip loses only its last step's bytes.
    read = getattr(stream, "read1", stream.read)
    pending = b""  # start of a line whose end is not read yet (at most MAX_LINE bytes kept)
    skipping = False  # inside an over-long line whose head was already yielded
    try:
        while True:
            block = read(BLOCK)
            if not block:
                break
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
            for s in chunk.decode("utf-8", "replace").split("\n"):
                if len(s) > MAX_LINE:
                    yield s[:MAX_LINE], True
                else:
                    yield s, False
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


def clean_text(s: str, src: Source, lineno: int, truncated: bool = False) -> Line:
    """Clean one decoded line (no newline) and split off wrapper prefixes."""
    if s.endswith("\r"):
        s = s[:-1]
    if "\x1b" in s:
        s = _ANSI.sub("", s)
    if "\r" in s:
        # Progress bars redraw with bare CR: what a terminal finally shows is the last segment.
        parts = [p for p in s.split("\r") if p]
        s = parts[-1] if parts else ""
    if not s.isprintable() and _CTRL.search(s):
        s = _CTRL.sub("", s)
    raw = s
    rank = src.rank
    local_rank = src.local_rank
    time = None
    if s and s[0] in _PREFIX_START:
        # Cheap character tests first: most lines have no wrapper prefix, and a regex call costs ~0.3 us.
        if len(s) > 20 and s[4] == "-" and s[10] == "T":
            m = _CONTAINER_TS.match(s)
            if m:
                time = m.group(1)
                s = s[m.end():]
        if s.startswith("[") and s[1:2].isdigit():
            m = _TAG.match(s)
            if m and _looks_like_srun_payload(s, m.end()):
                s = s[m.end():]
        if s.startswith("[") and not s.startswith("[rank"):
            m = _ROLE.match(s)
            if m:
                local_rank = int(m.group(2))
                s = s[m.end():]
        if s.startswith("[rank"):
            # "[rank12]:" by string operations: this prefix is on most lines of a torch >= 2.3 job.
            j = s.find("]:", 5, 16)
            if j > 5 and s[5:j].isdigit():
                rank = int(s[5:j])
                s = s[j + 2:]
                if s.startswith(" "):
                    # torch's excepthook writes "[rank0]: " + line; the c10 logger "[rank0]:[E...".
                    s = s[1:]
        elif rank is None and s[:1] in _SRUN_START:
            m = _SRUN.match(s)
            if m and _looks_like_srun_payload(s, m.end()):
                rank = int(m.group(1))
                s = s[m.end():]
    return Line(src.path, lineno, s, raw, rank, local_rank, time, truncated)


def _looks_like_srun_payload(s: str, start: int) -> bool:
    # "3: " also starts ordinary text ("1: loss 0.3"); accept it only in front of something that is a
    # log record of its own: an NCCL prefix, a traceback, a torch/glog record, or another prefix.
    rest = s[start:start + 64]
    return bool(_SRUN_PAYLOAD.match(rest))


_SRUN_PAYLOAD = re.compile(
    r"(?:[\w.-]+:\d+:\d+ |Traceback|  File |\[|[IWEF]\d{4} |NCCL |[A-Z]\w*(?:Error|Exception)\b|"
    r"torch\.|WARNING:|ERROR:|INFO:|\d{4}-\d\d-\d\d)"
)


def iter_source(src: Source) -> Iterator[Line]:
    """Clean lines of one source, streaming."""
    stream = open_binary(src)
    lineno = 0
    try:
        for s, truncated in read_text_lines(stream, src):
            lineno += 1
            yield clean_text(s, src, lineno, truncated)
    finally:
        if src.real is not None:
            stream.close()
        src.lines = lineno
    if lineno == 0:
        src.warnings.append("input is empty")


def iter_lines(sources: list[Source]) -> Iterator[Line]:
    """All lines of all sources, one source after the other."""
    for src in sources:
        yield from iter_source(src)
