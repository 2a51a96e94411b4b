"""Throughput and memory: `events` export and full analysis vs `grep -c NCCL` and a one-regex Python pass.

Each measurement runs in its own process; peak RSS is that process's ru_maxrss.

    python benchmarks/bench.py                      # generates 1,000 ranks / 2M lines into /tmp
    python benchmarks/bench.py --lines 4000000      # memory must stay flat as the input grows
    python benchmarks/bench.py --log my.log --skip-generate
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

REGEX_PASS = r"""
import re, sys
rx = re.compile(r'^(?:\[[^\]]*\] )?([\w.-]+):(\d+):(\d+) \[(\d+)\] (?:[\w./-]+:\d+ )?NCCL (INFO|WARN) (.*)')
n = m = 0
with open(sys.argv[1], 'rb') as f:
    for b in f:
        n += 1
        if rx.match(b.decode('utf-8', 'replace')):
            m += 1
print(n, m)
"""


# A fresh wrapper process per measurement: its RUSAGE_CHILDREN peak is exactly the measured command's.
WRAPPER = r"""
import resource, subprocess, sys, time
t0 = time.perf_counter()
rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode
print(time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, rc)
"""


def measure(name: str, argv: list[str], lines: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", WRAPPER, *argv], capture_output=True, text=True, cwd=ROOT)
    wall_s, rss_kib, rc = proc.stdout.split()
    if int(rc) not in (0, 1):
        raise SystemExit(f"{name} failed ({rc}): {proc.stderr[-2000:]}")
    wall = float(wall_s)
    return {"name": name, "seconds": round(wall, 2), "lines_per_s": int(lines / wall),
            "peak_rss_mib": round(int(rss_kib) / 1024, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=1000)
    ap.add_argument("--lines", type=int, default=2_000_000)
    ap.add_argument("--log", default=None)
    ap.add_argument("--skip-generate", action="store_true")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args(argv)
    log = args.log or f"/tmp/nccl-bench-{args.ranks}r-{args.lines}.log"
    if not (args.skip_generate and os.path.exists(log)):
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "generate_log.py"), "--ranks", str(args.ranks),
                        "--lines", str(args.lines), "-o", log], check=True)
    with open(log, "rb") as f:
        lines = sum(1 for _ in f)
    size = os.path.getsize(log)
    py = sys.executable
    results = [
        measure("nccl-analyze (full analysis)", [py, "-m", "nccl_analyzer", log, "--format", "json"], lines),
        measure("nccl-analyze events --no-text", [py, "-m", "nccl_analyzer", "events", log, "--no-text"], lines),
        measure("grep -c NCCL", ["grep", "-c", "NCCL", log], lines),
        measure("python one-regex pass", [py, "-c", REGEX_PASS, log], lines),
    ]
    regex = next(r for r in results if r["name"] == "python one-regex pass")
    for r in results:
        r["vs_regex"] = round(r["lines_per_s"] / regex["lines_per_s"], 2)
    if args.json:
        print(json.dumps({"log": log, "lines": lines, "bytes": size, "results": results}, indent=2))
        return 0
    print(f"input: {log}: {lines:,} lines, {size / 2**20:.0f} MiB, {args.ranks} ranks; cpus: {os.cpu_count()}")
    print(f"{'run':<34} {'seconds':>8} {'lines/s':>12} {'x regex':>8} {'peak RSS MiB':>13}")
    for r in results:
        print(f"{r['name']:<34} {r['seconds']:>8.2f} {r['lines_per_s']:>12,} {r['vs_regex']:>8.2f} "
              f"{r['peak_rss_mib']:>13.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
