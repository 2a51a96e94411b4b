"""Session 17 (dev17d, docs/classes-session17-dev17d.md): culprit ranks where the cause was right and the rank
missing or wrong. A report's gutter bar before torch's ``[rankN]:`` prefix; gloo's rendezvous key naming the rank
whose interface lookup failed; no odd one out next to a rooted collective. Logs built here, not fixture copies."""
from __future__ import annotations

from nccl_analyzer.analysis import analyze_text

_VENV = "/srv/venv/lib/python3.11/site-packages"


def _root(log: str) -> tuple[str | None, str | None, list[int]]:
    rc = analyze_text(log).root_cause
    return (rc.id, rc.rule, sorted(rc.ranks)) if rc else (None, None, [])


# ------------------------------------------------------------------ 1. a gutter bar before "[rankN]:"

_APP_TB = ["Traceback (most recent call last):",
           '  File "/srv/job/train.py", line 88, in <module>',
           "    main()",
           '  File "/srv/job/train.py", line 61, in main',
           "    batch = next(it)",
           "FileNotFoundError: [Errno 2] No such file or directory: '/data/img/0001.jpg'"]


def test_gutter_bar_before_the_rank_prefix_keeps_the_rank():
    # a benchmark summary sets each captured stderr line under an indented "| " bar
    barred = "".join(f"        | [rank1]: {s}\n" for s in _APP_TB)
    assert _root(barred)[0] == "app_exception"
    assert _root(barred)[2] == [1]
    # near miss: the same bar before lines that carry no rank prefix names no rank (nothing to read)
    bare = "".join(f"        | {s}\n" for s in _APP_TB)
    assert _root(bare)[2] != [1]
    # near miss: the plain prefix (no bar) reads as before
    plain = "".join(f"[rank1]: {s}\n" for s in _APP_TB)
    assert _root(plain)[2] == [1]


# ------------------------------------------------------------------ 2. gloo's rendezvous key names the rank

_IFACE = [
    "Traceback (most recent call last):",
    '  File "/srv/job/train.py", line 48, in init',
    '    dist.init_process_group("gloo", timeout=PG_TIMEOUT)',
    f'  File "{_VENV}/torch/distributed/distributed_c10d.py", line 2169, in _new_process_group_helper',
    "    backend_class = ProcessGroupGloo(",
    "RuntimeError: [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/device.cc:84] "
    "ifa != nullptr. Unable to find address for: ib0",
]


def _waiter(keys: str) -> list[str]:
    return ["Traceback (most recent call last):",
            '  File "/srv/job/train.py", line 48, in init',
            '    dist.init_process_group("gloo", timeout=PG_TIMEOUT)',
            f'  File "{_VENV}/torch/distributed/distributed_c10d.py", line 2169, in _new_process_group_helper',
            "    backend_class = ProcessGroupGloo(",
            f"torch.distributed.DistStoreError: wait timeout after 10000ms, keys: {keys}"]


def test_gloo_iface_failure_named_by_the_awaited_rendezvous_key():
    log = "\n".join(_IFACE + _waiter("/default_pg/0//cpu//0/1")) + "\n"
    assert _root(log) == ("socket_interface", "gloo-iface-not-found-awaited-rank", [1])
    log2 = "\n".join(_IFACE + _waiter("/default_pg/0//cpu//0/2")) + "\n"
    assert _root(log2)[2] == [2]
    # near miss: the interface error alone names no rank
    assert _root("\n".join(_IFACE) + "\n") == ("socket_interface", "gloo-iface-not-found", [])
    # near miss: the peer waited for the program's own key, not a gloo address: no rank from it
    own = "\n".join(_IFACE + _waiter("/default_pg/0//index_ready")) + "\n"
    assert _root(own)[0] == "socket_interface" and _root(own)[2] == []


# ------------------------------------------------------------------ 3. rooted collectives: no odd one out

def _tb(rank: int, call: str, func: str, msg: str) -> str:
    lines = ["Traceback (most recent call last):",
             '  File "/srv/job/train.py", line 149, in main',
             f"    dist.{call}",
             f'  File "{_VENV}/torch/distributed/c10d_logger.py", line 83, in wrapper',
             "    return func(*args, **kwargs)",
             f'  File "{_VENV}/torch/distributed/distributed_c10d.py", line 3151, in {func}',
             "    work.wait()",
             f"RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] {msg}"]
    return "".join(f"[rank{rank}]: {s}\n" for s in lines)


_RECV = "Timed out waiting 8000ms for recv operation to complete"
_SEND = "Timed out waiting 8000ms for send operation to complete"


def test_rank_past_a_broadcast_is_not_the_odd_one_out():
    # ranks 0 and 2 wait in broadcast, rank 0 still SENDING in it (the root is there), rank 1 got its data and waits
    # in the barrier after it: the log does not show which rank's call differs (here the root argument of rank 2):
    # every rank stays named, not rank 1
    log = (_tb(0, "broadcast(best, src=src)", "broadcast", _SEND) + _tb(2, "broadcast(best, src=src)", "broadcast", _RECV)
           + _tb(1, "barrier()", "barrier", _RECV))
    assert _root(log) == ("collective_mismatch", "torch-ranks-different-collectives", [0, 1, 2])
    # near miss: the majority only waits to receive in the broadcast (its root is not among them): the rank
    # elsewhere is the root that called something else, and stays the odd one out
    log2 = "".join(_tb(r, "broadcast(t, 0)", "broadcast", _RECV) for r in (1, 2, 3)) \
        + _tb(0, "all_reduce(t)", "all_reduce", _RECV)
    assert _root(log2) == ("collective_mismatch", "torch-ranks-different-collectives", [0])
    # near miss: the majority in an all_reduce (every rank's data is needed): the rank elsewhere is the odd one
    log3 = (_tb(0, "all_reduce(t)", "all_reduce", _RECV) + _tb(2, "all_reduce(t)", "all_reduce", _RECV)
            + _tb(1, "barrier()", "barrier", _RECV))
    assert _root(log3) == ("collective_mismatch", "torch-ranks-different-collectives", [1])
