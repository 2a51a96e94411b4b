"""The fixed reproduction program: launches ranks with torchrun (``--launch``) or acts as one rank."""
from __future__ import annotations

import argparse
import os
import shlex
import socket
import subprocess
import sys
from typing import Any

from ..errors import ReproduceError
from .envcheck import validate_env
from .plan import BACKENDS, DTYPES, OPS, SCENARIOS, VARIANTS, WORKER_MODULE, Plan

# This is a program, not library code: its own output is the log that the analysis reads.


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m {WORKER_MODULE}",
                                description="Re-create a diagnosed NCCL / torch.distributed failure on this machine.")
    p.add_argument("--launch", action="store_true", help="start torchrun with --ranks ranks of this program")
    p.add_argument("--plan", metavar="FILE", help="JSON plan (as written by nccl-analyze --reproduce)")
    p.add_argument("--scenario", choices=sorted(SCENARIOS))
    p.add_argument("--variant", choices=VARIANTS, default="fault")
    p.add_argument("--backend", choices=BACKENDS, default="gloo")
    p.add_argument("--ranks", dest="nproc", type=int, default=1)
    p.add_argument("--op", choices=OPS, default="all_reduce")
    p.add_argument("--dtype", choices=DTYPES, default="float32")
    p.add_argument("--numel", type=int, default=1 << 20)
    p.add_argument("--root", type=int, default=0)
    p.add_argument("--culprit", type=int, default=0)
    p.add_argument("--pg-timeout", type=float, default=20.0)
    p.add_argument("--sleep", dest="sleep_s", type=float, default=0.0)
    p.add_argument("--mem-fraction", type=float, default=0.5)
    return p


def plan_from_args(argv: list[str]) -> tuple[Plan, bool]:
    """Parse and validate the worker's command line; returns (plan, launch)."""
    args = _parser().parse_args(argv)
    if args.plan:
        with open(args.plan, encoding="utf-8") as fh:
            return Plan.from_json(fh.read()), args.launch
    if not args.scenario:
        raise ReproduceError("give --plan FILE or --scenario")
    plan = Plan(scenario=args.scenario, backend=args.backend, variant=args.variant, nproc=args.nproc, op=args.op,
                dtype=args.dtype, numel=args.numel, root=args.root, culprit=args.culprit,
                pg_timeout=args.pg_timeout, sleep_s=args.sleep_s, mem_fraction=args.mem_fraction)
    plan.check()
    return plan, args.launch


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (bind to port 0 and let the kernel choose)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def launch(plan: Plan) -> int:
    """Run torchrun with ``plan.nproc`` ranks of this program; stage what must exist before it starts."""
    env = dict(os.environ)
    kept, _ = validate_env(plan.env)
    env.update(kept)
    env.setdefault("NCCL_DEBUG", "INFO")
    env.setdefault("PYTHONUNBUFFERED", "1")
    holder = None
    if plan.scenario == "port_conflict" and plan.variant == "fault":
        # Our own listening socket holds the port that rank 0's store is then told to use.
        holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        print(f"[reproduce] holding 127.0.0.1:{port} with a listening socket (port_conflict)", flush=True)
    else:
        port = free_port()
    refuser = None
    if plan.scenario == "rendezvous_unreachable" and plan.variant == "fault":
        # A socket of ours bound to the port and never listening: nobody else can take the port during the run,
        # and every connection to it is refused (so "nothing listens there" stays true until the run ends).
        refuser = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        refuser.bind(("127.0.0.1", 0))
        closed = refuser.getsockname()[1]
        env["NCCL_ANALYZER_CLOSED_PORT"] = str(closed)
        print(f"[reproduce] ranks will connect to 127.0.0.1:{closed}, bound by us and not listening "
              "(connections are refused)", flush=True)
    argv = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={plan.nproc}", "--nnodes=1",
            "--node_rank=0", "--master_addr=127.0.0.1", f"--master_port={port}", "--max_restarts=0",
            "-m", WORKER_MODULE, *plan.worker_args()]
    print("[reproduce] " + shlex.join(["python" if a == sys.executable else a for a in argv]), flush=True)
    try:
        return subprocess.call(argv, env=env)
    finally:
        for sock in (holder, refuser):
            if sock is not None:
                sock.close()


# ---------------------------------------------------------------------------------------------------------------
# One rank
# ---------------------------------------------------------------------------------------------------------------

def _other_op(op: str) -> str:
    return "broadcast" if op != "broadcast" else "all_reduce"


