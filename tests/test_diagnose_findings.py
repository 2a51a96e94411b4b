"""What diagnose.py puts in each finding and in the root cause, checked where a user reads it (the JSON report, the
text report, ``Diagnosis`` from the Python API): the fields of a cascade finding, the ranks, GPUs and evidence of
a root cause several hits agree on, the cap on corroboration, the role of a consequence the root does not explain,
the roles of ranks, and a lost-peer report whose only ranks are victims.

The logs are verbatim formats of NCCL, PyTorch, torchrun and gdb (as in the rule examples and fixtures), put
together as a job prints them, and go through the public ``analyze_text``.
"""
from __future__ import annotations

import json
import tomllib
from pathlib import Path

from nccl_analyzer.analysis import analyze_text
from nccl_analyzer.render import render

ROOT = Path(__file__).resolve().parent.parent


def _rule(rule_id: str) -> dict:
    path = next(p for p in (ROOT / "rules").rglob("*.toml") if f'id = "{rule_id}"' in p.read_text())
    return tomllib.loads(path.read_text())


def _init(rank: int, host: str | None = "gpu-node1", nranks: int = 4) -> str:
    prefix = f"{host}:{5100 + rank}:{5100 + rank} " if host else ""
    return (f"{prefix}[{rank}] NCCL INFO ncclCommInitRank comm 0x55d0c{rank}e0 rank {rank} nranks {nranks} "
            f"cudaDev {rank} nvmlDev {rank} busId {rank + 1}8000 commId 0x7e11c0d2a4b3f001 - Init COMPLETE\n")


def _oom(rank: int) -> str:
    return (f"[rank{rank}]: Traceback (most recent call last):\n"
            f'[rank{rank}]:   File "/work/train.py", line 211, in <module>\n'
            f"[rank{rank}]:     loss = model(batch).loss\n"
            f"[rank{rank}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU {rank} has a "
            f"total capacity of 79.10 GiB of which 1.95 GiB is free.\n")


def _watchdog(rank: int) -> str:
    return (f"[rank{rank}]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank {rank}] Watchdog caught collective "
            f"operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, "
            f"Timeout(ms)=600000) ran for 600061 milliseconds before timing out.\n")


def _sigterm(rank: int) -> str:
    return (f"W1129 13:53:32.158000 566 torch/distributed/elastic/multiprocessing/api.py:1012] Sending process "
            f"{5100 + rank} closing signal SIGTERM\n")


def _child_failed(entries: list[tuple[int, int]]) -> str:
    """torchrun's ChildFailedError summary; the first entry is the root cause (first observed failure)."""
    out = ('Traceback (most recent call last):\n  File "/usr/local/bin/torchrun", line 8, in <module>\n'
           "    sys.exit(main())\ntorch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
           + "=" * 60 + "\ntrain.py FAILED\n" + "-" * 60 + "\nFailures:\n")
    for i, (rank, code) in enumerate(entries):
        if i == 1:
            out += "-" * 60 + "\nRoot Cause (first observed failure):\n"
        why = f"Signal 15 (SIGTERM) received by PID {5100 + rank}" if code == -15 else "<N/A>"
        out += (f"[{rank}]:\n  time      : 2025-03-21_02:10:05\n  host      : gpu-node1\n"
                f"  rank      : {rank} (local_rank: {rank})\n  exitcode  : {code} (pid: {5100 + rank})\n"
                f"  error_file: <N/A>\n  traceback : {why}\n")
    return out + "=" * 60 + "\n"


# /dev/shm full, as NCCL (WARN), gdb (a SIGBUS in ncclShmOpen) and a DataLoader worker report it
SHM_WARN = ("gpu-node1:5100:5140 [0] include/shmutils.h:29 NCCL WARN Error while creating shared memory segment "
            "/dev/shm/nccl-UtV0Le (size 9637888), error: No space left on device (28)\n")
GDB_SIGBUS = ('Thread 787 "python" received signal SIGBUS, Bus error.\n'
              "[Switching to Thread 0x7f45d7dff640 (LWP 3925)]\n"
              "0x00007f6b59544f3b in ncclShmOpen(char*, unsigned long, void**, void**, int, void**) () from "
              "/usr/lib/x86_64-linux-gnu/libnccl.so.2\n")
DATALOADER_BUS = ("[rank1]: RuntimeError: DataLoader worker (pid 4321) is killed by signal: Bus error. It is possible "
                  "that dataloader's workers are out of shared memory. Please try to raise your shared memory limit.\n")


