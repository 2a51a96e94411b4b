"""Classes behind the misses of fixtures/blind_cpu3 (real gloo jobs, issue 9; docs/classes-session5c.md), each tested
on a real small job of tests/jobs/cpu3_classes_job.py (or a short log where the point is one line's shape):

- DistributedDataParallel's model check (reducer.cpp verify_params_across_processes) raises on every rank that sees
  another parameter count than its own: the counts the messages state name the odd rank; with two ranks, rank 0's
  model (the one DDP broadcasts and checks shapes against) is the reference.
- A torch.distributed call with no default process group (after destroy_process_group(), or before init) is named as
  that, on the rank that made it, with its frame (invalid_usage, as fixtures/blind_h200d d08; blind_cpu3 07's label
  says app_exception: debatable, see the docs).
- An exception the program caught and printed itself (traceback.print_exc / logging's exc_info: the outermost frame
  is the catching function), a chained one included, after which the process went on, is no failure; a store wait
  that timed out and was retried like that (rendezvous_unreachable) too.
- A traceback indented as a whole (a usage text quoting one) in a torchrun console that reports no failed worker is
  quoted, not raised; without torchrun's records (an issue's text) it stays the failure.
- The program's own network library errors (urllib, requests, ...) that end a rank are app_exception.
- Lost TCPStore connections of multiprocessing / mp.spawn children (no torchrun) name rank 0, the store's host.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobs.jobkit import env, needs_torch, refused_port, run_on_a_free_port, torchrun  # noqa: E402

from nccl_analyzer.analysis import analyze  # noqa: E402

JOB = Path(__file__).resolve().parent / "jobs" / "cpu3_classes_job.py"


def _run(tmp_path: Path, mode: str, nproc: int = 2, **extra: str) -> Path:
    log = tmp_path / f"{mode}.log"
    spawned = mode in ("store_retry", "store_host_exit")  # no torchrun: the job's own processes, on MASTER_PORT

    def cmd(port: int) -> list[str]:
        return [sys.executable, str(JOB), mode] if spawned else torchrun(mode, nproc, port, script=JOB)

    # DOWN_PORT (dl_retry's / dl_fail's vocab server) refuses connections: held by us, never listened on, so no
    # other job's store can be on it
    with refused_port() as down:
        def cmd_env(port: int) -> dict[str, str]:
            e = env(DOWN_PORT=str(down), **extra, **({"MASTER_PORT": str(port)} if spawned else {}))
            e.pop("OMP_NUM_THREADS", None)  # torchrun then prints its banner (one agent record), as in most consoles
            return e

        run_on_a_free_port(cmd, env=cmd_env, cwd=tmp_path, log=log)  # one console, as `2>&1` shows it
    return log


@needs_torch
@pytest.mark.parametrize("nproc,odd", [(3, 2), (3, 0), (2, 1)])
def test_ddp_param_count_check_names_the_rank_whose_model_differs(tmp_path, nproc, odd):
    log = _run(tmp_path, "ddp_frozen", nproc, ODD_RANK=str(odd))
    d = analyze([str(log)])
    assert d.root_cause is not None and d.root_cause.id == "app_exception", log.read_text()[-2000:]
    assert d.root_cause.rule == "torch-ddp-model-differs"
    assert d.root_cause.ranks == (odd,)
    assert f"rank {odd} has 2 params" in d.root_cause.title
    if nproc == 2:
        assert "rank 0 is the reference" in d.root_cause.explanation


@needs_torch
def test_ddp_param_shape_check_names_the_rank_that_raised(tmp_path):
    log = _run(tmp_path, "ddp_hidden", 3, ODD_RANK="2")
    d = analyze([str(log)])
    assert d.root_cause is not None and d.root_cause.rule == "torch-ddp-model-differs"
    assert d.root_cause.ranks == (2,)


@needs_torch
def test_handled_chained_download_error_that_the_job_survives_is_no_failure(tmp_path):
    log = _run(tmp_path, "dl_retry")
    assert "During handling of the above exception" in log.read_text()
    d = analyze([str(log)])
    assert d.root_cause is None, d.root_cause
    assert any("a caught exception" in x.reason for x in d.dismissed)


@needs_torch
def test_handled_store_wait_timeouts_retried_until_the_key_appears_are_no_failure(tmp_path):
    log = _run(tmp_path, "store_retry")
    assert "DistStoreError: wait timeout" in log.read_text()
    d = analyze([str(log)])
    assert d.root_cause is None, d.root_cause


_HANDLED_STORE = '''2026-12-01 23:04:17,692 [rank1] WARNING job: waiting for vocab_ready timed out (attempt 1/5), retrying
Traceback (most recent call last):
  File "/srv/job.py", line 96, in spawned
    store.wait(["vocab_ready"], datetime.timedelta(seconds=1))
torch.distributed.DistStoreError: wait timeout after 1000ms, keys: /default_pg/0//vocab_ready
'''


def test_handled_store_wait_timeout_that_ends_the_output_is_still_the_failure(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text(_HANDLED_STORE)
    d = analyze([str(log)])
    # still a failure (not dismissed as handled); since session 13c the program's own store.wait that times out is a
    # key another rank never set in time (watchdog_timeout, torch-store-user-key-late), no longer rendezvous_unreachable
    assert d.root_cause is not None and d.root_cause.id == "watchdog_timeout"
    assert d.root_cause.rule == "torch-store-user-key-late"


def test_handled_chained_error_followed_by_the_same_error_escaping_is_the_failure(tmp_path):
    chained = ('Traceback (most recent call last):\n  File "/srv/job.py", line 60, in _download\n    urlopen(url)\n'
               "ConnectionRefusedError: [Errno 111] Connection refused\n\n"
               "During handling of the above exception, another exception occurred:\n\n")
    handled = chained + ('Traceback (most recent call last):\n  File "/srv/job.py", line 60, in _download\n'
                         '    urlopen(url)\nurllib.error.URLError: <urlopen error [Errno 111] Connection refused>\n')
    escaped = chained + ('Traceback (most recent call last):\n  File "/srv/job.py", line 120, in <module>\n    main()\n'
                         '  File "/srv/job.py", line 60, in _download\n    urlopen(url)\n'
                         'urllib.error.URLError: <urlopen error [Errno 111] Connection refused>\n')
    log = tmp_path / "log.txt"
    log.write_text("step 0 loss 1.2\n" + handled + "step 1 loss 1.1\nstep 2 loss 1.0\nstep 3 loss 0.9\n" + escaped)
    d = analyze([str(log)])
    assert d.root_cause is not None and (d.root_cause.id, d.root_cause.rule) == ("app_exception",
                                                                                 "python-app-network-error")
    assert d.root_cause.evidence[0].text.startswith("urllib.error.URLError:") and not d.dismissed


@needs_torch
def test_traceback_quoted_in_a_usage_text_of_a_torchrun_job_is_no_failure(tmp_path):
    log = _run(tmp_path, "help_quote")
    assert "      Traceback (most recent call last):" in log.read_text()
    assert "Setting OMP_NUM_THREADS environment variable" in log.read_text()  # torchrun's agent is in the input
    d = analyze([str(log)])
    assert d.root_cause is None, d.root_cause
    assert any(x.reason.startswith("quoted, not raised") for x in d.dismissed)


_QUOTED = '''      Traceback (most recent call last):
        File "train.py", line 10, in <module>
          dist.all_reduce(t)
      torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5
'''
_BANNER = ("W1201 22:58:25.816000 19509 torch/distributed/run.py:874] Setting OMP_NUM_THREADS environment variable for "
           "each process to be 1 in default, to avoid your system being overloaded, please further tune the variable "
           "for optimal performance in your application as needed.\n")


def test_indented_traceback_is_parsed_whole(tmp_path):
    from nccl_analyzer.classify import EventStream  # noqa: PLC0415
    from nccl_analyzer.sources import expand_inputs, iter_lines  # noqa: PLC0415

    log = tmp_path / "log.txt"
    log.write_text(_BANNER + _QUOTED + "step 1\n")
    stream = EventStream(keep_text=False)
    events = [e for line in iter_lines(expand_inputs([str(log)])) for e in stream.feed(line)] + stream.flush()
    tb = next(e for e in events if e.kind == "python.traceback")
    assert tb.get("exc_type") == "torch.distributed.DistBackendError" and tb.get("indented") is True
    assert tb.end_line == 5


@pytest.mark.parametrize("before,after,cause", [
    # an issue's text quoting the error (no launcher records): the quote is the failure
    ("I get this error when running on 2 nodes:\n", "My environment:\n  torch 2.3\n  CUDA 12.1\nAny idea?\n",
     ("other", "DistBackendError: NCCL error in")),
    # torchrun's records, and the traceback is the last thing in the input
    (_BANNER, "", ("other", "DistBackendError: NCCL error in")),
    # torchrun's records, and a later error line: that is the cause; the quoted error is still a finding
    (_BANNER, "step 1\nstep 2\nstep 3\n[rank1]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534]"
              " Connection closed by peer [127.0.0.1]:29500\n", ("peer_exit", "Connection closed by peer")),
])
def test_indented_traceback_stays_a_failure_without_a_launcher_that_reports_none(tmp_path, before, after, cause):
    log = tmp_path / "log.txt"
    log.write_text(before + _QUOTED + after)
    d = analyze([str(log)])
    assert d.root_cause is not None and d.root_cause.id == cause[0], d.root_cause
    assert cause[1] in d.root_cause.evidence[0].text
    quoted = [f for f in d.findings if "DistBackendError: NCCL error in" in f.evidence[0].text]
    assert quoted and not d.dismissed, (d.findings, d.dismissed)  # the quote is read as raised, not dismissed


@needs_torch
def test_the_programs_own_download_error_that_ends_a_rank_is_an_app_exception(tmp_path):
    log = _run(tmp_path, "dl_fail")
    d = analyze([str(log)])
    assert d.root_cause is not None, log.read_text()[-2000:]
    rc = d.root_cause
    assert (rc.id, rc.rule, rc.ranks) == ("app_exception", "python-app-network-error", (1,))
    assert "URLError" in d.root_cause.title and "_download" in d.root_cause.title


@needs_torch
def test_lost_store_connections_without_torchrun_name_the_store_host_rank_0(tmp_path):
    log = _run(tmp_path, "store_host_exit")
    text = log.read_text()
    # the workers see the store's socket reset or closed, as the timing falls (both are c10d's texts for it)
    assert "Connection reset by peer" in text or "got 0 bytes" in text, text[-2000:]
    d = analyze([str(log)])
    assert d.root_cause is not None and d.root_cause.id == "peer_exit"
    assert d.root_cause.ranks == (0,)
    assert "hosts the TCPStore" in d.root_cause.title


_STORE_LOST = ("[rank{r}]:[W1201 22:58:55.916498660 TCPStore.cpp:138] [c10d] recvValueWithTimeout failed on "
               "SocketImpl(fd=11, addr=[::ffff:127.0.0.1]:48234, remote=[::ffff:127.0.0.1]:29808): Connection reset by "
               "peer\n")
_STORE_TB = """Process Process-{n}:
Traceback (most recent call last):
  File "/usr/lib/python3.11/multiprocessing/process.py", line 314, in _bootstrap
    self.run()
  File "/usr/lib/python3.11/multiprocessing/process.py", line 108, in run
    self._target(*self._args, **self._kwargs)
  File "/srv/train.py", line 346, in proc_main
    split = store.get("eval_split")
