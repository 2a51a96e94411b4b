"""Worker processes send the chatter lines compact mode keeps unparsed (``DeferredChatter``); the main process parses
only the ones one process keeps, into the very events the workers used to build (session 13, docs/speed.md)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nccl_analyzer import parallel
from nccl_analyzer.analysis import Analyzer, analyze
from nccl_analyzer.classify import EventStream
from nccl_analyzer.parse.chatter_seen import DeferredChatter
from nccl_analyzer.sources import expand_inputs

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def real_log(tmp_path_factory) -> Path:
    # real captured NCCL 2.28.9 lines over 64 ranks (benchmarks/real_log.py): rings, trees, transports, calls,
    # the culprit's OOM and the survivors' watchdog blocks
    out = tmp_path_factory.mktemp("deferred") / "job.log"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "real_log.py"), "--ranks", "64", "--steps", "120",
                    "-o", str(out)], check=True, capture_output=True)
    return out


def _units(log: Path) -> list[parallel.Unit]:
    units = parallel.plan_units(expand_inputs([str(log)]), workers=2, chunk_bytes=256 << 10)
    assert len(units) > 4, "the input is cut into several ranges"
    return units


def test_each_deferred_line_parses_to_the_event_the_worker_built(real_log, monkeypatch):
    monkeypatch.setattr(parallel, "MIN_CHUNK_BYTES", 64 << 10)
    units = _units(real_log)
    deferred = [parallel.parse_unit(u) for u in units]
    # the same ranges parsed as before this change: the worker's parser builds every event itself
    monkeypatch.setattr(parallel, "EventStream", lambda **kw: EventStream(**{**kw, "defer": False}))
    whole = [parallel.parse_unit(u) for u in units]
    merge = parallel.ChatterMerge()
    n = 0
    for a, b in zip(deferred, whole):
        for batches in ((a.events, b.events), (a.lasts, b.lasts)):
            got, want = list(parallel.unpack_batches(batches[0])), list(parallel.unpack_batches(batches[1]))
            assert len(got) == len(want)
            for g, w in zip(got, want):
                if g.__class__ is DeferredChatter:
                    n += 1
                    assert parallel.chatter_key_of(g) == parallel.chatter_key_of(w)
                    g = merge.event(g)
                assert g == w  # every attribute: kind, line, text, host, pid, tid, rank, time, fields
    assert n > 500, "the ranges sent chatter lines unparsed"


def test_parallel_folds_in_the_same_events_and_parses_few_chatter_lines(real_log, monkeypatch):
    monkeypatch.setattr(parallel, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.setattr(parallel, "MIN_CHUNK_BYTES", 64 << 10)
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 256 << 10)
    _units(real_log)

    def folded(workers: int) -> tuple[list, object]:
        seen: list = []
        orig = Analyzer.add_event

        def add_event(self, ev):
            seen.append((ev.to_dict(), parallel.chatter_key_of(ev) is not None))
            orig(self, ev)

        monkeypatch.setattr(Analyzer, "add_event", add_event)
        d = analyze([str(real_log)], workers=workers)
        monkeypatch.setattr(Analyzer, "add_event", orig)
        return seen, d

    sent = [0]
    parsed = [0]
    orig_unpack, orig_event = parallel.unpack_batches, parallel.ChatterMerge.event

    def unpack(batches):
        for ev in orig_unpack(batches):
            sent[0] += ev.__class__ is DeferredChatter
            yield ev

    def event(self, ev):
        parsed[0] += ev.__class__ is DeferredChatter
        return orig_event(self, ev)

    serial, s = folded(1)
    monkeypatch.setattr(parallel, "unpack_batches", unpack)
    monkeypatch.setattr(parallel.ChatterMerge, "event", event)
    par, p = folded(2)
    assert par == serial, "the same events, fields and line numbers, in the same order"
    assert p.root_cause is not None and p.root_cause.to_dict() == s.root_cause.to_dict()
    assert p.root_cause.id == "cuda_oom"
    # each range sends its processes' first and last chatter lines again; one process keeps far fewer
    assert sent[0] > parsed[0] + 200 and parsed[0] > 0
    assert parsed[0] == sum(1 for _, chatter in serial if chatter)
