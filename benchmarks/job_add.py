"""CPU time of the job model alone (``JobBuilder.add``) over the events of one log, to compare commits.

    python benchmarks/job_add.py /tmp/nccl-bench-real-2.28-1000r.log --save /tmp/events.pkl  # once
    python benchmarks/job_add.py --events /tmp/events.pkl --repeat 5          # on each commit, alternating

The events are those ``Analyzer.add_event`` saw in a one-process ``analyze`` (the job model's real input); each
repeat feeds all of them to a fresh ``JobBuilder`` (garbage collection off while timed) and prints the CPU seconds.
Fed alone, the stage tracker packs events the rule engine's packed copy would share in a real run.
"""
from __future__ import annotations

import argparse
import gc
import pickle
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nccl_analyzer import analysis  # noqa: E402
from nccl_analyzer.job import JobBuilder  # noqa: E402


def capture(log: str) -> list:
    seen: list = []
    orig = analysis.Analyzer.add_event

    def rec(self, ev):
        seen.append(ev)
        return orig(self, ev)

    analysis.Analyzer.add_event = rec
    try:
        analysis.analyze([log], workers=1)
    finally:
        analysis.Analyzer.add_event = orig
    return seen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("log", nargs="?")
    ap.add_argument("--events", help="a pickle written by --save (instead of a log)")
    ap.add_argument("--save", help="write the captured events here")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if args.events:
        with open(args.events, "rb") as f:
            events = pickle.load(f)
    elif args.log:
        events = capture(args.log)
    else:
        ap.error("a log or --events")
    if args.save:
        with open(args.save, "wb") as f:
            pickle.dump(events, f, protocol=5)
    runs = []
    for _ in range(args.repeat):
        b = JobBuilder()
        gc.disable()
        t = time.process_time()
        for ev in events:
            b.add(ev)
        runs.append(time.process_time() - t)
        gc.enable()
    print(f"{ROOT}: JobBuilder.add over {len(events)} events: least {min(runs):.3f} s "
          f"(runs {' '.join(f'{r:.3f}' for r in runs)})")


if __name__ == "__main__":
    main()
