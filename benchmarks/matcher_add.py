"""CPU time of the rule engine alone (``Matcher.add``) over the events of one log, to compare commits.

    python benchmarks/job_add.py /tmp/nccl-bench-real-2.28-1000r.log --save /tmp/events.pkl  # once
    python benchmarks/matcher_add.py --events /tmp/events.pkl --repeat 5      # on each commit, alternating

Each repeat feeds every event to a fresh ``Matcher`` of the default rules (garbage collection off while timed) and
prints the CPU seconds, and the matches each rule's slots counted (they must be the same on both commits).
"""
from __future__ import annotations

import argparse
import gc
import hashlib
import pickle
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nccl_analyzer.engine.loader import load_rules  # noqa: E402
from nccl_analyzer.engine.run import Matcher  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", required=True, help="a pickle written by job_add.py --save")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with open(args.events, "rb") as f:
        events = pickle.load(f)
    rules = load_rules(())
    runs = []
    digest = ""
    for _ in range(args.repeat):
        m = Matcher(rules)
        gc.disable()
        t = time.process_time()
        for ev in events:
            m.add(ev)
        runs.append(time.process_time() - t)
        gc.enable()
        counts = [(st.rule.id, [sl.count for sl in st.slots]) for st in m._states]
        digest = hashlib.sha256(repr(counts).encode()).hexdigest()[:12]
    print(f"{ROOT}: Matcher.add over {len(events)} events: least {min(runs):.3f} s "
          f"(runs {' '.join(f'{r:.3f}' for r in runs)}); slot match counts {digest}")


if __name__ == "__main__":
    main()
