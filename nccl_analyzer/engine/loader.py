"""TOML rule files -> validated ``Rule`` objects; every schema error names ``path:line``."""
from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import RuleError
from ..model import ROLES
from .match import PREDICATES, Selector, compile_selector

#: The root-cause ids of TAXONOMY.md (v1).
TAXONOMY_IDS = (
    "socket_interface", "port_conflict", "rendezvous_unreachable", "p2p_ipc", "shm", "ib_rdma", "network_connect",
    "watchdog_timeout", "collective_mismatch", "peer_exit", "app_exception", "host_oom", "cuda_oom", "cuda_error",
    "version_mismatch", "duplicate_gpu", "invalid_usage", "gpu_visibility", "nvls_multicast", "other",
)
STATUSES = ("stable", "experimental", "test", "deprecated")
SEVERITIES = ("critical", "error", "warning", "info")
GROUP_BY = ("rank", "host", "job")
REQUIRED = ("id", "taxonomy", "title", "status", "role", "severity", "confidence", "description", "match", "fix",
            "falsepositives", "references")
KNOWN_KEYS = frozenset(REQUIRED + ("explains", "example", "replaced_by", "tags", "versions", "author"))
_ID = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)+$")
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True, slots=True)
class Example:
    """One ``[[example]]``: verbatim log text and whether the rule must match it."""

    expect: str  # match | no-match
    log: str
    line: int
    name: str = ""
    dumps: tuple[str, ...] = ()  # Flight Recorder dumps (JSON text, rank = position) analyzed with the log


@dataclass(frozen=True, slots=True)
class MatchSpec:
    """The compiled ``[match]`` table."""

    all: tuple[Selector, ...] = ()
    any: tuple[Selector, ...] = ()
    none: tuple[Selector, ...] = ()
    within: float | None = None
    group_by: str = "job"
    ordered: bool = False
    predicates: tuple[tuple[str, dict[str, Any]], ...] = ()
    # "job": a ``none`` match cancels the whole group; "rank": only the matches of the same rank (a match with no
    # rank: of the same input file, whose process cannot be told apart)
    none_scope: str = "job"


@dataclass(frozen=True, slots=True)
class Rule:
    """A validated rule (see STYLE.md rules 12-17)."""

    id: str
    taxonomy: str
    title: str
    status: str
    role: str
    severity: str
    confidence: float
    description: str
    match: MatchSpec
    fix: dict[str, Any]
    falsepositives: tuple[str, ...]
    references: tuple[str, ...]
    explains: tuple[str, ...] = ()
    examples: tuple[Example, ...] = ()
    path: str = ""
    family: str = ""
    replaced_by: str | None = None
    lines: dict[str, int] = field(default_factory=dict)

    def line_of(self, key: str) -> int:
        """Line of a top-level key in the rule file (1 when unknown)."""
        return self.lines.get(key, 1)

    def to_dict(self) -> dict[str, Any]:
        """A plain summary for ``rules list/show``."""
        return {
            "id": self.id, "taxonomy": self.taxonomy, "title": self.title, "status": self.status,
            "role": self.role, "severity": self.severity, "confidence": self.confidence,
            "description": self.description, "explains": list(self.explains), "fix": self.fix,
            "falsepositives": list(self.falsepositives), "references": list(self.references),
            "examples": len(self.examples), "path": self.path,
        }


_KEY_LINE = re.compile(r"\s*(?:\[\[?\s*([\w.]+)\s*\]\]?|([\w-]+)\s*=)")


