"""The torch and traceback Lark parsers (built once), the traceback transformer, and body classification
(start symbol by keyword, results cached per body)."""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from lark import Lark, Transformer
from lark.exceptions import LarkError, VisitError

from ...resources import parser_cache, read_grammar
from .. import nccl as _nccl_shape
from .value import _CACHE_MAX, _int
from .body import _Body

# ----------------------------------------------------------------------------------------------- Lark

_TORCH_STARTS = (
    "work_line", "watchdog_timeout", "watchdog_abort", "watchdog_exception", "work_status", "async_error",
    "failed_stack", "stack_frame", "heartbeat", "flight_recorder", "desync", "nccl_error", "nccl_detail",
    "comm_aborted", "unique_id", "pg_init", "store_listen", "socket_bind", "store_connect", "store_timeout",
    "store_closed", "gloo", "cuda_error", "xid", "cuda_search", "device_assert", "cuda_oom", "terminate", "what",
    "cpp_frame", "elastic", "failure_field", "rank_start",
)
_TB_STARTS = ("tb_header", "tb_chain", "tb_frame", "tb_exception")


class _Tb(Transformer):
    """Traceback line -> ``(kind, fields)``."""

    def tb_header(self, c):
        return "header", {}

    def chain_context(self, c):
        return "chain", {"relation": "context"}

    def chain_cause(self, c):
        return "chain", {"relation": "cause"}

    def tb_frame(self, c):
        return "frame", {"file": str(c[0]), "line": _int(c[1]), "function": str(c[2]).strip() if len(c) > 2 else None}

    def tb_exception(self, c):
        return "exception", {"exc_type": str(c[0]), "message": str(c[1]).strip() if len(c) > 1 else ""}


@lru_cache(maxsize=None)
def _lark_torch() -> Lark:
    return Lark(read_grammar("torch.lark"), parser="lalr", start=list(_TORCH_STARTS), transformer=_Body(),
                cache=parser_cache("torch"))


@lru_cache(maxsize=None)
def _lark_tb() -> Lark:
    return Lark(read_grammar("traceback.lark"), parser="lalr", start=list(_TB_STARTS), transformer=_Tb(),
                cache=parser_cache("traceback"))


def build_parsers(strict: bool = False) -> tuple[Lark, Lark]:
    """Fresh Lark parsers for both grammars (tests build them with ``strict=True``)."""
    return (Lark(read_grammar("torch.lark"), parser="lalr", start=list(_TORCH_STARTS), transformer=_Body(),
                 strict=strict),
            Lark(read_grammar("traceback.lark"), parser="lalr", start=list(_TB_STARTS), transformer=_Tb(),
                 strict=strict))


def _lark_parse(lark: Lark, text: str, start: str) -> tuple[str, dict] | None:
    try:
        return lark.parse(text, start=start)
    except VisitError:  # a transformer bug on odd input: treat as unparsed, never crash
        return None
    except LarkError:
        return None


# ------------------------------------------------------------------------------- body classification

# Process-group prefixes in front of a body (only to find the keyword; the grammar parses them).
_PG_SKIP = re.compile(r"(?:\[(?:Rank \d+|PG [^\]]*?Rank \d+)\] ?)*")

