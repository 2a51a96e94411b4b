"""Command line: the only place that prints, reads the environment and exits."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable

import click

from .errors import AnalyzerError, ExitCode

RULES_ENV = "NCCL_ANALYZER_RULES"
FORMATS = ("text", "json", "markdown", "html")


class DefaultGroup(click.Group):
    """``nccl-analyze INPUT...`` runs the ``analyze`` command; named subcommands run themselves."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            args = ["analyze", *args]
        elif not args:
            args = ["analyze"]
        return super().parse_args(ctx, args)

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage("nccl-analyze", "[OPTIONS] INPUT... | COMMAND [ARGS]...")


def _rules_dirs(extra: tuple[str, ...]) -> list[Path]:
    dirs = [Path(d) for d in extra]
    env = os.environ.get(RULES_ENV, "")
    dirs += [Path(d) for d in env.split(os.pathsep) if d]
    for d in dirs:
        if not d.is_dir():
            raise AnalyzerError("rules folder does not exist", path=str(d))
    return dirs


def rules_option(f: Callable) -> Callable:
    return click.option("--rules", "rules", multiple=True, metavar="DIR",
                        help=f"Extra folder of rule files (repeatable; also ${RULES_ENV}, {os.pathsep}-separated).")(f)


def _color_enabled(stream) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    if os.environ.get("TERM") == "dumb":
        return False
    return stream.isatty()


def _fail(exc: BaseException, traceback: bool = False) -> None:
    if traceback:
        raise exc
    code = getattr(exc, "exit_code", ExitCode.USAGE)
    click.echo(f"nccl-analyze: error: {exc}", err=True)
    sys.exit(int(code))


@click.group(cls=DefaultGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="nccl-analyzer", prog_name="nccl-analyze")
def main() -> None:
    """Tell why a multi-GPU (NCCL / torch.distributed) job died.

    \b
    nccl-analyze run.log                 verdict in the terminal
    nccl-analyze logs/ --format json     machine-readable (see CONTRACT.md)
    torchrun ... 2>&1 | nccl-analyze -   pass the output through, verdict live
    nccl-analyze launch -- torchrun ...  run the job with NCCL debug on, verdict at the end
    """


@main.command("analyze")
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT...")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True,
              help="Output format written to stdout (or --output).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), help="Write the report here.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, writable=True),
              help="Also write a self-contained HTML report to this file.")
@click.option("--redact", is_flag=True, help="Replace hostnames, IPs, user names and e-mails consistently.")
@click.option("-v", "--verbose", is_flag=True, help="Show all findings and the cascade.")
@click.option("-q", "--quiet", is_flag=True, help="stdin mode: do not pass the input through; no progress.")
@click.option("--stdin-name", default="-", show_default=True, help="Name shown for standard input.")
@click.option("--reproduce", is_flag=True, help="Re-run the failing collective on local GPUs (or CPU/gloo).")
@click.option("--verify-fix", is_flag=True, help="With --reproduce: run again with the fix applied.")
@click.option("--dry-run", is_flag=True, help="With --reproduce: print the plan and command, run nothing.")
@click.option("--timeout", "repro_timeout", type=float, default=120.0, show_default=True,
              help="Time limit in seconds for each reproduction run.")
