"""Flight Recorder dumps in the pipeline: find them among the inputs (by content) and where the log says torch
wrote them, read and align them, and hand the result on as ``flight.*`` events plus a per-rank table
(``JobModel.extra["flight"]``) for the renderers.

A dump has no lines: its events point at the dump file with ``line`` = the 1-based entry number, and their
``text`` is that entry written on one line (``reader.Entry.summary``), prefixed with the rank that recorded it.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

from ..model import Event
from ..ranks import rank_ranges
from .align import Alignment, SeqReport, align, site_text, user_frame
from .reader import Dump, DumpError, read_dump, sniff

#: Files besides the ones ``sources`` reads that a directory may hold dumps in (it skips these suffixes).
_DUMP_SUFFIXES = (".json", ".pkl", ".pickle")


def discover(specs: Iterable[str], log_paths: Iterable[str]) -> list[str]:
    """Dump files among the inputs, by content: files named on the command line (any pickle counts), files
    found in directories (the dump's keys must show), including the ``.json``/``.pkl`` files the log reader
    skips there."""
    out: list[str] = []
    seen: set[str] = set()

    def add(p: str) -> None:
        key = os.path.realpath(p)
        if key not in seen:
            seen.add(key)
            out.append(p)

    named = {os.path.realpath(s) for s in specs if os.path.isfile(s)}
    for p in log_paths:
        if sniff(p, strict=os.path.realpath(p) not in named):
            add(p)
    for s in specs:
        if os.path.isdir(s):
            for f in sorted(Path(s).rglob("*")):
                if f.suffix.lower() in _DUMP_SUFFIXES and f.is_file() and f.name != "label.json" and sniff(str(f)):
                    add(str(f))
    return out


def split_sources(specs: Iterable[str], sources: list[Any]) -> tuple[list[Any], list[str]]:
    """``sources`` (sources.Source) without the Flight Recorder dumps among them, and the dumps' paths
    (``discover``): dumps are read as dumps, never as text."""
    dumps = discover(specs, [s.real for s in sources if s.real])
    if dumps:
        real = {os.path.realpath(p) for p in dumps}
        sources = [s for s in sources if not s.real or os.path.realpath(s.real) not in real]
    return sources, dumps


def is_pointer(ev: Event) -> bool:
    """A log line naming the file torch wrote a dump to."""
    return ev.kind == "torch.flight_recorder" and ev.fields.get("stage") == "dumping"


def analyze_dumps(paths: list[str], pointers: list[Event]) -> tuple[list[Dump], list[tuple[str, str]], Alignment,
                                                                    list[Event]] | None:
    """Read the given dumps and those the log pointed to, align them, and build their events; None when there is
    no dump at all."""
    found: list[tuple[str, int | None]] = [(p, None) for p in paths]
    found += [(p, r) for p, r, _ in pointed_dumps(pointers, paths)]
    if not found:
        return None
    dumps, bad = load(found)
    al = align(dumps)
    return dumps, bad, al, build_events(al, bad)


def pointed_dumps(pointers: list[Event], have: Iterable[str]) -> list[tuple[str, int | None, Event]]:
    """Dump files the log says torch wrote (``dumping nccl trace to X``, ``Finished writing ... to X``): the path
    as printed when it exists, else the same file name beside the log (a job folder copied elsewhere)."""
    known = {os.path.realpath(p) for p in have}
    out: list[tuple[str, int | None, Event]] = []
    for ev in pointers:
        target = str(ev.fields.get("file") or "").strip()
        if not target:
            continue
        for cand in (target, os.path.join(os.path.dirname(ev.path), os.path.basename(target))):
            if os.path.isfile(cand):
                key = os.path.realpath(cand)
                if key not in known:
                    known.add(key)
                    out.append((cand, ev.rank, ev))
                break
    return out


def load(paths: list[tuple[str, int | None]]) -> tuple[list[Dump], list[tuple[str, str]]]:
    """Read dumps; returns the readable ones and ``(path, reason)`` for the others."""
    dumps: list[Dump] = []
    bad: list[tuple[str, str]] = []
    for path, rank in paths:
        try:
            dumps.append(read_dump(path, rank))
        except DumpError as exc:
            bad.append((path, str(exc)))
    return dumps, bad


def _ranks(rs: list[int]) -> str:
    return rank_ranges(rs) if rs else ""


def _who(rs: list[int]) -> str:
    if not rs:
        return ""
    return ("rank " if len(rs) == 1 else "ranks ") + _ranks(rs)


def build_events(al: Alignment, bad: list[tuple[str, str]]) -> list[Event]:
    """The alignment as events (docs/events.md, ``flight.*``)."""
    evs: list[Event] = []
    by_rank = {d.rank: d for d in al.dumps if d.rank is not None}
    for d in al.dumps:
        last = d.entries[-1] if d.entries else None
        evs.append(Event(kind="flight.dump", path=d.path, line=last.index if last else 0, rank=d.rank,
                         text=(f"rank {d.rank}: " if d.rank is not None else "") + (last.summary() if last else "no entries"),
                         fields={"format": d.format, "version": d.version, "entries": len(d.entries),
                                 "comm_lib_version": d.comm_lib_version or None}))
    for path, reason in bad:
        evs.append(Event(kind="flight.dump.unreadable", path=path, line=0, text=f"{path}: {reason}",
                         fields={"reason": reason}))
    if al.without_dump and al.dumps:
        evs.append(Event(kind="flight.dump.missing", path=al.dumps[0].path, line=0,
                         text=f"no Flight Recorder dump from {_who(al.without_dump)} (dumps from {_who(al.with_dump)})",
                         fields={"ranks": al.without_dump, "ranks_text": _ranks(al.without_dump),
                                 "have": _ranks(al.with_dump)}))
    st = al.stuck
    if st is not None:
        evs.extend(_culprit_events(st, al, by_rank, divergence=al.divergence))
    for m in al.mismatches:
        if st is not None and m.seq == st.seq and m.pg == st.pg:
            continue  # already told as the stuck collective's culprits
        evs.extend(_culprit_events(m, al, by_rank, kind="flight.mismatch"))
    dv = al.divergence
    if dv is not None and (st is None or (dv.pg, dv.seq) != (st.pg, st.seq)):  # an earlier id than the stuck one
        for r in dv.culprits:
            e = dv.entries[r]
            others = sorted(set(dv.sites) - set(dv.culprits))
            evs.append(Event(kind="flight.divergence", path=by_rank[r].path, line=e.index, rank=r,
                             text=f"rank {r}: {e.summary()}",
                             fields={**_common(dv), "site": dv.sites.get(r), "others": _ranks(others),
                                     "others_site": dv.sites.get(others[0]) if others else None}))
    return evs


def _common(f: SeqReport) -> dict[str, Any]:
    return {"pg": f.pg, "pg_desc": f.pg_desc or None, "seq": f.seq, "p2p": f.p2p, "op": f.op,
            "profiling_name": f.profiling_name, "seq_kind": "p2p_seq_id" if f.p2p else "collective_seq_id"}


def _culprit_events(f: SeqReport, al: Alignment, by_rank: dict[int, Dump], kind: str = "flight.culprit",
                    divergence: SeqReport | None = None) -> list[Event]:
    """One event per culprit rank of a stuck / mismatched collective (so a rule's ranks are the culprits)."""
    out: list[Event] = []
    entered = sorted(f.entries)
    others = sorted(set(f.entries) - set(f.culprits))
    ref = others[0] if others else (f.waiting[0] if f.waiting else None)
    for r in f.culprits:
        fields = {**_common(f), "reason": f.kind, "what": "/".join(f.what) or None,
                  "waiting": _ranks(f.waiting) or None, "entered_who": _who(entered) or None,
                  "culprits": _ranks(f.culprits), "culprits_who": _who(f.culprits),
                  "missing": _ranks(f.missing) or None, "no_dump": _ranks(f.no_dump) or None,
                  "called": f.values.get(r), "expected": f.values.get(ref) if ref is not None else None,
                  "others_who": _who(others) or None,
                  "site": f.sites.get(r), "others_site": f.sites.get(ref) if ref is not None else None,
                  "dump_missing": r not in by_rank, "overdue": f.overdue}
        dv = divergence
        if dv is not None and r in dv.culprits and dv.pg == f.pg and dv.seq < f.seq:
            # the same rank already called an earlier collective from another line than the rest (a skipped call)
            rest = sorted(set(dv.sites) - set(dv.culprits))
            fields.update(diverged_seq=dv.seq, diverged_op=dv.profiling_name, diverged_site=dv.sites.get(r),
                          diverged_others_site=dv.sites.get(rest[0]) if rest else None)
        if r in by_rank and r in f.entries:  # the culprit's own record of this id
            e = f.entries[r]
            path, line, text = by_rank[r].path, e.index, f"rank {r}: {e.summary()}"
        elif r in by_rank:  # its dump ends before this id: quote its last entry
            d = by_rank[r]
            last = d.entries[-1]
            path, line, text = d.path, last.index, f"rank {r}: {last.summary()} (its last entry)"
            fields["last_seq"] = last.p2p_seq if last.is_p2p else last.seq
            fields["last_op"] = last.profiling_name
            fields["last_site"] = site_text(user_frame(last.frames))
        elif ref is not None:  # no dump: quote a waiting rank's record of the collective it never joined
            e = f.entries[ref]
            path, line, text = by_rank[ref].path, e.index, f"rank {ref}: {e.summary()}"
        else:
            continue
        out.append(Event(kind=kind, path=path, line=line, rank=r, text=text, fields=fields))
    return out


def table(al: Alignment, bad: list[tuple[str, str]]) -> dict[str, Any]:
    """The per-rank table and the alignment's summary for ``JobModel.extra["flight"]`` (JSON-ready)."""
    out = al.to_dict()
    out["unreadable"] = [{"path": p, "reason": r} for p, r in bad]
    return out
