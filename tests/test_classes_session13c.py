"""Session 13c's classes (docs/classes-session13c.md), from what torch / torchelastic / gloo / CPython do, not one
log: a worker ended by a signal torchrun never sends or by a SIGTERM the agent did not send it (other, that rank);
a reduction op the backend refuses for the dtype (invalid_usage); an object collective whose received bytes do not
unpickle (collective_mismatch, the rank that raised); a launcher's own label before torch's ``[rankN]:`` prefix; a
traceback inside a JSON-lines record; the program's own store wait that timed out (watchdog_timeout, the silent
ranks)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from class_helpers import root as _root
from nccl_analyzer.analysis import analyze, analyze_text

_MP = "torch/distributed/elastic/multiprocessing/api.py"
_C10D = "/usr/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def _lines(d) -> list[int]:
    return sorted({e.line for e in d.root_cause.evidence})


def _sigterm(pid: int) -> str:
    return f"W1204 08:00:01.100000 700 {_MP}:1028] Sending process {pid} closing signal SIGTERM\n"


def _failed(local_rank: int, code: int, pid: int) -> str:
    return (f"E1204 08:00:02.200000 700 {_MP}:1002] failed (exitcode: {code}) local_rank: {local_rank} "
            f"(pid: {pid}) of binary: /usr/bin/python3\n")


_STEPS = "".join(f"[rank{i % 2}] step {i // 2} loss 0.{i}1\n" for i in range(6))


# -- 1. a signal torchrun never sends: the program's own timer, a lost terminal, a scheduler's warning ------------
@pytest.mark.parametrize("code,name", [(-14, "SIGALRM"), (-1, "SIGHUP"), (-10, "SIGUSR1"), (-26, "SIGVTALRM")])
def test_untrapped_signal_names_that_worker(code, name):
    log = _STEPS + _sigterm(811) + _failed(0, code, 810)
    d, rid = _root(log)
    assert rid == "other", d.root_cause
    assert d.root_cause.rule == "elastic-child-untrapped-signal"
    assert list(d.root_cause.ranks) == [0]
    assert _lines(d) == [8]


def test_sigterm_torchrun_sent_is_no_untrapped_signal():
    log = _STEPS + _sigterm(811) + _failed(1, -15, 811)
    d, rid = _root(log)
    assert d.root_cause is None or d.root_cause.rule not in ("elastic-child-untrapped-signal",
                                                             "elastic-child-outside-sigterm"), d.root_cause


# -- 2. a SIGTERM the agent did not send: from outside the job ------------------------------------------------
def test_sigterm_to_a_worker_the_agent_did_not_signal_is_that_worker():
    log = _STEPS + _sigterm(900) + _sigterm(901) + _sigterm(903) + _failed(2, -15, 902)
    d, rid = _root(log)
    assert rid == "other", d.root_cause
    assert d.root_cause.rule == "elastic-child-outside-sigterm"
    assert list(d.root_cause.ranks) == [2]
    assert 10 in _lines(d)


def test_sigterm_the_agent_sent_itself_is_not_outside():
    # the agent's first failure is a worker it SIGTERMed: its own teardown (no outside signal shown)
    log = _STEPS + _sigterm(900) + _sigterm(902) + _failed(2, -15, 902)
    d, rid = _root(log)
    assert d.root_cause is None or d.root_cause.rule != "elastic-child-outside-sigterm", d.root_cause


def test_sigterm_with_no_teardown_line_is_not_outside():
    # no "Sending process" line: nothing shows which pids the agent signalled
    d, rid = _root(_STEPS + _failed(2, -15, 902))
    assert d.root_cause is None or d.root_cause.rule != "elastic-child-outside-sigterm", d.root_cause


# -- 3. the backend refuses the reduction op for the dtype --------------------------------------------------------
def _tb(rank: int, call: str, exc: str, inner: str = "all_reduce", code: str = "work.wait()") -> str:
    p = f"[rank{rank}]: "
    return (f"{p}Traceback (most recent call last):\n{p}  File \"/srv/job/train.py\", line 50, in sync\n"
            f"{p}    {call}\n{p}  File \"{_C10D}\", line 3252, in {inner}\n{p}    {code}\n{p}{exc}\n")


_PEER = ("RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
         "[127.0.0.1]:6517")


@pytest.mark.parametrize("msg", ["Cannot use ReduceOp.BXOR with non-integral dtype",
                                 "Cannot use ReduceOp.PREMUL_SUM with Gloo"])
def test_reduce_op_the_backend_refuses_is_invalid_usage(msg):
    log = _STEPS + _tb(1, "dist.all_reduce(mask, op=op)", f"RuntimeError: {msg}") + _tb(0, "dist.all_reduce(x)", _PEER)
    d, rid = _root(log)
    assert rid == "invalid_usage", d.root_cause
    assert list(d.root_cause.ranks) == [1]
    assert 12 in _lines(d)  # rank 1's exception line


def test_other_runtime_error_of_all_reduce_is_not_a_refused_op():
    log = _STEPS + _tb(1, "dist.all_reduce(x)", "RuntimeError: Tensors must be contiguous")
    d, rid = _root(log)
    assert d.root_cause is None or d.root_cause.rule != "torch-reduce-op-unsupported", d.root_cause


# -- 4. an object collective's bytes that do not unpickle ---------------------------------------------------------
def _obj_tb(rank: int, exc: str, api: str = "all_gather_object") -> str:
    p = f"[rank{rank}]: "
    return (f"{p}Traceback (most recent call last):\n{p}  File \"/srv/job/train.py\", line 70, in share\n"
            f"{p}    dist.{api}(out, meta)\n{p}  File \"{_C10D}\", line 3300, in {api}\n"
            f"{p}    object_list[i] = _tensor_to_object(tensor, tensor_size, group)\n"
            f"{p}  File \"{_C10D}\", line 3235, in _tensor_to_object\n"
            f"{p}    return _unpickler(io.BytesIO(buf)).load()\n{p}{exc}\n")


@pytest.mark.parametrize("exc", ["EOFError: Ran out of input", "_pickle.UnpicklingError: pickle data was truncated",
                                 "_pickle.UnpicklingError: invalid load key, '\\x00'."])
def test_object_collective_unpickle_failure_is_a_mismatch_of_that_rank(exc):
    log = _STEPS + _obj_tb(2, exc) + _tb(0, "dist.barrier()", _PEER, inner="barrier")
    d, rid = _root(log)
    assert rid == "collective_mismatch", d.root_cause
    assert d.root_cause.rule == "torch-object-collective-desync"
    assert list(d.root_cause.ranks) == [2]
    assert set(_lines(d)) & {7, 14}  # rank 2's traceback (header 7, exception 14)


def test_object_collective_missing_class_on_the_receiver_is_not_a_mismatch():
    exc = "AttributeError: Can't get attribute 'Meta' on <module '__main__' from '/srv/job/train.py'>"
    d, rid = _root(_STEPS + _obj_tb(2, exc))
    assert rid != "collective_mismatch", d.root_cause


# -- 5. a launcher's own label before torch's "[rankN]:" prefix ---------------------------------------------------
def test_outer_label_before_rank_prefix_keeps_the_traceback_whole():
    tb = _tb(1, "x = load(step)", "KeyError: 'shard'", inner="load", code="return table[key]")
    log = "".join(f"[w1] {s}\n" for s in tb.splitlines())
    d, rid = _root(_STEPS + log)
    assert rid == "app_exception", d.root_cause
    assert list(d.root_cause.ranks) == [1]
    assert "KeyError" in d.root_cause.title


def test_bracketed_word_before_plain_text_is_left_alone():
    d, rid = _root("[w1] [note] step 3 done\n[w1] [rank1] loss 0.5\n")
    assert rid is None


# -- 6. a traceback inside a JSON-lines record --------------------------------------------------------------------
def _rec(level: str, rank: int, msg: str, exc: str | None = None) -> str:
    r = {"ts": "2026-12-04T08:00:00", "level": level, "logger": "trainer", "rank": rank, "msg": msg}
    if exc is not None:
        r["exc"] = exc
    return json.dumps(r) + "\n"


def _exc(outer: str, exc: str) -> str:
    return ("Traceback (most recent call last):\n"
            f'  File "/srv/job/train.py", line 90, in {outer}\n    run_step(batch)\n'
            f'  File "/srv/job/train.py", line 40, in run_step\n    check(batch)\n{exc}')


def test_json_record_traceback_that_ended_the_worker_is_the_exception(tmp_path: Path):
    log = ("".join(_rec("INFO", i % 2, f"step {i // 2} loss 0.5") for i in range(4))
           + _rec("ERROR", 1, "training failed", _exc("<module>", "ValueError: batch 7 has no labels"))
           + _failed(1, 1, 5101))
    p = tmp_path / "log.txt"
    p.write_text(log)
    d = analyze([str(p)])
    assert d.root_cause is not None and d.root_cause.id == "app_exception", d.root_cause
    assert 5 in _lines(d)
    assert "ValueError" in d.root_cause.title


def test_json_record_traceback_handled_and_training_goes_on_is_no_failure(tmp_path: Path):
    exc = _exc("push_metrics", "ConnectionRefusedError: [Errno 111] Connection refused")
    log = (_rec("INFO", 0, "step 0 loss 0.5") + _rec("ERROR", 0, "metrics push failed; will retry", exc)
           + "".join(_rec("INFO", i % 2, f"step {1 + i // 2} loss 0.4") for i in range(6)) + "training done\n")
    p = tmp_path / "log.txt"
    p.write_text(log)
    d = analyze([str(p)])
    assert d.root_cause is None, d.root_cause
    assert any(x.evidence and x.evidence[0].line == 2 for x in d.dismissed)


def test_json_records_without_multiline_fields_are_unchanged(tmp_path: Path):
    log = "".join(_rec("INFO", i % 2, f"step {i} loss 0.5") for i in range(6)) + _rec("WARNING", 0, "slow step")
    p = tmp_path / "log.txt"
    p.write_text(log)
    assert analyze([str(p)]).root_cause is None


# -- 7. the program's own store wait that timed out ---------------------------------------------------------------
def _store_tb(rank: int, frames: str, key: str) -> str:
    p = f"[rank{rank}]: "
    return (f"{p}Traceback (most recent call last):\n{frames.replace('@', p)}"
            f"{p}torch.distributed.DistStoreError: wait timeout after 6000ms, keys: {key}\n")


_USER_WAIT = '@  File "/srv/job/prep.py", line 30, in wait_index\n@    store.wait(["index"], timedelta(seconds=6))\n'
_INIT_WAIT = (f'@  File "/srv/job/prep.py", line 12, in setup\n@    dist.init_process_group("gloo")\n'
              f'@  File "{_C10D}", line 2169, in _new_process_group_helper\n@    backend_class = ProcessGroupGloo(\n')


def _report(entries: list[tuple[int, int, int]]) -> str:
    """torchrun's ChildFailedError report: (rank, exitcode, pid) per entry, the last one the root cause."""
    def entry(i: int, rank: int, code: int, pid: int) -> str:
        tb = f"Signal 15 (SIGTERM) received by PID {pid}" if code == -15 else "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
        return (f"[{i}]:\n  time      : 2026-12-04_08:00:03\n  host      : node1\n  rank      : {rank} (local_rank: {rank})\n"
                f"  exitcode  : {code} (pid: {pid})\n  error_file: <N/A>\n  traceback : {tb}\n")
    *rest, root = entries
    return ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n" + "=" * 40 + "\ntrain.py FAILED\n"
            + "-" * 40 + "\nFailures:\n" + "".join(entry(i, *e) for i, e in enumerate(rest, 1)) + "-" * 40
            + "\nRoot Cause (first observed failure):\n" + entry(0, *root) + "=" * 40 + "\n")