@click.option("--traceback", "show_traceback", is_flag=True, hidden=True)
@rules_option
def analyze_cmd(inputs: tuple[str, ...], fmt: str, output: str | None, html_path: str | None, redact: bool,
                verbose: bool, quiet: bool, stdin_name: str, reproduce: bool, verify_fix: bool, dry_run: bool,
                repro_timeout: float, show_traceback: bool, rules: tuple[str, ...]) -> None:
    """Analyze INPUT... (files, directories, globs, .gz, or - for stdin) and print the verdict."""
    diagnosis = None
    try:
        rules_dirs = _rules_dirs(rules)
        for flag, path in (("-o/--output", output), ("--html", html_path)):
            if path:
                check_writable(path, flag)
        if (verify_fix or dry_run) and not reproduce:
            raise AnalyzerError("--verify-fix and --dry-run go with --reproduce")
        piping = "-" in inputs
        if piping and not quiet and fmt != "text" and not output:
            # stdout carries the job's output; a JSON/Markdown/HTML document mixed into it is useless.
            raise AnalyzerError(f"--format {fmt} with standard input: stdout carries the pass-through; "
                                "add -o FILE, or --quiet to get the report on stdout")
        if piping:
            from . import live

            try:
                diagnosis = live.run_pipe(inputs, rules_dirs=rules_dirs, stdin_name=stdin_name, quiet=quiet,
                                          stdout=sys.stdout.buffer, stderr=sys.stderr,
                                          color=_color_enabled(sys.stderr), verbose=verbose)
            except live.Interrupted as exc:
                # run_pipe printed the verdict of what was seen on stderr; still write -o / --html.
                _emit(exc.diagnosis, fmt=fmt, output=output, html_path=html_path, redact=redact,
                      verbose=verbose, to_stdout=quiet)
                sys.exit(exc.exit_code)
        else:
            from .analysis import analyze

            progress = None
            if not quiet and sys.stderr.isatty() and fmt == "text":
                from .progress import Progress

                progress = Progress(sys.stderr)
            diagnosis = analyze(list(inputs), rules_dirs=rules_dirs, stdin_name=stdin_name, progress=progress)
        if reproduce:
            from .reproduce import ReproduceInterrupted

            try:
                diagnosis = _reproduce(diagnosis, verify_fix=verify_fix, dry_run=dry_run, timeout=repro_timeout,
                                       quiet=quiet, rules_dirs=rules_dirs)
            except ReproduceInterrupted as stop:
                # Every process of the run was stopped; the report (reproduction INCONCLUSIVE) is still written.
                click.echo(f"nccl-analyze: --reproduce {stop.reason}", err=True)
                _emit(stop.diagnosis, fmt=fmt, output=output, html_path=html_path, redact=redact,
                      verbose=verbose, to_stdout=not piping or quiet)
                sys.exit(stop.exit_code)
        # In pipe mode stdout is the pass-through: the text verdict went to stderr (run_pipe), so only
        # -o / --html are written, unless --quiet freed stdout for the report.
        _emit(diagnosis, fmt=fmt, output=output, html_path=html_path, redact=redact, verbose=verbose,
              to_stdout=not piping or quiet)
    except AnalyzerError as exc:
        _fail(exc, show_traceback)
    except KeyboardInterrupt as exc:
        # Ctrl-C: 130; SIGTERM/SIGHUP turned into an interruption by --reproduce: 128 + the signal.
        signum = getattr(exc, "signum", None)
        sys.exit(128 + int(signum) if signum else int(ExitCode.INTERRUPTED))
    except BrokenPipeError:
        _quiet_broken_pipe(_verdict_status(diagnosis))
    except OSError as exc:
        if show_traceback:
            raise
        _stdout_failed(exc)
    sys.exit(_verdict_status(diagnosis))


def exit_status(diagnosis) -> ExitCode:
    """1 when the analysis named a root cause, else 0: symptoms or cascade findings alone are no diagnosis."""
    return ExitCode.FAILURE_FOUND if diagnosis.root_cause is not None else ExitCode.CLEAN


def _verdict_status(diagnosis) -> int:
    if diagnosis is None:
        return int(ExitCode.CLEAN)
    return int(exit_status(diagnosis))


def check_writable(path: str, flag: str) -> None:
    """Fail early (exit 2, before any analysis) when a report could not be written to ``path``."""
    p = Path(path)
    if p.is_dir():
        raise AnalyzerError(f"{flag}: is a directory, give a file name", path=path)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise AnalyzerError(f"{flag}: folder {str(parent)!r} does not exist", path=path)
    if p.exists() and not os.access(p, os.W_OK) or not p.exists() and not os.access(parent, os.W_OK | os.X_OK):
        raise AnalyzerError(f"{flag}: not writable (permission denied)", path=path)


def _silence_stdout() -> None:
    # Point stdout's descriptor at /dev/null so the interpreter's last flush does not fail again on exit.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _quiet_broken_pipe(status: int = int(ExitCode.CLEAN)) -> None:
    # `nccl-analyze x | head`: stdout closed early; end quietly like other Unix tools, with the verdict's status
    # (the analysis itself finished: a script with `set -o pipefail` still learns a failure was found).
    _silence_stdout()
    sys.exit(status)


