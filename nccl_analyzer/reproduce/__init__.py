"""``--reproduce``: re-create the diagnosed failure on this machine, diagnose the run, and check the fix."""
from __future__ import annotations

import dataclasses
import tempfile
from typing import IO, Callable, Iterable, Mapping

from ..model import Diagnosis, Reproduction
from .compare import (CONFIRMED, INCONCLUSIVE, Analyzer, diagnose_run, excerpt, judge, judge_control, judge_fix)
from .envcheck import validate_env
from .plan import SCENARIOS, Plan
from .staging import FixPlan, LocalInfo, Staging, make_fix, make_staging
from .run import RunInterrupted, local_info, require_torch, run_plan, stop_signals

__all__ = ["reproduce", "stage", "Plan", "Staging", "LocalInfo", "validate_env", "ReproduceInterrupted"]


def stage(diagnosis: Diagnosis, local: LocalInfo, *, verify_fix: bool = False) -> tuple[Staging, FixPlan | None]:
    """The plan (and the fix run's plan) for ``diagnosis`` on a machine like ``local``; runs nothing."""
    staging = make_staging(diagnosis, local)
    fix = make_fix(staging.plan, diagnosis, local) if verify_fix and staging.plan is not None else None
    return staging, fix


def reproduce(diagnosis: Diagnosis, *, verify_fix: bool = False, dry_run: bool = False, timeout: float = 120.0,
              progress: IO[str] | None = None, workdir: str | None = None, analyzer: Analyzer | None = None,
              rules_dirs: Iterable = (), base_env: Mapping[str, str] | None = None,
              local: LocalInfo | None = None) -> Diagnosis:
    """Re-run the failing collective locally and return ``diagnosis`` with ``.reproduction`` filled.

    Args:
        diagnosis: what ``analyze()`` said about the original log.
        verify_fix: after a CONFIRMED run, run again with the fix applied (``fix_outcome`` FIXED / NOT FIXED;
            NOT APPLICABLE where the fault is in the user's program and the run could only leave it out).
        dry_run: plan only; ``reproduction.command`` is the stand-alone command, the plan is in ``output_excerpt``.
        timeout: seconds each run may take before its whole process tree is killed.
        progress: a text stream for one-line progress (the CLI passes stderr on a TTY), or None.
        workdir: keep plans and captured logs here (default: a temporary folder, removed afterwards).
        analyzer: ``paths -> Diagnosis`` for the captured output (default: ``analysis.analyze``).
        rules_dirs: extra rule folders for the default analyzer.
        base_env: the environment children inherit PATH etc. from (default: this process's).
        local: what this machine has (default: probed; the GPU count comes from a torch subprocess).

    Raises:
        ReproduceError: the reproduction could not run at all (PyTorch missing, the worker would not start).
        ReproduceInterrupted: SIGINT/SIGTERM/SIGHUP during a run; every process of it was stopped first.
    """
    if local is None:
        with stop_signals():
            local = local_info(base_env)
    staging, fix = stage(diagnosis, local, verify_fix=verify_fix)
    plan = staging.plan
    expected = staging.expected
    if plan is None or expected is None:
        return _with(diagnosis, Reproduction(outcome=INCONCLUSIVE, reason=staging.blocked or "nothing to reproduce",
                                             backend=None, world_size=staging.job_world_size, command=""))
    command = plan.command()
    fix_env = dict(fix.env) if fix else {}
    details = _details(staging)
    planned_fix = f"the fix run would apply: {fix.summary}" if fix else ""
    if dry_run:
        why = f"dry run: nothing was run. Plan: {plan.describe()}"
        if staging.blocked:
            why += f". It cannot run here: {staging.blocked}"
        why = _join(why, planned_fix)
        return _with(diagnosis, Reproduction(outcome=INCONCLUSIVE, reason=_join(why, details), backend=plan.backend,
                                             world_size=plan.nproc, command=command, fix_env=fix_env,
                                             output_excerpt=_dry_excerpt(plan, fix)))
    if staging.blocked:
        return _with(diagnosis, Reproduction(outcome=INCONCLUSIVE,
                                             reason=_join(_join(staging.blocked, planned_fix), details),
                                             backend=plan.backend, world_size=plan.nproc, command=command,
                                             fix_env=fix_env))
    require_torch(local)
    analyze_fn = analyzer or _default_analyzer(tuple(rules_dirs))
    program_fault = SCENARIOS[plan.scenario].program_fault
    try:
        with stop_signals(), tempfile.TemporaryDirectory(prefix="nccl-analyze-repro-") as tmp:
            where = workdir or tmp
            result = run_plan(plan, workdir=where, label="reproduce", timeout=timeout, base_env=base_env,
                              progress=progress)
            verdict = diagnose_run(result, analyze_fn)
            outcome, reason = judge(expected, result, verdict)
            shown = excerpt(verdict, result)
            fix_outcome = None
            if fix is not None:
                if outcome == CONFIRMED:
                    fresult = run_plan(fix.plan, workdir=where, label="fix", timeout=timeout, base_env=base_env,
                                       progress=progress)
                    fverdict = diagnose_run(fresult, analyze_fn)
                    if program_fault:
                        fix_outcome, freason = judge_control(program_fault, SCENARIOS[plan.scenario].fix, expected,
                                                             fresult, fverdict)
                        reason = _join(reason, f"fix: {fix_outcome}: {freason}")
                    else:
                        fix_outcome, freason = judge_fix(expected, fresult, fverdict)
                        reason = _join(reason, f"fix run ({fix.summary}): {freason}")
                else:
                    reason = _join(reason, "fix not checked: the failure did not reproduce")
    except RunInterrupted as stop:
        rep = Reproduction(outcome=INCONCLUSIVE, reason=_join(stop.reason(), details), backend=plan.backend,
                           world_size=plan.nproc, command=command, fix_env=fix_env)
        raise ReproduceInterrupted(_with(diagnosis, rep), stop) from None
    return _with(diagnosis, Reproduction(outcome=outcome, reason=_join(reason, details), backend=plan.backend,
                                         world_size=plan.nproc, command=command, fix_outcome=fix_outcome,
                                         fix_env=fix_env, got=verdict.got, output_excerpt=shown))


