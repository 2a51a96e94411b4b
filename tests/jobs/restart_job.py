"""A gloo job for torchrun --max-restarts 1: rank 1 raises at step 3 of the first attempt; the restarted group then
fails as it happens: gloo's reconnect (connectFullMesh) or the rendezvous of the new attempt."""
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(seconds=20))  # a restarted group may hang in init
rank = dist.get_rank()
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
t = torch.ones(4)
for step in range(6):
    dist.all_reduce(t)
    print(f"rank {rank} step {step} attempt {attempt}", flush=True)
    if step == 3 and rank == 1 and attempt == 0:
        raise RuntimeError(f"bad batch at step {step}")
    time.sleep(0.2)
dist.destroy_process_group()
sys.exit(0)
