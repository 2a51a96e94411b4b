"""Tests for --reproduce: plan (whitelist, scenarios, fix), run (env, timeouts, orphans), compare, real gloo runs."""
from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nccl_analyzer.errors import ExitCode, ReproduceError
from nccl_analyzer.model import Diagnosis, Fix, JobModel, RankInfo, RootCause
from nccl_analyzer.reproduce import LocalInfo, Plan, reproduce, stage, validate_env
from nccl_analyzer.reproduce import run as runmod
from nccl_analyzer.reproduce.compare import (CONFIRMED, FIXED, INCONCLUSIVE, NOT_APPLICABLE, NOT_REPRODUCED, Verdict,
                                            judge)
from nccl_analyzer.reproduce.plan import SCENARIOS, normalize_dtype, normalize_op
from nccl_analyzer.reproduce.worker import plan_from_args

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "fixtures" / "h200-nccl-2.28.9"
RECORDED = ROOT / "fixtures" / "reproduce"
HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is not installed in this Python "
                                 "(pip install 'nccl-analyzer[reproduce]' or torch==2.13.0 for a CPU build)")

CPU = LocalInfo(torch=True, gpus=0, interfaces=("lo", "eth0"), default_interface="eth0")
ONE_GPU = LocalInfo(torch=True, gpus=1, interfaces=("lo", "eth0"), default_interface="eth0")
NO_TORCH = LocalInfo(torch=False, gpus=0, interfaces=("lo", "eth0"), default_interface="eth0")


def make_diag(root: str | None, *, env: dict | None = None, ranks: int = 2, hosts: int = 1, backend: str = "nccl",
              fix_env: dict | None = None, culprit: int = 1, coll: dict | None = None) -> Diagnosis:
    coll = {"op": "ALLREDUCE", "numel": 1024, "dtype": "Float"} if coll is None else coll
    infos = {r: RankInfo(rank=r, host=f"node-{r * hosts // ranks}", last_collective=dict(coll)) for r in range(ranks)}
    job = JobModel(ranks=infos, env=dict(env or {}), backend=backend, world_size=ranks,
                   nccl_versions=["2.28.9+cuda13.0"] if backend == "nccl" else [])
    rc = None
    if root:
        rc = RootCause(id=root, title=root, confidence=0.9, ranks=(culprit,), hosts=("node-0",), evidence=(),
                       explanation="", fix=Fix(summary="fix it", env=dict(fix_env or {})))
    return Diagnosis(inputs=[], root_cause=rc, findings=[], job=job)


# ------------------------------------------------------------------------------------------------ whitelist


def test_whitelist_drops_shell_injection_and_preload():
    kept, dropped = validate_env({
        "NCCL_SOCKET_IFNAME": "$(rm -rf /)", "LD_PRELOAD": "/tmp/evil.so", "NCCL_NET_PLUGIN": "evil",
        "NCCL_TOPO_FILE": "/etc/passwd", "PYTHONPATH": "/tmp", "NCCL_IB_HCA": "mlx5_0:1,mlx5_1",
        "NCCL_P2P_DISABLE": "1", "NCCL_IB_GID_INDEX": "3", "NCCL_IB_TIMEOUT": "99", "NCCL_NVLS_ENABLE": "1",
        "GLOO_SOCKET_IFNAME": "eth0;reboot", "NCCL_SOCKET_FAMILY": "AF_UNIX", "NCCL_ALGO": "Ring,Tree",
    })
    assert kept == {"NCCL_IB_HCA": "mlx5_0:1,mlx5_1", "NCCL_P2P_DISABLE": "1", "NCCL_IB_GID_INDEX": "3",
                    "NCCL_ALGO": "Ring,Tree"}
    why = dict(dropped)
    assert why["LD_PRELOAD"] == why["NCCL_NET_PLUGIN"] == why["PYTHONPATH"] == "not on the whitelist"
    assert why["NCCL_SOCKET_IFNAME"] == why["NCCL_IB_TIMEOUT"] == why["NCCL_NVLS_ENABLE"] == "invalid value"
    assert why["GLOO_SOCKET_IFNAME"] == "invalid value"


