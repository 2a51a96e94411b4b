"""Measured accuracy: run every labeled case (folder with logs + label.json) and compare with its label."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .analysis import Analyzer, split_dumps
from .engine.loader import Rule, load_rules
from .errors import AnalyzerError
from .sources import Inputs, as_specs, expand_inputs


@dataclass(frozen=True, slots=True)
class CaseResult:
    """One labeled case: what the label says, what the analyzer said."""

    case: str
    path: str
    expected: str | None
    got: str | None
    confidence: float | None
    rule: str = ""
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and self.expected == self.got

    def to_dict(self) -> dict[str, object]:
        return {"case": self.case, "path": self.path, "expected": self.expected, "got": self.got,
                "confidence": None if self.confidence is None else round(self.confidence, 3), "ok": self.ok,
                "rule": self.rule, "error": self.error}


def find_cases(dirs: Inputs) -> list[Path]:
    """Folders holding a ``label.json`` (the given folders themselves or anywhere below them), sorted.

    Args:
        dirs: one folder or a list of them (str or ``pathlib.Path``).
    """
    out: set[Path] = set()
    for d in as_specs(dirs):
        p = Path(d)
        if (p / "label.json").is_file():
            out.add(p)
            continue
        if not p.is_dir():
            raise AnalyzerError("not a folder of labeled cases", path=str(d))
        for lab in p.rglob("label.json"):
            out.add(lab.parent)
    return sorted(out)


def run_case(case_dir: Path, rules: list[Rule]) -> CaseResult:
    """Analyze one case folder with the given rules."""
    label = json.loads((case_dir / "label.json").read_text(encoding="utf-8"))
    expected = label.get("root_cause")
    name = case_dir.name
    try:
        sources, dumps = split_dumps([str(case_dir)], expand_inputs([str(case_dir)]))
        a = Analyzer(rules=rules)
        a.add_sources(sources)
        for s in sources:
            a.run_source(s)
        a.add_flight_dumps(dumps)
        d = a.finish()
    except AnalyzerError as exc:
        return CaseResult(name, str(case_dir), expected, None, None, error=str(exc))
    rc = d.root_cause
    return CaseResult(name, str(case_dir), expected, rc.id if rc else None, rc.confidence if rc else None,
                      rule=rc.rule if rc else "")


def evaluate(dirs: Inputs, rules: list[Rule] | None = None, rules_dirs: Inputs = ()) -> list[CaseResult]:
    """Run every labeled case under ``dirs``.

    Args:
        dirs: a folder (str or ``pathlib.Path``) or a list of folders that are cases or contain cases.
        rules: exact rule set; default: built-in rules plus ``rules_dirs``.
        rules_dirs: extra rule folders.

    Returns:
        One ``CaseResult`` per case, in path order.
    """
    rs = rules if rules is not None else load_rules(tuple(as_specs(rules_dirs)))
    return [run_case(c, rs) for c in find_cases(dirs)]


def accuracy(results: list[CaseResult]) -> dict[str, tuple[int, int]]:
    """(right, total) per expected taxonomy id (``null`` for healthy cases) and ``overall``."""
    acc: dict[str, tuple[int, int]] = {}
    for r in results:
        key = r.expected if r.expected is not None else "null"
        ok, n = acc.get(key, (0, 0))
        acc[key] = (ok + int(r.ok), n + 1)
    ok = sum(int(r.ok) for r in results)
    out = dict(sorted(acc.items()))
    out["overall"] = (ok, len(results))
    return out


def format_table(results: list[CaseResult]) -> str:
    """A plain-text table: case, expected, got, confidence, ok; then accuracy per taxonomy id and overall."""
    rows = [("case", "expected", "got", "conf", "ok")]
    for r in results:
        rows.append((r.case, str(r.expected), str(r.got) if not r.error else f"ERROR: {r.error}",
                     "" if r.confidence is None else f"{r.confidence:.2f}", "ok" if r.ok else "FAIL"))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = ["  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.append("accuracy by expected root cause:")
    acc = accuracy(results)
    w = max((len(k) for k in acc), default=7)
    for k, (ok, n) in acc.items():
        pct = 100.0 * ok / n if n else 0.0
        lines.append(f"  {k.ljust(w)}  {ok:>3}/{n:<3}  {pct:5.1f}%")
    return "\n".join(lines) + "\n"
