"""Session 12's speed shortcuts (docs/speed.md, Session 12): each must give what the path without it gives.

- ``messages.warn_sources`` tests a format's required literals (``engine.prefilter.required`` of its pattern) before
  its fullmatch: a message without any of them is no message of that format (tests/test_warn_sources_index.py
  compares the whole lookup with trying every format; here the literal test itself);
- ``parse.torch.grammar._failure_field`` keeps the result of a failure-block line with no number in it by its text.
"""
from __future__ import annotations

from nccl_analyzer import messages
from nccl_analyzer.engine.prefilter import required
from nccl_analyzer.parse.bare_warn import _compiled
from nccl_analyzer.parse.torch import grammar


def test_every_tried_formats_need_is_in_each_of_its_instances() -> None:
    # the literal test may only reject what the pattern rejects: every text a format's pattern matches whole
    # holds one of its literals (checked on the catalogue's own formats, instances built as the index test does)
    from tests.test_warn_sources_index import _ROWS, _instance

    checked = 0
    for fmt, _ in _ROWS:
        rx = _compiled(fmt)
        need = required(rx)
        t = _instance(fmt).strip()
        if need is None or not rx.fullmatch(t):
            continue
        assert any(x in t for x in need), (fmt, need)
        checked += 1
    assert checked > 300


def test_watchdog_text_skips_the_short_head_patterns_and_keeps_its_answer() -> None:
    # a watchdog record's text starts with "[Rank N]": every format with a short head is tried on it; none is it
    msg = ("[Rank 7] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=289, OpType=ALLREDUCE, "
           "NumelIn=1048576, NumelOut=1048576, Timeout(ms)=10000) ran for 10069 milliseconds before timing out.")
    messages.warn_sources.cache_clear()
    assert messages.warn_sources(msg) == ()
    formats, by_key, short = messages._warn_sources()
    tried = [formats[i][0] for i in by_key.get(msg[:messages._HEAD_KEY], short) if msg.startswith(formats[i][3])]
    assert tried and all(not _compiled(f).fullmatch(msg) for f in tried)
    assert all(messages._NEEDS.get(f, "unset") != "unset" for f in tried)  # each one's literals were worked out


def test_a_short_head_format_is_still_found_when_its_literal_is_there() -> None:
    # "%s: communicator was revoked" has an empty head (tried on every text): the literal lets its own text through
    messages.warn_sources.cache_clear()
    got = messages.warn_sources("ncclCommRevoke: communicator was revoked")
    assert got, "the format's own message must still be found"
    messages.warn_sources.cache_clear()
    assert messages.warn_sources("ncclCommRevoke: communicator was revoke") == ()


def test_plain_failure_fields_are_kept_by_text_and_equal_a_fresh_parse() -> None:
    fresh = lambda t: grammar._lark_parse(grammar._lark_torch(), t, "failure_field")  # noqa: E731
    texts = ["  error_file: <N/A>", "  error_file: /tmp/torchelastic_x/error.json", "  host      : gpu-node-a",
             "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"]
    for t in texts:
        first = grammar._failure_field(t)
        assert first == fresh(t), t
        assert grammar._failure_field(t) == first  # the kept copy
        assert t in grammar._FF_PLAIN
    # two texts never share a result (a text that differs in one character of meaning gets its own parse)
    a, b = grammar._failure_field(texts[0]), grammar._failure_field(texts[1])
    assert a != b and a[1]["error_file"] == "<N/A>" and b[1]["error_file"].endswith("error.json")
    # a line with numbers goes the shape cache's way, not this one
    grammar._failure_field("  exitcode  : -6 (pid: 4242)")
    assert "  exitcode  : -6 (pid: 4242)" not in grammar._FF_PLAIN


def _match_text_every_regex(tables: messages.Tables, text: str):
    """``Tables.match_text`` as defined: the keyword prefilter, then every entry's regex in order."""
    if not any(k in text for k in tables.text_keywords):
        return None
    for e, rx in tables.text_regex:
        m = rx.search(text)
        if m:
            return e, m
    return None


def _fixture_lines() -> list[str]:
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "fixtures"
    out: list[str] = []
    for d in ("cases", "hard", "h200-nccl-2.28.9", "public6", "healthy7", "cpu2"):
        for p in sorted((root / d).rglob("*.log")) + sorted((root / d).rglob("*.txt")):
            out.extend(p.read_text(encoding="utf-8", errors="replace").splitlines())
    return out


def test_match_text_skips_only_entries_that_cannot_match() -> None:
    t = messages.load_tables()
    lines = _fixture_lines()
    assert len(lines) > 10000
    found = 0
    for s in lines:
        got, want = t.match_text(s), _match_text_every_regex(t, s)
        assert (got is None) == (want is None), s
        if got is not None:
            assert got[0] is want[0] and got[1].span() == want[1].span() and got[1].groupdict() == want[1].groupdict(), s
            found += 1
    assert found > 300  # many lines are some entry's: the comparison is not of empty results


def test_match_text_frame_line_meets_few_regexes() -> None:
    t = messages.load_tables()
    frame = ("frame #0: c10::Error::Error(c10::SourceLocation, std::__cxx11::basic_string<char, std::char_traits<char>, "
             "std::allocator<char> >) + 0x9d (0x7fde06f7305d in /opt/torch/.venv/lib/python3.12/site-packages/torch/"
             "lib/libc10.so)")
    assert any(k in frame for k in t.text_keywords)  # it passes the keyword prefilter
    assert t.match_text(frame) is None and _match_text_every_regex(t, frame) is None
    searched = [i for i, (_, rx) in enumerate(t.text_regex)
                if t._text_need[i] is None or any(x in frame for x in t._text_need[i])]
    assert len(searched) < len(t.text_regex) // 4


def test_stage_of_info_prefix_check_is_the_loop() -> None:
    # ``stage_of`` tests all of INFO_STAGE's prefixes at once before its loop: every prefix still gives its stage
    from nccl_analyzer import stage
    from nccl_analyzer.model import Event

    assert stage._INFO_PREFIXES == tuple(p for p, _, _ in stage.INFO_STAGE)
    for prefix, st, tr in stage.INFO_STAGE:
        ev = Event("nccl.info", "x.log", 1, "", fields={"msg": prefix + " 12 (x)"})
        assert stage.stage_of(ev) == (st, tr), prefix
    frag, st, tr = stage.INFO_FRAGMENT_STAGE[0]
    assert stage.stage_of(Event("nccl.info", "x.log", 1, "", fields={"msg": "Using 4" + frag + "7"})) == (st, tr)
    assert stage.stage_of(Event("nccl.info", "x.log", 1, "", fields={"msg": "cudaDriverVersion 12080"})) is None
