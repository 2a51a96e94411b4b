"""Native crash reports a dying rank prints: Python's faulthandler, UCX's and glog/absl signal handlers, gdb, the shell.

One ``native.crash`` event per report (docs/events.md), with the signal and the frames the report lists:

- faulthandler (``PYTHONFAULTHANDLER=1``, ``faulthandler.enable()``; CPython ``Python/faulthandler.c``)::

    Fatal Python error: Segmentation fault
    Current thread 0x00007f483e29bb80 (most recent call first):
      File "/work/train.py", line 42 in load_batch

- UCX (``ucs/debug/debug.c``; often seen through OpenMPI/UCC)::

    [host:1234:0:1234] Caught signal 7 (Bus error: nonexistent physical address)
    ==== backtrace (tid:   1234) ====
     0  /usr/lib/libucs.so.0(ucs_handle_error+0x2dc) [0x7f0c...]

- glog/absl (``*** SIGSEGV (@0x0) received by PID 1234 (TID ...) ...; stack trace: ***``, ``*** Aborted at 1700
  (unix time) try "date -d @1700" if you are using GNU date ***``, ``PC: @ 0x... func``), gdb (``Thread 1 "python"
  received signal SIGSEGV, Segmentation fault.``, ``#0  0x... in func () from /lib/x.so``) and the shell
  (``Segmentation fault (core dumped)``, ``bash: line 1: 1234 Bus error (core dumped) python train.py``).
A faulthandler thread dump without its ``Fatal Python error`` header is no crash report: faulthandler also dumps the
threads of a live process (``dump_traceback``, ``dump_traceback_later``'s ``Timeout (0:00:05)!``, ``register`` on a
signal such as SIGUSR1), so such a dump alone does not say that the process crashed.

The parser only sees lines the NCCL and torch parsers did not take; its frames continue a report until another
line comes (``EventStream`` closes an open report when another parser takes a line).
"""
from __future__ import annotations

import re

from ..model import Event, Line

#: Signal names as the reports print them -> (SIGNAME, number).
SIGNALS = {
    "segmentation fault": ("SIGSEGV", 11), "bus error": ("SIGBUS", 7), "aborted": ("SIGABRT", 6),
    "abort": ("SIGABRT", 6), "floating point exception": ("SIGFPE", 8), "floating-point exception": ("SIGFPE", 8),
    "illegal instruction": ("SIGILL", 4),
}
_NUM_NAME = {11: "SIGSEGV", 7: "SIGBUS", 6: "SIGABRT", 8: "SIGFPE", 4: "SIGILL"}
#: Other signals a launcher may name (a wrapped Open MPI report carries whichever ended the process).
_OTHER_NUM = {9: "SIGKILL", 15: "SIGTERM", 2: "SIGINT", 1: "SIGHUP", 3: "SIGQUIT", 5: "SIGTRAP", 10: "SIGUSR1",
              12: "SIGUSR2", 13: "SIGPIPE", 14: "SIGALRM", 24: "SIGXCPU", 25: "SIGXFSZ", 31: "SIGSYS"}
_CRASH_NAMES = r"Segmentation fault|Bus error|Aborted|Floating point exception|Illegal instruction"
_PRE = re.compile(r"Fatal Python error|Caught signal \d|"
                  r"\*\*\* (?:SIG[A-Z]+|Aborted at)|received signal SIG|"
                  r"(?:" + _CRASH_NAMES + r") \(core dumped\)|PC: @ |: task \d+: (?:" + _CRASH_NAMES + r")|"
                  r"noticed that process rank \d+ with PID \d+ on node \S+ exited on(?: signal (?:[4678]|11)\b|\s*$)")
# A launcher's report of a task that died by a signal: the task's own output may say nothing (a SIGSEGV leaves no
# Python traceback). The task the launcher names is the process that crashed; srun and mpirun start one process per
# task, so the task number is its global rank (SLURM_PROCID, the MPI rank).
# - srun, when a task ends by a signal: "<node>: task <N>: <strsignal()>" and " (core dumped)" when it dumped core
#   (the same report as its "task N: Exited with exit code K" / "task N: Killed" lines, messages/text.toml srun-*):
#   "srun: error: gpu-a02: task 3: Segmentation fault (core dumped)".
# - Open MPI's mpirun (orte/tools/orterun/help-orterun.txt [orterun:proc-aborted-strsignal], Open MPI 1.x .. 4.x:
#   "%s noticed that process rank %lu with PID %lu on node %s exited on signal %d (%s)."); PRRTE's prterun (Open MPI
#   5: src/docs/show-help-files/help-prun.txt [prun:proc-aborted-strsignal], PRRTE 3.0.x) wraps the same text after
#   "exited on", so the signal is on the next line: "signal 11 (Segmentation fault).". Only the crash signals are read
#   from the one-line form here (SIGKILL / SIGTERM stay the error-text table's, rules launcher-task-*); the wrapped
#   form is read whole whatever its signal, since its first line alone says none.
_LAUNCHER = (
    (re.compile(r"srun: error: (?P<host>\S+): task (?P<task>\d+): (?P<what>" + _CRASH_NAMES + r")\b"), "srun"),
    (re.compile(r"noticed that process rank (?P<task>\d+) with PID (?P<pid>\d+) on node (?P<host>\S+) exited on signal "
                r"(?P<num>[4678]|11)\b"), "mpirun"),
)
_OMPI_WRAPPED = re.compile(r"noticed that process rank (?P<task>\d+) with PID (?P<pid>\d+) on node (?P<host>\S+) "
                           r"exited on\s*$")