torch.distributed.DistNetworkError: Connection reset by peer
"""


def _store_log(ranks: tuple[int, ...], head: str = "", tracebacks: bool = True) -> str:
    return head + "".join(_STORE_LOST.format(r=r) + (_STORE_TB.format(n=r + 1) if tracebacks else "") for r in ranks)


def test_lost_store_connections_of_multiprocessing_children_name_rank_0(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text(_store_log((1, 2)))
    assert analyze([str(log)]).root_cause.ranks == (0,)


@pytest.mark.parametrize("text", [
    _store_log((0, 1)),  # rank 0 lost the store too: it is not the host
    _store_log((1, 2), head=_BANNER),  # torchrun's agent hosts the store
    _store_log((6,), tracebacks=False),  # an excerpt of one rank's output: who started the ranks is unknown
])
def test_lost_store_connections_name_no_rank_where_the_store_host_is_unknown(tmp_path, text):
    log = tmp_path / "log.txt"
    log.write_text(text)
    d = analyze([str(log)])
    assert d.root_cause is not None and d.root_cause.id == "peer_exit"
    assert d.root_cause.ranks == ()


@needs_torch
def test_a_collective_after_destroy_process_group_names_the_rank_and_its_frame(tmp_path):
    log = _run(tmp_path, "barrier_after_destroy", 3, ODD_RANK="1")
    d = analyze([str(log)])
    assert d.root_cause is not None, log.read_text()[-2000:]
    assert (d.root_cause.id, d.root_cause.rule, d.root_cause.ranks) == ("invalid_usage", "torch-no-default-group", (1,))
    assert "cpu3_classes_job.py" in d.root_cause.title and "no process group" in d.root_cause.title
