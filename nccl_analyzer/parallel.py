"""Parse big inputs in several processes: files and byte ranges of large files, events back in input order.

Parsing is ~90% of the work and independent per input stream; the job model and the rule engine need the
events of all inputs in one place. Each worker reads one unit (a whole file, or a byte range of a large plain
file cut at a safe line), runs the parsers in analysis (compact) mode, and returns its events: in compact
mode those are a few percent of the lines, so shipping them back costs little. The main process folds them
into the analysis in input order, so the result does not depend on the number of workers.
"""
from __future__ import annotations

import gc
import heapq
import itertools
import multiprocessing
import os
import pickle
import re
import zlib
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Iterator

from . import triage
from .classify import EventStream
from .model import Event
from .parse.nccl import _CACHE_SIZE as _CHATTER_CAP, _chatter_key
from .parse.chatter_seen import ChatterSeen, DeferredChatter
from .parse.nccl import NcclParser
from .sources import Source, clean_text, open_binary, read_text_lines

#: Below this many bytes in total, one process is faster than starting workers.
MIN_PARALLEL_BYTES = 32 << 20
#: A large plain file is cut into ranges of about this size (the main process holds the events of up to
#: ``workers`` ranges at a time: smaller ranges, a lower peak, but each range parses the first chatter line of
#: each process again; docs/speed.md).
CHUNK_BYTES = 8 << 20
#: Ranges are never smaller than this (tests lower it to force cuts in small inputs).
MIN_CHUNK_BYTES = 4 << 20
#: How far past a nominal cut we look for a safe line to start a range on.
_SEARCH = 4 << 20
#: A range may start on any unindented line with no multi-line construct (Python traceback, torchelastic
#: failure block, NCCL WARN with continuation lines) in the bytes just before it, so no multi-line event is
#: cut in two.
_SAFE_START = re.compile(rb"\n(?=[^\s])")
_LOOKBACK = 16 << 10
_TRACEBACK_HINTS = (b"Traceback (most recent call last)", b'  File "', b"Failures:", b"NCCL WARN")


@dataclass(frozen=True, slots=True)
class Unit:
    """One piece of work: a source, or the byte range [start, end) of a plain file (end -1: to EOF)."""

    index: int
    source: Source
    start: int = 0
    end: int = -1


@dataclass(slots=True)
class UnitResult:
    index: int
    path: str
    events: list[bytes]  # batches of events (pack_batches); Analyzer.run_parallel unpacks them (unpack_batches)
    lines: int
    text: int
    compacted: int
    warnings: list[str]
    parser_errors: int = 0
    cut_lines: int = 0  # lines cut to MAX_LINE in this unit
    first_cut: int = 0  # the first of them, relative to the unit's first line
    counted: int = 0  # lines the fast path accounted for without the full path (triage.py)
    n_events: int = 0  # events in ``events``
    n_tail: int = 0  # of them, the last ones, from the parsers' end-of-input flush (``ChatterMerge``)
    lasts: list[bytes] | None = None  # the flush's last chatter line of each process (batches; ``ChatterMerge``)


