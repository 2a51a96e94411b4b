"""The failure classes the session-4 development sets showed (fixtures/blind3, fixtures/blind_h200d, fixtures/public6;
docs/classes-session4.md), each built from what the program that prints the line does, not from one pasted log:
launcher prefixes the input layer did not know (SkyPilot, colour codes that lost their ESC, a benchmark runner's
stream tag), ProcessGroupNCCL's watchdog text where no grammar reads it, ranks at one SeqNum reducing tensors of
different sizes, Horovod's shutdown and stall texts, mpirun's non-zero exit report, NCCL's connect retries and
return-code traces, torchrun stopped from outside, and the teardown lines that are consequences."""
from __future__ import annotations

import pytest

from nccl_analyzer.analysis import analyze_text
from nccl_analyzer.render.text import render_text
from nccl_analyzer.sources import Source, clean_text


def _wd(rank: int, seq: int, op: str, numel: int) -> str:
    return (f"[E ProcessGroupNCCL.cpp:475] [Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL("
            f"SeqNum={seq}, OpType={op}, NumelIn={numel}, NumelOut={numel}, Timeout(ms)=1800000) ran for 1800"
            f"{rank:03d} milliseconds before timing out.")


def _root(log: str):
    d = analyze_text(log)
    return d, (d.root_cause.id if d.root_cause else None)


# -- prefixes -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("raw,want", [
    # SkyPilot's tee of a task's output: "(node, pid=N)" / "(head, rank=0, pid=N)" / "(worker1, rank=1, pid=N, ip=...)"
    ("(train-node, pid=4411) " + _wd(2, 90, "ALLREDUCE", 64), _wd(2, 90, "ALLREDUCE", 64)),
    ("(worker1, rank=1, pid=2388, ip=10.0.0.2) " + _wd(1, 90, "ALLREDUCE", 64), _wd(1, 90, "ALLREDUCE", 64)),
    # ... with a tqdm bar the task wrote without its newline, before the c10 logger's old "[E file:line]" head
    ("(head, rank=0, pid=2514)  12%|#2        | 230/1920 [11:02<1:21:10, 2.88s/it]" + _wd(0, 90, "ALLREDUCE", 64),
     _wd(0, 90, "ALLREDUCE", 64)),
    # Ray's coloured prefix whose ESC bytes the paste dropped
    (" [36m(RayWorkerWrapper pid=7120) [0m " + _wd(3, 90, "ALLREDUCE", 64), _wd(3, 90, "ALLREDUCE", 64)),
    # a benchmark runner's "<bench>.<node> [stderr] " tag (milabench) in front of torch's own prefix
    ("llama-7b.node-a12 [stderr] [rank5]:[E1109 10:01:02.000000000 ProcessGroupNCCL.cpp:616] x",
     "[E1109 10:01:02.000000000 ProcessGroupNCCL.cpp:616] x"),
])
def test_launcher_prefixes_are_stripped(raw, want):
    assert clean_text(raw, Source(path="x.log", real=None), 1).text == want


def test_literal_brackets_that_are_no_colour_code_stay():
    s = "step [10m] of [20m] done"
    assert clean_text(s, Source(path="x.log", real=None), 1).text == s


# -- the watchdog's text wherever it is -----------------------------------------------------------------------
@pytest.mark.parametrize("log", [
    # hard-wrapped after "timeout: " (the WorkNCCL part on the next line), behind a runner's tag
    "bench.n7 [stderr] [rank3]:[E1109 10:01:02.000000000 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught "
    "collective operation timeout: \nWorkNCCL(SeqNum=88, OpType=BROADCAST, NumelIn=4, NumelOut=4, Timeout(ms)=600000) "
    "ran for 600021 milliseconds before timing out.\n",
    # behind a prefix no rule of the input layer knows
    "job-42 | worker-3 >> [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=88, OpType=BROADCAST, "
    "NumelIn=4, NumelOut=4, Timeout(ms)=600000) ran for 600021 milliseconds before timing out.\n",
])
def test_the_watchdog_text_is_a_timeout_wherever_it_is(log):
    d, got = _root(log)
    assert got == "watchdog_timeout", render_text(d, verbose=True)


