"""NCCL_DEBUG lines -> typed events: line prefix regexes and NcclParser (the body lives in nccl_body.py,
nccl_grammar.py, nccl_warn.py and nccl_shape.py)."""
from __future__ import annotations

import re
from typing import Any

from ..model import Event, Line
from .chatter_seen import ChatterSeen, DeferredChatter
# Re-exported names (BODY_STARTS, build_parser, body_parser, _uncached_body, the shape cache's) are read as
# nccl.<name> by parse/torch/, parallel.py and the tests.
from .nccl_body import _CACHE_SIZE, BODY_STARTS, _uncached_body, parse_body  # noqa: F401
from .nccl_grammar import _run, body_parser, build_parser  # noqa: F401
from .nccl_shape import _NUM_SPLIT_RE, _SHAPES, _UNCACHEABLE, _learn_shape, _parse_shaped  # noqa: F401
from .nccl_warn import _file_family

__all__ = ["NcclParser", "PREFIX_RE", "parse_body", "body_parser", "BODY_STARTS"]

# --------------------------------------------------------------------------------------------------
# Line prefix (README "NCCL line grammar"; the grammar's `line` rule says the same, tests compare them):
#   {ts}host:pid:tid [dev] [millis func:line | file:line [(function)]] NCCL LEVEL body
# - {ts}: NCCL_DEBUG_TIMESTAMP_FORMAT output (2.26+, default "[%F %T] "); any text is accepted before
#   host:pid:tid because the format is user-defined.
# - host: gethostname() cut at the first '.', '%' and '/' -> '-' from 2.29.2; dots/dashes allowed anyway.
# - [dev] is absent on NCCL CALL lines (2.13+).
# - TRACE (TRACE=1 builds): "millis func:line" before NCCL; WARN: "file:line" (absolute paths in RCCL
#   builds), plus "(function)" from 2.30.7.
_HEAD = (
    r"(?P<ts>.*?)"
    r"(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+)"
    r"(?: \[(?P<dev>\d+)\])?"
    r"(?: (?P<millis>\d+\.\d+))?"
    r"(?: (?P<file>[^\s:()]+):(?P<fline>\d+)(?: \((?P<func>[^()\s]*)\))?)?"
)
PREFIX_RE = re.compile(_HEAD + r" NCCL (?P<level>INFO|WARN|TRACE|CALL|ABORT)(?: (?P<body>.*))?$")
#: Longest "{ts}host:pid:tid [dev] file:line (func)" head looked for (timestamps and RCCL's absolute paths fit).
MAX_HEAD = 1024
_PREFIX_HEAD_RE = re.compile(_HEAD + r" NCCL (?P<level>INFO|WARN|TRACE|CALL|ABORT)(?= |$)")
# Hot path: split at the first " NCCL " and read the part before it with _HEAD_RE, cached (the same
# "host:pid:tid [dev]" heads repeat on every line of a process); PREFIX_RE is the fallback and the reference.
_HEAD_RE = re.compile(_HEAD + "$")
_LEVELS = frozenset({"INFO", "WARN", "TRACE", "CALL", "ABORT"})
# Bare version lines: stdout print <= 2.21, VERSION level 2.22+ (optionally timestamped), git line 2.29+.
# The timestamp here must look like one, so torch's "..., NCCL version 2.28.9" is not taken.
_BANNER_RE = re.compile(r"(?P<ts>\[[^\]]*\] ?|\d[\d:./T, -]*\d ?)?(?P<body>NCCL (?:git )?version \S.*)$")
# An NCCL level marker whose prefix did not parse -> nccl.unparsed.
_LOOSE_RE = re.compile(r"\bNCCL (INFO|WARN|TRACE|CALL|ABORT)\b")
# What may be left of a cut prefix in front of the marker: "[3] include/shm.h:28" (nccl#525: the user pasted
# the lines without their host:pid:tid).
_CUT_HEAD_RE = re.compile(r"(?:.*?\[(?P<dev>\d+)\] ?)?(?:(?P<file>[^\s:()\[\]]+):(?P<line>\d+)(?: \((?P<func>[^()\s]*)\))?)? ?$")
# Text before "NCCL WARN" that makes the line a sentence, not a log line: a quote mark or backtick right before
# the marker, or two words ("I get the error `NCCL WARN ...`", "we see NCCL WARN ... on every node").
_PROSE_RE = re.compile(r"[`'\"\u201c\u2018]\s*$|(?:^|\s)[A-Za-z][a-z]*,?\s+[A-Za-z][a-z]+(?:[\s,:]|$)")


