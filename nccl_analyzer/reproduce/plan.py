"""Reproduction plan: a validated, serialisable description of one reproduction run (scenarios, the Plan)."""
from __future__ import annotations

import json
import re
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from ..errors import ReproduceError
from .envcheck import NOT_CARRIED, validate_env

PLAN_SCHEMA = "nccl-analyzer/reproduce-plan/v1"
WORKER_MODULE = "nccl_analyzer.reproduce.worker"
INSTALL_HINT = "pip install 'nccl-analyzer[reproduce]'"

# ---------------------------------------------------------------------------------------------------------------
# Scenarios: how each taxonomy id is caused for real on this machine.
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    ranks: int = 1  # ranks the reproduction launches (0: one more than the GPUs, see gpu_visibility)
    gpus: int = 0  # GPUs it needs at least; 0 = gloo on CPU will do
    nccl_only: bool = False  # the failure exists only in NCCL
    fix: str = ""  # what --verify-fix changes, for people
    # What the fault run plants in our own worker when the cause is a fault of the user's program (an exception,
    # an exit, a bad index, ...). The fix run then merely leaves that fault out, which cannot fail: its outcome is
    # NOT APPLICABLE, never FIXED. Empty where the fix run applies the proposed setting to the same mechanism.
    program_fault: str = ""


SCENARIOS: dict[str, Scenario] = {
    "socket_interface": Scenario(1, 0, fix="point the socket interface at one that exists here"),
    "port_conflict": Scenario(1, 0, fix="use a free port"),
    "rendezvous_unreachable": Scenario(1, 0, fix="connect to the address where the store listens"),
    "collective_mismatch": Scenario(2, 0, fix="every rank calls the same collective (the fix is in the program)",
                                    program_fault="rank 0 calls another collective than its peers"),
    "peer_exit": Scenario(2, 0, fix="the rank does not exit (the fix is in the program)",
                          program_fault="one rank exits (os._exit(1)) before the collective"),
    "app_exception": Scenario(2, 0, fix="the rank does not raise (the fix is in the program)",
                              program_fault="one rank raises RuntimeError before the collective"),
    "watchdog_timeout": Scenario(2, 0, fix="a process-group timeout longer than the slow rank's delay",
                                 program_fault="one rank is late for the collective by longer than the timeout"),
    "invalid_usage": Scenario(1, 0, fix="a valid root rank (the fix is in the program)",
                              program_fault="broadcast with a root rank outside the world"),
    "duplicate_gpu": Scenario(2, 1, nccl_only=True, fix="one rank per GPU"),
    "gpu_visibility": Scenario(0, 1, nccl_only=True, fix="no more ranks per node than visible GPUs"),
    "cuda_oom": Scenario(1, 1, nccl_only=True, fix="allocate within the free memory (half of it)",
                         program_fault="allocations beyond the free GPU memory"),
    "cuda_error": Scenario(1, 1, nccl_only=True, fix="an in-bounds index (the fix is in the program)",
                           program_fault="an out-of-bounds index in a GPU kernel"),
    "ib_rdma": Scenario(1, 1, nccl_only=True, fix="do not force the IB transport where no HCA exists"),
    "p2p_ipc": Scenario(2, 2, nccl_only=True, fix="NCCL_P2P_DISABLE=1"),
    "shm": Scenario(2, 2, nccl_only=True, fix="NCCL_SHM_DISABLE=1"),
}

#: Said whenever watchdog_timeout is staged on CPU: the job's watchdog fired on GPU work that never finished.
GENERIC_TIMEOUT = ("this stages a generic timeout, not the same hang: a gloo rank sleeps on the CPU past the "
                   "process-group timeout, while the job's watchdog fired on GPU work that did not finish; a match "
                   "shows the analysis reads such a timeout the same way, not why your job's GPU work hung "
                   "(with a GPU per rank the late rank queues torch.cuda._sleep on its stream instead)")

NOT_STAGED: dict[str, str] = {
    "version_mismatch": "needs two different NCCL/CUDA/driver installations; one machine has one",
    "host_oom": "would need the kernel's OOM killer to end a rank; not done on purpose",
    "nvls_multicast": "NVLink SHARP / multicast is kept off on purpose: it can take a shared host's GPUs out of "
                      "service",
    "network_connect": "needs ranks on two nodes with a broken network between them",
    "other": "no scenario exists for an unclassified cause",
}

