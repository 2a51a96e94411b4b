"""The block triage (triage.py) gives exactly what the per-line path gives: same verdict, evidence, events and
line numbers; its inert shapes type to the kind they claim; and it leaves alone what it must not skip."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nccl_analyzer import triage
from nccl_analyzer.analysis import Analyzer
from nccl_analyzer.parse.nccl import PREFIX_RE, parse_body
from nccl_analyzer.sources import expand_inputs, iter_source

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures"


def _fixture_logs() -> list[Path]:
    out = []
    for p in sorted(FIX.rglob("*")):
        rel = p.relative_to(FIX).parts
        if p.is_file() and not rel[0].startswith("blind") and p.suffix in (".txt", ".log") and p.name != "README.md":
            out.append(p)
    return out


def _info_bodies() -> list[str]:
    bodies = []
    for p in _fixture_logs():
        for line in p.read_text(encoding="utf-8", errors="replace").splitlines():
            m = PREFIX_RE.match(line)
            if m and m["level"] == "INFO" and m["body"]:
                bodies.append(m["body"])
    return bodies


BODIES = _info_bodies()


@pytest.mark.parametrize("kind,shape", triage.INERT_SHAPES, ids=[k for k, _ in triage.INERT_SHAPES])
def test_inert_shape_types_to_its_kind(kind, shape):
    rx = re.compile(f"(?:{shape}) *")
    hits = [b for b in BODIES if rx.fullmatch(b)]
    assert hits, f"no fixture line has the shape of {kind}: the shape is not backed by a real line"
    wrong = [(b, parse_body("INFO", b)[0]) for b in hits if parse_body("INFO", b)[0] != kind]
    assert not wrong, wrong[:5]


def _per_line(paths: list[str]) -> dict:
    """The diagnosis through the per-line path only (Analyzer.feed), as the live pipe reads."""
    a = Analyzer()
    srcs = expand_inputs(paths)
    a.add_sources(srcs)
    for src in srcs:
        for line in iter_source(src):
            a.feed(line)
        a.flush(src.path)
    return a.finish().to_dict()


def _triaged(paths: list[str]) -> dict:
    a = Analyzer()
    srcs = expand_inputs(paths)
    a.add_sources(srcs)
    for src in srcs:
        a.run_source(src)
    return a.finish().to_dict()


def _same(a: dict, b: dict) -> None:
    a, b = dict(a), dict(b)
    sa, sb = a.pop("stats"), b.pop("stats")
    assert json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)
    assert sa["lines"] == sb["lines"]


CASES = sorted({p.parent for p in _fixture_logs() if (p.parent / "label.json").exists()
                and "NCCL INFO" in p.read_text(encoding="utf-8", errors="replace")})


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_triage_equals_per_line_path(case):
    paths = [str(case)]
    _same(_triaged(paths), _per_line(paths))


def test_triage_skips_most_of_a_real_multi_rank_log(tmp_path):
    log = tmp_path / "job.log"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "real_log.py"), "--ranks", "24", "--steps", "30",
                    "-o", str(log)], check=True, capture_output=True)
    fast, slow = _triaged([str(log)]), _per_line([str(log)])
    _same(fast, slow)
    assert fast["root_cause"]["id"] == "cuda_oom" and fast["root_cause"]["ranks"] == [15]
    lines = fast["stats"]["lines"]
    # the inert shapes (allocations, topology links/paths, RAS) never left the regex engine; rings, trees and
    # channels go the full way (the per-rank stage reads them)
    assert fast["stats"]["counted"] > lines // 6, fast["stats"]


def test_lines_the_full_path_would_rewrite_are_not_skipped(tmp_path):
    # A wrapper prefix, an escape, a cut prefix, a WARN whose text continues on the next (inert-looking) line:
    # all of them must reach the parsers, and the result must equal the per-line path.
    body = "channel.cc:42 Cuda Alloc Size 608 pointer 0x7f48216ab000"
    text = "\n".join([
        f"vm:1:1 [0] NCCL INFO {body}",
        f"[rank3]: vm:2:2 [1] NCCL INFO {body}",
        f"\x1b[31mvm:3:3 [2] NCCL INFO {body}\x1b[0m",
        "vm:4:4 [3] NCCL INFO ncclCommInitRankConfig comm 0x1 rank 3 nranks 4 cudaDev 3 nvmlDev 3 busId 4000 "
        "commId 0x9 - Init START",
        "vm:4:4 [3] transport/nvls.cc:143 NCCL WARN Failed to bind NVLink SHARP (NVLS) Multicast memory of size "
        "1 : CUDA error 1 'invalid argument'.",
        f"vm:4:4 [3] NCCL INFO {body}",
        "vm:4:4 [3] NCCL INFO  5 : GPU/3-4000",
        "",
    ])
    p = tmp_path / "x.log"
    p.write_text(text)
    _same(_triaged([str(p)]), _per_line([str(p)]))
    d = _triaged([str(p)])
    assert d["stats"]["counted"] <= 2  # only the two plain lines after the WARN's continuation could be


def test_parallel_equals_sequential(tmp_path):
    from nccl_analyzer import analysis, parallel

    log = tmp_path / "job.log"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "real_log.py"), "--ranks", "64", "--steps", "40",
                    "-o", str(log)], check=True, capture_output=True)
    old = parallel.MIN_CHUNK_BYTES, parallel.MIN_PARALLEL_BYTES
    parallel.MIN_CHUNK_BYTES, parallel.MIN_PARALLEL_BYTES = 1 << 20, 0
    try:
        par = analysis.analyze([str(log)], workers=2).to_dict()
    finally:
        parallel.MIN_CHUNK_BYTES, parallel.MIN_PARALLEL_BYTES = old
    seq = analysis.analyze([str(log)], workers=1).to_dict()
    assert par["root_cause"] == seq["root_cause"]
    assert [f["rule"] for f in par["findings"]] == [f["rule"] for f in seq["findings"]]


def test_small_blocks_same_result(tmp_path, monkeypatch):
    # Many blocks: the block mode (collective calls counted inside the regex engine, the last one per process
    # looked up afterwards) and the state carried across blocks must give what the per-line path gives.
    from nccl_analyzer import sources

    log = tmp_path / "job.log"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "real_log.py"), "--ranks", "16", "--steps", "60",
                    "-o", str(log)], check=True, capture_output=True)
    slow = _per_line([str(log)])
    monkeypatch.setattr(sources, "BLOCK", 1 << 13)
    used = []
    real = triage._last_calls
    monkeypatch.setattr(triage, "_last_calls", lambda t, procs, *a: used.append(len(procs)) or real(t, procs, *a))
    fast = _triaged([str(log)])
    _same(fast, slow)
    assert len(used) > 10, "the block mode never engaged"


def test_control_characters_in_call_lines_same_result(tmp_path, monkeypatch):
    # A block with no control character skips call lines on their head and "opCount " (sources.read_text_blocks
    # reports which blocks hold one); a call line with a control character in its tail is not one the fast path
    # may skip unread: a bare CR redraws the line (a terminal shows the program's "[rank3]:step ..." printed over
    # the call line: output, not a call), a BEL is dropped. Both give what the per-line path gives.
    from nccl_analyzer import sources

    log = tmp_path / "job.log"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "real_log.py"), "--ranks", "16", "--steps", "60",
                    "-o", str(log)], check=True, capture_output=True)
    lines = log.read_bytes().split(b"\n")
    calls = [i for i, b in enumerate(lines) if b" NCCL INFO AllReduce: opCount " in b]
    assert len(calls) > 500
    for n, i in enumerate(calls[len(calls) // 3::97]):
        lines[i] = lines[i] + (b"\x07 tail" if n % 2 else b"\r[rank3]:step 9 loss 1.0")
    log.write_bytes(b"\n".join(lines))
    slow = _per_line([str(log)])
    monkeypatch.setattr(sources, "BLOCK", 1 << 13)
    flags: list[bool] = []
    real = sources.read_text_blocks

    def reader(stream, src, sniff=False, controls=None):
        for item in real(stream, src, sniff, controls):
            if isinstance(item, str):
                flags.append(controls[-1])
            yield item

    monkeypatch.setattr(triage, "read_text_blocks", reader)
    fast = _triaged([str(log)])
    _same(fast, slow)
    assert fast["stats"]["unparsed"] == slow["stats"]["unparsed"], "the redrawn lines are program output"
    assert fast["stats"]["compacted"] == slow["stats"]["compacted"]
    assert True in flags and flags.count(False) > 10, "blocks with and without control characters"


def _edge_lines() -> list[str]:
    """Lines at the edges of clean_text's fast paths: prefixes and whole-line rules each fast path must leave to
    the full way."""
    head = "gpu-node-0001:123:456 [0] NCCL INFO "
    return [head + "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC", head + "x\tTAB", head + "x\r", head + "a\rb",
            head + "\x1b[31mred\x1b[0m", head + "bar 10/10 [00:01<00:00, 9.9it]", head + "x [0m",
            "node [stdout] " + head + "x", "stderr: " + head + "x", "stdhost:1:1 [0] NCCL INFO x",
            "Done 12 steps", "INFO 04-15 00:31:11 file.py:574] x", "trainer/0 [0]:hello", "role/0 x:y",
            "host " + "x" * 40 + "/1 y", head + "logged by handler.py:42", "[rank3]:step 1 loss 2.0",
            "[rank3]: Traceback (most recent call last):", "[rank3]:> quoted", "[rank3]:  two spaces",
            "[rank]:x", "[rank12345678901]:x", "[rank3] x", "[rank3]:[E1129 15:22:25.4 ProcessGroupNCCL.cpp:689] y",
            "[rank3]:x\x07", "[default0]:x", "[1,0]<stderr>:x", "[2026-11-29 13:53:31] " + head + "x",
            "éhost:1:1 [0] NCCL INFO x", "Éhost:1:1 [0] NCCL INFO x", "Warn: x", "[rank3]:**bold**", "`x`",
            "[rank3]:step ²", "a" * 70000,
            "Epoch 1:  10%|#         | 1021/100000 [45:39<51:20:53, 1.87s/it][rank2]:[E723 12:00:00.1 x.cpp:1] y",
            "epoch 1:  10%|#         | 1021/100000 [45:39<51:20:53, 1.87s/it][rank2]:[E723 12:00:00.1 x.cpp:1] y",
            "[rank1]:Epoch 1: 5/10 [00:05<00:05, 1.00s/it][rank2]:[E723 12:00:00.1 x.cpp:1] y",
            "INFO     Loading checkpoint          trainer.py:42", "[rank0]:INFO  Saving shard          io.py:7"]


def test_clean_text_fast_paths_equal_the_full_way():
    # clean_text's fast paths (plain lines, "[rankN]:" lines) give exactly what the full cleaning gives, on every
    # line of every fixture (held-out sets excepted) and on the edge cases each fast path must leave to it.
    from nccl_analyzer.sources import Source, _clean_full, clean_text

    src = Source(path="x.log", real=None)
    ranked = Source(path="x.log", real=None, rank=7, local_rank=3)
    n = fast = 0
    lines = [s for p in _fixture_logs() for s in p.read_text(encoding="utf-8", errors="replace").splitlines()]
    for s in lines + _edge_lines():
        for sc in (src, ranked):
            try:
                want = _clean_full(s, sc, 5, False)
            except ValueError:  # (a "[rank²]:" the full way cannot read either)
                with pytest.raises(ValueError):
                    clean_text(s, sc, 5, False)
                continue
            got = clean_text(s, sc, 5, False)
            assert got == want, s
            n += 1
            # (a line both ways leave as it is is what the plain fast path returns)
            fast += got.text == s and got.raw == s and got.time is None
    assert n > 20000 and fast > n // 3


def test_clean_block_pattern_skips_what_the_old_one_skips():
    # The clean-block variant of the block pattern skips a call line on its head (with or without inert kinds:
    # a rule reading Cuda Alloc lines leaves none inert) and still matches every other line.
    call = "h-1.x:12:34 [0] NCCL INFO AllReduce: opCount 1f sendbuff 0x7f00 recvbuff 0x7f00 count 8 datatype 7"
    alloc = "h-1.x:12:34 [0] NCCL INFO channel.cc:1620 Cuda Alloc Size 12 pointer 0x7f5589f49000"
    other = "h-1.x:12:34 [0] NCCL INFO Bootstrap: Using eth0:10.0.0.10<0>"
    for inert in (frozenset(), frozenset({"nccl.alloc"})):
        old, new = triage._pattern(inert, True), triage._pattern(inert, True, clean=True)
        for line in (call, alloc, other, "[rank0]:step 1 loss 2.0"):
            a, b = old.search("\n" + line), new.search("\n" + line)
            assert (a is None) == (b is None), (sorted(inert), line)
            assert a is None or a.group(0) == b.group(0)
        assert new.search("\n" + call) is None
