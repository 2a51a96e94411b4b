"""The whole pipeline: sources -> events -> job model + rule engine -> Diagnosis (batch and incremental)."""
from __future__ import annotations

import os
from typing import Any, Iterable

from . import failsafe, parallel
from .classify import EventStream
from .diagnose import diagnose, pick_root
from .engine.loader import Rule, load_rules
from .engine.run import Hit, Matcher, make_fix, render_template
from .job import JobBuilder, time_key
from .jobs import JobSplitCheck
from .messages import Tables, load_tables
from .model import Diagnosis, Event, InputInfo, Line, RootCause
from .packed import unpack
from .errors import InputError
from .sources import Inputs, Source, as_specs, clean_line, expand_inputs, iter_source, nothing_to_analyze, sniff_source
from . import triage
from .sources import open_binary, plain_raw

#: Events kept for the HTML events table (the non-INFO ones first seen).
SAMPLE_CAP = 300
TIMELINE_CAP = 400
_QUIET_KINDS = ("nccl.info", "nccl.transport", "nccl.env", "torch.log", "text", "nccl.call", "nccl.error.trace")


class Analyzer:
    """Incremental analysis: feed lines (from several sources, interleaved or not), ask for a provisional
    verdict at any time, finish to get the ``Diagnosis``.

    Args:
        rules_dirs: extra rule folders (after the built-in ones).
        rules: use exactly these rules instead of loading any.
        env_rules: an ``os.pathsep`` list of further rule folders (the CLI passes NCCL_ANALYZER_RULES).
        keep_text: have the parsers return ``text`` events too (for events export).
        tables: the message tables (``messages.load_tables(dirs)`` with a user's extra table folders; default the
            built-in ones), given to the job model, the fail-safe and ``diagnose``.
    """

    def __init__(self, rules_dirs: Iterable[str] = (), rules: list[Rule] | None = None, env_rules: str | None = None,
                 keep_text: bool = False, tables: Tables | None = None):
        self.rules = list(rules) if rules is not None else load_rules(tuple(rules_dirs), env_dirs=env_rules)
        self.tables = tables or load_tables()
        self.builder = JobBuilder(self.tables)
        self.matcher = Matcher(self.rules)
        self._streams: dict[str, Any] = {}
        self._sources: list[Source] = []
        self._keep_text = keep_text
        self._sample: list[Event] = []
        self._lines: dict[str, int] = {}
        self._prov: RootCause | None = None
        self._prov_dirty = True
        self._finished: Diagnosis | None = None
        self.ledger = failsafe.ErrorLedger(self.tables)  # every error-level line, accounted for in finish()
        self._extra = {"text": 0, "compacted": 0, "parser_errors": 0}  # counts from worker processes (run_parallel)
        self._parallel = False
        self._jobs = JobSplitCheck()  # inputs that look like separate jobs -> a warning
        self._events_by_path: dict[str, int] = {}
        self._fr_pointers: list[Event] = []  # log lines naming a Flight Recorder dump file (flight/)
        # Kinds that only get counted (triage.py): nothing in the job model, the rules or the fail-safe reads them
        # (derived here, from the loaded rules and tables: tests/test_triage_kinds.py adds a rule that reads each kind).
        self._inert = frozenset() if keep_text else frozenset(
            k for k, _ in triage.INERT_SHAPES if not JobBuilder.reads(k) and not self.matcher.reads(k)
            and not self.ledger.reads(k))
        # Kinds only the per-rank stage reads (triage.py parses the first and last line of each run of them).
        self._stage_only = frozenset() if keep_text else triage.run_kinds_of(frozenset(
            k for k, _ in triage.INERT_SHAPES if k not in self._inert and JobBuilder.stage_only(k)
            and not self.matcher.reads(k) and not self.ledger.reads(k)))
        self._counted = 0  # lines the fast path accounted for without the full path (triage.py)
        self._packed: Any = None  # the event being added, as it came packed (_add_as)

    # -- input ----------------------------------------------------------------------------------------------
    def add_sources(self, sources: list[Source]) -> None:
        """Register sources (their line counts and warnings go into ``Diagnosis.inputs``)."""
        self._sources.extend(sources)

    def feed(self, line: Line) -> list[Event]:
        """Parse one line (one parser state per source path) and fold its events into the analysis."""
        stream = self._streams.get(line.path)
        if stream is None:
            stream = self._streams[line.path] = EventStream(keep_text=self._keep_text, compact=not self._keep_text)
        self._lines[line.path] = line.lineno
        events = stream.feed(line)
        for ev in events:
            self.add_event(ev)
        return events

    def add_event(self, ev: Event) -> None:
        """Fold an already-parsed event (e.g. from an events export) into the job model and matcher."""
        self.builder.add(ev)
        self.matcher.add(ev, self._packed)
        held = self.matcher.held_last
        if held is not None and held is not ev:
            self.builder.stages.repoint(ev, held)  # (one packed copy for both)
        self.ledger.add(ev)
        self._jobs.observe(ev)
        self._events_by_path[ev.path] = self._events_by_path.get(ev.path, 0) + 1
        self._prov_dirty = True
        if ev.kind == "torch.flight_recorder" and ev.fields.get("stage") == "dumping" and len(self._fr_pointers) < 4096:
            # (flight.events.is_pointer, inlined: this runs for every event)
            self._fr_pointers.append(ev)
        if len(self._sample) < SAMPLE_CAP and not ev.kind.startswith(_QUIET_KINDS) and ev.kind not in self._inert \
                and ev.kind not in self._stage_only:
            self._sample.append(ev)

    def _add_as(self, ev: Event, packed: Any) -> None:
        """``add_event(ev)``, where ``packed`` is the same event as it came (packed.py; or ``ev`` itself, or None):
        the matcher may hold that one instead of packing ``ev`` again. (An attribute, not an argument: subclasses
        override ``add_event(ev)``.)"""
        self._packed = packed if packed is not ev else None
        try:
            self.add_event(ev)
        finally:
            self._packed = None

    def run_source(self, src: Source, progress: Any = None, done_before: int = 0) -> None:
        """Read a whole source (streaming) and close its parser state.

        ``progress`` (optional) gets ``update(total_lines)`` every few thousand lines.
        """
        if self._keep_text or not plain_raw(src):
            for line in iter_source(src):
                self.feed(line)
                if progress is not None and not line.lineno & 0xFFF:
                    progress.update(done_before + line.lineno)
            self.flush(src.path, keep=False)
            self.builder.agents.nodes |= src.nodes  # (pdsh's labels: local ranks of several nodes)
            return
        self.builder.lines.register(src)  # (a plain file: evidence may refer to its lines, lineref.py)
        stream = self._streams.get(src.path)
        if stream is None:
            stream = self._streams[src.path] = EventStream(keep_text=False, compact=True)
        add = self.add_event

        def emit(events: list[Event]) -> None:
            for ev in events:
                add(ev)

        tick = None if progress is None else (lambda n: progress.update(done_before + n))
        binary = open_binary(src)
        try:
            res = triage.scan(binary, src, stream, self._inert, emit, tick, stage_only=self._stage_only)
        finally:
            if src.real is not None:
                binary.close()
        src.lines = res.lines
        if res.lines:
            self._lines[src.path] = res.lines
        src.finish_warnings()
        self._counted += res.counted
        self.flush(src.path, keep=False)

    def run_parallel(self, sources: list[Source], workers: int, progress: Any = None) -> None:
        """Parse ``sources`` in worker processes (parallel.py) and fold their events in, in input order."""
        offsets: dict[str, int] = {}
        total = 0
        self._parallel = True
        merges: dict[str, parallel.ChatterMerge] = {}  # per input: its ranges' chatter, compacted as one process
        units = parallel.plan_units(sources, workers)
        for src in (s for s in sources if s.fast):
            self.builder.lines.register(src)  # (plain files, src.fast: evidence may refer to their lines, lineref.py)
        final = {u.source.path: u.index for u in units}  # each input's last range
        for res in parallel.iter_results(units, workers, self._inert, self._stage_only):
            path = res.path
            base = offsets.get(path, 0)
            merge = merges.get(path)
            if merge is None:
                merge = merges[path] = parallel.ChatterMerge()
            # one batch of the range at a time, as they go
            for ev in merge.fold(_rebased(parallel.unpack_batches(res.events), base), res.n_events, res.n_tail,
                                 _rebased(parallel.unpack_batches(res.lasts or []), base), res.index == final[path]):
                self.add_event(ev)
            offsets[path] = base + res.lines
            self._lines[path] = offsets[path]
            self._extra["text"] += res.text
            self._extra["compacted"] += res.compacted
            self._extra["parser_errors"] += res.parser_errors
            self._counted += res.counted
            for s in sources:
                if s.path != path:
                    continue
                for w in res.warnings:
                    if w not in s.warnings:
                        s.warnings.append(w)
                if res.cut_lines:
                    s.cut_lines += res.cut_lines
                    if not s.first_cut:
                        s.first_cut = base + res.first_cut
            total += res.lines
            if progress is not None:
                progress.update(total)
        for merge in merges.values():
            self._extra["compacted"] += merge.compacted
        for s in sources:
            s.lines = offsets.get(s.path, s.lines)
            s.finish_warnings()

    def flush(self, path: str | None = None, keep: bool = True) -> list[Event]:
        """Close multi-line events still open (a traceback at the end of a file). ``keep=False``: return nothing
        (the events are not all held at once: the ones that waited packed are unpacked one at a time, and the rule
        engine may keep them as they waited)."""
        out: list[Event] = []
        for p, stream in list(self._streams.items()):
            if path is None or p == path:
                for packed in stream.drain():
                    ev = unpack(packed)
                    self._add_as(ev, packed)
                    if keep:
                        out.append(ev)
        return out

    def add_flight_dumps(self, paths: list[str]) -> None:
        """Read Flight Recorder dumps (these paths, plus those the log named), align them across ranks and fold
        the ``flight.*`` events and the per-rank table (``job.extra["flight"]``) in (flight/)."""
        from .flight import events as fr

        got = fr.analyze_dumps(paths, self._fr_pointers)
        if got is None:
            return
        dumps, bad, al, events = got
        for d in dumps:
            # a dump has entries, not lines: its "lines" count is its entries (docs/flight.md)
            self._sources.append(Source(path=d.path, real=d.path, rank=d.rank, lines=len(d.entries),
                                        warnings=[*d.warnings]))
        for p, reason in bad:
            self._sources.append(Source(path=p, real=p, warnings=[f"not a readable Flight Recorder dump: {reason}"]))
        if dumps and al.without_dump:
            self._sources[-1 - len(bad)].warnings.append(
                f"no Flight Recorder dump from rank(s) {fr._ranks(al.without_dump)} (normal: a stuck or dead rank "
                "often writes none); the analysis uses the dumps there are")
        for w in al.warnings:
            self._sources[-1 - len(bad)].warnings.append(w)
        for ev in events:
            self.add_event(ev)
        self.builder.job.extra["flight"] = fr.table(al, bad)

    # -- verdicts -------------------------------------------------------------------------------------------
    def provisional(self) -> RootCause | None:
        """The current best root cause (cheap: recomputed only when a root-capable rule saw a new event)."""
        if not self.matcher.dirty and not self._prov_dirty:
            return self._prov
        if not self.matcher.dirty and self._prov is None:
            self._prov_dirty = False
            return None
        self._progress()
        self.builder.build()
        hits = self.matcher.hits(self.builder)
        best, _ = pick_root(hits, self.builder)
        self._prov_dirty = False
        if best is None:
            self._prov = None
            return None
        self._prov = RootCause(id=best.rule.taxonomy, title=render_template(best.rule.title, best.bound) or best.rule.title,
                               confidence=best.rule.confidence, ranks=best.ranks, hosts=best.hosts,
                               evidence=best.evidence, explanation=best.rule.description,
                               fix=make_fix(best.rule, best.bound), rule=best.rule.id)
        return self._prov

    def _progress(self) -> None:
        # where the program printed its own output last, per input (the hang rules read it as progress); unknown
        # (None) for inputs parsed in worker processes
        self.builder.text_tail = None if self._parallel else {p: list(s.text_tail) for p, s in self._streams.items()}
        self.builder.text_ctx = None if self._parallel else {
            p: {pid: list(d) for pid, d in s.ctx_tail.items()} for p, s in self._streams.items()}
        # the same by the rank each line names: whether a worker torchrun reported failed printed again (restarts.py)
        self.ledger.restarts.rank_tail = None if self._parallel else {
            p: {r: list(d) for r, d in s.rank_tail.items()} for p, s in self._streams.items() if s.rank_tail}

    def hits(self) -> list[Hit]:
        """All rule hits so far."""
        self._progress()
        self.builder.build()
        return self.matcher.hits(self.builder)

    def finish(self) -> Diagnosis:
        """Flush the parsers, decide root cause and cascade, return the ``Diagnosis``."""
        if self._finished is not None:
            return self._finished
        self.flush(keep=False)
        self._progress()
        job = self.builder.build()
        # caught exceptions and retries that later succeeded are no failure (the world size, where a line states it)
        self.ledger.settle(self._lines, None if self.builder.world_inferred else job.world_size)
        hits = self.matcher.hits(self.builder, skip=self.ledger.skip())
        verdict = diagnose(hits, self.builder, self.tables)
        root, dismissed, error_lines = failsafe.account(self.ledger, verdict)
        inputs, warnings = self._inputs()
        warnings.extend(self._jobs.warnings())
        stats = {
            "lines": sum(i.lines for i in inputs),
            "events": self.builder.events,
            "kinds": dict(sorted(self.builder.kinds.items())),
            "unparsed": self._extra["text"] + sum(getattr(s, "counts", {}).get("text", 0)
                                                  for s in self._streams.values()),
            "counted": self._counted,
            "compacted": self._extra["compacted"] + sum(getattr(s, "compacted", 0) for s in self._streams.values()),
            "parser_errors": self._extra["parser_errors"] + sum(getattr(s, "parser_errors", 0)
                                                                for s in self._streams.values()),
            "rules": len(self.rules),
            "rule_hits": len(hits),
            "error_lines": error_lines,
        }
        sample = sorted(self._sample, key=lambda e: (e.path, e.line))
        timeline = []
        for r, info in sorted(job.ranks.items()):
            for entry in info.timeline:
                timeline.append({"rank": r, **entry})
        timeline.sort(key=lambda e: (time_key(e.get("time")) or 0.0, str(e.get("path")), int(e.get("line") or 0)))
        self._finished = Diagnosis(inputs=inputs, root_cause=root, findings=verdict.findings, job=job,
                                   cascade=verdict.cascade, stats=stats, warnings=warnings, events_sample=sample,
                                   timeline=timeline[:TIMELINE_CAP], dismissed=dismissed)
        return self._finished

    def check_readable(self, logs: list[Source]) -> None:
        """With no log given and no dump readable there is nothing to analyze: a dump's reason, exit 2.

        Raises:
            InputError: every input was a Flight Recorder dump and none could be read.
        """
        fl = self.builder.job.extra.get("flight")
        if logs or not fl or fl.get("dumps"):
            return
        first = fl["unreadable"][0]
        raise InputError(f"not a readable Flight Recorder dump: {first['reason']}", path=first["path"])

    def _inputs(self) -> tuple[list[InputInfo], list[str]]:
        warnings: list[str] = []
        out: list[InputInfo] = []
        seen = set()
        for s in self._sources:
            s.events = self._events_by_path.get(s.path, 0)
            s.finish_binary()
            seen.add(s.path)
            out.append(InputInfo(path=s.path, lines=max(s.lines, self._lines.get(s.path, 0)), warnings=tuple(s.warnings)))
            warnings.extend(f"{s.path}: {w}" for w in s.warnings)
        for p, n in self._lines.items():
            if p not in seen:
                out.append(InputInfo(path=p, lines=n))
        return out, warnings


