"""Session 17 (dev17b, docs/classes-session17-dev17b.md): a gloo rank left in a collective after its peers ended
cleanly (torchrun's report lists only it, no SIGTERM sent) is a collective mismatch on that rank; docker compose's
service prefix ("trainer-1  | ") is taken off each line. Logs built here from the formats, not fixture copies."""
from __future__ import annotations

from nccl_analyzer.analysis import analyze_text
from nccl_analyzer.clean import clean_text
from nccl_analyzer.sources import Source

_CLOSED = ("RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
           "[127.0.0.1]:4794. This is typically caused by a remote worker crashing. Check the logs of the remote "
           "worker before reporting an error.")
_RESET = ("RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:21674: "
          "Connection reset by peer. This is typically caused by a remote worker hanging or bugs in the application.")


def _tb(rank: int, call: str, func: str, err: str) -> str:
    lines = ["Traceback (most recent call last):",
             '  File "/srv/job/train.py", line 111, in end_callbacks',
             f"    {call}",
             '  File "/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 83, in wrapper',
             "    return func(*args, **kwargs)",
             f'  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 5356, in {func}',
             "    work.wait()",
             err]
    return "".join(f"[rank{rank}]: {s}\n" for s in lines)


def _entry(idx: int, rank: int, code: int, pid: int) -> str:
    return (f"[{idx}]:\n  time      : 2026-12-06_13:04:32\n  host      : localhost\n"
            f"  rank      : {rank} (local_rank: {rank})\n  exitcode  : {code} (pid: {pid})\n"
            "  error_file: <N/A>\n  traceback : To enable traceback see: "
            "https://pytorch.org/docs/stable/elastic/errors.html\n")


def _report(failures: str, root: str) -> str:
    return ("Traceback (most recent call last):\n  File \"/venv/bin/torchrun\", line 8, in <module>\n"
            "    sys.exit(main())\ntorch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
            "============================================================\n/srv/job/train.py FAILED\n"
            "------------------------------------------------------------\nFailures:\n" + failures
            + "------------------------------------------------------------\nRoot Cause (first observed failure):\n"
            + root + "============================================================\n")


_STEPS = "".join(f"[rank{r}] step {s} loss 1.{r}{s}\n" for s in range(3) for r in range(3))
_FAILED1 = ("E1206 13:04:32.124000 2135 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) "
            "local_rank: 1 (pid: 2213) of binary: /venv/bin/python3.11\n")


def _extra_barrier_log(err: str = _CLOSED, failures: str = "  <NO_OTHER_FAILURES>\n",
                       root: str = _entry(0, 1, 1, 2213), between: str = "") -> str:
    return (_STEPS + "[rank0] training done\n[rank2] training done\n"
            + _tb(1, "dist.barrier()", "barrier", err) + between + _FAILED1 + _report(failures, root))


def test_extra_collective_after_peers_ended_cleanly_is_a_mismatch_on_that_rank():
    # blind_cpu9/01, blind_h200k/k05: ranks 0 and 2 finished and exited 0 (torchrun lists only rank 1, sends no
    # SIGTERM); rank 1 alone was still in a barrier when their sockets closed
    d = analyze_text(_extra_barrier_log())
    assert d.root_cause is not None and d.root_cause.id == "collective_mismatch"
    assert list(d.root_cause.ranks) == [1]
    assert any(f.rule == "gloo-peer-closed-after-clean-exit" and f.role == "root" for f in d.findings)


def test_near_miss_peer_crashed_and_is_listed_stays_peer_exit():
    # rank 0 exited 1 first (torchrun lists it, the root cause): the lost connection is its consequence
    d = analyze_text(_extra_barrier_log(failures=_entry(1, 1, 1, 2213), root=_entry(0, 0, 1, 2212)))
    assert d.root_cause is not None and d.root_cause.id != "collective_mismatch"
    assert not any(f.rule == "gloo-peer-closed-after-clean-exit" for f in d.findings)


def test_near_miss_torchrun_sent_sigterm_stays_unchanged():
    # torchrun terminated running workers: a peer was still alive when rank 1 failed, it did not end cleanly
    sig = ("W1206 13:04:32.100000 2135 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 2212 "
           "closing signal SIGTERM\n")
    d = analyze_text(_extra_barrier_log(between=sig))
    assert not any(f.rule == "gloo-peer-closed-after-clean-exit" for f in d.findings)


def test_near_miss_connection_reset_is_not_this_rule():
    # a reset (the peer went away with our data unread: a crash or os._exit mid-step) is not an orderly close
    d = analyze_text(_extra_barrier_log(err=_RESET))
    assert not any(f.rule == "gloo-peer-closed-after-clean-exit" for f in d.findings)
    assert d.root_cause is not None and d.root_cause.id == "peer_exit"


_SRC = Source("x.log", None)


