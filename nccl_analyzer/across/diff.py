"""``diff GOOD BAD``: what differs between a run that worked and one that did not, most suspicious first.

Each compared fact has a weight saying how likely a change in it is to explain a new failure (a changed NCCL
version or ``NCCL_*`` setting far more than a different host name). The weights live in ``WEIGHTS`` below,
one line per fact family, so a reader sees the ordering at a glance.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from ..model import Diagnosis
from .profile import Profile, profile_run

DIFF_SCHEMA = "nccl-analyzer/diff/v1"

#: family -> (weight, why a change matters). A difference is "of note" at NOTE or above.
WEIGHTS: dict[str, tuple[int, str]] = {
    "verdict": (100, "the diagnosis itself"),
    "version": (90, "NCCL / CUDA / torch builds change defaults, protocols and bugs"),
    "env": (85, "NCCL_* / TORCH_* settings change transports, interfaces and timeouts"),
    "network": (80, "the network plugin or fabric NCCL chose"),
    "warning": (65, "NCCL WARN families seen in one run only"),
    "transport": (75, "how ranks were connected (P2P, SHM, NET/IB, NET/Socket)"),
    "interface": (70, "which interfaces bootstrap and sockets used"),
    "world": (60, "how many ranks and hosts took part"),
    "topology": (50, "what NCCL saw of the machine: nodes, local ranks, graph"),
    "channels": (45, "channel / ring / tree counts NCCL built"),
    "init": (40, "how far communicator set-up got"),
    "progress": (30, "how far the job got (a consequence more often than a cause)"),
    "hosts": (20, "host names (a different node may be a bad node)"),
    "gpus": (15, "GPU bus ids per rank"),
}
NOTE = 40
#: Families where a fact present in one run's log and absent from the other's is as telling as a change (NCCL
#: echoes a setting only when it is set). Elsewhere an absent fact mostly means "not logged" (another
#: NCCL_DEBUG_SUBSYS) or "not reached" (the run failed earlier): such a difference keeps a third of its weight.
ABSENCE_COUNTS = ("verdict", "env", "warning")


def _empty(v: Any) -> bool:
    return v is None or v == [] or v == ""


@dataclass(frozen=True)
class Difference:
    family: str
    key: str
    good: Any
    bad: Any

    @property
    def missing(self) -> bool:
        """One side's log does not show this fact at all."""
        return _empty(self.good) or _empty(self.bad)

    @property
    def weight(self) -> int:
        w = WEIGHTS[self.family][0]
        return w if not self.missing or self.family in ABSENCE_COUNTS else w // 3

    @property
    def of_note(self) -> bool:
        return self.weight >= NOTE

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, "key": self.key, "good": self.good, "bad": self.bad,
                "weight": self.weight, "of_note": self.of_note, "missing": self.missing}


@dataclass
class RunDiff:
    """The two diagnoses and the differences between them, most suspicious first."""

    good: Diagnosis
    bad: Diagnosis
    differences: list[Difference]
    compared: list[str] = field(default_factory=list)

    @property
    def of_note(self) -> list[Difference]:
        return [d for d in self.differences if d.of_note]

    def to_dict(self) -> dict[str, Any]:
        def side(d: Diagnosis) -> dict[str, Any]:
            rc = d.root_cause
            return {"inputs": [i.to_dict() for i in d.inputs],
                    "root_cause": None if rc is None else {"id": rc.id, "title": rc.title,
                                                           "confidence": round(rc.confidence, 3),
                                                           "ranks": list(rc.ranks), "hosts": list(rc.hosts)}}
        return {"schema": DIFF_SCHEMA, "good": side(self.good), "bad": side(self.bad),
                "differences": [d.to_dict() for d in self.differences], "compared": self.compared}


