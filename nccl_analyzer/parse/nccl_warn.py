"""WARN bodies the grammar does not type: keyword/file families and the fields read from their text."""
from __future__ import annotations

import re
from typing import Any

from .nccl_grammar import _PEER_RE

# --------------------------------------------------------------------------------------------------
# WARN families: the first matching keyword pattern wins (most specific first); the file:line of the
# WARN (path under src/) decides when no keyword does. Family fields come from small extractors.
_WARN_FAMILIES = tuple((family, re.compile(rx)) for family, rx in (
    ("duplicate_gpu", r"^Duplicate GPU|^Multiple Ranks are using the same GPU"),  # the latter 2.30+
    ("proxy", r"^\[(Proxy|Service|Rem Allocator)"),  # proxy/service thread tags come first in the text
    ("nvls", r"NVLS|NVLink SHARP|[Mm]ulticast"),
    ("cuda", r"Cuda failure|CUDA|[Cc]uda[A-Z]\w*|\bcu[A-Z][a-z]\w*|device-side|cudart"),
    ("ib", r"NET/IB|\bibv_|\bIB\b|mlx5|RoCE|\bGID\b|\bQP\b|\bHCA\b|\b[Vv]erbs\b|GDAKI|gdaki|\bDOCA\b|ibv"),
    ("bootstrap", r"[Bb]ootstrap|NCCL_COMM_ID|[Uu]nique ?[Ii]d"),
    # before socket: segment names contain 'recv'/'send' ("nccl-shm-recv-...", nccl#525)
    ("shm", r"\bSHM\b|[Ss]hared memory|\bshm|/dev/shm"),
    ("socket", r"[Ss]ocket|Connect(ion)? |[Cc]onnect\b|Net : |NET/Socket|\bpoll\b|\brecv\b|\bsend\b|"
               r"[Ll]isten|\bbind\b|\baccept|getaddrinfo|[Aa]ddress|[Ii]nterface|\bIPv[46]\b|ECONN|EADDR"),
    ("p2p", r"\bP2P\b|\bIPC\b|[Ii]pc[A-Z]|\bipc|[Pp]eer access|PeerAccess|\bp2p"),
    ("proxy", r"[Pp]roxy|Service thread"),
    ("net", r"NET plugin|NET/|[Nn]et plugin|CollNet|[Cc]ollnet|\bnet\b|[Nn]etwork|\bGIN\b|\bRMA\b"),
    ("destroy", r"commDestroy|commReclaim|already been destroyed|[Aa]bort|SetAsyncError|[Aa]syncJob|\bjob\b"),
    ("system", r"^Call to \S+( \S+)* (failed|timeout)|pthread|[Tt]hread (creation|join)|getrlimit|setrlimit|"
               r"\bdup2\b|\bfcntl\b|libnvidia-ml|WSA|SetupDi|random_device|[Cc]ould not map|failed to extend"),
    ("topology", r"XML|xml|[Tt]opo|NVML|nvml|\bPCI|\bpci|[Gg]raph|\bpath|\bNIC\b|NVLink|node of type|"
                 r"[Aa]ffinity|\bCPU\b|\b[Tt]rees?\b|\b[Rr]ings?\b|[Cc]hannel|[Pp]attern|MNNVL|[Cc]lique|"
                 r"[Tt]ransport|intra (node |proc )?ranks|local ranks|NRINGS"),
    ("version", r"[Vv]ersion"),
    ("alloc", r"[Aa]lloc|malloc|[Mm]emory|\bmmap|munmap|[Bb]uffer|out of memory|[Pp]ool\b"),
    ("invalid_usage", r"[Ii]nvalid|[Mm]ismatch|\bmust\b|not supported|[Uu]nsupported|[Aa]rgument|[Uu]sage|"
                      r"NULL|\bnull\b|out of range|[Ee]xceed|too (many|large|small|old)|[Rr]equire|[Aa]ttempt|"
                      r"[Ww]rong|not allowed|not a valid|[Ii]llegal|[Ee]xpected|[Ss]hould|[Uu]nknown|"
                      r"[Uu]nexpected|not (initialized|found)|[Cc]ould not find|[Dd]eprecated|[Gg]roup|[Ss]chedule|"
                      r"NCCL_[A-Z_]+=|[Ii]gnor|larger than|[Ss]et NCCL_|^PARAM:|[Pp]olicy|not a member|valid"),
    ("ras", r"\bRAS\b"),
))
# Path under src/ (or an absolute RCCL path) -> family, for WARNs whose text names no subsystem.
_FILE_FAMILIES = (
    ("net_ib", "ib"), ("ibv", "ib"), ("mlx5", "ib"), ("gdaki", "ib"),
    ("socket", "socket"), ("shm", "shm"), ("p2p", "p2p"), ("nvls", "nvls"), ("proxy", "proxy"),
    ("bootstrap", "bootstrap"), ("graph/", "topology"), ("xml", "topology"), ("topo", "topology"),
    ("nvmlwrap", "topology"), ("mnnvl", "topology"), ("enqueue", "invalid_usage"), ("argcheck", "invalid_usage"),
    ("collectives", "invalid_usage"), ("alloc", "alloc"), ("mem_manager", "alloc"), ("register", "alloc"),
    ("cudawrap", "cuda"), ("strongstream", "cuda"), ("gdrwrap", "cuda"), ("plugin/", "net"), ("net.c", "net"),
    ("coll_net", "net"), ("gin", "net"), ("rma", "net"), ("ras/", "ras"),
)
_ERRNO_TEXT_RE = re.compile(r"(?:failed|error|returned)(?: with error)?\s*:?\s*(?:-?\d+\s*)?\(?"
                            r"([A-Z][A-Za-z' ]*[a-z])\)?\.?\s*$")