class ReproduceInterrupted(KeyboardInterrupt):
    """SIGINT/SIGTERM/SIGHUP arrived during a run: its processes were stopped. ``diagnosis.reproduction`` says so
    (INCONCLUSIVE); exit with ``exit_code`` (130 SIGINT, 143 SIGTERM, 129 SIGHUP)."""

    def __init__(self, diagnosis: Diagnosis, stop: RunInterrupted):
        super().__init__(str(stop))
        self.diagnosis = diagnosis
        self.signum = stop.signum
        self.exit_code = stop.exit_code
        self.reason = stop.reason()


def _default_analyzer(rules_dirs: tuple) -> Callable[[list[str]], Diagnosis]:
    from ..analysis import analyze

    def run(paths: list[str]) -> Diagnosis:
        return analyze(paths, rules_dirs=list(rules_dirs))

    return run


def _details(staging: Staging) -> str:
    parts = list(staging.notes)
    if staging.job_world_size and staging.plan and staging.job_world_size != staging.plan.nproc:
        nodes = f" on {staging.job_nodes} node(s)" if staging.job_nodes else ""
        parts.append(f"the job had {staging.job_world_size} rank(s){nodes}; the reproduction runs "
                     f"{staging.plan.nproc}")
    return "; ".join(parts)


def _dry_excerpt(plan: Plan, fix: FixPlan | None) -> str:
    text = "plan:\n" + plan.to_json()
    if fix is not None:
        text += f"fix run ({fix.summary}):\n{fix.plan.command()}\n"
    return text


def _join(first: str, rest: str) -> str:
    return f"{first}. {rest}" if rest else first


def _with(diagnosis: Diagnosis, reproduction: Reproduction) -> Diagnosis:
    return dataclasses.replace(diagnosis, reproduction=reproduction)