def _rebased(events: Iterable[Event], base: int) -> Iterable[Event]:
    """A range's events (line numbers relative to its first line) numbered in the whole file."""
    if not base:
        yield from events
        return
    for ev in events:
        ev.line += base
        if ev.end_line is not None:
            ev.end_line += base
        numbers = ev.fields.get("line_numbers")
        if numbers:
            ev.fields["line_numbers"] = [n + base for n in numbers]
        yield ev


def split_dumps(specs: Iterable[str], sources: list[Source]) -> tuple[list[Source], list[str]]:
    """Separate Flight Recorder dumps (found by content, flight/) from the text logs: dumps are read as dumps
    (``Analyzer.add_flight_dumps``), never as text."""
    from .flight.events import split_sources

    return split_sources(specs, sources)


def analyze(specs: Inputs, rules_dirs: Inputs = (), stdin_name: str = "-",
            rules: list[Rule] | None = None, env_rules: str | None = None, progress: Any = None,
            workers: int | None = None) -> Diagnosis:
    """Analyze files, folders, globs, ``.gz`` or ``-`` (stdin) and return the diagnosis.

    Args:
        specs: one input or a list of them, as str or ``pathlib.Path``: files, folders, globs, ``.gz``, ``-``.
        rules_dirs: extra rule folders.
        stdin_name: the name standard input gets in evidence.
        rules: exact rule set (skips loading).
        env_rules: NCCL_ANALYZER_RULES value, read by the caller.
        progress: optional object with ``update(lines)`` and ``done()`` (the CLI's TTY indicator).
        workers: parser processes for big inputs (default: the CPUs available; 1 disables).

    Raises:
        InputError: missing or unreadable input, or nothing to analyze (every input empty or binary; when
            only some are, they are skipped with a warning in ``Diagnosis.warnings``).
        RuleError: an invalid rule file.
    """
    specs = as_specs(specs)  # once: a generator can be read only once
    sources, dumps = split_dumps(specs, expand_inputs(specs, stdin_name=stdin_name))
    rules_dirs = as_specs(rules_dirs)
    for src in sources:
        sniff_source(src)
    text_sources = [s for s in sources if s.skipped is None]
    a = Analyzer(rules_dirs=rules_dirs, rules=rules, env_rules=env_rules)
    a.add_sources(sources)
    total = 0
    try:
        workers = parallel.worker_count() if workers is None else workers
        wide = parallel.should_parallelize(text_sources, workers)
        if wide:
            for src in text_sources:
                src.fast = plain_raw(src)
            # a source whose lines are rewritten first (a paste, binary bytes at its head: iter_source) can only be
            # read whole, in order: then every input is read here, as with one worker
            wide = all(src.fast for src in text_sources)
        if wide:
            a.run_parallel(text_sources, workers, progress)
        else:
            for src in text_sources:
                a.run_source(src, progress, total)
                total += src.lines
        a.add_flight_dumps(dumps)
    finally:
        if progress is not None:
            progress.done()
    a.check_readable(sources)
    diagnosis = a.finish()
    empty = nothing_to_analyze(sources) if sources or not dumps else None
    if empty:
        raise InputError(empty)
    return diagnosis




