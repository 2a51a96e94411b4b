"""Terminal verdict: a compiler-style diagnostic of the root cause (``-v`` adds findings, cascade, ranks)."""
from __future__ import annotations

import re
import textwrap

from .flight import flight_grid, text_rows
from ..model import Diagnosis, Evidence, Finding
from . import view

#: Longest quoted log line in the terminal (the HTML report keeps more).
MAX_QUOTE = 220
MAX_EVIDENCE = 8
#: Stands for a space that must not break a line (inside a quoted command) while wrapping.
_NBSP = "\x00"


class _Style:
    """ANSI styling, or none at all."""

    def __init__(self, color: bool):
        self.color = color

    def _wrap(self, code: str, s: str) -> str:
        return f"\x1b[{code}m{s}\x1b[0m" if self.color and s else s

    def error(self, s: str) -> str:
        return self._wrap("1;31", s)

    def ok(self, s: str) -> str:
        return self._wrap("1;32", s)

    def warn(self, s: str) -> str:
        return self._wrap("1;33", s)

    def bold(self, s: str) -> str:
        return self._wrap("1", s)

    def gutter(self, s: str) -> str:
        return self._wrap("1;34", s)

    def fix(self, s: str) -> str:
        return self._wrap("32", s)

    def dim(self, s: str) -> str:
        return self._wrap("2", s)


def render_text(d: Diagnosis, *, verbose: bool = False, color: bool = False) -> str:
    """The verdict as terminal text (ANSI colour only when ``color``)."""
    st = _Style(color)
    out: list[str] = []
    n_lines = view.total_lines(d)
    n_inputs = len(d.inputs)
    rc = d.root_cause
    if rc is None:
        seen = view.job_seen(d)
        out.append(f"{st.ok('ok')}: no failure found in {view.plural(n_lines, 'line')} from "
                   f"{view.plural(n_inputs, 'input')}" + (f" ({seen})" if seen else ""))
    else:
        out.extend(_verdict(d, st, verbose))
    out.extend(_flight(d, st))
    for w in view.input_warnings(d):
        out.append(f"{st.warn('warning')}: {view.neutralize(w)}")
    if d.redacted:
        out.append(st.dim("note: hostnames, IP addresses, user names and e-mail addresses are redacted"))
    if verbose:
        out.extend(_verbose(d, st))
    elif rc is None and d.findings:
        out.append(st.dim(f"note: {view.plural(len(d.findings), 'finding')} below the failure threshold "
                          "(-v for details)"))
    if not verbose and rc is None and d.dismissed:
        n = sum(x.count for x in d.dismissed)
        out.append(st.dim(f"note: {view.plural(n, 'error-looking line')} dismissed as harmless or handled "
                          "(-v for the reasons)"))
    return "\n".join(out) + "\n"


def _verdict(d: Diagnosis, st: _Style, verbose: bool = False) -> list[str]:
    rc = d.root_cause
    assert rc is not None
    out = [f"{st.error(f'error[{view.neutralize(rc.id)}]')}{st.bold(': ' + view.neutralize(rc.title))}"]
    evidence = list(rc.evidence)
    paths = list(dict.fromkeys(e.path for e in evidence))
    single = len(paths) == 1
    for e in evidence[:3]:
        out.append(f"  {st.gutter('-->')} {view.neutralize(view.evidence_loc(e))}")
    if len(evidence) > 3:
        out.append(f"  {st.gutter('-->')} {st.dim(f'(+{len(evidence) - 3} more)')}")
    where = view.where(d)
    if where:
        out.append(f"   {st.gutter('=')} {st.bold('where')}: {where}")
    if evidence:
        shown = _distinct(evidence)[:MAX_EVIDENCE]
        out.extend(_quote(shown, st, single, key=0, more=len(evidence) - len(shown)))
    if rc.explanation:
        out.extend(_field("why", rc.explanation, st))
    fix = rc.fix
    if fix.summary or fix.env or fix.commands:
        out.extend(_field("fix", fix.summary or "", st))
        for line in view.fix_lines(fix.env):
            out.append(f"       {st.fix(view.neutralize(line))}")
        for cmd in fix.commands:
            out.append(f"       {st.fix('$ ' + view.neutralize(cmd))}")
    out.append(f"   {st.gutter('=')} {st.bold('confidence')}: {view.percent(rc.confidence)} "
               f"({view.confidence_label(rc.confidence)})" + (f", rule {view.neutralize(rc.rule)}" if rc.rule else ""))
    note = view.cascade_note(d)
    if note:
        # with -v the details follow below: no pointer to an option already given
        out.append(f"   {st.gutter('=')} {st.bold('note')}: {note}" + ("" if verbose else " (-v for details)"))
    rep = d.reproduction
    if rep is not None:
        line = f"{rep.outcome}"
        if rep.reason:
            line += f": {rep.reason}"
        if rep.fix_outcome and rep.fix_outcome != "NOT APPLICABLE":
            fe = " ".join(f"{k}={v}" for k, v in sorted(rep.fix_env.items()))
            line += f"; with the fix ({fe}): {rep.fix_outcome}" if fe else f"; with the fix: {rep.fix_outcome}"
        out.extend(_field("reproduction", line, st))
        if rep.command:
            out.append(f"       {st.dim('$ ' + view.neutralize(rep.command))}")
    return out


