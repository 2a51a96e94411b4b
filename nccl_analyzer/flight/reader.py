"""PyTorch Flight Recorder dumps -> plain records, without ever running code from the dump.

A dump is what ``ProcessGroupNCCL`` (and, on request, gloo) writes with ``TORCH_FR_BUFFER_SIZE`` /
``TORCH_NCCL_TRACE_BUFFER_SIZE`` set: ``FlightRecorder::dump()`` (c10d/FlightRecorderDetail.hpp, torch 2.2-2.14)
pickles one dict with ``torch::jit::Pickler`` (protocol 2, plain dicts/lists/tuples/str/int/float/bool/None, no
globals), ``FlightRecorder::dump_json()`` writes the same keys as JSON (``_dump_fr_trace_json``; no frames, 0 for
unknown times, string pg_status values). Schema versions seen in torch's sources: 2.3/2.4 and 2.7 (the NCCL
version under ``nccl_version``), 2.10 (``comm_lib_version``); before 2.4 the id was ``seq_id``. The dump is
untrusted input: the unpickler below refuses every global, so
a crafted pickle cannot import or call anything; anything odd becomes a ``DumpError`` with a one-line reason.
"""
from __future__ import annotations

import io
import json
import os
import pickle
import re
from dataclasses import dataclass, field
from typing import Any

#: Larger files are not read as dumps (a 2,000-entry dump with stacks is a few MiB).
MAX_DUMP_BYTES = 256 << 20
#: Entries read per dump (torch's ring buffer is TORCH_FR_BUFFER_SIZE entries; 2,000 is the usual setting).
MAX_ENTRIES = 100_000
_SNIFF = 512
# torch names the file <TORCH_FR_DUMP_TEMP_FILE or TORCH_NCCL_DEBUG_INFO_TEMP_FILE><global rank> (fr_trace's loader
# reads the rank the same way); a ".json"/".pkl" suffix someone added afterwards is allowed.
_RANK_SUFFIX = re.compile(r"(\d+)(?:\.(?:json|pkl|pickle))?$")
_DUMP_KEYS = (b"entries", b"pg_config", b"pg_status", b"comm_lib_version", b"nccl_comm_state")
_STATES = ("scheduled", "started", "completed")


class DumpError(ValueError):
    """A file that is not a readable Flight Recorder dump (hostile, truncated, corrupt, wrong shape)."""


class _PlainUnpickler(pickle.Unpickler):
    """Builds only containers and scalars: every opcode that needs a global (GLOBAL, STACK_GLOBAL, INST, OBJ,
    EXT*, then REDUCE/NEWOBJ/BUILD on what they pushed) goes through ``find_class``, which refuses."""

    def find_class(self, module: str, name: str) -> Any:  # noqa: D102 - pickle hook
        raise DumpError(f"the pickle asks for the global {module}.{name} (a Flight Recorder dump has none); "
                        "refused, nothing was run")

    def persistent_load(self, pid: Any) -> Any:  # noqa: D102 - pickle hook
        raise DumpError("the pickle holds a persistent reference (a Flight Recorder dump has none); refused")


@dataclass(frozen=True, slots=True)
class Frame:
    """One Python frame of the call that recorded an entry."""

    name: str
    filename: str
    line: int

    def where(self) -> str:
        return f"{self.filename}:{self.line}"


# Not frozen: a frozen __init__ costs ~5x more and a dump has thousands of entries (treat it as immutable).
@dataclass(slots=True)
class Entry:
    """One recorded collective / p2p op of one rank (the keys of ``getCollectiveTrace``)."""

    index: int  # 1-based position in the dump's entries (oldest first): the "line" evidence points at
    record_id: int
    pg_id: int
    pg_name: str
    pg_desc: str
    seq: int  # collective_seq_id
    p2p_seq: int
    op_id: int
    profiling_name: str
    input_sizes: tuple
    input_dtypes: tuple[str, ...]
    output_sizes: tuple
    output_dtypes: tuple[str, ...]
    state: str  # scheduled | started | completed
    time_created_ns: int | None
    time_started_ns: int | None
    time_completed_ns: int | None
    retired: bool
    timeout_ms: int | None
    is_p2p: bool
    frames: tuple[Frame, ...] = ()
    duration_ms: float | None = None

    @property
    def op(self) -> str:
        """The op without backend and p2p peers: ``nccl:send 1->2`` -> ``send``."""
        name = self.profiling_name.split(":", 1)[-1]
        return name.split(" ", 1)[0]

    @property
    def done(self) -> bool:
        """Finished on this rank: completed (NCCL events) or retired (the work object finished; gloo records
        no CUDA events, so its entries stay 'scheduled' and only ``retired`` says they ended)."""
        return self.state == "completed" or self.retired

    def summary(self) -> str:
        """The entry on one line (what evidence quotes for a dump)."""
        sizes = ",".join("x".join(str(d) for d in s) or "scalar" for s in self.input_sizes) or "-"
        dtypes = ",".join(self.input_dtypes) or "-"
        seq = f"p2p_seq_id={self.p2p_seq}" if self.is_p2p else f"collective_seq_id={self.seq}"
        state = self.state + (", retired" if self.retired else "")
        return (f"entry {self.index}: pg {self.pg_name}({self.pg_desc}) {seq} {self.profiling_name} "
                f"in=[{sizes}] {dtypes} state={state}")


