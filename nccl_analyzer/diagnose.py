"""Rule hits + job model -> one root cause, its symptoms and cascade, per-rank roles and a confidence."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .engine.run import EVIDENCE_CAP, Hit, make_fix, render_template, render_title
from .model import Evidence, Finding, RootCause
from .ranks import rank_ranges

if TYPE_CHECKING:  # pragma: no cover
    from .job import JobBuilder
    from .messages import Tables

_ROLE_ORDER = {"root": 0, "symptom": 1, "cascade": 2}
#: Two root candidates closer than this in rule confidence are told apart by which came first in time.
CLOSE = 0.1


@dataclass(slots=True)
class Verdict:
    """What ``diagnose`` decided."""

    root: RootCause | None
    findings: list[Finding]
    cascade: list[Finding]
    root_hit: Hit | None = None


def explains(a: Hit, b: Hit) -> bool:
    """Whether hit ``a`` (a cause) accounts for hit ``b``: ``a``'s rule lists ``b``'s rule id or taxonomy id."""
    if a.rule.taxonomy == b.rule.taxonomy:
        return False
    ex = a.rule.explains
    return b.rule.id in ex or b.rule.taxonomy in ex


def _before(a: Hit, b: Hit) -> bool:
    if a.time is not None and b.time is not None and a.time != b.time:
        return a.time < b.time
    return a.seq < b.seq if a.key is not None and b.key is not None and a.key.path == b.key.path else False


def _lagging(builder: "JobBuilder") -> set[int]:
    """Ranks the job model says stopped advancing: desync-named, or behind their peers' last collective."""
    out = set(builder.lagging)
    pos: dict[int, float] = {}
    for r, c in builder.collectives.items():
        v = c.get("last_completed")
        if v is None and c.get("seq") is not None:
            v = float(c["seq"]) - 1
        if v is not None:
            try:
                pos[r] = float(v)
            except (TypeError, ValueError):
                continue
    if len(set(pos.values())) > 1:
        lo = min(pos.values())
        out |= {r for r, v in pos.items() if v == lo}
    return out


#: A launcher's per-line tag on a cause line ("[trainer1|5]:", torchrun's --log-line-prefix-template; torchx's
#: "trainer/1 [1]:", whose replica is a node) that gave the line no global rank: which number is the local rank, on
#: which node, is unknown.
_UNREAD_TAG = re.compile(r"\s*(?:[A-Za-z_][\w-]*/\d+ )?\[[^\]\s]*\d[^\]\s]*\]:")


def _first_failed(builder: "JobBuilder", evidence: tuple[Evidence, ...] = ()) -> set[int]:
    """The rank torchrun saw fail first, when it failed by itself (an exit status, or SIGABRT: abort() called in
    the process, e.g. std::terminate as gloo / NCCL threads are destroyed after an exception; not a signal sent
    from outside): the best attribution for a root cause whose lines carry no rank (a traceback printed before
    the rank prefix, or by the program's own handler)."""
    for r, e in builder.exits.items():
        code = e.get("exitcode")
        if e.get("first_observed") and code is not None and (int(code) > 0 or int(code) == -6):
            return {r}
    # No failure report (a console-only log, a paste that lost it): the agent's own "failed (exitcode: 1) local_rank:
    # 1" lines. One worker that ended by itself is the culprit, where its global rank is known (on one node, its local
    # rank: the report then says what the rank rests on); several, or a rank that cannot be told, name none. Nor
    # where the cause's own lines carry a launcher tag no rank was read from (it may say another node's rank).
    if any(_UNREAD_TAG.match(e.text) for e in evidence):
        return set()
    own: set[int] = set()
    for ev in getattr(builder, "agent_failed", ()):
        try:
            code = int(ev.fields.get("exitcode"))
        except (TypeError, ValueError):
            continue
        if code > 0 or code == -6:
            r = builder.rank_of(ev)
            if r is None:
                return set()
            own.add(r)
    return own if len(own) == 1 else set()


