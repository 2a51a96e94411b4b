"""Fleet throughput: jobs/s for N jobs built from the real labeled fixtures, local pool vs a 2-worker Dask cluster.

Each job is a copy of one real case's logs (fixtures/cases/*, labels left out), cycled to N jobs. Both engines
must return identical rows; the script checks that and prints the figures.

    python benchmarks/fleet.py                 # 1,000 jobs, local pool (2 processes) and Dask (2 workers)
    python benchmarks/fleet.py --jobs 200 --engines local
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nccl_analyzer.across.fleet import run_fleet  # noqa: E402


def build(dest: Path, n: int) -> int:
    cases = sorted(p for p in (ROOT / "fixtures" / "cases").iterdir()
                   if p.is_dir() and (p / "label.json").exists() and not p.name.startswith("_"))
    lines = 0
    for i in range(n):
        src = cases[i % len(cases)]
        job = dest / f"job{i:05d}_{src.name}"
        shutil.copytree(src, job, ignore=shutil.ignore_patterns("label.json", "*.md", "*.json"))
        lines += sum(f.read_bytes().count(b"\n") for f in job.rglob("*") if f.is_file())
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--engines", default="local,dask")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="nccl-fleet-") as tmp:
        lines = build(Path(tmp), args.jobs)
        print(f"fleet: {args.jobs} jobs, {lines:,} lines, from {ROOT / 'fixtures' / 'cases'}")
        results = {}
        for engine in args.engines.split(","):
            t0 = time.perf_counter()
            res = run_fleet([tmp], engine=engine, workers=args.workers)
            dt = time.perf_counter() - t0
            results[engine] = res.rows
            failed = sum(1 for r in res.rows if r["root_cause"])
            print(f"  {engine:<6} {args.workers} workers: {dt:7.1f} s  {args.jobs / dt:6.1f} jobs/s  "
                  f"({failed} failing, {len(res.rows) - failed} clean)")
        if len(results) > 1:
            rows = list(results.values())
            same = all(r == rows[0] for r in rows[1:])
            print(f"  identical rows across engines: {same}")
            if not same:
                sys.exit(1)


if __name__ == "__main__":
    main()
