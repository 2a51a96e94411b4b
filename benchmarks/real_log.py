"""Generate a big torchrun log from REAL captured lines, multiplied over ranks, with one rank failing mid-run.

Every line is a real captured line with its variable parts rewritten per rank:

- NCCL init chatter: the ``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=ALL`` capture of a healthy NCCL 2.28.9 run on an
  H200 (``fixtures/h200-nccl-2.28.9/01_ok_subsys_all``: plugin and ``dlvsym`` lines, ``Cuda Alloc`` /
  ``Cuda Host Alloc``, RAS, topology dump ``30 : GPU/0-60``, per-channel ``Ring``/``Tree``/``Channel NN/64``,
  ``Trees [0] ...``, ``Init COMPLETE``, ``Init timings``), or, with ``--flavor 2.21``, the NCCL 2.21.5 lines of
  ``fixtures/cases/syn_healthy_8rank_socket``; hosts, pids, tids, devices, bus ids, IPs, pointers, ranks and
  channel counts (16 or 32 per node) vary per rank; the per-peer transport lines use the transport texts found in
  the fixtures (``via P2P/IPC`` inside a node, ``[send] via NET/IB/0`` / ``[receive] via NET/IB/0`` between
  nodes). ``--timestamps`` adds NCCL 2.26+'s ``NCCL_DEBUG_TIMESTAMP_FORMAT`` head (``fixtures/.../09_timestamp``).
- Training output: ``[rankN]:step ... loss ...`` and, with SUBSYS=ALL, NCCL's per-call ``AllReduce: opCount ...``
  line (``fixtures/cases/h200_healthy_multi_coll``) for every rank and step.
- The failure, in the middle of the training (``--fail-at``, default 0.6 of the steps): the culprit's real
  OOM traceback (``fixtures/h200-nccl-2.28.9/06_oom``), then the survivors' remaining steps up to the collective
  that hangs, then each survivor's real watchdog-timeout block (``fixtures/cases/h200_watchdog_timeout``: the
  ``[rankN]:[E...]`` lines, the C++ ``Exception raised from`` / ``frame #`` trace and ``terminate called``), then
  torchelastic's ``ChildFailedError`` block listing every failed rank.

    python benchmarks/real_log.py --ranks 1000 -o /tmp/real-1k.log
    python benchmarks/real_log.py --ranks 3000 --steps 300 -o /tmp/real-3k.log
"""
from __future__ import annotations

import argparse
import random
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures"
INIT_H200 = FIX / "h200-nccl-2.28.9" / "01_ok_subsys_all" / "log.txt"
INIT_221 = FIX / "cases" / "syn_healthy_8rank_socket" / "log.txt"
COLL = FIX / "cases" / "h200_healthy_multi_coll" / "log.txt"
OOM = FIX / "h200-nccl-2.28.9" / "06_oom" / "log.txt"
WATCHDOG = FIX / "cases" / "h200_watchdog_timeout" / "log.txt"
TIMESTAMPED = FIX / "h200-nccl-2.28.9" / "09_timestamp" / "log.txt"

GPUS_PER_HOST = 8
BUS_IDS = ["18000", "2a000", "3a000", "5d000", "9a000", "ab000", "ba000", "db000"]
_PREFIX = re.compile(r"^(?:\[[^\]]*\] )?([\w.-]+):(\d+):(\d+) \[(\d+)\] NCCL (INFO|WARN) (.*)$")
_PTR = re.compile(r"0x[0-9a-f]{6,16}")
# Per-channel lines: regenerated per rank with its own neighbours and channel count (formats as captured).
_PER_CHANNEL = re.compile(r"^(?:Ring \d+ : |Tree \d+ : |Channel \d+/\d+ : |\s*\d+ : (?:GPU|NET)/|Trees \[)")
_TRANSPORTS = ("via P2P/IPC", "[send] via NET/IB/0", "[receive] via NET/IB/0", "via SHM/direct/direct",
               "[send] via NET/Socket/0")


