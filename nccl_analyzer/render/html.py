"""Self-contained HTML report (inline CSS/SVG, hash-pinned inline script, strict CSP) from ``reports/*.j2``."""
from __future__ import annotations

import base64
import hashlib
import re
from functools import lru_cache
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from .flight import flight_grid, svg_grid, text_rows
from ..model import Diagnosis, Evidence
from ..resources import reports_dir
from . import view
from .context import diagnosis_evidence, read_excerpts

TEMPLATE = "report.html.j2"

#: Caps that keep the report small for huge inputs; the report says what it left out.
MAX_EVENTS = 2000
MAX_EVENT_TEXT = 600
MAX_EVIDENCE = 24
MAX_LINE = 2000
MAX_RANKS = 1024
MAX_FINDINGS = 300
MAX_ROWS = 300

# SVG geometry of the timeline (user units; the viewBox scales it).
_TL_LEFT = 150
_TL_WIDTH = 820
_TL_LANE = 26
_TL_TOP = 28


def _finalize(value: Any) -> Any:
    # Every {{ expression }} passes here before autoescape: show bidi/control characters as escapes.
    if isinstance(value, Markup) or not isinstance(value, str):
        return value
    return view.neutralize(value)


@lru_cache(maxsize=1)
def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(str(reports_dir())), autoescape=True, undefined=StrictUndefined,
                      finalize=_finalize, trim_blocks=True, lstrip_blocks=True)
    env.filters["ranks"] = view.rank_ranges
    env.filters["pct"] = view.percent
    env.filters["ident"] = ident
    return env


def ident(value: Any) -> Markup:
    """An identifier (``invalid_usage``, ``nccl-duplicate-gpu``, ``nccl.warn.socket``) that a narrow column may
    wrap only after ``_ - . / : = ,`` (a ``<wbr>``, which copying leaves out), never mid-word."""
    parts = re.split(r"(?<=[_.\-/:=,])", view.neutralize(value))
    return Markup("<wbr>").join(parts)  # join escapes every part


def _asset(name: str) -> str:
    text = (reports_dir() / name).read_text(encoding="utf-8")
    # The tag's text is hashed byte for byte; a closing tag inside would end the element early.
    if "</script" in text.lower() or "</style" in text.lower():
        raise ValueError(f"reports/{name} must not contain a closing tag")
    return text


