"""Is a source a paste, and of which form: ``detect`` reads a source's head, ``plan_for`` turns a raw log
down with a few C-level scans and otherwise sets the ``Plan`` flags its sample shows."""
from __future__ import annotations

import itertools
from operator import itemgetter
from typing import Iterable, Iterator

from .boundary import _tb_cut, _unglue, _word_wrap_width, _wrap_width
from .order import _reversed_text
from .plan import Plan, _printable
from .rx import _AUTOLINK, _BRACKET_GUTTER, _ELISION, _FENCE, _GUTTER, _HANG_NOTE, _LINE_LINK, _PROSE_QUOTE, _QUOTED_HEAD, _TB_HEADER, _Rx


#: Bytes of a source's head looked at to decide whether it is a paste.
SAMPLE_BYTES = 64 * 1024


_FIRST = itemgetter(0)


def detect(items: Iterable[tuple[str, bool]]) -> tuple[list[tuple[str, bool]], Iterator[tuple[str, bool]], Plan | None]:
    """Read a source's head (about ``SAMPLE_BYTES``) and decide whether it is a paste.

    Returns:
        (the head's items, the iterator of the rest, a Plan or None for a raw log).
    """
    it = iter(items)
    head: list[tuple[str, bool]] = []
    lines: list[str] = []
    size = 0
    while size < SAMPLE_BYTES:  # whole chunks of lines, taken and measured in C
        chunk = list(itertools.islice(it, 128))
        if not chunk:
            break
        head += chunk
        texts = list(map(_FIRST, chunk))
        lines += texts
        size += len("\n".join(texts)) + 1
    return head, it, plan_for(lines)


