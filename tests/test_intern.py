"""intern.interned: one object per distinct value, bounded (the job model, stage tracker and rule-engine slots
share their per-rank texts and tuples through it)."""
from __future__ import annotations

from nccl_analyzer.intern import interned


def test_an_equal_value_gets_the_object_first_interned():
    cache: dict = {}
    first, again = "NET/IB : " + "x" * 40, "".join(["NET/IB : ", "x" * 40])
    assert first == again and first is not again
    assert interned(cache, first) is first
    assert interned(cache, again) is first
    assert interned(cache, ("a", 1)) == ("a", 1) and len(cache) == 2


def test_past_its_cap_a_new_value_is_returned_as_it_is_and_not_kept():
    cache: dict = {}
    for i in range(3):
        assert interned(cache, (i,), cap=2) == (i,)
    assert list(cache) == [(0,), (1,)], "the cap is the number of entries kept"
    late = ("late", 2)
    assert interned(cache, late, cap=2) is late and late not in cache
    assert interned(cache, (1,), cap=2) is cache[(1,)], "values kept before the cap are still shared"


def test_the_default_cap_is_65536_entries():
    cache: dict = {}
    for i in range(65537):
        interned(cache, i + 1000)
    assert len(cache) == 65536