def test_ranks_reducing_different_sizes_at_one_seqnum_are_a_mismatch():
    log = "".join(f"(moe-run, pid=91) {_wd(r, 5120, 'ALLREDUCE', 8388608 if r != 2 else 8126464)}\n"
                  for r in (0, 1, 2, 3))
    d, got = _root(log)
    assert got == "collective_mismatch", render_text(d, verbose=True)
    assert d.root_cause.ranks == (2,)
    assert "8126464" in d.root_cause.explanation


@pytest.mark.parametrize("op,sizes,want", [
    ("ALLREDUCE", (4096, 4096, 4096), "watchdog_timeout"),  # same size: a plain timeout
    ("ALLTOALL_BASE", (4096, 2048, 4096), "watchdog_timeout"),  # all_to_all takes uneven splits
])
def test_same_sizes_or_uneven_ops_are_no_mismatch(op, sizes, want):
    log = "".join(f"{_wd(r, 77, op, n)}\n" for r, n in enumerate(sizes))
    d, got = _root(log)
    assert got == want, render_text(d, verbose=True)


# -- Horovod, mpirun -------------------------------------------------------------------------------------------
def test_horovod_shut_down_is_a_peer_exit():
    log = ("2023-03-02 10:11:12.000001: W tensorflow/core/framework/op_kernel.cc:1830] OP_REQUIRES failed at "
           "mpi_ops.cc:312 : UNKNOWN: Horovod has been shut down. This was caused by an exception on one of the ranks "
           "or an attempt to allreduce, allgather or broadcast a tensor after one of the ranks finished execution.\n")
    d, got = _root(log)
    assert got == "peer_exit", render_text(d, verbose=True)


def test_horovod_stall_warning_alone_is_dismissed():
    log = ("[2023-03-02 10:11:12.000001: W horovod/common/stall_inspector.cc:107] One or more tensors were submitted to "
           "be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of ranks for more than "
           "60 seconds. This may indicate that different ranks are trying to submit different tensors or that only "
           "subset of ranks is submitting tensors, which will cause deadlock.\nMissing ranks:\n"
           "0: [DistributedAdam_Allreduce/HorovodAllreduce_grads_3_0]\n")
    d, got = _root(log)
    assert got is None, render_text(d, verbose=True)
    assert any(x.reason.startswith("harmless: Horovod's stall inspector") for x in d.dismissed)


def test_mpirun_non_zero_exit_report_is_a_failure():
    log = ("# nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20\n"
           "-------------------------------------------------------\n"
           "Primary job  terminated normally, but 1 process returned\n"
           "a non-zero exit code. Per user-direction, the job has been aborted.\n"
           "-------------------------------------------------------\n"
           "mpirun detected that one or more processes exited with non-zero status, thus causing\n"
           "the job to be terminated. The first process to do so was:\n\n"
           "  Process name: [[40211,1],3]\n  Exit code:    2\n")
    d, got = _root(log)
    assert got == "peer_exit", render_text(d, verbose=True)


# -- NCCL's retries and return-code traces ------------------------------------------------------------------------
_RETRY = "n2:7001:7090 [0] NCCL INFO socketPollConnect: connect returned Connection refused, retrying ({i}/34) after sleep for {ms} msec\n"


def test_connect_retries_with_nothing_after_them_are_the_failure():
    log = "".join(_RETRY.format(i=i, ms=i * 100) for i in range(30, 35))
    d, got = _root(log)
    assert got == "network_connect", render_text(d, verbose=True)


def test_connect_retries_then_init_complete_of_that_process_are_no_failure():
    log = ("n2:7001:7001 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>\n"
           "n2:7002:7002 [1] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>\n"
           + _RETRY.format(i=1, ms=100) + _RETRY.format(i=2, ms=200)
           + "n2:7001:7001 [0] NCCL INFO comm 0x55a1 rank 0 nranks 2 cudaDev 0 busId 1a000 - Init COMPLETE\n"
           "n2:7002:7002 [1] NCCL INFO comm 0x55a2 rank 1 nranks 2 cudaDev 1 busId 1b000 - Init COMPLETE\n")
    d, got = _root(log)
    assert got is None, render_text(d, verbose=True)
    assert [x.reason.split(":")[0] for x in d.dismissed] == ["a retry that later succeeded"]


