"""Predicates that blame the ranks a message itself names ("... from rank 0", "Ranks 1, 3 failed to ...")."""
from __future__ import annotations

import fnmatch
import re
from typing import Any

from .predicate import PredContext, PredResult, _odd_ones, _rank_list, _who, predicate
from ..model import Event
from .virtual import field_value

_NUMS = re.compile(r"(\d+)(?:\s*-\s*(\d+))?")
#: The most ranks one message may name (a range "0-100000" in a corrupt line must not build a huge tuple).
MAX_NAMED = 4096


@predicate
def ranks_in_text(ctx: PredContext, regex: str = "", one_rank: bool = False, min_reporters: int = 0,
                  one_host: bool = False, **args: Any) -> PredResult | None:
    """The ranks that group 1 of ``regex`` names in the matched events' text ("3", "1, 3", "0-7, 9"): a message
    that says who failed (gloo's monitoredBarrier, a launcher's "task 3 exited"). Fails when none names one.
    Options: ``one_rank`` (fails unless every message names the same single rank), ``min_reporters`` (fails
    unless that many distinct processes, host and pid, printed the messages), ``one_host`` (fails unless the
    input shows one host only: a message that names a node-local rank names the global one only there)."""
    if one_host and len(ctx.builder.hosts) > 1:
        return None
    if min_reporters and len({(ev.host, ev.pid) for ev in ctx.events if ev.pid is not None}) < min_reporters:
        return None
    rx = re.compile(regex)
    named: set[int] = set()
    evidence = []
    for ev in ctx.events:
        body = field_value(ev, "body")
        m = rx.search(str(body or ""))
        if m is None or not m.groups() or m.group(1) is None:
            continue
        for a, b in _NUMS.findall(m.group(1)):
            lo = int(a)
            hi = int(b) if b else lo
            if hi < lo or hi - lo > MAX_NAMED:
                continue
            named.update(range(lo, hi + 1))
            if len(named) > MAX_NAMED:
                return None
        evidence.append(ev)
    if not named or (one_rank and len(named) > 1):
        return None
    ranks = tuple(sorted(named))
    return PredResult(bound={"named_ranks": _rank_list(ranks), "named_who": _who(ranks)}, ranks=ranks,
                      evidence=evidence[:1])


# ProcessGroupWrapper (TORCH_DISTRIBUTED_DEBUG=DETAIL) compares each rank's CollectiveFingerPrint with every other
# rank's and raises on the first that differs: "Detected mismatch between collectives on ranks. Rank 0 is running
# collective: CollectiveFingerPrint(SequenceNumber=6, OpType=ALLREDUCE, TensorShape=[4], TensorDtypes=Float, ...),
# but Rank 2 is running collective: CollectiveFingerPrint(...)". Each such line states two ranks' fingerprints.
_FP_RANK = re.compile(r"Rank (\d+) is running collective: CollectiveFingerPrint\(")
# One field of a printed CollectiveFingerPrint (operator<< in ProcessGroupWrapper.cpp). With tensors it prints
# "SequenceNumber=6, OpType=ALLREDUCE, TensorShape=[4], TensorDtypes=Float, TensorDeviceTypes=..."; with none
# (barrier, uneven ops) "SequenceNumber=6OpType=BARRIER": no separator, so a number runs into the next field name.
_FP_FIELDS = re.compile(r"(?<![A-Za-z])(SequenceNumber|OpType|TensorShape|TensorDtypes|TensorDeviceTypes)="
                        r"(\[[^\]]*\]|\d+(?=OpType=)|\w+)")
_FP_START = "CollectiveFingerPrint("


def _fp_fields(text: str) -> dict[str, str]:
    """The fields of the first CollectiveFingerPrint printed at the start of ``text`` (up to the next one): field
    name -> value as printed (the first of each name)."""
    end = text.find(_FP_START)
    out: dict[str, str] = {}
    for k, v in _FP_FIELDS.findall(text if end < 0 else text[:end]):
        out.setdefault(k, v)
    return out


