"""The job model's shared values and helpers: caps, one object per repeated value, timestamps, versions, the
collective a traceback stopped in, the line that says what went wrong (used by job.py and its handler modules)."""
from __future__ import annotations

import re
from datetime import datetime
from collections.abc import Iterator, MutableMapping
from typing import Any

from .intern import interned
from .model import Event, Evidence

#: Entries kept per rank timeline; processes (pids, hosts) and communicators remembered at most.
TIMELINE_CAP = 64
_PID_CAP = 65536
_COMM_CAP = 4096
#: Larger "nranks" / rank numbers are not a job's (the largest runs have ~10^5 ranks): a mangled number.
MAX_WORLD = 1 << 20
#: A timeline entry's keys, in order.
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




def _shared_value(v: Any) -> Any:
    """One object per distinct short string or int of the per-rank records (every rank's watchdog entry holds the
    same op, sizes and timeout)."""
    if v.__class__ is not int and (v.__class__ is not str or len(v) > 64):
        return v
    return interned(_VALUES, v)


def _shared_time(t: str | None) -> str | None:
    """One string object per distinct timeline time."""
    return None if t is None else interned(_TIMES, t)


_HEADS: dict[Any, Any] = {}  # timeline entries' (kind, path, what), one tuple per distinct one


class Timelines:
    """Every rank's timeline while the model is built (``TIMELINE_CAP`` entries at most): one flat list per rank,
    three items an entry -- its (kind, path, what) as one tuple shared by every rank's entry of that label, its line,
    its time -- instead of a 5-tuple per entry (at 1,000 ranks ~7,000 tuples, 0.4 KiB a rank). ``dicts`` gives the
    ``RankInfo.timeline`` entries (``_TIMELINE_KEYS``) that ``JobBuilder.build`` sets."""

    __slots__ = ("_flat",)

    def __init__(self) -> None:
        self._flat: dict[int, list[Any]] = {}

    def count(self, r: int) -> int:
        """Entries rank ``r`` has."""
        flat = self._flat.get(r)
        return 0 if flat is None else len(flat) // 3

    def put(self, r: int, kind: str, path: str, line: int, time: Any, what: str, replace_last: bool) -> None:
        """Add one entry to rank ``r``'s timeline; once it is full, replace its last one (``replace_last``: keep the
        latest event visible at the end) or drop the new one."""
        flat = self._flat.get(r)
        if flat is None:
            flat = self._flat[r] = []
        head = interned(_HEADS, (kind, path, what))
        if len(flat) < 3 * TIMELINE_CAP:
            flat += (head, line, time)
        elif replace_last:
            flat[-3:] = (head, line, time)

    def move(self, old: int, new: int) -> None:
        """Rank ``old``'s entries become rank ``new``'s (appended while there is room); ``old`` has none after."""
        flat = self._flat.pop(old, None)
        if not flat:
            return
        for i in range(0, len(flat), 3):
            (kind, path, what), line, time = flat[i], flat[i + 1], flat[i + 2]
            self.put(new, kind, path, line, time, what, False)

    def dicts(self, r: int) -> list[dict[str, Any]] | None:
        """Rank ``r``'s entries as ``RankInfo.timeline`` holds them (None: it has none)."""
        flat = self._flat.get(r)
        if not flat:
            return None
        return [{"kind": flat[i][0], "path": flat[i][1], "line": flat[i + 1], "time": flat[i + 2], "what": flat[i][2]}
                for i in range(0, len(flat), 3)]


_FIELD_NAMES: dict[Any, Any] = {}  # the key tuples of ``RecordTable`` rows, one per distinct order of keys


class RecordTable(MutableMapping):
    """rank -> a small dict (the last collective, torchrun's exit record), each held as one tuple: the dict's keys (a
    tuple shared by every row with those keys in that order) and then its values. A 10-key dict is 272 bytes, an
    11-key one 464; the row 128-136. Reading a rank gives a new dict equal to the one stored (order included);
    changing that dict changes nothing stored: store it again."""

    __slots__ = ("_rows",)

    def __init__(self) -> None:
        self._rows: dict[Any, tuple[Any, ...]] = {}

    def __getitem__(self, key: Any) -> dict[str, Any]:
        row = self._rows[key]
        return dict(zip(row[0], row[1:]))

    def __setitem__(self, key: Any, value: dict[str, Any]) -> None:
        self._rows[key] = (interned(_FIELD_NAMES, tuple(value)), *value.values())

    def __delitem__(self, key: Any) -> None:
        del self._rows[key]

    def __contains__(self, key: object) -> bool:
        return key in self._rows

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __repr__(self) -> str:
        return f"RecordTable({dict(self.items())!r})"


def one_or_more_add(table: dict[Any, Any], key: Any, value: Any) -> None:
    """Add ``value`` to the set ``table[key]``, held as the value itself while it is the only one (a set is 216 bytes:
    one per GPU and per process otherwise). Values are never sets or None themselves."""
    got = table.get(key)
    if got is None:
        table[key] = value
    elif got.__class__ is set:
        got.add(value)
    elif got != value:
        table[key] = {got, value}


