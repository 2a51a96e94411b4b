"""NCCL_DEBUG lines -> typed events: prefix regex, first-word dispatch, Lark body grammar, body cache."""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from lark import Lark, Transformer, v_args
from lark.exceptions import UnexpectedInput, VisitError

from ..model import Event, Line
from ..resources import grammar_dir, parser_cache, read_grammar

__all__ = ["NcclParser", "PREFIX_RE", "parse_body", "body_parser", "BODY_STARTS"]

# --------------------------------------------------------------------------------------------------
# Line prefix (README "NCCL line grammar"; the grammar's `line` rule says the same, tests compare them):
#   {ts}host:pid:tid [dev] [millis func:line | file:line [(function)]] NCCL LEVEL body
# - {ts}: NCCL_DEBUG_TIMESTAMP_FORMAT output (2.26+, default "[%F %T] "); any text is accepted before
#   host:pid:tid because the format is user-defined.
# - host: gethostname() cut at the first '.', '%' and '/' -> '-' from 2.29.2; dots/dashes allowed anyway.
# - [dev] is absent on NCCL CALL lines (2.13+).
# - TRACE (TRACE=1 builds): "millis func:line" before NCCL; WARN: "file:line" (absolute paths in RCCL
#   builds), plus "(function)" from 2.30.7.
_HEAD = (
    r"(?P<ts>.*?)"
    r"(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+)"
    r"(?: \[(?P<dev>\d+)\])?"
    r"(?: (?P<millis>\d+\.\d+))?"
    r"(?: (?P<file>[^\s:()]+):(?P<fline>\d+)(?: \((?P<func>[^()\s]*)\))?)?"
)
PREFIX_RE = re.compile(_HEAD + r" NCCL (?P<level>INFO|WARN|TRACE|CALL|ABORT)(?: (?P<body>.*))?$")
#: Longest "{ts}host:pid:tid [dev] file:line (func)" head looked for (timestamps and RCCL's absolute paths fit).
MAX_HEAD = 1024
_PREFIX_HEAD_RE = re.compile(_HEAD + r" NCCL (?P<level>INFO|WARN|TRACE|CALL|ABORT)(?= |$)")
# Hot path: split at the first " NCCL " and read the part before it with _HEAD_RE, cached (the same
# "host:pid:tid [dev]" heads repeat on every line of a process); PREFIX_RE is the fallback and the reference.
_HEAD_RE = re.compile(_HEAD + "$")
_LEVELS = frozenset({"INFO", "WARN", "TRACE", "CALL", "ABORT"})
# Bare version lines: stdout print <= 2.21, VERSION level 2.22+ (optionally timestamped), git line 2.29+.
# The timestamp here must look like one, so torch's "..., NCCL version 2.28.9" is not taken.
_BANNER_RE = re.compile(r"(?P<ts>\[[^\]]*\] ?|\d[\d:./T, -]*\d ?)?(?P<body>NCCL (?:git )?version \S.*)$")
# An NCCL level marker whose prefix did not parse -> nccl.unparsed.
_LOOSE_RE = re.compile(r"\bNCCL (INFO|WARN|TRACE|CALL|ABORT)\b")
# What may be left of a cut prefix in front of the marker: "[3] include/shm.h:28" (nccl#525: the user pasted
# the lines without their host:pid:tid).
_CUT_HEAD_RE = re.compile(r"(?:.*?\[(?P<dev>\d+)\] ?)?(?:(?P<file>[^\s:()\[\]]+):(?P<line>\d+)(?: \((?P<func>[^()\s]*)\))?)? ?$")
# Text before "NCCL WARN" that makes the line a sentence, not a log line: a quote mark or backtick right before
# the marker, or two words ("I get the error `NCCL WARN ...`", "we see NCCL WARN ... on every node").
_PROSE_RE = re.compile(r"[`'\"\u201c\u2018]\s*$|(?:^|\s)[A-Za-z][a-z]*,?\s+[A-Za-z][a-z]+(?:[\s,:]|$)")


def _prose(before: str) -> bool:
    """True when the text in front of an NCCL level marker is words of a sentence (not a cut prefix)."""
    return _CUT_HEAD_RE.match(before) is None and _PROSE_RE.search(before) is not None


# NCCL <= 2.2 printed the level without "NCCL" ("host:pid:tid [0] include/socket.h:360 WARN Call to connect
# failed", nccl-tests#15), and users often paste a WARN without its prefix ("include/socket.h:344 WARN Socket
# creation failed ...", nccl#210). Both need a source file with a C/C++/CUDA extension (or the full
# host:pid:tid [dev] head) so that ordinary "WARN" words in other logs are not taken.
# A head that was cut or anonymised in the paste ("*server name* [0] include/socket.h:185 WARN ...", nccl#111)
# keeps its "[dev] " only when a source file:line follows (the lookahead), like _CUT_HEAD_RE for "NCCL WARN".
_LEGACY_RE = re.compile(
    r"(?:(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
    r"|[^\[\]]{0,80}?\[(?P<cdev>\d+)\] (?=[\w./-]+\.(?:cc|cu|h|hpp|cpp|c):\d+ ))?"
    r"(?:(?P<file>[\w./-]+\.(?:cc|cu|h|hpp|cpp|c)):(?P<line>\d+) )?(?P<level>INFO|WARN) (?P<body>.*)$")
