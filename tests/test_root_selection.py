"""Root-cause selection, one case per branch: a cause that explains another wins over it (domination), the rank
the job model says fell behind gets the benefit of the doubt (lagging bonus), between close candidates the
earlier wins and between distant ones the more confident (tie-breaks around ``CLOSE``), and what follows from the
cause is cascade on the other ranks (cascade attribution).

Each log is made of verbatim lines from the rule examples and fixtures (the formats NCCL and PyTorch print), put
together as a job would print them; each case is built so that exactly one branch decides it (the comments say
what the verdict would be without it). Everything goes through the public ``analyze_text``.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from nccl_analyzer.analysis import analyze_text
from nccl_analyzer.diagnose import CLOSE

ROOT = Path(__file__).resolve().parent.parent

# rank 3's data loader raises (python-app-exception, 0.72; explains peer_exit, watchdog_timeout, other, ...)
TRACEBACK_R3 = """\
[rank3]: Traceback (most recent call last):
[rank3]:   File "/app/train.py", line 88, in <module>
[rank3]:     batch = next(loader)
[rank3]: KeyError: 'input_ids'
"""
# NCCL_IB_HCA names a device that does not exist (nccl-ib-requested-no-device, 0.75, ib_rdma)
IB_NO_DEVICE = """\
vm:1230:1230 [0] NCCL INFO NCCL_IB_HCA set to mlx5_99
vm:1230:1230 [0] NCCL INFO NET/IB : No device found.
vm:1230:1230 [0] NCCL INFO Failed to initialize NET plugin IB
vm:1230:1230 [0] NCCL INFO init.cc:421 -> 5
"""
# an IB completion error (nccl-ib-verbs-error, 0.85, ib_rdma; does not explain app_exception)
IB_VERBS = ("gpu-07:23311:23402 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
            "10.1.3.8<45121> with error 12, opcode 0, len 0, vendor err 129 (Recv) localGid ::ffff:10.1.3.7 "
            "remoteGid ::ffff:10.1.3.8\n")
# /dev/shm full (nccl-shm-failure, 0.90, shm; does not explain app_exception)
SHM_FULL = ("3c9ed2a6c4f0:219:254 [1] include/shmutils.h:29 NCCL WARN Error while creating shared memory segment "
            "/dev/shm/nccl-UtV0Le (size 9637888), error: No space left on device (28)\n")
# a message of the wrong size (torch-desync-mismatch, 0.93, collective_mismatch)
# TORCH_DISTRIBUTED_DEBUG=DETAIL's fingerprint check on rank 2 (torch-desync-mismatch, 0.93)
TRUNCATED = ("[rank2]: RuntimeError: Detected mismatch between collectives on ranks. Rank 2 is running collective: "
             "CollectiveFingerPrint(SequenceNumber=12, OpType=ALLREDUCE, TensorShape=[1048576], TensorDtypes=Float), "
             "but Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=12, OpType=ALLREDUCE, "
             "TensorShape=[65536], TensorDtypes=Float).\n")


def _watchdog(rank: int, seq: int, sec: int) -> str:
    return (f"[rank{rank}]:[E1129 14:02:{sec:02d}.338413520 ProcessGroupNCCL.cpp:683] [Rank {rank}] Watchdog caught "
            f"collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1048576, "
            f"NumelOut=1048576, Timeout(ms)=600000) ran for 600087 milliseconds before timing out.\n")


def _verdict(text: str):
    d = analyze_text(text, name="job.log")
    assert d.root_cause is not None, [f.rule for f in d.findings]
    return d, d.root_cause


# ------------------------------------------------------------------------------------------------ domination
def _versions_differ_with_truncation() -> str:
    """syn_nccl_versions_differ (ranks 2-3 on NCCL 2.23.4, ranks 0-1 on 2.18.5) with a size mismatch reported by
    rank 2 before the watchdog fires."""
    lines = (ROOT / "fixtures" / "cases" / "syn_nccl_versions_differ" / "log.txt").read_text().splitlines(True)
    i = next(k for k, s in enumerate(lines) if "Watchdog caught" in s)
    return "".join(lines[:i]) + TRUNCATED + "".join(lines[i:])


def test_domination_cause_beats_the_more_confident_symptom_it_explains():
    # job-nccl-versions-differ (0.78) explains collective_mismatch; torch-desync-mismatch (0.93) is 0.15 more
    # confident and not within CLOSE: without the "explains" filter the mismatch would be the root.
    d, rc = _verdict(_versions_differ_with_truncation())
    assert rc.id == "version_mismatch" and rc.rule == "job-nccl-versions-differ", rc.rule
    desync = [f for f in d.findings if f.rule == "torch-desync-mismatch"]
    assert desync and all(f.role != "root" for f in desync)


def test_domination_needs_a_one_way_explanation():
    # Without the version skew the same truncation is the root cause.
    lines = (ROOT / "fixtures" / "cases" / "syn_nccl_versions_differ" / "log.txt").read_text().splitlines(True)
    text = "".join(s for s in lines if "NCCL version" not in s) + TRUNCATED
    _, rc = _verdict(text)
    assert rc.id == "collective_mismatch"


# ------------------------------------------------------------------------------------------------ lagging bonus
def _lagging_job(rank3_seq: int) -> str:
    """Rank 3 raises; every rank's watchdog fires (rank 3's at ``rank3_seq``, the others' at 8); then rank 0's
    NIC reports an IB completion error."""
    return (TRACEBACK_R3 + _watchdog(3, rank3_seq, 10) + "".join(_watchdog(r, 8, 11 + r) for r in range(3))
            + IB_VERBS)


def test_lagging_bonus_blames_the_rank_that_fell_behind():
    # app exception 0.72 vs IB verbs 0.85: 0.13 apart, outside CLOSE. Rank 3 stopped at SeqNum 7 while the
    # others reached 8: the job model says rank 3 lags, the +0.05 brings the exception within CLOSE and, being
    # first, it wins. Without the bonus: ib_rdma.
    d, rc = _verdict(_lagging_job(7))
    assert rc.id == "app_exception" and rc.ranks == (3,), (rc.id, rc.ranks)


def _status(rank: int, seq: int, done: int, sec: int) -> str:
    return (f"[rank{rank}]:[E1129 14:02:{sec:02d}.414496538 ProcessGroupNCCL.cpp:2303] [PG ID 0 PG GUID 0(default_pg) "
            f"Rank {rank}]  failure detected by watchdog at work sequence id: {seq} PG status: last enqueued work: "
            f"{seq}, last completed work: {done}\n")


@pytest.mark.parametrize("rank3_done,expected", [(6, "app_exception"), (7, "ib_rdma")], ids=["behind", "level"])
def test_lagging_by_last_completed_work(rank3_done, expected):
    # Every watchdog names SeqNum 8; the PG status lines say rank 3 completed only up to 6, the others 7: rank 3
    # lags by what it finished, not by what it was waiting in.
    text = (TRACEBACK_R3 + _watchdog(3, 8, 10) + _status(3, 8, rank3_done, 10)
            + "".join(_watchdog(r, 8, 11 + r) + _status(r, 8, 7, 11 + r) for r in range(3)) + IB_VERBS)
    _, rc = _verdict(text)
    assert rc.id == expected, rc.id


def test_lagging_when_only_some_ranks_print_their_pg_status():
    # Rank 3 prints only its watchdog line (waiting in SeqNum 8, so it completed 7); the others also print PG
    # status lines saying they completed 8: rank 3 is behind.
    text = (TRACEBACK_R3 + _watchdog(3, 8, 10)
            + "".join(_watchdog(r, 9, 11 + r) + _status(r, 9, 8, 11 + r) for r in range(3)) + IB_VERBS)
    _, rc = _verdict(text)
    assert rc.id == "app_exception" and rc.ranks == (3,), (rc.id, rc.ranks)


def test_no_lagging_rank_no_bonus():
    # The same job with every rank at SeqNum 8: nobody lags, the more confident IB error wins.
    _, rc = _verdict(_lagging_job(8))
    assert rc.id == "ib_rdma", rc.id


# ------------------------------------------------------------------------------------------------ tie-breaks
@pytest.mark.parametrize("first,expected", [("exception", "app_exception"), ("ib", "ib_rdma")])
def test_close_candidates_the_earlier_wins(first, expected):
    # python-app-exception (0.72) and nccl-ib-requested-no-device (0.75) are within CLOSE of each other and
    # neither explains the other: whichever the log shows first is the root.
    assert 0.75 - 0.72 < CLOSE
    text = TRACEBACK_R3 + IB_NO_DEVICE if first == "exception" else IB_NO_DEVICE + TRACEBACK_R3
    d, rc = _verdict(text)
    assert rc.id == expected, rc.id
    other = "ib_rdma" if expected == "app_exception" else "app_exception"
    assert [f.role for f in d.findings if f.id == other] == ["symptom"]


# NCCL_DEBUG_TIMESTAMP_FORMAT stamps: a socket connect failure (nccl-socket-connect-failed, 0.80, network_connect)
# and a CUDA IPC failure (nccl-p2p-ipc-failure, 0.88, p2p_ipc): within CLOSE, neither explains the other.
SOCK_AT = ("[2025-06-01 10:11:{:02d}] node1:81234:81301 [3] misc/socket.cc:662 NCCL WARN socketPollConnect to "
           "10.0.0.2<43317> failed with error Connection refused\n")
P2P_AT = ("[2025-06-01 10:11:{:02d}] gpu4:2210:2290 [1] transport/p2p.cc:272 NCCL WARN failed to open CUDA IPC "
          "handle : 201 invalid device context\n")


@pytest.mark.parametrize("text,expected", [
    (P2P_AT.format(12) + SOCK_AT.format(5), "network_connect"),  # the timestamps, not the line order, decide
    (SOCK_AT.format(12) + P2P_AT.format(5), "p2p_ipc"),
    (SOCK_AT.format(5) + P2P_AT.format(5), "network_connect"),   # same second: the line order decides
    (P2P_AT.format(5) + SOCK_AT.format(5), "p2p_ipc"),
], ids=["later_line_earlier_time", "earlier_line_later_time", "same_time_line_order", "same_time_line_order_2"])
def test_close_candidates_timestamps_decide(text, expected):
    assert 0.88 - 0.80 < CLOSE
    _, rc = _verdict(text)
    assert rc.id == expected, rc.id


@pytest.mark.parametrize("sock_s,p2p_s,sock_file,expected", [
    (5, 12, "rank3.log", "network_connect"), (12, 5, "rank3.log", "p2p_ipc"),
    (5, 5, "rank3.log", "p2p_ipc"), (5, 5, "rank0.log", "p2p_ipc"), (12, 5, "rank0.log", "p2p_ipc"),
], ids=["socket_first", "p2p_first", "no_order_known", "no_order_known_socket_file_read_first",
        "p2p_first_socket_file_read_first"])
def test_close_candidates_in_per_rank_files(tmp_path, sock_s, p2p_s, sock_file, expected):
    # One file per rank: line numbers of different files say nothing about time, the stamps do; with equal
    # stamps nothing says which came first and the more confident wins, whichever file is read first.
    from nccl_analyzer.analysis import analyze

    (tmp_path / ("rank3.log" if sock_file == "rank0.log" else "rank0.log")).write_text(P2P_AT.format(p2p_s))
    (tmp_path / sock_file).write_text(SOCK_AT.format(sock_s))
    rc = analyze([str(tmp_path)]).root_cause
    assert rc is not None and rc.id == expected, rc


def test_distant_candidates_the_more_confident_wins_even_when_later():
    # python-app-exception (0.72) first, /dev/shm full (0.90) later: 0.18 apart, confidence decides.
    assert 0.90 - 0.72 > CLOSE
    _, rc = _verdict(TRACEBACK_R3 + SHM_FULL)
    assert rc.id == "shm", rc.id
    _, rc = _verdict(SHM_FULL + TRACEBACK_R3)
    assert rc.id == "shm", rc.id


def test_confidence_drops_with_a_close_unexplained_competitor():
    # A close competitor of another taxonomy makes the verdict less certain than the same cause alone.
    _, alone = _verdict(IB_NO_DEVICE)
    _, contested = _verdict(IB_NO_DEVICE + TRACEBACK_R3)
    assert alone.id == contested.id == "ib_rdma"
    assert contested.confidence < alone.confidence


# ------------------------------------------------------------------------------------------------ cascade
def test_cascade_is_the_other_ranks_and_the_story_says_so():
    d, rc = _verdict(_lagging_job(7))
    assert rc.ranks == (3,)
    cascade = [f for f in d.findings if f.role == "cascade"]
    assert [f.rule for f in cascade] == ["torch-watchdog-timeout"] and cascade[0].ranks == (0, 1, 2)
    assert d.cascade == cascade
    assert "Ranks 0-2 then failed as a consequence (watchdog_timeout)" in rc.explanation, rc.explanation
    roles = {r: info.role for r, info in d.job.ranks.items()}
    assert roles == {0: "victim", 1: "victim", 2: "victim", 3: "culprit"}, roles


# ------------------------------------------------------------------------------------------------ attribution
def _unprefixed_traceback(exitcode: str) -> str:
    """cpu_gloo_glued_traceback (4 gloo ranks, rank 2 raises) with rank 2's traceback printed without torchrun's
    ``[rank2]:`` prefix (a worker writing to its own stderr): only torchrun's summary says whose it is."""
    text = (ROOT / "fixtures" / "cases" / "cpu_gloo_glued_traceback" / "log.txt").read_text()
    text = text.replace("[rank2]: ", "").replace("[rank2]:", "").replace("sum=4Traceback", "sum=4\nTraceback")
    return (text.replace("exitcode  : 1 (pid: 24884)", f"exitcode  : {exitcode} (pid: 24884)")
            .replace("failed (exitcode: 1) local_rank: 2", f"failed (exitcode: {exitcode}) local_rank: 2"))