def test_cascade_finding_carries_its_own_title_confidence_time_and_values():
    # rank 3 runs out of memory; ranks 0-2 time out waiting for it: the timeouts are one cascade finding
    log = "".join(_init(r) for r in range(4)) + _oom(3) + "".join(_watchdog(r) for r in range(3))
    d = analyze_text(log, name="job.log")
    assert d.root_cause.id == "cuda_oom" and d.root_cause.ranks == (3,)
    js = json.loads(render(d, "json"))
    cascade = [f for f in js["findings"] if f["rule"] == "torch-watchdog-timeout"]
    assert len(cascade) == 1
    wd = cascade[0]
    assert wd["role"] == "cascade" and wd["ranks"] == [0, 1, 2] and wd["hosts"] == ["gpu-node1"]
    # its title is its own rule's, filled from its own line (SeqNum, op) and the job model's lagging rank
    assert wd["title"] == "A collective timed out (ALLREDUCE SeqNum 1580); lagging rank 3"
    # its confidence is its rule's, not the root cause's
    assert wd["confidence"] == _rule("torch-watchdog-timeout")["confidence"] != js["root_cause"]["confidence"]
    assert [e["line"] for e in wd["evidence"]] == [9, 10, 11]
    (f,) = [f for f in d.findings if f.rule == "torch-watchdog-timeout"]
    assert f.time == "12-06 18:44:12"  # the watchdog line's own clock
    assert f.bound["seq"] == "1580" and f.bound["op_type"] == "ALLREDUCE"
    first_words = " ".join(_rule("torch-watchdog-timeout")["description"].split()[:4])
    assert f.explanation.startswith(first_words) and "{" not in f.explanation
    # the root finding shows the root cause's number (one number for it in every report)
    (root,) = [f for f in js["findings"] if f["role"] == "root"]
    assert root["confidence"] == js["root_cause"]["confidence"]


def test_root_cause_names_every_rank_its_rule_fired_on():
    # ranks 1 and 3 both run out of memory (one rule, one hit per rank); ranks 0 and 2 time out
    log = "".join(_init(r) for r in range(4)) + _oom(1) + _oom(3) + _watchdog(0) + _watchdog(2)
    d = analyze_text(log, name="job.log")
    rc = d.root_cause
    assert rc.rule == "torch-cuda-oom" and rc.ranks == (1, 3)
    assert rc.gpus == ("gpu-node1:cuda1 (busId 28000)", "gpu-node1:cuda3 (busId 48000)")
    assert [e.line for e in rc.evidence] == [8, 12]  # both ranks' exception lines
    assert "The failure started on ranks 1, 3 (gpu-node1)." in rc.explanation
    assert {r: i.role for r, i in d.job.ranks.items()} == {0: "victim", 1: "culprit", 2: "victim", 3: "culprit"}


def test_gpu_of_a_rank_whose_host_is_unknown():
    # NCCL lines whose host:pid:tid prefix was cut off (a log shipper keeping "[dev] NCCL ..." only)
    log = "".join(_init(r, host=None) for r in range(4)) + _oom(3) + "".join(_watchdog(r) for r in range(3))
    d = analyze_text(log, name="job.log")
    assert d.root_cause.ranks == (3,)
    assert d.root_cause.gpus == ("?:cuda3 (busId 48000)",)  # RootCause.gpus (Python API; no JSON field)


def test_root_evidence_quotes_each_line_once():
    # NCCL's WARN is the root; gdb's SIGBUS in ncclShmOpen is matched by two rules of the same taxonomy (the
    # shm-specific one and the generic SIGBUS one): the root cause quotes that line once
    log = _init(0, nranks=2) + _init(1, nranks=2) + SHM_WARN + GDB_SIGBUS
    d = analyze_text(log, name="job.log")
    rc = d.root_cause
    assert rc.rule == "nccl-shm-failure"
    assert {f.rule for f in d.findings} >= {"crash-sigbus-shm", "crash-sigbus"}
    lines = [e.line for e in rc.evidence]
    assert lines == [3, 4] and len(set(lines)) == len(lines)
    js = json.loads(render(d, "json"))
    assert [e["line"] for e in js["root_cause"]["evidence"]] == [3, 4]


def test_corroboration_bonus_is_capped():
    # a DataLoader worker killed by SIGBUS (torch-shm-exhausted, and the SIGBUS-text rule), alone and then with
    # gdb's SIGBUS in ncclShmOpen (two more shm rules): more agreeing rules raise the confidence, but by a capped
    # bonus, so three of them do not reach certainty
    init = _init(0, nranks=2) + _init(1, nranks=2)
    one = analyze_text(init + DATALOADER_BUS, name="job.log").root_cause
    three = analyze_text(init + DATALOADER_BUS + GDB_SIGBUS, name="job.log").root_cause
    assert one.rule == three.rule == "torch-shm-exhausted"
    base = _rule("torch-shm-exhausted")["confidence"]
    assert base < one.confidence < three.confidence < 0.99


