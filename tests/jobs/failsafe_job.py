"""A gloo (CPU) torchrun job whose output is scary but healthy, or that dies by a signal: argv[1] = caught | segv."""
import os
import signal
import sys
import traceback

import torch
import torch.distributed as dist

mode = sys.argv[1]
dist.init_process_group("gloo")
rank = dist.get_rank()
if rank == 0:
    try:  # an optional dependency, the way libraries probe for one: the traceback is printed, then handled
        import a_module_that_is_not_installed  # noqa: F401
    except ImportError:
        traceback.print_exc()
        print("optional module missing, using the fallback", flush=True)
t = torch.ones(4)
for step in range(3):
    dist.all_reduce(t)
    print(f"rank {rank} step {step} sum {float(t.sum())}", flush=True)
    if mode == "segv" and rank == 1 and step == 1:
        os.kill(os.getpid(), signal.SIGSEGV)
dist.destroy_process_group()
print(f"rank {rank} done", flush=True)