def _stdout_failed(exc: OSError) -> None:
    # `> /dev/full`, a vanished NFS file...: the report did not reach its reader, which is an output error.
    _silence_stdout()
    click.echo(f"nccl-analyze: error: cannot write the report to standard output: {exc.strerror or exc}", err=True)
    sys.exit(int(ExitCode.USAGE))


def _reproduce(diagnosis, *, verify_fix: bool, dry_run: bool, timeout: float, quiet: bool, rules_dirs):
    from .reproduce import reproduce

    return reproduce(diagnosis, verify_fix=verify_fix, dry_run=dry_run, timeout=timeout, rules_dirs=rules_dirs,
                     progress=None if quiet or not sys.stderr.isatty() else sys.stderr)


def _emit(diagnosis, *, fmt: str, output: str | None, html_path: str | None, redact: bool, verbose: bool,
          to_stdout: bool = True) -> None:
    from . import render

    if redact:
        from .redact import redact_diagnosis

        diagnosis = redact_diagnosis(diagnosis)
    color = fmt == "text" and output is None and _color_enabled(sys.stdout)
    text = render.render(diagnosis, fmt, verbose=verbose, color=color)
    if html_path:
        _write_report(html_path, render.render(diagnosis, "html"), "--html")
    if output:
        _write_report(output, text, "-o/--output")
    elif to_stdout:
        sys.stdout.write(text)
        sys.stdout.flush()


def _write_report(path: str, text: str, flag: str) -> None:
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise AnalyzerError(f"{flag}: cannot write: {exc.strerror or exc}", path=path) from None


@main.command("events")
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT...")
@click.option("--format", "fmt", type=click.Choice(("jsonl", "csv", "table")), default="jsonl", show_default=True)
@click.option("--kind", "kinds", multiple=True, metavar="GLOB", help="Only events whose kind matches (repeatable).")
@click.option("--no-text", is_flag=True, help="Leave out lines no grammar recognized (kind 'text').")
@click.option("--redact", is_flag=True, help="Replace hostnames, IPs, user names and e-mails consistently.")
@click.option("--stdin-name", default="-", show_default=True)
@click.option("--strict", is_flag=True, help="Exit 2 if any NCCL line is left as nccl.unparsed.")
def events_cmd(inputs: tuple[str, ...], fmt: str, kinds: tuple[str, ...], no_text: bool, redact: bool,
               stdin_name: str, strict: bool) -> None:
    """Export the typed events parsed from INPUT... (CONTRACT.md: one JSON object per line)."""
    from .export import write_events

    try:
        counts = write_events(list(inputs), fmt=fmt, kinds=kinds, keep_text=not no_text, redact=redact,
                              stdin_name=stdin_name, out=sys.stdout)
    except AnalyzerError as exc:
        _fail(exc)
    except BrokenPipeError:
        _quiet_broken_pipe()
    except OSError as exc:
        _stdout_failed(exc)
    if strict and counts.get("nccl.unparsed"):
        click.echo(f"nccl-analyze: {counts['nccl.unparsed']} NCCL line(s) not recognized (--strict)", err=True)
        sys.exit(int(ExitCode.USAGE))


@main.group("rules")
def rules_grp() -> None:
    """List, show and test the diagnosis rules."""


@rules_grp.command("list")
@rules_option
def rules_list(rules: tuple[str, ...]) -> None:
    """List every rule: id, taxonomy id, role, title."""
    from .engine import load_rules

    try:
        loaded = load_rules(_rules_dirs(rules))
    except AnalyzerError as exc:
        _fail(exc)
    width = max((len(r.id) for r in loaded), default=10)
    for r in sorted(loaded, key=lambda r: r.id):
        click.echo(f"{r.id:<{width}}  {r.taxonomy:<22} {r.role:<8} {r.title}")


