"""Cross-rank reasoning on generated multi-rank logs: the verdict names the rank(s) that stopped the job, never
torchelastic's "first observed failure" victim.

The generator reuses ``benchmarks/generate_log.py``'s NCCL 2.28.9 / torch 2.11 line formats (init chatter per rank)
and adds, per scenario, what the ranks print when the job dies: watchdog timeouts, tracebacks, a ChildFailedError
whose "Root Cause (first observed failure)" is a victim. Logs are written into ``tmp_path``, combined and per rank.
"""
from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

from nccl_analyzer.analysis import analyze

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("generate_log", ROOT / "benchmarks" / "generate_log.py")
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)  # type: ignore[union-attr]

N = 16
HOSTS = [f"gpu-node-{r // gen.GPUS_PER_HOST:04d}" for r in range(N)]
PIDS = [20000 + 7 * r for r in range(N)]


def _watchdog(r: int, seq: int, op: str = "ALLREDUCE", last_completed: int | None = None) -> list[str]:
    done = seq - 1 if last_completed is None else last_completed
    return [
        f"[rank{r}]:[E1129 14:02:{10 + r % 40:02d}.{r:09d} ProcessGroupNCCL.cpp:688] [Rank {r}] Watchdog caught "
        f"collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=1048576, NumelOut=1048576, "
        f"Timeout(ms)=600000) ran for 600071 milliseconds before timing out.",
        f"[rank{r}]:[E1129 14:02:{10 + r % 40:02d}.{r + 1:09d} ProcessGroupNCCL.cpp:2303] [PG ID 0 PG GUID 0(default_pg) "
        f"Rank {r}]  failure detected by watchdog at work sequence id: {seq} PG status: last enqueued work: {seq}, "
        f"last completed work: {done}",
    ]


def _child_failed(first: int, others: list[int]) -> list[str]:
    """torchrun's summary: ``first`` under "Root Cause (first observed failure)" (killed by SIGABRT, a victim)."""
    def entry(i: int, r: int) -> list[str]:
        return [f"[{i}]:", "  time      : 2026-11-29_14:02:31", f"  host      : {HOSTS[r]}",
                f"  rank      : {r} (local_rank: {r % gen.GPUS_PER_HOST})", f"  exitcode  : -6 (pid: {PIDS[r]})",
                "  error_file: <N/A>", f"  traceback : Signal 6 (SIGABRT) received by PID {PIDS[r]}"]
    out = [f"E1129 14:02:31.880000 517 torch/distributed/elastic/multiprocessing/api.py:986] failed (exitcode: -6) "
           f"local_rank: {first % gen.GPUS_PER_HOST} (pid: {PIDS[first]}) of binary: /usr/bin/python3",
           "Traceback (most recent call last):",
           '  File "/usr/local/bin/torchrun", line 8, in <module>',
           "    sys.exit(main())",
           "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
           "=" * 60, "train.py FAILED", "-" * 60, "Failures:"]
    for i, r in enumerate(others[:4], 1):
        out += entry(i, r)
    out += ["-" * 60, "Root Cause (first observed failure):"] + entry(0, first) + ["=" * 60]
    return out


def _init(r: int, rng: random.Random, complete: bool = True, version: str | None = None) -> list[str]:
    lines = gen.init_lines(r, N, HOSTS[r], PIDS[r], rng)
    if version is not None:
        lines = [s.replace("NCCL version 2.28.9+cuda13.0", f"NCCL version {version}") for s in lines]
    if not complete:
        cut = next(i for i, s in enumerate(lines) if "Init START" in s)
        lines = lines[:cut + 3]
    return lines


def _interleave(blocks: list[list[str]], rng: random.Random) -> list[str]:
    out: list[str] = []
    queues = [list(b) for b in blocks]
    while any(queues):
        q = rng.choice([q for q in queues if q])
        out.extend(q[:3])
        del q[:3]
    return out


def _write(tmp_path: Path, lines: list[str], per_rank: bool) -> Path:
    if not per_rank:
        p = tmp_path / "job.log"
        p.write_text("\n".join(lines) + "\n")
        return p
    d = tmp_path / "ranks"
    d.mkdir()
    files: dict[str, list[str]] = {}
    for s in lines:
        r = None
        if s.startswith("[rank"):
            r = int(s[5:s.index("]")])
        else:
            for i, (h, p) in enumerate(zip(HOSTS, PIDS)):
                if s.startswith(f"{h}:{p}:") or s.startswith(f"{h}:{p + 40}:"):
                    r = i
                    break
        files.setdefault("launcher.log" if r is None else f"rank{r}.log", []).append(s)
    for name, ls in files.items():
        (d / name).write_text("\n".join(ls) + "\n")
    return d


