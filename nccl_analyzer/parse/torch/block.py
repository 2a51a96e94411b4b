"""One open multi-line text (``_Block``) and the helpers TorchParser uses to assemble and enrich blocks."""
from __future__ import annotations

import re
from typing import Any

from ...model import Line
from .value import MAX_BLOCK_LINES
from .grammar import _failure_field, _lark_parse, _lark_tb, classify_body
from .prefix import (_BORDER, _C10, _C10D_TAG, _CHAIN, _CHILD_LINE, _CONT, _DEEPSPEED, _GLOG, _GLOG_TAIL, _PY21,
    _PYBASIC, _RAY, _RECORD_START, _SEV, _WARNING, _cont_type)

# ------------------------------------------------------------------------------------------ blocks

class _Block:
    """One open multi-line text: a traceback, a lone exception, a log record with continuation lines, a
    ``terminate called`` + ``what():`` pair, or a stand-alone ChildFailedError block."""

    __slots__ = ("kind", "key", "line", "rank", "local_rank", "time", "lines", "linenos", "nlines", "end_line", "state",
                 "frames", "chain", "exc", "msg", "expect_last", "generic", "junk", "child", "child_done",
                 "record", "last_seen", "truncated", "pending_code", "saw_blank", "seen", "msg_at", "headless",
                 "unraisable", "atexit", "indent")

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
        self.atexit = False  # right after "Error in atexit._run_exitfuncs:": an exit handler raised (also unraisable)

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


# ------------------------------------------------------------------------------------------ helpers

_TB_HEADER = "Traceback (most recent call last):"
# torchelastic's failure entry whose ``traceback :`` field is a worker's Python traceback (the error file @record
# wrote): errors/__init__.py ChildFailedError._format_failure puts the py_callstack after "  traceback : " with
# every further line indented by two spaces (``.replace("\n", "\n  ")``).
_REPORT_TB = re.compile(r"(\s*)traceback\s*:\s*Traceback \(most recent call last\):")
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
    # a record that is only the "Last error:" head (the NCCL error line before it cut off or pasted apart): its text
    # is the first continuation line, as below
    expect_last = fields.get("form") == "last_error" and not fields.get("last_error")
    cpp = 0
    stack: list[dict] = []
    desync: list[str] = []
    for t in cont:
        if expect_last:
            if not fields.get("last_error"):
                fields["last_error"] = t.strip()
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

# A ChildFailedError block pasted with its lines glued together (a log viewer or a chat client that turned the
# newlines into spaces: "  rank      : 3 (local_rank: 3)  exitcode  : -11 (pid: 123)", "[1]:  time      : ...",
# "Failures:   <NO_OTHER_FAILURES>", or the whole block on the exception's line). torchelastic prints each part on
# a line of its own (torch/distributed/elastic/multiprocessing/errors/__init__.py ChildFailedError.format_msg:
# borders, "<entrypoint> FAILED", "Failures:", "Root Cause (first observed failure):", "[N]:" and the six
# "key : value" fields), so a border, a section header, an entry index or a field key after whitespace is where
# one of its lines began. The traceback field's value (the last field, free text) is never split but at a border.
_GLUED_BORDER = re.compile(r"(={20,}|-{20,})")
_GLUED_AT = re.compile(r"[ \t]+(?=\[\d+\]:(?:\s|$)|(?:time|host|rank|exitcode|error_file|traceback)[ \t]*:(?:[ \t]|$)"
                       r"|<NO_OTHER_FAILURES>|Root Cause \(first observed failure\):|Failures:|\S+ FAILED(?:\s|$))"
                       r"|(?<=Failures:)[ \t]+|(?<=\(first observed failure\):)[ \t]+|(?<=^\[\d\]:)[ \t]+|(?<= FAILED)[ \t]+")
_GLUED_TB = re.compile(r"(?:^|[ \t])traceback[ \t]*:")


def _glued_parts(text: str) -> list[str]:
    """The lines of a ChildFailedError block that ``text`` holds glued together (``[text]`` when it is one)."""
    s = text.strip()
    if text.startswith("    ") or not (_GLUED_AT.search(s) or (_GLUED_BORDER.search(s) and not _GLUED_BORDER.fullmatch(s))):
        return [text]  # one line as printed (a traceback field's continuation lines keep their indentation)
    out: list[str] = []
    for piece in _GLUED_BORDER.split(text):
        if not piece.strip():
            continue
        if _GLUED_BORDER.fullmatch(piece):
            out.append(piece)
            continue
        piece = piece.strip()
        m = _GLUED_TB.search(piece)
        head, tail = (piece[:m.start()], piece[m.start():].strip()) if m else (piece, "")
        out.extend(p.strip() for p in _GLUED_AT.split(head.strip()) if p and p.strip())
        if tail:
            out.append(tail)
    return out


def child_lines(lines: list[str]) -> list[tuple[int, str]]:
    """(index in ``lines``, text) of each line of a ChildFailedError block, glued lines taken apart."""
    out: list[tuple[int, str]] = []
    for i, t in enumerate(lines):
        out.extend((i, p) for p in _glued_parts(t))
    return out


def _child_entries(lines: list[str]) -> list[dict]:
    """Failure entries of a ChildFailedError block; ``root_cause`` says which section each one is in."""
    entries: list[dict] = []
    section = None
    cur: dict | None = None
    last_field = None
    for i, t in child_lines(lines):
        if t.startswith("Failures:"):
            section = "failures"
            continue
        if t.startswith("Root Cause (first observed failure):"):
            section = "root"
            continue
        if _BORDER.match(t):
            cur = None
            continue
        if cur is not None and last_field == "traceback" and "_tb" in cur and t.startswith("  ") \
                and (t.startswith("    ") or not _LOOSE_FIELD.match(t)):
            # a line of the worker's traceback in the field (frames at four spaces and more, its exception line at
            # two): kept by index, finish.py reads them as that rank's traceback
            cur["_tb"].append(i)
            if t.startswith("    "):
                cur["traceback"] = (cur.get("traceback") or "") + "\n" + t.strip()
            cur["_nlines"] = i - cur["_lineno"] + 1
            continue
        as_printed = t
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
                tb = _REPORT_TB.match(as_printed)
                if last_field == "traceback" and tb:
                    cur["_tb"] = [i]
                    cur["_tb_indent"] = len(tb.group(1))
            continue
        if cur is not None and last_field == "traceback" and t.startswith("    "):
            cur["traceback"] = (cur.get("traceback") or "") + "\n" + t.strip()
            cur["_nlines"] = i - cur["_lineno"] + 1
    return entries
