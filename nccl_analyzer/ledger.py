"""The fail-safe's ledger: every error-level line of an analysis, and which of them need no explanation.

``ErrorLedger`` collects the lines (bounded: at most ``CAP`` are kept, the rest counted) and, at the end,
``settle``s the ones the input itself explains (harmless per the tables, retries that later succeeded, caught
exceptions, attempts torchelastic restarted, teardown). What a line means comes from the message tables
(``messages/*.toml``, ``messages.py``). ``failsafe.account`` then matches the rest to the diagnosis.
"""
from __future__ import annotations

import bisect
import fnmatch
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from .engine.virtual import field_value
from .intern import interned
from .messages import Meaning, Tables, load_tables
from .model import Event
from .restarts import Restarts

#: Error lines kept for the bookkeeping (a huge log with more only counts the rest).
CAP = 5000
#: Virtual fields (engine/virtual.py) an events.toml `where` may test: where a traceback was.
_FRAME_FIELDS = frozenset(("frames_text", "frames_code", "last_frame_file", "last_frame_func"))
_NUM = re.compile(r"0x[0-9a-fA-F]+|\d+")
_PY = ("python.traceback", "python.exception")
_TRACE = "nccl.error.trace"
_XID = "system.xid"  # an NVRM Xid line: its PCI device is a GPU
_NONE: frozenset[str] = frozenset()


@dataclass(slots=True)
class _Err:
    seq: int
    path: str
    line: int
    end: int
    kind: str
    text: str
    rank: int | None
    meaning: Meaning
    key: str  # one string per distinct key (``_KEYS``): the lines of one failure on every rank share theirs
    body_at: Any  # the message (``body``): where it starts in ``text`` when it is the text's end, else the string
    exc_type: str = ""
    host: str | None = None
    pid: int | None = None
    settled: str | None = None  # the dismissal reason once decided
    uncaught: bool = False  # printed by torch's excepthook: it ended the process
    handled: bool = False  # a whole traceback printed by the program's own handler (events.toml [caught] entry)
    handler: str = ""  # a handled one's outermost frame ("file:function:line"): the code that caught and printed it
    goes_on: str | None = None  # its outermost frame prints it and carries on (events.toml [caught] goes_on)
    quoted: bool = False  # a traceback the program printed as text (events.toml [caught] quoted)
    parent: "_Err | None" = None
    device: str | None = None  # the PCI device ("bb:dd") a line whose meaning needs it to be a GPU names
    tid: int | None = None  # the NCCL thread id (events.toml absorbs_thread)

    @property
    def body(self) -> str:
        """The message (``fields["msg"]`` or ``["message"]``, else the text), its first 500 characters."""
        b = self.body_at
        return self.text[b:] if b.__class__ is int else b


#: Each distinct ledger key, one string (bounded: past this many a key is kept as it is). At 3,000 ranks the 5,000
#: lines kept (``CAP``) had 12 distinct keys of ~200 characters each.
_KEYS: dict[str, str] = {}
_KEYS_CAP = 65536


def _body_at(text: str, body: str) -> Any:
    """``body`` as ``_Err.body_at``: its offset in ``text`` when ``text`` ends with it (NCCL's and torch's messages
    are the end of their line: 75% of the lines kept at 400 ranks), else ``body`` itself."""
    return len(text) - len(body) if body and text.endswith(body) else body


def _pci(addr: str) -> str:
    """A PCI address as "bb:dd" (no domain, no function): "0000:3B:00.0", "3b:00.0", "0000:3b:00" -> "3b:00"."""
    parts = addr.lower().split(".")[0].split(":")
    return ":".join(parts[-2:])


def _body(ev: Event) -> str:
    return str(ev.fields.get("msg") or ev.fields.get("message") or ev.text)