# aws-ofi-nccl's test programs (tests/functional/*: nccl_message_transfer, ring, ...) pass their own logger to
# the plugin, which prints "WARN: Function: <func> Line: <n>: <msg>" (and INFO/TRACE alike) with no NCCL prefix:
# the same messages the plugin logs through NCCL as "... <func>:<n> NCCL WARN NET/OFI ...".
_OFI_TEST_RE = re.compile(r"(?P<level>WARN|INFO|TRACE): Function: (?P<func>\w+) Line: (?P<line>\d+): (?P<body>.*)$")
# "file:line [(function)] rest" at the start of an INFO body: "%s:%d ..." fmts and the 2.30.7 *_LOC macros.
_LOC_RE = re.compile(r"(?P<file>[^\s:()]+):(?P<line>\d+)(?: \((?P<func>[^()\s]*)\))? (?P<rest>.*)$")
_ENVNAME_RE = re.compile(r"[A-Z][A-Z0-9_]*_[A-Z0-9_]+$")
_PLUGIN_TAG_RE = re.compile(r"[A-Z]+/Plugin:?$")

# WARN fmts with an embedded "\n": the text after it comes on unprefixed lines (2.19+ NVLS bind failure).
_CONTINUED_WARNS = (("Failed to bind NVLink SHARP (NVLS) Multicast memory", 2),)

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
# Transformer: each body start returns (kind, fields); "rank" in fields becomes Event.rank.
_VERSION_RE = re.compile(r"(?P<nccl>\d+\.\d+\.\d+)(?P<suffix>[^+\s]*)(?:\+cuda(?P<cuda>\d+\.\d+))?")
_IFACE_RE = re.compile(r"(?:\[(?P<idx>\d+)\])?(?P<name>[^\s:\[]+):(?P<addr>\S+)")
_IBDEV_RE = re.compile(r"\[(?P<idx>\d+)\](?P<name>[^:\s]+)(?::(?P<port>\d+))?(?:/(?P<link>\S+))?")
_TREE_ENTRY_RE = re.compile(r"\[(\d+)\] ([-\d/]+)->(-?\d+)->([-\d/]+)")
_PXN_GDR_RE = re.compile(r"PXN (\d+) GDR (\d+)")
# NCCL prints socket addresses as "addr<port>" (IPv4, IPv6 with %scope, or a host name).
# Bounded, and starting only where an address can start (the lookbehind): otherwise a long run of other characters
# is re-scanned from every position, quadratic in line length (a 60k-character WARN took 28x a 6k one).
_PEER_RE = re.compile(r"(?<![^\s<>(),;])([^\s<>(),;]{1,256}<\d+>)")
_RAS_TIMEOUT_RE = re.compile(r"(keep-alive|init) timeout (error|warning) \((\d+)s\)")


def pci_bus_id(bus_id: str) -> str | None:
    """NCCL's int64 busId (hex, e.g. "1b000") as a PCI address "0000:1b:00.0" (busIdToInt64 layout)."""
    try:
        value = int(bus_id, 16)
    except ValueError:
        return None
    return f"{value >> 20:04x}:{(value >> 12) & 0xFF:02x}:{(value >> 4) & 0xFF:02x}.{value & 0xF:x}"


