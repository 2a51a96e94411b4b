"""Generate a realistic large torchrun log: N ranks' NCCL init chatter, training output, one failure + cascade.

The line formats are those of NCCL 2.28.9 / torch 2.11 as captured in fixtures/h200-nccl-2.28.9 (hosts, pids,
ranks, bus ids and pointers vary per rank, so most bodies are distinct strings, as in a real job).

    python benchmarks/generate_log.py --ranks 1000 --lines 2000000 -o /tmp/big.log
"""
from __future__ import annotations

import argparse
import random
import sys

GPUS_PER_HOST = 8
BUS_IDS = ["18000", "2a000", "3a000", "5d000", "9a000", "ab000", "ba000", "db000"]


def init_lines(rank: int, nranks: int, host: str, pid: int, rng: random.Random, p2p_peers: int = 0) -> list[str]:
    dev = rank % GPUS_PER_HOST
    p = f"{host}:{pid}:{pid} [{dev}] NCCL INFO "
    comm = f"0x{rng.getrandbits(36):x}"
    nxt, prv = (rank + 1) % nranks, (rank - 1) % nranks
    bus = BUS_IDS[dev]
    out = [
        p + "ENV/Plugin: Could not find: libnccl-env.so",
        p + f"Bootstrap: Using eth0:10.{rank // 2048}.{(rank // 8) % 256}.{rank % 8 + 1}<0>",
        p + "cudaDriverVersion 13000",
        p + "NCCL version 2.28.9+cuda13.0",
        p + "Comm config Blocking set to 1",
        p + "NET/Plugin: Could not find: libnccl-net.so",
        p + f"NET/IB : Using [0]mlx5_{dev}:1/IB [RO]; OOB eth0:10.0.{(rank // 8) % 256}.{rank % 8 + 1}<0>",
        p + "Initialized NET plugin IB",
        p + "Assigned NET plugin IB to comm",
        p + "Using network IB",
        p + f"ncclCommInitRankConfig comm {comm} rank {rank} nranks {nranks} cudaDev {dev} nvmlDev {dev} "
            f"busId {bus} commId 0x5c1e7a2b9d04f311 - Init START",
        p + f"Bootstrap timings total 0.{rng.randint(1000, 99999):06d} (create 0.000025, send 0.000101, "
            f"recv 0.000238, ring 0.000001, delay 0.000001)",
        p + f"comm {comm} rank {rank} nRanks {nranks} nNodes {max(1, nranks // GPUS_PER_HOST)} "
            f"localRanks {GPUS_PER_HOST} localRank {dev} MNNVL 0",
        p + f"Trees [0] {nxt}/-1/-1->{rank}->{prv} [1] {nxt}/-1/-1->{rank}->{prv}",
        p + "P2P Chunksize set to 524288",
    ]
    for ch in range(8):
        if dev != GPUS_PER_HOST - 1:
            out.append(p.replace(f":{pid} [", f":{pid + 40} [") +
                       f"Channel {ch:02d}/0 : {rank}[{dev}] -> {nxt}[{(dev + 1) % 8}] via P2P/CUMEM/read")
        else:
            out.append(p.replace(f":{pid} [", f":{pid + 40} [") +
                       f"Channel {ch:02d}/0 : {rank}[{dev}] -> {nxt}[0] [send] via NET/IB/{dev}/GDRDMA")
    # p2p connections (alltoall / pipeline-parallel jobs connect to many peers), as NCCL 2.28 logs them
    for k in range(p2p_peers):
        peer = (rank + 1 + k * 7) % nranks
        kind = "P2P/CUMEM/read" if peer // GPUS_PER_HOST == rank // GPUS_PER_HOST else f"[send] via NET/IB/{dev}/GDRDMA"
        via = kind if kind.startswith("[") else "via " + kind
        out.append(p.replace(f":{pid} [", f":{pid + 41} [") +
                   f"Channel {k % 32:02d}/1 : {rank}[{dev}] -> {peer}[{peer % GPUS_PER_HOST}] {via}")
    out += [
        p + "Connected all rings, use ring PXN 0 GDR 1",
        p + "Connected all trees",
        p + "32 coll channels, 32 collnet channels, 0 nvls channels, 32 p2p channels, 32 p2p channels per peer",
        p + f"ncclCommInitRankConfig comm {comm} rank {rank} nranks {nranks} cudaDev {dev} nvmlDev {dev} "
            f"busId {bus} commId 0x5c1e7a2b9d04f311 - Init COMPLETE",
        p + f"Init timings - ncclCommInitRankConfig: rank {rank} nranks {nranks} total 1.{rng.randint(0, 99):02d} "
            f"(kernels 0.18, alloc 0.01, bootstrap 0.02, allgathers 0.01, topo 0.45, graphs 0.00, connections 0.31, "
            f"rest 0.02)",
    ]
    return out


