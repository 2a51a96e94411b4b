"""The failure classes behind what the session-5 development sets still got wrong (docs/classes-session5.md), each
built from what the program that prints the line does: multiprocessing's queue feeder thread printing an exception
and carrying on, ProcessGroupNCCL's per-process "should dump" poll, and torchelastic restarting a worker group
after a mid-training failure (the root cause is the first failure, not the restarted group's reconnect)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobs.jobkit import JOB_TIMEOUT, env, free_port, needs_torch, run_job, torchrun  # noqa: E402

from nccl_analyzer.analysis import analyze, analyze_text  # noqa: E402
from nccl_analyzer.render.text import render_text  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


# -- 1. multiprocessing's queue feeder thread -------------------------------------------------------------------
_FEED = """\
import multiprocessing as mp, time
q = mp.Queue()
q._reader.close()          # the reader's end goes away (a consumer that finished or exited)
q.put(b"x" * 10)
time.sleep(0.5)
print("{after}")
"""


def _feeder_output(after: str = "done") -> str:
    p = subprocess.run([sys.executable, "-c", _FEED.format(after=after)], capture_output=True, text=True,
                       timeout=JOB_TIMEOUT)
    assert p.returncode == 0
    assert "queues.py" in p.stderr and "BrokenPipeError" in p.stderr, p.stderr
    return p.stderr


def test_queue_feeder_broken_pipe_of_a_real_process_is_no_failure():
    """CPython's feeder thread (queues.py _feed) prints the exception with traceback.print_exc() and keeps feeding:
    the process ends normally (exit 0). Nothing after it in the log: still no failure."""
    d = analyze_text(_feeder_output())
    assert d.root_cause is None, render_text(d, verbose=True)
    assert [x.reason.split(":")[0] for x in d.dismissed] == ["a caught exception"]
    assert "queues.py:_feed" in d.dismissed[0].reason


def test_the_same_broken_pipe_raised_by_the_program_is_still_the_failure():
    """Near miss: the program's own send (outermost frame <module>) ending with BrokenPipeError ended the process."""
    log = ("Traceback (most recent call last):\n"
           '  File "/work/train.py", line 40, in <module>\n'
           "    conn.send(batch)\n"
           '  File "/usr/lib/python3.10/multiprocessing/connection.py", line 206, in send\n'
           "    self._send_bytes(_ForkingPickler.dumps(obj))\n"
           '  File "/usr/lib/python3.10/multiprocessing/connection.py", line 373, in _send\n'
           "    n = write(self._handle, buf)\n"
           "BrokenPipeError: [Errno 32] Broken pipe\n")
    d = analyze_text(log)
    assert d.root_cause is not None and d.root_cause.id == "peer_exit", render_text(d, verbose=True)  # the reader left
    assert d.root_cause.evidence[0].text == "BrokenPipeError: [Errno 32] Broken pipe" and not d.dismissed


def test_feeder_broken_pipe_beside_the_consumer_s_own_error_leaves_that_error_the_cause():
    """The reader that closed its end because it failed prints its own error: that decides."""
    log = _feeder_output() + ("Traceback (most recent call last):\n"
                              '  File "/work/train.py", line 12, in <module>\n'
                              "    batch = load(path)\n"
                              "KeyError: 'image'\n")
    d = analyze_text(log)
    assert d.root_cause is not None and d.root_cause.id == "app_exception", render_text(d, verbose=True)


# -- 2. the "should dump" poll is one process's -----------------------------------------------------------------
_DUMP = ('[rank{r}]:[W0412 09:41:07.112233445 ProcessGroupNCCL.cpp:1662] [PG ID 0 PG GUID 0 Rank {r}] Failed to check '
         'the "should dump" flag on TCPStore, (maybe TCPStore server has shut down too early), with error: Broken pipe\n'
         '[rank{r}]:[W0412 09:41:07.190011223 TCPStore.cpp:106] [c10d] sendBytes failed on SocketImpl(fd=41, '
         'addr=[node2]:51022, remote=[node1]:29500): Broken pipe\n')
_GLOO_LOST = ("[rank{r}]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
              "[10.0.0.3]:41522\n")