def test_consequence_the_root_does_not_explain_keeps_its_own_role():
    # rank 0's NCCL 'unhandled system error' (a root rule that explains nothing); torchrun then SIGTERMs ranks 1
    # and 3 (a consequence rule) and reports ranks 0 and 2 exiting with 1 (a root-capable rule)
    system_error = (
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/work/train.py", line 40, in <module>\n'
        "[rank0]:     dist.all_reduce(t)\n"
        "[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:1191, unhandled system error, NCCL version 2.10.3\n"
        "[rank0]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device "
        "error.\n")
    log = system_error + _sigterm(1) + _sigterm(3) + _child_failed([(0, 1), (1, -15), (2, 1), (3, -15)])
    d = analyze_text(log, name="job.log")
    rc = d.root_cause
    assert rc.rule == "torch-nccl-system-error" and rc.ranks == (0,)
    roles = {f.rule: (f.role, f.ranks) for f in d.findings}
    assert roles["elastic-sigterm-teardown"] == ("cascade", (1, 3))  # a consequence on other ranks
    assert roles["elastic-child-failed"] == ("symptom", (2,))  # not a consequence rule, not explained
    # rank 0's exit is explained by its own traceback (session 13d): kept in the report, under its own rule
    assert roles["elastic-child-failed-own-traceback"] == ("symptom", (0,))
    assert {r: i.role for r, i in d.job.ranks.items()} == {0: "culprit", 1: "victim", 2: "victim", 3: "victim"}


def test_rank_with_an_error_no_rule_matched_is_a_victim_not_healthy():
    # rank 2 printed a WARN no rule knows: it is not in any finding, but it did hit an error
    warn = "gpu-node1:5102:5102 [2] misc/foo.cc:12 NCCL WARN Something odd happened\n"
    log = "".join(_init(r) for r in range(4)) + _oom(3) + _watchdog(0) + _watchdog(1) + warn
    d = analyze_text(log, name="job.log")
    assert d.root_cause.ranks == (3,)
    assert all(2 not in f.ranks for f in d.findings)
    js = json.loads(render(d, "json"))
    roles = {r["rank"]: r["role"] for r in js["job"]["ranks"]}
    assert roles == {0: "victim", 1: "victim", 2: "victim", 3: "culprit"}


def test_lost_peer_seen_only_by_its_victim_blames_no_rank():
    # rank 0's log of a 4-rank job: its peer closed the connection. The rank that says so is the survivor; the
    # culprit (the peer that went away, one of ranks 1-3) is not in the input, so no rank is named, even though
    # the job has only one rank in view
    peer_closed = ("gpu-node1:5100:5140 [0] transport/net_socket.cc:520 NCCL WARN NET/Socket : peer 10.0.0.3<42>: "
                   "connection closed by remote peer\n")
    d = analyze_text(_init(0) + peer_closed, name="job.log")
    rc = d.root_cause
    assert rc.rule == "nccl-remote-peer-closed" and rc.ranks == () and rc.gpus == ()
    assert d.job.ranks[0].role == "victim"
    assert "The failure started on" not in rc.explanation


def test_story_names_three_hosts_without_a_more_hosts_tail():
    # ranks 0-2 run out of memory, one per host, and rank 3 times out
    hosts = ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]
    log = "".join(_init(r, host=hosts[r]) for r in range(4)) + _oom(0) + _oom(1) + _oom(2) + _watchdog(3)
    rc = analyze_text(log, name="job.log").root_cause
    assert rc.ranks == (0, 1, 2)
    assert "The failure started on ranks 0-2 (gpu-a, gpu-b, gpu-c)." in rc.explanation, rc.explanation


def test_story_lists_every_kind_of_consequence():
    # fixtures/cases/syn_oom_rank3_watchdog_cascade: rank 3 runs out of memory; ranks 0-2 time out, abort their
    # process group and are reported by torchrun (watchdog_timeout and peer_exit)
    from nccl_analyzer.analysis import analyze

    rc = analyze([str(ROOT / "fixtures" / "cases" / "syn_oom_rank3_watchdog_cascade")]).root_cause
    assert " Ranks 0-2 then failed as a consequence (peer_exit, watchdog_timeout); those are cascade, not causes." \
        in rc.explanation, rc.explanation
