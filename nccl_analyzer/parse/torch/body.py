"""The ``grammars/torch.lark`` transformer: one message body -> ``(kind, fields)``."""
from __future__ import annotations

import re
from typing import Any

from lark import Transformer, Token

from .value import _SIGNAME, _SIGNUM, _int, _pg, _signame, _size_bytes, _split_hostport, _text

_AT_LOC = re.compile(r" at (\S+:\d+)$")


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

    def worker_group_succeeded(self, c):
        return "torch.elastic.succeeded", {"role": str(c[0])}

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