def _collective(dist: Any, torch: Any, op: str, t: Any, root: int, world: int) -> None:
    if op == "all_reduce":
        dist.all_reduce(t)
    elif op == "broadcast":
        dist.broadcast(t, src=root)
    elif op == "reduce":
        dist.reduce(t, dst=root)
    elif op == "all_gather":
        out = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(out, t)
    elif op == "reduce_scatter":
        chunks = [t.clone() for _ in range(world)]
        if getattr(dist, "get_backend")() == "gloo":
            dist.all_reduce(t)  # gloo has no reduce_scatter; the nearest collective runs instead
        else:
            dist.reduce_scatter(t, chunks)
    elif op == "all_to_all":
        if getattr(dist, "get_backend")() == "gloo":
            dist.all_reduce(t)  # gloo has no all_to_all; the nearest collective runs instead
        else:
            n = (t.numel() // world) * world or world
            src = t.flatten()[:n] if t.numel() >= n else t.new_zeros(n)
            dst = torch.empty_like(src)
            dist.all_to_all_single(dst, src)
    else:
        dist.barrier()


def rank_main(plan: Plan) -> int:
    """Run the plan as one rank started by torchrun (RANK, LOCAL_RANK, WORLD_SIZE set)."""
    import datetime
    import time

    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    local = int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])
    fault = plan.variant == "fault"
    scen = plan.scenario
    culprit = min(plan.culprit, world - 1)
    kwargs: dict[str, Any] = {"timeout": datetime.timedelta(seconds=plan.pg_timeout)}
    device = torch.device("cpu")
    if plan.backend == "nccl":
        dev = 0 if scen == "duplicate_gpu" and fault else local
        torch.cuda.set_device(dev)
        device = torch.device("cuda", dev)
        kwargs["device_id"] = device  # eager NCCL init: init-time failures show where they happen
    if scen == "rendezvous_unreachable" and fault:
        port = int(os.environ["NCCL_ANALYZER_CLOSED_PORT"])
        kwargs.update(init_method=f"tcp://127.0.0.1:{port}", rank=rank + 1, world_size=world + 1)
    print(f"[reproduce] rank {rank}/{world} scenario={scen} variant={plan.variant} backend={plan.backend}",
          flush=True)
    dist.init_process_group(plan.backend, **kwargs)
    dtype = getattr(torch, plan.dtype)
    t = torch.ones(plan.numel, dtype=dtype, device=device)
    _collective(dist, torch, "all_reduce", torch.ones(4, device=device), 0, world)  # warm-up: everyone connected

    hog = []
    if scen == "cuda_oom" and rank == culprit:
        if fault:
            block = 16 << 30
            while True:  # allocate until the allocator raises torch.OutOfMemoryError (left uncaught on purpose)
                hog.append(torch.empty(block, dtype=torch.uint8, device=device))
        else:
            free, _total = torch.cuda.mem_get_info(device)
            hog.append(torch.empty(int(free * plan.mem_fraction), dtype=torch.uint8, device=device))
    if scen == "cuda_error" and rank == culprit:
        x = torch.ones(4, device=device)
        idx = torch.tensor([1 << 40 if fault else 1], device=device)
        x[idx] = 1.0
        torch.cuda.synchronize()
    if scen == "invalid_usage" and fault:
        dist.broadcast(t, src=world)  # a root outside the world
    if scen in ("peer_exit", "app_exception", "watchdog_timeout") and rank == culprit:
        if fault and scen == "peer_exit":
            print(f"[reproduce] rank {rank} exits now without a word (peer_exit)", flush=True)
            os._exit(1)
        if fault and scen == "app_exception":
            raise RuntimeError(f"rank {rank} failed on purpose before {plan.op} (app_exception reproduction)")
        if scen == "watchdog_timeout" and plan.sleep_s:
            print(f"[reproduce] rank {rank} is late by {plan.sleep_s:g} s", flush=True)
            if plan.backend == "nccl":
                torch.cuda._sleep(int(plan.sleep_s * 2e9))  # ~2e9 cycles a second; blocks the stream
            else:
                time.sleep(plan.sleep_s)
    op = plan.op
    if scen == "collective_mismatch" and fault and rank != 0:
        op = _other_op(op)
    _collective(dist, torch, op, t, plan.root, world)
    if plan.backend == "nccl":
        torch.cuda.synchronize()
    del hog
    dist.destroy_process_group()
    print(f"[reproduce] rank {rank} finished {op} cleanly", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        plan, do_launch = plan_from_args(sys.argv[1:] if argv is None else argv)
    except (ReproduceError, OSError) as exc:
        print(f"nccl_analyzer.reproduce.worker: error: {exc}", file=sys.stderr)
        return 2
    if do_launch:
        return launch(plan)
    if "RANK" not in os.environ:
        print("nccl_analyzer.reproduce.worker: not started by torchrun; add --launch", file=sys.stderr)
        return 2
    return rank_main(plan)


if __name__ == "__main__":
    sys.exit(main())
