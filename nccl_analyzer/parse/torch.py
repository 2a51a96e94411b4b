"""PyTorch distributed, torchelastic and Python-traceback lines -> events (one TorchParser per stream).

Three layers:

1. A prefilter (first character, then one small compiled regex) rejects lines that cannot be ours in well
   under a microsecond; lines inside an open multi-line block skip it.
2. Line prefixes (C++ c10 logger, glog, the three Python logging layouts, ``[c10d]`` tags, ``Warning: ...
   (function f)``) are split off with regexes; they carry timestamps, so they are not worth caching.
3. The message body is parsed by ``grammars/torch.lark`` (traceback lines by ``grammars/traceback.lark``),
   LALR with the transformer passed to Lark; results are cached per body because ranks repeat each other.

Multi-line texts (tracebacks, ``NCCL error in: ...`` + ``ncclInvalidUsage: ...`` + ``Last error:``, CUDA
error texts, ChildFailedError blocks, ``terminate called ...`` + ``what():``) are assembled here in Python,
one open block per wrapper key (``[rankN]:`` / ``[default0]:``), several per key when unprefixed tracebacks
interleave. All event kinds and fields are documented in ``docs/events.md`` (section ``torch / python``).
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from lark import Lark, Transformer, Token
from lark.exceptions import LarkError, VisitError

from ..model import Event, Line
from ..resources import parser_cache, read_grammar
from . import nccl as _nccl_shape

MAX_BLOCK_LINES = 200  # lines kept in fields["lines"] of one multi-line event
_IDLE_LINES = 400  # an unfinished traceback that saw nothing for this many input lines is closed
_CACHE_MAX = 8192

# ----------------------------------------------------------------------------------------------- Lark

_TORCH_STARTS = (
    "work_line", "watchdog_timeout", "watchdog_abort", "watchdog_exception", "work_status", "async_error",
    "failed_stack", "stack_frame", "heartbeat", "flight_recorder", "desync", "nccl_error", "nccl_detail",
    "comm_aborted", "unique_id", "pg_init", "store_listen", "socket_bind", "store_connect", "store_timeout",
    "store_closed", "gloo", "cuda_error", "xid", "cuda_search", "device_assert", "cuda_oom", "terminate", "what",
    "cpp_frame", "elastic", "failure_field",
)
_TB_STARTS = ("tb_header", "tb_chain", "tb_frame", "tb_exception")

_SIGNUM = {"SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGILL": 4, "SIGTRAP": 5, "SIGABRT": 6, "SIGBUS": 7,
           "SIGFPE": 8, "SIGKILL": 9, "SIGUSR1": 10, "SIGSEGV": 11, "SIGUSR2": 12, "SIGPIPE": 13,
           "SIGALRM": 14, "SIGTERM": 15, "SIGXCPU": 24}
_SIGNAME = {v: k for k, v in _SIGNUM.items()}
_UNITS = {"B": 1, "bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "PiB": 1 << 50,
          "EiB": 1 << 60, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}


def _int(tok: Any) -> int:
    return int(str(tok))


def _size_bytes(size: str) -> int | None:
    m = re.match(r"(\d+(?:\.\d+)?) ?(\w+)", size)
    if not m or m.group(2) not in _UNITS:
        return None
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def _signame(name: str) -> str:
    return name.split(".", 1)[1] if name.startswith("Signals.") else name


def _split_hostport(addr: str) -> tuple[str | None, int | None]:
    """``[::]:29500`` / ``0.0.0.0:29500`` / ``[node0]:29500`` / ``100.64.0.1:59782`` -> host, port."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        return addr or None, None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host or None, int(port)


def _pg(children: list) -> tuple[dict, list]:
    """Split the leading process-group prefix dicts from the other children."""
    pg: dict[str, Any] = {}
    rest = []
    for c in children:
        if isinstance(c, dict) and c.get("_pg"):
            pg.update(c)
        else:
            rest.append(c)
    pg.pop("_pg", None)
    return pg, rest


def _text(tok: Any) -> str | None:
    if tok is None:
        return None
    s = str(tok).strip()
    return s or None


