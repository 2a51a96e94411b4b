"""The fast path (triage.py block scanner) never drops a line a rule, the job model or the fail-safe can use.

A log is built from EVERY WARN and INFO format NCCL 2.3-2.30 prints (../shared/reference/nccl_log_formats.jsonl,
read from NCCL's source at every release tag), its printf conversions filled with plausible values, spread over
several processes and interleaved with the chatter the scanner counts without parsing (collective calls,
transports, rings, trees, ring orders, allocations, topology dumps). The diagnosis through the block scanner must
equal the one through the per-line path (``Analyzer.feed``, what the live pipe reads), with whole blocks and with
small blocks (block mode engaged), whatever the formats say.
"""
from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from nccl_analyzer import sources
from nccl_analyzer.analysis import Analyzer
from nccl_analyzer.sources import expand_inputs, iter_source
from test_triage import _per_line as _per_line_paths, _same, _triaged  # the same two paths and comparison

ROOT = Path(__file__).resolve().parent.parent
CATALOGUE = ROOT.parent / "shared" / "reference" / "nccl_log_formats.jsonl"
if not CATALOGUE.exists():  # the main checkout and worktrees sit next to /work/shared
    CATALOGUE = Path("/work/shared/reference/nccl_log_formats.jsonl")

_CONV = re.compile(r"%[-+ #0-9.*]*(?:hh|h|ll|l|z|j|t|L)?([diouxXeEfgGcspn%])")
_VALUES = {"d": ["3", "0", "-1", "12"], "i": ["2"], "u": ["7"], "o": ["10"], "x": ["1f", "2a000"], "X": ["1F"],
           "e": ["1.5e+00"], "f": ["1.250000", "0.5"], "g": ["2.5"], "c": ["A"],
           "s": ["eth0", "NET/IB", "P2P/IPC", "mlx5_0:1", "10.0.0.2<43211>", "Connection refused",
                 "unhandled system error (run with NCCL_DEBUG=INFO for details)"],
           "p": ["0x7f5589f49000", "(nil)"], "n": [""], "%": ["%"]}


def _fill(fmt: str, rnd: random.Random) -> str:
    return _CONV.sub(lambda m: rnd.choice(_VALUES[m.group(1)]), fmt).replace("\n", " ")


def _formats() -> list[dict]:
    return [json.loads(line) for line in CATALOGUE.read_text().splitlines() if line.strip()]


def _chatter(host: str, pid: int, rank: int, i: int) -> list[str]:
    h = f"{host}:{pid}:{pid + 1} [{rank % 8}] NCCL INFO "
    return [
        h + f"AllReduce: opCount {i:x} sendbuff 0x7f2c9a149000 recvbuff 0x7f2c9a149000 count 1 datatype 7 op 0 "
            f"root 0 comm 0x55d0 [nranks=4] stream 0x55e0",
        h + f"Channel {i % 32:02d}/0 : {rank}[{rank % 8}] -> {(rank + 1) % 4}[{(rank + 1) % 8}] via P2P/IPC",
        h + f"Channel {i % 32:02d}/0 : {rank}[{rank % 8}] -> {(rank + 1) % 4}[{(rank + 1) % 8}] [send] via NET/IB/0",
        h + f"Ring {i % 32:02d} : {(rank + 3) % 4} -> {rank} -> {(rank + 1) % 4}",
        h + f"Tree {i % 32} : -1 -> {rank} -> {(rank + 1) % 4}/-1/-1",
        h + f"Trees [0] {(rank + 1) % 4}/-1/-1->{rank}->-1 [1] {(rank + 1) % 4}/-1/-1->{rank}->-1",
        h + f"Channel {i % 32:02d}/32 :    0   1   2   3",
        h + f"channel.cc:1620 Cuda Alloc Size 12 pointer 0x7f5589f4{i:04x}",
        h + f"{i % 32:2d} : GPU/{rank % 8}-60 NET/0-0",
    ]