def _attempt_failed(builder: "JobBuilder", evidence: tuple[Evidence, ...],
                    restart: frozenset[str] = frozenset()) -> set[int] | None:
    """Where torchelastic restarted the workers (an agent printed more than one "failed (exitcode: N) local_rank: K"
    line, one per failed attempt, and its "will restart worker group" line, agent/server/api.py), the failure report at the end (its "first observed failure")
    describes the LAST attempt only. The worker of the cause's attempt is the one the agent reported failed first
    after the cause's first line, in the same input: {its rank}, or set() when it ended by a signal sent from outside;
    None when no agent restarted (the report stands) or no such line follows. ``restart``: the kinds of the agent's
    restart line (messages/events.toml ``[restarted] restart``)."""
    seen: dict[tuple[Any, Any, Any], int] = {}
    for ev in getattr(builder, "agent_failed", ()):
        k = (ev.path, ev.host, ev.fields.get("agent_pid"))
        seen[k] = seen.get(k, 0) + 1
    # two such lines alone may be two workers of one attempt (older torch logs each): the agent's restart line
    # ("will restart worker group") must be in the input too
    kinds = getattr(builder, "kinds", {})
    if not evidence or not any(n > 1 for n in seen.values()) or not any(kinds.get(k) for k in restart):
        return None
    first = min(evidence, key=lambda e: e.line)
    after = [ev for ev in builder.agent_failed if ev.path == first.path and ev.line > first.line]
    if not after:
        return None
    ev = min(after, key=lambda e: e.line)
    try:
        code = int(ev.fields.get("exitcode"))
    except (TypeError, ValueError):
        return None
    r = builder.rank_of(ev)
    return {r} if r is not None and (code > 0 or code == -6) else set()


def pick_root(hits: list[Hit], builder: "JobBuilder") -> tuple[Hit | None, list[Hit]]:
    """The root-cause hit among root-capable hits, and the unexplained competitors it beat.

    A candidate explained by another (and not explaining it back) is out. Among the rest: highest rule
    confidence, a small bonus when the job model independently blames the same ranks (lagging / no
    progress), and between close candidates the one that happened first.
    """
    roots = [h for h in hits if h.rule.role == "root"]
    if not roots:
        return None, []
    dominated = {id(b) for b in roots for a in roots if a is not b and explains(a, b) and not explains(b, a)}
    cands = [h for h in roots if id(h) not in dominated] or roots
    lag = _lagging(builder)

    def score(h: Hit) -> float:
        s = h.rule.confidence
        if lag and h.ranks and set(h.ranks) & lag:
            s += 0.05
        return s

    cands.sort(key=lambda h: (-score(h), h.time if h.time is not None else float("inf"), h.seq, h.rule.id))
    best = cands[0]
    for h in cands[1:]:
        if score(h) >= score(best) - CLOSE and h.rule.taxonomy != best.rule.taxonomy and _before(h, best) \
                and not explains(best, h):
            best = h
    competitors = [h for h in cands if h is not best and h.rule.taxonomy != best.rule.taxonomy
                   and not explains(best, h)]
    return best, competitors


def _merge_evidence(first: tuple[Evidence, ...], more: list[Hit]) -> tuple[Evidence, ...]:
    out = list(first)
    seen = {(e.path, e.line) for e in out}
    for h in more:
        for e in h.evidence[:2]:
            if (e.path, e.line) not in seen and len(out) < EVIDENCE_CAP:
                out.append(e)
                seen.add((e.path, e.line))
    return tuple(out)


