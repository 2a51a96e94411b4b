"""Dirty text -> clean ``Line``: wrapper prefixes (launchers, collectors, loggers, pastes), escapes, control
characters (split from sources.py, which reads the inputs; ``sources`` re-exports what it always offered)."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .model import Line

if TYPE_CHECKING:  # pragma: no cover
    from .sources import Source

# CSI / OSC / single-char escapes, as terminals, `rich`, glog colour and `ls --color` emit them, and nF escapes
# (``ESC ( B``, the charset reset `tput sgr0` prints before ``ESC [m``).
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[ -/]+[0-~]|[@-Z\\-_])")
_CTRL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# ESC in caret notation ("^["), as a terminal echoes a control character it does not interpret (a log viewed with
# `cat -v`, or an escape a shell echoed back) and as people then paste it: with the colour or erase-line code it
# began ("^[[0m", "^[[31m", "^[[K"), else the two characters alone ("^[[E socket.cpp:922] ..." is glog's "[E ...]"
# head behind a lost escape: not a cursor movement).
_CARET_ESC = re.compile(r"\^\[(?:\[[0-9;]*[mK])?")

# Wrapper prefixes, outermost first. Each may appear once, in this order, before the payload:
#   "> "                              a Markdown quote marker pasted with the log (RLHF-V#11)
#   2026-11-29T13:53:17.123456789Z   kubectl logs --timestamps / docker logs -t (RFC 3339); also a collector's or
#   2024-11-20 14:37:16[,123]         logger's local wall clock with a space (Python logging's asctime, ts(1))
#   [default3]:                       torchrun --tee / --redirects (role + local rank, no space)
#   [rank3]:                          torch >= 2.3 excepthook / c10 logger once a default PG exists
#   "  3: "                           srun --label (rank, right-aligned)
#   [trainer0|0]:                     launchers that add a replica index to the role tag (nccl#1837)
#   [155] / [80746]                   a bare number: mpirun/launcher process tags, log viewers' line numbers
#                                     (nccl#302, LlamaFactory#7396); dropped, never read as a rank
#   "  | 2024-08-23T22:22:51.875Z | "  a log viewer's table copied as text (AWS CloudWatch console: "| timestamp |
#                                     message" rows), outside everything else (litData#340, aws-ofi-nccl#715)
#   "  | 2024-08-23T22:22:51.875Z<msg> | <msg>"  the same table with a row expanded: the time stamp glued to the
#                                     message, then the message column again after " | " (the copy is dropped)
_VIEWER_TS = re.compile(r"[ \t]*\|[ \t]*(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d))(?:[ \t]*\| ?)?")
_CONTAINER_TS = re.compile(r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d| ?UTC)?) ")
# What a Python logger writes between its time stamp and the message: loguru's default "| ERROR    | mod:func:52 - "
# and logging's "%(asctime)s - %(name)s - %(levelname)s - " (the message is the program's own text).
_LOGGER_HEAD = re.compile(r"(?:\| (?:TRACE|DEBUG|INFO|SUCCESS|WARNING|ERROR|CRITICAL) *\| [\w.<>-]+:[\w.<>-]+:\d+ - "
                          r"|- [\w.<>-]+ - (?:DEBUG|INFO|WARNING|ERROR|CRITICAL) - )")
# rich's RichHandler (accelerate launch installs it on the root logger when rich is importable): "[time] LEVEL
# message   file.py:NN", the level padded to 8, the source at the right edge; the time column is blank on a record
# in the same second as the one before. Read as logging's basic "LEVEL:file:message", the form the parsers know.
_RICH = re.compile(r"(?:\[[\d/:. -]+\] +| +)?(DEBUG|INFO|WARNING|ERROR|CRITICAL) {1,5}(\S.*?) {2,}([\w.-]+)\.py:\d+ *$")
_ROLE = re.compile(r"\[([A-Za-z_][\w-]*?)(\d+)(?:\|\d+)?\]:")
#   trainer/0 [1]:                    torchx's log tee (torchx/cli/cmd_log.py: f"{role_name}/{replica_id} {line}")
#                                     around torchrun's tag with an empty role name ("[{role}{local_rank}]:")
_TORCHX = re.compile(r"[A-Za-z_][\w-]*/\d+ (?=\[(?:[A-Za-z_][\w-]*?)?\d+(?:\|\d+)?\]:)")
_EMPTY_ROLE = re.compile(r"\[(\d+)\]:")
# A hand-rolled launcher's or a collector's own label ("[r1] ", "[node-a] ", sed 's/^/[rN] /') in front of torch's
# "[rankN]:" / torchrun's "[defaultN]:" prefix: outside everything the job prints (only taken off before one of those)
_OUTER_LABEL = re.compile(r"\[[\w.-]{1,24}\] (?=\[(?:rank\d+|[A-Za-z_][\w-]*?\d+(?:\|\d+)?)\]:)")
# A whole line set in Markdown bold or code by whoever pasted it ("**RuntimeError: NCCL communicator was aborted
# ...**", "`[rank1]:[E ...] Watchdog caught ...`"), inside or outside a launcher's prefix: the marks are the paste's.
_EMPHASIS = re.compile(r"(\*\*|`)(?=[^\s*`])(.*[^\s*`])\1\s*$")  # not glog's "*** SIGSEGV ... ***"
# Bold over the head of a line only ("**ERROR:torch.distributed.elastic...:failed (exitcode: -9) ... of binary:**
# /usr/bin/python"): the reporter emphasised the message and left the path after it plain.
_BOLD_HEAD = re.compile(r"\*\*(?=[^\s*])([^*]*[^\s*])\*\*(?=\s)")
_TAG = re.compile(r"\[\d{1,7}\] ")
_SRUN = re.compile(r" {0,4}(\d{1,5}): ")
# pdsh (and DeepSpeed's pdsh runner, its default for multi-node jobs) writes "<node>: " before every line of a node's
# output (pdsh's own output module: "%s: %s"). Only a node named by its IPv4 address is taken: a host name followed by
# ": " cannot be told from the program's own "Error: " / "WARNING: " words.
_PDSH_IP = re.compile(r"(?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3}: ")
#   (RayWorkerVllm pid=7046) / (WorkerDict pid=123, ip=10.0.0.1) / (pid=909608) / (raylet)
#                                     Ray's log monitor: which actor/worker printed the line (no rank)
#   [1,3]<stderr>:                    mpirun --tag-output ([jobid,rank]<stream>:); the rank is kept
#   [3]<stderr>:                      Horovod's gloo runner (safe_shell_exec prefix_stream: "[{index}]<{stream}>:",
#                                     index = the worker's global rank); the rank is kept
#   ERROR 04-07 00:57:46 ray_utils.py:45]   vLLM's per-line logger head (also "[file.py:45] ", v0.8+)
#   (head, rank=0, pid=2514) / (worker1, rank=1, pid=2388, ip=10.0.0.2) / (task, pid=18593)
#                                     SkyPilot's per-node tee of a task's output (a comma after the node name)
#   (VllmWorker rank=7 pid=240)       vLLM's multiproc executor (v1: _add_prefix(f"VllmWorker rank={rank}", pid))
_RAY = re.compile(r"\((?:[A-Za-z_][\w.:-]*(?:,? (?:rank=\d+,? )?pid=\d+(?:, ip=[\w.:-]+)?)?|pid=\d+(?:, ip=[\w.:-]+)?)\) ?")
#   " [36m(RayWorkerVllm pid=5085) [0m"  colour codes whose ESC byte the paste lost (GitHub drops it): Ray's
#                                     log monitor colours its prefix, so what is left of the code goes with it
_BARE_SGR = re.compile(r" ?\[\d{1,3}(?:;\d{1,3})*m")
#   dinov2-giant.cn-d004 [stderr]     a benchmark runner's tag (milabench: "<bench>.<node> [stderr] <line>")
_STREAM_TAG = re.compile(r"[\w.@:-]+ \[(?:stdout|stderr)\] ")
# moreutils ts's default stamp and syslog's short one ("Dec 04 18:54:26 "), put before each line by a pipe (`| ts`):
# outside everything the job prints
_SHORT_TS = re.compile(r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ 0-3]\d \d\d:\d\d:\d\d(?:\.\d{1,6})? ")
# docker compose's service prefix before each line of a container's output ("trainer-1  | ", compose v2
# "<service>-<index>", v1 "<service>_<index>", the name padded to the longest one, then "| "): outside everything
# the job itself prints, like a runner's stream tag
_COMPOSE = re.compile(r"[A-Za-z0-9][\w.-]{0,62}[-_]\d{1,4} +\| ")
_CLOCK = re.compile(r"\d\d:\d\d:\d\d(?:[.,]\d{1,6})? (?=\[(?:rank\d|[A-Za-z_]*\d+\]:|[FEWI]\d{4} ))")
_TQDM_GLUED = re.compile(r"[^\[]*\d+/\d+ \[[^\]\[]*(?:s/it|it/s)[^\]\[]*\](?=\[(?:rank\d|[FEWI]\d{4} |[FEWI] [\w.]+:\d+\]|[A-Za-z_]+\d+\]:))")
_MPI_TAG = re.compile(r"\[(?:\d+,)?(\d+)\]<(?:stdout|stderr|stddiag)>:")
_VLLM_HEAD = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[?[\w.-]+:\d+\] ")
# What follows "[3] " when it is the device of a cut NCCL head ("[3] NCCL INFO ...", "[3] init.cc:12 NCCL WARN"): the
# parser reads the device from it, so it is not a launcher tag.
_NCCL_DEV_HEAD = re.compile(r"(?:[\w./-]+:\d+(?: \(\w*\))? )?NCCL (?:INFO|WARN|TRACE|CALL|ABORT) ")
_VLLM_LEVELS = frozenset(("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"))
_PREFIX_START = frozenset("0123456789[ (")
# a gutter bar (and its indentation) right before torch's "[rankN]:" prefix: see _clean_full
_BAR_RANK = re.compile(r"[ \t]*\| (?=\[rank\d+\]:)")
_SRUN_START = frozenset("0123456789 ")


def printable(s: str) -> str:
    """A decoded line as a terminal would show it: CR, ANSI escapes and control characters removed."""
    if s.endswith("\r"):
        s = s[:-1]
    if "\x1b" in s:
        s = _ANSI.sub("", s)
    if "^[" in s:
        s = _CARET_ESC.sub("", s)
    if "\r" in s:
        # Progress bars redraw with bare CR: what a terminal finally shows is the last segment.
        parts = [p for p in s.split("\r") if p]
        s = parts[-1] if parts else ""
    if not s.isprintable() and _CTRL.search(s):
        s = _CTRL.sub("", s)
    return s


def _undouble(s: str) -> str:
    """A log viewer's expanded row, "<msg> | <msg>": the message once."""
    half = (len(s.rstrip()) - 3) // 2
    if half > 0 and s[half:half + 3] == " | " and s[:half] == s[half + 3:].rstrip():
        return s[:half]
    return s