@pytest.mark.parametrize("exitcode,ranks", [("1", (2,)), ("-6", (2,)), ("-15", ()), ("0", ())],
                         ids=["exit_status", "own_abort", "sigterm", "clean_exit"])
def test_rankless_cause_goes_to_the_rank_torchrun_saw_fail_first(exitcode, ranks):
    # Only a rank that failed by itself is blamed: an exit status > 0, or SIGABRT (abort() in the process: gloo /
    # NCCL threads terminated at exit after the exception); one killed from outside (SIGTERM) may be a
    # victim.
    d, rc = _verdict(_unprefixed_traceback(exitcode))
    assert rc.id == "app_exception" and rc.ranks == ranks, (rc.id, rc.ranks)
    assert sorted(d.job.ranks) == [0, 1, 2, 3]
    if ranks:
        assert "The failure started on rank 2" in rc.explanation
        assert [r for r, i in d.job.ranks.items() if i.role == "culprit"] == [2]


# ------------------------------------------------------------------------------------------------ confidence
def _conf(rule_id: str) -> float:
    from nccl_analyzer.engine.loader import load_rules

    return {r.id: r.confidence for r in load_rules(())}[rule_id]


@pytest.mark.parametrize("name,text,rule,delta", [
    # the rule's own confidence when nothing else is in the log
    ("alone", IB_NO_DEVICE, "nccl-ib-requested-no-device", 0.0),
    ("alone_2", TRACEBACK_R3, "python-app-exception", 0.0),
    # +0.03 when it explains another finding (the watchdog timeout it caused)
    ("explains", TRACEBACK_R3 + _watchdog(0, 8, 11), "python-app-exception", 0.03),
    # -0.10 per taxonomy of an unexplained competitor within 0.15 of it
    ("close_competitor", IB_NO_DEVICE + TRACEBACK_R3, "nccl-ib-requested-no-device", -0.10),
    # no penalty for a competitor further away
    ("distant_competitor", SHM_FULL + TRACEBACK_R3, "nccl-shm-failure", 0.0),
    # +0.05 for another rule of the same taxonomy (corroboration)
    ("corroborated", IB_VERBS + IB_NO_DEVICE, "nccl-ib-verbs-error", 0.05),
    # +0.03 explains, +0.03 the job model blames the same rank, -0.10 the close IB competitor
    ("lagging", _lagging_job(7), "python-app-exception", 0.03 + 0.03 - 0.10),
    ("not_lagging", _lagging_job(8), "nccl-ib-verbs-error", 0.03 - 0.10),
    # a lagging rank elsewhere gives the root no bonus (rank 3 lags; the /dev/shm failure names no rank)
    ("lagging_elsewhere", TRACEBACK_R3 + _watchdog(3, 7, 10) + "".join(_watchdog(r, 8, 11 + r) for r in range(3))
     + SHM_FULL, "nccl-shm-failure", 0.03),
])
def test_confidence_adjustments(name, text, rule, delta):
    _, rc = _verdict(text)
    assert rc.rule == rule
    assert rc.confidence == pytest.approx(_conf(rule) + delta), (name, rc.confidence)


