"""The failure classes behind the misses of the sets released in session 6 (fixtures/blind5h, blind_cpu3h,
blind_h200g; docs/classes-session6.md), each built from what the program that prints the line does: real gloo jobs
(tests/jobs/session6_job.py) where a process's behaviour is the point, short logs written from NCCL's / the
library's format where the point is one message's text."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobs.jobkit import env, needs_torch, run_on_a_free_port, torchrun  # noqa: E402

from nccl_analyzer.analysis import analyze, analyze_text  # noqa: E402
from nccl_analyzer.render.text import render_text  # noqa: E402

JOB = Path(__file__).resolve().parent / "jobs" / "session6_job.py"


def _run(tmp_path: Path, mode: str, nproc: int = 2, **extra: str) -> Path:
    log = tmp_path / f"{mode}.log"
    out = run_on_a_free_port(lambda port: torchrun(mode, nproc, port, script=JOB), env=env(**extra), cwd=tmp_path,
                             log=log)  # one console, as `2>&1` shows it
    assert out.returncode != 0, out.stdout[-2000:]
    return log


def _verdict(text: str):
    d = analyze_text(text)
    return d, render_text(d, verbose=True)


# -- 1. NCCL's NVLS bind failure is three lines; its first carries no error word ---------------------------------
_NVLS_WRAPPED = """\
Failed to bind NVLink SHARP (NVLS) Multicast memory of size 4194304 :
CUDA error 800 'operation not permitted'.
This is usually caused by a system or configuration error in the Fabric Manager or NVSwitches.
Disable NVLS (NCCL_NVLS_ENABLE=0) if you wish to avoid this error in the future.
"""


def test_nvls_bind_failure_wrapped_before_its_cuda_error_is_nvls():
    """transport/nvls.cc's WARN (2.29+ wording) quoted without its prefix, its first line wrapped before the CUDA error:
    the CUDA error is the multicast bind's, not a CUDA fault of its own."""
    d, out = _verdict(_NVLS_WRAPPED)
    assert d.root_cause is not None and d.root_cause.id == "nvls_multicast", out
    assert d.root_cause.evidence[0].line == 1, out


def test_nvls_bind_failure_without_its_first_line_is_still_nvls():
    """The paste cut above the second line of the same WARN: only nvls.cc prints that sentence."""
    d, out = _verdict(_NVLS_WRAPPED.split("\n", 2)[2])
    assert d.root_cause is not None and d.root_cause.id == "nvls_multicast", out


def test_nvls_bind_failure_nccl_went_on_from_is_no_failure():
    """NCCL 2.27 / 2.28 log the same bind failure at INFO and go on without NVLS (its text ends so)."""
    d, out = _verdict("Failed to bind NVLink SHARP (NVLS) Multicast memory of size 2097152 : CUDA error 401 'the "
                      "operation cannot be performed in the present state'. Proceeding without NVLS support.\n")
    assert d.root_cause is None, out


_MNNVL = ("MNNVL (cliqueSize 8) is available but not working on this system. Check the IMEX channel configuration "
          "(/dev/nvidia-caps-imex-channels). Set NCCL_MNNVL_ENABLE=0 to ignore this issue.\n")


def test_mnnvl_not_working_quoted_alone_is_nvls_multicast():
    """mnnvl.cc warns so and returns ncclSystemError (its fabric-handle self test failed: no IMEX channel in the
    container, the IMEX daemon down); quoted without NCCL's prefix it carried no error word."""
    d, out = _verdict(_MNNVL)
    assert d.root_cause is not None and d.root_cause.id == "nvls_multicast", out


def test_mnnvl_not_working_as_torch_s_last_error_is_nvls_multicast():
    log = ("[rank0]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
           "ProcessGroupNCCL.cpp:3690, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.5\n"
           "[rank0]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.\n"
           "[rank0]: Last error:\n[rank0]: " + _MNNVL)
    d, out = _verdict(log)
    assert d.root_cause is not None and d.root_cause.id == "nvls_multicast", out


