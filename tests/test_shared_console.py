"""A console several processes share (issue 9: real logs are messy): another job's output between a stuck rank's
last line and its end is not that rank's progress. Built on a real H200 capture (fixtures/cases/
h200_first_collective_killed: the only rank completes NCCL init, never finishes its first all_reduce, torchrun is
then killed)."""
from __future__ import annotations

from pathlib import Path

import pytest

from nccl_analyzer.analysis import analyze_text
from nccl_analyzer.engine.loader import load_rules

ROOT = Path(__file__).resolve().parent.parent
LOG = (ROOT / "fixtures" / "cases" / "h200_first_collective_killed" / "log.txt").read_text().splitlines()
RULES = load_rules(())
STUCK = next(i for i, s in enumerate(LOG) if "Init COMPLETE" in s) + 1  # the rank's last NCCL line


def _with(lines_after_stuck: list[str]) -> str:
    return "\n".join(LOG[:STUCK] + lines_after_stuck + LOG[STUCK:]) + "\n"


def _other_job(n: int, own_nccl: bool) -> list[str]:
    # another job's process (a pid torchrun never names) printing NCCL INFO lines and its training steps
    out = []
    for i in range(n):
        if own_nccl:
            out.append(f"other-node:70001:70001 [0] NCCL INFO Channel {i % 32:02d}/0 : 0[0] -> 1[1] via P2P/IPC")
        out.append(f"step {i} | loss 2.31 | lr 3.0e-04 | 1010 tok/s")
    return out


@pytest.mark.parametrize("n", [3, 200])
def test_another_jobs_steps_are_not_the_stuck_ranks_progress(n):
    d = analyze_text(_with(_other_job(n, own_nccl=True)), rules=RULES)
    assert d.root_cause is not None and d.root_cause.rule == "hang-first-collective", d.root_cause


def test_steps_with_no_other_process_around_are_progress():
    # the control: the same prints with nothing but the job's own lines around them may be the rank's own output,
    # so the hang rule (which rests on the absence of progress) does not fire
    d = analyze_text(_with(_other_job(3, own_nccl=False)), rules=RULES)
    assert d.root_cause is None or d.root_cause.rule != "hang-first-collective"


XDIT = (ROOT / "fixtures" / "cases" / "public4_xdit147_heartbeat_monitor" / "log.txt").read_text()


def test_a_process_still_connecting_after_the_timeout_does_not_explain_it():
    # xDiT#147's heartbeat-monitor timeout, then another job's process (whose rank number is also 0) still setting up
    # its NET/Socket channels: it was getting on when the timeout fired, so its stage is not why the job hung
    other = "".join(f"other-node:70001:70001 [0] NCCL INFO {s}\n" for s in (
        "ncclCommInitRankConfig comm 0x55d0c1e0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0xabc001 - Init START",
        "Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0",
        "Channel 01/0 : 0[0] -> 1[0] [send] via NET/Socket/0"))
    d = analyze_text(XDIT + other, rules=RULES)
    assert d.root_cause is not None and d.root_cause.rule == "torch-heartbeat-timeout", d.root_cause
    # the control: the same process stopped there BEFORE the timeout was reported is the stage that explains it
    d = analyze_text(other + XDIT, rules=RULES)
    assert d.root_cause is not None and d.root_cause.id == "network_connect", d.root_cause