def _prose(before: str) -> bool:
    """True when the text in front of an NCCL level marker is words of a sentence (not a cut prefix)."""
    return _CUT_HEAD_RE.match(before) is None and _PROSE_RE.search(before) is not None


# NCCL <= 2.2 printed the level without "NCCL" ("host:pid:tid [0] include/socket.h:360 WARN Call to connect
# failed", nccl-tests#15), and users often paste a WARN without its prefix ("include/socket.h:344 WARN Socket
# creation failed ...", nccl#210). Both need a source file with a C/C++/CUDA extension (or the full
# host:pid:tid [dev] head) so that ordinary "WARN" words in other logs are not taken.
# A head that was cut or anonymised in the paste ("*server name* [0] include/socket.h:185 WARN ...", nccl#111)
# keeps its "[dev] " only when a source file:line follows (the lookahead), like _CUT_HEAD_RE for "NCCL WARN".
_LEGACY_RE = re.compile(
    r"(?:(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
    r"|[^\[\]]{0,80}?\[(?P<cdev>\d+)\] (?=[\w./-]+\.(?:cc|cu|h|hpp|cpp|c):\d+ ))?"
    r"(?:(?P<file>[\w./-]+\.(?:cc|cu|h|hpp|cpp|c)):(?P<line>\d+) )?(?P<level>INFO|WARN) (?P<body>.*)$")
# aws-ofi-nccl's test programs (tests/functional/*: nccl_message_transfer, ring, ...) pass their own logger to
# the plugin, which prints "WARN: Function: <func> Line: <n>: <msg>" (and INFO/TRACE alike) with no NCCL prefix:
# the same messages the plugin logs through NCCL as "... <func>:<n> NCCL WARN NET/OFI ...". A multi-host launcher
# may put the node's name before each line (pdsh, DeepSpeed's pdsh runner: "10.3.35.83: WARN: Function: ...").
_OFI_TEST_RE = re.compile(r"(?:[\w.-]{1,64}: )?(?P<level>WARN|INFO|TRACE): Function: (?P<func>\w+) Line: (?P<line>\d+): (?P<body>.*)$")

# WARN fmts with an embedded "\n": the text after it comes on unprefixed lines (2.19+ NVLS bind failure).
_CONTINUED_WARNS = (("Failed to bind NVLink SHARP (NVLS) Multicast memory", 2),)


