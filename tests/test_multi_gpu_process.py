"""One process driving several GPUs (nccl-tests -g N, one pid, an Init line per GPU with its own cudaDev and rank):
each GPU is its own rank in the job table and in the per-rank stage, not all of them the process's first rank."""
from __future__ import annotations

from nccl_analyzer.analysis import analyze_text
from nccl_analyzer.model import Stage


def _init(dev, what):
    return (f"box07:77120:77120 [{dev}] NCCL INFO comm 0x555{dev} rank {dev} nranks 4 cudaDev {dev} nvmlDev {dev} "
            f"busId {dev + 1}7000 commId 0x9f01 - Init {what}\n")


LOG = ("# nThread 1 nGpus 4 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20\n"
       + "".join(_init(d, "START") for d in range(4))
       + "".join(f"box07:77120:7713{d} [{d}] NCCL INFO Channel 00/0 : {d}[{d}] -> {d + 1}[{d + 1}] via P2P/IPC\n"
                 for d in range(3))
       + "".join(_init(d, "COMPLETE") for d in range(3)))


def test_each_gpu_of_the_process_is_its_own_rank():
    d = analyze_text(LOG)
    assert sorted(d.job.ranks) == [0, 1, 2, 3]
    for r in range(4):
        info = d.job.ranks[r]
        assert (info.pid, info.cuda_dev, info.bus_id) == (77120, r, f"{r + 1}7000")
    assert d.job.communicators["0x9f01"]["ranks"] == {0: 0, 1: 1, 2: 2, 3: 3}


def test_the_stage_is_tracked_per_gpu():
    d = analyze_text(LOG)
    assert [d.job.ranks[r].stage for r in range(3)] == [Stage.INIT_COMPLETE] * 3
    assert d.job.ranks[3].stage is Stage.BOOTSTRAP  # GPU 3 never connected: it is the one behind


def test_a_one_gpu_process_with_lines_of_another_device_stays_one_rank():
    # a rank-1 process whose first line was logged before it set its device (prefix [0])
    log = ("node:500:500 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>\n"
           "node:500:500 [1] NCCL INFO comm 0x61 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 2000 commId 0x77 - Init START\n"
           "node:500:500 [1] NCCL INFO comm 0x61 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 2000 commId 0x77 - Init COMPLETE\n")
    d = analyze_text(log)
    assert sorted(d.job.ranks) == [1]
    assert d.job.ranks[1].stage is Stage.INIT_COMPLETE
