"""`nccl-analyze launch -- CMD`: tee byte-identical, job.log, reports, exit status, signals, no orphans."""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from jobs.jobkit import (EXIT, JOB_TIMEOUT, ROOT, SCENARIOS, SLOW_WRITER, analyzer, env, final_verdict, held_port,
                         needs_torch, run_job, torchrun, wait_for)

PORT_LOG = ROOT / "fixtures" / "h200-nccl-2.28.9" / "03_port_in_use" / "log.txt"


def launch(tmp_path: Path, *cmd: str, opts: tuple[str, ...] = (), **extra: str):
    return run_job(analyzer("launch", "--log-dir", str(tmp_path / "logs"), *opts, "--", *cmd), merged=False,
                   text=False, env=env(**extra), cwd=tmp_path)


def py(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


_OURS = re.compile(rb"^nccl-analyze: [^\n]*\n|\nnccl-analyze \xe2\x94\x80\xe2\x94\x80 root cause so far.*?"
                   rb"\n\xe2\x94\x80{72}\n\n|\nnccl-analyze \xe2\x95\x90\xe2\x95\x90 verdict.*", re.S | re.M)


def job_stderr(stderr: bytes) -> bytes:
    """The job's own stderr bytes: ours (messages, provisional blocks, the verdict) taken out."""
    return _OURS.sub(b"", stderr)


def _reap(proc: subprocess.Popen) -> None:
    """A failed test leaves no analyzer (and so no job) running."""
    if proc.poll() is None:
        proc.terminate()
        proc.wait(timeout=JOB_TIMEOUT)


def in_order(part: bytes, log: bytes) -> bool:
    """Every byte of ``part`` is in ``log``, in order. Bytes, not lines: job.log merges two pipes as their chunks
    come, and the job's workers write a line in pieces (print's text, then its newline, from two ranks on one pipe:
    "rank 0: ok, sum=2rank 1: ok, sum=2"), so a line of one stream can have the other's bytes inside it."""
    it = iter(log)
    return all(b in it for b in part)


# -- without torch -------------------------------------------------------------------------------------

def test_launch_command_not_found(tmp_path):
    res = launch(tmp_path, "no-such-command-nccl-xyz", "--flag")
    assert res.returncode == 2
    err = res.stderr.decode().strip()
    assert len(err.splitlines()) == 1 and "no-such-command-nccl-xyz" in err and "command not found" in err, err
    assert res.stdout == b"" and not (tmp_path / "logs").exists()


def test_launch_tees_both_streams_byte_identical(tmp_path):
    out = b"out 1\n\xff\xfe not utf-8\r\nprogress 10%\rprogress 100%\n" + b"y" * 70000 + b"\nlast, no newline"
    err = b"err 1\nTraceback (most recent call last):\n  File \"x.py\", line 1\nValueError: boom\n"
    code = f"""
        import os, sys, time
        for i, (fd, data) in enumerate([(1, {out!r}), (2, {err!r})] * 2):
            os.write(fd, data[:len(data) // 2]); time.sleep(0.01); os.write(fd, data[len(data) // 2:])
        sys.exit(3)
    """
    res = launch(tmp_path, *py(code))
    assert res.returncode == 3
    assert res.stdout == out * 2, "the job's stdout is ours, byte for byte"
    assert err * 2 in res.stderr, "the job's stderr is in ours, byte for byte"
    assert b"nccl-analyze: launching" in res.stderr.split(err)[0], "the start message comes first"
    log = (tmp_path / "logs" / "job.log").read_bytes()
    assert log.count(b"y" * 70000) == 2 and log.count(b"ValueError: boom\n") == 2
    assert (tmp_path / "logs" / "report.txt").read_text().strip()
    assert "status 3" in res.stderr.decode()


def test_launch_exit_status_of_a_signal_death(tmp_path):
    res = launch(tmp_path, *py("import os, signal; print('bye', flush=True); os.kill(os.getpid(), signal.SIGKILL)"))
    assert res.returncode == 128 + 9
    assert res.stdout == b"bye\n"
    assert "(SIGKILL)" in res.stderr.decode()


def test_launch_debug_env_added_kept_or_left_out(tmp_path):
    show = py("import os; print(' '.join(f'{k}={os.environ.get(k)}' for k in ['NCCL_DEBUG', 'PYTHONUNBUFFERED', "
              "'TORCH_NCCL_DUMP_ON_TIMEOUT', 'TORCH_FR_DUMP_TEMP_FILE']))")
    e = env()
    for k in ("NCCL_DEBUG", "PYTHONUNBUFFERED", "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_FR_DUMP_TEMP_FILE",
              "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"):
        e.pop(k, None)
    res = run_job(analyzer("launch", "--log-dir", "L", "--", *show), merged=False, text=False, env=e, cwd=tmp_path)
    logs = (tmp_path / "L").absolute()
    assert res.stdout.decode().split() == ["NCCL_DEBUG=INFO", "PYTHONUNBUFFERED=1", "TORCH_NCCL_DUMP_ON_TIMEOUT=1",
                                           f"TORCH_FR_DUMP_TEMP_FILE={logs}/fr_trace_rank_"]
    assert "added to its environment: NCCL_DEBUG=INFO" in res.stderr.decode()

    res = run_job(analyzer("launch", "--log-dir", "L", "--", *show), merged=False, text=False,
                  env=dict(e, NCCL_DEBUG="WARN"), cwd=tmp_path)
    assert res.stdout.decode().split()[0] == "NCCL_DEBUG=WARN"
    assert "kept your NCCL_DEBUG=WARN" in res.stderr.decode()

    res = run_job(analyzer("launch", "--no-debug-env", "--log-dir", "L", "--", *show), merged=False, text=False,
                  env=e, cwd=tmp_path)
    assert res.stdout.decode().split() == ["NCCL_DEBUG=None", "PYTHONUNBUFFERED=None",
                                           "TORCH_NCCL_DUMP_ON_TIMEOUT=None", "TORCH_FR_DUMP_TEMP_FILE=None"]


def test_launch_default_log_dir_in_cwd(tmp_path):
    res = run_job(analyzer("launch", "--", *py("print('hi')")), merged=False, text=False, env=env(), cwd=tmp_path)
    assert res.returncode == 0 and res.stdout == b"hi\n"
    (d,) = tmp_path.glob("nccl-analyze-*-*")
    assert (d / "job.log").read_bytes() == b"hi\n" and (d / "report.txt").exists()


def test_launch_unbuffered_and_provisional_verdict_while_running(tmp_path):
    """The job's lines and the provisional verdict show while the job still runs."""
    go = tmp_path / "go"
    code = f"""
        import os, sys, time
        # the traceback is the last thing on stderr: it shows once the output has been quiet for 2 s
        sys.stderr.buffer.write(open({str(PORT_LOG)!r}, 'rb').read()); sys.stderr.flush()
        print('still running', flush=True)
        deadline = time.monotonic() + 300  # until the test has seen the verdict (its go file), at most 300 s
        while not os.path.exists({str(go)!r}) and time.monotonic() < deadline:
            time.sleep(0.02)
        print('finished')
    """
    out, err = tmp_path / "out", tmp_path / "err"
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen(analyzer("launch", "--log-dir", str(tmp_path / "logs"), "--", *py(code)),
                                stdout=fo, stderr=fe, env=env())
        try:
            # what is checked is the order, not a speed: the verdict is out while the job still waits (for the go
            # file, made only after), and the job's line before it
            wait_for(out, b"still running\n")
            wait_for(err, b"root cause so far: port_conflict")
            assert proc.poll() is None and b"finished" not in out.read_bytes()
            go.touch()
            rc = proc.wait(timeout=JOB_TIMEOUT)
        finally:
            _reap(proc)
    assert rc == 0
    assert out.read_bytes() == b"still running\nfinished\n"
    assert "error[port_conflict]" in final_verdict(err.read_text())


def test_launch_sigint_forwarded_and_no_orphans(tmp_path):
    code = """
        import os, signal, subprocess, sys, time
        # a grandchild that ignores SIGINT and keeps our stdout open: a leftover once we exit
        g = subprocess.Popen([sys.executable, '-c', 'import signal, time; '
                              'signal.signal(signal.SIGINT, signal.SIG_IGN); '
                              'print("grandchild ready", flush=True); time.sleep(600)'])
        def stop(signum, frame):
            print('job got', signal.Signals(signum).name, flush=True)
            sys.exit(7)
        signal.signal(signal.SIGINT, stop)
        print('ready', g.pid, flush=True)
        time.sleep(600)
    """
    out, err = tmp_path / "out", tmp_path / "err"
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen(analyzer("launch", "--log-dir", str(tmp_path / "logs"), "--", *py(code)),
                                stdout=fo, stderr=fe, env=env())
        try:
            grandchild = int(wait_for(out, b"ready ").split(b"ready ")[1].split()[0])
            wait_for(out, b"grandchild ready")
            t0 = time.monotonic()
            proc.send_signal(signal.SIGINT)
            rc = proc.wait(timeout=JOB_TIMEOUT)
        finally:
            _reap(proc)
    text = err.read_text()
    assert rc == 7, text
    assert b"job got SIGINT" in out.read_bytes()
    assert "passed SIGINT on to the job" in text and "Traceback" not in text
    assert not alive(grandchild), "the leftover grandchild was stopped"
    assert time.monotonic() - t0 < JOB_TIMEOUT, "stopped, not waited for: the job and its grandchild sleep 600 s"


def test_launch_sigterm_kills_job_status_143(tmp_path):
    code = "import time; print('ready', flush=True); time.sleep(600)"
    out = tmp_path / "out"
    with open(out, "wb") as fo:
        proc = subprocess.Popen(analyzer("launch", "--log-dir", str(tmp_path / "logs"), "--", *py(code)),
                                stdout=fo, stderr=subprocess.DEVNULL, env=env())
        try:
            wait_for(out, b"ready")
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=JOB_TIMEOUT) == 143
        finally:
            _reap(proc)