def clean_text(s: str, src: Source, lineno: int, truncated: bool = False) -> Line:
    """Clean one decoded line (no newline) and split off wrapper prefixes."""
    # Fast paths, for what most lines of a big log are: a line that nothing below would change (an NCCL
    # "host:pid:tid [dev] NCCL ..." line: it starts with a letter), and torch's "[rankN]:" prefix on an
    # otherwise plain line. Each tests, in a few C calls, that none of the whole-line rules below applies and that
    # the start takes none of the prefix branches; anything else goes the full way (``_clean_full``; a test runs
    # both on every fixture line).
    c = s[:1]
    if (c.isalpha() or c == "[") and s.isprintable() and "it]" not in s and "[0m" not in s and "^[" not in s \
            and s.find(" [std", 0, 80) < 0 and s.find(" | ", 0, 72) < 0 \
            and not (s[3:4] == " " and s[9:10] == ":") and not (s[-3:-1].isdigit() and ".py:" in s[-12:]):
        if c == "[":
            if s.startswith("[rank"):
                j = s.find("]:", 5, 16)
                if j > 5 and s[5:j].isdigit():
                    t = s[j + 2:]
                    if t[:1] == " ":
                        t = t[1:]
                    if t[:2] == "> ":
                        t = t[2:]
                    if t[:7] == "[c10d] ":
                        t = t[7:]  # (as _clean_full)
                    return Line(src.path, lineno, t, s, int(s[5:j]), src.local_rank, None, truncated)
        elif c not in _VLLM_START and not s.startswith("std"):
            i = s.find("/", 1, 48)
            if i < 0 or not s[i + 1:i + 2].isdigit() or " " in s[:i] or ":" in s[:i]:
                return Line(src.path, lineno, s, s, src.rank, src.local_rank, None, truncated)
    return _clean_full(s, src, lineno, truncated)


