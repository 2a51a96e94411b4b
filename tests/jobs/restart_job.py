"""A gloo job for torchrun --max-restarts 1: rank 1 raises at step 3 of the first attempt; the restarted group then
fails in gloo's reconnect (connectFullMesh): rank 2 of the new attempt stays stuck before its init (until torchelastic
stops it), so ranks 0 and 1 either read the address attempt 0's rank 2 left in the store ("Connection refused") or
time out waiting for rank 2 (20 s). Either way the second attempt fails: without the stuck rank it raced its own
rank 2 and, now and then (once in CI), succeeded."""
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
if attempt > 0 and os.environ.get("RANK") == "2":
    time.sleep(3600)  # stuck until torchelastic sends SIGTERM once ranks 0 and 1 have failed
dist.init_process_group("gloo", timeout=timedelta(seconds=20))  # a restarted group may hang in init
rank = dist.get_rank()
t = torch.ones(4)
for step in range(6):
    dist.all_reduce(t)
    print(f"rank {rank} step {step} attempt {attempt}", flush=True)
    if step == 3 and rank == 1 and attempt == 0:
        raise RuntimeError(f"bad batch at step {step}")
    time.sleep(0.2)
dist.destroy_process_group()
sys.exit(0)