def test_program_store_wait_timeout_blames_the_rank_that_did_not_wait():
    log = ("[rank0] building the index ...\n[rank1] waiting\n[rank2] waiting\n"
           + _store_tb(1, _USER_WAIT, "/default_pg/0//index") + _store_tb(2, _USER_WAIT, "/default_pg/0//index")
           + _failed(1, 1, 5101) + _report([(0, -15, 5100), (2, 1, 5102), (1, 1, 5101)]))
    d, rid = _root(log)
    assert rid == "watchdog_timeout", d.root_cause
    assert d.root_cause.rule == "torch-store-user-key-late"
    assert list(d.root_cause.ranks) == [0]
    assert set(_lines(d)) & {4, 7}  # rank 1's traceback (header 4, exception 7)


def test_store_wait_inside_init_process_group_stays_a_rendezvous_failure():
    log = _store_tb(0, _INIT_WAIT, "/default_pg/0//cpu//0/2") + _store_tb(1, _INIT_WAIT, "/default_pg/0//cpu//0/2")
    d, rid = _root(log)
    assert rid == "rendezvous_unreachable", d.root_cause


# -- 8. the store's host timed out with only its own client joined: the other ranks never connected -------------
def _spawn_host_timeout(joined: int, world: int) -> str:
    sp = "/usr/lib/python3.11/site-packages/torch/multiprocessing/spawn.py"
    return ("Traceback (most recent call last):\n"
            '  File "/srv/job/train.py", line 40, in <module>\n    mp.spawn(worker, args=(world,), nprocs=world, join=True)\n'
            f'  File "{sp}", line 296, in start_processes\n    while not context.join():\n'
            f'  File "{sp}", line 211, in join\n    raise ProcessRaisedException(msg, error_index, failed_process.pid)\n'
            "torch.multiprocessing.spawn.ProcessRaisedException: \n\n-- Process 0 terminated with the following error:\n"
            "Traceback (most recent call last):\n"
            '  File "/usr/lib/python3.11/site-packages/torch/multiprocessing/spawn.py", line 90, in _wrap\n    fn(i, *args)\n'
            '  File "/srv/job/train.py", line 20, in worker\n    dist.init_process_group("gloo", init_method=url, rank=rank, world_size=world)\n'
            '  File "/usr/lib/python3.11/site-packages/torch/distributed/rendezvous.py", line 199, in _create_c10d_store\n'
            "    return TCPStore(\n"
            f"torch.distributed.DistStoreError: Timed out after 31 seconds waiting for clients. {joined}/{world} clients joined.\n")