def _clean_full(s: str, src: Source, lineno: int, truncated: bool = False) -> Line:
    """``clean_text`` without its fast paths."""
    s = printable(s)
    raw = s
    if "[0m" in s:
        s = _BARE_SGR.sub("", s)
    if s[3:4] == " " and s[9:10] == ":":
        m = _SHORT_TS.match(s)
        if m:
            s = s[m.end():]
    if s[:1].isalnum() and s.find(" | ", 0, 72) > 0:
        m = _COMPOSE.match(s)
        if m:
            s = s[m.end():]
    if s.find(" [std", 0, 80) > 0:
        m = _STREAM_TAG.match(s)
        if m:
            s = s[m.end():]
    if "it]" in s:
        s = _drop_glued_bar(s)
    if s[:1] == ">" and (s[1:2] == " " or len(s) == 1):
        # A Markdown quote ("> " before each line) kept inside a pasted code block: outside any other wrapper.
        s = s[2:]
    elif s[:1] in " |" and "| [rank" in s[:48]:
        m = _BAR_RANK.match(s)
        if m:
            # A report's gutter bar ("        | [rank0]: ...": milabench's summary sets each captured stderr line
            # of a failed bench under a "| " bar) outside torch's "[rankN]:" prefix, like a Markdown quote.
            s = s[m.end():]
    if (s[:2] == "**" or s[:1] == "`") and s[-1:] in "*`":
        s = _unemphasise(s)
    elif s[:2] == "**":
        m = _BOLD_HEAD.match(s)
        if m:
            s = m.group(1) + s[m.end():]
    rank = src.rank
    local_rank = src.local_rank
    time = None
    if s[:3] == "std" and s[6:8] == ": " and s[3:6] in ("err", "out"):
        # a runner's stream tag before every line of a child's output ("stderr: WARNING:torch.distributed..."):
        # outside everything the job itself prints, like Open MPI's "[1,0]<stderr>:"
        s = s[8:]
    if s[-3:-1].isdigit() and ".py:" in s[-12:]:
        m = _RICH.match(s)
        if m:
            s = f"{m.group(1)}:{m.group(3)}:{m.group(2)}"
    if s[:1] in " \t|" and "| " in s[:48]:
        m = _VIEWER_TS.match(s)
        if m:
            time = m.group(1)
            s = s[m.end():]
            if " | " in s:
                s = _undouble(s)
    i = s.find("/", 1, 48)
    if i > 0 and s[:1].isalpha() and s[i + 1:i + 2].isdigit() and " " not in s[:i] and ":" not in s[:i]:
        # only what _TORCHX can match ("role/N [...]:", the role one word): not NCCL's "host:pid:tid ... 00/64"
        s, local_rank = _strip_torchx(s, local_rank)
    if s and s[0] in _PREFIX_START:
        # Cheap character tests first: most lines have no wrapper prefix, and a regex call costs ~0.3 us.
        if "." in s[1:4] and s[0].isdigit():
            m = _PDSH_IP.match(s)
            if m:
                s = s[m.end():]  # pdsh's "<node>: " (DeepSpeed's multi-node runner), the node an IPv4 address
        if len(s) > 20 and s[4] == "-" and (s[10] == "T" or s[10] == " "):
            m = _CONTAINER_TS.match(s)
            if m:
                time = m.group(1)
                s = s[m.end():]
                if len(s) > 20 and s[4] == "-" and (s[10] == " " or s[10] == "T"):
                    s, time = _strip_wall_clock(s, time)  # the job's own logger clock (or a collector's) inside kubectl's
                elif s[:2] == "| " or s[:2] == "- ":
                    m = _LOGGER_HEAD.match(s)
                    if m:
                        s = s[m.end():]
                if s[:1] in _VLLM_START:
                    s, time = _strip_vllm_head(s, time)
        if s[2:3] == ":" and s[5:6] == ":":
            s = _strip_clock(s)
        if rank is None and (s[:1] in _SRUN_START or s[:1] == "[" and s[1:2].isdigit()):
            # srun --label is outside everything the job itself prints ("3: [default0]:[rank3]: ..."); an inner
            # [rankN]: below overrides its task id. Only a log viewer's line number ("[80746] ") is further out.
            if s[:1] == "[":
                m = _TAG.match(s)
                if m and _SRUN.match(s, m.end()):
                    s = s[m.end():]
            m = _SRUN.match(s)
            if m and (src.srun or _looks_like_srun_payload(s, m.end()) or _SRUN_ONLY_PAYLOAD.match(s, m.end())
                      or _nested_label(s, m.end())):
                src.srun = True
                rank = int(m.group(1))
                s = s[m.end():]
                m = _nested_label(s, 0)
                if m:
                    s = s[m.end():]  # a second numeric label inside srun's (ctest's "91: " test number)
                if len(s) > 20 and s[4] == "-" and (s[10] == " " or s[10] == "T"):
                    s, time = _strip_wall_clock(s, time)
                if s[2:3] == ":" and s[5:6] == ":":
                    s = _strip_clock(s)
                if s[:1] in _VLLM_START:
                    s, time = _strip_vllm_head(s, time)  # vLLM's "ERROR 04-15 00:31:11 file.py:574] " behind the label
        if "/" in s[:48] and s[:1].isalpha():
            s, local_rank = _strip_torchx(s, local_rank)  # torchx's tee behind a collector's time or srun's label
        if s.startswith("(") and (" pid=" in s[:64] or s.startswith("(pid=") or s.startswith("(raylet)")):
            m = _RAY.match(s)
            if m:
                s = s[m.end():]
                if s[:1] in _VLLM_START:
                    s, time = _strip_vllm_head(s, time)
                elif "it]" in s:
                    s = _drop_glued_bar(s)  # a progress bar the task wrote without its newline, behind the prefix
        if s.startswith("[") and s[1:2].isdigit():
            if "]<std" in s[:24]:
                m = _MPI_TAG.match(s)
                if m:
                    rank = int(m.group(1))
                    tag, s = m.group(0), s[m.end():]
                    if tag in s:
                        # mpirun's output forwarder tags every chunk it reads from the rank's pipe: a line the
                        # program wrote in pieces ("RuntimeError" then ": NCCL communicator was aborted ...") has
                        # the same tag again inside it
                        s = s.replace(tag, "")
            else:
                m = _TAG.match(s)
                if m and (_looks_like_srun_payload(s, m.end()) or _SRUN.match(s, m.end())) \
                        and not _NCCL_DEV_HEAD.match(s, m.end()):
                    s = s[m.end():]  # (an srun label behind the tag is checked for its own payload below)
        if s.startswith("[") and not s.startswith("[rank"):
            if "] [" in s[:28]:
                m = _OUTER_LABEL.match(s)
                if m:
                    s = s[m.end():]
        if s.startswith("[") and not s.startswith("[rank"):
            m = _ROLE.match(s)
            if m:
                local_rank = int(m.group(2))
                s = s[m.end():]
                if "it]" in s:
                    s = _drop_glued_bar(s)  # the bar was written behind torchrun's "[default0]:"
                elif s[2:3] == ":" and s[5:6] == ":":
                    s = _strip_clock(s)
        if (s[:2] == "**" or s[:1] == "`") and s[-1:] in "*`" and s is not raw:
            s = _unemphasise(s)  # the marks went around the program's text, behind the launcher's prefix
        if s.startswith("[rank"):
            # "[rank12]:" by string operations: this prefix is on most lines of a torch >= 2.3 job.
            j = s.find("]:", 5, 16)
            if j > 5 and s[5:j].isdigit():
                rank = int(s[5:j])
                s = s[j + 2:]
                if s.startswith(" "):
                    # torch's excepthook writes "[rank0]: " + line; the c10 logger "[rank0]:[E...".
                    s = s[1:]
        if s[:2] == "> ":
            s = s[2:]  # a Markdown quote marker behind a launcher's / collector's prefix
        if s[:7] == "[c10d] ":
            s = s[7:]  # torch's c10d tag left in front when the paste cut the c10 logger head before it
    elif s[:1] in _VLLM_START:
        s, time = _strip_vllm_head(s, time)
    return Line(src.path, lineno, s, raw, rank, local_rank, time, truncated)