_OMPI_TAIL = re.compile(r"\s*signal (?P<num>\d+)(?: \((?P<what>[^)]*)\))?\.?\s*$")
_HEADERS = _LAUNCHER + (
    (re.compile(r"Fatal Python error: (?P<what>Segmentation fault|Bus error|Aborted|Floating[ -]point exception|"
                r"Illegal instruction)"), "faulthandler"),
    (re.compile(r"Caught signal (?P<num>\d+) \((?P<what>[^):]+)"), "ucx"),
    (re.compile(r"\*\*\* (?P<name>SIG[A-Z]+) (?:\(@[^)]*\) )?received by PID (?P<pid>\d+)"), "glog"),
    (re.compile(r"\*\*\* (?P<name>SIG[A-Z]+) received at time="), "absl"),
    (re.compile(r"received signal (?P<name>SIG[A-Z]+)"), "gdb"),
    (re.compile(r"(?:(?P<pid>\d+) )?(?P<what>Segmentation fault|Bus error|Aborted|Floating point exception|"
                r"Illegal instruction) \(core dumped\)"), "shell"),
)
_PY_FRAME = re.compile(r'\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
_UCX_FRAME = re.compile(r"\s*\d+\s+(?P<file>\S+?)\((?P<func>[^+)]*)(?:\+0x[0-9a-f]+)?\) \[0x[0-9a-f]+\]")
_UCX_FRAME2 = re.compile(r"\s*\d+\s+0x[0-9a-f]+\s+(?P<func>[^\s(]+)\(\)(?:\s+(?P<file>\S+):\d+)?")
_GDB_FRAME = re.compile(r"(?:#\d+\s+)?(?:0x[0-9a-f]+ in )?(?P<func>[\w:~<>.]+)\s*\([^)]*\)[^/]*?(?:(?:at|from) (?P<file>\S+))?$")
_GLOG_FRAME = re.compile(r"\s*(?:PC: )?@\s+0x[0-9a-f]+\s+(?:\d+\s+)?(?:\(unknown\)\s+)?(?P<func>[^\s(]+)")
_CONT = re.compile(r"\s*$|Current thread 0x|Thread 0x|==== backtrace|=+$|\s+<no Python frame>|\s+File \"|"
                   r"\s*\d+\s+\S|#\d+\s|\s*(?:PC: )?@\s+0x|\[Switching to |\(gdb\)|0x[0-9a-f]+ in |\s+(?:from|at) \S")
#: Frames that are the crash handler itself, not where the program was.
_HANDLER = re.compile(r"ucs_handle_error|ucs_error_signal_handler|ucs_debug|ucs_log|__restore_rt|killpg|"
                      r"^raise$|^abort$|__GI_raise|__GI_abort|__pthread_kill|pthread_kill|^gsignal$|"
                      r"FailureSignalHandler|google::|absl::|^\?\?$|signal_handler|c10::|sigaction")
_LIB = re.compile(r"/lib/python\d|site-packages/|dist-packages/|<frozen |/ctypes/")
MAX_FRAMES = 32
MAX_LINES = 200  # a report longer than this has ended (what looked like its lines is other output)


class CrashParser:
    """Per-stream; ``feed`` returns None (not a crash line), [] (consumed, report still open) or events."""

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: Event | None = None

    @property
    def pending_line(self) -> int | None:
        return self._open.line if self._open is not None else None

    def feed(self, line: Line) -> list[Event] | None:
        text = line.text
        if self._open is not None and self._open.fields.get("form") == "mpirun-wrapped":
            ev, self._open = self._open, None
            m = _OMPI_TAIL.match(text)
            if m is None:  # the report's second line is not in the input: it says a process died, not how
                ev.fields["form"] = "mpirun"
                _finish(ev)
                got = self._header(line)
                return [ev] + got if got else [ev]
            num = int(m.group("num"))
            ev.fields.update(signum=num, signal=_NUM_NAME.get(num) or _OTHER_NUM.get(num), form="mpirun",
                             detail=ev.fields["detail"] + " " + text.strip())
            ev.end_line = line.lineno
            _finish(ev)
            return [ev]
        if self._open is not None:
            if _CONT.match(text) and len(self._open.fields["frames"]) < MAX_FRAMES \
                    and line.lineno - self._open.line < MAX_LINES:
                self._frame(text, line)
                return []
            out = self.close()
            got = self._header(line)
            return out + got if got else (out or None)
        got = self._header(line)
        return got

    def close(self) -> list[Event]:
        """End the open report (another parser took the next line, or the input ended)."""
        ev, self._open = self._open, None
        if ev is None:
            return []
        if ev.fields.get("form") == "mpirun-wrapped":  # the input ended before the report's second line
            ev.fields["form"] = "mpirun"
        _finish(ev)
        return [ev]

    flush = close

    def _header(self, line: Line) -> list[Event] | None:
        text = line.text
        if ("Killed process" in text or "OOMKilled" in text or "oom-kill:" in text):
            oom = _oom(line)
            if oom is not None:
                return [oom]
        # cheap substring tests first: this runs on every line no other parser took
        if not ("Fatal Python" in text or "signal" in text or "SIG" in text or "core dumped" in text
                or "Aborted at" in text or "srun: error" in text or "exited on" in text) or not _PRE.search(text):
            return None
        m = _OMPI_WRAPPED.search(text)
        if m is not None:  # PRRTE's wrapped report: the signal follows on the next line
            self._open = Event("native.crash", line.path, line.lineno, line.raw, rank=int(m.group("task")),
                               time=line.time, fields={"form": "mpirun-wrapped", "signal": None, "frames": [],
                                                       "detail": text[m.start():].strip(), "host": m.group("host"),
                                                       "crash_pid": int(m.group("pid"))})
            return []
        for rx, form in _HEADERS:
            m = rx.search(text)
            if m is None:
                continue
            g = m.groupdict()
            name, num = None, None
            if g.get("what"):
                name, num = SIGNALS.get(g["what"].strip().lower(), (None, None))
            if g.get("num"):
                num = int(g["num"])
                name = name or _NUM_NAME.get(num)
            if g.get("name"):
                name = g["name"]
                num = num or next((n for n, nm in _NUM_NAME.items() if nm == name), None)
            fields = {"form": form, "signal": name, "signum": num, "frames": [], "detail": text[m.start():].strip()}
            if g.get("pid"):
                fields["crash_pid"] = int(g["pid"])
            rank = line.rank
            if g.get("task"):  # the launcher names the task that died (its global rank), not the line's own process
                rank = int(g["task"])
                fields["host"] = g["host"]
            ev = Event("native.crash", line.path, line.lineno, line.raw, rank=rank, time=line.time, fields=fields)
            if form in ("shell", "srun", "mpirun"):
                _finish(ev)
                return [ev]
            self._open = ev
            return []
        return None

    def _frame(self, text: str, line: Line) -> None:
        ev = self._open
        assert ev is not None
        for rx, kind in ((_PY_FRAME, "python"), (_UCX_FRAME, "native"), (_UCX_FRAME2, "native"),
                         (_GDB_FRAME, "native"), (_GLOG_FRAME, "native")):
            m = rx.match(text)
            if m:
                g = m.groupdict()
                fr = {"func": g.get("func") or "", "file": g.get("file") or "", "kind": kind}
                if g.get("line"):
                    fr["line"] = int(g["line"])
                ev.fields["frames"].append(fr)
                break
        ev.end_line = line.lineno


#: The OOM killer's own records: kernel (``mm/oom_kill.c``: "Out of memory: Killed process 8812 (python)", "Memory
#: cgroup out of memory: Killed process ...", "oom-kill:...,task=python,pid=8812,uid=0"), Kubernetes (OOMKilled).
_OOM = (
    re.compile(r"(?:Out of memory|Memory cgroup out of memory): Killed process (?P<pid>\d+) \((?P<comm>[^)]*)\)"),
    re.compile(r"oom-kill:.*task=(?P<comm>[^,]+),pid=(?P<pid>\d+)"),
    re.compile(r"\bOOMKilled\b"),
)


def _oom(line: Line) -> Event | None:
    for rx in _OOM:
        m = rx.search(line.text)
        if m:
            g = m.groupdict()
            fields: dict = {"source": "kernel" if g else "kubernetes"}
            if g.get("pid"):
                fields["killed_pid"] = int(g["pid"])
                fields["comm"] = g.get("comm")
            # like torch.elastic.* events, ``pid`` is the process the line is about (the killed one): it maps to a rank
            return Event("system.oom_kill", line.path, line.lineno, line.raw, pid=fields.get("killed_pid"),
                         rank=line.rank, time=line.time, fields=fields)
    return None


def _finish(ev: Event) -> None:
    """``frame``: the top frame that is not the crash handler (``func (file[:line])``); ``user_frame``: the top
    Python frame outside the interpreter's and installed packages' files."""
    frames = ev.fields.get("frames") or []
    for fr in frames:
        if fr["func"] and not _HANDLER.search(fr["func"]):
            where = fr["file"].rsplit("/", 1)[-1] if fr["file"] else ""
            if fr.get("line") is not None:
                where += f":{fr['line']}"
            ev.fields["frame"] = f"{fr['func']}" + (f" ({where})" if where else "")
            break
    for fr in frames:
        if fr["kind"] == "python" and not _LIB.search(fr["file"]):
            ev.fields["user_frame"] = f"{fr['file'].rsplit('/', 1)[-1]}:{fr.get('line')} in {fr['func']}"
            break
    if ev.fields.get("signal") is None:
        ev.fields.pop("signal")
