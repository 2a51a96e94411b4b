"""Line-prefix regexes (c10, glog, Python logging, DeepSpeed, Ray, ``[c10d]``), the prefilter, and the shapes
of the lines inside multi-line blocks."""
from __future__ import annotations

import re

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
          r"To avoid data|Process group watchdog|Process \d+ got signal|Exception \(either|Exception ignored |Error in atexit\._run_exitfuncs|Exception raised from|"
          r"Timeout at NCCL|Timed out after|Heartbeat monitor|ProcessGroupNCCL|PGNCCL|HeartbeatMonitor|Received |"
          r"First (?:PG|watchdog)|Observed flight|Finished (?:flight|writing NCCLPG|writing Flight Recorder)|Flight [Rr]ecorder|"
          r"Stack trace of the failed|Socket Timeout|Failed to recv|Sending process|Signal \d+ \(|Setting OMP_NUM|"
          r"Search for `cuda|Unable to shutdown|UV Store|TCP client|Collective WorkNCCL|Terminating the process|"
          r"Unknown NCCL error|Last error:|Root Cause \(first|Failures:$|THCudaCheck FAIL|NVRM: Xid \(|Initializing distributed: |"
          r"[\w.-]+: Test CUDA failure |" + _EXC)
_LOWER = r"[\w.-]+(?:/[\w.-]+)*\.py:\d+\] |terminate called|initializing (?:ddp|distributed): |[\w.-]+: Test CUDA failure |failed \(exitcode|wait timeout after|frame #\d|nccl[A-Z]\w+:|found async|cuda runtime error \(|" + _EXC
_PRE_BY_CHAR: dict[str, re.Pattern] = {}
for _c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ":
    _PRE_BY_CHAR[_c] = re.compile(_UPPER)
for _c in "abcdefghijklmnopqrstuvwxyz_":
    _PRE_BY_CHAR[_c] = re.compile(_LOWER)
_PRE_BY_CHAR["["] = re.compile(r"\[(?:rank\d|[FEWIV][\d ]|Rank \d|PG |c10d|\d{4}-\d\d-\d\d |\d+\]:$|\d+\] is setting"
                               r"|(?:<[^<>\]\n]*>|[^\]\s<])*gloo|[\w.-]+\] [Ww]orker group|\s*\d+\.\d+\] NVRM: Xid \()")
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
# (or glued to the next ones, block.child_lines: "[1]:  time      : ...", "Failures:   <NO_OTHER_FAILURES>  ----")
_CHILD_FIELD = r"(?:time|host|rank|exitcode|error_file|traceback) *:"
_CHILD_LINE = re.compile(r"\[\d+\]:$|  (?:time|host|rank|exitcode|error_file|traceback) *:|  <NO_OTHER_FAILURES>"
                         r"|\s*(?:time|host|rank|exitcode|error_file|traceback) *:(?: |$)"
                         r"|\[\d+\]:\s+" + _CHILD_FIELD + r"|Failures:\s+(?:\[\d+\]:|<NO_OTHER_FAILURES>)"
                         r"|Root Cause \(first observed failure\):\s+\[\d+\]:|(?:={20,}|-{20,})\s*(?:Failures:|Root Cause \()"
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
