"""The HTML report in a real browser (headless Chromium): it renders, its own script runs, hostile text does not."""
from __future__ import annotations

import re
import shutil
import struct
import subprocess

import pytest
import render_samples as rs

from nccl_analyzer.render import render

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome",
                                                        "google-chrome-stable")) if p), None)
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not found (Debian: apt-get install -y chromium "
                                                "chromium-driver)"),
]


def chromium(tmp_path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / "profile"
    profile.mkdir(exist_ok=True)
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--disable-extensions", "--disable-dev-shm-usage",
           f"--user-data-dir={profile}", *args]
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("headless Chromium did not finish within 120 s")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser")
    d = rs.hostile(tmp)
    path = tmp / "report.html"
    path.write_text(render(d, "html"), encoding="utf-8")
    return d, path


def test_browser_dom_shows_verdict_and_no_hostile_script_ran(report, tmp_path):
    d, path = report
    res = chromium(tmp_path, "--dump-dom", path.as_uri())
    dom = res.stdout
    assert "<body" in dom, res.stderr[-2000:]
    # our own (hash-pinned) script ran: CSP allowed it, and it filled the events counter
    assert re.search(r'<html[^>]*data-js="ready"', dom), "report.js did not run (CSP hash mismatch?)"
    assert re.search(r'id="ev-count"[^>]*>\d+ of \d+ rows shown<', dom)
    # the verdict is there
    assert f"<span class=\"id\">{d.root_cause.id}</span>" in dom
    # nothing hostile executed or became an element: the title is the one we wrote, no attribute was set,
    # and no element the hostile lines spell out exists
    source = path.read_text(encoding="utf-8")
    title = re.search(r"<title>(.*?)</title>", dom, re.S).group(1)
    assert title == re.search(r"<title>(.*?)</title>", source, re.S).group(1).replace("&#39;", "'").replace(
        "&#34;", '"')
    assert not re.search(r"<(?:body|html)[^>]*data-pwned", dom)
    assert not re.search(r"<img\b", dom) and not re.search(r"<a\b", dom) and not re.search(r"<textarea\b", dom)
    assert len(re.findall(r"<svg\b", dom)) == len(re.findall(r"<svg\b", source))
    assert len(re.findall(r"<script\b", dom)) == 1
    assert "&lt;script&gt;document.title='PWNED-SCRIPT'&lt;/script&gt;" in dom


def test_browser_screenshot(report, tmp_path):
    _, path = report
    shot = tmp_path / "report.png"
    res = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,2000", "--hide-scrollbars", path.as_uri())
    assert shot.is_file(), res.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1280, 2000)
    assert len(data) > 30_000  # a blank page compresses to a few kB