def _read(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines()


def _nccl_bodies(path: Path, stop: str | None) -> list[tuple[int, str]]:
    """(tid offset from pid, INFO body) of one captured rank's lines, up to and including ``stop``."""
    out = []
    for line in _read(path):
        m = _PREFIX.match(line)
        if not m or m.group(5) != "INFO" or m.group(2) != _first_pid(path):
            continue
        out.append((int(m.group(3)) - int(m.group(2)), m.group(6)))
        if stop and stop in m.group(6):
            # keep "Init timings" right after Init COMPLETE
            continue
    if stop:
        end = next(i for i, (_, b) in enumerate(out) if stop in b)
        tail = [x for x in out[end + 1:end + 2] if x[1].startswith("Init timings")]
        out = out[:end + 1] + tail
    return out


_PIDS: dict[Path, str] = {}


def _first_pid(path: Path) -> str:
    if path not in _PIDS:
        for line in _read(path):
            m = _PREFIX.match(line)
            if m:
                _PIDS[path] = m.group(2)
                break
    return _PIDS[path]


class Rank:
    __slots__ = ("r", "n", "host", "node", "dev", "pid", "bus", "ip", "salt", "channels", "comm")

    def __init__(self, r: int, n: int, rng: random.Random):
        self.r, self.n = r, n
        self.node = r // GPUS_PER_HOST
        self.host = f"gpu-node-{self.node:04d}.cluster.internal"
        self.dev = r % GPUS_PER_HOST
        self.pid = 2000 + rng.randint(0, 60000)
        self.bus = BUS_IDS[self.dev]
        self.ip = f"10.{self.node // 256}.{self.node % 256}.{self.dev + 10}"
        self.salt = rng.getrandbits(24) << 12
        self.channels = 32 if self.node % 2 == 0 else 16
        self.comm = None

    def ptr(self, m: re.Match) -> str:
        return f"0x{int(m.group(0), 16) + self.salt:x}"


def rewrite(body: str, k: Rank, commid: str) -> str:
    body = re.sub(r"commId 0x[0-9a-f]+", "commId " + commid, body)
    head, sep, tail = body.partition("commId ")
    body = _PTR.sub(k.ptr, head) + sep + tail
    body = re.sub(r"\brank \d+ nranks \d+\b", f"rank {k.r} nranks {k.n}", body)
    body = re.sub(r"\brank \d+ nRanks \d+ nNodes \d+ localRanks \d+ localRank \d+",
                  f"rank {k.r} nRanks {k.n} nNodes {(k.n + GPUS_PER_HOST - 1) // GPUS_PER_HOST} "
                  f"localRanks {GPUS_PER_HOST} localRank {k.dev}", body)
    body = re.sub(r"cudaDev \d+ nvmlDev \d+ busId \w+", f"cudaDev {k.dev} nvmlDev {k.dev} busId {k.bus}", body)
    body = re.sub(r"cudaDev \d+ busId \w+", f"cudaDev {k.dev} busId {k.bus}", body)
    body = re.sub(r"\b(?:192\.0\.2\.\d+|10\.1\.0\.\d+)\b", k.ip, body)
    body = re.sub(r"GPU/0-60", f"GPU/{k.dev}-{k.bus}", body)
    body = re.sub(r"for GPU \d+", f"for GPU {k.dev}", body)
    body = re.sub(r"Device 0 CPU core \d+", f"Device {k.dev} CPU core {k.dev * 4 + 3}", body)
    body = re.sub(r"pid \d+, GPU \d+", f"pid {k.pid}, GPU {k.dev}", body)
    body = re.sub(r"UDS: Creating service thread comm (\S+) rank \d+", rf"UDS: Creating service thread comm \1 rank {k.r}", body)
    return body


def channel_lines(k: Rank, ranks: list[Rank], version: str) -> list[tuple[int, str]]:
    """Per-channel topology/ring/tree/transport lines of one rank, in NCCL's formats (tid offset, body)."""
    n, r = k.n, k.r
    nxt, prv = ranks[(r + 1) % n], ranks[(r - 1) % n]
    c_total = k.channels * 2
    out: list[tuple[int, str]] = []
    if version == "2.28":
        out.append((0, f"Pattern 4, crossNic 0, nChannels {k.channels}, bw 40.000000/40.000000, type NVL/PIX, "
                       "sameChannels 1"))
        for c in range(k.channels):
            out.append((0, f"{c:2d} : NET/0-0 GPU/{k.dev}-{k.bus} NET/0-0" if k.dev in (0, 7)
                        else f"{c:2d} : GPU/{k.dev}-{k.bus}"))
        for c in range(c_total):
            out.append((0, f"Tree {c} : {prv.r if k.dev else -1} -> {r} -> {nxt.r if k.dev != 7 else -1}/-1/-1"))
            out.append((0, f"Ring {c:02d} : {prv.r} -> {r} -> {nxt.r}"))
        if r == 0:
            ring = " ".join(str(i) for i in range(n))
            for c in range(c_total):
                out.append((0, f"Channel {c:02d}/{c_total} : {ring}"))
        trees = " ".join(f"[{c}] {nxt.r if k.dev != 7 else -1}/-1/-1->{r}->{prv.r if k.dev else -1}"
                         for c in range(c_total))
        out.append((0, "Trees " + trees))
    else:
        for c in range(min(4, k.channels)):
            out.append((0, f"Channel {c:02d}/{k.channels} :    " + "   ".join(str((r + i) % n) for i in range(8))))
        out.append((0, "Trees " + " ".join(f"[{c}] {nxt.r}/-1/-1->{r}->{prv.r}" for c in range(k.channels))))
    # transports: one line per channel to the next rank (and from the previous one across nodes)
    for c in range(k.channels):
        if nxt.node == k.node:
            out.append((53, f"Channel {c:02d}/0 : {r}[{k.dev}] -> {nxt.r}[{nxt.dev}] via P2P/IPC"))
        else:
            out.append((53, f"Channel {c:02d}/0 : {r}[{k.dev}] -> {nxt.r}[{nxt.dev}] [send] via NET/IB/0"))
        if prv.node != k.node:
            out.append((53, f"Channel {c:02d}/0 : {prv.r}[{prv.dev}] -> {r}[{k.dev}] [receive] via NET/IB/0"))
    out.append((0, "Connected all rings, use ring PXN 0 GDR 1" if version == "2.28" else "Connected all rings"))
    out.append((0, "Connected all trees"))
    return out


def init_lines(k: Rank, ranks: list[Rank], template: list[tuple[int, str]], version: str, commid: str,
               stamp: str | None) -> list[str]:
    out = []
    done_channels = False
    for off, body in template:
        if _PER_CHANNEL.match(body) or body.startswith("Pattern ") or body.startswith("Connected all"):
            if not done_channels:
                done_channels = True
                for off2, b2 in channel_lines(k, ranks, version):
                    out.append(_prefix(k, off2, stamp) + b2)
            continue
        if version != "2.28" and body.startswith("ncclCommInitRank") and body.endswith("Init COMPLETE") \
                and not done_channels:
            done_channels = True
            for off2, b2 in channel_lines(k, ranks, version):
                out.append(_prefix(k, off2, stamp) + b2)
        out.append(_prefix(k, off, stamp) + rewrite(body, k, commid))
    return out


def _prefix(k: Rank, tid_off: int, stamp: str | None) -> str:
    head = f"[{stamp}] " if stamp else ""
    return f"{head}{k.host}:{k.pid}:{k.pid + tid_off} [{k.dev}] NCCL INFO "


def oom_lines(k: Rank) -> list[str]:
    out = []
    for line in _read(OOM):
        if line.startswith("[rank0]: "):
            out.append(f"[rank{k.r}]: " + line[len("[rank0]: "):].replace("GPU 0 ", f"GPU {k.dev} "))
    return out


def watchdog_block(k: Rank, seq: int) -> list[str]:
    """One survivor's real watchdog-timeout output (rank, seq and pointers rewritten)."""
    out = []
    for line in _read(WATCHDOG):
        if "NCCL INFO" in line or line.startswith(("E1129 15:23:31.797", "Traceback", "  File", "    ", "torch.",
                                                    "=", "/", "-", "Failures", "Root Cause", "[0]:", "  time",
                                                    "  host", "  rank", "  exitcode", "  error_file", "  traceback",
                                                    "rc=")):
            continue
        line = line.replace("[rank0]:", f"[rank{k.r}]:").replace("Rank 0", f"Rank {k.r}")
        line = line.replace("SeqNum=1,", f"SeqNum={seq},").replace("work sequence id: 1", f"work sequence id: {seq}")
        line = line.replace("last enqueued work: 1,", f"last enqueued work: {seq},")
        out.append(line)
    while out and not out[-1].strip():
        out.pop()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=400, help="training steps (each: one step line per 8 ranks, "
                                                            "one AllReduce call line per rank)")
    ap.add_argument("--fail-at", type=float, default=0.6, help="where in the training the culprit fails")
    ap.add_argument("--culprit", type=int, default=None, help="the failing rank (default: a middle rank)")
    ap.add_argument("--flavor", choices=("2.28", "2.21"), default="2.28")
    ap.add_argument("--timestamps", action="store_true", help="NCCL_DEBUG_TIMESTAMP_FORMAT heads on NCCL lines")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("-o", "--output", default="-")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    n = args.ranks
    culprit = n // 2 + 3 if args.culprit is None else args.culprit
    ranks = [Rank(r, n, rng) for r in range(n)]
    commid = f"0x{rng.getrandbits(64):016x}"
    if args.flavor == "2.28":
        template = _nccl_bodies(INIT_H200, "Init COMPLETE")
    else:
        template = _nccl_bodies(INIT_221, "Init COMPLETE")
    coll = next(b for _, b in _nccl_bodies(COLL, None) if b.startswith("AllReduce: opCount"))
    out = sys.stdout if args.output == "-" else open(args.output, "w", encoding="utf-8", buffering=1 << 20)
    written = 0
    stamp = "2026-11-29 13:53:31" if args.timestamps else None

    def emit(lines: list[str]) -> None:
        nonlocal written
        out.write("\n".join(lines))
        out.write("\n")
        written += len(lines)

    if args.flavor == "2.21":
        emit(["NCCL version 2.21.5+cuda12.4"])
    # init: concurrent ranks write one stream in small bursts (a node's ranks at a time, round robin)
    queues = [init_lines(k, ranks, template, args.flavor, commid, stamp) for k in ranks]
    pos = [0] * n
    live = list(range(n))
    while live:
        nxt = []
        for r in live:
            burst = rng.randint(1, 6)
            emit(queues[r][pos[r]:pos[r] + burst])
            pos[r] += burst
            if pos[r] < len(queues[r]):
                nxt.append(r)
            else:
                queues[r] = []
        live = nxt
    fail_step = int(args.steps * args.fail_at)
    for step in range(1, args.steps + 1):
        block = []
        for k in ranks:
            if step > fail_step and k.r == culprit:
                continue
            body = re.sub(r"opCount \d+", f"opCount {step - 1:x}", coll)
            body = _PTR.sub(k.ptr, body).replace("[nranks=1]", f"[nranks={n}]")
            block.append(_prefix(k, 0, stamp) + body)
            if k.dev == 0:
                block.append(f"[rank{k.r}]:step {step} loss {2.5 / (1 + step / 1e3):.4f} lr 3.0e-04 tokens/s "
                             f"{rng.randint(9000, 12999)} grad_norm {rng.random():.3f}")
        emit(block)
        if step == fail_step:
            emit(oom_lines(ranks[culprit]))
            break
    # survivors hang in the next collective, then the watchdog fires on each of them
    seq = fail_step + 1
    for k in ranks:
        if k.r != culprit:
            emit(watchdog_block(k, seq))
    emit([f"E1129 15:23:31.797000 418 torch/distributed/elastic/multiprocessing/api.py:986] failed (exitcode: 1) "
          f"local_rank: {ranks[culprit].dev} (pid: {ranks[culprit].pid}) of binary: /opt/torch/.venv/bin/python"])
    tail = [
        "Traceback (most recent call last):",
        '  File "/opt/torch/.venv/bin/torchrun", line 10, in <module>',
        "    sys.exit(main())",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "train.py FAILED",
        "------------------------------------------------------------",
        "Failures:",
    ]
    for k in ranks:
        if k.r != culprit:
            tail += [f"[{k.r}]:", "  time      : 2026-11-29_15:23:31", f"  host      : {k.host}",
                     f"  rank      : {k.r} (local_rank: {k.dev})", f"  exitcode  : -6 (pid: {k.pid})",
                     "  error_file: <N/A>", f"  traceback : Signal 6 (SIGABRT) received by PID {k.pid}"]
    c = ranks[culprit]
    tail += ["------------------------------------------------------------", "Root Cause (first observed failure):",
             f"[{c.r}]:", "  time      : 2026-11-29_15:13:31", f"  host      : {c.host}",
             f"  rank      : {c.r} (local_rank: {c.dev})", f"  exitcode  : 1 (pid: {c.pid})",
             "  error_file: <N/A>",
             "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
             "============================================================"]
    emit(tail)
    if out is not sys.stdout:
        out.close()
    print(f"wrote {written} lines; culprit rank {culprit} (cuda_oom) at step {fail_step}, {n - 1} victims",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
