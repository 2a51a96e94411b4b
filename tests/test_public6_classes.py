"""The failure classes the public6 development set showed (fixtures/public6/BASELINE.md), each built from
what the tool that prints the line does, not from one pasted log: other bindings' NCCL result strings (XLA,
NCCLCHECK macros, std::runtime_error what()), nccl-tests' failed validation, a c10::Error tail raised from the
watchdog's checkTimeout, torch.multiprocessing.spawn's signal exits, a cut dump-signal line, an NCCL <= 2.2 WARN
with an anonymised head, a log viewer's timestamp gutter, and a hard wrap at an unusual terminal width."""
from __future__ import annotations

import pytest

from nccl_analyzer.analysis import analyze, analyze_text
from nccl_analyzer.sources import Source, clean_text
from nccl_analyzer.paste import _wrap_width

XLA_HEAD = "2025-02-10 08:11:02.551203: W external/xla/xla/service/gpu/runtime/support.cc:58] Intercepted XLA runtime error:\n"
XLA_OP = "INTERNAL: external/xla/xla/service/gpu/nccl_utils.cc:297: NCCL operation ncclCommInitRank(&comm, nranks, id, rank) failed: "

CASES = {
    # XLA: "NCCL operation <call> failed: <ncclGetErrorString>" (xla/service/gpu/nccl_utils.cc)
    "xla-unhandled-cuda": (XLA_HEAD + XLA_OP + "unhandled cuda error\n", "cuda_error"),
    "xla-invalid-usage": (XLA_HEAD + XLA_OP + "invalid usage (run with NCCL_DEBUG=WARN for details)\n", "invalid_usage"),
    # ... and, since 2023, the last NCCL WARN text: it names the cause
    "xla-last-warning-socket": (
        XLA_HEAD + XLA_OP + "unhandled system error (run with NCCL_DEBUG=INFO for details). Last NCCL warning(error) "
        "log entry (may be unrelated) 'socketStartConnect: Connect to 10.1.2.3<40123> failed : No route to host'.\n",
        "network_connect"),
    "xla-last-warning-oom": (
        XLA_HEAD + XLA_OP + "unhandled cuda error (run with NCCL_DEBUG=INFO for details). Last NCCL warning(error) log "
        "entry (may be unrelated) 'Cuda failure 2 'out of memory''.\n", "cuda_oom"),
    "xla-no-library": (
        "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: external/xla/xla/service/gpu/nccl_utils.cc:133: NCCL operation "
        "ncclGetUniqueId(&id) failed: Unable to load NCCL library. Multi-GPU collectives will not work.\n",
        "version_mismatch"),
    # a program's own NCCLCHECK / error check with ncclGetErrorString
    "ncclcheck-usage": ("Failed, NCCL error main.cu:88 'invalid usage'\n", "invalid_usage"),
    "ncclcheck-system": ("NCCL failure bench.cu:52 'unhandled system error'\n", "other"),
    "binding-internal": ("Internal NCCL failure with error internal error in file /src/comm/nccl_comm.cu at line 85\n",
                         "other"),
    # an uncaught C++ exception ends in abort(): Open MPI's report of the SIGABRT is its consequence
    "what-then-ompi-abort": (
        "terminate called after throwing an instance of 'std::runtime_error'\n"
        "  what():  NCCL failure: unhandled cuda error in allreduce.cu at line: 40 rank: 1\n"
        "[gpu2:4410] *** Process received signal ***\n[gpu2:4410] Signal: Aborted (6)\n[gpu2:4410] Signal code:  (-6)\n"
        "[gpu2:4410] *** End of error message ***\n", "cuda_error"),
    # nccl-tests' validation summary (src/common.cu)
    "nccl-tests-wrong": ("# Out of bounds values : 12 FAILED\n# Avg bus bandwidth    : 10.52\n", "other"),
    "nccl-tests-ok": ("# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 10.52\n", None),
    # c10::Error's tail when the paste starts below the watchdog's message
    "raised-from-checktimeout": (
        "Exception raised from checkTimeout at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:618 (most recent "
        "call first):\nframe #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f5a in /x/lib/libc10.so)\n"
        "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, std::ratio<1l, "
        "1000l> > >) + 0x1d2 (0x7f5b in /x/lib/libtorch_cuda.so)\n", "watchdog_timeout"),
    # torch.multiprocessing.spawn: ProcessExitedException("process %d terminated with signal %s")
    "spawn-sigkill": ("torch.multiprocessing.spawn.ProcessExitedException: process 2 terminated with signal SIGKILL\n",
                      "host_oom"),
    "spawn-sigsegv": ("torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal SIGSEGV\n",
                      "other"),
    # the heartbeat monitor's dump-signal line, cut short by a terminal copy
    "dump-signal-cut": (
        "[rank3]:[E1201 10:00:00.123456789 ProcessGroupNCCL.cpp:1914] [PG ID 0 PG GUID 0(default_pg) Rank 3] Received a "
        "dump signal due to a collective timeout from this local rank and we will\n", "watchdog_timeout"),
    # NCCL <= 2.2 level format ("WARN" without "NCCL") behind a head the paste anonymised
    "legacy-warn-anonymised-head": ("<node A> [1] include/socket.h:290 WARN Call to connect failed : No route to host\n",
                                    "network_connect"),
    # AWS CloudWatch console rows copied as text: "  | <ISO time> | <message>"
    "viewer-gutter": (
        "  | 2025-01-02T03:04:05.678Z | [rank1]:[E102 03:04:05.678000000 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog "
        "caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
        "Timeout(ms)=600000) ran for 600100 milliseconds before timing out.\n", "watchdog_timeout"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_class_root_cause(name):
    text, want = CASES[name]
    rc = analyze_text(text).root_cause
    assert (rc.id if rc else None) == want, (name, rc and rc.title)


def test_viewer_gutter_is_stripped_and_its_time_kept():
    line = clean_text("  | 2024-08-23T22:22:51.875Z | frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x10c",
                      Source(path="x.log", real=None), 1)
    assert line.text == "frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x10c"
    assert line.time == "2024-08-23T22:22:51.875Z"


def _wrapped(width: int) -> list[str]:
    record = ("[rank0]:[E1201 10:00:00.123456789 ProcessGroupNCCL.cpp:1515] [PG 0 (default_pg) Rank 0] Process group "
              "watchdog thread terminated with exception: [Rank 0] Watchdog caught collective operation timeout: "
              "WorkNCCL(SeqNum=44, OpType=BROADCAST, NumelIn=8, NumelOut=8, Timeout(ms)=600000) ran for 600012 "
              "milliseconds before timing out.")
    frame = ("frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
             "std::ratio<1l, 1000l> > >) + 0x1d2 (0x7fffa87ba8f2 in /opt/conda/lib/python3.11/site-packages/torch/lib/"
             "libtorch_cuda.so)")
    out = []
    for s in (record, "Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:609 "
                      "(most recent call first):", frame):
        while len(s) > width:
            out.append(s[:width])
            s = s[width:]
        out.append(s)
    return out


def test_two_wraps_at_an_unusual_width_are_a_wrap(tmp_path):
    """A short paste from a 170-column terminal shows the width only twice: both pieces continue (no record head)."""
    lines = _wrapped(170)
    assert sum(len(s) == 170 for s in lines) == 2
    assert _wrap_width(lines) == 170
    log = tmp_path / "console.log"
    log.write_text("\n".join(lines) + "\n")
    rc = analyze([str(log)], workers=1).root_cause
    assert rc is not None and rc.id == "watchdog_timeout"


def test_two_equal_lines_followed_by_records_are_no_wrap():
    a = "node1:11:11 [0] NCCL INFO Channel 00/02 :    0   1   2   3   4   5   6   7   8   9  10  11  12  13  14  15 16 17"
    b = "node1:11:11 [0] NCCL INFO Channel 01/02 :    0   1   2   3   4   5   6   7   8   9  10  11  12  13  14  15 16 17"
    assert len(a) == len(b)
    assert _wrap_width([a, b, "node1:11:11 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1"]) == 0
