"""Dispatch each line to the parser that owns it; everything else becomes a ``text`` event."""
from __future__ import annotations

import heapq
import re
from collections import deque
from typing import Iterator

from .model import Event, Line
from .packed import HOLD_PACK, PackedEvent, pack, unpack
from .parse.bare_warn import BareWarnParser
from .parse.crash import CrashParser
from .parse.errtext import ErrorTextParser
from .parse.nccl import NcclParser
from .parse.nccltests import NcclTestsParser
from .parse.cudasample import CudaSampleParser
from .parse.serving import ServingParser
from .parse.torch import TorchParser


#: nccl-tests events that are also the program's own output (the hang rules read it as progress).
_TESTS_OUTPUT = frozenset(("nccltests.result", "nccltests.summary"))

#: Program-output line numbers remembered per stream (the hang rules look for output between a stage and the end).
TEXT_TAIL = 64

#: Ranks whose own output lines are remembered per stream (``EventStream.rank_tail``).
RANK_TAIL_RANKS = 256

#: A program-output line that names its rank without a wrapper prefix: torch's own "[rankN]" tag (its excepthook and
#: c10d prefixes), which training scripts copy into their prints and log formats ("[rank1] step 3 ...",
#: "2026-12-02 17:18:15,491 INFO [rank0] train: ..."). Looked for near the head of the line only.
_RANK_TAG = re.compile(r"\[rank(\d{1,6})\]")