def test_launch_background_leftover_is_stopped(tmp_path):
    code = """
        import subprocess, sys
        g = subprocess.Popen(['sleep', '60'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(g.pid, flush=True)
    """
    res = launch(tmp_path, *py(code))
    assert res.returncode == 0
    assert not alive(int(res.stdout.split()[0]))
    assert "outlived it" in res.stderr.decode()


def test_launch_slow_writer_unbuffered(tmp_path):
    """The job's first line is on our stdout while the job waits (for the test's go file) to write the second: what
    is checked is the order, not a speed (a sleep of N s against a deadline fails on a loaded machine)."""
    out, go = tmp_path / "out", tmp_path / "go"
    with open(out, "wb") as fo:
        proc = subprocess.Popen(analyzer("launch", "--log-dir", str(tmp_path / "logs"), "--", sys.executable,
                                         str(SLOW_WRITER), str(go)), stdout=fo, stderr=subprocess.DEVNULL, env=env())
        try:
            wait_for(out, b"first line from the job\n")
            assert proc.poll() is None and b"second" not in out.read_bytes(), "the job has not written its second line"
            go.touch()
            assert proc.wait(timeout=JOB_TIMEOUT) == 0
        finally:
            _reap(proc)
    assert out.read_bytes() == b"first line from the job\nsecond line from the job\n"


# -- real torchrun jobs (gloo on CPU) -------------------------------------------------------------------

@pytest.mark.slow
@needs_torch
@pytest.mark.parametrize("rid", list(SCENARIOS))
def test_launch_torchrun(tmp_path, rid):
    mode, nproc, extra, hold = SCENARIOS[rid]
    with held_port(hold) as port:
        res = launch(tmp_path, *torchrun(mode, nproc, port), opts=("--format", "json", "--html", "r.html"), **extra)
    err = res.stderr.decode()
    assert res.returncode == EXIT[rid], err[-3000:]
    assert f"error[{rid}]" in final_verdict(err), err[-3000:]
    assert "added to its environment: NCCL_DEBUG=INFO" in err
    logs = tmp_path / "logs"
    report = json.loads((logs / "report.json").read_text())
    assert report["root_cause"]["id"] == rid
    assert f"[{rid}]" in (logs / "report.txt").read_text()
    assert (tmp_path / "r.html").read_text().lstrip().lower().startswith("<!doctype html")
    log = (logs / "job.log").read_bytes()
    assert in_order(res.stdout, log), "all of stdout, in order, is in job.log"
    assert in_order(job_stderr(res.stderr), log), "all of the job's stderr, in order, is in job.log"
