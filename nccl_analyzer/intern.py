"""One object per distinct value: the bounded intern caches the per-rank state shares (job model, stage tracker,
rule-engine slots), so that thousands of ranks holding the same short text or tuple hold one object."""
from __future__ import annotations

from typing import Any


def interned(cache: dict, v: Any, cap: int = 65536) -> Any:
    """The one object ``cache`` holds equal to ``v`` (``v`` itself the first time; bounded: past ``cap`` entries a
    value is kept as it is)."""
    got = cache.get(v)
    if got is None:
        if len(cache) < cap:
            cache[v] = v
        return v
    return got


#: Host names, one string each, shared by every per-process table that keys by host (stage tracker, chatter keys).
HOSTS: dict[Any, Any] = {}


def host(name: Any) -> Any:
    """The one string ``HOSTS`` holds equal to host name ``name`` (bounded like ``interned``)."""
    return interned(HOSTS, name)