def test_return_code_traces_alone_are_a_failure_of_their_subsystem():
    log = ("n4:31:77 [3] NCCL INFO misc/socket.cc:484 -> 2\nn4:31:77 [3] NCCL INFO bootstrap.cc:188 -> 2\n"
           "n4:31:77 [3] NCCL INFO init.cc:1404 -> 2\nn4:31:31 [3] NCCL INFO group.cc:390 -> 2\n")
    d, got = _root(log)
    assert got == "network_connect", render_text(d, verbose=True)


def test_return_code_traces_of_a_warn_are_its_evidence():
    log = ("\nn4:31:77 [3] transport/shm.cc:114 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-"
           "3kJh2a (size 9637888)\nn4:31:77 [3] NCCL INFO transport/shm.cc:120 -> 2\n"
           "n4:31:77 [3] NCCL INFO transport.cc:165 -> 2\nn4:31:77 [3] NCCL INFO init.cc:1222 -> 2\n")
    d, got = _root(log)
    assert got == "shm", render_text(d, verbose=True)
    assert not [x for x in d.dismissed if "-> 2" in x.evidence[0].text], render_text(d, verbose=True)


# -- torchrun --------------------------------------------------------------------------------------------------
def test_torchrun_stopped_from_outside():
    log = ("[train r0] step 120\n"
           "W1201 09:00:01.000000 412 torch/distributed/elastic/agent/server/api.py:739] Received 15 death signal, "
           "shutting down workers\n"
           "W1201 09:00:01.002000 412 torch/distributed/elastic/multiprocessing/api.py:1012] Sending process 471 closing "
           "signal SIGTERM\n"
           "torch.distributed.elastic.multiprocessing.api.SignalException: Process 412 got signal: 15\n")
    d, got = _root(log)
    assert got == "other" and d.root_cause.rule == "elastic-agent-stopped", render_text(d, verbose=True)


def test_an_inferred_root_is_never_a_teardown_line_when_another_line_is_there():
    log = ("W1201 09:00:01.002000 412 torch/distributed/elastic/multiprocessing/api.py:1012] Sending process 471 closing "
           "signal SIGTERM\n"
           "slurmstepd: error: *** STEP 4412.0 ON gpu7 CANCELLED AT 2026-01-01T00:00:00 ***\n")
    d, got = _root(log)
    assert d.root_cause is not None and "SIGTERM" not in d.root_cause.title, render_text(d, verbose=True)


# -- the culprit and the error line -------------------------------------------------------------------------------
def test_a_per_rank_root_hit_on_several_ranks_names_them_all_in_the_title():
    log = "".join(f"[rank{r}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {r} has a "
                  f"total capacity of 79.10 GiB of which 1.20 GiB is free.\n" for r in (1, 3))
    d, got = _root(log)
    assert got == "cuda_oom" and d.root_cause.ranks == (1, 3)
    assert d.root_cause.title.endswith("on ranks 1, 3"), d.root_cause.title


def test_an_nccl_error_line_beats_an_absence_of_progress_inference():
    init = "".join(f"gpu1:310{r}:310{r} [{r}] NCCL INFO comm 0x55d0c{r}e0 rank {r} nranks 4 cudaDev {r} nvmlDev {r} "
                   f"busId {r + 1}a000 commId 0x7e11c0d2a4b3f001 - Init {s}\n" for s in ("START", "COMPLETE")
                   for r in range(4))
    log = (init + "RuntimeError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, "
           "unhandled system error, NCCL version 2.18.1\n"
           + "".join(f"W1201 11:28:45.428000 9217 torch/distributed/elastic/multiprocessing/api.py:1028] Sending "
                     f"process 310{r} closing signal SIGTERM\n" for r in (1, 2, 3)))
    d, got = _root(log)
    assert d.root_cause.rule == "torch-nccl-system-error", render_text(d, verbose=True)


# -- nccl-tests' own output -----------------------------------------------------------------------------------------
_DEVICES = "".join(f"#  Rank {r:2d} Group  0 Pid  40211 on     node07 device {r:2d} [0000:{26 + r:02x}:00] NVIDIA RTX A6000\n"
                   for r in range(4))
_HEADER = ("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw "
           "#wrong\n#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)"
           "  (GB/s)\n")


