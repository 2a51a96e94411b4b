"""Reports say one true thing once: ids unbroken, cascade ranks/hosts, one confidence, NCCL facts in words, the
exception as first error, no "-v for details" under -v, NOT APPLICABLE shown as such."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from nccl_analyzer.analysis import analyze
from nccl_analyzer.model import Reproduction
from nccl_analyzer.render import html, render, view

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "fixtures" / "h200-nccl-2.28.9"


@pytest.fixture(scope="module")
def dup():
    return analyze(H200 / "04_duplicate_gpu" / "log.txt")


def test_ident_breaks_only_after_separators_and_escapes():
    assert str(html.ident("invalid_usage")) == "invalid_<wbr>usage"
    assert str(html.ident("nccl-duplicate-gpu")) == "nccl-<wbr>duplicate-<wbr>gpu"
    assert str(html.ident("a<b>_c")) == "a&lt;b&gt;_<wbr>c"


def test_html_ids_are_not_breakable_mid_word(dup):
    page = render(dup, "html")
    assert '<td class="mono ident">invalid_<wbr>usage</td>' in page
    css = (ROOT / "reports" / "report.css").read_text()
    assert re.search(r"\.ident[^{]*\{[^}]*overflow-wrap: normal", css)


def test_cascade_row_names_what_is_known(dup):
    groups = view.cascade_groups(dup)
    assert groups and groups[0]["ranks"] == [] and groups[0]["hosts"] == ["vm"]
    page = render(dup, "html")
    cascade = page[page.index('<section id="cascade">'):page.index("</section>", page.index('<section id="cascade">'))]
    assert "not named in these lines" in cascade and ">?<" not in cascade and ">vm<" in cascade


def test_one_confidence_for_the_root(dup):
    root = [f for f in dup.findings if f.role == "root"]
    assert len(root) == 1 and root[0].confidence == dup.root_cause.confidence
    page = render(dup, "html")
    pct = view.percent(dup.root_cause.confidence)
    assert f"</svg>{pct} (high)" in page and f'<td class="nw">{pct}</td>' in page


def test_what_nccl_reported_is_in_words(dup):
    rows, _ = view.nccl_reported(dup.job)
    assert ("communicator 0xbddc31eafcd92ae7", "2 ranks (seen: 0-1); init completed by 0 of 2") in rows
    assert ("bootstrap interface", "eth0:192.0.2.2<0>") in rows
    page = render(dup, "html")
    assert "communicators." not in page and ">{}<" not in page


def test_no_nccl_facts_no_empty_row():
    d = analyze(ROOT / "fixtures" / "cases" / "cpu_gloo_rank3_sleeps")
    assert view.nccl_reported(d.job) == ([], 0)
    assert "What NCCL reported" not in render(d, "html")


def test_first_error_is_the_exception_line():
    d = analyze(H200 / "06_oom" / "log.txt")
    fe = d.job.ranks[0].first_error
    assert fe.line == 98 and "torch.OutOfMemoryError: CUDA out of memory" in fe.text
    assert "Traceback (most recent call last)" not in render(d, "html").split('<section id="ranks">')[1].split(
        "</section>")[0]


def test_verbose_text_does_not_point_to_verbose(dup):
    assert "(-v for details)" in render(dup, "text")
    assert "(-v for details)" not in render(dup, "text", verbose=True)


def test_not_applicable_is_rendered_as_such(dup):
    rep = Reproduction(outcome="CONFIRMED", reason="the run failed the same way: app_exception. fix: NOT APPLICABLE: "
                       "the fix is in your program: ...", backend="gloo", world_size=2, command="env x",
                       fix_outcome="NOT APPLICABLE", fix_env={"X": "1"})
    d = dataclasses.replace(dup, reproduction=rep)
    assert "with the fix (X=1)" not in render(d, "text")
    assert "**NOT APPLICABLE**: the fix is in your program" in render(d, "markdown")
    page = render(d, "html")
    assert "<strong>NOT APPLICABLE</strong>: the fix is in your program" in page and "<code>X=1</code>" not in page
