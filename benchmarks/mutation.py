"""Mutation testing of the analysis core with mutmut 3: how many planted bugs the fast test selection kills.

Mutates ``diagnose.py``, ``engine/``, ``sources.py``, ``job.py`` and the exit-status mapping of ``cli.py``
(``exit_status``), runs each mutant against the in-process tests that exercise those modules (mutmut forks one
worker per mutant and runs only the tests that reached the mutated function), and prints per module, then
``mutation: K killed of N (P%)`` as the last line. A mutant that times out counts as killed (as mutmut does).

The work happens in a scratch copy of the checkout (``--work``, default a temporary folder), so ``mutants/``
never lands in the tree; ``fixtures/blind/`` (held out) is not copied.

    python benchmarks/mutation.py                        # every module (long on 2 cores: see docs/mutation.md)
    python benchmarks/mutation.py --module diagnose      # one module
    python benchmarks/mutation.py --module cli --survivors   # and list the surviving mutants
    python benchmarks/mutation.py --work /tmp/mut --keep     # keep the scratch copy (``mutmut show NAME`` there)
    python benchmarks/mutation.py --budget 540 --max-children 16 --diffs survivors.diff   # a bounded run
"""
from __future__ import annotations

import argparse
from fnmatch import fnmatch
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: module -> (files mutated, mutant-name globs or () for all of them)
MODULES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "diagnose": (("nccl_analyzer/diagnose.py",), ("nccl_analyzer.diagnose.*",)),
    "cli": (("nccl_analyzer/cli.py",), ("nccl_analyzer.cli.x_exit_status__mutmut_*",)),
    "sources": (("nccl_analyzer/sources.py",), ("nccl_analyzer.sources.*",)),
    "job": (("nccl_analyzer/job.py",), ("nccl_analyzer.job.*",)),
    "engine": (("nccl_analyzer/engine/*",), ("nccl_analyzer.engine.*",)),
}

#: The fast selection: in-process tests that drive these modules (no torchrun, no subprocess, no browser).
TESTS = (
    "tests/test_root_selection.py",
    "tests/test_exit_mapping.py",
    "tests/test_diagnose.py",
    "tests/test_diagnose_findings.py",
    "tests/test_engine.py",
    "tests/test_engine_loader.py",
    "tests/test_rules.py",
    "tests/test_sources.py",
    "tests/test_job.py",
    "tests/test_cross_rank.py",
    "tests/test_culprit_ranks.py",
    "tests/test_eval.py",
    "tests/test_hang_stage.py",
    "tests/test_job_subgroup_first.py",
    "tests/test_multi_gpu_process.py",
    "tests/test_desync_report.py",
)

#: Tests in those files that cost seconds each and kill nothing the others do not (30k-line noise, the corpus
#: re-run as one test): left out of the mutation runs only.
SLOW_IN_SELECTION = "not buried_in_healthy_noise and not corpus_accuracy and not generated_oom"

_COPY = ("nccl_analyzer", "grammars", "rules", "messages", "reports", "tests", "benchmarks", "docs", "pyproject.toml")


def _stage(work: Path, modules: list[str]) -> None:
    """A scratch checkout with a ``[tool.mutmut]`` section for the chosen modules."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "mutants")
    for name in _COPY:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, work / name, ignore=ignore, dirs_exist_ok=True)
        else:
            shutil.copy2(src, work / name)
    for d in sorted((ROOT / "fixtures").iterdir()):
        if d.name.startswith("blind"):
            continue  # held out: not read by anything here
        if d.is_dir():
            shutil.copytree(d, work / "fixtures" / d.name, ignore=ignore, dirs_exist_ok=True)
        else:
            (work / "fixtures").mkdir(exist_ok=True)
            shutil.copy2(d, work / "fixtures" / d.name)
    # Only the chosen modules: every function of a mutated file runs through mutmut's trampoline, which slows
    # down every test that uses it (several times for sources.py / job.py, called per line and per event).
    only = [p for m in modules for p in MODULES[m][0]]
    tests = [t for t in TESTS if (ROOT / t).exists()]
    conf = {
        "source_paths": ["nccl_analyzer"],
        "only_mutate": only,
        "also_copy": ["grammars", "rules", "messages", "reports", "fixtures", "benchmarks", "docs"],
        "pytest_add_cli_args": ["-p", "no:cacheprovider", "-q", "-m", "not slow and not gpu and not browser",
                                "-k", SLOW_IN_SELECTION],
        "pytest_add_cli_args_test_selection": tests,
        "use_git_change_detection": False,
        "timeout_multiplier": 5.0,
        "timeout_constant": 5.0,
    }
    with open(work / "pyproject.toml", "a", encoding="utf-8") as fh:
        fh.write("\n[tool.mutmut]\n")
        for k, v in conf.items():
            fh.write(f"{k} = {json.dumps(v)}\n")


def _results(work: Path, modules: list[str]) -> dict[str, dict[str, str]]:
    """module -> mutant name -> status, from mutmut's per-file ``.meta`` files."""
    from fnmatch import fnmatch

    from mutmut.stats import status_by_exit_code

    out: dict[str, dict[str, str]] = {m: {} for m in modules}
    for meta in sorted((work / "mutants").rglob("*.py.meta")):
        rel = str(meta.relative_to(work / "mutants"))[: -len(".meta")]
        data = json.loads(meta.read_text())
        for m in modules:
            files, names = MODULES[m]
            if not any(fnmatch(rel, f) for f in files):
                continue
            for key, code in data.get("exit_code_by_key", {}).items():
                if names and not any(fnmatch(key, n) for n in names):
                    continue
                out[m][key] = status_by_exit_code[code] if code is not None else "not checked"
    return out