class _Body(Transformer):
    """Message body -> ``(kind, fields)``; sub-rules return dicts. Pure: builds values, nothing else."""

    # -- process-group prefixes
    def pg_rank(self, c):
        return {"_pg": True, "pg_rank": _int(c[0])}

    def pg_v23(self, c):
        return {"_pg": True, "pg_name": str(c[0]), "pg_rank": _int(c[1])}

    def pg_v24(self, c):
        return {"_pg": True, "pg_name": str(c[0]), "pg_desc": str(c[1]), "pg_rank": _int(c[2])}

    def pg_v25(self, c):
        return {"_pg": True, "pg_id": _int(c[0]), "pg_name": str(c[1]), "pg_desc": str(c[2]), "pg_rank": _int(c[3])}

    def pg_v25_nodesc(self, c):
        return {"_pg": True, "pg_id": _int(c[0]), "pg_name": str(c[1]), "pg_rank": _int(c[2])}

    # -- WorkNCCL
    def numels(self, c):
        return {"numel_in": _int(c[0]), "numel_out": _int(c[1])}

    def work(self, c):
        out = {"seq": _int(c[0]), "op_type": str(c[1])}
        if len(c) == 4:
            out.update(c[2])
        out["timeout_ms"] = _int(c[-1])
        return out

    def work_line(self, c):
        return "torch.work", dict(c[0])

    # -- watchdog
    def timeout_watchdog(self, c):
        pg, rest = _pg(c)
        f = {**pg, **rest[0], "form": "watchdog"}
        if len(rest) > 1 and isinstance(rest[1], Token) and rest[1].type == "INT":
            f["elapsed_ms"] = _int(rest[1])
        return "torch.watchdog.timeout", f

    def timeout_watchdog_text(self, c):
        pg, rest = _pg(c)
        return "torch.watchdog.timeout", {**pg, "form": "watchdog", "detail": _text(rest[0])}

    def timeout_blocking(self, c):
        pg, rest = _pg(c)
        return "torch.watchdog.timeout", {**pg, **rest[0], "form": "blocking_wait", "blocking_wait": True}

    def abort_ops_failed(self, c):
        pg, _ = _pg(c)
        return "torch.watchdog.abort", {**pg, "reason": "ops_failed"}

    def abort_taking_down(self, c):
        pg, _ = _pg(c)
        return "torch.watchdog.abort", {**pg, "reason": "taking_process_down"}

    def wd_exception(self, c):
        pg, rest = _pg(c)
        return "torch.watchdog.exception", {**pg, "what": _text(rest[0]) if rest else None}

    def wd_unknown(self, c):
        pg, _ = _pg(c)
        return "torch.watchdog.exception", {**pg, "what": "unknown"}

    def _status(self, c, form):
        pg, rest = _pg(c)
        return "torch.work.status", {**pg, "form": form, "seq": _int(rest[0]), "last_enqueued": _int(rest[1]),
                                     "last_completed": _int(rest[2])}

    def status_timeout(self, c):
        return self._status(c, "timeout")

    def status_exception(self, c):
        return self._status(c, "exception")

    def status_failure(self, c):
        return self._status(c, "failure")

    def async_found(self, c):
        pg, rest = _pg(c)
        return "torch.work.async_error", {**pg, "what": _text(rest[0]) if rest else None}

    def async_raised(self, c):
        pg, rest = _pg(c)
        return "torch.work.async_error", {**pg, **rest[0], "what": _text(rest[1]) if len(rest) > 1 else None}

    def stack_header(self, c):
        pg, _ = _pg(c)
        return "torch.work.stack", {**pg, "found": True}

    def stack_not_found(self, c):
        pg, _ = _pg(c)
        return "torch.work.stack", {**pg, "found": False}

    def stack_frame(self, c):
        file, _, line = str(c[2]).rpartition(":")
        return "torch.work.stack_frame", {"index": _int(c[0]), "function": str(c[1]), "file": file, "src_line": int(line)}

    # -- heartbeat monitor
    def heartbeat_timeout(self, c):
        pg, rest = _pg(c)
        f = {**pg}
        if rest:
            f["work_meta_list_size"] = _int(rest[0])
        return "torch.heartbeat.timeout", f

    def watchdog_stuck(self, c):
        pg, rest = _pg(c)
        f = {**pg, "seconds": _int(rest[0])}
        m = re.search(r"workMetaList_\.size\(\) = (\d+)", str(rest[1])) if len(rest) > 1 else None
        if m:
            f["work_meta_list_size"] = int(m.group(1))
        return "torch.watchdog.stuck", f

    def heartbeat_terminate(self, c):
        pg, rest = _pg(c)
        return "torch.heartbeat.terminate", {**pg, "reason": (_text(rest[0]) or "").rstrip(".")}

    def heartbeat_disabled(self, c):
        pg, rest = _pg(c)
        text = _text(rest[0]) or ""
        reason = text.split("due to ", 1)[1].rstrip(".") if "due to " in text else text
        return "torch.heartbeat.terminate", {**pg, "reason": reason, "monitoring_disabled": True}

    # -- flight recorder
    def fr_dump_signal(self, c):
        pg, rest = _pg(c)
        source = str(rest[0]).strip()
        f = {**pg, "stage": "dump_signal", "source": source}
        m = re.match(r"rank (\d+)", source)
        if m:
            f["source_rank"] = int(m.group(1))
        ints = [t for t in rest[1:] if isinstance(t, Token) and t.type == "INT"]
        if len(ints) == 2:
            f["last_enqueued"], f["last_completed"] = _int(ints[0]), _int(ints[1])
        return "torch.flight_recorder", f

    def fr_old_signal(self, c):
        pg, rest = _pg(c)
        return "torch.flight_recorder", {**pg, "stage": "dump_signal", "source": _text(rest[0]) if rest else None}

    def fr_first(self, c):
        pg, _ = _pg(c)
        return "torch.flight_recorder", {**pg, "stage": "first_signal"}

    def fr_preparing(self, c):
        pg, rest = _pg(c)
        f = {**pg, "stage": "preparing"}
        if len(rest) == 2:
            f["include_stack_trace"], f["only_active"] = bool(_int(rest[0])), bool(_int(rest[1]))
        return "torch.flight_recorder", f

    def fr_dumping(self, c):
        pg, rest = _pg(c)
        return "torch.flight_recorder", {**pg, "stage": "dumping", "file": _text(rest[0])}

    def fr_finished(self, c):
        pg, _ = _pg(c)
        return "torch.flight_recorder", {**pg, "stage": "finished"}

    def fr_incomplete(self, c):
        pg, rest = _pg(c)
        return "torch.flight_recorder", {**pg, "stage": "timeout", "timeout_ms": _int(rest[0])}

    # -- desync report
    def desync_timeout(self, c):
        return "torch.desync", {"desync_rank": _int(c[0]), "op_type": str(c[1]), "seq": _int(c[2])}

    def desync_lagging(self, c):
        return "torch.desync", {"lagging_ranks": [int(x) for x in re.findall(r"\d+", str(c[0]))]}

    def desync_joined(self, c):
        # ranks whose last event is the start of the earliest collective any rank is at: they wait in it
        return "torch.desync", {"lagging_ranks": [int(x) for x in re.findall(r"\d+", str(c[0]))],
                                "lag_seq": _int(c[1]), "lag_state": "joined"}

    def desync_finished(self, c):
        # ranks that finished that collective and never started the next one: behind in their own code
        return "torch.desync", {"lagging_ranks": [int(x) for x in re.findall(r"\d+", str(c[0]))],
                                "lag_seq": _int(c[1]), "lag_state": "finished"}

    def desync_other(self, c):
        return "torch.desync", {}

    # -- NCCL errors
    def nccl_error_sync(self, c):
        file, _, line = str(c[1]).rpartition(":")
        f = {"form": "timeout" if "timeout" in str(c[0]) else "sync", "file": file, "src_line": int(line),
             "error_string": str(c[2]).strip()}
        if len(c) > 3:
            f["nccl_version"] = str(c[3])
        return "torch.nccl_error", f

    def nccl_error_async(self, c):
        f = {"form": "async", "error_string": str(c[0]).strip()}
        if len(c) > 1:
            f["nccl_version"] = str(c[1])
        return "torch.nccl_error", f

    def nccl_error_reason(self, c):
        return "torch.nccl_error", {"form": "pg_reason", "reason": _text(c[0]) if c else None}

    def nccl_interpretation(self, c):
        return "torch.nccl_error", {"form": "detail", "nccl_result": str(c[0]),
                                    "interpretation": _text(c[1]) if len(c) > 1 else None}

    def nccl_unknown(self, c):
        return "torch.nccl_error", {"form": "detail", "nccl_result": "unknown"}

    def nccl_last_error(self, c):
        return "torch.nccl_error", {"form": "last_error", "last_error": _text(c[0]) if c else None}

    def comm_aborted(self, c):
        return "torch.nccl.comm_aborted", {"aborted_rank": _int(c[0]), "reason": _text(c[1]) if len(c) > 1 else None}

    def unique_id_single(self, c):
        what = str(c[4]).split(". This may indicate", 1)[0]
        return "torch.nccl.unique_id_error", {"global_rank": _int(c[0]), "root": _int(c[1]), "key": str(c[2]),
                                              "what": what}

    def unique_id_multi(self, c):
        what = str(c[2]).split(". This may indicate", 1)[0]
        return "torch.nccl.unique_id_error", {"global_rank": _int(c[0]), "key": str(c[1]), "what": what}

    # -- ProcessGroupNCCL init
    def kv(self, c):
        return str(c[0]).strip(), (str(c[1]).strip() if len(c) > 1 else "")

    def pg_init(self, c):
        pg, rest = _pg(c)
        head = str(rest[0])
        form = {"ProcessGroupNCCL initialization options:": "options", "ProcessGroupNCCL environments:": "environments",
                "PGNCCL Watchdog environments:": "watchdog_environments",
                "HeartbeatMonitor environments:": "heartbeat_environments"}[head]
        settings = dict(rest[1:])
        f: dict[str, Any] = {**pg, "form": form, "settings": settings}
        for key, name in (("NCCL version", "nccl_version"), ("size", "size"), ("global rank", "global_rank"),
                          ("TIMEOUT(ms)", "timeout_ms"), ("PG Name", "pg_name"), ("PG Description", "pg_desc")):
            if key in settings:
                v = settings[key]
                f[name] = int(v) if name in ("size", "global_rank", "timeout_ms") and v.lstrip("-").isdigit() else v
        return "torch.pg.init", f

    # -- TCPStore / sockets
    def sock_err(self, c):
        return {"errno": _int(c[0]), "strerror": str(c[1]).strip()}

    def bind_failure(self, c):
        host, port = _split_hostport(str(c[0]))
        return {"addr": str(c[0]), "host": host, "port": port, **c[1]}

    def listen_legacy(self, c):
        binds = list(c)
        f: dict[str, Any] = {"backend": "legacy", "binds": binds}
        if binds:
            f.update({"port": binds[0]["port"], "errno": binds[0]["errno"], "strerror": binds[0]["strerror"]})
        return "torch.store.listen_error", f

    def uv_details(self, c):
        c = list(c)
        f: dict[str, Any] = {}
        if len(c) == 5:
            f["port"] = _int(c.pop(0))
        f.update({"use_ipv6": str(c[0]), "code": _int(c[1]), "code_name": str(c[2]), "message": _text(c[3])})
        f["errno"] = -f["code"]
        return f

    def listen_libuv(self, c):
        return "torch.store.listen_error", {"backend": "libuv", **c[0]}

    def bind_libuv(self, c):
        return "torch.store.listen_error", {"backend": "libuv", "form": "bind", **c[0]}

    def bind_uv23(self, c):
        return "torch.store.listen_error", {"backend": "libuv", "form": "bind", "use_ipv6": str(c[0]),
                                           "code": _int(c[1]), "errno": -_int(c[1]), "code_name": str(c[2]),
                                           "message": _text(c[3])}

    def socket_bind(self, c):
        host, port = _split_hostport(str(c[0]))
        return "torch.socket.bind_error", {"addr": str(c[0]), "host": host, "port": port, **c[1]}

    def connect_timeout(self, c):
        dur = str(c[0])
        m = re.match(r"(\d+(?:\.\d+)?)(ns|us|ms|s|min|h)", dur)
        mult = {"ns": 1e-6, "us": 1e-3, "ms": 1, "s": 1000, "min": 60000, "h": 3600000}[m.group(2)] if m else 1
        return "torch.store.connect_error", {"form": "timeout", "timeout": dur,
                                             "timeout_ms": int(float(m.group(1)) * mult) if m else None,
                                             "host": str(c[1]), "port": _int(c[2])}

    def connect_failed(self, c):
        host, port = _split_hostport(str(c[0]))
        return "torch.store.connect_error", {"form": "failed", "addr": str(c[0]), "host": host, "port": port, **c[1]}

    def connect_any_failed(self, c):
        return "torch.store.connect_error", {"form": "failed", "host": str(c[0]), "port": _int(c[1])}

    def connect_retry(self, c):
        host, port = _split_hostport(str(c[0]))
        ints = [t for t in c[2:] if isinstance(t, Token) and t.type == "INT"]
        f = {"form": "retry" if str(c[1]) == "retrying" else "retry_timeout", "host": host, "port": port,
             "try": _int(ints[0]), "timeout_ms": _int(ints[1])}
        if len(ints) > 2:
            f["delay_ms"] = _int(ints[2])
        texts = [t for t in c[2:] if isinstance(t, Token) and t.type == "TEXT"]
        f["what"] = _text(texts[0]) if texts else None
        return "torch.store.connect_error", f

    def wait_clients(self, c):
        return "torch.store.timeout", {"form": "wait_clients", "seconds": _int(c[0]), "joined": _int(c[1]),
                                       "expected": _int(c[2])}

    def wait_keys(self, c):
        keys = _text(c[1]) if len(c) > 1 else None
        return "torch.store.timeout", {"form": "wait_keys", "timeout_ms": _int(c[0]),
                                       "keys": keys.split(", ") if keys else []}

    def socket_timeout(self, c):
        return "torch.store.timeout", {"form": "socket_timeout"}

    def store_closed(self, c):
        return "torch.store.connection_closed", {}

    # -- gloo
    def gloo(self, c):
        file, _, line = str(c[0]).rpartition(":")
        return "torch.gloo.error", {"file": file, "src_line": int(line), **c[1]}

    def gloo_timeout(self, c):
        return {"gloo_error": "timeout", "timeout_ms": _int(c[0]), "op": str(c[1])}

    def gloo_closed(self, c):
        return {"gloo_error": "connection_closed", "peer": _text(c[0]) if c else None}

    def gloo_reset(self, c):
        return {"gloo_error": "connection_reset", "peer": _text(c[0]) if c else None}

    def gloo_other(self, c):
        return {"gloo_error": "other", "detail": _text(c[0])}

    # -- CUDA
    def cuda_error(self, c):
        return "torch.cuda.error", {"cuda_error": _text(c[0])}

    def cuda_failure_plain(self, c):
        return "torch.cuda.error", {"cuda_error": str(c[1])[1:-1], "src_location": str(c[0]), "form": "cuda_check"}

    def cuda_failure_tests(self, c):
        return "torch.cuda.error", {"cuda_error": str(c[2])[1:-1], "src_location": str(c[1]), "form": "cuda_check",
                                    "host": str(c[0])}

    def cuda_runtime_error(self, c):
        m = _AT_LOC.search(_text(c[1]))
        text = _text(c[1])[:m.start()] if m else _text(c[1])
        return "torch.cuda.error", {"cuda_error": text.strip(), "cuda_code": int(c[0]), "form": "thc",
                                    **({"src_location": m.group(1)} if m else {})}

    def thc_check_fail(self, c):
        return "torch.cuda.error", {"cuda_error": _text(c[3]).strip(), "cuda_code": int(c[2]), "form": "thc_check",
                                    "src_location": f"{c[0]}:{c[1]}"}

    def xid(self, c):
        c = [t for t in c if getattr(t, "type", None) != "DMESG_TS"]
        detail = _text(c[2]).strip() if len(c) > 2 else ""
        return "system.xid", {"xid": int(c[1]), "pci": str(c[0]), "detail": detail}

    def cuda_driver_error(self, c):
        return "torch.cuda.error", {"cuda_error": _text(c[0]), "driver": True}

    def cuda_search(self, c):
        return "torch.cuda.error", {"form": "search", "cuda_error_name": str(c[0])}

    def device_assert(self, c):
        file, _, line = str(c[0]).rpartition(":")
        return "torch.cuda.device_assert", {"file": file, "src_line": int(line), "function": str(c[1]).strip(),
                                            "block": str(c[2]), "thread": str(c[3]), "assertion": _text(c[4])}

    def oom_v1_tail(self, c):
        return {"reserved": str(c[0])} if c and isinstance(c[0], Token) and c[0].type == "SIZE" else {}

    def _oom(self, tried, gpu, total, free):
        return {"tried_to_allocate": str(tried), "tried_to_allocate_bytes": _size_bytes(str(tried)), "gpu": _int(gpu),
                "total": str(total), "total_bytes": _size_bytes(str(total)), "free": str(free),
                "free_bytes": _size_bytes(str(free))}

    def oom_v1(self, c):
        f = self._oom(c[0], c[1], c[2], c[4])
        f.update({"form": "v1", "allocated": str(c[3]), **c[5]})
        return "torch.cuda.oom", f

    def usage_self(self, c):
        return {"process_in_use": str(c[0])}

    def usage_other(self, c):
        return {"other_process": {"pid": _int(c[0]), "in_use": str(c[1])}}

    def oom_alloc(self, c):
        return {"allocated": str(c[0]), "reserved_unallocated": str(c[1])}

    def oom_v2(self, c):
        f = self._oom(c[0], c[1], c[2], c[3])
        f["form"] = "v2"
        others = []
        for d in c[4:]:
            if isinstance(d, dict):
                if "other_process" in d:
                    others.append(d["other_process"])
                else:
                    f.update(d)
        if others:
            f["other_processes"] = others
        return "torch.cuda.oom", f

    def oom_other(self, c):
        return "torch.cuda.oom", {"form": "other"}

    # -- C++ exceptions
    def terminate_type(self, c):
        return "torch.terminate", {"cpp_type": str(c[0])}

    def terminate_other(self, c):
        return "torch.terminate", {"cpp_type": None, "detail": _text(c[0])}

    def what(self, c):
        return "torch.terminate.what", {"what": _text(c[1]) if len(c) > 1 else None}

    def cpp_raised_from(self, c):
        file, _, line = str(c[1]).rpartition(":")
        return "torch.cpp.raised_from", {"function": str(c[0]), "file": file, "src_line": int(line)}

    def cpp_frame(self, c):
        return "torch.cpp.frame", {"index": _int(c[0])}

    # -- torchelastic
    def worker_failed(self, c):
        code = _int(c[0])
        f = {"exitcode": code, "local_rank": _int(c[1]), "worker_pid": _int(c[2])}
        entry = _text(c[4]) if len(c) > 4 else None
        if len(c) > 3:  # (a record wrapped after "of" has neither)
            f["binary" if str(c[3]) == "binary" else "fn"] = entry
        if code < 0:
            f["signal"] = _SIGNAME.get(-code, f"SIG{-code}")
        return "torch.elastic.worker_failed", f

    def launcher_exit(self, c):
        code = _int(c[1])
        f = {"exitcode": code, "launcher": "deepspeed"}
        m = re.search(r"--local_rank=(\d+)", str(c[0]))
        if m:
            f["local_rank"] = int(m.group(1))
        if code < 0:
            f["signal"] = _SIGNAME.get(-code, f"SIG{-code}")
        return "torch.elastic.worker_failed", f

    def ray_oom_kill(self, c):
        return "torch.elastic.oom_kill", {"killed": _int(c[0]), "launcher": "ray", "signal": "SIGKILL"}

    def closing_signal(self, c):
        return "torch.elastic.sigterm", {"worker_pid": _int(c[0]), "signal": _signame(str(c[1]))}

    def forced_kill(self, c):
        return "torch.elastic.sigterm", {"worker_pid": _int(c[0]), "signal": _signame(str(c[2])), "form": "forced",
                                         "first_signal": _signame(str(c[1]))}

    def signal_received(self, c):
        return "torch.elastic.signal", {"signum": _int(c[0]), "signal": _signame(str(c[1])), "worker_pid": _int(c[2]),
                                        "form": "worker_signal"}

    def death_signal(self, c):
        # torch logs e.sigval with %s: "Signals.SIGTERM", or "15" where str() of an IntEnum is its value (3.11+)
        name = _SIGNAME.get(int(c[0]), str(c[0])) if str(c[0]).isdigit() else _signame(str(c[0]))
        return "torch.elastic.signal", {"signal": name, "signum": _SIGNUM.get(name), "form": "agent_death_signal"}

    def got_signal(self, c):
        n = _int(c[1])
        return "torch.elastic.signal", {"worker_pid": _int(c[0]), "signum": n, "signal": _SIGNAME.get(n),
                                        "form": "signal_exception"}

    def worker_group_restart(self, c):
        return "torch.elastic.restart", {"role": str(c[0]), "state": str(c[1]), "remaining": _int(c[2]),
                                         "max_restarts": _int(c[3])}

    def omp_threads(self, c):
        return "torch.elastic.omp_threads", {"omp_num_threads": _int(c[0])}

    # ChildFailedError entry lines -> ("ff", {...}); the block is assembled by _child_entries()
    def ff_index(self, c):
        return "ff", {"index": _int(c[0])}

    def ff_time(self, c):
        return "ff", {"time": _text(c[0]) if c else None}

    def ff_host(self, c):
        return "ff", {"host": _text(c[0]) if c else None}

    def ff_rank(self, c):
        return "ff", {"rank": _int(c[0]), "local_rank": _int(c[1])}

    def ff_exitcode(self, c):
        f = {"exitcode": _int(c[0]), "pid": _int(c[1])}
        if len(c) > 2:
            f["signal"] = _signame(str(c[2]))
        elif f["exitcode"] < 0:
            f["signal"] = _SIGNAME.get(-f["exitcode"], f"SIG{-f['exitcode']}")
        return "ff", f

    def ff_error_file(self, c):
        return "ff", {"error_file": _text(c[0]) if c else None}

    def ff_traceback(self, c):
        return "ff", {"traceback": _text(c[0]) if c else None}


