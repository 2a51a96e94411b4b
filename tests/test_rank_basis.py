"""A culprit rank that no line of the input states is reported with what it rests on (job.rank_basis, the
``where:`` line): a torchrun local rank taken as the global rank on a one-node input, a spawn child's index."""
from __future__ import annotations

import json

from nccl_analyzer.analysis import analyze_text
from nccl_analyzer.engine.loader import load_rules
from nccl_analyzer.render import render
from nccl_analyzer.render import view

RULES = load_rules()
AGENT = 48812
CONSOLE = (
    f"W0517 09:12:40.101000 {AGENT} torch/distributed/elastic/multiprocessing/api.py:897] Sending process 48830 "
    "closing signal SIGTERM\n"
    f"E0517 09:12:41.377000 {AGENT} torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) "
    "local_rank: 1 (pid: 48831) of binary: /opt/venv/bin/python3\n"
)
SPAWN = (
    "Traceback (most recent call last):\n"
    '  File "/work/train.py", line 40, in <module>\n'
    "    mp.spawn(worker, args=(4,), nprocs=4)\n"
    '  File "/opt/venv/lib/python3.11/site-packages/torch/multiprocessing/spawn.py", line 215, in start_processes\n'
    "    while not context.join():\n"
    '  File "/opt/venv/lib/python3.11/site-packages/torch/multiprocessing/spawn.py", line 168, in join\n'
    "    raise ProcessRaisedException(msg, error_index, failed_process.pid)\n"
    "torch.multiprocessing.spawn.ProcessRaisedException: \n"
    "\n"
    "-- Process 3 terminated with the following error:\n"
    "Traceback (most recent call last):\n"
    '  File "/opt/venv/lib/python3.11/site-packages/torch/multiprocessing/spawn.py", line 90, in _wrap\n'
    "    fn(i, *args)\n"
    '  File "/work/train.py", line 21, in worker\n'
    "    shard = shards[rank]\n"
    "KeyError: 3\n"
)


def _json(d):
    return json.loads(render(d, "json"))


def test_a_local_rank_taken_as_the_global_rank_is_said_so():
    d = analyze_text(CONSOLE, rules=RULES)
    assert d.root_cause is not None and d.root_cause.ranks == (1,), d.root_cause.title
    assert _json(d)["job"]["rank_basis"] == {"1": "local_rank"}
    assert "taken from its local rank" in view.where(d)


def test_a_rank_a_line_states_has_no_basis_note():
    stated = "[rank1]:[W517 09:12:39.000000000 ProcessGroupNCCL.cpp:1496] Warning: rank 1 loading shard\n" + CONSOLE
    d = analyze_text(stated, rules=RULES)
    assert d.root_cause is not None and d.root_cause.ranks == (1,), d.root_cause.title
    assert "rank_basis" not in _json(d)["job"]
    assert "local rank" not in view.where(d)


def test_a_spawn_child_index_taken_as_its_rank_is_said_so():
    d = analyze_text(SPAWN, rules=RULES)
    assert d.root_cause is not None and d.root_cause.ranks == (3,), d.root_cause.title
    assert _json(d)["job"]["rank_basis"] == {"3": "spawn"}
    assert "spawn process index" in view.where(d)
