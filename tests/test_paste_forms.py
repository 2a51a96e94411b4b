"""Every error text, in every form people paste it, keeps its canonical verdict (issue 9 §1-§2); prose and source
listings that only name an error stay null.

The product of texts x forms (tests/paste_forms.py) is ~140k analyses; this test draws, for each text family and
each form, ``PER_FORM`` (text, base, context) cells with a fixed seed (benchmarks/paste_forms.py measures a bigger
sample). Each cell is read from a file through the real input layer.
"""
from __future__ import annotations

import json

import pytest

import paste_forms as pf
from nccl_analyzer.engine.loader import load_rules

RULES = load_rules()
TEXTS = pf.all_texts()
PER_FORM = 3
SEED = 9


def test_the_generator_covers_every_catalogue_text_and_form():
    fams = {t.family for t in TEXTS}
    assert fams >= {"nccl_warn", "nccl_result", "binding", "cuda", "torch", "elastic", "python", "crash",
                    "nccl_tests"}
    assert sum(t.family == "nccl_warn" for t in TEXTS) > 1300  # every WARN format 2.3-2.30, per file
    assert sum(t.family == "torch" for t in TEXTS) == 74
    assert len(pf.FORMS) == 16 and set(pf.CONTEXTS) == {"alone", "chatter"}
    t = next(t for t in TEXTS if t.family == "nccl_warn")
    assert pf.render(t, "canonical", "crlf", "alone").count("\r\n") == len(t.lines)
    assert all(len(s) <= 80 for s in pf.render(t, "canonical", "wrap80", "alone").splitlines())


def test_every_form_keeps_the_canonical_verdict():
    canon: dict[tuple[str, str], tuple] = {}
    bad = []
    cells = pf.stratified(TEXTS, PER_FORM, SEED)
    for t, (base, form, ctx) in cells:
        key = (t.family, t.name)
        if key not in canon:
            canon[key] = pf.verdict(pf.render(t, "canonical", "plain", "alone"), RULES)
        if not pf.error_level(canon[key]):
            continue
        want = canon[key]
        if form == "prose" and len(t.lines) > 1:
            # the sentence quotes one line of a multi-line text: what that line says alone is all it can keep (a
            # torch error whose cause is in its 'Last error:' line keeps only what the exception line says)
            lines = t.lines if base == "canonical" else dict(t.bare)[base]
            want = pf.verdict(pf.main_line(tuple(lines)) + "\n", RULES)
        got = pf.verdict(pf.render(t, base, form, ctx), RULES)
        if pf.outcome(want, got, pf.lenient(t, base, form)) != "held" and not pf.needs_file(t, base):
            bad.append(f"  {t.family} {form} {base} {ctx}: want {canon[key]} got {got}: {t.name[:60]}")
    assert len(cells) == 9 * 16 * PER_FORM
    assert not bad, f"{len(bad)} of {len(cells)} cells:\n" + "\n".join(bad)


def _grep_lines() -> list[str]:
    """``grep -rn WARN src/`` over NCCL's source: each WARN call site as grep prints it."""
    out = []
    with open(pf.REF / "nccl_log_formats.jsonl", encoding="utf-8") as fh:
        for row in map(json.loads, fh):
            if row["level"] == "WARN":
                out.append(f'{row["file"]}:{row["line"]}:  WARN({json.dumps(row["fmt"])});')
    return out


def _docs(t: pf.Text, base: str) -> str:
    line = pf.main_line(t.lines if base == "canonical" else dict(t.bare)[base])
    return f"If you see `{line}`, check the network settings first (see the FAQ).\n"


HEALTHY = [
    pytest.param("\n".join(_grep_lines()[i::97][:30]) + "\n", id=f"grep-src-{i}") for i in range(0, 97, 24)
] + [
    pytest.param("NCCL_DEBUG: one of VERSION, WARN, INFO, TRACE (default: WARN).\n"
                 "  --log-level {DEBUG,INFO,WARNING,ERROR,CRITICAL}\n"
                 "  --on-error {abort,continue}   what to do on RuntimeError / DistBackendError\n"
                 "  NCCL_DEBUG_SUBSYS=INIT,NET   (see `NCCL WARN` lines for failures)\n", id="option-list"),
]


@pytest.mark.parametrize("content", HEALTHY)
def test_source_listings_and_option_lists_stay_null(content):
    assert pf.verdict(content, RULES)[0] is None