def _log(rnd: random.Random) -> str:
    procs = [(f"node{r // 2}", 4100 + 17 * r, r) for r in range(4)]
    out: list[str] = []
    for i, rec in enumerate(_formats()):
        if rec["level"] not in ("WARN", "INFO"):
            continue
        host, pid, rank = procs[i % len(procs)]
        for _ in range(rnd.randint(0, 3)):
            h2, p2, r2 = rnd.choice(procs)
            out.extend(rnd.sample(_chatter(h2, p2, r2, i), 3))
        body = _fill(rec["fmt"], rnd)
        if rec["level"] == "WARN":
            src = f"{rec['file'].removeprefix('src/')}:{rec['line']}"
            out.append("")  # NCCL prints a blank line before each WARN
            out.append(f"{host}:{pid}:{pid + 1} [{rank % 8}] {src} NCCL WARN {body}")
        else:
            out.append(f"{host}:{pid}:{pid + 1} [{rank % 8}] NCCL INFO {body}")
    return "\n".join(out) + "\n"


def _per_line(path: str) -> dict:
    return _per_line_paths([path])


def _fast(path: str) -> dict:
    return _triaged([path])


@pytest.mark.skipif(not CATALOGUE.exists(), reason="the NCCL format catalogue is not here")
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("block", [None, 1 << 12])
def test_every_catalogue_format_with_chatter_same_as_full_path(tmp_path, monkeypatch, seed, block):
    p = tmp_path / "job.log"
    p.write_text(_log(random.Random(seed)))
    slow = _per_line(str(p))
    if block is not None:
        monkeypatch.setattr(sources, "BLOCK", block)
    fast = _fast(str(p))
    _same(fast, slow)
    assert fast["stats"]["counted"] + fast["stats"]["compacted"] > 0, "the fast path skipped nothing: not tested"
    assert slow["findings"], "the catalogue log gave no finding at all: the comparison would be vacuous"


def test_every_chatter_line_reaches_the_parser_once_per_process(tmp_path):
    # The scanner's key for a counted chatter line must be the parser's own: the first line of each (process, key)
    # is parsed, the rest counted; a process's last chatter line becomes an event at the end.
    lines = []
    for i in range(40):
        for host, pid, rank in (("a", 11, 0), ("a", 12, 1), ("b", 13, 2)):
            lines.extend(_chatter(host, pid, rank, i))
    p = tmp_path / "c.log"
    p.write_text("\n".join(lines) + "\n")
    fast = _fast(str(p))
    _same(fast, _per_line(str(p)))
    # 3 processes x 7 chatter keys parsed (plus their last lines at the end); the other lines counted
    assert fast["stats"]["compacted"] + fast["stats"]["counted"] >= len(lines) - 3 * 9 * 2, fast["stats"]


def _init(host: str, pid: int, rank: int, comm: str, what: str) -> str:
    return (f"{host}:{pid}:{pid + 1} [{rank}] NCCL INFO ncclCommInitRankConfig comm 0x{comm} rank {rank} nranks 2 "
            f"cudaDev {rank} nvmlDev {rank} busId {rank + 1}000 commId 0x{comm}9 - Init {what}")


