"""Inputs -> clean ``Line`` objects: files, directories, globs, .gz, stdin; dirty text; wrapper prefixes."""
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
from .errors import InputError
from .model import Line

#: Longest line kept; the rest of a longer line is dropped (and the line marked truncated).
MAX_LINE = 64 * 1024

# CSI / OSC / single-char escapes, as terminals, `rich`, glog colour and `ls --color` emit them, and nF escapes
# (``ESC ( B``, the charset reset `tput sgr0` prints before ``ESC [m``).
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[ -/]+[0-~]|[@-Z\\-_])")
_CTRL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

# Wrapper prefixes, outermost first. Each may appear once, in this order, before the payload:
#   "> "                              a Markdown quote marker pasted with the log (RLHF-V#11)
#   2026-11-29T13:53:17.123456789Z   kubectl logs --timestamps / docker logs -t (RFC 3339); also a collector's or
#   2024-11-20 14:37:16[,123]         logger's local wall clock with a space (Python logging's asctime, ts(1))
#   [default3]:                       torchrun --tee / --redirects (role + local rank, no space)
#   [rank3]:                          torch >= 2.3 excepthook / c10 logger once a default PG exists
#   "  3: "                           srun --label (rank, right-aligned)
#   [trainer0|0]:                     launchers that add a replica index to the role tag (nccl#1837)
#   [155] / [80746]                   a bare number: mpirun/launcher process tags, log viewers' line numbers
#                                     (nccl#302, LlamaFactory#7396); dropped, never read as a rank
#   "  | 2024-08-23T22:22:51.875Z | "  a log viewer's table copied as text (AWS CloudWatch console: "| timestamp |
#                                     message" rows), outside everything else (litData#340, aws-ofi-nccl#715)
_VIEWER_TS = re.compile(r"[ \t]*\|[ \t]*(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d))[ \t]*\| ?")
_CONTAINER_TS = re.compile(r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d| ?UTC)?) ")
# What a Python logger writes between its time stamp and the message: loguru's default "| ERROR    | mod:func:52 - "
# and logging's "%(asctime)s - %(name)s - %(levelname)s - " (the message is the program's own text).
_LOGGER_HEAD = re.compile(r"(?:\| (?:TRACE|DEBUG|INFO|SUCCESS|WARNING|ERROR|CRITICAL) *\| [\w.<>-]+:[\w.<>-]+:\d+ - "
                          r"|- [\w.<>-]+ - (?:DEBUG|INFO|WARNING|ERROR|CRITICAL) - )")
