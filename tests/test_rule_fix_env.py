"""fix.env is applied by scripts and --verify-fix as it is: every value must be a concrete value."""
from __future__ import annotations

import re

import pytest

from nccl_analyzer.engine import load_rules

RULES = load_rules(())


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_fix_env_values_are_concrete(rule):
    for name, value in rule.fix.get("env", {}).items():
        assert re.fullmatch(r"[A-Z][A-Z0-9_]*", name), name
        literal = re.sub(r"\{\w+\}", "x", str(value))
        assert "<" not in literal and " " not in literal, f"{rule.id}: {name}={value!r} is not a value"