@v_args(inline=True)
class _Body(Transformer):
    """Builds (kind, fields) from the body rules of nccl.lark; no I/O, no rule logic."""

    # -- prefix (tests only)
    def line(self, *toks):
        out: dict[str, Any] = {}
        for tok in toks:
            out.setdefault(tok.type, str(tok))
        return out

    # -- version banner, driver
    def version(self, word):
        fields: dict[str, Any] = {"version": str(word)}
        m = _VERSION_RE.match(word)
        if m:
            fields["nccl_version"] = m["nccl"]
            if m["cuda"]:
                fields["cuda_version"] = m["cuda"]
        return "nccl.version", fields

    def git_version(self, rest):
        branch, _, describe = str(rest).partition(" ")
        return "nccl.git_version", {"branch": branch, "describe": describe.strip()}

    def cuda_driver(self, value):
        value = int(value)
        return "nccl.cuda_driver", {"driver_version": value, "cuda_version": f"{value // 1000}.{value % 1000 // 10}"}

    # -- bootstrap / env / network
    def bootstrap(self, *words):
        text = " ".join(words)
        ifaces = [{"name": m["name"], "addr": m["addr"]} for m in _IFACE_RE.finditer(text)]
        fields: dict[str, Any] = {"interfaces": ifaces}
        if ifaces:
            fields["interface"], fields["addr"] = ifaces[0]["name"], ifaces[0]["addr"]
        return "nccl.bootstrap.interface", fields

    def env(self, name, value=None):
        value = "" if value is None else str(value).rstrip()
        # "%s set by environment to %lld." (integer params) ends with a period that is not the value's.
        if value.endswith(".") and value[:-1].lstrip("-").isdigit():
            value = value[:-1]
        return "nccl.env", {"name": str(name), "value": value}

    def plugin_msg(self, tag, rest=None):
        ptype = str(tag).split("/", 1)[0]
        detail = "" if rest is None else str(rest)
        low = detail.lower()
        if "could not find" in low or "no plugin found" in low:
            status = "not_found"
        elif low.startswith("loaded"):
            status = "loaded"
        elif low.startswith("closing"):
            status = "closing"
        elif "internal" in low:
            status = "internal"
        elif "failed" in low or "returned" in low:
            status = "failed"
        else:
            status = "info"
        kind = "nccl.net.plugin" if ptype == "NET" else "nccl.plugin"
        fields: dict[str, Any] = {"plugin_type": ptype, "status": status, "detail": detail}
        if status == "loaded":
            parts = detail.split()
            if len(parts) >= 4:
                fields["plugin"] = parts[3]
        return kind, fields

    def _plugin(self, ptype, name, status):
        kind = "nccl.net.plugin" if str(ptype) == "NET" else "nccl.plugin"
        return kind, {"plugin_type": str(ptype), "plugin": str(name), "status": status}

    def plugin_initialized(self, ptype, name):
        return self._plugin(ptype, name, "initialized")

    def plugin_init_failed(self, ptype, name):
        return self._plugin(ptype, name, "init_failed")

    def plugin_assigned(self, ptype, name):
        return self._plugin(ptype, name, "assigned")

    def ib_using(self, *toks):
        devices = []
        relaxed = False
        for tok in toks[:-1]:
            if tok.type == "IB_RO":
                relaxed = True
                continue
            m = _IBDEV_RE.match(tok)
            if m:
                devices.append({"index": int(m["idx"]), "name": m["name"],
                                "port": int(m["port"]) if m["port"] else None, "link": m["link"]})
        fields: dict[str, Any] = {"devices": devices, "relaxed_ordering": relaxed}
        m = _IFACE_RE.match(toks[-1])
        if m:
            fields["oob_interface"], fields["oob_addr"] = m["name"], m["addr"]
        return "nccl.net.ib", fields

    def ib_sideband(self, iface):
        return "nccl.net.ib", {"devices": [], "oob_interface": str(iface)}

    def ib_no_device(self):
        return "nccl.net.ib", {"devices": [], "no_device": True}

    def socket_using(self, *ifs):
        ifaces = [{"name": m["name"], "addr": m["addr"]} for m in map(_IFACE_RE.match, ifs) if m]
        return "nccl.net.socket", {"interfaces": ifaces}

    def socket_threads(self, threads, socks):
        return "nccl.net.socket", {"threads": int(threads), "sockets_per_thread": int(socks)}

    def net_using(self, name):
        return "nccl.net.using", {"network": str(name)}

    # -- communicator lifecycle: init, topology summary, destroy/abort/revoke
    def rank_tag(self, value):
        return ("rank_tag", int(value))

    def _int_attr(name):  # noqa: N805 - builds transformer methods below
        return lambda self, value: (name, int(value))

    rank = _int_attr("rank")
    nranks = _int_attr("nranks")
    cuda_dev = _int_attr("cuda_dev")
    nvml_dev = _int_attr("nvml_dev")
    split_count = _int_attr("split_count")
    child_count = _int_attr("child_count")
    color = _int_attr("color")
    key = _int_attr("key")
    n_nodes = _int_attr("n_nodes")
    local_ranks = _int_attr("local_ranks")
    local_rank = _int_attr("local_rank")
    mnnvl = _int_attr("mnnvl")
    del _int_attr

    def bus_id(self, value):
        return ("bus_id", str(value))

    def comm_id(self, value):
        return ("comm_id", str(value))

    def parent(self, value):
        return ("parent", str(value))

    def phase(self, name, state, result=None):
        out = {"phase": str(name), "state": str(state)}
        if result is not None:
            out["result"] = int(result)
        return out

    def comm(self, *items):
        fields: dict[str, Any] = {}
        phase = None
        tag = None
        for item in items:
            if isinstance(item, tuple):
                if item[0] == "rank_tag":
                    tag = item[1]
                else:
                    fields[item[0]] = item[1]
            elif isinstance(item, dict):
                phase = item
            elif item.type == "FUNCNAME":
                fields["function"] = str(item)
            elif item.type == "PTR":
                fields["comm"] = str(item)
        if "rank" in fields:  # the rank inside this communicator; "[Rank N]" (2.29+) is the process's global rank
            fields["comm_rank"] = fields["rank"]
        if tag is not None:
            fields["rank"] = tag
        if "bus_id" in fields:
            fields["pci_bus_id"] = pci_bus_id(fields["bus_id"])
        if phase is None:
            return ("nccl.comm.topology" if "n_nodes" in fields else "nccl.comm"), fields
        fields.update(phase)
        name = phase["phase"]
        if name == "Init":
            return ("nccl.init.start" if phase["state"] == "START" else "nccl.init.complete"), fields
        if name == "Destroy":
            return "nccl.destroy", fields
        return ("nccl.abort" if name == "Abort" else "nccl.revoke"), fields

    def destroyed(self, comm, rank):
        return "nccl.destroy", {"comm": str(comm), "rank": int(rank), "phase": "Destroy", "state": "COMPLETE"}

    # -- channels, rings, trees, transports
    @staticmethod
    def _channel(tok):
        chan, _, total = str(tok).partition("/")
        return int(chan), (int(total) if total else None)

    def channel_list(self, chan, *ranks):
        channel, total = self._channel(chan)
        truncated = bool(ranks) and ranks[-1].type == "ELLIPSIS"
        order = [int(r) for r in ranks if r.type == "INT"]
        return "nccl.channel", {"channel": channel, "n_channels": total, "ranks": order, "truncated": truncated}

    def peer(self, rank, dev=None):
        return int(rank), (None if dev is None else str(dev))

    def transport(self, chan, src, dst, *rest):
        channel, sub = self._channel(chan) if chan.type == "CHAN" else (int(chan), None)
        direction = None
        via = str(rest[-1]).strip()
        if len(rest) == 2:
            direction = str(rest[0])[1:-1]
        name = via.split("/", 1)[0] if "/" in via else via
        fields: dict[str, Any] = {"channel": channel, "conn": sub, "src": src[0], "dst": dst[0],
                                  "src_dev": src[1], "dst_dev": dst[1], "direction": direction,
                                  "transport": via, "transport_type": _TRANSPORT_TYPES.get(name, name)}
        return "nccl.transport", fields

    def collnet(self, chan, rank, direction, via):
        channel, sub = self._channel(chan)
        return "nccl.transport", {"channel": channel, "conn": sub, "src": int(rank), "dst": None,
                                  "direction": str(direction)[1:-1], "transport": str(via).strip(),
                                  "transport_type": "COLLNET"}

    def ring(self, chan, prev, me, nxt):
        return "nccl.ring", {"channel": int(chan), "prev": prev[0], "rank": me[0], "next": nxt[0]}

    def tree(self, chan, up, me, d0, d1, d2):
        return "nccl.tree", {"channel": int(chan), "up": int(up), "rank": int(me),
                             "down": [int(d0), int(d1), int(d2)]}

    def trees(self, rest=None):
        text = "" if rest is None else str(rest)
        entries = [{"channel": int(c), "down": [int(x) for x in down.split("/") if x],
                    "rank": int(me), "up": [int(x) for x in up.split("/") if x]}
                   for c, down, me, up in _TREE_ENTRY_RE.findall(text)]
        fields: dict[str, Any] = {"entries": entries}
        if entries:
            fields["rank"] = entries[0]["rank"]
        return "nccl.trees", fields

    def cc_item(self, count, name, per_peer=None):
        return (f"{name}_channels_per_peer" if per_peer else f"{name}_channels"), int(count)

    def channels_count(self, coll, *items):
        fields = {"coll_channels": int(coll)}
        fields.update(items)
        return "nccl.channels.count", fields

    def connected(self, rest):
        what = str(rest)
        fields: dict[str, Any] = {"what": what}
        m = _PXN_GDR_RE.search(what)
        if m:
            fields["pxn"], fields["gdr"] = int(m[1]), int(m[2])
        return "nccl.connected", fields

    # -- collectives, error traces, allocations, failures
    def coll(self, *toks):
        vals = list(toks)
        fields: dict[str, Any] = {"op": str(vals.pop(0)) if vals[0].type == "NAME" else None}
        names = ["op_count", "sendbuff", "recvbuff", "count"]
        if len(vals) == 12:  # 2.3.5: "size %zi"
            names.append("size")
        names += ["datatype", "red_op"]
        if len(vals) - len(names) == 4:
            names.append("root")
        names += ["comm", "nranks", "stream"]
        for name, tok in zip(names, vals):
            if name == "op_count":
                fields[name] = int(tok, 16)
            elif tok.type == "INT":
                fields[name] = int(tok)
            else:
                fields[name] = str(tok)
        return "nccl.coll", fields

    @staticmethod
    def _loc(loc, func):
        file, _, line = str(loc).rpartition(":")
        return {"file": file, "src_line": int(line), "function": None if func is None else str(func)[1:-1]}

    def error_trace(self, loc, *rest):
        func = rest[0] if rest and rest[0].type == "FUNC" else None
        rest = rest[1:] if func is not None else rest
        fields = self._loc(loc, func)
        fields["code"] = int(rest[0])
        fields["thread"] = str(rest[1])[1:-1] if len(rest) > 1 else None
        return "nccl.error.trace", fields

    def error_trace_errno(self, loc, *rest):
        kind, fields = self.error_trace(loc, *rest[:-1])
        fields["errno_text"] = str(rest[-1])[1:-1]
        return kind, fields

    def error_trace_state(self, loc, *rest):
        func = rest[0] if rest[0].type == "FUNC" else None
        rest = rest[1:] if func is not None else rest
        fields = self._loc(loc, func)
        fields.update({"code": None, "thread": str(rest[0])[1:-1], "state": int(rest[1])})
        return "nccl.error.trace", fields

    def alloc(self, what, size, ptr, rest=None):
        return "nccl.alloc", {"what": str(what), "size": int(size), "pointer": str(ptr)}

    def cuda_failure(self, *toks):
        fields: dict[str, Any] = {"cuda_error": str(toks[-1])[1:-1]}
        if len(toks) == 2:
            fields["cuda_code"] = int(toks[0])
        return "nccl.warn.cuda", fields

    def duplicate_gpu(self, rank, other, bus):
        return "nccl.warn.duplicate_gpu", {"rank": int(rank), "ranks": [int(rank), int(other)],
                                           "bus_id": str(bus), "pci_bus_id": pci_bus_id(bus)}

    # -- topology dump, RAS, CALL
    def topo_kv(self, name, value):
        return str(name), float(value)

    def topo_system(self, *kvs):
        return "nccl.topo.system", dict(kvs)

    def topo_node(self, node, rest=None):
        text = "" if rest is None else str(rest)
        if text.startswith(":"):  # paths from this node to every other node
            return "nccl.topo.paths", {"node": str(node), "paths": text[1:].strip()}
        return "nccl.topo.node", {"node": str(node), "info": text}

    def topo_link(self, link, node, rest=None):
        ltype, _, bw = str(link)[:-1].partition("[")
        return "nccl.topo.link", {"link": ltype, "bw": float(bw), "node": str(node),
                                  "info": "" if rest is None else str(rest)}

    def topo_end(self, rule):
        return "nccl.topo.end", {}

    def topo_graph(self, channel, *nodes):
        return "nccl.topo.graph", {"channel": int(channel), "nodes": [str(n) for n in nodes]}

    def comm_config(self, rest):
        setting, _, value = str(rest).rpartition(" to ")
        fields: dict[str, Any] = {"setting": str(rest)}
        if setting:
            fields["name"] = setting.removesuffix(" set").removesuffix(" reset").strip()
            fields["value"] = value
        return "nccl.comm.config", fields

    def topo_pattern(self, pattern, *kv):
        fields: dict[str, Any] = {"pattern": int(pattern)}
        for name, value in zip(kv[::2], kv[1::2]):
            fields[str(name)] = int(value) if value.lstrip("-").isdigit() else str(value)
        return "nccl.topo.pattern", fields

    def ras(self, rest=None):
        text = "" if rest is None else str(rest)
        fields: dict[str, Any] = {"what": text}
        if "DEAD" in text or "timeout" in text:
            m = _PEER_RE.search(text)
            if m:
                fields["peer"] = m[1]
            m = _RAS_TIMEOUT_RE.search(text)
            if m:
                fields["timeout"], fields["severity"], fields["timeout_s"] = m[1], m[2], int(m[3])
            if "DEAD" in text:
                fields["dead"] = True
        return "nccl.ras", fields

    def call(self, name, rest=None):
        args = "" if rest is None else str(rest)
        return "nccl.call", {"call": str(name), "args": args[:-1] if args.endswith(")") else args}