@rules_grp.command("show")
@click.argument("rule_id")
@rules_option
def rules_show(rule_id: str, rules: tuple[str, ...]) -> None:
    """Print one rule's file."""
    from .engine import load_rules

    try:
        loaded = {r.id: r for r in load_rules(_rules_dirs(rules))}
    except AnalyzerError as exc:
        _fail(exc)
    if rule_id not in loaded:
        _fail(AnalyzerError(f"no rule with id {rule_id!r} (see `nccl-analyze rules list`)"))
    click.echo(f"# {loaded[rule_id].path}")
    click.echo(Path(loaded[rule_id].path).read_text(encoding="utf-8"))


@rules_grp.command("test")
@click.argument("dirs", nargs=-1, type=click.Path(exists=True, file_okay=False))
def rules_test(dirs: tuple[str, ...]) -> None:
    """Validate rules and run each rule's examples (built-in rules, or only those in DIRS)."""
    from .engine import check_rules, load_rules

    try:
        loaded = load_rules([Path(d) for d in dirs], builtin=not dirs)
    except AnalyzerError as exc:
        _fail(exc)
    problems = check_rules(loaded)
    for p in problems:
        click.echo(str(p), err=True)
    click.echo(f"{len(loaded)} rules, {len(problems)} problem(s)")
    sys.exit(int(ExitCode.USAGE if problems else ExitCode.CLEAN))


@main.command("eval")
@click.argument("dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--format", "fmt", type=click.Choice(("table", "json")), default="table", show_default=True)
@rules_option
def eval_cmd(dirs: tuple[str, ...], fmt: str, rules: tuple[str, ...]) -> None:
    """Run every labeled case under DIRS (folders with label.json) and print accuracy."""
    import json

    from .evaluate import evaluate, format_table

    try:
        results = evaluate([Path(d) for d in dirs], rules_dirs=_rules_dirs(rules))
    except AnalyzerError as exc:
        _fail(exc)
    if fmt == "json":
        click.echo(json.dumps([r.to_dict() for r in results], indent=2, sort_keys=True))
    else:
        click.echo(format_table(results))
    sys.exit(int(ExitCode.CLEAN if all(r.ok for r in results) else ExitCode.FAILURE_FOUND))