# --------------------------------------------------------------------------------------------------
class NcclParser:
    """Per-stream NCCL line parser (ARCHITECTURE.md "Parser contract")."""

    __slots__ = ("_pending", "_pending_left", "compact", "compacted", "_chatter_seen", "_chatter_last", "chatter_src",
                 "defer")

    def __init__(self, compact: bool = False, defer: bool = False) -> None:
        """Args:
            compact: analysis mode. Channel/ring/tree/transport and collective-call lines are per-channel,
                per-peer and per-call chatter (most of a big job's log). With ``compact`` only the first line
                of each (process, chatter kind) and each process's last chatter line become events; the rest
                are counted in ``compacted``. The events export keeps every line.
            defer: (with ``compact``, in a worker process: parallel.py) those first and last chatter lines come out
                as ``DeferredChatter`` (the line, unparsed); the main process parses the ones it keeps.
        """
        self._pending: Event | None = None  # a WARN whose text continues on unprefixed lines
        self._pending_left = 0
        self.compact = compact
        self.defer = defer
        self.compacted = 0
        self._chatter_seen = ChatterSeen()  # (host, pid, chatter key) triples, per process (chatter_seen.py)
        # (host, pid) -> last chatter line not turned into an event: a Line, or (lineno, text) from triage.py
        self._chatter_last: dict[tuple, Any] = {}
        self.chatter_src: Any = None  # the Source whose path/rank a (lineno, text) entry has (set by triage.py)

    def feed(self, line: Line) -> list[Event] | None:
        """Events for ``line``; None when it is not an NCCL line, [] while a multi-line WARN is open."""
        text = line.text
        out: list[Event] = []
        split = _split(text) if "NCCL " in text else None
        if self._pending is not None:
            if split is None:
                return self._continue(line)
            out.append(self._close())
        if split is None:
            if "NCCL" not in text:
                legacy = self._legacy(line) if (" WARN " in text or " INFO " in text) else None
                if legacy is None and ": Function: " in text:
                    legacy = self._ofi_test(line)
                if legacy is not None:
                    out.append(legacy)
                return out or None
            event = self._bare(line)
            if event is not None:
                out.append(event)
            return out or None
        head, level, body = split
        time, host, pid, tid, dev, millis, file, fline, func = head
        if self.compact and level == "INFO":
            ckey = _chatter_key(body)
            if ckey is not None:
                key = (host, pid, ckey)
                if key in self._chatter_seen:
                    self._chatter_last[(host, pid)] = line
                    self.compacted += 1
                    return out
                if len(self._chatter_seen) < _CACHE_SIZE:
                    self._chatter_seen.add(key)
                self._chatter_last.pop((host, pid), None)
                if self.defer:
                    out.append(DeferredChatter(line, host, pid, ckey))
                    return out
        if level == "INFO":
            kind, rank, fields = _parse_shaped(level, body)  # fields: a fresh dict
        else:
            kind, rank, cached = parse_body(level, body)
            fields = dict(cached)
        if file is not None:
            if level == "TRACE":  # "millis func:line" (TRACE builds)
                fields["function"], fields["src_line"] = file, fline
            else:
                fields["file"], fields["src_line"], fields["function"] = file, fline, func
                if kind == "nccl.warn.other":
                    family = _file_family(file)
                    if family:
                        kind = "nccl.warn." + family
        if millis is not None:
            fields["millis"] = millis
        event = Event(kind=kind, path=line.path, line=line.lineno, text=line.raw, host=host, pid=pid, tid=tid,
                      rank=line.rank if rank is None else rank, cuda_dev=dev, time=time or line.time, fields=fields)
        if level == "WARN" and body.startswith(_CONTINUED_PREFIXES):
            self._pending, self._pending_left = event, _continued_lines(body)
            return out
        out.append(event)
        return out

    @property
    def pending_line(self) -> int | None:
        """First line of what this parser still holds (a WARN waiting for continuation lines), or None."""
        return self._pending.line if self._pending is not None else None

    def flush(self) -> list[Event]:
        """Close a WARN still waiting for its continuation lines; in compact mode, the last chatter line of
        each process (end of input: "the last thing rank 3 did was connect channel 5 via P2P/IPC")."""
        out = [self._close()] if self._pending is not None else []
        if self._chatter_last:
            src = self.chatter_src
            last = sorted((ln if isinstance(ln, Line) else
                           Line(src.path, ln[0], ln[1], ln[1], src.rank, src.local_rank, None, False)
                           for ln in self._chatter_last.values()), key=lambda ln: ln.lineno)
            self._chatter_last.clear()
            compact, self.compact = self.compact, False
            for line in last:
                deferred = self._deferred(line) if self.defer else None
                if deferred is not None:
                    out.append(deferred)
                else:
                    out.extend(self.feed(line) or ())
            self.compact = compact
            self.compacted -= len(last)
        return out

    # -- helpers
    def _deferred(self, line: Line) -> DeferredChatter | None:
        """A kept last chatter line, unparsed (``defer``); None when it is no plain prefixed INFO chatter line."""
        split = _split(line.text) if "NCCL " in line.text else None
        if split is None or split[1] != "INFO":
            return None
        ckey = _chatter_key(split[2])
        if ckey is None:
            return None
        head = split[0]
        return DeferredChatter(line, head[1], head[2], ckey)

    def _bare(self, line: Line) -> Event | None:
        """Version banner without prefix, or an NCCL-looking line whose prefix is odd (nccl.unparsed)."""
        if "NCCL " not in line.text:
            return None  # both patterns need it (torch's "WorkNCCL(" records land here: one C call, no regex)
        m = _BANNER_RE.match(line.text)
        if m:
            parsed = _run("banner", m["body"])
            if parsed is not None:
                kind, fields = parsed
                fields["level"] = "VERSION"
                ts = (m["ts"] or "").strip().strip("[]")
                return Event(kind=kind, path=line.path, line=line.lineno, text=line.raw, rank=line.rank,
                             time=ts or line.time, fields=fields)
        lm = _LOOSE_RE.search(line.text)
        if lm is None:
            return None
        before = line.text[:lm.start()]
        if before and _prose(before):
            return None  # "I get `NCCL WARN ...` when ...": NCCL text quoted in a sentence is not a log line
        msg = line.text[lm.end():].strip()
        if lm[1] == "INFO" and _CUT_HEAD_RE.match(before):
            # An INFO line pasted without its host:pid:tid ("NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
            # "[3] NCCL INFO NET/IB : No device found."): typed like a full one.
            kind, rank, fields = _parse_shaped("INFO", msg)
            hm = _CUT_HEAD_RE.match(before)
            fields["prefix"] = "partial"
            return Event(kind=kind, path=line.path, line=line.lineno, text=line.raw,
                         rank=line.rank if rank is None else rank, cuda_dev=int(hm["dev"]) if hm["dev"] else None,
                         time=line.time, fields=fields)
        if lm[1] == "WARN":
            # The prefix was cut but the WARN text is one NCCL prints: type it (prefix: "partial"), so that the
            # rules see it; a body that is not a known WARN shape stays nccl.unparsed.
            kind, rank, cached = parse_body("WARN", msg)
            hm = _CUT_HEAD_RE.match(line.text[max(0, lm.start() - MAX_HEAD):lm.start()])  # bounded: quadratic
            if kind == "nccl.warn.other" and hm and hm["file"]:
                # No keyword in the text, but the remnant names the source file (":41367:41367 [1]
                # enqueue.cc:422 NCCL WARN Error : no algorithm/protocol available", nccl#653).
                family = _file_family(hm["file"])
                if family:
                    kind = "nccl.warn." + family
            if kind != "nccl.warn.other":
                fields = dict(cached)
                dev = None
                if hm:
                    dev = int(hm["dev"]) if hm["dev"] else None
                    if hm["file"]:
                        fields["file"], fields["src_line"], fields["function"] = hm["file"], int(hm["line"]), hm["func"]
                fields["prefix"] = "partial"
                return Event(kind=kind, path=line.path, line=line.lineno, text=line.raw,
                             rank=line.rank if rank is None else rank, cuda_dev=dev, time=line.time, fields=fields)
        return Event(kind="nccl.unparsed", path=line.path, line=line.lineno, text=line.raw, rank=line.rank,
                     time=line.time, fields={"level": lm[1], "msg": msg})

    def _legacy(self, line: Line) -> Event | None:
        """An NCCL <= 2.2 line (level without "NCCL") or a pasted WARN without prefix; None if neither."""
        m = _LEGACY_RE.match(line.text)
        if m is None or (m["host"] is None and m["file"] is None):
            return None
        if m["host"] is None and m["level"] != "WARN":
            return None
        kind, rank, cached = parse_body(m["level"], m["body"])
        fields = dict(cached)
        if m["file"]:
            fields["file"], fields["src_line"], fields["function"] = m["file"], int(m["line"]), None
            if kind == "nccl.warn.other":
                family = _file_family(m["file"])
                if family:
                    kind = "nccl.warn." + family
        fields["prefix"] = "legacy" if m["host"] else "none"
        return Event(kind=kind, path=line.path, line=line.lineno, text=line.raw, host=m["host"],
                     pid=int(m["pid"]) if m["pid"] else None, tid=int(m["tid"]) if m["tid"] else None,
                     rank=line.rank if rank is None else rank,
                     cuda_dev=int(m["dev"] or m["cdev"]) if (m["dev"] or m["cdev"]) else None,
                     time=line.time, fields=fields)

    def _ofi_test(self, line: Line) -> Event | None:
        """A line of aws-ofi-nccl's test logger ("WARN: Function: f Line: n: NET/OFI ..."); None if not one."""
        m = _OFI_TEST_RE.match(line.text)
        if m is None or m["level"] == "TRACE":
            return None
        kind, rank, cached = parse_body(m["level"], m["body"])
        fields = dict(cached)
        fields["function"], fields["src_line"], fields["prefix"] = m["func"], int(m["line"]), "ofi-test"
        return Event(kind=kind, path=line.path, line=line.lineno, text=line.raw,
                     rank=line.rank if rank is None else rank, time=line.time, fields=fields)

    def _continue(self, line: Line) -> list[Event]:
        pending = self._pending
        assert pending is not None
        pending.fields.setdefault("lines", [pending.text]).append(line.raw)
        pending.fields["msg"] += "\n" + line.text
        pending.fields["end_line"] = line.lineno
        self._pending_left -= 1
        return [self._close()] if self._pending_left <= 0 else []

    def _close(self) -> Event:
        pending = self._pending
        assert pending is not None
        self._pending = None
        end = pending.fields.pop("end_line", None)
        if end is None:
            return pending
        return Event(kind=pending.kind, path=pending.path, line=pending.line, text=pending.text, host=pending.host,
                     pid=pending.pid, tid=pending.tid, rank=pending.rank, cuda_dev=pending.cuda_dev,
                     time=pending.time, fields=pending.fields, end_line=end)


