"""The environment whitelist of a reproduction: which variables from a log may reach a child process."""
from __future__ import annotations

import re
from typing import Any, Callable, Mapping

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
