"""paste/detect.py and paste/plan.py helpers: is a sample prose with blocks in it, a numbered gutter, two ranks'
records glued together, a GitHub auto-link. Written for the mutants a mutation sample of session 6's modules
left alive (docs/mutation.md); the whole-paste behaviour is in test_paste.py / test_paste_forms.py."""
from __future__ import annotations

import textwrap

import pytest

from nccl_analyzer import paste
from nccl_analyzer.paste.detect import _code_blocks_in_prose, _gutter_in_prose, _rank_rank
from nccl_analyzer.paste.plan import _unlink
from nccl_analyzer.paste.rx import _AUTOLINK


def test_two_ranks_records_glued_on_one_line_are_seen():
    assert _rank_rank("[rank1]:[rank0]: RuntimeError: boom")
    # the first "]:[rank" is a host's prefix; the glued pair comes after it, and another host's after that
    assert _rank_rank("[gpu-a]:[rank0]: step 1 [rank1]:[rank2]: step 1 [gpu-b]:[rank3]: step 1")


def test_a_prefix_that_is_no_rank_is_no_glued_pair():
    assert not _rank_rank("node12]:[rank0]: RuntimeError: boom"), "the digits before ']:' are no '[rankN'"
    assert not _rank_rank("[gpu-a]:[rank0]: step 1")
    assert not _rank_rank("[gpu-a]:[rank0]: ok " * 70), "64 looks, then no"


def test_an_indented_line_right_under_prose_is_no_markdown_code_block():
    assert _code_blocks_in_prose(["The job failed:", "", "    Traceback (most recent call last):", "", "Any idea?"])
    assert not _code_blocks_in_prose(["XLA compilation failed:", "    at xla::Compile"])  # a log's own continuation
    assert not _code_blocks_in_prose(["    indented first", "then a head"])


def test_prose_without_a_numbered_block_has_no_gutter():
    assert not _gutter_in_prose(["The job failed on 2 nodes.", "", "Any idea why?"])
    assert _gutter_in_prose(["It says:", "", "1 | NCCL WARN x", "2 | NCCL WARN y", "3 | NCCL WARN z", "", "Thanks"])


def test_a_github_auto_link_is_undone_only_where_its_text_is_its_own_target():
    assert _AUTOLINK.sub(_unlink, "misc/[net_ib.cc:101](http://net_ib.cc:101/) NCCL WARN x") == \
        "misc/net_ib.cc:101 NCCL WARN x"
    kept = "see [net_ib.cc](https://github.com/NVIDIA/nccl/blob/master/src/net_ib.cc) for it"
    assert _AUTOLINK.sub(_unlink, kept) == kept


_WRAPPED = ("RuntimeError: The server socket has failed to listen on any local network address. The server socket has "
            "failed to bind to [::]:29500 (errno: 98 - Address already in use). The server socket has failed to bind "
            "to 0.0.0.0:29500 (errno: 98 - Address already in use).")


@pytest.mark.parametrize("eol", ["", "\r"])
def test_an_exception_message_a_person_word_wrapped_is_joined_with_the_spaces_the_wrap_took(eol):
    """Wrapped at the words (textwrap at 80 columns: each piece ends where the next word would not fit), with LF or
    CRLF line ends: one line again, the pieces joined by one space, under the first piece's number."""
    pieces = textwrap.wrap(_WRAPPED, 80)
    assert len(pieces) == 4
    lines = ["step 1200 loss 1.93", *[p + eol for p in pieces], "step 1210 loss 1.91"]
    plan = paste.plan_for(lines)
    assert plan is not None and plan.words and plan.width == 80
    out = [(n, t) for n, t, _, _ in plan.normalise((s, False) for s in lines)]
    assert out == [(1, "step 1200 loss 1.93"), (2, _WRAPPED), (6, "step 1210 loss 1.91")]