# -- 2. socketPollConnect's own texts, their file unknown -------------------------------------------------------
def test_socketpollconnect_warn_in_a_prefix_the_parser_cannot_read_is_a_connect_failure():
    """A job's own log format around NCCL's WARN ("[misc/socket.cc:586] [host:pid=N] NCCL WARN ..."): the WARN's
    file is not read, so only its text says it is misc/socket.cc's connect (poll() woke without POLLOUT)."""
    log = ("[0012/0256][2026-03-02 08:14:55,101] [misc/socket.cc:586] [gpu-b07:pid=77120] NCCL WARN socketPollConnect"
           " poll() returned 1, no POLLOUT events\n"
           "[0013/0256][2026-03-02 08:14:55,104] [misc/socket.cc:586] [gpu-b07:pid=77121] NCCL WARN socketPollConnect"
           " poll() returned 1, no POLLOUT events\n")
    d, out = _verdict(log)
    assert d.root_cause is not None and d.root_cause.id == "network_connect", out


def test_socketpollconnect_text_quoted_as_the_last_error_is_a_connect_failure():
    log = ("torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, "
           "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.3\n"
           "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.\n"
           "Last error:\n"
           "socketPollConnect to 10.12.0.7<41921> failed with error Connection timed out\n")
    d, out = _verdict(log)
    assert d.root_cause is not None and d.root_cause.id == "network_connect", out


# -- 3. bind() of an address the host does not have -------------------------------------------------------------
_BIND_NOT_LOCAL = """\
a91f0c2d7e11:301:301 [0] NCCL INFO NCCL_COMM_ID set by environment to 10.40.1.8:30211
a91f0c2d7e11:301:301 [0] include/socket.h:197 NCCL WARN Net : No interface found in the same subnet as remote address 10.40.1.8<30211>
a91f0c2d7e11:301:301 [0] NCCL INFO Bootstrap : Using [0]eth0:172.17.0.4<0>
a91f0c2d7e11:301:301 [0] NCCL INFO NET/Socket : Using [0]eth0:172.17.0.4<0>
a91f0c2d7e11:301:301 [0] include/socket.h:333 NCCL WARN Call to bind failed : {err}
a91f0c2d7e11:301:301 [0] NCCL INFO bootstrap.cc:91 -> 2
a91f0c2d7e11:301:301 [0] NCCL INFO init.cc:970 -> 2
"""


def test_bind_to_an_address_the_container_does_not_have_is_the_interface():
    """EADDRNOTAVAIL: NCCL_COMM_ID names an address that is not the container's (docker bridge): the address NCCL was
    told to use, not a connection between nodes, and not a port another process holds."""
    d, out = _verdict(_BIND_NOT_LOCAL.format(err="Cannot assign requested address"))
    assert d.root_cause is not None and d.root_cause.id == "socket_interface", out
    assert d.root_cause.rule == "nccl-bind-address-not-local", out


def test_bind_to_a_taken_port_is_still_the_port():
    d, out = _verdict(_BIND_NOT_LOCAL.format(err="Address already in use"))
    assert d.root_cause is not None and d.root_cause.id == "port_conflict", out


# -- 4. Python's MemoryError is host memory ---------------------------------------------------------------------
@needs_torch
def test_memory_error_of_a_real_rank_is_host_memory(tmp_path):
    """Rank 1 of a real gloo job caps its address space and allocates past it: CPython raises MemoryError (no
    message); rank 0 loses its peer. What ran out is the host memory of rank 1."""
    log = _run(tmp_path, "memory_error")
    assert "MemoryError" in log.read_text()
    d = analyze([str(log)])
    assert d.root_cause is not None and d.root_cause.id == "host_oom", render_text(d, verbose=True)
    assert d.root_cause.ranks == (1,)


def test_numpy_s_allocation_failure_is_host_memory():
    log = ("[rank0]: Traceback (most recent call last):\n"
           '[rank0]:   File "/srv/feat.py", line 40, in <module>\n'
           "[rank0]:     bank = np.empty((2_000_000, 4096), dtype=np.float32)\n"
           "[rank0]: numpy._core._exceptions._ArrayMemoryError: Unable to allocate 30.5 GiB for an array with shape "
           "(2000000, 4096) and data type float32\n")
    d, out = _verdict(log)
    assert d.root_cause is not None and d.root_cause.id == "host_oom", out


