"""Per-rank state that must stay small (docs/speed.md, session 7), each with the result it must not change: a long
multi-line event held packed by the rule engine, one record per process in the job model, each rank's first error
kept by reference where the input is a file. Deep sizes of a synthetic multi-rank job (not timings)."""
from __future__ import annotations

import gc
import sys

from nccl_analyzer.analysis import Analyzer, analyze, analyze_text
from nccl_analyzer.engine import parse_rule
from nccl_analyzer.lineref import LineEvidence
from nccl_analyzer.model import Event, Evidence
from nccl_analyzer.packed import LONG_EVENT, PackedEvent
from nccl_analyzer.render import render
from nccl_analyzer.sources import expand_inputs

from test_engine import GOOD, write


def deep_size(root: object) -> int:
    seen: set[int] = set()
    total, stack = 0, [root]
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, type):
            continue
        seen.add(id(o))
        total += sys.getsizeof(o)
        stack.extend(gc.get_referents(o))
    return total


def job_log(ranks: int, nodes: int = 8) -> str:
    """NCCL Init lines of every rank (8 GPUs a node, one process a GPU), then a WARN on each rank."""
    out = []
    for r in range(ranks):
        host, pid, dev = f"node{r // nodes}", 1000 + r, r % nodes
        out.append(f"{host}:{pid}:{pid} [{dev}] NCCL INFO NCCL version 2.28.9+cuda13.0\n")
        out.append(f"{host}:{pid}:{pid} [{dev}] NCCL INFO comm 0xabc rank {r} nranks {ranks} cudaDev {dev} "
                   f"nvmlDev {dev} busId {dev + 1}0000 commId 0x1234 - Init START\n")
        out.append(f"{host}:{pid}:{pid} [{dev}] NCCL INFO comm 0xabc rank {r} nranks {ranks} cudaDev {dev} "
                   f"nvmlDev {dev} busId {dev + 1}0000 commId 0x1234 localRanks {nodes} localRank {dev} "
                   f"MNNVL 0 - Init COMPLETE\n")
    for r in range(ranks):
        host, pid, dev = f"node{r // nodes}", 1000 + r, r % nodes
        out.append(f"{host}:{pid}:{pid} [{dev}] transport/net_ib.cc:1 NCCL WARN NET/IB : Got completion from peer "
                   f"10.0.{r // 256}.{r % 256}<{40000 + r}> with status=12 opcode=0 len=0 vendor err 129 (Recv) "
                   f"localGid ::ffff:10.0.0.1 remoteGids ::ffff:10.0.{r // 256}.{r % 256} hca mlx5_{dev}\n")
    return "".join(out)


def _read(path: str) -> Analyzer:
    a = Analyzer()
    src = expand_inputs([path])[0]
    a.add_sources([src])
    a.run_source(src)
    return a


def test_one_record_per_process_and_the_ranks_it_maps(tmp_path):
    sizes = {}
    for n in (256, 768):
        p = tmp_path / f"job{n}.log"
        p.write_text(job_log(n))
        a = _read(str(p))
        b = a.builder
        ev = Event("nccl.warn.net", str(p), 1, "", host="node3", pid=1000 + 27)
        assert b.rank_of(ev) == 27 and b.procs.rank(None, 1027) == (27, n)
        assert sorted(b.job.ranks) == list(range(n)) and all(b.job.ranks[r].pid == 1000 + r for r in range(n))
        sizes[n] = deep_size(b.procs) + deep_size(b.error_ranks)
        # no list per rank for its timeline while reading (its entries are in ``Timelines``); its own one after build
        assert len({id(b.job.ranks[r].timeline) for r in range(n)}) == 1
        job = b.build()
        assert len({id(job.ranks[r].timeline) for r in range(n)}) == n and job.ranks[5].timeline[0]["what"] == "init start"
    per_proc = (sizes[768] - sizes[256]) / 512
    # one slotted record, a rank tuple, one Init list a process, with what they reach (the comm and bus strings,
    # the ints): 632 bytes here; the eight tables keyed by (host, pid) / pid / rank they replace took 1,220
    assert per_proc < 800, per_proc


