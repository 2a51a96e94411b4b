"""The fail-safe: no "no failure" for a log with an unaccounted error line; healthy-but-scary logs stay null with
their scary lines in ``dismissed``."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nccl_analyzer.analysis import analyze, analyze_text
from nccl_analyzer.engine.loader import load_rules
from nccl_analyzer.failsafe import LIST_CAP, ErrorLedger
from nccl_analyzer.messages import load_tables
from nccl_analyzer.model import Event
from nccl_analyzer.render.json import render_json
from nccl_analyzer.render.text import render_text

from jobs.jobkit import JOB_TIMEOUT, ROOT, env, free_port, needs_torch, run_job, torchrun
from test_classification import REF, instantiate

RULES = load_rules()
TABLES = load_tables()
CASES = ROOT / "fixtures" / "cases"


def newest_warns() -> list[tuple[str, str]]:
    """(file under src/, fmt) of every WARN call site of NCCL 2.30.7 (781)."""
    out = []
    with open(REF / "nccl_log_formats.jsonl", encoding="utf-8") as fh:
        for row in map(json.loads, fh):
            if row["level"] == "WARN":
                out.append((row["file"].removeprefix("src/"), row["fmt"]))
    return out


def test_every_newest_warn_alone_is_a_failure_or_dismissed():
    """Each WARN format of NCCL 2.30.7, instantiated behind a real prefix and alone in a log, gets a root cause;
    only the formats the table calls harmless get none, and then they are listed in ``dismissed``."""
    warns = newest_warns()
    assert len(warns) == 781
    offenders = []
    harmless = teardown = 0
    for file, fmt in warns:
        body = instantiate(fmt)
        d = analyze_text(f"\nhost1:123:456 [0] {file}:42 NCCL WARN {body}\n", rules=RULES)
        m = TABLES.nccl_warn(file, body)
        if m.harmless:
            harmless += 1
            ok = d.root_cause is None and [x.evidence[0].line for x in d.dismissed] == [2]
        elif m.teardown:
            # a consequence of a process ending, and nothing else in the log says one failed: a teardown
            teardown += 1
            ok = d.root_cause is None and [x.evidence[0].line for x in d.dismissed] == [2] \
                and d.dismissed[0].reason.startswith("teardown: ")
        else:
            ok = d.root_cause is not None and any(e.line == 2 for e in d.root_cause.evidence)
        if not ok:
            offenders.append(f"  {file}: {fmt} -> {d.root_cause and d.root_cause.id}, dismissed={len(d.dismissed)}")
    assert not offenders, f"{len(offenders)} of {len(warns)} WARN formats not accounted for:\n" + "\n".join(offenders)
    assert 0 < harmless < 60
    assert 0 < teardown < 10


TEARDOWN_WARNS = """\
box3:2374:2994 [0] proxy.cc:1458 NCCL WARN [Service thread] Accept failed Resource temporarily unavailable
box3:2374:2994 [0] proxy.cc:1497 NCCL WARN [Service thread] Could not receive type from localRank 0, res=3, closed=0
box3:2374:2994 [0] proxy.cc:1521 NCCL WARN [Proxy Service 0] Failed to execute operation Close from rank 0, retcode 3
"""


def test_proxy_teardown_warns_alone_are_dismissed_as_teardown():
    d = analyze_text("step 100 loss 0.12\ntraining done\n" + TEARDOWN_WARNS, rules=RULES)
    assert d.root_cause is None
    assert sorted(e.line for x in d.dismissed for e in x.evidence) == [3, 4, 5]
    assert all(x.reason.startswith("teardown: ") for x in d.dismissed)


def test_proxy_teardown_warns_count_when_a_worker_failed():
    """The same lines with torchrun reporting a failed worker are that failure's consequence, never dismissed."""
    failed = ("E1201 11:28:45.428000 9217 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) "
              "local_rank: 0 (pid: 2374) of binary: /usr/bin/python3\n")
    d = analyze_text(TEARDOWN_WARNS + failed, rules=RULES)
    assert d.root_cause is not None
    assert not any(x.reason.startswith("teardown: ") for x in d.dismissed)


def test_proxy_teardown_warns_count_beside_another_error():
    d = analyze_text(TEARDOWN_WARNS + "box3:2375:2375 [1] init.cc:263 NCCL WARN Cuda failure 'out of memory'\n",
                     rules=RULES)
    assert d.root_cause is not None and d.root_cause.id == "cuda_oom"
    assert not any(x.reason.startswith("teardown: ") for x in d.dismissed)