class _Tb(Transformer):
    """Traceback line -> ``(kind, fields)``."""

    def tb_header(self, c):
        return "header", {}

    def chain_context(self, c):
        return "chain", {"relation": "context"}

    def chain_cause(self, c):
        return "chain", {"relation": "cause"}

    def tb_frame(self, c):
        return "frame", {"file": str(c[0]), "line": _int(c[1]), "function": str(c[2]).strip() if len(c) > 2 else None}

    def tb_exception(self, c):
        return "exception", {"exc_type": str(c[0]), "message": str(c[1]).strip() if len(c) > 1 else ""}


@lru_cache(maxsize=None)
def _lark_torch() -> Lark:
    return Lark(read_grammar("torch.lark"), parser="lalr", start=list(_TORCH_STARTS), transformer=_Body(),
                cache=parser_cache("torch"))


@lru_cache(maxsize=None)
def _lark_tb() -> Lark:
    return Lark(read_grammar("traceback.lark"), parser="lalr", start=list(_TB_STARTS), transformer=_Tb(),
                cache=parser_cache("traceback"))


def build_parsers(strict: bool = False) -> tuple[Lark, Lark]:
    """Fresh Lark parsers for both grammars (tests build them with ``strict=True``)."""
    return (Lark(read_grammar("torch.lark"), parser="lalr", start=list(_TORCH_STARTS), transformer=_Body(),
                 strict=strict),
            Lark(read_grammar("traceback.lark"), parser="lalr", start=list(_TB_STARTS), transformer=_Tb(),
                 strict=strict))


def _lark_parse(lark: Lark, text: str, start: str) -> tuple[str, dict] | None:
    try:
        return lark.parse(text, start=start)
    except VisitError:  # a transformer bug on odd input: treat as unparsed, never crash
        return None
    except LarkError:
        return None


# ------------------------------------------------------------------------------- body classification

# Process-group prefixes in front of a body (only to find the keyword; the grammar parses them).
_PG_SKIP = re.compile(r"(?:\[(?:Rank \d+|PG [^\]]*?Rank \d+)\] ?)*")

# Which start symbol a body goes to, by how its text (after PG prefixes) begins. First match wins; order
# matters where one text quotes another (a watchdog exception quotes a watchdog timeout).
_DISPATCH: tuple[tuple[tuple[str, ...], str], ...] = (
    (("Process group watchdog thread terminated", "NCCL watchdog thread terminated"), "watchdog_exception"),
    (("Watchdog caught collective operation timeout", "Work WorkNCCL("), "watchdog_timeout"),
    (("Some NCCL operations have failed", "To avoid data inconsistency"), "watchdog_abort"),
    (("Timeout at NCCL work:", "Exception (either an error or timeout) detected", "failure detected by watchdog",
      " failure detected by watchdog"), "work_status"),
    (("found async exception", "Collective WorkNCCL("), "async_error"),
    (("Stack trace of the failed collective",), "failed_stack"),
    (("Heartbeat monitor timed out", "ProcessGroupNCCL's watchdog got stuck", "Terminating the process after",
      "ProcessGroupNCCL monitor thread is disabled"), "heartbeat"),
    (("Received a dump signal", "Received a global", "ProcessGroupNCCL's watchdog detected", "First PG on this rank",
      "Observed flight recorder", "First watchdog to set", "ProcessGroupNCCL preparing to dump",
      "ProcessGroupNCCL dumping nccl trace", "Finished writing NCCLPG", "Finished writing Flight Recorder", "Finished flight recorder",
      "Flight Recorder trace", "Flight recorder dump"), "flight_recorder"),
    (("ProcessGroupNCCL initialization options", "ProcessGroupNCCL environments", "PGNCCL Watchdog environments",
      "HeartbeatMonitor environments"), "pg_init"),
    (("WorkNCCL(",), "work_line"),
    (("NCCL error in:", "NCCL timeout in:", "NCCL error:", "NCCL communicator encountered error"), "nccl_error"),
    (("nccl", "Unknown NCCL error!", "Last error:"), "nccl_detail"),
    (("NCCL communicator was aborted",), "comm_aborted"),
    (("The server socket has failed to listen on any", "The server socket has failed to bind.", "UV Store bind failed"),
     "store_listen"),
    (("The server socket has failed to bind to", "The server socket has failed to listen on "), "socket_bind"),
    (("The client socket", "TCP client failed"), "store_connect"),
    (("Timed out after", "wait timeout after", "Socket Timeout"), "store_timeout"),
    (("Failed to recv, got 0 bytes",), "store_closed"),
    (("CUDA error:", "CUDA driver error:", "Cuda failure ", "cuda runtime error (", "THCudaCheck FAIL "),
     "cuda_error"),
    (("NVRM: Xid (",), "xid"),
    (("CUDA out of memory",), "cuda_oom"),
    (("Search for `cuda",), "cuda_search"),
    (("terminate called",), "terminate"),
    (("Exception raised from", "frame #"), "cpp_frame"),
    (("failed (exitcode:", "Sending process", "Unable to shutdown process", "Signal ", "Received ", "Process ",
      "Setting OMP_NUM_THREADS"), "elastic"),
    (("\t",), "desync"),
    (("#",), "stack_frame"),
)
_RE_STARTS: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"\[\d+\] is setting up NCCL"), "unique_id"),
    (re.compile(r"\[[^\]\s]*gloo[^\]\s]*:\d+\]"), "gloo"),
    (re.compile(r"\[[\w.-]+\] Worker group "), "elastic"),
    (re.compile(r"\[.*\] exits with return code = -?\d+$"), "elastic"),  # DeepSpeed launcher
    (re.compile(r"\d+ Workers \(tasks / actors\) killed due to memory pressure"), "elastic"),  # Ray raylet
    (re.compile(r"\s*what\(\):"), "what"),
    (re.compile(r"/\S+:\d+: .*Assertion"), "device_assert"),
    (re.compile(r"\[\s*\d+\.\d+\] NVRM: Xid \("), "xid"),
    (re.compile(r"[\w.-]+: Test CUDA failure "), "cuda_error"),  # nccl-tests' CUDACHECK
)