def _run_module(mutmut: list[str], work: Path, names: tuple[str, ...], max_children: int,
                limit: float | None) -> tuple[int, str, bool]:
    """``mutmut run`` for one module's mutants; stopped (its process group) after ``limit`` seconds."""
    proc = subprocess.Popen([*mutmut, "run", "--max-children", str(max_children), *names], cwd=work,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=limit)
        return proc.returncode, out, False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        return proc.returncode, out, True


def _write_diffs(work: Path, res: dict[str, dict[str, str]], dest: Path) -> None:
    """The diff of every mutant that was not killed, for judging which are equivalent."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    here = os.getcwd()
    os.chdir(work)
    try:
        with open(dest, "w", encoding="utf-8") as fh:
            for m, st in res.items():
                for key, status in sorted(st.items()):
                    if status in ("killed", "timeout", "not checked", "skipped"):
                        continue
                    path = None
                    for f in MODULES[m][0]:
                        cand = f.replace("*", key.split(".")[2] + ".py") if "*" in f else f
                        if Path(cand).exists():
                            path = cand
                    fh.write(f"# {key}: {status}\n")
                    try:
                        fh.write(get_diff_for_mutant(key, path=path) + "\n")
                    except Exception as exc:  # noqa: BLE001 - a diff we cannot show is reported, not fatal
                        fh.write(f"(no diff: {exc})\n")
    finally:
        os.chdir(here)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--module", action="append", choices=list(MODULES), help="repeatable; default: all")
    ap.add_argument("--work", help="scratch folder (default: a new temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    ap.add_argument("--max-children", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--budget", type=float, help="seconds in all: each module gets an equal share of what is left "
                    "(the first also pays for mutmut's stats run); mutants left unrun count as not checked")
    ap.add_argument("--sample", action="append", default=[], metavar="MODULE=K",
                    help="run every K-th mutant of MODULE only (repeatable), e.g. job=4")
    ap.add_argument("--only", nargs="+", default=[], metavar="NAME",
                    help="run just these mutants (mutmut names, e.g. the survivors of an earlier run)")
    ap.add_argument("--survivors", action="store_true", help="list surviving mutants")
    ap.add_argument("--diffs", help="write the diff of every surviving mutant to this file")
    args = ap.parse_args()
    modules = args.module or list(MODULES)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="nccl-mutation-"))
    work.mkdir(parents=True, exist_ok=True)
    mutmut = [sys.executable, "-c", "import sys; from mutmut.__main__ import cli; sys.exit(cli())"]
    try:
        if not (work / "mutants").is_dir():
            _stage(work, modules)
        walls: dict[str, float] = {}
        stopped: list[str] = []
        sample = {m: int(k) for m, k in (x.split("=", 1) for x in args.sample)}
        start = time.monotonic()
        for i, m in enumerate(modules):
            t0 = time.monotonic()
            limit = None
            if args.budget:
                limit = max(5.0, (args.budget - (t0 - start)) / (len(modules) - i))
            names = MODULES[m][1]
            if m in sample:
                known = sorted(_results(work, [m])[m]) if (work / "mutants").is_dir() else []
                if not known:  # mutmut writes its mutants on the first run: generate them with a no-op filter
                    _run_module(mutmut, work, ("nccl_analyzer.__none__",), args.max_children, 600)
                    known = sorted(_results(work, [m])[m])
                names = tuple(known[::sample[m]])
            if args.only:
                names = tuple(n for n in args.only if any(fnmatch(n, g) for g in MODULES[m][1]))
                if not names:
                    continue
            rc, out, timed_out = _run_module(mutmut, work, names, args.max_children, limit)
            walls[m] = time.monotonic() - t0
            if timed_out:
                stopped.append(m)
            elif rc != 0:
                print(out[-3000:], file=sys.stderr)
                print(f"mutmut run for {m} ended with exit status {rc}", file=sys.stderr)
        res = _results(work, modules)
        if not any(s != "not checked" for r in res.values() for s in r.values()):
            print("mutation: mutmut checked no mutant", file=sys.stderr)
            return 2
        total_k = total_n = 0
        for m in modules:
            st = res[m]
            tested = [s for s in st.values() if s not in ("not checked", "skipped")]
            k = sum(1 for s in tested if s in ("killed", "timeout"))
            total_k += k
            total_n += len(tested)
            counts: dict[str, int] = {}
            for s in st.values():
                counts[s] = counts.get(s, 0) + 1
            pct = 100.0 * k / len(tested) if tested else 0.0
            detail = ", ".join(f"{v} {s}" for s, v in sorted(counts.items()))
            note = " (stopped at the time limit)" if m in stopped else ""
            if m in sample:
                note += f" (every {sample[m]}th mutant of {len(st)})"
            print(f"  {m:<9} {k:>5} killed of {len(tested):<5} ({pct:5.1f}%)  {walls.get(m, 0.0):6.0f} s  [{detail}]{note}")
            if args.survivors:
                for key, s in sorted(st.items()):
                    if s not in ("killed", "timeout", "not checked", "skipped"):
                        print(f"      {s:<11} {key}")
        if args.diffs:
            _write_diffs(work, res, Path(args.diffs).resolve())
        wall = sum(walls.values())
        print(f"  wall {wall:.0f} s, {total_n / wall if wall else 0:.2f} mutants/s, {args.max_children} workers"
              + (f", scratch copy {work}" if args.keep else ""))
        pct = 100.0 * total_k / total_n if total_n else 0.0
        print(f"mutation: {total_k} killed of {total_n} ({pct:.1f}%)")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