# rich's RichHandler (accelerate launch installs it on the root logger when rich is importable): "[time] LEVEL
# message   file.py:NN", the level padded to 8, the source at the right edge; the time column is blank on a record
# in the same second as the one before. Read as logging's basic "LEVEL:file:message", the form the parsers know.
_RICH = re.compile(r"(?:\[[\d/:. -]+\] +| +)?(DEBUG|INFO|WARNING|ERROR|CRITICAL) {1,5}(\S.*?) {2,}([\w.-]+)\.py:\d+ *$")
_ROLE = re.compile(r"\[([A-Za-z_][\w-]*?)(\d+)(?:\|\d+)?\]:")
#   trainer/0 [1]:                    torchx's log tee (torchx/cli/cmd_log.py: f"{role_name}/{replica_id} {line}")
#                                     around torchrun's tag with an empty role name ("[{role}{local_rank}]:")
_TORCHX = re.compile(r"[A-Za-z_][\w-]*/\d+ (?=\[(?:[A-Za-z_][\w-]*?)?\d+(?:\|\d+)?\]:)")
_EMPTY_ROLE = re.compile(r"\[(\d+)\]:")
# A whole line set in Markdown bold or code by whoever pasted it ("**RuntimeError: NCCL communicator was aborted
# ...**", "`[rank1]:[E ...] Watchdog caught ...`"), inside or outside a launcher's prefix: the marks are the paste's.
_EMPHASIS = re.compile(r"(\*\*|`)(?=[^\s*`])(.*[^\s*`])\1\s*$")  # not glog's "*** SIGSEGV ... ***"
_TAG = re.compile(r"\[\d{1,7}\] ")
_SRUN = re.compile(r" {0,4}(\d{1,5}): ")
#   (RayWorkerVllm pid=7046) / (WorkerDict pid=123, ip=10.0.0.1) / (pid=909608) / (raylet)
#                                     Ray's log monitor: which actor/worker printed the line (no rank)
#   [1,3]<stderr>:                    mpirun --tag-output ([jobid,rank]<stream>:); the rank is kept
#   ERROR 04-07 00:57:46 ray_utils.py:45]   vLLM's per-line logger head (also "[file.py:45] ", v0.8+)
#   (head, rank=0, pid=2514) / (worker1, rank=1, pid=2388, ip=10.0.0.2) / (task, pid=18593)
#                                     SkyPilot's per-node tee of a task's output (a comma after the node name)
_RAY = re.compile(r"\((?:[A-Za-z_][\w.:-]*(?:,? (?:rank=\d+, )?pid=\d+(?:, ip=[\w.:-]+)?)?|pid=\d+(?:, ip=[\w.:-]+)?)\) ?")
#   " [36m(RayWorkerVllm pid=5085) [0m"  colour codes whose ESC byte the paste lost (GitHub drops it): Ray's
#                                     log monitor colours its prefix, so what is left of the code goes with it
_BARE_SGR = re.compile(r" ?\[\d{1,3}(?:;\d{1,3})*m")
#   dinov2-giant.cn-d004 [stderr]     a benchmark runner's tag (milabench: "<bench>.<node> [stderr] <line>")
_STREAM_TAG = re.compile(r"[\w.@:-]+ \[(?:stdout|stderr)\] ")
_CLOCK = re.compile(r"\d\d:\d\d:\d\d(?:[.,]\d{1,6})? (?=\[(?:rank\d|[A-Za-z_]*\d+\]:|[FEWI]\d{4} ))")
_TQDM_GLUED = re.compile(r"[^\[]*\d+/\d+ \[[^\]\[]*(?:s/it|it/s)[^\]\[]*\](?=\[(?:rank\d|[FEWI]\d{4} |[FEWI] [\w.]+:\d+\]|[A-Za-z_]+\d+\]:))")
_MPI_TAG = re.compile(r"\[\d+,(\d+)\]<(?:stdout|stderr|stddiag)>:")
_VLLM_HEAD = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[?[\w.-]+:\d+\] ")
# What follows "[3] " when it is the device of a cut NCCL head ("[3] NCCL INFO ...", "[3] init.cc:12 NCCL WARN"): the
# parser reads the device from it, so it is not a launcher tag.
_NCCL_DEV_HEAD = re.compile(r"(?:[\w./-]+:\d+(?: \(\w*\))? )?NCCL (?:INFO|WARN|TRACE|CALL|ABORT) ")
_VLLM_LEVELS = frozenset(("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"))
_PREFIX_START = frozenset("0123456789[ (")
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
    srun: bool = False  # an srun --label prefix was seen: every later "N: " head is one (continuation lines too)
    binary: str | None = None  # why the start looks binary (the lines are still read: text may follow junk)
    skipped: str | None = None  # why nothing was read at all (an ELF file / core dump)
    events: int = 0  # events the analysis got from this source (set at its end; decides a binary's fate)
    cut_lines: int = 0  # lines longer than MAX_LINE, cut to it
    first_cut: int = 0  # 1-based number of the first such line (0: none)
    fast: bool = True  # raw lines may take the fast path (triage.py); False where lines are rewritten first

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


def printable(s: str) -> str:
    """A decoded line as a terminal would show it: CR, ANSI escapes and control characters removed."""
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
    return s


