"""Staging: a diagnosis and this machine -> the reproduction plan to run (or why none can run), and its fix run."""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Iterable

from ..model import Diagnosis
from .envcheck import NOT_CARRIED, validate_env
from .plan import (GENERIC_TIMEOUT, MAX_NUMEL_CPU, MAX_NUMEL_GPU, NOT_STAGED, SCENARIOS, Plan, fmt_num, normalize_dtype,
                   normalize_op)


@dataclass(frozen=True)
class Staging:
    """The plan for a diagnosis, or why none can run here."""

    expected: str | None
    plan: Plan | None
    blocked: str | None  # reason the reproduction cannot run here (INCONCLUSIVE)
    notes: tuple[str, ...] = ()
    job_world_size: int | None = None
    job_nodes: int | None = None
    job_ranks_per_node: int | None = None


@dataclass(frozen=True)
class LocalInfo:
    """What this machine offers a reproduction."""

    torch: bool
    gpus: int
    interfaces: tuple[str, ...] = ("lo",)
    default_interface: str | None = None
    hcas: tuple[str, ...] = ()
    torch_version: str | None = None


def job_shape(diagnosis: Diagnosis) -> tuple[int | None, int | None, int | None]:
    """(world size, nodes, most ranks on one node) as far as the job model tells."""
    job = diagnosis.job
    world = job.world_size or (len(job.ranks) if job.ranks else None)
    per_host: dict[str, int] = {}
    for info in job.ranks.values():
        per_host[info.host or "?"] = per_host.get(info.host or "?", 0) + 1
    nodes = len(per_host) or None
    per_node = max(per_host.values()) if per_host else None
    return world, nodes, per_node


def _last_collective(diagnosis: Diagnosis) -> dict[str, Any]:
    culprits = [r for r in diagnosis.root_cause.ranks] if diagnosis.root_cause else []
    infos = diagnosis.job.ranks
    order = [infos[r] for r in culprits if r in infos] + [infos[r] for r in sorted(infos)]
    for info in order:
        if info.last_collective:
            return dict(info.last_collective)
    return {}


def _int_or(value: Any, default: int) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"\d{1,12}", value.strip()):
        return int(value)
    return default


def iface_matches(spec: str, names: Iterable[str]) -> bool:
    """Whether an NCCL_SOCKET_IFNAME-style spec selects any of ``names`` (prefix list, ``^`` exclude, ``=`` exact)."""
    names = list(names)
    exclude = spec.startswith("^")
    body = spec[1:] if exclude else spec
    exact = body.startswith("=")
    body = body[1:] if exact else body
    items = [i for i in body.split(",") if i]

    def hit(name: str) -> bool:
        return any(name == i if exact else name.startswith(i.split(":")[0]) for i in items)

    if exclude:
        return any(not hit(n) for n in names)
    return any(hit(n) for n in names)


def pick_interface(local: LocalInfo) -> str:
    """The interface a fix run uses: the default route's, else loopback."""
    if local.default_interface and local.default_interface in local.interfaces:
        return local.default_interface
    return "lo"


def missing_interface(local: LocalInfo) -> str:
    """An interface name that does not exist here (for a socket_interface run whose log named none)."""
    n = 9
    while f"eth{n}" in local.interfaces:
        n += 1
    return f"eth{n}"


