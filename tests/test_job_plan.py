"""``JobBuilder.plan``: what the job model does with each event kind, derived from its own tables (``_HANDLERS``,
``_PREFIX_HANDLERS``, the error and torchrun kinds, the stage tables), never a list of its own. Each table's kinds
must still reach their reader through ``JobBuilder.add``: a plan that drops one fails here."""
from __future__ import annotations

import pytest

from nccl_analyzer import job
from nccl_analyzer.job import ERROR_KINDS_PREFIX, JobBuilder
from nccl_analyzer.model import Event
from nccl_analyzer.stage import INFO_STAGE, KIND_PREFIX_STAGE, KIND_STAGE
from nccl_analyzer.triage import INERT_SHAPES


def _ev(kind: str, **kw) -> Event:
    return Event(kind=kind, path="p.log", line=7, text="t", host=kw.pop("host", "nodeA"), pid=kw.pop("pid", 11), **kw)


class _Recorder:
    def __init__(self) -> None:
        self.seen: list[Event] = []

    def __call__(self, builder: JobBuilder, ev: Event) -> None:
        self.seen.append(ev)


def _prefix_kind(prefix: str) -> str:
    return prefix + ("probe" if prefix.endswith(".") else ".probe")


@pytest.mark.parametrize("kind", sorted(job._HANDLERS))
def test_every_exact_handler_kind_reaches_its_handler(kind, monkeypatch):
    rec = _Recorder()
    monkeypatch.setitem(job._HANDLERS, kind, rec)
    ev = _ev(kind)
    JobBuilder().add(ev)
    assert rec.seen == [ev]


@pytest.mark.parametrize("index", range(len(job._PREFIX_HANDLERS)))
def test_every_prefix_handler_family_reaches_its_handler(index, monkeypatch):
    prefix, _ = job._PREFIX_HANDLERS[index]
    kind = _prefix_kind(prefix)
    if kind in job._HANDLERS:
        pytest.skip("an exact handler takes it first")
    rec = _Recorder()
    table = list(job._PREFIX_HANDLERS)
    table[index] = (prefix, rec)
    monkeypatch.setattr(job, "_PREFIX_HANDLERS", tuple(table))
    ev = _ev(kind)
    b = JobBuilder()
    b.add(ev)
    b.add(ev)  # the second time from the builder's kept plan
    assert rec.seen == [ev, ev]


def _stage_kinds() -> list[str]:
    return sorted(set(KIND_STAGE) | {_prefix_kind(p) for p, _ in KIND_PREFIX_STAGE} | {"nccl.info"})


@pytest.mark.parametrize("kind", _stage_kinds())
def test_every_stage_kind_reaches_the_stage_tracker(kind):
    b = JobBuilder()
    seen: list[Event] = []
    b.stages = type("T", (), {"add": lambda self, ev, builder: seen.append(ev)})()
    ev = _ev(kind)
    b.add(ev)
    assert seen == [ev]


def test_a_stage_info_line_moves_the_stage():
    """The generic INFO line (``nccl.info``) is the one kind whose stage is in its message (``INFO_STAGE``)."""
    b = JobBuilder()
    b.add(_ev("nccl.info", fields={"msg": INFO_STAGE[0][0] + " 1"}))
    assert b.stages._procs  # the process's stage was set


@pytest.mark.parametrize("prefix", ERROR_KINDS_PREFIX)
def test_every_error_kind_reaches_the_first_error(prefix):
    b = JobBuilder()
    seen: list[Event] = []
    b._first_error = seen.append  # type: ignore[method-assign]
    ev = _ev(prefix.rstrip(".") + ".probe", rank=3)
    b.add(ev)
    assert seen == [ev]


def test_torchrun_kinds_reach_the_worker_tables():
    b = JobBuilder()
    b.add(_ev("torch.elastic.sigterm", pid=21))
    failed = _ev("torch.elastic.worker_failed", pid=None, fields={"local_rank": 0})
    b.add(failed)
    assert b._elastic_pids == {21} and b.sigterm_pids == {21} and b.agent_failed == [failed]


def _kinds() -> set[str]:
    got = set(job._HANDLERS) | set(KIND_STAGE) | {k for k, _ in INERT_SHAPES}
    got |= {_prefix_kind(p) for p, _ in job._PREFIX_HANDLERS + KIND_PREFIX_STAGE}
    got |= {p.rstrip(".") + ".probe" for p in ERROR_KINDS_PREFIX}
    got |= {"torch.elastic.sigterm", "torch.elastic.worker_failed", "torch.flight_recorder", "torch.work.stack",
            "torch.terminate", "text", "nccl.tree", "nccl.init.start", "python.exception"}
    return got


@pytest.mark.parametrize("kind", sorted(_kinds()))
def test_the_plan_reads_what_reads_says(kind):
    """``JobBuilder.reads`` (what triage.py may skip) and the plan agree on every kind: read beyond being counted
    exactly when a handler, the first-error, torchrun's tables or the stage tracker takes it."""
    handler, _nccl, _stated, elastic, error, staged = JobBuilder.plan(kind)
    assert (handler is not None or elastic or error or staged) == JobBuilder.reads(kind)
    if JobBuilder.stage_only(kind):
        assert staged and handler is None and not error and not elastic


def test_a_kind_no_table_reads_is_still_counted():
    b = JobBuilder()
    b.add(_ev("torch.flight_recorder", rank=5, host="nodeB"))
    b.add(_ev("torch.flight_recorder", rank=6, host="nodeB"))
    assert b.kinds == {"torch.flight_recorder": 2} and b.events == 2 and b.hosts == {"nodeB"}
    assert b._stated == {5, 6} and b.agents.top == 6