def test_store_host_alone_names_the_ranks_that_never_connected():
    connect = ("[E1204 08:00:10.100000000 socket.cpp:1028] [c10d] The client socket has timed out after 30000ms while "
               "trying to connect to (127.0.0.1, 41000).\n")
    d, rid = _root(connect + _spawn_host_timeout(1, 3))
    assert rid == "rendezvous_unreachable", d.root_cause
    assert d.root_cause.rule == "torch-store-clients-missing"
    assert list(d.root_cause.ranks) == [1, 2]
    assert 19 in _lines(d)  # the host's DistStoreError line


def test_store_host_with_some_clients_joined_names_no_missing_rank():
    d, rid = _root(_spawn_host_timeout(3, 4))
    assert d.root_cause is None or d.root_cause.rule != "torch-store-clients-missing", d.root_cause


# -- 9. a communication error raised out of backward is DDP's gradient all_reduce ---------------------------------
_TIMEOUT = ("RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting "
            "8000ms for recv operation to complete")


def _backward_tb(rank: int, exc: str) -> str:
    p = f"[rank{rank}]: "
    lib = "/usr/lib/python3.11/site-packages/torch"
    return (f"{p}Traceback (most recent call last):\n{p}  File \"/srv/job/train.py\", line 90, in train\n"
            f"{p}    loss.backward()\n{p}  File \"{lib}/_tensor.py\", line 623, in backward\n"
            f"{p}    torch.autograd.backward(\n{p}  File \"{lib}/autograd/__init__.py\", line 395, in backward\n"
            f"{p}    _engine_run_backward(\n{p}  File \"{lib}/autograd/graph.py\", line 979, in _engine_run_backward\n"
            f"{p}    return Variable._execution_engine.run_backward(\n{p}{exc}\n")