_DOC_GAP = pytest.mark.xfail(strict=True, reason="not fixed: a sentence quoting a whole torch/CUDA error message "
                              "(`RuntimeError: CUDA error: ...`) is read as evidence; see docs/paste-forms.md")


@pytest.mark.parametrize("family", ["nccl_warn", "python", pytest.param("torch", marks=_DOC_GAP),
                                    pytest.param("cuda", marks=_DOC_GAP), pytest.param("nccl_result", marks=_DOC_GAP)])
def test_documentation_prose_that_names_an_error_stays_null(family):
    texts = [t for t in TEXTS if t.family == family]
    for t in texts[:: max(1, len(texts) // 12)]:
        for base in ["canonical", *(b for b, _ in t.bare)]:
            if pf.prose_counts(t, base):
                continue
            content = _docs(t, base)
            assert pf.verdict(content, RULES)[0] is None, content


@pytest.mark.parametrize("line, want", [
    ("NCCL WARN eth0 : eth0 argument is NULL", "invalid_usage"),  # misc/argcheck.cc and its older homes
    ("NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory", "ib_rdma"),  # misc/ibvwrap.cc
    ("NCCL WARN Could not find real path of /sys/class/net/eth0", None),  # harmless in every file printing it
])
def test_a_warn_pasted_without_its_file_is_read_as_the_file_that_prints_it(line, want):
    assert pf.verdict(f"{line}\n", RULES)[0] == want


CHATTER = "Hi, I train on 2 nodes and it stops after a few minutes.\nThis is what I see:\n\n{}\n\nAny idea? Thanks!\n"


@pytest.mark.parametrize("block, want", [
    # one quoted block between sentences (a single line: not 2 quoted lines, not a fifth of the text)
    ("> > RuntimeError: the batch could not be loaded from shard 3", "app_exception"),
    # a 2-space (not a Markdown 4-space) indented block, one line, between sentences
    ("  misc/checks.cu:42 NCCL WARN eth0 : eth0 argument is NULL", "invalid_usage"),
    # a gutter block that starts at 1 after a blank line
    ('   1 | Traceback (most recent call last):\n   2 |   File "train.py", line 3, in <module>\n   3 |     main()\n'
     "   4 | KeyError: 6", "app_exception"),
    # a stray indent (tab) before file:line NCCL WARN, the host:pid:tid prefix cut
    ("\tinclude/socket.h:42 NCCL WARN Call to write failed : Connection timed out", "network_connect"),
])
def test_one_decorated_block_between_sentences_is_undone(block, want):
    assert pf.verdict(CHATTER.format(block), RULES)[0] == want


@pytest.mark.parametrize("sentence, want", [
    ('I get "E0321 02:07:17.456000 80740 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -6)'
     ' local_rank: 0 (pid: 80746) of binary: /usr/bin/python3" when I start the job.', "other"),
    ("We hit `[rank0]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective "
     "operation timeout: WorkNCCL(SeqNum=7753, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
     "600012 milliseconds before timing out.` on every node", "watchdog_timeout"),
    # a message alone, quoted in a sentence: null or its canonical verdict (docs/paste-forms.md), never another id;
    # the IB completion text is an error text of its own (messages/cuda.toml keywords), so it is read
    ("I get `NCCL WARN NET/IB : Got completion from peer 10.0.0.2<43317> with error 12` sometimes", (None, "ib_rdma")),
])
def test_a_sentence_quoting_a_whole_log_line_counts(sentence, want):
    got = pf.verdict(sentence + "\n", RULES)[0]
    assert got in want if isinstance(want, tuple) else got == want


def test_a_raw_log_with_shell_continuation_lines_is_no_quote_paste():
    from nccl_analyzer.paste import plan_for

    lines = ["$ torchrun --nproc_per_node 2 \\", "> train.py --epochs 3", "step 1 loss 0.5", "", "done"]
    plan = plan_for(lines)
    assert plan is None or not plan.quotes


@pytest.mark.parametrize("line, want", [
    ("[c10d] The server socket has failed to bind to [::]:38429 (errno: 98 - Address already in use).",
     "port_conflict"),
    ("[rank3]:[c10d] The client socket has failed to connect to [node0]:29500 (errno: 111 - Connection refused).",
     "rendezvous_unreachable"),
])
def test_the_c10d_tag_without_its_c10_logger_head_is_read(line, want):
    assert pf.verdict(line + "\n", RULES)[0] == want
