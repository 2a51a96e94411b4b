"""Presentation helpers shared by every renderer: they format what the Diagnosis holds, never recompute it."""
from __future__ import annotations

import re
import shlex
from datetime import datetime
from typing import Any, Iterable

from ..model import Diagnosis, Evidence, Finding, RankInfo
from ..ranks import rank_ranges  # noqa: F401 - re-exported for the renderers

# C0/C1 controls (tab kept) and the bidi/invisible format characters of "Trojan Source" (CVE-2021-42574):
# a log line must not re-colour a terminal or reorder what a reader sees.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


def neutralize(s: Any) -> str:
    """``s`` as text with control and bidi-override characters shown as visible ``\\uXXXX`` escapes."""
    text = "" if s is None else str(s)
    if _UNSAFE.search(text):
        text = _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


def clip(s: Any, limit: int) -> str:
    """Neutralized text, cut to ``limit`` characters with an ellipsis."""
    text = "" if s is None else str(s)
    if len(text) <= limit:
        return neutralize(text)
    # cut first: neutralizing a 64 KiB line only to drop most of it is the slow part of huge reports
    return neutralize(text[: max(limit - 1, 0)]) + "\u2026"


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"


def confidence_label(c: float) -> str:
    return "high" if c >= 0.8 else "medium" if c >= 0.5 else "low"


def percent(c: float) -> str:
    return f"{round(c * 100):d}%"


def total_lines(d: Diagnosis) -> int:
    if d.inputs:
        return sum(i.lines for i in d.inputs)
    return int(d.stats.get("lines", 0) or 0)


def input_warnings(d: Diagnosis) -> list[str]:
    """Per-input warnings (``path: message``) then the diagnosis' own warnings, without repeats."""
    out: list[str] = []
    for info in d.inputs:
        for w in info.warnings:
            out.append(f"{info.path}: {w}")
    for w in d.warnings:
        if w not in out:
            out.append(w)
    return out


def cascade_findings(d: Diagnosis) -> list[Finding]:
    """The cascade as diagnose.py recorded it (``Diagnosis.cascade``), else the findings marked ``cascade``."""
    return list(d.cascade) if d.cascade else [f for f in d.findings if f.role == "cascade"]


def cascade_groups(d: Diagnosis) -> list[dict[str, Any]]:
    """Cascade findings grouped by title: ``[{"title", "id", "ranks", "hosts", "findings"}]``."""
    groups: dict[str, dict[str, Any]] = {}
    for f in cascade_findings(d):
        g = groups.setdefault(f.title, {"title": f.title, "id": f.id, "ranks": set(), "hosts": [],
                                        "findings": []})
        g["ranks"].update(f.ranks)
        for h in f.hosts:
            if h not in g["hosts"]:
                g["hosts"].append(h)
        g["findings"].append(f)
    out = list(groups.values())
    hosts = sorted({i.host for i in d.job.ranks.values() if i.host})
    for g in out:
        g["ranks"] = sorted(g["ranks"])
        # Lines without a rank prefix (a bare traceback) name no rank: say so, not "?". With one host in the job
        # the host is known all the same.
        g["ranks_note"] = "" if g["ranks"] else "not named in these lines"
        if not g["hosts"] and len(hosts) == 1:
            g["hosts"] = hosts
    return out


def cascade_note(d: Diagnosis) -> str | None:
    """One line: which ranks suffered what as a consequence of the root cause."""
    groups = cascade_groups(d)
    if not groups:
        return None
    ranks = sorted({r for g in groups for r in g["ranks"]})
    titles = "; ".join(neutralize(g["title"]) for g in groups[:3])
    if len(groups) > 3:
        titles += f"; +{len(groups) - 3} more"
    if ranks:
        who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {rank_ranges(ranks)}"
        return f"{who} failed as a consequence ({titles})"
    return f"{plural(sum(len(g['findings']) for g in groups), 'consequence')} of the root cause ({titles})"


def job_seen(d: Diagnosis) -> str:
    """What the log showed of the job, for a verdict without a failure: ``2 ranks on vm, NCCL 2.28.9``."""
    bits = []
    ranks = d.job.ranks
    n = len(ranks) or (d.job.world_size or 0)
    if n:
        hosts = sorted({i.host for i in ranks.values() if i.host})
        on = f" on {hosts[0]}" if len(hosts) == 1 else f" on {len(hosts)} hosts" if hosts else ""
        bits.append(plural(n, "rank") + on)
    if d.job.nccl_versions:
        bits.append("NCCL " + ", ".join(d.job.nccl_versions))
    if d.job.torch_version:
        bits.append(f"torch {d.job.torch_version}")
    return neutralize(", ".join(bits))


