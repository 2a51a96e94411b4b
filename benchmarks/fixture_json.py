"""Dump the JSON diagnosis (and the events export) of every labeled fixture case into a folder, to diff
before/after a change that must not alter results (speed work: same verdict, evidence, line numbers).

    python benchmarks/fixture_json.py /tmp/before      # on the old commit
    python benchmarks/fixture_json.py /tmp/after       # on the new one
    diff -r /tmp/before /tmp/after

No held-out set (fixtures/blind*) is read.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nccl_analyzer.analysis import analyze  # noqa: E402
from nccl_analyzer.render import render  # noqa: E402


def cases(root: Path) -> list[Path]:
    out = []
    for label in sorted(root.rglob("label.json")):
        if any(part.startswith("blind") for part in label.relative_to(root).parts):
            continue  # held-out sets (blind, blind_h200, blind2, ...) are never read
        out.append(label.parent)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    n = 0
    for case in cases(ROOT / "fixtures"):
        rel = case.relative_to(ROOT)
        name = str(rel).replace("/", "__")
        try:
            d = analyze([str(rel)], workers=args.workers)
            text = render(d, "json")
        except Exception as exc:  # noqa: BLE001 - recorded, compared like any output
            text = f"ERROR {type(exc).__name__}: {exc}\n"
        (out / f"{name}.json").write_text(text)
        n += 1
    print(f"{n} cases -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
