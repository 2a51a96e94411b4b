"""nccl-tests' own output (src/common.cu of NVIDIA/nccl-tests) -> ``nccltests.*`` events: which rank is which process
and GPU, the result table's header, its rows and the closing summary. What a run that stops between them means is
a rule's business (rules/hang/hang-nccltests-no-result.toml); this parser only says what each line is.

Formats, newest first (the line as ``PRINT`` writes it; the tests print no prefix of their own):
    #  Rank  0 Group  0 Pid  15833 on  gpu-node1 device  0 [0000:1a:00] NVIDIA H100 80GB HBM3    (2.11+)
    #   Rank  0 Pid  15833 on jupyter-vm device  0 [0x02] GeForce GTX 1080 Ti                      (2.0 - 2.10)
       Rank  0 uses device  0 [0x05] Tesla M40 24GB                                                 (NCCL 1.x tests)
    #       size         count      type   redop    root     time   algbw   busbw #wrong ...       (header)
         bytes             N    type      op     time  algbw  busbw      res ...                    (NCCL 1.x header)
             8             2     float     sum      -1    18.52    0.00    0.00      0 ...          (a result row)
    # Avg bus bandwidth    : 10.52                                                                 (the summary)
"""
from __future__ import annotations

import re

from ..model import Event, Line

_RANK = re.compile(r"#?\s*Rank\s+(?P<rank>\d+)\s+(?:Group\s+\d+\s+)?Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)\s+device\s+"
                   r"(?P<dev>\d+)\s+\[(?P<bus>[0-9a-fA-Fx:.]+)\]\s*(?P<gpu>.*)$")
_RANK_V1 = re.compile(r"#?\s*Rank\s+(?P<rank>\d+)\s+uses device\s+(?P<dev>\d+)\s+\[(?P<bus>[0-9a-fA-Fx:.]+)\]\s*(?P<gpu>.*)$")
_HEADER = re.compile(r"#?\s*(?:size|bytes)\s+(?:count|N)\s+type\s+(?:redop|op)\b")
_ROW = re.compile(r"\s*(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<type>[a-z]\w*)\s+(?P<op>\S+)\s+(?:-?\d+\s+)?"
                  r"(?P<time>[\d.]+)\s+(?P<algbw>[\d.]+)\s+(?P<busbw>[\d.]+)\b")
_ROW_ENDS = frozenset("0123456789A")  # a row ends with its #wrong count, or N/A (no validation)
_SUMMARY = re.compile(r"#\s*Avg bus bandwidth\s*:\s*(?P<busbw>\S+)")


class NcclTestsParser:
    """``feed(line)`` -> ``[Event]`` for a line of nccl-tests' own output, else None (stateless)."""

    __slots__ = ()

    def feed(self, line: Line) -> list[Event] | None:
        t = line.text
        c = t[:1]
        if c == "#":
            pass
        elif c == " " or c.isdigit():
            if "Rank" not in t and t.rstrip()[-1:] not in _ROW_ENDS and "bytes" not in t:
                return None
        else:
            return None
        m = _ROW.match(t)
        if m:
            return [self._event("nccltests.result", line, {"size": int(m["size"]), "count": int(m["count"]),
                                                             "type": m["type"], "op": m["op"]})]
        if "Rank" in t:
            m = _RANK.match(t)
            if m:
                return [self._event("nccltests.rank", line, {"rank": int(m["rank"]), "device": int(m["dev"]),
                                                           "bus": m["bus"], "gpu": m["gpu"].strip()},
                                    host=m["host"], pid=int(m["pid"]), dev=int(m["dev"]))]
            m = _RANK_V1.match(t)
            if m:
                return [self._event("nccltests.rank", line, {"rank": int(m["rank"]), "device": int(m["dev"]),
                                                           "bus": m["bus"], "gpu": m["gpu"].strip()},
                                    dev=int(m["dev"]))]
            return None
        if _HEADER.match(t):
            return [self._event("nccltests.header", line, {})]
        m = _SUMMARY.match(t)
        if m:
            return [self._event("nccltests.summary", line, {"busbw": m["busbw"]})]
        return None

    @staticmethod
    def _event(kind: str, line: Line, fields: dict, host: str | None = None, pid: int | None = None,
               dev: int | None = None) -> Event:
        rank = fields.get("rank", line.rank)  # the device list says whose GPU it is
        return Event(kind, line.path, line.lineno, line.raw, host=host, pid=pid, rank=rank, cuda_dev=dev,
                     time=line.time, fields=fields)