# Transport names NCCL prints after "via" (P2P/IPC, P2P/CUMEM, SHM/direct/direct, NET/IB/0/GDRDMA, ...).
_TRANSPORT_TYPES = {"P2P": "P2P", "SHM": "SHM", "NET": "NET", "COLLNET": "COLLNET",
                    "direct shared memory": "SHM"}

BODY_START_SYMBOLS = ("line", "banner", "cuda_driver", "bootstrap", "env", "plugin", "net_ib", "net_socket",
                      "net_using", "comm", "channel", "ring", "collnet", "tree", "trees", "channels_count",
                      "connected", "coll", "error_trace", "alloc", "cuda_failure", "duplicate_gpu",
                      "topo_system", "topo_pattern", "topo_node", "topo_link", "topo_end", "topo_graph",
                      "comm_config", "destroyed", "ras", "call")


def build_parser(strict: bool = False) -> Lark:
    """A fresh LALR parser for nccl.lark with every start symbol (tests pass ``strict=True``, uncached)."""
    return Lark(read_grammar("nccl.lark"), parser="lalr", lexer="contextual", start=list(BODY_START_SYMBOLS),
                transformer=_Body(), import_paths=[grammar_dir()], strict=strict,
                cache=False if strict else parser_cache("nccl"))


_PARSER: Lark | None = None