def test_an_unrecognised_warn_gets_a_low_confidence_root_from_the_table():
    d = analyze_text("\nnode3:77:78 [2] transport/shm.cc:301 NCCL WARN Multiple starts found in group\n", rules=RULES)
    rc = d.root_cause
    assert rc.id == "shm" and rc.confidence <= 0.5
    assert rc.title.startswith("Inferred from an unrecognised error line: ")
    assert rc.rule == "failsafe:nccl:shm-transport"
    assert [(e.line, e.text) for e in rc.evidence] == [(2, "node3:77:78 [2] transport/shm.cc:301 NCCL WARN Multiple "
                                                          "starts found in group")]


CRASHES = [
    ("[gpu4:3311:0:3311] Caught signal 7 (Bus error: nonexistent physical address)\n==== backtrace (tid:   3311) ====\n"
     " 0  /usr/lib/x86_64-linux-gnu/libucs.so.0(ucs_handle_error+0x2dc) [0x7f60a0e0c2dc]\n", "shm"),
    ("Epoch 1 step 30 loss 1.22\nSegmentation fault (core dumped)\n", "other"),
    ("step 10\n/bin/bash: line 1: 81234 Killed                  python train.py\n", "host_oom"),
    ("gpu1: Test NCCL failure common.cu:1030 'unhandled cuda error (run with NCCL_DEBUG=INFO for details)'\n"
     " .. gpu1 pid 1234: Test failure common.cu:951\n", "cuda_error"),
    ("cupy_backends.cuda.libs.nccl.NcclError: NCCL_ERROR_UNHANDLED_CUDA_ERROR: unhandled cuda error\n", "cuda_error"),
    ("jaxlib.xla_extension.XlaRuntimeError: INTERNAL: external/xla/xla/service/gpu/nccl_utils.cc:297: NCCL operation "
     "ncclCommInitRank(&comm, nranks, id, rank) failed: invalid usage\n", "invalid_usage"),
    ("[node1:01234] *** An error occurred in MPI_Allreduce\n[node1:01234] *** MPI_ERR_TRUNCATE: message truncated\n",
     "other"),
    ("terminate called after throwing an instance of 'std::runtime_error'\n  what():  something broke\n", "other"),
]


@pytest.mark.parametrize("log, want", CRASHES, ids=[c[0][:30] for c in CRASHES])
def test_crash_reports_are_never_no_failure(log, want):
    d = analyze_text(log, rules=RULES)
    assert d.root_cause is not None, render_text(d, verbose=True)
    assert d.root_cause.id == want
    assert d.root_cause.evidence


def _case(name: str):
    return analyze([str(CASES / name)], rules=RULES, workers=1)


SCARY = ["syn_healthy_caught_importerror", "syn_healthy_store_retry_then_ok", "syn_healthy_harmless_warns",
         "syn_healthy_gradscaler_skips", "public3_nccl766_slow_multinode_libibverbs"]


@pytest.mark.parametrize("name", SCARY)
def test_healthy_but_scary_logs_stay_null_with_their_lines_dismissed(name):
    label = json.loads((CASES / name / "label.json").read_text(encoding="utf-8"))
    assert label["root_cause"] is None
    d = _case(name)
    assert d.root_cause is None, render_text(d, verbose=True)
    expected = label.get("expect_dismissed", ["harmless"])
    for prefix in expected:
        assert any(x.reason.startswith(prefix) for x in d.dismissed), (prefix, d.dismissed)
    if not expected:
        assert d.dismissed == []
    assert d.stats["error_lines"]["evidence"] == 0


def test_every_null_labeled_case_stays_null_and_dismisses_what_it_saw():
    nulls = [p.parent for p in sorted(ROOT.glob("fixtures/*/*/label.json"))
             if not p.parent.parent.name.startswith("blind")  # held-out sets: not unit-test targets
             and p.parent.parent.name != "healthy7"  # a development set with known misses, scored by heldout.py
             and json.loads(p.read_text(encoding="utf-8"))["root_cause"] is None]
    assert len(nulls) >= 27
    for case in nulls:
        d = analyze([str(case)], rules=RULES, workers=1)
        assert d.root_cause is None, case
        el = d.stats["error_lines"]
        assert el["dismissed"] == el["kept"] == el["seen"], (case, el)


