"""CLI behaviour: exit codes, streams, the events export, bad input, layering."""
from __future__ import annotations

import csv
import gzip
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from nccl_analyzer.cli import main

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures" / "h200-nccl-2.28.9"


def run(*args: str, input: bytes | None = None):
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def test_events_jsonl_fields_per_contract():
    res = run("events", str(FIX / "04_duplicate_gpu" / "log.txt"), "--format", "jsonl")
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in res.stdout.splitlines()]
    assert len(rows) > 50
    for r in rows:
        assert {"kind", "path", "line"} <= r.keys()
        assert isinstance(r["line"], int) and r["line"] >= 1
    lines = [r["line"] for r in rows]
    assert lines == sorted(lines), "events come in input order"
    dup = [r for r in rows if r["kind"].startswith("nccl.warn") and "Duplicate GPU" in r["text"]]
    assert {(r["host"], r["pid"]) for r in dup} == {("vm", 588), ("vm", 589)}
    starts = [r for r in rows if r["kind"] == "nccl.init.start"]
    assert sorted(r["rank"] for r in starts) == [0, 1]


def test_events_csv_and_table_and_kind_filter():
    path = str(FIX / "02_bad_ifname" / "log.txt")
    res = run("events", path, "--format", "csv", "--kind", "nccl.*")
    assert res.exit_code == 0
    table = list(csv.DictReader(io.StringIO(res.stdout)))
    assert table and all(r["kind"].startswith("nccl.") for r in table)
    res = run("events", path, "--format", "table", "--no-text")
    assert res.exit_code == 0 and "02_bad_ifname/log.txt:" in res.stdout


def test_events_from_stdin_and_gz(tmp_path):
    raw = (FIX / "06_oom" / "log.txt").read_bytes()
    gz = tmp_path / "oom.log.gz"
    gz.write_bytes(gzip.compress(raw))
    a = run("events", str(gz), "--no-text")
    b = run("events", "-", "--no-text", "--stdin-name", "rank0.log", input=raw)
    assert a.exit_code == b.exit_code == 0
    kinds_a = [json.loads(x)["kind"] for x in a.stdout.splitlines()]
    kinds_b = [json.loads(x)["kind"] for x in b.stdout.splitlines()]
    assert kinds_a == kinds_b and kinds_a
    assert json.loads(b.stdout.splitlines()[0])["path"] == "rank0.log"


@pytest.mark.parametrize("args", [["/nonexistent/run.log"], ["events", "/nonexistent/x.log"],
                                  ["/nonexistent/*.log", "--format", "json"]])
def test_missing_input_is_exit_2_one_line_no_traceback(args):
    res = run(*args)
    assert res.exit_code == 2
    assert res.stdout == ""
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    assert "no such file" in res.stderr or "no file matches" in res.stderr


def test_bad_option_is_exit_2():
    res = run(str(FIX / "01_ok_subsys_all" / "log.txt"), "--format", "yaml")
    assert res.exit_code == 2


def test_load_events_dataframe():
    from nccl_analyzer import load_events

    df = load_events([str(FIX / "04_duplicate_gpu" / "log.txt")])
    assert {"kind", "path", "line", "host", "pid"} <= set(df.columns)
    assert (df["kind"] == "nccl.init.start").sum() == 2


def test_core_imports_neither_torch_nor_pandas_and_help_is_light():
    code = ("import sys, nccl_analyzer.analysis, nccl_analyzer.render, nccl_analyzer.cli; "
            "print(','.join(m for m in ('torch', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == ""
    code = ("import sys; from click.testing import CliRunner; from nccl_analyzer.cli import main; "
            "CliRunner().invoke(main, ['--help']); "
            "print(','.join(m for m in ('lark', 'pandas', 'jinja2', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == ""


def test_events_strict_fails_on_unrecognized_nccl_lines(tmp_path):
    good = tmp_path / "ok.log"
    good.write_bytes((FIX / "02_bad_ifname" / "log.txt").read_bytes())
    assert run("events", str(good), "--strict", "--no-text").exit_code == 0
    bad = tmp_path / "odd.log"
    bad.write_text("garbled NCCL INFO Channel 00 : 0 1\n")
    res = run("events", str(bad), "--strict")
    assert res.exit_code == 2 and "not recognized" in res.stderr
    assert json.loads(res.stdout.splitlines()[0])["kind"] == "nccl.unparsed"