def body_parser() -> Lark:
    """The process-wide parser, built on first use (cached only in a private folder: resources.parser_cache)."""
    global _PARSER
    if _PARSER is None:
        _PARSER = build_parser()
    return _PARSER


def _run(start: str, text: str) -> tuple[str, dict[str, Any]] | None:
    """Parse ``text`` from ``start``; None when it does not fit (the caller makes a generic event)."""
    try:
        return body_parser().parse(text, start=start)
    except UnexpectedInput:
        return None
    except (ValueError, IndexError):
        # The transformer runs inside the LALR parse (no tree), so its errors arrive unwrapped: a value the
        # grammar let through but int() refuses ("rank --1" in a mangled log) makes the line a generic event.
        return None
    except VisitError as exc:  # a transformer bug: unwrap it; a value the grammar let through is not a crash
        if isinstance(exc.orig_exc, (ValueError, IndexError)):
            return None
        raise exc.orig_exc from None


# --------------------------------------------------------------------------------------------------
# WARN families: the first matching keyword pattern wins (most specific first); the file:line of the
# WARN (path under src/) decides when no keyword does. Family fields come from small extractors.
_WARN_FAMILIES = tuple((family, re.compile(rx)) for family, rx in (
    ("duplicate_gpu", r"^Duplicate GPU|^Multiple Ranks are using the same GPU"),  # the latter 2.30+
    ("proxy", r"^\[(Proxy|Service|Rem Allocator)"),  # proxy/service thread tags come first in the text
    ("nvls", r"NVLS|NVLink SHARP|[Mm]ulticast"),
    ("cuda", r"Cuda failure|CUDA|[Cc]uda[A-Z]\w*|\bcu[A-Z][a-z]\w*|device-side|cudart"),
    ("ib", r"NET/IB|\bibv_|\bIB\b|mlx5|RoCE|\bGID\b|\bQP\b|\bHCA\b|\b[Vv]erbs\b|GDAKI|gdaki|\bDOCA\b|ibv"),
    ("bootstrap", r"[Bb]ootstrap|NCCL_COMM_ID|[Uu]nique ?[Ii]d"),
    # before socket: segment names contain 'recv'/'send' ("nccl-shm-recv-...", nccl#525)
    ("shm", r"\bSHM\b|[Ss]hared memory|\bshm|/dev/shm"),
    ("socket", r"[Ss]ocket|Connect(ion)? |[Cc]onnect\b|Net : |NET/Socket|\bpoll\b|\brecv\b|\bsend\b|"
               r"[Ll]isten|\bbind\b|\baccept|getaddrinfo|[Aa]ddress|[Ii]nterface|\bIPv[46]\b|ECONN|EADDR"),
    ("p2p", r"\bP2P\b|\bIPC\b|[Ii]pc[A-Z]|\bipc|[Pp]eer access|PeerAccess|\bp2p"),
    ("proxy", r"[Pp]roxy|Service thread"),
    ("net", r"NET plugin|NET/|[Nn]et plugin|CollNet|[Cc]ollnet|\bnet\b|[Nn]etwork|\bGIN\b|\bRMA\b"),
    ("destroy", r"commDestroy|commReclaim|already been destroyed|[Aa]bort|SetAsyncError|[Aa]syncJob|\bjob\b"),
    ("system", r"^Call to \S+( \S+)* (failed|timeout)|pthread|[Tt]hread (creation|join)|getrlimit|setrlimit|"
               r"\bdup2\b|\bfcntl\b|libnvidia-ml|WSA|SetupDi|random_device|[Cc]ould not map|failed to extend"),
    ("topology", r"XML|xml|[Tt]opo|NVML|nvml|\bPCI|\bpci|[Gg]raph|\bpath|\bNIC\b|NVLink|node of type|"
                 r"[Aa]ffinity|\bCPU\b|\b[Tt]rees?\b|\b[Rr]ings?\b|[Cc]hannel|[Pp]attern|MNNVL|[Cc]lique|"
                 r"[Tt]ransport|intra (node |proc )?ranks|local ranks|NRINGS"),
    ("version", r"[Vv]ersion"),
    ("alloc", r"[Aa]lloc|malloc|[Mm]emory|\bmmap|munmap|[Bb]uffer|out of memory|[Pp]ool\b"),
    ("invalid_usage", r"[Ii]nvalid|[Mm]ismatch|\bmust\b|not supported|[Uu]nsupported|[Aa]rgument|[Uu]sage|"
                      r"NULL|\bnull\b|out of range|[Ee]xceed|too (many|large|small|old)|[Rr]equire|[Aa]ttempt|"
                      r"[Ww]rong|not allowed|not a valid|[Ii]llegal|[Ee]xpected|[Ss]hould|[Uu]nknown|"
                      r"[Uu]nexpected|not (initialized|found)|[Cc]ould not find|[Dd]eprecated|[Gg]roup|[Ss]chedule|"
                      r"NCCL_[A-Z_]+=|[Ii]gnor|larger than|[Ss]et NCCL_|^PARAM:|[Pp]olicy|not a member|valid"),
    ("ras", r"\bRAS\b"),
))
# Path under src/ (or an absolute RCCL path) -> family, for WARNs whose text names no subsystem.
_FILE_FAMILIES = (
    ("net_ib", "ib"), ("ibv", "ib"), ("mlx5", "ib"), ("gdaki", "ib"),
    ("socket", "socket"), ("shm", "shm"), ("p2p", "p2p"), ("nvls", "nvls"), ("proxy", "proxy"),
    ("bootstrap", "bootstrap"), ("graph/", "topology"), ("xml", "topology"), ("topo", "topology"),
    ("nvmlwrap", "topology"), ("mnnvl", "topology"), ("enqueue", "invalid_usage"), ("argcheck", "invalid_usage"),
    ("collectives", "invalid_usage"), ("alloc", "alloc"), ("mem_manager", "alloc"), ("register", "alloc"),
    ("cudawrap", "cuda"), ("strongstream", "cuda"), ("gdrwrap", "cuda"), ("plugin/", "net"), ("net.c", "net"),
    ("coll_net", "net"), ("gin", "net"), ("rma", "net"), ("ras/", "ras"),
)
_ERRNO_TEXT_RE = re.compile(r"(?:failed|error|returned)(?: with error)?\s*:?\s*(?:-?\d+\s*)?\(?"
                            r"([A-Z][A-Za-z' ]*[a-z])\)?\.?\s*$")
