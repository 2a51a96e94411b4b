"""The message classification tables (messages/*.toml): what an NCCL WARN, a torch event or an error text line means.

Three tables, all data (see the header of each file): ``nccl.toml`` (WARN source file + text -> taxonomy id or
harmless), ``events.toml`` (which parsed event kinds are error-level lines and their meaning), ``text.toml``
(error lines no grammar parses: crash reports, launchers, other NCCL bindings). Code here only loads, validates
and looks up; it knows no message.
"""
from __future__ import annotations

import fnmatch
import re
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

from .errors import RuleError
from .resources import messages_dir

#: The ids of TAXONOMY.md a table may name.
TAXONOMY = frozenset({
    "socket_interface", "port_conflict", "rendezvous_unreachable", "p2p_ipc", "shm", "ib_rdma", "network_connect",
    "watchdog_timeout", "collective_mismatch", "peer_exit", "app_exception", "host_oom", "cuda_oom", "cuda_error",
    "version_mismatch", "duplicate_gpu", "invalid_usage", "gpu_visibility", "nvls_multicast", "other",
})


@dataclass(frozen=True, slots=True)
class Meaning:
    """What a table says about one line: a taxonomy ``id`` or ``harmless`` (the reason), and which entry said it."""

    id: str | None
    harmless: str | None
    entry: str  # "<table>:<name>"
    note: str = ""
    retry: bool = False
    teardown: str | None = None  # a consequence of a process ending: dismissed when nothing else says one failed


@dataclass(frozen=True, slots=True)
class _Entry:
    name: str
    table: str
    id: str | None
    harmless: str | None
    note: str
    files: tuple[str, ...]
    msg: re.Pattern[str] | None
    kinds: tuple[str, ...] = ()
    where: tuple[tuple[str, re.Pattern[str]], ...] = ()
    via: str | None = None
    subtable: str | None = None
    retry: bool = False
    formats: tuple[str, ...] = ()
    teardown: str | None = None
    # the NCCL return-code traces the same process printed just before this line are this failure on its way up
    absorbs_traces: bool = False
    # the NCCL WARNs and return-code traces the same thread (host:pid:tid) printed just before this line are one
    # failed request of a service thread that went on (events.toml nccl-rem-allocator-dropped)
    absorbs_thread: bool = False
    # a [[line]]'s regex groups naming the PCI device the line is about: the entry's id holds only where that device
    # is a GPU the input names (NCCL's busId, an NVRM Xid line); any other device's line means "other"
    gpu_device: tuple[str, ...] = ()

    def meaning(self) -> Meaning:
        return Meaning(self.id, self.harmless, f"{self.table}:{self.name}", self.note, self.retry, self.teardown)


_UNSET = object()  # (a cache's "not worked out yet")


