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
