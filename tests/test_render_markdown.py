"""Markdown for issue trackers: fenced evidence, <details> sections, no live HTML or Markdown from log text."""
from __future__ import annotations

import re

import render_samples as rs

from nccl_analyzer.render import render
from nccl_analyzer.render.markdown import md_code, md_fence, md_text

ALLOWED_TAGS = re.compile(r"</?(?:details|summary|sub|br)>")
# an inline code span (its text is literal on GitHub/GitLab); escaped backticks do not open one
CODE_SPAN = re.compile(r"(?<![\\`])(`+)(?!`)(.+?)(?<!`)\1(?!`)")


def split_fences(md: str) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(prose lines, [(fence, body lines)]) following CommonMark's backtick-fence rule."""
    prose: list[str] = []
    blocks: list[tuple[str, list[str]]] = []
    fence = None
    body: list[str] = []
    for line in md.splitlines():
        if fence is None:
            m = re.match(r"(`{3,})", line)
            if m:
                fence, body = m.group(1), []
            else:
                prose.append(line)
        elif re.fullmatch(re.escape(fence) + "`*", line.strip()):
            blocks.append((fence, body))
            fence = None
        else:
            body.append(line)
    assert fence is None, "unclosed fence"
    return prose, blocks


def test_markdown_verdict_fix_evidence_details():
    d = rs.duplicate_gpu()
    md = render(d, "markdown")
    assert md.startswith("### nccl-analyze: `duplicate_gpu` ")
    assert "#### Fix" in md and "#### Evidence" in md
    prose, blocks = split_fences(md)
    key = d.root_cause.evidence[0]
    assert any(any(key.text in line and line.lstrip().startswith(f"{key.line} >") for line in body)
               for _, body in blocks)
    assert "<details><summary>All findings" in md and "<details><summary>Ranks (2)</summary>" in md
    # GitHub needs a blank line after <summary> for Markdown inside <details>
    assert re.search(r"</summary>\n\n", md)


def test_markdown_ok_case():
    md = render(rs.ok_case(), "markdown")
    assert md.startswith("### nccl-analyze: no failure found")
    assert "No failure found in 524 lines from 1 input." in md


def test_markdown_hostile_text_is_inert(tmp_path):
    d = rs.hostile(tmp_path)
    md = render(d, "markdown")
    prose, blocks = split_fences(md)
    for line in prose:
        stripped = CODE_SPAN.sub("", ALLOWED_TAGS.sub("", line))
        assert "<" not in stripped, line
        assert not re.search(r"(?<!\\)\[[^\]]*(?<!\\)\]\(", stripped), line  # no live links
    for fence, body in blocks:
        longest = max((len(m) for line in body for m in re.findall(r"`+", line)), default=0)
        assert len(fence) > longest
    assert "\u202e" not in md and "\\u202e" in md
    # the hostile evidence is there, verbatim, inside a code block
    assert any(rs.HOSTILE[0] in line for _, body in blocks for line in body)


def test_md_helpers():
    assert md_text("<b>x</b> *y* [a](b) | `c`") == "&lt;b&gt;x&lt;/b&gt; \\*y\\* \\[a\\](b) \\| \\`c\\`"
    assert md_code("a ` b") == "``a ` b``"
    assert md_code("`x`") == "`` `x` ``"
    assert md_code("a|b", table=True) == "`a\\|b`"
    assert md_fence(["x ````` y"]).startswith("``````text\n")
    assert md_fence(["plain"]) == "```text\nplain\n```"