def _unemphasise(s: str) -> str:
    m = _EMPHASIS.match(s)
    return m.group(2) if m and m.group(1) not in m.group(2) else s


_VLLM_START = frozenset("DIWEC")


def _strip_torchx(s: str, local_rank: int | None) -> tuple[str, int | None]:
    m = _TORCHX.match(s)
    if m is None:
        return s, local_rank
    s = s[m.end():]
    m = _EMPTY_ROLE.match(s)
    if m:
        return s[m.end():], int(m.group(1))
    return s, local_rank


def _strip_wall_clock(s: str, time: str | None) -> tuple[str, str | None]:
    """A "YYYY-MM-DD hh:mm:ss" stamp behind an outer prefix (srun's label, kubectl's RFC 3339 time)."""
    m = _CONTAINER_TS.match(s)
    if m is None:
        return s, time
    s, time = s[m.end():], time or m.group(1)
    if s[:2] == "| " or s[:2] == "- ":
        h = _LOGGER_HEAD.match(s)
        if h:
            s = s[h.end():]
    return s, time


def _strip_clock(s: str) -> str:
    """A wall clock a log collector (or the job's own logger) put before the job's prefixes: "18:11:06.680
    [rank4]:[E205 ...". Only in front of a rank / worker / c10 prefix; other bracketed text keeps its clock."""
    m = _CLOCK.match(s)
    return s[m.end():] if m else s