def clean_text(s: str, src: Source, lineno: int, truncated: bool = False) -> Line:
    """Clean one decoded line (no newline) and split off wrapper prefixes."""
    # Fast paths, for what most lines of a big log are: a line that nothing below would change (an NCCL
    # "host:pid:tid [dev] NCCL ..." line: it starts with a letter), and torch's "[rankN]:" prefix on an
    # otherwise plain line. Each tests, in a few C calls, that none of the whole-line rules below applies and that
    # the start takes none of the prefix branches; anything else goes the full way (``_clean_full``; a test runs
    # both on every fixture line).
    c = s[:1]
    if (c.isalpha() or c == "[") and s.isprintable() and "it]" not in s and "[0m" not in s \
            and s.find(" [std", 0, 80) < 0 and not (s[-3:-1].isdigit() and ".py:" in s[-12:]):
        if c == "[":
            if s.startswith("[rank"):
                j = s.find("]:", 5, 16)
                if j > 5 and s[5:j].isdigit():
                    t = s[j + 2:]
                    if t[:1] == " ":
                        t = t[1:]
                    if t[:2] == "> ":
                        t = t[2:]
                    if t[:7] == "[c10d] ":
                        t = t[7:]  # (as _clean_full)
                    return Line(src.path, lineno, t, s, int(s[5:j]), src.local_rank, None, truncated)
        elif c not in _VLLM_START and not s.startswith("std"):
            i = s.find("/", 1, 48)
            if i < 0 or not s[i + 1:i + 2].isdigit() or " " in s[:i] or ":" in s[:i]:
                return Line(src.path, lineno, s, s, src.rank, src.local_rank, None, truncated)
    return _clean_full(s, src, lineno, truncated)