def _fingerprints(text: str) -> dict[int, tuple[str, ...]]:
    """Rank -> (op type, shapes, dtypes, device types) of each CollectiveFingerPrint a mismatch message states."""
    out: dict[int, tuple[str, ...]] = {}
    starts = list(_FP_RANK.finditer(text))
    for i, m in enumerate(starts):
        part = text[m.end():starts[i + 1].start() if i + 1 < len(starts) else len(text)]
        fields = _fp_fields(part)
        if "OpType" in fields:
            out.setdefault(int(m.group(1)), tuple(fields.get(k, "") for k in
                                                  ("OpType", "TensorShape", "TensorDtypes", "TensorDeviceTypes")))
    return out


@predicate
def fingerprint_odd_one_out(ctx: PredContext, **args: Any) -> PredResult | None:
    """The rank(s) whose collective differs from the one most ranks run, from the CollectiveFingerPrints that
    TORCH_DISTRIBUTED_DEBUG=DETAIL's mismatch messages state (every rank reports the mismatch it saw, so every rank
    is in the matched lines; only the fingerprints tell the odd one out). Fails when there is no strict majority
    (1 vs 1, 2 vs 2: the log cannot tell which side is wrong)."""
    fps: dict[int, tuple[str, ...]] = {}
    evidence = []
    for ev in ctx.events:
        found = _fingerprints(str(field_value(ev, "body") or ""))
        if found:
            evidence.append(ev)
        for r, fp in found.items():
            fps.setdefault(r, fp)
    if len(fps) < 3 or len(set(fps.values())) < 2:
        return None
    ordered, odd = _odd_ones(fps)
    if odd is None:
        return None
    major = fps[ordered[0][0]][0]
    ops = sorted({fps[r][0] for r in odd})
    story = f"{_who(odd)} ran {', '.join(ops)} where {_who(tuple(ordered[0]))} ran {major}"
    if ops == [major]:
        story = f"{_who(odd)} ran {major} with other tensors than {_who(tuple(ordered[0]))}"
    return PredResult(bound={"odd_who": _who(odd), "odd_story": story}, ranks=odd,
                      evidence=[e for e in evidence if ctx.builder.rank_of(e) in odd][:1] + evidence[:1])


@predicate
def stated_values_odd_one_out(ctx: PredContext, regex: str = "", reference_rank: int | None = None,
                              **args: Any) -> PredResult | None:
    """The rank(s) whose value differs from the one most ranks state, where each matched message states two ranks'
    values: ``regex``'s named groups ``rank``/``value`` and ``rank2``/``value2`` (DDP's parameter-count check, "Rank 1
    has 2 params, while rank 0 has inconsistent 4 params"). With no strict majority (1 vs 1) the ranks whose value
    differs from ``reference_rank``'s, where the rule names a reference (DDP's: rank 0, whose model every rank
    receives and is checked against); else the predicate fails and every reporting rank stays named."""
    rx = re.compile(regex)
    values: dict[int, str] = {}
    evidence = []
    for ev in ctx.events:
        m = rx.search(str(field_value(ev, "body") or ""))
        if m is None:
            continue
        evidence.append(ev)
        for rk, vk in (("rank", "value"), ("rank2", "value2")):
            if m.groupdict().get(rk) is not None and m.groupdict().get(vk) is not None:
                values.setdefault(int(m.group(rk)), m.group(vk))
    if len(set(values.values())) < 2:
        return None
    ordered, odd = _odd_ones(values)
    if odd is None:
        if reference_rank is None or reference_rank not in values:
            return None
        ref = values[reference_rank]
        odd = tuple(sorted(r for r, v in values.items() if v != ref))
        major = tuple(sorted(r for r, v in values.items() if v == ref))
        basis = f"with no majority, {_who(major)} is the reference"
    else:
        major = tuple(ordered[0])
        basis = f"{_who(major)} agree" if len(major) > 1 else f"{_who(major)} agrees"

    def has(rs: tuple[int, ...]) -> str:
        return "have" if len(rs) > 1 else "has"

    story = (f"{_who(odd)} {has(odd)} {', '.join(sorted({values[r] for r in odd}))} where {_who(major)} "
             f"{has(major)} {values[major[0]]}")
    return PredResult(bound={"odd_who": _who(odd), "odd_story": story, "odd_basis": basis}, ranks=odd,
                      evidence=[e for e in evidence if ctx.builder.rank_of(e) in odd][:1] + evidence[:1])


