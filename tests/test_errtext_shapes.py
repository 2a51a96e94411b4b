"""parse/errtext.ErrorTextParser remembers the shapes (digit runs made one ``0``) of lines that hold no keyword of
messages/text.toml: it must say what the table says of every line (real fixture lines, fed as a run feeds them),
and look for the keywords with digits in each line of a remembered shape."""
from __future__ import annotations

from pathlib import Path

from nccl_analyzer.messages import load_tables
from nccl_analyzer.model import Line
from nccl_analyzer.parse.errtext import ErrorTextParser

ROOT = Path(__file__).resolve().parent.parent


def _line(text: str, n: int = 1) -> Line:
    return Line("x.log", n, text, text, None, None, None, False)


def _same(p: ErrorTextParser, text: str, n: int) -> bool:
    got = p.feed(_line(text, n))
    want = load_tables().match_text(text)
    if want is None:
        return got is None
    return got is not None and got[0].fields["family"] == want[0].name


def test_every_fixture_line_reads_as_the_table_says() -> None:
    p = ErrorTextParser()
    n = found = 0
    for log in sorted((ROOT / "fixtures" / "cases").glob("*/*.txt")):
        for text in log.read_text(errors="replace").splitlines():
            n += 1
            assert _same(p, text, n), (log, text)
            found += load_tables().match_text(text) is not None
    assert p._none and found  # shapes were remembered, and lines were found: both paths ran


def test_a_keyword_with_digits_is_looked_for_in_each_line_of_a_shape() -> None:
    p = ErrorTextParser()
    assert "#0" in p._digits  # (messages/text.toml's gdb frame keyword: else this test tests nothing)
    other, frame = "#7  0x00007f3a in ncclAllReduce ()", "#0  0x00007f3a in ncclAllReduce ()"  # one shape
    assert load_tables().match_text(frame) is not None and load_tables().match_text(other) is None
    for i, text in enumerate([other, frame, other, frame]):
        assert _same(p, text, i + 1), text
    assert p._none
