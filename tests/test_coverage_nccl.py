"""Coverage of the NCCL parser over every catalogued WARN format and every key-line variant (2.3.5 .. 2.30.7)."""
from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from nccl_analyzer.model import Line
from nccl_analyzer.parse.nccl import NcclParser

REF = Path(__file__).resolve().parent.parent / "fixtures" / "reference"

# printf conversions as NCCL uses them (PRIx64 & co are already resolved in the catalogue).
_CONV = re.compile(r"%[-+ #0]*(\d+|\*)?(?:\.(\d+|\*))?(hh|h|ll|l|z|j|t|L)?([diouxXeEfgGcsp%])")
_FILL = {"d": "3", "i": "3", "u": "3", "o": "7", "x": "1a2b", "X": "1A2B", "e": "1.5", "E": "1.5", "f": "1.500000",
         "g": "1.5", "G": "1.5", "c": "x", "p": "0x7f00", "%": "%"}

# The three prefix forms of a WARN line (README "NCCL line grammar"); {file} is the path under src/.
WARN_FORMS = {
    "le2.25": "gpu-node07.cluster:81234:81301 [3] {file}:{line} NCCL WARN {msg}",
    "2.26+": "[2025-06-01 10:11:12] node1:81234:81301 [3] {file}:{line} NCCL WARN {msg}",
    "2.30.7": "[2026-06-01 10:11:12] node1:81234:81301 [3] {file}:{line} (ncclSomeFunction) NCCL WARN {msg}",
}
INFO_FORM = "node1:81234:81301 [3] NCCL INFO {msg}"
TRACE_FORM = "node1:81234:81301 [3] 12.345678 ncclProxyProgress:321 NCCL TRACE {msg}"


def fill(fmt: str, s_value: str = "eth0") -> str:
    """A concrete message for a printf format: %d -> 3, %s -> s_value (may be empty), %p -> 0x7f00, ..."""
    return _CONV.sub(lambda m: s_value if m[4] == "s" else _FILL[m[4]], fmt)


def _load_warn_fmts() -> list[tuple[str, str]]:
    """(fmt, file under src/) for every distinct WARN format in 2.30.7 and in the release history."""
    seen: dict[str, str] = {}
    with open(REF / "nccl_log_formats.jsonl", encoding="utf-8") as fh:
        for row in map(json.loads, fh):
            if row["level"] == "WARN":
                seen.setdefault(row["fmt"], row["file"])
    with open(REF / "nccl_log_formats_history.jsonl", encoding="utf-8") as fh:
        for row in map(json.loads, fh):
            if row.get("level") == "WARN":
                seen.setdefault(row["fmt"], row["files"][0])
    return [(fmt, file.removeprefix("src/")) for fmt, file in sorted(seen.items())]


WARN_FMTS = _load_warn_fmts()


def _feed(lines: list[str]):
    parser = NcclParser()
    events = []
    for n, text in enumerate(lines, 1):
        events.extend(parser.feed(Line(path="gen.log", lineno=n, text=text, raw=text)) or [])
    return events + parser.flush()


def _warn_lines(fmt: str, file: str, form: str, s_value: str = "eth0") -> list[str]:
    msg = fill(fmt, s_value).rstrip("\n")
    first, *more = msg.split("\n")
    return ["", form.format(file=file, line=123, msg=first), *more]


def test_every_warn_format_gives_a_typed_warn_event():
    kinds: Counter[str] = Counter()
    failures = []
    total = 0
    for fmt, file in WARN_FMTS:
        variants = [(form, "eth0") for form in WARN_FORMS.values()] + [(WARN_FORMS["2.26+"], "")]
        for form, s_value in variants:
            total += 1
            events = _feed(_warn_lines(fmt, file, form, s_value))
            warns = [e for e in events if e.kind.startswith("nccl.warn.")]
            if len(events) != 1 or len(warns) != 1:
                failures.append((fmt, [e.kind for e in events]))
                continue
            ev = warns[0]
            if ev.fields.get("file") != file or ev.fields.get("src_line") != 123 or ev.host is None:
                failures.append((fmt, "prefix fields"))
            kinds[ev.kind] += 1
    typed = sum(kinds.values())
    specific = typed - kinds["nccl.warn.other"]
    print(f"\nNCCL WARN coverage: {typed}/{total} ({100 * typed / total:.1f}%) typed; "
          f"{specific} family-specific ({100 * specific / total:.1f}%) over {len(WARN_FMTS)} formats x 4 forms")
    print("  by family: " + ", ".join(f"{k.removeprefix('nccl.warn.')}={v}" for k, v in kinds.most_common()))
    assert not failures, failures[:10]
    assert typed == total
    assert specific / total >= 0.90