@predicate
def store_host_gone(ctx: PredContext, regex: str = "", host_rank: int = 0, not_with: str = "", launcher: str = "",
                    **args: Any) -> PredResult | None:
    """The rank that hosts the job's TCPStore, where every matched line is a store connection that was lost
    (``regex`` on each line's text): the store's clients lose their connections only when its server goes away.
    init_process_group's env:// and tcp:// rendezvous start the server in ``host_rank`` (rank 0); under torchrun
    the agent hosts it. So the host is known only where a matched traceback shows the ranks were children of a
    launcher that hosts no store (a frame file matching ``launcher``: Python's multiprocessing, mp.spawn) and no
    event of a kind matching ``not_with`` (torchrun's agent) is in the input; an excerpt of one rank's output names
    no one. Fails as well when ``host_rank`` itself reports the loss."""
    rx = re.compile(regex)
    if not ctx.events or any(not rx.search(str(field_value(ev, "body") or ev.text)) for ev in ctx.events):
        return None
    if not_with and any(fnmatch.fnmatchcase(k, not_with) for k in ctx.builder.kinds):
        return None
    lx = re.compile(launcher) if launcher else None
    if lx is None or not any(lx.search(str(f.get("file", ""))) for ev in ctx.events
                             for f in (ev.fields.get("frames") or ()) if isinstance(f, dict)):
        return None
    if host_rank in {ctx.builder.rank_of(ev) for ev in ctx.events}:
        return None
    who = f"rank {host_rank}, which hosts the TCPStore,"
    return PredResult(bound={"peer_ranks": str(host_rank), "peer_who": who}, ranks=(host_rank,))


@predicate
def store_server_rank(ctx: PredContext, frames: str = "", host_rank: int = 0, **args: Any) -> PredResult | None:
    """The rank that starts the job's TCPStore server, where a matched traceback shows the store being created by
    init_process_group's own rendezvous (``frames`` on its ``file:function`` lines): the env:// and tcp:// handlers
    create it with ``start_daemon``/``is_master`` = (rank == ``host_rank``), every other rank only connects, so a
    failure to listen (EADDRINUSE) raised there is that rank's. Under torchrun's agent store the workers never listen
    (the agent does, in its own frames). Fails when a matched line carries another rank."""
    rx = re.compile(frames)
    if not frames or not any(rx.search(str(field_value(ev, "frames_text") or "")) for ev in ctx.events):
        return None
    if {ctx.builder.rank_of(ev) for ev in ctx.events} - {None, host_rank}:
        return None
    return PredResult(bound={"server_who": f"rank {host_rank}, which starts the TCPStore server"}, ranks=(host_rank,))


_JOINED = re.compile(r"waiting for clients\. (\d+)/(\d+) clients joined")
#: torch/distributed/rendezvous.py's store creation: the frames of the process that hosts the TCPStore server
_STORE_FRAMES = re.compile(r"_create_c10d_store|TCPStore\(")