class EventStream:
    """Turns the lines of ONE input stream into events, in input order (parsers keep per-stream state).

    Parsers emit a multi-line event (a traceback, a WARN with continuation lines) only when it ends, while
    the other parser may emit events for lines in between. Events are therefore held in a small heap and
    released once no parser still holds an event that starts earlier (``pending_line`` on a parser: the
    first line number of what it buffers, or None).

    Args:
        keep_text: also return ``text`` events for lines no grammar recognizes (the ``events`` export
            wants them; the analysis does not, and skipping them is most of the speed on big logs).
        compact: analysis mode: repeated NCCL channel/transport/collective chatter is counted, not turned into
            events (see ``NcclParser``).
        defer: (a worker process, parallel.py) the chatter lines compact mode keeps come out unparsed
            (``NcclParser``'s ``defer``).
    """

    __slots__ = ("_nccl", "_torch", "_crash", "_errtext", "_bare", "_tests", "_serving", "_cudasample", "keep_text", "counts", "_held", "_seq", "text_tail",
                 "_ctx", "ctx_tail", "rank_tail")

    def __init__(self, keep_text: bool = False, compact: bool = False, defer: bool = False):
        self._nccl = NcclParser(compact=compact, defer=defer)
        self._torch = TorchParser()
        self._crash = CrashParser()
        self._errtext = ErrorTextParser()  # error lines no grammar owns (launchers, MPI, bindings): messages/text.toml
        self._bare = BareWarnParser()  # an NCCL WARN message pasted without its prefix: messages/nccl_warn_formats.json
        self._tests = NcclTestsParser()  # nccl-tests' device list, result table and summary
        self._serving = ServingParser()  # a serving engine's NCCL banner (vLLM's pynccl)
        self._cudasample = CudaSampleParser()  # CUDA's p2pBandwidthLatencyTest output
        # line numbers of the last non-blank lines no parser took (the program's own output: progress)
        self.text_tail: deque[int] = deque(maxlen=TEXT_TAIL)
        # the same lines by the process whose NCCL line came last before them (None: a torch line or none came
        # last): in a console several processes share, a print most likely belongs to the process printing around it
        self._ctx: int | None = None
        self.ctx_tail: dict[int | None, deque[int]] = {}
        # the same lines by the rank they name (torchrun's "[defaultN]:" local rank, a "[rankN]:" prefix, a
        # "[rankN]" tag near the head): whether a worker torchrun reported failed printed again (restarts.py)
        self.rank_tail: dict[int, deque[int]] = {}
        self.keep_text = keep_text
        self.counts = {"text": 0}
        self._held: list[tuple[int, int, Event]] = []
        self._seq = 0

    def text_context(self, lineno: int, pid: int) -> None:
        """The program-output line ``lineno`` just fed came right after an NCCL line of ``pid`` that took no parser
        (the fast path skips inert NCCL lines): file it under that process."""
        tail = self.ctx_tail.get(self._ctx)
        if tail and tail[-1] == lineno and self._ctx != pid:
            tail.pop()
            mine = self.ctx_tail.get(pid)
            if mine is None and len(self.ctx_tail) < 4096:
                mine = self.ctx_tail[pid] = deque(maxlen=TEXT_TAIL)
            if mine is not None:
                mine.append(lineno)
        self._ctx = pid

    def feed(self, line: Line) -> list[Event]:
        events = self._nccl.feed(line)
        if events and events[-1].pid is not None:
            self._ctx = events[-1].pid  # (a bare "NCCL version" banner says no pid: whoever printed before)
        if events is None:
            events = self._torch.feed(line)
            if events:
                self._ctx = None
            if events is None:
                events = self._crash.feed(line)
                if events is None:
                    events = self._bare.feed(line)
                    if events is None:
                        events = self._errtext.feed(line)
                    if events is None:
                        events = self._tests.feed(line)
                        if events and events[0].kind in _TESTS_OUTPUT:
                            self._tail(line.lineno)  # a result row is the program's output (progress), as before
                        elif events is None:
                            events = self._serving.feed(line)
                            if events is None:
                                events = self._cudasample.feed(line)
                            if events:
                                self._tail(line.lineno)  # still the program's own output, as it was as text
            elif self._crash.pending_line is not None:
                events = self._crash.close() + events  # another parser took the line: the crash report ended
        elif self._crash.pending_line is not None:
            events = self._crash.close() + events
        if events is None:
                self.counts["text"] += 1
                if line.text and not line.text.isspace():
                    self._tail(line.lineno)
                    self._rank_line(line)
                if not self.keep_text:
                    return self._release() if self._held else []
                events = [Event("text", line.path, line.lineno, line.raw, rank=line.rank, time=line.time)]
        if not self._held:
            if not events:
                return events
            if len(events) == 1 or _ordered(events):
                if self._pending() is None:
                    return events
        held = self._held
        for ev in events:
            self._seq += 1
            # a long wait (an open block near the start of a big log): the later events wait packed (packed.py)
            heapq.heappush(held, (ev.line, self._seq, ev if len(held) < HOLD_PACK else pack(ev)))
        return self._release()

    def _tail(self, lineno: int) -> None:
        self.text_tail.append(lineno)
        tail = self.ctx_tail.get(self._ctx)
        if tail is None and len(self.ctx_tail) < 4096:
            tail = self.ctx_tail[self._ctx] = deque(maxlen=TEXT_TAIL)
        if tail is not None:
            tail.append(lineno)

    def _rank_line(self, line: Line) -> None:
        rank = line.local_rank if line.local_rank is not None else line.rank
        if rank is None:
            head = line.text[:80]
            if "[rank" not in head:
                return
            m = _RANK_TAG.search(head)
            if m is None:
                return
            rank = int(m.group(1))
        tail = self.rank_tail.get(rank)
        if tail is None:
            if len(self.rank_tail) >= RANK_TAIL_RANKS:
                return
            tail = self.rank_tail[rank] = deque(maxlen=TEXT_TAIL)
        tail.append(line.lineno)

    def _pending(self) -> int | None:
        a = self._nccl.pending_line
        b = self._torch.pending_line
        c = self._crash.pending_line
        if c is not None:
            return min(x for x in (a, b, c) if x is not None)
        if a is None:
            return b
        if b is None:
            return a
        return min(a, b)

    def _release(self) -> list[Event]:
        limit = self._pending()
        out = []
        held = self._held
        while held and (limit is None or held[0][0] < limit):
            out.append(unpack(heapq.heappop(held)[2]))
        return out

    @property
    def compacted(self) -> int:
        return self._nccl.compacted

    @property
    def parser_errors(self) -> int:
        return self._torch.errors

    def flush(self) -> list[Event]:
        return [unpack(ev) for ev in self.drain()]

    def drain(self) -> Iterator[Event | PackedEvent]:
        """``flush`` one event at a time, as it waited: whole, or packed (packed.py) after a long wait."""
        for ev in self._nccl.flush() + self._torch.flush() + self._crash.flush():
            self._seq += 1
            heapq.heappush(self._held, (ev.line, self._seq, ev))
        held = self._held
        while held:
            yield heapq.heappop(held)[2]


def _ordered(events: list[Event]) -> bool:
    return all(events[i].line <= events[i + 1].line for i in range(len(events) - 1))