def _clean_full(s: str, src: Source, lineno: int, truncated: bool = False) -> Line:
    """``clean_text`` without its fast paths."""
    s = printable(s)
    raw = s
    if "[0m" in s:
        s = _BARE_SGR.sub("", s)
    if s.find(" [std", 0, 80) > 0:
        m = _STREAM_TAG.match(s)
        if m:
            s = s[m.end():]
    if "it]" in s:
        s = _drop_glued_bar(s)
    if s[:1] == ">" and (s[1:2] == " " or len(s) == 1):
        # A Markdown quote ("> " before each line) kept inside a pasted code block: outside any other wrapper.
        s = s[2:]
    if (s[:2] == "**" or s[:1] == "`") and s[-1:] in "*`":
        s = _unemphasise(s)
    rank = src.rank
    local_rank = src.local_rank
    time = None
    if s[:3] == "std" and s[6:8] == ": " and s[3:6] in ("err", "out"):
        # a runner's stream tag before every line of a child's output ("stderr: WARNING:torch.distributed..."):
        # outside everything the job itself prints, like Open MPI's "[1,0]<stderr>:"
        s = s[8:]
    if s[-3:-1].isdigit() and ".py:" in s[-12:]:
        m = _RICH.match(s)
        if m:
            s = f"{m.group(1)}:{m.group(3)}:{m.group(2)}"
    if s[:1] in " \t|" and "| " in s[:48]:
        m = _VIEWER_TS.match(s)
        if m:
            time = m.group(1)
            s = s[m.end():]
    i = s.find("/", 1, 48)
    if i > 0 and s[:1].isalpha() and s[i + 1:i + 2].isdigit() and " " not in s[:i] and ":" not in s[:i]:
        # only what _TORCHX can match ("role/N [...]:", the role one word): not NCCL's "host:pid:tid ... 00/64"
        s, local_rank = _strip_torchx(s, local_rank)
    if s and s[0] in _PREFIX_START:
        # Cheap character tests first: most lines have no wrapper prefix, and a regex call costs ~0.3 us.
        if len(s) > 20 and s[4] == "-" and (s[10] == "T" or s[10] == " "):
            m = _CONTAINER_TS.match(s)
            if m:
                time = m.group(1)
                s = s[m.end():]
                if len(s) > 20 and s[4] == "-" and (s[10] == " " or s[10] == "T"):
                    s, time = _strip_wall_clock(s, time)  # the job's own logger clock (or a collector's) inside kubectl's
                elif s[:2] == "| " or s[:2] == "- ":
                    m = _LOGGER_HEAD.match(s)
                    if m:
                        s = s[m.end():]
                if s[:1] in _VLLM_START:
                    s, time = _strip_vllm_head(s, time)
        if s[2:3] == ":" and s[5:6] == ":":
            s = _strip_clock(s)
        if rank is None and (s[:1] in _SRUN_START or s[:1] == "[" and s[1:2].isdigit()):
            # srun --label is outside everything the job itself prints ("3: [default0]:[rank3]: ..."); an inner
            # [rankN]: below overrides its task id. Only a log viewer's line number ("[80746] ") is further out.
            if s[:1] == "[":
                m = _TAG.match(s)
                if m and _SRUN.match(s, m.end()):
                    s = s[m.end():]
            m = _SRUN.match(s)
            if m and (src.srun or _looks_like_srun_payload(s, m.end()) or _SRUN_ONLY_PAYLOAD.match(s, m.end())
                      or _nested_label(s, m.end())):
                src.srun = True
                rank = int(m.group(1))
                s = s[m.end():]
                m = _nested_label(s, 0)
                if m:
                    s = s[m.end():]  # a second numeric label inside srun's (ctest's "91: " test number)
                if len(s) > 20 and s[4] == "-" and (s[10] == " " or s[10] == "T"):
                    s, time = _strip_wall_clock(s, time)
                if s[2:3] == ":" and s[5:6] == ":":
                    s = _strip_clock(s)
                if s[:1] in _VLLM_START:
                    s, time = _strip_vllm_head(s, time)  # vLLM's "ERROR 04-15 00:31:11 file.py:574] " behind the label
        if "/" in s[:48] and s[:1].isalpha():
            s, local_rank = _strip_torchx(s, local_rank)  # torchx's tee behind a collector's time or srun's label
        if s.startswith("(") and (" pid=" in s[:64] or s.startswith("(pid=") or s.startswith("(raylet)")):
            m = _RAY.match(s)
            if m:
                s = s[m.end():]
                if s[:1] in _VLLM_START:
                    s, time = _strip_vllm_head(s, time)
                elif "it]" in s:
                    s = _drop_glued_bar(s)  # a progress bar the task wrote without its newline, behind the prefix
        if s.startswith("[") and s[1:2].isdigit():
            if "]<std" in s[:24]:
                m = _MPI_TAG.match(s)
                if m:
                    rank = int(m.group(1))
                    tag, s = m.group(0), s[m.end():]
                    if tag in s:
                        # mpirun's output forwarder tags every chunk it reads from the rank's pipe: a line the
                        # program wrote in pieces ("RuntimeError" then ": NCCL communicator was aborted ...") has
                        # the same tag again inside it
                        s = s.replace(tag, "")
            else:
                m = _TAG.match(s)
                if m and (_looks_like_srun_payload(s, m.end()) or _SRUN.match(s, m.end())) \
                        and not _NCCL_DEV_HEAD.match(s, m.end()):
                    s = s[m.end():]  # (an srun label behind the tag is checked for its own payload below)
        if s.startswith("[") and not s.startswith("[rank"):
            m = _ROLE.match(s)
            if m:
                local_rank = int(m.group(2))
                s = s[m.end():]
                if "it]" in s:
                    s = _drop_glued_bar(s)  # the bar was written behind torchrun's "[default0]:"
                elif s[2:3] == ":" and s[5:6] == ":":
                    s = _strip_clock(s)
        if (s[:2] == "**" or s[:1] == "`") and s[-1:] in "*`" and s is not raw:
            s = _unemphasise(s)  # the marks went around the program's text, behind the launcher's prefix
        if s.startswith("[rank"):
            # "[rank12]:" by string operations: this prefix is on most lines of a torch >= 2.3 job.
            j = s.find("]:", 5, 16)
            if j > 5 and s[5:j].isdigit():
                rank = int(s[5:j])
                s = s[j + 2:]
                if s.startswith(" "):
                    # torch's excepthook writes "[rank0]: " + line; the c10 logger "[rank0]:[E...".
                    s = s[1:]
        if s[:2] == "> ":
            s = s[2:]  # a Markdown quote marker behind a launcher's / collector's prefix
        if s[:7] == "[c10d] ":
            s = s[7:]  # torch's c10d tag left in front when the paste cut the c10 logger head before it
    elif s[:1] in _VLLM_START:
        s, time = _strip_vllm_head(s, time)
    return Line(src.path, lineno, s, raw, rank, local_rank, time, truncated)


def _unemphasise(s: str) -> str:
    m = _EMPHASIS.match(s)
    return m.group(2) if m and m.group(1) not in m.group(2) else s


_VLLM_START = frozenset("DIWEC")


