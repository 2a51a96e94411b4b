"""A process that logs a subgroup's Init before the default group's (torch creates the subgroup's communicator first
when it is used first; NCCL's Init line gives the rank in THAT communicator): the subgroup rank is not a rank of
the job, and what that line said (pid, GPU, busId) belongs to the process's global rank."""
from __future__ import annotations

from nccl_analyzer.analysis import analyze_text


def _init(pid, dev, comm, rank, nranks, commid, what):
    return (f"vm:{pid}:{pid} [{dev}] NCCL INFO comm {comm} rank {rank} nranks {nranks} cudaDev {dev} nvmlDev {dev} "
            f"busId {dev + 1}000 commId {commid} - Init {what}\n")


def test_subgroup_rank_is_no_phantom_rank():
    # ranks 2 and 3 of a 4-rank job (this node's log only) use a 2-rank subgroup before the default group
    log = "".join([_init(302, 0, "0x71", 0, 2, "0xaa", "START"), _init(303, 1, "0x72", 1, 2, "0xaa", "START"),
                   _init(302, 0, "0x71", 0, 2, "0xaa", "COMPLETE"), _init(303, 1, "0x72", 1, 2, "0xaa", "COMPLETE"),
                   _init(302, 0, "0x81", 2, 4, "0xbb", "START"), _init(303, 1, "0x82", 3, 4, "0xbb", "START"),
                   _init(302, 0, "0x81", 2, 4, "0xbb", "COMPLETE"), _init(303, 1, "0x82", 3, 4, "0xbb", "COMPLETE")])
    d = analyze_text(log)
    assert sorted(d.job.ranks) == [2, 3]
    assert (d.job.ranks[2].pid, d.job.ranks[2].cuda_dev) == (302, 0)
    assert (d.job.ranks[3].pid, d.job.ranks[3].cuda_dev) == (303, 1)
    assert d.job.communicators["0xaa"]["ranks"] == {0: 2, 1: 3}
    assert d.root_cause is None


def test_subgroup_init_first_does_not_lend_its_gpu_to_the_global_rank_of_that_number():
    # rank 1's process uses a 1-rank subgroup (its rank 0 there) before the default group's init
    log = "".join([_init(201, 1, "0x51", 0, 1, "0xa1", "START"), _init(201, 1, "0x51", 0, 1, "0xa1", "COMPLETE"),
                   _init(200, 0, "0x50", 0, 2, "0xb1", "START"), _init(201, 1, "0x52", 1, 2, "0xb1", "START"),
                   _init(200, 0, "0x50", 0, 2, "0xb1", "COMPLETE"), _init(201, 1, "0x52", 1, 2, "0xb1", "COMPLETE")])
    d = analyze_text(log)
    assert sorted(d.job.ranks) == [0, 1]
    assert (d.job.ranks[0].pid, d.job.ranks[0].cuda_dev, d.job.ranks[0].bus_id) == (200, 0, "1000")
    assert (d.job.ranks[1].pid, d.job.ranks[1].cuda_dev) == (201, 1)
    assert d.root_cause is None  # no "two ranks on one GPU"
