"""Mutation fuzzing of real logs through the CLI entry: every input must end with exit 0/1/2, no traceback,
valid JSON.

    python benchmarks/fuzz.py --n 100000            # the long run (prints the figure at the end)
    python benchmarks/fuzz.py --n 200 --seed 7      # a quick look
    python benchmarks/fuzz.py --replay CRASHDIR/x   # re-run one saved crash

Seeds are the real logs under fixtures/ (labeled cases, H200 captures, parse fixtures; never fixtures/blind/).
Each input applies 1-3 mutations (byte flips, truncation, NUL/ANSI/CR/invalid UTF-8, shuffled or duplicated
lines, giant lines, indentation, numbers made odd, lines spliced from another log, gzip whole or cut, a split
into per-rank files) and runs ``nccl-analyze FILES --format json`` (sometimes text -v, markdown or html) in
this process through ``cli.main`` (click's ``CliRunner``), which is ~50x faster than a subprocess. A crash
(another exit status, an exception escaping, a traceback printed, invalid JSON) is saved with its bytes under
``--crash-dir`` and counted. ``tests/test_fuzz.py`` runs the same mutators under Hypothesis with a short budget.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SEED_DIRS = ("fixtures/cases", "fixtures/h200-nccl-2.28.9", "fixtures/hard", "fixtures/parse")
MAX_SEED_BYTES = 256 * 1024
OK_STATUS = (0, 1, 2)


def seed_logs(root: Path = ROOT) -> list[Path]:
    """Real log files to mutate (small enough for many runs a second), in a stable order."""
    out = []
    for d in SEED_DIRS:
        for p in sorted((root / d).rglob("*")):
            if not p.is_file() or any(x.startswith("blind") for x in p.parts) or p.name == "label.json" or p.suffix in (".json", ".md", ".py"):
                continue
            if 0 < p.stat().st_size <= MAX_SEED_BYTES:
                out.append(p)
    return out


# ------------------------------------------------------------------------------------------------ mutators
# Each takes (rng, data) and returns new bytes. ``split`` and ``gzip`` change how the bytes are written.

def byte_flips(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data or b"x")
    for _ in range(rng.randint(1, 32)):
        i = rng.randrange(len(b))
        b[i] = rng.randrange(256)
    return bytes(b)


def truncate(rng: random.Random, data: bytes) -> bytes:
    return data[:rng.randint(0, len(data))]


def drop_head(rng: random.Random, data: bytes) -> bytes:
    return data[rng.randint(0, len(data)):]


_JUNK = (b"\x00", b"\x00\x00\x00", b"\x1b[31m", b"\x1b[0m", b"\x1b]0;title\x07", b"\r", b"\r\n", b"\xff\xfe",
         b"\xc3\x28", b"\xe2\x82", b"\xf0\x9f\x98", b"\x80", b"\x1b[2K\r", b"\x7f", b"\x0c", b"\t", b"\xef\xbb\xbf")


def inject_junk(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 20)):
        i = rng.randint(0, len(b))
        b[i:i] = rng.choice(_JUNK)
    return bytes(b)


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


def shuffle_lines(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    if len(lines) < 2:
        return data
    i = rng.randrange(len(lines))
    j = min(len(lines), i + rng.randint(2, 200))
    part = lines[i:j]
    rng.shuffle(part)
    return b"".join(lines[:i] + part + lines[j:])


def duplicate_lines(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    if not lines:
        return data
    for _ in range(rng.randint(1, 30)):
        i = rng.randrange(len(lines))
        lines[i:i] = [lines[i]] * rng.randint(1, 5)
    return b"".join(lines)


def reverse_lines(rng: random.Random, data: bytes) -> bytes:
    return b"".join(reversed(_lines(data)))


def giant_line(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    i = rng.randint(0, len(lines))
    size = rng.choice((65535, 65536, 65537, 70_000, 150_000, 300_000))
    unit = rng.choice((b"x", b"NCCL WARN ", b"\xe2\x82\xac", b"[rank0]: ", b"0x7f "))
    lines[i:i] = [(unit * (size // len(unit) + 1))[:size] + rng.choice((b"\n", b""))]
    return b"".join(lines)


def indent(rng: random.Random, data: bytes) -> bytes:
    head = rng.choice((b"    ", b"\t", b"> ", b"  > ", b"| ", b"    > ", b"#"))
    every = rng.random() < 0.7
    return b"".join(head + ln if every or rng.random() < 0.5 else ln for ln in _lines(data))


_NUMBER = re.compile(rb"\d+")
_ODD_NUMBERS = (b"-1", b"--1", b"-", b"99999999999999999999999", b"0x", b"1e309", b"nan", b"", b"\xd9\xa3", b"1.2.3",
                b"+-0", b"00000000000000000000001", b"-0", b"\xef\xbc\x91")


def odd_numbers(rng: random.Random, data: bytes) -> bytes:
    spans = [m.span() for m in _NUMBER.finditer(data)]
    if not spans:
        return data
    chosen = sorted(rng.sample(spans, min(len(spans), rng.randint(1, 40))), reverse=True)
    b = bytearray(data)
    for lo, hi in chosen:
        b[lo:hi] = rng.choice(_ODD_NUMBERS)
    return bytes(b)


def odd_tokens(rng: random.Random, data: bytes) -> bytes:
    # Delimiters real parsers lean on: ':' in prefixes, '[' of [rankN], ' - ', '=' of key=value, quotes.
    b = bytearray(data)
    for _ in range(rng.randint(1, 30)):
        if not b:
            break
        i = rng.randrange(len(b))
        c = b[i:i + 1]
        if c in (b":", b"[", b"]", b"=", b" ", b",", b"'", b'"', b"(", b")", b"/", b"."):
            b[i:i + 1] = rng.choice((b"", b"::", b"[", b"]", b"=", b"\n", b" :", c * 3))
    return bytes(b)


@dataclass
class Input:
    """One fuzz input: the files to write (name -> bytes) and the CLI arguments after the paths."""

    files: dict[str, bytes]
    args: list[str]
    ops: list[str] = field(default_factory=list)


MUTATORS: dict[str, Callable[[random.Random, bytes], bytes]] = {
    "byte_flips": byte_flips, "truncate": truncate, "drop_head": drop_head, "inject_junk": inject_junk,
    "shuffle_lines": shuffle_lines, "duplicate_lines": duplicate_lines, "reverse_lines": reverse_lines,
    "giant_line": giant_line, "indent": indent, "odd_numbers": odd_numbers, "odd_tokens": odd_tokens,
}
#: How each input is written: one file, gzip (whole or cut), a split into per-rank files, two logs together.
WRITERS = ("plain", "plain", "plain", "gzip", "gzip_cut", "split", "splice")
FORMATS = (["--format", "json"],) * 6 + (["-v"], ["--format", "json", "-v"], ["--format", "markdown"],
                                         ["--format", "html"])


def _split(rng: random.Random, data: bytes, n: int) -> dict[str, bytes]:
    parts: list[list[bytes]] = [[] for _ in range(n)]
    rank = re.compile(rb"\[rank(\d+)\]|rank (\d+)|\[default(\d+)\]")
    for ln in _lines(data):
        m = rank.search(ln[:200])
        k = int(next(g for g in m.groups() if g)) % n if m else rng.randrange(n)
        parts[k].append(ln)
    return {f"rank{k}.log": b"".join(p) for k, p in enumerate(parts)}


def make_input(rng: random.Random, seeds: list[bytes], ops: list[str] | None = None,
               writer: str | None = None) -> Input:
    """A mutated input from ``seeds`` (raw bytes of real logs), reproducible from ``rng``'s state."""
    data = rng.choice(seeds)
    ops = ops if ops is not None else rng.sample(sorted(MUTATORS), rng.randint(1, 3))
    for op in ops:
        data = MUTATORS[op](rng, data)
    writer = writer or rng.choice(WRITERS)
    args = list(rng.choice(FORMATS))
    if writer == "gzip":
        files = {"log.gz": gzip.compress(data, compresslevel=1)}
    elif writer == "gzip_cut":
        z = gzip.compress(data, compresslevel=1)
        files = {"log.gz": z[:rng.randint(0, len(z))]}
    elif writer == "split":
        files = _split(rng, data, rng.randint(2, 4))
    elif writer == "splice":
        other = MUTATORS[rng.choice(sorted(MUTATORS))](rng, rng.choice(seeds))
        files = {"a.log": data, "b.log": other}
    else:
        files = {"log.txt": data}
    return Input(files, args, ops + [writer])