def test_should_dump_poll_of_one_rank_does_not_hide_another_rank_s_lost_peer():
    """ProcessGroupNCCL's heartbeat monitor polls the store for its own process: the store polls of rank 1 say
    nothing of rank 0's gloo connection that its peer closed."""
    d = analyze_text(_DUMP.format(r=1) + _GLOO_LOST.format(r=0))
    assert d.root_cause is not None and d.root_cause.rule == "nccl-remote-peer-closed", render_text(d, verbose=True)
    assert 1 not in d.root_cause.ranks


def test_should_dump_poll_alone_is_still_no_failure():
    """The guard the exclusion exists for: the store polls alone (the store's host exited first) are no failure."""
    d = analyze_text(_DUMP.format(r=1) + _DUMP.format(r=2))
    assert d.root_cause is None, render_text(d, verbose=True)


# -- 3. torchelastic restarts after a mid-training failure --------------------------------------------------------
@needs_torch
@pytest.mark.slow
def test_restarted_group_failing_in_its_reconnect_leaves_the_first_failure_the_cause(tmp_path):
    """torchrun --max-restarts 1: rank 1 raises at step 3; torchelastic restarts the group and the new attempt
    fails in gloo's connectFullMesh (or its rendezvous). torchrun's 'Root Cause (first observed failure)' then
    names a rank of the LAST attempt; the cause is the first attempt's exception. Both the console (torchrun's own
    lines, per-rank output in files) and the per-attempt log directory are checked."""
    logs = tmp_path / "logs"
    console = tmp_path / "console.log"
    opts = ("--max-restarts", "1", "--log-dir", str(logs), "--redirects", "3")
    p = run_job(torchrun(None, 3, free_port(), script=ROOT / "tests" / "jobs" / "restart_job.py", opts=opts),
                env=env(), cwd=tmp_path, log=console)
    assert p.returncode != 0
    attempts = sorted(x.name for x in logs.glob("*/attempt_*"))
    assert attempts == ["attempt_0", "attempt_1"], attempts
    text = console.read_text()
    assert text.count("failed (exitcode:") == 2  # one per attempt
    for inputs in ([str(console)], [str(logs)]):
        d = analyze(inputs, workers=1)
        assert d.root_cause is not None, render_text(d, verbose=True)
        assert d.root_cause.ranks == (1,), render_text(d, verbose=True)
        # (the console of a --redirects run holds torchrun's lines only: "rank 1 exited with code 1 (or -6)")
        assert d.root_cause.id not in ("network_connect", "rendezvous_unreachable"), render_text(d, verbose=True)
    d = analyze([str(logs)], workers=1)
    assert d.root_cause.id == "app_exception" and "bad batch at step 3" in d.root_cause.evidence[0].text


# -- 4. a communicator the watchdog aborted; a traceback cut before its exception line ----------------------------
_CUT_TB = ("[1,7]<stderr>:Traceback (most recent call last):\n"
           '[1,7]<stderr>:  File "train.py", line 210, in <module>\n'
           "[1,7]<stderr>:    main(cfg)\n"
           '[1,7]<stderr>:  File "train.py", line 188, in main\n'
           "[1,7]<stderr>:    loss = trainer.step(batch)\n"
           '[1,7]<stderr>:  File "/opt/app/trainer.py", line 97, in step\n'
           "[1,7]<stderr>:    self.engine.backward(loss)\n")


def test_comm_aborted_with_no_reason_beside_a_cut_traceback_is_the_watchdog_s_timeout():
    """NCCLComm::getNcclComm raises 'NCCL communicator was aborted on rank N.' on a communicator the watchdog
    aborted; with no 'Original reason', that is a collective that timed out. Another rank's traceback cut before
    its exception line says where that rank was, not what it raised: it is no application exception."""
    d = analyze_text("[1,3]<stderr>:RuntimeError: NCCL communicator was aborted on rank 3.\n" + _CUT_TB)
    assert d.root_cause is not None and d.root_cause.id == "watchdog_timeout", render_text(d, verbose=True)
    assert d.root_cause.ranks == (3,)


