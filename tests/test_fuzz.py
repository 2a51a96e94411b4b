"""Mutated real logs through the CLI entry (benchmarks/fuzz.py's mutators under Hypothesis, a short budget):
exit 0/1/2, no traceback, valid JSON. The long run is `python benchmarks/fuzz.py --n 100000`."""
from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("nccl_fuzz", ROOT / "benchmarks" / "fuzz.py")
fuzz = importlib.util.module_from_spec(_spec)
sys.modules["nccl_fuzz"] = fuzz
_spec.loader.exec_module(fuzz)

SEEDS = [p.read_bytes() for p in fuzz.seed_logs()]


@pytest.fixture(scope="module")
def runner():
    from click.testing import CliRunner

    fuzz.cache_rules()
    return CliRunner()


def test_seeds_are_real_logs_and_never_the_blind_set():
    paths = fuzz.seed_logs()
    assert len(paths) > 100
    assert not any("blind" in p.parts for p in paths)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), ops=st.lists(st.sampled_from(sorted(fuzz.MUTATORS)), min_size=1, max_size=3),
       writer=st.sampled_from(sorted(set(fuzz.WRITERS))))
def test_mutated_logs_never_crash(seed, ops, writer, runner, tmp_path_factory):
    inp = fuzz.make_input(random.Random(seed), SEEDS, ops=ops, writer=writer)
    out = fuzz.run_input(inp, tmp_path_factory.mktemp("fz") / "in", runner)
    assert out.ok, f"{inp.ops} {inp.args}: {out.problem}"


@pytest.mark.parametrize("value", [b"--1", b"-", b"99999999999999999999999", b"\xef\xbc\x91"])
def test_odd_numbers_in_every_number_of_a_real_log(value, runner, tmp_path):
    """The crash the issue names (`int('--1')`): every number of a real NCCL log replaced by an odd one."""
    import re

    data = (ROOT / "fixtures" / "h200-nccl-2.28.9" / "04_duplicate_gpu" / "log.txt").read_bytes()
    inp = fuzz.Input({"log.txt": re.sub(rb"\d+", value, data)}, ["--format", "json"])
    out = fuzz.run_input(inp, tmp_path / "in", runner)
    assert out.ok, out.problem


def test_harness_catches_what_it_should(runner, tmp_path, monkeypatch):
    """The checks can fail: an exception in the analysis is reported as a crash, not hidden."""
    from nccl_analyzer import analysis

    def boom(*a, **k):
        raise ValueError("invalid literal for int() with base 10: '--1'")

    monkeypatch.setattr(analysis, "analyze", boom)
    out = fuzz.run_input(fuzz.Input({"log.txt": SEEDS[0]}, ["--format", "json"]), tmp_path / "in", runner)
    assert not out.ok and "invalid literal" in out.problem
