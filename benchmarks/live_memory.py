"""Memory of pipe mode on a days-long job: feed N generated lines to `nccl-analyze - -q`, sample its RSS.

    python benchmarks/live_memory.py [LINES=2000000] [SAMPLES=8] [--mix=default|coll|no-coll]

The lines mix what a long NCCL job prints: training progress (every line different), NCCL init lines
repeated by 8 ranks, NCCL_DEBUG_SUBSYS=COLL call lines (every one different: opCount, buffers), the odd
torch warning, and a new communicator now and then. The analyzer keeps no lines, so RSS must level off:
the output lists (lines fed, RSS KiB) and the growth over the second half of the run.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def generate(n: int, mix: str = "default"):
    """Yield ``n`` log lines (bytes, newline included), deterministic.

    ``mix``: "default" (13% unique NCCL COLL lines), "coll" (nearly all lines unique COLL lines, the
    worst case for the parsers' caches), "no-coll" (none).
    """
    ranks = 8
    for i in range(n):
        r = i % ranks
        pid = 4100 + r
        k = i % 100
        if mix == "coll" and 1 <= k < 98:
            k = 90
        elif mix == "no-coll" and 85 <= k < 98:
            k = 0
        node, dev = f"node-{r // 4}:{pid}:{pid}", f"[{r % 4}]"
        comm = f"0x{0x55d3a000 + i // 100000:x}"
        if k < 70:
            loss = ((i * 7919) % 10007) / 10007
            line = f"[rank{r}]: step {i // ranks} loss {loss:.5f} lr 3.0e-04 tok/s {50000 + i % 977}"
        elif k < 85:
            line = f"{node} {dev} NCCL INFO Channel {k % 16:02d}/16 : {r} {(r + 1) % ranks}"
        elif k < 98:
            buf = f"0x7f{i * 4096:010x}"
            line = (f"{node} {dev} NCCL INFO AllReduce: opCount {i:x} sendbuff {buf} recvbuff {buf} count 1048576 "
                    f"datatype 7 op 0 root 0 comm {comm} [nranks={ranks}] stream 0x{0x6a000 + r:x}")
        elif k == 98:
            stamp = f"{(i // 60000) % 60:02d}:{(i // 1000) % 60:02d}.{i % 1000:03d}000"
            line = (f"[rank{r}]:W1129 14:{stamp} {pid} torch/distributed/c10d_logger.py:83] "
                    f"slow step {i} took {i % 97} ms")
        else:
            line = (f"{node} {dev} NCCL INFO comm {comm} rank {r} nRanks {ranks} nNodes 2 localRanks 4 "
                    f"localRank {r % 4} MNNVL 0 - Init COMPLETE")
        yield (line + "\n").encode()


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def measure(lines: int = 2_000_000, samples: int = 8, mix: str = "default") -> list[tuple[int, int]]:
    """Run the analyzer on ``lines`` generated lines; return [(lines fed, RSS KiB)] at ``samples`` points.

    The pipe holds at most 64 KiB, so when N lines are written the analyzer has read all but a few hundred.
    """
    if not os.path.exists("/proc/self/status"):
        raise RuntimeError("needs Linux /proc")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "nccl_analyzer", "-", "-q"], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    assert proc.stdin is not None
    every = max(1, lines // samples)
    out: list[tuple[int, int]] = []
    batch: list[bytes] = []
    try:
        for i, line in enumerate(generate(lines, mix), 1):
            batch.append(line)
            if len(batch) >= 512:
                proc.stdin.write(b"".join(batch))
                batch.clear()
            if i % every == 0:
                proc.stdin.write(b"".join(batch))
                batch.clear()
                proc.stdin.flush()
                time.sleep(0.05)
                out.append((i, _rss_kib(proc.pid)))
        proc.stdin.write(b"".join(batch))
    finally:
        proc.stdin.close()
        proc.wait()
    return out


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    lines = int(args[0]) if args else 2_000_000
    samples = int(args[1]) if len(args) > 1 else 8
    t0 = time.perf_counter()
    mix = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--mix=")), "default")
    res = measure(lines, samples, mix)
    dt = time.perf_counter() - t0
    for n, rss in res:
        print(f"{n:>10,} lines  RSS {rss / 1024:8.1f} MiB")
    half = res[len(res) // 2 - 1] if len(res) > 1 else res[0]
    print(f"{lines:,} lines in {dt:.1f} s ({lines / dt:,.0f} lines/s); RSS growth over the second half: "
          f"{(res[-1][1] - half[1]) / 1024:+.1f} MiB")


if __name__ == "__main__":
    main()
