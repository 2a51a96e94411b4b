"""The failure classes behind session 12's dev12a misses of fixtures/blind12 and blind12h
(docs/classes-session12a.md), each written from the program's own message format in several phrasings, versions
and prefixes, plus the fixture itself, with healthy twins that must stay null."""
from __future__ import annotations

from pathlib import Path

import pytest

from nccl_analyzer.analysis import analyze, analyze_text

FIX = Path(__file__).resolve().parent.parent / "fixtures"


def _root(log: str):
    d = analyze_text(log)
    return d, (d.root_cause.id if d.root_cause else None)


def _fixture(name: str):
    d = analyze([str(FIX / name / "log.txt")])
    return d.root_cause.id if d.root_cause else None, (d.root_cause.rule if d.root_cause else None)


# -- several ranks on one GPU: NCCL's init.cc / graph/topo.cc texts of 2.3 .. 2.30.7 ------------------------------
_DUPLICATE_GPU = [
    # retyped: no space before the colon, alone on a line, with or without the final period
    "Duplicate GPU detected: rank 2 and rank 0 both on CUDA device 52000.\n",
    "Duplicate GPU detected:rank 1 and rank 0 both on CUDA device 1b000\n",
    "[rank1]: Duplicate GPU detected: rank 1 and rank 0 both on CUDA device 60\n",
    # NCCL 2.30.7 init.cc, with its prefix and bare; 2.30.3 / 2.30.4 graph/topo.cc
    "node1:2211:2211 [1] init.cc:1057 NCCL WARN Multiple Ranks are using the same GPU/Partition. "
    "Set NCCL_MULTI_RANK_GPU_ENABLE=1 to enable this configuration.\n",
    "Multiple Ranks are using the same GPU/Partition. Set NCCL_MULTI_RANK_GPU_ENABLE=1 to enable this configuration.\n",
    "node1:2211:2211 [1] graph/topo.cc:1500 NCCL WARN Multiple ranks detected using the same GPU on this node. "
    "Set NCCL_MULTI_RANK_GPU_ENABLE=1 to enable this configuration.\n",
    # torch's NCCL error text carrying NCCL 2.30.7's last error
    "[rank1]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93,"
    " invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.30.7\n"
    "[rank1]: ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n[rank1]: Last error:\n"
    "[rank1]: Multiple Ranks are using the same GPU/Partition. Set NCCL_MULTI_RANK_GPU_ENABLE=1 to enable this "
    "configuration.\n",
]

# -- RDMA devices present but none can be opened: NCCL falls back to sockets (net_ib.cc / net_ib/init.cc) -----------
_IB_FALLBACK = [
    # 2.7-era paths, the host:pid prefix stripped as pasted
    "misc/ibvwrap.cc:212 NCCL WARN Call to ibv_open_device failed\n"
    "transport/net_ib.cc:148 NCCL WARN NET/IB : Unable to open device mlx5_bond_0\n"
    "NCCL INFO NET/IB : No device found.\nNCCL INFO NET/Socket : Using [0]bond0:200.1.93.2<0>\n"
    "NCCL INFO Using network Socket\n",
    # 2.30 path, full prefix, two HCAs
    "gpu7:4410:4410 [0] transport/net_ib/init.cc:334 NCCL WARN NET/IB : Unable to open device mlx5_0\n"
    "gpu7:4410:4410 [0] transport/net_ib/init.cc:334 NCCL WARN NET/IB : Unable to open device mlx5_1\n"
    "gpu7:4410:4410 [0] NCCL INFO NET/IB : No device found.\n"
    "gpu7:4410:4410 [0] NCCL INFO NET/Socket : Using [0]eth0:10.1.0.7<0>\ngpu7:4410:4410 [0] NCCL INFO Using network Socket\n",
    # behind torchrun's [rank0]: head, only the ibvwrap WARN
    "[rank0]:gpu7:4410:4410 [0] misc/ibvwrap.cc:212 NCCL WARN Call to ibv_open_device failed\n"
    "[rank0]:gpu7:4410:4410 [0] NCCL INFO NET/IB : No device found.\n"
    "[rank0]:gpu7:4410:4410 [0] NCCL INFO Using network Socket\n",
]

