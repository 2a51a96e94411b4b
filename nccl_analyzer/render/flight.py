"""The Flight Recorder table every renderer shows: per rank, its last collectives of the stuck process group
(from ``JobModel.extra["flight"]``, which flight/ filled; nothing is recomputed here)."""
from __future__ import annotations

import os
from typing import Any

from ..model import Diagnosis
from ..ranks import rank_ranges

#: Sequence ids shown (the last ones up to the stuck collective's and one after it).
COLUMNS = 6
MAX_ROWS = 64
#: cell category -> the short mark the text and Markdown tables print
MARKS = {"done": "done", "retired": "ended", "pending": "waiting", "missing": "never called", "mismatch": "MISMATCH",
         "diverged": "other call site", "unknown": "?", "none": ""}


def flight_grid(d: Diagnosis) -> dict[str, Any] | None:
    """``{"summary": [str], "pg", "cols": [seq], "rows": [{"rank", "dump", "cells": [...], "at"}], "left"}`` or None
    when no dump was read."""
    fl = d.job.extra.get("flight") if d.job else None
    if not fl or not fl.get("dumps"):
        return None
    stuck = fl.get("stuck")
    per_rank = fl.get("per_rank", {})
    pg = stuck["pg"] if stuck else _common_pg(per_rank)
    p2p = bool(stuck and stuck.get("p2p"))
    seen: dict[str, dict[int, dict[str, Any]]] = {}
    for r, info in per_rank.items():
        seen[r] = {e["seq"]: e for e in info["tail"] if e["pg"] == pg and bool(e["p2p"]) == p2p}
    all_seqs = sorted({s for m in seen.values() for s in m})
    if stuck:
        upto = [s for s in all_seqs if s <= stuck["seq"]]
        cols = upto[-(COLUMNS - 1):] + [s for s in all_seqs if s > stuck["seq"]][:1]
        if stuck["seq"] not in cols:
            cols.append(stuck["seq"])
    else:
        cols = all_seqs[-COLUMNS:]
    cols = sorted(set(cols))
    mismatch = {(m["pg"], m["seq"]): set(m["culprits"]) for m in fl.get("mismatches", [])}
    dv = fl.get("divergence")
    diverged = {(dv["pg"], dv["seq"]): set(dv["culprits"])} if dv else {}
    rows = []
    for r in fl["ranks"][:MAX_ROWS]:
        info = per_rank.get(str(r))
        cells = []
        for s in cols:
            e = seen.get(str(r), {}).get(s)
            cells.append(_cell(r, s, e, info, stuck, mismatch.get((pg, s), set()), diverged.get((pg, s), set())))
        at = None
        if info:
            pend = info.get("pending")
            at = (pend or {}).get("site") or ((info.get("last") or {}).get("site"))
        rows.append({"rank": r, "dump": os.path.basename(info["path"]) if info else "no dump", "cells": cells,
                     "at": at or "", "at_short": _short_site(at)})
    return {"summary": _summary(fl), "pg": pg, "p2p": p2p, "cols": cols, "rows": rows,
            "left": max(len(fl["ranks"]) - MAX_ROWS, 0), "stuck_seq": stuck["seq"] if stuck else None}


def _short_site(site: str | None) -> str:
    """``/long/path/to/train.py:12 (step)`` -> ``to/train.py:12 (step)`` (the table's column; the verdict keeps it whole)."""
    if not site:
        return ""
    path, _, rest = site.partition(":")
    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[-2:]) + ":" + rest


def _common_pg(per_rank: dict[str, Any]) -> str:
    counts: dict[str, int] = {}
    for info in per_rank.values():
        for e in info["tail"]:
            counts[e["pg"]] = counts.get(e["pg"], 0) + 1
    return max(counts, key=lambda k: counts[k]) if counts else "0"


def _cell(r: int, s: int, e: dict[str, Any] | None, info: dict[str, Any] | None, stuck: dict[str, Any] | None,
          odd: set[int], diverged: set[int]) -> dict[str, Any]:
    if e is not None:
        op = e["op"].split(":", 1)[-1]
        # gloo records no CUDA events: its entries stay 'scheduled' and 'retired' means ended, well or not
        done = "done" if e["state"] == "completed" else "retired"
        cat = "mismatch" if r in odd else "diverged" if r in diverged else (done if e["done"] else "pending")
        state = e["state"] + (", retired" if e["retired"] else "")
        tip = f"rank {r} #{s}: {e['op']} {e['sizes']} ({state})" + (f" at {e['site']}" if e["site"] else "")
        return {"seq": s, "cat": cat, "op": op, "label": f"{op} {MARKS[cat]}", "tip": tip}
    if info is None:
        return {"seq": s, "cat": "unknown", "op": "", "label": "?", "tip": f"rank {r}: no dump"}
    if stuck and s == stuck["seq"] and r in stuck.get("missing", []):
        return {"seq": s, "cat": "missing", "op": "", "label": MARKS["missing"],
                "tip": f"rank {r} never called #{s} (its dump ends before it)"}
    last = (info.get("last") or {}).get("seq")
    if last is not None and s > last:
        return {"seq": s, "cat": "none", "op": "", "label": "", "tip": f"rank {r}: not recorded"}
    return {"seq": s, "cat": "unknown", "op": "", "label": "?", "tip": f"rank {r}: not in the dump's window"}