def lines_of_text(text: str, name: str = "-") -> list[Line]:
    """Clean ``Line`` objects for an in-memory log (as if read from a file called ``name``)."""
    src = Source(path=name, real=None)
    body = text.encode("utf-8")
    raw = body.splitlines(keepends=True)
    return [clean_line(b, src, i) for i, b in enumerate(raw, 1)]


def analyze_text(text: str, rules: list[Rule] | None = None, rules_dirs: Iterable[str] = (),
                 name: str = "-") -> Diagnosis:
    """``analyze`` for an in-memory log (tests, rule examples)."""
    a = Analyzer(rules_dirs=rules_dirs, rules=rules)
    for line in lines_of_text(text, name):
        a.feed(line)
    return a.finish()


def hits_for_text(text: str, rules: list[Rule], name: str = "-") -> list[Hit]:
    """Rule hits for an in-memory log, through the full pipeline (used to check rule examples)."""
    a = Analyzer(rules=rules)
    for line in lines_of_text(text, name):
        a.feed(line)
    a.flush()
    return a.hits()


def hits_for_dumps(text: str, dumps: tuple[str, ...] | list[str], rules: list[Rule], name: str = "-") -> list[Hit]:
    """Rule hits for a log plus Flight Recorder dumps given as JSON text (rank = position), through the full
    pipeline: the dumps are written to a private temporary folder as ``fr_<rank>`` and read back as dumps."""
    import tempfile

    a = Analyzer(rules=rules)
    for line in lines_of_text(text, name):
        a.feed(line)
    a.flush()
    with tempfile.TemporaryDirectory(prefix="nccl-analyzer-fr-") as tmp:
        paths = []
        for rank, body in enumerate(dumps):
            p = os.path.join(tmp, f"fr_{rank}")
            with open(p, "w", encoding="utf-8") as f:
                f.write(body.strip())
            paths.append(p)
        a.add_flight_dumps(paths)
        return a.hits()
