"""nccl.lark's Transformer and the process-wide LALR parser: a body from a start symbol -> (kind, fields)."""
from __future__ import annotations

import re
from typing import Any

from lark import Lark, Transformer, v_args
from lark.exceptions import UnexpectedInput, VisitError

from ..resources import grammar_dir, parser_cache, read_grammar

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
