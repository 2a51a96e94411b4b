"""Block triage: find the lines that can matter in a whole block at C speed; count the rest.

A big job's log is mostly NCCL INFO lines that either type to a kind nothing reads (``Cuda Alloc Size ...``,
the topology dump ``30 : GPU/0-60``, per-channel ``Ring``/``Tree`` lines) or repeat per channel, peer or call
what an earlier line of the same process already said (``Channel 05/0 : 3[3] -> 4[4] via P2P/IPC``,
``AllReduce: opCount 1f ...``). ``scan`` runs ONE compiled pattern over each decoded 1 MiB block:

- an *inert* line (a plain NCCL INFO line whose whole body has one of the ``INERT_SHAPES`` and whose kind
  neither the job model nor any loaded rule reads: the caller decides, see ``Analyzer``) never leaves the
  regex engine; it is only counted (``Scan.counted``);
- a *chatter* line (collective call, transport, ring, tree, ``Trees``, ring order) gives one match: the first
  line of each (process, chatter key) goes the full way, later ones are counted as ``NcclParser``'s compact mode
  counts them (the key is the parser's own ``_chatter_key``), sharing its state (the last one of each process is
  kept and becomes an event at the end: what a process did last);
- a *stage-only* line (topology dump: a kind only the per-rank stage reads, with a fixed stage; the caller
  decides, see ``Analyzer``) gives one match: of each run of them per process with no other parsed line between,
  the first and the last are parsed (the last just before the next parsed line), the rest counted;
- every other line gives one match and goes the full way: cleaning, ``Line``, parsers, events.

Line numbers come from counting newlines between matches (``str.count``, C). A line can only be skipped when
its head is a plain ``host:pid:tid [dev] NCCL INFO`` (optionally NCCL's own ``[date time]``) with no wrapper
prefix, control character or escape anywhere in the line: the full path would read it exactly as it is. After
a WARN that continues on unprefixed lines, or while a native crash report is open (the next line another parser
takes ends it), the next lines go the full way until it is closed.
"""
from __future__ import annotations

import re
import sys
from typing import Callable

from .classify import EventStream
from .model import Event, Line
from .parse.nccl import _chatter_key as chatter_key
from .sources import MAX_LINE, Source, clean_text, read_text_blocks
from .stage import fixed_stage

#: Whole-body shapes that always type to one kind (tests/test_triage.py checks every fixture line against
#: the parser). Real samples from fixtures/h200-nccl-2.28.9/01_ok_subsys_all (NCCL 2.28.9, SUBSYS=ALL).
_NODE = r"[A-Z]{3}/[0-9a-fA-F]+(?:-[0-9a-fA-F]+)?"
INERT_SHAPES: tuple[tuple[str, str], ...] = (
    # "channel.cc:1620 Cuda Alloc Size 12 pointer 0x7f5589f49000", "init.cc:1994 Cuda Host Alloc Size 4 pointer 0x7f.."
    ("nccl.alloc", r"(?:[\w./-]+:\d+ )?Cuda (?:Host )?Alloc Size \d+ pointer 0x[0-9a-fA-F]+"),
    # " 0 : GPU/0-60", "31 : NET/0-0 GPU/7-db000 NET/0-0" (graph/search.cc, per channel)
    ("nccl.topo.graph", rf" *\d+ :(?: {_NODE})+"),
    # "Ring 00 : 0 -> 1 -> 2" (2.19+), "Tree 0 : -1 -> 0 -> 1/-1/-1", "Trees [0] 1/-1/-1->0->-1 [1] ..."
    ("nccl.ring", r"Ring \d+ : -?\d+ -> \d+ -> -?\d+"),
    ("nccl.tree", r"Tree \d+ : -?\d+ -> \d+ -> -?\d+/-?\d+/-?\d+"),
    ("nccl.trees", r"Trees(?: \[\d+\] -?\d+/-?\d+/-?\d+->\d+->-?\d+)+"),
    # "Channel 00/64 : 0 1 2 3" (ring order, per channel), "Channel 00/02 :    0   1"
    ("nccl.channel", r"Channel \d+/\d+ :(?: +\d+)+"),
    # "+ PCI[48.0] - GPU/0-60 (0)", "    + NET[1.2] - NET/0-0 (0/0/0/1.250000)" (topology dump)
    ("nccl.topo.link", rf" *\+ [A-Z]+\[[\d.]+\] - {_NODE}(?: \([\d./]+\))?"),
    # "GPU/0-60 :GPU/0-60 (0/5000.0/LOC) CPU/0-ffffffffffffff (1/48.0/PHB) NET/0-0 (3/1.2/PHB)"
    ("nccl.topo.paths", rf"{_NODE} :(?:{_NODE} \([\d.]+/[\d.]+/[A-Z]+\) ?)+"),
    # "RAS peersHash 0xe2829b2ffadb9e45", "RAS thread started", "RAS peer 0: socket 192.0.2.2<44667>, pid 467, ..."
    ("nccl.ras", r"RAS (?:thread started|peersHash 0x[0-9a-fA-F]+|(?:network|client) listening socket at "
                 r"[\w.:%\[\]-]+<\d+>|handling local addRanks request \(old nRasPeers \d+\)|finished local "
                 r"processing of addRanks request \(new nRasPeers \d+, nRankPeers \d+\)|peer \d+: socket "
                 r"[\w.:%\[\]-]+<\d+>, pid \d+, GPU \d+(?: \[this process\])?)"),
)
# The head the full path leaves as it is (sources.clean_text strips nothing from it): host:pid:tid [dev],
# optionally NCCL_DEBUG_TIMESTAMP_FORMAT's "[2026-11-29 13:53:31] " (2.26+).
# Possessive where backtracking can never help (Python 3.11+; the same matches): the host runs up to its ":",
# the numbers up to the next non-digit. It spares the regex engine the way back on every line of a block.
_P = "++" if sys.version_info >= (3, 11) else "+"
_HEAD = (r"(?:\[[\d :.,/T+-]+\] )?(?P<host>[\w.-]" + _P + r"):(?P<pid>\d" + _P + r"):\d" + _P + r" \[\d" + _P +
         r"\] NCCL INFO ")