@dataclass(frozen=True, slots=True)
class Tables:
    """The loaded tables (one per process; ``load_tables`` caches them)."""

    nccl: tuple[_Entry, ...]
    events: tuple[_Entry, ...]
    text: tuple[_Entry, ...]
    formats: tuple[_Entry, ...]  # events.toml [[format]] entries (catalogue coverage only)
    text_keywords: tuple[str, ...]
    text_regex: tuple[tuple[_Entry, re.Pattern[str]], ...]
    progress_kinds: frozenset[str]
    caught_min_lines: int = 3
    caught_not_with: frozenset[str] = frozenset()
    caught_kinds: frozenset[str] = frozenset({"python.traceback"})
    caught_ids: frozenset[str] = frozenset({"app_exception"})
    caught_exc_type: re.Pattern[str] | None = None
    # event kind -> the ``events`` entries whose kind globs accept it (filled by ``event``; the globs are fixed)
    _by_kind: dict[str, tuple[_Entry, ...]] = field(default_factory=dict, compare=False, hash=False, repr=False)
    # per entry of ``text_regex``: the literals one of which any match of its regex holds (``_need``; None: no
    # useful set), worked out when ``match_text`` first tries it
    _text_need: dict[int, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)
    caught_uncaught: re.Pattern[str] | None = None  # a traceback's first raw line that only an uncaught one has
    # "file:function" of a traceback's outermost frame when the exception reached the top of a program, a thread or
    # a child process (any other outermost frame: the program's own handler printed it), and the ids such a
    # handler-printed traceback may be caught with
    caught_entry: re.Pattern[str] | None = None
    caught_handled_ids: frozenset[str] = frozenset()
    # "file:function" of an outermost frame whose code prints the exception and carries on (never ends the process)
    caught_goes_on: re.Pattern[str] | None = None
    # the event field that marks a traceback as text the program printed, not an exception it raised ([caught] quoted)
    caught_quoted: str | None = None
    caught_quoted_with: tuple[str, ...] = ()  # kind globs of the launcher records such a traceback needs in its input
    # events.toml [restarted]: the kinds of a failed attempt, of the agent's success line, of the final failure report;
    # the lines of output a recovered attempt needs after it (restarts.py)
    restarted: tuple[frozenset[str], frozenset[str], frozenset[str], int, frozenset[str], frozenset[str],
                     re.Pattern[str] | None] = (frozenset(), frozenset(), frozenset(), 3, frozenset(), frozenset(), None)
    # events.toml [restarted] worker: the kinds of the agent's per-worker failure line (job.py keeps them for diagnose)
    worker_failed: frozenset[str] = frozenset()
    # events.toml [progress] unranked: progress kinds that settle a retried line of no known rank (ledger.py)
    progress_unranked: frozenset[str] = frozenset()
    # events.toml [survived]: crash reports of no known rank that every rank outlived (ledger.py)
    survived_kinds: frozenset[str] = frozenset()
    survived_min_lines: int = 3

    # -- lookups ---------------------------------------------------------------------------------------------
    def nccl_warn(self, file: str | None, msg: str) -> Meaning | None:
        """The first ``nccl.toml`` entry matching a WARN's source file (as printed; without one, the file the catalogue
        says prints this text, ``source_of``) and text, or None."""
        path = _norm_path(file) if file else self.source_of(msg)
        for e in self.nccl:
            if e.files and (path is None or not _file_match(path, e.files)):
                continue
            if e.msg is not None and not e.msg.search(msg):
                continue
            return e.meaning()
        return None

    def source_of(self, msg: str) -> str | None:
        """The NCCL source file that prints the WARN text ``msg`` (``warn_sources``: the most specific catalogue format
        matching it whole), when every file that prints it means the same to this table; else None."""
        files = warn_sources(msg) if msg else ()
        if len(files) > 1 and len({self.nccl_warn(f, msg) for f in files}) != 1:
            return None
        return files[0] if files else None

    def message(self, text: str) -> Meaning | None:
        """A free text (an exception message, ``Last error:`` line, error string): the first entry of nccl.toml
        that decides by text alone (no ``file``), or None. An NCCL WARN text the table decides only by its file (an
        NCCL error's quoted last WARN) is read as printed by that file (``source_of``)."""
        if not text:
            return None
        src = self.source_of(text.strip())
        m = self.nccl_warn(src, text.strip()) if src is not None else None
        if m is not None:
            return m
        for e in self.nccl:
            if not e.files and e.msg is not None and e.msg.search(text):
                return e.meaning()
        return None

    def text_line(self, family: str) -> Meaning | None:
        for e in self.text:
            if e.name == family:
                return e.meaning()
        return None

    def entries_for(self, kind: str) -> tuple[_Entry, ...]:
        """The ``events.toml`` entries whose kind globs accept ``kind`` (cached per kind)."""
        entries = self._by_kind.get(kind)
        if entries is None:
            entries = tuple(e for e in self.events if any(fnmatch.fnmatchcase(kind, k) for k in e.kinds))
            if len(self._by_kind) < 4096:
                self._by_kind[kind] = entries
        return entries

    def event(self, kind: str, get: Any) -> tuple[_Entry, Meaning] | None:
        """The ``events.toml`` entry for an event (``get(field)`` reads its fields), or None if it is no error line."""
        for e in self.entries_for(kind):
            ok = True
            for name, rx in e.where:
                value = get(name)
                if value is None or not rx.search(str(value)):
                    ok = False
                    break
            if ok:
                return e, e.meaning()
        return None

    def match_text(self, text: str) -> tuple[_Entry, re.Match[str]] | None:
        """Which text.toml entry a line no grammar parsed is (None for most lines: keyword prefilter first)."""
        for k in self.text_keywords:  # substring tests: ~50 ns each, a regex alternation costs ~20 us a line
            if k in text:
                break
        else:
            return None
        # A line with a keyword is tried against each entry's regex in order (126 of them): an entry whose regex's
        # required literals (``engine.prefilter.required``) are none of them in the line cannot match it, so its
        # search is skipped (the first entry that matches is the same). A C++ ``frame #0: c10::Error::Error(...)``
        # line holds the keywords "#0" and "Error:" and met every regex: ~2.5 ms a line, once per failed rank.
        needs = self._text_need
        for i, (e, rx) in enumerate(self.text_regex):
            if not _may_match(needs, i, text, rx):
                continue
            m = rx.search(text)
            if m:
                return e, m
        return None