_AT_LOC = re.compile(r" at (\S+:\d+)$")
_body_cache: dict[str, tuple[str, dict] | None] = {}

# Kinds whose field "what"/"reason" quotes another message: classify that one too (cause_kind + its fields).
_NESTED = {"torch.watchdog.exception": "what", "torch.work.async_error": "what", "torch.nccl.comm_aborted": "reason",
           "torch.nccl.unique_id_error": "what", "torch.terminate.what": "what", "torch.store.connect_error": "what",
           "torch.nccl_error": "reason"}


def classify_body(body: str) -> tuple[str, dict] | None:
    """Kind and fields of one message body (first line of a message), or None if it is no known text.

    The result is shared through a cache: callers must copy ``fields`` before changing it.
    """
    body = body.rstrip()
    try:
        return _body_cache[body]
    except KeyError:
        pass
    result = _classify_shaped(body)
    if len(_body_cache) >= _CACHE_MAX:
        _body_cache.clear()
    _body_cache[body] = result
    return result


# Shape cache (the same scheme as parse/nccl.py's, whose code it reuses): ranks print the same messages with
# other numbers ("[Rank 503] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5021, ..."); a shape
# whose fields a probe parse could trace to its number tokens, and that reproduced the real parse, is rebuilt
# without Lark. Anything else is parsed.
_SHAPES: dict[str, object] = {}


def _as_parsed(res: tuple[str, dict] | None) -> tuple[str, None, dict] | None:
    return None if res is None else (res[0], None, res[1])


def _classify_shaped(body: str, parse: Any = None, shapes: dict[str, object] = _SHAPES) -> tuple[str, dict] | None:
    """``parse(body)`` (default: _classify_uncached) through the shape cache ``shapes``."""
    parse = parse or _classify_uncached
    parts = _nccl_shape._NUM_SPLIT_RE.split(body)
    nums = parts[1::2]
    if not nums or len(nums) > 999:
        return parse(body)
    shape = "\x00".join(parts[::2])
    builder = shapes.get(shape)
    if builder is None:
        real = parse(body)
        if real is None:
            return None
        builder = _nccl_shape._learn_shape("TORCH", body, nums, (real[0], None, dict(real[1])),
                                           lambda _level, text: _as_parsed(parse(text)))
        if len(shapes) >= _CACHE_MAX:
            shapes.clear()
        shapes[shape] = builder
        return real
    if builder is _nccl_shape._UNCACHEABLE:
        return parse(body)
    try:
        kind, _, fields = builder.build(body, nums)
    except (ValueError, IndexError, KeyError):  # a token the template did not learn: the full parse decides
        return parse(body)
    return kind, fields


_FF_SHAPES: dict[str, object] = {}


def _failure_field(text: str) -> tuple[str, dict] | None:
    """One torchelastic failure-block line ("  exitcode  : -6 (pid: 4242)") through its own shape cache."""
    return _classify_shaped(text, lambda t: _lark_parse(_lark_torch(), t, "failure_field"), _FF_SHAPES)


def _classify_uncached(body: str, depth: int = 0) -> tuple[str, dict] | None:
    if not body:
        return None
    core = body[_PG_SKIP.match(body).end():]
    start = None
    for prefixes, name in _DISPATCH:
        if core.startswith(prefixes):
            start = name
            break
    if start is None:
        for rx, name in _RE_STARTS:
            if rx.match(body):
                start = name
                break
    if start is None:
        return None
    res = _lark_parse(_lark_torch(), body, start)
    if res is None or res[0] == "ff":
        return None
    kind, fields = res
    inner_key = _NESTED.get(kind)
    if inner_key and depth < 3 and fields.get(inner_key):
        inner = _classify_uncached(fields[inner_key], depth + 1)
        if inner is not None:
            fields = dict(fields)
            fields["cause_kind"] = inner[0]
            for k, v in inner[1].items():
                fields.setdefault(k, v)
    return kind, fields


# ------------------------------------------------------------------------------------ line prefixes

_RANK_WRAP = re.compile(r"\[rank(\d+)\]: ?")
# [E ProcessGroupNCCL.cpp:475]                       torch 1.13 - 2.3 (c10 logger, non-glog build)
# [E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] torch 2.4+ (MMDD without leading zero; ns of CLOCK_MONOTONIC)
_C10 = re.compile(r"\[(?P<sev>[FEWIV])(?:(?P<md>\d{3,4}) (?P<hms>\d\d:\d\d:\d\d)\.\d+)? (?P<file>[^\s\]]+?):(?P<line>\d+)\] ?")
# E0321 02:07:08.408271 12345 file:line]     glog builds; torch.distributed Python logging 2.3+ (tid 2.3-2.4, pid 2.5+)
_GLOG = re.compile(r"(?P<sev>[FEWIVDC])(?P<md>\d{4}) (?P<hms>\d\d:\d\d:\d\d)\.(?P<frac>\d+) +(?P<id>\d+) "
                   r"(?P<file>[^\s\]]+?):(?P<line>\d+)\](?: \[[\d/]+\])? ?")
# WARNING:torch.distributed.elastic.multiprocessing.api:msg      torch 1.13 - 2.0 (logging.basicConfig)
# site-packages/torch/distributed/elastic/multiprocessing/api.py:882] msg   a glog record whose head (severity,
# date, pid) the paste cut off: only the source path of a Python module and its line are left
_GLOG_TAIL = re.compile(r"(?P<file>[\w.-]+(?:/[\w.-]+)*\.py):(?P<line>\d+)\] ")
_PYBASIC = re.compile(r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL):(?P<logger>[\w.]+):")
# [2024-01-11 11:13:42,163] torch.distributed.elastic.multiprocessing.api: [ERROR] msg    torch 2.1 - 2.2
_PY21 = re.compile(r"\[(?P<date>\d{4}-\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d),(?P<ms>\d{3})\] (?P<logger>[\w.]+): "
                   r"\[(?P<level>[A-Z]+)\] ?")
# [2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] msg            DeepSpeed's logger
_DEEPSPEED = re.compile(r"\[(?P<date>\d{4}-\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d),(?P<ms>\d{3})\] \[(?P<level>[A-Z]+)\] "
                        r"\[(?P<file>[\w.-]+):(?P<line>\d+):(?P<func>\w+)\] ?")
# [2025-04-02 15:02:00,117 E 135782 135782] (raylet) node_manager.cc:3069: msg     Ray's C++ logger
_RAY = re.compile(r"\[(?P<date>\d{4}-\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d),(?P<ms>\d{3}) (?P<sev>[DIWEF]) (?P<pid>\d+) \d+\] "
                  r"(?:\((?P<comp>[\w-]+)\) )?(?P<file>[\w.-]+):(?P<line>\d+): ")
_C10D_TAG = re.compile(r"\[c10d(?: - (?P<tag>debug|trace))?\] ")
_WARNING = re.compile(r"Warning: (?P<msg>.*) \(function (?P<func>[^)]*(?:\(\))?)\)$")
_SEV = {"F": "FATAL", "E": "ERROR", "W": "WARNING", "I": "INFO", "V": "VERBOSE", "D": "DEBUG", "C": "CRITICAL"}

# ------------------------------------------------------------------------------------ prefilter
# Chosen by the first character of Line.text; a line whose first character has no entry is not ours.
_EXC = r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Exit|Failure|Timeout)\b"
_UPPER = (r"[FEWIVC]\d{4} \d|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):|Traceback \(most|During handling of the above|"
          r"The (?:above exception|server socket|client socket)|NCCL (?:error|timeout|communicator)|"
          r"CUDA (?:error|driver error|out of memory)|Cuda failure \S+:\d+ '|WorkNCCL\(|Work WorkNCCL|Watchdog caught|Some NCCL|"
          r"To avoid data|Process group watchdog|Process \d+ got signal|Exception \(either|Exception ignored |Exception raised from|"
          r"Timeout at NCCL|Timed out after|Heartbeat monitor|ProcessGroupNCCL|PGNCCL|HeartbeatMonitor|Received |"
          r"First (?:PG|watchdog)|Observed flight|Finished (?:flight|writing NCCLPG|writing Flight Recorder)|Flight [Rr]ecorder|"
          r"Stack trace of the failed|Socket Timeout|Failed to recv|Sending process|Signal \d+ \(|Setting OMP_NUM|"
          r"Search for `cuda|Unable to shutdown|UV Store|TCP client|Collective WorkNCCL|Terminating the process|"
          r"Unknown NCCL error|Last error:|Root Cause \(first|Failures:$|THCudaCheck FAIL|NVRM: Xid \(|"
          r"[\w.-]+: Test CUDA failure |" + _EXC)
_LOWER = r"[\w.-]+(?:/[\w.-]+)*\.py:\d+\] |terminate called|[\w.-]+: Test CUDA failure |failed \(exitcode|wait timeout after|frame #\d|nccl[A-Z]\w+:|found async|cuda runtime error \(|" + _EXC
_PRE_BY_CHAR: dict[str, re.Pattern] = {}
for _c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ":
    _PRE_BY_CHAR[_c] = re.compile(_UPPER)