OPS = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier")
DTYPES = ("float32", "float16", "bfloat16", "float64", "int32", "int64", "int8", "uint8")
BACKENDS = ("nccl", "gloo")
VARIANTS = ("fault", "fixed")
MAX_NUMEL_GPU = 1 << 28  # 1 GiB of float32
MAX_NUMEL_CPU = 1 << 22

_OP_ALIASES = {
    "allreduce": "all_reduce", "broadcast": "broadcast", "bcast": "broadcast", "reduce": "reduce",
    "allgather": "all_gather", "allgatherbase": "all_gather", "allgatherintotensor": "all_gather",
    "allgathercoalesced": "all_gather", "reducescatter": "reduce_scatter", "reducescatterbase": "reduce_scatter",
    "reducescattertensor": "reduce_scatter", "alltoall": "all_to_all", "alltoallbase": "all_to_all",
    "alltoallv": "all_to_all", "barrier": "barrier",
}
_DTYPE_ALIASES = {
    "float": "float32", "float32": "float32", "f32": "float32", "fp32": "float32", "ncclfloat": "float32",
    "ncclfloat32": "float32", "half": "float16", "float16": "float16", "fp16": "float16", "f16": "float16",
    "ncclhalf": "float16", "ncclfloat16": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16",
    "ncclbfloat16": "bfloat16", "double": "float64", "float64": "float64", "ncclfloat64": "float64",
    "nccldouble": "float64", "int": "int32", "int32": "int32", "ncclint32": "int32", "ncclint": "int32",
    "long": "int64", "int64": "int64", "ncclint64": "int64", "int8": "int8", "char": "int8", "ncclint8": "int8",
    "uint8": "uint8", "byte": "uint8", "nccluint8": "uint8",
}


def normalize_op(value: Any) -> str | None:
    """``AllReduce``, ``ALLREDUCE``, ``_allgather_base``, ``ncclAllReduce`` ... -> one of OPS, else None."""
    if not isinstance(value, str):
        return None
    key = re.sub(r"[^a-z]", "", value.lower())
    key = key[4:] if key.startswith("nccl") else key
    return _OP_ALIASES.get(key)


def normalize_dtype(value: Any) -> str | None:
    """``Float``, ``torch.float32``, ``ncclFloat32``, ``bf16`` ... -> one of DTYPES, else None."""
    if not isinstance(value, str):
        return None
    key = value.strip().lower().removeprefix("torch.")
    return _DTYPE_ALIASES.get(key) or _DTYPE_ALIASES.get(key.replace("_", ""))