def make_staging(diagnosis: Diagnosis, local: LocalInfo) -> Staging:
    """Plan the reproduction of ``diagnosis`` on this machine (``local``)."""
    world, nodes, per_node = job_shape(diagnosis)
    rc = diagnosis.root_cause
    shape = dict(job_world_size=world, job_nodes=nodes, job_ranks_per_node=per_node)
    if rc is None:
        return Staging(None, None, "the diagnosis names no root cause, so there is nothing to reproduce", **shape)
    expected = rc.id
    if expected in NOT_STAGED:
        return Staging(expected, None, f"{expected} is not reproduced here: {NOT_STAGED[expected]}", **shape)
    scen = SCENARIOS.get(expected)
    if scen is None:
        return Staging(expected, None, f"no reproduction scenario for {expected!r}", **shape)

    notes: list[str] = []
    log_env = {k: v for k, v in diagnosis.job.env.items()}
    env, dropped = validate_env(log_env)
    for name, why in dropped:
        notes.append(f"not carried from the log: {name} ({why})")
    for name in list(env):
        if name in NOT_CARRIED:
            notes.append(f"not carried from the log: {name}={env.pop(name)} ({NOT_CARRIED[name]})")

    coll = _last_collective(diagnosis)
    op = normalize_op(coll.get("op") or coll.get("op_type") or coll.get("opType")) or "all_reduce"
    dtype = normalize_dtype(coll.get("dtype") or coll.get("datatype")) or "float32"
    numel = _int_or(coll.get("numel", coll.get("count")), 1 << 20) or 1 << 20
    root = _int_or(coll.get("root"), 0)

    job_backend = (diagnosis.job.backend or "").lower()
    # An unknown backend counts as NCCL (the tool's subject) when the GPUs are there; a gloo job stays gloo.
    nccl_job = job_backend == "nccl" or (not job_backend and (bool(diagnosis.job.nccl_versions) or local.gpus > 0))
    ranks = scen.ranks or (local.gpus + 1)
    gpus_needed = max(scen.gpus, ranks if scen.nccl_only and expected != "duplicate_gpu" else scen.gpus)
    if expected == "gpu_visibility":
        gpus_needed = 1
    blocked = None
    if scen.nccl_only or scen.gpus:
        backend = "nccl"
        if not local.torch:
            pass  # reported by the runner (could not run), not as a planning verdict
        elif local.gpus < gpus_needed:
            kind = {"p2p_ipc": "P2P", "shm": "SHM"}.get(expected, expected)
            where = f" (the job ran {world} ranks on {nodes} node(s))" if world else ""
            blocked = (f"{kind} needs {gpus_needed} GPU(s) on one node{where}; this machine has {local.gpus}")
    elif nccl_job and local.gpus >= ranks:
        backend = "nccl"
    else:
        backend = "gloo"
        if job_backend == "nccl" or diagnosis.job.nccl_versions:
            notes.append(f"the job used NCCL; {ranks} rank(s) need {ranks} GPU(s) and this machine has {local.gpus}, "
                         "so the run uses gloo on CPU")

    if expected == "socket_interface":
        env = _socket_env(env, backend, local, notes)
    if expected == "ib_rdma":
        env.setdefault("NCCL_NET", "IB")
        if "NCCL_IB_HCA" not in env:
            env["NCCL_IB_HCA"] = "mlx5_99"
            notes.append("the log names no HCA; NCCL_IB_HCA=mlx5_99 (absent here) is used")
    if backend == "gloo":
        numel = min(numel, MAX_NUMEL_CPU)
    numel = max(1, min(numel, MAX_NUMEL_GPU))
    if backend == "gloo" and dtype in ("float16", "bfloat16") and op != "broadcast":
        dtype = "float32"  # gloo reductions of half types are not supported on CPU everywhere
    culprit = 1 if ranks > 1 else 0
    if rc.ranks and ranks > 1:
        culprit = max(1, min(rc.ranks[0], ranks - 1))
    pg_timeout = 20.0
    sleep_s = 0.0
    if expected in ("collective_mismatch", "watchdog_timeout", "peer_exit", "rendezvous_unreachable"):
        pg_timeout = 5.0
    if expected == "watchdog_timeout":
        sleep_s = 12.0
        if backend == "gloo":
            notes.append(GENERIC_TIMEOUT)
    plan = Plan(scenario=expected, backend=backend, nproc=ranks, op=op, dtype=dtype, numel=numel,
                root=root if root < ranks else 0, culprit=culprit, pg_timeout=pg_timeout, sleep_s=sleep_s, env=env)
    plan.check()
    return Staging(expected, plan, blocked, tuple(notes), **shape)


def _socket_env(env: dict[str, str], backend: str, local: LocalInfo, notes: list[str]) -> dict[str, str]:
    env = dict(env)
    spec = env.get("NCCL_SOCKET_IFNAME") or env.get("GLOO_SOCKET_IFNAME")
    if not spec:
        spec = missing_interface(local)
        notes.append(f"the log names no interface; {spec} (absent here) is used")
    if backend == "gloo":
        # gloo takes plain interface names, no NCCL prefix/exclude syntax.
        name = spec.lstrip("^=").split(",")[0] or missing_interface(local)
        env.pop("NCCL_SOCKET_IFNAME", None)
        env["GLOO_SOCKET_IFNAME"] = name
    else:
        env["NCCL_SOCKET_IFNAME"] = spec
    if iface_matches(spec, local.interfaces) and not spec.startswith("^"):
        notes.append(f"interface {spec} exists on this machine, so the failure may not reproduce here")
    return env


