"""Serving engines' own start-up lines that say where NCCL comes in -> ``serving.*`` events (stateless).

vLLM's ``PyNcclCommunicator.__init__`` (vllm/distributed/device_communicators/pynccl.py) logs
``vLLM is using nccl==<version>`` and then, with no other line in between, exchanges the unique id over its CPU
group, calls ``ncclCommInitRank`` and runs a one-element warm-up ``all_reduce`` it waits for
(``stream.synchronize()``). Formats (vLLM's logger; a worker's lines carry its ``(VllmWorkerProcess pid=N)``)::

    INFO 11-11 14:17:08 pynccl.py:69] vLLM is using nccl==2.21.5
    (VllmWorkerProcess pid=18565) INFO 11-11 14:17:08 pynccl.py:69] vLLM is using nccl==2.21.5
    INFO [pynccl.py:113] vLLM is using nccl==2.28.9
    (EngineCore_DP0 pid=812) INFO 05-02 10:01:12 [pynccl.py:70] vLLM is using nccl==2.26.2

What a log that stops after it means is a rule's business (rules/hang/hang-vllm-pynccl-init-log-ends.toml).
"""
from __future__ import annotations

import re

from ..model import Event, Line

_PYNCCL = re.compile(r"(?:\((?P<proc>\w+) pid=(?P<pid>\d+)\)\s+)?.*?\bvLLM is using nccl==(?P<version>\d+(?:\.\d+)+)")


class ServingParser:
    """``feed(line)`` -> ``[Event]`` for a serving engine's NCCL banner, else None."""

    __slots__ = ()

    def feed(self, line: Line) -> list[Event] | None:
        t = line.text
        if "vLLM is using nccl==" not in t:
            return None
        m = _PYNCCL.match(t)
        if m is None:
            return None
        fields = {"engine": "vllm", "nccl_version": m["version"]}
        if m["pid"]:
            fields["worker_pid"] = int(m["pid"])
        return [Event("serving.pynccl", line.path, line.lineno, line.raw, rank=line.rank, time=line.time,
                      fields=fields)]