def test_a_caught_exception_then_a_real_failure_is_not_dismissed():
    log = ("Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n    import apex\n"
           "ModuleNotFoundError: No module named 'apex'\nstep 1\nstep 2\nstep 3\n"
           "Traceback (most recent call last):\n  File \"train.py\", line 40, in <module>\n    batch = data[key]\n"
           "KeyError: 'labels'\n")
    d = analyze_text(log, rules=RULES)
    assert d.root_cause is not None and d.root_cause.id == "app_exception"
    assert "KeyError" in d.root_cause.title
    assert [e.line for e in d.root_cause.evidence] == [11]


def test_an_exception_at_the_end_is_not_caught():
    log = "step 1\nstep 2\nstep 3\nTraceback (most recent call last):\n  File \"t.py\", line 1, in <module>\nKeyError: 6\n"
    d = analyze_text(log, rules=RULES)
    assert d.root_cause.id == "app_exception" and d.dismissed == []


_EXCEPTHOOK_TB = ("[default2]:[rank2]: Traceback (most recent call last):\n"
                  '[default2]:[rank2]:   File "/srv/train.py", line 24, in <module>\n'
                  '[default2]:[rank2]:     raise ValueError("bad batch")\n'
                  "[default2]:[rank2]: ValueError: bad batch\n"
                  "[default2]:terminate called without an active exception\n")
_SIGABRT_REPORT = ("E1129 15:05:20.709000 18790 torch/distributed/elastic/multiprocessing/api.py:1002] failed "
                   "(exitcode: -6) local_rank: 2 (pid: 18983) of binary: /usr/bin/python3\n")


@pytest.mark.parametrize("report", [_SIGABRT_REPORT, _SIGABRT_REPORT.replace("exitcode: -6", "exitcode: -15")],
                         ids=["sigabrt", "sigterm"])
@pytest.mark.parametrize("prefix", ["[rank2]: ", ""])
def test_an_excepthook_traceback_is_never_caught(prefix, report):
    # torch's excepthook ("[rankN]: " on every line) runs only for an exception that ended the interpreter: other
    # processes' output after it is no sign the rank went on, whatever torchrun then reports. Without the prefix,
    # only the exit status tells: SIGABRT (-6) is how such a rank often ends (std::terminate as gloo threads are
    # destroyed after the exception), so it is still the failure; a worker that torchrun saw die by SIGTERM only
    # (the control) did not die of the exception, and the same traceback followed by other output reads as caught.
    tb = _EXCEPTHOOK_TB if prefix else _EXCEPTHOOK_TB.replace("[rank2]: ", "")
    others = "".join(f"noise-node-1:70001:70001 [0] NCCL INFO Channel {i:02d}/0 : 0[0] -> 1[1] via P2P/IPC\n"
                     for i in range(8))
    d = analyze_text(tb + others + report, rules=RULES)
    if prefix:
        assert d.root_cause is not None and d.root_cause.id == "app_exception" and d.root_cause.ranks == (2,)
    elif "-6" in report:
        assert d.root_cause is not None and d.root_cause.id == "app_exception"
    else:
        assert d.root_cause is None or d.root_cause.id != "app_exception"


_HANDLED_TB = ("Traceback (most recent call last):\n"
               '  File "/srv/train.py", line 41, in {func}\n'
               "    state = load_checkpoint(path)\n"
               '  File "/srv/ckpt.py", line 9, in load_checkpoint\n'
               "    return torch.load(path)\n"
               "FileNotFoundError: [Errno 2] No such file or directory: '/ckpt/latest.pt'\n")
_GOES_ON = "no checkpoint, starting from scratch\nstep 0 loss 2.31\nstep 1 loss 2.20\nstep 2 loss 2.11\n"


@pytest.mark.parametrize("func,file,after,caught", [
    ("resume", "/srv/train.py", _GOES_ON, True),   # printed by the program's handler, then training goes on
    ("<module>", "/srv/train.py", _GOES_ON, False),  # from the top of the script: it escaped (another process's output)
    ("resume", "/srv/train.py", "giving up\n", False),  # handled, but the output stops right after it
    ("resume", "/srv/train.py", "\nSet the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n"
     + _GOES_ON.replace("step", "wandb: step"), False),  # Hydra printed it and exits 1
    ("_run_worker_process", "/usr/lib/python3/site-packages/vllm/executor/multiproc_worker_utils.py", _GOES_ON, False),
    # an exception that escapes a thread ends that thread only (threading.excepthook prints it); the process goes on
    ("_bootstrap_inner", "/usr/lib/python3.11/threading.py", _GOES_ON, True),
    ("_bootstrap_inner", "/usr/lib/python3.11/threading.py", "giving up\n", False),  # ... unless the output stops
], ids=["handled", "module", "ends", "hydra", "vllm_worker", "thread", "thread_ends"])
def test_a_traceback_the_programs_handler_printed_is_caught_when_the_program_goes_on(func, file, after, caught):
    tb = _HANDLED_TB.replace('"/srv/train.py", line 41, in {func}', f'"{file}", line 41, in {func}')
    d = analyze_text(tb + after, rules=RULES)
    if caught:
        assert d.root_cause is None, render_text(d, verbose=True)
        assert [x.reason.split(":")[0] for x in d.dismissed] == ["a caught exception"]
    else:
        assert d.root_cause is not None and d.root_cause.id == "app_exception", render_text(d, verbose=True)