@pytest.mark.parametrize("value", ["eth0", "^docker,lo", "=eth0", "ens1f0np0", "ib0:1", "bond0.100"])
def test_whitelist_accepts_real_interface_specs(value):
    assert validate_env({"NCCL_SOCKET_IFNAME": value})[0] == {"NCCL_SOCKET_IFNAME": value}


@pytest.mark.parametrize("value", ["", "eth0 eth1", "a" * 65, "eth0\nNCCL_NET=IB", "`id`", "eth0|x", "x\x00"])
def test_whitelist_rejects_bad_interface_specs(value):
    assert validate_env({"NCCL_SOCKET_IFNAME": value})[0] == {}


def test_log_env_injection_is_not_planned_and_is_noted():
    diag = make_diag("socket_interface", env={"NCCL_SOCKET_IFNAME": "$(rm -rf /)", "LD_PRELOAD": "/x.so",
                                              "NCCL_IB_HCA": "mlx5_0"})
    staging, _ = stage(diag, ONE_GPU)
    assert staging.plan is not None
    assert "LD_PRELOAD" not in staging.plan.env
    assert "$(rm" not in staging.plan.command()
    assert staging.plan.env["NCCL_SOCKET_IFNAME"] == "eth9"  # invalid value dropped; a missing interface is used
    assert staging.plan.env["NCCL_IB_HCA"] == "mlx5_0"
    notes = " ".join(staging.notes)
    assert "LD_PRELOAD (not on the whitelist)" in notes and "NCCL_SOCKET_IFNAME (invalid value)" in notes


def test_plan_json_is_validated_again_on_load(tmp_path):
    good = Plan(scenario="port_conflict", env={"NCCL_P2P_DISABLE": "1"})
    assert Plan.from_json(good.to_json()) == good
    for change in ({"env": {"LD_PRELOAD": "/x.so"}}, {"env": {"NCCL_SOCKET_IFNAME": "$(reboot)"}},
                   {"env": {"MASTER_ADDR": "10.0.0.1"}}, {"numel": 1 << 40}, {"scenario": "rm -rf"},
                   {"nproc": 0}, {"nproc": True}, {"pg_timeout": "5; reboot"}, {"command": "bash"},
                   {"scenario": ["x"]}, {"op": "exec"}):
        data = {**good.to_dict(), **change}
        with pytest.raises(ReproduceError):
            Plan.from_dict(data)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**good.to_dict(), "env": {"LD_PRELOAD": "/x.so"}}))
    from nccl_analyzer.reproduce.worker import main

    assert main(["--launch", "--plan", str(bad)]) == 2


def test_worker_flags_round_trip_to_the_same_plan():
    plan = Plan(scenario="collective_mismatch", backend="gloo", nproc=2, op="broadcast", dtype="int64", numel=77,
                root=1, culprit=1, pg_timeout=5.0)
    parsed, launch = plan_from_args(plan.worker_args())
    assert parsed == plan and not launch
    with pytest.raises(SystemExit):
        plan_from_args(["--scenario", "port_conflict", "--op", "rm"])


def test_normalize_op_and_dtype():
    assert normalize_op("ALLREDUCE") == normalize_op("ncclAllReduce") == normalize_op("all_reduce") == "all_reduce"
    assert normalize_op("_allgather_base") == "all_gather" and normalize_op("ReduceScatter") == "reduce_scatter"
    assert normalize_op("frobnicate") is None and normalize_op(None) is None
    assert normalize_dtype("Float") == normalize_dtype("torch.float32") == normalize_dtype("ncclFloat32") == "float32"
    assert normalize_dtype("bf16") == "bfloat16" and normalize_dtype("ncclDouble") == "float64"