def failure_lines(culprit: int, nranks: int, hosts: list[str], pids: list[int]) -> list[str]:
    r = culprit
    out = [
        f"[rank{r}]: Traceback (most recent call last):",
        f'[rank{r}]:   File "/workspace/train.py", line 211, in <module>',
        f"[rank{r}]:     loss = model(batch).loss",
        f'[rank{r}]:   File "/workspace/model.py", line 88, in forward',
        f"[rank{r}]:     h = self.mlp(h)",
        f"[rank{r}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB. GPU {r % 8} has a total "
        f"capacity of 139.80 GiB of which 2.19 GiB is free. Including non-PyTorch memory, this process has 137.60 GiB "
        f"memory in use. Of the allocated memory 130.02 GiB is allocated by PyTorch, and 6.36 GiB is reserved by "
        f"PyTorch but unallocated.",
    ]
    for v in range(nranks):
        if v == r:
            continue
        out.append(
            f"[rank{v}]:[E1129 14:02:{v % 60:02d}.{v:09d} ProcessGroupNCCL.cpp:688] [Rank {v}] Watchdog caught "
            f"collective operation timeout: WorkNCCL(SeqNum=5021, OpType=ALLREDUCE, NumelIn=262144000, "
            f"NumelOut=262144000, Timeout(ms)=600000) ran for 600071 milliseconds before timing out.")
    out.append(f"E1129 14:02:31.880000 517 torch/distributed/elastic/multiprocessing/api.py:986] failed (exitcode: 1) "
               f"local_rank: {r % 8} (pid: {pids[r]}) of binary: /usr/bin/python3")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=1000)
    ap.add_argument("--lines", type=int, default=2_000_000, help="approximate total line count")
    ap.add_argument("--culprit", type=int, default=None, help="rank that fails (default: a middle rank)")
    ap.add_argument("--nccl-share", type=float, default=0.5, help="fraction of lines that are NCCL INFO chatter")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("-o", "--output", default="-")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    n = args.ranks
    culprit = n // 2 + 3 if args.culprit is None else args.culprit
    hosts = [f"gpu-node-{r // GPUS_PER_HOST:04d}" for r in range(n)]
    pids = [10000 + rng.randint(0, 50000) for _ in range(n)]
    out = sys.stdout if args.output == "-" else open(args.output, "w", encoding="utf-8")
    written = 0
    # Init chatter, interleaved in small bursts as concurrent ranks write one stream.
    peers = max(0, int(args.lines * args.nccl_share / n) - 36)
    queues = [init_lines(r, n, hosts[r], pids[r], rng, peers) for r in range(n)]
    while any(queues):
        for q in queues:
            burst = q[:3]
            del q[:3]
            for line in burst:
                out.write(line + "\n")
            written += len(burst)
    tail = failure_lines(culprit, n, hosts, pids)
    step = 0
    while written < args.lines - len(tail):
        step += 1
        r = step % n
        out.write(f"[rank{r}]:step {step} loss {2.5 / (1 + step / 1e5):.4f} lr 3.0e-04 tokens/s {rng.randint(9, 12)}"
                  f"{rng.randint(100, 999)} grad_norm {rng.random():.3f}\n")
        written += 1
    for line in tail:
        out.write(line + "\n")
    written += len(tail)
    if out is not sys.stdout:
        out.close()
    print(f"wrote {written} lines; culprit rank {culprit} (cuda_oom), {n - 1} victims", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
