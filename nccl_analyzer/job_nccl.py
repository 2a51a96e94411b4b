"""The job model's NCCL handlers: version banners, Init START / COMPLETE (ranks, communicators, GPUs, bus ids),
the environment echo, network and transport lines, collective call lines (a mixin of ``job.JobBuilder``)."""
from __future__ import annotations

import re

from .job_values import (_BANNER_VERSION, _COMM_CAP, _PID_CAP, _TRANSPORT_BASE, MAX_WORLD, TIMELINE_CAP, _shared,
                         _shared_value, one_of_smallest, one_or_more_add)
from .model import Event
from .packed import pack


# (compiled once: ``_on_network`` reads every untyped NCCL INFO line, 24 a rank)
_OOB_USING = re.compile(r"(?:Bootstrap ?: Using|NET/Socket : Using|NET/IB : Using.*OOB)\s*(.*)")
_IFACE_NAMES = re.compile(r"(?:\[\d+\])?([A-Za-z][\w.\-]*?):\d")
_USING_NETWORK = re.compile(r"Using network (.*\S)")


class NcclHandlers:
    """``JobBuilder``'s handlers of NCCL's own lines (each reads and writes the builder's tables)."""

    def _proc_version(self, ev: Event) -> str | None:
        p = self.procs.find(ev.host, ev.pid or 0)
        return None if p is None else p.version

    # -- handlers ------------------------------------------------------------------------------------------
    def _on_version(self, ev: Event) -> None:
        # Read the version from the printed text first: it is what the line says (and parse/nccl.py 's body cache
        # has been seen to hand back the fields of an earlier banner with other digits).
        m = _BANNER_VERSION.search(str(ev.get("msg") or ev.text or ""))
        v = m.group(1) if m else ev.get("version")
        if not v:
            return
        v = str(v)
        if v not in self.job.nccl_versions:
            self.job.nccl_versions.append(v)
        who = f"{ev.host}:{ev.pid}" if ev.pid is not None else f"{ev.path}"
        one_of_smallest(self.versions_by_proc.setdefault(v, set()), who)
        self.version_events.setdefault(v, ev)
        if ev.pid is not None:
            self.procs.set_version(ev.host, ev.pid or 0, _shared(v), _PID_CAP)
            r = self.rank_of(ev)
            if r is not None:
                self._rank(r).nccl_version = _shared(v)  # (one string for every rank of a version)

    def _on_driver(self, ev: Event) -> None:
        v = ev.get("driver_version")
        if v is not None and self.job.cuda_driver is None:
            self.job.cuda_driver = str(v)

    def _on_init(self, ev: Event) -> None:
        rank = ev.get("rank")
        if rank is None:
            return
        rank = int(rank)
        nranks = int(ev.get("nranks", 0) or 0)
        comm = str(ev.get("comm_id") or ev.get("comm") or "?")  # 2.8-2.15 Init COMPLETE lines have no commId
        complete = ev.kind.endswith("complete")
        procs = self.procs
        if ev.pid is not None:
            key = (ev.host, ev.pid)
            prev = procs.rank(ev.host, ev.pid)
            # The process's global rank: its rank in the largest communicator it joined (the default PG).
            if prev is None or nranks > prev[1]:
                got = (rank, nranks)
                procs.set_rank(ev.host, ev.pid, got)
                anyhost = procs.rank(None, ev.pid)
                if anyhost is None or anyhost == prev:
                    procs.set_rank(None, ev.pid, got)  # (the same tuple)
                if prev is not None and prev[0] != rank:
                    self._regrank(key, prev[0], rank)
            mine = procs.rank(ev.host, ev.pid)
            grank = mine[0]  # type: ignore[index]
            dev = ev.get("cuda_dev")
            dev = ev.cuda_dev if dev is None else int(dev)
            if dev is not None and procs.n_devrank < _PID_CAP:
                p = procs.get(ev.host, ev.pid)
                got = mine if mine == (rank, nranks) else (rank, nranks)  # (the same tuple where it is equal)
                if p.dev is None:  # its first GPU
                    p.dev, p.devr = dev, got
                    procs.n_devrank += 1
                    now = got
                elif p.dev == dev:
                    if nranks > p.devr[1]:  # type: ignore[index]
                        p.devr = got
                    now = p.devr
                else:  # a second GPU of one process
                    if p.devs is None:
                        p.devs = {}
                    have = p.devs.get(dev)
                    if have is None:
                        procs.n_devrank += 1
                    if have is None or nranks > have[1]:
                        p.devs[dev] = got
                    now = p.devs[dev]
                if p.devs is not None and now[1] >= mine[1]:  # type: ignore[index]
                    grank = now[0]  # this GPU's rank in the process's largest communicator
        else:
            grank = rank
        if nranks > MAX_WORLD:
            nranks = 0  # a mangled number (a log cut mid-digit, "nranks 99999999999"): no world size
        if nranks > 0 and (self.job.world_size is None or nranks > self.job.world_size):
            self.job.world_size = nranks
        if comm not in self.job.communicators and len(self.job.communicators) < _COMM_CAP:
            self.job.communicators[comm] = {"nranks": nranks, "ranks": {}, "complete": 0}
        c = self.job.communicators.get(comm)
        if ev.pid is not None and procs.n_inits < _PID_CAP:
            p = procs.get(ev.host, ev.pid)
            inits = p.inits
            if inits is None:
                inits = p.inits = []
                procs.n_inits += 1
            if len(inits) < 64:
                bus_of = ev.get("bus_id", ev.get("busId"))
                got = (_shared_value(comm), rank, None if bus_of is None else _shared_value(str(bus_of)))
                # Init START and Init COMPLETE of one communicator give the same tuple: one object for both
                inits.append(inits[-1] if inits and inits[-1] == got else got)
        if c is not None and ev.pid is not None:
            pids = self._comm_pids.setdefault(comm, set())
            if len(pids) < 1024:
                pids.add(ev.pid)
        states = self.init.setdefault(comm, {}) if comm in self.job.communicators else {}
        if complete:
            if states.get(rank) != "complete":
                states[rank] = "complete"
                if c is not None:  # (a count kept as it goes: summing the states per Init line is quadratic in ranks)
                    c["complete"] += 1
        else:
            states.setdefault(rank, "started")
            if len(c["ranks"]) < 1024:
                c["ranks"][rank] = grank
        info = self._rank(grank)
        info.host = info.host or ev.host
        info.pid = info.pid if info.pid is not None else ev.pid
        cuda_dev = ev.get("cuda_dev")
        if cuda_dev is not None and info.cuda_dev is None:
            info.cuda_dev = int(cuda_dev)
        bus = ev.get("bus_id")
        if bus is not None:
            bus = _shared_value(str(bus))  # (bus ids repeat on every host: one string each)
            if info.bus_id is None:
                info.bus_id = bus
            if ev.host is not None or ev.pid is not None:
                host = _shared_value(ev.host or "?")  # (one string per host, and per commId below: ~130 bytes a rank)
                one_or_more_add(self._bus_ranks, (host, bus), grank)
                if ev.pid is not None and len(self._gpu_inits) < _COMM_CAP:
                    # Per communicator: two processes of ONE comm on one GPU. Separate jobs that reuse a GPU one
                    # after the other (concatenated NCCL_DEBUG_FILEs) have different commIds. The first Init
                    # START line of each process there (evidence only): the event itself while it is the only one.
                    bk = (host, bus, _shared_value(comm))
                    got = self._gpu_inits.get(bk)
                    if got is None:
                        self._gpu_inits[bk] = pack(ev)
                    else:
                        evs = got if got.__class__ is list else [got]
                        if len(evs) < 64 and all(e.pid != ev.pid for e in evs):
                            evs.append(pack(ev))
                            self._gpu_inits[bk] = evs
        version = self._proc_version(ev)
        if version and not info.nccl_version:
            info.nccl_version = version
        if complete:
            info.init_state = "complete"
        elif info.init_state in ("unknown",):
            info.init_state = "started"
        self._timeline(ev, "init complete" if complete else "init start")

    def _on_env(self, ev: Event) -> None:
        name, value = ev.get("name"), ev.get("value")
        if name and len(self.env) < 512:
            self.env[str(name)] = str(value)
            lst = self.env_events.setdefault(str(name), [])
            if len(lst) < 2:
                lst.append(ev)

    def _on_network(self, ev: Event) -> None:
        net = ev.get("network")
        if net:
            self.job.network.setdefault("network", str(net))
        ifs = ev.get("interfaces")
        if isinstance(ifs, list):
            names = [str(i.get("name")) for i in ifs if isinstance(i, dict) and i.get("name")]
            if names:
                self.ifaces.setdefault(ev.host or "?", set()).update(names[:16])
                if ev.kind.startswith("nccl.bootstrap"):
                    self.job.network.setdefault("bootstrap", ", ".join(
                        f"{i.get('name')}:{i.get('addr')}" for i in ifs[:4] if isinstance(i, dict)))
            return
        oob = ev.get("oob_interface")
        if oob:
            self.ifaces.setdefault(ev.host or "?", set()).add(str(oob))
        # A line the grammar cannot type (cut short, a network name with a space: "Using network AWS Libfabric")
        if ev.kind == "nccl.info":
            msg = str(ev.get("msg", ""))
            m = _OOB_USING.match(msg)
            if m:
                names = _IFACE_NAMES.findall(m.group(1))
                if names:
                    self.ifaces.setdefault(ev.host or "?", set()).update(names[:16])
                if msg.startswith("Bootstrap"):
                    self.job.network.setdefault("bootstrap", m.group(1).strip())
            m = _USING_NETWORK.match(msg)  # the plugin's name, e.g. "AWS Libfabric" (aws-ofi-nccl)
            if m:
                self.job.network.setdefault("network", m.group(1))

    def _on_transport(self, ev: Event) -> None:
        # Hot: a big job logs one line per channel and peer. Only the first transport line per rank goes
        # into the timeline and each transport kind into the network summary.
        t = ev.fields.get("transport")
        if not t:
            return
        base = _TRANSPORT_BASE.get(t)
        if base is None:
            t = str(t)
            base = t.split("/")[0] if "/" in t else t
            if base == "P2P" or base == "NET":
                base = "/".join(t.split("/")[:2])
            if len(_TRANSPORT_BASE) < 4096:
                _TRANSPORT_BASE[t] = base
            tr = self.job.network.setdefault("transports", [])
            if base not in tr and len(tr) < 16:
                tr.append(base)
        elif base not in self.job.network.get("transports", ()):
            tr = self.job.network.setdefault("transports", [])
            if len(tr) < 16:
                tr.append(base)
        r = self.rank_of(ev)
        if r is not None and r not in self._transport_seen:
            self._transport_seen.add(r)
            self._rank(r)
            if self.timelines.count(r) < TIMELINE_CAP:
                self._timeline(ev, "transport " + base)

    def _on_coll(self, ev: Event) -> None:
        r = self.rank_of(ev)
        if r is None:
            return
        op = ev.get("op")
        entry = {"op_type": _shared_value(op), "source": "nccl.coll", "line": ev.line}
        for name in ("op_count", "count", "datatype"):
            if ev.get(name) is not None:
                entry[name] = _shared_value(ev.get(name))
        prev = self.collectives.get(r)
        if prev is not None and str(prev.get("source", "")).startswith("torch."):
            # The watchdog's report of where this rank stopped (op, SeqNum, last completed) stays: a later NCCL call
            # line of the same process is another communicator's (a subgroup) or the abort path, not progress.
            return
        self.collectives[r] = entry

    def _regrank(self, key: tuple[str | None, int], old: int, new: int) -> None:
        """A process first logged the Init of a smaller communicator (a subgroup created before the default group's
        lazy init, rank ``old`` there) and now that of a larger one (global rank ``new``): what its earlier Init lines
        gave rank ``old`` was this process's, not that rank's."""
        host, pid = key
        owners = [p for k, p in self.procs.keyed() if k[0] is not None and p.rank is not None and p.rank[0] == old
                  and k != key]
        owner_buses = {b for p in owners for _, _, b in p.inits or ()}
        mine = self.procs.find(host, pid)
        for comm, r, bus in (mine.inits if mine is not None else None) or ():
            c = self.job.communicators.get(comm)
            if c is not None and c["ranks"].get(r) == old:
                c["ranks"][r] = new
            got = self._bus_ranks.get((host or "?", bus)) if bus is not None else None
            if got is not None and bus not in owner_buses:
                if got.__class__ is set:
                    if old in got:
                        got.discard(old)
                        got.add(new)
                elif got == old:
                    self._bus_ranks[(host or "?", bus)] = new
        info = self.job.ranks.get(old)
        if info is None or info.pid != pid or info.host != host:
            return
        if owners:
            info.pid = info.host = info.cuda_dev = info.bus_id = None  # rank ``old`` is another process's
            return
        del self.job.ranks[old]
        self._rank(new)
        self.timelines.move(old, new)

    # -- result --------------------------------------------------------------------------------------------