#: Lines that say the same thing from another rank (only numbers differ): two are shown, the rest counted.
_SIMILAR_SHOWN = 2


def _distinct(evidence: list[Evidence]) -> list[Evidence]:
    """The evidence without the third and later copies of one message from other ranks (numbers aside)."""
    seen: dict[str, int] = {}
    out = []
    for e in evidence:
        body = re.sub(r"^\S+:\d+:\d+ |^\[[^\]]*\]:?\s?", "", e.text.strip())
        sig = re.sub(r"\d+", "#", body)
        seen[sig] = seen.get(sig, 0) + 1
        if seen[sig] <= _SIMILAR_SHOWN:
            out.append(e)
    return out


def _field(name: str, text: str, st: _Style, width: int = 100) -> list[str]:
    text = view.neutralize(" ".join(text.split()))
    # a `command` quoted in the text stays on one line, so it can be copied as it is
    text = re.sub(r"`[^`]{1,80}`", lambda m: m.group(0).replace(" ", _NBSP), text)
    lines = textwrap.wrap(text, width=width - 7 - len(name), break_on_hyphens=False, break_long_words=False) or [""]
    lines = [ln.replace(_NBSP, " ") for ln in lines]
    out = [f"   {st.gutter('=')} {st.bold(name)}: {lines[0]}"]
    out.extend(f"     {' ' * len(name)}  {rest}" for rest in lines[1:])
    return out


def _quote(evidence: list[Evidence], st: _Style, single: bool, key: int | None, more: int = 0) -> list[str]:
    labels = [str(e.line) if single else view.evidence_loc(e) for e in evidence]
    width = max(len(x) for x in labels)
    pad = " " * (width + 1)
    out = [f"{pad} {st.gutter('|')}"]
    for i, (e, label) in enumerate(zip(evidence, labels)):
        text = view.clip(e.text, MAX_QUOTE)
        if i == key:
            out.append(f"{st.gutter(view.neutralize(label).rjust(width))}  {st.error('>')} {st.bold(text)}")
        else:
            out.append(f"{st.gutter(view.neutralize(label).rjust(width))}  {st.gutter('|')} {text}")
    if more > 0:
        said = f"... {view.plural(more, 'more evidence line')} (all in --format json or --html)"
        out.append(f"{pad} {st.gutter('|')} {st.dim(said)}")
    out.append(f"{pad} {st.gutter('|')}")
    return out


