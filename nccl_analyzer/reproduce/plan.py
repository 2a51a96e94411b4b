"""Reproduction plan: diagnosis + job model -> a validated, serialisable description of what to run."""
from __future__ import annotations

import json
import re
import shlex
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping

from ..errors import ReproduceError
from ..model import Diagnosis

PLAN_SCHEMA = "nccl-analyzer/reproduce-plan/v1"
WORKER_MODULE = "nccl_analyzer.reproduce.worker"
INSTALL_HINT = "pip install 'nccl-analyzer[reproduce]'"

# ---------------------------------------------------------------------------------------------------------------
# The environment whitelist. A value from a log is carried into a child process only when its name is listed here
# and its value passes the validator. Anything that loads code or names a file (LD_PRELOAD, NCCL_NET_PLUGIN,
# NCCL_TUNER_PLUGIN, NCCL_TOPO_FILE, NCCL_DEBUG_FILE, PYTHONPATH, ...) is deliberately absent.
# ---------------------------------------------------------------------------------------------------------------

Validator = Callable[[str], bool]


def _regex(pattern: str) -> Validator:
    rx = re.compile(pattern)
    return lambda v: rx.fullmatch(v) is not None


def _int(lo: int, hi: int) -> Validator:
    def check(v: str) -> bool:
        if not re.fullmatch(r"-?\d{1,12}", v):
            return False
        return lo <= int(v) <= hi
    return check


def _enum(*values: str, case: bool = True) -> Validator:
    allowed = set(values) if case else {x.lower() for x in values}
    return lambda v: (v if case else v.lower()) in allowed


def _either(*checks: Validator) -> Validator:
    return lambda v: any(c(v) for c in checks)


# NCCL_SOCKET_IFNAME syntax: comma list of prefixes, `^` excludes, `=` exact match (NCCL src/misc/socket.cc).
IFACE_RE = r"[\w.:^=,-]{1,64}"
_iface = _regex(IFACE_RE)
_bool = _enum("0", "1")
_level = _either(_enum("LOC", "NVL", "PIX", "PXB", "PHB", "SYS", "NODE", "C2C"), _int(0, 5))