def test_multiline_nvls_warn_is_one_event_with_its_continuation_lines():
    fmt = next(f for f, _ in WARN_FMTS if f.startswith("Failed to bind NVLink SHARP") and "force-enable" in f)
    events = _feed(_warn_lines(fmt, "transport/nvls.cc", WARN_FORMS["2.26+"]) + ["node1:1:1 [0] NCCL INFO x.cc:1 -> 1"])
    assert [e.kind for e in events] == ["nccl.warn.nvls", "nccl.error.trace"]
    warn = events[0]
    assert warn.line == 2 and warn.end_line == 4 and len(warn.fields["lines"]) == 3
    assert warn.fields["cuda_error"] == "eth0" and warn.fields["cuda_code"] == 3
    assert "Fabric Manager" in warn.fields["msg"]


# Key lines: key-line id -> the event kind every variant must give (None: any typed kind).
KEY_KINDS = {
    "bootstrap_interface": "nccl.bootstrap.interface", "bootstrap_no_interface": None, "comm_id_env": "nccl.env",
    "net_plugin": "nccl.net.plugin", "net_ib_using": "nccl.net.ib", "net_socket_using": "nccl.net.socket",
    "net_socket_threads": "nccl.net.socket", "using_network": "nccl.net.using",
    "assigned_net_plugin": "nccl.net.plugin", "cuda_driver_version": "nccl.cuda_driver",
    "init_start": "nccl.init.start", "init_complete": "nccl.init.complete",
    "comm_topology_summary": "nccl.comm.topology", "rank_ring": "nccl.ring", "tree_graph": "nccl.tree",
    "trees_line": "nccl.trees", "channel_counts": "nccl.channels.count", "transport_p2p": "nccl.transport",
    "transport_shm": "nccl.transport", "transport_net": "nccl.transport", "transport_collnet": "nccl.transport",
    "connected": None, "env_override": "nccl.env", "comm_config": "nccl.comm.config",
    "topology_system": "nccl.topo.system", "topology_pattern": "nccl.topo.pattern",
    "comm_abort_destroy": None, "version_mismatch": "nccl.warn.version", "ras_thread": "nccl.ras",
    "ras_dead_peer": "nccl.ras", "error_propagation": "nccl.error.trace", "socket_errors": "nccl.warn.socket",
    "ib_completion_errors": "nccl.warn.ib", "proxy_errors": "nccl.warn.proxy",
    # knowingly generic: typed by the prefix (level, host, ...) but no body rule needs their fields yet
    "p2p_chunksize": "nccl.info", "thread_thresholds": "nccl.info", "gdr": "nccl.info", "affinity": "nccl.info",
    "nvls": "nccl.info", "mnnvl": "nccl.info",
}
# Variants that are not the key line's main shape (old one-off texts), with the kind they give instead.
KEY_EXCEPTIONS = {
    "NET/IB : Using interface %s for sideband communication": "nccl.net.ib",  # 2.3 only
    "rank %d Connected CollNet": "nccl.info",
}


def _key_variants():
    data = json.loads((REF / "nccl_key_lines.json").read_text(encoding="utf-8"))
    for kind in data["kinds"]:
        for n, variant in enumerate(kind["variants"]):
            yield pytest.param(kind["id"], variant, id=f"{kind['id']}-{n}")