_CONTINUED_PREFIXES = tuple(prefix for prefix, _ in _CONTINUED_WARNS)


def _chatter_key(body: str) -> str | None:
    """For chatter bodies (compact mode), what makes one worth an event of its own; None otherwise.

    "Channel 05/1 : 3[3] -> 4[4] via P2P/IPC/read" -> "via P2P/IPC/read"; "Channel 00/64 : 0 1 2" ->
    "Channel"; "Ring 00 : ..." -> "Ring"; "Trees [0] ..." -> "Trees"; "AllReduce: opCount 3 ..." ->
    "AllReduce:" (the COLL subsystem logs one per call).
    """
    if body.startswith("Channel "):
        i = body.rfind(" via ")
        return body[i:] if i > 0 else "Channel"
    if body.startswith(("Ring ", "Trees", "Tree ")):
        return body[:4]
    word, _, rest = body.partition(" ")
    if word.endswith(":") and rest.startswith("opCount "):
        return word
    return None

Head = tuple  # (time, host, pid, tid, dev, millis, file, src_line, function), ints already converted
_HEADS: dict[str, Head | None] = {}


def _read_head(head: str) -> Head | None:
    """The prefix fields of one "{ts}host:pid:tid [dev] [file:line [(func)]]" head, or None."""
    m = _HEAD_RE.match(head)
    if m is None:
        return None
    ts, host, pid, tid, dev, millis, file, fline, func = m.groups()
    return (ts.strip().strip("[]") or None, host, int(pid), int(tid), None if dev is None else int(dev),
            None if millis is None else float(millis), file, None if fline is None else int(fline), func)