# ------------------------------------------------------------------------------------------------ scenarios


def test_staging_uses_gloo_without_gpus_and_maps_the_interface_variable():
    staging, fix = stage(make_diag("socket_interface", env={"NCCL_SOCKET_IFNAME": "eth9"}), CPU, verify_fix=True)
    plan = staging.plan
    assert plan.backend == "gloo" and plan.nproc == 1
    assert plan.env == {"GLOO_SOCKET_IFNAME": "eth9"}
    assert fix.env == {"GLOO_SOCKET_IFNAME": "eth0"}
    assert any("uses gloo on CPU" in n for n in staging.notes)


def test_staging_keeps_nccl_on_gpu_and_the_collective_from_the_log():
    diag = make_diag("socket_interface", env={"NCCL_SOCKET_IFNAME": "eth9"}, ranks=1,
                     coll={"op": "Broadcast", "numel": 4096, "dtype": "Half", "root": 0})
    plan = stage(diag, ONE_GPU)[0].plan
    assert (plan.backend, plan.op, plan.numel, plan.dtype, plan.env) == (
        "nccl", "broadcast", 4096, "float16", {"NCCL_SOCKET_IFNAME": "eth9"})


@pytest.mark.parametrize("root,local,needle", [
    ("duplicate_gpu", CPU, "duplicate_gpu needs 1 GPU(s) on one node (the job ran 8 ranks on 2 node(s)); "
                           "this machine has 0"),
    ("p2p_ipc", ONE_GPU, "P2P needs 2 GPU(s) on one node (the job ran 8 ranks on 2 node(s)); this machine has 1"),
    ("shm", ONE_GPU, "SHM needs 2 GPU(s)"),
    ("cuda_oom", CPU, "needs 1 GPU(s)"),
    ("ib_rdma", CPU, "needs 1 GPU(s)"),
])
def test_too_few_gpus_is_inconclusive_and_names_the_count(root, local, needle):
    diag = make_diag(root, ranks=8, hosts=2)
    out = reproduce(diag, local=local, analyzer=_never)
    rep = out.reproduction
    assert rep.outcome == INCONCLUSIVE and needle in rep.reason
    assert rep.command.startswith("env NCCL_DEBUG=INFO")  # still there: the user can run it on a bigger machine


@pytest.mark.parametrize("root", ["version_mismatch", "host_oom", "nvls_multicast", "network_connect", "other"])
def test_unsupported_causes_are_inconclusive_with_a_reason(root):
    rep = reproduce(make_diag(root), local=ONE_GPU, analyzer=_never).reproduction
    assert rep.outcome == INCONCLUSIVE and root in rep.reason and rep.command == ""


def test_no_root_cause_is_inconclusive():
    rep = reproduce(make_diag(None), local=ONE_GPU, analyzer=_never).reproduction
    assert rep.outcome == INCONCLUSIVE and "no root cause" in rep.reason


