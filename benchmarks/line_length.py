"""Time per byte must not grow with line length: the same bytes as 6k-character and as 60k-character lines.

For a few line kinds (NCCL ring-order line, NCCL WARN, torch error text, plain text), writes N lines of
length L and N/10 lines of length 10*L, runs the full analysis on each in a fresh process, and prints the
CPU seconds and the ratio (1.0 = linear in input size; the bug this guards against gave 28x).

    python benchmarks/line_length.py
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

KINDS = {
    "nccl ring order": lambda n: "vm:467:467 [0] NCCL INFO Channel 00/64 : " + " ".join(str(i % 1000) for i in range(n)),
    "nccl warn": lambda n: "vm:467:467 [0] misc/socket.cc:50 NCCL WARN socket error " + "x" * n,
    "torch error": lambda n: "[rank0]: RuntimeError: CUDA error: an illegal memory access " + "y " * (n // 2),
    "plain text": lambda n: "step 1 loss " + "z" * n,
}


def cpu_of(path: str) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "nccl_analyzer", path, "--format", "json"], cwd=ROOT,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> int:
    short, total = 6000, 12_000_000  # 2,000 lines of 6k characters vs 200 lines of 60k
    base = cpu_of(str(ROOT / "fixtures" / "h200-nccl-2.28.9" / "02_bad_ifname" / "log.txt"))
    print(f"start-up (a small log): {base:.2f} s CPU")
    print(f"{'line kind':<18} {'6k lines s':>11} {'60k lines s':>12} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in KINDS.items():
            out = []
            for length in (short, short * 10):
                p = os.path.join(tmp, f"{length}.log")
                line = make(length)[:length]
                with open(p, "w") as f:
                    for _ in range(total // length):
                        f.write(line + "\n")
                out.append(max(0.0, cpu_of(p) - base))
            ratio = out[1] / out[0] if out[0] > 0.01 else float("nan")
            print(f"{name:<18} {out[0]:>11.2f} {out[1]:>12.2f} {ratio:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