_CALL_RE = re.compile(r"Call to (\S+?)(?:\(\))? failed")
_QUOTED_RE = re.compile(r"'([^']*)'")
_CUDA_CODE_RE = re.compile(r"(?:Cuda failure|CUDA error|error) (\d+)")
_IB_FIELDS_RE = (("status", re.compile(r"status=(\w+)|with error (\d+),")), ("opcode", re.compile(r"opcode=(\w+)")),
                 ("vendor_err", re.compile(r"vendor[_ ]err[= ](\d+)")), ("hca", re.compile(r"\bhca (\S+)")))


def _warn_family(body: str) -> str:
    for family, rx in _WARN_FAMILIES:
        if rx.search(body):
            return family
    return "other"


def _file_family(path: str) -> str | None:
    for needle, family in _FILE_FAMILIES:
        if needle in path:
            return family
    return None


_FIELD_TEXT = 4096


def _warn_fields(family: str, body: str) -> dict[str, Any]:
    """Family fields read from a WARN text that the grammar does not type."""
    fields: dict[str, Any] = {}
    body = body[:_FIELD_TEXT]  # real WARN texts are short; a cut 64 KiB line must not cost minutes of regex
    m = _PEER_RE.search(body)
    if m:
        fields["peer"] = m[1]
    m = _ERRNO_TEXT_RE.search(body)
    if m:
        fields["errno_text"] = m[1]
    m = _CALL_RE.search(body)
    if m:
        fields["call"] = m[1]
    if family in ("cuda", "nvls"):
        m = _QUOTED_RE.search(body)
        if m:
            fields["cuda_error"] = m[1]
        m = _CUDA_CODE_RE.search(body)
        if m:
            fields["cuda_code"] = int(m[1])
    elif family == "ib":
        for name, rx in _IB_FIELDS_RE:
            m = rx.search(body)
            if m:
                value = next(v for v in m.groups() if v is not None)
                fields[name] = int(value) if value.isdigit() else value
    if body.startswith("Bootstrap : no socket interface") or body.startswith("NET/Socket : No usable listening"):
        fields["reason"] = "no_interface"
    elif body.startswith("Failed to initialize any NET plugin"):
        fields["reason"] = "no_net_plugin"
    return fields