def plan_units(sources: list[Source], workers: int = 1, chunk_bytes: int = CHUNK_BYTES) -> list[Unit]:
    """Units in input order; large uncompressed files are cut at safe line starts.

    Ranges are at most ``chunk_bytes`` and small enough that every worker gets about two of them.
    """
    units: list[Unit] = []
    sizes = [_plain_size(src) for src in sources]
    total = sum(s or 0 for s in sizes)
    chunk_bytes = max(MIN_CHUNK_BYTES, min(chunk_bytes, total // max(1, 2 * workers)))
    for src, size in zip(sources, sizes):
        if size is None or size <= chunk_bytes * 1.5:
            units.append(Unit(len(units), src))
            continue
        cuts = [0]
        with open(src.real, "rb") as f:  # type: ignore[arg-type]
            nominal = chunk_bytes
            while nominal < size - chunk_bytes // 2:
                cut = _safe_cut(f, nominal, size)
                if cut is not None and cut > cuts[-1]:
                    cuts.append(cut)
                nominal = max(nominal + chunk_bytes, (cut or 0) + chunk_bytes // 2)
        bounds = cuts + [-1]
        for a, b in zip(bounds, bounds[1:]):
            units.append(Unit(len(units), src, a, b))
    return units


def _plain_size(src: Source) -> int | None:
    if src.real is None:
        return None
    try:
        with open(src.real, "rb") as f:
            if f.read(2) == b"\x1f\x8b":
                return None  # gzip cannot be entered in the middle
        return os.path.getsize(src.real)
    except OSError:
        return None


def _safe_cut(f, nominal: int, size: int) -> int | None:
    f.seek(max(0, nominal - _LOOKBACK))
    window = f.read(min(_SEARCH + _LOOKBACK, size - max(0, nominal - _LOOKBACK)))
    base = max(0, nominal - _LOOKBACK)
    pos = nominal - base
    while True:
        m = _SAFE_START.search(window, pos)
        if m is None:
            return None
        before = window[max(0, m.start() - _LOOKBACK):m.start()]
        hits = [before.rfind(h) for h in _TRACEBACK_HINTS]
        last = max(hits)
        if last < 0:
            return base + m.start() + 1
        # skip past the construct: look again a lookback's length after its last trace
        pos = max(m.start() + 1, m.start() - len(before) + last + _LOOKBACK)


def line_offsets(units: list[Unit]) -> list[int]:
    """For each unit, the number of lines before it in its file (counting newlines, ~1 GB/s)."""
    out: list[int] = []
    prev_path, count, pos = None, 0, 0
    f = None
    try:
        for u in units:
            if u.source.path != prev_path:
                if f is not None:
                    f.close()
                f = open(u.source.real, "rb") if u.start or u.end >= 0 else None  # type: ignore[arg-type]
                prev_path, count, pos = u.source.path, 0, 0
            if f is not None and u.start > pos:
                f.seek(pos)
                left = u.start - pos
                while left > 0:
                    block = f.read(min(left, 16 << 20))
                    if not block:
                        break
                    count += block.count(b"\n")
                    left -= len(block)
                pos = u.start
            out.append(count)
    finally:
        if f is not None:
            f.close()
    return out


def iter_unit_lines(unit: Unit, first_line: int = 0) -> Iterator:
    """Clean lines of one unit, numbered from ``first_line + 1``."""
    src = unit.source
    stream = open_binary(src)
    local = Source(path=src.path, real=src.real, local_rank=src.local_rank, rank=src.rank)
    try:
        if unit.start:
            stream.seek(unit.start)
        limited = _Limited(stream, unit.end - unit.start) if unit.end >= 0 else stream
        lineno = first_line
        for s, truncated in read_text_lines(limited, local, sniff=not unit.start):
            lineno += 1
            yield clean_text(s, local, lineno, truncated)
    finally:
        stream.close()


def parse_unit(unit: Unit, inert: frozenset[str] = frozenset(), stage_only: frozenset[str] = frozenset()) -> UnitResult:
    """Worker: parse one unit in compact mode; line numbers are relative to the unit's first line.

    ``inert``: the kinds the fast path may count without parsing (triage.py; the caller's rules decide).
    """
    src = unit.source
    stream = open_binary(src)
    events: list[Event] = []
    # (the chatter lines compact mode keeps come out unparsed: ChatterMerge parses the few the job keeps)
    es = EventStream(keep_text=False, compact=True, defer=True)
    local = Source(path=src.path, real=src.real, local_rank=src.local_rank, rank=src.rank, fast=src.fast)
    counted = 0
    try:
        if unit.start:
            stream.seek(unit.start)
        limited = _Limited(stream, unit.end - unit.start) if unit.end >= 0 else stream
        if local.fast:
            res = triage.scan(limited, local, es, inert, events.extend, stage_only=stage_only)
            lineno, counted = res.lines, res.counted
        else:
            # The main process sniffed the source for binary content before planning (analysis.analyze).
            lineno = 0
            for s, truncated in read_text_lines(limited, local, sniff=False):
                lineno += 1
                out = es.feed(clean_text(s, local, lineno, truncated))
                if out:
                    events.extend(out)
        scanned = len(events)
        lasts = []
        for ev in es.flush():
            (lasts if chatter_key_of(ev) is not None else events).append(ev)
    finally:
        stream.close()
    n_events = len(events)
    # Sent in compressed batches (pack_batches): the main process holds the events of up to ``workers`` ranges at a
    # time (the first range of a 1,000-rank job: 53,000 init events; one with the end of a failed job: tens of
    # thousands of torch blocks of 1-6 KiB each), and unpacks one batch at a time, as it folds them in.
    return UnitResult(unit.index, src.path, pack_batches(events), lineno, es.counts["text"], es.compacted,
                      local.warnings, es.parser_errors, local.cut_lines, local.first_cut, counted, n_events,
                      n_events - scanned, pack_batches(lasts))


#: Events per batch. One pickle of many events stores once what they repeat (kind, path, host: pickle's memo) and
#: costs far less than one pickle per event; zlib (level 1) shrinks what the main process holds while it waits.
BATCH = 512


def pack_batches(events: list[Event]) -> list[bytes]:
    """``events`` as compressed pickles of ``BATCH`` events each; ``events`` is emptied as it goes (each batch's
    events are freed once it is made: the whole list and all its batches are never held at once)."""
    out: list[bytes] = []
    for i in range(0, len(events), BATCH):
        part = events[i:i + BATCH]
        out.append(zlib.compress(pickle.dumps(part, pickle.HIGHEST_PROTOCOL), 1))
        events[i:i + BATCH] = [None] * len(part)  # type: ignore[list-item]
        del part
    events.clear()
    return out


def unpack_batches(batches: list[bytes]) -> Iterator[Event]:
    """The events of ``pack_batches``, in order; each batch is dropped from ``batches`` once it is unpacked."""
    for i, b in enumerate(batches):
        batches[i] = b""
        yield from pickle.loads(zlib.decompress(b))


class ChatterMerge:
    """The NCCL parser's compact mode across ranges, in the main process (``Analyzer.run_parallel``).

    A worker compacts the chatter of its own range only (``NcclParser``: the first line of each (process,
    chatter key) becomes an event, the last one of each process becomes one at the end of the range), so every
    range sends its processes' first collective call, ring, tree and transport line again, and its last ones
    (at 1,000 ranks with 2 workers: 102,786 events instead of one process's 83,316). Folding the ranges in order,
    this keeps what one process keeps: a first line whose (process, key) an earlier range already sent is what
    one process would have counted, and a range's last line of a process waits, as the parser's ``_chatter_last``
    does, until a later line of that process replaces it or a new key of it goes the full way. The ones still
    waiting after the last range are released with that range's other end-of-input events, merged by line (one
    process's final flush). ``compacted`` counts the events dropped.
    """

    __slots__ = ("seen", "last", "compacted", "_parser")

    def __init__(self) -> None:
        self.seen = ChatterSeen()  # (host, pid, chatter key), per process (parse/chatter_seen.py)
        self.last: dict[tuple, Event | DeferredChatter] = {}
        self.compacted = 0
        self._parser: NcclParser | None = None

    def event(self, ev: Event | DeferredChatter) -> Event:
        """``ev``, or the event of a chatter line a worker sent unparsed (``DeferredChatter``): what the worker's
        parser would have made of that line (an INFO line: one event, no parser state read or changed)."""
        if ev.__class__ is not DeferredChatter:
            return ev  # type: ignore[return-value]
        if self._parser is None:
            self._parser = NcclParser()
        return self._parser.feed(ev.as_line())[0]  # type: ignore[union-attr]

    def fold(self, events: Iterator[Event], n_events: int, n_tail: int, lasts: Iterator[Event],
             final: bool) -> Iterator[Event]:
        """The events of one range (``UnitResult``, already re-based), then with ``final`` the waiting last lines,
        as one process would have produced them; ``lasts``: the range's own last chatter line of each process."""
        tail_from = n_events - n_tail
        i = -1
        for i, ev in enumerate(events):
            if i == tail_from:
                self._wait(lasts)
                if final:
                    yield from self._merged(ev, events)
                    return
                yield ev
                continue
            key = chatter_key_of(ev) if i < tail_from else None
            if key is None:
                yield ev
                continue
            proc = (key[0], key[1])
            if key in self.seen:
                if self.last.get(proc) is not None:
                    self.compacted += 1
                self.last[proc] = ev
                continue
            if len(self.seen) < _CHATTER_CAP:
                self.seen.add(key)
            if self.last.pop(proc, None) is not None:
                self.compacted += 1
            yield self.event(ev)
        if i < tail_from:  # no other end-of-input event
            self._wait(lasts)
            if final:
                yield from self._merged(None, iter(()))

    def _wait(self, lasts: Iterator[Event]) -> None:
        for ev in lasts:
            key = chatter_key_of(ev)
            proc = (key[0], key[1]) if key is not None else (ev.host, ev.pid)
            if self.last.get(proc) is not None:
                self.compacted += 1
            self.last[proc] = ev

    def _merged(self, first: Event | None, rest: Iterator[Event]) -> Iterator[Event]:
        waiting = sorted(map(self.event, self.last.values()), key=lambda ev: ev.line)
        self.last.clear()
        tail = rest if first is None else itertools.chain((first,), rest)
        yield from heapq.merge(waiting, tail, key=lambda ev: ev.line)


def chatter_key_of(ev: Event) -> tuple | None:
    """(host, pid, chatter key) of an event the NCCL parser's compact mode would have compacted by, else None
    (a prefixed INFO line: ``NcclParser.feed``; legacy and cut prefixes carry ``prefix`` and are never
    compacted)."""
    if ev.__class__ is DeferredChatter:
        return (ev.host, ev.pid, ev.ckey)
    if ev.pid is None or ev.host is None or not ev.kind.startswith("nccl."):
        return None
    f = ev.fields
    if f.get("level") != "INFO" or "prefix" in f:
        return None
    msg = f.get("msg")
    ckey = _chatter_key(msg) if isinstance(msg, str) else None
    return None if ckey is None else (ev.host, ev.pid, ckey)


class _Limited:
    """A read1/read view of a binary stream that stops after ``left`` bytes."""

    __slots__ = ("_f", "_left")

    def __init__(self, f, left: int):
        self._f = f
        self._left = left

    def read1(self, n: int = -1) -> bytes:
        if self._left <= 0:
            return b""
        b = self._f.read(min(n if n > 0 else self._left, self._left))
        self._left -= len(b)
        return b

    read = read1


def _warm_parsers() -> None:
    # Build the Lark parsers before forking, so that workers inherit them instead of each building its own.
    from .parse import nccl, torch

    nccl.body_parser()
    torch._lark_torch()
    torch._lark_tb()


def worker_init() -> None:
    """In each worker: move everything inherited (grammars, caches) out of the cyclic GC's sight.

    Parsing allocates many short-lived objects; every full collection would otherwise walk the large, never
    garbage, Lark parser graphs (and touch their pages, undoing fork's copy-on-write sharing).
    """
    gc.freeze()


def worker_count() -> int:
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        n = os.cpu_count() or 1
    return max(1, min(n, 16))


def iter_results(units: list[Unit], workers: int, inert: frozenset[str] = frozenset(),
                 stage_only: frozenset[str] = frozenset()) -> Iterator[UnitResult]:
    """Results in unit order, at most ``workers`` units in flight (bounded memory)."""
    _warm_parsers()
    ctx = multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=worker_init) as pool:
        pending: list[Future] = []
        it = iter(units)
        for unit in it:
            pending.append(pool.submit(parse_unit, unit, inert, stage_only))
            if len(pending) >= workers:
                break
        while pending:
            fut = pending.pop(0)
            yield fut.result()
            nxt = next(it, None)
            if nxt is not None:
                pending.append(pool.submit(parse_unit, nxt, inert, stage_only))


def should_parallelize(sources: list[Source], workers: int) -> bool:
    if workers < 2:
        return False
    total = 0
    for src in sources:
        if src.real is None:
            return False  # stdin is one stream, read as it comes
        try:
            total += os.path.getsize(src.real)
        except OSError:
            return False
    return total >= MIN_PARALLEL_BYTES
