"""Every rule file validates, and every [[example]] behaves as it says through the full pipeline."""
from __future__ import annotations

from pathlib import Path

import pytest

from nccl_analyzer.engine import TAXONOMY_IDS, check_rules, load_rules, run_example
from nccl_analyzer.engine.loader import rule_files
from nccl_analyzer.resources import rules_dir

RULES = load_rules()
EXAMPLES = [pytest.param(r, ex, id=f"{r.id}-{ex.expect}@{ex.line}") for r in RULES for ex in r.examples]


@pytest.mark.parametrize("rule,example", EXAMPLES)
def test_rule_example(rule, example):
    got = run_example(rule, example)
    assert got == (example.expect == "match"), f"{rule.path}:{example.line}: expected {example.expect}"


def test_shipped_rules_have_no_problems():
    # what `nccl-analyze rules test` reports: unknown or self-explaining `explains` ids, examples that crash or fail
    assert [f"{p.path}:{p.line}: {p.message}" for p in check_rules(RULES)] == []


def test_every_taxonomy_id_has_a_root_rule():
    covered = {r.taxonomy for r in RULES if r.role == "root"}
    assert set(TAXONOMY_IDS) <= covered, sorted(set(TAXONOMY_IDS) - covered)


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_rule_file_conventions(rule):
    path = rules_dir() / rule.family / f"{rule.id}.toml"
    assert path.is_file()
    assert {e.expect for e in rule.examples} == {"match", "no-match"}
    assert rule.falsepositives and all(f.strip() for f in rule.falsepositives)
    assert all(ref.startswith("https://") for ref in rule.references)


def test_explains_names_known_ids():
    ids = {r.id for r in RULES} | set(TAXONOMY_IDS)
    for r in RULES:
        assert set(r.explains) <= ids, r.id


def test_rule_count_matches_files():
    assert len(RULES) == len(rule_files(rules_dir()))


def test_every_predicate_is_documented():
    """docs/predicates.md has a section for each predicate a rule can call (the rule format a user reads)."""
    import nccl_analyzer.flight  # noqa: F401  (registers its predicates)
    from nccl_analyzer.engine.match import PREDICATES

    doc = (Path(__file__).resolve().parent.parent / "docs" / "predicates.md").read_text()
    missing = [n for n in PREDICATES if f"\n## {n}\n" not in doc]
    assert not missing, f"not in docs/predicates.md: {missing}"