#: What a rank named only by inference rests on (job.py ``rank_of``; agents.py for a local rank).
_RANK_BASIS = {
    "local_rank": "the global rank is taken from its local rank: the input shows one node only",
    "spawn": "the rank is the child's torch.multiprocessing.spawn process index",
}


def where(d: Diagnosis) -> str | None:
    """``ranks 0-1 on vm, GPU 0 (busId 60)``: the root cause's ranks grouped by host and GPU (first four
    groups), else its hosts; a host only the evidence lines name is said to have reported it."""
    rc = d.root_cause
    if rc is None:
        return None
    groups: dict[tuple[str, str], list[int]] = {}
    for r in sorted(rc.ranks):
        info = d.job.ranks.get(r)
        key = (info.host or "", gpu_text(info)) if info is not None else ("", "")
        groups.setdefault(key, []).append(r)
    parts: list[str] = []
    for (host, gpu), ranks in list(groups.items())[:4]:
        text = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {rank_ranges(ranks)}"
        if host:
            text += f" on {host}"
        if gpu:
            text += f", {gpu}"
        parts.append(text)
    basis = {d.job.extra.get("rank_basis", {}).get(r) for r in rc.ranks} & set(_RANK_BASIS)
    if parts and basis:  # no line states the rank: say what it rests on (job.py rank_of)
        parts[-1] += " (" + "; ".join(_RANK_BASIS[b] for b in sorted(basis)) + ")"
    left = sum(len(v) for v in list(groups.values())[4:])
    if left:
        parts.append(f"+{plural(left, 'more rank')}")
    shown_hosts = {h for h, _ in groups}
    extra_hosts = [h for h in rc.hosts if h not in shown_hosts]
    if extra_hosts:
        said = ", ".join(extra_hosts[:3]) + (f" and {len(extra_hosts) - 3} more" if len(extra_hosts) > 3 else "")
        parts.append(f"reported on {said}" if parts else f"host {said}")
    if rc.gpus and not any(gpu for _, gpu in groups):
        parts.append("GPU " + ", ".join(dict.fromkeys(rc.gpus)))
    return neutralize("; ".join(parts)) if parts else None


def gpu_text(info: RankInfo) -> str:
    bits = []
    if info.cuda_dev is not None:
        bits.append(f"GPU {info.cuda_dev}")
    if info.bus_id:
        bits.append(f"busId {info.bus_id}")
    if len(bits) == 2:
        return f"{bits[0]} ({bits[1]})"
    return bits[0] if bits else ""


def stage_text(info: Any) -> str:
    """A rank's last stage as ``connect P2P/IPC (line 57)``; empty when the log shows none."""
    st = getattr(info, "stage", None)
    if st is None or not st:
        return ""
    out = st.label.replace("_", " ")
    if info.stage_transport and st.label in ("connect", "connected"):
        out += f" {info.stage_transport}"
    if info.stage_loc is not None:
        out += f" (line {info.stage_loc.line})"
    return out


def collective_text(c: dict[str, Any] | None) -> str:
    """A last-collective dict as ``op k=v ...`` (keys as job.py recorded them)."""
    if not c:
        return ""
    op = None
    for key in ("op", "optype", "OpType", "opType", "name", "coll"):
        if c.get(key):
            op = str(c[key])
            break
    rest = " ".join(f"{k}={v}" for k, v in c.items() if str(v) != op and not isinstance(v, (dict, list)))
    return neutralize(f"{op} {rest}".strip() if op else rest)


def evidence_loc(e: Evidence) -> str:
    return f"{e.path}:{e.line}"


def fix_lines(env: dict[str, str]) -> list[str]:
    """``export VAR=value`` lines, values shell-quoted when they need it (a bad name becomes a comment)."""
    out = []
    for k, v in sorted(env.items()):
        if _ENV_NAME.fullmatch(k):
            out.append(f"export {k}={shlex.quote(str(v))}")
        else:  # a name bound from log text that is no shell variable: never emit it as a command
            out.append(f"# not a valid variable name: {shlex.quote(k)}={shlex.quote(str(v))}")
    return out


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


_NETWORK_LABELS = {"bootstrap": "bootstrap interface", "network": "network transport", "net": "network transport",
                   "interfaces": "socket interfaces", "ib": "InfiniBand devices", "ib_hcas": "InfiniBand devices"}