# ------------------------------------------------------------------------------------------------ running

#: An input that takes longer than this (on a loaded 2-core machine a normal one takes < 1 s) is a hang.
HANG_S = 60.0


class Hang(Exception):
    """Raised by SIGALRM inside a run that took more than ``HANG_S``."""


def _hang(signum, frame):
    raise Hang(f"more than {HANG_S:.0f} s")


@dataclass
class Outcome:
    ok: bool
    status: int | None
    problem: str = ""


def run_input(inp: Input, workdir: Path, runner=None) -> Outcome:
    """Write ``inp`` under ``workdir`` and run the CLI on it in this process; say whether it behaved."""
    from click.testing import CliRunner

    from nccl_analyzer.cli import main

    runner = runner or CliRunner()
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    paths = []
    for name, data in inp.files.items():
        p = workdir / name
        p.write_bytes(data)
        paths.append(str(p))
    old = signal.signal(signal.SIGALRM, _hang)
    signal.setitimer(signal.ITIMER_REAL, HANG_S)
    try:
        res = runner.invoke(main, [*paths, *inp.args], catch_exceptions=True)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    if isinstance(res.exception, Hang):
        return Outcome(False, None, f"hang: no verdict after {HANG_S:.0f} s: "
                                    f"{''.join(traceback.format_exception(res.exception))[-1500:]}")
    out, err = res.stdout, res.stderr
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        tb = "".join(traceback.format_exception(res.exception))
        return Outcome(False, res.exit_code, f"exception: {tb[-3000:]}")
    if res.exit_code not in OK_STATUS:
        return Outcome(False, res.exit_code, f"exit status {res.exit_code}: {err[-1000:]}")
    if "Traceback (most recent call last)" in err:
        return Outcome(False, res.exit_code, f"traceback on stderr: {err[-3000:]}")
    if res.exit_code == 2:
        lines = [ln for ln in err.splitlines() if ln.startswith("nccl-analyze: error:") or ln.startswith("Error:")]
        if not lines:
            return Outcome(False, 2, f"exit 2 without a one-line message: {err[-500:]!r}")
        return Outcome(True, 2)
    if "--format" in inp.args and inp.args[inp.args.index("--format") + 1] == "json":
        try:
            doc = json.loads(out)
        except ValueError as exc:
            return Outcome(False, res.exit_code, f"invalid JSON ({exc}): {out[:300]!r}")
        if doc.get("schema") != "nccl-analyzer/diagnosis/v1" or (doc["root_cause"] is None) != (res.exit_code == 0):
            return Outcome(False, res.exit_code, "JSON schema/root_cause does not match the exit status")
    elif not out:
        return Outcome(False, res.exit_code, "empty report on stdout")
    return Outcome(True, res.exit_code)