def scenario(name: str, seed: int = 1) -> tuple[list[str], str, set[int], int]:
    """(log lines, expected taxonomy id, expected culprit ranks, torchrun's first-observed victim)."""
    rng = random.Random(seed)
    victim = 0
    if name == "init_incomplete":
        # Rank 11 starts Init but never completes it; the others finish init and time out in their first collective.
        stuck = 11
        blocks = [_init(r, rng, complete=r != stuck) for r in range(N)]
        tail = [s for r in range(N) if r != stuck for s in _watchdog(r, 1, last_completed=-1)]
        return _interleave(blocks, rng) + tail + _child_failed(victim, [r for r in range(N) if r not in (victim,)]), \
            "watchdog_timeout", {stuck}, victim
    if name == "lowest_seqnum":
        # Ranks 5 and 13 are behind: their watchdog reports SeqNum 41, everyone else's 42.
        behind = {5, 13}
        blocks = [_init(r, rng) for r in range(N)]
        tail = [s for r in range(N) for s in _watchdog(r, 41 if r in behind else 42)]
        rng.shuffle(tail)  # ranks print in any order; the victims' lines come first here as often as not
        return _interleave(blocks, rng) + tail + _child_failed(victim, [r for r in range(1, N)]), \
            "watchdog_timeout", behind, victim
    if name == "two_versions":
        # Ranks 12-15 run another NCCL (a stale container on part of node 1): the job hangs in its first collective.
        blocks = [_init(r, rng, version="2.21.5+cuda12.4" if r >= 12 else None) for r in range(N)]
        tail = [s for r in range(N) for s in _watchdog(r, 1, last_completed=0)]
        return _interleave(blocks, rng) + tail + _child_failed(victim, list(range(1, N))), \
            "version_mismatch", set(range(12, 16)), victim
    if name == "different_collectives":
        # Rank 6 is in a BROADCAST while everyone else waits in ALLREDUCE, at the same SeqNum.
        odd = 6
        blocks = [_init(r, rng) for r in range(N)]
        tail = [s for r in range(N) for s in _watchdog(r, 7, "BROADCAST" if r == odd else "ALLREDUCE")]
        return _interleave(blocks, rng) + tail + _child_failed(victim, list(range(1, N))), \
            "collective_mismatch", set(range(N)), victim
    raise ValueError(name)


SCENARIOS = ["init_incomplete", "lowest_seqnum", "two_versions", "different_collectives"]


@pytest.mark.parametrize("per_rank", [False, True], ids=["combined", "per_rank"])
@pytest.mark.parametrize("name", SCENARIOS)
def test_cross_rank_verdict(tmp_path, name, per_rank):
    lines, want, culprits, victim = scenario(name)
    d = analyze([str(_write(tmp_path, lines, per_rank))])
    rc = d.root_cause
    assert rc is not None and rc.id == want, f"{name}: got {rc.id if rc else None} ({rc.rule if rc else ''})"
    if want != "collective_mismatch":
        assert set(rc.ranks) == culprits, f"{name}: blamed {rc.ranks}, want {sorted(culprits)}"
        assert victim not in rc.ranks, f"{name}: torchrun's first observed failure (rank {victim}) blamed"
    else:
        # The odd one out (rank 6, in BROADCAST) is the culprit, named with the collective it is in; the 15 ranks
        # in ALLREDUCE are the majority, not blamed.
        assert rc.ranks == (6,), f"{name}: blamed {rc.ranks}"
        assert "rank 6: BROADCAST" in rc.title and "ranks 0-5, 7-15: ALLREDUCE" in rc.title, rc.title


def test_generated_oom_blames_culprit_not_first_observed(tmp_path):
    """``benchmarks/generate_log.py`` (small): rank 11's OOM, 15 watchdog victims; the culprit is named."""
    out = tmp_path / "big.log"
    assert gen.main(["--ranks", "16", "--lines", "5000", "--culprit", "11", "-o", str(out)]) == 0
    with out.open("a") as f:
        f.write("\n".join(_child_failed(0, list(range(1, N)))) + "\n")
    d = analyze([str(out)])
    assert d.root_cause is not None and d.root_cause.id == "cuda_oom"
    assert d.root_cause.ranks == (11,)