# %s arguments whose meaning the line's shape depends on: (fmt pattern, what NCCL puts there).
_KEY_ARGS = (
    (r"^%s/Plugin", "NET/Plugin"),  # 2.26+: plugin type (NET, TUNER, PROFILER, ENV, GIN, RMA)
    (r"^NET/IB : Using%s", "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE"),
    (r"%s; OOB %s:%s$", "[RO]; OOB eth0:10.0.0.1<0>"),
    (r" ; OOB %s:%s$", " ; OOB eth0:10.0.0.1<0>"),
    (r"Using%s$", "Using [0]eth0:10.0.0.1<0>"),
    (r"^(\[Rank %d\] )?%s comm", r"\1ncclCommInitRank comm"),
    (r"^Trees%s", "Trees [0] 1/-1/-1->0->-1 [1] 1/-1/-1->0->-1"),
    (r"^%s set ", "NCCL_IB_TIMEOUT set "),
    (r"^%s:%d \(%s\)", "misc/socket.cc:%d (socketProgress)"),
    (r"^%s:%d", "init.cc:%d"),
    (r"- %s COMPLETE", "- Destroy COMPLETE"),
    (r"\{fieldStr\}", "Max CTAs"),
    (r"\{format\}", "%d"),
)


def _key_line(variant: dict) -> list[str]:
    level, fmt = variant["level"], variant["fmt"]
    if level == "WARN":
        return _warn_lines(fmt, "misc/socket.cc", WARN_FORMS["2.26+"])
    for pattern, arg in _KEY_ARGS:
        fmt = re.sub(pattern, arg, fmt)
    msg = fill(fmt).rstrip("\n")
    return [(TRACE_FORM if level == "TRACE" else INFO_FORM).format(msg=msg)]


@pytest.mark.parametrize(("key", "variant"), list(_key_variants()))
def test_key_line_variant_is_typed(key, variant):
    events = _feed(_key_line(variant))
    assert len(events) == 1, events
    kind = events[0].kind
    assert kind != "nccl.unparsed"
    if variant["level"] == "TRACE":
        assert kind == "nccl.trace"
        return
    if "{" in variant["fmt"] and "{fieldStr}" not in variant["fmt"]:
        return  # a macro placeholder stands for text we cannot invent
    expected = KEY_EXCEPTIONS.get(variant["fmt"], KEY_KINDS[key])
    if expected is None:
        assert kind != "nccl.info", variant["fmt"]
    else:
        assert kind == expected, (variant["fmt"], events[0].fields)


@pytest.mark.parametrize(("key", "variant"), [p for p in _key_variants() if p.values[0] in ("init_start", "init_complete")])
def test_init_variants_extract_rank_nranks_and_bus_id(key, variant):
    (event,) = _feed(_key_line(variant))
    assert event.rank == 3
    assert event.fields["nranks"] == 3 and event.fields["comm"] == "0x7f00"
    assert event.fields["cuda_dev"] == 3
    if "busId" in variant["fmt"]:
        assert event.fields["bus_id"] in ("1a2b", "1A2B")
    if "commId" in variant["fmt"]:
        assert event.fields["comm_id"].startswith("0x")


def test_key_line_fields_for_transport_env_and_error_trace():
    (p2p,) = _feed([INFO_FORM.format(msg="Channel 00/0 : 3[3] -> 4[4] via P2P/CUMEM/read")])
    assert (p2p.fields["src"], p2p.fields["dst"], p2p.fields["transport"]) == (3, 4, "P2P/CUMEM/read")
    (net,) = _feed([INFO_FORM.format(msg="Channel 01/1 : 3[3] -> 12[4] [send] via NET/IB/0(11)/GDRDMA/Shared")])
    assert net.fields["direction"] == "send" and net.fields["transport_type"] == "NET" and net.fields["conn"] == 1
    (env,) = _feed([INFO_FORM.format(msg="NCCL_IB_TIMEOUT set by environment to 22.")])
    assert (env.fields["name"], env.fields["value"]) == ("NCCL_IB_TIMEOUT", "22")
    (trace,) = _feed([INFO_FORM.format(msg="misc/socket.cc:60 (socketProgress) -> 3 [Progress Thread]")])
    assert trace.fields == {**trace.fields, "file": "misc/socket.cc", "src_line": 60, "function": "socketProgress",
                            "code": 3, "thread": "Progress Thread"}
