"""Flight Recorder dumps: the safe reader on real dumps and hostile/broken ones, cross-rank alignment on real
multi-rank dumps, and the CLI naming the stuck collective, its sequence id, the culprit and its call site."""
from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from jobs.jobkit import analyzer, free_port, needs_torch, run_job, torchrun

from nccl_analyzer.cli import main
from nccl_analyzer.flight.align import align, user_frame
from nccl_analyzer.flight.reader import DumpError, Frame, read_dump, sniff

CASES = Path(__file__).resolve().parent.parent / "fixtures" / "cases"


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def dumps_of(case):
    return [read_dump(str(p)) for p in sorted((CASES / case).glob("fr_*"))]


# -- reader ---------------------------------------------------------------------------------------------------------
def test_reader_real_nccl_pickle_dump():
    d = read_dump(str(CASES / "h200_watchdog_fr_dump" / "fr_0"))
    assert (d.rank, d.format, d.version, d.comm_lib_version) == (0, "pickle", "2.10", "2.28.9")
    assert d.pg_config == {"0": {"desc": "default_pg", "ranks": [0]}}
    assert d.pg_status["0"] == {"last_enqueued_collective": 5, "last_started_collective": -1,
                                "last_completed_collective": 4}
    assert [e.profiling_name for e in d.entries] == ["nccl:all_reduce", "nccl:broadcast"] * 2 + ["nccl:all_reduce"]
    assert [e.state for e in d.entries] == ["completed"] * 4 + ["scheduled"]
    last = d.entries[-1]
    assert (last.seq, last.input_sizes, last.input_dtypes, last.retired, last.timeout_ms) == \
        (5, ((1048576,),), ("Float",), False, 10000)
    site = user_frame(last.frames)
    assert (site.name, Path(site.filename).name, site.line) == ("stalled_step", "gpu_fr_worker.py", 24)


def test_reader_real_nccl_json_dump_matches_pickle_schema():
    d = read_dump(str(CASES / "h200_watchdog_fr_json" / "fr_0"))
    assert (d.rank, d.format, d.version) == (0, "json", "2.10")
    assert d.pg_status["0"]["last_completed_collective"] == 4  # JSON writes these as strings
    assert [e.seq for e in d.entries] == [1, 2, 3, 4, 5]
    assert d.entries[0].time_started_ns is None  # JSON writes 0 for "not seen"
    assert d.entries[-1].state == "scheduled" and not d.entries[-1].frames


def test_reader_real_gloo_dump_and_json_dump():
    d = read_dump(str(CASES / "cpu_gloo_fr_rank1_other_op" / "fr_1"))
    assert d.rank == 1 and d.entries[-1].profiling_name == "gloo:all_gather"
    assert d.pg_config[""]["ranks"] == [0, 1, 2, 3]  # gloo records its ranks under an empty pg name
    j = read_dump(str(CASES / "cpu_gloo_fr_rank3_dtype_json" / "fr_3"))
    assert j.format == "json" and j.entries[-1].input_dtypes == ("Double",)


def test_sniff_is_by_content_not_name(tmp_path):
    real = tmp_path / "anything.bin"
    shutil.copy(CASES / "h200_watchdog_fr_dump" / "fr_0", real)
    assert sniff(str(real)) == "pickle"
    fake = tmp_path / "fr_0"
    fake.write_text("[rank0]: Traceback (most recent call last):\n")
    assert sniff(str(fake)) is None
    assert sniff(str(CASES / "h200_watchdog_fr_json" / "fr_0")) == "json"


class _Hostile:
    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return (os.system, (f"touch {self.target}",))


def _hostile_dump(tmp_path: Path) -> tuple[Path, Path]:
    target = tmp_path / "PWNED"
    path = tmp_path / "fr_3"
    path.write_bytes(pickle.dumps({"version": "2.10", "pg_config": {}, "entries": [_Hostile(target)]}, protocol=2))
    return path, target