# ---------------------------------------------------------------------------------------------------------------
# The fix run
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FixPlan:
    plan: Plan
    env: dict[str, str]  # variables the fix sets or changes
    removed: tuple[str, ...]
    summary: str


def make_fix(plan: Plan, diagnosis: Diagnosis, local: LocalInfo) -> FixPlan:
    """The run that checks the fix: the diagnosis' fix env where it is valid here, else the scenario's own fix."""
    env = dict(plan.env)
    changes: list[str] = []
    scen = plan.scenario
    updates: dict[str, Any] = {"variant": "fixed"}
    if scen == "socket_interface":
        good = pick_interface(local)
        for key in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
            if key in env:
                env[key] = good
    elif scen == "ib_rdma":
        if env.get("NCCL_NET", "").upper() == "IB":
            env.pop("NCCL_NET")
        if not any(h for h in local.hcas):
            env.pop("NCCL_IB_HCA", None)
            env["NCCL_IB_DISABLE"] = "1"
    elif scen == "p2p_ipc":
        env["NCCL_P2P_DISABLE"] = "1"
    elif scen == "shm":
        env["NCCL_SHM_DISABLE"] = "1"
    elif scen == "watchdog_timeout":
        updates["pg_timeout"] = float(min(3600, max(plan.pg_timeout, plan.sleep_s * 3 + 10)))
        changes.append(f"process-group timeout {fmt_num(plan.pg_timeout)} s -> {fmt_num(updates['pg_timeout'])} s")
    elif scen == "duplicate_gpu":
        updates["nproc"] = max(1, min(plan.nproc, local.gpus))
        changes.append(f"one rank per GPU ({updates['nproc']} rank(s) on {local.gpus} GPU(s))")
    elif scen == "gpu_visibility":
        updates["nproc"] = max(1, local.gpus)
        changes.append(f"{updates['nproc']} rank(s) for {local.gpus} visible GPU(s)")
    elif scen == "cuda_oom":
        changes.append(f"allocate {int(plan.mem_fraction * 100)}% of the free GPU memory instead of all of it")
    elif scen == "port_conflict":
        changes.append("a free port")
    elif scen == "rendezvous_unreachable":
        changes.append("the address where the store listens")
    else:
        changes.append(SCENARIOS[scen].fix)

    # The diagnosis' own fix, where its variables are valid and make sense on this machine.
    rc = diagnosis.root_cause
    if rc is not None and rc.fix.env:
        # Placeholders such as "<interfaces>" or "<a free port>" are for people; the scenario picks a value here.
        given = {k: v for k, v in rc.fix.env.items() if not (isinstance(v, str) and v.startswith("<"))}
        kept, dropped = validate_env(given)
        for name, why in dropped:
            changes.append(f"fix's {name} not applied ({why})")
        for name, value in kept.items():
            if name in NOT_CARRIED:
                continue
            if name in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME") and not iface_matches(value, local.interfaces):
                changes.append(f"fix's {name}={value} not applied (no such interface here)")
                continue
            if name == "NCCL_IB_HCA" and not iface_matches(value, local.hcas):
                changes.append(f"fix's {name}={value} not applied (no such HCA here)")
                continue
            if name == "NCCL_SOCKET_IFNAME" and plan.backend == "gloo":
                name = "GLOO_SOCKET_IFNAME"
                value = value.lstrip("^=").split(",")[0]
                if not value or not iface_matches(value, local.interfaces):
                    continue
            if name == "NCCL_NET" and value.upper() == "IB" and not local.hcas:
                continue
            env[name] = value
        if scen == "ib_rdma" and env.get("NCCL_NET", "").upper() == "IB" and not local.hcas:
            env.pop("NCCL_NET")

    set_env = {k: v for k, v in env.items() if plan.env.get(k) != v}
    removed = tuple(sorted(k for k in plan.env if k not in env))
    parts = [f"{k}={v}" for k, v in sorted(set_env.items())] + [f"unset {k}" for k in removed] + changes
    fixed = replace(plan, env=env, **updates)
    fixed.check()
    return FixPlan(fixed, set_env, removed, "; ".join(parts))