# ---------------------------------------------------------------------------------------------------------------
# The plan itself
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """What one reproduction run does; every field is validated by :func:`Plan.from_dict`."""

    scenario: str
    backend: str = "gloo"
    variant: str = "fault"
    nproc: int = 1
    op: str = "all_reduce"
    dtype: str = "float32"
    numel: int = 1 << 20
    root: int = 0
    culprit: int = 0
    pg_timeout: float = 20.0
    sleep_s: float = 0.0
    mem_fraction: float = 0.5
    env: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["schema"] = PLAN_SCHEMA
        out["env"] = dict(sorted(self.env.items()))
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Plan":
        """Build a plan from untrusted data; raises ReproduceError on any invalid field."""
        if not isinstance(data, Mapping):
            raise ReproduceError("plan must be a JSON object")
        if data.get("schema", PLAN_SCHEMA) != PLAN_SCHEMA:
            raise ReproduceError(f"plan schema must be {PLAN_SCHEMA}")
        known = set(cls.__dataclass_fields__)
        extra = set(data) - known - {"schema"}
        if extra:
            raise ReproduceError(f"plan has unknown fields: {', '.join(sorted(extra))}")
        if "scenario" not in data:
            raise ReproduceError("plan needs a scenario")
        env = data.get("env", {})
        if not isinstance(env, Mapping):
            raise ReproduceError("plan env must be an object")
        kept, dropped = validate_env(env)
        bad = [n for n, _ in dropped] + [n for n in kept if n in NOT_CARRIED]
        if bad:
            raise ReproduceError(f"plan env has variables that may not be carried: {', '.join(sorted(bad))}")
        values = {k: data[k] for k in known if k in data and k != "env"}
        plan = cls(env=kept, **values)
        plan.check()
        return plan

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ReproduceError(f"plan is not valid JSON: {exc}") from None
        return cls.from_dict(data)

    def check(self) -> None:
        """Raise ReproduceError unless every field has a valid type and range."""
        def need(ok: bool, what: str) -> None:
            if not ok:
                raise ReproduceError(f"invalid plan: {what}")

        def is_int(v: Any) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        def is_num(v: Any) -> bool:
            return isinstance(v, (int, float)) and not isinstance(v, bool)

        for name in ("scenario", "backend", "variant", "op", "dtype"):
            need(isinstance(getattr(self, name), str), f"{name} must be a string")
        need(isinstance(self.env, dict), "env must be an object")
        need(self.scenario in SCENARIOS, f"scenario {self.scenario!r}")
        need(self.backend in BACKENDS, f"backend {self.backend!r}")
        need(self.variant in VARIANTS, f"variant {self.variant!r}")
        need(is_int(self.nproc) and 1 <= self.nproc <= 64, f"nproc {self.nproc!r} (1..64)")
        need(self.op in OPS, f"op {self.op!r}")
        need(self.dtype in DTYPES, f"dtype {self.dtype!r}")
        limit = MAX_NUMEL_GPU if self.backend == "nccl" else MAX_NUMEL_CPU
        need(is_int(self.numel) and 1 <= self.numel <= limit, f"numel {self.numel!r} (1..{limit})")
        need(is_int(self.root) and 0 <= self.root < 64, f"root {self.root!r}")
        need(is_int(self.culprit) and 0 <= self.culprit < 64, f"culprit {self.culprit!r}")
        need(is_num(self.pg_timeout) and 1 <= self.pg_timeout <= 3600, f"pg_timeout {self.pg_timeout!r} (1..3600)")
        need(is_num(self.sleep_s) and 0 <= self.sleep_s <= 3600, f"sleep_s {self.sleep_s!r} (0..3600)")
        need(is_num(self.mem_fraction) and 0 < self.mem_fraction <= 0.95, f"mem_fraction {self.mem_fraction!r}")
        kept, dropped = validate_env(self.env)
        need(not dropped, f"env {', '.join(n for n, _ in dropped)}")

    # -- the worker's command line ------------------------------------------------------------------------------

    def worker_args(self) -> list[str]:
        """The worker's flags for this plan (the inline equivalent of ``--plan FILE``)."""
        args = ["--scenario", self.scenario, "--backend", self.backend, "--ranks", str(self.nproc)]
        if self.variant != "fault":
            args += ["--variant", self.variant]
        defaults = Plan(scenario=self.scenario)
        for name, flag in (("op", "--op"), ("dtype", "--dtype"), ("numel", "--numel"), ("root", "--root"),
                           ("culprit", "--culprit"), ("pg_timeout", "--pg-timeout"), ("sleep_s", "--sleep"),
                           ("mem_fraction", "--mem-fraction")):
            value = getattr(self, name)
            if value != getattr(defaults, name):
                args += [flag, fmt_num(value)]
        return args

    def command(self, python: str = "python") -> str:
        """The stand-alone shell command a person can paste to run this plan (values quoted with shlex)."""
        env = {"NCCL_DEBUG": "INFO", **self.env}
        parts = ["env"] + [f"{k}={v}" for k, v in sorted(env.items())]
        parts += [python, "-m", WORKER_MODULE, "--launch", *self.worker_args()]
        return " ".join(shlex.quote(p) for p in parts)

    def describe(self) -> str:
        """One line for people: scenario, ranks, backend, collective, env."""
        env = " ".join(f"{k}={v}" for k, v in sorted(self.env.items())) or "no extra env"
        coll = f"{self.op} {self.numel} x {self.dtype}" + (f" root {self.root}" if self.op in ("broadcast", "reduce")
                                                           else "")
        extra = f", {self.variant}" if self.variant != "fault" else ""
        return f"{self.scenario}{extra}: {self.nproc} rank(s) ({self.backend}), {coll}, {env}"


def fmt_num(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
