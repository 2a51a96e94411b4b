"""Parsing in several processes gives the same diagnosis as one process, cut points never split events."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nccl_analyzer import parallel
from nccl_analyzer.analysis import analyze
from nccl_analyzer.sources import expand_inputs

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture()
def big_log(tmp_path: Path) -> Path:
    out = tmp_path / "job.log"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "generate_log.py"), "--ranks", "64",
                    "--lines", "60000", "-o", str(out)], check=True, capture_output=True)
    # a real failure buried in the middle: the OOM fixture's traceback must not be cut by a range boundary
    text = out.read_text().splitlines(keepends=True)
    oom = (ROOT / "fixtures" / "h200-nccl-2.28.9" / "06_oom" / "log.txt").read_text().splitlines(keepends=True)
    mid = len(text) // 2
    out.write_text("".join(text[:mid] + oom + text[mid:]))
    return out


def test_parallel_equals_serial(big_log, monkeypatch):
    monkeypatch.setattr(parallel, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.setattr(parallel, "MIN_CHUNK_BYTES", 64 << 10)
    units = parallel.plan_units(expand_inputs([str(big_log)]), workers=2, chunk_bytes=256 << 10)
    assert len(units) > 4, "the input is cut into several ranges"
    serial = analyze([str(big_log)], workers=1)
    par = analyze([str(big_log)], workers=2)
    assert par.root_cause is not None and serial.root_cause is not None
    assert par.root_cause.to_dict() == serial.root_cause.to_dict()
    assert [f.to_dict() for f in par.findings] == [f.to_dict() for f in serial.findings]
    assert par.inputs == serial.inputs
    assert par.job.to_dict()["ranks"] == serial.job.to_dict()["ranks"]
    ev = par.root_cause.evidence[0]
    lines = big_log.read_text().splitlines()
    assert lines[ev.line - 1] == ev.text, "evidence line numbers are right after re-basing"


def test_cuts_start_on_unindented_lines_outside_tracebacks(big_log):
    units = parallel.plan_units(expand_inputs([str(big_log)]), workers=2, chunk_bytes=128 << 10)
    data = big_log.read_bytes()
    for u in units[1:]:
        assert data[u.start - 1:u.start] == b"\n"
        assert data[u.start:u.start + 1].strip(), "a range starts on an unindented line"
    tb = data.index(b"[rank0]: Traceback (most recent call last):")
    end = data.index(b"[rank0]: torch.OutOfMemoryError", tb)
    assert not [u for u in units if tb < u.start <= end], "no range starts inside the traceback"


def test_parallel_events_export_is_byte_identical(big_log, monkeypatch, tmp_path):
    import io

    from nccl_analyzer import export

    monkeypatch.setattr(parallel, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.setattr(parallel, "MIN_CHUNK_BYTES", 64 << 10)
    monkeypatch.setattr(export, "EXPORT_CHUNK_BYTES", 200 << 10)
    for fmt in ("jsonl", "csv"):
        serial, par = io.StringIO(), io.StringIO()
        c1 = export.write_events([str(big_log)], fmt=fmt, out=serial, workers=1)
        c2 = export.write_events([str(big_log)], fmt=fmt, out=par, workers=2)
        assert c1 == c2 and sum(c1.values()) > 50000
        assert serial.getvalue() == par.getvalue()


def test_event_batches_read_back_equal_in_order_and_free_the_list():
    from nccl_analyzer.model import Event

    shared = {"lines": ["a", "b"]}
    events = [Event("nccl.info", "log", i, f"h:1:1 [0] NCCL INFO x {i}", host="h", pid=1, fields={"msg": f"x {i}"})
              for i in range(parallel.BATCH * 2 + 3)]
    events.append(Event("python.traceback", "log", 9999, "Traceback", fields=shared))
    want = [Event(e.kind, e.path, e.line, e.text, host=e.host, pid=e.pid, fields=dict(e.fields)) for e in events]
    batches = parallel.pack_batches(events)
    assert events == [] and len(batches) == 3 and all(isinstance(b, bytes) for b in batches)
    got = list(parallel.unpack_batches(batches))
    assert got == want and batches == [b"", b"", b""]
    # the strings every event of a batch repeats come back as one object (pickle's memo), as they went
    assert got[0].path is got[1].path and got[0].host is got[1].host


def _folded(monkeypatch, log: Path, workers: int) -> tuple[list[tuple], dict]:
    """(kind, line, text) of every event the analysis folds in, in order, and the diagnosis's stats."""
    from nccl_analyzer.analysis import Analyzer

    seen: list[tuple] = []
    orig = Analyzer.add_event

    def add_event(self, ev):
        seen.append((ev.kind, ev.line, ev.text))
        orig(self, ev)

    monkeypatch.setattr(Analyzer, "add_event", add_event)
    d = analyze([str(log)], workers=workers)
    monkeypatch.setattr(Analyzer, "add_event", orig)
    return seen, d.stats


