"""``fleet DIR...``: analyze many jobs (one row each) and find what recurs: bad nodes, repeated signatures.

Each job is analyzed on its own by the same single-job pipeline, in a local process pool or on a Dask cluster;
the rows are sorted by job path, so the table is the same whichever engine produced it.
"""
from __future__ import annotations

import os
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from ..errors import InputError
from ..sources import as_specs

COLUMNS = ["job", "root_cause", "title", "confidence", "culprit_ranks", "hosts", "gpus", "nccl_version",
           "first_error_time", "evidence", "signature", "error"]
_LOG_SUFFIXES = (".log", ".txt", ".out", ".err", ".gz", ".stdout", ".stderr")
_NUM = re.compile(r"0x[0-9a-fA-F]+|\d+")


def _looks_like_log(p: Path) -> bool:
    name = p.name.lower()
    return not name.startswith(".") and (name.endswith(_LOG_SUFFIXES) or "." not in name or "rank" in name)


def discover_jobs(inputs: Any, each_file: bool = False) -> list[str]:
    """Job paths from folders, files, globs or ``@LIST`` files (one job path per line).

    A folder that holds sub-folders is a folder of jobs: each sub-folder is one job (a per-rank log dir) and
    each loose log file beside them is one job. A folder with files only is one job, unless ``each_file``
    (then each file is a job). A file is one job. ``@jobs.txt`` reads job paths from a file.

    Raises:
        InputError: a path that does not exist, or nothing that looks like a job.
    """
    import glob

    out: list[str] = []
    for spec in as_specs(inputs):
        if spec.startswith("@"):
            listing = Path(spec[1:])
            try:
                names = [ln.strip() for ln in listing.read_text(encoding="utf-8").splitlines()]
            except OSError as exc:
                raise InputError(f"cannot read job list {listing}: {exc.strerror or exc}") from None
            base = listing.parent
            out.extend(str(p if Path(p).is_absolute() else base / p) for p in names if p and not p.startswith("#"))
            continue
        matches = sorted(glob.glob(spec)) if glob.has_magic(spec) else [spec]
        if not matches:
            raise InputError(f"no job matches {spec!r}")
        for m in matches:
            p = Path(m)
            if not p.exists():
                raise InputError(f"no such job: {m}")
            if p.is_file():
                out.append(str(p))
                continue
            subdirs = sorted(c for c in p.iterdir() if c.is_dir() and not c.name.startswith("."))
            files = sorted(c for c in p.iterdir() if c.is_file() and _looks_like_log(c))
            if subdirs:
                out.extend(str(c) for c in subdirs)
                out.extend(str(c) for c in files)
            elif each_file:
                out.extend(str(c) for c in files)
            else:
                out.append(str(p))
    if not out:
        raise InputError("no jobs found in the inputs")
    seen: set[str] = set()
    return [j for j in out if not (j in seen or seen.add(j))]


def signature(root_id: str | None, title: str | None) -> str | None:
    """A failure signature: the cause id and its title with numbers, addresses and ids masked."""
    if root_id is None:
        return None
    return f"{root_id}: {_NUM.sub('N', title or '')}"


#: Rules loaded once per worker process (loading them costs more than analysing a typical job).
_RULES: dict[tuple[str, ...], list] = {}


def analyze_job(job: str, rules_dirs: tuple[str, ...] = ()) -> dict[str, Any]:
    """One fleet row for one job (a failed analysis becomes a row with ``error`` set, never an exception)."""
    from ..analysis import analyze
    from ..engine.loader import load_rules
    from ..errors import AnalyzerError

    row: dict[str, Any] = {c: None for c in COLUMNS}
    row["job"] = job
    try:
        rules = _RULES.get(rules_dirs)
        if rules is None:
            rules = _RULES[rules_dirs] = load_rules(rules_dirs)
        d = analyze([job], rules=rules, workers=1)
    except AnalyzerError as exc:
        row["error"] = str(exc)
        return row
    rc = d.root_cause
    row["nccl_version"] = ", ".join(d.job.nccl_versions) or None
    if rc is None:
        row["root_cause"] = None
        return row
    ranks = sorted(rc.ranks)
    row.update(root_cause=rc.id, title=rc.title, confidence=round(rc.confidence, 3),
               culprit_ranks=ranks, hosts=sorted(rc.hosts))
    gpus = []
    for r in ranks:
        info = d.job.ranks.get(r)
        if info is not None and info.bus_id:
            gpus.append(f"{info.host or '?'}:{info.bus_id}")
    row["gpus"] = sorted(set(gpus)) or list(rc.gpus) or []
    root = next((f for f in d.findings if f.role == "root"), None)
    row["first_error_time"] = root.time if root is not None else None
    if rc.evidence:
        e = rc.evidence[0]
        row["evidence"] = f"{e.path}:{e.line}: {e.text}"
    row["signature"] = signature(rc.id, rc.title)
    return row


