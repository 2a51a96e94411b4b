"""The failure classes behind the misses of session 7's fresh public sets (fixtures/blind9, fixtures/blind8;
docs/classes-session7c.md), each from what the program that prints the text does, not from one pasted log:
vLLM's / SGLang's custom all-reduce failing in its CUDA IPC calls, a traceback cut after its frames whose
innermost frame is the raise statement, c10d's store client failing one address with EADDRNOTAVAIL, the rank that
starts the TCPStore server named for its bind failure, and vLLM's executor reporting that a worker process died."""
from __future__ import annotations

import pytest

from nccl_analyzer.analysis import analyze_text


def _root(log: str):
    d = analyze_text(log)
    return d, (d.root_cause.id if d.root_cause else None)


# -- the custom all-reduce's CUDA IPC (csrc/custom_all_reduce.cuh, vLLM's CudaRTLibrary, sgl-kernel) ---------------
@pytest.mark.parametrize("err", ["invalid argument", "invalid resource handle", "operation not supported"])
def test_custom_allreduce_cudacheck_ipc_error_is_p2p(err):
    log = ("INFO 11-02 08:01:13 custom_all_reduce_utils.py:242] reading GPU P2P access cache\n"
           f"Failed: Cuda error /tmp/build/csrc/custom_all_reduce.cuh:368 '{err}'\n"
           "ERROR 11-02 08:01:15 multiproc_worker_utils.py:116] Worker VllmWorkerProcess pid 4242 died, exit code: 1\n")
    d, root = _root(log)
    assert root == "p2p_ipc"
    assert d.root_cause.rule == "serving-custom-allreduce-ipc"
    assert "disable-custom-all-reduce" in d.root_cause.fix.summary


def test_custom_allreduce_cudacheck_kernel_fault_stays_cuda_error():
    # the same CUDACHECK after a kernel fault (a sticky error returned by the next cudaMemcpy) is no IPC failure
    _, root = _root("Failed: Cuda error /tmp/build/csrc/custom_all_reduce.cuh:301 "
                    "'an illegal memory access was encountered'\n")
    assert root == "cuda_error"
    # and 'invalid argument' from another extension's CUDACHECK keeps its generic meaning
    _, root = _root("Failed: Cuda error /src/kernels/topk.cu:52 'invalid argument'\n")
    assert root == "invalid_usage"


def test_cudart_wrapper_ipc_open_failure_is_p2p():
    log = ("Traceback (most recent call last):\n"
           '  File "/opt/venv/lib/python3.11/site-packages/vllm/distributed/device_communicators/custom_all_reduce.py",'
           ' line 140, in create_shared_buffer\n'
           "    pointers.append(lib.cudaIpcOpenMemHandle(h).value)\n"
           '  File "/opt/venv/lib/python3.11/site-packages/vllm/distributed/device_communicators/cuda_wrapper.py",'
           " line 171, in cudaIpcOpenMemHandle\n"
           '    self.CUDART_CHECK(self.funcs["cudaIpcOpenMemHandle"](\n'
           '  File "/opt/venv/lib/python3.11/site-packages/vllm/distributed/device_communicators/cuda_wrapper.py",'
           " line 116, in CUDART_CHECK\n"
           '    raise RuntimeError(f"CUDART error: {error_str}")\n'
           "RuntimeError: CUDART error: invalid resource handle\n")
    d, root = _root(log)
    assert root == "p2p_ipc" and d.root_cause.rule == "serving-custom-allreduce-ipc"


def test_sgl_kernel_throw_form_is_p2p():
    # sgl-kernel's CHECK_CUDA_SUCCESS throws "<cudaGetErrorString>\n<file>:<line>"
    log = ("[2025-04-02 11:20:31 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
           '  File "/sgl/python/sglang/srt/distributed/device_communicators/custom_all_reduce.py", line 301, in'
           " register_graph_buffers\n"
           "    ops.register_graph_buffers(self._ptr, handles, offsets)\n"
           "RuntimeError: invalid argument\n"
           "/sgl/sgl-kernel/csrc/allreduce/custom_all_reduce.cuh:229\n")
    _, root = _root(log)
    assert root == "p2p_ipc"


# -- a traceback cut after its frames, the innermost frame a raise statement ---------------------------------------
_CUT_AT_RAISE = """\
[rank3]: Traceback (most recent call last):
[rank3]:   File "/work/proj/finetune.py", line 212, in <module>
[rank3]:     run(args)
[rank3]:   File "/work/proj/finetune.py", line 150, in run
[rank3]:     tok = load_tokenizer(args.tokenizer_dir)
[rank3]:   File "/work/proj/utils/tok.py", line 41, in load_tokenizer
[rank3]:     raise FileNotFoundError(f"tokenizer.json not found in {path}")
"""


def test_cut_traceback_at_a_raise_is_the_application_error():
    d, root = _root(_CUT_AT_RAISE)
    assert root == "app_exception"
    assert d.root_cause.rule == "python-app-exception-raise-cut"
    assert d.root_cause.ranks == (3,)
    assert "FileNotFoundError" in d.root_cause.title and "tok.py:41 in load_tokenizer" in d.root_cause.title


def test_cut_traceback_at_a_failed_assert_is_an_assertion_error():
    log = _CUT_AT_RAISE.replace('raise FileNotFoundError(f"tokenizer.json not found in {path}")',
                                'assert tok.vocab_size == cfg.vocab, f"vocab {tok.vocab_size} != {cfg.vocab}"')
    d, root = _root(log)
    assert root == "app_exception" and "AssertionError" in d.root_cause.title