def diagnose(hits: list[Hit], builder: "JobBuilder", tables: "Tables | None" = None) -> Verdict:
    """Choose the root cause, label every other hit symptom/cascade, fill ``RankInfo.role``.

    Args:
        hits: every rule hit (``Matcher.hits``).
        builder: the job model builder the hits were evaluated against (``build()`` already called).
        tables: the message tables of the analysis (default: the ones the builder was made with).

    Returns:
        A ``Verdict``; ``root`` is None when no root-capable rule matched (a healthy log).
    """
    job = builder.job
    restart = (tables or builder.tables).restarted[4]
    best, competitors = pick_root(hits, builder)
    if best is None:
        findings = _findings(hits, None, builder)
        _rank_roles(builder, (), findings)
        return Verdict(None, findings, [f for f in findings if f.role == "cascade"])
    same_tax = [h for h in hits if h is not best and h.rule.taxonomy == best.rule.taxonomy]
    explained = [h for h in hits if explains(best, h)]
    ranks = set(best.ranks)
    same_rule = [h for h in same_tax if h.rule.id == best.rule.id]
    for h in same_rule:
        ranks |= set(h.ranks)
    if not ranks:
        for h in same_tax:
            ranks |= set(h.ranks)
        if best.victims_only:
            # torchrun's report of the ranks that reported the lost peer (they exited 1 or were torn down after
            # it) names victims too: only another rank can be the peer that went away
            ranks -= set(best.event_ranks)
    if not ranks and not best.victims_only:
        ranks = _attempt_failed(builder, best.evidence, restart) or set()  # a restarted job: the cause's attempt's worker
    if not ranks and best.victims_only:
        pass  # the only ranks in view reported losing a peer: they are not the cause, and the peer is unknown
    elif not ranks and len(job.ranks) == 1:
        ranks = set(job.ranks)
    if not ranks and not best.victims_only:
        ranks = _first_failed(builder, best.evidence)
    conf = best.rule.confidence
    corroborating = {h.rule.id for h in same_tax if h.rule.id != best.rule.id}
    conf += min(0.1, 0.05 * len(corroborating))
    if explained:
        conf += 0.03
    lag = _lagging(builder)
    if lag and ranks and ranks & lag:
        conf += 0.03
    close = [h for h in competitors if h.rule.confidence >= best.rule.confidence - 0.15]
    conf -= 0.1 * len({h.rule.taxonomy for h in close})
    conf = max(0.05, min(0.99, conf))
    bound = dict(best.bound)
    for h in same_tax:
        for k, v in h.bound.items():
            bound.setdefault(k, v)
    hosts = set(best.hosts)
    for r in ranks:
        info = job.ranks.get(r)
        if info is not None and info.host:
            hosts.add(info.host)
    gpus = []
    for r in sorted(ranks):
        info = job.ranks.get(r)
        if info is not None and (info.bus_id or info.cuda_dev is not None):
            gpus.append(f"{info.host or '?'}:cuda{info.cuda_dev if info.cuda_dev is not None else '?'}"
                        + (f" (busId {info.bus_id})" if info.bus_id else ""))
    explanation = render_template(best.rule.description, bound) or best.rule.description
    explanation += _story(best, ranks, explained, builder)
    tmpl, title_bound = best.rule.title, bound
    if len(ranks) > 1 and "rank {rank}" in tmpl and str(bound.get("rank")) in {str(r) for r in ranks}:
        # a per-rank rule (group_by rank) that several ranks hit: the title names them all, not the first one
        tmpl = tmpl.replace("rank {rank}", "ranks {rank}")
        title_bound = {**bound, "rank": rank_ranges(tuple(sorted(ranks)), ", ")}
    title = render_title(tmpl, title_bound)
    root = RootCause(id=best.rule.taxonomy, title=title, confidence=conf, ranks=tuple(sorted(ranks)),
                     hosts=tuple(sorted(hosts)), evidence=_merge_evidence(best.evidence, same_tax),
                     explanation=explanation, fix=make_fix(best.rule, bound, job.torch_version), rule=best.rule.id, gpus=tuple(gpus))
    findings = _findings(hits, best, builder, root_ranks=ranks, root_confidence=conf)
    _rank_roles(builder, tuple(sorted(ranks)), findings)
    return Verdict(root, findings, [f for f in findings if f.role == "cascade"], best)


def rank_list(ranks: Any, cap: int = 6) -> str:
    """Ranks as ranges, at most ``cap`` of them: ``[0, 1, 2, 5]`` -> ``"0-2, 5"``; more -> ``"..., +N more"``."""
    values = sorted(set(int(r) for r in ranks))
    runs: list[tuple[int, int]] = []
    for r in values:
        if runs and r == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], r)
        else:
            runs.append((r, r))
    parts = [str(a) if a == b else f"{a}-{b}" if b > a + 1 else f"{a}, {b}" for a, b in runs]
    if len(parts) > cap:
        left = sum(b - a + 1 for a, b in runs[cap:])
        return ", ".join(parts[:cap]) + f" and {left} more"
    return ", ".join(parts)