_CLEAN = r"[^\x00-\x08\x0a-\x1f\x7f]"  # what clean_text keeps unchanged (tab included)


_PLAIN_HEAD = _HEAD.replace("?P<host>", "").replace("?P<pid>", "")
_PREV_HEAD = re.compile(r"(?:\[[\d :.,/T+-]+\] )?[\w.-]+:(\d+):\d+ \[\d+\] NCCL ")
# A collective-call line ("AllReduce: opCount 1f sendbuff ..."), its process ("host:pid") and call name.
_COLL = (r"\n(?:\[[\d :.,/T+-]+\] )?([\w.-]" + _P + r":\d" + _P + r"):\d" + _P + r" \[\d" + _P +
         r"\] NCCL INFO (\w+): opCount " + _CLEAN + r"*(?![^\n])")
_COLL_RE = re.compile(_COLL)
# The same in a block with no control character (``read_text_blocks``' ``controls``): every line ends clean, so
# the head and "opCount " decide (the regex engine no longer walks the rest of each of the block's call lines).
_COLL_CLEAN_RE = re.compile(_COLL[:-len(_CLEAN + r"*(?![^\n])")])
# Chatter kinds that, when all inert, leave collective calls as the only chatter a block can hold.
_OTHER_CHATTER = frozenset({"nccl.ring", "nccl.tree", "nccl.trees", "nccl.channel"})
_TAIL = 1 << 16
_OTHER_RE = re.compile(r"\n" + _PLAIN_HEAD + "(?:" + "|".join(rx for kind, rx in INERT_SHAPES if kind in _OTHER_CHATTER) + ")")


def _pattern(inert: frozenset[str], skip_coll: bool = False, runs: tuple[str, ...] = (),
             clean: bool = False) -> re.Pattern[str]:
    """The block pattern; ``clean``: for a block with no control character (a call line is skipped on its head
    and "opCount ", its rest is clean anyway)."""
    shapes = [rx for kind, rx in INERT_SHAPES if kind in inert]
    # stage-only kinds (``runs``): group s<i> is the i-th kind's shape
    run_alts = "".join(f"|(?P<s{i}>{dict(INERT_SHAPES)[k]}) *" for i, k in enumerate(runs))
    if skip_coll and not clean:
        shapes.append(r"\w+: opCount " + _CLEAN + r"*")
    alts = [r"(?:" + "|".join(shapes) + r") *(?![^\n])"] if shapes else []
    if skip_coll and clean:
        alts.append(r"\w+: opCount ")
    skip = (r"(?!" + _PLAIN_HEAD + "(?:" + "|".join(alts) + "))") if alts else ""
    return re.compile(
        r"\n" + skip + r"(?:" + _HEAD + r"(?:(?P<op>\w+): opCount " + _CLEAN + r"*|(?P<tr>Channel \d+/\d+ : " +
        _CLEAN + r"* via " + _CLEAN + r"*)|(?P<rt>(?:Ring |Trees|Tree |Channel )" + _CLEAN + r"*)" + run_alts +
        r")(?![^\n])|[^\n]*)")


_PATTERNS: dict[tuple[frozenset[str], bool, tuple[str, ...], bool], re.Pattern[str]] = {}


def _compiled(inert: frozenset[str], skip_coll: bool, runs: tuple[str, ...] = (), clean: bool = False) -> re.Pattern[str]:
    rx = _PATTERNS.get((inert, skip_coll, runs, clean))
    if rx is None:
        rx = _PATTERNS[(inert, skip_coll, runs, clean)] = _pattern(inert, skip_coll, runs, clean)
    return rx