for _c in "abcdefghijklmnopqrstuvwxyz_":
    _PRE_BY_CHAR[_c] = re.compile(_LOWER)
_PRE_BY_CHAR["["] = re.compile(r"\[(?:rank\d|[FEWIV][\d ]|Rank \d|PG |c10d|\d{4}-\d\d-\d\d |\d+\]:$|\d+\] is setting"
                               r"|[^\]\s]*gloo|[\w.-]+\] Worker group|\s*\d+\.\d+\] NVRM: Xid \()")
_PRE_BY_CHAR[" "] = re.compile(r"\s+(?:File \"|what\(\):|\"message\": \")|  (?:time|host|rank|exitcode|error_file|traceback) *:")
_PRE_BY_CHAR["\t"] = re.compile(r"\t")
_PRE_BY_CHAR["/"] = re.compile(r"/\S+:\d+: .*Assertion")
_PRE_BY_CHAR["#"] = re.compile(r"#\d+ \S+ from ")
del _c

# ------------------------------------------------------------------------------- block line shapes
_FRAME_SEARCH = re.compile(r"File \"[^\"]+\", line \d+")
#: Lines of other output allowed between "Exception ignored in: ..." and its traceback (a shared pipe).
UNRAISABLE_GAP = 5000
_CARET = re.compile(r"[\s^~]+$")
_EXC_LINE = re.compile(r"(?P<type>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)(?::(?: (?P<msg>.*))?)?$")
_LONE_EXC = re.compile(_EXC + r"(?::(?: .*)?)?$")
_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")
# Lines that continue a multi-line exception / C++ message text (NCCL error detail, CUDA error text, c10::Error
# backtrace, desync report, flight-recorder stack).
_CONT = re.compile(
    r"(?:nccl(?:UnhandledCudaError|SystemError|InternalError|InvalidArgument|InvalidUsage|RemoteError|InProgress"
    r"|Timeout): |Unknown NCCL error!|Last error:|Search for `cuda|CUDA kernel errors might be asynchronously"
    r"|For debugging consider passing CUDA_LAUNCH_BLOCKING|Compile with `TORCH_USE_CUDA_DSA`"
    r"|Device-side assertion|Exception raised from |frame #\d+: |\t|#\d+ \S+ from \S+:\d+$"
    # torch.multiprocessing.spawn's ProcessRaisedException: "\n\n-- Process %d terminated with the following error:\n"
    # + the child's traceback (spawn.py ProcessContext.join): which process failed, after a blank line
    r"|-- Process \d+ terminated with the following error:)")
_CONT_ONCE = (("ncclUnhandled", "nccl_interp"), ("ncclSystem", "nccl_interp"), ("ncclInternal", "nccl_interp"),
              ("ncclInvalid", "nccl_interp"), ("ncclRemote", "nccl_interp"), ("ncclInProgress", "nccl_interp"),
              ("ncclTimeout", "nccl_interp"), ("Unknown NCCL", "nccl_interp"), ("Last error:", "last_error"),
              ("Search for", "search"), ("CUDA kernel errors", "async_note"), ("For debugging", "debugging"),
              ("Compile with", "dsa"), ("Device-side", "dsa2"), ("Exception raised from", "raised_from"),
              ("-- Process ", "spawn_process"))


_CONT_ONCE_PREFIXES = tuple(prefix for prefix, _ in _CONT_ONCE)


def _cont_type(text: str) -> str | None:
    """The kind of a continuation line that a message has at most once (None: lines that repeat)."""
    if not text.startswith(_CONT_ONCE_PREFIXES):  # (one C call: most continuation lines are frames)
        return None
    for prefix, name in _CONT_ONCE:
        if text.startswith(prefix):
            return name
    return None


_WHAT = re.compile(r"\s*what\(\):")
_BORDER = re.compile(r"(?:={20,}|-{20,})$")
# (a field line may also have lost its indentation in a paste: Markdown and log viewers trim leading spaces)
_CHILD_LINE = re.compile(r"\[\d+\]:$|  (?:time|host|rank|exitcode|error_file|traceback) *:|  <NO_OTHER_FAILURES>"
                         r"|\s*(?:time|host|rank|exitcode|error_file|traceback) *:(?: |$)"
                         r"|Failures:$|Root Cause \(first observed failure\):$|.+ FAILED$|(?:={20,}|-{20,})$|    ")
# A line that begins a new log record: ends a generic multi-line message.
_RECORD_START = re.compile(r"\[[FEWIV][\d ]|[FEWIVDC]\d{4} \d\d:|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]+:"
                           r"|\[\d{4}-\d\d-\d\d |Traceback \(most recent call last\):|terminate called")

_COMM_EXC = ("DistBackendError", "DistNetworkError", "DistStoreError", "DistError", "RendezvousConnectionError",
             "RendezvousTimeoutError", "RendezvousClosedError", "RendezvousError")
_COMM_KINDS = frozenset({
    "torch.nccl_error", "torch.nccl.comm_aborted", "torch.nccl.unique_id_error", "torch.watchdog.timeout",
    "torch.watchdog.exception", "torch.work.async_error", "torch.store.listen_error", "torch.store.connect_error",
    "torch.store.timeout", "torch.store.connection_closed", "torch.socket.bind_error", "torch.gloo.error",
    "torch.heartbeat.timeout", "torch.watchdog.stuck"})
# Log records whose message may go on over unprefixed lines (C++ what() texts).
_MULTILINE_KINDS = frozenset({"torch.watchdog.exception", "torch.work.async_error", "torch.nccl_error",
                              "torch.cuda.error", "torch.nccl.comm_aborted", "torch.work.stack", "torch.desync",
                              "torch.terminate", "torch.terminate.what"})


# ------------------------------------------------------------------------------------------ blocks

class _Block:
    """One open multi-line text: a traceback, a lone exception, a log record with continuation lines, a
    ``terminate called`` + ``what():`` pair, or a stand-alone ChildFailedError block."""

    __slots__ = ("kind", "key", "line", "rank", "local_rank", "time", "lines", "linenos", "nlines", "end_line", "state",
                 "frames", "chain", "exc", "msg", "expect_last", "generic", "junk", "child", "child_done",
                 "record", "last_seen", "truncated", "pending_code", "saw_blank", "seen", "msg_at", "headless",
                 "unraisable", "indent")

    def __init__(self, kind: str, key: tuple, line: Line, rank: int | None, text: str):
        self.kind = kind  # "tb" | "exc" | "rec" | "term" | "child"
        self.key = key
        self.line = line
        self.rank = rank
        self.local_rank = line.local_rank
        self.time = line.time
        self.lines = [line.raw]
        self.linenos = [line.lineno]  # interleaved ranks: a block's lines need not be consecutive
        self.nlines = 1
        self.end_line = line.lineno
        self.state = "frames" if kind == "tb" else "message"
        self.frames: list[dict] = []
        self.chain: list[dict] = []
        self.exc: dict | None = None
        self.msg: list[str] = []  # message lines (first is the body after the type / the record message)
        self.msg_at: list[Line] = [line]  # the Line each message line came from
        self.expect_last = False
        # excepthook output ("[rank0]: " on every line, no torchrun tee prefix): any further line of the same
        # rank that does not start a new record continues the message. Only behind that prefix: a launcher's label
        # (srun --label "3: ", mpirun's tag) is on every line of the process, so the next line is not the message's.
        self.generic = line.rank is not None and line.local_rank is None and kind in ("tb", "exc") \
            and f"[rank{line.rank}]:" in line.raw
        self.junk = 0
        self.child = False
        self.child_done = False
        self.record: dict | None = None
        self.last_seen = line.lineno
        self.truncated = False
        self.pending_code = False
        self.saw_blank = False
        self.seen: set[str] = set()  # continuation line types this message already has
        self.indent = ""  # the whitespace before an indented traceback's header (its lines are read without it)
        self.headless = False  # a traceback whose "Traceback (most recent call last):" header is not in the input
        self.unraisable = False  # right after "Exception ignored in: ...": reported and carried on from

    def add(self, line: Line) -> None:
        if len(self.msg_at) < len(self.msg):
            self.msg_at.append(line)
        self.nlines += 1
        if len(self.lines) < MAX_BLOCK_LINES:
            self.lines.append(line.raw)
            self.linenos.append(line.lineno)
        else:
            self.truncated = True
        self.end_line = line.lineno
        self.last_seen = line.lineno

    def accepts_cont(self, text: str) -> bool:
        """Does ``text`` continue this block's message (structurally, or by the excepthook rule)?"""
        if self.child:
            return not self.child_done and bool(_CHILD_LINE.match(text) or text.startswith("  "))
        if self.expect_last:
            return True
        if _CONT.match(text):
            return _cont_type(text) not in self.seen
        if self.generic and self.kind in ("tb", "exc") and text.strip() and not _RECORD_START.match(text) \
                and not text.startswith(_CHAIN):
            return len(self.msg) < MAX_BLOCK_LINES
        return False

    def take_cont(self, text: str) -> None:
        if self.child:
            if text.startswith("Root Cause (first observed failure):"):
                self.child = "root"
            elif self.child == "root" and text.startswith("====="):
                self.child_done = True
        elif self.expect_last:
            self.expect_last = False
        else:
            t = _cont_type(text)
            if t:
                self.seen.add(t)
            if text.startswith("Last error:") and not text[len("Last error:"):].strip():
                self.expect_last = True
        self.msg.append(text)