@dataclass
class FleetResult:
    """Rows (one per job, sorted by job path) plus what recurs across them."""

    rows: list[dict[str, Any]]
    engine: str
    columns: tuple[str, ...] = tuple(COLUMNS)

    def dataframe(self):
        """The rows as a pandas DataFrame (columns ``COLUMNS``)."""
        import pandas as pd

        return pd.DataFrame(self.rows, columns=COLUMNS)

    def recurrence(self, min_jobs: int = 2) -> dict[str, Any]:
        """Hosts / GPUs named as culprit in ``min_jobs`` or more jobs, recurring signatures, causes by version."""
        def tally(column: str) -> list[dict[str, Any]]:
            jobs: dict[str, list[str]] = {}
            for row in self.rows:
                for v in row.get(column) or ():
                    jobs.setdefault(v, []).append(row["job"])
            items = [{"value": k, "jobs": sorted(v), "count": len(v)} for k, v in jobs.items() if len(v) >= min_jobs]
            return sorted(items, key=lambda x: (-x["count"], x["value"]))

        sigs: dict[str, list[str]] = {}
        by_version: dict[str, dict[str, int]] = {}
        causes: dict[str, int] = {}
        for row in self.rows:
            cause = row["root_cause"] or ("unreadable" if row["error"] else "no failure")
            causes[cause] = causes.get(cause, 0) + 1
            if row["signature"]:
                sigs.setdefault(row["signature"], []).append(row["job"])
            v = row["nccl_version"] or "unknown"
            by_version.setdefault(v, {}).setdefault(cause, 0)
            by_version[v][cause] += 1
        return {
            "hosts": tally("hosts"),
            "gpus": tally("gpus"),
            "signatures": sorted(({"value": k, "jobs": sorted(v), "count": len(v)} for k, v in sigs.items()
                                  if len(v) >= min_jobs), key=lambda x: (-x["count"], x["value"])),
            "causes": dict(sorted(causes.items(), key=lambda kv: (-kv[1], kv[0]))),
            "causes_by_nccl_version": {v: dict(sorted(c.items())) for v, c in sorted(by_version.items())},
        }

    def to_dict(self) -> dict[str, Any]:
        return {"schema": "nccl-analyzer/fleet/v1", "engine": self.engine, "jobs": self.rows,
                "recurrence": self.recurrence()}


def _local(jobs: list[str], rules_dirs: tuple[str, ...], workers: int | None,
           progress: Callable[[int, int], None] | None) -> list[dict[str, Any]]:
    workers = workers or max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    rows: list[dict[str, Any]] = []
    if workers == 1 or len(jobs) == 1:
        for i, j in enumerate(jobs, 1):
            rows.append(analyze_job(j, rules_dirs))
            if progress:
                progress(i, len(jobs))
        return rows
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for i, row in enumerate(pool.map(analyze_job, jobs, [rules_dirs] * len(jobs), chunksize=4), 1):
            rows.append(row)
            if progress:
                progress(i, len(jobs))
    return rows


def _dask(jobs: list[str], rules_dirs: tuple[str, ...], scheduler: str | None, workers: int | None,
          progress: Callable[[int, int], None] | None) -> list[dict[str, Any]]:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise InputError("--engine dask needs Dask: pip install 'nccl-analyzer[fleet]'") from None
    cluster = None
    try:
        if scheduler:
            client = Client(scheduler, timeout="20s")
        else:
            # No dashboard; the scheduler still serves HTTP (its health/metrics routes), by default on port 8787:
            # there, a port the OS picks, so another Dask cluster on 8787 neither warns nor collides with ours
            cluster = LocalCluster(n_workers=workers or 2, threads_per_worker=1, processes=True,
                                   dashboard_address=None, host="127.0.0.1",
                                   scheduler_kwargs={"dashboard_address": "127.0.0.1:0"})
            client = Client(cluster)
    except (OSError, TimeoutError) as exc:
        raise InputError(f"cannot reach the Dask scheduler {scheduler or '(local)'}: {exc}") from None
    try:
        futures = client.map(analyze_job, jobs, rules_dirs=rules_dirs, pure=False)
        rows = []
        for i, fut in enumerate(as_completed(futures), 1):
            rows.append(fut.result())
            if progress:
                progress(i, len(jobs))
        return rows
    finally:
        # Workers may log a closed heartbeat connection while the cluster shuts down: not the user's concern.
        import logging

        log = logging.getLogger("distributed")
        level = log.level
        log.setLevel(logging.CRITICAL)
        try:
            client.close()
            if cluster is not None:
                cluster.close()
        finally:
            log.setLevel(level)


def run_fleet(inputs: Any, engine: str = "local", scheduler: str | None = None, workers: int | None = None,
              rules_dirs: Iterable[str] = (), each_file: bool = False,
              progress: Callable[[int, int], None] | None = None) -> FleetResult:
    """Analyze every job under ``inputs`` and return one row per job.

    Args:
        inputs: folders of jobs, job folders, log files, globs, or ``@LIST`` files (str, Path, or a list).
        engine: ``local`` (a process pool here) or ``dask`` (a local Dask cluster, or ``scheduler``'s).
        scheduler: ``tcp://host:port`` of a running Dask scheduler (with ``engine="dask"``).
        workers: processes (local) or Dask workers to start (local cluster); default: the CPUs / 2.
        rules_dirs: extra rule folders (must exist on the Dask workers too).
        each_file: treat each file of a flat folder as its own job.
        progress: called with (done, total) after each job.

    Raises:
        InputError: no jobs, a missing path, or an unreachable scheduler.
    """
    jobs = discover_jobs(inputs, each_file=each_file)
    rd = tuple(str(d) for d in rules_dirs)
    if engine == "local":
        rows = _local(jobs, rd, workers, progress)
    elif engine == "dask":
        rows = _dask(jobs, rd, scheduler, workers, progress)
    else:
        raise InputError(f"unknown engine {engine!r} (local or dask)")
    rows.sort(key=lambda r: r["job"])
    return FleetResult(rows=rows, engine=engine)