def test_fix_plans():
    diag = make_diag("ib_rdma", env={"NCCL_IB_HCA": "mlx5_99"}, fix_env={"NCCL_NET": "Socket"})
    staging, fix = stage(diag, ONE_GPU, verify_fix=True)
    assert staging.plan.env == {"NCCL_IB_HCA": "mlx5_99", "NCCL_NET": "IB"}
    assert fix.plan.env == {"NCCL_IB_DISABLE": "1", "NCCL_NET": "Socket"} and "unset NCCL_IB_HCA" in fix.summary
    # a fix naming an interface this machine lacks is not applied; a local one is used
    diag = make_diag("socket_interface", env={"NCCL_SOCKET_IFNAME": "eth9"}, fix_env={"NCCL_SOCKET_IFNAME": "ib0"})
    fix = stage(diag, ONE_GPU, verify_fix=True)[1]
    assert fix.env == {"NCCL_SOCKET_IFNAME": "eth0"} and "ib0 not applied (no such interface here)" in fix.summary
    # placeholders are for people
    diag = make_diag("socket_interface", env={"NCCL_SOCKET_IFNAME": "eth9"},
                     fix_env={"NCCL_SOCKET_IFNAME": "<interfaces>"})
    assert stage(diag, ONE_GPU, verify_fix=True)[1].env == {"NCCL_SOCKET_IFNAME": "eth0"}
    fix = stage(make_diag("duplicate_gpu"), ONE_GPU, verify_fix=True)[1]
    assert fix.plan.nproc == 1 and fix.plan.variant == "fixed"
    fix = stage(make_diag("watchdog_timeout", backend="gloo"), CPU, verify_fix=True)[1]
    assert fix.plan.pg_timeout > fix.plan.sleep_s > 0
    fix = stage(make_diag("p2p_ipc"), LocalInfo(torch=True, gpus=2), verify_fix=True)[1]
    assert fix.env == {"NCCL_P2P_DISABLE": "1"}


# ------------------------------------------------------------------------------------------------ dry run


def test_dry_run_without_torch_prints_plan_and_a_pasteable_command():
    diag = make_diag("socket_interface", env={"NCCL_SOCKET_IFNAME": "eth9"}, ranks=1)
    rep = reproduce(diag, dry_run=True, verify_fix=True, local=NO_TORCH, analyzer=_never).reproduction
    assert rep.outcome == INCONCLUSIVE and rep.reason.startswith("dry run: nothing was run")
    assert rep.command == ("env GLOO_SOCKET_IFNAME=eth9 NCCL_DEBUG=INFO python -m nccl_analyzer.reproduce.worker "
                           "--launch --scenario socket_interface --backend gloo --ranks 1 --numel 1024")
    assert rep.fix_env == {"GLOO_SOCKET_IFNAME": "eth0"} and rep.fix_outcome is None
    assert '"scenario": "socket_interface"' in rep.output_excerpt
    assert rep.to_dict().keys() == {"outcome", "reason", "backend", "world_size", "command", "fix_outcome",
                                    "fix_env", "got"}


def test_command_quotes_values():
    plan = Plan(scenario="socket_interface", backend="nccl", env={"NCCL_NET": "AWS Libfabric"})
    argv = shlex.split(plan.command())
    assert "NCCL_NET=AWS Libfabric" in argv and argv[0] == "env"


def test_without_torch_reproduce_raises_exit_4_with_install_hint():
    with pytest.raises(ReproduceError) as info:
        reproduce(make_diag("port_conflict"), local=NO_TORCH, analyzer=_never)
    assert info.value.exit_code == ExitCode.REPRODUCE_FAILED
    assert "pip install 'nccl-analyzer[reproduce]'" in str(info.value)


# ------------------------------------------------------------------------------------------------ run/compare


def test_child_env_is_clean():
    base = {"PATH": "/usr/bin", "HOME": "/root", "LD_PRELOAD": "/evil.so", "AWS_SECRET_ACCESS_KEY": "x",
            "NCCL_SOCKET_IFNAME": "from-our-shell", "PYTHONPATH": "/opt/x"}
    plan = Plan(scenario="socket_interface", env={"NCCL_SOCKET_IFNAME": "eth9"})
    env = runmod.child_env(plan, base, "m")
    assert env["PATH"] == "/usr/bin" and env["NCCL_SOCKET_IFNAME"] == "eth9" and env["NCCL_DEBUG"] == "INFO"
    assert "LD_PRELOAD" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert env["PYTHONPATH"].split(os.pathsep) == [runmod.PACKAGE_ROOT, "/opt/x"]
    assert env["NCCL_NVLS_ENABLE"] == "0" and env[runmod.MARKER] == "m"


def _result(rc, timed_out=False):
    return runmod.RunResult(rc, timed_out, 1.0, "/nonexistent.log", "/nonexistent.json", ())