def test_confidence_is_capped_below_certainty():
    # 04_duplicate_gpu: 0.95 + 0.05 (nccl-busid-shared corroborates) + 0.03 (explains) is capped at 0.99.
    from nccl_analyzer.analysis import analyze

    rc = analyze([str(ROOT / "fixtures" / "h200-nccl-2.28.9" / "04_duplicate_gpu")]).root_cause
    assert _conf(rc.rule) + 0.05 + 0.03 > 0.99 and rc.confidence == pytest.approx(0.99)


# ------------------------------------------------------------------------------------------------ the story
def test_many_hosts_story_gpus_and_healthy_rank():
    # Six ranks on six nodes; five hit a CUDA failure (nccl-cuda-failure), rank 5 is fine.
    text = "".join(f"node{r}:10{r}:10{r} [0] NCCL INFO ncclCommInitRankConfig comm 0x1 rank {r} nranks 6 cudaDev 0 "
                   f"busId 1000 commId 0x2 - Init START\n" for r in range(6))
    text += "".join(f"node{r}:10{r}:11{r} [0] misc/strongstream.cc:402 NCCL WARN Cuda failure 'device-side assert "
                    f"triggered'\n" for r in range(5))
    d, rc = _verdict(text)
    assert rc.id == "cuda_error" and rc.ranks == (0, 1, 2, 3, 4)
    assert rc.hosts == ("node0", "node1", "node2", "node3", "node4")
    assert rc.gpus == tuple(f"node{r}:cuda0 (busId 1000)" for r in range(5))
    assert rc.explanation.endswith(" The failure started on ranks 0-4 (node0, node1, node2 and 2 more hosts)."), \
        rc.explanation[-120:]
    roles = {r: i.role for r, i in d.job.ranks.items()}
    assert roles == {0: "culprit", 1: "culprit", 2: "culprit", 3: "culprit", 4: "culprit", 5: "healthy"}


