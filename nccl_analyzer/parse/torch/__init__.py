"""PyTorch distributed, torchelastic and Python-traceback lines -> events (one TorchParser per stream).

Three layers:

1. A prefilter (first character, then one small compiled regex) rejects lines that cannot be ours in well
   under a microsecond; lines inside an open multi-line block skip it.
2. Line prefixes (C++ c10 logger, glog, the three Python logging layouts, ``[c10d]`` tags, ``Warning: ...
   (function f)``) are split off with regexes; they carry timestamps, so they are not worth caching.
3. The message body is parsed by ``grammars/torch.lark`` (traceback lines by ``grammars/traceback.lark``),
   LALR with the transformer passed to Lark; results are cached per body because ranks repeat each other.

Multi-line texts (tracebacks, ``NCCL error in: ...`` + ``ncclInvalidUsage: ...`` + ``Last error:``, CUDA
error texts, ChildFailedError blocks, ``terminate called ...`` + ``what():``) are assembled here in Python,
one open block per wrapper key (``[rankN]:`` / ``[default0]:``), several per key when unprefixed tracebacks
interleave. All event kinds and fields are documented in ``docs/events.md`` (section ``torch / python``).

The package, by responsibility: ``value`` (limits, tables, token helpers), ``body`` (the torch.lark
transformer), ``grammar`` (the Lark parsers, the traceback transformer, body classification), ``prefix``
(line-prefix regexes, prefilter, block line shapes), ``block`` (one open multi-line text and its helpers),
``parser`` (TorchParser).
"""
from __future__ import annotations

from .grammar import _lark_tb, _lark_torch, build_parsers, classify_body
from .parser import TorchParser
from .prefix import UNRAISABLE_GAP
from .value import MAX_BLOCK_LINES

__all__ = ["MAX_BLOCK_LINES", "UNRAISABLE_GAP", "TorchParser", "build_parsers", "classify_body"]
