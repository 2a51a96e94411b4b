"""The NCCL shape cache must give exactly what a fresh Lark parse gives, for every body it serves."""
from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from nccl_analyzer.parse import nccl

ROOT = Path(__file__).resolve().parent.parent
_PREFIX = re.compile(r"NCCL INFO (.*)$")


def _real_bodies() -> list[str]:
    bodies = []
    for path in sorted((ROOT / "fixtures").rglob("*.log")) + sorted((ROOT / "fixtures").rglob("log.txt")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            m = _PREFIX.search(line)
            if m:
                bodies.append(m.group(1))
    return bodies


def _variants(body: str, rng: random.Random) -> str:
    """The same message with other numbers, as another rank would print it."""
    return re.sub(r"0x[0-9a-f]+|\d+", lambda m: ("0x%x" % rng.randrange(1 << 40)) if m.group(0).startswith("0x")
                  else str(rng.choice([0, 1, 2, 7, 15, 63, 64, 127, 1023, 4095, rng.randrange(100000)])), body)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_shape_cache_equals_fresh_parse(seed):
    rng = random.Random(seed)
    bodies = _real_bodies()
    assert len(bodies) > 1000
    sample = bodies + [_variants(b, rng) for b in bodies]
    rng.shuffle(sample)
    nccl._SHAPES.clear()
    wrong = []
    for body in sample:
        got = nccl._parse_shaped("INFO", body)
        want = nccl._uncached_body("INFO", body)
        if got != (want[0], want[1], dict(want[2])) or list(got[2]) != list(want[2]):
            wrong.append((body, got, want))
    assert not wrong, wrong[:3]
    served = sum(1 for b in nccl._SHAPES.values() if b is not nccl._UNCACHEABLE)
    assert served > 50, "the cache serves most shapes"