def test_comm_aborted_with_its_original_reason_is_that_reason():
    """Near miss: torch >= 1.10 appends the reason the communicator was aborted for: that decides."""
    d = analyze_text("[rank3]: RuntimeError: NCCL communicator was aborted on rank 3.  Original reason for failure "
                     "was: NCCL error: unhandled system error, NCCL version 2.14.3\n")
    assert d.root_cause is not None and d.root_cause.id != "watchdog_timeout", render_text(d, verbose=True)


def test_a_cut_traceback_alone_is_a_failure_but_no_application_exception():
    d = analyze_text(_CUT_TB)
    assert d.root_cause is not None and d.root_cause.id != "app_exception", render_text(d, verbose=True)


def test_a_whole_traceback_is_still_the_application_exception():
    """Near miss: the same traceback with its exception line is the program's own failure."""
    d = analyze_text(_CUT_TB + "[1,7]<stderr>:KeyError: 'labels'\n")
    assert d.root_cause is not None and d.root_cause.id == "app_exception", render_text(d, verbose=True)


# -- 5. a hard-wrapped paste saved with CRLF line endings -----------------------------------------------------------
def test_a_hard_wrapped_paste_with_crlf_line_endings_is_rejoined(tmp_path):
    """A terminal copy hard-wrapped at its width and saved on Windows: every line ends in CR LF. The wrap width is the
    width of the text, not of the text plus its CR, or the re-join finds no line as long as the width and the
    heartbeat message (cut inside "watchdog got stuck") stays in pieces."""
    msg = ("[rank2]:[E1103 08:12:44.118273645 ProcessGroupNCCL.cpp:1743] [PG ID 0 PG GUID 0(default_pg) Rank 2] "
           "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued "
           "collectives. This typically indicates a NCCL/CUDA API (e.g., CudaEventDestroy) hang blocking the "
           "watchdog, and could be triggered by another thread holding the GIL inside a CUDA api (for example, "
           "CudaEventDestroy), or other deadlock-prone behaviors.")
    width = msg.index("watchdog got stuck") + 4
    rows = [msg[i:i + width] for i in range(0, len(msg), width)]
    assert len(rows) >= 3
    for eol in ("\n", "\r\n"):
        log = tmp_path / f"paste{len(eol)}.log"
        log.write_bytes(eol.join(["step 1200 loss 1.93", "step 1210 loss 1.91", *rows]).encode() + eol.encode())
        d = analyze([str(log)], workers=1)
        assert d.root_cause is not None and d.root_cause.id == "watchdog_timeout", (repr(eol), render_text(d))


# -- 6. the elastic agent's rendezvous to restart the group ---------------------------------------------------------
_SITE = "/opt/venv/lib/python3.11/site-packages/torch/distributed"


def _agent_rendezvous_timeout(restart: bool) -> str:
    """torchrun's own traceback when ``next_rendezvous`` times out: from the first ``_initialize_workers`` of
    ``_invoke_run``, or from ``_restart_workers`` after a worker failed (torch 2.x agent/server/api.py)."""
    head = (f'  File "{_SITE}/elastic/agent/server/api.py", line 952, in _invoke_run\n'
            "    self._restart_workers(self._worker_group)\n"
            f'  File "{_SITE}/elastic/metrics/api.py", line 138, in wrapper\n'
            "    result = f(*args, **kwargs)\n"
            f'  File "{_SITE}/elastic/agent/server/api.py", line 736, in _restart_workers\n'
            "    self._initialize_workers(worker_group)\n") if restart else (
            f'  File "{_SITE}/elastic/agent/server/api.py", line 916, in _invoke_run\n'
            "    self._initialize_workers(self._worker_group)\n")
    return ("Traceback (most recent call last):\n"
            '  File "/opt/venv/bin/torchrun", line 8, in <module>\n'
            "    sys.exit(main())\n" + head +
            f'  File "{_SITE}/elastic/agent/server/api.py", line 713, in _initialize_workers\n'
            "    self._rendezvous(worker_group)\n"
            f'  File "{_SITE}/elastic/rendezvous/dynamic_rendezvous.py", line 1158, in next_rendezvous\n'
            "    self._op_executor.run(join_op, deadline, self._get_deadline)\n"
            f'  File "{_SITE}/elastic/rendezvous/dynamic_rendezvous.py", line 648, in run\n'
            "    raise RendezvousTimeoutError\n"
            "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError\n")