class TorchParser:
    """Stateful parser for the torch / Python lines of ONE input stream.

    ``feed(line)`` returns None when the line is not a torch/python line, ``[]`` when it was consumed into an
    open block, else the events completed. Events that a non-torch line completes (it ends an open traceback)
    are returned with the next torch result or by ``flush()``; ``pending_line`` gives the first line number
    of anything still held, so the dispatcher can keep the stream ordered.
    """

    __slots__ = ("_blocks", "_pending", "_count", "errors", "_unraisable", "_indent")

    def __init__(self) -> None:
        self._blocks: list[_Block] = []
        self._pending: list[Event] = []
        self._count = 0
        self.errors = 0  # lines dropped because parsing raised: reported in the diagnosis stats
        # (path, key, line) of Python's "Exception ignored in: ..." (sys.unraisablehook), printed just before a
        # traceback the interpreter reports and then carries on from (a __del__, a callback, a thread's exit); other
        # processes' lines in a shared pipe may come between the two
        self._unraisable: tuple[str, tuple, int] | None = None
        self._indent = ""  # the indentation of an open indented traceback (see feed)

    # -------------------------------------------------------------------------------- public API
    @property
    def pending_line(self) -> int | None:
        if not self._blocks and not self._pending:  # the common case, asked once per event
            return None
        lines = [b.line.lineno for b in self._blocks] + [e.line for e in self._pending]
        return min(lines) if lines else None

    def feed(self, line: Line) -> list[Event] | None:
        """Events for one line (see the class docstring)."""
        text = line.text
        indent = self._indent
        if indent and text.startswith(indent):
            if any(b.indent for b in self._blocks):
                line = _dedented(line, len(indent))
                text = line.text
            else:
                self._indent = indent = ""
        header_indent = ""
        if _TB_HEADER in text and not text.startswith(_TB_HEADER):
            header_indent = text[:text.index(_TB_HEADER)]
            header_indent = header_indent if not header_indent.strip() else ""
            line = _glued_header(line)
            text = line.text
        if not self._blocks:
            rx = _PRE_BY_CHAR.get(text[:1])
            if rx is None or rx.match(text) is None:
                return None
        try:
            out = self._feed(line)
        except (LarkError, VisitError, ValueError, IndexError, KeyError, TypeError, AttributeError):
            # Odd input must never stop the analysis: drop what was open for this line and move on; the
            # count shows up in the diagnosis stats (and a test requires it to be 0 on every fixture).
            self.errors += 1
            self._blocks = [b for b in self._blocks if b.line is not line]
            out = None
        if header_indent:
            # A traceback indented as a whole (Python writes the header at the start of a line, behind a launcher's
            # prefix at most): its frames and exception line keep their place relative to the header.
            for b in self._blocks:
                if b.line is line and b.kind == "tb":
                    b.indent = self._indent = header_indent
        if self._pending:
            if out is None:
                return None
            out = self._pending + out
            self._pending = []
        return out

    def flush(self) -> list[Event]:
        """Close everything still open (end of input) and return the events."""
        out = self._pending
        self._pending = []
        for b in self._blocks:
            out.extend(self._finish(b))
        self._blocks = []
        out.sort(key=lambda e: e.line)
        return out

    # -------------------------------------------------------------------------------- internals
    def _feed(self, line: Line) -> list[Event] | None:
        text = line.text
        rank = line.rank
        if rank is None and text.startswith("[rank"):
            m = _RANK_WRAP.match(text)
            if m:
                rank = int(m.group(1))
                text = text[m.end():]
        key = (rank, line.local_rank)
        if self._blocks:
            res = self._continue(line, text, key, rank)
            if res is not None:
                return res
        return self._start(line, text, key, rank)

    def _close(self, blocks: list[_Block]) -> None:
        for b in blocks:
            self._blocks.remove(b)
            self._pending.extend(self._finish(b))

    def _continue(self, line: Line, text: str, key: tuple, rank: int | None) -> list[Event] | None:
        """Give the line to an open block; None if none takes it (after closing those it ends)."""
        lineno = line.lineno
        stale = [b for b in self._blocks if b.state == "frames" and lineno - b.last_seen > _IDLE_LINES]
        if stale:
            self._close(stale)
        mine = [b for b in self._blocks if b.key == key]
        stripped = text.strip()
        if not stripped:
            # blank line: part of a traceback while frames are printed; ends a message only if what
            # follows does not continue it (chained exceptions print "\nDuring handling...\n\n")
            if any(b.kind in ("tb", "exc", "child") for b in mine):
                for b in mine:
                    b.saw_blank = True
                return []
            return None

        # 1. messages waiting for a structural continuation (NCCL detail, "Last error:" body, CUDA text, ...)
        for b in mine:
            if b.state == "message" and (b.expect_last or b.child) and b.accepts_cont(text):
                b.take_cont(text)
                b.add(line)
                return []
        # unprefixed continuation of a C++ log record whose first line carried "[rankN]:" (c10 logger prefix)
        for b in reversed(self._blocks):
            if b.kind in ("rec", "term") and (b.key == key or rank is None) and (
                    b.expect_last or (_CONT.match(text) and _cont_type(text) not in b.seen)
                    or (b.kind == "term" and len(b.msg) == 1 and _WHAT.match(text))):
                b.take_cont(text)
                b.add(line)
                return []

        # a continuation line that one of this key's messages still lacks (checked before frames: the
        # interpretation line "ncclInvalidUsage: ..." would otherwise pass for the exception of an
        # interleaved, unfinished traceback)
        if _CONT.match(text):
            for b in mine:
                if b.state == "message" and b.accepts_cont(text):
                    b.take_cont(text)
                    b.add(line)
                    return []

        # 2. traceback structure
        header = text.startswith("Traceback (most recent call last):")
        chain = text.startswith(_CHAIN)
        if chain:
            for b in mine:
                if b.kind == "tb" and b.state == "message":
                    b.state = "chain"
                    b.chain.append({**(b.exc or {}), "message": "\n".join(b.msg).strip(), "frames": b.frames,
                                    "relation": "cause" if text.startswith("The above") else "context"})
                    b.frames, b.exc, b.msg = [], None, []
                    b.add(line)
                    return []
        if header:
            for b in mine:
                if b.state == "chain":
                    b.state = "frames"
                    b.add(line)
                    return []
            # a new traceback: finished ones of this key end here; unfinished ones stay open (interleaving)
            done = [b for b in mine if b.state == "message"]
            if done:
                self._close(done)
            return None
        frames_open = [b for b in mine if b.state == "frames"]
        if frames_open:
            if _FRAME_SEARCH.search(text):
                b = min(frames_open, key=lambda x: (len(x.frames), x.line.lineno))
                i = text.find('File "')
                res = _tb_parse(text[i:].rstrip(), "tb_frame")
                if res is not None:
                    b.frames.append(dict(res[1]))
                b.pending_code = True
                b.junk = 0
                b.add(line)
                return []
            if text[:1] in " \t" or _CARET.match(text):
                cands = [b for b in frames_open if b.pending_code] or frames_open
                b = min(cands, key=lambda x: x.last_seen)
                if b.pending_code and b.frames and not _CARET.match(text) and "code" not in b.frames[-1]:
                    b.frames[-1]["code"] = stripped
                b.pending_code = False
                b.add(line)
                return []
            m = _EXC_LINE.match(text)
            if m and not _RECORD_START.match(text):
                cands = [b for b in frames_open if b.frames] or frames_open
                b = min(cands, key=lambda x: x.line.lineno)
                self._set_exception(b, text)
                b.add(line)
                return []
        # 3. message continuation (structural, or generic for excepthook output)
        for b in mine:
            if b.state == "message" and b.accepts_cont(text) and not (b.saw_blank and not _CONT.match(text)):
                b.take_cont(text)
                b.add(line)
                return []
        # 4. unrecognised text inside an unfinished traceback: interleaved fragments of another writer
        if frames_open and not _RECORD_START.match(text) and classify_body(text) is None:
            b = min(frames_open, key=lambda x: x.line.lineno)
            if b.junk < 5:
                b.junk += 1
                b.add(line)
                return []
        # the line is not part of any block: it ends this key's finished messages, and C++ records
        ends = [b for b in mine if b.state in ("message", "chain")]
        if rank is None:
            ends += [b for b in self._blocks if b.kind in ("rec", "term") and b not in ends]
        if ends:
            self._close(ends)
        return None

    def _set_exception(self, b: _Block, text: str) -> None:
        res = _tb_parse(text.rstrip(), "tb_exception")
        if res is None:
            m = _EXC_LINE.match(text)
            exc = {"exc_type": m.group("type"), "message": (m.group("msg") or "").strip()} if m else \
                {"exc_type": None, "message": text.strip()}
        else:
            exc = dict(res[1])
        b.exc = exc
        b.msg = [exc["message"]]
        b.msg_at = []  # filled by the add() that follows
        b.state = "message"
        b.saw_blank = False
        if exc["exc_type"] and exc["exc_type"].endswith("ChildFailedError"):
            b.child = True
        if exc["message"].startswith("Last error:") and not exc["message"][11:].strip():
            b.expect_last = True

    def _start(self, line: Line, text: str, key: tuple, rank: int | None) -> list[Event] | None:
        """A line that no open block took: start a block or make its event; None if it is not ours."""
        c = text[:1]
        if not text.strip():
            return None
        if c in "TD" and text.startswith("Traceback (most recent call last):"):
            b = _Block("tb", key, line, rank, text)
            u = self._unraisable
            b.unraisable = u is not None and u[:2] == (line.path, key) and line.lineno - u[2] <= UNRAISABLE_GAP
            self._unraisable = None
            self._blocks.append(b)
            return []
        if c == "E" and text.startswith("Exception ignored "):
            self._unraisable = (line.path, key, line.lineno)
            return None
        if self._unraisable is not None and self._unraisable[1] == key:
            self._unraisable = None  # its report had no traceback: another record of this key came first
        # log records
        rec = _log_prefix(text)
        if rec is not None:
            return self._record(line, text, key, rank, rec)
        # torchelastic's error_handler JSON dump (torch 1.9 - 1.12): '    "message": "RendezvousConnectionError: ..."'
        if c == " " and text.lstrip().startswith('"message": "'):
            inner = text.lstrip()[12:].rstrip().rstrip(",").rstrip('"')
            if _LONE_EXC.match(inner):
                text = inner
        # frames whose header is missing (a paste or a log cut in the middle of a traceback): a partial traceback
        if c == " " and text.lstrip().startswith('File "') and _FRAME_SEARCH.match(text.lstrip()):
            res = _tb_parse(text.lstrip().rstrip(), "tb_frame")
            if res is not None:
                b = _Block("tb", key, line, rank, text)
                b.headless = True
                b.frames.append(dict(res[1]))
                b.pending_code = True
                self._blocks.append(b)
                return []
        # a lone exception line (its traceback header is missing: partial output)
        if _LONE_EXC.match(text):
            b = _Block("exc", key, line, rank, text)
            self._set_exception(b, text)
            b.msg_at = [line]
            self._blocks.append(b)
            return []
        # stand-alone ChildFailedError fragments ("[1]:", "  time      : ...", "Root Cause ...")
        if _CHILD_LINE.match(text) and (c == "[" or text.startswith(("  time", "Root Cause", "Failures:"))):
            b = _Block("child", key, line, rank, text)
            b.child = "root" if text.startswith("Root Cause") else True
            b.msg = [text]
            self._blocks.append(b)
            return []
        res = classify_body(text)
        if res is None:
            return None
        kind, fields = res
        if kind in ("torch.terminate", "torch.terminate.what") or (kind in _MULTILINE_KINDS and kind != "torch.cuda.error"
                                                                 or fields.get("form") == "detail"):
            b = _Block("term" if kind.startswith("torch.terminate") else "rec", key, line, rank, text)
            b.record = {"kind": kind, "fields": dict(fields), "msg": text}
            b.msg = [text]
            if text.startswith("Last error:") and not text[11:].strip():
                b.expect_last = True
            self._blocks.append(b)
            return []
        if kind in ("torch.cpp.frame", "torch.cpp.raised_from", "torch.work.stack_frame") or \
                (kind == "torch.cuda.error" and fields.get("form") == "search"):
            return None  # orphan continuation lines of a message we did not see start
        return [self._event(kind, line, rank, dict(fields), text)]

    def _record(self, line: Line, text: str, key: tuple, rank: int | None, rec: dict) -> list[Event] | None:
        msg = rec.pop("msg")
        res = classify_body(msg) if msg else None
        logger = rec.get("logger")
        if res is None and rec["log_form"] in ("python_basic", "python_v21") and not logger.startswith("torch"):
            return None  # someone else's Python logging
        fields: dict[str, Any] = dict(rec)
        fields["msg"] = msg
        kind = "torch.log"
        if res is not None:
            kind = res[0]
            for k, v in res[1].items():
                fields.setdefault(k, v)
        elif msg.startswith("Warning: WARNING: destroy_process_group() was not called") or \
                msg.startswith("WARNING: destroy_process_group() was not called"):
            kind = "torch.pg.destroy_missing"
        if kind in _MULTILINE_KINDS or re.fullmatch(r"Rank \d+", msg or ""):
            b = _Block("rec", key, line, rank, text)
            b.record = {"kind": kind, "fields": fields, "msg": msg}
            b.msg = [msg]
            self._blocks.append(b)
            return []
        return [self._event(kind, line, rank, fields, text)]

    # -------------------------------------------------------------------------------- events
    def _event(self, kind: str, line: Line, rank: int | None, fields: dict, text: str | None = None,
               end_line: int | None = None, pid: int | None = None, host: str | None = None) -> Event:
        time = fields.get("log_time") or line.time
        if kind.startswith("torch.elastic.") and rank is not None and rank == line.rank:
            # torchrun's agent logs these lines itself: a rank from the line's wrapper (srun --label's task id, one
            # task per agent under `srun torchrun`) is the agent's task, not a worker's global rank.
            rank = None
        if rank is None:
            rank = _default_pg_rank(fields)
        if rank is None and line.local_rank is not None and not kind.startswith("torch.elastic.") \
                and _default_tag(line.raw, line.local_rank):
            # only torchrun's default tag ("[${role_name}${local_rank}]:", "[default2]:") says whose output it is: the
            # worker's local rank (agents.py turns it into the global rank where the input shows one node). Not a
            # custom --log-line-prefix-template with two numbers ("[trainer22|6]:"): which one is which is unknown.
            fields.setdefault("local_rank", line.local_rank)
        if pid is None:
            pid = fields.pop("_pid", None)
        if kind in ("torch.elastic.worker_failed", "torch.elastic.sigterm", "torch.elastic.signal") \
                and fields.get("worker_pid") is not None:
            if pid is not None:
                fields["agent_pid"] = pid
            pid = fields["worker_pid"]
        return Event(kind, line.path, line.lineno, line.raw, host=host, pid=pid, rank=rank, time=time, fields=fields,
                     end_line=end_line)

    def _finish(self, b: _Block) -> list[Event]:
        if b.kind in ("rec", "term"):
            return self._finish_record(b)
        if b.kind == "child":
            return [self._child_event(b, e, None) for e in _child_entries(b.msg)]
        return self._finish_tb(b)

    def _finish_record(self, b: _Block) -> list[Event]:
        rec = b.record or {}
        kind = rec.get("kind", "torch.log")
        fields = dict(rec.get("fields", {}))
        cont = b.msg[1:]
        if b.kind == "term":
            # terminate called after throwing an instance of 'X' / what():  <text> (+ continuation)
            for i, t in enumerate(cont):
                r = classify_body(t)
                if r and r[0] == "torch.terminate.what":
                    what = r[1].get("what") or ""
                    fields["what"] = what
                    inner = classify_body(what) if what else None
                    if inner:
                        fields["cause_kind"] = inner[0]
                        for k, v in inner[1].items():
                            fields.setdefault(k, v)
                    break
            if kind == "torch.terminate.what":
                kind = "torch.terminate"
        _enrich(fields, cont)
        if kind == "torch.log" and fields.get("desync"):
            kind = "torch.desync"
        if b.nlines > 1:
            fields["lines"] = b.lines
            fields["line_numbers"] = b.linenos
            if b.truncated:
                fields["truncated"] = True
            fields["message"] = "\n".join([rec.get("msg", "")] + cont)
        return [self._event(kind, b.line, b.rank, fields, end_line=b.end_line if b.nlines > 1 else None)]

    def _finish_tb(self, b: _Block) -> list[Event]:
        exc = b.exc or {"exc_type": None, "message": ""}
        message = "\n".join(b.msg).strip() if b.msg else ""
        fields: dict[str, Any] = {
            "exc_type": exc.get("exc_type"),
            "message": message,
            "frames": b.frames,
            "chain": b.chain,
            "partial": b.kind == "exc" or b.headless or exc.get("exc_type") is None,
        }
        if b.kind == "tb" and exc.get("exc_type") is None:
            fields["incomplete"] = True  # header and frames, no exception line (output cut off)
        if b.indent:
            fields["indented"] = True  # the whole traceback was indented (messages/events.toml [caught] quoted)
        if b.unraisable or (b.kind == "tb" and b.frames and b.frames[0].get("function") == "__del__"):
            # reported by sys.unraisablehook: the interpreter went on. A traceback that starts in a finaliser never
            # reached the top of a program (those start at <module>, a thread's or a process's bootstrap).
            fields["unraisable"] = True
        first = (b.msg[0] if b.msg else "") if not b.child else ""
        res = classify_body(first) if first else None
        derived: list[Event] = []
        if res is not None:
            fields["msg_kind"] = res[0]
            for k, v in res[1].items():
                fields.setdefault(k, v)
        _enrich(fields, b.msg[1:] if not b.child else [])
        etype = exc.get("exc_type") or ""
        short = etype.rsplit(".", 1)[-1]
        if "Rendezvous" in short and "msg_kind" not in fields:
            fields["msg_kind"] = "torch.rendezvous.error"
        if "gloo_error" not in fields:
            g = re.search(r"Connection (closed|reset) by peer", message)
            if g:
                fields["gloo_error"] = "connection_" + g.group(1)
        fields["comm_error"] = bool(short in _COMM_EXC or fields.get("msg_kind") in _COMM_KINDS
                                    or "gloo_error" in fields or "NCCL" in first)
        c10d = [f for f in b.frames if f.get("file", "").endswith(("distributed_c10d.py", "/c10d_logger.py"))]
        dist_calls = [f for f in c10d if f.get("file", "").endswith("distributed_c10d.py")]
        if dist_calls:
            fields["c10d_call"] = dist_calls[-1].get("function")
        user = [f for f in b.frames if "-packages/" not in f.get("file", "") and not f.get("file", "").startswith("<")]
        if user:
            fields["user_frame"] = user[-1]
            # the program's own innermost frame as a person reads it ("train.py:11 in load_batch"), not the
            # interpreter's library code (/usr/lib/python3.x/...)
            own = [f for f in user if not re.search(r"/lib/python\d[\d.]*/", f.get("file", ""))]
            if own:
                f = own[-1]
                fields["user_where"] = f"{str(f.get('file', '')).rsplit('/', 1)[-1]}:{f.get('line')} in {f.get('function')}"
        if b.frames:
            fields["last_frame"] = b.frames[-1]
        fields["lines"] = b.lines
        fields["line_numbers"] = b.linenos
        if b.truncated:
            fields["truncated"] = True
        kind = "python.traceback" if b.kind == "tb" else "python.exception"
        ev = self._event(kind, b.line, b.rank, fields, end_line=b.end_line)
        # derived events: the fact the exception message states, typed on its own (rules select by kind)
        exc_line = _exc_line(b)
        if res is not None:
            df = dict(res[1])
            df.update({k: fields[k] for k in ("nccl_result", "interpretation", "last_error", "cuda_error_name")
                       if k in fields})
            df["exc_type"] = etype
            df["via"] = kind
            derived.append(self._event(res[0], exc_line, b.rank, df))
        elif fields.get("msg_kind") == "torch.rendezvous.error":
            # (with the traceback's frames: a rendezvous the elastic agent runs to restart the group says so there)
            derived.append(self._event("torch.rendezvous.error", exc_line, b.rank,
                                       {"exc_type": etype, "message": message, "via": kind, "frames": b.frames}))
        if b.child:
            entries = _child_entries(b.msg)
            fields["failures"] = [{k: v for k, v in e.items() if not k.startswith("_")} for e in entries]
            m = re.search(r"^(.+) FAILED$", "\n".join(b.msg), re.M)
            for e in entries:
                derived.append(self._child_event(b, e, m.group(1) if m else None))
        return [ev] + derived

    def _child_event(self, b: _Block, e: dict, entrypoint: str | None) -> Event:
        """One ChildFailedError failure entry; it starts on its ``[N]:`` line."""
        fields = {k: v for k, v in e.items() if k not in ("rank", "pid", "host", "time") and not k.startswith("_")}
        if e.get("time"):
            fields["failure_time"] = e["time"]  # torchelastic's "%Y-%m-%d_%H:%M:%S"; Event.time has a space instead
        if entrypoint:
            fields["entrypoint"] = entrypoint
        i, j = e["_lineno"], e["_lineno"] + e["_nlines"] - 1
        first = b.msg_at[i] if i < len(b.msg_at) else b.line
        last = b.msg_at[j] if j < len(b.msg_at) else first
        return Event("torch.elastic.child_failed", first.path, first.lineno, first.raw, host=e.get("host"),
                     pid=e.get("pid"), rank=e.get("rank"),
                     time=e["time"].replace("_", " ") if e.get("time") else first.time, fields=fields,
                     end_line=last.lineno)


