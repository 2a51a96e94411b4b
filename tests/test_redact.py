"""Redaction: hostnames, IPs, user names and e-mails replaced consistently in every format; structure kept."""
from __future__ import annotations

import dataclasses
import json
import re
import shutil

import pytest
import render_samples as rs

from nccl_analyzer.model import Evidence
from nccl_analyzer.redact import Redactor, redact_diagnosis
from nccl_analyzer.render import render

PII_LINES = (
    "vm:588:588 [0] NCCL INFO NET/Socket : Using [0]eth0:fe80::a00:27ff:fe4e:66a1%eth0<0>",
    "vm:589:589 [0] NCCL INFO Bootstrap: Using ib0:2001:db8:85a3::8a2e:370:7334<0>",
    "vm:589:589 [0] NCCL INFO comm 0x35c9c130 rank 1 nRanks 2 nNodes 1 localRanks 2 localRank 1 busId 0000:07:00.0",
    "vm:589:589 [0] NCCL INFO NCCL version 2.18.5+cuda12.2",
    "  File \"/home/alice/project/train.py\", line 3, in <module> (mail alice@example.com)",
    "[E1129 13:53:31.1 socket.cpp:1019] [c10d] The client socket has timed out after 600000ms while trying to "
    "connect to (gpu-node-17.cluster.example.com, 29500).",
    "log copied to C:\\Users\\Bob\\AppData\\run.log and /Users/carol/run.sh; MASTER_ADDR=10.11.12.13 "
    "contact ops@corp.example.org",
)
SECRETS = ("192.0.2.2", "fe80::a00:27ff:fe4e:66a1", "2001:db8:85a3::8a2e:370:7334", "alice", "bob", "carol",
           "alice@example.com", "ops@corp.example.org", "gpu-node-17", "cluster.example.com", "10.11.12.13")
KEPT = ("localhost", "127.0.0.1", "2.28.9+cuda13.0", "2.18.5+cuda12.2", "busId 60", "0000:07:00.0",
        "host-1:588:588 [0] NCCL INFO", "NCCL version 2.28.9")


def pii_diagnosis(tmp_path):
    log = tmp_path / "home" / "alice" / "jobs" / "vm-run.log"
    log.parent.mkdir(parents=True)
    shutil.copyfile(rs.log_path("04_duplicate_gpu"), log)
    with open(log, "a", encoding="utf-8") as fh:
        fh.write("\n".join(PII_LINES) + "\n")
    d = rs.duplicate_gpu(log)
    extra = tuple(rs.ev(log, line[:60]) for line in PII_LINES)
    rc = dataclasses.replace(d.root_cause, evidence=(*d.root_cause.evidence, *extra),
                             explanation=d.root_cause.explanation + " Rank 1 on vm (192.0.2.2) failed first.")
    env = {**d.job.env, "MASTER_ADDR": "gpu-node-17", "USER": "alice", "NCCL_SOCKET_IFNAME": "eth0"}
    return log, dataclasses.replace(d, root_cause=rc, job=dataclasses.replace(d.job, env=env))


def secret_hits(text: str) -> list[str]:
    hits = [s for s in SECRETS if re.search(r"(?<![\w-])" + re.escape(s) + r"(?![\w-])", text, re.I)]
    if re.search(r"(?<![\w.-])vm(?![\w-])", text):
        hits.append("vm")
    return hits


@pytest.mark.parametrize("fmt", ["text", "json", "markdown", "html"])
def test_redacted_outputs_hold_no_original_value(tmp_path, fmt):
    _, d = pii_diagnosis(tmp_path)
    original = render(d, fmt, verbose=True)
    assert secret_hits(original)  # the test input really holds them
    r = redact_diagnosis(d)
    out = render(r, fmt, verbose=True)
    assert secret_hits(out) == [], fmt
    for kept in KEPT:
        if kept in original.replace("vm:588:588", "host-1:588:588"):
            assert kept in out, (fmt, kept)
    assert "host-1:589:589 [0] init.cc:904 NCCL WARN Duplicate GPU detected" in out


def test_redaction_is_consistent_across_formats(tmp_path):
    _, d = pii_diagnosis(tmp_path)
    r = redact_diagnosis(d)
    assert r.redacted and not d.redacted
    assert {i.host for i in r.job.ranks.values()} == {"host-1"}
    assert r.root_cause.hosts == ("host-1",)
    token = re.search(r"eth0:(ip-\d+)<0>", r.job.network["bootstrap"]).group(1)
    assert d.job.network["bootstrap"] == "eth0:192.0.2.2<0>"
    for fmt in ("text", "json", "markdown", "html"):
        out = render(r, fmt, verbose=True)
        assert "host-1:589:589 [0] init.cc:904 NCCL WARN Duplicate GPU detected" in out
        assert f"host-1 ({token}) failed first" in out
    j = json.loads(render(r, "json"))
    texts = [e["text"] for e in j["root_cause"]["evidence"]]
    assert "vm:589:589 [0] NCCL INFO NET/Socket : Using [0]eth0:ip6-1%eth0<0>".replace("vm", "host-1").replace(
        "589", "588") in texts
    assert any("/home/user-1/project/train.py" in t and "email-1" in t for t in texts)
    assert any("connect to (host-2, 29500)" in t for t in texts)
    assert any(r"C:\Users\user-2\AppData" in t and "/Users/user-3/" in t and re.search(r"MASTER_ADDR=ip-\d", t)
               and "email-2" in t for t in texts)
    assert j["root_cause"]["evidence"][0]["path"].count("/home/user-1/jobs/host-1-run.log") == 0  # "vm-run" kept
    assert "/home/user-1/jobs/" in j["root_cause"]["evidence"][0]["path"]
    assert j["job"]["env"]["MASTER_ADDR"] == "host-2" and j["job"]["env"]["USER"] == "user-1"


