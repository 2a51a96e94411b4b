"""Every exit status and message true: nothing to analyze, unwritable outputs, stdout errors, cut lines, gzip, API."""
from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from click.testing import CliRunner

import nccl_analyzer
from nccl_analyzer import analysis
from nccl_analyzer.cli import main
from nccl_analyzer.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
DUP = ROOT / "fixtures" / "h200-nccl-2.28.9" / "04_duplicate_gpu" / "log.txt"
OOM = ROOT / "fixtures" / "h200-nccl-2.28.9" / "06_oom" / "log.txt"
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}


def _cli(*args: str, input: bytes | None = None):
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def _one_error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("nccl-analyze: error: "), stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize("kind", ["elf", "random", "empty", "empty_gz"])
def test_nothing_to_analyze_is_exit_2(kind, tmp_path):
    p = tmp_path / f"in.{kind}"
    if kind == "elf":
        p.write_bytes(Path(sys.executable).resolve().read_bytes()[:20000])
    elif kind == "random":
        p.write_bytes(random.Random(3).randbytes(20000))
    elif kind == "empty":
        p.write_bytes(b"")
    else:
        p.write_bytes(gzip.compress(b""))
    res = _cli(str(p))
    assert res.exit_code == 2 and res.stdout == ""
    line = _one_error_line(res.stderr)
    assert "nothing to analyze" in line and str(p) in line


def test_empty_stdin_is_exit_2():
    res = _cli("-", input=b"")
    assert res.exit_code == 2
    assert "nothing to analyze" in _one_error_line(res.stderr)


def test_folder_without_logs_is_exit_2(tmp_path):
    (tmp_path / "label.json").write_text("{}")
    res = _cli(str(tmp_path))
    assert res.exit_code == 2 and "holds no log-like file" in _one_error_line(res.stderr)


def test_binary_and_empty_among_real_logs_are_skipped_with_a_warning(tmp_path):
    junk = tmp_path / "core"
    junk.write_bytes(random.Random(7).randbytes(20000))  # fixed bytes: the test must not be flaky
    empty = tmp_path / "rank1.log"
    empty.write_bytes(b"")
    res = _cli(str(DUP), str(junk), str(empty), "--format", "json")
    assert res.exit_code == 1, res.stderr
    doc = json.loads(res.stdout)
    assert doc["root_cause"]["id"] == "duplicate_gpu"
    warnings = " | ".join(doc["warnings"] + [w for i in doc["inputs"] for w in i.get("warnings", [])])
    assert f"{junk}: skipped: binary data" in warnings or "skipped: binary data" in warnings
    assert "input is empty" in warnings


def test_log_after_binary_junk_is_still_read(tmp_path):
    p = tmp_path / "mixed.log"
    p.write_bytes(bytes(range(1, 256)) * 64 + b"\n" + DUP.read_bytes())
    res = _cli(str(p), "--format", "json")
    doc = json.loads(res.stdout)
    assert res.exit_code == 1 and doc["root_cause"]["id"] == "duplicate_gpu"
    assert any("starts like binary data" in w for w in doc["warnings"])


@pytest.mark.parametrize("flag", ["-o", "--html"])
def test_unwritable_output_is_exit_2_before_the_analysis(flag, tmp_path, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("the analysis ran before the output path was checked")

    monkeypatch.setattr(analysis, "analyze", boom)
    for target in (tmp_path / "no" / "such" / "dir" / "r.out", tmp_path):
        res = _cli(str(DUP), flag, str(target))
        assert res.exit_code == 2, res.output
        assert "Traceback" not in res.output and res.stdout == ""


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into a read-only folder")
def test_read_only_folder_is_exit_2(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    res = _cli(str(DUP), "--html", str(ro / "r.html"))
    assert res.exit_code == 2 and "not writable" in _one_error_line(res.stderr)


def test_stdout_full_is_one_line_exit_2():
    with open("/dev/full", "w") as full:
        res = subprocess.run([sys.executable, "-m", "nccl_analyzer", str(DUP)], stdout=full, stderr=subprocess.PIPE,
                             text=True, env=ENV, timeout=300)
    assert res.returncode == 2
    assert "cannot write the report to standard output" in _one_error_line(res.stderr)


def test_closed_pipe_ends_quietly_with_the_verdict_status():
    # The HTML report is far bigger than a pipe buffer, so `head` closes the pipe while we still write.
    res = subprocess.run(["bash", "-c", f"set -o pipefail; {sys.executable} -m nccl_analyzer {DUP} --format html "
                          "| head -c 10 >/dev/null"], capture_output=True, text=True, env=ENV, timeout=300)
    assert res.returncode == 1, res.stderr  # the failure found, not 0 and not 120/141
    assert res.stderr == ""


def test_cut_lines_are_counted_with_the_first_place(tmp_path):
    p = tmp_path / "long.log"
    p.write_bytes(b"ok\n" + (b"x" * 70000 + b"\n") * 3 + DUP.read_bytes())
    doc = json.loads(_cli(str(p), "--format", "json").stdout)
    msg = [w for w in doc["warnings"] if "longer than 64 KiB" in w]
    assert msg == [f"{p}: 3 line(s) longer than 64 KiB cut to 64 KiB (first: {p}:2); the rest of each was not "
                   "analyzed"]


def test_truncated_gzip_keeps_what_it_read_and_says_so(tmp_path):
    z = gzip.compress(DUP.read_bytes() + OOM.read_bytes())
    p = tmp_path / "cut.log.gz"
    p.write_bytes(z[: len(z) * 3 // 4])
    readable = zlib.decompressobj(31).decompress(p.read_bytes())  # all that any reader can get out of it
    res = _cli(str(p), "--format", "json")
    doc = json.loads(res.stdout)
    assert res.exit_code == 1 and doc["root_cause"]["id"] == "duplicate_gpu"
    assert readable.count(b"\n") > 131  # the cut is past the first log
    assert doc["inputs"][0]["lines"] == readable.count(b"\n") + (not readable.endswith(b"\n"))
    assert any("input ends early (truncated or corrupt gzip" in w for w in doc["warnings"])


# ------------------------------------------------------------------------------------------------ library API

@pytest.mark.parametrize("form", ["str", "path", "list_mixed", "tuple", "generator"])
def test_analyze_takes_str_path_or_lists(form):
    value = {"str": str(DUP), "path": DUP, "list_mixed": [DUP, str(OOM)], "tuple": (str(DUP),),
             "generator": (p for p in [DUP])}[form]
    d = nccl_analyzer.analyze(value)
    assert d.root_cause.id == "duplicate_gpu"
    assert [i.path for i in d.inputs][:1] == [str(DUP)]


def test_load_events_and_iter_events_take_a_path():
    df = nccl_analyzer.load_events(DUP)
    assert len(df) > 10 and set(df["path"]) == {str(DUP)}
    kinds = {ev.kind for ev in nccl_analyzer.iter_events(str(DUP))}
    assert "nccl.init.start" in kinds


@pytest.mark.parametrize("bad", [b"run.log", 3, [DUP, 4]])
def test_api_rejects_what_is_not_a_path(bad):
    with pytest.raises(TypeError):
        nccl_analyzer.analyze(bad)


def test_api_nothing_to_analyze_raises_input_error(tmp_path):
    p = tmp_path / "empty.log"
    p.write_bytes(b"")
    with pytest.raises(InputError, match="nothing to analyze"):
        nccl_analyzer.analyze(p)