# ------------------------------------------------------------------------------------------ helpers

_TB_HEADER = "Traceback (most recent call last):"
_GLUED_RANK = re.compile(r"\[rank(\d+)\]: ?$")


def _dedented(line: Line, n: int) -> Line:
    """``line`` with the first ``n`` characters of its text (an indented traceback's indentation) removed."""
    return Line(line.path, line.lineno, line.text[n:], line.raw, line.rank, line.local_rank, line.time, line.truncated)


def _glued_header(line: Line) -> Line:
    """A traceback header glued to the end of another rank's unterminated output line.

    Ranks share one stream; ``print(..., end="")`` or a partial write by one rank leaves the next rank's
    "[rank2]: Traceback (most recent call last):" at the end of a line ("...sum=4[rank2]: Traceback ...").
    The traceback starts at the header; a "[rankN]: " just before it says whose it is.
    """
    i = line.text.index(_TB_HEADER)
    m = _GLUED_RANK.search(line.text, 0, i)
    rank = int(m.group(1)) if m else line.rank
    return Line(line.path, line.lineno, line.text[i:], line.raw, rank, line.local_rank, line.time, line.truncated)


def _tb_parse(text: str, start: str) -> tuple[str, dict] | None:
    return _lark_parse(_lark_tb(), text, start)


