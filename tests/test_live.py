"""Pipe mode (`... 2>&1 | nccl-analyze -`): byte-identical pass-through, live verdict, signals, closed stdout."""
from __future__ import annotations

import io
import json
import signal
import subprocess
import sys

import pytest

from jobs.jobkit import (EXIT, JOB_TIMEOUT, ROOT, SCENARIOS, SLOW_WRITER, analyzer, env, final_verdict, held_port,
                         needs_torch, run_job, torchrun, wait_for)
from nccl_analyzer import live
from nccl_analyzer.model import Evidence, Event, Fix, RootCause
from nccl_analyzer.sources import MAX_LINE, Source, read_raw_lines

FIX = ROOT / "fixtures" / "h200-nccl-2.28.9"
RANK_EXC = FIX / "05_rank_exception" / "log.txt"
PORT = FIX / "03_port_in_use" / "log.txt"


# The torch parser hands over a finished traceback when the next torch line arrives (or at the end).
TORCH_LINE = (b"W1129 13:57:15.332000 1354 torch/distributed/elastic/multiprocessing/api.py:1028] "
              b"Sending process 1375 closing signal SIGTERM\n")


def _reap(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=JOB_TIMEOUT)


def pipe(data: bytes, *args: str, timeout: float = JOB_TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run(analyzer(*args), input=data, capture_output=True, env=env(), timeout=timeout)


# -- the line splitter (no subprocess) --------------------------------------------------------------------

DIRTY = (b"plain\n\xff\xfe invalid utf-8\r\nbar\rredraw\rdone\n\x00nul\x1b[31mred\x1b[0m\n\n"
         + b"x" * (MAX_LINE + 10) + b"\nafter long\nno newline at end")


@pytest.mark.parametrize("size", [1, 3, 7, 4096, 1 << 20])
def test_splitter_matches_read_raw_lines_for_any_chunking(size):
    want = list(read_raw_lines(io.BytesIO(DIRTY), Source(path="x", real=None)))
    sp = live.LineSplitter()
    got, logged = [], []
    for i in range(0, len(DIRTY), size):
        for log_bytes, raw in sp.feed(DIRTY[i:i + size]):
            logged.append(log_bytes)
            if raw is not None:
                got.append(raw)
    for log_bytes, raw in sp.flush():
        logged.append(log_bytes)
        got.append(raw)
    assert got == want
    assert b"".join(logged) == DIRTY, "the log side keeps every byte, the rest of a long line included"


def test_run_pipe_in_process_passes_dirty_bytes_through(tmp_path):
    out, err = io.BytesIO(), io.StringIO()
    diagnosis = live.run_pipe(["-"], stdin=io.BytesIO(DIRTY), stdout=out, stderr=err, stdin_name="job")
    assert out.getvalue() == DIRTY
    assert diagnosis.inputs[0].path == "job" and diagnosis.inputs[0].lines == 8
    assert "nccl-analyze ══ verdict" in err.getvalue()


def test_run_pipe_quiet_files_first(tmp_path):
    first = tmp_path / "rank0.log"
    first.write_bytes(b"hello from a file\n")
    out, err = io.BytesIO(), io.StringIO()
    d = live.run_pipe([ "-", str(first)], stdin=io.BytesIO(b"from stdin\n"), stdout=out, stderr=err, quiet=True)
    assert out.getvalue() == b"", "--quiet: no pass-through"
    assert [i.path for i in d.inputs] == [str(first), "-"], "files are analyzed before stdin"
    assert "verdict" not in err.getvalue(), "--quiet: the CLI writes the report, not run_pipe"


# -- provisional verdict throttling (fake analyzer, fake clock) ---------------------------------------

class FakeAnalyzer:
    def __init__(self):
        self.calls = 0
        self.flushed = 0
        self.root: RootCause | None = None

    def feed(self, line):
        kind = line
        return [Event(kind=kind, path="-", line=1, text="")] if kind else []

    def provisional(self):
        self.calls += 1
        return self.root

    def flush(self, path=None):
        self.flushed += 1
        return [Event(kind="python.traceback", path="-", line=1, text="")]

    def finish(self):  # pragma: no cover - not used here
        raise AssertionError


def _root(rid: str, conf: float) -> RootCause:
    return RootCause(id=rid, title=f"{rid} happened", confidence=conf, ranks=(1,), hosts=("n1",),
                     evidence=(Evidence("-", 7, "the line"),), explanation="", fix=Fix("do this"))


def test_provisional_checked_on_errors_and_throttled_otherwise():
    now = [0.0]
    a = FakeAnalyzer()
    err = io.StringIO()
    la = live.LiveAnalysis(a, live.TextOut(err), clock=lambda: now[0])
    for _ in range(1000):  # ordinary events in the same instant: no check
        la.feed("nccl.info")
    assert a.calls == 0
    now[0] += 0.6
    la.feed("nccl.info")
    assert a.calls == 1
    la.feed("")  # no event, no check
    now[0] += 0.06
    la.feed("python.traceback")
    assert a.calls == 2, "an error-ish event is checked at once"
    la.feed("nccl.warn.socket")  # within URGENT_GAP: held back ...
    assert a.calls == 2
    now[0] += 0.06
    la.idle()  # ... and run when input pauses
    assert a.calls == 3
    la.idle()
    assert a.calls == 3, "nothing new: no check"


def test_idle_input_closes_open_blocks_once():
    """After IDLE_FLUSH s without input the parsers' open blocks are closed (and checked), once."""
    now = [0.0]
    a = FakeAnalyzer()
    la = live.LiveAnalysis(a, live.TextOut(io.StringIO()), clock=lambda: now[0])
    la.idle()
    assert a.flushed == 0, "nothing was fed"
    la.feed("")
    la.idle()
    now[0] += live.IDLE_FLUSH - 0.1
    la.idle()
    assert a.flushed == 0
    now[0] += 0.2
    la.idle()
    assert a.flushed == 1 and a.calls == 1, "flushed, and the traceback it closed was checked"
    now[0] += 10
    la.idle()
    assert a.flushed == 1, "once per quiet spell"
    la.feed("")
    la.idle()
    now[0] += live.IDLE_FLUSH
    la.idle()
    assert a.flushed == 2


def test_provisional_block_printed_once_and_for_a_better_root_only():
    now = [0.0]
    a = FakeAnalyzer()
    err = io.StringIO()
    la = live.LiveAnalysis(a, live.TextOut(err), clock=lambda: now[0])

    def step(root):
        a.root = root
        now[0] += 1
        la.feed("python.traceback")
        assert err.getvalue().count("root cause so far") == shown[0], "not at once: SHOW_DELAY"
        now[0] += live.SHOW_DELAY + 0.01
        la.idle()
        shown[0] = err.getvalue().count("root cause so far")
        return shown[0]

    shown = [0]

    assert step(None) == 0
    assert step(_root("peer_exit", 0.5)) == 1
    assert step(_root("peer_exit", 0.55)) == 1, "same id, a bit more confident: no new block"
    assert step(_root("peer_exit", 0.7)) == 2, "clearly more confident: a new block"
    assert step(_root("app_exception", 0.6)) == 3, "a different root cause: a new block"
    text = err.getvalue()
    assert "app_exception" in text and "-:7: the line" in text and "fix: do this" in text


def test_provisional_block_dropped_when_input_ends_right_after():
    """A job torn down right after the failure: no block that only repeats the final verdict."""
    now = [0.0]
    a = FakeAnalyzer()
    a.root = _root("app_exception", 0.7)
    err = io.StringIO()
    la = live.LiveAnalysis(a, live.TextOut(err), clock=lambda: now[0])
    now[0] += 1
    la.feed("python.traceback")
    now[0] += live.SHOW_DELAY / 2
    la.idle()
    la.analyzer.finish = lambda: "diagnosis"  # the input ends here: finish() drops the pending block
    assert la.finish() == "diagnosis"
    la.idle()
    now[0] += 10
    la.idle()
    assert "root cause so far" not in err.getvalue()


# -- real subprocesses on captured logs (fast) --------------------------------------------------------

def test_pipe_subprocess_fixture_passthrough_and_verdict():
    data = PORT.read_bytes()
    res = pipe(data, "-")
    assert res.stdout == data
    err = res.stderr.decode()
    assert "error[port_conflict]" in final_verdict(err), err
    assert "Traceback" not in err.split("nccl-analyze ══")[0]
    assert res.returncode == 1


def test_pipe_unbuffered_line_appears_before_the_writer_exits(tmp_path):
    """A line the job wrote is on our stdout while the job still runs: the slow writer waits for the test's go file
    (made only once the line is here) before its second line, so the order is checked, not a speed."""
    go = tmp_path / "go"
    writer = subprocess.Popen([sys.executable, str(SLOW_WRITER), str(go)], stdout=subprocess.PIPE)
    reader = subprocess.Popen(analyzer("-"), stdin=writer.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=env())
    writer.stdout.close()
    try:
        first = reader.stdout.readline()  # a held-back line comes only when the writer ends (its wait is capped)
        assert first == b"first line from the job\n"
        assert writer.poll() is None, "the first line came only once the writer had ended"
        go.touch()
        rest, err = reader.communicate(timeout=JOB_TIMEOUT)
    finally:
        _reap(writer)
        _reap(reader)
        reader.stdout.close()
        reader.stderr.close()
    assert rest == b"second line from the job\n"
    assert reader.returncode == 0 and b"no failure found" in err


def test_pipe_closed_stdout_head_no_traceback(tmp_path):
    big = tmp_path / "big.log"
    big.write_bytes(PORT.read_bytes() * 300)  # ~2 MB: far more than a pipe holds, so head's exit is felt
    script = f'{" ".join(map(str, analyzer("-")))} < {big} 2> {tmp_path / "err"} | head -1; echo "${{PIPESTATUS[0]}}"'
    res = run_job(["bash", "-c", script], merged=False, text=False, env=env())
    first, status = res.stdout.decode().splitlines()
    err = (tmp_path / "err").read_text()
    assert first == PORT.read_text().splitlines()[0]
    assert "Traceback" not in err and "Exception ignored" not in err and "Broken pipe" not in err, err
    assert status == "1", "the analysis went on to the end and found the failure"
    assert "error[port_conflict]" in final_verdict(err)


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_pipe_signal_mid_stream_prints_verdict_of_what_was_seen(tmp_path, sig, code):
    out, err = tmp_path / "out", tmp_path / "err"
    sent = PORT.read_bytes() + TORCH_LINE + b"the job goes on and on\n"
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen(analyzer("-"), stdin=subprocess.PIPE, stdout=fo, stderr=fe, env=env())
        try:
            proc.stdin.write(sent)
            proc.stdin.flush()
            wait_for(err, b"root cause so far: port_conflict")  # the provisional verdict, while input is open
            proc.send_signal(sig)  # the input is still open: the job is "still running"
            rc = proc.wait(timeout=JOB_TIMEOUT)
        finally:
            proc.stdin.close()
            _reap(proc)
    text = err.read_text()
    assert rc == code, text
    assert "Traceback" not in text
    verdict = final_verdict(text)
    assert f"stopped by {sig.name}" in verdict and "error[port_conflict]" in verdict
    assert out.read_bytes() == sent


# -- real torchrun jobs (gloo on CPU) -------------------------------------------------------------------

@pytest.fixture(scope="module")
def captured():
    """Each scenario run once under torchrun: its combined stdout+stderr bytes and exit status."""
    runs = {}
    for rid, (mode, nproc, extra, hold) in SCENARIOS.items():
        with held_port(hold) as port:
            res = run_job(torchrun(mode, nproc, port), text=False, env=env(**extra))
        runs[rid] = (res.stdout, res.returncode)
    return runs


@pytest.mark.slow
@needs_torch
@pytest.mark.parametrize("rid", list(SCENARIOS))
def test_pipe_torchrun_captured(captured, rid):
    data, status = captured[rid]
    assert status == EXIT[rid], data.decode(errors="replace")[-2000:]
    res = pipe(data, "-", "--stdin-name", "torchrun")
    assert res.stdout == data, "the pass-through is byte-identical"
    err = res.stderr.decode()
    assert f"error[{rid}]" in final_verdict(err), err
    assert res.returncode == 1


@pytest.mark.slow
@needs_torch
@pytest.mark.parametrize("rid", list(SCENARIOS))
def test_pipe_torchrun_shell_pipeline(tmp_path, rid):
    mode, nproc, extra, hold = SCENARIOS[rid]
    with held_port(hold) as port:
        cmd = " ".join(map(str, torchrun(mode, nproc, port)))
        ours = " ".join(analyzer("-", "--format", "json", "-o", str(tmp_path / "r.json")))
        script = (f"{cmd} 2>&1 | tee {tmp_path / 'raw'} | {ours} > {tmp_path / 'out'} 2> {tmp_path / 'err'}; "
                  'echo "${PIPESTATUS[@]}"')
        res = run_job(["bash", "-c", script], merged=False, text=False, env=env(**extra))
    statuses = res.stdout.decode().split()
    err = (tmp_path / "err").read_text()
    assert (tmp_path / "out").read_bytes() == (tmp_path / "raw").read_bytes()
    assert statuses == [str(EXIT[rid]), "0", "1"], err
    assert f"error[{rid}]" in final_verdict(err), err
    assert json.loads((tmp_path / "r.json").read_text())["root_cause"]["id"] == rid


# -- memory (the benchmark does 2M lines: benchmarks/live_memory.py) ----------------------------------

@pytest.mark.slow
def test_pipe_memory_stays_flat():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from live_memory import measure
    finally:
        sys.path.pop(0)
    # Unique NCCL COLL lines, training prints, torch warnings, new communicators: nothing may grow.
    samples = measure(lines=400_000, samples=4)
    (n0, first), (n1, last) = samples[0], samples[-1]
    assert last - first < 8 * 1024, f"RSS grew {last - first} KiB from {n0} to {n1} lines: {samples}"


# -- the progress indicator (the CLI's, for long file analyses on a TTY) -----------------------------

def test_progress_redraws_in_place_throttled_and_erases():
    from nccl_analyzer.progress import DELAY, INTERVAL, Progress

    now = [0.0]
    out = io.StringIO()
    p = Progress(out, clock=lambda: now[0])
    p.update(10)
    assert out.getvalue() == "", "nothing during the first DELAY s"
    now[0] = DELAY
    p.update(1000, 2_000_000)
    assert out.getvalue() == "\rnccl-analyze: reading 1,000 lines, 2.0 MB"
    for n in range(1001, 2000):
        p.update(n)  # same instant: no redraw
    assert out.getvalue().count("\r") == 1
    now[0] += INTERVAL + 1
    p.update(5000)
    assert out.getvalue().endswith("5,000 lines (3,125 lines/s)")
    p.done()
    assert out.getvalue().endswith("\r" + " " * len("nccl-analyze: reading 5,000 lines (3,125 lines/s)") + "\r")
    p.update(6000)
    p.done()
    assert "6,000" not in out.getvalue()
