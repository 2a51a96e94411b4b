"""Failure classes found from the misses of fixtures/blind2 and fixtures/blind_h200b (issue 9, session 3): each
synthetic case is built from what the program prints (XLA's NCCL status, aws-ofi-nccl's test logger, torchx's
tee, Markdown emphasis, a P2P hang in the first collective) and must be named by the rule of its class, not only
get the right taxonomy id from the fail-safe."""
from __future__ import annotations

from pathlib import Path

import pytest

from nccl_analyzer.analysis import analyze
from nccl_analyzer.sources import Source, clean_text

CASES = Path(__file__).resolve().parent.parent / "fixtures" / "cases"


@pytest.mark.parametrize("case, want, rule", [
    ("syn_xla_nccl_status_last_warning_oom", "cuda_oom", "nccl-cuda-oom"),
    ("syn_xla_status_wrapped_no_socket_interface", "socket_interface", "nccl-socket-no-interface"),
    ("syn_ofi_test_logger_getinfo_failed", "ib_rdma", "nccl-ofi-net-plugin"),
    ("syn_markdown_bold_watchdog_line", "watchdog_timeout", "torch-watchdog-timeout"),
    ("syn_torchx_prefix_store_refused", "rendezvous_unreachable", "torch-store-connect-failed"),
    ("syn_p2p_first_collective_log_ends", "p2p_ipc", "hang-first-collective-p2p-log-ends"),
    ("syn_import_torch_undefined_nccl_symbol", "version_mismatch", "torch-nccl-undefined-symbol"),
    ("syn_app_missing_checkpoint_file_torchrun", "app_exception", "python-app-exception"),
    ("syn_dataloader_worker_sigkill", "host_oom", "torch-dataloader-worker-killed"),
    ("syn_dataloader_worker_segv", "other", "torch-dataloader-worker-crashed"),
    ("syn_abort_with_victim_traceback", "other", "crash-abort"),
])
def test_case_is_named_by_its_class_rule(case, want, rule):
    rc = analyze([str(CASES / case)]).root_cause
    assert rc is not None and rc.id == want
    assert rc.rule == rule


def test_ofi_test_logger_line_is_an_nccl_warn():
    d = analyze([str(CASES / "syn_ofi_test_logger_getinfo_failed")])
    ev = d.root_cause.evidence[0]
    assert ev.text.startswith("WARN: Function: find_ofi_provider Line: 312: NET/OFI")


def test_torchx_prefix_gives_the_local_rank():
    src = Source("x.log", None, None)
    line = clean_text("trainer/0 [1]:[W socket.cpp:601] [c10d] The client socket has failed to connect", src, 1)
    assert line.text.startswith("[W socket.cpp:601]") and line.local_rank == 1
    # a path-like word in front of other text is no torchx prefix
    line = clean_text("data/0 [1] items loaded", src, 1)
    assert line.text == "data/0 [1] items loaded" and line.local_rank is None


def test_markdown_emphasis_around_a_whole_line_is_undone():
    src = Source("x.log", None, None)
    for s, want in [("**RuntimeError: NCCL communicator was aborted on rank 2.**", "RuntimeError: NCCL communicator was aborted on rank 2."),
                    ("`NCCL WARN x`", "NCCL WARN x"),
                    ("[default0]:**[rank0]: RuntimeError: boom**", "RuntimeError: boom"),
                    ("the **only** error is this", "the **only** error is this"),
                    ("**a** and **b**", "**a** and **b**"),
                    ("*** SIGSEGV (@0x0) received by PID 7 (TID 0x7f) from PID 0; stack trace: ***",
                     "*** SIGSEGV (@0x0) received by PID 7 (TID 0x7f) from PID 0; stack trace: ***")]:
        assert clean_text(s, src, 1).text == want


def test_mpirun_tag_repeated_inside_a_line_written_in_pieces():
    src = Source("x.log", None, None)
    line = clean_text("[1,19]<stderr>:RuntimeError[1,19]<stderr>:: NCCL communicator was aborted on rank 19.", src, 1)
    assert line.text == "RuntimeError: NCCL communicator was aborted on rank 19." and line.rank == 19
    # another rank's tag inside the line is not this rank's chunk: left as it is
    line = clean_text("[1,3]<stdout>:step 1 [1,4]<stdout>:", src, 1)
    assert line.text == "step 1 [1,4]<stdout>:" and line.rank == 3


def test_horovod_nccl_call_failed_under_tensorflow():
    from nccl_analyzer.analysis import analyze_text

    d = analyze_text("UnknownError (see above for traceback): ncclCommInitRank failed: unhandled cuda error\n"
                     "\t [[Node: model/HorovodAllreduce_dense_0 = HorovodAllreduce[T=DT_FLOAT, "
                     "_device=\"/job:localhost/replica:0/task:0/device:GPU:0\"](model/dense_0)]]\n")
    assert d.root_cause is not None and d.root_cause.id == "cuda_error"


def test_a_tab_indented_line_is_no_desync_report():
    from nccl_analyzer.analysis import analyze_text

    d = analyze_text("\t [[Node: model/HorovodAllreduce_dense_0 = HorovodAllreduce[T=DT_FLOAT]]]\n")
    assert d.root_cause is None


def test_a_numeric_label_inside_srun_label_is_peeled_too():
    src = Source("x.log", None, None)
    line = clean_text("0: 91: idgsim-gpu-001:47744:47744 [0] init.cu:674 WARN Cuda failure 'x'", src, 1)
    assert line.text.startswith("idgsim-gpu-001:47744:47744 [0]") and line.rank == 0
    # two numbers in front of plain text are no labels (nothing says srun ran)
    assert clean_text("0: 3: loss 0.25", Source("y.log", None, None), 1).text == "0: 3: loss 0.25"