def test_hostile_pickle_is_refused_and_never_run(tmp_path):
    path, target = _hostile_dump(tmp_path)
    # the file really is hostile: plain pickle.load would create the target (checked on a copy, in this test only)
    probe_target = tmp_path / "PROBE"
    probe = tmp_path / "probe"
    probe.write_bytes(pickle.dumps(_Hostile(probe_target), protocol=2))
    pickle.loads(probe.read_bytes())
    assert probe_target.exists()
    with pytest.raises(DumpError, match="global posix.system|global os.system"):
        read_dump(str(path))
    assert not target.exists()


def test_cli_hostile_dump_alone_exit_2_one_line(tmp_path):
    path, target = _hostile_dump(tmp_path)
    r = run(str(path))
    assert r.exit_code == 2
    assert "Flight Recorder dump" in r.stderr and "refused" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not target.exists()


def test_cli_hostile_dump_beside_logs_is_a_warning(tmp_path):
    path, target = _hostile_dump(tmp_path)
    case = CASES / "cpu_gloo_fr_rank3_sleeps"
    r = run(str(case / "log.txt"), str(path), "--format", "json")
    assert r.exit_code == 1
    out = json.loads(r.stdout)
    assert any("not a readable Flight Recorder dump" in w and "refused" in w for w in out["warnings"])
    assert not target.exists()


@pytest.mark.parametrize("cut", [0.5, 0.97])
def test_truncated_dump(tmp_path, cut):
    data = (CASES / "h200_watchdog_fr_dump" / "fr_0").read_bytes()
    p = tmp_path / "fr_0"
    p.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(DumpError, match="truncated|ends early|not a valid pickle"):
        read_dump(str(p))


def test_corrupt_and_wrong_shape_dumps(tmp_path):
    data = bytearray((CASES / "h200_watchdog_fr_dump" / "fr_0").read_bytes())
    data[40:60] = b"\xff" * 20
    p = tmp_path / "fr_0"
    p.write_bytes(bytes(data))
    with pytest.raises(DumpError):
        read_dump(str(p))
    p.write_bytes(pickle.dumps([1, 2, 3], protocol=2))
    with pytest.raises(DumpError, match="not the dump's dict"):
        read_dump(str(p))
    j = tmp_path / "fr_1"
    j.write_text((CASES / "h200_watchdog_fr_json" / "fr_0").read_text()[:500])
    with pytest.raises(DumpError, match="not valid JSON"):
        read_dump(str(j))


