"""Session 15 (hang15, docs/classes-session15-hang.md): a single-node job whose NCCL init stops past the bootstrap
(topology detection / channel setup) with no error and no output after it is answered p2p_ipc at low confidence
(rule hang-init-one-node-log-ends); the near misses that must not move: the same lines followed by training
progress, the bootstrap lines alone (as often a healthy run's first lines pasted), two hosts, one GPU, and a job
whose init went on to the P2P connections and completed."""
from __future__ import annotations

from nccl_analyzer.analysis import analyze_text


def _diag(log: str):
    d = analyze_text(log)
    return d, (d.root_cause.id if d.root_cause else None)


def _boot(host: str, pid: int, dev: int, version: bool = False) -> str:
    out = f"{host}:{pid}:{pid} [{dev}] NCCL INFO Bootstrap : Using eth0:10.1.2.3<0>\n"
    out += f"{host}:{pid}:{pid} [{dev}] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation\n"
    if version:
        out += "NCCL version 2.19.3+cuda12.3\n"
    return out


def _affinity(host: str, pid: int, dev: int) -> str:
    return f"{host}:{pid}:{pid} [{dev}] NCCL INFO Setting affinity for GPU {dev} to ffff,ffffffff\n"


def _init(host: str, pid: int, dev: int, rank: int, n: int, what: str = "START") -> str:
    return (f"{host}:{pid}:{pid} [{dev}] NCCL INFO comm 0x5a{rank}0 rank {rank} nranks {n} cudaDev {dev} nvmlDev {dev} "
            f"busId {dev + 1}a000 commId 0x3c9e11aa02b7f00d - Init {what}\n")


def _two_procs_topology(host: str = "dgx-a") -> str:
    return (_boot(host, 7001, 0, version=True) + _boot(host, 7002, 1)
            + _affinity(host, 7001, 0) + _affinity(host, 7002, 1))


def test_one_node_init_stops_at_topology_is_p2p_with_low_confidence() -> None:
    d, got = _diag(_two_procs_topology())
    assert got == "p2p_ipc"
    rc = d.root_cause
    assert rc.confidence <= 0.5
    assert "absence of progress" in rc.explanation
    assert rc.fix.env.get("NCCL_P2P_DISABLE") == "1"


def test_one_process_four_gpus_nccltests_style_stops_in_init() -> None:
    host, pid = "ws4", 5120
    log = ("# nThread 1 nGpus 4 minBytes 8 maxBytes 268435456 step: 2(factor) warmup iters: 5 iters: 20 validation: 1\n"
           "#\n# Using devices\n"
           + "".join(f"#   Rank  {g} Pid  {pid} on {host} device  {g} [0x0{g + 2}] GeForce RTX 3090\n" for g in range(4))
           + _boot(host, pid, 0, version=True)
           + f"{host}:{pid}:{pid} [3] NCCL INFO nranks 4\n"
           + "".join(_affinity(host, pid, g) for g in range(3)))
    _, got = _diag(log)
    assert got == "p2p_ipc"


def test_one_node_channels_computed_then_nothing() -> None:
    host = "node3"
    log = (_init(host, 811, 0, 0, 2) + _init(host, 812, 1, 1, 2)
           + f"{host}:811:811 [0] NCCL INFO Channel 00/02 : 0 1\n"
           + f"{host}:811:811 [0] NCCL INFO Channel 01/02 : 0 1\n"
           + f"{host}:812:812 [1] NCCL INFO Trees [0] -1/-1/-1->1->0 [1] -1/-1/-1->1->0\n")
    _, got = _diag(log)
    assert got == "p2p_ipc"


def test_same_lines_then_training_progress_is_no_failure() -> None:
    log = _two_procs_topology() + "".join(f"epoch 0 step {s} loss {2.5 - s / 100:.4f}\n" for s in (10, 20, 30))
    _, got = _diag(log)
    assert got is None


def test_healthy_run_with_p2p_lines_then_progress_is_no_failure() -> None:
    host = "node3"
    log = (_init(host, 811, 0, 0, 2) + _init(host, 812, 1, 1, 2)
           + f"{host}:811:860 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"
           + f"{host}:812:861 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/IPC\n"
           + f"{host}:811:860 [0] NCCL INFO Connected all rings\n"
           + f"{host}:812:861 [1] NCCL INFO Connected all rings\n"
           + _init(host, 811, 0, 0, 2, "COMPLETE") + _init(host, 812, 1, 1, 2, "COMPLETE")
           + "".join(f"epoch 0 step {s} loss {2.5 - s / 100:.4f}\n" for s in (10, 20, 30)))
    _, got = _diag(log)
    assert got is None


