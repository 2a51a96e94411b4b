"""Event export (``nccl-analyze events``) and the pandas view (``load_events``)."""
from __future__ import annotations

import csv
import fnmatch
import json
from collections import Counter
from typing import IO, Iterable, Iterator

from .classify import EventStream
from .model import Event
from .sources import expand_inputs, iter_source

CSV_COLUMNS = ("kind", "path", "line", "end_line", "host", "pid", "tid", "rank", "cuda_dev", "time", "text", "fields")


def iter_events(specs: list[str], *, keep_text: bool = True, stdin_name: str = "-") -> Iterator[Event]:
    """Events of all inputs, streaming, in input order within each input (one parser state per input)."""
    for src in expand_inputs(specs, stdin_name=stdin_name):
        stream = EventStream(keep_text=keep_text)
        for line in iter_source(src):
            yield from stream.feed(line)
        yield from stream.flush()


def _selected(events: Iterable[Event], kinds: tuple[str, ...]) -> Iterator[Event]:
    if not kinds:
        yield from events
        return
    for ev in events:
        if any(fnmatch.fnmatchcase(ev.kind, k) for k in kinds):
            yield ev


def write_events(specs: list[str], *, fmt: str, out: IO[str], kinds: tuple[str, ...] = (), keep_text: bool = True,
                 redact: bool = False, stdin_name: str = "-") -> Counter:
    """Write events as jsonl, csv or an aligned table; returns the count of events per kind."""
    counts: Counter = Counter()
    redactor = None
    if redact:
        from .redact import Redactor

        redactor = Redactor()
    writer = None
    if fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(CSV_COLUMNS)
    for ev in _selected(iter_events(specs, keep_text=keep_text, stdin_name=stdin_name), kinds):
        counts[ev.kind] += 1
        if redactor is not None:
            ev = redactor.event(ev)
        if fmt == "jsonl":
            out.write(json.dumps(ev.to_dict(), ensure_ascii=False, default=str))
            out.write("\n")
        elif fmt == "csv":
            assert writer is not None
            writer.writerow(_csv_row(ev))
        else:
            out.write(_table_row(ev))
    out.flush()
    return counts


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


def events_dataframe(specs: list[str], *, keep_text: bool = False):
    """A pandas DataFrame with one row per event: the common columns, then one column per field name."""
    import pandas as pd

    rows = [ev.to_dict() for ev in iter_events(specs, keep_text=keep_text)]
    base = [c for c in CSV_COLUMNS if c != "fields"]
    df = pd.DataFrame.from_records(rows)
    if df.empty:
        return pd.DataFrame(columns=base)
    ordered = [c for c in base if c in df.columns] + sorted(c for c in df.columns if c not in base)
    return df[ordered]