def test_topology_runs_move_the_stage_as_every_line_does(tmp_path):
    # Two communicators per process, each printing its topology dump (stage-only lines, parsed by runs: first and
    # last); rank 1 stops in the second one's dump. The stage and its line must be what the per-line path gives:
    # the last topology line each rank printed after its second Init START.
    lines = []
    procs = (("n0", 11, 0), ("n0", 12, 1))
    for comm in ("aa", "bb"):
        lines.extend(_init(h, pid, r, comm, "START") for h, pid, r in procs)
        for i in range(6):
            for h, pid, r in procs:
                if comm == "bb" and r == 1 and i > 2:
                    continue
                lines.append(f"{h}:{pid}:{pid + 1} [{r}] NCCL INFO {i:2d} : GPU/{r}-{r + 1}000 NET/0-0")
                lines.append(f"{h}:{pid}:{pid + 1} [{r}] NCCL INFO + PCI[48.0] - GPU/{r}-{r + 1}000 (0)")
        if comm == "aa":
            lines.extend(_init(h, pid, r, comm, "COMPLETE") for h, pid, r in procs)
    p = tmp_path / "t.log"
    p.write_text("\n".join(lines) + "\n")
    fast, slow = _fast(str(p)), _per_line(str(p))
    _same(fast, slow)
    assert fast["stats"]["counted"] >= 20, fast["stats"]  # the runs' middle lines were not parsed
    last = {r: max(i for i, ln in enumerate(lines, 1) if f":{pid}:" in ln and "GPU/" in ln) for _, pid, r in procs}
    got = {r["rank"]: (r["stage"], r["stage_line"]["line"]) for r in fast["job"]["ranks"]}
    assert got == {0: ("topology", last[0]), 1: ("topology", last[1])}


def test_an_open_crash_report_ends_at_the_next_nccl_line(tmp_path):
    # A native crash report ends when another parser takes a line: an inert or counted NCCL line right after it
    # must end it on the fast path too (else the frame after that line would join the report).
    alloc = "n0:11:12 [0] NCCL INFO channel.cc:1620 Cuda Alloc Size 12 pointer 0x7f5589f49000"
    call = ("n0:11:12 [0] NCCL INFO AllReduce: opCount 3 sendbuff 0x7f2c9a149000 recvbuff 0x7f2c9a149000 count 1 "
            "datatype 7 op 0 root 0 comm 0x55d0 [nranks=4] stream 0x55e0")
    text = "\n".join([call, call.replace("opCount 3", "opCount 4"), alloc,
                      "Fatal Python error: Segmentation fault",
                      "Current thread 0x00007f483e29bb80 (most recent call first):",
                      '  File "/work/train.py", line 42 in load_batch', alloc, call.replace("opCount 3", "opCount 5"),
                      '  File "/work/train.py", line 50 in main', ""])
    p = tmp_path / "crash.log"
    p.write_text(text)

    def crashes(fast: bool) -> list:
        a = Analyzer()
        got = []
        add = a.add_event
        a.add_event = lambda ev: (got.append(ev) if ev.kind == "native.crash" else None, add(ev))  # type: ignore
        srcs = expand_inputs([str(p)])
        a.add_sources(srcs)
        for src in srcs:
            if fast:
                a.run_source(src)
            else:
                for line in iter_source(src):
                    a.feed(line)
                a.flush(src.path)
        return [(ev.line, ev.end_line, ev.fields.get("frames")) for ev in got]

    slow = crashes(False)
    assert slow and slow[0][:2] == (4, 6), slow  # the report ends before the NCCL line that follows it
    assert crashes(True) == slow


def test_fixed_stage_agrees_with_stage_of_on_real_events():
    # triage.py parses runs of a stage-only kind by their first and last lines only because every event of the
    # kind shows the same stage (stage.fixed_stage); check that against stage_of on every such fixture event.
    from nccl_analyzer.export import iter_events
    from nccl_analyzer.stage import fixed_stage, stage_of

    runs = Analyzer()._stage_only
    assert runs, "no stage-only kinds: the run path is not exercised"
    logs = [p for p in sorted((ROOT / "fixtures").rglob("log.txt"))
            if not p.relative_to(ROOT / "fixtures").parts[0].startswith("blind")
            and " : GPU/" in p.read_text(encoding="utf-8", errors="replace")]
    assert logs
    seen = 0
    for log in logs:
        for ev in iter_events([str(log)]):
            if ev.kind in runs:
                seen += 1
                assert stage_of(ev) == (fixed_stage(ev.kind), None), (ev.kind, ev.text)
    assert seen > 100
