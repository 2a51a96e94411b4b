"""NCCL message body -> (kind, rank, fields): first-word dispatch, INFO/WARN/CALL bodies, the cached parse_body."""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from .nccl_grammar import _run
from .nccl_warn import _warn_family, _warn_fields

# "file:line [(function)] rest" at the start of an INFO body: "%s:%d ..." fmts and the 2.30.7 *_LOC macros.
_LOC_RE = re.compile(r"(?P<file>[^\s:()]+):(?P<line>\d+)(?: \((?P<func>[^()\s]*)\))? (?P<rest>.*)$")
_ENVNAME_RE = re.compile(r"[A-Z][A-Z0-9_]*_[A-Z0-9_]+$")
_PLUGIN_TAG_RE = re.compile(r"[A-Z]+/Plugin:?$")

_CACHE_SIZE = 65536

# --------------------------------------------------------------------------------------------------
# Body dispatch: first word -> grammar start symbol (everything else is generic without touching Lark).
BODY_STARTS = {
    "NCCL": "banner",
    "cudaDriverVersion": "cuda_driver",
    "Bootstrap": "bootstrap",
    "Bootstrap:": "bootstrap",
    "NET/IB": "net_ib",
    "NET/Socket": "net_socket",
    "NET/Socket:": "net_socket",
    "Using": "net_using",
    "comm": "comm",
    "[Rank": "comm",
    "Channel": "channel",
    "Ring": "ring",
    "CollNet": "collnet",
    "Tree": "tree",
    "Trees": "trees",
    "Connected": "connected",
    "Initialized": "plugin",
    "Failed": "plugin",
    "Assigned": "plugin",
    "Duplicate": "duplicate_gpu",
    "===": "topo_system",
    "Pattern": "topo_pattern",
    "RAS": "ras",
    "Destroyed": "destroyed",
    "opCount": "coll",
    "+": "topo_link",
}
_TOPO_NODE_RE = re.compile(r"[A-Z]{3}/[0-9a-fA-F]+(-[0-9a-fA-F]+)?$")
_ALLOC_WORDS = frozenset({"Cuda", "Host", "Ib", "Mem", "CUMEM"})


def _start_for(body: str) -> str | None:
    """Grammar start symbol for a body, from its first word(s); None for bodies no rule types."""
    word, _, rest = body.partition(" ")
    start = BODY_STARTS.get(word)
    if start is not None:
        return start
    if word in _ALLOC_WORDS:
        if rest.startswith("failure"):
            return "cuda_failure"
        return "alloc" if " Size " in body else None
    if word.endswith(":") and rest.startswith("opCount "):
        return "coll"
    if word.startswith("nccl") and rest.startswith("comm "):
        return "comm"
    if word[:1].isdigit():
        if rest.startswith("coll channels"):
            return "channels_count"
        return "topo_graph" if rest.startswith(": ") else None
    if word.startswith("=========="):
        return "topo_end"
    if _TOPO_NODE_RE.match(word):
        return "topo_node"
    if word == "Comm" and rest.startswith("config "):
        return "comm_config"
    if rest.startswith("set ") and _ENVNAME_RE.match(word):
        return "env"
    if _PLUGIN_TAG_RE.match(word):
        return "plugin"
    return None


# --------------------------------------------------------------------------------------------------
# Body -> (kind, rank, fields) with a bounded cache: ranks repeat each other's messages.
Parsed = tuple[str, "int | None", dict[str, Any]]


def _split_rank(kind: str, fields: dict[str, Any]) -> Parsed:
    rank = fields.pop("rank", None)
    return kind, rank, fields


def _info_body(body: str) -> Parsed:
    body = body.strip()  # topology dump lines are indented by depth; some fmts end in a space
    start = _start_for(body)
    loc = None
    if start is None:
        m = _LOC_RE.match(body)
        if m:
            rest = m["rest"]
            if rest.startswith("->"):
                start = "error_trace"
            else:  # "%s:%d <msg>" and the 2.30.7 *_LOC macros: type the message after the location
                loc = {"file": m["file"], "src_line": int(m["line"]), "function": m["func"]}
                start = _start_for(rest)
                body = rest
    parsed = _run(start, body) if start else None
    if parsed is None:
        kind, fields = "nccl.info", {}
    else:
        kind, fields = parsed
        if kind.startswith("nccl.warn."):  # a WARN text logged as INFO under NOWARN (expected failure)
            fields["nowarn"] = kind[len("nccl.warn."):]
            kind = "nccl.info"
    if loc:
        fields.update(loc)
    return _split_rank(kind, fields)


def _warn_body(body: str) -> Parsed:
    word = body.partition(" ")[0]
    start = "cuda_failure" if word == "Cuda" else "duplicate_gpu" if word == "Duplicate" else None
    parsed = _run(start, body) if start else None
    if parsed is not None:
        kind, fields = parsed
        return _split_rank(kind, fields)
    family = _warn_family(body)
    return "nccl.warn." + family, None, _warn_fields(family, body)


@lru_cache(maxsize=_CACHE_SIZE)
def parse_body(level: str, body: str) -> Parsed:
    """(kind, rank stated by the body, fields) for one NCCL message body; cached, treat as read-only."""
    return _uncached_body(level, body)


def _uncached_body(level: str, body: str) -> Parsed:
    if level == "INFO":
        kind, rank, fields = _info_body(body)
    elif level == "WARN":
        kind, rank, fields = _warn_body(body)
    elif level == "CALL":
        parsed = _run("call", body)
        kind, fields = parsed if parsed else ("nccl.call", {})
        rank = None
    elif level == "ABORT":  # <= 2.6 NCCL_DEBUG=ABORT: the process calls abort() right after
        kind, rank, fields = "nccl.abort", None, {"process_abort": True}
    else:
        kind, rank, fields = "nccl.trace", None, {}
    fields["level"] = level
    fields["msg"] = body
    return kind, rank, fields