def test_judge():
    assert judge("port_conflict", _result(1), Verdict("port_conflict", None, None))[0] == CONFIRMED
    assert judge("port_conflict", _result(0), Verdict(None, None, None))[0] == NOT_REPRODUCED
    assert judge("port_conflict", _result(1), Verdict("socket_interface", None, None))[0] == NOT_REPRODUCED
    assert judge("port_conflict", _result(None, True), Verdict(None, None, None))[0] == INCONCLUSIVE
    assert judge("port_conflict", _result(1), Verdict(None, None, "unreadable"))[0] == INCONCLUSIVE


def _never(paths):  # analyzer for tests where nothing may run
    raise AssertionError("nothing should have been run or analyzed")


# ------------------------------------------------------------------------------------------------ recorded runs


RECORDED_CASES = sorted(f"{p.parent.name}/{p.name}" for p in RECORDED.glob("*/*") if (p / "expect.json").exists())


@pytest.mark.parametrize("case", RECORDED_CASES)
def test_recorded_runs_are_still_recognized(case):
    """The logs our worker produced (fixtures/reproduce/{cpu,h200}/) still diagnose as recorded, without torch."""
    from nccl_analyzer.analysis import analyze

    folder = RECORDED / case
    expect = json.loads((folder / "expect.json").read_text())
    got = analyze([str(folder / "reproduce.log")]).root_cause
    got_id = got.id if got else None
    assert got_id == expect["diagnosis"], f"recorded as {expect['outcome']} with diagnosis {expect['diagnosis']}"
    if (folder / "fix.log").exists():
        assert analyze([str(folder / "fix.log")]).root_cause is None


H200_REPORTS = sorted(str(p.relative_to(RECORDED / "h200")) for p in (RECORDED / "h200").glob("*/report.json"))
H200_REPORTS += sorted(str(p.relative_to(RECORDED / "h200")) for p in (RECORDED / "h200").glob("cli*/*.json"))
H200_REPORTS += sorted(str(p.relative_to(RECORDED / "h200")) for p in (RECORDED / "h200").glob("recheck-*/*.json"))


@pytest.mark.parametrize("case", H200_REPORTS)
def test_recorded_h200_runs(case):
    """GPU runs recorded on an H200 (fixtures/reproduce/h200/; cli/ and recheck-*/ from the CLI itself): confirmed and fixed."""
    report = json.loads((RECORDED / "h200" / case).read_text())
    rep = report["reproduction"]
    assert rep["outcome"] == CONFIRMED and rep["got"] == report["root_cause"]["id"], rep["reason"]
    assert rep["fix_outcome"] == _fix_outcome_for(rep["got"]) and rep["backend"] == "nccl"


def _fix_outcome_for(root: str) -> str:
    """FIXED where the fix run applies a setting to the same mechanism; NOT APPLICABLE for a program's fault."""
    return NOT_APPLICABLE if SCENARIOS[root].program_fault else FIXED


# ------------------------------------------------------------------------------------------------ real runs


def _case(name: str) -> Diagnosis:
    from nccl_analyzer.analysis import analyze

    return analyze([str(H200 / name)])


GLOO_CASES = [
    ("03_port_in_use", "port_conflict"),
    ("02_bad_ifname", "socket_interface"),
    ("11_mismatch_gloo", "collective_mismatch"),
    ("05_rank_exception", "app_exception"),
    (None, "peer_exit"),
    (None, "rendezvous_unreachable"),
]


