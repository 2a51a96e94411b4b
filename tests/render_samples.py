"""Diagnoses for the renderer/redaction tests: real fixture analyses, plus hostile input appended to them."""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

from nccl_analyzer.model import Diagnosis, Event, Evidence, Finding, Fix, Reproduction

ROOT = Path(__file__).resolve().parent.parent
_CANDIDATES = (ROOT / "fixtures" / "h200-nccl-2.28.9", ROOT.parent / "shared" / "fixtures" / "h200-nccl-2.28.9")


def fixtures_dir() -> Path:
    for c in _CANDIDATES:
        if (c / "04_duplicate_gpu" / "log.txt").is_file():
            return c
    raise FileNotFoundError("real fixtures not found in " + " or ".join(map(str, _CANDIDATES)))


def log_path(case: str) -> Path:
    return fixtures_dir() / case / "log.txt"


def line_of(path: Path | str, n: int) -> str:
    with open(path, encoding="utf-8", errors="replace") as fh:
        for i, line in enumerate(fh, 1):
            if i == n:
                return line.rstrip("\n")
    raise IndexError(n)


def find_line(path: Path | str, needle: str) -> int:
    with open(path, encoding="utf-8", errors="replace") as fh:
        for i, line in enumerate(fh, 1):
            if needle in line:
                return i
    raise LookupError(needle)


def ev(path: Path | str, needle: str) -> Evidence:
    n = find_line(path, needle)
    return Evidence(path=str(path), line=n, text=line_of(path, n))


def analyze_path(path: Path | str) -> Diagnosis:
    """The real pipeline with the built-in rules; a rule set that does not load is an error here too."""
    from nccl_analyzer.analysis import analyze

    return analyze([str(path)])


def duplicate_gpu(log: Path | None = None) -> Diagnosis:
    """``analyze()`` on 04_duplicate_gpu (or a copy of it), checked against its label: the renderer tests render
    a real verdict, so an analysis that names no cause (or another one) fails them here, loudly."""
    log = log or log_path("04_duplicate_gpu")
    d = analyze_path(log)
    want = label("04_duplicate_gpu")["root_cause"]
    got = d.root_cause.id if d.root_cause else None
    assert got == want, f"{log}: the analysis says {got}, the label {want}: the renderer tests need the real verdict"
    return d


def ok_case() -> Diagnosis:
    """``analyze()`` on the healthy 01_ok_subsys_all; it must name no cause (its label)."""
    d = analyze_path(log_path("01_ok_subsys_all"))
    assert label("01_ok_subsys_all")["root_cause"] is None and d.root_cause is None, d.root_cause
    return d


def label(case: str) -> dict:
    return json.loads((fixtures_dir() / case / "label.json").read_text())


# ---- hostile input ---------------------------------------------------------------------------------------

HOSTILE = (
    "<script>document.title='PWNED-SCRIPT'</script>",
    "<img src=x onerror=\"document.body.setAttribute('data-pwned','img')\">",
    "</style><script>document.title='PWNED-STYLE'</script><style>",
    "</textarea><svg onload=\"document.body.setAttribute('data-pwned','svg')\">",
    "<a href=\"javascript:document.title='PWNED-HREF'\">click</a> javascript:alert(1)",
    "{{ 7*7 }} {% if true %}JINJA{% endif %} ${7*7}",
    "name \u202egnp.exe\u202c RTL override \u2066isolate\u2069",
    "</details><details open><summary>x</summary> ```` fence ```` `tick`",
    "]]><!-- comment --> &amp; &lt;b&gt; | pipe | *bold* _it_ [link](http://evil.example/) @someone #123",
)
HOSTILE_HOST = "evil<b>host</b>\"'"
MARKERS = ("PWNED", "data-pwned")


def hostile_log(tmp: Path) -> Path:
    """A copy of 04_duplicate_gpu with NCCL WARN and plain lines carrying hostile text appended."""
    dst = tmp / "hostile" / "log.txt"
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(log_path("04_duplicate_gpu"), dst)
    with open(dst, "a", encoding="utf-8") as fh:
        for i, text in enumerate(HOSTILE):
            fh.write(f"vm:588:588 [0] misc/argcheck.cc:{40 + i} NCCL WARN {text}\n")
            fh.write(f"{text}\n")
    return dst


def hostile(tmp: Path) -> Diagnosis:
    """Real analysis of the hostile copy, with hostile values in every field a renderer shows."""
    log = hostile_log(tmp)
    d = duplicate_gpu(log)
    bad = [ev(log, text) for text in HOSTILE]
    h = " ".join(HOSTILE)
    rc = d.root_cause
    assert rc is not None
    rc = dataclasses.replace(
        rc, title="Title " + HOSTILE[0], hosts=(HOSTILE_HOST, *rc.hosts), evidence=(*rc.evidence, *bad),
        explanation="Explanation " + h, gpus=(HOSTILE[1],),
        fix=Fix(summary="Fix " + h, env={"NCCL_EVIL": HOSTILE[2], "X<script>": HOSTILE[5]},
                commands=("echo " + HOSTILE[4], "run ```` " + HOSTILE[7])))
    findings = [dataclasses.replace(f, title=f.title + " " + HOSTILE[3], hosts=(*f.hosts, HOSTILE_HOST))
                for f in d.findings]
    findings.append(Finding(rule="evil<rule>", id="other", role="symptom", title=h, evidence=tuple(bad),
                            ranks=(1,), hosts=(HOSTILE_HOST,)))
    job = d.job
    ranks = dict(job.ranks)
    r0 = dataclasses.replace(ranks[0], host=HOSTILE_HOST, nccl_version=HOSTILE[6],
                             last_collective={"op": HOSTILE[0], "seq": 7},
                             first_error=bad[1], first_error_kind="nccl.warn",
                             timeline=[*ranks[0].timeline, {"kind": "nccl.warn", "line": bad[0].line,
                                                            "path": str(log), "what": HOSTILE[1], "time": None}])
    ranks[0] = r0
    job = dataclasses.replace(job, ranks=ranks, env={**job.env, "NCCL_SOCKET_IFNAME": HOSTILE[3],
                                                     "EVIL<img src=x>": HOSTILE[4], "MASTER_ADDR": HOSTILE[8]},
                              topology={"rings": [HOSTILE[0], "0 1"], HOSTILE[2]: {"transport": HOSTILE[1]}},
                              nccl_versions=[*job.nccl_versions, HOSTILE[5]])
    events = list(d.events_sample) + [
        Event(kind="nccl.warn", path=str(log), line=b.line, text=b.text, host=HOSTILE_HOST, rank=0) for b in bad]
    events.append(Event(kind="evil<kind>\"", path=str(log), line=1, text=h, host="vm", rank=1))
    rep = Reproduction(outcome="CONFIRMED", reason="Reason " + h, backend="nccl", world_size=2,
                       command="torchrun " + HOSTILE[4], fix_outcome="FIXED", fix_env={"NCCL_P2P_DISABLE": HOSTILE[0]},
                       got="duplicate_gpu", output_excerpt=h)
    return dataclasses.replace(d, root_cause=rc, findings=findings, job=job, events_sample=events,
                               reproduction=rep, warnings=[*d.warnings, "Warning " + HOSTILE[0]],
                               stats={**d.stats, HOSTILE[1]: 3})
