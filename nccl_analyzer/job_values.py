"""The job model's shared values and helpers: caps, one object per repeated value, timestamps, versions, the
collective a traceback stopped in, the line that says what went wrong (used by job.py and its handler modules)."""
from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from .model import Event, Evidence

#: Entries kept per rank timeline; processes (pids, hosts) and communicators remembered at most.
TIMELINE_CAP = 64
_PID_CAP = 65536
_COMM_CAP = 4096
#: Larger "nranks" / rank numbers are not a job's (the largest runs have ~10^5 ranks): a mangled number.
MAX_WORLD = 1 << 20
#: A timeline entry's keys, in order (the builder holds an entry as a tuple of these values until ``build``).
_TIMELINE_KEYS = ("kind", "path", "line", "time", "what")
_LABELS: dict[str, str] = {}
_TIMES: dict[str, str] = {}  # timeline times, one string object per distinct time (many ranks log the same second)


def _shared(label: str) -> str:
    """One string object per distinct timeline label (bounded: past 4,096 labels a label is kept as it is)."""
    got = _LABELS.get(label)
    if got is None:
        if len(_LABELS) >= 4096:
            return label
        got = _LABELS[label] = label
    return got


_VALUES: dict[Any, Any] = {}


def _interned(cache: dict, v: Any) -> Any:
    """The one object ``cache`` holds equal to ``v`` (``v`` itself the first time; bounded: past 65,536 entries a
    value is kept as it is)."""
    got = cache.get(v)
    if got is None:
        if len(cache) < 65536:
            cache[v] = v
        return v
    return got


def _shared_value(v: Any) -> Any:
    """One object per distinct short string or int of the per-rank records (every rank's watchdog entry holds the
    same op, sizes and timeout)."""
    if v.__class__ is not int and (v.__class__ is not str or len(v) > 64):
        return v
    return _interned(_VALUES, v)


def _shared_time(t: str | None) -> str | None:
    """One string object per distinct timeline time."""
    return None if t is None else _interned(_TIMES, t)


_VERSION_NUM = re.compile(r"(\d+\.\d+\.\d+)")
_BANNER_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+\S*)")
# Collective names as they appear in torch.distributed frames (distributed_c10d.py function names).
COLLECTIVE_FUNCS = frozenset({
    "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "_all_gather_base", "reduce_scatter",
    "reduce_scatter_tensor", "_reduce_scatter_base", "all_to_all", "all_to_all_single", "reduce", "gather",
    "scatter", "barrier", "send", "recv", "isend", "irecv", "batch_isend_irecv", "all_gather_object",
    "broadcast_object_list", "monitored_barrier", "gather_object", "scatter_object_list", "all_reduce_coalesced",
})
# The c10d kinds that mean "this rank hit a failure" (first error per rank, culprit/victim assignment).
ERROR_KINDS_PREFIX = ("nccl.warn.", "torch.watchdog", "torch.heartbeat", "torch.nccl_error", "torch.store.",
                      "torch.cuda.", "torch.desync", "python.traceback", "python.exception")
_TIMELINE_KINDS = ("nccl.init.start", "nccl.init.complete", "torch.elastic.", "torch.work.status")


def time_key(value: str | None) -> float | None:
    """Seconds (comparable within one log) from the timestamps NCCL, glog, torchelastic and k8s write.

    Formats: ``2026-11-29 13:53:17[.123]``, ``2026-11-29T13:53:17.1Z``, ``2026-11-29_13:53:17`` (ChildFailedError),
    glog/c10 ``1129 13:53:17.629000`` (MMDD, no year: the year 2000 is assumed, so only compare these with
    each other and with same-day full dates by their time of day). Returns None when unparseable.
    """
    if not value:
        return None
    v = value.strip().strip("[]").strip()
    m = re.match(r"(\d{4})-(\d\d)-(\d\d)[ T_](\d\d):(\d\d):(\d\d(?:\.\d+)?)", v)
    m2 = re.match(r"(\d\d)-(\d\d)[ T_](\d\d):(\d\d):(\d\d(?:\.\d+)?)", v) if not m else None
    if m:
        y, mo, d, hh, mi, ss = m.groups()
    elif m2:
        mo, d, hh, mi, ss = m2.groups()
        y = "2000"
    else:
        m = re.match(r"[IWEF]?(\d{1,2})(\d\d) (\d\d):(\d\d):(\d\d(?:\.\d+)?)", v)
        if not m:
            return None
        mo, d, hh, mi, ss = m.groups()
        y = "2000"
    try:
        base = datetime(int(y), int(mo), int(d), int(hh), int(mi))
    except ValueError:
        return None
    # Day resolution is what ordering across formats can rely on; year-less stamps compare by day-of-year.
    day = base.timetuple().tm_yday
    return day * 86400.0 + int(hh) * 3600 + int(mi) * 60 + float(ss)


def version_number(v: str | None) -> str | None:
    """``2.28.9+cuda13.0`` -> ``2.28.9``."""
    if not v:
        return None
    m = _VERSION_NUM.search(v)
    return m.group(1) if m else v


_TRANSPORT_BASE: dict[str, str] = {}


def traceback_collective(ev: Event) -> str | None:
    """The torch.distributed collective a traceback stopped in (innermost distributed_c10d frame)."""
    frames = ev.get("frames") or []
    name = None
    for fr in frames:  # the traceback parser's frames: {"file", "line", "function"}
        if isinstance(fr, dict) and "distributed_c10d" in str(fr.get("file")) \
                and fr.get("function") in COLLECTIVE_FUNCS:
            name = fr["function"]
    if name is None:
        for line in ev.get("lines") or []:
            m = re.search(r'distributed_c10d\.py", line \d+, in (\w+)', str(line))
            if m and m.group(1) in COLLECTIVE_FUNCS:
                name = m.group(1)
    return name


def _error_evidence(ev: Event) -> Evidence:
    """The line that says what went wrong: for a traceback its exception line (``torch.OutOfMemoryError: ...``),
    not its first (``Traceback (most recent call last):``)."""
    lines = ev.get("lines")
    numbers = ev.get("line_numbers")
    exc = str(ev.get("exc_type") or "")
    if ev.kind == "python.traceback" and exc and isinstance(lines, list) and isinstance(numbers, list) \
            and len(lines) == len(numbers):
        short = exc.rsplit(".", 1)[-1]
        for text, n in zip(reversed(lines), reversed(numbers)):
            if isinstance(text, str) and isinstance(n, int) and (exc in text or f"{short}:" in text):
                return Evidence(ev.path, n, text)
    return Evidence(ev.path, ev.line, ev.text)

