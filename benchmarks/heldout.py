"""Score the analyzer on held-out labeled sets (fixtures/blind, fixtures/blind_h200): the figures issue 9 asks for.

For each set: right root cause, failing logs answered "no failure", failing logs given another cause, false
alarms on healthy logs, and culprit ranks where the label names them. In-process, one analysis per case.

    python benchmarks/heldout.py                       # both held-out sets
    python benchmarks/heldout.py fixtures/blind -v     # one set, a line per case
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nccl_analyzer.analysis import analyze  # noqa: E402
from nccl_analyzer.errors import AnalyzerError  # noqa: E402


def score(folder: Path, verbose: bool = False) -> dict[str, int]:
    c = dict(cases=0, right=0, failing=0, no_failure=0, wrong=0, healthy=0, false_alarm=0, ranks=0, ranks_right=0)
    for case in sorted(p.parent for p in folder.glob("*/label.json")):
        label = json.loads((case / "label.json").read_text())
        want = label["root_cause"]
        try:
            d = analyze([str(case)], workers=1)
            rc = d.root_cause
            got, ranks = (rc.id, sorted(rc.ranks)) if rc else (None, [])
        except AnalyzerError as exc:
            got, ranks = f"<error: {exc}>", []
        c["cases"] += 1
        c["right"] += got == want
        if want is None:
            c["healthy"] += 1
            c["false_alarm"] += got is not None
        else:
            c["failing"] += 1
            c["no_failure"] += got is None
            c["wrong"] += got is not None and got != want
        if label.get("ranks") is not None:  # "ranks": null is a label that names no culprit
            c["ranks"] += 1
            c["ranks_right"] += got == want and ranks == sorted(label["ranks"])
        if verbose:
            rk = ""
            if label.get("ranks") is not None:
                ok = got == want and ranks == sorted(label["ranks"])
                rk = f"  ranks {'ok ' if ok else 'BAD'} want {sorted(label['ranks'])} got {ranks}"
            print(f"  {'ok ' if got == want else 'BAD'} {case.name:<48} want {want!s:<22} got {got}{rk}")
    return c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sets", nargs="*", type=Path,
                    default=[ROOT / "fixtures" / "blind", ROOT / "fixtures" / "blind_h200"])
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    for folder in args.sets:
        c = score(folder, args.verbose)
        print(f"{folder.name}: {c['right']}/{c['cases']} right ({100 * c['right'] / max(1, c['cases']):.1f}%); "
              f"failing {c['failing']}: {c['no_failure']} answered 'no failure', {c['wrong']} another cause; "
              f"healthy {c['healthy']}: {c['false_alarm']} false alarm(s); culprit ranks {c['ranks_right']}/{c['ranks']}")


if __name__ == "__main__":
    main()