def plan_for(lines: list[str]) -> Plan | None:
    """The Plan for a sample of lines, or None when nothing in it looks pasted.

    Runs once per source on its head, so a raw log must be turned down with a few C-level scans: one-character
    finds (memchr) for the rare marks (```` ` ````, ``~``, ``&``, ``…``) and a few substring tests on the first
    ``_CLOSE_BYTES``; per-line work only where one of those found something.
    """
    if not lines:
        return None
    text = "\n".join(lines)
    if text.find("\x1b") >= 0:  # colour codes: judge the text a terminal shows
        lines = [_printable(s) for s in lines]
        text = "\n".join(lines)
    near = text[:_CLOSE_BYTES]
    starts = set(map(_FIRST, filter(None, lines[:128])))  # the first characters of the first lines
    plan = Plan()
    if text.find("`") >= 0 and "```" in text or text.find("~") >= 0 and "~~~" in text:
        plan.fences = any(_FENCE.match(s) for s in lines if "``" in s or "~~" in s)
    if text.find("&") >= 0:
        plan.html = "&lt;" in text or "&gt;" in text or "&quot;" in text and '"' not in text \
            or ("&#39;" in text or "&#x27;" in text) and "'" not in text
    if text.find("%") >= 0 and "%20" in text:
        # text copied out of a URL: its lines hold no literal space (a progress bar's "50% " does)
        plan.urlenc = any("%20" in s and " " not in s.strip() for s in lines)
    if plan.fences or plan.html or "<" in starts:
        low = text.lower()
        plan.tags = any(t in low for t in _TAG_MARKS)
    nonempty: list[str] | None = None
    if ">" in starts or " " in starts and "\n >" in near:
        nonempty = [s for s in lines if s.strip()]
        quoted = sum(1 for s in nonempty if s.lstrip(" \t")[:1] == ">")
        plan.quotes = quoted == len(nonempty) or quoted >= 2 and (quoted * 5 >= len(nonempty) or ">>" in text) \
            or quoted >= 1 and _blocks_in_prose(lines, _is_quoted)
    first = _first_nonempty(lines)
    if first[:1] in " \t" or _BLOCK_AFTER_BLANK.search(near):
        nonempty = nonempty or [s for s in lines if s.strip()]
        indented = sum(1 for s in nonempty if s[:1] in " \t")
        plan.indent = indented * 10 >= len(nonempty) * 9 or indented >= 1 and _code_blocks_in_prose(lines)
    if first[:1].isdigit() or first[:1] in " \t" and first.lstrip()[:1].isdigit():
        nonempty = nonempty or [s for s in lines if s.strip()]
        plan.gutter = _has_gutter(nonempty)
    if not plan.gutter and "1" in near and _GUTTER_AFTER_BLANK.search(near):
        plan.gutter = _gutter_in_prose(lines)
    if not plan.gutter and first[:1] == "[" and first[1:2].isdigit():
        nonempty = nonempty or [s for s in lines if s.strip()]
        plan.gutter = plan.bracketed = _has_bracket_gutter(nonempty)
    if first[:1].isalpha() and _NODE_LABEL.match(first):
        plan.nodes = _pdsh_nodes([s for s in lines if s.strip()])
    # GitHub's auto-links ("[net_ib.cc:101](http://net_ib.cc:101/)") are made in rendered text: quoted or plain
    plan.links = (plan.quotes or plan.indent) and "](http" in near and _AUTOLINK.search(text) is not None
    if text.find("\u2026") >= 0 or "." in starts or "<" in starts or "[" in starts and "\n[..." in near \
            or " " in starts and ("\n ..." in near or "\n [..." in near):
        plan.elisions = any(_ELISION.match(s) for s in lines
                            if len(s) < 48 and ("." in s or "\u2026" in s or "snip" in s))
    if starts & _NOTE_MARKS or any(s.lstrip()[:1] in _NOTE_MARKS for s in lines[-8:]):
        # (a reader's note of a hang mostly ends the paste: its last lines are looked at too)
        plan.notes = any(_HANG_NOTE.match(s) for s in lines if len(s) < 48 and s.lstrip()[:1] in _NOTE_MARKS)
    if "[" in starts and "]:[rank" in near:
        plan.glued = _rank_rank(near)
    if "[" in starts and "](http" in near:
        # a log pasted as a Markdown link's text: the whole line is "[<text>](https://...)"
        plan.links = plan.links or any(_LINE_LINK.match(s) for s in lines if s[:1] == "[" and "](http" in s)
    if text.find(_TB_HEADER) > 0:
        # a traceback flattened into a line with the record before it (the paste lost its line breaks)
        plan.glued = plan.glued or any(_tb_cut(s) is not None for s in lines if _TB_HEADER in s)
    # a stray indent before "Last error:" (GitHub keeps one leading space of a re-flowed traceback)
    plan.stray = " " in starts and "\n Last error:" in near or text.startswith(" Last error:")
    # a sentence that quotes a whole log line (a quote mark, then a head only a program writes)
    plan.prose = len(lines) < _PROSE_LINES and any(c in near for c in "\"`\u201c") \
        and _QUOTED_HEAD.search(near) is not None and _PROSE_QUOTE_NEAR.search(near) is not None
    decorated = plan.fences or plan.tags or plan.html or plan.quotes or plan.indent or plan.gutter or plan.links \
        or plan.stray or plan.prose or bool(plan.nodes)
    # a paste that lost its line breaks: several NCCL records run together on one line (a raw log writes one per line)
    plan.glued = plan.glued or text.count(" NCCL ") > 2 and any(s.count(" NCCL ") > 2 for s in lines)
    if decorated or plan.glued:
        # a paste may also hold another process's NCCL line written into an unfinished one
        plan.hosts = frozenset(m.group(1) for m in map(_LINE_HOST.match, lines) if m)
        plan.glued = plan.glued or any(_unglue(s, plan.hosts) for s in lines if s.count(" NCCL ") > 1)
    # a hard wrap shows on every screenful: the first lines tell (max/len over a whole sample cost as much as
    # the rest of this function)
    head = _content(lines[:_WRAP_LINES], plan) if decorated else lines[:_WRAP_LINES]
    # an exception's message a person wrapped at the words first: its one line that happens to end at the width
    # would pass for a hard wrap, which joins the pieces without the space the wrap took
    plan.width = _word_wrap_width(head)
    plan.words = plan.width > 0
    if not plan.words:
        plan.width = _wrap_width(head)
    plan.wrap = not plan.words and plan.width > 0
    # structured logging: one JSON object per line (python-json-logger, structlog, a JSON formatter of the
    # program's own); a record's multi-line field (the "exc" / "exc_info" / "stack" text logging puts the formatted
    # traceback in) holds its lines as "\\n" escapes
    plan.jsonl = ('\n{"' in text or text[:2] == '{"') \
        and sum(1 for s in lines if s[:2] == '{"' and s.rstrip()[-1:] == "}") >= 2
    if not (decorated or plan.elisions or plan.notes or plan.glued or plan.wrap or plan.words or plan.urlenc
            or plan.jsonl
            or _reversed_text(near, lines)):
        return None
    return plan


