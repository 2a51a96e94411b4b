"""The exit-status mapping, one case per branch: 0 no root cause (even when there are symptom/cascade findings),
1 a root cause, 2 usage/input/rule errors, 4 reproduce could not run (test_reproduce), 130 interrupted, 0 on a
closed stdout; ``eval`` 0/1 on its table; ``rules test`` 2 on a broken rule. In-process (CliRunner), streams
checked separately."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nccl_analyzer import cli
from nccl_analyzer.cli import exit_status, main
from nccl_analyzer.errors import ExitCode

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures" / "h200-nccl-2.28.9"
# torchrun's agent tearing the group down: a cascade finding, never a cause by itself.
SIGTERM_LINE = ("W1129 13:53:32.158000 566 torch/distributed/elastic/multiprocessing/api.py:1012] "
                "Sending process 588 closing signal SIGTERM\n")


def run(*args: str, input: bytes | None = None):
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def test_enum_values_are_the_documented_ones():
    assert [int(c) for c in (ExitCode.CLEAN, ExitCode.FAILURE_FOUND, ExitCode.USAGE, ExitCode.INTERNAL,
                             ExitCode.REPRODUCE_FAILED, ExitCode.INTERRUPTED)] == [0, 1, 2, 3, 4, 130]


CASCADE_RULE = """id = "test-init-noted"
taxonomy = "peer_exit"
title = "A communicator finished init (a consequence-only finding, for the test)"
status = "stable"
role = "cascade"
severity = "info"
confidence = 0.3
description = "Marks Init COMPLETE lines as a consequence: a finding that is no root cause."
explains = []
falsepositives = ["unknown"]
references = ["https://github.com/NVIDIA/nccl/blob/v2.28.9-1/src/init.cc"]

[match]

[[match.any]]
kind = "nccl.init.complete"

[fix]
summary = "Nothing to fix."

[[example]]
expect = "match"
log = \'\'\'
vm:588:588 [0] NCCL INFO comm 0x55d0c1e0 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 1a000 commId 0x7e11c0d2a4b3f001 - Init COMPLETE
\'\'\'

[[example]]
expect = "no-match"
log = \'\'\'
vm:588:588 [0] NCCL INFO Bootstrap: Using lo:127.0.0.1<0>
\'\'\'
"""
INIT_LINE = ("vm:588:588 [0] NCCL INFO comm 0x55d0c1e0 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 1a000 "
             "commId 0x7e11c0d2a4b3f001 - Init COMPLETE\n")


def test_findings_without_root_cause_exit_0(tmp_path):
    """Exit status follows the root cause, not the findings: a consequence-only finding on a line that is no error
    line leaves the verdict "no failure" and the status 0."""
    rules = tmp_path / "test"
    rules.mkdir()
    (rules / "test-init-noted.toml").write_text(CASCADE_RULE)
    log = tmp_path / "init.log"
    log.write_text(INIT_LINE)
    res = run(str(log), "--rules", str(rules), "--format", "json")
    data = json.loads(res.stdout)
    assert data["root_cause"] is None and [f["rule"] for f in data["findings"]] == ["test-init-noted"]
    assert res.exit_code == 0
    text = run(str(log), "--rules", str(rules))
    assert text.exit_code == 0 and text.stdout.startswith("ok: no failure found")


def test_a_lone_torchrun_sigterm_is_a_teardown_not_a_failure(tmp_path):
    """torchrun's agent SIGTERMing its workers, and nothing else: dismissed as a teardown (with its reason), exit 0."""
    log = tmp_path / "sigterm.log"
    log.write_text(SIGTERM_LINE)
    res = run(str(log), "--format", "json")
    data = json.loads(res.stdout)
    assert data["root_cause"] is None and res.exit_code == 0
    assert [d["reason"].split(":")[0] for d in data["dismissed"]] == ["teardown"]


def test_root_cause_exit_1_and_healthy_exit_0():
    res = run(str(FIX / "02_bad_ifname"), "--format", "json")
    assert res.exit_code == 1 and json.loads(res.stdout)["root_cause"]["id"] == "socket_interface"
    res = run(str(FIX / "01_ok_subsys_all"), "--format", "json")
    assert res.exit_code == 0 and json.loads(res.stdout)["root_cause"] is None


def test_exit_status_function(tmp_path):
    from nccl_analyzer.analysis import analyze_text

    rules = tmp_path / "test"
    rules.mkdir()
    (rules / "test-init-noted.toml").write_text(CASCADE_RULE)
    quiet = analyze_text(INIT_LINE, rules_dirs=[str(rules)])
    assert quiet.findings and quiet.root_cause is None
    assert [f.rule for f in quiet.cascade] == ["test-init-noted"]  # a consequence with no cause in view
    assert exit_status(quiet) is ExitCode.CLEAN
    loud = analyze_text((FIX / "02_bad_ifname" / "log.txt").read_text())
    assert exit_status(loud) is ExitCode.FAILURE_FOUND


def test_bad_rules_folder_exit_2(tmp_path):
    bad = tmp_path / "rules"
    bad.mkdir()
    (bad / "x-broken.toml").write_text('id = "x-broken"\ntitle = 3\n')
    res = run(str(FIX / "02_bad_ifname"), "--rules", str(bad))
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.startswith("nccl-analyze: error: ") and "x-broken" in res.stderr
    res = run("rules", "test", str(bad))
    assert res.exit_code == 2


def test_usage_error_exit_2():
    res = run(str(FIX / "02_bad_ifname"), "--verify-fix")
    assert res.exit_code == 2 and "--reproduce" in res.stderr and res.stdout == ""


def test_interrupted_exit_130(monkeypatch):
    import nccl_analyzer.analysis as analysis

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(analysis, "analyze", interrupted)
    res = run(str(FIX / "02_bad_ifname"))
    assert res.exit_code == 130


@pytest.mark.parametrize("case, status", [("02_bad_ifname", 1), ("01_ok_subsys_all", 0)])
def test_closed_stdout_keeps_the_verdicts_status(monkeypatch, case, status):
    # `nccl-analyze x | head`: stdout closed early ends quietly, with the status of the verdict (a CI gate reading
    # only the exit status must not see a failing log as clean).
    def closed(*a, **k):
        raise BrokenPipeError

    monkeypatch.setattr(cli, "_emit", closed)
    res = run(str(FIX / case))
    assert res.exit_code == status


@pytest.mark.parametrize("wrong", [False, True], ids=["all_right", "one_wrong"])
def test_eval_exit_status(tmp_path, wrong):
    case = tmp_path / "cases" / "c1"
    case.mkdir(parents=True)
    (case / "log.txt").write_text((FIX / "02_bad_ifname" / "log.txt").read_text())
    (case / "label.json").write_text(json.dumps({"root_cause": "cuda_oom" if wrong else "socket_interface"}))
    res = run("eval", str(tmp_path / "cases"))
    assert res.exit_code == (1 if wrong else 0), res.output
    assert ("FAIL" in res.stdout) == wrong