def test_redacted_html_context_comes_from_redacted_excerpts(tmp_path):
    log, d = pii_diagnosis(tmp_path)
    r = redact_diagnosis(d)
    assert r.excerpts, "context was captured before redaction"
    key = r.root_cause.evidence[0]
    log.unlink()  # the redacted report never reads the input again
    html = render(r, "html")
    assert f'<td class="n">{key.line - 2}</td>' in html
    assert secret_hits(html) == []
    assert "redacted" in html


def test_redactor_text_rules():
    r = Redactor()
    assert r.text("vm:588:588 [0] NCCL INFO Bootstrap: Using eth0:192.0.2.2<0>") == \
        "host-1:588:588 [0] NCCL INFO Bootstrap: Using eth0:ip-1<0>"
    assert r.text("node vm and VM, vm.example.com, avm, vm-2") == "node host-1 and host-1, host-1.example.com, avm, vm-2"
    assert r.text("RAS client listening socket at 127.0.0.1<28028>") == "RAS client listening socket at 127.0.0.1<28028>"
    assert r.text("host      : localhost") == "host      : localhost"
    assert r.text("192.0.2.2 10.0.0.1 192.0.2.2") == "ip-1 ip-2 ip-1"
    assert r.text("[::1]:29500 [2001:db8::1]:29500 ::ffff:10.0.0.1") == "[::1]:29500 [ip6-1]:29500 ip-2"
    assert r.text("busId 0000:07:00.0 at 13:53:31.163891527 v2.28.9+cuda13.0 NCCL version 2.18.5") == \
        "busId 0000:07:00.0 at 13:53:31.163891527 v2.28.9+cuda13.0 NCCL version 2.18.5"
    assert r.text("c10d::ProcessGroupNCCL::WorkNCCL") == "c10d::ProcessGroupNCCL::WorkNCCL"
    assert r.text("a@b.example.org A@B.example.org") == "email-1 email-1"
    assert r.text("/home/root/x /home/alice/y") == "/home/root/x /home/user-1/y"
    assert r.text("[2026-11-29 13:53:31] n1.ex.com:7:7 [3] NCCL WARN x; n1 is down") == \
        "[2026-11-29 13:53:31] host-2:7:7 [3] NCCL WARN x; host-2 is down"


def test_redactor_event_keeps_structure():
    from nccl_analyzer.model import Event

    r = Redactor()
    e = Event(kind="nccl.bootstrap", path="/home/alice/run.log", line=6, host="vm", pid=588, tid=588, cuda_dev=0,
              text="vm:588:588 [0] NCCL INFO Bootstrap: Using eth0:192.0.2.2<0>",
              fields={"iface": "eth0:192.0.2.2<0>", "lines": ["vm says hi"], "n": 3})
    out = r.event(e)
    assert (out.kind, out.line, out.pid, out.tid, out.cuda_dev) == ("nccl.bootstrap", 6, 588, 588, 0)
    assert out.host == "host-1" and out.path == "/home/user-1/run.log"
    assert out.text == "host-1:588:588 [0] NCCL INFO Bootstrap: Using eth0:ip-1<0>"
    assert out.fields == {"iface": "eth0:ip-1<0>", "lines": ["host-1 says hi"], "n": 3}


def test_events_export_redaction_on_real_fixture(tmp_path):
    from nccl_analyzer.export import iter_events

    log, _ = pii_diagnosis(tmp_path)
    r = Redactor()
    rows = [r.event(e).to_dict() for e in iter_events([str(log)], keep_text=True)]
    dumped = json.dumps(rows)
    assert secret_hits(json.dumps(rows, ensure_ascii=False)) == []
    assert "host-1:588:588 [0] NCCL INFO" in dumped and "2.28.9+cuda13.0" in dumped


def test_redact_is_idempotent_and_leaves_input_alone(tmp_path):
    _, d = pii_diagnosis(tmp_path)
    before = render(d, "json")
    r = redact_diagnosis(d)
    assert render(d, "json") == before
    assert redact_diagnosis(r) is r


def test_constructed_hostile_host_is_redacted(tmp_path):
    d = rs.hostile(tmp_path)
    r = redact_diagnosis(d)
    ev = Evidence(path="x", line=1, text="vm")
    assert Redactor(hosts=["vm"]).evidence(ev).text == "host-1"
    assert "vm:588:588" not in render(r, "html")