def _norm_path(path: str) -> str:
    path = path.replace("\\", "/")
    return path[4:] if path.startswith("src/") else path


def _file_match(path: str, globs: tuple[str, ...]) -> bool:
    tails = [path]
    i = path.find("/")
    while i >= 0:
        tails.append(path[i + 1:])
        i = path.find("/", i + 1)
    return any(fnmatch.fnmatchcase(t, g) for g in globs for t in tails)


def _compile(rx: Any, where: str) -> re.Pattern[str]:
    if not isinstance(rx, str):
        raise RuleError(f"{where}: a regex must be a string")
    try:
        return re.compile(rx)
    except re.error as exc:
        raise RuleError(f"{where}: bad regex: {exc}") from None


def _entry(raw: dict[str, Any], table: str, where: str, seen: set[str]) -> _Entry:
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise RuleError(f"{where}: every entry needs a name")
    if (table, name) in seen:
        raise RuleError(f"{where}: duplicate name {name!r}")
    seen.add((table, name))
    tid, harmless, sub = raw.get("id"), raw.get("harmless"), raw.get("table")
    if sum(x is not None for x in (tid, harmless, sub)) != 1:
        raise RuleError(f"{where} ({name}): give exactly one of id, harmless, table")
    if tid is not None and tid not in TAXONOMY:
        raise RuleError(f"{where} ({name}): unknown taxonomy id {tid!r}")
    if harmless is not None and (not isinstance(harmless, str) or not harmless.strip()):
        raise RuleError(f"{where} ({name}): harmless needs the reason")
    files = raw.get("file", ())
    files = (files,) if isinstance(files, str) else tuple(files)
    msg = raw.get("msg") if table == "nccl" else raw.get("regex")
    kinds = raw.get("kind", ())
    kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    whr = tuple((k, _compile(v, f"{where} ({name}) where.{k}")) for k, v in (raw.get("where") or {}).items())
    if table == "events" and not kinds:
        raise RuleError(f"{where} ({name}): an [[event]] needs kind")
    if table == "text" and msg is None:
        raise RuleError(f"{where} ({name}): a [[line]] needs regex")
    if raw.get("absorbs_thread") and harmless is None:
        raise RuleError(f"{where} ({name}): absorbs_thread needs harmless (the reason the lines before it are none)")
    if raw.get("absorbs_traces") and harmless is None:
        raise RuleError(f"{where} ({name}): absorbs_traces needs harmless (the reason the traces before it are none)")
    if table == "nccl" and not files and msg is None:
        raise RuleError(f"{where} ({name}): a catch-all entry (no file, no msg) is not allowed")
    return _Entry(name=name, table=table, id=tid, harmless=harmless, note=str(raw.get("note", "")), files=files,
                  msg=_compile(msg, f"{where} ({name})") if msg is not None else None, kinds=kinds, where=whr,
                  via=raw.get("via"), subtable=sub, retry=bool(raw.get("retry", False)),
                  formats=tuple(raw.get("formats", ())),
                  teardown=str(raw["teardown"]) if raw.get("teardown") else None,
                  absorbs_traces=bool(raw.get("absorbs_traces", False)),
                  absorbs_thread=bool(raw.get("absorbs_thread", False)),
                  gpu_device=(raw["gpu_device"],) if isinstance(raw.get("gpu_device"), str)
                  else tuple(raw.get("gpu_device", ())))


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise RuleError(f"{path}: {exc}") from None


def table_files(dirs: Iterable[str | Path] = ()) -> list[Path]:
    """The table files: every ``*.toml`` of the user's folders (first) and of the built-in folder, each in name order."""
    out: list[Path] = []
    for d in [*dirs, messages_dir()]:
        p = Path(d)
        if p.is_dir():
            out.extend(sorted(f for f in p.glob("*.toml") if not f.name.startswith(".")))
    return out