# -- gloo dialling a peer's loopback alias (hostname -> 127.0.1.1): pair.cc's connect error, old and new forms --------
_GLOO_LOOPBACK = [
    # gloo < 2023 Pair::handleConnecting, bare (gloo's own tools) and as torch raises it
    "[/opt/gloo/gloo/transport/tcp/pair.cc:761] connect [127.0.1.1]:60817: Connection refused\n",
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:799] connect [127.0.1.1]:14221: Connection refused\n",
    "[rank3]: RuntimeError: [/opt/conda/gloo/transport/tcp/pair.cc:799] connect [127.0.1.1]:2044: Connection timed out\n",
    # the reporter's "<some path>" elision inside the location
    "[<some path>/gloo/gloo/transport/tcp/pair.cc:761] connect [127.0.1.1]:60817: Connection refused\n",
    # gloo >= 2023 connectCallback inside torch's connectFullMesh error, and its last retry's debug line
    "[rank8]: RuntimeError: Gloo connectFullMesh failed with [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:152]"
    " timed out connecting: SO_ERROR: Connection refused, remote=[127.0.1.1]:14215\n",
    "[/pytorch/third_party/gloo/gloo/transport/tcp/debug_logger.cc:9] ERROR failed to connect, willRetry=0, retry=3, "
    "retryLimit=3, rank=1, size=2, local=[127.0.1.1]:9363, remote=[127.0.1.1]:21399$1, error=SO_ERROR: Connection "
    "refused, remote=[127.0.1.1]:21399\n",
]

# -- the JAX / TF coordination service lost a task's heartbeats (coordination_service.cc CheckHeartbeatTimeout) -----
_JAX_HEARTBEAT = [
    # TF-era glog line of the coordinator (external/org_tensorflow/...)
    "2022-11-15 16:03:15.140058: E external/org_tensorflow/tensorflow/core/distributed_runtime/coordination/"
    "coordination_service.cc:954] /job:jax_worker/replica:0/task:37 has been set to ERROR in coordination service: "
    "UNAVAILABLE: Task /job:jax_worker/replica:0/task:37 heartbeat timeout. This indicates that the remote task has "
    "failed, got preempted, or crashed unexpectedly. [type.googleapis.com/tensorflow.CoordinationServiceError='']\n",
    # XLA-era absl log line, with the newer advice text
    "E1203 10:00:00.123456  4242 coordination_service.cc:584] /job:jax_worker/replica:0/task:1 has been set to ERROR "
    "in coordination service: UNAVAILABLE: Task /job:jax_worker/replica:0/task:1 heartbeat timeout. This indicates "
    "that the remote task has failed, got preempted, or crashed unexpectedly. Check the task logs for an earlier error "
    "or scheduler events (e.g. preemption, eviction) to debug further.\n",
    # what the other tasks are told, inside jax's exception and in the client's termination line
    "jaxlib.xla_extension.XlaRuntimeError: UNAVAILABLE: The following tasks are unhealthy (stopped sending "
    "heartbeats):\n/job:jax_worker/replica:0/task:3\nThe tasks have crashed. Check the task logs for an earlier error, "
    "or scheduler events (e.g. preemption, eviction) to debug further.\n",
    "F1203 10:00:01.000000  4242 client.h:77] Terminating process because the JAX distributed service detected fatal "
    "errors. This most likely indicates that another task died; see the other task logs for more details. Disable "
    "Python buffering, i.e. `python -u`, to be sure to see all the previous output. absl::Status: UNAVAILABLE: The "
    "following tasks are unhealthy (stopped sending heartbeats):\n",
    # a task that came back with a new incarnation
    "E1203 10:00:02.000000  4242 coordination_service.cc:700] /job:jax_worker/replica:0/task:2 Heartbeat: Incarnation "
    "ID mismatch: expecting 123 but got 456. The task has restarted and likely crashed earlier - check for any earlier "
    "errors or any scheduler events (e.g. preemption, eviction) to debug further.\n",
]