def _maybe_other(t: str) -> bool:
    """Whether block ``t`` may hold a ring, tree or ring-order line (``_OTHER_RE``): three substring tests."""
    return "NCCL INFO Ring " in t or "NCCL INFO Tree" in t or "NCCL INFO Channel " in t


def run_kinds_of(stage_only: frozenset[str]) -> frozenset[str]:
    """The kinds of ``stage_only`` that ``scan`` parses by runs (first and last line): a fixed stage, not chatter."""
    return frozenset(k for k in stage_only if k not in _OTHER_CHATTER and fixed_stage(k) is not None)


def _last_calls(t: str, procs: set[str], coll: re.Pattern[str] = _COLL_RE) -> dict[str, int]:
    """Index in ``t`` of the last collective-call line of each process in ``procs`` (searched from the end in
    growing windows: ranks log round robin, so the last window usually holds them all)."""
    found: dict[str, int] = {}
    end = len(t)
    size = _TAIL
    while end > 0 and len(found) < len(procs):
        start = t.rfind("\n", 0, max(0, end - size)) if end > size else 0
        start = max(start, 0)
        here: dict[str, int] = {}
        for m in coll.finditer(t, start, end):
            here[m.group(1)] = m.start()
        for proc, pos in here.items():
            found.setdefault(proc, pos)
        end = start
        size *= 4
    return found


class Scan:
    """Counts of one ``scan`` (lines read, lines counted without the full path)."""

    __slots__ = ("lines", "counted")

    def __init__(self) -> None:
        self.lines = 0
        self.counted = 0


