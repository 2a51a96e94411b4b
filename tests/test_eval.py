"""Measured accuracy on every labeled case, and robustness: a failure buried in healthy noise keeps its answer."""
from __future__ import annotations

import functools
import json
import re
import shutil
from pathlib import Path

import pytest

from nccl_analyzer.analysis import analyze
from nccl_analyzer.engine.loader import load_rules
from nccl_analyzer.evaluate import accuracy, evaluate, find_cases, format_table

ROOT = Path(__file__).resolve().parent.parent
CASE_DIRS = [ROOT / "fixtures" / "h200-nccl-2.28.9", ROOT / "fixtures" / "cases"]
ALL = find_cases([str(d) for d in CASE_DIRS])


@functools.lru_cache(maxsize=1)
def _rules():
    """The built-in rules, loaded once (analyze() would load them per case: 0.1 s each)."""
    return load_rules(())


@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_labeled_case(case):
    label = json.loads((case / "label.json").read_text())
    d = analyze([str(case)], rules=_rules())
    got = d.root_cause.id if d.root_cause else None
    assert got == label["root_cause"], f"{case.name}: got {got} ({d.root_cause.rule if d.root_cause else ''})"


def test_corpus_size_and_taxonomy_coverage():
    ids = {json.loads((c / "label.json").read_text())["root_cause"] for c in find_cases([str(CASE_DIRS[1])])}
    assert len(find_cases([str(CASE_DIRS[1])])) >= 40
    from nccl_analyzer.engine import TAXONOMY_IDS
    assert set(TAXONOMY_IDS) <= ids


def test_table_reports_accuracy():
    res = evaluate([str(CASE_DIRS[0])])
    table = format_table(res)
    assert "overall" in table and "02_bad_ifname" in table
    ok, n = accuracy(res)["overall"]
    assert n == len(res) == 16
    assert ok == n, [r.case for r in res if not r.ok]
    assert re.search(r"^  overall +16/16 +100\.0%$", table, re.M), table


def test_corpus_accuracy_and_only_known_misses():
    """``eval fixtures/``: at least 197/200 right, and every case it gets wrong is a known miss in fixtures/hard/."""
    hard = {c.name for c in find_cases([str(ROOT / "fixtures" / "hard")])}
    res = evaluate([str(ROOT / "fixtures" / d) for d in ("cases", "h200-nccl-2.28.9", "hard")])
    ok, n = accuracy(res)["overall"]
    wrong = {r.case for r in res if not r.ok}
    assert wrong <= hard, f"wrong outside fixtures/hard: {sorted(wrong - hard)}"
    assert n >= 200 and ok >= 197 and ok == n - len(wrong), (ok, n)


def _noise(n_lines: int) -> str:
    """Healthy NCCL/torch lines from the healthy fixtures, re-labelled as other processes and ranks."""
    base = (ROOT / "fixtures" / "h200-nccl-2.28.9" / "01_ok_subsys_all" / "log.txt").read_text().splitlines()
    base = [b for b in base if "NCCL INFO" in b]
    out = []
    pid = 40000
    while len(out) < n_lines:
        pid += 1
        rank = 8 + pid % 56
        for b in base:
            line = b.replace("vm:467:", f"other{pid}:{pid}:").replace(":467 ", f":{pid} ")
            line = line.replace(" rank 0 nranks 1 ", f" rank {rank} nranks 64 ")
            out.append(line)
    return "\n".join(out[:n_lines]) + "\n"


@pytest.mark.parametrize("name", ["02_bad_ifname", "06_oom", "11_mismatch_gloo", "01_ok_subsys_all"])
def test_buried_in_healthy_noise(tmp_path, name):
    src = ROOT / "fixtures" / "h200-nccl-2.28.9" / name
    want = json.loads((src / "label.json").read_text())["root_cause"]
    noise = _noise(30000)
    dst = tmp_path / name
    shutil.copytree(src, dst)
    (dst / "label.json").unlink()
    (dst / "other_ranks.log").write_text(noise)
    log = (dst / "log.txt").read_text()
    half = noise.splitlines()
    (dst / "log.txt").write_text("\n".join(half[:15000]) + "\n" + log + "\n".join(half[15000:]) + "\n")
    d = analyze([str(dst)])
    assert (d.root_cause.id if d.root_cause else None) == want
