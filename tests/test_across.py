"""Across runs: `diff GOOD BAD` on real captures, `fleet` on a fleet of real fixtures (local pool and Dask)."""
from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from jobs.jobkit import free_port

from nccl_analyzer.across.fleet import discover_jobs, run_fleet, signature
from nccl_analyzer.cli import main

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "fixtures" / "h200-nccl-2.28.9"
CASES = ROOT / "fixtures" / "cases"


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


# -- diff ----------------------------------------------------------------------------------------------------
def test_diff_names_the_setting_that_broke_ib():
    res = run("diff", str(H200 / "01_ok_subsys_all"), str(H200 / "08_ib_hca_bad"), "--format", "json")
    assert res.exit_code == 1, res.output
    d = json.loads(res.stdout)
    assert d["schema"] == "nccl-analyzer/diff/v1"
    assert d["good"]["root_cause"] is None and d["bad"]["root_cause"]["id"] == "ib_rdma"
    first, second = d["differences"][:2]
    assert (first["family"], first["good"], first["bad"]) == ("verdict", "no failure", "ib_rdma")
    assert (second["family"], second["key"], second["bad"]) == ("env", "NCCL_IB_HCA", "mlx5_99")
    weights = [x["weight"] for x in d["differences"]]
    assert weights == sorted(weights, reverse=True), "most suspicious first"
    # Topology the bad run never reached is reported, but not as a difference of note.
    topo = [x for x in d["differences"] if x["family"] == "topology"]
    assert topo and all(x["missing"] and not x["of_note"] for x in topo)


def test_diff_of_a_run_with_itself_is_clean():
    res = run("diff", str(H200 / "01_ok_subsys_all"), str(H200 / "01_ok_subsys_all"))
    assert res.exit_code == 0, res.output
    assert "no differences in the" in res.stdout


def test_diff_interface_change_between_two_healthy_runs():
    # Same NCCL, the second run pinned to loopback with P2P off: both settings and the interface show.
    res = run("diff", str(H200 / "01_ok_subsys_all"), str(H200 / "07_net_socket_lo"))
    assert res.exit_code == 1
    lines = res.stdout.splitlines()
    assert any("[env] NCCL_SOCKET_IFNAME" in ln and "lo" in ln for ln in lines)
    assert any("[env] NCCL_P2P_DISABLE" in ln for ln in lines)
    assert any("[interface] socket interfaces" in ln and "eth0  ->  lo" in ln for ln in lines)


def test_diff_markdown_and_html(tmp_path):
    html = tmp_path / "d.html"
    res = run("diff", str(H200 / "01_ok_subsys_all"), str(H200 / "02_bad_ifname"), "--format", "markdown",
              "--html", str(html))
    assert res.exit_code == 1
    assert "| family | fact | good | bad | of note |" in res.stdout
    assert "socket_interface" in res.stdout
    page = html.read_text()
    assert "<script" not in page and "NCCL_SOCKET_IFNAME" in page and "socket_interface" in page


def test_diff_escapes_log_text_in_html(tmp_path):
    good = tmp_path / "good.log"
    bad = tmp_path / "bad.log"
    good.write_text("host:1:1 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0\n")
    bad.write_text("host:1:1 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to <script>alert(1)</script>\n")
    out = tmp_path / "d.html"
    res = run("diff", str(good), str(bad), "--html", str(out))
    assert res.exit_code == 1
    page = out.read_text()
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_diff_bad_input_exits_2(tmp_path):
    res = CliRunner().invoke(main, ["diff", str(tmp_path / "missing.log"), str(H200 / "02_bad_ifname")])
    assert res.exit_code == 2
    assert "Traceback" not in res.output
    res = CliRunner().invoke(main, ["diff", str(H200 / "01_ok_subsys_all"), str(H200 / "02_bad_ifname"),
                                    "-o", str(tmp_path / "no" / "such" / "dir" / "x.txt")])
    assert res.exit_code == 2 and "does not exist" in res.output


