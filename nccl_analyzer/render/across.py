"""Renderers for ``diff`` (text, Markdown, JSON, HTML) and ``fleet`` (text, CSV, JSON, Parquet, HTML)."""
from __future__ import annotations

import csv
import io
import json
from collections import Counter
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from ..resources import reports_dir
from . import view


def _fmt(value: Any) -> str:
    if value is None or value == [] or value == "":
        return "(not in log)"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


def _verdict(side: dict[str, Any]) -> str:
    rc = side["root_cause"]
    return "no failure" if rc is None else f"{rc['id']}: {rc['title']}"


# -- diff ---------------------------------------------------------------------------------------------------
def diff_text(d: Any, verbose: bool = False) -> str:
    """The differences a person reads first: verdicts, then each difference, most suspicious first."""
    data = d.to_dict()
    good = ", ".join(i["path"] for i in data["good"]["inputs"]) or "?"
    bad = ", ".join(i["path"] for i in data["bad"]["inputs"]) or "?"
    out = [f"good: {good}", f"      {_verdict(data['good'])}", f"bad:  {bad}", f"      {_verdict(data['bad'])}", ""]
    shown = d.differences if verbose else d.of_note
    if not d.differences:
        out.append(f"no differences in the {len(d.compared)} facts compared")
    else:
        out.append(f"{len(d.of_note)} difference(s) of note, {len(d.differences) - len(d.of_note)} minor"
                   f" ({len(d.compared)} facts compared), most suspicious first:")
        labels = [f"[{x.family}] {x.key}" for x in shown]
        width = max((len(x) for x in labels), default=0)
        for label, x in zip(labels, shown):
            out.append(f"  {label.ljust(width)}  {_fmt(x.good)}  ->  {_fmt(x.bad)}")
        if not verbose and len(shown) < len(d.differences):
            out.append(f"  (+{len(d.differences) - len(shown)} minor: facts only one log shows, hosts, GPU bus ids;"
                       " -v shows them)")
    return view.neutralize("\n".join(out)) + "\n"


def diff_markdown(d: Any) -> str:
    data = d.to_dict()

    def cell(v: Any) -> str:
        return "`" + _fmt(v).replace("`", "'").replace("|", "\\|") + "`"

    out = ["## nccl-analyze diff", "",
           f"- **good**: {cell([i['path'] for i in data['good']['inputs']])} — {_verdict(data['good'])}",
           f"- **bad**: {cell([i['path'] for i in data['bad']['inputs']])} — {_verdict(data['bad'])}", ""]
    if not d.differences:
        out.append(f"No differences in the {len(d.compared)} facts compared.")
    else:
        out += ["| family | fact | good | bad | of note |", "| --- | --- | --- | --- | --- |"]
        for x in d.differences:
            out.append(f"| {x.family} | {x.key.replace('|', '/')} | {cell(x.good)} | {cell(x.bad)} | "
                       f"{'yes' if x.of_note else 'minor'} |")
    return view.neutralize("\n".join(out)) + "\n"


def diff_json(d: Any) -> str:
    return json.dumps(d.to_dict(), sort_keys=True, indent=2, default=str) + "\n"


def _env() -> Environment:
    env = Environment(loader=FileSystemLoader(str(reports_dir())), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["fmt"] = _fmt
    return env


def diff_html(d: Any) -> str:
    """A self-contained page: both verdicts and the difference table (autoescaped)."""
    data = d.to_dict()
    return _env().get_template("diff.html.j2").render(
        css=(reports_dir() / "report.css").read_text(encoding="utf-8"), data=data, diffs=d.differences,
        good=_verdict(data["good"]), bad=_verdict(data["bad"]), compared=len(d.compared))


# -- fleet --------------------------------------------------------------------------------------------------
def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, list):
        return " ".join(str(x) for x in v)
    return str(v)