@main.command("launch", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--log-dir", type=click.Path(file_okay=False), default=None,
              help="Keep the whole log (and the report) here; default ./nccl-analyze-<time>/.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True)
@click.option("--html", "html_path", type=click.Path(dir_okay=False, writable=True))
@click.option("--no-debug-env", is_flag=True, help="Do not add NCCL_DEBUG=INFO and the torch debug settings.")
@rules_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def launch_cmd(log_dir: str | None, fmt: str, html_path: str | None, no_debug_env: bool, rules: tuple[str, ...],
               command: tuple[str, ...]) -> None:
    """Run COMMAND (after --), tee its output, and print the verdict when it ends.

    Exits with the command's own exit status.
    """
    from . import launch

    try:
        status = launch.run(list(command), log_dir=log_dir, fmt=fmt, html_path=html_path,
                            debug_env=not no_debug_env, rules_dirs=_rules_dirs(rules),
                            stdout=sys.stdout.buffer, stderr=sys.stderr, color=_color_enabled(sys.stderr))
    except AnalyzerError as exc:
        _fail(exc)
    sys.exit(status)


def _write_out(payload: str | bytes, output: str | None) -> None:
    if output:
        if isinstance(payload, bytes):
            Path(output).write_bytes(payload)
        else:
            Path(output).write_text(payload, encoding="utf-8")
    elif isinstance(payload, bytes):
        sys.stdout.buffer.write(payload)
        sys.stdout.flush()
    else:
        sys.stdout.write(payload)
        sys.stdout.flush()


@main.command("diff")
@click.argument("good", metavar="GOOD")
@click.argument("bad", metavar="BAD")
@click.option("--format", "fmt", type=click.Choice(("text", "json", "markdown")), default="text", show_default=True)
@click.option("-o", "--output", help="Write the comparison here instead of stdout.")
@click.option("--html", "html_path", help="Also write a self-contained HTML page of the differences.")
@click.option("-v", "--verbose", is_flag=True, help="Show the minor differences too (hosts, GPU bus ids).")
@rules_option
def diff_cmd(good: str, bad: str, fmt: str, output: str | None, html_path: str | None, verbose: bool,
             rules: tuple[str, ...]) -> None:
    """Compare a run that worked (GOOD) with one that failed (BAD): what changed, most suspicious first.

    Each side is a log file, a per-rank log folder, a glob or a .gz. Exit 0: no difference of note;
    1: differences of note; 2: bad input.
    """
    from .across.diff import diff_runs
    from .render import across

    try:
        for path, flag in ((output, "-o"), (html_path, "--html")):
            if path:
                check_writable(path, flag)
        d = diff_runs(good, bad, rules_dirs=_rules_dirs(rules))
        text = {"text": lambda: across.diff_text(d, verbose=verbose), "json": lambda: across.diff_json(d),
                "markdown": lambda: across.diff_markdown(d)}[fmt]()
        if html_path:
            Path(html_path).write_text(across.diff_html(d), encoding="utf-8")
        _write_out(text, output)
    except AnalyzerError as exc:
        _fail(exc)
    except BrokenPipeError:
        _quiet_broken_pipe()
    sys.exit(int(ExitCode.FAILURE_FOUND if d.of_note else ExitCode.CLEAN))


@main.command("fleet")
@click.argument("inputs", nargs=-1, required=True, metavar="JOBS...")
@click.option("--format", "fmt", type=click.Choice(("text", "csv", "json", "parquet")), default="text",
              show_default=True)
@click.option("-o", "--output", help="Write the table here instead of stdout (parquet needs -o).")
@click.option("--html", "html_path", help="Also write a self-contained HTML fleet report with plots.")
@click.option("--engine", type=click.Choice(("local", "dask")), default="local", show_default=True,
              help="local: a process pool here; dask: a Dask cluster (local, or --scheduler).")
@click.option("--scheduler", metavar="tcp://HOST:PORT", help="With --engine dask: an existing Dask scheduler.")
@click.option("--workers", type=click.IntRange(min=1), help="Processes (local) or local Dask workers.")
@click.option("--each-file", is_flag=True, help="Each file of a flat folder is its own job.")
@rules_option
def fleet_cmd(inputs: tuple[str, ...], fmt: str, output: str | None, html_path: str | None, engine: str,
              scheduler: str | None, workers: int | None, each_file: bool, rules: tuple[str, ...]) -> None:
    """Triage many jobs: one row per job (cause, culprit ranks, hosts, GPUs, ...) and what recurs.

    JOBS are folders of jobs (each sub-folder one job), job folders, log files, globs, or @LIST files.
    Exit 0: every job analyzed; 2: bad input (a job that cannot be read is a row with its error).
    """
    from .across.fleet import run_fleet
    from .render import across

    try:
        if fmt == "parquet" and not output:
            raise AnalyzerError("--format parquet writes binary: give -o FILE.parquet")
        if scheduler and engine != "dask":
            raise AnalyzerError("--scheduler goes with --engine dask")
        for path, flag in ((output, "-o"), (html_path, "--html")):
            if path:
                check_writable(path, flag)
        progress = None
        if sys.stderr.isatty():
            def progress(done: int, total: int) -> None:
                click.echo(f"\rnccl-analyze: {done}/{total} jobs", err=True, nl=done == total)
        res = run_fleet(list(inputs), engine=engine, scheduler=scheduler, workers=workers,
                        rules_dirs=_rules_dirs(rules), each_file=each_file, progress=progress)
        if fmt == "parquet":
            try:
                payload: str | bytes = across.fleet_parquet(res)
            except ImportError:
                raise AnalyzerError("--format parquet needs pyarrow: pip install 'nccl-analyzer[fleet]'") from None
        else:
            payload = {"text": across.fleet_text, "csv": across.fleet_csv, "json": across.fleet_json}[fmt](res)
        if html_path:
            Path(html_path).write_text(across.fleet_html(res), encoding="utf-8")
        _write_out(payload, output)
    except AnalyzerError as exc:
        _fail(exc)
    except BrokenPipeError:
        _quiet_broken_pipe()
    sys.exit(int(ExitCode.CLEAN))


if __name__ == "__main__":  # pragma: no cover
    main()