# -- fleet ---------------------------------------------------------------------------------------------------
FLEET_CASES = ["cpu_gloo_bad_ifname", "cpu_gloo_healthy", "cpu_gloo_port_taken", "cpu_gloo_rank2_raises",
               "cpu_gloo_rank1_sigkill", "h200_warn_oom", "h200_invalid_root", "h200_device_assert",
               "h200_nccl_oom_init", "h200_watchdog_timeout", "h200_healthy_multi_coll", "cpu_gloo_mismatch"]


def _label(case: str) -> str | None:
    return json.loads((CASES / case / "label.json").read_text())["root_cause"]


@pytest.fixture(scope="module")
def fleet_dir(tmp_path_factory) -> Path:
    """A fleet of real labeled jobs, one folder each (label.json left behind: the fleet sees logs only)."""
    root = tmp_path_factory.mktemp("fleet")
    for case in FLEET_CASES:
        dst = root / case
        shutil.copytree(CASES / case, dst, ignore=shutil.ignore_patterns("label.json", "*.md"))
    # The same job run again: the same failure signature twice.
    shutil.copytree(CASES / "h200_warn_oom", root / "h200_warn_oom_rerun", ignore=shutil.ignore_patterns("label.json"))
    return root


def test_fleet_rows_match_the_labels(fleet_dir):
    res = run_fleet([fleet_dir], workers=2)
    assert [Path(r["job"]).name for r in res.rows] == sorted(FLEET_CASES + ["h200_warn_oom_rerun"])
    got = {Path(r["job"]).name: r["root_cause"] for r in res.rows}
    assert got == {c: _label(c) for c in FLEET_CASES} | {"h200_warn_oom_rerun": "cuda_oom"}
    df = res.dataframe()
    assert list(df.columns)[:3] == ["job", "root_cause", "title"] and len(df) == len(FLEET_CASES) + 1
    assert set(df.loc[df.root_cause == "cuda_oom", "job"].map(lambda p: Path(p).name)) == \
        {"h200_warn_oom", "h200_warn_oom_rerun", "h200_nccl_oom_init"}


def test_fleet_recurrence_finds_the_repeated_host_and_gpu(fleet_dir):
    rec = run_fleet([fleet_dir], workers=1).recurrence()
    hosts = {h["value"]: h for h in rec["hosts"]}
    # Every H200 capture ran on host "vm"; its failing jobs name it as culprit.
    assert "vm" in hosts and hosts["vm"]["count"] >= 3
    assert all(Path(j).name.startswith("h200_") for j in hosts["vm"]["jobs"])
    assert rec["causes"]["cuda_oom"] == 3
    assert sum(rec["causes"].values()) == len(FLEET_CASES) + 1
    (sig,) = rec["signatures"]
    assert sig["value"].startswith("cuda_oom: ") and sig["count"] == 2
    assert [Path(j).name for j in sig["jobs"]] == ["h200_warn_oom", "h200_warn_oom_rerun"]
    assert rec["causes_by_nccl_version"]["2.28.9+cuda13.0"]["cuda_oom"] >= 1


def test_signature_masks_numbers():
    assert signature("cuda_oom", "GPU out of memory on rank 503 (busId 0xdb000)") == \
        signature("cuda_oom", "GPU out of memory on rank 7 (busId 0x1a000)")
    assert signature(None, "x") is None


