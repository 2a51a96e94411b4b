"""The ``grammars/torch.lark`` transformer: one message body -> ``(kind, fields)``."""
from __future__ import annotations

import re
from typing import Any

from lark import Transformer, Token

from .body_proc import _ProcBody
from .value import _int, _pg, _split_hostport, _text

class _Body(_ProcBody, Transformer):
    """Message body -> ``(kind, fields)``; sub-rules return dicts. Pure: builds values, nothing else. This class holds
    c10d's own messages (process groups, watchdog, heartbeat, Flight Recorder, desync, NCCL errors, TCPStore,
    gloo); those of the process around them (CUDA, C++ runtime, torchelastic) are ``_ProcBody``'s (body_proc.py)."""

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

    def rank_start(self, c):  # PyTorch Lightning: the global rank this process was given, before init
        return "torch.launch.rank_start", {"global_rank": _int(c[1]), "member": _int(c[2]), "size": _int(c[3])}

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