def csp_hash(text: str) -> str:
    """CSP source expression for an inline element whose text is ``text``."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


def render_html(d: Diagnosis) -> str:
    """The whole report as one HTML document (no external resources)."""
    css = _asset("report.css")
    js = _asset("report.js")
    csp = (f"default-src 'none'; style-src {csp_hash(css)}; script-src {csp_hash(js)}; img-src data:; "
           "base-uri 'none'; form-action 'none'")
    ctx = build_context(d)
    ctx.update(css=Markup(css), js=Markup(js), csp=csp)
    return _environment().get_template(TEMPLATE).render(**ctx)


def build_context(d: Diagnosis) -> dict[str, Any]:
    """Everything the template shows, already formatted from the Diagnosis (nothing re-analyzed)."""
    rc = d.root_cause
    evidence = diagnosis_evidence(d)
    if d.excerpts is not None:
        excerpts = d.excerpts
    elif d.redacted:
        excerpts = {}  # the input files hold unredacted text: never read them back into a redacted report
    else:
        excerpts = read_excerpts(evidence[:MAX_EVIDENCE], max_line=MAX_LINE)
    ctx: dict[str, Any] = {
        "d": d,
        "rc": rc,
        "scope": f"{view.plural(view.total_lines(d), 'line')} from {view.plural(len(d.inputs), 'input')}",
        "where": view.where(d),
        "confidence_label": view.confidence_label(rc.confidence) if rc else "",
        "fix_env": view.fix_lines(rc.fix.env) if rc else [],
        "evidence_blocks": _evidence_blocks(rc.evidence if rc else (), excerpts, key=True),
        "evidence_left": max(len(rc.evidence) - MAX_EVIDENCE, 0) if rc else 0,
        "cascade": view.cascade_groups(d),
        "cascade_note": view.cascade_note(d),
        "warnings": view.input_warnings(d),
        "ranks": _ranks(d),
        "ranks_left": max(len(d.job.ranks) - MAX_RANKS, 0),
        "timeline": _timeline(d),
        "flight": _flight(d),
        "findings": [_finding(f, excerpts) for f in d.findings[:MAX_FINDINGS]],
        "findings_left": max(len(d.findings) - MAX_FINDINGS, 0),
        "job_facts": _job_facts(d),
        "env_rows": sorted(d.job.env.items())[:MAX_ROWS],
        "env_left": max(len(d.job.env) - MAX_ROWS, 0),
        "stats_rows": view.flatten(d.stats, limit=MAX_ROWS),
    }
    ctx["topology_rows"], ctx["topology_left"] = view.nccl_reported(d.job, limit=MAX_ROWS)
    events = d.events_sample[:MAX_EVENTS]
    ctx["events"] = [{"loc": f"{e.path}:{e.line}", "rank": "" if e.rank is None else e.rank, "host": e.host or "",
                      "kind": e.kind, "time": e.time or "", "text": view.clip(e.text, MAX_EVENT_TEXT)} for e in events]
    ctx["event_kinds"] = sorted({e.kind for e in events})
    ctx["events_left"] = max(len(d.events_sample) - MAX_EVENTS, 0)
    ctx["events_total"] = _events_total(d)
    ctx["conf_width"] = round(200 * (rc.confidence if rc else 0))
    return ctx


def _events_total(d: Diagnosis) -> int | None:
    for key in ("events", "events_total", "total_events"):
        value = d.stats.get(key)
        if isinstance(value, int):
            return value
    return None


def _evidence_blocks(evidence: tuple[Evidence, ...] | list[Evidence], excerpts: dict, key: bool) -> list[dict]:
    """One block per evidence line with its context; blocks of one file whose context overlaps are merged."""
    blocks: list[dict[str, Any]] = []
    hits = {(e.path, e.line) for e in evidence}
    key_loc = (evidence[0].path, evidence[0].line) if (key and evidence) else None
    for e in list(evidence)[:MAX_EVIDENCE]:
        around = excerpts.get((e.path, e.line))
        rows = dict(around) if around else {e.line: e.text}
        merged = None
        if around:
            lo, hi = min(rows), max(rows)
            for b in blocks:
                if b["path"] == e.path and b["context"] and b["lo"] <= hi + 1 and lo <= b["hi"] + 1:
                    merged = b
                    break
        if merged is None:
            merged = {"path": e.path, "lines_at": [], "rows": {}, "context": bool(around), "lo": min(rows),
                      "hi": max(rows), "key": False}
            blocks.append(merged)
        merged["rows"].update(rows)
        merged["lines_at"].append(e.line)
        merged["lo"], merged["hi"] = min(merged["lo"], min(rows)), max(merged["hi"], max(rows))
        if (e.path, e.line) == key_loc:
            merged["key"] = True
    out = []
    for b in blocks:
        lines = [{"n": n, "text": view.clip(t, MAX_LINE), "hit": (b["path"], n) in hits,
                  "key": (b["path"], n) == key_loc} for n, t in sorted(b["rows"].items())]
        at = ", ".join(str(n) for n in b["lines_at"])
        out.append({"loc": f"{b['path']}:{at}", "key": b["key"], "lines": lines, "context": b["context"]})
    return out


def _finding(f, excerpts: dict) -> dict[str, Any]:
    return {"f": f, "ranks": view.rank_ranges(f.ranks), "conf": view.percent(f.confidence),
            "evidence": [{"loc": f"{e.path}:{e.line}", "text": view.clip(e.text, 400)} for e in f.evidence[:6]],
            "evidence_left": max(len(f.evidence) - 6, 0)}


def _ranks(d: Diagnosis) -> list[dict[str, Any]]:
    rows = []
    for r in sorted(d.job.ranks)[:MAX_RANKS]:
        i = d.job.ranks[r]
        rows.append({
            "rank": r, "host": i.host or "", "pid": "" if i.pid is None else i.pid,
            "gpu": "" if i.cuda_dev is None else i.cuda_dev, "bus_id": i.bus_id or "",
            "nccl": i.nccl_version or "", "init": i.init_state, "last": view.collective_text(i.last_collective),
            "error_loc": f"{i.first_error.path}:{i.first_error.line}" if i.first_error else "",
            "error_text": view.clip(i.first_error.text, 240) if i.first_error else "",
            "error_kind": i.first_error_kind or "", "exit": "" if i.exit_code is None else i.exit_code,
            "role": i.role if i.role in ("culprit", "victim", "healthy") else "other", "role_text": i.role,
        })
    return rows


def _job_facts(d: Diagnosis) -> list[tuple[str, str]]:
    j = d.job
    facts = []
    if j.nccl_versions:
        facts.append(("NCCL", ", ".join(j.nccl_versions)))
    if j.torch_version:
        facts.append(("torch", j.torch_version))
    if j.cuda_driver:
        facts.append(("CUDA driver", j.cuda_driver))
    if j.backend:
        facts.append(("backend", j.backend))
    if j.world_size is not None:
        facts.append(("world size", str(j.world_size)))
    if j.ranks:
        hosts = sorted({i.host for i in j.ranks.values() if i.host})
        facts.append(("ranks seen", f"{len(j.ranks)}"))
        if hosts:
            facts.append(("hosts", ", ".join(hosts[:32]) + (f" (+{len(hosts) - 32})" if len(hosts) > 32 else "")))
    return facts


def _timeline(d: Diagnosis) -> dict[str, Any]:
    tl = view.timeline_lanes(d, width=_TL_WIDTH)
    lanes = []
    for k, lane in enumerate(tl["lanes"]):
        y = _TL_TOP + k * _TL_LANE + _TL_LANE // 2
        points = []
        for p in lane["points"]:
            x = _TL_LEFT + p["pos"]
            where = f"{p['path']}:{p['line']}" if p.get("path") and p.get("line") else (
                f"line {p['line']}" if p.get("line") else "")
            when = p["time"] or ""
            tip = " | ".join(x for x in (p["label"], p["kind"], when, where) if x)
            points.append({"x": round(x, 1), "y": y, "cat": p["cat"], "tip": tip})
        xs = [p["x"] for p in points]
        lanes.append({"rank": lane["rank"], "host": view.clip(lane["host"], 18), "role": lane["role"], "y": y,
                      "x1": min(xs) if xs else _TL_LEFT, "x2": max(xs) if xs else _TL_LEFT, "points": points})
    height = _TL_TOP + len(lanes) * _TL_LANE + 10
    ticks = []
    if lanes:
        all_pts = [p for lane in tl["lanes"] for p in lane["points"]]
        lo = min(p["x"] for p in all_pts) if all_pts else 0
        hi = max(p["x"] for p in all_pts) if all_pts else 0
        for frac in (0.0, 0.25, 0.5, 0.75, 1.0):
            value = lo + (hi - lo) * frac
            label = f"+{value - lo:.1f}s" if tl["axis"] == "time" else f"line {int(value)}"
            ticks.append({"x": round(_TL_LEFT + _TL_WIDTH * frac, 1), "label": label})
    return {"axis": tl["axis"], "lanes": lanes, "height": height, "ticks": ticks, "left": _TL_LEFT,
            "right": _TL_LEFT + _TL_WIDTH, "lanes_left": tl["lanes_left"], "points_left": tl["points_left"],
            "span": tl["span"]}


def _flight(d: Diagnosis) -> dict[str, Any] | None:
    """The Flight Recorder section: summary, per-rank table and a small SVG timeline (render/flight.py)."""
    g = flight_grid(d)
    if g is None:
        return None
    return {**g, "header": text_rows(g)[0], "svg": svg_grid(g)}
