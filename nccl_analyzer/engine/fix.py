"""A hit's texts: titles and descriptions with their placeholders filled, the fix tailored with the bound values."""
from __future__ import annotations

import re
from typing import Any

from ..model import Fix
from .loader import Rule, placeholders


def render_title(s: str, bound: dict[str, Any]) -> str:
    """A title with its placeholders filled. An optional part (``[ on rank {rank}]``, or a parenthesised one,
    ``"... in use (port {port})"``) whose placeholder the log did not bind is dropped; any other unbound one
    reads ``?``."""
    out = render_template(s, bound)
    if out:
        return out
    s = _optional_parts(s, bound)
    def unbound(m: re.Match) -> bool:
        return any(bound.get(n) in (None, "") for n in placeholders(m.group(0)))
    s = re.sub(r"\s*\([^()]*\{\w+\}[^()]*\)", lambda m: "" if unbound(m) else m.group(0), s)
    return re.sub(r"\{(\w+)\}", lambda m: str(bound[m.group(1)]) if bound.get(m.group(1)) not in (None, "") else "?", s)


#: ``[ ... {name} ... ]``: a template part that only reads when the log gave every value it names.
_OPTIONAL = re.compile(r"\[([^\[\]]*\{\w+\}[^\[\]]*)\]")


def _optional_parts(s: str, bound: dict[str, Any]) -> str:
    """Square-bracketed parts that hold a placeholder: kept (without the brackets) when all their placeholders
    are bound, dropped otherwise. Brackets without a placeholder are literal text."""
    return _OPTIONAL.sub(lambda m: "" if any(bound.get(n) in (None, "") for n in placeholders(m.group(1)))
                         else m.group(1), s)


def render_template(s: str, bound: dict[str, Any]) -> str:
    """``{name}`` -> bound value; "" when a placeholder has no value (the caller keeps its generic text).

    A part in square brackets that names a placeholder is optional: it is left out when the log did not give
    its value (``"Rank[ {rank}] ran out"`` reads ``"Rank ran out"`` without a rank)."""
    s = _optional_parts(s, bound)
    names = placeholders(s)
    if not names:
        return s
    if any(bound.get(n) in (None, "") for n in names):
        return ""
    return re.sub(r"\{(\w+)\}", lambda m: str(bound[m.group(1)]), s)


#: Environment variables torch renamed: old name -> (new name, first torch version that reads the new one).
RENAMED_ENV = {"TORCH_NCCL_TRACE_BUFFER_SIZE": ("TORCH_FR_BUFFER_SIZE", (2, 11))}


def _version_tuple(v: str | None) -> tuple[int, ...] | None:
    m = re.match(r"(\d+)\.(\d+)", v or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def make_fix(rule: Rule, bound: dict[str, Any], torch_version: str | None = None) -> Fix:
    """The rule's fix, tailored with the bound values where the rule gives a ``bound_summary``.

    Args:
        rule: the matched rule.
        bound: values the log gave (placeholders).
        torch_version: the job's torch version when the log shows it: a renamed variable (``RENAMED_ENV``)
            is given under the name that torch reads; unknown, under both names.
    """
    fx = rule.fix
    templates = fx.get("bound_summary") or []
    if isinstance(templates, str):
        templates = [templates]
    summary = next((s for s in (render_template(t, bound) for t in templates) if s), "") \
        or render_template(fx["summary"], bound) \
        or re.sub(r"\{(\w+)\}", r"<\1>", _optional_parts(fx["summary"], bound))
    # An env value that needs a value the log does not show is left out: scripts (and --verify-fix) apply
    # fix.env as it is, so a placeholder there would be worse than nothing; the summary says what to set.
    env = {k: r for k, r in ((k, render_template(v, bound)) for k, v in fx.get("env", {}).items()) if r}
    # Likewise a command that still needs a value the log does not show would not run as printed: left out
    # (a rule writes ``cmd[ | grep {x}]`` to keep the command without the value).
    cmds = [c for c in (render_template(c, bound) for c in fx.get("commands", [])) if c]
    have = _version_tuple(torch_version)
    for old, (new, since) in RENAMED_ENV.items():
        if old not in env:
            continue
        if have is not None and have < since:
            continue
        value = env.pop(old)
        env[new] = value
        if have is None:  # older torch reads only the old name, newer only the new one: set both
            env[old] = value
        said = [f"{new}={value}" + (f" ({old}={value} before torch {since[0]}.{since[1]})" if have is None else "")]
        summary = re.sub(rf"\b{old}(?:={re.escape(value)}\b)?", lambda m: said.pop() if said else new, summary)
        cmds = [c.replace(old, new) for c in cmds]
    return Fix(summary=summary, env=env, commands=tuple(cmds))