def _drop_glued_bar(s: str) -> str:
    """A tqdm bar left without its newline with the next record glued on ("1021/100000 [45:39<51:20:53,
    1.87s/it][rank2]:[E723 ..."): the record, when a log record's own prefix follows the bar directly."""
    if "s/it]" not in s and "it/s]" not in s:
        return s
    m = _TQDM_GLUED.match(s)
    return s[m.end():] if m else s


def _strip_vllm_head(s: str, time: str | None) -> tuple[str, str | None]:
    # String tests first: many hostnames (and so NCCL lines) start with these letters.
    sp = s.find(" ", 4, 9)
    if sp < 0 or s[:sp] not in _VLLM_LEVELS or s[sp + 3:sp + 4] != "-":
        return s, time
    m = _VLLM_HEAD.match(s)
    if not m:
        return s, time
    return s[m.end():], time  # its "MM-DD hh:mm:ss" has no year: not used as the line's time


def _nested_label(s: str, start: int) -> "re.Match[str] | None":
    """A numeric "N: " label at ``start`` in front of a log record (ctest's test number inside srun's label)."""
    m = _SRUN.match(s, start) if s[start:start + 1] in _SRUN_START else None
    if m and (_looks_like_srun_payload(s, m.end()) or _SRUN_ONLY_PAYLOAD.match(s, m.end())):
        return m
    return None