# An indented line right after a blank one (CRLF kept): where a Markdown indented code block may start (2 or more
# spaces: GitHub renders a 2-space block as text, but people paste log lines so indented between sentences).
_BLOCK_AFTER_BLANK = _Rx(r"\n[ \t]*\r?\n(?:  +|\t)\S")
# A gutter that starts at 1 right after a blank line: a numbered block pasted between sentences.
_GUTTER_AFTER_BLANK = _Rx(r"\n[ \t]*\r?\n[ \t]*1(?: ?\| ?|\t| ?\u2502 ?)")
#: Sentences quoting log lines are looked for only in a sample of fewer lines (a paste in prose is short; a raw log's
#: many quote marks would cost a regex scan on every source).
_PROSE_LINES = 200
_PROSE_QUOTE_NEAR = _Rx(r"(?m)^" + _PROSE_QUOTE.pattern)
#: The multi-character tests of ``plan_for`` read only this much of the sample (they cost a pass each).
_CLOSE_BYTES = 8 * 1024
#: Lines of the sample that the hard-wrap test reads.
_WRAP_LINES = 160
_TAG_MARKS = ("<details", "<summary", "<pre>", "</pre>", "<br>", "<br/>", "</code>", "<blockquote")


def _code_blocks_in_prose(lines: list[str]) -> bool:
    """Markdown indented code blocks between lines of prose: every indented run has a blank line (or the sample's
    edge) on both sides, so no indented line touches an unindented one. A raw log's indented lines (traceback
    frames, continuation lines) always follow their unindented head directly."""
    prev = ""
    for s in lines:
        if s.strip() and prev.strip() and (s[:1] in " \t") != (prev[:1] in " \t"):
            return False
        prev = s
    return True


def _is_quoted(s: str) -> bool:
    return s.lstrip(" \t")[:1] == ">"


def _blocks_in_prose(lines: list[str], inside) -> bool:
    """Blocks of lines ``inside`` accepts (quoted ones) between lines of prose: every such run has a blank line (or
    the sample's edge) on both sides, as Markdown blocks have; a raw log's ``>`` lines (a shell's continuation
    prompt) touch the lines around them."""
    prev = ""
    for s in lines:
        if s.strip() and prev.strip() and inside(s) != inside(prev):
            return False
        prev = s
    return True


def _gutter_in_prose(lines: list[str]) -> bool:
    """A numbered block between sentences: every run of non-blank lines that starts with a gutter ``1`` is a gutter
    counting up (``_has_gutter`` on that run alone)."""
    runs: list[list[str]] = [[]]
    for s in lines:
        if s.strip():
            runs[-1].append(s)
        elif runs[-1]:
            runs.append([])
    blocks = [r for r in runs if r and _GUTTER.match(r[0]) and _GUTTER.match(r[0]).group(1) == "1"]
    return bool(blocks) and all(_has_gutter(r) for r in blocks)