def test_store_retries_that_never_succeed_are_the_failure():
    line = ("[rank1]:[W502 09:20:01.118220412 socket.cpp:755] [c10d] The client socket has failed to connect to "
            "[node0.cluster]:29500 (errno: 111 - Connection refused).\n")
    d = analyze_text(line * 3 + "[rank1]: step 1\n[rank1]: step 2\n[rank1]: step 3\n", rules=RULES)
    assert d.root_cause is not None and d.root_cause.id == "rendezvous_unreachable"
    assert d.dismissed == []


def test_a_root_cause_lists_unrelated_error_lines_as_not_cited():
    log = ("\nnode1:1:2 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]\n"
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 16.00 GiB. GPU 0 has a total capacity of "
           "79.10 GiB of which 1.20 GiB is free.\nSegmentation fault (core dumped)\n")
    d = analyze_text(log, rules=RULES)
    assert d.root_cause.id == "cuda_oom"
    reasons = {x.evidence[0].line: x.reason for x in d.dismissed}
    assert reasons[2].startswith("harmless: no InfiniBand verbs library")
    # The crash report is a fact of its own (native.crash): a finding (the crash, absorbed by the OOM as a
    # consequence) cites it, or it is listed as not cited; never silently dropped.
    cited = {e.line for f in d.findings for e in f.evidence}
    assert 4 in cited or reasons[4].startswith("not cited by a finding")
    assert 3 not in reasons