def test_bootstrap_lines_alone_stay_no_failure() -> None:
    # the version banner and bootstrap interface of two local ranks, then nothing: a pasted head of a healthy run
    # looks the same (nccl#352, nccl#766), so no verdict
    _, got = _diag(_boot("dgx-a", 7001, 0, version=True) + _boot("dgx-a", 7002, 1))
    assert got is None


def test_two_hosts_is_not_this_class() -> None:
    log = (_boot("dgx-a", 7001, 0, version=True) + _boot("dgx-b", 9002, 0)
           + _affinity("dgx-a", 7001, 0) + _affinity("dgx-b", 9002, 0))
    d, got = _diag(log)
    assert not any(f.rule == "hang-init-one-node-log-ends" for f in d.findings)


def test_one_gpu_is_not_this_class() -> None:
    log = _boot("dgx-a", 7001, 0, version=True) + _affinity("dgx-a", 7001, 0)
    d, got = _diag(log)
    assert got is None


# -- vLLM's pynccl banner, then NCCL's bootstrap on one node, then nothing ----------------------------------------
def _vllm_banner(pid: int | None = None) -> str:
    pre = f"(VllmWorkerProcess pid={pid}) " if pid else ""
    return f"{pre}INFO 02-14 08:31:07 pynccl.py:69] vLLM is using nccl==2.21.5\n"


def test_vllm_banner_then_bootstrap_on_one_node_is_p2p() -> None:
    log = (_vllm_banner() + _vllm_banner(7002)
           + _boot("srv9", 7001, 0, version=True) + _boot("srv9", 7002, 1))
    d, got = _diag(log)
    assert got == "p2p_ipc"
    assert d.root_cause.confidence <= 0.5
    assert "absence of progress" in d.root_cause.explanation


def test_vllm_banner_event() -> None:
    from nccl_analyzer.classify import EventStream
    from nccl_analyzer.model import Line

    es = EventStream()
    raw = _vllm_banner(7002).rstrip("\n")
    evs = es.feed(Line("x.log", 1, raw, raw))
    assert [e.kind for e in evs] == ["serving.pynccl"]
    assert evs[0].get("nccl_version") == "2.21.5" and evs[0].get("worker_pid") == 7002


def test_vllm_banner_then_model_loading_is_no_failure() -> None:
    log = (_vllm_banner() + _boot("srv9", 7001, 0, version=True) + _boot("srv9", 7002, 1)
           + "INFO 02-14 08:31:12 model_runner.py:1056] Starting to load model Qwen/Qwen2-7B-Instruct...\n"
           + "INFO 02-14 08:31:40 model_runner.py:1067] Loading model weights took 14.2487 GB\n")
    _, got = _diag(log)
    assert got is None


def test_vllm_banner_then_nccl_on_two_hosts_is_not_this_class() -> None:
    log = _vllm_banner() + _boot("srv9", 7001, 0, version=True) + _boot("srv10", 8001, 0)
    d, _ = _diag(log)
    assert not any(f.rule == "hang-vllm-pynccl-init-log-ends" for f in d.findings)


def test_one_nodes_log_of_a_two_node_job_is_not_this_class() -> None:
    # NCCL 2.20+ "nNodes 2": the communicator spans two nodes, this log only shows one of them
    host = "node3"
    log = (_init(host, 811, 0, 0, 4) + _init(host, 812, 1, 1, 4)
           + f"{host}:811:811 [0] NCCL INFO comm 0x5a00 rank 0 nRanks 4 nNodes 2 localRanks 2 localRank 0 MNNVL 0\n"
           + f"{host}:812:812 [1] NCCL INFO comm 0x5a10 rank 1 nRanks 4 nNodes 2 localRanks 2 localRank 1 MNNVL 0\n"
           + f"{host}:811:811 [0] NCCL INFO Channel 00/02 : 0 1 2 3\n"
           + f"{host}:812:812 [1] NCCL INFO Trees [0] 2/-1/-1->1->0 [1] 2/-1/-1->1->0\n")
    d, _ = _diag(log)
    assert not any(f.rule == "hang-init-one-node-log-ends" for f in d.findings)
