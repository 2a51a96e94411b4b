"""A closed torch / Python block -> its events: a log record with its continuation lines, a traceback (with the
events its exception message states), a ChildFailedError report's failure entries (mixed into ``TorchParser``)."""
from __future__ import annotations

import re
from typing import Any

from ...model import Event, Line
from .value import raise_statement
from .grammar import classify_body
from .prefix import _COMM_EXC, _COMM_KINDS
from .block import _Block, _child_entries, child_lines, _enrich, _exc_line


class BlockEvents:
    """``TorchParser``'s methods that turn one finished block into events (``_event`` builds each one)."""

    __slots__ = ()

    def _finish(self, b: _Block) -> list[Event]:
        if b.kind in ("rec", "term"):
            return self._finish_record(b)
        if b.kind == "child":
            entries = _child_entries(b.msg)
            return [self._child_event(b, e, None) for e in entries] + self._report_tracebacks(b, entries)
        return self._finish_tb(b)

    def _report_tracebacks(self, b: _Block, entries: list[dict]) -> list[Event]:
        """The worker tracebacks a ChildFailedError report carries in its entries' ``traceback :`` fields (the
        error file torchelastic's @record wrote: py_callstack, every line after the first indented by two spaces),
        each read as a traceback of the rank its entry names. With --local-ranks-filter or --redirects a worker's
        own output may not be in the input at all: this is then the only place its exception is seen."""
        out: list[Event] = []
        for e in entries:
            idx = e.get("_tb")
            if not idx or len(idx) < 2 or any(i >= len(b.msg_at) for i in idx):
                continue
            cut = e.get("_tb_indent", 0)
            sub = type(self)()
            for n, i in enumerate(idx):
                line, text = b.msg_at[i], b.msg[i]
                text = text[text.index("Traceback (most recent call last):"):] if n == 0 else \
                    (text[cut:] if text[:cut].isspace() else text.lstrip())
                got = sub.feed(Line(line.path, line.lineno, text, line.raw, e.get("rank"), None, line.time,
                                    line.truncated))
                out.extend(got or [])
            out.extend(sub.flush())
        for ev in out:
            ev.fields["from_report"] = True
        return out

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
            if b.headless:
                fields["headless"] = True  # no header either: the outermost frame shown need not be the top
            raised = raise_statement(b.frames[-1].get("code")) if b.frames else None
            if raised:  # its innermost frame's line is a raise statement: that names what was raised
                fields["raise_type"], fields["raise_message"] = raised
        if b.indent:
            fields["indented"] = True  # the whole traceback was indented (messages/events.toml [caught] quoted)
        if b.unraisable or (b.kind == "tb" and b.frames and b.frames[0].get("function") == "__del__"):
            # reported by sys.unraisablehook: the interpreter went on. A traceback that starts in a finaliser never
            # reached the top of a program (those start at <module>, a thread's or a process's bootstrap).
            fields["unraisable"] = True
        if b.atexit:
            fields["atexit"] = True
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
            m = re.search(r"^(.+) FAILED$", "\n".join(t for _, t in child_lines(b.msg)), re.M)
            for e in entries:
                derived.append(self._child_event(b, e, m.group(1) if m else None))
            derived.extend(self._report_tracebacks(b, entries))
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
