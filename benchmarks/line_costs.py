"""Where a whole run's time goes, by line class and event kind (one process, CPU time per call, no profiler).

    python benchmarks/line_costs.py /tmp/nccl-bench-real-2.28-1000r.log

Wraps, in one process (``analyze(workers=1)``), four calls with ``time.process_time_ns`` (CPU time: a busy machine's waits are not in it): ``clean_text`` as
``triage.scan`` calls it, ``EventStream.feed`` (grouped by the kind of the first event it returns, ``-`` when
none: program output, a line a parser holds (a traceback's or watchdog block's lines: the block's event is
counted under the line that closes it), a counted chatter line), ``Analyzer.add_event`` (grouped by event
kind) and the whole ``triage.scan``. What is left of ``scan`` after the three is its own loop and block pattern.
Each wrapper adds ~0.5-1 us a call (measured on an empty function and subtracted: ``overhead``), so the figures
are for comparing classes, not for exact totals. Nothing in ``nccl_analyzer`` is changed.
"""
from __future__ import annotations

import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nccl_analyzer import analysis, classify, triage  # noqa: E402

NS = time.process_time_ns


def _overhead() -> float:
    def f(x):
        return x

    def w(x):
        t = NS()
        r = f(x)
        _ = NS() - t
        return r

    n = 200_000
    t = NS()
    for i in range(n):
        f(i)
    bare = NS() - t
    t = NS()
    for i in range(n):
        w(i)
    return (NS() - t - bare) / n


def main(argv: list[str]) -> int:
    log = argv[0]
    feed_ns: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    add_ns: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    clean = [0, 0]
    scan_ns = [0]
    orig_feed = classify.EventStream.feed
    orig_add = analysis.Analyzer.add_event
    orig_clean = triage.clean_text
    orig_scan = triage.scan

    def feed(self, line):
        t = NS()
        evs = orig_feed(self, line)
        d = NS() - t
        c = feed_ns[evs[0].kind if evs else "-"]
        c[0] += 1
        c[1] += d
        return evs

    def add_event(self, ev):
        t = NS()
        orig_add(self, ev)
        d = NS() - t
        c = add_ns[ev.kind]
        c[0] += 1
        c[1] += d

    def clean_text(*a, **k):
        t = NS()
        r = orig_clean(*a, **k)
        clean[1] += NS() - t
        clean[0] += 1
        return r

    def scan(*a, **k):
        t = NS()
        r = orig_scan(*a, **k)
        scan_ns[0] += NS() - t
        return r

    classify.EventStream.feed = feed
    analysis.Analyzer.add_event = add_event
    triage.clean_text = clean_text
    triage.scan = scan
    over = _overhead()
    t0, c0 = time.perf_counter(), time.process_time()
    analysis.analyze([log], workers=1)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0

    def net(n: int, ns: int) -> float:
        return max(0.0, ns - n * over) / 1e9

    n_feed = sum(c[0] for c in feed_ns.values())
    n_add = sum(c[0] for c in add_ns.values())
    t_feed = sum(net(*c) for c in feed_ns.values())
    # add_event runs inside feed's callers (emit) and in the final flush: part of scan, part after it
    t_add = sum(net(*c) for c in add_ns.values())
    t_clean = net(*clean)
    print(f"log {log}: wall {wall:.2f} s, process CPU {cpu:.2f} s (wrappers included; overhead {over:.0f} ns a "
          f"call subtracted below)")
    print(f"scan (whole) {scan_ns[0] / 1e9:.2f} s; clean_text {clean[0]:,} calls {t_clean:.2f} s; EventStream.feed "
          f"{n_feed:,} lines {t_feed:.2f} s; add_event {n_add:,} events {t_add:.2f} s")
    print(f"scan's own loop and block pattern (scan - clean - feed - add_event in scan): at most "
          f"{scan_ns[0] / 1e9 - t_clean - t_feed - t_add:.2f} s (add_event of the final flush counted in it: less)")
    print("\nEventStream.feed by the first event's kind (- : none)")
    print(f"{'kind':<34} {'lines':>9} {'s':>7} {'us/line':>8}")
    for k, (n, ns) in sorted(feed_ns.items(), key=lambda kv: -kv[1][1])[:25]:
        print(f"{k:<34} {n:>9,} {net(n, ns):>7.3f} {net(n, ns) / n * 1e6:>8.1f}")
    print("\nadd_event by kind")
    print(f"{'kind':<34} {'events':>9} {'s':>7} {'us/event':>8}")
    for k, (n, ns) in sorted(add_ns.items(), key=lambda kv: -kv[1][1])[:25]:
        print(f"{k:<34} {n:>9,} {net(n, ns):>7.3f} {net(n, ns) / n * 1e6:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
