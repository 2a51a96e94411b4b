"""Every PyTorch format in fixtures/reference/torch_distributed_formats.json yields its typed event."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nccl_analyzer.model import Line
from nccl_analyzer.parse.torch import TorchParser
from nccl_analyzer.sources import Source, clean_text

REF = Path(__file__).resolve().parent.parent / "fixtures" / "reference" / "torch_distributed_formats.json"
ENTRIES = json.loads(REF.read_text(encoding="utf-8"))["entries"]

# The event kind each entry's example must yield (other events may come with it, e.g. python.exception
# + the derived torch.* event of its message).
EXPECTED = {
    "c10_log_prefix_plain": "torch.watchdog.timeout",
    "c10_log_prefix_rank": "torch.watchdog.timeout",
    "c10_log_prefix_rank_ts": "torch.watchdog.timeout",
    "c10_warning": "torch.log",
    "c10_error_what": "torch.watchdog.timeout",
    "cpp_terminate": "torch.terminate",
    "pg_prefix_rank": "torch.watchdog.timeout",
    "pg_prefix_v23": "torch.heartbeat.timeout",
    "pg_prefix_v24": "torch.watchdog.exception",
    "pg_prefix_v25": "torch.work.status",
    "py_logging_basic": "torch.elastic.sigterm",
    "py_torch_logging_v21": "torch.elastic.worker_failed",
    "py_torch_logging_v23": "torch.elastic.sigterm",
    "py_torch_logging_v25": "torch.elastic.sigterm",
    # a pure wrapper prefix: sources.clean_text recognizes and strips it (checked below), the rest is ours
    "torchrun_tee_prefix": "python.traceback",
    "excepthook_rank_prefix": "python.traceback",
    "c10d_log_tag": "torch.socket.bind_error",
    "pg_init_options": "torch.pg.init",
    "pg_environments": "torch.pg.init",
    "destroy_pg_not_called": "torch.pg.destroy_missing",
    "worknccl_repr_v113": "torch.work",
    "worknccl_repr": "torch.work",
    "watchdog_timeout": "torch.watchdog.timeout",
    "work_timed_out_blocking_wait": "torch.watchdog.timeout",
    "some_ops_failed": "torch.watchdog.abort",
    "taking_process_down": "torch.watchdog.abort",
    "watchdog_thread_terminated_old": "torch.terminate",
    "watchdog_thread_terminated": "torch.watchdog.exception",
    "watchdog_exception_at_work": "torch.work.status",
    "watchdog_timeout_at_work": "torch.work.status",
    "watchdog_failure_detected": "torch.work.status",
    "async_exception_found_old": "torch.work.async_error",
    "async_exception_raised": "torch.work.async_error",
    "failed_collective_stack": "torch.work.stack",
    "heartbeat_monitor_timed_out": "torch.heartbeat.timeout",
    "watchdog_stuck_v23": "torch.watchdog.stuck",
    "watchdog_stuck": "torch.watchdog.stuck",
    "terminating_after_dump": "torch.heartbeat.terminate",
    "dump_signal_received": "torch.flight_recorder",
    "fr_first_pg_signal": "torch.flight_recorder",
    "fr_preparing_dump": "torch.flight_recorder",
    "fr_dumping_to": "torch.flight_recorder",
    "desync_report": "torch.desync",
    "nccl_error_in": "torch.nccl_error",
    "nccl_error_async": "torch.nccl_error",
    "nccl_error_detail": "torch.nccl_error",
    "dist_backend_error_type": "torch.nccl_error",
    "dist_network_error_type": "torch.store.connect_error",
    "dist_store_error_type": "torch.store.timeout",
    "unique_id_store_get_failed": "torch.nccl.unique_id_error",
    "comm_aborted_on_rank": "torch.nccl.comm_aborted",
    "server_listen_failed_legacy": "torch.store.listen_error",
    "server_listen_failed_libuv": "torch.store.listen_error",
    "client_connect_timeout": "torch.store.connect_error",
    "client_connect_failed": "torch.store.connect_error",
    "tcpstore_client_retry": "torch.store.connect_error",
    "tcpstore_wait_for_workers_timeout": "torch.store.timeout",
    "tcpstore_wait_timeout": "torch.store.timeout",
    "tcpstore_socket_timeout": "torch.store.timeout",
    "tcpstore_connection_closed": "torch.store.connection_closed",
    "rendezvous_timeout_elastic": "torch.rendezvous.error",
    "child_failed_error": "torch.elastic.child_failed",
    "child_failure_block": "torch.elastic.child_failed",
    "child_failure_block_v212": "torch.elastic.child_failed",
    "agent_worker_failed": "torch.elastic.worker_failed",
    "agent_sending_closing_signal": "torch.elastic.sigterm",
    "agent_death_signal": "torch.elastic.signal",
    "agent_worker_group_failure": "torch.elastic.restart",
    "torchrun_omp_banner": "torch.elastic.omp_threads",
    "cuda_error": "torch.cuda.error",
    "cuda_error_exception_type": "torch.cuda.error",
    "cuda_oom_v1": "torch.cuda.oom",
    "cuda_oom_v2": "torch.cuda.oom",
    "oom_exception_type": "torch.cuda.oom",
}

_SRC = Source("ref", None)  # a plain source: no rank or local rank from its name


def _sample(entry: dict) -> str:
    """The entry's example, or its first fmt alternative with the placeholders filled."""
    if entry.get("example"):
        return entry["example"]
    fmt = entry["fmt"].split("|")[0]
    return re.sub(r"\{[^}]*\}", "0", fmt)