@dataclass(slots=True)
class Dump:
    """One rank's dump."""

    path: str
    rank: int | None
    format: str  # pickle | json
    version: str
    comm_lib_version: str
    pg_config: dict[str, dict[str, Any]]  # pg name -> {"desc", "ranks": [global ranks]}
    pg_status: dict[str, dict[str, int]]  # pg id -> last_enqueued/started/completed_collective
    entries: list[Entry]
    warnings: list[str] = field(default_factory=list)


def sniff(path: str, strict: bool = True) -> str | None:
    """``'pickle'`` or ``'json'`` when the file's first bytes look like a Flight Recorder dump, else None.

    By content, not name: a protocol-2+ pickle whose first keys are the dump's, or a JSON object naming them.
    ``strict=False`` (a file named on the command line) takes any pickle: it is no log either way, and reading it
    as a dump gives a clear refusal instead of binary noise.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(_SNIFF)
    except OSError:
        return None
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        # torch::jit::Pickler: PROTO 2, EMPTY_DICT, ... the first key is "version" (2.2+), then pg_config etc.
        return "pickle" if not strict or b"version" in head[:64] or any(k in head for k in _DUMP_KEYS) else None
    if head.lstrip().startswith(b"{") and any(b'"' + k + b'"' in head for k in _DUMP_KEYS):
        return "json"
    return None


def rank_from_name(path: str) -> int | None:
    """The global rank torch appended to the dump's file name, or None."""
    m = _RANK_SUFFIX.search(os.path.basename(path))
    return int(m.group(1)) if m else None


def read_dump(path: str, rank: int | None = None) -> Dump:
    """Read one dump (pickle or JSON, by content).

    Args:
        path: the file.
        rank: the rank when known otherwise (the log line that named the file); else from the file name.

    Raises:
        DumpError: unreadable, too large, hostile, truncated, corrupt, or not a dump's shape.
    """
    try:
        size = os.path.getsize(path)
        if size > MAX_DUMP_BYTES:
            raise DumpError(f"{size} bytes is larger than a Flight Recorder dump ({MAX_DUMP_BYTES >> 20} MiB at most)")
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise DumpError(f"cannot read it: {exc.strerror or exc}") from None
    kind = "pickle" if data[:1] == b"\x80" else "json"
    raw = _decode_pickle(data) if kind == "pickle" else _decode_json(data)
    if rank is None:
        rank = rank_from_name(path)
    return _to_dump(raw, path, rank, kind)


def _decode_pickle(data: bytes) -> Any:
    try:
        return _PlainUnpickler(io.BytesIO(data)).load()
    except DumpError:
        raise
    except EOFError:
        raise DumpError("the pickle ends early (truncated dump: the process may have died while writing it)") from None
    # Untrusted bytes can make the unpickler fail in many ways (bad opcode, memo index, struct sizes, recursion);
    # each is a broken file, never a crash of ours.
    except Exception as exc:  # noqa: BLE001
        raise DumpError(f"not a valid pickle ({type(exc).__name__}: {_short(exc)})") from None


def _decode_json(data: bytes) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise DumpError("not UTF-8 JSON") from None
    except RecursionError:
        raise DumpError("JSON nested too deeply") from None
    except ValueError as exc:
        raise DumpError(f"not valid JSON ({_short(exc)}; truncated?)") from None


def _short(exc: BaseException) -> str:
    s = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return s[:120]


def _to_dump(raw: Any, path: str, rank: int | None, kind: str) -> Dump:
    if not isinstance(raw, dict):
        raise DumpError(f"the top level is a {type(raw).__name__}, not the dump's dict")
    keys = {k for k in raw if isinstance(k, str)}
    if "entries" not in keys and not ({"pg_config", "version"} <= keys):
        raise DumpError("no 'entries', 'pg_config' or 'version' key: not a Flight Recorder dump")
    entries_raw = raw.get("entries", [])
    if not isinstance(entries_raw, list):
        raise DumpError("'entries' is not a list")
    warnings: list[str] = []
    entries: list[Entry] = []
    bad = 0
    if len(entries_raw) > MAX_ENTRIES:
        warnings.append(f"{len(entries_raw)} entries: only the last {MAX_ENTRIES} were read")
        entries_raw = entries_raw[-MAX_ENTRIES:]
    cache: dict[tuple, Frame] = {}
    for i, e in enumerate(entries_raw, 1):
        try:
            entries.append(_entry(e, i, cache))
        except (KeyError, TypeError, ValueError):
            bad += 1
    if bad:
        warnings.append(f"{bad} of {len(entries_raw)} entries have an unexpected shape and were skipped")
    return Dump(path=path, rank=rank, format=kind, version=_str(raw.get("version")),
                comm_lib_version=_str(raw.get("comm_lib_version") or raw.get("nccl_version")),
                pg_config=_pg_config(raw.get("pg_config")), pg_status=_pg_status(raw.get("pg_status")),
                entries=entries, warnings=warnings)


