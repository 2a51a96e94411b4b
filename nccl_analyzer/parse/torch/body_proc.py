"""The ``grammars/torch.lark`` transformer's methods for a process's own messages: CUDA errors and OOMs, C++
exceptions, torchelastic's agent and ChildFailedError lines (mixed into ``body._Body``)."""
from __future__ import annotations

import re

from lark import Token

from .value import _SIGNAME, _SIGNUM, _int, _signame, _size_bytes, _text

_AT_LOC = re.compile(r" at (\S+:\d+)$")


class _ProcBody:
    """``_Body``'s methods for CUDA, C++ and torchelastic lines (one message body -> ``(kind, fields)``)."""

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