def _events(text: str) -> list:
    p = TorchParser()
    out = []
    for i, raw in enumerate(text.split("\n"), 1):
        line = clean_text(raw, _SRC, i)
        out += p.feed(line) or []
    return out + p.flush()


def _kinds(entry: dict) -> set[str]:
    return {e.kind for e in _events(_sample(entry))}


def test_every_entry_has_an_expectation():
    assert {e["id"] for e in ENTRIES} == set(EXPECTED)


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_format_yields_typed_event(entry):
    kinds = _kinds(entry)
    assert EXPECTED[entry["id"]] in kinds, kinds
    assert "text" not in kinds


def test_tee_prefix_is_a_wrapper():
    entry = next(e for e in ENTRIES if e["id"] == "torchrun_tee_prefix")
    line = clean_text(entry["example"], _SRC, 1)
    assert line.local_rank == 0 and line.text == "Traceback (most recent call last):"


def test_coverage_figure(capsys):
    ok = sum(EXPECTED[e["id"]] in _kinds(e) for e in ENTRIES)
    with capsys.disabled():
        print(f"\ntorch format coverage: {ok}/{len(ENTRIES)}")
    assert ok == len(ENTRIES)


def test_grammars_build_strict():
    from nccl_analyzer.parse.torch import build_parsers

    torch_parser, tb_parser = build_parsers(strict=True)
    assert torch_parser and tb_parser


def test_line_is_not_mutated_by_parse():
    # The Lines fed to the parser are unchanged by it, and feeding the same Lines to a fresh parser gives the
    # same events (no state shared between parser instances).
    import dataclasses

    text = _sample(next(e for e in ENTRIES if e["id"] == "pg_environments"))
    lines = [clean_text(raw, _SRC, i) for i, raw in enumerate(text.split("\n"), 1)]
    assert all(isinstance(x, Line) for x in lines)
    before = [dataclasses.astuple(x) for x in lines]
    runs = []
    for _ in range(2):
        p = TorchParser()
        evs = [e for x in lines for e in (p.feed(x) or [])] + p.flush()
        runs.append([e.to_dict() for e in evs])
    assert [dataclasses.astuple(x) for x in lines] == before
    assert runs[0] == runs[1] and {r["kind"] for r in runs[0]} >= {"torch.pg.init"}, runs[0]
