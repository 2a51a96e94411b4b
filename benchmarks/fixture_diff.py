"""Compare two folders written by fixture_json.py: every key but ``stats`` (event counts change when the fast
path counts lines instead of building events) must be equal; prints the cases that differ.

    python benchmarks/fixture_diff.py /tmp/before /tmp/after
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    a, b = Path(argv[0]), Path(argv[1])
    bad = 0
    names = sorted({p.name for p in a.glob("*.json")} | {p.name for p in b.glob("*.json")})
    for name in names:
        pa, pb = a / name, b / name
        if not pa.exists() or not pb.exists():
            print(f"{name}: only in one folder")
            bad += 1
            continue
        try:
            da, db = json.loads(pa.read_text()), json.loads(pb.read_text())
        except ValueError:
            if pa.read_text() != pb.read_text():
                print(f"{name}: differs (not JSON)")
                bad += 1
            continue
        da.pop("stats", None)
        db.pop("stats", None)
        if da != db:
            keys = [k for k in sorted(set(da) | set(db)) if da.get(k) != db.get(k)]
            print(f"{name}: differs in {keys}")
            bad += 1
    print(f"{len(names)} cases, {bad} differ (stats ignored)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
