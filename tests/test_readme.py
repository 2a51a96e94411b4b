"""The README shows real output: its first example must be what the tool prints today."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_example_is_real_output():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("The first set-up command prints", 1)[1].split("```\n", 1)[1].split("```", 1)[0]
    env = dict(os.environ, NO_COLOR="1")
    env.pop("FORCE_COLOR", None)
    out = subprocess.run([sys.executable, "-m", "nccl_analyzer", "fixtures/h200-nccl-2.28.9/04_duplicate_gpu/log.txt"],
                         cwd=ROOT, capture_output=True, text=True, env=env)
    assert out.returncode == 1
    assert out.stdout == block, "README's example output is out of date: paste the new output in"


def _run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, NO_COLOR="1")
    env.pop("FORCE_COLOR", None)
    return subprocess.run([sys.executable, "-m", "nccl_analyzer", *args], cwd=ROOT, capture_output=True, text=True,
                          env=env)


def _block_after(marker: str) -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert marker in readme, f"README lost its example after {marker!r}"
    return readme.split(marker, 1)[1].split("```\n", 1)[1].split("```", 1)[0]


def test_readme_events_table_is_real_output():
    block = _block_after("As a table (`nccl-analyze events")
    out = _run("events", "fixtures/h200-nccl-2.28.9/04_duplicate_gpu/log.txt", "--format", "table",
               "--kind", "nccl.warn.*")
    assert out.returncode == 0, out.stderr
    assert out.stdout == block, "README's events table is out of date: paste the new output in"


def test_readme_diff_example_is_real_output():
    block = _block_after("(healthy, and `NCCL_IB_HCA=mlx5_99`):")
    cmd, _, shown = block.partition("\n")
    assert cmd == ("$ nccl-analyze diff fixtures/h200-nccl-2.28.9/01_ok_subsys_all "
                   "fixtures/h200-nccl-2.28.9/08_ib_hca_bad")
    out = _run(*cmd.split()[2:])
    assert out.returncode == 1, out.stderr
    assert out.stdout == shown, "README's diff example is out of date: paste the new output in"


def test_readme_flight_recorder_excerpt_lines_are_real_output():
    block = _block_after("fixtures/cases/cpu_gloo_fr_rank3_sleeps_all_dump`; real output")
    out = _run("fixtures/cases/cpu_gloo_fr_rank3_sleeps_all_dump")
    assert out.returncode == 1, out.stderr
    printed = out.stdout.splitlines()
    shown = [line for line in block.splitlines() if line != "..."]
    assert len(shown) >= 6
    missing = [line for line in shown if line not in printed]
    assert not missing, f"README's Flight Recorder excerpt is out of date: {missing}"
    assert [printed.index(line) for line in shown] == sorted(printed.index(line) for line in shown)


def test_readme_rule_example_is_a_valid_rule_whose_examples_pass(tmp_path):
    from nccl_analyzer.engine.loader import parse_rule

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    toml = readme.split("```toml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "nccl" / "nccl-socket-no-interface.toml"
    path.parent.mkdir()
    path.write_text(toml, encoding="utf-8")
    rule = parse_rule(path)
    assert rule.taxonomy == "socket_interface" and rule.match.predicates[0][0] == "socket_interfaces"
    assert {e.expect for e in rule.examples} == {"match", "no-match"}
    out = _run("rules", "test", str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 rules, 0 problem(s)" in out.stdout
