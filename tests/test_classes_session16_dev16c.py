"""Session 16 (dev16c): failing logs that were answered "no failure" -- Horovod's stall report that ends the log,
and the shell's "Killed" glued to a progress bar. Small logs built here (not copies of fixtures), each with a
healthy near miss."""
from __future__ import annotations

from pathlib import Path

from nccl_analyzer import analyze


def _verdict(tmp_path: Path, text: str):
    p = tmp_path / "log.txt"
    p.write_text(text)
    d = analyze([str(p)])
    return d.root_cause


STALL_HEAD = ("WARNING: One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks "
              "and are waiting for remainder of ranks for more than 60 seconds. This may indicate that different "
              "ranks are trying to submit different tensors or that only subset of ranks is submitting tensors, "
              "which will cause deadlock.\n")


def test_hang_horovod_stall_log_ends_missing_ranks(tmp_path):
    rc = _verdict(tmp_path, "INFO:tensorflow:Loss for final step: 2.91.\n" + STALL_HEAD + "Stalled ops:\n"
                  "Opt_Allreduce/HorovodAllreduce_grads_w1_0 [missing ranks: 2, 5]\n"
                  "Opt_Allreduce/HorovodAllreduce_grads_w2_0 [missing ranks: 2, 5]\n")
    assert rc is not None and rc.id == "collective_mismatch"
    assert rc.rule == "hang-horovod-stall-log-ends"
    assert tuple(rc.ranks) == (2, 5)


def test_hang_horovod_stall_log_ends_ready_ranks_blames_none(tmp_path):
    rc = _verdict(tmp_path, "Stalled ops:\nOpt/HorovodAllreduce_a_0 [ready ranks: 0],\nOpt/HorovodAllreduce_b_0 [ready ranks: 0],\n")
    assert rc is not None and rc.id == "collective_mismatch" and tuple(rc.ranks) == ()


def test_hang_horovod_stall_then_training_output_is_no_failure(tmp_path):
    rc = _verdict(tmp_path, STALL_HEAD + "Stalled ops:\nOpt/HorovodAllreduce_a_0 [missing ranks: 1]\n"
                  "INFO:tensorflow:loss = 0.31, step = 1200 (12.5 sec)\nINFO:tensorflow:loss = 0.30, step = 1300 (12.4 sec)\n")
    assert rc is None


def test_hang_horovod_stall_head_alone_is_no_failure(tmp_path):
    assert _verdict(tmp_path, STALL_HEAD) is None


def test_killed_after_progress_bar_is_host_oom(tmp_path):
    rc = _verdict(tmp_path, "Loading checkpoint shards:  40%|████      | 4/10 [00:21<00:31,  5.30s/it]Killed\n")
    assert rc is not None and rc.id == "host_oom"


def test_progress_bar_without_killed_is_no_failure(tmp_path):
    assert _verdict(tmp_path, "Loading checkpoint shards: 100%|██████████| 10/10 [00:52<00:00,  5.20s/it]\n") is None


def test_killed_word_inside_a_bar_postfix_is_not_a_kill(tmp_path):
    # a bar whose postfix mentions the word is not the shell's report (it must follow tqdm's closing bracket)
    assert _verdict(tmp_path, "epoch 3: 100%|██████████| 50/50 [00:10<00:00, 4.9it/s, Killed=0]\n") is None


P2P_HEAD = ("[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]\n"
            "Device: 0, NVIDIA RTX A5000, pciBusID: 1, pciDeviceID: 0, pciDomainID:0\n"
            "Device: 1, NVIDIA RTX A5000, pciBusID: 21, pciDeviceID: 0, pciDomainID:0\n"
            "Device=0 CAN Access Peer Device=1\nDevice=1 CAN Access Peer Device=0\n"
            "Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)\n   D\\D     0      1 \n"
            "     0 500.00  12.00 \n     1  12.50 501.00 \n")


def test_p2ptest_bandwidth_collapse_is_p2p_ipc(tmp_path):
    rc = _verdict(tmp_path, P2P_HEAD + "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)\n"
                  "   D\\D     0      1 \n     0 500.00   1.90 \n     1   2.10 501.00 \n")
    assert rc is not None and rc.id == "p2p_ipc" and rc.rule == "hang-p2ptest-bandwidth-collapse"


def test_p2ptest_healthy_p2p_is_no_failure(tmp_path):
    rc = _verdict(tmp_path, P2P_HEAD + "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)\n"
                  "   D\\D     0      1 \n     0 500.00  24.00 \n     1  24.10 501.00 \n")
    assert rc is None


def test_p2ptest_stops_after_a_title_is_p2p_ipc(tmp_path):
    rc = _verdict(tmp_path, P2P_HEAD + "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)\n")
    assert rc is not None and rc.id == "p2p_ipc" and rc.rule == "hang-p2ptest-stops-in-measurement"