def test_a_long_multi_line_event_is_held_packed_and_quoted_the_same(tmp_path):
    rule = GOOD.replace('kind = "nccl.warn.*"\nmsg = \'~thing (?P<what>\\w+)\'', 'kind = "python.traceback"')
    rule = rule.replace('summary = "fix {what}"', 'summary = "fix"')
    def tb(line: int, n: int) -> Event:
        lines = ["Traceback (most recent call last):"] + [f'  File "x{i}.py", line {i}, in f{i}' for i in range(n)] \
            + [f"RuntimeError: boom {line}"]
        return Event("python.traceback", "t.log", line, lines[0], end_line=line + len(lines) - 1,
                     fields={"lines": lines, "exc_type": "RuntimeError", "line_numbers": list(range(line, line + n + 2))})

    first, ev = tb(10, 300), tb(400, 320)
    assert len(ev.fields["lines"]) > LONG_EVENT
    a = Analyzer(rules=[parse_rule(write(tmp_path, rule))])
    a.add_event(first)
    a.add_event(ev)
    held = [e for st in a.matcher._states for sl in st.slots for e in sl.held]
    assert len(held) == 2 and all(isinstance(e, PackedEvent) for e in held), "packed at once, not kept whole"
    assert held[1].fields == ev.fields and held[1].text == ev.text
    # (the blob deflates against the kind's first pickle, which every later one of the kind shares)
    assert sys.getsizeof(held[1]._blob) * 8 < deep_size(ev)
    # the packed object: (kind, dictionary) and (path, host) one shared tuple each, 8 slots (was 10: 112 bytes)
    assert sys.getsizeof(held[1]) <= 96 and held[0]._kz is held[1]._kz and held[0]._ph is held[1]._ph
    assert (held[1].kind, held[1].path, held[1].host, held[1].line) == (ev.kind, ev.path, ev.host, ev.line)
    [hit] = a.matcher.hits(a.builder)
    assert [e.text for e in hit.evidence] == ["RuntimeError: boom 10", "RuntimeError: boom 400"]


def test_first_errors_by_reference_read_back_byte_identical(tmp_path):
    text = job_log(64)
    # the cleaning the reader does (ANSI colour, CR, a BEL) must come out the same from the re-read
    text = text.replace("hca mlx5_5\n", "hca \x1b[31mmlx5_5\x1b[0m\r\n", 1)
    text = text.replace("hca mlx5_7\n", "hca mlx5_7\x07 x\r\n", 1)
    p = tmp_path / "job.log"
    p.write_bytes(text.encode())
    a = _read(str(p))
    errs = [a.builder.job.ranks[r].first_error for r in range(64)]
    assert all(isinstance(e, LineEvidence) for e in errs), "kept by reference"
    whole = analyze_text(text, name=str(p))  # the same lines, in memory: no file to read again
    kept = [whole.job.ranks[r].first_error for r in range(64)]
    assert all(isinstance(e, Evidence) for e in kept)
    assert [e.to_dict() for e in errs] == [e.to_dict() for e in kept]
    assert errs == kept
    # each reference is a 56-byte object and its line's int (the path is every rank's one string); the evidence and
    # its text were ~0.35 KiB a rank
    a2 = _read(str(p))
    refs = [a2.builder.job.ranks[r].first_error for r in range(64)]
    per_ref = (deep_size(refs) - deep_size(refs[0].path) - deep_size(a2.builder.lines)) / 64
    per_whole = (deep_size(kept) - deep_size(kept[0].path)) / 64
    assert per_ref < 100 and per_ref * 3 < per_whole, (per_ref, per_whole)
    assert render(analyze([str(p)], workers=1), "json") == render(analyze([str(p)], workers=1), "json")


def test_versions_by_process_keeps_what_its_readers_read(tmp_path):
    text = job_log(300)
    # the second half of the ranks on another NCCL version: job-nccl-versions-differ names them
    lines = text.splitlines(keepends=True)
    lines = [ln.replace("2.28.9+cuda13.0", "2.27.3+cuda12.9") if ln.startswith(tuple(f"node{n}:" for n in range(19, 38)))
             else ln for ln in lines]
    p = tmp_path / "job.log"
    p.write_text("".join(lines))
    whos: dict[str, list[str]] = {}
    for ln in lines:
        if "NCCL version" in ln:
            host, pid = ln.split(":")[:2]
            whos.setdefault(ln.split("NCCL version ")[1].split()[0], []).append(f"{host}:{pid}")
    d = analyze([str(p)], workers=1)
    assert d.job.extra["versions_by_process"] == {v: sorted(w)[:16] for v, w in sorted(whos.items())}
    f = [f for f in d.findings if f.rule == "job-nccl-versions-differ"]
    assert f and f[0].bound["who"] == "; ".join(f"{v.split('+')[0]} on {', '.join(sorted(w))[:80]}"
                                                for v, w in sorted(whos.items()))
    a = _read(str(p))
    assert all(len(s) <= 64 for s in a.builder.versions_by_proc.values())


def test_first_errors_are_read_back_at_build_and_a_rewritten_file_is_refused(tmp_path):
    import pytest

    from nccl_analyzer.errors import InputError

    p = tmp_path / "job.log"
    p.write_text(job_log(16))
    a = _read(str(p))
    job = a.builder.build()  # the texts are read back here, while the file is surely there
    p.unlink()
    assert job.ranks[3].first_error.text.startswith("node0:1003:1003 [3] transport/net_ib.cc:1 NCCL WARN")
    p.write_text(job_log(16))
    a = _read(str(p))
    p.write_text(job_log(16).replace("vendor err 129", "vendor err 130"))  # the same lines, other text
    with pytest.raises(InputError, match="changed while it was analyzed"):
        a.builder.build()
    a = _read(str(p))
    p.unlink()
    with pytest.raises(InputError, match="cannot (be )?read"):
        a.builder.build()