@pytest.mark.slow
@needs_torch
@pytest.mark.parametrize("case,expected", GLOO_CASES, ids=[c[1] for c in GLOO_CASES])
def test_gloo_reproduce_confirms_then_fix(case, expected, tmp_path):
    diag = _case(case) if case else make_diag(expected, backend="gloo")
    assert diag.root_cause.id == expected
    local = runmod.local_info()
    if local.gpus:
        local = LocalInfo(torch=True, gpus=0, interfaces=local.interfaces, default_interface=local.default_interface)
    # each run's limit: the scenarios end by themselves in seconds; the margin is for 2 shared, busy cores
    out = reproduce(diag, verify_fix=True, timeout=240, workdir=str(tmp_path), local=local)
    rep = out.reproduction
    assert rep.backend == "gloo"
    log = tmp_path / "reproduce.log"
    assert rep.outcome == CONFIRMED, f"{rep.reason}\n{log.read_text(errors='replace')[-600:] if log.exists() else ''}"
    assert rep.got == expected
    assert rep.fix_outcome == _fix_outcome_for(expected), rep.reason
    if rep.fix_outcome == NOT_APPLICABLE:
        # says what the reproduction showed, and that the control run says nothing about the user's fix
        assert "the fix is in your program" in rep.reason and SCENARIOS[expected].program_fault in rep.reason
        assert "The control run without that fault finished cleanly" in rep.reason, rep.reason
    assert rep.command.startswith("env ")


@pytest.mark.slow
@needs_torch
def test_timeout_kills_every_process_no_orphans(tmp_path):
    """A run stuck past the time limit is killed whole: launcher, torchrun and ranks (ranks run in own sessions)."""
    plan = Plan(scenario="watchdog_timeout", backend="gloo", nproc=2, culprit=1, pg_timeout=900.0, sleep_s=900.0)
    limit = 120  # long enough for the ranks to start (import torch, rendezvous) on 2 busy cores: checked below
    start = time.monotonic()
    result = runmod.run_plan(plan, workdir=str(tmp_path), label="hang", timeout=limit, base_env=None)
    assert result.timed_out and result.returncode is None
    assert time.monotonic() - start < limit + runmod.TERM_GRACE_S + 10
    log = Path(result.log_path).read_text(errors="replace")
    assert "rank 1 is late by 900 s" in log, log[-2000:]  # the ranks really were running when the limit hit
    assert runmod.marked(result.marker) == {}
    leftovers = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    assert "--sleep 900" not in leftovers


@pytest.mark.slow
@needs_torch
def test_pasted_dry_run_command_really_runs(tmp_path):
    """The stand-alone command from --dry-run, run as a person would (argv from shlex, no shell)."""
    plan = Plan(scenario="port_conflict", backend="gloo")
    argv = shlex.split(plan.command())
    argv[argv.index("python")] = sys.executable
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    env["PYTHONPATH"] = runmod.PACKAGE_ROOT
    out = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert "EADDRINUSE" in out.stdout + out.stderr


# ------------------------------------------------------------------------------------------------ CLI


def test_cli_reproduce_dry_run_json():
    from click.testing import CliRunner

    from nccl_analyzer.cli import main

    res = CliRunner().invoke(main, [str(H200 / "02_bad_ifname"), "--reproduce", "--dry-run", "--verify-fix",
                                    "--format", "json"])
    assert res.exit_code == 1, res.output
    rep = json.loads(res.stdout)["reproduction"]
    assert rep["outcome"] == INCONCLUSIVE and rep["reason"].startswith("dry run")
    assert rep["command"].startswith("env ") and "_SOCKET_IFNAME=eth9" in rep["command"]
    assert rep["fix_outcome"] is None and rep["fix_env"]


def test_cli_reproduce_without_torch_exits_4(monkeypatch):
    from click.testing import CliRunner

    from nccl_analyzer.cli import main

    monkeypatch.setattr(runmod, "torch_available", lambda: False)
    res = CliRunner().invoke(main, [str(H200 / "03_port_in_use"), "--reproduce"])
    assert res.exit_code == int(ExitCode.REPRODUCE_FAILED)
    assert "pip install 'nccl-analyzer[reproduce]'" in res.stderr and res.stdout == ""
