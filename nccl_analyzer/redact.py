"""Redaction for public tickets: hostnames, IPs, user names and e-mails replaced consistently."""
from __future__ import annotations

import dataclasses
import ipaddress
import re
from typing import Any, Iterable

from .model import Diagnosis, Event, Evidence

# The same value always gets the same placeholder (host-1, ip-1, ip6-1, user-1, email-1), so a redacted report
# still shows that rank 3 and rank 5 ran on one host. Structure survives: bus ids (0000:07:00.0, busId 60), ranks,
# pids, versions (2.28.9+cuda13.0) and the NCCL host:pid:tid prefix (host-1:588:588 [0] NCCL INFO ...).
# Kept on purpose (not secrets, and useful for diagnosis): localhost, loopback and unspecified addresses
# (127.0.0.0/8, 0.0.0.0, ::1, ::), and common system accounts (root, ubuntu, ...).
# Hostnames are learned from the structure (job ranks' hosts, event hosts, findings, MASTER_ADDR) and from the
# text (NCCL host:pid:tid [dev] prefixes, torchelastic "host : name" fields, store addresses), then replaced
# wherever they occur as whole words, case-insensitively ("vm" in "vm-run.log" is another word and stays).

#: Hostnames that are never treated as secrets (or are words the logs use for other things).
KEEP_HOSTS = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback", "n/a", "<n/a>",
                        "none", "null", "unknown", "nccl", "info", "warn", "rank", "host", "node", "master"})
#: Accounts that identify nobody.
KEEP_USERS = frozenset({"root", "ubuntu", "user", "users", "admin", "nobody", "runner", "app", "jovyan", "ec2-user",
                        "centos", "debian", "shared", "public", "default", "guest"})
#: Fields that hold fixed vocabulary (kinds, ids, roles): never rewritten.
KEEP_FIELDS = frozenset({"kind", "id", "rule", "role", "severity", "outcome", "fix_outcome", "init_state",
                         "first_error_kind", "schema", "got", "backend", "confidence", "line", "end_line", "pid",
                         "tid", "rank", "cuda_dev", "local_rank", "exit_code", "redacted"})

_PLACEHOLDER = re.compile(r"^(?:host|ip|ip6|user|email)-\d+$", re.I)
# NCCL prefix "host:pid:tid [dev] NCCL ..." (optionally after a "[time] " or wrapper prefix).
_NCCL_PREFIX = re.compile(r"(?:\[[^\]]{0,40}\]:? ?|\d{4}-\d\d-\d\dT\S+ | {0,4}\d{1,5}: )*"
                          r"([A-Za-z0-9][\w.-]*):\d+:\d+ \[\d+\] ")
# torchelastic ChildFailedError "  host      : node-7"
_ELASTIC_HOST = re.compile(r"^\s*(?:\[\w+\]:\s*)?host\s*:\s*(\S+)\s*$")
# store / rendezvous addresses: "connect to (node-7, 29500)", "[node-7]:29500", "to node-7:29500"
_STORE_ADDR = re.compile(r"\(([A-Za-z0-9][\w.-]*), \d{2,5}\)|\[([A-Za-z0-9][\w.-]*)\]:\d{2,5}(?![\d.])|"
                         r"\b(?:to|from|at|on|addr(?:ess)?|host(?:name)?)[ =]([A-Za-z][\w.-]*):\d{2,5}(?![\d.])")
_STORE_HINT = re.compile(r", \d{2,5}\)|\]:\d|\b(?:to|from|at|on|addr|address|host|hostname)[ =][A-Za-z]")
# Network interface names look like hosts in "eth0:10.0.0.1"; never learn them as hostnames.
_IFACE = re.compile(r"^(?:eth|ens|enp|eno|ib|lo|bond|docker|veth|virbr|wlan|wlp|mlx\d_|hsn|em|br|team)\d", re.I)
_FILE_SUFFIX = re.compile(r"\.(?:py|pyc|cc|cpp|cxx|c|h|hpp|cu|cuh|so|log|txt|json|toml|yaml|yml|sh|lark|j2)$", re.I)