def build_tables(files: Iterable[Path]) -> Tables:
    """Load and validate table files (``[[message]]`` -> nccl, ``[[event]]``/``[[format]]``/``[progress]`` -> events,
    ``[[line]]`` + ``keywords`` -> text).

    Raises:
        RuleError: a malformed file (path and entry named).
    """
    nccl: list[_Entry] = []
    events: list[_Entry] = []
    text: list[_Entry] = []
    formats: list[_Entry] = []
    keywords: list[str] = []
    progress: set[str] = set()
    unranked: set[str] = set()
    caught: dict[str, Any] = {}
    restarted: dict[str, Any] = {}
    survived: dict[str, Any] = {}
    seen: set[str] = set()
    for f in files:
        data = _read(f)
        for i, raw in enumerate(data.get("message", []), 1):
            nccl.append(_entry(raw, "nccl", f"{f} [[message]] #{i}", seen))
        for i, raw in enumerate(data.get("event", []), 1):
            events.append(_entry(raw, "events", f"{f} [[event]] #{i}", seen))
        for i, raw in enumerate(data.get("line", []), 1):
            text.append(_entry(raw, "text", f"{f} [[line]] #{i}", seen))
        for i, raw in enumerate(data.get("format", []), 1):
            raw = {"name": f"format-{f.stem}-{i}", **raw}
            formats.append(_entry(raw, "format", f"{f} [[format]] #{i}", seen))
        kws = data.get("keywords", [])
        if not isinstance(kws, list) or not all(isinstance(k, str) and k for k in kws):
            raise RuleError(f"{f}: keywords must be a list of non-empty strings")
        keywords.extend(kws)
        progress |= set((data.get("progress") or {}).get("kinds", ()))
        unranked |= set((data.get("progress") or {}).get("unranked", ()))
        caught.update(data.get("caught") or {})
        restarted.update(data.get("restarted") or {})
        survived.update(data.get("survived") or {})
    kw = tuple(dict.fromkeys(keywords))
    return Tables(nccl=tuple(nccl), events=tuple(events), text=tuple(text), formats=tuple(formats), text_keywords=kw,
                  text_regex=tuple((e, e.msg) for e in text if e.msg is not None), progress_kinds=frozenset(progress),
                  caught_min_lines=int(caught.get("min_lines_after", 3)),
                  caught_not_with=frozenset(caught.get("not_with", ())),
                  caught_kinds=frozenset(caught.get("kinds", ("python.traceback",))),
                  caught_ids=frozenset(caught.get("ids", ("app_exception",))),
                  caught_exc_type=_compile(caught["exc_type"], "[caught] exc_type") if "exc_type" in caught else None,
                  caught_uncaught=_compile(caught["uncaught"], "[caught] uncaught") if "uncaught" in caught else None,
                  caught_entry=_compile(caught["entry"], "[caught] entry") if "entry" in caught else None,
                  caught_handled_ids=frozenset(caught.get("handled_ids", ())),
                  caught_goes_on=_compile(caught["goes_on"], "[caught] goes_on") if "goes_on" in caught else None,
                  caught_quoted=caught.get("quoted"),
                  caught_quoted_with=tuple(caught.get("quoted_with", ())),
                  restarted=(frozenset(restarted.get("failed", ())), frozenset(restarted.get("succeeded", ())),
                             frozenset(restarted.get("final", ())), int(restarted.get("min_lines_after", 3)),
                             frozenset(restarted.get("restart", ())), frozenset(restarted.get("agent_kinds", ())),
                             _compile(restarted["agent_logger"], "[restarted] agent_logger")
                             if "agent_logger" in restarted else None),
                  worker_failed=frozenset(restarted.get("worker", ())), progress_unranked=frozenset(unranked),
                  survived_kinds=frozenset(survived.get("kinds", ())),
                  survived_min_lines=int(survived.get("min_lines_after", 3)))


#: A format's head: its own text up to its first blank (the pattern lets blanks vary), conversion or brace. A message
#: of that format starts with it (``format_regex`` begins with the head, escaped).
_HEAD = re.compile(r"[^\s%{]*")
#: Formats are looked up by the first this many characters of their head (those with a shorter head: always tried).
_HEAD_KEY = 3

