"""Pasted logs (issue 9 part 2): what issue threads, forums and tickets do to a log keeps the verdict.

Each decoration below is applied to a real labeled case (verbatim public pastes and real captures from
``fixtures/cases``); the decorated file must give the case's ``label.json`` root cause, and every evidence line
of that root cause must point into the DECORATED file at the line whose text the evidence quotes (for a line
re-joined from a hard wrap: its first line). ``test_robustness.py`` rewrites logs the way other
launchers and collectors do; this file covers the ways people paste them, so the two do not overlap.

Ids: ``<decoration>-<case>`` (``pytest -k wrap80``).
"""
from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from nccl_analyzer import paste
from nccl_analyzer.analysis import analyze
from nccl_analyzer.parse.nccl import NcclParser
from nccl_analyzer.sources import Source, expand_inputs, iter_source

ROOT = Path(__file__).resolve().parent.parent
CASES_DIR = ROOT / "fixtures" / "cases"
HARD_DIR = ROOT / "fixtures" / "hard"  # right now; why they stay there: fixtures/hard/README.md

# Real single-file cases, each a different shape: traceback + "Last error:" (mambair39), torchelastic failure
# block (cppo6), NCCL WARN + its return-code chain (sglang3820), nccl-tests CUDA failure (nccltests12), long
# torch watchdog lines (ofa271), torchrun-tagged lines with an elision (nccl1837), four ranks' interleaved
# [rankN]: tracebacks captured from a real gloo job (cpu_gloo_rank2_raises), a one-line legacy WARN (nccl210).
CASES = ["public_mambair39_dup_gpu", "public_cppo6_sigkill", "public_sglang3820_no_route",
         "public2_nccltests12_driver_insufficient", "public_ofa271_watchdog_legacy", "public_nccl1837_ifname_missing",
         "cpu_gloo_rank2_raises", "public_nccl210_socket_family"]

_NCCL_HEAD = re.compile(r"^(?:\[[^\]]*\] )?[\w.\-]+:\d+:\d+ (?:\[\d+\] )?")
_TAGGED = re.compile(r"^\[[A-Za-z_]+\d+(?:\|\d+)?\]:")


# -- decorations: list of lines -> list of lines (pure) ------------------------------------------------------------
def indent(pad: str):
    return lambda lines: [pad + s if s else s for s in lines]


def quote(mark: str):
    return lambda lines: [mark + s if s else mark.rstrip() for s in lines]


def fence(open_: str, close: str):
    return lambda lines: ["I get this when I start training on 2 nodes:", "", open_, *lines, close, "",
                          "Any idea what is wrong?"]


def details(lines):
    return ["Full log:", "", "<details><summary>log.txt</summary>", "", "```text", *lines, "```", "", "</details>"]


def gutter(fmt: str):
    return lambda lines: [fmt.format(n=i, s=s) for i, s in enumerate(lines, 1)]


def escaped(lines):
    """A log copied from an HTML page: escaped and inside <pre>."""
    return ["<pre>", *[html.escape(s) for s in lines], "</pre>"]


def strip_prefix(lines):
    """The NCCL ``host:pid:tid [dev]`` head cut off (and torchrun's tag before it)."""
    out = []
    for s in lines:
        if " NCCL " in s:
            s = _NCCL_HEAD.sub("", _TAGGED.sub("", s))
        out.append(s)
    return out


def wrap(width: int):
    def f(lines):
        out = []
        for s in lines:
            while len(s) > width:
                out.append(s[:width])
                s = s[width:]
            out.append(s)
        return out
    return f


def reverse(lines):
    return lines[::-1]