def test_fork_failing_with_enomem_is_host_memory():
    """A DataLoader starting its workers: os.fork() fails with errno 12 when the host cannot back the child."""
    log = ("Traceback (most recent call last):\n"
           '  File "/srv/train.py", line 80, in <module>\n'
           "    for batch in loader:\n"
           '  File "/usr/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 1039, in __init__\n'
           "    w.start()\n"
           '  File "/usr/lib/python3.10/multiprocessing/popen_fork.py", line 66, in _launch\n'
           "    self.pid = os.fork()\n"
           "OSError: [Errno 12] Cannot allocate memory\n")
    d, out = _verdict(log)
    assert d.root_cause is not None and d.root_cause.id == "host_oom", out


def test_std_bad_alloc_in_a_native_thread_is_host_memory():
    log = ("terminate called after throwing an instance of 'std::bad_alloc'\n"
           "  what():  std::bad_alloc\n"
           "Aborted (core dumped)\n")
    d, out = _verdict(log)
    assert d.root_cause is not None and d.root_cause.id == "host_oom", out


def test_an_exception_naming_memory_is_not_host_memory():
    """Only the MemoryError type says an allocation failed; a message about memory is the application's."""
    log = ("Traceback (most recent call last):\n"
           '  File "/srv/train.py", line 12, in <module>\n'
           "    check(cfg)\n"
           "ValueError: memory budget must be a positive number of GiB\n")
    d, out = _verdict(log)
    assert d.root_cause is not None and d.root_cause.id == "app_exception", out


# -- 5. A rank that raised pickling its object is in no collective -----------------------------------------------
@needs_torch
def test_all_gather_object_of_an_unpicklable_object_is_that_rank_s_exception(tmp_path):
    """Rank 1 of a real gloo job all_gather_objects a dict holding a lambda: pickle fails in _object_to_tensor
    before any communication (AttributeError), and rank 0, waiting in the all_gather inside its all_gather_object,
    loses its peer. The ranks did not call different collectives: rank 1's exception is the cause."""
    log = _run(tmp_path, "gather_object_lambda")
    assert "_object_to_tensor" in log.read_text()
    d = analyze([str(log)])
    assert d.root_cause is not None and d.root_cause.id == "app_exception", render_text(d, verbose=True)
    assert d.root_cause.ranks == (1,)


def test_ranks_stopped_in_different_collectives_are_still_a_mismatch():
    """The guard: one rank timed out in all_gather_object's all_gather, the other in broadcast."""
    tb = ("[rank{r}]: Traceback (most recent call last):\n"
          '[rank{r}]:   File "/srv/train.py", line 30, in <module>\n'
          "[rank{r}]:     {call}\n"
          '[rank{r}]:   File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3300, '
          "in {fn}\n"
          "[rank{r}]:     work.wait()\n"
          "[rank{r}]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting "
          "20000ms for recv operation to complete\n")
    log = tb.format(r=0, call="dist.all_gather_object(out, obj)", fn="all_gather") + \
        tb.format(r=1, call="dist.broadcast(t, 0)", fn="broadcast")
    d, out = _verdict(log)
    assert d.root_cause is not None and d.root_cause.id == "collective_mismatch", out


# -- 6. accelerate's shape check before a gather ----------------------------------------------------------------
def _accelerate_rank(r: int, shapes: list[str]) -> str:
    lines = ["Traceback (most recent call last):",
             '  File "/srv/dpo.py", line 211, in <module>',
             "    trainer.train()",
             '  File "/opt/venv/lib/python3.11/site-packages/accelerate/accelerator.py", line 2539, in gather',
             "    return gather(tensor)",
             '  File "/opt/venv/lib/python3.11/site-packages/accelerate/utils/operations.py", line 389, in wrapper',
             "    raise DistributedOperationException(",
             "accelerate.utils.operations.DistributedOperationException: Cannot apply desired operation due to shape "
             "mismatches. All shapes across devices must be valid.",
             "",
             "Operation: `accelerate.utils.operations.gather`",
             "Input shapes:"] + [f"  - Process {i}: {s}" for i, s in enumerate(shapes)]
    return "".join(f"[rank{r}]: {x}\n" for x in lines)


