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
