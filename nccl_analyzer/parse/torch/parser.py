"""TorchParser: per-stream state that feeds lines, assembles multi-line blocks and emits events."""
from __future__ import annotations

import re
from typing import Any

from lark.exceptions import LarkError, VisitError

from ...model import Event, Line
from .value import _IDLE_LINES
from .finish import BlockEvents
from .grammar import classify_body
from .prefix import (UNRAISABLE_GAP, _CARET, _CHAIN, _CHILD_LINE, _CONT, _EXC_LINE, _FRAME_SEARCH, _LONE_EXC,
    _MULTILINE_KINDS, _PRE_BY_CHAR, _RANK_WRAP, _RECORD_START, _WHAT, _cont_type)
from .block import (_Block, _REPORT_TB, _TB_HEADER, _dedented, _default_pg_rank, _default_tag, _glued_header, _log_prefix,
    _tb_parse)


class TorchParser(BlockEvents):
    """Stateful parser for the torch / Python lines of ONE input stream.

    ``feed(line)`` returns None when the line is not a torch/python line, ``[]`` when it was consumed into an
    open block, else the events completed. Events that a non-torch line completes (it ends an open traceback)
    are returned with the next torch result or by ``flush()``; ``pending_line`` gives the first line number
    of anything still held, so the dispatcher can keep the stream ordered.
    """

    __slots__ = ("_blocks", "_pending", "_count", "errors", "_unraisable", "_atexit", "_indent")

    def __init__(self) -> None:
        self._blocks: list[_Block] = []
        self._pending: list[Event] = []
        self._count = 0
        self.errors = 0  # lines dropped because parsing raised: reported in the diagnosis stats
        # (path, key, line) of Python's "Exception ignored in: ..." (sys.unraisablehook), printed just before a
        # traceback the interpreter reports and then carries on from (a __del__, a callback, a thread's exit); other
        # processes' lines in a shared pipe may come between the two
        self._unraisable: tuple[str, tuple, int] | None = None
        self._atexit = False  # that report was CPython's "Error in atexit._run_exitfuncs:"
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
        if _TB_HEADER in text and not text.startswith(_TB_HEADER) and not self._report_field(text):
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
    def _report_field(self, text: str) -> bool:
        """``text`` is a ChildFailedError report's ``traceback :`` field holding a worker's traceback (its error
        file, written by @record), and a report is open to read it: the traceback's lines are the report's (each
        indented by the report), not a traceback of their own; the report's entry says whose it is (finish.py)."""
        return bool(_REPORT_TB.match(text)) and any(b.child and not b.child_done for b in self._blocks)

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
        # 3. message continuation (structural, or generic for excepthook output: every line of it carries the rank's
        # prefix, so a blank line of that prefix is a blank line of the message, which Python prints as it is)
        for b in mine:
            if b.state == "message" and b.accepts_cont(text) and not (b.saw_blank and not _CONT.match(text)
                                                                     and not b.generic):
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
            b.atexit = b.unraisable and self._atexit
            self._unraisable = None
            self._blocks.append(b)
            return []
        # CPython < 3.12 (Modules/atexitmodule.c atexit_callfuncs) prints "Error in atexit._run_exitfuncs:" before the
        # traceback of an exit handler that raised, and goes on exiting (3.12+ says "Exception ignored in atexit
        # callback: ..." through sys.unraisablehook): the same report-and-carry-on as "Exception ignored in: ...".
        if c == "E" and text.startswith(("Exception ignored ", "Error in atexit._run_exitfuncs")):
            self._unraisable = (line.path, key, line.lineno)
            self._atexit = text.startswith("Error in atexit.")
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