def test_story_names_torchruns_first_observed_failure_as_a_victim():
    from nccl_analyzer.analysis import analyze

    rc = analyze([str(ROOT / "fixtures" / "cases" / "cpu_gloo_rank3_sleeps")]).root_cause
    assert rc.ranks == (3,)
    assert rc.explanation.endswith(" The failure started on rank 3 (localhost). Ranks 0-2 then failed as a "
                                   "consequence (peer_exit); those are cascade, not causes. torchrun's "
                                   "'first observed failure' (rank 0) is a victim, not the cause."), rc.explanation


@pytest.mark.parametrize("ranks,cap,text", [
    ([0, 1, 2, 5], 6, "0-2, 5"), ([0, 1], 6, "0, 1"), ([3], 6, "3"), ([], 6, ""), ([5, 5, 4], 6, "4, 5"),
    (["3", 1], 6, "1, 3"), ([0, 2, 4, 6, 8, 10, 12, 14, 15], 6, "0, 2, 4, 6, 8, 10 and 3 more"),
    ([0, 1, 2, 3, 10, 11, 20, 30, 40, 50, 60, 70], 6, "0-3, 10, 11, 20, 30, 40, 50 and 2 more"),
    ([0, 2, 4, 6], 2, "0, 2 and 2 more"), ([0, 2, 4, 6, 7, 8], 3, "0, 2, 4 and 3 more"),
])
def test_rank_list(ranks, cap, text):
    from nccl_analyzer.diagnose import rank_list

    assert rank_list(ranks, cap=cap) == text


