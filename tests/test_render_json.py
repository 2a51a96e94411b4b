"""JSON output: exactly CONTRACT.md (Diagnosis.to_dict), sorted keys, same bytes for same input."""
from __future__ import annotations

import json

import render_samples as rs

from nccl_analyzer.render import render


def test_json_is_to_dict_sorted_indented():
    d = rs.duplicate_gpu()
    out = render(d, "json")
    assert out == json.dumps(d.to_dict(), sort_keys=True, indent=2) + "\n"
    data = json.loads(out)
    assert data["schema"] == "nccl-analyzer/diagnosis/v1"
    assert {"schema", "inputs", "root_cause", "findings", "reproduction", "job"} <= set(data)
    rc = data["root_cause"]
    assert rc["id"] == "duplicate_gpu"
    assert {"id", "title", "confidence", "ranks", "hosts", "evidence", "explanation", "fix"} <= set(rc)
    assert set(rc["fix"]) == {"summary", "env", "commands"}
    assert {"path", "line", "text"} == set(rc["evidence"][0])
    assert "redacted" not in data and "excerpts" not in data


def test_json_same_bytes_for_same_input():
    assert render(rs.duplicate_gpu(), "json") == render(rs.duplicate_gpu(), "json")


def test_json_ok_case_has_null_root_cause():
    data = json.loads(render(rs.ok_case(), "json"))
    assert data["root_cause"] is None and data["reproduction"] is None


def test_json_hostile_text_round_trips(tmp_path):
    d = rs.hostile(tmp_path)
    data = json.loads(render(d, "json"))
    assert data["root_cause"]["title"] == d.root_cause.title
    texts = [e["text"] for e in data["root_cause"]["evidence"]]
    assert any(rs.HOSTILE[0] in t for t in texts)