WHITELIST: dict[str, Validator] = {
    # interfaces and sockets
    "NCCL_SOCKET_IFNAME": _iface,
    "GLOO_SOCKET_IFNAME": _iface,
    "NCCL_SOCKET_FAMILY": _enum("AF_INET", "AF_INET6"),
    "NCCL_SOCKET_NTHREADS": _int(1, 16),
    "NCCL_NSOCKS_PERTHREAD": _int(1, 64),
    # transports
    "NCCL_P2P_DISABLE": _bool,
    "NCCL_P2P_LEVEL": _level,
    "NCCL_P2P_READ_ENABLE": _bool,
    "NCCL_P2P_USE_CUDA_MEMCPY": _bool,
    "NCCL_P2P_NET_CHUNKSIZE": _int(1, 1 << 30),
    "NCCL_SHM_DISABLE": _bool,
    "NCCL_SHM_USE_CUDA_MEMCPY": _bool,
    "NCCL_SHM_MEMCPY_MODE": _int(0, 3),
    "NCCL_NET": _regex(r"[A-Za-z0-9_ -]{1,64}"),
    "NCCL_NET_GDR_LEVEL": _level,
    "NCCL_NET_GDR_READ": _bool,
    "NCCL_CUMEM_ENABLE": _bool,
    "NCCL_NVB_DISABLE": _bool,
    "NCCL_PXN_DISABLE": _bool,
    "NCCL_CROSS_NIC": _int(0, 2),
    # NVLink SHARP / multicast stays off: on shared hosts it can take the GPUs out of service (device KINDS.md).
    "NCCL_NVLS_ENABLE": _enum("0"),
    "NCCL_MNNVL_ENABLE": _enum("0"),
    "NCCL_COLLNET_ENABLE": _enum("0"),
    # InfiniBand / RoCE
    "NCCL_IB_DISABLE": _bool,
    "NCCL_IB_HCA": _regex(r"[\^=]?[\w.:,-]{1,128}"),
    "NCCL_IB_GID_INDEX": _int(-1, 255),
    "NCCL_IB_TC": _int(0, 255),
    "NCCL_IB_SL": _int(0, 15),
    "NCCL_IB_TIMEOUT": _int(1, 31),
    "NCCL_IB_RETRY_CNT": _int(0, 7),
    "NCCL_IB_QPS_PER_CONNECTION": _int(1, 128),
    "NCCL_IB_PCI_RELAXED_ORDERING": _int(0, 2),
    "NCCL_IB_ADAPTIVE_ROUTING": _bool,
    "NCCL_IB_ROCE_VERSION_NUM": _int(1, 2),
    "NCCL_IB_CUDA_SUPPORT": _bool,
    "NCCL_IB_ADDR_FAMILY": _enum("AF_INET", "AF_INET6"),
    "NCCL_IB_MERGE_NICS": _bool,
    # algorithms and sizes
    "NCCL_ALGO": _regex(r"\^?[A-Za-z_,;:]{1,64}"),
    "NCCL_PROTO": _regex(r"\^?[A-Za-z0-9_,;:]{1,64}"),
    "NCCL_MIN_NCHANNELS": _int(1, 64),
    "NCCL_MAX_NCHANNELS": _int(1, 64),
    "NCCL_MIN_CTAS": _int(1, 64),
    "NCCL_MAX_CTAS": _int(1, 64),
    "NCCL_NTHREADS": _int(64, 1024),
    "NCCL_BUFFSIZE": _int(1, 1 << 31),
    "NCCL_LAUNCH_MODE": _enum("PARALLEL", "GROUP"),
    "NCCL_RUNTIME_CONNECT": _bool,
    "NCCL_GRAPH_REGISTER": _bool,
    "NCCL_LOCAL_REGISTER": _bool,
    "NCCL_CHECK_POINTERS": _bool,
    "NCCL_COMM_BLOCKING": _bool,
    "NCCL_DEBUG_SUBSYS": _regex(r"\^?[A-Za-z_,]{1,128}"),
    # torch.distributed
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": _int(0, 3),
    "TORCH_NCCL_BLOCKING_WAIT": _bool,
    "TORCH_NCCL_ENABLE_MONITORING": _bool,
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": _int(1, 86400),
    "TORCH_NCCL_DUMP_ON_TIMEOUT": _bool,
    "TORCH_NCCL_TRACE_BUFFER_SIZE": _int(0, 1_000_000),
    "TORCH_FR_BUFFER_SIZE": _int(0, 1_000_000),
    "TORCH_NCCL_DESYNC_DEBUG": _bool,
    "TORCH_NCCL_USE_COMM_NONBLOCKING": _bool,
    "TORCH_NCCL_AVOID_RECORD_STREAMS": _bool,
    "TORCH_DISTRIBUTED_DEBUG": _enum("OFF", "INFO", "DETAIL"),
    "TORCH_CPP_LOG_LEVEL": _enum("INFO", "WARNING", "ERROR", "FATAL", case=False),
    "TORCH_SHOW_CPP_STACKTRACES": _bool,
    "PYTORCH_CUDA_ALLOC_CONF": _regex(r"[\w:.,]{1,128}"),
    "OMP_NUM_THREADS": _int(1, 256),
    "CUDA_LAUNCH_BLOCKING": _bool,
    # recorded from the log but never copied into a run as such (see NOT_CARRIED)
    "MASTER_PORT": _int(1, 65535),
    "MASTER_ADDR": _regex(r"[\w.:-]{1,253}"),
    "CUDA_VISIBLE_DEVICES": _regex(r"[\w,-]{0,256}"),
    "NCCL_DEBUG": _enum("VERSION", "WARN", "INFO", "TRACE", "ABORT", case=False),
}

# Valid names that a reproduction still sets itself: ports are picked free here, the address is loopback, the GPUs
# are this machine's, and NCCL_DEBUG is always INFO so the run can be diagnosed.
NOT_CARRIED: dict[str, str] = {
    "MASTER_PORT": "a free local port is picked instead",
    "MASTER_ADDR": "ranks meet on 127.0.0.1",
    "CUDA_VISIBLE_DEVICES": "this machine's GPUs are used",
    "NCCL_DEBUG": "always INFO in a reproduction",
}

# Variables of OUR process that children inherit (never from the log).
BASE_ENV_KEYS = (
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "PYTHONPATH", "PYTHONHOME",
    "VIRTUAL_ENV", "CONDA_PREFIX", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS",
)


def validate_env(env: Mapping[str, Any]) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Keep only whitelisted variables whose values pass their validator.

    Returns:
        ``(kept, dropped)`` where ``dropped`` lists ``(name, why)`` for every variable left out.
    """
    kept: dict[str, str] = {}
    dropped: list[tuple[str, str]] = []
    for name in sorted(env):
        value = env[name]
        check = WHITELIST.get(name) if isinstance(name, str) else None
        if check is None:
            dropped.append((str(name), "not on the whitelist"))
        elif not isinstance(value, str) or "\x00" in value or not check(value):
            dropped.append((name, "invalid value"))
        else:
            kept[name] = value
    return kept, dropped


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
                args += [flag, _fmt_num(value)]
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


def _fmt_num(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


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
        changes.append(f"process-group timeout {_fmt_num(plan.pg_timeout)} s -> {_fmt_num(updates['pg_timeout'])} s")
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
