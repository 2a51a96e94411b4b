"""A small torch.distributed (gloo, CPU) job that fails the way argv[1] says; run it under torchrun."""
import ctypes
import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

mode = sys.argv[1]
timeout = float(os.environ.get("JOB_TIMEOUT", "20"))
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout))
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.ones(4)
dist.all_reduce(t)
print(f"rank {rank}: step 0 all_reduce ok, sum={t[0].item():.0f}", flush=True)
if mode == "raise":
    # One rank's own Python error ends the job; the others die in the next collective or are torn down.
    if rank == world // 2:
        batch = {"input_ids": t}
        raise KeyError(f"rank {rank}: batch has no 'labels' (keys: {sorted(batch)})")
    time.sleep(0.5)
    dist.all_reduce(t)
elif mode == "mismatch":
    # Rank 0 calls all_reduce while the others call broadcast: both wait until the timeout.
    if rank == 0:
        dist.all_reduce(t)
    else:
        dist.broadcast(t, 0)
elif mode == "mismatch_odd":
    # Every rank but the last calls all_reduce; the last calls broadcast: the odd one out is the last rank.
    if rank == world - 1:
        dist.broadcast(t, 0)
    else:
        dist.all_reduce(t)
elif mode in ("segv", "sigbus", "abort"):
    # One rank dies by a signal in its own code (no Python exception); the others lose their peer.
    def load_batch(step: int) -> None:
        if mode == "segv":
            ctypes.string_at(0)  # null pointer read: SIGSEGV in the C library
        elif mode == "sigbus":
            os.kill(os.getpid(), signal.SIGBUS)
        else:
            os.abort()
    if rank == 1:
        load_batch(1)
    time.sleep(1)
    dist.all_reduce(t)
elif mode == "stall":
    # Rank 1 stops making progress (no error, no exit); the others wait in all_reduce until someone kills the job.
    if rank == 1:
        time.sleep(3600)
    dist.all_reduce(t)
elif mode == "ok":
    dist.all_reduce(t)
print(f"rank {rank}: done", flush=True)
dist.destroy_process_group()