def test_accelerate_s_shape_check_is_a_collective_mismatch():
    """accelerate's debug mode (verify_operation) gathers every process's shape and raises on every rank when they
    differ: the ranks called one gather with tensors of different shapes, not an application bug of one rank."""
    shapes = ["[8, 211, 50257]", "[8, 187, 50257]", "[8, 240, 50257]"]
    d, out = _verdict("".join(_accelerate_rank(r, shapes) for r in (2, 0, 1)))
    assert d.root_cause is not None and d.root_cause.id == "collective_mismatch", out
    assert "accelerate.utils.operations.gather" in d.root_cause.title, out


def test_accelerate_s_device_check_is_not_a_mismatch():
    log = ("accelerate.utils.operations.DistributedOperationException: One or more of the tensors passed to "
           "accelerate.utils.operations.gather were not on the cpu while the `Accelerator` is configured for cuda. "
           "Please move it to the cuda before calling accelerate.utils.operations.gather.\n")
    d, out = _verdict(log)
    assert d.root_cause is None or d.root_cause.id != "collective_mismatch", out


# -- 7. PaddlePaddle's EnforceNotMet: the summary line says what failed -----------------------------------------
_PADDLE = """\
Traceback (most recent call last):
  File "tools/train.py", line 58, in <module>
    main()
  File "tools/train.py", line 31, in main
    paddle.distributed.init_parallel_env()
  File "/usr/local/lib/python3.7/site-packages/paddle/distributed/parallel.py", line 134, in init_parallel_env
    parallel_helper._init_parallel_ctx()
  File "/usr/local/lib/python3.7/site-packages/paddle/fluid/dygraph/parallel_helper.py", line 42, in _init_parallel_ctx
    __parallel_ctx__clz__.init()
paddle.fluid.core_avx.EnforceNotMet: 

--------------------------------------
C++ Traceback (most recent call last):
--------------------------------------
0   paddle::imperative::NCCLParallelContext::Init()
1   paddle::platform::NCCLCommContext::CreateNCCLComm(ncclUniqueId*, int, int, int, int)
2   paddle::platform::EnforceNotMet::EnforceNotMet(std::__exception_ptr::exception_ptr, char const*, int)

----------------------
Error Message Summary:
----------------------
{summary}
"""


def test_paddle_enforce_not_met_is_what_its_summary_line_says():
    """Paddle's C++ PADDLE_ENFORCE failure reaches Python as EnforceNotMet with no text of its own; the error class
    and message are in the "Error Message Summary": an NCCL error there is NCCL's, not the application's."""
    d, out = _verdict(_PADDLE.format(summary="ExternalError:  Nccl error, unhandled cuda error  (at "
                                             "/paddle/paddle/fluid/platform/collective_helper.cc:83)"))
    assert d.root_cause is not None and d.root_cause.id == "cuda_error", out


def test_paddle_enforce_not_met_of_a_user_error_is_still_the_application():
    d, out = _verdict(_PADDLE.format(summary="InvalidArgumentError: The shape of Input(X) should be [N, C, H, W], "
                                             "but received [8, 3, 224]  (at /paddle/paddle/fluid/operators/conv_op.cc:59)"))
    assert d.root_cause is not None and d.root_cause.id == "app_exception", out