def fleet_text(res: Any) -> str:
    rows, rec = res.rows, res.recurrence()
    out = [f"{len(rows)} job(s) ({res.engine} engine)"]
    for cause, n in rec["causes"].items():
        out.append(f"  {n:5d}  {cause}")
    out.append("")
    w = max((len(r["job"]) for r in rows), default=3)
    for r in rows:
        cause = r["root_cause"] or ("unreadable: " + r["error"] if r["error"] else "no failure")
        extra = []
        if r["culprit_ranks"]:
            extra.append("ranks " + view.rank_ranges(r["culprit_ranks"]))
        if r["hosts"]:
            extra.append(",".join(r["hosts"]))
        if r["confidence"] is not None:
            extra.append(f"{round(100 * r['confidence'])}%")
        out.append(f"{r['job'].ljust(w)}  {cause}" + (f"  ({'; '.join(extra)})" if extra else ""))
    for title, key in (("hosts named as culprit in several jobs (bad-node candidates)", "hosts"),
                       ("GPUs named as culprit in several jobs", "gpus"),
                       ("recurring failure signatures", "signatures")):
        if rec[key]:
            out += ["", title + ":"]
            for item in rec[key][:20]:
                jobs = ", ".join(item["jobs"][:5]) + (f", +{item['count'] - 5} more" if item["count"] > 5 else "")
                out.append(f"  {item['count']:4d}  {item['value']}  ({jobs})")
    return view.neutralize("\n".join(out)) + "\n"


def fleet_csv(res: Any) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(res.columns)
    for r in res.rows:
        w.writerow([_cell(r[c]) for c in res.columns])
    return buf.getvalue()


def fleet_json(res: Any) -> str:
    return json.dumps(res.to_dict(), sort_keys=True, indent=2, default=str) + "\n"


def fleet_parquet(res: Any) -> bytes:
    """Parquet bytes (needs pyarrow: the ``fleet`` extra)."""
    df = res.dataframe()
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return buf.getvalue()


def _bars(counts: list[tuple[str, int]], width: int = 560, bar: int = 18) -> dict[str, Any]:
    top = max((n for _, n in counts), default=1) or 1
    return {"height": bar * len(counts) + 4, "width": width,
            "rows": [{"label": k, "n": n, "y": i * bar + 2, "w": max(2, round((width - 260) * n / top))}
                     for i, (k, n) in enumerate(counts)]}


def fleet_html(res: Any) -> str:
    """Self-contained fleet report: summary, plots (causes over time, culprit hosts/GPUs), the job table."""
    rows, rec = res.rows, res.recurrence()
    days: dict[str, Counter] = {}
    for r in rows:
        t = (r["first_error_time"] or "")[:10]
        if r["root_cause"] and len(t) == 10 and t[4] == "-":
            days.setdefault(t, Counter())[r["root_cause"]] += 1
    causes = sorted({c for cnt in days.values() for c in cnt})
    palette = ["#b3261e", "#1f5fa8", "#2e7d32", "#8e24aa", "#ef6c00", "#00838f", "#6d4c41", "#546e7a",
               "#c2185b", "#827717"]
    colours = {c: palette[i % len(palette)] for i, c in enumerate(causes)}
    top = max((sum(c.values()) for c in days.values()), default=1)
    cols = []
    for i, (day, cnt) in enumerate(sorted(days.items())):
        y, segs = 180, []
        for c in causes:
            h = round(160 * cnt.get(c, 0) / top)
            if h:
                y -= h
                segs.append({"y": y, "h": h, "colour": colours[c], "label": f"{day} {c}: {cnt[c]}"})
        cols.append({"x": 40 + i * 28, "day": day, "segs": segs})
    host_counts = [(h["value"], h["count"]) for h in rec["hosts"][:15]]
    gpu_counts = [(g["value"], g["count"]) for g in rec["gpus"][:15]]
    return _env().get_template("fleet.html.j2").render(
        css=(reports_dir() / "report.css").read_text(encoding="utf-8"), rows=rows, rec=rec, engine=res.engine,
        timeline={"cols": cols, "width": max(200, 60 + 28 * len(cols)), "legend": [(c, colours[c]) for c in causes]},
        hosts=_bars(host_counts), gpus=_bars(gpu_counts), cell=_cell)
