"""Rule engine: TOML rules (loader), selectors (match), predicates (predicate.py registers them), matcher (run)."""
from __future__ import annotations

from dataclasses import dataclass

from ..resources import rules_dir
from .loader import TAXONOMY_IDS, Example, MatchSpec, Rule, load_rules, parse_rule, rule_files
from .match import PREDICATES, Selector, compile_selector
from .run import Hit, Matcher

__all__ = [
    "TAXONOMY_IDS", "Example", "MatchSpec", "Rule", "load_rules", "parse_rule", "rule_files", "PREDICATES",
    "Selector", "compile_selector", "Hit", "Matcher", "Problem", "check_rules", "run_example", "rules_dir",
]


@dataclass(frozen=True, slots=True)
class Problem:
    """A rule that fails its own check: where, and what is wrong."""

    rule: str
    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.rule}: {self.message}"


def run_example(rule: Rule, example: Example) -> bool:
    """Whether ``rule`` matches the example's log when it goes through the full pipeline (sources, parsers,
    job model, matcher)."""
    from ..analysis import hits_for_dumps, hits_for_text

    name = f"{rule.id}.example@{example.line}"
    if example.dumps:
        hits = hits_for_dumps(example.log, example.dumps, [rule], name=name)
    else:
        hits = hits_for_text(example.log, [rule], name=name)
    return any(h.rule.id == rule.id for h in hits)


def check_rules(rules: list[Rule]) -> list[Problem]:
    """Validate rules as a set and run every rule's examples through the full pipeline.

    Returns:
        One ``Problem`` per failed example or inconsistency; empty when every rule passes.
    """
    problems: list[Problem] = []
    ids = {r.id for r in rules}
    for r in rules:
        for x in r.explains:
            if x not in ids and x not in TAXONOMY_IDS:
                problems.append(Problem(r.id, r.path, r.line_of("explains"), f"explains unknown id '{x}'"))
            if x == r.id or x == r.taxonomy:
                problems.append(Problem(r.id, r.path, r.line_of("explains"), f"a rule cannot explain itself ('{x}')"))
        if r.status == "deprecated":
            continue
        for ex in r.examples:
            try:
                got = run_example(r, ex)
            except Exception as exc:  # noqa: BLE001 - report any crash as a rule problem, with its location
                problems.append(Problem(r.id, r.path, ex.line, f"example crashed the pipeline: {exc!r}"))
                continue
            want = ex.expect == "match"
            if got != want:
                problems.append(Problem(r.id, r.path, ex.line,
                                        f"example expects {ex.expect} but the rule {'matched' if got else 'did not match'}"))
    return problems