# pdsh (and DeepSpeed's multi-node runner, which runs the ranks of each node through it) writes "<node>: " before
# every line a node prints (pdsh's output module: "%s: %s", the host name as given in the host list). clean.py takes
# the label alone only for an IPv4 node; a host name followed by ": " cannot be told from a program's own "Error: "
# or "WARNING: " on one line. Over a source's head it can: nearly every line carries one of a few such labels, and
# the labels are host names (an NCCL head behind a label names the same host, "node1: node1:15874:17284 [4] NCCL
# INFO ...", or pdsh's own "pdsh@<node>: <node>: ..." lines are there, or DeepSpeed's logger head follows a label, or
# there are several labels, each with a digit or a hyphen as host names have: "node1" / "node2", "worker-0").
_NODE_LABEL = _Rx(r"([A-Za-z][\w.-]{0,62}): (?=\S)")
_PDSH_OWN = _Rx(r"pdsh@[\w.-]+: ")
# DeepSpeed's logger head ("[%(asctime)s] [%(levelname)s] [%(filename)s:%(lineno)d:%(funcName)s] "), what its
# launcher prints on every node behind pdsh's label
_DS_HEAD = _Rx(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] \[(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\] \[[\w.-]+:\d+:\w+\] ")


def _pdsh_nodes(nonempty: list[str]) -> frozenset[str]:
    """The node labels of a pdsh-prefixed source's head (``nonempty`` lines), or an empty set."""
    labels: dict[str, int] = {}
    named: set[str] = set()  # labels the source confirms as hosts: NCCL's head names it, or pdsh's own line does
    labelled = 0
    confirmed = False
    other = False  # a labelled line that is not an NCCL record of the label's host (those the NCCL parser reads as is)
    for s in nonempty:
        m = _NODE_LABEL.match(s)
        if m is None:
            m = _PDSH_OWN.match(s)
            if m is not None:
                confirmed = True  # pdsh's own report ("pdsh@node0: node1: ssh exited with exit code 1")
                labelled += 1
                n = _NODE_LABEL.match(s, m.end())
                if n is not None:
                    named.add(n.group(1))
                    labels[n.group(1)] = labels.get(n.group(1), 0) + 1
            continue
        label = m.group(1)
        labelled += 1
        labels[label] = labels.get(label, 0) + 1
        if len(labels) > 64:
            return frozenset()
        rest = s[m.end():]
        if rest.startswith(label + ":") and rest[len(label) + 1:len(label) + 2].isdigit():
            confirmed = True  # "node1: node1:15874:17284 [4] NCCL INFO ...": the label is the host NCCL names
            named.add(label)
        else:
            other = True
            if rest[:1] == "[" and _DS_HEAD.match(rest):
                confirmed = True  # "node1: [2024-01-01 10:00:00,123] [INFO] [launch.py:...] ...": DeepSpeed's runner
                named.add(label)
    if labelled * 10 < len(nonempty) * 8 or not other:
        return frozenset()  # (only "node1: node1:pid:tid [d] NCCL ..." lines: the raw path reads them already)
    # Only the labels that are host names: a program's own "RuntimeError: ..." / "subprocess.CalledProcessError: ..."
    # between pdsh's lines has the same shape (an unlabelled traceback of the launching node), and taking it for a
    # node would cut the exception off its line. A node's label is on many lines of its output; a host name has a
    # digit or a hyphen ("node1", "worker-0") or is one the source confirms; an exception type ends in Error /
    # Exception / Warning; a dotted Python name ("torch.distributed.DistBackendError") is no host unless confirmed.
    nodes = frozenset(k for k, n in labels.items() if n >= 2 and (k in named or _hostlike(k)))
    hostlike = len(nodes) >= 2 and all(_hostlike(k) for k in nodes)
    return nodes if (confirmed and nodes) or hostlike else frozenset()


_EXC_NAME = _Rx(r"(?:[\w]+\.)*\w*(?:Error|Exception|Warning|Interrupt|Exit)$")


def _hostlike(label: str) -> bool:
    """A node label that reads as a host name: a digit or a hyphen in its first name, not an exception's type and
    not a dotted Python identifier whose parts have no digit ("torch.distributed.elastic.multiprocessing.api")."""
    if _EXC_NAME.match(label):
        return False
    first = label.split(".", 1)[0]
    if not any(c.isdigit() or c == "-" for c in first):
        return False
    return True


def _rank_rank(text: str) -> bool:
    """ "[rank1]:[rank0]: ..." somewhere: one rank's prefix with another rank's record glued right behind it."""
    p = text.find("]:[rank")
    for _ in range(64):
        if p < 0:
            return False
        q = text.rfind("[rank", max(0, p - 12), p)
        if q >= 0 and text[q + 5:p].isdigit():
            return True
        p = text.find("]:[rank", p + 1)
    return False


def _first_nonempty(lines: list[str]) -> str:
    for s in lines:
        if s.strip():
            return s
    return ""


def _content(lines: list[str], plan: Plan) -> list[str]:
    rows = [[i, s, s, False, 0] for i, s in enumerate(lines, 1)]
    plan._undecorate(rows)
    return [r[1] for r in rows if r[4] == 0]


def _has_gutter(nonempty: list[str]) -> bool:
    """Most lines behind a number that counts up by one (never backwards, unlike srun's rank labels)."""
    if len(nonempty) < 3 and not all(_GUTTER.match(s) and s.lstrip()[:2] in ("1 ", "1\t", "1|") for s in nonempty[:1]):
        return False  # a short paste: only "1 | ..." / "1<TAB>..." (srun's "1: " is a rank label)
    prev = None
    up = down = hits = 0
    for s in nonempty:
        if not (s[:1].isdigit() or s[:1] in " \t"):
            continue
        m = _GUTTER.match(s)
        if m is None:
            continue
        hits += 1
        n = int(m.group(1))
        if prev is not None:
            if n == prev + 1:
                up += 1
            elif n <= prev:
                down += 1
        prev = n
    return hits * 10 >= len(nonempty) * 6 and up * 10 >= (hits - 1) * 8 and down <= 1


def _has_bracket_gutter(nonempty: list[str]) -> bool:
    """Every line behind ``[N] `` with N counting up by one (at least 5 lines), and none of them an NCCL message:
    a log viewer's line numbers, not the bare ``[rank] `` label of an NCCL line whose host:pid:tid was cut."""
    if len(nonempty) < 5:
        return False
    prev = None
    for s in nonempty:
        m = _BRACKET_GUTTER.match(s)
        if m is None:
            return False
        n = int(m.group(1))
        if prev is not None and n != prev + 1:
            return False
        prev = n
        if _NCCL_BODY.match(s, m.end()):
            return False
    return True


_NOTE_MARKS = frozenset("*_(<[")
_NCCL_BODY = _Rx(r"(?:[\w./-]+:\d+ )?NCCL (?:INFO|WARN|TRACE|CALL)\b")
_LINE_HOST = _Rx(r"(?:\[[^\]]{1,40}\] ?)?([A-Za-z][\w.-]*):\d+:\d+ \[\d+\] NCCL ")