def test_cli_truncated_dump_with_logs_warns_and_uses_the_rest(tmp_path):
    case = tmp_path / "job"
    shutil.copytree(CASES / "cpu_gloo_fr_rank3_sleeps_all_dump", case)
    data = (case / "fr_3").read_bytes()
    (case / "fr_3").write_bytes(data[: len(data) // 2])
    r = run(str(case), "--format", "json")
    assert r.exit_code == 1
    out = json.loads(r.stdout)
    assert any("fr_3: not a readable Flight Recorder dump" in w for w in out["warnings"])
    assert out["root_cause"]["rule"] == "flight-rank-no-dump" and out["root_cause"]["ranks"] == [3]


# -- alignment on real multi-rank dumps ---------------------------------------------------------------------------
@pytest.mark.parametrize("case,kind,seq,culprits,what", [
    ("cpu_gloo_fr_rank3_sleeps", "no_dump", 6, [3], []),
    ("cpu_gloo_fr_rank3_sleeps_all_dump", "missing", 6, [3], []),
    ("cpu_gloo_fr_json_rank3_sleeps", "missing", 6, [3], []),
    ("cpu_gloo_fr_rank2_skips", "mismatch", 6, [2], ["op"]),
    ("cpu_gloo_fr_rank1_other_op", "mismatch", 6, [1], ["op"]),
    ("cpu_gloo_fr_json_rank1_other_op", "mismatch", 6, [1], ["op"]),
    ("cpu_gloo_fr_rank0_size", "mismatch", 6, [0], ["size"]),
    ("cpu_gloo_fr_rank3_dtype_json", "mismatch", 6, [3], ["dtype"]),
    ("h200_watchdog_fr_dump", "waiting", 5, [0], []),
])
def test_align_real_dumps(case, kind, seq, culprits, what):
    al = align(dumps_of(case))
    st = al.stuck
    assert (st.kind, st.pg, st.seq, st.culprits, st.what) == (kind, "0", seq, culprits, what)
    assert al.ranks == ([0] if case.startswith("h200") else [0, 1, 2, 3])  # every rank the pg names, dumps or not
    label = json.loads((CASES / case / "label.json").read_text())
    assert st.culprits == label["ranks"]


def test_align_says_which_ranks_wrote_no_dump():
    al = align(dumps_of("cpu_gloo_fr_rank3_sleeps"))
    assert (al.ranks, al.with_dump, al.without_dump) == ([0, 1, 2, 3], [0, 1, 2], [3])
    assert al.stuck.no_dump == [3] and sorted(al.stuck.entries) == [0, 1, 2]


def test_align_skip_finds_the_earlier_call_site_divergence():
    al = align(dumps_of("cpu_gloo_fr_rank2_skips"))
    dv = al.divergence
    assert (dv.seq, dv.culprits) == (5, [2])
    assert dv.sites[2].endswith("(sync)") and dv.sites[0].endswith("(evaluate)")


def test_user_frame_skips_torch_and_site_packages():
    frames = (Frame("all_reduce", "/x/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", 3245),
              Frame("wrapper", "/pytorch/torch/distributed/c10d_logger.py", 83),
              Frame("step", "/home/me/train.py", 12), Frame("<module>", "/home/me/train.py", 40))
    assert user_frame(frames).line == 12


# -- CLI end to end -----------------------------------------------------------------------------------------------
def test_cli_dir_with_logs_and_dumps_names_stuck_collective_culprit_and_call_site():
    r = run(str(CASES / "cpu_gloo_fr_rank3_sleeps_all_dump"))
    assert r.exit_code == 1
    first = r.stdout.splitlines()[0]
    assert first.startswith("error[watchdog_timeout]: Flight Recorder: gloo:all_reduce (pg 0, collective_seq_id 6)")
    assert "rank 3 never called it" in first and "cpu_fr_worker.py:53 (evaluate)" in first


def test_cli_mismatch_json_names_the_culprit_and_its_call_site():
    r = run(str(CASES / "cpu_gloo_fr_rank1_other_op"), "--format", "json")
    assert r.exit_code == 1
    rc = json.loads(r.stdout)["root_cause"]
    assert (rc["id"], rc["rule"], rc["ranks"]) == ("collective_mismatch", "flight-collective-mismatch", [1])
    assert "collective_seq_id 6" in rc["title"] and "called all_gather" in rc["title"]
    assert "cpu_fr_worker.py:60 (sync)" in rc["title"]
    assert rc["evidence"][0]["path"].endswith("fr_1") and rc["evidence"][0]["line"] == 6


def test_cli_finds_the_dump_the_log_points_to(tmp_path):
    # the log says 'dumping nccl trace to /tmp/frcap/.../fr_0' (gone here): the file of that name beside the log
    if os.path.exists("/tmp/frcap/h200_watchdog_fr_dump_info/fr_0"):
        pytest.skip("the path the log names exists on this machine: the pointer resolves there")
    job = tmp_path / "job"
    shutil.copytree(CASES / "h200_watchdog_fr_dump_info", job)
    r = run(str(job / "log.txt"), "--format", "json")
    out = json.loads(r.stdout)
    assert out["root_cause"]["rule"] == "flight-collective-not-started"
    assert "collective_seq_id 5" in out["root_cause"]["title"] and "gpu_fr_worker.py:24" in out["root_cause"]["title"]
    assert str(job / "fr_0") in [i["path"] for i in out["inputs"]]
    # without the pointer line, a lone log gives no dump: the log-only verdict
    r2 = run(str(CASES / "h200_watchdog_fr_dump" / "log.txt"), "--format", "json")
    assert json.loads(r2.stdout)["root_cause"]["rule"] == "torch-watchdog-timeout"


# -- p2p pairs and coalesced groups: no real capture here (gloo records no p2p ops, one GPU cannot host two NCCL
#    ranks), so these dumps are SYNTHETIC: real JSON entries of h200_watchdog_fr_json with fields changed ----------
def _synthetic_dump(tmp_path: Path, rank: int, ops: list[tuple], world: int = 2) -> Path:
    """ops: (profiling_name, collective_seq_id, p2p_seq_id, is_p2p, done, time_created_ns)."""
    real = json.loads((CASES / "h200_watchdog_fr_json" / "fr_0").read_text())
    template = real["entries"][0]
    entries = []
    for i, (name, seq, p2p_seq, is_p2p, done, t) in enumerate(ops):
        e = dict(template, record_id=i, profiling_name=name, collective_seq_id=seq, p2p_seq_id=p2p_seq, is_p2p=is_p2p,
                 time_created_ns=t, retired=done, state="completed" if done else "scheduled",
                 time_discovered_completed_ns=t + 1 if done else 0)
        entries.append(e)
    real.update(entries=entries, pg_config={"0": {"desc": "default_pg", "name": "0", "ranks": str(list(range(world)))}})
    p = tmp_path / f"fr_{rank}"
    p.write_text(json.dumps(real))
    return p


def test_p2p_send_without_matching_recv_blames_the_peer(tmp_path):
    a = _synthetic_dump(tmp_path, 0, [("nccl:send 0->1", 0, 1, True, True, 10), ("nccl:send 0->1", 0, 2, True, False, 20)])
    b = _synthetic_dump(tmp_path, 1, [("nccl:recv 1<-0", 0, 1, True, True, 11), ("nccl:all_reduce", 1, 0, False, False, 21)])
    al = align([read_dump(str(a)), read_dump(str(b))])
    st = al.stuck
    assert (st.p2p, st.seq, st.kind, st.culprits, st.waiting) == (True, 2, "missing", [1], [0])


def test_p2p_both_halves_posted_is_not_blamed_on_one(tmp_path):
    a = _synthetic_dump(tmp_path, 0, [("nccl:send 0->1", 0, 1, True, False, 10)])
    b = _synthetic_dump(tmp_path, 1, [("nccl:recv 1<-0", 0, 1, True, False, 11)])
    st = align([read_dump(str(a)), read_dump(str(b))]).stuck
    assert st.kind == "waiting" and st.culprits == [0, 1]


def test_coalesced_group_is_one_op_and_compared_as_a_whole(tmp_path):
    a = _synthetic_dump(tmp_path, 0, [("nccl:all_reduce", 1, 0, False, False, 10), ("nccl:all_reduce", 1, 0, False, False, 11),
                                      ("nccl:coalesced", 1, 0, False, False, 12)])
    b = _synthetic_dump(tmp_path, 1, [("nccl:all_reduce", 1, 0, False, False, 13), ("nccl:coalesced", 1, 0, False, False, 14)])
    st = align([read_dump(str(a)), read_dump(str(b))]).stuck
    assert st.seq == 1 and st.kind == "mismatch" and st.what == ["op"]
    assert st.values[0].startswith("coalesced[all_reduce,all_reduce]") and st.values[1].startswith("all_reduce")


# -- renderers --------------------------------------------------------------------------------------------------------
def test_text_markdown_html_show_the_per_rank_table():
    case = str(CASES / "cpu_gloo_fr_rank2_skips")
    text = run(case).stdout
    assert "flight recorder (pg 0):" in text
    row2 = next(line for line in text.splitlines() if line.startswith("  2     fr_2"))
    assert "barrier MISMATCH" in row2 and "all_reduce other call site" in row2
    md = run(case, "--format", "markdown").stdout
    assert "**Flight Recorder**" in md and "| 2 | `fr_2` |" in md and "barrier MISMATCH" in md
    html = run(case, "--format", "html").stdout
    assert '<section id="flight">' in html and 'class="frgrid"' in html and "fr-mismatch" in html


def test_cli_without_dump_for_a_rank_says_so():
    text = run(str(CASES / "cpu_gloo_fr_rank3_sleeps")).stdout
    assert "no dump from rank 3 (normal for a stuck or dead rank" in text
    assert "  3     no dump" in text


def test_html_escapes_what_a_dump_says(tmp_path):
    real = json.loads((CASES / "h200_watchdog_fr_json" / "fr_0").read_text())
    for e in real["entries"]:
        e["frames"] = [{"name": "<script>alert(1)</script>", "filename": "/home/u/<img src=x onerror=alert(2)>.py",
                        "line": 7}]
    (tmp_path / "fr_0").write_text(json.dumps(real))
    html = run(str(tmp_path / "fr_0"), "--format", "html").stdout
    assert "<script>alert(1)" not in html and "<img src=x" not in html
    assert "&lt;img src=x onerror=alert(2)&gt;" in html


def test_events_export_includes_flight_events():
    r = run("events", str(CASES / "cpu_gloo_fr_rank3_sleeps_all_dump"), "--kind", "flight.*", "--format", "jsonl")
    assert r.exit_code == 0
    evs = [json.loads(x) for x in r.stdout.splitlines()]
    assert [e["kind"] for e in evs].count("flight.dump") == 4
    culprit = next(e for e in evs if e["kind"] == "flight.culprit")
    assert (culprit["rank"], culprit["reason"], culprit["seq"], culprit["last_seq"]) == (3, "missing", 6, 5)
    assert culprit["path"].endswith("fr_3") and culprit["line"] == 5


def test_healthy_job_dump_is_no_failure():
    # real: a healthy 4-rank gloo job that asked for its dumps at the end; rank 1's last barrier was not yet retired
    r = run(str(CASES / "cpu_gloo_fr_healthy"), "--format", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)["root_cause"] is None
    al = align(dumps_of("cpu_gloo_fr_healthy"))
    assert al.stuck.kind == "waiting" and al.stuck.waiting == [1] and not al.stuck.overdue


def test_dump_alone_needs_proof_of_a_hang():
    # the real H200 dump without its log: a pending op, nothing shows it overdue (its dump holds no later time)
    r = run(str(CASES / "h200_watchdog_fr_dump" / "fr_0"), "--format", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)["root_cause"] is None
    # the mismatch is structural: the dumps alone are enough
    r = run(*[str(p) for p in sorted((CASES / "cpu_gloo_fr_rank1_other_op").glob("fr_*"))], "--format", "json")
    assert json.loads(r.stdout)["root_cause"]["ranks"] == [1]


def test_overdue_when_a_dump_shows_time_past_the_timeout(tmp_path):
    a = _synthetic_dump(tmp_path, 0, [("nccl:all_reduce", 1, 0, False, False, 10), ("nccl:all_reduce", 1, 0, False, False, 11)],
                        world=1)
    d = read_dump(str(a))
    assert not align([d]).stuck.overdue
    late = _synthetic_dump(tmp_path, 1, [("nccl:all_reduce", 1, 0, False, False, 10),
                                         ("nccl:broadcast", 2, 0, False, True, 10 + 20_000 * 1_000_000)], world=2)
    b = read_dump(str(late))
    assert align([read_dump(str(_synthetic_dump(tmp_path, 0, [("nccl:all_reduce", 1, 0, False, False, 10)], world=2))),
                  b]).stuck.overdue


FR_CASES = sorted(p.parent.name for p in CASES.glob("*fr_*/label.json"))


@pytest.mark.parametrize("case", FR_CASES)
def test_fr_case_root_cause_and_ranks_match_the_label(case):
    label = json.loads((CASES / case / "label.json").read_text())
    out = json.loads(run(str(CASES / case), "--format", "json").stdout)
    rc = out["root_cause"]
    assert (rc["id"] if rc else None) == label["root_cause"]
    if rc and "ranks" in label and case != "h200_watchdog_fr_heartbeat":  # (that one has no dump)
        assert rc["ranks"] == label["ranks"] and rc["rule"].startswith("flight-")


def test_behind_names_the_rank_furthest_back_where_progress_is_known(tmp_path):
    assert align(dumps_of("h200_watchdog_fr_dump")).behind == {"seq": 5, "ranks": [0], "positions": {"0": 5}}
    assert align(dumps_of("cpu_gloo_fr_rank2_skips")).behind is None  # gloo: 'retired' also marks failed ops
    a = _synthetic_dump(tmp_path, 0, [("nccl:all_reduce", 1, 0, False, True, 10), ("nccl:all_reduce", 2, 0, False, False, 20)])
    b = _synthetic_dump(tmp_path, 1, [("nccl:all_reduce", 1, 0, False, False, 11)])
    bh = align([read_dump(str(a)), read_dump(str(b))]).behind
    assert (bh["seq"], bh["ranks"]) == (1, [1])


@pytest.mark.slow
@needs_torch
def test_launch_reads_the_dumps_the_job_wrote(tmp_path):
    # a real 4-rank gloo job under `nccl-analyze launch`; its ranks write their dumps into the launch log folder
    logs = tmp_path / "logs"
    logs.mkdir()
    worker = CASES / "_capture" / "flight" / "cpu_fr_worker.py"
    env = dict(os.environ, FR_DIR=str(logs), FR_ON_SIGTERM="1", TORCH_FR_BUFFER_SIZE="200", PYTHONUNBUFFERED="1",
               OMP_NUM_THREADS="1", NO_COLOR="1", PYTHONPATH=str(CASES.parent.parent))
    res = run_job(analyzer("launch", "--log-dir", str(logs), "--format", "json", "--",
                           *torchrun("other", 4, free_port(), script=worker)), merged=False, env=env, cwd=tmp_path)
    assert res.returncode != 0
    report = json.loads(next(logs.rglob("report.json")).read_text())
    rc = report["root_cause"]
    assert (rc["rule"], rc["ranks"]) == ("flight-collective-mismatch", [1]) and "called all_gather" in rc["title"]


def test_mutated_real_dumps_never_crash(tmp_path):
    # byte flips, cuts and insertions in real dumps: each one reads (and aligns) or is refused with DumpError
    import random

    rnd = random.Random(11)
    sources = [(CASES / c / "fr_0").read_bytes() for c in ("h200_watchdog_fr_dump", "h200_watchdog_fr_json",
                                                            "cpu_gloo_fr_rank2_skips")]
    p = tmp_path / "fr_0"
    outcomes = {"read": 0, "refused": 0}
    for _ in range(400):
        data = bytearray(rnd.choice(sources))
        for _ in range(rnd.randint(1, 6)):
            pos = rnd.randrange(len(data))
            kind = rnd.random()
            if kind < 0.5:
                data[pos] = rnd.randrange(256)
            elif kind < 0.8:
                del data[pos:pos + rnd.randint(1, 20)]
            else:
                data[pos:pos] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 8)))
        p.write_bytes(bytes(data))
        try:
            align([read_dump(str(p))])
            outcomes["read"] += 1
        except DumpError:
            outcomes["refused"] += 1
    assert outcomes["read"] > 0 and outcomes["refused"] > 0
