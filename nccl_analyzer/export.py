"""Event export (``nccl-analyze events``) and the pandas view (``load_events``)."""
from __future__ import annotations

import csv
import fnmatch
import io
import json
from collections import Counter
from typing import IO, Iterable, Iterator

from . import parallel
from .classify import EventStream
from .model import Event
from .flight.events import analyze_dumps, is_pointer, split_sources
from .sources import Inputs, as_specs, expand_inputs, iter_source

EXPORT_CHUNK_BYTES = 8 << 20
CSV_COLUMNS = ("kind", "path", "line", "end_line", "host", "pid", "tid", "rank", "cuda_dev", "time", "text", "fields")


def iter_events(specs: Inputs, *, keep_text: bool = True, stdin_name: str = "-") -> Iterator[Event]:
    """Events of all inputs, streaming, in input order within each input (one parser state per input); the
    ``flight.*`` events of Flight Recorder dumps (given, or named by the log) come last."""
    sources, dumps = split_sources(*_specs_and_sources(specs, stdin_name))
    yield from _with_flight(_iter_source_events(sources, keep_text), dumps)


def _with_flight(events: Iterable[Event], dumps: list[str]) -> Iterator[Event]:
    pointers: list[Event] = []
    for ev in events:
        if is_pointer(ev):
            pointers.append(ev)
        yield ev
    got = analyze_dumps(dumps, pointers)
    if got is not None:
        yield from got[3]



def _specs_and_sources(specs: Inputs, stdin_name: str):
    specs = as_specs(specs)  # once: a generator can be read only once
    return specs, expand_inputs(specs, stdin_name=stdin_name)


def _selected(events: Iterable[Event], kinds: tuple[str, ...]) -> Iterator[Event]:
    if not kinds:
        yield from events
        return
    for ev in events:
        if any(fnmatch.fnmatchcase(ev.kind, k) for k in kinds):
            yield ev


def _export_unit(args: tuple) -> tuple[str, Counter]:
    """Worker: one unit's events, already formatted (the JSON encoding is most of the export's cost)."""
    unit, first_line, fmt, kinds, keep_text = args
    counts: Counter = Counter()
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n") if fmt == "csv" else None
    stream = EventStream(keep_text=keep_text)

    def events() -> Iterator[Event]:
        for line in parallel.iter_unit_lines(unit, first_line):
            yield from stream.feed(line)
        yield from stream.flush()

    for ev in _selected(events(), kinds):
        counts[ev.kind] += 1
        _write_one(ev, fmt, buf, writer)
    return buf.getvalue(), counts


# One encoder for all events: json.dumps with non-default options builds a new encoder on every call.
_ENCODE = json.JSONEncoder(ensure_ascii=False, default=str).encode


def _write_one(ev: Event, fmt: str, out: IO[str], writer) -> None:
    if fmt == "jsonl":
        out.write(_ENCODE(ev.to_dict()))
        out.write("\n")
    elif fmt == "csv":
        writer.writerow(_csv_row(ev))
    else:
        out.write(_table_row(ev))


def write_events(specs: Inputs, *, fmt: str, out: IO[str], kinds: tuple[str, ...] = (), keep_text: bool = True,
                 redact: bool = False, stdin_name: str = "-", workers: int | None = None) -> Counter:
    """Write events as jsonl, csv or an aligned table; returns the count of events per kind.

    Big inputs are parsed and encoded in worker processes, in byte ranges whose output is written in input
    order (not with --redact: its name mapping must be learned in one pass to stay consistent).
    """
    sources, dumps = split_sources(*_specs_and_sources(specs, stdin_name))
    workers = parallel.worker_count() if workers is None else workers
    if fmt == "csv":
        csv.writer(out, lineterminator="\n").writerow(CSV_COLUMNS)
    if not redact and parallel.should_parallelize(sources, workers):
        counts = _write_parallel(sources, fmt, out, kinds, keep_text, workers)
        got = analyze_dumps(dumps, [])  # (the workers' events are not seen here: only the dumps given)
        if got is not None:
            writer = csv.writer(out, lineterminator="\n") if fmt == "csv" else None
            for ev in _selected(got[3], kinds):
                counts[ev.kind] += 1
                _write_one(ev, fmt, out, writer)
            out.flush()
        return counts
    counts: Counter = Counter()
    redactor = None
    if redact:
        from .redact import Redactor

        redactor = Redactor()
    writer = csv.writer(out, lineterminator="\n") if fmt == "csv" else None
    for ev in _selected(_with_flight(_iter_source_events(sources, keep_text), dumps), kinds):
        counts[ev.kind] += 1
        if redactor is not None:
            ev = redactor.event(ev)
        _write_one(ev, fmt, out, writer)
    out.flush()
    return counts


def _write_parallel(sources, fmt: str, out: IO[str], kinds: tuple[str, ...], keep_text: bool,
                    workers: int) -> Counter:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # Small ranges: a range's formatted output is held in memory until it is written.
    units = parallel.plan_units(sources, workers, chunk_bytes=EXPORT_CHUNK_BYTES)
    firsts = parallel.line_offsets(units)
    counts: Counter = Counter()
    parallel._warm_parsers()
    ctx = multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=parallel.worker_init) as pool:
        jobs = ((u, first, fmt, kinds, keep_text) for u, first in zip(units, firsts))
        for text, c in pool.map(_export_unit, jobs, chunksize=1):
            out.write(text)
            counts.update(c)
    out.flush()
    return counts


def _iter_source_events(sources, keep_text: bool) -> Iterator[Event]:
    for src in sources:
        stream = EventStream(keep_text=keep_text)
        for line in iter_source(src):
            yield from stream.feed(line)
        yield from stream.flush()


def _csv_row(ev: Event) -> list:
    return [ev.kind, ev.path, ev.line, ev.end_line, ev.host, ev.pid, ev.tid, ev.rank, ev.cuda_dev, ev.time, ev.text,
            json.dumps(ev.fields, ensure_ascii=False, default=str, sort_keys=True) if ev.fields else ""]


def _table_row(ev: Event) -> str:
    where = f"{ev.path}:{ev.line}"
    who = []
    if ev.rank is not None:
        who.append(f"r{ev.rank}")
    if ev.host:
        who.append(ev.host)
    if ev.pid is not None:
        who.append(str(ev.pid))
    summary = ", ".join(f"{k}={v}" for k, v in ev.fields.items() if k not in ("lines", "frames") and v is not None)
    if not summary:
        summary = ev.text
    if len(summary) > 160:
        summary = summary[:157] + "..."
    return f"{where:<40} {ev.kind:<28} {':'.join(who):<20} {summary}\n"


def events_dataframe(specs: Inputs, *, keep_text: bool = False):
    """A pandas DataFrame with one row per event: the common columns, then one column per field name.

    Args:
        specs: one input or a list (str or ``pathlib.Path``), as ``analysis.analyze`` takes them.
        keep_text: also keep ``text`` events.
    """
    import pandas as pd

    rows = [ev.to_dict() for ev in iter_events(specs, keep_text=keep_text)]
    base = [c for c in CSV_COLUMNS if c != "fields"]
    df = pd.DataFrame.from_records(rows)
    if df.empty:
        return pd.DataFrame(columns=base)
    ordered = [c for c in base if c in df.columns] + sorted(c for c in df.columns if c not in base)
    return df[ordered]
