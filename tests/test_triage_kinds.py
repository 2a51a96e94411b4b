"""What the block scan (triage.py) skips or parses only in part is derived from what reads it: the job model, the
loaded rules and the fail-safe's tables. A rule that starts reading a kind the scan skips must get every line of it,
exactly as the per-line path gives them (real rule files, a real multi-rank log, both paths)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nccl_analyzer import triage
from nccl_analyzer.analysis import Analyzer
from nccl_analyzer.classify import EventStream
from nccl_analyzer.engine.loader import load_rules
from nccl_analyzer.job import JobBuilder
from nccl_analyzer.sources import expand_inputs, iter_source

ROOT = Path(__file__).resolve().parent.parent
SKIPPED = sorted(Analyzer()._inert | Analyzer()._stage_only)


def test_the_default_rules_read_no_kind_the_scan_skips():
    a = Analyzer()
    assert a._inert and a._stage_only  # (the scan skips something on real NCCL logs: else this test tests nothing)
    for k in a._inert:
        assert not JobBuilder.reads(k) and not a.matcher.reads(k) and not a.ledger.reads(k), k
    for k in a._stage_only:
        assert JobBuilder.stage_only(k) and not a.matcher.reads(k) and not a.ledger.reads(k), k
        assert k in triage.run_kinds_of(frozenset({k})), k


@pytest.fixture(scope="module")
def job_log(tmp_path_factory) -> Path:
    log = tmp_path_factory.mktemp("kinds") / "job.log"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "real_log.py"), "--ranks", "16", "--steps", "20",
                    "-o", str(log)], check=True, capture_output=True)
    return log


def _first_line_of(log: Path, kind: str) -> str:
    es = EventStream(keep_text=False, compact=False)
    for line in iter_source(expand_inputs([str(log)])[0]):
        for ev in es.feed(line):
            if ev.kind == kind:
                return ev.text
    raise AssertionError(f"no {kind} line in the generated log")


RULE = '''\
id = "test-reads-{slug}"
taxonomy = "other"
title = "a {kind} line"
status = "test"
role = "root"
severity = "error"
confidence = 0.5
description = "d"
falsepositives = ["unknown"]
references = ["https://example.org/x"]

[match]
[[match.all]]
kind = "{kind}"

[fix]
summary = "f"

[[example]]
expect = "match"
log = \'\'\'
{line}
\'\'\'

[[example]]
expect = "no-match"
log = \'\'\'
node1:1:1 [0] NCCL INFO something else
\'\'\'
'''


def _diagnosis(log: Path, rules: list, fast: bool) -> dict:
    a = Analyzer(rules=rules)
    srcs = expand_inputs([str(log)])
    a.add_sources(srcs)
    for src in srcs:
        if fast:
            a.run_source(src)
        else:
            for line in iter_source(src):
                a.feed(line)
            a.flush(src.path)
    d = a.finish().to_dict()
    d.pop("stats")
    return a, d


@pytest.mark.parametrize("kind", SKIPPED)
def test_a_rule_reading_a_skipped_kind_gets_all_its_lines(tmp_path, job_log, kind):
    slug = kind.replace(".", "-")
    d = tmp_path / "test"
    d.mkdir()
    (d / f"test-reads-{slug}.toml").write_text(RULE.format(slug=slug, kind=kind, line=_first_line_of(job_log, kind)))
    rules = load_rules((str(tmp_path),))
    assert f"test-reads-{slug}" in {r.id for r in rules}
    a, fast = _diagnosis(job_log, rules, fast=True)
    assert kind not in a._inert and kind not in a._stage_only  # derived from the rules loaded, not a fixed list
    _, slow = _diagnosis(job_log, rules, fast=False)
    assert json.dumps(fast, sort_keys=True, default=str) == json.dumps(slow, sort_keys=True, default=str)
    assert f"test-reads-{slug}" in json.dumps(fast)


@pytest.mark.parametrize("kind", SKIPPED)
def test_a_fail_safe_table_reading_a_skipped_kind_keeps_it(monkeypatch, kind):
    # the fail-safe's tables (messages/*.toml) are read once per kind: one that starts reading a kind the scan
    # skips makes the scan parse it
    from nccl_analyzer import failsafe
    real = failsafe.ErrorLedger.reads
    monkeypatch.setattr(failsafe.ErrorLedger, "reads", lambda self, k: k == kind or real(self, k))
    a = Analyzer()
    assert kind not in a._inert and kind not in a._stage_only