def _summary(fl: dict[str, Any]) -> list[str]:
    dumps = fl["dumps"]
    out = [f"{len(dumps)} dump{'s' if len(dumps) != 1 else ''} read"
           + (f" (rank{'s' if len(fl['with_dump']) > 1 else ''} {rank_ranges(fl['with_dump'])})" if fl["with_dump"] else "")
           + (f"; no dump from rank{'s' if len(fl['without_dump']) > 1 else ''} {rank_ranges(fl['without_dump'])}"
              " (normal for a stuck or dead rank; the analysis uses the dumps there are)" if fl["without_dump"] else "")]
    if fl.get("unreadable"):
        out.append(f"{len(fl['unreadable'])} file(s) not readable as dumps: "
                   + "; ".join(f"{os.path.basename(u['path'])}: {u['reason']}" for u in fl["unreadable"][:3]))
    st = fl.get("stuck")
    if st:
        seq_kind = "p2p_seq_id" if st["p2p"] else "collective_seq_id"
        who = rank_ranges(st["culprits"]) if st["culprits"] else "?"
        out.append(f"first collective not finished by every rank when the dumps were taken: {st['profiling_name']} "
                   f"(pg {st['pg']}, {seq_kind} {st['seq']}); {_reason(st)}; odd rank(s) out: {who}")
        bh = fl.get("behind")
        if bh and len(bh["ranks"]) < len(bh["positions"]):
            out.append(f"furthest behind: rank(s) {rank_ranges(bh['ranks'])} (first unfinished or next id #{bh['seq']}; "
                       "the others got further)")
    else:
        out.append("every recorded collective finished on every rank that recorded it")
    return out


def _reason(st: dict[str, Any]) -> str:
    kind = st["kind"]
    if kind == "mismatch":
        return "ranks disagree on its " + "/".join(st["what"])
    if kind == "missing":
        return f"rank(s) {rank_ranges(st['missing'])} never called it"
    if kind == "no_dump":
        return f"every dump recorded it; rank(s) {rank_ranges(st['no_dump'])} left no dump"
    if kind == "not_started":
        return f"it had not started on rank(s) {rank_ranges(st['culprits'])}"
    if st["done"]:
        return f"rank(s) {rank_ranges(st['waiting'])} had not finished it"
    return "every rank recorded it and none had finished it"


def text_rows(g: dict[str, Any], width: int = 28) -> list[tuple[str, ...]]:
    """Header + rows for a plain table (text and Markdown)."""
    kind = "p2p" if g["p2p"] else "#"
    header = ("rank", "dump", *(f"{kind}{s}" + (" (stuck)" if s == g["stuck_seq"] else "") for s in g["cols"]),
              "waiting at / last call site (file:line)")
    rows = [header]
    for row in g["rows"]:
        rows.append((str(row["rank"]), row["dump"], *(c["label"][:width] for c in row["cells"]), row["at_short"]))
    return rows


def svg_grid(g: dict[str, Any], cell_w: int = 120, cell_h: int = 22, left: int = 70, top: int = 24) -> dict[str, Any]:
    """Geometry for the HTML report's small timeline: one row per rank, one box per sequence id."""
    boxes = []
    for i, row in enumerate(g["rows"]):
        y = top + i * (cell_h + 4)
        for j, c in enumerate(row["cells"]):
            boxes.append({"x": left + j * (cell_w + 4), "y": y, "w": cell_w, "h": cell_h, "cat": c["cat"],
                          "label": c["op"][:16], "tip": c["tip"]})
    heads = [{"x": left + j * (cell_w + 4) + cell_w // 2, "label": f"#{s}" + (" stuck" if s == g["stuck_seq"] else "")}
             for j, s in enumerate(g["cols"])]
    lanes = [{"y": top + i * (cell_h + 4) + cell_h // 2 + 4, "label": f"rank {row['rank']}"} for i, row in enumerate(g["rows"])]
    width = left + len(g["cols"]) * (cell_w + 4) + 10
    height = top + len(g["rows"]) * (cell_h + 4) + 6
    return {"boxes": boxes, "heads": heads, "lanes": lanes, "width": width, "height": height}
