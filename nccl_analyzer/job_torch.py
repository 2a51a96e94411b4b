"""The job model's torch handlers: watchdog and work records, desync reports, tracebacks (the collective they
stopped in, torch.multiprocessing.spawn's failed child), torchelastic's ChildFailedError, ProcessGroupNCCL's own
log lines (a mixin of ``job.JobBuilder``)."""
from __future__ import annotations

import re
from typing import Any

from .job_values import _PID_CAP, _shared, _shared_time, _shared_value, one_of_smallest, traceback_collective
from .model import Event


class TorchHandlers:
    """``JobBuilder``'s handlers of torch's lines (each reads and writes the builder's tables)."""

    def _on_watchdog(self, ev: Event) -> None:
        r = self.rank_of(ev)
        if r is None:
            return
        entry: dict[str, Any] = {"source": ev.kind, "line": ev.line, "path": ev.path}
        for name in ("seq", "op_type", "numel_in", "numel_out", "timeout_ms", "elapsed_ms", "last_enqueued",
                     "last_completed"):
            v = ev.get(name)
            if v is not None:
                entry[name] = _shared_value(v)
        prev = self.collectives.get(r) or {}
        merged = {**prev, **entry} if prev.get("source", "").startswith("torch.") else entry
        self.collectives[r] = merged
        # (the rank's ``last_collective`` is made from ``collectives`` by ``build``: no copy per rank meanwhile)
        self._timeline(ev, "watchdog timeout" if ev.kind == "torch.watchdog.timeout" else ev.kind)

    def _on_desync(self, ev: Event) -> None:
        lag = ev.get("lagging_ranks")  # parse/torch/body.py
        if isinstance(lag, (list, tuple)):
            for x in lag[:1024]:
                try:
                    self.lagging.add(int(x))
                except (TypeError, ValueError):
                    continue
        self._on_watchdog(ev) if ev.get("seq") is not None else None

    def _on_traceback(self, ev: Event) -> None:
        exc = str(ev.get("exc_type", ""))
        if "ChildFailedError" in exc:
            return
        if ev.rank is None and ev.pid is None and len(self._spawn_lines) < 64:
            self._spawn_child(ev, exc)
        r = self.rank_of(ev)
        coll = traceback_collective(ev)
        if r is not None and coll:
            self.tb_collectives[r] = coll
            info = self._rank(r)
            if not info.last_collective:
                info.last_collective = {"op_type": coll, "source": "traceback"}
        if r is not None:
            self._timeline(ev, f"{exc.rsplit('.', 1)[-1]}")

    def _spawn_child(self, ev: Event, exc: str) -> None:
        """torch.multiprocessing.spawn's parent reports the child that failed first (ProcessContext.join): by its
        index in ProcessExitedException ("process 2 terminated with signal SIGSEGV" / "with exit code 1"), or in
        ProcessRaisedException's message ("-- Process 1 terminated with the following error:") followed by the
        child's own traceback, which the parent prints (its first frame spawn.py's ``_wrap``). The index is the
        rank a spawned program is given; the lines that report it become that rank's."""
        msg = str(ev.get("message") or "")
        end = ev.end_line or ev.line
        if exc.endswith("ProcessExitedException"):
            m = re.match(r"process (\d+) terminated with (?:signal|exit code)", msg)
            if m:
                self._spawn_lines.append((ev.path, ev.line, end, int(m.group(1))))
            return
        if exc.endswith("ProcessRaisedException"):
            m = re.search(r"-- Process (\d+) terminated with the following error", msg)
            if m:
                self._spawn_next[ev.path] = int(m.group(1))
            return
        idx = self._spawn_next.pop(ev.path, None)
        frames = ev.get("frames") or []
        first = frames[0] if frames and isinstance(frames[0], dict) else {}
        if idx is not None and str(first.get("file", "")).endswith("multiprocessing/spawn.py") \
                and first.get("function") == "_wrap":
            self._spawn_lines.append((ev.path, ev.line, end, idx))

    def _on_child_failed(self, ev: Event) -> None:
        rank = ev.get("rank")
        if rank is None:
            return
        rank = int(rank)
        entry = {k: _shared_value(ev.get(k)) for k in ("exitcode", "signal", "pid", "host", "local_rank", "time")
                 if ev.get(k) is not None}
        if ev.get("root_cause") is not None:
            entry["first_observed"] = bool(ev.get("root_cause"))
        entry["line"] = ev.line
        entry["path"] = ev.path  # (not the text: nothing reads it, and 10 keys fit a dict half the size of 11)
        self.exits[rank] = entry
        info = self._rank(rank)
        if entry.get("exitcode") is not None:
            info.exit_code = int(entry["exitcode"])
        if info.pid is None and entry.get("pid") is not None:
            info.pid = int(entry["pid"])
        if info.host is None and entry.get("host"):
            host = str(entry["host"])
            if host in ("localhost", "127.0.0.1") and entry.get("pid") is not None:
                # torchelastic often reports "localhost"; NCCL's prefix has the real hostname of that pid
                pid = int(entry["pid"])
                head = self.procs.by_pid.get(pid)
                if head is not None and head.nhost is not None:
                    host = head.nhost
            info.host = host
        if entry.get("local_rank") is not None and info.local_rank is None:
            info.local_rank = int(entry["local_rank"])
        if entry.get("pid") is not None:
            head = self.procs.head(int(entry["pid"]), True)
            if head.anyr is None:
                head.anyr = (rank, 0)
            if self.procs.n_elastic < _PID_CAP:
                if head.elastic is None:
                    self.procs.n_elastic += 1
                head.elastic = rank
                self._elastic_top = max(self._elastic_top, rank)
        t = ev.get("time")
        self.timelines.put(rank, ev.kind, ev.path, ev.line, _shared_time(t) if t.__class__ is str else t,
                           _shared(f"exit {entry.get('exitcode')}"), False)

    def _on_torch_log(self, ev: Event) -> None:
        msg = str(ev.get("msg", ""))
        m = re.search(r"NCCL version:? (\d+\.\d+\.\d+)", msg)
        if m and "ProcessGroupNCCL" in msg:
            r = self.rank_of(ev)
            who = f"rank {r}" if r is not None else ev.path
            one_of_smallest(self.versions_by_proc.setdefault(m.group(1), set()), who)
            self.version_events.setdefault(m.group(1), ev)
            if self.job.backend is None:
                self.job.backend = "nccl"
        m = re.search(r"TIMEOUT\(ms\): (\d+)", msg)
        if m:
            self.job.extra.setdefault("pg_timeout_ms", int(m.group(1)))
        if self.job.torch_version is None:
            m = re.search(r"\btorch(?:==| version:? )(\d+\.\d+\.\d+\S*)", msg)
            if m:
                self.job.torch_version = m.group(1)

