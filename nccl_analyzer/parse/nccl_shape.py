"""The shape cache: INFO bodies that differ only in their numbers are rebuilt from a learnt template, not re-parsed."""
from __future__ import annotations

import re
from typing import Any

from .nccl_body import _CACHE_SIZE, Parsed, _uncached_body, parse_body
from .nccl_grammar import pci_bus_id

# --------------------------------------------------------------------------------------------------
# Shape cache. Ranks repeat each other's messages with other numbers ("Channel 00/1 : 503[7] -> 504[0] via
# P2P/CUMEM/read"), so an exact-body cache misses on big jobs and Lark would run on most lines. A body's
# *shape* is the body with every number token replaced; the first body of a shape is parsed twice, once as
# it is and once with each number replaced by a unique sentinel, which shows where every field value comes
# from. When rebuilding the real body's fields from that map gives exactly Lark's answer, later bodies of
# the shape are built from the map alone (a regex pass and a dict build); otherwise the shape always goes
# to Lark. Correctness never depends on the map: it is only used after it reproduced a real parse.
# One pass gives shape and tokens. No look-around (it doubles the cost); digits inside words ("eth0") become
# tokens too, which only makes the shape more general: the sentinel probe says what they mean.
# A number token is a hex-looking word with a digit in it ("2a000" bus ids, "11f" opCounts), so that bodies that
# differ only in such values share one shape; what a token means is still traced by the probes.
_NUM_SPLIT_RE = re.compile(r"(0x[0-9a-fA-F]+|[0-9a-fA-F]*\d[0-9a-fA-F]*)")
# A hex token's sentinel ("0x7000002") is matched whole, so a pointer field rebuilds from its token.
_SENTINEL_RE = re.compile(r"(?:0x)?7\d{6}")
_UNCACHEABLE = object()


def _sentinel(i: int, tok: str) -> str:
    return ("0x7%06d" if tok.startswith("0x") else "7%06d") % i


def _leaf_template(real: Any, probe: Any, sentinels: dict[str, int], nums: list[str] | None = None) -> Any:
    """How to rebuild one field value: ("const", v), ("str"|"int"|"float", fmt with {i}), ("hex", i),
    ("derived", name, i), ("list"/"dict", children); _UNCACHEABLE when the value depends on the numbers in an
    untraceable way."""
    if isinstance(real, (list, tuple)):
        if not isinstance(probe, (list, tuple)) or len(real) != len(probe):
            return _UNCACHEABLE
        kids = [_leaf_template(a, b, sentinels, nums) for a, b in zip(real, probe)]
        return _UNCACHEABLE if any(k is _UNCACHEABLE for k in kids) else ("list", kids, type(real))
    if isinstance(real, dict):
        if not isinstance(probe, dict) or real.keys() != probe.keys():
            return _UNCACHEABLE
        kids = {k: _leaf_template(real[k], probe[k], sentinels, nums) for k in real}
        return _UNCACHEABLE if any(v is _UNCACHEABLE for v in kids.values()) else ("dict", kids)
    tpl = _scalar_template(real, probe, sentinels)
    if tpl is _UNCACHEABLE and nums:
        # A value computed from one token (a PCI address from a busId, a flag from "1"): the same function of
        # that token gives both the real and the probe value.
        by_index = {i: tok for tok, i in sentinels.items()}
        for name, fn in _DERIVED.items():
            for i, tok in enumerate(nums):
                try:
                    if fn(tok) == real and fn(by_index[i]) == probe and type(fn(tok)) is type(real):
                        return ("derived", name, i)
                except (ValueError, TypeError, KeyError):
                    continue
    return tpl


def _scalar_template(real: Any, probe: Any, sentinels: dict[str, int]) -> Any:
    if isinstance(probe, bool) or probe is None or not isinstance(probe, (str, int, float)):
        return ("const", real) if real == probe else _UNCACHEABLE
    text = str(probe)
    if isinstance(probe, int) and text not in sentinels:
        hex_key = "0x7%06d" % (int("%x" % probe) - 7000000) if "%x" % probe in _HEX_SENTINELS else None
        if hex_key in sentinels:
            return ("hex", sentinels[hex_key])
        if "%x" % probe in sentinels:  # a token without 0x read as hex ("opCount 11f")
            return ("hex", sentinels["%x" % probe])
    if not _SENTINEL_RE.search(text):
        return ("const", real) if real == probe else _UNCACHEABLE
    unknown = [m for m in _SENTINEL_RE.findall(text) if m not in sentinels]
    if unknown:
        return _UNCACHEABLE
    fmt = _SENTINEL_RE.sub(lambda m: "{%d}" % sentinels[m.group(0)], text.replace("{", "{{").replace("}", "}}"))
    return (type(probe).__name__, fmt) if type(probe) in (str, int, float) else _UNCACHEABLE


_HEX_SENTINELS = frozenset("7%06d" % i for i in range(1000))
#: Functions of one number token that parsers use to compute a field (tried when a field is not the token).
_DERIVED: dict[str, Any] = {
    "pci_bus_id": lambda tok: pci_bus_id(tok),
    "is_one": lambda tok: tok == "1",
    "not_zero": lambda tok: tok != "0",
}


def _build(tpl: Any, nums: list[str]) -> Any:
    tag = tpl[0]
    if tag == "const":
        return tpl[1]
    if tag == "str":
        return tpl[1].format(*nums)
    if tag == "int":
        return int(tpl[1].format(*nums))
    if tag == "float":
        return float(tpl[1].format(*nums))
    if tag == "hex":
        return int(nums[tpl[1]], 16)
    if tag == "derived":
        return _DERIVED[tpl[1]](nums[tpl[2]])
    if tag == "list":
        return tpl[2](_build(k, nums) for k in tpl[1])
    return {k: _build(v, nums) for k, v in tpl[1].items()}