def test_ranks_in_backward_while_one_waits_in_barrier_is_that_ranks_mismatch():
    log = (_STEPS + _backward_tb(0, _TIMEOUT) + _tb(1, "dist.barrier()", _TIMEOUT, inner="barrier")
           + _backward_tb(2, _TIMEOUT))
    d, rid = _root(log)
    assert rid == "collective_mismatch", d.root_cause
    assert list(d.root_cause.ranks) == [1]
    assert 16 in _lines(d)  # the first traceback that shows the different collectives (rank 0's exception)


def test_an_autograd_error_in_backward_is_no_collective():
    exc = ("RuntimeError: one of the variables needed for gradient computation has been modified by an inplace "
           "operation")
    log = _STEPS + _backward_tb(0, exc) + _tb(1, "dist.barrier()", _TIMEOUT, inner="barrier")
    d, rid = _root(log)
    assert rid == "app_exception", d.root_cause
    assert list(d.root_cause.ranks) == [0]


# -- review fix 7: the store host's missing clients are named only from the store-creating process's traceback ------
def test_store_timeout_line_without_the_store_creation_frames_names_no_missing_clients():
    # a bare "[rank0]: ... 1/4 clients joined" line: that rank 0 started the server is not shown (the start code
    # named ranks 1..3 from this one line)
    d = analyze_text("[rank0]: torch.distributed.DistStoreError: Timed out after 31 seconds waiting for clients. "
                     "1/4 clients joined.\n")
    assert d.root_cause is not None
    assert d.root_cause.rule != "torch-store-clients-missing"
    assert not any(f.rule == "torch-store-clients-missing" for f in d.findings)


# -- review fix 6: the agent's SIGTERMs are counted per attempt (a restart starts a new set) -------------------------
def test_an_earlier_attempt_s_sigterms_do_not_make_a_later_minus_15_outside():
    # attempt 1: worker 900 failed (exit 1), the agent SIGTERMed 901; torchelastic restarted the group; attempt 2:
    # worker 905 ended by SIGTERM, and the agent sent no SIGTERM in that attempt: nothing shows it tore attempt 2
    # down, so that SIGTERM is not shown to be from outside (the start code kept one set for both attempts)
    log = _STEPS + _sigterm(901) + _failed(0, 1, 900) + _failed(0, -15, 905)
    d, _ = _root(log)
    assert not any(f.rule == "elastic-child-outside-sigterm" for f in d.findings)


def test_the_same_attempt_s_sigterms_still_make_a_minus_15_outside():
    log = _STEPS + _sigterm(901) + _failed(0, 1, 900) + _sigterm(906) + _failed(1, -15, 905)
    d, _ = _root(log)
    f = next(f for f in d.findings if f.rule == "elastic-child-outside-sigterm")
    assert log.count("\n") in [e.line for e in f.evidence]
