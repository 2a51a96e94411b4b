"""HTML report: self-contained, strict CSP, autoescaped, evidence context, caps for huge inputs."""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import re
import shutil
from html.parser import HTMLParser

import render_samples as rs

from nccl_analyzer.model import Event
from nccl_analyzer.render import render
from nccl_analyzer.render.html import MAX_EVENTS
from nccl_analyzer.resources import reports_dir

ALLOWED = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "section", "div", "span", "dl", "dt",
           "dd", "p", "ul", "li", "strong", "code", "pre", "table", "thead", "tbody", "tr", "th", "td", "details",
           "summary", "svg", "rect", "circle", "line", "text", "input", "select", "option", "script", "footer",
           "br", "wbr"}  # br: first error on its own line; wbr: where an id may wrap (html.ident)


class Tags(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[str] = []
        self.styles: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag in ("script", "style"):
            self._in = tag

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        if self._in == "script":
            self.scripts.append(data)
        elif self._in == "style":
            self.styles.append(data)


def sha(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def check_structure(html: str) -> Tags:
    p = Tags()
    p.feed(html)
    names = {t for t, _ in p.tags}
    assert names <= ALLOWED, names - ALLOWED
    for tag, attrs in p.tags:
        for a in attrs:
            assert not a.startswith("on"), (tag, a)
            assert a not in ("href", "src", "xlink:href", "action", "formaction", "srcdoc", "style"), (tag, a)
    assert [t for t, _ in p.tags].count("script") == 1
    js = (reports_dir() / "report.js").read_text()
    css = (reports_dir() / "report.css").read_text()
    assert p.scripts == [js] and p.styles == [css]
    csp = [a["content"] for t, a in p.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert len(csp) == 1
    policy = dict(x.strip().split(" ", 1) for x in csp[0].split(";"))
    assert policy["default-src"] == "'none'"
    assert policy["script-src"] == sha(js) and policy["style-src"] == sha(css)
    assert "unsafe" not in csp[0]
    return p


def test_html_report_content_and_csp():
    d = rs.duplicate_gpu()
    html = render(d, "html")
    check_structure(html)
    assert html.startswith("<!DOCTYPE html>")
    for section in ('id="verdict"', 'id="fix"', 'id="evidence"', 'id="ranks"', 'id="timeline"', 'id="findings"',
                    'id="inputs"', 'id="events"'):
        assert section in html, section
    assert "duplicate_gpu" in html and d.root_cause.title in html
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in html.replace("https://pytorch.org", "")  # only log text, never a fetched resource
    # order: verdict, fix, evidence come first
    assert html.index('id="verdict"') < html.index('id="fix"') < html.index('id="evidence"') < html.index('id="ranks"')


def test_html_evidence_context_read_from_input():
    d = rs.duplicate_gpu()
    key = d.root_cause.evidence[0]
    html = render(d, "html")
    neighbour = rs.line_of(key.path, key.line - 2)
    assert f'<td class="n">{key.line - 2}</td>' in html
    assert f'<tr class="key"><td class="n">{key.line}</td>' in html
    assert neighbour.split()[0] in html


def test_html_never_fails_when_input_is_gone(tmp_path):
    log = tmp_path / "log.txt"
    shutil.copyfile(rs.log_path("04_duplicate_gpu"), log)
    d = rs.duplicate_gpu(log)
    log.unlink()
    html = render(d, "html")
    key = d.root_cause.evidence[0]
    assert f'<tr class="key"><td class="n">{key.line}</td>' in html
    assert f'<td class="n">{key.line - 2}</td>' not in html
    assert "surrounding lines not shown" in html


def test_html_changed_input_shows_no_stale_context(tmp_path):
    log = tmp_path / "log.txt"
    shutil.copyfile(rs.log_path("04_duplicate_gpu"), log)
    d = rs.duplicate_gpu(log)
    log.write_text("something else entirely\n" * 200)
    html = render(d, "html")
    assert "something else entirely" not in html


def test_html_hostile_input_is_escaped(tmp_path):
    d = rs.hostile(tmp_path)
    html = render(d, "html")
    check_structure(html)
    for h in rs.HOSTILE:
        if "<" in h or '"' in h:
            assert h not in html, h
    assert "<script>document" not in html and "<img src=x" not in html and "<svg onload" not in html
    assert "</style><script>" not in html and "</textarea>" not in html
    assert rs.HOSTILE_HOST not in html and "evil&lt;b&gt;host&lt;/b&gt;&#34;&#39;" in html
    assert "&lt;script&gt;document.title=&#39;PWNED-SCRIPT&#39;&lt;/script&gt;" in html
    assert "{{ 7*7 }}" in html and "JINJA" in html  # shown as text, never evaluated
    assert "\u202e" not in html and "\u2066" not in html and "\\u202e" in html


def test_html_ok_case():
    html = render(rs.ok_case(), "html")
    check_structure(html)
    assert "No failure found in 524 lines from 1 input." in html
    assert 'id="fix"' not in html


def test_html_caps_events_and_says_so():
    d = rs.duplicate_gpu()
    base = d.events_sample[0]
    many = [dataclasses.replace(base, line=i, text=f"line {i} " + "x" * 2000) for i in range(1, 5001)]
    html = render(dataclasses.replace(d, events_sample=many), "html")
    assert html.count("<tr data-kind=") == MAX_EVENTS
    assert f"({5000 - MAX_EVENTS} more left out)" in html
    assert len(html) < 3_000_000


def test_html_timeline_uses_wall_clock_when_all_points_have_times():
    d = rs.duplicate_gpu()
    ranks = dict(d.job.ranks)
    for r, info in ranks.items():
        ranks[r] = dataclasses.replace(info, timeline=[
            {"kind": "nccl.init.start", "time": "2026-11-29 13:53:30", "line": 1, "what": "init"},
            {"kind": "nccl.warn", "time": "2026-11-29 13:53:31.5", "line": 2, "what": "warn"},
            {"kind": "torch.elastic.child_failed", "time": "2026-11-29 13:53:40", "line": 3, "what": "exit 1"}])
    html = render(dataclasses.replace(d, job=dataclasses.replace(d.job, ranks=ranks)), "html")
    assert "Wall-clock time from the first event (span 10.0 s)" in html
    assert len(re.findall(r'<circle class="exit" cx="[\d.]+" cy="\d+" r="6"', html)) == 2
    assert "+10.0s" in html


def test_html_deterministic():
    assert render(rs.duplicate_gpu(), "html") == render(rs.duplicate_gpu(), "html")


def test_html_events_filter_controls_are_static():
    d = rs.duplicate_gpu()
    d = dataclasses.replace(d, events_sample=[*d.events_sample, Event(kind="text", path="p", line=1, text="t")])
    html = render(d, "html")
    assert re.search(r'<div class="filter" hidden>', html)
    assert '<option value="text">text</option>' in html