@predicate
def store_clients_missing(ctx: PredContext, **args: Any) -> PredResult | None:
    """The ranks that never reached the TCPStore server, from the server's own timeout: ``TCPStore::waitForWorkers``
    (the server started with ``wait_for_workers``, as init_process_group's env:// and tcp:// rendezvous start it in
    the rank that hosts it) raises "Timed out after N seconds waiting for clients. k/W clients joined", counting
    the server's own client. Where only that one joined (k == 1) and the server's rank is known, every other rank
    of the W never connected: they are the ones that could not reach it (a wrong port or address). Otherwise
    (k > 1: which ones joined is not said) None. Only a traceback whose frames show the store being created
    (``_create_c10d_store`` / ``TCPStore(``: the process that raised it started the server, so its rank is the
    host's) names them; a bare message line (whose process is not shown to be the server's) does not. The ranks
    are taken as 0..W-1 with the host's rank being the event's (an mp.spawn index is the rank where the program
    passes rank = index, as usual, but that is not checked)."""
    b = ctx.builder
    for ev in ctx.events:
        m = _JOINED.search(str(field_value(ev, "body") or ev.text))
        host = b.rank_of(ev)
        if m is None or host is None or int(m.group(1)) != 1 or not 1 < int(m.group(2)) <= 4096:
            continue
        if not _STORE_FRAMES.search(str(field_value(ev, "frames_text") or "")):
            continue
        missing = tuple(r for r in range(int(m.group(2))) if r != host)
        return PredResult(bound={"missing_who": _rank_list(missing)}, ranks=missing, evidence=[ev])
    return None


# ProcessGroupWrapper::runCollectiveChecks (TORCH_DISTRIBUTED_DEBUG=DETAIL) logs, before every checked collective,
# `LOG(INFO) << "[Rank " << getRank() << "] Running collective: " << fingerprint`, then all-gathers the serialized
# fingerprints over gloo and raises "Detected mismatch between collectives on ranks" when any rank's differs (op
# type, tensor count, dtypes, device types, shapes; ops with uneven sizes pass no tensors and print none).
_RUN_FP = re.compile(r"\[Rank (\d+)\] Running collective: CollectiveFingerPrint\(")


@predicate
def running_fingerprints_differ(ctx: PredContext, **args: Any) -> PredResult | None:
    """Ranks whose "[Rank N] Running collective: CollectiveFingerPrint(SequenceNumber=S, ...)" lines (the
    wrapper's INFO line before its check) state different collectives (op type, tensor shape, dtypes) at one
    sequence number: the wrapper's check then fails, whether or not the log kept its error. A stated rank that
    logs two different fingerprints at one sequence number (two process groups in one log) makes that number
    say nothing. Blames the odd one(s) out where a strict majority agrees, else every rank that differs is named.
    Binds `odd_story`, `seq`."""
    by_seq: dict[int, dict[int, tuple[str, ...]]] = {}
    spoilt: set[int] = set()
    evidence: dict[tuple[int, int], Event] = {}
    for ev in ctx.events:
        body = str(field_value(ev, "body") or "")
        m = _RUN_FP.search(body)
        if m is None:
            continue
        fields = _fp_fields(body[m.end():])
        if not fields.get("SequenceNumber", "").isdigit() or "OpType" not in fields:
            continue
        rank, seq = int(m.group(1)), int(fields["SequenceNumber"])
        fp = (fields["OpType"], fields.get("TensorShape", ""), re.sub(r"\s+", "", fields.get("TensorDtypes", "")))
        seen = by_seq.setdefault(seq, {})
        if seen.get(rank, fp) != fp:
            spoilt.add(seq)
        seen.setdefault(rank, fp)
        evidence.setdefault((seq, rank), ev)
    for seq in sorted(by_seq):
        fps = by_seq[seq]
        if seq in spoilt or len(fps) < 2 or len(set(fps.values())) < 2:
            continue
        groups, odd = _odd_ones(fps)
        blamed = odd if odd is not None else tuple(sorted(fps))

        def says(rs: list[int] | tuple[int, ...]) -> str:
            op, shape, dtypes = fps[rs[0]]
            return f"{_who(tuple(rs))} {op}{f' with shape {shape}' if shape else ''}{f' {dtypes}' if dtypes else ''}"

        story = "; ".join(says(g) for g in groups)
        return PredResult(bound={"odd_story": f"at sequence number {seq}: {story}", "seq": str(seq),
                                 "odd_who": _who(blamed)},
                          ranks=odd or (), evidence=[evidence[(seq, r)] for g in groups for r in g[:1]])
    return None
