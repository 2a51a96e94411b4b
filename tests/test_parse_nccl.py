"""NCCL parser: prefix regex vs grammar, real 2.28.9 fixtures, public issue lines, edge cases."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from nccl_analyzer.model import Line
from nccl_analyzer.parse.nccl import PREFIX_RE, NcclParser, body_parser, build_parser, parse_body

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures" / "h200-nccl-2.28.9"
PUBLIC = ROOT / "fixtures" / "parse" / "nccl" / "public_issue_lines.log"
GENERIC = {"nccl.info", "nccl.warn.other", "nccl.trace", "nccl.call"}

# README "NCCL line grammar" examples, one per prefix form / version range.
README_LINES = [
    "node1:81234:81234 [0] NCCL INFO NCCL version 2.18.5+cuda12.2",
    "node1:81234:81234 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
    "node1:81234:81301 [3] NCCL INFO Channel 00/0 : 3[3] -> 4[4] [send] via NET/IB/0/GDRDMA",
    "node1:81234:81301 [3] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.2<43317> failed : "
    "Connection refused",
    "[2025-06-01 10:11:12] node1:81234:81301 [3] misc/socket.cc:662 NCCL WARN socketPollConnect to 10.0.0.2<43317> "
    "failed with error Connection refused",
    "[2026-06-01 10:11:12] node1:81234:81301 [3] os/linux.cc:301 (ncclOsSocketPollConnect) NCCL WARN "
    "ncclOsSocketPollConnect to 10.0.0.2<43317> failed with error Connection refused",
    "node1:81234:81234 NCCL CALL ncclCommInitRank(0x55d0c1e0, 8, 0x3f1a2b, 3, 3)",
    "host:1234:1240 [0] NCCL INFO misc/socket.cc:60 (socketProgress) -> 3",
    "node-7.cluster.local:81234:81301 [3] 12.345678 ncclProxyProgress:321 NCCL TRACE progress op 3",
    "node1:81234:81301 [3] /usr/src/debug/rccl/build/hipify/src/proxy.cc:1519 NCCL WARN [Proxy Service 0] Failed to "
    "execute operation Connect from rank 0, retcode 2",
    "gpu-a100-0003:7:7 [2] init.cc:300 NCCL ABORT",
]


def _lines(path: Path):
    """Lines of a log as sources.py delivers them (torchrun's [rankN]: wrapper taken off)."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for n, raw in enumerate(fh, 1):
            raw = raw.rstrip("\n")
            text, rank = raw, None
            if raw.startswith("[rank") and "]:" in raw[:10]:
                rank = int(raw[5:raw.index("]")])
                text = raw[raw.index("]:") + 2:]
            yield Line(path=str(path), lineno=n, text=text, raw=raw, rank=rank)


def _events(lines) -> list:
    parser = NcclParser()
    out = []
    for line in lines:
        out.extend(parser.feed(line) or [])
    return out + parser.flush()


def _one(text: str, rank: int | None = None):
    events = _events([Line(path="t.log", lineno=1, text=text, raw=text, rank=rank)])
    assert len(events) == 1, events
    return events[0]


def _fixture(case: str) -> list:
    return _events(_lines(FIX / case / "log.txt"))


def _public_lines() -> list[str]:
    return [ln for ln in PUBLIC.read_text(encoding="utf-8").splitlines() if ln and not ln.startswith("#")]


# -- grammar -------------------------------------------------------------------------------------------
def test_grammar_has_no_terminal_collisions_in_strict_mode():
    build_parser(strict=True)


def test_parser_is_built_once_per_process():
    assert body_parser() is body_parser()


def _corpus() -> list[str]:
    lines = [ln.text for case in sorted(FIX.iterdir()) if case.is_dir() for ln in _lines(case / "log.txt")]
    return [t for t in lines + _public_lines() + README_LINES if PREFIX_RE.match(t)]


def test_prefix_regex_and_grammar_agree_on_a_corpus():
    corpus = _corpus()
    assert len(corpus) > 1900
    for text in corpus:
        m = PREFIX_RE.match(text)
        toks = body_parser().parse(text, start="line")
        assert m["ts"].strip() == toks.get("TIMESTAMP", ""), text
        assert f"{m['host']}:{m['pid']}:{m['tid']}" == toks["HOSTPIDTID"], text
        assert (m["dev"] and f"[{m['dev']}]") == toks.get("DEV"), text
        assert (m["file"] and f"{m['file']}:{m['fline']}") == toks.get("LOC"), text
        assert (m["func"] and f"({m['func']})") == toks.get("FUNC"), text
        assert m["level"] == toks["LEVEL"], text
        assert (m["body"] or "").strip() == toks.get("REST", "").rstrip(), text


# -- real NCCL 2.28.9 fixtures -------------------------------------------------------------------------
def test_every_nccl_line_of_the_fixtures_is_typed(capsys):
    kinds: Counter[str] = Counter()
    generic: Counter[str] = Counter()
    nccl_lines = 0
    for case in sorted(p for p in FIX.iterdir() if p.is_dir()):
        lines = list(_lines(case / "log.txt"))
        nccl_lines += sum(1 for ln in lines if PREFIX_RE.match(ln.text) or ln.text.startswith("NCCL version"))
        for ev in _events(lines):
            kinds[ev.kind] += 1
            if ev.kind in GENERIC:
                generic[ev.fields["msg"].split(" ")[0]] += 1
    assert kinds["nccl.unparsed"] == 0
    assert sum(kinds.values()) == nccl_lines
    typed = sum(kinds.values()) - sum(kinds[k] for k in GENERIC)
    with capsys.disabled():
        print(f"\nfixtures: {nccl_lines} NCCL lines, {typed} with a specific kind, "
              f"{nccl_lines - typed} knowingly generic; generic by first word: {dict(generic.most_common(12))}")
    assert typed / nccl_lines > 0.85


def test_duplicate_gpu_gives_both_ranks_and_the_bus_id():
    warns = [e for e in _fixture("04_duplicate_gpu") if e.kind == "nccl.warn.duplicate_gpu"]
    assert len(warns) == 2
    first = warns[0]
    assert first.rank == 1 and first.fields["ranks"] == [1, 0]
    assert first.fields["bus_id"] == "60" and first.fields["pci_bus_id"] == "0000:00:06.0"
    assert first.fields["file"] == "init.cc" and first.fields["src_line"] == 904
    assert first.time == "2026-11-29 13:53:31" and first.pid == 589 and first.host == "vm"
    starts = {e.rank: e for e in _fixture("04_duplicate_gpu") if e.kind == "nccl.init.start"}
    assert set(starts) == {0, 1} and starts[1].fields["nranks"] == 2 and starts[1].fields["bus_id"] == "60"


def test_bad_ifname_env_warn_and_error_chain():
    events = _fixture("02_bad_ifname")
    env = next(e for e in events if e.kind == "nccl.env")
    assert (env.fields["name"], env.fields["value"]) == ("NCCL_SOCKET_IFNAME", "eth9")
    warn = next(e for e in events if e.kind.startswith("nccl.warn."))
    assert warn.kind == "nccl.warn.bootstrap" and warn.fields["reason"] == "no_interface"
    assert warn.fields["msg"] == "Bootstrap : no socket interface found"
    assert (warn.fields["file"], warn.fields["src_line"], warn.time) == ("bootstrap.cc", 114, "2026-11-29 13:53:17")
    traces = [e for e in events if e.kind == "nccl.error.trace"]
    assert [(t.fields["file"], t.fields["src_line"], t.fields["code"]) for t in traces] == [
        ("init.cc", 126, 5), ("init.cc", 160, 5)]


def test_ib_hca_bad():
    events = _fixture("08_ib_hca_bad")
    env = next(e for e in events if e.kind == "nccl.env")
    assert (env.fields["name"], env.fields["value"]) == ("NCCL_IB_HCA", "mlx5_99")
    ib = [e for e in events if e.kind == "nccl.net.ib"]
    assert ib[0].fields["no_device"] and ib[1].fields["oob_interface"] == "eth0" and ib[1].fields["relaxed_ordering"]
    failed = next(e for e in events if e.kind == "nccl.net.plugin" and e.fields["status"] == "init_failed")
    assert failed.fields["plugin"] == "IB"
    warn = next(e for e in events if e.kind.startswith("nccl.warn."))
    assert warn.kind == "nccl.warn.net" and warn.fields["reason"] == "no_net_plugin"
    assert warn.fields["file"] == "plugin/net.cc"
    asyncs = [e for e in events if e.kind == "nccl.error.trace" and e.fields["thread"] == "Async thread"]
    assert len(asyncs) == 1 and asyncs[0].fields["code"] == 5


def test_timestamps_on_every_line():
    events = _fixture("09_timestamp")
    assert events and all(e.time and e.time.startswith("2026-11-29 13:56:4") for e in events)
    start = next(e for e in events if e.kind == "nccl.init.start")
    assert start.time == "2026-11-29 13:56:47"
    assert start.fields["comm_id"] == "0xb75bd5a1d550602a" and start.fields["function"] == "ncclCommInitRankConfig"


def test_collective_lines():
    (coll,) = [e for e in _fixture("16_coll_subsys") if e.kind == "nccl.coll"]
    assert coll.fields == {**coll.fields, "op": "AllReduce", "op_count": 0, "count": 1048576, "datatype": 7,
                           "red_op": 0, "root": 0, "nranks": 1, "comm": "0x22488e70", "stream": "(nil)"}


def test_ok_run_key_lines():
    events = _fixture("01_ok_subsys_all")
    by_kind: dict[str, list] = {}
    for e in events:
        by_kind.setdefault(e.kind, []).append(e)
    (version,) = by_kind["nccl.version"]
    assert version.fields["nccl_version"] == "2.28.9" and version.fields["cuda_version"] == "13.0"
    assert by_kind["nccl.cuda_driver"][0].fields["driver_version"] == 13000
    assert by_kind["nccl.bootstrap.interface"][0].fields["interface"] == "eth0"
    assert by_kind["nccl.net.using"][0].fields["network"] == "Socket"
    (done,) = by_kind["nccl.init.complete"]
    assert done.rank == 0 and done.fields["nranks"] == 1 and done.fields["nvml_dev"] == 0
    (topo,) = by_kind["nccl.comm.topology"]
    assert topo.fields["n_nodes"] == 1 and topo.fields["local_ranks"] == 1
    assert len(by_kind["nccl.channel"]) == 64 and by_kind["nccl.channel"][0].fields["n_channels"] == 64
    assert by_kind["nccl.ring"][0].fields == {**by_kind["nccl.ring"][0].fields, "prev": 0, "next": 0}
    trees = by_kind["nccl.trees"][0]
    assert trees.fields["entries"][0] == {"channel": 0, "down": [-1, -1, -1], "rank": 0, "up": [-1]}
    assert len(trees.fields["entries"]) >= 47  # the line is cut at 1023 chars; complete entries survive
    assert by_kind["nccl.channels.count"][0].fields["nvls_channels"] == 0
    (destroy,) = by_kind["nccl.destroy"]
    assert destroy.fields["state"] == "COMPLETE" and destroy.fields["bus_id"] == "60"
    assert {e.fields["what"] for e in by_kind["nccl.ras"]} >= {"thread started", "thread terminating"}
    assert by_kind["nccl.topo.system"][0].fields == {**by_kind["nccl.topo.system"][0].fields, "maxBw": 5000.0}


def test_illegal_memory_access_cuda_failures_and_abort():
    events = _fixture("12_illegal_mem")
    cuda = [e for e in events if e.kind == "nccl.warn.cuda"]
    assert {e.fields["cuda_error"] for e in cuda} == {"device-side assert triggered"}
    assert any(e.fields.get("cuda_code") == 710 for e in cuda)
    abort = next(e for e in events if e.kind == "nccl.abort")
    assert abort.fields["state"] == "START" and abort.tid == 1442


def test_wrapper_rank_is_used_when_the_body_states_none():
    assert _one("vm:1:1 [0] NCCL INFO Using network Socket", rank=5).rank == 5
    assert _one("vm:1:1 [0] NCCL INFO comm 0x1 rank 3 nranks 4 cudaDev 0 busId 60 - Init COMPLETE", rank=5).rank == 3
    tagged = _one("vm:1:1 [0] NCCL INFO [Rank 7] ncclCommSplit comm 0x1 rank 2 nranks 4 cudaDev 0 nvmlDev 0 busId 60 "
                  "parent 0x2 childCount 1 color 0 key 2- Init START")
    assert tagged.rank == 7 and tagged.fields["comm_rank"] == 2 and tagged.fields["key"] == 2 and tagged.fields["parent"] == "0x2"


# -- other versions: README examples, public issue threads ---------------------------------------------
@pytest.mark.parametrize("text", README_LINES)
def test_readme_examples_are_typed(text):
    ev = _one(text)
    assert ev.kind != "nccl.unparsed" and ev.host


def test_readme_example_fields():
    call = _one(README_LINES[6])
    assert call.kind == "nccl.call" and call.fields["call"] == "ncclCommInitRank" and call.cuda_dev is None
    new = _one(README_LINES[5])
    assert new.kind == "nccl.warn.socket" and new.fields["function"] == "ncclOsSocketPollConnect"
    assert new.fields["peer"] == "10.0.0.2<43317>" and new.fields["errno_text"] == "Connection refused"
    trace = _one(README_LINES[8])
    assert trace.kind == "nccl.trace" and trace.fields["function"] == "ncclProxyProgress"
    assert trace.host == "node-7.cluster.local" and trace.fields["millis"] == 12.345678
    assert _one(README_LINES[9]).fields["file"] == "/usr/src/debug/rccl/build/hipify/src/proxy.cc"
    assert _one(README_LINES[10]).kind == "nccl.abort"


def test_public_issue_lines_are_all_typed():
    events = _events(Line(path="p.log", lineno=n, text=t, raw=t) for n, t in enumerate(_public_lines(), 1))
    assert len(events) == len(_public_lines())
    kinds = Counter(e.kind for e in events)
    assert kinds["nccl.unparsed"] == 0 and kinds["nccl.warn.other"] == 0
    assert kinds["nccl.info"] == 1  # threadThresholds (knowingly generic)


@pytest.mark.parametrize(("text", "kind", "fields"), [
    ("ubuntu:39964:40075 [0] misc/socket.cc:483 NCCL WARN socketStartConnect: Connect to 10.0.0.2<45763> failed : "
     "Software caused connection abort", "nccl.warn.socket",
     {"peer": "10.0.0.2<45763>", "errno_text": "Software caused connection abort"}),
    ("ng30903:3063025:3066048 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer "
     "ng30903-ib.narval.calcul.quebec<51159>", "nccl.warn.socket", {"peer": "ng30903-ib.narval.calcul.quebec<51159>"}),
    ("kp-ddp-worker-0:3468:3905 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer "
     "10.216.210.236<54862> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid fd00::1 remoteGidsfd00::2",
     "nccl.warn.ib", {"peer": "10.216.210.236<54862>", "status": 12, "vendor_err": 129}),
    ("H100-2:19989:20082 [1] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
     "fe80::966d:ae03:8b:df78%ib0<53249> with error 4, opcode 32564, len 32564, vendor err 81 (Send)",
     "nccl.warn.ib", {"peer": "fe80::966d:ae03:8b:df78%ib0<53249>", "status": 4, "vendor_err": 81}),
    ("VM-0-16-ubuntu:392:494 [2] enqueue.cc:43 NCCL WARN Cuda failure 'out of memory'", "nccl.warn.cuda",
     {"cuda_error": "out of memory"}),
    ("ng30903:3063028:3066152 [3] include/alloc.h:185 NCCL WARN Failed to CUDA calloc 6291456 bytes",
     "nccl.warn.cuda", {"file": "include/alloc.h"}),
    ("ubuntu:9621:9688 [3] misc/shmutils.cc:112 NCCL WARN Error while creating shared memory segment "
     "/dev/shm/nccl-KWfVyt (size 5967872)", "nccl.warn.shm", {}),
    ("ubuntu:39964:40075 [0] proxy.cc:1519 NCCL WARN [Proxy Service 0] Failed to execute operation Connect from "
     "rank 0, retcode 2", "nccl.warn.proxy", {}),
    ("ip-172-31-0-137:14605:14688 [0] NCCL INFO Channel 00 : 1[1e0] -> 0[1e0] [receive] via NET/Socket/0",
     "nccl.transport", {"src": 1, "dst": 0, "src_dev": "1e0", "direction": "receive", "conn": None}),
    ("nd20-01:191191:191191 [0] NCCL INFO group.cc:106 -> 2 ", "nccl.error.trace", {"code": 2, "thread": None}),
])
def test_public_issue_line_fields(text, kind, fields):
    ev = _one(text)
    assert ev.kind == kind
    assert ev.fields == {**ev.fields, **fields}


# -- structure: banners, continuations, odd input ------------------------------------------------------
def test_bare_version_banner_and_git_version():
    ev = _one("NCCL version 2.21.5+cuda12.4")
    assert ev.kind == "nccl.version" and ev.host is None and ev.fields["level"] == "VERSION"
    ts = _one("[2025-03-21 02:07:08] NCCL version 2.26.2+cuda12.8")
    assert ts.time == "2025-03-21 02:07:08" and ts.fields["nccl_version"] == "2.26.2"
    git = _one("vm:1:1 [0] NCCL INFO NCCL git version master v2.29.2-1-gabcdef0")
    assert git.kind == "nccl.git_version" and git.fields["describe"] == "v2.29.2-1-gabcdef0"


@pytest.mark.parametrize("text", [
    "torch.distributed.DistBackendError: NCCL error in: /pytorch/ProcessGroupNCCL.cpp:3135, invalid usage, "
    "NCCL version 2.28.9",
    "[W1129 13:53:17.753549120 ProcessGroupNCCL.cpp:1575] Warning: WARNING: destroy_process_group()",
    "Last error:", "", "rank 0 sum 1.0",
])
def test_non_nccl_lines_are_not_ours(text):
    assert NcclParser().feed(Line(path="t", lineno=1, text=text, raw=text)) is None


def test_odd_prefix_is_unparsed_not_dropped():
    ev = _one(":81301 [3] NCCL WARN half a prefix")
    assert ev.kind == "nccl.unparsed" and ev.fields["level"] == "WARN"


def test_broken_typed_body_falls_back_to_generic():
    ev = _one("vm:1:1 [0] NCCL INFO comm 0x1 rank x nranks - Init START")
    assert ev.kind == "nccl.info" and ev.fields["msg"].startswith("comm 0x1")
    assert _one("vm:1:1 [0] NCCL INFO Channel 00/02 : 0[ -> garbage").kind == "nccl.info"
    assert _one("vm:1:1 [0] NCCL INFO").kind == "nccl.info"


def test_multiline_warn_is_buffered_and_flushed():
    parser = NcclParser()
    head = ("vm:1:2 [0] transport/nvls.cc:10 NCCL WARN Failed to bind NVLink SHARP (NVLS) Multicast memory of size "
            "1024 : CUDA error 801 'operation not supported'.")
    assert parser.feed(Line("t", 1, head, head)) == []
    assert parser.feed(Line("t", 2, "This is usually caused by a system error.", "x")) == []
    (ev,) = parser.feed(Line("t", 3, "Do not force-enable NVLS.", "y"))
    assert ev.end_line == 3 and ev.fields["cuda_code"] == 801 and ev.fields["lines"] == [head, "x", "y"]
    assert parser.feed(Line("t", 4, head, head)) == []
    (flushed,) = parser.flush()
    assert flushed.line == 4 and flushed.end_line is None


def test_nowarn_info_keeps_failure_fields():
    ev = _one("vm:1:1 [0] NCCL INFO misc/strongstream.cc:12 Cuda failure 'invalid argument'")
    assert ev.kind == "nccl.info" and ev.fields["nowarn"] == "cuda" and ev.fields["cuda_error"] == "invalid argument"


def test_body_cache_is_bounded_and_shared():
    parse_body.cache_clear()
    _one("vm:1:1 [0] NCCL INFO Using network Socket")
    _one("vm:2:2 [0] NCCL INFO Using network Socket")
    info = parse_body.cache_info()
    assert info.maxsize == 65536 and info.hits >= 1


def test_cut_prefix_warn_with_known_body_is_typed():
    # nccl#525: the reporter pasted "[3] include/shm.h:28 NCCL WARN ..." without host:pid:tid.
    ev = _one("[3] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device")
    assert ev.kind == "nccl.warn.system" and ev.fields["prefix"] == "partial"
    assert ev.cuda_dev == 3 and ev.fields["file"] == "include/shm.h" and ev.fields["src_line"] == 28


def test_shm_segment_named_recv_is_shm_not_socket():
    ev = _one("[3] include/shm.h:48 NCCL WARN Error while creating shared memory segment nccl-shm-recv-1462-1-2-3 (size 9637888)")
    assert ev.kind == "nccl.warn.shm"


@pytest.mark.parametrize("text,kind,host", [
    ("gpu-1:18553:18611 [0] include/socket.h:360 WARN Call to connect failed : Connection timed out",
     "nccl.warn.socket", "gpu-1"),  # NCCL 2.2 (nccl-tests#15)
    ("gpu-1:18553:18553 [0] INFO NET/Socket : 1 interfaces found", "nccl.info", "gpu-1"),
    ("include/socket.h:344 WARN Socket creation failed : Address family not supported by protocol",
     "nccl.warn.socket", None),  # pasted without prefix (nccl#210)
])
def test_legacy_and_prefixless_lines(text, kind, host):
    ev = _one(text)
    assert ev.kind == kind and ev.host == host and ev.fields["prefix"] in ("legacy", "none")


@pytest.mark.parametrize("text", [
    "2024-01-01 WARN disk almost full",
    "app.py:12 INFO starting",
    "WARN something",
])
def test_plain_warn_words_are_not_nccl_lines(text):
    assert NcclParser().feed(Line(path="t", lineno=1, text=text, raw=text)) is None