_EMAIL = re.compile(r"(?<![\w.+-])[A-Za-z0-9][\w.+-]*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
_HOME = re.compile(r"(?P<pre>(?:/home/|/Users/|/export/home/|/u/|[A-Za-z]:[\\/]+Users[\\/]+|\\\\Users\\\\))"
                   r"(?P<user>[A-Za-z0-9._-]+)", re.I)
_IPV4 = re.compile(r"(?<![\w.])(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})(?![\w]|\.\d)")
_IPV6 = re.compile(r"(?<![\w.])((?:[0-9A-Fa-f]{0,4}:){2,7}(?:\d{1,3}(?:\.\d{1,3}){3}|[0-9A-Fa-f]{1,4})?)"
                   r"(%[\w.-]+)?(?![\w:]|\.\d)")
_ENV_HOST_KEYS = ("MASTER_ADDR", "HOSTNAME", "HOST", "NCCL_COMM_ID", "SLURM_LAUNCH_NODE_IPADDR", "SLURMD_NODENAME",
                  "SLURM_SUBMIT_HOST", "TORCHELASTIC_RDZV_ENDPOINT", "PET_MASTER_ADDR")
_ENV_USER_KEYS = ("USER", "LOGNAME", "USERNAME", "SUDO_USER", "SLURM_JOB_USER")


def _is_ip(s: str) -> bool:
    try:
        ipaddress.ip_address(s.split("%", 1)[0])
    except ValueError:
        return False
    return True


class Redactor:
    """Consistent replacement of identifying values; learns hostnames and user names as it goes.

    ``text(s)`` learns from ``s`` (NCCL prefixes, torchelastic host fields, home directories) and returns it
    redacted; ``event(e)`` does the same for an Event (host, text, path, fields). For a stream (events export)
    a host first seen later than a line that mentions it is missed in that earlier line; call ``learn_*``
    first (or ``redact_diagnosis``, which learns from the whole diagnosis before replacing anything).
    """

    def __init__(self, hosts: Iterable[str] = (), users: Iterable[str] = ()):
        self._hosts: dict[str, str] = {}  # lower-case name -> placeholder
        self._users: dict[str, str] = {}
        self._ips: dict[str, str] = {}
        self._emails: dict[str, str] = {}
        self._host_re: re.Pattern[str] | None = None
        self._user_re: re.Pattern[str] | None = None
        self._n_hosts = 0
        for h in hosts:
            self.learn_host(h)
        for u in users:
            self.learn_user(u)

    # -- learning -------------------------------------------------------------------------------------------
    def learn_host(self, name: str | None) -> None:
        """Treat ``name`` as a hostname from now on (ignored if it is an IP, localhost or a placeholder)."""
        if not name:
            return
        name = name.strip().strip("[]()<>,;'\"").rstrip(".")
        key = name.lower()
        if (not name or key in self._hosts or key in KEEP_HOSTS or _PLACEHOLDER.match(name) or _is_ip(name)
                or not re.search(r"[A-Za-z]", name) or not re.fullmatch(r"[A-Za-z0-9][\w.-]*", name)
                or _FILE_SUFFIX.search(name)):
            return
        if "." in name:
            short = key.split(".", 1)[0]
            if short in self._hosts:
                self._hosts[key] = self._hosts[short]  # node-7.example.com is node-7
            else:
                token = self._new_host()
                self._hosts[key] = token
                if short not in KEEP_HOSTS and re.search(r"[a-z]", short):
                    self._hosts[short] = token
        else:
            token = next((t for k, t in self._hosts.items() if k.split(".", 1)[0] == key), None)
            self._hosts[key] = token or self._new_host()
        self._host_re = None

    def _new_host(self) -> str:
        self._n_hosts += 1
        return f"host-{self._n_hosts}"

    def learn_user(self, name: str | None) -> None:
        """Treat ``name`` as a user name from now on (system accounts are kept)."""
        if not name:
            return
        key = name.strip().lower()
        if not key or key in self._users or key in KEEP_USERS or _PLACEHOLDER.match(key):
            return
        self._users[key] = f"user-{len(self._users) + 1}"
        self._user_re = None

    def learn_text(self, s: str) -> None:
        """Learn hostnames and user names that ``s`` reveals by its structure."""
        if not s:
            return
        if "] " in s:
            m = _NCCL_PREFIX.match(s)
            if m:
                self.learn_host(m.group(1))
        if "host" in s:
            m = _ELASTIC_HOST.match(s)
            if m:
                self.learn_host(m.group(1))
        if _STORE_HINT.search(s):
            for m in _STORE_ADDR.finditer(s):
                name = m.group(1) or m.group(2) or m.group(3)
                if not _IFACE.match(name):
                    self.learn_host(name)
        if "/" in s or "\\" in s:
            for m in _HOME.finditer(s):
                self.learn_user(m.group("user"))

    def learn_env(self, env: dict[str, str]) -> None:
        for k in _ENV_HOST_KEYS:
            value = env.get(k)
            if value:
                self.learn_host(value.rsplit(":", 1)[0] if value.count(":") == 1 else value)
        for k in _ENV_USER_KEYS:
            self.learn_user(env.get(k))
        for k in ("HOME", "PWD"):
            if env.get(k):
                self.learn_text(env[k])

    def learn_value(self, value: Any, depth: int = 0) -> None:
        """``learn_text`` on every string inside ``value`` (dataclasses, dicts, lists)."""
        if depth > 12:
            return
        if isinstance(value, str):
            self.learn_text(value)
        elif isinstance(value, dict):
            for k, v in value.items():
                self.learn_value(k, depth + 1)
                self.learn_value(v, depth + 1)
        elif isinstance(value, (list, tuple, set, frozenset)):
            for v in value:
                self.learn_value(v, depth + 1)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            for f in dataclasses.fields(value):
                if f.name not in KEEP_FIELDS:
                    self.learn_value(getattr(value, f.name), depth + 1)

    # -- replacing ------------------------------------------------------------------------------------------
    def host(self, name: str | None) -> str | None:
        """The placeholder for a hostname field (learning it), or the value redacted as text."""
        if name is None:
            return None
        self.learn_host(name)
        token = self._hosts.get(name.strip().lower())
        return token if token else self.text(name)

    def text(self, s: str) -> str:
        """``s`` with every known or recognizable identifying value replaced."""
        if not s:
            return s
        self.learn_text(s)
        if "@" in s:
            s = _EMAIL.sub(self._email_sub, s)
        if ("/" in s or "\\" in s) and self._users:
            s = _HOME.sub(self._home_sub, s)
        if "::" in s or s.count(":") >= 7:
            s = _IPV6.sub(self._ipv6_sub, s)
        if "." in s:
            s = _IPV4.sub(self._ipv4_sub, s)
        if self._hosts:
            s = self._host_pattern().sub(self._host_sub, s)
        if self._users:
            s = self._user_pattern().sub(lambda m: self._users.get(m.group(0).lower(), m.group(0)), s)
        return s

    def value(self, v: Any, depth: int = 0) -> Any:
        """Any value with its strings redacted (dicts, lists, tuples and dataclasses rebuilt)."""
        if depth > 12:
            return v
        if isinstance(v, str):
            return self.text(v)
        if isinstance(v, dict):
            return {self.value(k, depth + 1): self.value(x, depth + 1) for k, x in v.items()}
        if isinstance(v, list):
            return [self.value(x, depth + 1) for x in v]
        if isinstance(v, tuple):
            return tuple(self.value(x, depth + 1) for x in v)
        if isinstance(v, (set, frozenset)):
            return type(v)(self.value(x, depth + 1) for x in v)
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            changes = {}
            for f in dataclasses.fields(v):
                if f.name in KEEP_FIELDS or not f.init:
                    continue
                old = getattr(v, f.name)
                new = self.host(old) if f.name == "host" and isinstance(old, str) else \
                    tuple(self.host(h) or "" for h in old) if f.name == "hosts" and isinstance(old, tuple) else \
                    self.value(old, depth + 1)
                if new is not old:
                    changes[f.name] = new
            return dataclasses.replace(v, **changes) if changes else v
        return v

    def event(self, e: Event) -> Event:
        """An Event with host, path, text, time and fields redacted (kind, line, pid, rank, ... kept)."""
        if e.host:
            self.learn_host(e.host)
        return self.value(e)

    def evidence(self, e: Evidence) -> Evidence:
        return Evidence(path=self.text(e.path), line=e.line, text=self.text(e.text))

    # -- internals ------------------------------------------------------------------------------------------
    def _host_pattern(self) -> re.Pattern[str]:
        if self._host_re is None:
            self._host_re = _whole_words(self._hosts)
        return self._host_re

    def _user_pattern(self) -> re.Pattern[str]:
        if self._user_re is None:
            self._user_re = _whole_words(self._users)
        return self._user_re

    def _host_sub(self, m: re.Match[str]) -> str:
        return self._hosts.get(m.group(0).lower(), m.group(0))

    def _email_sub(self, m: re.Match[str]) -> str:
        key = m.group(0).lower()
        token = self._emails.get(key)
        if token is None:
            token = self._emails[key] = f"email-{len(self._emails) + 1}"
        return token

    def _home_sub(self, m: re.Match[str]) -> str:
        token = self._users.get(m.group("user").lower())
        return m.group("pre") + token if token else m.group(0)

    def _ip_token(self, addr: str, prefix: str) -> str:
        token = self._ips.get(addr)
        if token is None:
            n = sum(1 for t in self._ips.values() if t.startswith(prefix + "-")) + 1
            token = self._ips[addr] = f"{prefix}-{n}"
        return token

    def _ipv4_sub(self, m: re.Match[str]) -> str:
        octets = [int(x) for x in m.groups()]
        if any(o > 255 for o in octets):
            return m.group(0)
        addr = ipaddress.IPv4Address(".".join(str(o) for o in octets))
        if addr.is_loopback or addr.is_unspecified or str(addr) == "255.255.255.255":
            return m.group(0)
        return self._ip_token(str(addr), "ip")

    def _ipv6_sub(self, m: re.Match[str]) -> str:
        try:
            addr = ipaddress.IPv6Address(m.group(1))
        except ValueError:
            return m.group(0)
        if addr.is_loopback or addr.is_unspecified:
            return m.group(0)
        if addr.ipv4_mapped is not None:
            v4 = addr.ipv4_mapped
            if v4.is_loopback or v4.is_unspecified:
                return m.group(0)
            return self._ip_token(str(v4), "ip") + (m.group(2) or "")
        return self._ip_token(addr.compressed, "ip6") + (m.group(2) or "")


def redactor_for(d: Diagnosis) -> Redactor:
    """A Redactor that has learned every hostname and user name the diagnosis reveals."""
    r = Redactor()
    for rank in sorted(d.job.ranks):
        r.learn_host(d.job.ranks[rank].host)
    if d.root_cause:
        for h in d.root_cause.hosts:
            r.learn_host(h)
    for f in list(d.findings) + list(d.cascade):
        for h in f.hosts:
            r.learn_host(h)
    for e in d.events_sample:
        r.learn_host(e.host)
    hosts = d.job.extra.get("hosts") if isinstance(d.job.extra, dict) else None
    if isinstance(hosts, (list, tuple)):
        for h in hosts:
            if isinstance(h, str):
                r.learn_host(h)
    r.learn_env(d.job.env)
    r.learn_value(d)
    if d.excerpts:
        r.learn_value(d.excerpts)
    return r


def redact_diagnosis(d: Diagnosis, redactor: Redactor | None = None) -> Diagnosis:
    """A copy of ``d`` with identifying values replaced everywhere a renderer looks.

    The evidence context the HTML report shows is read from the input files first (they hold unredacted
    text), redacted with the rest and kept in ``Diagnosis.excerpts``; ``redacted`` is set so no renderer
    reads the inputs again.
    """
    if d.redacted:
        return d
    excerpts = d.excerpts
    if excerpts is None:
        from .render.context import diagnosis_evidence, read_excerpts

        excerpts = read_excerpts(diagnosis_evidence(d))
    d = dataclasses.replace(d, excerpts=excerpts)
    r = redactor or redactor_for(d)
    r.learn_value(excerpts)
    out = r.value(d)
    return dataclasses.replace(out, redacted=True)


def _whole_words(names: Any) -> re.Pattern[str]:
    """Any of ``names`` as a whole word (longest first; a '-' or '.' next to it makes it part of a longer name)."""
    ordered = sorted(names, key=len, reverse=True)
    return re.compile(r"(?<![\w.-])(?:" + "|".join(re.escape(n) for n in ordered) + r")(?![\w-])", re.I)
