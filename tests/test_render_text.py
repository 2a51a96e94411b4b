"""Terminal verdict: compiler-style first line, locations, quoted evidence, fix, cascade note, colour."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import render_samples as rs

from nccl_analyzer.model import Finding, Reproduction
from nccl_analyzer.render import render
from nccl_analyzer.render.view import rank_ranges


def test_text_verdict_duplicate_gpu():
    d = rs.duplicate_gpu()
    out = render(d, "text")
    lines = out.splitlines()
    assert lines[0].startswith("error[duplicate_gpu]: ")
    key = d.root_cause.evidence[0]
    assert f"--> {key.path}:{key.line}" in out
    # the key line is quoted with its line number and marked
    assert any(line.lstrip().startswith(f"{key.line}") and " > " in line and key.text in line for line in lines)
    assert "= where: ranks 0-1 on vm, GPU 0 (busId 60)" in out  # one GPU, two ranks: said once
    assert "= fix: " in out and "= confidence: " in out
    assert "\x1b[" not in out
    assert out.endswith("\n")


def test_text_color_only_when_asked():
    d = rs.duplicate_gpu()
    assert "\x1b[1;31merror[duplicate_gpu]\x1b[0m" in render(d, "text", color=True)
    assert "\x1b" not in render(d, "text", color=False)


def test_text_ok_case_says_how_much_was_read():
    d = rs.ok_case()
    assert d.root_cause is None
    first = render(d, "text").splitlines()[0]
    assert first.startswith("ok: no failure found in 524 lines from 1 input (")  # and what it saw: ranks, NCCL


def test_text_verbose_adds_findings_and_ranks():
    d = rs.duplicate_gpu()
    out = render(d, "text", verbose=True)
    assert f"findings ({len(d.findings)}):" in out
    assert "ranks (2):" in out
    assert all(f.rule in out for f in d.findings)


def test_text_cascade_note_names_rank_ranges():
    d = rs.duplicate_gpu()
    ev = d.root_cause.evidence[0]
    victims = Finding(rule="torch-watchdog-timeout", id="watchdog_timeout", role="cascade",
                      title="Watchdog caught collective operation timeout", ranks=(0, 1, 2, 4, 5, 6, 7),
                      evidence=(ev,))
    d = dataclasses.replace(d, cascade=[victims], findings=[*d.findings, victims])
    out = render(d, "text")
    assert "ranks 0-2,4-7 failed as a consequence (Watchdog caught collective operation timeout) (-v for details)" in out
    assert "cascade:" in render(d, "text", verbose=True)


def test_text_reproduction_outcome_shown():
    d = rs.duplicate_gpu()
    rep = Reproduction(outcome="CONFIRMED", reason="duplicate_gpu again with 2 ranks on 1 GPU", backend="nccl",
                       world_size=2, command="torchrun --nproc_per_node=2 repro.py", fix_outcome="FIXED",
                       fix_env={"CUDA_VISIBLE_DEVICES": "0,1"})
    out = render(dataclasses.replace(d, reproduction=rep), "text")
    assert "= reproduction: CONFIRMED: duplicate_gpu again" in out
    assert "FIXED" in out and "$ torchrun --nproc_per_node=2 repro.py" in out


def test_text_input_warnings_shown(tmp_path):
    # An empty input alone is "nothing to analyze" (exit 2, test_exit_status.py); beside a log it is a warning.
    from nccl_analyzer.analysis import analyze

    empty = tmp_path / "empty.log"
    empty.write_text("")
    healthy = Path(__file__).resolve().parents[1] / "fixtures" / "cases" / "cpu_gloo_healthy" / "log.txt"
    d = analyze([healthy, empty])
    out = render(d, "text")
    assert out.startswith("ok: no failure found in ")
    assert f"warning: {empty}: input is empty" in out
    assert out.count("input is empty") == 1


def test_text_neutralizes_terminal_escapes_and_bidi(tmp_path):
    d = rs.hostile(tmp_path)
    ev = d.root_cause.evidence[0]
    bad = dataclasses.replace(ev, text="evil \x1b[2J\x1b]0;title\x07 \u202eabc \x9b1m")
    d = dataclasses.replace(d, root_cause=dataclasses.replace(d.root_cause, evidence=(bad, *d.root_cause.evidence)))
    for verbose in (False, True):
        out = render(d, "text", verbose=verbose)
        assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out and "\x9b" not in out
        assert "\\u001b[2J" in out and "\\u202e" in out


def test_rank_ranges():
    assert rank_ranges([0, 1, 2, 4, 5, 6, 7]) == "0-2,4-7"
    assert rank_ranges([3]) == "3"
    assert rank_ranges([5, 1, 3, 2]) == "1-3,5"
    assert rank_ranges([]) == ""


def test_fix_env_lines_are_safe_to_paste():
    from nccl_analyzer.render.view import fix_lines

    assert fix_lines({"NCCL_P2P_DISABLE": "1", "NCCL_SOCKET_IFNAME": "eth0; rm -rf ~"}) == [
        "export NCCL_P2P_DISABLE=1", "export NCCL_SOCKET_IFNAME='eth0; rm -rf ~'"]
    assert fix_lines({"X$(id)": "1"}) == ["# not a valid variable name: 'X$(id)'=1"]