class _FieldsBuilder:
    """A compiled shape template: fields rebuilt from the number tokens, in the order Lark's parse gave them
    (so an event's JSON is the same bytes whichever path parsed it)."""

    __slots__ = ("kind", "rank", "steps")

    _CONST, _INT, _FMT, _NESTED, _MSG = range(5)

    def __init__(self, kind: str, rank_tpl: Any, fields_tpl: dict[str, Any], order: list[str]):
        self.kind = kind
        self.rank = rank_tpl
        steps: list[tuple[str, int, Any]] = []
        for key in order:
            if key == "msg":
                steps.append((key, self._MSG, None))  # always the body itself
                continue
            tpl = fields_tpl[key]
            if tpl[0] == "const":
                steps.append((key, self._CONST, tpl[1]))
            elif tpl[0] == "int" and _DIRECT_RE.fullmatch(tpl[1]):
                steps.append((key, self._INT, int(tpl[1][1:-1])))
            elif tpl[0] == "str":
                steps.append((key, self._FMT, tpl[1]))
            else:
                steps.append((key, self._NESTED, tpl))
        self.steps = steps

    def build(self, body: str, nums: list[str]) -> Parsed:
        fields: dict[str, Any] = {}
        for key, op, arg in self.steps:
            if op == 1:
                fields[key] = int(nums[arg])
            elif op == 0:
                # constants may be lists/dicts: share nothing between events
                fields[key] = arg if arg is None or isinstance(arg, (str, int, float, bool)) else _copy(arg)
            elif op == 2:
                fields[key] = arg.format(*nums)
            elif op == 4:
                fields[key] = body
            else:
                fields[key] = _build(arg, nums)
        rank = self.rank
        if rank[0] == "const":
            return self.kind, rank[1], fields
        return self.kind, _build(rank, nums), fields


def _copy(value: Any) -> Any:
    if isinstance(value, list):
        return [_copy(v) for v in value]
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return value


_DIRECT_RE = re.compile(r"\{\d+\}")
_SHAPES: dict[str, Any] = {}


def _parse_shaped(level: str, body: str) -> Parsed:
    """parse_body through the shape cache (INFO bodies only; see the comment above)."""
    parts = _NUM_SPLIT_RE.split(body)
    nums = parts[1::2]
    if not nums or len(nums) > 999:
        kind, rank, fields = parse_body(level, body)
        return kind, rank, dict(fields)
    shape = "\x00".join(parts[::2])
    builder = _SHAPES.get(shape)
    if builder is None:
        real = parse_body(level, body)
        builder = _learn_shape(level, body, nums, real)
        if len(_SHAPES) >= _CACHE_SIZE:
            _SHAPES.clear()
        _SHAPES[shape] = builder
        return real[0], real[1], dict(real[2])
    if builder is _UNCACHEABLE:
        kind, rank, fields = parse_body(level, body)
        return kind, rank, dict(fields)
    try:
        return builder.build(body, nums)
    except (ValueError, IndexError, KeyError):
        # A token of the same shape that is not what the template learnt (``1e309`` where an int was): the cache
        # is only a shortcut, the full parse decides.
        kind, rank, fields = parse_body(level, body)
        return kind, rank, dict(fields)


def _learn_shape(level: str, body: str, nums: list[str], real: Parsed, parse: Any = None) -> Any:
    """A _FieldsBuilder for ``body``'s shape, or _UNCACHEABLE.

    Two probes: every token replaced by a unique sentinel (shows where each value comes from), and every
    token replaced by 1 (catches values derived from a token that happen to equal the sentinel's, such as
    a flag ``count > 0``). A field is constant only if all three parses agree on it.
    """
    parse = parse or _uncached_body  # parse(level, body) -> Parsed (parse/torch/grammar.py passes its own)
    sentinels = {_sentinel(i, tok): i for i, tok in enumerate(nums)}
    probe = parse(level, _NUM_SPLIT_RE.sub(_Counter(nums), body))
    ones = parse(level, _NUM_SPLIT_RE.sub(_one, body))
    if probe is None or probe[0] != real[0]:
        return _UNCACHEABLE
    rank_tpl = _leaf_template(real[1], probe[1], sentinels, nums)
    real_fields = {k: v for k, v in real[2].items() if k != "msg"}
    fields_tpl = _leaf_template(real_fields, {k: v for k, v in probe[2].items() if k != "msg"}, sentinels, nums)
    if rank_tpl is _UNCACHEABLE or fields_tpl is _UNCACHEABLE:
        return _UNCACHEABLE
    candidate = _FieldsBuilder(real[0], rank_tpl, fields_tpl[1], list(real[2]))
    try:
        if candidate.build(body, nums) != real:
            return _UNCACHEABLE
        if ones is not None and ones[0] == real[0]:
            ones_nums = ["0x1" if tok.startswith("0x") else "1" for tok in nums]
            ones_body = _NUM_SPLIT_RE.sub(_one, body)
            if candidate.build(ones_body, ones_nums) != ones:
                return _UNCACHEABLE
    except (ValueError, IndexError, KeyError):  # a template that cannot rebuild its own line (``1F``, ``-1e309``)
        return _UNCACHEABLE
    return candidate


def _one(m: re.Match) -> str:
    return "0x1" if m.group(0).startswith("0x") else "1"


class _Counter:
    """re.sub callback numbering the number tokens with sentinels, in order."""

    __slots__ = ("i", "nums")

    def __init__(self, nums: list[str]):
        self.i = -1
        self.nums = nums

    def __call__(self, m: re.Match) -> str:
        self.i += 1
        return _sentinel(self.i, m.group(0))