def test_repeated_lines_are_grouped_and_the_list_is_bounded():
    log = "".join(f"\nnode{i}:1{i}:2 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]\n"
                  for i in range(8))
    d = analyze_text(log, rules=RULES)
    assert d.root_cause is None and len(d.dismissed) == 1
    assert d.dismissed[0].count == 8 and len(d.dismissed[0].evidence) == 5
    names = [chr(97 + i % 26) + chr(97 + i // 26) for i in range(60)]  # distinct messages (digits do not count)
    many = "".join(f"\nnode1:1:2 [0] graph/xml.cc:71 NCCL WARN Could not find real path of /sys/class/net/ib{n}\n"
                   f"node1:1:2 [0] transport/p2p.cc:9 NCCL WARN Max rings reached, limiting to {i}\n"
                   for i, n in enumerate(names))
    d = analyze_text(many, rules=RULES)
    assert d.root_cause is None and len(d.dismissed) == LIST_CAP == d.stats["error_lines"]["listed"]
    assert d.stats["error_lines"]["dismissed"] == 120


def test_the_ledger_keeps_at_most_cap_lines_and_counts_the_rest():
    ledger = ErrorLedger(cap=10)
    for i in range(1, 51):
        ledger.add(Event("nccl.warn.shm", "big.log", i, f"h:1:2 [0] include/shm.h:1 NCCL WARN x {i}",
                         fields={"file": "include/shm.h", "msg": f"x {i}"}))
    assert len(ledger.errors) == 10 and ledger.seen == 50


def test_json_has_dismissed_and_is_deterministic():
    log = (CASES / "syn_healthy_harmless_warns" / "log.txt").read_text(encoding="utf-8")
    a = render_json(analyze_text(log, rules=RULES, name="x.log"))
    b = render_json(analyze_text(log, rules=RULES, name="x.log"))
    assert a == b
    obj = json.loads(a)
    assert obj["schema"] == "nccl-analyzer/diagnosis/v1" and obj["root_cause"] is None
    first = obj["dismissed"][0]
    assert set(first) == {"evidence", "reason", "count", "id"}
    assert set(first["evidence"][0]) == {"path", "line", "text"}
    assert [x["evidence"][0]["line"] for x in obj["dismissed"]] == [5, 11]


def test_text_shows_dismissed_with_v_and_a_note_without():
    log = "\nnode1:1:2 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]\n"
    d = analyze_text(log, rules=RULES, name="x.log")
    short = render_text(d)
    assert "1 error-looking line dismissed as harmless or handled (-v for the reasons)" in short
    long = render_text(d, verbose=True)
    assert "dismissed (1 error line):" in long and "why: harmless: no InfiniBand verbs library" in long


def test_shell_reported_segfault_of_a_real_process():
    """A real child dies by SIGSEGV; bash reports it; that output alone is a failure."""
    proc = subprocess.run(["bash", "-c", f"{sys.executable} -c 'import ctypes; ctypes.string_at(0)'; true"],
                          capture_output=True, text=True, timeout=JOB_TIMEOUT)
    out = proc.stdout + proc.stderr
    assert "Segmentation fault" in out
    d = analyze_text(out, rules=RULES)
    assert d.root_cause is not None and "Segmentation fault" in d.root_cause.evidence[0].text


def _torchrun(mode: str, tmp_path: Path) -> Path:
    log = tmp_path / f"{mode}.log"
    run_job(torchrun(mode, 2, free_port(), script=ROOT / "tests" / "jobs" / "failsafe_job.py"), env=env(), cwd=ROOT,
            log=log)
    return log


@needs_torch
@pytest.mark.slow
def test_real_job_with_a_caught_import_error_is_healthy(tmp_path):
    log = _torchrun("caught", tmp_path)
    assert "ModuleNotFoundError" in log.read_text()
    d = analyze([str(log)], rules=RULES, workers=1)
    assert d.root_cause is None, render_text(d, verbose=True)
    assert [x.reason.split(":")[0] for x in d.dismissed] == ["a caught exception"]


@needs_torch
@pytest.mark.slow
def test_real_job_killed_by_sigsegv_after_a_caught_import_error(tmp_path):
    log = _torchrun("segv", tmp_path)
    d = analyze([str(log)], rules=RULES, workers=1)
    assert d.root_cause is not None and d.root_cause.id != "app_exception", render_text(d, verbose=True)
    assert any(x.reason.startswith("a caught exception") for x in d.dismissed)


def test_a_rankless_store_retry_is_settled_by_the_only_process_getting_further():
    """c10d's client retries carry no rank (no process group yet); where the input holds ONE process's output and
    that process then completes NCCL init, the retries succeeded. With several processes in the input (another
    job's chatter), another process's progress proves nothing about this one."""
    retry = ("[W socket.cpp:663] [c10d] The client socket has failed to connect to [trainer-0]:29500 "
             "(errno: 111 - Connection refused).\n")
    init = ("trainer-1:4410:4533 [0] NCCL INFO comm 0x55d0c1e0 rank {r} nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 "
            "commId 0x7e11c0d2a4b3f001 - Init COMPLETE\n")
    one = analyze_text(retry * 2 + init.format(r=1) + "step 1 loss 2.31\n", rules=RULES)
    assert one.root_cause is None
    assert all(x.reason.startswith("a retry that later succeeded") for x in one.dismissed)
    other = init.replace("trainer-1:4410:4533", "noise-3:9001:9001").format(r=0)
    two = analyze_text(retry * 2 + init.format(r=1) + other, rules=RULES)
    assert two.root_cause is not None and two.root_cause.id == "rendezvous_unreachable"


def test_exception_ignored_tracebacks_are_harmless_even_with_other_chatter_between():
    log = ("Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f3b2c1d9e50>\n"
           "noise-3:9001:9001 [0] NCCL INFO Channel 00/02 : 0 1\n"
           "Traceback (most recent call last):\n"
           '  File "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py", line 1479, in __del__\n'
           "    self._shutdown_workers()\n"
           "AttributeError: '_MultiProcessingDataLoaderIter' object has no attribute '_workers_status'\n"
           "epoch 4 step 1500 loss 0.398\n")
    d = analyze_text(log, rules=RULES)
    assert d.root_cause is None
    assert [x.reason.split(":")[0] for x in d.dismissed] == ["harmless"]
    # a finaliser's traceback is one even when the "Exception ignored" line was cut off
    cut = analyze_text(log.split("\n", 2)[2], rules=RULES)
    assert cut.root_cause is None
    # the same exception reaching the top of the program (its traceback starts at <module>) is a crash
    crash = analyze_text(log.split("\n", 2)[2].replace(
        '  File "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py", line 1479, in __del__\n',
        '  File "train.py", line 40, in <module>\n'), rules=RULES)
    assert crash.root_cause is not None and crash.root_cause.id == "app_exception"
