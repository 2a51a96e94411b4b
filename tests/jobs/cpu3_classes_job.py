"""Small real gloo jobs for tests/test_cpu3_classes.py (the classes behind fixtures/blind_cpu3's misses).

    torchrun --nproc_per_node=3 cpu3_classes_job.py ddp_frozen     # ODD_RANK (default 1) freezes a layer
    torchrun --nproc_per_node=3 cpu3_classes_job.py ddp_hidden     # ODD_RANK builds a wider hidden layer
    torchrun --nproc_per_node=2 cpu3_classes_job.py dl_retry       # rank 1's download is refused twice, handled
    torchrun --nproc_per_node=2 cpu3_classes_job.py dl_fail        # ... and then re-raised: the job fails
    MASTER_PORT=... python cpu3_classes_job.py store_retry         # mp.spawn; rank 1's store.wait times out, retried
    MASTER_PORT=... python cpu3_classes_job.py store_host_exit     # multiprocessing.Process; rank 0 (store host) leaves
    torchrun --nproc_per_node=2 cpu3_classes_job.py help_quote     # rank 0's usage text quotes a traceback
    torchrun --nproc_per_node=3 cpu3_classes_job.py barrier_after_destroy  # ODD_RANK: barrier() after destroy
"""
from __future__ import annotations

import datetime
import gc
import logging
import os
import sys
import time
import traceback
import urllib.request

import torch
import torch.distributed as dist
import torch.nn as nn

USAGE = """usage: cpu3_classes_job.py MODE

Troubleshooting:
  When a run stops with

      Traceback (most recent call last):
        File "train.py", line 40, in <module>
      RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:29500

  look at the rank that failed first; the others only lost their peer.
"""


def _log(rank: int) -> logging.LoggerAdapter:
    logging.basicConfig(format="%(asctime)s [rank%(rank)s] %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    return logging.LoggerAdapter(logging.getLogger("job"), {"rank": rank})


def _train(model: nn.Module, rank: int, steps: int = 3) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        loss = model(torch.randn(8, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)


def _model(hidden: int = 16) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 2))


def _download(log: logging.LoggerAdapter, reraise: bool) -> None:
    for attempt in (1, 2):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{os.environ.get('DOWN_PORT', '29599')}/vocab.json", timeout=2)
            return
        except OSError:
            if reraise and attempt == 2:
                raise
            log.warning("vocab download failed (attempt %d/2), retrying", attempt, exc_info=True)
            time.sleep(0.2)
    log.info("using the cached vocab")


def torchrun_mode(mode: str) -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
    rank = dist.get_rank()
    odd = int(os.environ.get("ODD_RANK", "1"))
    model = _model(48 if mode == "ddp_hidden" and rank == odd else 16)
    if mode == "ddp_frozen" and rank == odd:
        for p in model[0].parameters():
            p.requires_grad_(False)
    if mode in ("dl_retry", "dl_fail") and rank == 1:
        _download(_log(rank), reraise=mode == "dl_fail")
    if mode == "help_quote" and rank == 0:
        print(USAGE, flush=True)
    _train(nn.parallel.DistributedDataParallel(model), rank)
    if mode == "barrier_after_destroy":  # every rank meets in a barrier; rank ODD_RANK tore its group down first
        if rank == odd:
            dist.destroy_process_group()
        dist.barrier()
    if rank == 0:
        print("training finished", flush=True)
    _teardown()


def _teardown() -> None:
    """The end of a job that succeeded: every rank done with its last collective before any rank tears its group
    down (torch 2.13's gloo otherwise aborts now and then at exit under load: "terminate called without an active
    exception", exit -6, which would make a healthy run a failing one)."""
    gc.collect()  # the DDP model (its reducer holds the group) is gone before the group is
    dist.barrier()
    dist.destroy_process_group()


def spawned(rank: int, world: int) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=20))
    store = dist.distributed_c10d._get_default_store()
    log = _log(rank)
    if rank == 0:  # the key comes once rank 1 has timed out at least once (an event, not a sleep: any machine speed)
        store.wait(["retried"], datetime.timedelta(seconds=120))
        store.set("vocab_ready", "1")
    else:
        for attempt in range(1, 31):
            try:
                store.wait(["vocab_ready"], datetime.timedelta(seconds=1))
                log.info("vocab ready after %d attempt(s)", attempt)
                break
            except Exception:
                log.warning("waiting for vocab_ready timed out (attempt %d/30), retrying", attempt)
                traceback.print_exc()
                store.set("retried", "1")
    _train(nn.parallel.DistributedDataParallel(_model()), rank)
    if rank == 0:
        print("training finished", flush=True)
    _teardown()


def proc_main(rank: int, world: int, port: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=10))
    _train(nn.parallel.DistributedDataParallel(_model()), rank)
    if rank == 0:
        os._exit(0)  # the TCPStore's host leaves, silently
    dist.distributed_c10d._get_default_store().get("eval_split")


if __name__ == "__main__":
    if sys.argv[1] == "store_host_exit":  # multiprocessing.Process, init_method tcp://: rank 0 hosts the store
        import multiprocessing

        procs = [multiprocessing.Process(target=proc_main, args=(r, 3, os.environ["MASTER_PORT"])) for r in range(3)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        print(f"workers exited with codes {[p.exitcode for p in procs]}", flush=True)
        sys.exit(max(abs(p.exitcode or 0) for p in procs))
    elif sys.argv[1] == "store_retry":
        import torch.multiprocessing as mp

        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        mp.spawn(spawned, args=(2,), nprocs=2)
    else:
        torchrun_mode(sys.argv[1])
