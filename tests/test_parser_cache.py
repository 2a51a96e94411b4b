"""The Lark table cache lives only in a private per-user folder and gives the same parser."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from nccl_analyzer import resources

ROOT = Path(__file__).resolve().parent.parent
LINE = "vm:588:588 [0] NCCL INFO ncclCommInitRankConfig comm 0x2146f0b0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60 " \
       "commId 0xbddc31eafcd92ae7 - Init START"


def _parse(home: Path) -> str:
    code = ("from nccl_analyzer.parse import nccl; print(nccl.parse_body('INFO', " + repr(LINE.split('NCCL INFO ')[1])
            + ")[2])")
    env = dict(os.environ, HOME=str(home))
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=True).stdout


def test_cache_is_private_and_equivalent(tmp_path, monkeypatch):
    first = _parse(tmp_path)  # builds and writes the cache
    folder = tmp_path / ".cache" / "nccl-analyzer"
    files = sorted(folder.iterdir())
    assert files and oct(folder.stat().st_mode & 0o777) == "0o700"
    assert _parse(tmp_path) == first  # loads it
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resources.parser_cache("nccl") == str(next(f for f in files if f.name.startswith("nccl-")))


def test_cache_refused_when_others_may_write(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    path = resources.parser_cache("nccl")
    assert path
    Path(path).write_bytes(b"not a pickle")
    os.chmod(path, 0o666)
    assert resources.parser_cache("nccl") is False
    os.chmod(path, 0o644)
    os.chmod(Path(path).parent, 0o777)
    assert resources.parser_cache("nccl") is False


def test_damaged_cache_is_rebuilt(tmp_path):
    _parse(tmp_path)
    for f in (tmp_path / ".cache" / "nccl-analyzer").iterdir():
        f.write_bytes(b"\x80garbage")
    assert "'rank'" in _parse(tmp_path) or "nranks" in _parse(tmp_path)


def test_each_grammar_text_keeps_its_own_cache_file(tmp_path, monkeypatch):
    # two versions of a grammar (two checkouts) must not evict each other's tables on every run
    monkeypatch.setenv("HOME", str(tmp_path))
    texts = {"nccl.lark": "start: A\nA: \"a\"\n"}
    monkeypatch.setattr(resources, "read_grammar", lambda name: texts[name])
    one = resources.parser_cache("nccl")
    Path(one).write_bytes(b"tables 1")
    texts["nccl.lark"] = "start: B\nB: \"b\"\n"
    two = resources.parser_cache("nccl")
    assert two != one
    Path(two).write_bytes(b"tables 2")
    texts["nccl.lark"] = "start: A\nA: \"a\"\n"
    assert resources.parser_cache("nccl") == one and Path(one).read_bytes() == b"tables 1"
    assert Path(two).read_bytes() == b"tables 2"


def test_at_most_a_few_cache_files_per_grammar(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    for i in range(resources._CACHE_KEEP + 5):
        monkeypatch.setattr(resources, "read_grammar", lambda name, i=i: f"start: A{i}\n")
        p = Path(resources.parser_cache("nccl"))
        p.write_bytes(b"t")
        os.utime(p, (1000 + i, 1000 + i))
    folder = tmp_path / ".cache" / "nccl-analyzer"
    left = sorted(f.name for f in folder.iterdir() if f.name.startswith("nccl-"))
    assert len(left) == resources._CACHE_KEEP


def test_two_checkouts_of_one_grammar_do_not_rebuild_each_others_tables(tmp_path):
    # nccl.lark's import_paths name the checkout's grammars folder and Lark's stored hash covers them: two checkouts
    # sharing one cache file would rebuild (and rewrite) it on every run, turn about. Real processes, two copies.
    import shutil
    copies = []
    for name in ("a", "b"):
        dst = tmp_path / name
        shutil.copytree(ROOT / "nccl_analyzer", dst / "nccl_analyzer", ignore=shutil.ignore_patterns("__pycache__"))
        for folder in ("grammars", "rules", "messages"):
            if (ROOT / folder).is_dir():
                shutil.copytree(ROOT / folder, dst / folder)
        copies.append(dst)
    home = tmp_path / "home"
    code = "from nccl_analyzer.parse import nccl_grammar; nccl_grammar.body_parser()"
    env = dict(os.environ, HOME=str(home))
    env.pop("PYTHONPATH", None)
    folder = home / ".cache" / "nccl-analyzer"
    written: dict[str, float] = {}
    for turn in range(3):
        for dst in copies:
            subprocess.run([sys.executable, "-c", code], cwd=dst, env=env, check=True, capture_output=True)
        now = {f.name: f.stat().st_mtime_ns for f in folder.iterdir() if f.name.startswith("nccl-")}
        if turn == 0:
            assert len(now) == 2, now  # one file per checkout
            written = now
        else:
            assert now == written, "a checkout rebuilt the other's tables"