_WarnFormat = tuple[str, tuple[str, ...], int, str]  # (format, files, literal length, head)


@lru_cache(maxsize=1)
def _warn_sources() -> tuple[tuple[_WarnFormat, ...], dict[str, tuple[int, ...]], tuple[int, ...]]:
    """The WARN formats of messages/nccl_warn_formats.json as (format, files, literal length, head), most literal
    first; by the first ``_HEAD_KEY`` characters of a head, the indexes (in that order) of the formats with that head
    key or a shorter head; and those of the shorter heads alone. The patterns are parse/bare_warn.py's (one reading
    of a printf format), each compiled when a message first needs it."""
    import json

    from .parse.bare_warn import FORMATS_FILE, literal
    try:
        rows = json.loads((messages_dir() / FORMATS_FILE).read_text(encoding="utf-8"))["formats"]
    except (OSError, ValueError, KeyError):
        return (), {}, ()
    out = sorted(((fmt, tuple(files), literal(fmt)) for fmt, files in rows), key=lambda t: -t[2])
    formats = tuple((fmt, files, n, _HEAD.match(fmt).group(0)) for fmt, files, n in out)  # type: ignore[union-attr]
    by_key: dict[str, list[int]] = {}
    short: list[int] = []
    for i, f in enumerate(formats):
        if len(f[3]) >= _HEAD_KEY:
            by_key.setdefault(f[3][:_HEAD_KEY], []).append(i)
        else:
            short.append(i)
    return formats, {k: tuple(sorted(v + short)) for k, v in by_key.items()}, tuple(short)


@lru_cache(maxsize=256)
def warn_sources(msg: str) -> tuple[str, ...]:
    """The NCCL source files that print a WARN with this text (the most specific catalogue format that matches it
    whole; messages/nccl_warn_formats.json, generated from NCCL's catalogue by benchmarks/warn_formats.py), or () when none does: for a WARN pasted
    without its ``file:line``. Only the formats whose head the text starts with are tried (the others cannot match
    it whole), in the table's order."""
    from .parse.bare_warn import _compiled

    msg = msg.strip()
    formats, by_key, short = _warn_sources()
    best = None
    files: set[str] = set()
    needs = _NEEDS
    for i in by_key.get(msg[:_HEAD_KEY], short):
        fmt, fs, n, head = formats[i]
        if best is not None and n < best:
            break
        if not msg.startswith(head):
            continue
        if not _may_match(needs, fmt, msg, fmt):
            continue  # a whole match would hold one of its literals: no need to run the pattern
        if _compiled(fmt).fullmatch(msg):
            best = n
            files.update(fs)
    return tuple(sorted(files))


#: Per format: the literals one of which any message of it holds (``engine.prefilter.required`` of its pattern),
#: None when there is no useful set. Tested with ``in`` before the pattern (a fullmatch of a message a few hundred
#: characters long: the ~20 formats with a short head are tried on every message, e.g. each rank's watchdog
#: text in the fail-safe's ledger). Filled as formats are first tried (bounded by the catalogue's size).
_NEEDS: dict[str, tuple[str, ...] | None] = {}


def _need(rx: re.Pattern[str]) -> tuple[str, ...] | None:
    """Literals one of which every match of ``rx`` contains (``engine.prefilter.required``), or None."""
    from .engine.prefilter import required

    return required(rx)


def _may_match(needs: dict[Any, Any], key: Any, text: str, pattern: re.Pattern[str] | str) -> bool:
    """Whether ``text`` holds one of the literals every match of ``pattern`` holds (True when it has no useful set):
    a test with ``in`` that spares running the pattern. ``pattern`` is a compiled regex or a catalogue WARN format
    (parse/bare_warn.py compiles it); ``needs[key]`` caches its set, worked out when it is first asked for."""
    need = needs.get(key, _UNSET)
    if need is _UNSET:
        if isinstance(pattern, str):
            from .parse.bare_warn import _compiled

            pattern = _compiled(pattern)
        need = needs[key] = _need(pattern)
    if need is None:
        return True
    for x in need:  # (a loop: a few literals each; ``any`` over a generator costs more)
        if x in text:
            return True
    return False


@lru_cache(maxsize=8)
def load_tables(dirs: tuple[str, ...] = ()) -> Tables:
    """The built-in tables, after the user's ``dirs`` (cached per process)."""
    return build_tables(table_files(dirs))
