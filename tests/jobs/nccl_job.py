"""A small torch.distributed NCCL job (one GPU per rank) that fails the way argv[1] says; run it under torchrun."""
import datetime
import os
import sys

import torch
import torch.distributed as dist

mode = sys.argv[1]
local = int(os.environ.get("LOCAL_RANK", 0))
torch.cuda.set_device(local)
dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=float(os.environ.get("JOB_TIMEOUT", "20"))),
                        device_id=torch.device("cuda", local))
rank = dist.get_rank()
t = torch.ones(1 << 20, device="cuda")
dist.all_reduce(t)
torch.cuda.synchronize()
print(f"rank {rank}: step 0 all_reduce ok, sum={t[0].item():.0f}", flush=True)
if mode == "raise":
    raise KeyError(f"rank {rank}: batch has no 'labels'")
if mode == "oom":
    blocks = [torch.empty(1 << 34, dtype=torch.uint8, device="cuda") for _ in range(64)]
if mode == "hang":
    # the stream is busy far past the process-group timeout: the watchdog fires on this rank
    torch.cuda._sleep(int(2e9 * 60))
    dist.all_reduce(t)
    torch.cuda.synchronize()
dist.all_reduce(t)
torch.cuda.synchronize()
print(f"rank {rank}: done", flush=True)
dist.destroy_process_group()