_CALL_RE = re.compile(r"Call to (\S+?)(?:\(\))? failed")
_QUOTED_RE = re.compile(r"'([^']*)'")
_CUDA_CODE_RE = re.compile(r"(?:Cuda failure|CUDA error|error) (\d+)")
_IB_FIELDS_RE = (("status", re.compile(r"status=(\w+)|with error (\d+),")), ("opcode", re.compile(r"opcode=(\w+)")),
                 ("vendor_err", re.compile(r"vendor[_ ]err[= ](\d+)")), ("hca", re.compile(r"\bhca (\S+)")))


def _warn_family(body: str) -> str:
    for family, rx in _WARN_FAMILIES:
        if rx.search(body):
            return family
    return "other"


def _file_family(path: str) -> str | None:
    for needle, family in _FILE_FAMILIES:
        if needle in path:
            return family
    return None


_FIELD_TEXT = 4096


def _warn_fields(family: str, body: str) -> dict[str, Any]:
    """Family fields read from a WARN text that the grammar does not type."""
    fields: dict[str, Any] = {}
    body = body[:_FIELD_TEXT]  # real WARN texts are short; a cut 64 KiB line must not cost minutes of regex
    m = _PEER_RE.search(body)
    if m:
        fields["peer"] = m[1]
    m = _ERRNO_TEXT_RE.search(body)
    if m:
        fields["errno_text"] = m[1]
    m = _CALL_RE.search(body)
    if m:
        fields["call"] = m[1]
    if family in ("cuda", "nvls"):
        m = _QUOTED_RE.search(body)
        if m:
            fields["cuda_error"] = m[1]
        m = _CUDA_CODE_RE.search(body)
        if m:
            fields["cuda_code"] = int(m[1])
    elif family == "ib":
        for name, rx in _IB_FIELDS_RE:
            m = rx.search(body)
            if m:
                value = next(v for v in m.groups() if v is not None)
                fields[name] = int(value) if value.isdigit() else value
    if body.startswith("Bootstrap : no socket interface") or body.startswith("NET/Socket : No usable listening"):
        fields["reason"] = "no_interface"
    elif body.startswith("Failed to initialize any NET plugin"):
        fields["reason"] = "no_net_plugin"
    return fields


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


