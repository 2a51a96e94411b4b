"""The message classification tables (messages/*.toml) cover every catalogued NCCL WARN and PyTorch format."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nccl_analyzer.analysis import lines_of_text
from nccl_analyzer.classify import EventStream
from nccl_analyzer.errors import RuleError
from nccl_analyzer.messages import TAXONOMY, build_tables, load_tables, table_files

REF = Path(__file__).resolve().parent.parent / "fixtures" / "reference"
_CONV = re.compile(r"%(?:[-+ #0]*)(?:\d+|\*)?(?:\.\d+)?(?:hh|h|ll|l|z|j|t|L)?([diouxXfeEgGcspm%])")
_ARG = {"d": "3", "i": "3", "u": "3", "o": "3", "x": "1a2b", "X": "1A2B", "f": "1.5", "e": "1.5", "E": "1.5",
        "g": "1.5", "G": "1.5", "c": "x", "s": "eth0", "p": "0x7f3a2c000000", "m": "Connection refused", "%": "%"}


def instantiate(fmt: str) -> str:
    """A plausible message for a printf format (%d -> 3, %s -> eth0, %p -> 0x7f3a2c000000, macro {name} -> open)."""
    return _CONV.sub(lambda m: _ARG[m[1]], fmt).replace("{name}", "open")


def history_warns() -> list[tuple[str, str]]:
    """(file under src/, fmt) for every WARN format of every NCCL release 2.3.5 .. 2.30.7 and each file it is in."""
    out = set()
    with open(REF / "nccl_log_formats_history.jsonl", encoding="utf-8") as fh:
        for row in map(json.loads, fh):
            if row.get("level") == "WARN":
                out.update((f.removeprefix("src/"), row["fmt"]) for f in row["files"])
    return sorted(out)


def torch_entries() -> list[dict]:
    return json.loads((REF / "torch_distributed_formats.json").read_text(encoding="utf-8"))["entries"]


TABLES = load_tables()


def test_every_nccl_warn_format_is_classified():
    warns = history_warns()
    assert len(warns) > 1300  # 1106 distinct formats, some in several files
    missing = [(f, fmt) for f, fmt in warns if TABLES.nccl_warn(f, instantiate(fmt)) is None]
    assert not missing, "WARN formats no messages/nccl.toml entry classifies:\n" + "\n".join(
        f"  {f}: {fmt}" for f, fmt in missing)


def test_every_classification_is_a_taxonomy_id_or_harmless_with_reason():
    for f, fmt in history_warns():
        m = TABLES.nccl_warn(f, instantiate(fmt))
        assert (m.id in TAXONOMY) != bool(m.harmless), (f, fmt, m)
        if m.harmless:
            assert len(m.harmless) > 20


def test_the_table_has_no_catch_all(tmp_path):
    bad = tmp_path / "x.toml"
    bad.write_text('[[message]]\nname = "all"\nid = "other"\n', encoding="utf-8")
    with pytest.raises(RuleError, match="catch-all"):
        build_tables([bad])


@pytest.mark.parametrize("body, err", [
    ('[[message]]\nname = "a"\nid = "nonsense"\nmsg = "x"\n', "unknown taxonomy id"),
    ('[[message]]\nname = "a"\nharmless = ""\nmsg = "x"\n', "harmless needs the reason"),
    ('[[message]]\nname = "a"\nid = "shm"\nmsg = "("\n', "bad regex"),
    ('[[message]]\nname = "a"\nid = "shm"\nharmless = "because"\nmsg = "x"\n', "exactly one of"),
    ('[[message]\n', "x.toml"),
])
def test_bad_table_files_are_rejected_with_their_path(tmp_path, body, err):
    bad = tmp_path / "x.toml"
    bad.write_text(body, encoding="utf-8")
    with pytest.raises(RuleError, match=re.escape(err)):
        build_tables([bad])


def test_a_user_table_is_consulted_first(tmp_path):
    (tmp_path / "00-local.toml").write_text(
        '[[message]]\nname = "site-shm"\nharmless = "our /dev/shm warning is expected on this cluster"\n'
        'msg = "Error while creating shared memory segment"\n', encoding="utf-8")
    t = build_tables(table_files([tmp_path]))
    m = t.nccl_warn("include/shm.h", "Error while creating shared memory segment /dev/shm/nccl-1 (size 9637888)")
    assert m.harmless and m.entry == "nccl:site-shm"
    assert TABLES.nccl_warn("include/shm.h", "Error while creating shared memory segment /dev/shm/nccl-1").id == "shm"


# Spot checks: (file as NCCL prints it, format) -> the id (or "harmless"), read from what NCCL means there.
SPOT = [
    ("transport/shm.cc", "Invalid argument desc %p, hptr %p", "shm"),
    ("misc/shmutils.cc", "Error: failed to extend %s to %ld bytes, error: %s (%d)", "shm"),
    ("include/shm.h", "Error while %s shared memory segment %s (size %d)", "shm"),
    ("transport/net_ib.cc", "NET/IB : Got completion from peer %s with error %d, opcode %d, len %d, vendor err %d", "ib_rdma"),
    ("misc/ibvwrap.cc", "Call to ibv_modify_qp failed with error %s", "ib_rdma"),
    ("misc/ibvwrap.cc", "Failed to open libibverbs.so[.1]", "harmless"),
    ("misc/socket.cc", "socketStartConnect: Connect to %s failed : %s", "network_connect"),
    ("misc/socket.cc", "Net : Connection closed by remote peer %s", "peer_exit"),
    ("bootstrap.cc", "Bootstrap : no socket interface found", "socket_interface"),
    ("misc/socket.cc", "Call to bind failed: %s", "port_conflict"),
    ("transport/p2p.cc", "failed to open CUDA IPC handle : %d %s", "p2p_ipc"),
    ("transport/p2p.cc", "Max rings reached, limiting to %d", "harmless"),
    ("transport/nvls.cc", "rank %d failed to NVLS register sendbuff %p sendbuffSize %ld recvbuff %p recvbuffSize %ld",
     "nvls_multicast"),
    ("misc/argcheck.cc", "%s : invalid root %d (root should be in the 0..%d range)", "invalid_usage"),
    ("enqueue.cc", "Trying to send to self without a matching recv", "invalid_usage"),
    ("include/alloc.h", "Failed to CUDA malloc %ld bytes", "cuda_oom"),
    ("enqueue.cc", "Cuda failure '%s'", "cuda_error"),
    ("init.cc", "Duplicate GPU detected : rank %d and rank %d both on CUDA device %lx", "duplicate_gpu"),
    ("init.cc", "Mismatched NCCL version detected : rank %d version %d rank %d version %d", "version_mismatch"),
    ("init.cc", "Invalid rank requested : %d/%d", "invalid_usage"),
    ("transport/net_ib.cc", "NET/IB : peer %s collective mismatch error local size %d remote %d addr %lx rkey %x seq %x/%x",
     "collective_mismatch"),
    ("graph/xml.cc", "XML Parse : Unexpected EOF", "other"),
    ("graph/search.cc", "Could not find a path for pattern %d, falling back to simple order", "harmless"),
    ("init.cc", "Detected mixed local Net device counts across ranks (min %d, max %d). Set NCCL_IGNORE_NET_MISMATCH=1 to "
                "continue.", "ib_rdma"),
    ("transport/net_ib/p2p_resiliency.cc", "NET/IB: The error is fatal (%s). Cannot continue.", "ib_rdma"),
    ("ras/ras.cc", "RAS received unknown notification type %d", "harmless"),
    ("ras/ras.cc", "NCCL version mismatch with remote peer %s (local: %d, remote %d)", "version_mismatch"),
    ("plugin/net.cc", "Failed to initialize any NET plugin", "ib_rdma"),
    ("init.cc", "commReclaim: comm %p (rank = %d) in abort, error %d", "other"),
    ("/usr/src/debug/rccl/build/hipify/src/transport/shm.cc", "Multiple ends found in group", "shm"),
]


@pytest.mark.parametrize("file, fmt, want", SPOT, ids=[f"{f}:{fmt[:30]}" for f, fmt, _ in SPOT])
def test_spot_check(file, fmt, want):
    m = TABLES.nccl_warn(file, instantiate(fmt))
    assert (m.id or "harmless") == want, m


def test_the_gpu_pci_path_is_a_failure_but_a_nic_path_is_not():
    gpu = TABLES.nccl_warn("graph/xml.cc", "Could not find real path of /sys/class/pci_bus/0000:00/../../0000:00:01.1")
    nic = TABLES.nccl_warn("graph/xml.cc", "Could not find real path of /sys/class/net/enp1s0/device")
    assert gpu.id == "other" and nic.harmless


# --- PyTorch formats -----------------------------------------------------------------------------------------
def test_every_torch_format_is_classified_once():
    covered: dict[str, list[str]] = {}
    for e in (*TABLES.events, *TABLES.formats):
        for f in e.formats:
            covered.setdefault(f, []).append(e.name)
    ids = [e["id"] for e in torch_entries()]
    assert len(ids) == 74
    missing = [i for i in ids if i not in covered]
    twice = {i: v for i, v in covered.items() if len(v) > 1}
    unknown = sorted(set(covered) - set(ids))
    assert not missing and not twice and not unknown, (missing, twice, unknown)


def _classify_text(text: str) -> list[tuple[str, str | None, str]]:
    """(event kind, id or 'harmless', table entry) for each error-level event of a log text."""
    s = EventStream(keep_text=True)
    evs = []
    for line in lines_of_text(text):
        evs.extend(s.feed(line))
    evs.extend(s.flush())
    out = []
    for ev in evs:
        found = TABLES.event(ev.kind, ev.get)
        if found is not None:
            entry, m = found
            out.append((ev.kind, m.id or "harmless", entry.name))
    return out


def _entry_for(fmt_id: str):
    for e in (*TABLES.events, *TABLES.formats):
        if fmt_id in e.formats:
            return e
    raise KeyError(fmt_id)


# Prefix entries wrap some other message (their example is e.g. a watchdog line): the message decides, not the
# prefix, so only the non-prefix entries are checked against their example here.
# c10_error_what is the same kind of wrapper (a C++ exception text around a message).
EXAMPLES = [e for e in torch_entries() if e.get("example") and e["category"] != "prefix" and e["id"] != "c10_error_what"]


@pytest.mark.parametrize("entry", EXAMPLES, ids=[e["id"] for e in EXAMPLES])
def test_torch_example_gets_the_tables_meaning(entry):
    """The catalogue's own example line, parsed for real, is an error line with the meaning its table entry
    gives (event entries), or no error line / a harmless one (format entries)."""
    table_entry = _entry_for(entry["id"])
    got = _classify_text(entry["example"])
    if table_entry.table == "format":
        assert all(g[1] == "harmless" or g[0] == "torch.log" for g in got) or not got, got
        return
    wanted = table_entry.id or "harmless"
    assert got, f"{entry['id']}: the example gives no error-level event"
    names = {g[2] for g in got}
    kinds = set(table_entry.kinds)
    assert table_entry.name in names or any(g[0] in kinds for g in got) or wanted in {g[1] for g in got}, got


# --- error text lines ------------------------------------------------------------------------------------------
TEXT = [
    ("[node1:12345:0:12345] Caught signal 7 (Bus error: nonexistent physical address)", "signal-bus", "shm"),
    ("[node1:12345:0:12345] Caught signal 11 (Segmentation fault: address not mapped to object at address 0x8)",
     "caught-signal", "other"),
    ("Segmentation fault (core dumped)", "segfault", "other"),
    ("Aborted (core dumped)", "aborted", "other"),
    ("Killed", "killed", "host_oom"),
    ("/bin/bash: line 1: 81234 Killed                  python train.py", "shell-killed", "host_oom"),
    ("run.sh: line 12: 4411 Segmentation fault      (core dumped) python train.py", "shell-signal", "other"),
    ('Thread 787 "imagenet_fake_d" received signal SIGBUS, Bus error.', "gdb-sigbus", "shm"),
    ("#0  0x00007f1c2a3b4c5d in __GI_raise (sig=sig@entry=6) at ../sysdeps/unix/sysv/linux/raise.c:50",
     "gdb-frame", "other"),
    ("*** SIGSEGV (@0x0) received by PID 4411 (TID 0x7f1c) from PID 0; stack trace: ***", "glog-signal", "other"),
    ("Fatal Python error: Segmentation fault", "segfault", "other"),
    (" Test NCCL failure common.cu:1030 'invalid usage (run with NCCL_DEBUG=WARN for details)'", "nccl-tests-nccl",
     "invalid_usage"),
    (" Test CUDA failure common.cu:891 'out of memory'", "nccl-tests-cuda", "cuda_oom"),
    ("[node1:01234] *** An error occurred in MPI_Allreduce", "mpi-error", "other"),
    ("mpirun noticed that process rank 3 with PID 0 on node node2 exited on signal 9 (Killed).", "mpi-killed",
     "host_oom"),
    ("slurmstepd: error: Detected 1 oom_kill event in StepId=123.0. Some of the step tasks have been OOM Killed.",
     "oom-killer", "host_oom"),
    ("srun: error: node3: task 5: Exited with exit code 1", "srun-task-failed", "peer_exit"),
    ("srun: error: node3: task 5: Killed", "srun-task-killed", "host_oom"),
    ("ncclUnhandledCudaError: Call to CUDA function failed.", "nccl-error-text", "cuda_error"),
]


@pytest.mark.parametrize("line, family, want", TEXT, ids=[t[1] + "-" + t[0][:20] for t in TEXT])
def test_error_text_lines(line, family, want):
    got = _classify_text(line)
    assert got, f"no error-level event for {line!r}"
    kinds = [g for g in got if g[0] == "error.text"]
    if kinds:
        s = EventStream(keep_text=True)
        ev = s.feed(lines_of_text(line)[0])[0]
        assert ev.fields["family"] == family
    assert want in {g[1] for g in got} or _meaning(line) == want, got


def _meaning(line: str) -> str | None:
    from nccl_analyzer.failsafe import ErrorLedger

    ledger = ErrorLedger()
    s = EventStream(keep_text=True)
    for ev in s.feed(lines_of_text(line)[0]) + s.flush():
        ledger.add(ev)
    return ledger.errors[0].meaning.id if ledger.errors else None


@pytest.mark.parametrize("line", [
    "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 16384.0",
    "[2024-06-11 14:02:10,118] [INFO] [fused_optimizer.py:344:_update_scale] Grad overflow on iteration 0",
    "step 2: found inf/nan in gradients, optimizer step skipped (scale 8192.0)",
    "Epoch 3: 100%|##########| 500/500 [01:02<00:00, 8.01it/s, loss=0.231, error_rate=0.08]",
    "No room left in the zoom buffer, flushing",
    "Loaded 1024 killed-process records from the dataset",
])
def test_ordinary_lines_are_not_error_lines(line):
    assert _classify_text(line) == []


def test_the_tables_ship_in_the_wheel():
    """resources.messages_dir() finds ``_data/messages`` in an installed wheel: pyproject must put them there."""
    import tomllib

    meta = tomllib.loads((REF.parent.parent / "pyproject.toml").read_text(encoding="utf-8"))
    include = meta["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert include["messages"] == "nccl_analyzer/_data/messages"
    assert {p.name for p in table_files()} >= {"nccl.toml", "events.toml", "text.toml"}


def test_the_counts_in_docs_failsafe_md_are_the_tables_counts():
    """docs/failsafe.md's per-category counts are generated from the catalogue and the tables, never by hand."""
    import subprocess
    import sys
    root = Path(__file__).resolve().parent.parent
    p = subprocess.run([sys.executable, str(root / "benchmarks" / "failsafe_counts.py"), "--check"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