class ErrorLedger:
    """Collects the error-level events of an analysis (``add`` every event) and accounts for them at the end."""

    def __init__(self, tables: Tables | None = None, cap: int = CAP):
        self.t = tables or load_tables()
        self.cap = cap
        self.errors: list[_Err] = []
        self.seen = 0
        # (path, rank) -> last line of a progress event of that rank; (path, None) -> of an event of a kind that
        # settles lines of no known rank (events.toml [progress] unranked: a process group created)
        self.progress: dict[tuple[str, Any], int] = {}
        # path -> the processes (host, pid) whose progress events it holds (at most 2 kept: "one" or "several")
        self.progress_procs: dict[str, set[tuple[str | None, int | None]]] = {}
        # (path, host, pid) -> that process's last NCCL WARN: the "file:line -> N" traces after it are that failure
        # on its way up NCCL's call stack (NCCLCHECK), not a failure of their own
        self._last_warn: dict[tuple[str, str | None, int | None], _Err] = {}
        self.fatal = False  # torchrun reports a worker that exited with a status > 0 (or unknown)
        self.launcher: set[str] = set()  # paths holding records of a launcher that reports failed workers
        self._launcher_kinds: dict[str, bool] = {}  # kind -> is a launcher record (the kinds are few)
        self.torchrun = False  # torchrun reports any failed worker
        self._quoted: list[_Err] = []  # quoted tracebacks: they count as such only where the launcher's records are
        self.restarts = Restarts(*self.t.restarted)  # torchelastic restarts the job got past (restarts.py)
        self._recovered: dict[str, int] = {}  # path -> the last line of its recovered attempts (settle)
        self.gpus: set[str] = set()  # PCI devices ("bb:dd") the input names as GPUs (NCCL's busId, NVRM Xid lines)

    def reads(self, kind: str) -> bool:
        """Whether events of ``kind`` can change what the ledger accounts for (triage.py may skip the others)."""
        t = self.t
        return self.restarts.reads(kind) or kind in t.progress_kinds or kind in t.caught_not_with or kind in t.caught_kinds \
            or bool(t.entries_for(kind)) or self._launcher_kind(kind)

    def _launcher_kind(self, kind: str) -> bool:
        """Whether ``kind`` is a launcher record ([caught] quoted_with), decided once per kind (add() asks per event)."""
        got = self._launcher_kinds.get(kind)
        if got is None:
            got = self._launcher_kinds[kind] = any(fnmatch.fnmatchcase(kind, g) for g in self.t.caught_quoted_with)
        return got

    def add(self, ev: Event) -> None:
        kind = ev.kind
        gpu = ev.fields.get("pci_bus_id") or (ev.fields.get("pci") if kind == _XID else None)
        if gpu and len(self.gpus) < self.cap:
            self.gpus.add(_pci(str(gpu)))
        if self.restarts.reads(kind):
            self.restarts.add(ev)
        if ev.path not in self.launcher and self.t.caught_quoted_with and self._launcher_kind(kind):
            self.launcher.add(ev.path)
        if kind in self.t.progress_kinds:
            keys = [(ev.path, ev.rank)] if ev.rank is not None else []
            if ev.pid is not None:  # the same process (NCCL's INFO lines name no rank: host:pid does)
                keys.append((ev.path, ("pid", ev.host, ev.pid)))
            if kind in self.t.progress_unranked:
                keys.append((ev.path, None))
            for k in keys:
                if ev.line > self.progress.get(k, 0):
                    self.progress[k] = ev.line
            procs = self.progress_procs.setdefault(ev.path, set())
            if len(procs) < 2:
                procs.add((ev.host, ev.pid))
                if ev.pid is not None or ev.rank is not None:
                    self.progress.setdefault((ev.path, "any"), 0)
                    self.progress[(ev.path, "any")] = max(self.progress[(ev.path, "any")], ev.line)
            return
        if kind in self.t.caught_not_with:
            # An exception that escapes ends Python with status 1, or with SIGABRT (-6) when gloo / NCCL threads
            # still running at exit call std::terminate; a worker killed by another signal (SIGKILL, SIGTERM,
            # SIGSEGV, ...) did not die of a Python exception, so it does not make an earlier traceback uncaught.
            self.torchrun = True
            code = ev.fields.get("exitcode")
            try:
                if code is None or int(code) >= 0 or int(code) == -6:
                    self.fatal = True
            except (TypeError, ValueError):
                self.fatal = True
        # events.toml's `where` reads the stored fields, and the selectors' virtual fields of a traceback's frames
        found = self.t.event(kind, lambda name: field_value(ev, name) if name in _FRAME_FIELDS else ev.get(name))
        if found is None:
            return
        if found[0].absorbs_traces:  # not an error line itself: it says the traces before it were no failure
            self._absorb_traces(ev, found[1])
            return
        self.seen += 1
        if len(self.errors) >= self.cap:
            return
        entry, meaning = found
        meaning = self._refine(entry, meaning, ev)
        body = _body(ev)
        err = _Err(self.seen, ev.path, ev.line, ev.end_line or ev.line, kind, ev.text, ev.rank, meaning,
                   interned(_KEYS, f"{meaning.entry}|{_NUM.sub('#', body)[:300]}", _KEYS_CAP),
                   _body_at(ev.text, body[:500]),
                   str(ev.fields.get("exc_type") or ""), ev.host, ev.pid,
                   uncaught=self.t.caught_uncaught is not None and kind in self.t.caught_kinds
                   and bool(self.t.caught_uncaught.search(ev.text)),
                   handled=kind in self.t.caught_kinds and self._handled(ev),
                   handler=self._handler(ev) if kind in self.t.caught_kinds else "",
                   goes_on=self._goes_on(ev) if kind in self.t.caught_kinds else None,
                   quoted=kind in self.t.caught_kinds and self.t.caught_quoted is not None
                   and bool(ev.fields.get(self.t.caught_quoted)))
        if entry.subtable == "text":
            text_entry = next((e for e in self.t.text if e.name == ev.fields.get("family")), None)
            for g in text_entry.gpu_device if text_entry is not None else ():
                if ev.fields.get(g):
                    err.device = _pci(str(ev.fields[g]))
        if ev.tid is not None and ev.pid is not None and kind.startswith("nccl."):
            err.tid = ev.tid
        if entry.absorbs_thread:
            self._absorb_thread(ev, meaning)
        if err.quoted and self.t.caught_quoted_with:
            self._quoted.append(err)
        if ev.pid is not None:
            proc = (ev.path, ev.host, ev.pid)
            if kind == _TRACE:
                err.parent = self._last_warn.get(proc)
            elif entry.subtable == "nccl" and len(self._last_warn) < self.cap:
                self._last_warn[proc] = err
        self.errors.append(err)

    def _absorb_traces(self, ev: Event, meaning: Meaning) -> None:
        """The return-code traces ``ev``'s process printed right before it (no other error line of that process in
        between) are the failure ``ev`` reports NCCL went on from (events.toml ``absorbs_traces``): harmless."""
        if ev.pid is None:
            return
        for prev in self._same_process_before(ev):
            if prev.kind != _TRACE or prev.parent is not None or prev.settled is not None:
                break
            prev.settled = f"harmless: {meaning.harmless} ({meaning.entry}, line {ev.line})"

    def _same_process_before(self, ev: Event) -> Iterator[_Err]:
        """The error lines of ``ev``'s process (path, host, pid) among the last 64 kept, newest first."""
        for prev in reversed(self.errors[-64:]):
            if (prev.path, prev.host, prev.pid) == (ev.path, ev.host, ev.pid):
                yield prev

    def _absorb_thread(self, ev: Event, meaning: Meaning) -> None:
        """The NCCL WARNs and return-code traces ``ev``'s thread printed right before it (back to its previous such
        line; no other thread's unsettled error of that process in between) are the one request that thread dropped
        and went on from (events.toml ``absorbs_thread``). Not "harmless: ...": no rule may read them either."""
        if ev.pid is None or ev.tid is None:
            return
        for prev in self._same_process_before(ev):
            if prev.tid != ev.tid:
                if prev.settled is not None:
                    continue  # another thread's line that is no failure
                break
            if prev.settled is not None or prev.meaning.harmless is not None:
                break  # the thread's previous dropped request (its lines went with it) or a line that is none
            prev.settled = (f"one request NCCL's service thread dropped and went on from: {meaning.harmless} "
                            f"({meaning.entry}, line {ev.line})")

    def _handled(self, ev: Event) -> bool:
        """Whether a traceback was printed by the program's handler: whole, and its outermost frame is no entry.

        A chained one ("During handling of the above exception ...") is judged by its last part (``frames``): Python
        prints that one from the top of the stack too, so an escaping chain still starts at an entry."""
        frames, f = ev.fields.get("frames"), ev.fields
        if self.t.caught_entry is None or not frames or f.get("partial") or f.get("unraisable"):
            return False
        top = frames[0]
        return not self.t.caught_entry.search(f"{top.get('file', '')}:{top.get('function', '')}")

    def _handler(self, ev: Event) -> str:
        """A traceback's outermost frame as "file:function:line" (where the code that printed it caught it)."""
        frames = ev.fields.get("frames")
        if not frames:
            return ""
        top = frames[0]
        return f"{top.get('file', '')}:{top.get('function', '')}:{top.get('line', '')}"

    def _goes_on(self, ev: Event) -> str | None:
        """The outermost frame ("file:function") of a traceback printed by code that carries on, or None.

        Whole, or cut after its frames with its header kept (``incomplete``, not ``headless``): the header says the
        first frame shown is the outermost one, which is all this asks; what was raised does not matter here."""
        frames, f = ev.fields.get("frames"), ev.fields
        top_known = not f.get("partial") or (f.get("incomplete") and not f.get("headless"))
        if self.t.caught_goes_on is None or not frames or not top_known or f.get("chain"):
            return None
        top = f"{frames[0].get('file', '')}:{frames[0].get('function', '')}"
        return top if self.t.caught_goes_on.search(top) else None

    def _refine(self, entry: Any, meaning: Meaning, ev: Event) -> Meaning:
        if entry.subtable == "nccl":
            m = self.t.nccl_warn(ev.fields.get("file"), str(ev.fields.get("msg") or ""))  # no file: Tables.source_of
            return m or Meaning("other", None, "nccl:(no entry)", "no entry of messages/nccl.toml matches this WARN")
        if entry.subtable == "text":
            m = self.t.text_line(str(ev.fields.get("family")))
            if m is None:
                return Meaning("other", None, "text:(no entry)")
            text_entry = next(e for e in self.t.text if e.name == ev.fields.get("family"))
            if text_entry.via:
                sub = self.t.message(str(ev.fields.get(text_entry.via) or ""))
                if sub is not None and sub.id is not None:
                    return Meaning(sub.id, None, f"{m.entry}+{sub.entry}", m.note, m.retry, sub.teardown or m.teardown)
            return m
        if entry.via:
            sub = self.t.message(str(ev.fields.get(entry.via) or ""))
            if sub is not None and sub.id is not None:
                # the quoted message decides the id; a teardown it implies (an exit-time CUDA error) carries over
                return Meaning(sub.id, None, f"{meaning.entry}+{sub.entry}", meaning.note, meaning.retry,
                               sub.teardown or meaning.teardown)
        return meaning

    # -- the end ------------------------------------------------------------------------------------------
    def settle(self, last_lines: dict[str, int], world: int | None = None) -> None:
        """Decide which lines need no explanation: harmless per the table, retries that later succeeded, caught
        exceptions after which the rank went on (in that order; see events.toml ``[caught]``)."""
        for e in self._quoted:
            e.quoted = e.path in self.launcher
        for e in self.errors:  # a line about a PCI device that must be a GPU (messages gpu_device): is it one?
            if e.device is not None and e.device not in self.gpus:
                m = e.meaning
                e.meaning = Meaning("other", None, m.entry, f"PCI device {e.device} is no GPU this input names", m.retry)
        by_path: dict[str, list[_Err]] = {}
        for e in self.errors:
            by_path.setdefault(e.path, []).append(e)
        for path, errs in by_path.items():
            errs.sort(key=lambda e: (e.line, e.seq))
            starts = [e.line for e in errs]
            for p in errs:  # events derived from a traceback's lines (its message) belong to it
                if p.kind in _PY and p.end > p.line:
                    for e in errs[bisect.bisect_left(starts, p.line):bisect.bisect_right(starts, p.end)]:
                        if e.parent is None and e.kind not in _PY:
                            e.parent = p
                    # torch's NCCL error quotes ncclGetLastError(), the text of the WARN NCCL printed just before it
                    # ("Last error:\n<WARN>"): that WARN is this exception's own failure (caught with it, or not)
                    for w in reversed(errs[max(0, bisect.bisect_left(starts, p.line) - 8):bisect.bisect_left(starts, p.line)]):
                        if w.kind.startswith("nccl.warn") and w.parent is None and len(w.body) > 8 \
                                and f"Last error:\n{w.body}" in p.body:
                            w.parent = p
                            break
            # a line of no known rank: where the input holds the progress of ONE process only (a per-rank log, one
            # worker's output), that process getting further shows the rendezvous it was retrying succeeded
            one = len(self.progress_procs.get(path, ())) == 1
            anyone = self.progress.get((path, "any"), 0) if one else self.progress.get((path, None), 0)
            rec = self.restarts.recovered(path, [(e.line, e.meaning.harmless is not None) for e in errs],
                                          last_lines.get(path, 0))
            if rec is not None:
                self._recovered[path] = rec[0]
                for e in errs:
                    if e.line <= rec[0] and e.meaning.harmless is None:
                        e.settled = rec[1]
            for e in errs:
                if e.settled is not None:
                    continue
                got = self.progress.get((path, e.rank), 0) if e.rank is not None else anyone
                if e.pid is not None:
                    got = max(got, self.progress.get((path, ("pid", e.host, e.pid)), 0))
                if e.meaning.harmless is not None:
                    e.settled = f"harmless: {e.meaning.harmless} ({e.meaning.entry})"
                elif e.goes_on is not None:
                    e.settled = (f"a caught exception: printed by {e.goes_on.rsplit('/', 1)[-1]}, which carries on "
                                 "(it never ends the process)")
                elif e.meaning.retry and got > e.end:
                    e.settled = ("a retry that later succeeded: the same input shows the rank getting further "
                                 f"(line {got})")
            self._settle_survived(path, errs, world)
            last = last_lines.get(path, 0)
            blocking = False  # a later error line that is not an application exception
            later_keys: set[str] = set()  # later application exceptions (the same one again: another rank's)
            # later handled ones: (key, handler) -- the same handler printing the same exception again is that
            # handler catching it again (a retry loop), not another rank's crash
            later_handled: dict[str, set[str]] = {}
            err_lines = 0
            for e in reversed(errs):
                if e.parent is not None:
                    continue
                app = e.kind in self.t.caught_kinds and (e.meaning.id in self.t.caught_ids or e.quoted
                                                         or e.handled and e.meaning.id in self.t.caught_handled_ids)
                # With torchrun's report of the failed workers, their exit statuses decide (only signal deaths:
                # no worker died of an exception); without it, nothing but other application exceptions (which
                # show the process went on) may follow.
                usual = e.handled or e.quoted or self.t.caught_exc_type is None \
                    or bool(self.t.caught_exc_type.search(e.exc_type))
                if e.settled is None and app and not self.fatal and not e.uncaught and e.key not in later_keys \
                        and later_handled.get(e.key, _NONE) <= ({e.handler} if e.handled else _NONE) \
                        and (self.torchrun or (not blocking and usual)):
                    after = last - e.end - err_lines
                    if after >= self.t.caught_min_lines:
                        if self.torchrun:
                            why = "torchrun's failed workers all died by a signal, none of an exception"
                        elif later_keys:
                            why = "a later, different exception shows the process went on"
                        else:
                            why = "no error follows"
                        e.settled = f"a caught exception: {after} more lines of output follow and {why}"
                        if e.quoted:
                            e.settled = (f"quoted, not raised: an indented traceback is text the program printed; "
                                         f"{after} more lines of output follow and {why}")
                if e.settled is None:
                    if app and e.handled and e.handler:
                        later_handled.setdefault(e.key, set()).add(e.handler)
                    elif app:
                        later_keys.add(e.key)
                    else:
                        blocking = True
                err_lines += e.end - e.line + 1
            self._settle_repeats(errs)
            for e in errs:
                if e.parent is not None and e.parent.settled and e.parent.settled.startswith(("a caught", "quoted")):
                    e.settled = e.parent.settled
        self._settle_teardown()
        for e in self.errors:  # an NCCL WARN's return-code traces share its fate (harmless, teardown, ...)
            if e.kind == _TRACE and e.parent is not None and e.parent.settled and e.settled is None:
                e.settled = e.parent.settled

    def _settle_survived(self, path: str, errs: list[_Err], world: int | None) -> None:
        """Crash reports of no known rank that every rank of the job outlived (events.toml ``[survived]``)."""
        tails = (self.restarts.rank_tail or {}).get(path)
        if not self.t.survived_kinds or not tails or self.torchrun:
            return
        n = len(tails)
        if n < 2 or set(tails) != set(range(n)) or (world is not None and world != n):
            return
        later = False  # a later error line that is no failure of its own
        for e in reversed(errs):
            if e.parent is not None or e.settled is not None or e.meaning.harmless is not None:
                continue
            if e.kind in self.t.survived_kinds and e.rank is None and not later:
                fewest = min(sum(1 for x in tail if x > e.end) for tail in tails.values())
                if fewest >= self.t.survived_min_lines:
                    e.settled = (f"a crashed process that was none of the ranks: every one of the {n} ranks prints "
                                 f"at least {fewest} more lines after it, no error follows and torchrun reports no "
                                 "failed worker (a helper subprocess the job outlived)")
                    continue
            later = True

    @staticmethod
    def _settle_repeats(errs: list[_Err]) -> None:
        """A handled traceback printed again by the same handler (same outermost frame, same exception) after one
        the process went on from is that handler catching it again: the same settlement."""
        caught: dict[tuple[str, str], _Err] = {}
        for e in errs:  # (in line order)
            if not e.handled or not e.handler or e.parent is not None:
                continue
            k = (e.key, e.handler)
            first = caught.get(k)
            if e.settled is not None and e.settled.startswith("a caught"):
                caught.setdefault(k, e)
            elif e.settled is None and first is not None:
                e.settled = (f"a caught exception: the same exception, printed by the same handler "
                             f"({e.handler.rsplit('/', 1)[-1]}), as line {first.line}, after which the process went on")

    def _settle_teardown(self) -> None:
        """Lines that are only the consequence of a process ending (an NCCL proxy losing a local rank's connection)
        are no failure when they are all that is left: no other error line, no failed worker reported."""
        if self.fatal or self.torchrun or len(self.errors) >= self.cap:
            return
        left = [e for e in self.errors if e.settled is None and e.parent is None]
        # (an NCCL return-code trace alone is no teardown: it needs a line that says what ended)
        if not left or not all(e.meaning.teardown for e in left) or all(e.kind == _TRACE for e in left):
            return
        for e in left:
            e.settled = (f"teardown: {e.meaning.teardown}; no other line of the input reports a failure "
                         f"({e.meaning.entry})")

    def skip(self) -> "Callable[[Event], bool] | None":
        """For ``Matcher.hits(skip=...)``: events inside a caught exception or a retry that later succeeded are
        no failure, so no rule may match them (None when there are none)."""
        spans: dict[str, list[tuple[int, int]]] = {p: [(0, n)] for p, n in self._recovered.items()}
        for e in self.errors:
            if e.settled and not e.settled.startswith("harmless"):
                spans.setdefault(e.path, []).append((e.line, e.end))
        if not spans:
            return None

        def settled(ev: Event) -> bool:
            return any(a <= ev.line <= b for a, b in spans.get(ev.path, ()))

        return settled