def _default_pg_rank(fields: dict) -> int | None:
    """``[Rank r]`` is the rank in the work's group; it is the global rank only for the default group."""
    if "pg_rank" not in fields:
        return None
    if fields.get("pg_id", 0) == 0 and fields.get("pg_name", "0") in ("0", "default_pg") \
            and fields.get("pg_desc", "default_pg") in ("default_pg", "undefined"):
        return fields["pg_rank"]
    return None


def _default_tag(raw: str, local_rank: int) -> bool:
    """Whether ``raw`` carries torchrun's default tag ``[${role_name}${local_rank}]:`` for ``local_rank`` (a role name
    of letters right before the number, ``]:`` right after it), not inside torchx's ``role/replica`` prefix (a
    replica is a node of its own)."""
    tag = f"{local_rank}]:"
    i = raw.find(tag)
    if i <= 1 or not raw[i - 1].isalpha():
        return False
    j = raw.rfind("[", 0, i)
    return j >= 0 and raw[j + 1:j + 2].isalpha() and _TORCHX_HEAD.search(raw, 0, j + 1) is None


_TORCHX_HEAD = re.compile(r"[A-Za-z_][\w-]*/\d+ \[")


def _exc_line(b: _Block) -> Line:
    """The Line the (last) exception of a traceback block was printed on (for derived events)."""
    return b.msg_at[0] if b.msg_at and b.exc else b.line


def _log_prefix(text: str) -> dict | None:
    """Split a log-record prefix off ``text``: the prefix fields and ``msg``; None if there is none."""
    c = text[:1]
    m = None
    if c == "[":
        m = _C10.match(text)
        if m:
            f: dict[str, Any] = {"log_form": "c10", "severity": _SEV[m.group("sev")], "src_file": m.group("file"),
                                 "src_line": int(m.group("line"))}
            if m.group("md"):
                md = m.group("md").zfill(4)
                f["log_time"] = f"{md[:2]}-{md[2:]} {m.group('hms')}"
            rest = text[m.end():]
        else:
            m = _PY21.match(text)
            if m:
                f = {"log_form": "python_v21", "severity": m.group("level"), "logger": m.group("logger"),
                     "log_time": f"{m.group('date')} {m.group('hms')}.{m.group('ms')}"}
            else:
                m = _DEEPSPEED.match(text)
                if m:
                    f = {"log_form": "deepspeed", "severity": m.group("level"), "src_file": m.group("file"),
                         "src_line": int(m.group("line")), "function": m.group("func"),
                         "log_time": f"{m.group('date')} {m.group('hms')}.{m.group('ms')}"}
                else:
                    m = _RAY.match(text)
                    if not m:
                        return None
                    f = {"log_form": "ray", "severity": _SEV[m.group("sev")], "src_file": m.group("file"),
                         "src_line": int(m.group("line")), "_pid": int(m.group("pid")),
                         "log_time": f"{m.group('date')} {m.group('hms')}.{m.group('ms')}"}
            rest = text[m.end():]
    elif c in "FEWIVDC" and len(text) > 5 and text[1].isdigit():
        m = _GLOG.match(text)
        if not m:
            return None
        md = m.group("md")
        f = {"log_form": "glog", "severity": _SEV[m.group("sev")], "src_file": m.group("file"),
             "src_line": int(m.group("line")), "log_time": f"{md[:2]}-{md[2:]} {m.group('hms')}.{m.group('frac')}"}
        ident = int(m.group("id"))
        if ident < 4194304:  # pid_max limit: a pid (torch 2.5+ Python logging), else a thread id
            f["_pid"] = ident
        else:
            f["tid"] = ident
        if m.group("file").endswith(".py"):
            f["log_form"] = "python_glog"
        rest = text[m.end():]
    elif c in "DIWEC" and _PYBASIC.match(text):
        m = _PYBASIC.match(text)
        f = {"log_form": "python_basic", "severity": m.group("level"), "logger": m.group("logger")}
        rest = text[m.end():]
    else:
        m = _GLOG_TAIL.match(text)
        if not m:
            return None
        f = {"log_form": "python_glog", "src_file": m.group("file"), "src_line": int(m.group("line"))}
        rest = text[m.end():]
    t = _C10D_TAG.match(rest)
    if t:
        f["c10d_tag"] = t.group("tag") or "c10d"
        rest = rest[t.end():]
    if rest.startswith("Warning: "):
        w = _WARNING.match(rest)
        if w:
            f["warning_function"] = w.group("func")
            rest = w.group("msg")
            if rest.startswith("WARNING: destroy_process_group()"):
                f["_destroy"] = True
    f["msg"] = rest.rstrip()
    if f.pop("_destroy", False):
        f["msg"] = "WARNING: " + f["msg"][len("WARNING: "):] if f["msg"].startswith("WARNING: ") else f["msg"]
    return f


def _enrich(fields: dict, cont: list[str]) -> None:
    """Fields from the continuation lines of a message (NCCL error detail, CUDA error text, C++ backtrace,
    desync report, flight-recorder stack)."""
    expect_last = False
    cpp = 0
    stack: list[dict] = []
    desync: list[str] = []
    for t in cont:
        if expect_last:
            fields.setdefault("last_error", t.strip())
            expect_last = False
            continue
        if t.startswith("nccl") or t.startswith("Unknown NCCL error!"):
            r = classify_body(t)
            if r and r[0] == "torch.nccl_error" and r[1].get("form") == "detail":
                fields.setdefault("nccl_result", r[1]["nccl_result"])
                if r[1].get("interpretation"):
                    fields.setdefault("interpretation", r[1]["interpretation"])
            continue
        if t.startswith("Last error:"):
            inline = t[len("Last error:"):].strip()
            if inline:
                fields.setdefault("last_error", inline)
            else:
                expect_last = True
            continue
        if t.startswith("Search for `cuda"):
            m = re.match(r"Search for `(\w+)'", t)
            if m:
                fields.setdefault("cuda_error_name", m.group(1))
            continue
        if t.startswith("Exception raised from "):
            r = classify_body(t)
            if r:
                fields.setdefault("raised_from", {k: r[1][k] for k in ("function", "file", "src_line")})
            continue
        if t.startswith("frame #"):
            cpp += 1
            continue
        if t.startswith("#"):
            r = classify_body(t)
            if r and r[0] == "torch.work.stack_frame":
                stack.append({k: v for k, v in r[1].items()})
            continue
        if t.startswith("\t"):
            desync.append(t)
            r = classify_body(t)
            if r and r[0] == "torch.desync":
                for k, v in r[1].items():
                    if k == "lagging_ranks" and k in fields:  # both lines of analyzeLaggingRanks name ranks
                        fields[k] = sorted(set(fields[k]) | set(v))
                    else:
                        fields.setdefault(k, v)
            continue
        if t.startswith("CUDA error: ") and "cuda_error" not in fields:
            fields["cuda_error"] = t[len("CUDA error: "):].strip()
    if cpp:
        fields["cpp_frames"] = cpp
    if stack:
        fields["stack"] = stack
    if desync:
        fields["desync"] = desync


_LOOSE_FIELD = re.compile(r"\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s*(.*?)\s*$")


def _child_entries(lines: list[str]) -> list[dict]:
    """Failure entries of a ChildFailedError block; ``root_cause`` says which section each one is in."""
    entries: list[dict] = []
    section = None
    cur: dict | None = None
    last_field = None
    for i, t in enumerate(lines):
        if t.startswith("Failures:"):
            section = "failures"
            continue
        if t.startswith("Root Cause (first observed failure):"):
            section = "root"
            continue
        if _BORDER.match(t):
            cur = None
            continue
        m = _LOOSE_FIELD.match(t)
        if m:  # the field's column layout as torchelastic prints it, whatever the paste left of its spacing
            t = f"  {m.group(1):<10}:" + (f" {m.group(2)}" if m.group(2) else "")
        res = _failure_field(t.rstrip()) if t.startswith(("[", "  ")) else None
        if res is not None and res[0] == "ff":
            f = res[1]
            if "index" in f:
                cur = {"index": f["index"], "root_cause": None if section is None else section == "root",
                       "_lineno": i, "_nlines": 1}
                entries.append(cur)
                last_field = None
                continue
            if cur is None and not entries and "time" in f:
                # the paste starts inside the first entry (its "[N]:" line cut off): the fields still say which
                # rank failed and how
                cur = {"index": None, "root_cause": None if section is None else section == "root",
                       "_lineno": i, "_nlines": 1}
                entries.append(cur)
            if cur is not None:
                cur.update(f)
                cur["_nlines"] = i - cur["_lineno"] + 1
                last_field = next(iter(f))
            continue
        if cur is not None and last_field == "traceback" and t.startswith("    "):
            cur["traceback"] = (cur.get("traceback") or "") + "\n" + t.strip()
            cur["_nlines"] = i - cur["_lineno"] + 1
    return entries