def _frames(raw: Any, cache: dict[tuple, Frame]) -> tuple[Frame, ...]:
    """Frames of one entry; equal frames (every entry of a training loop shares most of them) are one object."""
    if not isinstance(raw, list):
        return ()
    out = []
    for f in raw:
        if isinstance(f, dict):
            key = (f.get("name"), f.get("filename"), f.get("line"))
            fr = cache.get(key)
            if fr is None:
                fr = cache[key] = Frame(name=_str(key[0]), filename=_str(key[1]), line=_int(key[2]) or 0)
            out.append(fr)
    return tuple(out)


def _entry(e: Any, index: int, cache: dict[tuple, Frame]) -> Entry:
    if not isinstance(e, dict):
        raise TypeError("entry")
    pg = e.get("process_group", ("", ""))
    if not isinstance(pg, (list, tuple)) or len(pg) != 2:
        raise ValueError("process_group")
    state = e.get("state", "scheduled")
    if state not in _STATES:
        raise ValueError("state")
    # torch < 2.4 named collective_seq_id 'seq_id' and had no p2p_seq_id / is_p2p.
    seq = e.get("collective_seq_id", e.get("seq_id"))
    name = e["profiling_name"]
    if not isinstance(name, str):
        raise TypeError("profiling_name")
    frames = _frames(e.get("frames"), cache)
    duration = e.get("duration_ms")
    return Entry(
        index=index, record_id=_int(e.get("record_id"), index - 1), pg_id=_int(e.get("pg_id"), 0),
        pg_name=_str(pg[0]), pg_desc=_str(pg[1]), seq=_int(seq, 0), p2p_seq=_int(e.get("p2p_seq_id"), 0),
        op_id=_int(e.get("op_id"), 0), profiling_name=name, input_sizes=_sizes(e.get("input_sizes")),
        input_dtypes=_strs(e.get("input_dtypes")), output_sizes=_sizes(e.get("output_sizes")),
        output_dtypes=_strs(e.get("output_dtypes")), state=state, time_created_ns=_time(e.get("time_created_ns")),
        time_started_ns=_time(e.get("time_discovered_started_ns")),
        time_completed_ns=_time(e.get("time_discovered_completed_ns")), retired=e.get("retired") is True,
        timeout_ms=_int(e.get("timeout_ms")),
        is_p2p=e.get("is_p2p") is True or name.split(":", 1)[-1].startswith(("send", "recv")),
        frames=frames, duration_ms=float(duration) if isinstance(duration, (int, float)) else None)


def _pg_config(raw: Any) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    if not isinstance(raw, dict):
        return out
    for name, info in raw.items():
        if not isinstance(info, dict):
            continue
        ranks = info.get("ranks")
        if isinstance(ranks, str):  # "[0, 1, 2, 3]" (ranks_str)
            ranks = [int(x) for x in re.findall(r"\d+", ranks)]
        out[str(name)] = {"desc": _str(info.get("desc")),
                          "ranks": [r for r in ranks if isinstance(r, int)] if isinstance(ranks, list) else []}
    return out


def _pg_status(raw: Any) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    if not isinstance(raw, dict):
        return out
    for pg, st in raw.items():
        if isinstance(st, dict):
            out[str(pg)] = {str(k): v for k, v in ((k, _int(v)) for k, v in st.items()) if v is not None}
    return out


def _sizes(raw: Any) -> tuple:
    if not isinstance(raw, (list, tuple)):
        return ()
    return tuple(tuple(d for d in s if type(d) is int) for s in raw if isinstance(s, (list, tuple)))


def _strs(raw: Any) -> tuple[str, ...]:
    return tuple(str(x) for x in raw) if isinstance(raw, (list, tuple)) else ()


def _str(v: Any) -> str:
    return v if isinstance(v, str) else ("" if v is None else str(v))


def _int(v: Any, default: int | None = None) -> int | None:
    if type(v) is int:
        return v
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, str) and re.fullmatch(r"-?\d+", v.strip()):
        return int(v)
    return default


def _time(v: Any) -> int | None:
    t = _int(v)
    return t if t else None  # JSON dumps write 0 for "not seen"