def _strip_torchx(s: str, local_rank: int | None) -> tuple[str, int | None]:
    m = _TORCHX.match(s)
    if m is None:
        return s, local_rank
    s = s[m.end():]
    m = _EMPTY_ROLE.match(s)
    if m:
        return s[m.end():], int(m.group(1))
    return s, local_rank


def _strip_wall_clock(s: str, time: str | None) -> tuple[str, str | None]:
    """A "YYYY-MM-DD hh:mm:ss" stamp behind an outer prefix (srun's label, kubectl's RFC 3339 time)."""
    m = _CONTAINER_TS.match(s)
    if m is None:
        return s, time
    s, time = s[m.end():], time or m.group(1)
    if s[:2] == "| " or s[:2] == "- ":
        h = _LOGGER_HEAD.match(s)
        if h:
            s = s[h.end():]
    return s, time


def _strip_clock(s: str) -> str:
    """A wall clock a log collector (or the job's own logger) put before the job's prefixes: "18:11:06.680
    [rank4]:[E205 ...". Only in front of a rank / worker / c10 prefix; other bracketed text keeps its clock."""
    m = _CLOCK.match(s)
    return s[m.end():] if m else s


def _drop_glued_bar(s: str) -> str:
    """A tqdm bar left without its newline with the next record glued on ("1021/100000 [45:39<51:20:53,
    1.87s/it][rank2]:[E723 ..."): the record, when a log record's own prefix follows the bar directly."""
    if "s/it]" not in s and "it/s]" not in s:
        return s
    m = _TQDM_GLUED.match(s)
    return s[m.end():] if m else s


def _strip_vllm_head(s: str, time: str | None) -> tuple[str, str | None]:
    # String tests first: many hostnames (and so NCCL lines) start with these letters.
    sp = s.find(" ", 4, 9)
    if sp < 0 or s[:sp] not in _VLLM_LEVELS or s[sp + 3:sp + 4] != "-":
        return s, time
    m = _VLLM_HEAD.match(s)
    if not m:
        return s, time
    return s[m.end():], time  # its "MM-DD hh:mm:ss" has no year: not used as the line's time


def _nested_label(s: str, start: int) -> "re.Match[str] | None":
    """A numeric "N: " label at ``start`` in front of a log record (ctest's test number inside srun's label)."""
    m = _SRUN.match(s, start) if s[start:start + 1] in _SRUN_START else None
    if m and (_looks_like_srun_payload(s, m.end()) or _SRUN_ONLY_PAYLOAD.match(s, m.end())):
        return m
    return None


def _looks_like_srun_payload(s: str, start: int) -> bool:
    # "3: " also starts ordinary text ("1: loss 0.3"); accept it only in front of something that is a
    # log record of its own: an NCCL prefix, a traceback, a torch/glog record, or another prefix.
    rest = s[start:start + 64]
    return bool(_SRUN_PAYLOAD.match(rest))


_SRUN_PAYLOAD = re.compile(
    r"(?:[\w.-]*:\d+:\d+ |[\w.-]+: Test (?:CUDA|NCCL) failure |\d\d:\d\d:\d\d(?:[.,]\d+)? \[|Traceback|Exception ignored |  File |\[|[IWEF]\d{4} |NCCL |[A-Z]\w*(?:Error|Exception)\b|"
    r"torch\.|WARNING:|ERROR:|INFO:|\d{4}-\d\d-\d\d|terminate called |  what\(\): |Watchdog caught |> (?=\S)"
    r"|  (?:time|host|rank|exitcode|error_file|traceback) +: |(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:)"
)
# Further heads only an srun label may stand before (a "[3] " tag before these is NCCL's cut "[dev]" head): the
# continuation of an NCCL error message, a bare "file.cc:123" WARN (<= 2.2), Ray's "(Actor pid=N)", a line set in
# Markdown bold, torchx's "role/0 [1]:".
_SRUN_ONLY_PAYLOAD = re.compile(r"nccl[A-Z]\w*: |Last error:|[\w./-]+\.(?:cc|cpp|cu|h|c|py):\d+|\((?:raylet\)|pid=\d+|[\w.]+ pid=\d+)"
                                r"|\*\*(?=\S)|[A-Za-z_][\w-]*/\d+ \[(?:[A-Za-z_][\w-]*?)?\d+\]:")


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
