"""Per-rank state that must stay small (docs/memory.md, session 9), each with what it must keep: the chatter keys
compact mode has seen (one shared key set per process), the fail-safe ledger's keys and messages (one string per
distinct key, a message that ends its line kept as an offset into it), and the whole state of a real-lines job read
at N and at 2N ranks (bytes per rank under a bound). Deep sizes, never timings."""
from __future__ import annotations

import gc
import random
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from nccl_analyzer.analysis import Analyzer, analyze
from nccl_analyzer.parse.chatter_seen import ChatterSeen
from nccl_analyzer.render import render
from nccl_analyzer.sources import expand_inputs

ROOT = Path(__file__).resolve().parent.parent
_SKIP = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.CodeType,
         re.Pattern)


def deep_size(root: object, seen: set[int]) -> int:
    total, stack = 0, [root]
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, _SKIP):
            continue
        seen.add(id(o))
        total += sys.getsizeof(o)
        stack.extend(gc.get_referents(o))
    return total


def test_chatter_seen_answers_as_the_set_of_triples_did():
    rng = random.Random(5)
    got, want = ChatterSeen(), set()
    hosts = [f"node{i}" for i in range(6)]
    keys = ["Ring", "Tree", "AllReduce:", " via P2P/IPC", " via NET/IB/0", "Channel"]
    for _ in range(3000):
        t = ("".join(rng.choice(hosts)), rng.randrange(40), rng.choice(keys))  # (a new host string each time)
        assert (t in got) == (t in want)
        if rng.random() < 0.5:
            got.add(t)
            want.add(t)
        assert len(got) == len(want)
    assert set(got) == want
    assert (None, 3, "Ring") not in got
    got.add((None, 3, "Ring"))
    assert (None, 3, "Ring") in got and len(got) == len(want) + 1


def test_chatter_seen_shares_one_key_set_per_distinct_set():
    s = ChatterSeen()
    for pid in range(512):
        for k in ("Ring", "Tree", "AllReduce:", " via P2P/IPC"):
            s.add((f"node{pid // 8}", pid, "" + k))
    assert len(s) == 2048
    assert len({id(v) for v in s._by.values()}) == 1
    per_proc = deep_size(s, set()) / 512
    # a set of the 2,048 triples (their host strings and key strings copies, as the parser made them) took ~250
    # bytes a triple, ~1 KiB a process; now one (host, pid) tuple, a dict entry and the pid's int a process
    assert per_proc < 200, per_proc


def _log(tmp: Path, ranks: int) -> str:
    out = tmp / f"real-{ranks}r.log"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "real_log.py"), "--ranks", str(ranks), "--steps", "40",
                    "-o", str(out)], check=True, capture_output=True)
    return str(out)


def _parts(path: str) -> tuple[dict[str, int], Analyzer]:
    a = Analyzer()
    src = expand_inputs([path])[0]
    a.add_sources([src])
    a.run_source(src)
    seen: set[int] = set()
    deep_size(a.rules, seen)
    out = {"parser": deep_size(a._streams, seen), "job": deep_size(a.builder, seen),
           "ledger": deep_size(a.ledger, seen), "engine": deep_size(a.matcher, seen)}
    return out, a


@pytest.fixture(scope="module")
def two_jobs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("real")
    return _log(tmp, 128), _log(tmp, 256)


def test_ledger_keys_shared_and_messages_unchanged(two_jobs):
    _, a = _parts(two_jobs[1])
    errs = a.ledger.errors
    assert len(errs) > 1000
    by_key: dict[str, set[int]] = {}
    for e in errs:
        by_key.setdefault(e.key, set()).add(id(e.key))
        # the message is what it was: the event's msg / message field, else its text, 500 characters at most
        assert len(e.body) <= 500 and (e.text.endswith(e.body) or e.body_at.__class__ is str)
    assert len(by_key) < 40 and all(len(ids) == 1 for ids in by_key.values())
    offsets = sum(1 for e in errs if e.body_at.__class__ is int)
    assert offsets > len(errs) // 2


def test_per_rank_state_of_n_and_2n_ranks(two_jobs):
    small, big = two_jobs
    p1, _ = _parts(small)
    p2, _ = _parts(big)
    per_rank = {k: (p2[k] - p1[k]) / 128 for k in p1}
    total = sum(per_rank.values())
    # measured at session 9's end (128 -> 256 ranks, real_log.py --steps 40): see docs/memory.md; bounds with margin
    assert per_rank["parser"] < 600, per_rank  # 313 (was 895)
    assert total < BOUND_TOTAL, per_rank


def test_the_report_is_the_same_with_one_and_two_workers(two_jobs):
    d1 = analyze([two_jobs[0]], workers=1)
    d2 = analyze([two_jobs[0]], workers=2)
    j1, j2 = (re.sub(r'"stats": \{.*', "", render(d, "json"), flags=re.S) for d in (d1, d2))
    assert j1 == j2 and '"cuda_oom"' in j1


BOUND_TOTAL = 16_500  # 14,946 bytes a rank (was 18,735: ledger 10,231 -> 6,996, parser 895 -> 313)