def _looks_like_srun_payload(s: str, start: int) -> bool:
    # "3: " also starts ordinary text ("1: loss 0.3"); accept it only in front of something that is a
    # log record of its own: an NCCL prefix, a traceback, a torch/glog record, or another prefix.
    rest = s[start:start + 64]
    return bool(_SRUN_PAYLOAD.match(rest))


_SRUN_PAYLOAD = re.compile(
    r"(?:[\w.-]*:\d+:\d+ |[\w.-]+: Test (?:CUDA|NCCL) failure |\d\d:\d\d:\d\d(?:[.,]\d+)? \[|Traceback|Exception ignored |  File |\[|[IWEF]\d{4} |NCCL |[A-Z]\w*(?:Error|Exception)\b|"
    r"torch\.|WARNING:|ERROR:|INFO:|\d{4}-\d\d-\d\d|terminate called |  what\(\): |Watchdog caught |> (?=\S)"
    r"|  (?:time|host|rank|exitcode|error_file|traceback) +: |(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:)"
)
# Further heads only an srun label may stand before (a "[3] " tag before these is NCCL's cut "[dev]" head): the
# continuation of an NCCL error message, a bare "file.cc:123" WARN (<= 2.2), Ray's "(Actor pid=N)", a line set in
# Markdown bold, torchx's "role/0 [1]:".
_SRUN_ONLY_PAYLOAD = re.compile(r"nccl[A-Z]\w*: |Last error:|[\w./-]+\.(?:cc|cpp|cu|h|c|py):\d+|\((?:raylet\)|pid=\d+|[\w.]+ pid=\d+)"
                                r"|\*\*(?=\S)|[A-Za-z_][\w-]*/\d+ \[(?:[A-Za-z_][\w-]*?)?\d+\]:")