# Which start symbol a body goes to, by how its text (after PG prefixes) begins. First match wins; order
# matters where one text quotes another (a watchdog exception quotes a watchdog timeout).
_DISPATCH: tuple[tuple[tuple[str, ...], str], ...] = (
    (("Process group watchdog thread terminated", "NCCL watchdog thread terminated"), "watchdog_exception"),
    (("Watchdog caught collective operation timeout", "Work WorkNCCL("), "watchdog_timeout"),
    (("Some NCCL operations have failed", "To avoid data inconsistency"), "watchdog_abort"),
    (("Timeout at NCCL work:", "Exception (either an error or timeout) detected", "failure detected by watchdog",
      " failure detected by watchdog"), "work_status"),
    (("found async exception", "Collective WorkNCCL("), "async_error"),
    (("Stack trace of the failed collective",), "failed_stack"),
    (("Heartbeat monitor timed out", "ProcessGroupNCCL's watchdog got stuck", "Terminating the process after",
      "ProcessGroupNCCL monitor thread is disabled"), "heartbeat"),
    (("Received a dump signal", "Received a global", "ProcessGroupNCCL's watchdog detected", "First PG on this rank",
      "Observed flight recorder", "First watchdog to set", "ProcessGroupNCCL preparing to dump",
      "ProcessGroupNCCL dumping nccl trace", "Finished writing NCCLPG", "Finished writing Flight Recorder", "Finished flight recorder",
      "Flight Recorder trace", "Flight recorder dump"), "flight_recorder"),
    (("ProcessGroupNCCL initialization options", "ProcessGroupNCCL environments", "PGNCCL Watchdog environments",
      "HeartbeatMonitor environments"), "pg_init"),
    (("WorkNCCL(",), "work_line"),
    (("NCCL error in:", "NCCL timeout in:", "NCCL error:", "NCCL communicator encountered error"), "nccl_error"),
    (("nccl", "Unknown NCCL error!", "Last error:"), "nccl_detail"),
    (("NCCL communicator was aborted",), "comm_aborted"),
    (("The server socket has failed to listen on any", "The server socket has failed to bind.", "UV Store bind failed"),
     "store_listen"),
    (("The server socket has failed to bind to", "The server socket has failed to listen on "), "socket_bind"),
    (("The client socket", "TCP client failed"), "store_connect"),
    (("Timed out after", "wait timeout after", "Socket Timeout"), "store_timeout"),
    (("Failed to recv, got 0 bytes",), "store_closed"),
    (("CUDA error:", "CUDA driver error:", "Cuda failure ", "cuda runtime error (", "THCudaCheck FAIL "),
     "cuda_error"),
    (("NVRM: Xid (",), "xid"),
    (("CUDA out of memory",), "cuda_oom"),
    (("Search for `cuda",), "cuda_search"),
    (("terminate called",), "terminate"),
    (("Exception raised from", "frame #"), "cpp_frame"),
    (("failed (exitcode:", "Sending process", "Unable to shutdown process", "Signal ", "Received ", "Process ",
      "Setting OMP_NUM_THREADS"), "elastic"),
    (("Initializing distributed: GLOBAL_RANK: ", "initializing ddp: GLOBAL_RANK: ",
      "initializing distributed: GLOBAL_RANK: "), "rank_start"),
    (("\t",), "desync"),
    (("#",), "stack_frame"),
)
_RE_STARTS: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"\[\d+\] is setting up NCCL"), "unique_id"),
    (re.compile(r"\[(?:<[^<>\]\n]*>|[^\]\s<])*gloo[^\]\s]*:\d+\]"), "gloo"),  # grammars/torch.lark GLOO_LOC
    (re.compile(r"\[[\w.-]+\] Worker group "), "elastic"),
    (re.compile(r"\[[\w.-]+\] worker group successfully finished"), "elastic"),
    (re.compile(r"\[.*\] exits with return code = -?\d+$"), "elastic"),  # DeepSpeed launcher
    (re.compile(r"\d+ Workers \(tasks / actors\) killed due to memory pressure"), "elastic"),  # Ray raylet
    (re.compile(r"\s*what\(\):"), "what"),
    (re.compile(r"/\S+:\d+: .*Assertion"), "device_assert"),
    (re.compile(r"\[\s*\d+\.\d+\] NVRM: Xid \("), "xid"),
    (re.compile(r"[\w.-]+: Test CUDA failure "), "cuda_error"),  # nccl-tests' CUDACHECK
)

_body_cache: dict[str, tuple[str, dict] | None] = {}

# Kinds whose field "what"/"reason" quotes another message: classify that one too (cause_kind + its fields).
_NESTED = {"torch.watchdog.exception": "what", "torch.work.async_error": "what", "torch.nccl.comm_aborted": "reason",
           "torch.nccl.unique_id_error": "what", "torch.terminate.what": "what", "torch.store.connect_error": "what",
           "torch.nccl_error": "reason"}