def _split(text: str) -> tuple[Head, str, str] | None:
    """(head fields, level, body) of an NCCL-prefixed line; same answer as PREFIX_RE, faster."""
    i = text.find(" NCCL ")
    if 0 < i <= MAX_HEAD:
        level, _, body = text[i + 6:].partition(" ")
        if level in _LEVELS:
            key = text[:i]
            try:
                head = _HEADS[key]
            except KeyError:
                if len(_HEADS) >= _CACHE_SIZE:
                    _HEADS.clear()
                head = _HEADS[key] = _read_head(key)
            if head is not None:
                return head, level, body
    if len(text) > MAX_HEAD:
        # The head's lazy "{ts}" and host runs make PREFIX_RE quadratic in the line's length: on a 64 KiB line of
        # "xxxx NCCL WARN ..." (a cut, mangled log) one match took minutes. A real prefix is short: look for it
        # in the line's start only; the body is the rest of the whole line.
        m = _PREFIX_HEAD_RE.match(text, 0, MAX_HEAD)
        if m is None:
            return None
        return _read_head(text[:m.start("level") - 6]), m["level"], text[m.end() + 1:]
    m = PREFIX_RE.match(text)  # " NCCL " occurs earlier than the real prefix (or not at all)
    if m is None:
        return None
    return _read_head(text[:m.start("level") - 6]), m["level"], m["body"] or ""


def _continued_lines(body: str) -> int:
    for prefix, count in _CONTINUED_WARNS:
        if body.startswith(prefix):
            return count
    return 0
