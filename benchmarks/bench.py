"""Throughput and memory of the full analysis on logs built from real captured lines (benchmarks/real_log.py).

For each size, in this order and each in a fresh process (peak RSS = that process tree's ru_maxrss):

- ``python one-regex pass``: one compiled NCCL-prefix regex matched against every line (the yardstick),
- ``nccl-analyze --format json``: the full analysis, verdict included,
- ``grep -c NCCL`` for scale;

and the verdict the analysis gave (root cause id and ranks) next to the culprit the generator planted.

    python benchmarks/bench.py                         # 1,000 and 3,000 ranks
    python benchmarks/bench.py --ranks 1000 3000 10000
    python benchmarks/bench.py --log my.log            # any log (no expected verdict)
    python benchmarks/bench.py --generator synthetic   # the older benchmarks/generate_log.py logs
    python benchmarks/bench.py --repeat 3              # each command 3 times, alternating: the least CPU counts

``cpu_vs_regex`` is the regex pass's CPU seconds over the command's (same run); ``load`` the 1-minute load average
before and after the size's runs. On a shared machine one command's CPU time varies by 15-25% from run to run;
``--repeat`` keeps every run's CPU seconds (``cpu_runs``) and reports the least.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
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

# A fresh wrapper process per measurement: its RUSAGE_CHILDREN peak is exactly the measured command's tree
# (the analysis's worker processes included: ru_maxrss of the children is the largest one's).
WRAPPER = r"""
import resource, subprocess, sys, time
t0 = time.perf_counter()
p = subprocess.run(sys.argv[2:], stdout=subprocess.PIPE if sys.argv[1] == "keep" else subprocess.DEVNULL)
wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
sys.stderr.write(repr((wall, ru.ru_maxrss, ru.ru_utime + ru.ru_stime, p.returncode)) + "\n")
if p.stdout:
    sys.stdout.buffer.write(p.stdout)
"""


def measure(name: str, argv: list[str], lines: int, keep: bool = False) -> dict:
    proc = subprocess.run([sys.executable, "-c", WRAPPER, "keep" if keep else "drop", *argv], capture_output=True,
                          cwd=ROOT)
    last = proc.stderr.decode(errors="replace").strip().splitlines()[-1]
    wall, rss_kib, cpu, rc = eval(last)  # noqa: S307 - our own wrapper's repr of a tuple of numbers
    if rc not in (0, 1):
        raise SystemExit(f"{name} failed ({rc}): {proc.stderr[-2000:]!r}")
    out = {"name": name, "seconds": round(wall, 2), "cpu_seconds": round(cpu, 2), "lines_per_s": int(lines / wall),
           "peak_rss_mib": round(rss_kib / 1024, 1)}
    if keep:
        out["stdout"] = proc.stdout
    return out


def verdict(json_bytes: bytes) -> str:
    d = json.loads(json_bytes)
    rc = d.get("root_cause")
    if not rc:
        return "no root cause"
    ranks = rc.get("ranks") or []
    return f"{rc['id']} ranks {ranks[:4]}{'...' if len(ranks) > 4 else ''}"


def bench_one(log: str, expected: str | None, repeat: int = 1) -> dict:
    with open(log, "rb") as f:
        lines = sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 24), b""))
    size = os.path.getsize(log)
    py = sys.executable
    analyze = [py, "-m", "nccl_analyzer", log, "--format", "json"]
    load = [round(os.getloadavg()[0], 2)]
    rounds = []
    for _ in range(max(1, repeat)):  # alternating, so that a busy minute weighs on both
        rounds.append([
            measure("python one-regex pass", [py, "-c", REGEX_PASS, log], lines),
            measure("nccl-analyze (full analysis)", analyze, lines, keep=True),
            measure("grep -c NCCL", ["grep", "-c", "NCCL", log], lines),
        ])
    load.append(round(os.getloadavg()[0], 2))
    results = []
    for i in range(3):
        runs = [r[i] for r in rounds]
        best = min(runs, key=lambda r: r["cpu_seconds"])
        if len(runs) > 1:
            best["cpu_runs"] = [r["cpu_seconds"] for r in runs]
        results.append(best)
    regex = results[0]
    for r in results:
        r["vs_regex"] = round(r["lines_per_s"] / regex["lines_per_s"], 2)
        r["cpu_vs_regex"] = round(regex["cpu_seconds"] / max(r["cpu_seconds"], 0.01), 3)
    got = verdict(results[1]["stdout"])
    for r in rounds:
        r[1].pop("stdout", None)
    return {"log": log, "lines": lines, "bytes": size, "expected": expected, "verdict": got, "load": load,
            "results": results}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[1000, 3000])
    ap.add_argument("--generator", choices=("real", "synthetic"), default="real")
    ap.add_argument("--flavor", choices=("2.28", "2.21"), default="2.28", help="real_log.py --flavor")
    ap.add_argument("--log", default=None, help="benchmark this log instead of generating one")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--repeat", type=int, default=1, help="run each command this many times (the least CPU counts)")
    args = ap.parse_args(argv)
    runs = []
    if args.log:
        runs.append(bench_one(args.log, None, args.repeat))
    for n in ([] if args.log else args.ranks):
        log = f"/tmp/nccl-bench-{args.generator}-{args.flavor}-{n}r.log"
        culprit = n // 2 + 3
        if not os.path.exists(log):
            gen = "real_log.py" if args.generator == "real" else "generate_log.py"
            extra = ["--flavor", args.flavor, "--steps", str(max(60, 240_000 // n * 2))] \
                if args.generator == "real" else ["--lines", str(2000 * n)]
            subprocess.run([sys.executable, str(ROOT / "benchmarks" / gen), "--ranks", str(n), *extra, "-o", log],
                           check=True)
        runs.append(bench_one(log, f"cuda_oom ranks [{culprit}]", args.repeat))
    if args.json:
        print(json.dumps(runs, indent=2))
        return 0
    print(f"cpus: {os.cpu_count()}, python {sys.version.split()[0]}")
    for run in runs:
        print(f"\ninput: {run['log']}: {run['lines']:,} lines, {run['bytes'] / 2**20:.0f} MiB")
        print(f"{'run':<30} {'seconds':>8} {'cpu s':>7} {'lines/s':>11} {'x regex':>8} {'x regex cpu':>12} "
              f"{'peak RSS MiB':>13}")
        for r in run["results"]:
            print(f"{r['name']:<30} {r['seconds']:>8.2f} {r['cpu_seconds']:>7.2f} {r['lines_per_s']:>11,} "
                  f"{r['vs_regex']:>8.2f} {r['cpu_vs_regex']:>12.3f} {r['peak_rss_mib']:>13.0f}")
        print(f"load average: {run['load'][0]} -> {run['load'][1]}")
        print(f"verdict: {run['verdict']}" + (f"   (planted: {run['expected']})" if run["expected"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