def test_rank_list_default_cap_is_six_runs():
    from nccl_analyzer.diagnose import rank_list

    assert rank_list([0, 2, 4, 6, 8, 10]) == "0, 2, 4, 6, 8, 10"
    assert rank_list([0, 2, 4, 6, 8, 10, 12]) == "0, 2, 4, 6, 8, 10 and 1 more"
    assert rank_list([0, 2, 4], cap=3) == "0, 2, 4"


# ------------------------------------------------------------------------------------------------ invariants
def _corpus():
    from nccl_analyzer.evaluate import find_cases

    return find_cases([str(ROOT / "fixtures" / d) for d in ("cases", "h200-nccl-2.28.9")])


@pytest.fixture(scope="module")
def corpus_verdicts():
    from nccl_analyzer.analysis import analyze
    from nccl_analyzer.engine.loader import load_rules

    rules = load_rules(())
    return [(c.name, analyze([str(c)], rules=rules)) for c in _corpus()]


def test_findings_order_roles_and_evidence_on_every_labeled_case(corpus_verdicts):
    from nccl_analyzer.engine.run import EVIDENCE_CAP

    order = {"root": 0, "symptom": 1, "cascade": 2}
    for name, d in corpus_verdicts:
        fs = d.findings
        keys = [(order[f.role], -round(f.confidence, 3), f.rule,
                 (f.evidence[0].path, f.evidence[0].line) if f.evidence else ("", 0)) for f in fs]
        assert keys == sorted(keys), name
        assert len({(f.rule, f.role) for f in fs}) == len(fs), f"{name}: one finding per rule and role"
        assert d.cascade == [f for f in fs if f.role == "cascade"], name
        roots = [f for f in fs if f.role == "root"]
        rc = d.root_cause
        if rc is None:
            assert not roots and all(i.role != "culprit" for i in d.job.ranks.values()), name
            continue
        assert [f.rule for f in roots] == [rc.rule], name
        assert 0.05 <= rc.confidence <= 0.99, name
        ev = [(e.path, e.line) for e in rc.evidence]
        assert len(ev) == len(set(ev)) and 1 <= len(ev) <= EVIDENCE_CAP, name
        own = [(e.path, e.line) for e in roots[0].evidence]
        assert ev[:len(own)] == own[:len(ev)], f"{name}: the root's own evidence comes first"
        for f in fs:
            if f.role == "cascade" and f.ranks:
                assert not set(f.ranks) & set(rc.ranks) or set(f.ranks) <= set(rc.ranks), (name, f.rule)
        for r, info in d.job.ranks.items():
            assert (info.role == "culprit") == (r in rc.ranks), (name, r, info.role)