def elide(lines):
    """``[...]`` / ``...`` / ``<snip>`` where the reporter cut lines (here: inserted after every 5th line)."""
    marks = ["[...]", "...", "<snip>"]
    out = []
    for i, s in enumerate(lines):
        out.append(s)
        if i % 5 == 4 and i + 1 < len(lines):
            out.append(marks[i // 5 % 3])
    return out


DECORATIONS = {
    "indent2": indent("  "), "indent4": indent("    "), "tab": indent("\t"),
    "quote": quote("> "), "quote_nested": quote(">> "), "quote_spaced": quote("> > "),
    "fence": fence("```", "```"), "fence_lang": fence("```log", "```"), "tilde": fence("~~~text", "~~~"),
    "details": details,
    "gutter_pipe": gutter("{n} | {s}"), "gutter_colon": gutter("{n:>4}: {s}"), "gutter_tab": gutter("{n}\t{s}"),
    "html_escaped": escaped, "strip_prefix": strip_prefix, "wrap80": wrap(80), "wrap120": wrap(120),
    "reverse": reverse, "elide": elide,
    # decorations stack: a quoted fence, an indented escaped paste, a wrapped paste inside a fence
    "quoted_fence": lambda lines: quote("> ")(fence("```", "```")(lines)),
    "fenced_wrap100": lambda lines: fence("```", "```")(wrap(100)(lines)),
}
# A log shows its order only through a multi-line record: a traceback, "Last error:" + its detail, an NCCL WARN +
# its return-code chain; reversed, only those can tell (and must).
_ORDER = re.compile(r"Traceback \(most recent call last\)|Last error:|NCCL INFO \S+:\d+ -> \d")
# Decorations that paste.py must notice on the sample (strip_prefix is read by the NCCL grammar instead).
DETECTED = set(DECORATIONS) - {"strip_prefix"}


def _label(case: str) -> str | None:
    return json.loads((CASES_DIR / case / "label.json").read_text())["root_cause"]


def _lines(case: str) -> list[str]:
    return (CASES_DIR / case / "log.txt").read_text(encoding="utf-8", errors="replace").splitlines()


def _changes(name: str, lines: list[str]) -> bool:
    return DECORATIONS[name](lines) != lines


PAIRS = [(d, c) for d in DECORATIONS for c in CASES if _changes(d, _lines(c))]


@pytest.mark.parametrize("name,case", PAIRS, ids=[f"{d}-{c}" for d, c in PAIRS])
def test_decorated_paste_keeps_root_cause_and_evidence_lines(tmp_path, name, case):
    decorated = DECORATIONS[name](_lines(case))
    path = tmp_path / "pasted.txt"
    path.write_text("\n".join(decorated) + "\n", encoding="utf-8")
    if name in DETECTED and (name != "reverse" or _ORDER.search("\n".join(decorated))):
        assert paste.plan_for(decorated) is not None, f"{name} not recognised as a paste"
    d = analyze([str(path)], workers=1)
    got = d.root_cause.id if d.root_cause else None
    assert got == _label(case), f"{case} pasted with {name}: got {got}"
    assert d.root_cause.evidence
    for e in d.root_cause.evidence:
        assert e.path == str(path)
        assert 1 <= e.line <= len(decorated), (e.line, len(decorated))
        line = decorated[e.line - 1]
        assert e.text == line, (e.line, line, e.text)  # a re-joined wrap quotes its first line


# -- the two public pastes of fixtures/hard/ that paste.py makes right -------------------------------------------
def test_reversed_public_paste_reads_bottom_up_with_file_line_numbers():
    case = HARD_DIR / "public_verl1096_dup_gpu_reversed" / "log.txt"
    lines = case.read_text().splitlines()
    d = analyze([str(case)], workers=1)
    assert d.root_cause.id == "duplicate_gpu"
    by_line = {e.line: e.text for e in d.root_cause.evidence}
    assert by_line[1] == lines[0] == "Duplicate GPU detected : rank 9 and rank 1 both on CUDA device 34000"
    assert all(lines[n - 1] == t for n, t in by_line.items())


def test_hard_wrapped_public_paste_is_rejoined():
    case = HARD_DIR / "public2_openr1620_wrapped_watchdog" / "log.txt"
    lines = case.read_text().splitlines()
    plan = paste.plan_for(lines)
    assert plan is not None and plan.wrap
    d = analyze([str(case)], workers=1)
    assert d.root_cause.id == "watchdog_timeout"
    e = d.root_cause.evidence[0]
    assert e.text == lines[e.line - 1] and e.text.endswith("Watchdog caught colle")
    assert "BROADCAST" in d.root_cause.title and "4" in d.root_cause.title  # read from the next physical line


# -- prose vs log lines -------------------------------------------------------------------------------------------
_IB_WARN = ("NCCL WARN NET/IB : Got completion from peer 10.0.0.2<42149> with status=12 opcode=0 len=0 vendor err 129 "
            "(Send) localGid ::ffff:10.0.0.1 remoteGidsfe80::2")  # net_ib.cc "Got completion from peer" (2.19+ form)


def _analyze_text(tmp_path, text: str):
    path = tmp_path / "issue.md"
    path.write_text(text, encoding="utf-8")
    return path, analyze([str(path)], workers=1)


def test_nccl_text_quoted_in_a_sentence_is_not_evidence(tmp_path):
    text = (f"When I train on two nodes I get the error `{_IB_WARN}` after a few minutes.\n"
            f"We also see {_IB_WARN[:40]} on the other node, any idea?\n")
    _, d = _analyze_text(tmp_path, text)
    assert d.root_cause is None
    assert not any(f.evidence for f in d.findings)


def test_the_same_nccl_text_on_its_own_line_is_evidence(tmp_path):
    text = f"When I train on two nodes I get this after a few minutes:\n\n```\n{_IB_WARN}\n```\n\nany idea?\n"
    path, d = _analyze_text(tmp_path, text)
    assert d.root_cause is not None and d.root_cause.id == "ib_rdma"
    assert [(e.line, e.text) for e in d.root_cause.evidence] == [(4, _IB_WARN)]


@pytest.mark.parametrize("line,kind", [
    ("init.cc:1247 NCCL WARN Bootstrap : no socket interface found", "nccl.warn.bootstrap"),
    ("NCCL WARN Bootstrap : no socket interface found", "nccl.warn.bootstrap"),
    ("[3] include/shm.h:28 NCCL WARN Error: failed to extend /dev/shm/nccl-abc to 9637892 bytes", "nccl.warn.shm"),
    ("NCCL INFO comm 0x55d0c1e0 rank 0 nranks 2 cudaDev 0 busId 1b000 - Init START", "nccl.init.start"),
    ("NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC", "nccl.transport"),
])
def test_nccl_line_without_its_prefix_is_typed(line, kind):
    ev = NcclParser().feed(_line(line))
    assert ev and ev[0].kind == kind and ev[0].fields.get("prefix") == "partial"


def _line(text: str):
    from nccl_analyzer.sources import clean_text
    return clean_text(text, Source("t", None), 1)


# -- lines two ranks wrote into one ---------------------------------------------------------------------------------
def test_rank_prefix_glued_before_another_ranks_traceback(tmp_path):
    lines = _lines("cpu_gloo_rank2_raises")
    i = lines.index("[rank2]: Traceback (most recent call last):")
    glued = [*lines[:i], "[rank1]:" + lines[i], *lines[i + 1:]]
    path = tmp_path / "glued.txt"
    path.write_text("\n".join(glued) + "\n")
    src = expand_inputs([str(path)])[0]
    got = [ln for ln in iter_source(src) if ln.lineno == i + 1]
    assert [(ln.rank, ln.text) for ln in got] == [(2, "Traceback (most recent call last):")]
    assert got[0].raw == glued[i]
    d = analyze([str(path)], workers=1)
    assert d.root_cause.id == "app_exception" and 2 in d.root_cause.ranks


def test_nccl_line_written_into_another_processes_unfinished_line(tmp_path):
    lines = _lines("public_sglang3820_no_route")
    warn = lines[0]  # node5:240:240 [6] misc/socket.cc:533 NCCL WARN socketPollConnect: ... No route to host ...
    info = "node4:311:311 [5] NCCL INFO Channel 00/0 : 13[5] -> 14[6] [send] via NET/Socket/0"
    glued = [info + warn, *lines[1:]]
    path = tmp_path / "glued.txt"
    path.write_text("```\n" + "\n".join(glued) + "\n```\n")
    src = expand_inputs([str(path)])[0]
    parts = [ln.text for ln in iter_source(src) if ln.lineno == 2]
    assert parts == [info, warn]
    d = analyze([str(path)], workers=1)
    assert d.root_cause.id == "network_connect"
    assert any(e.line == 2 and e.text == glued[0] for e in d.root_cause.evidence)


# -- the raw path -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["h200_watchdog_timeout", "h200_nodebug_duplicate_gpu", "cpu_gloo_rank2_raises",
                                  "syn_ecc_error", "public3_physicsnemo568_async_deprecated",
                                  "public3_nccl520_ring_loopback_multihost"])