def test_parallel_folds_in_the_events_one_process_does(big_log, monkeypatch):
    """Each range compacts its own chatter only; the main process compacts across ranges (ChatterMerge): the
    events folded in are exactly one process's (each range would else send its processes' first and last
    collective call, ring, tree and transport line again)."""
    monkeypatch.setattr(parallel, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.setattr(parallel, "MIN_CHUNK_BYTES", 64 << 10)
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 256 << 10)
    assert len(parallel.plan_units(expand_inputs([str(big_log)]), workers=2, chunk_bytes=256 << 10)) > 4
    serial, s_stats = _folded(monkeypatch, big_log, 1)
    par, p_stats = _folded(monkeypatch, big_log, 2)
    assert sum(k.startswith(("nccl.coll", "nccl.transport", "nccl.ring")) for k, _, _ in serial) > 100
    assert sorted(par) == sorted(serial)
    assert par == serial, "and in the same order"
    for key in ("events", "kinds", "compacted", "lines"):
        assert p_stats[key] == s_stats[key], key


def test_chatter_merge_keeps_the_first_and_the_last_line_of_each_process():
    from nccl_analyzer.model import Event

    def call(line, pid, op="AllReduce"):
        body = f"{op}: opCount {line:x} sendbuff 0x7f00 recvbuff 0x7f00 count 1 datatype 7 op 0 root 0 comm 0x1"
        return Event("nccl.coll", "log", line, f"h:{pid}:{pid} [0] NCCL INFO {body}", host="h", pid=pid,
                     fields={"level": "INFO", "msg": body})

    m = parallel.ChatterMerge()
    info = Event("nccl.info", "log", 3, "h:1:1 [0] NCCL INFO x", host="h", pid=1, fields={"level": "INFO", "msg": "x"})
    end = Event("torch.work.status", "log", 15, "[rank0]: ...", fields={})
    # range 1: first calls of pids 1 and 2, an INFO line; its last call of pid 1 (its end-of-input flush)
    got = list(m.fold(iter([call(1, 1), call(2, 2), info]), 3, 0, iter([call(9, 1)]), False))
    assert [e.line for e in got] == [1, 2, 3]
    # range 2 (the last): pid 1's first call again (one process counted it: it waits as pid 1's last line), pid 2's
    # first Broadcast (a new key: pid 2's waiting last line, none here, would be dropped), another event of the
    # flush (line 15), its own last calls of pids 1 and 2: released with it, in line order
    got = list(m.fold(iter([call(11, 1), call(12, 2, "Broadcast"), end]), 3, 1, iter([call(19, 1), call(13, 2)]),
                      True))
    assert [e.line for e in got] == [12, 13, 15, 19]
    assert m.compacted == 2 and not m.last  # pid 1's line 9 (replaced by 11), then 11 (by 19)


def test_a_source_read_line_by_line_is_read_in_one_process(big_log, monkeypatch):
    # A source whose lines are rewritten before parsing (a paste, binary bytes at its head: plain_raw is False)
    # cannot be cut into ranges: with workers the analysis reads it as one process does (it used to reach the
    # workers' per-line branch, which raised UnboundLocalError), and that branch works when called.
    from nccl_analyzer import analysis

    monkeypatch.setattr(parallel, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.setattr(parallel, "MIN_CHUNK_BYTES", 64 << 10)
    monkeypatch.setattr(analysis, "plain_raw", lambda src: False)
    serial = analyze([str(big_log)], workers=1)
    par = analyze([str(big_log)], workers=2)
    assert par.root_cause is not None and par.root_cause.to_dict() == serial.root_cause.to_dict()
    assert par.inputs == serial.inputs
    src = expand_inputs([str(big_log)])[0]
    src.fast = False
    res = parallel.parse_unit(parallel.Unit(0, src))
    assert res.lines == len(big_log.read_text().splitlines()) and res.n_events > 0
