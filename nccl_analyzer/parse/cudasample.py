"""CUDA's p2pBandwidthLatencyTest sample (NVIDIA/cuda-samples, Samples/5_Domain_Specific/p2pBandwidthLatencyTest)
-> ``cudasample.p2p.*`` events: its banner, the device list, the peer-access lines, each matrix's title and each
matrix row. What a run that stops in a measurement, or numbers that say P2P is broken, mean is a rule's business
(rules/hang/hang-p2ptest-stops-in-measurement.toml, rules/hang/hang-p2ptest-bandwidth-collapse.toml).

Formats (the sample's printf; no prefix of its own)::

    [P2P (Peer-to-Peer) GPU Bandwidth Latency Test]
    Device: 0, NVIDIA RTX A6000, pciBusID: 3, pciDeviceID: 0, pciDomainID:0
    Device=0 CAN Access Peer Device=1                        (CANNOT where cudaDeviceCanAccessPeer says no)
    Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)      (a title: printed in main() before the measurement)
    Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)    (older samples: no "(P2P Writes)")
    Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)
    P2P=Disabled Latency Matrix (us)
       D\\D     0      1      2                              (printed once the whole matrix is measured)
         0 673.20  13.15  13.15                              (a row: the source GPU, then one value per peer)

outputBandwidthMatrix / outputLatencyMatrix measure every pair first and print the ``D\\D`` header and the rows
only then, so a title with no row after it is a measurement that has not finished.
"""
from __future__ import annotations

import re

from ..model import Event, Line

_BANNER = "[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]"
_DEVICE = re.compile(r"Device: (?P<dev>\d+), (?P<gpu>.+?), pciBusID: (?P<bus>[0-9a-fA-F]+), pciDeviceID: (?P<pdev>[0-9a-fA-F]+)")
_ACCESS = re.compile(r"Device=(?P<dev>\d+) (?P<can>CAN|CANNOT) Access Peer Device=(?P<peer>\d+)\s*$")
_TITLE = re.compile(r"(?P<dir>Unidirectional |Bidirectional )?P2P=(?P<p2p>Enabled|Disabled) (?P<what>Bandwidth|Latency)"
                    r"(?: \(P2P (?:Writes|Reads)\))? Matrix \((?P<unit>GB/s|us)\)\s*$")
_ROW = re.compile(r"\s*(?P<src>\d+)(?P<vals>(?:\s+-?\d+\.\d+)+)\s*$")


class CudaSampleParser:
    """``feed(line)`` -> ``[Event]`` for a line of p2pBandwidthLatencyTest's output, else None. Keeps the matrix
    whose title came last, so a row says which matrix it belongs to (one parser per input stream)."""

    __slots__ = ("_matrix", "_seen")

    def __init__(self) -> None:
        self._matrix: str | None = None
        self._seen = False

    def feed(self, line: Line) -> list[Event] | None:
        t = line.text
        if t.startswith(_BANNER):
            self._seen, self._matrix = True, None
            return [self._event("cudasample.p2p.start", line, {})]
        if not self._seen:
            return None
        s = t.strip()
        if s.startswith("Device"):
            m = _ACCESS.match(s)
            if m:
                return [self._event("cudasample.p2p.access", line, {"device": int(m["dev"]), "peer": int(m["peer"]),
                                                                    "can": m["can"] == "CAN"})]
            m = _DEVICE.match(s)
            if m:
                return [self._event("cudasample.p2p.device", line, {"device": int(m["dev"]), "gpu": m["gpu"],
                                                                    "bus": m["bus"]})]
            return None
        m = _TITLE.match(s)
        if m:
            self._matrix = "{}{}-{}".format((m["dir"] or "").strip().lower() + "-" if m["dir"] else "",
                                            m["what"].lower(), "p2p" if m["p2p"] == "Enabled" else "nop2p")
            return [self._event("cudasample.p2p.title", line, {"matrix": self._matrix, "unit": m["unit"]})]
        if self._matrix is not None:
            m = _ROW.match(t)
            if m:
                vals = [float(v) for v in m["vals"].split()]
                return [self._event("cudasample.p2p.row", line, {"matrix": self._matrix, "device": int(m["src"]),
                                                                 "values": vals})]
        return None

    @staticmethod
    def _event(kind: str, line: Line, fields: dict) -> Event:
        return Event(kind, line.path, line.lineno, line.raw, rank=line.rank, time=line.time, fields=fields)