def save_crash(inp: Input, outcome: Outcome, crash_dir: Path, n: int) -> Path:
    d = crash_dir / f"crash-{n:06d}"
    d.mkdir(parents=True, exist_ok=True)
    for name, data in inp.files.items():
        (d / name).write_bytes(data)
    (d / "crash.json").write_text(json.dumps({"args": inp.args, "ops": inp.ops, "status": outcome.status,
                                              "problem": outcome.problem}, indent=2))
    return d


def cache_rules() -> None:
    """Load the built-in rules once for the whole run: the rule files do not change between inputs, and
    parsing ~40 TOML files would otherwise be most of each input's time (what is fuzzed is the input path)."""
    from nccl_analyzer import analysis

    if getattr(analysis.load_rules, "fuzz_cached", False):
        return
    original = analysis.load_rules
    cache: dict = {}

    def load_rules(dirs=(), *args, **kwargs):
        key = (tuple(str(d) for d in dirs), args, tuple(sorted(kwargs.items())))
        if key not in cache:
            cache[key] = original(dirs, *args, **kwargs)
        return list(cache[key])

    load_rules.fuzz_cached = True  # type: ignore[attr-defined]
    analysis.load_rules = load_rules


def fuzz(n: int, seed: int, crash_dir: Path, report_every: int = 1000, time_limit: float | None = None,
         start: int = 0) -> dict:
    """Run inputs ``start + 1`` to ``n`` of the sequence ``seed`` gives; return counts (inputs, crashes, per status,
    seconds). ``start`` resumes a long run: the inputs before it are generated (same sequence) but not run."""
    from click.testing import CliRunner

    cache_rules()
    seeds = [p.read_bytes() for p in seed_logs()]
    rng = random.Random(seed)
    runner = CliRunner()
    crashes = 0
    status: dict = {}
    t0 = time.monotonic()
    signatures: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="nccl-fuzz-") as tmp:
        for _ in range(start):
            rng.getrandbits(64)
        for i in range(start + 1, n + 1):
            inp = make_input(random.Random(rng.getrandbits(64)), seeds)
            out = run_input(inp, Path(tmp) / "in", runner)
            status[out.status] = status.get(out.status, 0) + 1
            if not out.ok:
                crashes += 1
                sig = out.problem.strip().splitlines()[-1][:160] if out.problem.strip() else out.problem
                signatures[sig] = signatures.get(sig, 0) + 1
                if signatures[sig] <= 3:
                    where = save_crash(inp, out, crash_dir, i)
                    print(f"[{i}] CRASH {sig} -> {where}", flush=True)
            if report_every and i % report_every == 0:
                el = time.monotonic() - t0
                print(f"[{i}/{n}] {crashes} crash(es), {(i - start) / el:.1f} inputs/s, status {_status(status)}",
                      flush=True)
            if time_limit and time.monotonic() - t0 > time_limit:
                n = i
                break
    return {"inputs": n - start, "first": start + 1, "crashes": crashes, "status": _status(status),
            "seconds": round(time.monotonic() - t0, 1), "seed": seed, "seeds": len(seeds),
            "signatures": signatures}


