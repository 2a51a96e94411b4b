"""How long `nccl-analyze --help` takes (it must start in well under half a second): median of N runs."""
from __future__ import annotations

import statistics
import subprocess
import sys
import time


def main(n: int = 15) -> int:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "nccl_analyzer", "--help"], stdout=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - t0)
    print(f"nccl-analyze --help: median {statistics.median(times) * 1000:.0f} ms, "
          f"max {max(times) * 1000:.0f} ms over {n} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