def test_fleet_formats_and_html(fleet_dir, tmp_path):
    res = run("fleet", str(fleet_dir), "--format", "csv", "--workers", "2")
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert len(rows) == len(FLEET_CASES) + 1 and {r["root_cause"] for r in rows} >= {"cuda_oom", "app_exception"}
    res = run("fleet", str(fleet_dir), "--format", "json", "--workers", "1")
    data = json.loads(res.stdout)
    assert data["schema"] == "nccl-analyzer/fleet/v1" and len(data["jobs"]) == len(FLEET_CASES) + 1
    pq = tmp_path / "f.parquet"
    html = tmp_path / "f.html"
    res = run("fleet", str(fleet_dir), "--format", "parquet", "-o", str(pq), "--html", str(html))
    assert res.exit_code == 0, res.output
    import pandas as pd

    df = pd.read_parquet(pq)
    assert len(df) == len(FLEET_CASES) + 1 and set(df["root_cause"].dropna()) >= {"cuda_oom"}
    page = html.read_text()
    assert page.count("<svg") >= 2 and "<script" not in page and "bad-node" not in page
    assert "Hosts most often named as culprit" in page and ">vm<" in page
    assert run("fleet", str(fleet_dir), "--format", "parquet").exit_code == 2


def test_fleet_job_list_glob_and_unreadable_job(fleet_dir, tmp_path):
    listing = tmp_path / "jobs.txt"
    listing.write_text(f"# two jobs and one that is gone\n{fleet_dir / 'h200_warn_oom'}\n"
                       f"{fleet_dir / 'cpu_gloo_healthy'}\n{tmp_path / 'gone'}\n")
    res = run_fleet([f"@{listing}"], workers=1)
    by = {Path(r["job"]).name: r for r in res.rows}
    assert by["h200_warn_oom"]["root_cause"] == "cuda_oom" and by["cpu_gloo_healthy"]["root_cause"] is None
    assert by["gone"]["error"] and by["gone"]["root_cause"] is None
    assert len(discover_jobs(str(fleet_dir / "h200_*"))) == 7
    res = CliRunner().invoke(main, ["fleet", str(tmp_path / "nothing-here")])
    assert res.exit_code == 2 and "Traceback" not in res.output


@pytest.mark.slow
def test_fleet_on_a_real_dask_cluster_gives_the_same_rows(fleet_dir, tmp_path):
    pytest.importorskip("distributed")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
    dask = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    procs = [subprocess.Popen(dask + ["--host", "127.0.0.1", "--port", str(port), "--dashboard-address", ":0",
                                      "--no-dashboard"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)]
    addr = f"tcp://127.0.0.1:{port}"
    try:
        for _ in range(2):
            procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", addr, "--nthreads",
                                           "1", "--no-dashboard", "--nworkers", "1"], cwd=ROOT, env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True))
        from distributed import Client

        with Client(addr, timeout="120s") as c:
            c.wait_for_workers(2, timeout=240)  # raises TimeoutError if the Dask workers did not start
        local = run_fleet([fleet_dir], engine="local", workers=2)
        on_dask = run_fleet([fleet_dir], engine="dask", scheduler=addr)
        assert on_dask.rows == local.rows
        res = run("fleet", str(fleet_dir), "--engine", "dask", "--scheduler", addr, "--format", "json")
        assert res.exit_code == 0
        assert json.loads(res.stdout)["jobs"] == local.rows
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.mark.slow
def test_fleet_dask_local_cluster_by_default(fleet_dir):
    """Dask's default HTTP port (8787) taken, as by another Dask cluster on the machine: our local cluster does not
    use it, so Dask does not warn 'Port 8787 is already in use' (an error under this suite's filterwarnings)."""
    pytest.importorskip("distributed")
    local = run_fleet([fleet_dir], engine="local", workers=1)
    with contextlib.ExitStack() as held:
        try:
            s = held.enter_context(socket.socket())
            s.bind(("127.0.0.1", 8787))
            s.listen()
        except OSError:
            pass  # taken already: the case itself
        assert run_fleet([fleet_dir], engine="dask", workers=2).rows == local.rows


def test_fleet_unreachable_scheduler_exits_2(fleet_dir):
    pytest.importorskip("distributed")
    res = CliRunner().invoke(main, ["fleet", str(fleet_dir), "--engine", "dask", "--scheduler",
                                    f"tcp://127.0.0.1:{free_port()}"])
    assert res.exit_code == 2, res.output
    assert "Dask scheduler" in res.output and "Traceback" not in res.output