def _key_lines(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    match = _KEY_LINE.match
    for i, line in enumerate(text.splitlines(), 1):
        m = match(line)
        if m:
            out.setdefault(m.group(1) or m.group(2), i)
    return out


def _nth_line(text: str, pattern: str, n: int) -> int:
    """Line of the n-th (0-based) match of a regex on lines; 1 if absent."""
    count = 0
    match = re.compile(pattern).match  # (once: not the re module's cache lookup per line of every rule file)
    for i, line in enumerate(text.splitlines(), 1):
        if match(line):
            if count == n:
                return i
            count += 1
    return 1


def _line_after(text: str, start: int, key: str) -> int:
    lines = text.splitlines()
    for i in range(max(start - 1, 0), len(lines)):
        if re.match(rf"\s*{re.escape(key)}\s*=", lines[i]):
            return i + 1
    return start


def parse_rule(path: str | os.PathLike[str], family: str | None = None) -> Rule:
    """Read and validate one rule file.

    Raises:
        RuleError: with ``path`` and ``line`` of the offending key.
    """
    p = Path(path)
    spath = str(p)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleError(f"cannot read rule file: {exc}", path=spath) from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        raise RuleError(f"TOML syntax error: {exc}", path=spath, line=int(m.group(1)) if m else 1) from exc
    lines = _key_lines(text)

    def err(msg: str, key: str | None = None, line: int | None = None) -> RuleError:
        return RuleError(msg, path=spath, line=line or (lines.get(key, 1) if key else 1))

    for key in REQUIRED:
        if key not in data:
            raise err(f"missing required key '{key}'")
    for key in data:
        if key not in KNOWN_KEYS:
            raise err(f"unknown key '{key}' (known: {', '.join(sorted(KNOWN_KEYS))})", key)
    rid = data["id"]
    if not isinstance(rid, str) or not _ID.match(rid):
        raise err("id must be kebab-case with a family prefix, e.g. 'nccl-socket-no-interface'", "id")
    if rid != p.stem:
        raise err(f"id '{rid}' must equal the file name stem '{p.stem}'", "id")
    fam = family if family is not None else p.parent.name
    if fam and not rid.startswith(fam + "-"):
        raise err(f"id '{rid}' must start with its family folder name '{fam}-'", "id")
    if data["taxonomy"] not in TAXONOMY_IDS:
        raise err(f"taxonomy '{data['taxonomy']}' is not a TAXONOMY.md id ({', '.join(TAXONOMY_IDS)})", "taxonomy")
    if data["role"] not in ROLES:
        raise err(f"role must be one of {', '.join(ROLES)}", "role")
    if data["status"] not in STATUSES:
        raise err(f"status must be one of {', '.join(STATUSES)}", "status")
    if data["severity"] not in SEVERITIES:
        raise err(f"severity must be one of {', '.join(SEVERITIES)}", "severity")
    conf = data["confidence"]
    if not isinstance(conf, (int, float)) or isinstance(conf, bool) or not 0 < conf <= 1:
        raise err("confidence must be a number in (0, 1]", "confidence")
    for key in ("title", "description"):
        if not isinstance(data[key], str) or not data[key].strip():
            raise err(f"'{key}' must be a non-empty string", key)
    fps = data["falsepositives"]
    if not isinstance(fps, list) or not fps or not all(isinstance(x, str) and x.strip() for x in fps):
        raise err("falsepositives must be a non-empty list of strings (write \"unknown\" if none are known)",
                  "falsepositives")
    refs = data["references"]
    if not isinstance(refs, list) or not refs or not all(isinstance(x, str) and x.startswith("http") for x in refs):
        raise err("references must be a non-empty list of http(s) permalinks", "references")
    explains = data.get("explains", [])
    if not isinstance(explains, list) or not all(isinstance(x, str) for x in explains):
        raise err("explains must be a list of rule ids or taxonomy ids", "explains")
    fix = data["fix"]
    if not isinstance(fix, dict) or not isinstance(fix.get("summary"), str) or not fix["summary"].strip():
        raise err("fix must be a table with a non-empty 'summary'", "fix")
    for k in fix:
        if k not in ("summary", "bound_summary", "env", "commands"):
            raise err(f"unknown fix key '{k}' (summary, bound_summary, env, commands)", "fix")
    bs = fix.get("bound_summary", "")
    if not (isinstance(bs, str) or (isinstance(bs, list) and all(isinstance(x, str) for x in bs))):
        raise err("fix.bound_summary is a template string or a list of them (tried in order)", "fix")
    if not isinstance(fix.get("env", {}), dict) or not all(isinstance(v, str) for v in fix.get("env", {}).values()):
        raise err("fix.env must be a table of strings", "fix")
    if not isinstance(fix.get("commands", []), list) or not all(isinstance(c, str) for c in fix.get("commands", [])):
        raise err("fix.commands must be a list of strings", "fix")
    match = _parse_match(data["match"], text, spath, lines)
    examples = _parse_examples(data.get("example", []), text, spath, lines, data["status"])
    replaced_by = data.get("replaced_by")
    if data["status"] == "deprecated" and not replaced_by:
        raise err("a deprecated rule names its successor in 'replaced_by'", "status")
    return Rule(
        id=rid, taxonomy=data["taxonomy"], title=data["title"].strip(), status=data["status"], role=data["role"],
        severity=data["severity"], confidence=float(conf), description=" ".join(data["description"].split()),
        match=match, fix={"summary": fix["summary"].strip(), "bound_summary": fix.get("bound_summary", ""),
                          "env": dict(fix.get("env", {})), "commands": list(fix.get("commands", []))},
        falsepositives=tuple(fps), references=tuple(refs), explains=tuple(explains), examples=examples,
        path=spath, family=fam, replaced_by=replaced_by, lines=lines,
    )


def _parse_match(m: Any, text: str, path: str, lines: dict[str, int]) -> MatchSpec:
    base = lines.get("match", 1)
    if not isinstance(m, dict):
        raise RuleError("match must be a table", path=path, line=base)
    for k in m:
        if k not in ("all", "any", "none", "within", "group_by", "ordered", "predicates", "none_scope"):
            raise RuleError(f"unknown match key '{k}' (all, any, none, within, group_by, ordered, predicates, "
                            "none_scope)",
                            path=path, line=_line_after(text, base, k))
    out: dict[str, tuple[Selector, ...]] = {}
    for part in ("all", "any", "none"):
        sels = m.get(part, [])
        if not isinstance(sels, list):
            raise RuleError(f"match.{part} must be a list of selector tables", path=path, line=base)
        compiled = []
        for i, sel in enumerate(sels):
            at = _nth_line(text, rf"\s*\[\[\s*match\.{part}\s*\]\]", i)
            if at == 1:
                at = lines.get(f"match.{part}", base)
            if not isinstance(sel, dict):
                raise RuleError(f"match.{part}[{i}] must be a table", path=path, line=at)
            try:
                compiled.append(compile_selector(sel, f"{part}[{i}]"))
            except ValueError as exc:
                key = str(getattr(exc, "key", "") or "")
                raise RuleError(f"match.{part}[{i}]: {exc}", path=path,
                                line=_line_after(text, at, key) if key else at) from exc
        out[part] = tuple(compiled)
    preds: list[tuple[str, dict[str, Any]]] = []
    for p in m.get("predicates", []):
        if isinstance(p, str):
            name, args = p, {}
        elif isinstance(p, dict) and isinstance(p.get("name"), str):
            name, args = p["name"], {k: v for k, v in p.items() if k != "name"}
        else:
            raise RuleError("predicates must be names or tables with 'name'", path=path,
                            line=_line_after(text, base, "predicates"))
        if name not in PREDICATES:
            raise RuleError(f"unknown predicate '{name}' (known: {', '.join(sorted(PREDICATES))})", path=path,
                            line=_line_after(text, base, "predicates"))
        preds.append((name, args))
    if not out["all"] and not out["any"] and not preds:
        raise RuleError("match needs at least one 'all' or 'any' selector or a predicate", path=path, line=base)
    within = m.get("within")
    if within is not None and (not isinstance(within, (int, float)) or within <= 0):
        raise RuleError("within is a positive number of seconds", path=path, line=_line_after(text, base, "within"))
    group_by = m.get("group_by", "job")
    if group_by not in GROUP_BY:
        raise RuleError(f"group_by must be one of {', '.join(GROUP_BY)}", path=path,
                        line=_line_after(text, base, "group_by"))
    ordered = m.get("ordered", False)
    if not isinstance(ordered, bool):
        raise RuleError("ordered is true or false", path=path, line=_line_after(text, base, "ordered"))
    none_scope = m.get("none_scope", "job")
    if none_scope not in ("job", "rank"):
        raise RuleError("none_scope is \"job\" or \"rank\"", path=path, line=_line_after(text, base, "none_scope"))
    return MatchSpec(all=out["all"], any=out["any"], none=out["none"], within=float(within) if within else None,
                     group_by=group_by, ordered=ordered, predicates=tuple(preds), none_scope=none_scope)


def _parse_examples(exs: Any, text: str, path: str, lines: dict[str, int], status: str) -> tuple[Example, ...]:
    if not isinstance(exs, list):
        raise RuleError("example must be an array of tables ([[example]])", path=path, line=lines.get("example", 1))
    out = []
    for i, ex in enumerate(exs):
        at = _nth_line(text, r"\s*\[\[\s*example\s*\]\]", i)
        if not isinstance(ex, dict) or ex.get("expect") not in ("match", "no-match") or not isinstance(ex.get("log"), str):
            raise RuleError("each [[example]] needs expect = \"match\"|\"no-match\" and log = '''...'''", path=path,
                            line=at)
        dumps = ex.get("dumps", [])
        if not isinstance(dumps, list) or not all(isinstance(d, str) for d in dumps):
            raise RuleError("an example's dumps = [...] holds Flight Recorder dumps as JSON strings", path=path, line=at)
        out.append(Example(expect=ex["expect"], log=ex["log"], line=at, name=str(ex.get("name", "")),
                           dumps=tuple(dumps)))
    if status != "deprecated":
        kinds = {e.expect for e in out}
        if kinds != {"match", "no-match"}:
            raise RuleError("a rule needs at least one [[example]] expect=\"match\" and one expect=\"no-match\"",
                            path=path, line=lines.get("example", lines.get("id", 1)))
    return tuple(out)


def rule_files(root: str | os.PathLike[str]) -> list[Path]:
    """Rule files under a folder, sorted (``<family>/<id>.toml``; a flat folder is accepted too)."""
    r = Path(root)
    if r.is_file():
        return [r]
    return sorted(p for p in r.rglob("*.toml") if not p.name.startswith("."))


def load_rules(extra_dirs: list[str] | tuple[str, ...] = (), builtin: bool = True,
               env_dirs: str | None = None) -> list["Rule"]:
    """Built-in rules, then ``extra_dirs``, then the ``os.pathsep`` list ``env_dirs`` (NCCL_ANALYZER_RULES, read by
    the caller). A later rule with the same id replaces an earlier one (local overrides).

    Raises:
        RuleError: the first invalid rule file (``path:line``), or an ``explains`` naming nothing known.
    """
    from ..resources import rules_dir

    dirs: list[str] = []
    if builtin:
        dirs.append(str(rules_dir()))
    dirs.extend(str(d) for d in extra_dirs)
    if env_dirs:
        dirs.extend(d for d in env_dirs.split(os.pathsep) if d)
    rules: dict[str, Rule] = {}
    for d in dirs:
        if not os.path.exists(d):
            raise RuleError("rules folder does not exist", path=d)
        for f in rule_files(d):
            family = f.parent.name if f.parent != Path(d) else None
            rule = parse_rule(f, family=family)
            rules[rule.id] = rule
    out = sorted(rules.values(), key=lambda r: r.id)
    known = set(rules) | set(TAXONOMY_IDS)
    for r in out:
        for x in r.explains:
            if x not in known:
                raise RuleError(f"explains names '{x}', which is neither a rule id nor a taxonomy id", path=r.path,
                                line=r.line_of("explains"))
    return out


def placeholders(s: str) -> list[str]:
    """``{name}`` placeholders in a fix template."""
    return _PLACEHOLDER.findall(s)