def test_cut_traceback_without_a_raise_stays_vague():
    # cut at a call: where the program was, not what was raised (the fail-safe's low-confidence 'other')
    log = _CUT_AT_RAISE.rsplit("[rank3]:     raise", 1)[0]
    d, root = _root(log)
    assert root == "other" and d.root_cause.rule != "python-app-exception-raise-cut"
    # a re-raise of a caught object does not name the type
    d, root = _root(_CUT_AT_RAISE.replace('raise FileNotFoundError(f"tokenizer.json not found in {path}")', "raise err"))
    assert root == "other"


def test_cut_traceback_raising_a_comm_error_is_not_the_application():
    log = _CUT_AT_RAISE.replace('raise FileNotFoundError(f"tokenizer.json not found in {path}")',
                                'raise DistStoreError("Timed out after 901 seconds waiting for clients. 3/4 clients joined.")')
    d, root = _root(log)
    assert d.root_cause is None or d.root_cause.rule != "python-app-exception-raise-cut"


# -- c10d's store client: connect() -> EADDRNOTAVAIL (errno 99) for one address (socket.cpp SocketConnectOp) -------
_ADDRNOTAVAIL = ("[W1104 09:30:12.118204 socket.cpp:697] [c10d] The client socket has failed to connect to "
                 "[localhost]:29511 (errno: 99 - Cannot assign requested address).\n")


def test_store_connect_addrnotavail_alone_is_the_port_reuse_not_an_unreachable_master():
    d, root = _root(_ADDRNOTAVAIL)
    assert root == "port_conflict"
    assert d.root_cause.rule != "torch-store-connect-failed"  # neither refused nor timed out: not a wrong address


def test_store_connect_addrnotavail_then_progress_is_no_failure():
    # c10d goes on to the next address (127.0.0.1 after ::1 on a host with IPv6 off) and the process gets further
    log = (_ADDRNOTAVAIL
           + "trainer-1:4410:4533 [0] NCCL INFO comm 0x55d0c1e0 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 1b000 "
             "commId 0x7e11c0d2a4b3f001 - Init COMPLETE\n"
           + "step 1 loss 2.31\n")
    d, root = _root(log)
    assert root is None
    assert all(x.reason.startswith("a retry that later succeeded") for x in d.dismissed)


def test_store_connect_refused_alone_stays_unreachable():
    _, root = _root(_ADDRNOTAVAIL.replace("errno: 99 - Cannot assign requested address", "errno: 111 - Connection refused"))
    assert root == "rendezvous_unreachable"


# -- the TCPStore server's bind failure is rank 0's (init_process_group's env:// / tcp:// rendezvous) -------------
_STORE_BIND = """\
Traceback (most recent call last):
  File "/srv/asr/train.py", line 88, in <module>
    dist.init_process_group("gloo", init_method="env://")
  File "/opt/py/lib/python3.10/site-packages/torch/distributed/c10d_logger.py", line 79, in wrapper
    return func(*args, **kwargs)
  File "/opt/py/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 1305, in init_process_group
    store, rank, world_size = next(rendezvous_iterator)
  File "/opt/py/lib/python3.10/site-packages/torch/distributed/rendezvous.py", line 246, in _env_rendezvous_handler
    store = _create_c10d_store(master_addr, master_port, rank, world_size, timeout, use_libuv)
  File "/opt/py/lib/python3.10/site-packages/torch/distributed/rendezvous.py", line 174, in _create_c10d_store
    return TCPStore(
torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use
"""


def test_store_bind_failure_in_init_process_group_is_rank_0s():
    d, root = _root(_STORE_BIND)
    assert root == "port_conflict"
    assert d.root_cause.ranks == (0,)


def test_store_bind_failure_of_torchruns_agent_names_no_rank():
    # the agent hosts the store (torch/distributed/elastic/...): no worker rank started it
    log = ("Traceback (most recent call last):\n"
           '  File "/opt/py/bin/torchrun", line 8, in <module>\n'
           "    sys.exit(main())\n"
           '  File "/opt/py/lib/python3.10/site-packages/torch/distributed/elastic/rendezvous/static_tcp_rendezvous.py",'
           " line 55, in next_rendezvous\n"
           "    self._store = TCPStore(  # type: ignore[call-arg]\n"
           + _STORE_BIND.rsplit("\n", 2)[-2] + "\n")
    d, root = _root(log)
    assert root == "port_conflict"
    assert d.root_cause.ranks == ()


# -- vLLM's executor: a worker process ended (multiproc_executor.py, ray_executor_v2.py, v0 multiproc_worker_utils.py)
@pytest.mark.parametrize("line,want", [
    ("ERROR 06-30 14:02:11 [multiproc_executor.py:146] Worker proc VllmWorker-3 died unexpectedly, shutting down executor.",
     "peer_exit"),
    ("(EngineCore_DP1 pid=7121) ERROR 06-30 14:02:11 [ray_executor_v2.py:470] RayWorkerProc rank=[1] died unexpectedly, "
     "shutting down executor.", "peer_exit"),
    ("ERROR 09-12 03:14:55 multiproc_worker_utils.py:120] Worker VllmWorkerProcess pid 90211 died, exit code: -9",
     "host_oom"),
    ("ERROR 09-12 03:14:55 multiproc_worker_utils.py:120] Worker VllmWorkerProcess pid 90211 died, exit code: -11",
     "other"),
])
def test_vllm_worker_died_alone_is_a_failure(line, want):
    _, root = _root("INFO 06-30 14:01:58 [gpu_model_runner.py:1201] Model loading took 14.2 GiB\n" + line + "\n")
    assert root == want


def test_vllm_worker_died_quoted_in_prose_is_no_log_line():
    _, root = _root("We noticed the Worker proc VllmWorker-1 died unexpectedly after an hour, any idea?\n")
    assert root is None
