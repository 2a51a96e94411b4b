"""parse/bare_warn.py: an NCCL WARN message pasted without its prefix. How a printf format becomes the pattern of
its whole message (conversions, ``%%``, ``{name}``, star widths, whitespace a paste may change), and the index of
the shipped formats by their leading text. Written for the mutants a mutation sample of session 6's modules left
alive (docs/mutation.md)."""
from __future__ import annotations

import pytest

from nccl_analyzer.parse import bare_warn
from nccl_analyzer.parse.bare_warn import format_regex, match_bare_warn


@pytest.mark.parametrize("fmt,line", [
    ("Call to {name} failed : %s", "Call to ibv_open_device failed : No such device"),  # NCCL's macro name
    ("Done %d%% of %s", "Done 50% of the buffers"),  # %% is one literal %
    ("width %*d ranks", "width     12 ranks"),  # a star width pads with spaces
    ("Call to bind failed: %s", "Call to  bind\tfailed: Address already in use"),  # a re-joined paste's blanks
])
def test_a_format_pattern_matches_what_printf_prints(fmt, line):
    assert format_regex(fmt).fullmatch(line), format_regex(fmt).pattern


@pytest.mark.parametrize("fmt,line", [
    ("Done %d%% of %s", "Done 50 of the buffers"),  # the % is in every message of this format
    ("Couldn't find opId=%p", "Couldn't find opId= 0x7f3a"),  # %p prints no blank before the pointer
    ("Call to {name} failed : %s", "Call to ibv_open_device failed"),  # the text after {name} is there too
])
def test_a_format_pattern_refuses_what_printf_never_prints(fmt, line):
    assert not format_regex(fmt).fullmatch(line), format_regex(fmt).pattern


def test_a_shipped_format_is_found_by_its_leading_text_whatever_blank_follows_it():
    """The index (built once from messages/nccl_warn_formats.json) keys a format by its leading text, trailing blank
    left out: a paste with a tab or two spaces after "failed:" is still that format. Built afresh here, so what is
    checked is how it is built, not what an earlier test left in its cache."""
    bare_warn._index.cache_clear()
    try:
        for line in ("Call to bind failed: Address already in use", "Call to bind failed:\tAddress already in use",
                     "Call to bind failed:  Address already in use"):
            found = match_bare_warn(line)
            assert found is not None and found[0] == "Call to bind failed: %s", (line, found)
            assert "misc/socket.cc" in found[1]
    finally:
        bare_warn._index.cache_clear()
