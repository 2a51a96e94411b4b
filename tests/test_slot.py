"""engine/slot.py: what a rule's slots keep, checked for the mutants a mutation sample of session 6's modules left
alive (docs/mutation.md). The whole-engine behaviour is in test_matcher_memory.py / test_engine.py."""
from __future__ import annotations

from nccl_analyzer.engine.slot import DENSE_FROM, KeyCounts


def test_a_dense_key_count_holds_one_byte_per_key_of_its_range_only():
    """The bytearray spans the key indexes it holds (first to last), wherever that range starts: one byte a key,
    the point of turning dense (at 1,000 ranks a dozen slots hold every rank's key)."""
    for lo in (0, 5000):
        kc = KeyCounts()
        for k in range(lo, lo + DENSE_FROM):
            kc[k] = 2
        assert kc._d is None and len(kc._b) == DENSE_FROM, (lo, len(kc._b))
        assert kc.get(lo) == 2 and kc.get(lo + DENSE_FROM - 1) == 2 and kc.get(lo + DENSE_FROM) is None