# -- ProcessGroupNCCL rejecting a tensor dtype it has no NCCL datatype for (getNcclDataType, float8 reductions) -----
_UNSUPPORTED_DTYPE = [
    "RuntimeError: Unsupported data type for NCCL process group\n",
    "RuntimeError: Input tensor data type is not supported for NCCL process group: BFloat16\n",
    "[rank1]: TypeError: Input tensor data type is not supported for NCCL process group: ComplexFloat\n",
    "Traceback (most recent call last):\n  File \"/srv/app/train.py\", line 20, in <module>\n    dist.all_reduce(x)\n"
    "  File \"/usr/lib/python3/site-packages/torch/distributed/c10d_logger.py\", line 81, in wrapper\n"
    "    return func(*args, **kwargs)\nRuntimeError: Float8 dtypes are not currenlty supported for NCCL reductions\n",
]

# (taxonomy id, rule, the logs of that class, a text the root cause's title must hold)
_CLASSES = [
    ("duplicate_gpu", "nccl-duplicate-gpu", _DUPLICATE_GPU, None),
    ("ib_rdma", "nccl-ib-unopenable-socket-fallback", _IB_FALLBACK, None),
    ("socket_interface", "gloo-loopback-peer-refused", _GLOO_LOOPBACK, "127.0.1.1"),
    ("peer_exit", "jax-task-heartbeat-timeout", _JAX_HEARTBEAT, None),
    ("invalid_usage", "torch-nccl-unsupported-dtype", _UNSUPPORTED_DTYPE, None),
]


@pytest.mark.parametrize("log, want, rule, title_has", [
    pytest.param(log, want, rule, title_has, id=f"{rule}-{i}")
    for want, rule, logs, title_has in _CLASSES for i, log in enumerate(logs)])
def test_class_is_its_rule(log, want, rule, title_has):
    d, root = _root(log)
    assert root == want
    assert d.root_cause.rule == rule
    if title_has is not None:
        assert title_has in d.root_cause.title


# near misses: at most another rule (or the fail-safe's low-confidence inference), never this one
@pytest.mark.parametrize("log, rule", [
    # a sentence quoting the message is no log line
    pytest.param('I saw "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 60" in the docs once\n',
                 "nccl-duplicate-gpu", id="nccl-duplicate-gpu-quoted-in-prose"),
    *(pytest.param(log, "gloo-loopback-peer-refused", id=f"gloo-loopback-peer-refused-other-{i}")
      for i, log in enumerate([
    # 127.0.0.1: what every one-host job advertises (a stale address after an elastic restart)
    "RuntimeError: Gloo connectFullMesh failed with [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:152] timed "
    "out connecting: SO_ERROR: Connection refused, remote=[127.0.0.1]:22947\n",
    # a connected pair on the loopback alias that a dying peer closed: one host
    "[rank0]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:547] Connection closed by peer "
    "[127.0.1.1]:52889\n",
    # a retry that gloo will make again
    "[/pytorch/third_party/gloo/gloo/transport/tcp/debug_logger.cc:9] ERROR failed to connect, willRetry=1, retry=1, "
    "retryLimit=3, rank=1, size=2, local=[127.0.1.1]:9363, remote=[127.0.1.1]:21399$1, error=SO_ERROR: Connection "
    "refused, remote=[127.0.1.1]:21399\n",
    # a routable address refused: a peer not listening
    "[/opt/gloo/gloo/transport/tcp/pair.cc:761] connect [10.0.0.2]:60817: Connection refused\n",
]))])
def test_near_miss_is_not_the_rule(log, rule):
    d, _ = _root(log)
    assert d.root_cause is None or d.root_cause.rule != rule