# -- 8. A WARN without its file is read as printed by the file the catalogue names -------------------------------
@pytest.mark.parametrize("line,want", [
    # misc/ipcsocket.cc (local ranks exchange cuMem handles over a UNIX socket): the table's p2p_ipc by file
    ("NCCL WARN UDS: Sending data over socket nccl-socket-1-4f2a09c1d7 failed : Connection refused (111)", "p2p_ipc"),
    # misc/cudawrap.cc: cuda_error by file
    ("gpu-c3:9911:9911 [0] NCCL WARN Failed to find CUDA library in /opt/cuda/lib64 (NCCL_CUDA_PATH=/opt/cuda/lib64)",
     "cuda_error"),
])
def test_a_warn_without_its_file_means_what_its_file_would(line, want):
    """NCCL's prefix stripped (or never read): messages/nccl.toml decides these formats by their source file, and
    messages/nccl_warn_formats.json (generated from the catalogue) says which file prints the text."""
    d, out = _verdict(line + "\n")
    assert d.root_cause is not None and d.root_cause.id == want, out


def test_a_text_two_sources_print_with_different_meanings_is_left_to_the_text():
    """'Failed to open %s' (net_ib: ib_rdma) must not take 'Failed to open libnvidia-ml.so.1' (nvmlwrap: other)."""
    from nccl_analyzer.messages import load_tables
    t = load_tables()
    # the most specific catalogue format that prints it whole is nvmlwrap's own literal text, not net_ib's "%s"
    assert t.source_of("Failed to open libnvidia-ml.so.1") in ("misc/nvmlwrap.cc", "misc/nvmlwrap.cu")
    m = t.nccl_warn(None, "Failed to open libnvidia-ml.so.1")
    assert m is None or m.id != "ib_rdma"


# -- 9. An exception's message word-wrapped by the person who pasted it ----------------------------------------
def _wrapped(text: str, width: int) -> str:
    import textwrap
    return "\n".join(textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)) + "\n"


_BIND = ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
         "The server socket has failed to bind to [::]:29517 (errno: 98 - Address already in use). The server "
         "socket has failed to bind to 0.0.0.0:29517 (errno: 98 - Address already in use).")
_STORE_TIMEOUT = ("torch.distributed.DistNetworkError: The client socket has timed out after 1800000ms while trying "
                  "to connect to (10.8.0.12, 29500).")


def _file_verdict(tmp_path: Path, text: str):
    """The analysis of ``text`` read as a file (the paste layer reads files and stdin, not in-memory text)."""
    p = tmp_path / "paste.txt"
    p.write_text(text)
    d = analyze([str(p)])
    return d, render_text(d, verbose=True)


@pytest.mark.parametrize("width", [64, 72, 100])
def test_a_word_wrapped_exception_message_is_read_whole(tmp_path, width):
    """Python prints an exception's message on one line; a paste wrapped at the words (an issue's text, a mail, a
    terminal that folds at spaces) leaves pieces no rule reads. Joined with the space the wrap took, the message
    is torch's TCPStore bind failure (EADDRINUSE)."""
    d, out = _file_verdict(tmp_path, _wrapped(_BIND, width))
    assert d.root_cause is not None and d.root_cause.id == "port_conflict", out
    assert "29517" in d.root_cause.title, out


def test_a_word_wrapped_store_timeout_is_read_whole(tmp_path):
    d, out = _file_verdict(tmp_path, _wrapped(_STORE_TIMEOUT, 64))
    assert d.root_cause is not None and d.root_cause.id == "rendezvous_unreachable", out
    assert "10.8.0.12" in d.root_cause.title, out


def test_torch_s_own_multi_line_message_is_no_word_wrap():
    """torch's CUDA error text is several lines of its own (c10/cuda/CUDAException.cpp): not pieces of one line."""
    from nccl_analyzer.paste import plan_for
    lines = ["RuntimeError: CUDA error: an illegal memory access was encountered",
             "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
             "might be incorrect.",
             "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
             "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.", ""]
    p = plan_for(lines)
    assert p is None or not p.words


def test_a_hard_wrapped_exception_message_is_still_joined_without_a_space(tmp_path):
    """A terminal's hard wrap cuts at one exact width, mid-word: its pieces are joined as they are."""
    lines = [_BIND[i:i + 80] for i in range(0, len(_BIND), 80)]
    d, out = _file_verdict(tmp_path, "\n".join(lines) + "\n")
    assert d.root_cause is not None and d.root_cause.id == "port_conflict", out