def scan(stream, src: Source, es: EventStream, inert: frozenset[str], emit: Callable[[list[Event]], None],
         progress: Callable[[int], None] | None = None, lineno: int = 0,
         stage_only: frozenset[str] = frozenset()) -> Scan:
    """Read a binary ``stream`` of ``src`` in blocks, feed the lines that can matter to ``es`` (line numbers from
    ``lineno + 1``) and pass their events to ``emit``; ``progress(lines)`` after each block.

    ``stage_only``: kinds (of ``INERT_SHAPES``) that only the per-rank stage reads and whose stage is fixed
    (``stage.fixed_stage``): of each run of such lines of one process with no parsed line of any process between
    them, only the first and the last are parsed (the last just before the next parsed line), which moves the
    stage exactly as the whole run does."""
    run_kinds = tuple(sorted(run_kinds_of(stage_only) - inert))
    run_stage = {f"s{i}": fixed_stage(k) for i, k in enumerate(run_kinds)}
    rx_all = _compiled(inert, False, run_kinds)
    # Block mode needs a block whose only chatter is collective calls: with the other chatter kinds inert that holds
    # for every block; else (the job model's stage tracking reads rings/trees/channels) it is checked per block.
    rx_skip = _compiled(inert, True, run_kinds)
    rx_skip_clean = _compiled(inert, True, run_kinds, True)
    controls: list[bool] = []  # per block read: whether it holds a control character (read_text_blocks)
    other = None if _OTHER_CHATTER <= inert else _OTHER_RE
    nccl = es._nccl
    nccl.chatter_src = src
    seen = nccl._chatter_seen
    last = nccl._chatter_last
    crash = es._crash
    runs: dict[tuple[str, int], list] = {}  # (host, pid) -> [stage, lineno, text] of the open run's last line
    held = 0  # runs holding a line not parsed yet
    es_feed = es.feed

    def release() -> None:
        # the lines the open runs hold, parsed in line order (before any later line is)
        nonlocal held, fed
        for r in sorted((r for r in runs.values() if r[1] is not None), key=lambda r: r[1]):
            fed += 1
            evs = es_feed(clean_text(r[2], src, r[1]))
            r[1] = r[2] = None
            if evs:
                emit(evs)
        held = 0

    def feed(line: Line) -> list[Event]:
        # any line parsed but a run's first ends every run (a run's first line only shows a stage of its process)
        if held:
            release()
        if runs:
            runs.clear()
        return es_feed(line)

    counts = es.counts
    out = Scan()
    first, compacted0 = lineno, nccl.compacted
    fast: set[tuple[str, str, str]] = set()  # chatter keys whose first line went the full way
    fast_calls: set[tuple[str, str]] = set()  # the same for collective calls, as ("host:pid", call)
    pids: dict[str, int] = {}
    fed = 0
    for item in read_text_blocks(stream, src, controls=controls):
        if item.__class__ is not str:
            lineno += 1
            s, truncated = item  # type: ignore[misc]
            if truncated:
                src.note_cut(lineno)
            fed += 1
            events = feed(clean_text(s, src, lineno, truncated))
            if events:
                emit(events)
            continue
        t = "\n" + item  # type: ignore[operator]
        clean = not controls.pop()
        n = len(t)
        count = t.count
        base = lineno
        calls = None
        rx = rx_all
        if nccl._pending is None and crash._open is None and nccl.compact and t.find(" via ") < 0 and (
                other is None or not _maybe_other(t) or other.search(t) is None):
            # Block mode: when every collective-call line of this block repeats a (process, call) already seen
            # and no other chatter can be here, the calls never leave the regex engine either; afterwards only
            # the last call of each process is looked up (what the per-line path would keep).
            coll = _COLL_CLEAN_RE if clean else _COLL_RE
            calls = coll.findall(t)
            if calls and all(k in fast_calls for k in set(calls)):
                rx = rx_skip_clean if clean else rx_skip
            else:
                calls = None
        search = rx.search
        end = 0
        while True:
            while (nccl._pending is not None or crash._open is not None) and end < n:
                # A WARN continues on the next lines, or a native crash report is open (the next line another
                # parser takes closes it): they go the full way, whatever they are, until it closes.
                nxt = t.find("\n", end + 1)
                stop = n if nxt < 0 else nxt
                lineno += 1
                s = t[end + 1:stop]
                fed += 1
                if len(s) > MAX_LINE:
                    src.note_cut(lineno)
                events = feed(clean_text(s[:MAX_LINE], src, lineno, len(s) > MAX_LINE))
                if events:
                    emit(events)
                end = stop
            pos = end
            m = search(t, pos)
            if m is None:
                break
            start = m.start()
            lineno += count("\n", pos, start + 1)
            end = m.end()
            kind = m.lastgroup
            if kind is not None and kind[0] == "s" and end - start <= MAX_LINE:
                host, pid = m.group("host", "pid")
                p = pids.get(pid)
                if p is None:
                    p = pids[pid] = int(pid)
                st = run_stage[kind]
                r = runs.get((host, p))
                if r is not None and r[0] is st:
                    if r[1] is None:
                        held += 1
                    r[1], r[2] = lineno, t[start + 1:end]
                    continue
                if held:
                    release()
                fed += 1
                events = es_feed(clean_text(t[start + 1:end], src, lineno))
                runs[(host, p)] = [st, None, None]
            elif kind is not None and kind[0] != "s" and nccl._pending is None and end - start <= MAX_LINE:
                host, pid = m.group("host", "pid")
                if kind == "op":
                    ckey = m.group("op") + ":"
                elif kind == "tr":
                    ckey = t[t.rfind(" via ", start, end):end]
                else:  # ring, tree, trees, ring-order channel: the parser's own key
                    ckey = chatter_key(t[m.start("rt"):end])
                key = (host, pid, ckey)
                p = pids.get(pid)
                if p is None:
                    p = pids[pid] = int(pid)
                if key in fast:
                    last[(host, p)] = (lineno, t[start + 1:end])
                    nccl.compacted += 1
                    continue
                fed += 1
                events = feed(clean_text(t[start + 1:end], src, lineno))
                if (host, p, ckey) in seen:
                    fast.add(key)
                    if kind == "op":
                        fast_calls.add((f"{host}:{pid}", m.group("op")))
            else:
                s = t[start + 1:end]
                fed += 1
                texts = counts["text"]
                if len(s) > MAX_LINE:
                    src.note_cut(lineno)
                    events = feed(clean_text(s[:MAX_LINE], src, lineno, True))
                else:
                    events = feed(clean_text(s, src, lineno))
                if counts["text"] != texts and start > 0:
                    # program output: whose NCCL line (often an inert one, skipped above) came right before it
                    h = _PREV_HEAD.match(t, t.rfind("\n", 0, start) + 1)
                    if h is not None:
                        es.text_context(lineno, int(h.group(1)))
            if events:
                emit(events)
        lineno += count("\n", pos)
        if calls is not None:
            nccl.compacted += len(calls)
            lasts = sorted((i, proc) for proc, i in _last_calls(t, {c[0] for c in calls}, coll).items())
            at, ln = 0, base
            for i, proc in lasts:
                ln += count("\n", at, i + 1)
                at = i + 1
                host, _, pid = proc.rpartition(":")
                stop = t.find("\n", i + 1)
                last[(host, int(pid))] = (ln, t[i + 1:stop if stop >= 0 else n])
        if progress is not None:
            progress(lineno)
    if held:
        release()
    out.lines = lineno
    out.counted = lineno - first - fed - (nccl.compacted - compacted0)
    return out


def pending_line(src: Source, item: tuple[int, str] | Line) -> Line:
    """A chatter line kept by ``scan`` as (lineno, text), as the full path would have built it."""
    if isinstance(item, Line):
        return item
    lineno, s = item
    return Line(src.path, lineno, s, s, src.rank, src.local_rank, None, False)