def _story(best: Hit, ranks: set[int], explained: list[Hit], builder: "JobBuilder") -> str:
    """One or two sentences on how the failure spread across ranks."""
    parts = []
    if ranks:
        who = rank_list(ranks)
        hosts = sorted({builder.job.ranks[r].host for r in ranks if r in builder.job.ranks and builder.job.ranks[r].host})
        where = ""
        if hosts:
            where = f" ({', '.join(hosts[:3])}" + (f" and {len(hosts) - 3} more hosts" if len(hosts) > 3 else "") + ")"
        parts.append(f" The failure started on rank{'s' if len(ranks) > 1 else ''} {who}{where}.")
    victims = sorted({r for h in explained for r in (h.event_ranks or h.ranks) if r not in ranks})
    if explained:
        kinds = sorted({h.rule.taxonomy for h in explained})
        if victims:
            parts.append(f" Rank{'s' if len(victims) > 1 else ''} {rank_list(victims)} then failed as a "
                         f"consequence ({', '.join(kinds)}); those are cascade, not causes.")
        else:
            parts.append(f" The other errors in the log ({', '.join(kinds)}) follow from it.")
    first_obs = [e for e in builder.exits.values() if e.get("first_observed")]
    if first_obs and ranks:
        r = None
        for rr, e in builder.exits.items():
            if e.get("first_observed"):
                r = rr
        if r is not None and r not in ranks:
            parts.append(f" torchrun's 'first observed failure' (rank {r}) is a victim, not the cause.")
    return "".join(parts)


def _role_for(h: Hit, best: Hit | None, root_ranks: set[int]) -> str:
    if best is None:
        return h.rule.role if h.rule.role != "root" else "symptom"
    if h.rule.id == best.rule.id:
        return "root"
    own = set(h.event_ranks or h.ranks)
    if h.rule.taxonomy == best.rule.taxonomy:
        # a consequence rule (torchrun's SIGTERM teardown) on ranks other than the culprits stays a consequence
        if h.rule.role == "cascade" and own and root_ranks and not own & root_ranks:
            return "cascade"
        return "symptom"
    if own and root_ranks and own <= root_ranks:
        return "symptom"
    if explains(best, h):
        return "cascade"
    return "cascade" if h.rule.role == "cascade" else "symptom"


def _findings(hits: list[Hit], best: Hit | None, builder: "JobBuilder",
              root_ranks: set[int] | None = None, root_confidence: float | None = None) -> list[Finding]:
    """One finding per (rule, role): same-rule hits of several ranks merge. The root finding carries the root
    cause's own confidence (``root_confidence``), so that every report shows one number for it."""
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for h in sorted(hits, key=lambda h: (h.rule.id, h.seq)):
        role = _role_for(h, best, root_ranks or set())
        slot = merged.get((h.rule.id, role))
        # The root finding names the culprits its predicate chose (the odd one out), not every rank it quoted.
        own = set(h.ranks) if role == "root" and h.ranks and h.event_ranks else set(h.event_ranks or h.ranks)
        if slot is None:
            merged[(h.rule.id, role)] = {"hit": h, "ranks": own, "hosts": set(h.hosts),
                                         "evidence": list(h.evidence)}
        else:
            slot["ranks"] |= own
            slot["hosts"] |= set(h.hosts)
            for e in h.evidence[:1]:
                if len(slot["evidence"]) < EVIDENCE_CAP and e not in slot["evidence"]:
                    slot["evidence"].append(e)
    out = []
    for (rid, role), slot in merged.items():
        h = slot["hit"]
        if role == "cascade" and root_ranks and slot["ranks"] - root_ranks:
            slot["ranks"] -= root_ranks  # a culprit is not its own victim (e.g. one torchrun summary for all)
        f = h.finding(role=role)
        conf = root_confidence if role == "root" and root_confidence is not None and best is not None \
            and rid == best.rule.id else f.confidence
        out.append(Finding(rule=f.rule, id=f.id, role=role, title=f.title, severity=f.severity,
                           confidence=conf, ranks=tuple(sorted(slot["ranks"])),
                           hosts=tuple(sorted(slot["hosts"])), evidence=tuple(slot["evidence"]),
                           explanation=f.explanation, fix=f.fix, time=f.time, bound=f.bound))
    out.sort(key=lambda f: (_ROLE_ORDER.get(f.role, 9), -round(f.confidence, 3), f.rule,
                            (f.evidence[0].path, f.evidence[0].line) if f.evidence else ("", 0)))
    return out


def _rank_roles(builder: "JobBuilder", root_ranks: tuple[int, ...], findings: list[Finding]) -> None:
    job = builder.job
    touched = {r for f in findings for r in f.ranks}
    for r, info in job.ranks.items():
        if r in root_ranks:
            info.role = "culprit"
        elif r in touched or info.first_error is not None or (info.exit_code not in (None, 0)):
            info.role = "victim" if root_ranks or findings else "healthy"
        else:
            info.role = "healthy"
