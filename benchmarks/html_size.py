"""HTML report size and render time for huge inputs (caps must keep it small).

    python benchmarks/html_size.py                 # synthetic worst case: 4096 ranks, 100k events, long lines
    python benchmarks/html_size.py --lines 10000000  # also analyze a generated log of that many lines
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nccl_analyzer.model import (  # noqa: E402
    Diagnosis, Event, Evidence, Finding, Fix, InputInfo, JobModel, RankInfo, RootCause,
)
from nccl_analyzer.render import render  # noqa: E402

FIXTURE = ROOT / "fixtures" / "h200-nccl-2.28.9" / "04_duplicate_gpu" / "log.txt"


def synthetic(ranks: int = 4096, events: int = 100_000, line_len: int = 60_000) -> Diagnosis:
    long = "x" * line_len
    ev = [Evidence(path="big.log", line=i * 1000 + 1, text=f"node-{i}:1:1 [0] NCCL WARN {long}") for i in range(200)]
    rc = RootCause(id="network_connect", title="t", confidence=0.9, ranks=tuple(range(ranks)), hosts=("node-0",),
                   evidence=tuple(ev), explanation="e" * 10_000, fix=Fix(summary="s", env={"A": "1"}))
    findings = [Finding(rule=f"r{i}", id="watchdog_timeout", role="cascade", title=f"f{i}", ranks=(i,),
                        evidence=tuple(ev[:20])) for i in range(2000)]
    job = JobModel(ranks={r: RankInfo(rank=r, host=f"node-{r // 8}", pid=r, first_error=ev[0],
                                      timeline=[{"kind": "nccl.init.start", "line": k, "what": long[:200]}
                                                for k in range(200)]) for r in range(ranks)},
                   env={f"NCCL_VAR_{i}": long[:500] for i in range(2000)},
                   topology={"channels": [long[:300]] * 5000})
    sample = [Event(kind=f"k{i % 50}", path="big.log", line=i, text=long[:5000], host="node-1", rank=i % ranks)
              for i in range(events)]
    return Diagnosis(inputs=[InputInfo(path="big.log", lines=10_000_000)], root_cause=rc, findings=findings,
                     job=job, cascade=findings, stats={"lines": 10_000_000, "kinds": {f"k{i}": i for i in range(5000)}},
                     events_sample=sample)


def generated(lines: int) -> Diagnosis:
    from nccl_analyzer.analysis import analyze

    body = FIXTURE.read_text(encoding="utf-8").splitlines(keepends=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.log"
        with open(path, "w", encoding="utf-8") as fh:
            n = 0
            while n < lines:
                chunk = body[: min(len(body), lines - n)]
                fh.writelines(chunk)
                n += len(chunk)
        t0 = time.perf_counter()
        d = analyze([str(path)])
        print(f"analyze: {lines} lines in {time.perf_counter() - t0:.1f} s")
        return dataclasses.replace(d)


def measure(name: str, d: Diagnosis) -> None:
    t0 = time.perf_counter()
    html = render(d, "html")
    print(f"{name}: html {len(html.encode()) / 1e6:.2f} MB in {time.perf_counter() - t0:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=0, help="also analyze a generated log of this many lines")
    args = ap.parse_args()
    measure("synthetic worst case", synthetic())
    if args.lines:
        measure(f"generated {args.lines}-line log", generated(args.lines))


if __name__ == "__main__":
    main()