@pytest.mark.parametrize("text,kind", [
    ("#  Rank  3 Group  0 Pid  40211 on     node07 device  3 [0000:3e:00] NVIDIA RTX A6000", "nccltests.rank"),
    ("#   Rank  0 Pid  15833 on jupyter-vm device  0 [0x02] GeForce GTX 1080 Ti", "nccltests.rank"),
    ("   Rank  5 uses device  5 [0x89] Tesla M40 24GB", "nccltests.rank"),
    ("#       size         count      type   redop    root     time   algbw   busbw #wrong", "nccltests.header"),
    ("     bytes             N    type      op     time  algbw  busbw      res", "nccltests.header"),
    ("           8             2     float     sum      -1    18.52    0.00    0.00      0    18.11    0.00    0.00      0",
     "nccltests.result"),
    ("     1048576        262144     float    none      -1    52.10   20.13   15.10    N/A    51.80   20.24   15.18    N/A",
     "nccltests.result"),
    ("# Avg bus bandwidth    : 10.5231", "nccltests.summary"),
    ("epoch 3 step 12 loss 2.25", None),
])
def test_nccl_tests_lines_are_typed(text, kind):
    from nccl_analyzer.classify import EventStream
    from nccl_analyzer.model import Line
    evs = EventStream(keep_text=True).feed(Line("x.log", 1, text, text, None, None, None, False))
    assert [e.kind for e in evs] == ([kind] if kind else ["text"])


def test_nccl_tests_header_and_no_row_on_one_node_is_a_first_collective_hang():
    d, got = _root("# nThread 1 nGpus 4 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20\n#\n"
                   "# Using devices\n" + _DEVICES + "#\n" + _HEADER)
    assert got == "p2p_ipc" and d.root_cause.rule == "hang-nccltests-no-result", render_text(d, verbose=True)
    assert "absence of progress" in d.root_cause.explanation


@pytest.mark.parametrize("tail", [
    "           8             2     float     sum      -1    18.52    0.00    0.00      0    18.11    0.00    0.00      0\n"
    "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0.0012\n",
    "",  # (no header: an excerpt of the set-up only)
])
def test_nccl_tests_that_printed_rows_or_no_header_are_no_hang(tail):
    log = "# Using devices\n" + _DEVICES + (_HEADER if tail else "") + tail
    d, got = _root(log)
    assert got is None, render_text(d, verbose=True)


def test_a_runtime_call_the_driver_lacks_is_a_version_mismatch():
    # cudaErrorCallRequiresNewerDriver (36): NCCL built with a newer CUDA than the installed driver; the WARNs after
    # it (an invalid root range, an invalid device ordinal) are its consequences
    log = ("\n[1,1]<stdout>:gpu-a:881:902 [1] enqueue.cc:811 NCCL WARN Cuda failure 'API call is not supported in the "
           "installed CUDA driver'\n"
           "[1,1]<stdout>:gpu-a:881:902 [1] init.cc:901 NCCL WARN Cuda failure 'invalid device ordinal'\n")
    d, got = _root(log)
    assert got == "version_mismatch", render_text(d, verbose=True)


def test_tensorflow_node_line_is_no_exception_and_the_shutdown_behind_it_decides():
    # TF >= 2.9 graph execution error, pasted from inside it: the op's definition frames, "Node: '<name>'", then the
    # message (Horovod's shutdown); mpirun's report follows
    log = ('[1,1]<stderr>:    File "/usr/lib/python3/dist-packages/horovod/tensorflow/mpi_ops.py", line 123, in _allreduce\n'
           "[1,1]<stderr>:      return MPI_LIB.horovod_allreduce(tensor, name=name, reduce_op=op,\n"
           "[1,1]<stderr>:Node: 'DistributedAdam_Allreduce/cond_3/HorovodAllreduce_grads_7'\n"
           "[1,1]<stderr>:Horovod has been shut down. This was caused by an exception on one of the ranks or an attempt "
           "to allreduce, allgather or broadcast a tensor after one of the ranks finished execution.\n"
           "[1,1]<stderr>:\t [[{{node DistributedAdam_Allreduce/cond_3/HorovodAllreduce_grads_7}}]] "
           "[Op:__inference_train_function_2211]\n"
           "Primary job  terminated normally, but 1 process returned\n"
           "a non-zero exit code. Per user-direction, the job has been aborted.\n")
    d, got = _root(log)
    assert got == "peer_exit", render_text(d, verbose=True)