def _verbose(d: Diagnosis, st: _Style) -> list[str]:
    out: list[str] = [""]
    out.append(st.bold(f"findings ({len(d.findings)}):"))
    if not d.findings:
        out.append("  (none)")
    for f in d.findings:
        out.extend(_finding(f, st))
    groups = view.cascade_groups(d)
    if groups:
        out.append("")
        out.append(st.bold("cascade:"))
        for g in groups:
            who = f"ranks {view.rank_ranges(g['ranks'])}" if g["ranks"] else "(ranks unknown)"
            hosts = f" on {', '.join(view.neutralize(h) for h in g['hosts'])}" if g["hosts"] else ""
            out.append(f"  {who}{hosts}: {view.neutralize(g['title'])} [{view.neutralize(g['id'])}]")
    if d.dismissed:
        out.append("")
        out.extend(_dismissed(d, st))
    if d.job.ranks:
        out.append("")
        out.append(st.bold(f"ranks ({len(d.job.ranks)}):"))
        out.extend(_rank_table(d))
    facts = [f"{label} {value}" for label, value in view.job_facts(d.job)]
    if facts:
        out.append("")
        out.append(f"{st.bold('job')}: {view.neutralize(', '.join(facts))}")
    out.append(f"{st.bold('inputs')}: " + ", ".join(f"{view.neutralize(i.path)} ({view.plural(i.lines, 'line')})"
                                                   for i in d.inputs))
    return out


def _dismissed(d: Diagnosis, st: _Style, cap: int = 12) -> list[str]:
    """Error-level lines that are no evidence of the failure, with the reason (failsafe.py)."""
    total = sum(x.count for x in d.dismissed)
    out = [st.bold(f"dismissed ({view.plural(total, 'error line')}):")]
    for x in d.dismissed[:cap]:
        first = x.evidence[0]
        more = f" (+{x.count - 1} like it)" if x.count > 1 else ""
        out.append(f"  {st.gutter(view.neutralize(view.evidence_loc(first)))} {view.clip(first.text, 160)}{more}")
        out.append(f"      {st.dim('why: ' + view.neutralize(x.reason))}")
    if len(d.dismissed) > cap:
        out.append(f"  {st.dim(f'... {len(d.dismissed) - cap} more (see --format json)')}")
    return out


def _finding(f: Finding, st: _Style) -> list[str]:
    ranks = f"ranks {view.rank_ranges(f.ranks)}" if f.ranks else "rank not shown"
    head = (f"  {f.role:<8} {view.neutralize(f.id)}  {view.neutralize(f.title)}  "
            f"({ranks}; rule {view.neutralize(f.rule)}; {view.percent(f.confidence)})")
    out = [st.error(head) if f.role == "root" else head]
    for e in f.evidence[:4]:
        out.append(f"           {st.gutter(view.neutralize(view.evidence_loc(e)))} {view.clip(e.text, 200)}")
    if len(f.evidence) > 4:
        out.append(f"           {st.dim(f'+{len(f.evidence) - 4} more')}")
    return out


def _rank_table(d: Diagnosis) -> list[str]:
    header = ("rank", "host", "pid", "gpu", "nccl", "init", "stage", "last collective", "first error", "role")
    rows = []
    for r in sorted(d.job.ranks)[:256]:
        i = d.job.ranks[r]
        err = ""
        if i.first_error is not None:
            err = f"{view.evidence_loc(i.first_error)} {i.first_error_kind or ''}".strip()
        rows.append((str(r), i.host or "", "" if i.pid is None else str(i.pid), view.gpu_text(i), i.nccl_version or "",
                     i.init_state, view.stage_text(i), view.collective_text(i.last_collective), err, i.role))
    rows = [tuple(view.clip(c, 48) for c in row) for row in rows]
    widths = [max(len(h), *(len(row[k]) for row in rows)) for k, h in enumerate(header)]
    fmt = "  " + "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*header).rstrip()]
    out.extend(fmt.format(*row).rstrip() for row in rows)
    if len(d.job.ranks) > 256:
        out.append(f"  ... {len(d.job.ranks) - 256} more ranks (see --format json or --html)")
    return out


def _flight(d: Diagnosis, st: _Style) -> list[str]:
    """The Flight Recorder block: what the dumps say, and each rank's last collectives (render/flight.py)."""
    g = flight_grid(d)
    if g is None:
        return []
    out = ["", st.bold("flight recorder") + f" (pg {view.neutralize(g['pg'])}):"]
    out.extend(f"  {view.neutralize(s)}" for s in g["summary"])
    rows = [tuple(view.clip(c, 60) for c in row) for row in text_rows(g)]
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    fmt = "  " + "  ".join(f"{{:<{w}}}" for w in widths)
    out.extend(fmt.format(*row).rstrip() for row in rows)
    if g["left"]:
        out.append(f"  ... {g['left']} more ranks (see --format json or --html)")
    return out
