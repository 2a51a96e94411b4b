"""Small real gloo jobs for tests/test_classes_session6.py (docs/classes-session6.md).

    torchrun --nproc_per_node=2 session6_job.py gather_object_lambda   # ODD_RANK (default 1) gathers a lambda
    torchrun --nproc_per_node=2 session6_job.py memory_error           # ODD_RANK runs out of address space
"""
from __future__ import annotations

import datetime
import os
import resource
import sys

import torch
import torch.distributed as dist


def main(mode: str) -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=int(os.environ.get("PG_TIMEOUT", "20"))))
    rank, world = dist.get_rank(), dist.get_world_size()
    odd = int(os.environ.get("ODD_RANK", "1"))
    for step in range(2):
        t = torch.ones(4) * (rank + 1)
        dist.all_reduce(t)
        print(f"[rank{rank}] step {step} sum {t[0].item():.1f}", flush=True)
    if mode == "gather_object_lambda":
        metrics = {"loss": 0.5, "fmt": (lambda v: f"{v:.3f}") if rank == odd else "{:.3f}"}
        out = [None] * world
        dist.all_gather_object(out, metrics)
    elif mode == "memory_error":
        if rank == odd:
            soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            with open("/proc/self/status") as f:
                vm = next(int(x.split()[1]) * 1024 for x in f if x.startswith("VmSize:"))
            resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), hard))
            cache = bytearray(4 << 30)  # past the cap: MemoryError
            print(len(cache))
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
