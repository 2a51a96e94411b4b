"""nccl-analyze and nccl-doctor (github.com/nshinde/nccl-doctor, the nearest peer) on the same log, one run.

nccl-doctor is not vendored: pass a checkout of it. It reads a job folder (``logs/<host>.<pid>.log``), so the
log is linked into one. Each tool runs in a fresh process (CPU seconds, wall seconds, peak RSS), and each one's
verdict is printed.

    git clone https://github.com/nshinde/nccl-doctor /tmp/nccl-doctor
    python benchmarks/vs_nccl_doctor.py /tmp/nccl-bench-real-2.28-1000r.log --nccl-doctor /tmp/nccl-doctor
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import ROOT, measure, verdict  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log")
    ap.add_argument("--nccl-doctor", required=True, help="a checkout of nccl-doctor")
    args = ap.parse_args(argv)
    with open(args.log, "rb") as f:
        lines = sum(b.count(b"\n") for b in iter(lambda: f.read(1 << 24), b""))
    py = sys.executable
    with tempfile.TemporaryDirectory() as job:
        os.makedirs(os.path.join(job, "logs"))
        os.symlink(os.path.abspath(args.log), os.path.join(job, "logs", "node.1.log"))
        # the job.json its own `run` wrapper writes (no Slurm, fabric unknown)
        with open(os.path.join(job, "job.json"), "w") as f:
            json.dump({"job_id": "bench", "outcome": "failed", "nodes": [], "world_size": 0, "fabric": None,
                       "cluster": "default", "timestamp": 0}, f)
        ours = measure("nccl-analyze", [py, "-m", "nccl_analyzer", args.log, "--format", "json"], lines, keep=True)
        env_py = f"import sys; sys.path.insert(0, {str(Path(args.nccl_doctor).resolve())!r}); " \
                 "from nccl_doctor.cli import main; sys.exit(main())"
        theirs = measure("nccl-doctor", [py, "-c", env_py, "analyze", job, "--json", "--no-store"], lines, keep=True)
    print(f"input: {args.log}: {lines:,} lines")
    print(f"{'tool':<14} {'seconds':>8} {'cpu s':>7} {'lines/s':>10} {'peak RSS MiB':>13}  verdict")
    ours_v = verdict(ours.pop("stdout"))
    out = theirs.pop("stdout")
    try:
        ea = json.loads(out).get("error_analysis") or {}
        findings = ea.get("findings") or []
        top = findings[0] if findings else {}
        theirs_v = f"{ea.get('verdict')}; first finding {top.get('rule')}: {str(top.get('summary'))[:70]} " \
                   f"({len(findings)} findings)"
    except ValueError:
        theirs_v = out.decode(errors="replace").strip()[:200]
    for r, v in ((ours, ours_v), (theirs, theirs_v)):
        print(f"{r['name']:<14} {r['seconds']:>8.2f} {r['cpu_seconds']:>7.2f} {r['lines_per_s']:>10,} "
              f"{r['peak_rss_mib']:>13.0f}  {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
