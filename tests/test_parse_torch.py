"""TorchParser on real logs (fixtures/h200-nccl-2.28.9), public issue lines and hand-made edge cases."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from nccl_analyzer.model import Line
from nccl_analyzer.parse.torch import TorchParser, classify_body
from nccl_analyzer.sources import Source, clean_text

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures" / "h200-nccl-2.28.9"
PUBLIC = ROOT / "fixtures" / "parse" / "torch" / "public_issue_lines.log"
# what the dispatcher gives to the NCCL parser first: those lines never reach TorchParser
_NCCL = re.compile(r"(?:\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] )?[\w.-]+:\d+:\d+ (?:\[\d+\] )?.*NCCL |NCCL version ")


def _lines(text: str, path: str = "t.log") -> list[Line]:
    src = Source(path, None)
    return [clean_text(raw, src, i) for i, raw in enumerate(text.split("\n"), 1)]


def _parse(lines: list[Line]) -> list:
    p = TorchParser()
    out = []
    for line in lines:
        if _NCCL.match(line.text):
            continue
        out += p.feed(line) or []
    return out + p.flush()


def _fixture(case: str) -> list:
    text = (FIX / case / "log.txt").read_text(encoding="utf-8").rstrip("\n")
    return _parse(_lines(text, case))


def _kind(events, kind):
    return [e for e in events if e.kind == kind]


# ------------------------------------------------------------------------------ real logs
def test_11_mismatch_gloo_two_ranks_kept_apart():
    ev = _fixture("11_mismatch_gloo")
    tbs = [e for e in _kind(ev, "python.traceback") if e.rank is not None]
    assert [e.rank for e in tbs] == [0, 1]
    r0, r1 = tbs
    assert r0.get("c10d_call") == "all_reduce" and r1.get("c10d_call") == "broadcast"
    for tb in tbs:
        assert tb.get("exc_type") == "RuntimeError"
        assert tb.get("gloo_error") == "timeout" and tb.get("timeout_ms") == 10000
        assert tb.get("comm_error") is True
        assert all(raw.startswith(f"[rank{tb.rank}]:") for raw in tb.get("lines"))
    assert r0.line == 5 and r0.end_line == 13 and r1.line == 14 and r1.end_line == 23
    gloo = _kind(ev, "torch.gloo.error")
    assert [(g.rank, g.line) for g in gloo] == [(0, 13), (1, 23)]
    child = _kind(ev, "torch.elastic.child_failed")
    by_rank = {c.rank: c for c in child}
    assert set(by_rank) == {0, 1}
    assert by_rank[0].get("root_cause") is True and by_rank[1].get("root_cause") is False
    assert by_rank[0].pid == 1375 and by_rank[1].pid == 1376
    assert by_rank[0].get("exitcode") == 1 and by_rank[0].get("local_rank") == 0
    assert by_rank[0].host == "localhost" and by_rank[0].get("failure_time") == "2026-11-29_13:57:15"
    assert by_rank[0].get("error_file") == "<N/A>" and by_rank[0].text == "[0]:"
    wf = _kind(ev, "torch.elastic.worker_failed")
    assert wf[0].pid == 1375 and wf[0].get("exitcode") == 1 and wf[0].get("local_rank") == 0
    outer = [e for e in _kind(ev, "python.traceback") if e.rank is None][0]
    assert outer.get("exc_type").endswith("ChildFailedError") and len(outer.get("failures")) == 2


def test_04_duplicate_gpu_interleaved_tracebacks_are_two_events():
    ev = _fixture("04_duplicate_gpu")
    worker = [e for e in _kind(ev, "python.traceback") if e.get("exc_type") == "torch.distributed.DistBackendError"]
    assert len(worker) == 2
    last = sorted(e.get("last_error") for e in worker)
    assert last == ["Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 60",
                    "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 60"]
    for tb in worker:
        assert tb.get("msg_kind") == "torch.nccl_error"
        assert tb.get("nccl_result") == "ncclInvalidUsage"
        assert tb.get("nccl_version") == "2.28.9"
        assert tb.get("error_string") == "invalid usage (run with NCCL_DEBUG=WARN for details)"
        assert tb.get("comm_error") is True and not tb.get("partial")
        assert "NCCL error in:" in tb.get("message") and "ncclInvalidUsage" in tb.get("message")
        assert tb.get("frames")[-1]["function"] == "_new_process_group_helper"
    errs = _kind(ev, "torch.nccl_error")
    assert len(errs) == 2 and {e.line for e in errs} == {79, 83}
    assert {e.get("last_error") for e in errs} == set(last)


def test_03_port_in_use():
    ev = _fixture("03_port_in_use")
    tb = _kind(ev, "python.traceback")[0]
    assert tb.get("exc_type") == "torch.distributed.DistNetworkError" and tb.line == 1 and tb.end_line == 40
    le = _kind(ev, "torch.store.listen_error")[0]
    assert le.line == 40 and le.get("port") == 29513 and le.get("code_name") == "EADDRINUSE"
    assert le.get("errno") == 98 and le.get("backend") == "libuv"


def test_05_rank_exception():
    ev = _fixture("05_rank_exception")
    tb = [e for e in _kind(ev, "python.traceback") if e.rank == 0][0]
    assert tb.get("exc_type") == "RuntimeError"
    assert tb.get("message") == "rank 0 failed on purpose after all_reduce"
    assert tb.get("comm_error") is False and tb.get("user_frame")["line"] == 30
    assert _kind(ev, "torch.pg.destroy_missing")[0].rank == 0
    child = _kind(ev, "torch.elastic.child_failed")
    assert len(child) == 1 and child[0].get("root_cause") is True and child[0].pid == 629


def test_06_oom_fields():
    ev = _fixture("06_oom")
    oom = _kind(ev, "torch.cuda.oom")[0]
    assert oom.rank == 0 and oom.get("exc_type") == "torch.OutOfMemoryError"
    assert oom.get("tried_to_allocate") == "16.00 GiB" and oom.get("tried_to_allocate_bytes") == 16 << 30
    assert oom.get("gpu") == 0 and oom.get("total") == "139.80 GiB" and oom.get("free") == "10.63 GiB"
    assert oom.get("process_in_use") == "129.16 GiB" and oom.get("allocated") == "128.00 GiB"
    tb = [e for e in _kind(ev, "python.traceback") if e.rank == 0][0]
    assert tb.get("msg_kind") == "torch.cuda.oom" and tb.get("gpu") == 0


def test_12_illegal_mem_cuda_error():
    ev = _fixture("12_illegal_mem")
    err = _kind(ev, "torch.cuda.error")[0]
    assert err.get("cuda_error") == "device-side assert triggered" and err.get("cuda_error_name") == "cudaErrorAssert"
    tb = [e for e in _kind(ev, "python.traceback") if e.rank == 0][0]
    assert tb.get("exc_type") == "torch.AcceleratorError" and tb.end_line == 105
    assert "Compile with `TORCH_USE_CUDA_DSA`" in tb.get("message")
    da = _kind(ev, "torch.cuda.device_assert")[0]
    assert da.get("file").endswith("IndexKernel.cu") and da.get("block") == "0,0,0"


def test_17_torch_detail_c10d_info():
    ev = _fixture("17_torch_detail")
    logs = _kind(ev, "torch.log")
    first = logs[0]
    assert first.line == 1 and first.get("severity") == "INFO" and first.get("src_file") == "debug.cpp"
    assert first.get("c10d_tag") == "c10d" and first.get("msg") == "The debug level is set to DETAIL."
    assert {e.get("c10d_tag") for e in logs} >= {"c10d", "debug", "trace"}
    init = {e.get("form"): e for e in _kind(ev, "torch.pg.init")}
    assert init["environments"].get("nccl_version") == "2.28.9"
    assert init["options"].get("timeout_ms") == 20000 and init["options"].get("size") == 1
    assert init["options"].rank == 0 and init["options"].get("pg_id") == 0
    assert init["heartbeat_environments"].get("settings")["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"] == "480"
    tb = [e for e in _kind(ev, "python.traceback") if e.rank == 0][0]
    assert tb.get("message") == "rank 0 failed on purpose after all_reduce"


@pytest.mark.parametrize("case", sorted(p.name for p in FIX.iterdir() if p.is_dir()))
def test_fixture_parses_without_loss(case):
    """The whole pipeline's event stream (``events`` with text): every input line lies inside some event's span,
    each event's ``text`` is its first line verbatim, and a multi-line event's ``lines`` are its span's lines
    (in order; interleaved output of another rank may sit between them)."""
    from nccl_analyzer.export import iter_events

    path = FIX / case / "log.txt"
    raw = path.read_text(encoding="utf-8").split("\n")
    if raw and raw[-1] == "":
        raw.pop()
    covered = [False] * (len(raw) + 1)
    for e in iter_events([str(path)]):
        end = e.end_line or e.line
        assert 1 <= e.line <= end <= len(raw), (e.kind, e.line, e.end_line)
        assert e.text == raw[e.line - 1], (e.kind, e.line)
        for n in range(e.line, end + 1):
            covered[n] = True
        lines = e.fields.get("lines")
        if lines:
            assert lines[0] == raw[e.line - 1] and lines[-1] == raw[end - 1], (e.kind, e.line)
            span = iter(raw[e.line - 1:end])
            assert all(any(x == y for y in span) for x in lines), f"{e.kind} at {e.line}: lines not in its span"
    lost = [n for n in range(1, len(raw) + 1) if not covered[n]]
    assert not lost, f"lines in no event: {lost[:10]}"


# ------------------------------------------------------------------------------ public issue lines
def _public_samples():
    samples, cur = [], None
    for raw in PUBLIC.read_text(encoding="utf-8").splitlines():
        m = re.match(r"# (https://\S+) \| expect: (\S+)$", raw)
        if m:
            cur = (m.group(1), m.group(2), [])
            samples.append(cur)
        elif raw.startswith("#"):
            continue
        elif cur is not None:
            cur[2].append(raw)
    return samples


@pytest.mark.parametrize("url,kind,lines", _public_samples(), ids=lambda v: v if isinstance(v, str) else "")
def test_public_issue_lines(url, kind, lines):
    ev = _parse(_lines("\n".join(lines), url))
    assert kind in {e.kind for e in ev}, (url, [e.kind for e in ev])


def test_public_details():
    s = {u: _parse(_lines("\n".join(ls))) for u, _, ls in _public_samples()}
    term = _kind(s["https://github.com/sgl-project/sglang/issues/1693"], "torch.terminate")[0]
    assert term.get("cpp_type") == "c10::DistBackendError" and term.get("cause_kind") == "torch.watchdog.exception"
    assert term.get("seq") == 9141 and term.get("op_type") == "_ALLGATHER_BASE" and term.get("cpp_frames") == 1
    child = _kind(s["https://github.com/lzhxmu/CPPO/issues/6"], "torch.elastic.child_failed")[0]
    assert child.get("signal") == "SIGKILL" and child.get("exitcode") == -9 and child.pid == 14750
    old = _kind(s["https://github.com/OFA-Sys/OFA/issues/271"], "torch.watchdog.timeout")[0]
    assert old.get("seq") == 469508 and "numel_in" not in old.fields and old.get("elapsed_ms") == 1802212
    wf = _kind(s["https://github.com/lmzpai/roboMamba/issues/10"], "torch.elastic.worker_failed")[0]
    assert wf.get("signal") == "SIGKILL" and wf.pid == 2630


# ------------------------------------------------------------------------------ edge cases
def test_watchdog_fields_and_pg_prefix_forms():
    k, f = classify_body("[PG ID 0 PG GUID 0(default_pg) Rank 1] Exception (either an error or timeout) detected by "
                         "watchdog at work: 808, last enqueued NCCL work: 811, last completed NCCL work: 807.")
    assert k == "torch.work.status" and f["pg_desc"] == "default_pg" and f["last_enqueued"] == 811
    k, f = classify_body("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE,"
                         " NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) ran for 600060 milliseconds "
                         "before timing out.")
    assert (k, f["seq"], f["op_type"], f["numel_in"], f["timeout_ms"], f["elapsed_ms"]) == \
        ("torch.watchdog.timeout", 1580, "ALLREDUCE", 466119168, 600000, 600060)
    k, f = classify_body("[PG 0 Rank 25] Heartbeat monitor timed out! Process will be terminated after dumping debug "
                         "info. workMetaList_.size()=2")
    assert k == "torch.heartbeat.timeout" and f["work_meta_list_size"] == 2 and f["pg_name"] == "0"


def test_interleaved_rank_tracebacks_with_prefixes():
    text = "\n".join([
        "[rank0]: Traceback (most recent call last):",
        "[rank1]: Traceback (most recent call last):",
        '[rank0]:   File "a.py", line 1, in <module>',
        '[rank1]:   File "b.py", line 2, in <module>',
        "[rank1]:     dist.broadcast(t, 0)",
        "[rank0]:     dist.all_reduce(t)",
        "[rank0]: ValueError: zero",
        "[rank1]: KeyError: 'one'",
    ])
    tbs = _kind(_parse(_lines(text)), "python.traceback")
    assert sorted((e.rank, e.get("exc_type"), e.get("frames")[0]["file"]) for e in tbs) == \
        [(0, "ValueError", "a.py"), (1, "KeyError", "b.py")]


def test_chained_exception_is_one_event():
    text = "\n".join([
        "Traceback (most recent call last):",
        '  File "x.py", line 3, in f',
        "    g()",
        "KeyError: 'a'",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        '  File "x.py", line 9, in <module>',
        "    f()",
        "RuntimeError: wrapped",
        "done",
    ])
    ev = _parse(_lines(text))
    tbs = _kind(ev, "python.traceback")
    assert len(tbs) == 1
    tb = tbs[0]
    assert tb.get("exc_type") == "RuntimeError" and tb.get("chain")[0]["exc_type"] == "KeyError"
    assert tb.get("chain")[0]["relation"] == "cause" and tb.line == 1 and tb.end_line == 11


def test_partial_traceback_and_lone_exception():
    ev = _parse(_lines("Traceback (most recent call last):\n  File \"x.py\", line 3, in f\n    g()"))
    assert ev[0].kind == "python.traceback" and ev[0].get("incomplete") and ev[0].get("partial")
    ev = _parse(_lines("torch.distributed.DistStoreError: wait timeout after 600000ms, keys: /default_pg//0"))
    assert [e.kind for e in ev] == ["python.exception", "torch.store.timeout"]
    assert ev[1].get("keys") == ["/default_pg//0"]


def test_terminate_what_with_cuda_error():
    text = "\n".join([
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread terminated with exception: "
        "CUDA error: an illegal memory access was encountered",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
        "incorrect.",
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
        "Exception raised from c10_cuda_check_implementation at /pytorch/c10/cuda/CUDAException.cpp:44 (most recent "
        "call first):",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f in /x/libc10.so)",
    ])
    ev = _parse(_lines(text))
    assert len(ev) == 1 and ev[0].kind == "torch.terminate" and ev[0].end_line == 6
    assert ev[0].get("cuda_error") == "an illegal memory access was encountered"
    assert ev[0].get("raised_from")["function"] == "c10_cuda_check_implementation"


@pytest.mark.parametrize("text", ["", " ", "[", "[E", "Traceback", "\x00\x01", "File \"", "[rank", "  File \"x\", line",
                                  "[0]:", "terminate called", "a" * 10000, "[E1 a.cpp:1] ", "WARNING:torch.x:",
                                  "NCCL error in: x", "CUDA out of memory. Tried to allocate lots"])
def test_odd_input_never_crashes(text):
    p = TorchParser()
    lines = _lines(text + "\n" + text)
    out = [e for line in lines for e in (p.feed(line) or [])] + p.flush()
    for e in out:  # whatever it makes of the input, each event points into it
        assert e.kind and e.path == "t.log" and 1 <= e.line <= (e.end_line or e.line) <= len(lines), e


def test_non_torch_lines_are_rejected():
    # (Its speed is measured by benchmarks/, not here: a timed assertion fails on a loaded machine.)
    p = TorchParser()
    rejects = [Line("x", i, t, t) for i, t in enumerate(
        ["rank 0 sum 1.0", "epoch 3 step 100 loss 0.123", "12.5it/s", "  0%|          | 0/800", "Loading shards"], 1)]
    out = [e for x in rejects for e in (p.feed(x) or [])] + p.flush()
    assert {e.kind for e in out} <= {"text"}, [(e.kind, e.text) for e in out]
