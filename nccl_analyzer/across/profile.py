"""One run's comparable facts (versions, settings, network, topology, progress) gathered beside its diagnosis.

The job model answers "what happened"; a profile keeps the few extra facts two runs are compared on (which
transport each connection used, channel counts, plugins), bounded in size whatever the job's length.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..analysis import Analyzer
from ..model import Diagnosis, Event
from ..sources import as_specs, expand_inputs

#: Distinct values kept per profile key (a 10,000-rank job must not make a 10,000-entry set).
_CAP = 64


@dataclass
class Profile:
    """What two runs are compared on; every value is a plain str/int/list so it renders and serialises."""

    facts: dict[str, Any] = field(default_factory=dict)
    transports: Counter = field(default_factory=Counter)
    plugins: dict[str, set[str]] = field(default_factory=dict)
    sets: dict[str, set[str]] = field(default_factory=dict)
    max_op_count: int | None = None

    def add_value(self, key: str, value: Any) -> None:
        s = self.sets.setdefault(key, set())
        if len(s) < _CAP:
            s.add(str(value))

    def add(self, ev: Event) -> None:
        """Fold one event in (only the kinds a comparison reads)."""
        k = ev.kind
        if k == "nccl.transport":
            tt = ev.fields.get("transport")
            if tt:
                # NET/IB/0/GDRDMA -> NET/IB/GDRDMA: the device index differs between ranks, not between runs.
                parts = [p for p in str(tt).split("/") if not p.isdigit()]
                self.transports["/".join(parts)] += 1
        elif k in ("nccl.net.plugin", "nccl.plugin"):
            status = str(ev.fields.get("status") or "info")
            name = ev.fields.get("plugin") or ev.fields.get("detail") or "?"
            label = f"{ev.fields.get('plugin_type') or 'NET'}:{status}"
            s = self.plugins.setdefault(label, set())
            if len(s) < _CAP:
                s.add(str(name))
        elif k == "nccl.net.using":
            self.add_value("network used", ev.fields.get("network"))
        elif k == "nccl.net.ib":
            if ev.fields.get("no_device"):
                self.add_value("IB devices", "none found")
            for d in ev.fields.get("devices") or ():
                self.add_value("IB devices", f"{d.get('name')}:{d.get('port')}/{d.get('link')}")
        elif k in ("nccl.net.socket", "nccl.bootstrap.interface"):
            what = "socket interfaces" if k == "nccl.net.socket" else "bootstrap interfaces"
            for i in ev.fields.get("interfaces") or ():
                self.add_value(what, i.get("name"))
        elif k == "nccl.channels.count":
            for name in ("coll_channels", "collnet_channels", "nvls_channels", "p2p_channels"):
                if ev.fields.get(name) is not None:
                    self.add_value(name.replace("_", " "), ev.fields[name])
        elif k == "nccl.channel":
            if ev.fields.get("n_channels") is not None:
                self.add_value("rings (channels)", ev.fields["n_channels"])
        elif k == "nccl.comm.topology":
            for name in ("n_nodes", "local_ranks", "mnnvl"):
                if ev.fields.get(name) is not None:
                    self.add_value(name.replace("_", " "), ev.fields[name])
        elif k == "nccl.topo.pattern":
            self.add_value("graph pattern", f"pattern {ev.fields.get('pattern')} nChannels "
                                            f"{ev.fields.get('nChannels')} type {ev.fields.get('type')}")
        elif k == "nccl.topo.system":
            bw = ev.fields.get("maxBw", ev.fields.get("maxWidth"))
            if bw is not None:
                self.add_value("topology maxBw", bw)
        elif k == "nccl.coll":
            oc = ev.fields.get("op_count")
            if isinstance(oc, int) and (self.max_op_count is None or oc > self.max_op_count):
                self.max_op_count = oc
            if ev.fields.get("op"):
                self.add_value("collectives called", ev.fields["op"])
        elif k == "nccl.env" and ev.fields.get("name"):
            self.facts.setdefault("env_seen", {})[str(ev.fields["name"])] = str(ev.fields.get("value"))


class _ProfilingAnalyzer(Analyzer):
    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.profile = Profile()

    def add_event(self, ev: Event) -> None:
        super().add_event(ev)
        self.profile.add(ev)


def profile_run(specs: Any, rules_dirs: Iterable[str] = (), stdin_name: str = "-") -> tuple[Diagnosis, Profile]:
    """Analyze one run (inputs as ``analyze`` takes them) and gather its profile in the same pass.

    Raises:
        InputError: missing or unreadable input.
    """
    sources = expand_inputs(as_specs(specs), stdin_name=stdin_name)
    a = _ProfilingAnalyzer(rules_dirs=rules_dirs)
    a.add_sources(sources)
    for src in sources:
        a.run_source(src)
    return a.finish(), a.profile
