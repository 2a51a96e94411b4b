"""Where a labeled case says which ranks caused the failure ("ranks" in label.json), the verdict names them."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from nccl_analyzer.analysis import analyze
from nccl_analyzer.engine.loader import load_rules

ROOT = Path(__file__).resolve().parent.parent
CASES = sorted(p.parent for p in (ROOT / "fixtures").glob("*/*/label.json")
               if "ranks" in json.loads(p.read_text()) and p.parent.parent.name not in ("hard", "healthy7")
               and not p.parent.parent.name.startswith("blind"))  # healthy7: a development set scored by heldout.py


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_culprit_ranks(case):
    label = json.loads((case / "label.json").read_text())
    d = analyze([str(case)], rules=load_rules(()))
    assert d.root_cause is not None
    assert sorted(d.root_cause.ranks) == sorted(label["ranks"]), d.root_cause.title