def test_raw_logs_are_not_taken_for_pastes(case):
    for f in sorted((CASES_DIR / case).iterdir()):
        if f.name != "label.json":
            assert paste.plan_for(f.read_text(errors="replace").splitlines()) is None, f


def test_plan_lines_keep_file_numbers_and_text():
    lines = ["Here:", "", "```", "[...]", "    vm:1:1 [0] NCCL INFO cudaDriverVersion 13000", "```"]
    plan = paste.plan_for(lines)
    assert plan is not None
    out = list(plan.normalise((s, False) for s in lines))
    assert [(n, t) for n, t, _, _ in out] == [(1, "Here:"), (2, ""), (3, ""),
                                              (5, "vm:1:1 [0] NCCL INFO cudaDriverVersion 13000"), (6, "")]
    assert [raw for _, _, raw, _ in out] == [lines[0], lines[1], lines[2], lines[4], lines[5]]
    assert plan.count == len(lines)


_C10D_110 = ("[W socket.cpp:601] [c10d] The client socket has failed to connect to [node-a.cluster]:29500 "
             "(errno: 110 - Connection timed out).")
_PROSE_WITH_BLOCKS = f"""When I launch the second node it waits for a long time and prints

    {_C10D_110}
    {_C10D_110}

then it stops with

    torch.distributed.DistNetworkError: The client socket has failed to connect to any network address of (node-a.cluster, 29500). The client socket has failed to connect to [node-a.cluster]:29500 (errno: 110 - Connection timed out).

my command is

    torchrun --nnodes 2 --node_rank 1 --master_addr node-a.cluster --master_port 29500 train.py
"""


@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_indented_code_blocks_between_prose_are_log_lines(tmp_path, eol):
    """Markdown indented code blocks (4 spaces, a blank line around each) between sentences: the blocks are the
    log, the sentences are not, and the evidence points at the indented lines of the file."""
    path, d = _analyze_text(tmp_path, _PROSE_WITH_BLOCKS.replace("\n", eol))
    assert d.root_cause is not None and d.root_cause.id == "rendezvous_unreachable"
    lines = path.read_text(encoding="utf-8").splitlines()
    assert {e.line for e in d.root_cause.evidence} <= {3, 4, 8}
    assert all(lines[e.line - 1].startswith("    ") for e in d.root_cause.evidence)


def test_indented_lines_touching_their_head_are_a_raw_log():
    """A raw log's indented lines (traceback frames) follow their unindented head directly: not a paste."""
    raw = ["step 10 loss 1.2", "", "Traceback (most recent call last):", '  File "train.py", line 3, in <module>',
           "    main()", "ValueError: bad", "", "    continuation after a blank line"]
    assert paste.plan_for(raw) is None or not paste.plan_for(raw).indent