#: Members of a ``versions_by_proc`` set kept: its smallest ones. Its readers use only those: the report the first 16
#: sorted (``versions_by_process``), ``nccl_versions_differ`` the first 80 characters of the sorted members joined by
#: ", " (63 separators alone are 126 characters), so every result is the same; 1,000 "host:pid" strings a version
#: otherwise (0.1 KiB a rank).
SMALLEST_KEPT = 64


def one_of_smallest(got: set[str], who: str) -> None:
    """Add ``who`` to ``got``, which keeps its ``SMALLEST_KEPT`` smallest members."""
    if who in got:
        return
    got.add(who)
    if len(got) > SMALLEST_KEPT:
        got.remove(max(got))


def one_or_more(got: Any) -> set[Any]:
    """The set a ``one_or_more_add`` entry stands for (a new set)."""
    return set(got) if got.__class__ is set else {got}


_VERSION_NUM = re.compile(r"(\d+\.\d+\.\d+)")
_BANNER_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+\S*)")
# Collective names as they appear in torch.distributed frames (distributed_c10d.py function names).
COLLECTIVE_FUNCS = frozenset({
    "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "_all_gather_base", "reduce_scatter",
    "reduce_scatter_tensor", "_reduce_scatter_base", "all_to_all", "all_to_all_single", "reduce", "gather",
    "scatter", "barrier", "send", "recv", "isend", "irecv", "batch_isend_irecv", "all_gather_object",
    "broadcast_object_list", "monitored_barrier", "gather_object", "scatter_object_list", "all_reduce_coalesced",
})
# distributed_c10d's helpers of all_gather_object & co. that pickle / unpickle outside any communication
_SERIALISE_FUNCS = frozenset({"_object_to_tensor", "_tensor_to_object"})
# The c10d kinds that mean "this rank hit a failure" (first error per rank, culprit/victim assignment).
ERROR_KINDS_PREFIX = ("nccl.warn.", "torch.watchdog", "torch.heartbeat", "torch.nccl_error", "torch.store.",
                      "torch.cuda.", "torch.desync", "python.traceback", "python.exception")
_TIMELINE_KINDS = ("nccl.init.start", "nccl.init.complete", "torch.elastic.", "torch.work.status")


# time_key's formats (compiled once: it reads the time of every event the timelines and the culprit compare)
_YMD_TIME = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ T_](\d\d):(\d\d):(\d\d(?:\.\d+)?)")
_MD_TIME = re.compile(r"(\d\d)-(\d\d)[ T_](\d\d):(\d\d):(\d\d(?:\.\d+)?)")
_GLOG_TIME = re.compile(r"[IWEF]?(\d{1,2})(\d\d) (\d\d):(\d\d):(\d\d(?:\.\d+)?)")


def time_key(value: str | None) -> float | None:
    """Seconds (comparable within one log) from the timestamps NCCL, glog, torchelastic and k8s write.

    Formats: ``2026-11-29 13:53:17[.123]``, ``2026-11-29T13:53:17.1Z``, ``2026-11-29_13:53:17`` (ChildFailedError),
    glog/c10 ``1129 13:53:17.629000`` (MMDD, no year: the year 2000 is assumed, so only compare these with
    each other and with same-day full dates by their time of day). Returns None when unparseable.
    """
    if not value:
        return None
    v = value.strip().strip("[]").strip()
    m = _YMD_TIME.match(v)
    m2 = _MD_TIME.match(v) if not m else None
    if m:
        y, mo, d, hh, mi, ss = m.groups()
    elif m2:
        mo, d, hh, mi, ss = m2.groups()
        y = "2000"
    else:
        m = _GLOG_TIME.match(v)
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
    """The torch.distributed collective a traceback stopped in (innermost distributed_c10d frame); None when the
    innermost one is an object collective's (de)serialisation: the rank raised pickling its object, not waiting."""
    frames = ev.get("frames") or []
    name = None
    for fr in frames:  # the traceback parser's frames: {"file", "line", "function"}
        if isinstance(fr, dict) and "distributed_c10d" in str(fr.get("file")):
            if fr.get("function") in COLLECTIVE_FUNCS:
                name = fr["function"]
            elif fr.get("function") in _SERIALISE_FUNCS:
                return None
    if name is None:
        for line in ev.get("lines") or []:
            m = re.search(r'distributed_c10d\.py", line \d+, in (\w+)', str(line))
            if m and m.group(1) in COLLECTIVE_FUNCS:
                name = m.group(1)
    if name is None and ev.get("comm_error") and frames and isinstance(frames[-1], dict) \
            and _AUTOGRAD_ENGINE.search(f"{frames[-1].get('file')}:{frames[-1].get('function')}"):
        # DDP's Reducer all-reduces the gradient buckets from C++ autograd hooks (torch/csrc/distributed/c10d/
        # reducer.cpp): no Python frame of it shows, so a communication error raised out of the autograd engine's
        # backward with no distributed_c10d frame is that gradient all_reduce (FSDP's hooks are Python: their
        # reduce_scatter frame shows and is taken above)
        name = "all_reduce"
    return name


# The autograd engine's entry as the innermost Python frame of a backward (torch >= 2.1: graph.py's
# _engine_run_backward; before: autograd/__init__.py backward calling Variable._execution_engine.run_backward)
_AUTOGRAD_ENGINE = re.compile(r"torch/autograd/(?:graph\.py:_engine_run_backward|__init__\.py:backward)$")


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