def classify_body(body: str) -> tuple[str, dict] | None:
    """Kind and fields of one message body (first line of a message), or None if it is no known text.

    The result is shared through a cache: callers must copy ``fields`` before changing it.
    """
    body = body.rstrip()
    try:
        return _body_cache[body]
    except KeyError:
        pass
    result = _classify_shaped(body)
    if len(_body_cache) >= _CACHE_MAX:
        _body_cache.clear()
    _body_cache[body] = result
    return result


# Shape cache (the same scheme as parse/nccl.py's, whose code it reuses): ranks print the same messages with
# other numbers ("[Rank 503] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5021, ..."); a shape
# whose fields a probe parse could trace to its number tokens, and that reproduced the real parse, is rebuilt
# without Lark. Anything else is parsed.
_SHAPES: dict[str, object] = {}


def _as_parsed(res: tuple[str, dict] | None) -> tuple[str, None, dict] | None:
    return None if res is None else (res[0], None, res[1])


def _classify_shaped(body: str, parse: Any = None, shapes: dict[str, object] = _SHAPES) -> tuple[str, dict] | None:
    """``parse(body)`` (default: _classify_uncached) through the shape cache ``shapes``."""
    parse = parse or _classify_uncached
    parts = _nccl_shape._NUM_SPLIT_RE.split(body)
    nums = parts[1::2]
    if not nums or len(nums) > 999:
        return parse(body)
    shape = "\x00".join(parts[::2])
    builder = shapes.get(shape)
    if builder is None:
        real = parse(body)
        if real is None:
            return None
        builder = _nccl_shape._learn_shape("TORCH", body, nums, (real[0], None, dict(real[1])),
                                           lambda _level, text: _as_parsed(parse(text)))
        if len(shapes) >= _CACHE_MAX:
            shapes.clear()
        shapes[shape] = builder
        return real
    if builder is _nccl_shape._UNCACHEABLE:
        return parse(body)
    try:
        kind, _, fields = builder.build(body, nums)
    except (ValueError, IndexError, KeyError):  # a token the template did not learn: the full parse decides
        return parse(body)
    return kind, fields


_FF_SHAPES: dict[str, object] = {}
#: Failure-block lines with no number in them ("  error_file: <N/A>", printed once per failed rank), by their
#: text: the shape cache keys shapes by their numbers, so without one every copy went to Lark. The result is
#: shared (callers must not change ``fields``: ``block._child_entries`` copies them into its entry).
_FF_PLAIN: dict[str, tuple[str, dict] | None] = {}


def _failure_field(text: str) -> tuple[str, dict] | None:
    """One torchelastic failure-block line ("  exitcode  : -6 (pid: 4242)") through its own shape cache."""
    got = _FF_PLAIN.get(text, _FF_UNSET)
    if got is not _FF_UNSET:
        return got  # type: ignore[return-value]
    got = _classify_shaped(text, lambda t: _lark_parse(_lark_torch(), t, "failure_field"), _FF_SHAPES)
    if _nccl_shape._NUM_SPLIT_RE.search(text) is None:
        if len(_FF_PLAIN) >= _CACHE_MAX:
            _FF_PLAIN.clear()
        _FF_PLAIN[text] = got
    return got


_FF_UNSET = object()


def _classify_uncached(body: str, depth: int = 0) -> tuple[str, dict] | None:
    if not body:
        return None
    core = body[_PG_SKIP.match(body).end():]
    start = None
    for prefixes, name in _DISPATCH:
        if core.startswith(prefixes):
            start = name
            break
    if start is None:
        for rx, name in _RE_STARTS:
            if rx.match(body):
                start = name
                break
    if start is None:
        return None
    res = _lark_parse(_lark_torch(), body, start)
    if res is None or res[0] == "ff":
        return None
    kind, fields = res
    inner_key = _NESTED.get(kind)
    if inner_key and depth < 3 and fields.get(inner_key):
        inner = _classify_uncached(fields[inner_key], depth + 1)
        if inner is not None:
            fields = dict(fields)
            fields["cause_kind"] = inner[0]
            for k, v in inner[1].items():
                fields.setdefault(k, v)
    return kind, fields
