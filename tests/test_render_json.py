"""JSON output: exactly CONTRACT.md (Diagnosis.to_dict), sorted keys, same bytes for same input."""
from __future__ import annotations

import json

import render_samples as rs

from nccl_analyzer.model import Diagnosis, Evidence, Fix, InputInfo, JobModel, RootCause
from nccl_analyzer.render import render

# What CONTRACT.md's JSON looks like for a small hand-built diagnosis: keys sorted at every level, two-space
# indent, one trailing newline. Written out by hand (not computed the way render/json.py computes it).
SMALL_JSON = """{
  "dismissed": [],
  "findings": [],
  "inputs": [
    {
      "lines": 3,
      "path": "a.log"
    }
  ],
  "job": {
    "backend": null,
    "cuda_driver": null,
    "env": {
      "A": "2",
      "B": "1"
    },
    "nccl_versions": [],
    "network": {},
    "ranks": [],
    "torch_version": null,
    "world_size": 2
  },
  "reproduction": null,
  "root_cause": {
    "confidence": 0.9,
    "evidence": [
      {
        "line": 2,
        "path": "a.log",
        "text": "x"
      }
    ],
    "explanation": "e",
    "fix": {
      "commands": [],
      "env": {
        "MASTER_PORT": "29501"
      },
      "summary": "s"
    },
    "hosts": [
      "n1"
    ],
    "id": "port_conflict",
    "ranks": [
      0
    ],
    "rule": "r",
    "title": "Port 29500 in use"
  },
  "schema": "nccl-analyzer/diagnosis/v1",
  "stats": {
    "a": 2,
    "z": 1
  },
  "warnings": []
}
"""


def test_json_literal_for_a_small_diagnosis():
    rc = RootCause(id="port_conflict", title="Port 29500 in use", confidence=0.9, ranks=(0,), hosts=("n1",),
                   evidence=(Evidence(path="a.log", line=2, text="x"),), explanation="e",
                   fix=Fix(summary="s", env={"MASTER_PORT": "29501"}), rule="r")
    d = Diagnosis(inputs=[InputInfo(path="a.log", lines=3)], root_cause=rc, findings=[],
                  job=JobModel(world_size=2, env={"B": "1", "A": "2"}), stats={"z": 1, "a": 2})
    assert render(d, "json") == SMALL_JSON


def _sorted_pairs(pairs):
    keys = [k for k, _ in pairs]
    assert keys == sorted(keys), keys
    return dict(pairs)


def test_json_is_to_dict_sorted_indented():
    d = rs.duplicate_gpu()
    out = render(d, "json")
    assert out.endswith("}\n") and not out.endswith("\n\n") and out.startswith('{\n  "dismissed": [],\n  "findings": [')
    data = json.loads(out, object_pairs_hook=_sorted_pairs)  # keys sorted in every object
    assert data == json.loads(json.dumps(d.to_dict()))
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