def nccl_reported(job: Any, limit: int = 300) -> tuple[list[tuple[str, str]], int]:
    """What NCCL said about the network, the communicators and the topology, as (label, sentence) rows a person
    reads ("communicator 0xbddc31ea…": "2 ranks (0-1); init completed by 0 of 2"), not dotted dict keys."""
    rows: list[tuple[str, str]] = []
    for key, value in (job.network or {}).items():
        if value in (None, "", [], {}):
            continue
        label = _NETWORK_LABELS.get(str(key), str(key).replace("_", " "))
        rows.append((neutralize(label), clip(_plain(value), 500)))
    comms = job.communicators or {}
    for comm, info in list(comms.items())[:limit]:
        if not isinstance(info, dict):
            continue
        ranks = info.get("ranks") or {}
        n = info.get("nranks") or 0
        parts = [plural(int(n), "rank") if n else "size unknown"]
        if ranks:
            parts[0] += f" (seen: {rank_ranges(sorted(int(r) for r in ranks))})"
        done = info.get("complete")
        if isinstance(done, int):
            parts.append(f"init completed by {done} of {n or len(ranks)}")
        name = "communicator" if comm == "?" else f"communicator {clip(comm, 20)}"
        rows.append((neutralize(name), neutralize("; ".join(parts))))
    left = max(len(comms) - limit, 0)
    topo_rows, topo_left = flatten(job.topology or {}, limit=max(limit - len(rows), 0))
    rows.extend((k.replace(".", " ").replace("_", " "), v) for k, v in topo_rows)
    return rows, left + topo_left


def _plain(value: Any) -> str:
    if isinstance(value, dict):
        return "; ".join(f"{k} {_plain(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_plain(v) for v in value)
    return str(value)


def flatten(obj: Any, prefix: str = "", limit: int = 300) -> tuple[list[tuple[str, str]], int]:
    """Nested dicts/lists as ``(dotted.key, value)`` rows, at most ``limit``; returns (rows, rows left out).

    An empty dict or list gives no rows (not a ``{}`` row)."""
    rows: list[tuple[str, str]] = []
    left = 0
    if not obj and not prefix:
        return rows, left

    def walk(o: Any, key: str, depth: int) -> None:
        nonlocal left
        if isinstance(o, dict) and o and depth < 4:
            for k, v in o.items():
                walk(v, f"{key}.{k}" if key else str(k), depth + 1)
            return
        if isinstance(o, (list, tuple)) and o and depth < 4 and any(isinstance(x, (dict, list, tuple)) for x in o):
            for i, v in enumerate(o):
                walk(v, f"{key}[{i}]", depth + 1)
            return
        if len(rows) >= limit:
            left += 1
            return
        if isinstance(o, (list, tuple)):
            value = ", ".join(str(x) for x in o)
        else:
            value = "" if o is None else str(o)
        rows.append((neutralize(key), clip(value, 500)))

    walk(obj, prefix, 0)
    return rows, left


# ---- timeline --------------------------------------------------------------------------------------------

TIMELINE_CATEGORIES = ("init-start", "init-ok", "warn", "error", "timeout", "exit", "other")

_DATE_TIME = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ T_](\d\d):(\d\d):(\d\d)(\.\d+)?")
_GLOG = re.compile(r"^\[?[IWEF]?(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)(\.\d+)?")
_TOD = re.compile(r"(\d\d):(\d\d):(\d\d)(\.\d+)?")


def _parse_time(t: Any) -> tuple[str, float] | None:
    """(precision, seconds): "date" seconds since epoch-ish, or "tod" seconds of the day."""
    if not t:
        return None
    s = str(t)
    m = _DATE_TIME.search(s)
    if m:
        y, mo, d, hh, mm, ss = (int(x) for x in m.groups()[:6])
        try:
            base = datetime(y, mo, d, hh, mm, ss).timestamp()
        except (ValueError, OverflowError):
            return None
        return "date", base + float(m.group(7) or 0)
    m = _GLOG.match(s)
    if m:
        mo, d, hh, mm, ss = (int(x) for x in m.groups()[:5])
        try:
            base = datetime(2000, mo, d, hh, mm, ss).timestamp()
        except (ValueError, OverflowError):
            return None
        return "glog", base + float(m.group(6) or 0)
    m = _TOD.search(s)
    if m:
        hh, mm, ss = (int(x) for x in m.groups()[:3])
        return "tod", hh * 3600 + mm * 60 + ss + float(m.group(4) or 0)
    return None