# --------------------------------------------------------------------------------------------------
class NcclParser:
    """Per-stream NCCL line parser (ARCHITECTURE.md "Parser contract")."""

    __slots__ = ("_pending", "_pending_left", "compact", "compacted", "_chatter_seen", "_chatter_last", "chatter_src")

    def __init__(self, compact: bool = False) -> None:
        """Args:
            compact: analysis mode. Channel/ring/tree/transport and collective-call lines are per-channel,
                per-peer and per-call chatter (most of a big job's log). With ``compact`` only the first line
                of each (process, chatter kind) and each process's last chatter line become events; the rest
                are counted in ``compacted``. The events export keeps every line.
        """
        self._pending: Event | None = None  # a WARN whose text continues on unprefixed lines
        self._pending_left = 0
        self.compact = compact
        self.compacted = 0
        self._chatter_seen: set[tuple] = set()
        # (host, pid) -> last chatter line not turned into an event: a Line, or (lineno, text) from triage.py
        self._chatter_last: dict[tuple, Any] = {}
        self.chatter_src: Any = None  # the Source whose path/rank a (lineno, text) entry has (set by triage.py)

    def feed(self, line: Line) -> list[Event] | None:
        """Events for ``line``; None when it is not an NCCL line, [] while a multi-line WARN is open."""
        text = line.text
        out: list[Event] = []
        split = _split(text) if "NCCL " in text else None
        if self._pending is not None:
            if split is None:
                return self._continue(line)
            out.append(self._close())
        if split is None:
            if "NCCL" not in text:
                legacy = self._legacy(line) if (" WARN " in text or " INFO " in text) else None
                if legacy is None and ": Function: " in text:
                    legacy = self._ofi_test(line)
                if legacy is not None:
                    out.append(legacy)
                return out or None
            event = self._bare(line)
            if event is not None:
                out.append(event)
            return out or None
        head, level, body = split
        time, host, pid, tid, dev, millis, file, fline, func = head
        if self.compact and level == "INFO":
            ckey = _chatter_key(body)
            if ckey is not None:
                key = (host, pid, ckey)
                if key in self._chatter_seen:
                    self._chatter_last[(host, pid)] = line
                    self.compacted += 1
                    return out
                if len(self._chatter_seen) < _CACHE_SIZE:
                    self._chatter_seen.add(key)
                self._chatter_last.pop((host, pid), None)
        if level == "INFO":
            kind, rank, fields = _parse_shaped(level, body)  # fields: a fresh dict
        else:
            kind, rank, cached = parse_body(level, body)
            fields = dict(cached)
        if file is not None:
            if level == "TRACE":  # "millis func:line" (TRACE builds)
                fields["function"], fields["src_line"] = file, fline
            else:
                fields["file"], fields["src_line"], fields["function"] = file, fline, func
                if kind == "nccl.warn.other":
                    family = _file_family(file)
                    if family:
                        kind = "nccl.warn." + family
        if millis is not None:
            fields["millis"] = millis
        event = Event(kind=kind, path=line.path, line=line.lineno, text=line.raw, host=host, pid=pid, tid=tid,
                      rank=line.rank if rank is None else rank, cuda_dev=dev, time=time or line.time, fields=fields)
        if level == "WARN" and body.startswith(_CONTINUED_PREFIXES):
            self._pending, self._pending_left = event, _continued_lines(body)
            return out
        out.append(event)
        return out

    @property
    def pending_line(self) -> int | None:
        """First line of what this parser still holds (a WARN waiting for continuation lines), or None."""
        return self._pending.line if self._pending is not None else None

    def flush(self) -> list[Event]:
        """Close a WARN still waiting for its continuation lines; in compact mode, the last chatter line of
        each process (end of input: "the last thing rank 3 did was connect channel 5 via P2P/IPC")."""
        out = [self._close()] if self._pending is not None else []
        if self._chatter_last:
            src = self.chatter_src
            last = sorted((ln if isinstance(ln, Line) else
                           Line(src.path, ln[0], ln[1], ln[1], src.rank, src.local_rank, None, False)
                           for ln in self._chatter_last.values()), key=lambda ln: ln.lineno)
            self._chatter_last.clear()
            compact, self.compact = self.compact, False
            for line in last:
                out.extend(self.feed(line) or ())
            self.compact = compact
            self.compacted -= len(last)
        return out

    # -- helpers
    def _bare(self, line: Line) -> Event | None:
        """Version banner without prefix, or an NCCL-looking line whose prefix is odd (nccl.unparsed)."""
        m = _BANNER_RE.match(line.text)
        if m:
            parsed = _run("banner", m["body"])
            if parsed is not None:
                kind, fields = parsed
                fields["level"] = "VERSION"
                ts = (m["ts"] or "").strip().strip("[]")
                return Event(kind=kind, path=line.path, line=line.lineno, text=line.raw, rank=line.rank,
                             time=ts or line.time, fields=fields)
        lm = _LOOSE_RE.search(line.text)
        if lm is None:
            return None
        before = line.text[:lm.start()]
        if before and _prose(before):
            return None  # "I get `NCCL WARN ...` when ...": NCCL text quoted in a sentence is not a log line
        msg = line.text[lm.end():].strip()
        if lm[1] == "INFO" and _CUT_HEAD_RE.match(before):
            # An INFO line pasted without its host:pid:tid ("NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
            # "[3] NCCL INFO NET/IB : No device found."): typed like a full one.
            kind, rank, fields = _parse_shaped("INFO", msg)
            hm = _CUT_HEAD_RE.match(before)
            fields["prefix"] = "partial"
            return Event(kind=kind, path=line.path, line=line.lineno, text=line.raw,
                         rank=line.rank if rank is None else rank, cuda_dev=int(hm["dev"]) if hm["dev"] else None,
                         time=line.time, fields=fields)
        if lm[1] == "WARN":
            # The prefix was cut but the WARN text is one NCCL prints: type it (prefix: "partial"), so that the
            # rules see it; a body that is not a known WARN shape stays nccl.unparsed.
            kind, rank, cached = parse_body("WARN", msg)
            hm = _CUT_HEAD_RE.match(line.text[max(0, lm.start() - MAX_HEAD):lm.start()])  # bounded: quadratic
            if kind == "nccl.warn.other" and hm and hm["file"]:
                # No keyword in the text, but the remnant names the source file (":41367:41367 [1]
                # enqueue.cc:422 NCCL WARN Error : no algorithm/protocol available", nccl#653).
                family = _file_family(hm["file"])
                if family:
                    kind = "nccl.warn." + family
            if kind != "nccl.warn.other":
                fields = dict(cached)
                dev = None
                if hm:
                    dev = int(hm["dev"]) if hm["dev"] else None
                    if hm["file"]:
                        fields["file"], fields["src_line"], fields["function"] = hm["file"], int(hm["line"]), hm["func"]
                fields["prefix"] = "partial"
                return Event(kind=kind, path=line.path, line=line.lineno, text=line.raw,
                             rank=line.rank if rank is None else rank, cuda_dev=dev, time=line.time, fields=fields)
        return Event(kind="nccl.unparsed", path=line.path, line=line.lineno, text=line.raw, rank=line.rank,
                     time=line.time, fields={"level": lm[1], "msg": msg})

    def _legacy(self, line: Line) -> Event | None:
        """An NCCL <= 2.2 line (level without "NCCL") or a pasted WARN without prefix; None if neither."""
        m = _LEGACY_RE.match(line.text)
        if m is None or (m["host"] is None and m["file"] is None):
            return None
        if m["host"] is None and m["level"] != "WARN":
            return None
        kind, rank, cached = parse_body(m["level"], m["body"])
        fields = dict(cached)
        if m["file"]:
            fields["file"], fields["src_line"], fields["function"] = m["file"], int(m["line"]), None
            if kind == "nccl.warn.other":
                family = _file_family(m["file"])
                if family:
                    kind = "nccl.warn." + family
        fields["prefix"] = "legacy" if m["host"] else "none"
        return Event(kind=kind, path=line.path, line=line.lineno, text=line.raw, host=m["host"],
                     pid=int(m["pid"]) if m["pid"] else None, tid=int(m["tid"]) if m["tid"] else None,
                     rank=line.rank if rank is None else rank,
                     cuda_dev=int(m["dev"] or m["cdev"]) if (m["dev"] or m["cdev"]) else None,
                     time=line.time, fields=fields)

    def _ofi_test(self, line: Line) -> Event | None:
        """A line of aws-ofi-nccl's test logger ("WARN: Function: f Line: n: NET/OFI ..."); None if not one."""
        m = _OFI_TEST_RE.match(line.text)
        if m is None or m["level"] == "TRACE":
            return None
        kind, rank, cached = parse_body(m["level"], m["body"])
        fields = dict(cached)
        fields["function"], fields["src_line"], fields["prefix"] = m["func"], int(m["line"]), "ofi-test"
        return Event(kind=kind, path=line.path, line=line.lineno, text=line.raw,
                     rank=line.rank if rank is None else rank, time=line.time, fields=fields)

    def _continue(self, line: Line) -> list[Event]:
        pending = self._pending
        assert pending is not None
        pending.fields.setdefault("lines", [pending.text]).append(line.raw)
        pending.fields["msg"] += "\n" + line.text
        pending.fields["end_line"] = line.lineno
        self._pending_left -= 1
        return [self._close()] if self._pending_left <= 0 else []

    def _close(self) -> Event:
        pending = self._pending
        assert pending is not None
        self._pending = None
        end = pending.fields.pop("end_line", None)
        if end is None:
            return pending
        return Event(kind=pending.kind, path=pending.path, line=pending.line, text=pending.text, host=pending.host,
                     pid=pending.pid, tid=pending.tid, rank=pending.rank, cuda_dev=pending.cuda_dev,
                     time=pending.time, fields=pending.fields, end_line=end)


