"""Compare a reproduction run's own diagnosis with the original: CONFIRMED / NOT REPRODUCED / INCONCLUSIVE, FIXED."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from ..errors import AnalyzerError
from ..model import Diagnosis
from .run import RunResult

CONFIRMED = "CONFIRMED"
NOT_REPRODUCED = "NOT REPRODUCED"
INCONCLUSIVE = "INCONCLUSIVE"
FIXED = "FIXED"
NOT_FIXED = "NOT FIXED"
NOT_APPLICABLE = "NOT APPLICABLE"  # the fault is in the user's program: the fix run only left our planted fault out

Analyzer = Callable[[list[str]], Diagnosis]
WORKER_ERROR = "nccl_analyzer.reproduce.worker: error:"


@dataclass(frozen=True)
class Verdict:
    got: str | None  # root cause id of the run's own diagnosis
    diagnosis: Diagnosis | None
    error: str | None  # why the run's output could not be analyzed


def diagnose_run(result: RunResult, analyzer: Analyzer) -> Verdict:
    """Analyze the captured output with the same engine as the original log."""
    try:
        diag = analyzer([result.log_path])
    except AnalyzerError as exc:
        return Verdict(None, None, f"the run's output could not be analyzed: {exc}")
    return Verdict(diag.root_cause.id if diag.root_cause else None, diag, None)


def _ran(result: RunResult) -> str:
    how = "hit the time limit" if result.timed_out else f"exited {result.returncode}"
    return f"{how} after {result.duration:.1f} s"


def judge(expected: str, result: RunResult, verdict: Verdict) -> tuple[str, str]:
    """The reproduction outcome and its reason."""
    if verdict.error:
        return INCONCLUSIVE, verdict.error
    refused = worker_error(result)
    if refused:
        return INCONCLUSIVE, f"the reproduction worker did not run: {refused}"
    if verdict.got == expected:
        note = " (stopped at the time limit)" if result.timed_out else ""
        return CONFIRMED, f"the run failed the same way: {expected}{note}; it {_ran(result)}"
    if result.timed_out:
        found = f"; its output so far shows {verdict.got}" if verdict.got else ""
        return INCONCLUSIVE, f"the run did not finish within the time limit ({result.duration:.0f} s){found}"
    if verdict.got is None:
        if result.returncode == 0:
            return NOT_REPRODUCED, f"the run finished cleanly (exit 0 after {result.duration:.1f} s)"
        return NOT_REPRODUCED, f"the run {_ran(result)} but its output shows no known failure"
    return NOT_REPRODUCED, f"the run failed differently: {verdict.got} instead of {expected}; it {_ran(result)}"


def worker_error(result: RunResult) -> str | None:
    """The worker's own usage/plan error line, when it refused to run."""
    if result.returncode != 2:
        return None
    for line in result.tail(20).splitlines():
        if line.startswith(WORKER_ERROR):
            return line[len(WORKER_ERROR):].strip()
    return None


def judge_fix(expected: str, result: RunResult, verdict: Verdict) -> tuple[str, str]:
    """FIXED when the run with the fix exits 0 and its output shows no failure; else NOT FIXED."""
    if verdict.error:
        return NOT_FIXED, verdict.error
    refused = worker_error(result)
    if refused:
        return NOT_FIXED, f"the reproduction worker did not run: {refused}"
    if result.returncode == 0 and not result.timed_out and verdict.got is None:
        return FIXED, f"finished cleanly in {result.duration:.1f} s"
    if verdict.got == expected:
        return NOT_FIXED, f"still failed with {expected}; it {_ran(result)}"
    if verdict.got:
        return NOT_FIXED, f"failed with {verdict.got}; it {_ran(result)}"
    return NOT_FIXED, f"{_ran(result)}"


def excerpt(verdict: Verdict, result: RunResult, limit: int = 12) -> str:
    """The lines worth showing: the run diagnosis' evidence, else the output's last lines."""
    diag = verdict.diagnosis
    lines: Sequence[str] = ()
    if diag is not None and diag.root_cause is not None and diag.root_cause.evidence:
        lines = [e.text for e in diag.root_cause.evidence[:limit]]
    return "\n".join(lines) if lines else result.tail(limit)


def judge_control(program_fault: str, fix: str, expected: str, result: RunResult, verdict: Verdict) -> tuple[str, str]:
    """For a fault of the user's program: NOT APPLICABLE, with what the reproduction and the control run showed.

    The "fix run" of such a cause only leaves out the fault we planted in our own worker (``program_fault``), so
    it cannot fail and proves nothing about the user's fix; its result says whether the rest of the setup works.
    """
    shown = (f"the reproduction showed that {program_fault} gives {expected} here; the fix ({fix}) is a change to "
             "your program, which this tool cannot apply or check")
    control, why = judge_fix(expected, result, verdict)
    if control == FIXED:
        return NOT_APPLICABLE, (f"the fix is in your program: {shown}. The control run without that fault {why}, "
                                "so the communication setup itself works here")
    return NOT_APPLICABLE, (f"the fix is in your program: {shown}. The control run without that fault did not "
                            f"finish cleanly either ({why}): look for a second problem")

