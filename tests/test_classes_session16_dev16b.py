"""Session 16 (dev16b, docs/classes-session16-dev16b.md): a worker traceback carried only in torchelastic's
ChildFailedError report (the error file @record wrote) is read as the traceback of the rank its entry names, and
the report's later entries (its Root Cause) are no longer lost behind it. Logs built here, not fixture copies."""
from __future__ import annotations

from nccl_analyzer.analysis import analyze_text
from nccl_analyzer.classify import EventStream
from nccl_analyzer.model import Line

_GLOO_CLOSED = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
                "[127.0.0.1]:1458. This is typically caused by a remote worker crashing.")


def _entry(idx: int, rank: int, code: str, tb: list[str]) -> str:
    body = "\n  ".join(tb)
    return (f"[{idx}]:\n  time      : 2026-12-03_10:37:3{idx}\n  host      : node7\n"
            f"  rank      : {rank} (local_rank: {rank})\n  exitcode  : {code}\n"
            f"  error_file: /tmp/torchelastic_x/attempt_0/{rank}/error.json\n  traceback : {body}\n  \n")


_TB_RECORD = ["Traceback (most recent call last):",
              '  File "/venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py"'
              ', line 367, in wrapper',
              "    return f(*args, **kwargs)",
              '  File "/srv/job/train.py", line 69, in train',
              "    x, y = check(step, x, y)",
              '  File "/srv/job/train.py", line 243, in check',
              '    raise ValueError(f"label {y} out of range for a 4-class head")',
              "ValueError: label 7 out of range for a 4-class head"]
_TB_VICTIM = ["Traceback (most recent call last):",
              '  File "/srv/job/train.py", line 72, in train',
              "    loss.backward()",
              _GLOO_CLOSED]


def _report(entries: str, root: str) -> str:
    return ("Traceback (most recent call last):\n  File \"/venv/bin/torchrun\", line 8, in <module>\n"
            "    sys.exit(main())\ntorch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
            "============================================================\n/srv/job/train.py FAILED\n"
            "------------------------------------------------------------\nFailures:\n" + entries
            + "------------------------------------------------------------\nRoot Cause (first observed failure):\n"
            + root + "============================================================\n")


_VICTIM_OWN = "".join(f"[rank0]: {s}\n" for s in _TB_VICTIM)
_FAILED = ("E1203 10:37:39.146000 10817 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) "
           "local_rank: 1 (pid: 10821) of binary: /venv/bin/python3\n")


def _events(log: str):
    s = EventStream(keep_text=False)
    out = []
    for n, t in enumerate(log.splitlines(), 1):
        out.extend(s.feed(Line("x.log", n, t, t)))
    out.extend(s.flush())
    return out


def test_record_traceback_in_the_report_is_the_named_rank_s_exception():
    # only rank 0's console output is there (--local-ranks-filter 0): rank 1's ValueError is in the report alone
    log = _VICTIM_OWN + _FAILED + _report(_entry(1, 0, "-15 (pid: 10820)  (SIGTERM)", _TB_VICTIM),
                                          _entry(0, 1, "1 (pid: 10821)", _TB_RECORD))
    d = analyze_text(log)
    assert d.root_cause is not None and d.root_cause.id == "app_exception"
    assert sorted(d.root_cause.ranks) == [1]


def test_the_report_s_root_cause_entry_is_read_after_a_multi_line_traceback_field():
    log = _report(_entry(1, 0, "-15 (pid: 10820)  (SIGTERM)", _TB_VICTIM), _entry(0, 1, "1 (pid: 10821)", _TB_RECORD))
    evs = _events(log)
    child = sorted((e.rank, e.fields.get("root_cause")) for e in evs if e.kind == "torch.elastic.child_failed")
    assert child == [(0, False), (1, True)]
    tbs = {(e.rank, e.fields.get("exc_type")) for e in evs if e.kind == "python.traceback" and e.fields.get("from_report")}
    assert tbs == {(0, "RuntimeError"), (1, "ValueError")}


def test_one_line_traceback_field_reads_as_before():
    # near miss: the usual report (no error file): its traceback field is one line, no traceback is derived
    log = _report("", _entry(0, 1, "1 (pid: 10821)", ["To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"]))
    evs = _events(log)
    assert [e.rank for e in evs if e.kind == "torch.elastic.child_failed"] == [1]
    assert not [e for e in evs if e.fields.get("from_report")]