_CONTINUED_PREFIXES = tuple(prefix for prefix, _ in _CONTINUED_WARNS)


def _chatter_key(body: str) -> str | None:
    """For chatter bodies (compact mode), what makes one worth an event of its own; None otherwise.

    "Channel 05/1 : 3[3] -> 4[4] via P2P/IPC/read" -> "via P2P/IPC/read"; "Channel 00/64 : 0 1 2" ->
    "Channel"; "Ring 00 : ..." -> "Ring"; "Trees [0] ..." -> "Trees"; "AllReduce: opCount 3 ..." ->
    "AllReduce:" (the COLL subsystem logs one per call).
    """
    if body.startswith("Channel "):
        i = body.rfind(" via ")
        return body[i:] if i > 0 else "Channel"
    if body.startswith(("Ring ", "Trees", "Tree ")):
        return body[:4]
    word, _, rest = body.partition(" ")
    if word.endswith(":") and rest.startswith("opCount "):
        return word
    return None

Head = tuple  # (time, host, pid, tid, dev, millis, file, src_line, function), ints already converted
_HEADS: dict[str, Head | None] = {}


def _read_head(head: str) -> Head | None:
    """The prefix fields of one "{ts}host:pid:tid [dev] [file:line [(func)]]" head, or None."""
    m = _HEAD_RE.match(head)
    if m is None:
        return None
    ts, host, pid, tid, dev, millis, file, fline, func = m.groups()
    return (ts.strip().strip("[]") or None, host, int(pid), int(tid), None if dev is None else int(dev),
            None if millis is None else float(millis), file, None if fline is None else int(fline), func)


def _split(text: str) -> tuple[Head, str, str] | None:
    """(head fields, level, body) of an NCCL-prefixed line; same answer as PREFIX_RE, faster."""
    i = text.find(" NCCL ")
    if 0 < i <= MAX_HEAD:
        level, _, body = text[i + 6:].partition(" ")
        if level in _LEVELS:
            key = text[:i]
            try:
                head = _HEADS[key]
            except KeyError:
                if len(_HEADS) >= _CACHE_SIZE:
                    _HEADS.clear()
                head = _HEADS[key] = _read_head(key)
            if head is not None:
                return head, level, body
    if len(text) > MAX_HEAD:
        # The head's lazy "{ts}" and host runs make PREFIX_RE quadratic in the line's length: on a 64 KiB line of
        # "xxxx NCCL WARN ..." (a cut, mangled log) one match took minutes. A real prefix is short: look for it
        # in the line's start only; the body is the rest of the whole line.
        m = _PREFIX_HEAD_RE.match(text, 0, MAX_HEAD)
        if m is None:
            return None
        return _read_head(text[:m.start("level") - 6]), m["level"], text[m.end() + 1:]
    m = PREFIX_RE.match(text)  # " NCCL " occurs earlier than the real prefix (or not at all)
    if m is None:
        return None
    return _read_head(text[:m.start("level") - 6]), m["level"], m["body"] or ""


def _continued_lines(body: str) -> int:
    for prefix, count in _CONTINUED_WARNS:
        if body.startswith(prefix):
            return count
    return 0