def test_compose_service_prefix_is_stripped():
    ln = clean_text("trainer-1  | [default3]:[rank3]: Traceback (most recent call last):", _SRC, 1)
    assert ln.rank == 3 and ln.text.startswith("Traceback (most recent call last):")
    ln = clean_text("web_1 | W1204 18:57:40.804000 12248 torch/distributed/run.py:874] *****", _SRC, 2)
    assert ln.text.startswith("W1204 18:57:40.804000 12248 torch/distributed/run.py:874]")


def test_near_miss_table_and_nccl_lines_keep_their_text():
    for t in ("| step | loss |", "epoch 3 | loss 0.25 | lr 1e-4",
              "node1:4411:4502 [2] NCCL INFO Channel 00/0 : 2[2] -> 3[3] via P2P/CUMEM/read"):
        assert clean_text(t, _SRC, 1).text == t


def _barrier_subset_log(prefix: str) -> str:
    out = []
    for r in range(4):
        call, func, err = ("dist.all_reduce(m)", "all_reduce",
                           "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:129] Timed "
                           "out waiting 8000ms for send operation to complete") if r == 3 else \
            ("dist.barrier()", "barrier", "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/"
             "unbound_buffer.cc:78] Timed out waiting 8000ms for recv operation to complete")
        out += [f"{prefix}[default{r}]:{s}" for s in _tb(r, call, func, err).splitlines()]
    return "\n".join(out) + "\n"


def test_compose_prefixed_tracebacks_are_read():
    # blind_cpu7/13: ranks 0-2 in barrier, rank 3 in all_reduce, every line behind "trainer-1  | "
    d = analyze_text(_barrier_subset_log("trainer-1  | "))
    assert d.root_cause is not None and d.root_cause.id == "collective_mismatch"
    assert list(d.root_cause.ranks) == [3]
    plain = analyze_text(_barrier_subset_log(""))
    assert plain.root_cause is not None and plain.root_cause.id == "collective_mismatch"
    assert list(plain.root_cause.ranks) == [3]


def test_ts_stamp_prefix_is_stripped():
    ln = clean_text("Dec 04 18:54:26 [default0]:[rank0]: Traceback (most recent call last):", _SRC, 1)
    assert ln.rank == 0 and ln.text.startswith("Traceback (most recent call last):")
    ln = clean_text("Oct  6 02:07:00.123456 W1204 18:54:28.387000 8967 torch/distributed/elastic/multiprocessing/"
                    "api.py:1028] Sending process 8990 closing signal SIGTERM", _SRC, 2)
    assert ln.text.startswith("W1204 18:54:28.387000 8967 torch/distributed/")


def test_near_miss_month_words_that_are_no_stamp_keep_their_text():
    for t in ("May 12 items were skipped", "Dec 04 2026 release notes", "Jun 1 12:00 meeting"):
        assert clean_text(t, _SRC, 1).text == t


def test_ts_prefixed_gloo_timeouts_name_the_silent_rank():
    # blind_cpu7/03: ranks 0 and 1 time out in DDP's all_reduce, rank 2 (stalled in its data loader) says nothing;
    # every line behind moreutils ts's "Dec 04 18:54:26 "
    out = []
    for r, kind in ((0, "129] Timed out waiting 6000ms for send"), (1, "78] Timed out waiting 6000ms for recv")):
        tb = ["Traceback (most recent call last):", '  File "/srv/job/train.py", line 62, in train',
              "    loss.backward()",
              '  File "/venv/lib/python3.11/site-packages/torch/autograd/graph.py", line 979, in _engine_run_backward',
              "    return Variable._execution_engine.run_backward(",
              f"RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:{kind} operation to "
              "complete"]
        out += [f"Dec 04 18:54:26 [default{r}]:[rank{r}]: {s}" for s in tb]
    out += [f"Dec 04 18:54:28 [default{r}]:[rank{r}] step {s} loss 1.{s}" for r in range(3) for s in range(3)]
    # torchrun tore rank 2 down (SIGTERM) after rank 1 failed: its report names the three ranks
    report = _report(_entry(1, 0, 1, 8990) + _entry(2, 2, -15, 8992), _entry(0, 1, 1, 8991))
    out += [f"Dec 04 18:54:28 {s}" for s in report.splitlines()]
    d = analyze_text("\n".join(out) + "\n")
    assert d.root_cause is not None and d.root_cause.id == "watchdog_timeout"
    assert list(d.root_cause.ranks) == [2]


def _lib_error_log(exc_line: str, rank: int = 1) -> str:
    tb = ["Traceback (most recent call last):", '  File "/srv/job/kern.py", line 40, in run',
          "    kernel((1,), (4096,), (x, n))", exc_line]
    peer = 1 - rank
    return ("".join(f"[rank{rank}]: {s}\n" for s in tb)
            + "".join(f"[rank{peer}]: {s}\n" for s in ["Traceback (most recent call last):",
                                                       '  File "/srv/job/kern.py", line 52, in run',
                                                       "    dist.all_reduce(t)", _CLOSED]))


