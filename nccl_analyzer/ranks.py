"""Rank lists as people read them: ``[0, 1, 2, 4, 5]`` -> ``"0-2,4-5"`` (shared by rule text and renderers)."""
from __future__ import annotations

from typing import Iterable


def rank_ranges(ranks: Iterable[int], sep: str = ",") -> str:
    """Sorted, de-duplicated ranks with consecutive runs folded into ``a-b``, joined by ``sep``."""
    values = sorted(set(int(r) for r in ranks))
    parts: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        parts.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return sep.join(parts)
