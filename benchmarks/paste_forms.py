"""The paste-forms matrix (issue 9 §2): each error text of tests/paste_forms.py in each form a paste gives it, read
through the real input layer; a form's verdict should be the canonical form's.

    python benchmarks/paste_forms.py                      # seeded sample of 6 cells per text, the matrix
    python benchmarks/paste_forms.py --per-text 0 --json /tmp/m.json   # every cell (~140k analyses: hours)
    python benchmarks/paste_forms.py --compare /tmp/before.json        # what moved since a saved run

Rows: text families; columns: forms; a cell ``held/changed/no failure`` counts the sampled (text, base, context)
of that family and form. Only texts whose canonical form is error-level (a root cause, or a dismissed line) count.
A ``prose`` cell whose sentence quotes no whole log line may be null as well (tests/paste_forms.py ``lenient``); a
bare ``NCCL WARN`` text that several source files print with different meanings is counted apart (``needs_file``).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "tests"))

from nccl_analyzer.engine.loader import load_rules  # noqa: E402
import paste_forms as pf  # noqa: E402


def run(per_text: int, seed: int, families: set[str] | None = None, progress: bool = False) -> dict:
    rules = load_rules()
    texts = [t for t in pf.all_texts() if not families or t.family in families]
    canon = {}
    skipped = Counter()
    for t in texts:
        canon[(t.family, t.name)] = pf.verdict(pf.render(t, "canonical", "plain", "alone"), rules)
    rows = []
    cells = pf.sample(texts, per_text, seed) if per_text else [(t, c) for t in texts for c in pf.cells(t)]
    t0 = time.time()
    for i, (t, (base, form, ctx)) in enumerate(cells):
        c = canon[(t.family, t.name)]
        if not pf.error_level(c):
            skipped[t.family] += 1
            continue
        soft = pf.lenient(t, base, form)
        got = pf.verdict(pf.render(t, base, form, ctx), rules)
        out = pf.outcome(c, got, soft)
        if out != "held" and pf.needs_file(t, base):
            out = "needs file"
        rows.append({"family": t.family, "text": t.name, "base": base, "form": form, "context": ctx,
                     "canonical": list(c), "lenient": soft, "got": list(got), "outcome": out})
        if progress and i % 500 == 0:
            print(f"  {i}/{len(cells)} {time.time() - t0:.0f}s", file=sys.stderr)
    return {"per_text": per_text, "seed": seed, "texts": len(texts),
            "not_error_level": sorted(k[1] for k, v in canon.items() if not pf.error_level(v)),
            "canonical": {f"{k[0]}|{k[1]}": list(v) for k, v in canon.items()}, "rows": rows}


def matrix(res: dict, by: str = "family") -> str:
    cols = list(pf.FORMS)
    tab: dict[str, dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
    for r in res["rows"]:
        col = r["form"] if r["base"] == "canonical" else f"{r['form']}"
        tab[r[by]][col][r["outcome"]] += 1
        tab["ALL"][col][r["outcome"]] += 1
    out = [f"| {by} | " + " | ".join(cols) + " | all |", "|---" * (len(cols) + 2) + "|"]
    for fam in sorted(tab, key=lambda f: (f == "ALL", f)):
        cellv = []
        tot = Counter()
        for c in cols:
            k = tab[fam][c]
            tot.update(k)
            cellv.append(f"{k['held']}/{k['changed']}/{k['no failure']}" if k else "-")
        cellv.append(f"{tot['held']}/{tot['changed']}/{tot['no failure']}")
        out.append(f"| {fam} | " + " | ".join(cellv) + " |")
    return "\n".join(out)


def by_base(res: dict) -> str:
    tab: dict[str, Counter] = defaultdict(Counter)
    for r in res["rows"]:
        tab[f"{r['family']} {r['base']} {r['context']}"][r["outcome"]] += 1
    return "\n".join(f"| {k} | {v['held']} | {v['changed']} | {v['no failure']} |" for k, v in sorted(tab.items()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-text", type=int, default=6, help="cells per text, seeded (0: every cell)")
    ap.add_argument("--seed", type=int, default=6)
    ap.add_argument("--family", action="append", help="only these text families")
    ap.add_argument("--json", help="save the rows here")
    ap.add_argument("--compare", help="a saved --json run: list the cells whose outcome moved")
    ap.add_argument("--misses", type=int, default=0, help="print this many non-held rows")
    args = ap.parse_args(argv)
    t0 = time.time()
    res = run(args.per_text, args.seed, set(args.family or ()), progress=True)
    n = Counter(r["outcome"] for r in res["rows"])
    print(f"{res['texts']} texts ({len(res['not_error_level'])} not error-level, skipped), {len(res['rows'])} cells: "
          f"held {n['held']}, changed {n['changed']}, no failure {n['no failure']}; not held but ambiguous without "
          f"the WARN's file:line (needs file) {n['needs file']} ({time.time() - t0:.0f}s)")
    print("\ncells held/changed/no failure\n")
    print(matrix(res))
    print("\n| family base context | held | changed | no failure |\n|---|---|---|---|")
    print(by_base(res))
    soft = Counter("null" if r["got"][0] is None else "canonical" for r in res["rows"] if r["lenient"])
    print(f"\nprose quoting a message only (null or canonical accepted): read as evidence {soft['canonical']}, "
          f"null {soft['null']}")
    if args.misses:
        bad = [r for r in res["rows"] if r["outcome"] != "held"]
        for r in bad[: args.misses]:
            print(f"  {r['outcome']:10} {r['family']:10} {r['form']:8} {r['base']:9} {r['context']:7} "
                  f"{r['canonical']} -> {r['got']}  {r['text'][:70]}")
    if args.json:
        Path(args.json).write_text(json.dumps(res))
    if args.compare:
        old = {(r["family"], r["text"], r["base"], r["form"], r["context"]): r["outcome"]
               for r in json.loads(Path(args.compare).read_text())["rows"]}
        moved = Counter()
        for r in res["rows"]:
            k = (r["family"], r["text"], r["base"], r["form"], r["context"])
            if k in old and old[k] != r["outcome"]:
                moved[(r["family"], r["form"], old[k], r["outcome"])] += 1
        print("\nmoved since", args.compare)
        for (fam, form, a, b), c in sorted(moved.items()):
            print(f"  {fam:10} {form:8} {a} -> {b}: {c}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
