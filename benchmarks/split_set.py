"""Split a freshly collected labeled set into a development half and a held-out half (issue 9).

Before anyone scores or reads the cases, a seeded random half, stratified by label (root_cause, null for healthy),
is moved (git mv) from fixtures/<set>/ to fixtures/<set>h/, with a check_exclusions.py for the new folder. Within
each label the cases are shuffled by ``random.Random(seed)`` (labels in sorted order); an odd label's extra case goes
alternately to the held-out and the development half, so both halves get about half of every class.

    python benchmarks/split_set.py blind10 --seed 20261209 [--dry-run]
"""
from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHECK = '''"""Check that no thread of fixtures/{name}/ is already used anywhere else in the project (issue 9).

    python fixtures/{name}/check_exclusions.py [project_root]
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from exclusions import main  # noqa: E402  (the shared check: benchmarks/exclusions.py)

if __name__ == "__main__":
    sys.exit(main("{name}", sys.argv[1:]))
'''


def plan(folder: Path, seed: int) -> list[str]:
    """The case names that go to the held-out half."""
    by_label: dict[str, list[str]] = defaultdict(list)
    for lab in sorted(folder.glob("*/label.json")):
        by_label[str(json.loads(lab.read_text())["root_cause"])].append(lab.parent.name)
    rng, held, odd_to_held = random.Random(seed), [], True
    for label in sorted(by_label):
        names = sorted(by_label[label])
        rng.shuffle(names)
        k = len(names) // 2
        if len(names) % 2:
            k += odd_to_held
            odd_to_held = not odd_to_held
        held += names[:k]
    return sorted(held)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("set")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    src, dst = ROOT / "fixtures" / a.set, ROOT / "fixtures" / (a.set + "h")
    if not src.is_dir() or dst.exists():
        print(f"need fixtures/{a.set}/ and no fixtures/{a.set}h/ yet", file=sys.stderr)
        return 2
    held = plan(src, a.seed)
    for name in held:
        print(f"held out: {name}")
    print(f"{len(held)} of {len(list(src.glob('*/label.json')))} cases to fixtures/{dst.name}/ (seed {a.seed})")
    if a.dry_run:
        return 0
    dst.mkdir()
    for name in held:
        subprocess.run(["git", "mv", str(src / name), str(dst / name)], cwd=ROOT, check=True)
    (dst / "check_exclusions.py").write_text(CHECK.format(name=dst.name))
    subprocess.run(["git", "add", str(dst / "check_exclusions.py")], cwd=ROOT, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