_FIRST_FAILURE = (
    "[rank3]: Traceback (most recent call last):\n"
    '[rank3]:   File "/work/train.py", line 61, in <module>\n'
    "[rank3]:     batch = next(it)\n"
    "[rank3]: ValueError: empty shard /data/shard-0007\n"
    "W1130 09:14:02.101000 881 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 905 closing "
    "signal SIGTERM\n"
    "E1130 09:14:02.400000 881 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) "
    "local_rank: 3 (pid: 908) of binary: /opt/venv/bin/python3\n")


def test_the_agent_s_rendezvous_to_restart_after_a_failure_is_no_root_cause():
    """torchelastic restarts the worker group after rank 3 failed; the agents' new rendezvous times out (the other
    nodes' agents did not come back). The first failure stays the cause."""
    d = analyze_text(_FIRST_FAILURE + _agent_rendezvous_timeout(restart=True))
    assert d.root_cause is not None and d.root_cause.id == "app_exception", render_text(d, verbose=True)
    assert d.root_cause.ranks == (3,)


def test_the_agent_s_first_rendezvous_timing_out_is_still_unreachable():
    """Near miss: the same timeout in the agent's FIRST rendezvous (no worker ever ran) is the rendezvous failure."""
    d = analyze_text(_agent_rendezvous_timeout(restart=False))
    assert d.root_cause is not None and d.root_cause.id == "rendezvous_unreachable", render_text(d, verbose=True)


def test_a_dataloader_worker_s_cut_original_traceback_is_still_the_application_exception():
    """Near miss of the cut traceback: a DataLoader worker's exception is re-raised in the main process with its
    message 'Caught <Type> in DataLoader worker process N.' and 'Original Traceback ...' (torch/_utils.py
    ExceptionWrapper): the line before the cut traceback names the exception, and only that wrapper prints an
    'Original Traceback'; even where the excerpt starts at it, it is an exception the dataset code raised."""
    log = ("[rank0]: Original Traceback (most recent call last):\n"
           '[rank0]:   File "/opt/venv/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py", line 351, '
           "in _worker_loop\n"
           "[rank0]:     data = fetcher.fetch(index)\n"
           '[rank0]:   File "/work/data.py", line 40, in __getitem__\n'
           "[rank0]:     img = Image.open(self.paths[i])\n")
    d = analyze_text(log)
    assert d.root_cause is not None and d.root_cause.id == "app_exception", render_text(d, verbose=True)


# -- 7. torchelastic's report of each attempt ----------------------------------------------------------------------
def _failed(t: str, local_rank: int, pid: int, code: int = 1) -> str:
    return (f"E1130 09:{t} 4410 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: {code}) "
            f"local_rank: {local_rank} (pid: {pid}) of binary: /opt/venv/bin/python3\n")


def test_after_a_restart_the_first_attempt_s_failed_worker_is_the_one_blamed():
    """The agent (pid 4410) logs 'failed (exitcode: ...)' once per attempt: the first worker it saw fail
    (PContext._poll), then it ends the others and starts the group again. Local rank 2 failed in attempt 0; local
    rank 0 in attempt 1 (the restarted group could not reconnect). Only rank 2 is where it started."""
    log = ("W1130 09:14:02.100000 4410 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 5101 "
           "closing signal SIGTERM\n" + _failed("14:02.400000", 2, 5103) +
           "W1130 09:14:09.100000 4410 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 5202 "
           "closing signal SIGTERM\n" + _failed("14:09.300000", 0, 5201))
    d = analyze_text(log)
    assert d.root_cause is not None and d.root_cause.ranks == (2,), render_text(d, verbose=True)


def test_two_agents_each_reporting_one_failure_are_no_restart():
    """Near miss: two agents (two nodes, pids 4410 and 7720) each report one failed worker of the same attempt:
    no restart seen, both stand."""
    other = _failed("14:02.500000", 1, 6102).replace(" 4410 ", " 7720 ").replace("local_rank: 1", "local_rank: 1")
    d = analyze_text(_failed("14:02.400000", 2, 5103) + other)
    assert d.root_cause is not None and d.root_cause.ranks != (2,), render_text(d, verbose=True)
    assert len(d.root_cause.evidence) == 2