def timeline_category(kind: str) -> str:
    k = (kind or "").lower()
    if "init" in k and ("complete" in k or k.endswith(".ok") or "done" in k):
        return "init-ok"
    if "init" in k and "start" in k:
        return "init-start"
    if "timeout" in k or "timed_out" in k:
        return "timeout"
    if "exit" in k or "child_failed" in k or "childfailed" in k or "signal" in k or "killed" in k:
        return "exit"
    if "warn" in k:
        return "warn"
    if "error" in k or "traceback" in k or "exception" in k or "fail" in k or "abort" in k:
        return "error"
    return "other"


def _entry(e: dict[str, Any]) -> dict[str, Any]:
    kind = str(e.get("kind") or e.get("event") or "")
    label = e.get("label") or e.get("what") or e.get("title") or e.get("text") or kind
    return {"kind": kind, "cat": timeline_category(kind), "time": e.get("time"), "path": e.get("path"),
            "line": e.get("line"), "label": clip(label, 200)}


def timeline_lanes(d: Diagnosis, max_lanes: int = 64, max_points: int = 40, width: float = 1.0) -> dict[str, Any]:
    """Per-rank timeline points positioned on [0, width].

    Reads ``RankInfo.timeline`` (else ``Diagnosis.timeline`` entries that carry a ``rank``); each entry is a
    dict with ``kind`` (or ``event``), optional ``time``, ``path``, ``line``, ``label``/``text``. Positions use
    wall-clock times when every point has one in a comparable format, else log line order.
    """
    raw: dict[int, list[Any]] = {r: d.job.ranks[r].timeline for r in sorted(d.job.ranks) if d.job.ranks[r].timeline}
    if not raw:
        for e in d.timeline:
            if isinstance(e, dict) and isinstance(e.get("rank"), int):
                raw.setdefault(e["rank"], []).append(e)
    lanes_left = max(len(raw) - max_lanes, 0)
    ranks = sorted(raw)[:max_lanes]
    points_left = 0
    lanes: list[dict[str, Any]] = []
    for r in ranks:
        entries = [e for e in raw[r] if isinstance(e, dict)]
        if len(entries) > max_points:
            # keep the first and the last points: start of init and the end of the rank matter most
            head = max_points // 2
            points_left += len(entries) - max_points
            entries = entries[:head] + entries[len(entries) - (max_points - head):]
        pts = [_entry(e) for e in entries]
        info = d.job.ranks.get(r)
        lanes.append({"rank": r, "host": neutralize(info.host) if info and info.host else "",
                      "role": info.role if info else "", "points": pts})
    all_pts = [p for lane in lanes for p in lane["points"]]
    parsed = [_parse_time(p["time"]) for p in all_pts]
    kinds = {p[0] for p in parsed if p}
    axis = "order"
    if all_pts and all(parsed) and len(kinds) == 1:
        axis = "time"
        for p, t in zip(all_pts, parsed):
            p["x"] = t[1]  # type: ignore[index]
    else:
        for i, p in enumerate(all_pts):
            p["x"] = float(p["line"]) if isinstance(p["line"], int) else float(i)
    if all_pts:
        lo = min(p["x"] for p in all_pts)
        hi = max(p["x"] for p in all_pts)
        span = hi - lo
        for p in all_pts:
            p["t"] = p["x"] - lo
            p["pos"] = width * ((p["x"] - lo) / span if span > 0 else 0.5)
    span_s = (max(p["x"] for p in all_pts) - min(p["x"] for p in all_pts)) if all_pts and axis == "time" else None
    return {"axis": axis, "lanes": lanes, "lanes_left": lanes_left, "points_left": points_left, "span": span_s}


def job_facts(job: Any, backend: bool = False) -> list[tuple[str, str]]:
    """(label, value) pairs of what the job model knows about the job, in display order (shared by renderers)."""
    facts: list[tuple[str, str]] = []
    if job.nccl_versions:
        facts.append(("NCCL", ", ".join(job.nccl_versions)))
    if job.torch_version:
        facts.append(("torch", str(job.torch_version)))
    if job.cuda_driver:
        facts.append(("CUDA driver", str(job.cuda_driver)))
    if job.world_size is not None:
        facts.append(("world size", str(job.world_size)))
    if backend and job.backend:
        facts.append(("backend", str(job.backend)))
    return facts
