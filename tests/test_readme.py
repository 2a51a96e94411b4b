"""The README shows real output: its first example must be what the tool prints today."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_example_is_real_output():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("The first set-up command prints", 1)[1].split("```\n", 1)[1].split("```", 1)[0]
    env = dict(os.environ, NO_COLOR="1")
    env.pop("FORCE_COLOR", None)
    out = subprocess.run([sys.executable, "-m", "nccl_analyzer", "fixtures/h200-nccl-2.28.9/04_duplicate_gpu/log.txt"],
                         cwd=ROOT, capture_output=True, text=True, env=env)
    assert out.returncode == 1
    assert out.stdout == block, "README's example output is out of date: paste the new output in"