def test_root_evidence_adds_the_corroborating_rules_first_lines():
    # 04_duplicate_gpu: nccl-duplicate-gpu is the root, nccl-busid-shared (same taxonomy) corroborates it; the
    # root quotes its own lines, then up to two of the corroborating rule's.
    from nccl_analyzer.analysis import analyze

    d = analyze([str(ROOT / "fixtures" / "h200-nccl-2.28.9" / "04_duplicate_gpu")])
    by_rule = {f.rule: f for f in d.findings}
    own = list(by_rule["nccl-duplicate-gpu"].evidence)
    extra = [e for e in by_rule["nccl-busid-shared"].evidence[:2] if e not in own]
    assert extra and list(d.root_cause.evidence) == (own + extra)[:6]


@pytest.mark.parametrize("victims,story", [
    ((0,), " The failure started on rank 3. Rank 0 then failed as a consequence (watchdog_timeout); those are "
           "cascade, not causes."),
    ((0, 1), " The failure started on rank 3. Ranks 0, 1 then failed as a consequence (watchdog_timeout); those "
             "are cascade, not causes."),
], ids=["one_victim", "two_victims"])
def test_story_singular_and_plural(victims, story):
    _, rc = _verdict(TRACEBACK_R3 + "".join(_watchdog(r, 8, 11 + r) for r in victims))
    assert rc.explanation.endswith(story), rc.explanation[-200:]


def test_consequences_on_the_culprits_own_ranks_are_symptoms():
    # 04_duplicate_gpu (ranks 0 and 1 share a GPU): torchrun's teardown of rank 0 and its summary of ranks 0-1
    # happen on the culprit ranks themselves: symptoms, not cascade; the story says the rest follows from it.
    from nccl_analyzer.analysis import analyze

    d = analyze([str(ROOT / "fixtures" / "h200-nccl-2.28.9" / "04_duplicate_gpu")])
    rc = d.root_cause
    assert rc.ranks == (0, 1)
    roles = {f.rule: (f.role, f.ranks) for f in d.findings}
    assert roles["elastic-sigterm-teardown"] == ("symptom", (0,))      # a subset of the culprit ranks
    assert roles["elastic-child-failed"] == ("symptom", (0, 1))       # exactly the culprit ranks
    assert rc.explanation.endswith(" The failure started on ranks 0, 1 (vm). The other errors in the log "
                                   "(invalid_usage, peer_exit) follow from it."), rc.explanation[-200:]