def test_cupy_driver_error_is_a_cuda_error_on_its_rank():
    # blind_h200p/p01: cuLaunchKernel of a block larger than the device allows, quoted by CuPy
    d = analyze_text(_lib_error_log("cupy_backends.cuda.api.driver.CUDADriverError: CUDA_ERROR_INVALID_VALUE: "
                                    "invalid argument"))
    assert d.root_cause is not None and d.root_cause.id == "cuda_error"
    assert list(d.root_cause.ranks) == [1]


def test_triton_out_of_resources_is_a_cuda_error():
    # blind_h200o/o01: Triton refuses to launch a kernel needing more shared memory than the GPU has
    d = analyze_text(_lib_error_log("triton.runtime.errors.OutOfResources: out of resource: shared memory, "
                                    "Required: 524288, Hardware limit: 232448. Reducing block sizes or `num_stages` "
                                    "may help.", rank=0))
    assert d.root_cause is not None and d.root_cause.id == "cuda_error"
    assert list(d.root_cause.ranks) == [0]


def test_near_miss_cupy_build_for_another_arch_stays_version_mismatch():
    d = analyze_text(_lib_error_log("cupy_backends.cuda.api.driver.CUDADriverError: CUDA_ERROR_NO_BINARY_FOR_GPU: "
                                    "no kernel image is available for execution on the device"))
    # (messages/cuda.toml reads the text as version_mismatch; this rule leaves it alone)
    assert not any(f.rule == "torch-cuda-error" for f in d.findings)


def test_near_miss_cupy_out_of_memory_is_not_this_rule():
    d = analyze_text(_lib_error_log("cupy_backends.cuda.api.runtime.CUDARuntimeError: cudaErrorMemoryAllocation: "
                                    "out of memory"))
    assert not any(f.rule == "torch-cuda-error" for f in d.findings)


def _mesh_log(message: str) -> str:
    tb = ["Traceback (most recent call last):", '  File "/srv/app/parallel.py", line 12, in setup',
          '    mesh = init_device_mesh("cuda", (2, 2))',
          '  File "/venv/lib/python3.12/site-packages/torch/distributed/device_mesh.py", line 302, in __init__',
          "    self._setup_world_group_and_device()",
          '  File "/venv/lib/python3.12/site-packages/torch/distributed/device_mesh.py", line 434, in '
          "_setup_world_group_and_device", "    raise RuntimeError(", f"RuntimeError: {message}"]
    return "".join(f"[rank{r}]: {s}\n" for r in (0, 1) for s in tb)


def test_device_mesh_bigger_than_world_is_invalid_usage():
    # blind_h200o/o03: init_device_mesh asks for 4 ranks in a 2-rank job
    d = analyze_text(_mesh_log("Mesh should not be bigger than default world size 2, but found 4 ranks!"))
    assert d.root_cause is not None and d.root_cause.id == "invalid_usage"


def test_near_miss_other_device_mesh_runtime_error_is_not_the_argument_check():
    d = analyze_text(_mesh_log("some other failure while building the mesh"))
    assert not any(f.rule == "torch-c10d-argument-check" for f in d.findings)


def _lightning_log(frame_file: str, message: str) -> str:
    return ("Traceback (most recent call last):\n  File \"/srv/app/fit.py\", line 30, in main\n"
            "    trainer = L.Trainer(accelerator=\"gpu\", devices=2)\n"
            f"  File \"/venv/lib/python3.12/site-packages/{frame_file}\", line 136, in _check\n"
            "    raise MisconfigurationException(\n"
            f"lightning.fabric.utilities.exceptions.MisconfigurationException: {message}\n")


def test_lightning_more_gpus_than_visible_is_gpu_visibility():
    # blind_h200o/o04: Trainer(devices=2) on a machine that shows one GPU
    d = analyze_text(_lightning_log("lightning/fabric/utilities/device_parser.py",
                                    "You requested gpu: [0, 1]\n But your machine only has: [0]"))
    assert d.root_cause is not None and d.root_cause.id == "gpu_visibility"


def test_near_miss_other_lightning_misconfiguration_stays_app_exception():
    d = analyze_text(_lightning_log("lightning/pytorch/trainer/connectors/accelerator_connector.py",
                                    "You selected an invalid strategy name: `strategy='dpp'`."))
    assert d.root_cause is not None and d.root_cause.id == "app_exception"


_ABORTED = ("E1206 07:52:44.542000 10331 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -6) "
            "local_rank: 1 (pid: 10338) of binary: /usr/bin/python3.11\n")


def test_teardown_terminate_without_exception_then_sigabrt_is_other_on_that_rank():
    # blind_cpu8/18: both ranks trained to the end; rank 1's exit hit std::terminate with no exception in flight
    d = analyze_text("[rank0] training done\nterminate called without an active exception\n" + _ABORTED)
    assert d.root_cause is not None and d.root_cause.id == "other"
    assert list(d.root_cause.ranks) == [1]


def test_near_miss_uncaught_cpp_exception_is_not_the_bare_abort():
    d = analyze_text("terminate called after throwing an instance of 'std::runtime_error'\n"
                     "  what():  something failed\n" + _ABORTED)
    assert not any(f.rule == "crash-abort" and f.role == "root" for f in d.findings)