def _facts(d: Diagnosis, p: Profile) -> dict[tuple[str, str], Any]:
    """(family, key) -> a comparable value (str, int, or a sorted list)."""
    job = d.job
    out: dict[tuple[str, str], Any] = {}
    rc = d.root_cause
    out[("verdict", "root cause")] = rc.id if rc else "no failure"
    out[("version", "NCCL version")] = sorted(job.nccl_versions)
    out[("version", "torch version")] = job.torch_version
    out[("version", "CUDA driver")] = job.cuda_driver
    env = dict(p.facts.get("env_seen", {}))
    env.update(job.env)
    for name, value in env.items():
        out[("env", name)] = value
    for label, names in p.plugins.items():
        status = label.split(":", 1)[1]
        if status in ("initialized", "assigned", "loaded", "init_failed", "failed"):
            out[("network", f"{label.split(':')[0]} plugin {status.replace('_', ' ')}")] = sorted(names)
    for key in ("network used", "IB devices"):
        if key in p.sets:
            out[("network", key)] = sorted(p.sets[key])
    if p.transports:
        out[("transport", "transports used")] = sorted(p.transports)
        total = sum(p.transports.values())
        for t, n in p.transports.items():
            out[("transport", f"share of connections via {t}")] = f"{round(100 * n / total)}%"
    for key in ("bootstrap interfaces", "socket interfaces"):
        if key in p.sets:
            out[("interface", key)] = sorted(p.sets[key])
    warns = sorted(k for k in job.extra.get("event_kinds", {}) if k.startswith("nccl.warn."))
    out[("warning", "NCCL WARN families")] = warns
    out[("world", "world size")] = job.world_size
    hosts = sorted({r.host for r in job.ranks.values() if r.host} or set(job.extra.get("hosts", ())))
    out[("world", "number of hosts")] = len(hosts)
    out[("world", "ranks seen")] = len(job.ranks)
    out[("hosts", "hosts")] = hosts
    buses = sorted({f"{r.host or '?'}:{r.bus_id}" for r in job.ranks.values() if r.bus_id})
    out[("gpus", "GPU bus ids")] = buses
    for key in ("n nodes", "local ranks", "mnnvl", "graph pattern", "topology maxBw"):
        if key in p.sets:
            out[("topology", key)] = sorted(p.sets[key])
    for key in ("rings (channels)", "coll channels", "collnet channels", "nvls channels", "p2p channels"):
        if key in p.sets:
            out[("channels", key)] = sorted(p.sets[key], key=lambda v: (len(v), v))
    states: dict[str, int] = {}
    for r in job.ranks.values():
        states[r.init_state] = states.get(r.init_state, 0) + 1
    out[("init", "ranks by init state")] = ", ".join(f"{k} {v}" for k, v in sorted(states.items())) or None
    out[("progress", "collectives called")] = sorted(p.sets.get("collectives called", ()))
    out[("progress", "highest NCCL opCount")] = p.max_op_count
    seqs = [r.last_collective.get("seq") for r in job.ranks.values() if r.last_collective]
    seqs = [s for s in seqs if isinstance(s, int)]
    out[("progress", "last collective seq (lowest rank)")] = min(seqs) if seqs else None
    return out


def compare(good: tuple[Diagnosis, Profile], bad: tuple[Diagnosis, Profile]) -> RunDiff:
    """Differences between two analysed runs, most suspicious first (ties: family, then key)."""
    g, b = _facts(*good), _facts(*bad)
    diffs: list[Difference] = []
    compared = []
    for fam, key in sorted(set(g) | set(b)):
        gv, bv = g.get((fam, key)), b.get((fam, key))
        if _empty(gv) and _empty(bv):
            continue
        compared.append(f"{fam}: {key}")
        if gv != bv:
            diffs.append(Difference(fam, key, gv, bv))
    diffs.sort(key=lambda d: (-d.weight, d.family, d.key))
    return RunDiff(good=good[0], bad=bad[0], differences=diffs, compared=compared)


def diff_runs(good_specs: Any, bad_specs: Any, rules_dirs: Iterable[str] = ()) -> RunDiff:
    """Analyze both runs (inputs as ``analyze`` takes them) and compare them.

    Raises:
        InputError: missing or unreadable input on either side.
    """
    return compare(profile_run(good_specs, rules_dirs), profile_run(bad_specs, rules_dirs))