# healthy twins: no failure at all
@pytest.mark.parametrize("log", [
    pytest.param("vm:588:588 [0] NCCL INFO ncclCommInitRankConfig comm 0x2146f0b0 rank 0 nranks 2 cudaDev 0 "
                 "nvmlDev 0 busId 60 commId 0xbddc31eafcd92ae7 - Init START\n"
                 "vm:589:589 [1] NCCL INFO ncclCommInitRankConfig comm 0x35c9c130 rank 1 nranks 2 cudaDev 1 "
                 "nvmlDev 1 busId 70 commId 0xbddc31eafcd92ae7 - Init START\n"
                 "vm:589:589 [1] NCCL INFO Multiple ranks on the same GPU detected and allowed. Disabling NVLS.\n",
                 id="nccl-duplicate-gpu-distinct-gpus-init"),
    pytest.param("pod:80744:80744 [1] misc/ibvwrap.cc:212 NCCL WARN Call to ibv_open_device failed\n"
                 "pod:80744:80744 [1] transport/net_ib.cc:149 NCCL WARN NET/IB : Unable to open device mlx5_58\n"
                 "pod:80744:80744 [1] NCCL INFO NET/IB : Using [0]mlx5_1:1/RoCE [1]mlx5_18:1/RoCE ; OOB "
                 "eth0:33.117.221.247<0>\npod:80744:80744 [1] NCCL INFO Using network IB\n",
                 id="nccl-ib-unopenable-socket-fallback-one-hca-skipped-others-used"),
    pytest.param("vm:588:588 [0] NCCL INFO NET/IB : No device found.\n"
                 "vm:588:588 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>\n"
                 "vm:588:588 [0] NCCL INFO Using network Socket\n",
                 id="nccl-ib-unopenable-socket-fallback-no-rdma-hardware"),
    pytest.param("My /etc/hosts maps the host name to 127.0.1.1, is that a problem for gloo?\n",
                 id="gloo-loopback-peer-refused-in-prose"),
    pytest.param("I1203 10:00:00.000000  1234 coordination_service_agent.cc:612] Coordination agent has "
                 "initiated Shutdown().\nI1203 10:00:00.100000  1234 coordination_service_agent.cc:633] "
                 "Coordination agent has successfully shut down.\n", id="jax-task-heartbeat-timeout-clean-shutdown"),
    pytest.param("Note: bool tensors were not supported for NCCL process groups before 1.7, cast them first.\n",
                 id="torch-nccl-unsupported-dtype-in-prose"),
])
def test_healthy_twin_is_no_failure(log):
    _, root = _root(log)
    assert root is None


# another cause in the same input outranks the class
@pytest.mark.parametrize("log, want", [
    pytest.param(_IB_FALLBACK[1] + "Traceback (most recent call last):\n  File \"train.py\", line 11, in <module>\n"
                 "    batch = load()\nKeyError: 'input_ids'\n", "app_exception",
                 id="nccl-ib-unopenable-socket-fallback-then-app-exception"),
    # the dead task's own log in the input: its reason outranks the coordinator's notice
    pytest.param("E1203 10:00:00.123456  4242 coordination_service.cc:584] /job:jax_worker/replica:0/task:1 has "
                 "been set to ERROR in coordination service: UNAVAILABLE: Task /job:jax_worker/replica:0/task:1 "
                 "heartbeat timeout. This indicates that the remote task has failed, got preempted, or crashed "
                 "unexpectedly.\n[12345.678] Out of memory: Killed process 4243 (python3) total-vm:812345678kB, "
                 "anon-rss:512345678kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:1234kB oom_score_adj:0\n",
                 "host_oom", id="jax-task-heartbeat-timeout-then-task-oom"),
])
def test_other_cause_outranks_the_class(log, want):
    _, root = _root(log)
    assert root == want


@pytest.mark.parametrize("rel, want, rule", [
    ("blind12/seesr66_multi_gpu_repro_all_processes_same_gpu_duplicate_52000", "duplicate_gpu", "nccl-duplicate-gpu"),
    ("blind12/nccl451_docker_deepspeed_ibv_open_device_failed_fallback_socket_slow", "ib_rdma",
     "nccl-ib-unopenable-socket-fallback"),
    ("blind12h/gloo223_benchmark_two_nodes_connect_127_0_1_1_refused_loopback", "socket_interface",
     "gloo-loopback-peer-refused"),
    ("blind12/archobjective26_t5x_large_model_task37_heartbeat_timeout_coordination_service", "peer_exit",
     "jax-task-heartbeat-timeout"),
    ("blind12h/pytorch24137_nccl_broadcast_bool_tensor_unsupported_data_type", "invalid_usage",
     "torch-nccl-unsupported-dtype"),
], ids=lambda v: v.split("/")[-1] if "/" in v else None)
def test_fixture_is_its_class(rel, want, rule):
    assert _fixture(rel) == (want, rule)


def test_gloo_location_with_many_angle_groups_is_fast():
    # the "<some path>" elision in the gloo location pattern must not backtrack exponentially on "[<a><a>...]"
    import time
    t = time.monotonic()
    _, root = _root("[" + "<a>" * 40 + "] not a gloo line\n")
    assert time.monotonic() - t < 5.0
    assert root is None
