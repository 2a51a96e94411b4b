"""Data model shared by every stage: lines, events, job model, findings, diagnosis.

Events are facts (what the log says); findings are interpretations (which rule matched which events).
Nothing here renders or prints.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

SCHEMA = "nccl-analyzer/diagnosis/v1"

ROLES = ("root", "symptom", "cascade")


@dataclass(frozen=True, slots=True)
class Loc:
    """Where something came from: input path and 1-based line number."""

    path: str
    line: int


# Line and Event are created once per input line on the hot path: plain slotted classes are ~5x cheaper
# to construct than frozen ones (frozen __init__ goes through object.__setattr__). Treat them as immutable.
@dataclass(slots=True)
class Line:
    """One physical line of input after cleaning.

    ``raw`` is the line as it was (decoded, newline/CR, NUL and ANSI escapes removed) and is what
    evidence quotes. ``text`` is ``raw`` with wrapping prefixes (``[rank3]:``, ``[default0]:``,
    ``srun --label`` ``3: ``, container timestamps) removed; parsers read ``text``.
    ``rank``/``local_rank``/``time`` come from those prefixes when present.
    """

    path: str
    lineno: int
    text: str
    raw: str
    rank: int | None = None
    local_rank: int | None = None
    time: str | None = None
    truncated: bool = False


class EventAccess:
    """What an ``Event`` and a packed one (packed.PackedEvent) read the same way: ``loc`` and ``get``."""

    __slots__ = ()

    @property
    def loc(self) -> Loc:
        return Loc(self.path, self.line)  # type: ignore[attr-defined]

    def get(self, name: str, default: Any = None) -> Any:
        """A field by name; the common attributes (host, pid, rank, ...) are fields too."""
        if name in _EVENT_ATTRS:
            value = getattr(self, name)
            return default if value is None else value
        return self.fields.get(name, default)  # type: ignore[attr-defined]


@dataclass(slots=True)
class Event(EventAccess):
    """One typed fact read from the log.

    ``kind`` is a dotted name (``nccl.init.start``, ``nccl.warn.socket``, ``torch.watchdog.timeout``,
    ``python.traceback``, ``text``). ``fields`` holds the kind-specific values (ints parsed as int).
    ``text`` is the verbatim first line (the ``raw`` of the line the event starts on); multi-line
    events (tracebacks, ChildFailedError blocks, WARN continuations) keep all their lines in
    ``fields["lines"]`` and their last line number in ``end_line``.
    """

    kind: str
    path: str
    line: int
    text: str
    host: str | None = None
    pid: int | None = None
    tid: int | None = None
    rank: int | None = None
    cuda_dev: int | None = None
    time: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    end_line: int | None = None

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # pickled as its constructor's arguments: worker processes send every event so (parallel.py), and this
        # dumps in ~40% less time than the slotted dataclass's default state (benchmarks: docs/speed.md, session 6)
        return (self.__class__, (self.kind, self.path, self.line, self.text, self.host, self.pid, self.tid,
                                 self.rank, self.cuda_dev, self.time, self.fields, self.end_line))

    def to_dict(self) -> dict[str, Any]:
        """Flat JSON-ready dict (CONTRACT.md: kind, path, line, host, pid, tid, rank, cuda_dev, time)."""
        out: dict[str, Any] = {"kind": self.kind, "path": self.path, "line": self.line}
        for name in ("host", "pid", "tid", "rank", "cuda_dev", "time", "end_line"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        out["text"] = self.text
        for key, value in self.fields.items():
            if key not in out:
                out[key] = value
        return out


_EVENT_ATTRS = frozenset({"kind", "path", "line", "text", "host", "pid", "tid", "rank", "cuda_dev", "time", "end_line"})


@dataclass(frozen=True, slots=True)
class Evidence:
    """A quoted log line: CONTRACT.md ``{"path", "line", "text"}``."""

    path: str
    line: int
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "text": self.text}


@dataclass(frozen=True, slots=True)
class Dismissed:
    """Error-level line(s) that are no evidence of the failure, and why (CONTRACT.md ``dismissed``)."""

    evidence: tuple[Evidence, ...]
    reason: str
    count: int = 1  # lines with this reason and message (``evidence`` quotes the first few)
    id: str | None = None  # what the message table says the line means (None: harmless)

    def to_dict(self) -> dict[str, Any]:
        return {"evidence": [e.to_dict() for e in self.evidence], "reason": self.reason, "count": self.count,
                "id": self.id}


@dataclass(frozen=True, slots=True)
class Fix:
    summary: str
    env: dict[str, str] = field(default_factory=dict)
    commands: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary, "env": dict(self.env), "commands": list(self.commands)}


@dataclass(frozen=True, slots=True)
class Finding:
    """One rule match: an interpretation of some events."""

    rule: str
    id: str  # taxonomy id
    role: str  # root | symptom | cascade
    title: str
    severity: str = "error"
    confidence: float = 0.5
    ranks: tuple[int, ...] = ()
    hosts: tuple[str, ...] = ()
    evidence: tuple[Evidence, ...] = ()
    explanation: str = ""
    fix: Fix | None = None
    time: str | None = None
    bound: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "id": self.id,
            "role": self.role,
            "title": self.title,
            "severity": self.severity,
            "confidence": round(self.confidence, 3),
            "ranks": list(self.ranks),
            "hosts": list(self.hosts),
            "evidence": [e.to_dict() for e in self.evidence],
        }


@dataclass(frozen=True, slots=True)
class RootCause:
    id: str
    title: str
    confidence: float
    ranks: tuple[int, ...]
    hosts: tuple[str, ...]
    evidence: tuple[Evidence, ...]
    explanation: str
    fix: Fix
    rule: str = ""
    gpus: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "confidence": round(self.confidence, 3),
            "ranks": list(self.ranks),
            "hosts": list(self.hosts),
            "evidence": [e.to_dict() for e in self.evidence],
            "explanation": self.explanation,
            "fix": self.fix.to_dict(),
            "rule": self.rule,
        }


class Stage(IntEnum):
    """How far a rank got, in the order NCCL (and then the job) goes through them (docs/events.md "Stages").

    ``BOOTSTRAP``: version banner, bootstrap/NET interface lines, ``Init START`` (joining peers over the bootstrap
    sockets); ``TOPOLOGY``: topology dump, graph search (``Pattern ...``), comm layout; ``CHANNELS``: channel/ring/
    tree lists; ``CONNECT``: ``Channel NN/M : a -> b via <transport>`` connections; ``CONNECTED``: ``Connected all
    rings/trees``; ``INIT_COMPLETE``: ``Init COMPLETE``; ``COLLECTIVE``: a first collective call (NCCL COLL line,
    torch work SeqNum 1); ``STEADY``: later collectives (op count / SeqNum > 1, completed work).
    """

    UNKNOWN = 0
    BOOTSTRAP = 1
    TOPOLOGY = 2
    CHANNELS = 3
    CONNECT = 4
    CONNECTED = 5
    INIT_COMPLETE = 6
    COLLECTIVE = 7
    STEADY = 8

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(slots=True)
class RankInfo:
    """What the log tells about one rank (mutable while the job model is built)."""

    rank: int
    host: str | None = None
    pid: int | None = None
    local_rank: int | None = None
    cuda_dev: int | None = None
    bus_id: str | None = None
    nccl_version: str | None = None
    init_state: str = "unknown"  # unknown | started | complete | failed
    last_collective: dict[str, Any] | None = None
    first_error: Evidence | None = None
    first_error_kind: str | None = None
    exit_code: int | None = None
    role: str = "healthy"  # culprit | victim | healthy
    timeline: list[dict[str, Any]] = field(default_factory=list)
    stage: Stage = Stage.UNKNOWN  # the last stage the log shows this rank reach
    stage_loc: Loc | None = None  # the line that showed it
    stage_transport: str | None = None  # CONNECT/CONNECTED: the transport of the last connection (P2P/IPC, NET/IB)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rank": self.rank, "host": self.host, "pid": self.pid, "cuda_dev": self.cuda_dev,
                               "bus_id": self.bus_id}
        for name in ("local_rank", "nccl_version", "exit_code"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        out["init_state"] = self.init_state
        if self.stage is not Stage.UNKNOWN:
            out["stage"] = self.stage.label
            if self.stage_transport:
                out["stage_transport"] = self.stage_transport
            if self.stage_loc is not None:
                out["stage_line"] = {"path": self.stage_loc.path, "line": self.stage_loc.line}
        out["role"] = self.role
        if self.last_collective:
            out["last_collective"] = self.last_collective
        if self.first_error:
            out["first_error"] = self.first_error.to_dict()
        return out


@dataclass(slots=True)
class JobModel:
    """The job as reconstructed from events."""

    ranks: dict[int, RankInfo] = field(default_factory=dict)
    nccl_versions: list[str] = field(default_factory=list)
    torch_version: str | None = None
    cuda_driver: str | None = None
    communicators: dict[str, dict[str, Any]] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    network: dict[str, Any] = field(default_factory=dict)
    topology: dict[str, Any] = field(default_factory=dict)
    backend: str | None = None
    world_size: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "nccl_versions": list(self.nccl_versions),
            "torch_version": self.torch_version,
            "cuda_driver": self.cuda_driver,
            "backend": self.backend,
            "world_size": self.world_size,
            "env": dict(sorted(self.env.items())),
            "network": self.network,
            "ranks": [self.ranks[r].to_dict() for r in sorted(self.ranks)],
        }
        if self.extra.get("flight"):  # Flight Recorder dumps were read (docs/flight.md)
            out["flight"] = self.extra["flight"]
        if self.extra.get("rank_basis"):  # ranks no line states, and what each rests on (docs/CONTRACT.md)
            out["rank_basis"] = {str(r): b for r, b in sorted(self.extra["rank_basis"].items())}
        return out


@dataclass(frozen=True, slots=True)
class InputInfo:
    path: str
    lines: int
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "lines": self.lines}
        if self.warnings:
            out["warnings"] = list(self.warnings)
        return out


@dataclass(frozen=True, slots=True)
class Reproduction:
    outcome: str  # CONFIRMED | NOT REPRODUCED | INCONCLUSIVE
    reason: str
    backend: str | None
    world_size: int | None
    command: str
    fix_outcome: str | None = None  # FIXED | NOT FIXED
    fix_env: dict[str, str] = field(default_factory=dict)
    got: str | None = None  # the root cause id the reproduction's own output gave
    output_excerpt: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "reason": self.reason,
            "backend": self.backend,
            "world_size": self.world_size,
            "command": self.command,
            "fix_outcome": self.fix_outcome,
            "fix_env": dict(self.fix_env),
            "got": self.got,
        }


@dataclass(slots=True)
class Diagnosis:
    """Everything renderers need; no renderer recomputes anything."""

    inputs: list[InputInfo]
    root_cause: RootCause | None
    findings: list[Finding]
    job: JobModel
    reproduction: Reproduction | None = None
    cascade: list[Finding] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)  # events per kind, unparsed count, lines
    warnings: list[str] = field(default_factory=list)
    events_sample: list[Event] = field(default_factory=list)  # capped; for the HTML events table
    timeline: list[dict[str, Any]] = field(default_factory=list)
    dismissed: list[Dismissed] = field(default_factory=list)  # error lines that are not evidence (failsafe.py)
    # Set by redact.redact_diagnosis(); neither is part of to_dict() (CONTRACT.md stays as it is).
    redacted: bool = False  # hostnames, IPs, user names, e-mails replaced; renderers must not re-read inputs
    excerpts: dict[tuple[str, int], list[tuple[int, str]]] | None = None  # (path, line) -> [(lineno, raw)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "inputs": [i.to_dict() for i in self.inputs],
            "root_cause": self.root_cause.to_dict() if self.root_cause else None,
            "findings": [f.to_dict() for f in self.findings],
            "reproduction": self.reproduction.to_dict() if self.reproduction else None,
            "job": self.job.to_dict(),
            "stats": self.stats,
            "warnings": list(self.warnings),
            "dismissed": [x.to_dict() for x in self.dismissed],
        }