def _status(status: dict) -> dict:
    return {str(k): v for k, v in sorted(status.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))}


def replay(path: Path) -> Outcome:
    meta = json.loads((path / "crash.json").read_text())
    files = {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.name != "crash.json"}
    with tempfile.TemporaryDirectory(prefix="nccl-fuzz-") as tmp:
        return run_input(Input(files, meta["args"], meta["ops"]), Path(tmp) / "in")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="inputs to run (default 1000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--crash-dir", type=Path, default=Path("fuzz-crashes"))
    ap.add_argument("--report-every", type=int, default=1000)
    ap.add_argument("--time-limit", type=float, default=None, help="stop after this many seconds")
    ap.add_argument("--start", type=int, default=0, help="resume a run: skip (generate, not run) the first START inputs")
    ap.add_argument("--replay", type=Path, help="re-run one saved crash folder and print what happens")
    args = ap.parse_args(argv)
    if args.replay:
        out = replay(args.replay)
        print("ok" if out.ok else f"CRASH (status {out.status}): {out.problem}")
        return 0 if out.ok else 1
    res = fuzz(args.n, args.seed, args.crash_dir, args.report_every, args.time_limit, args.start)
    print(json.dumps({k: v for k, v in res.items() if k != "signatures"}))
    for sig, count in sorted(res["signatures"].items(), key=lambda kv: -kv[1]):
        print(f"  {count:6d}  {sig}")
    print(f"{res['inputs']} inputs (#{res['first']}-#{res['first'] + res['inputs'] - 1}), {res['crashes']} crash(es) "
          f"in {res['seconds']} s (seed {res['seed']})")
    return 1 if res["crashes"] else 0


if __name__ == "__main__":
    sys.exit(main())
