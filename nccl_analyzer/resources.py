"""The one place that knows where grammars, rules and report templates live (checkout or installed wheel)."""
from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path


@lru_cache(maxsize=None)
def data_root() -> Path:
    """Folder holding ``grammars/``, ``rules/`` and ``reports/``.

    In an installed wheel they are shipped as ``nccl_analyzer/_data/`` (hatchling force-include); in a
    source checkout they sit at the repository's top level, next to the package.
    """
    packaged = Path(str(resources.files("nccl_analyzer"))) / "_data"
    if (packaged / "grammars").is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent


def grammar_dir() -> Path:
    return data_root() / "grammars"


def read_grammar(name: str) -> str:
    """Text of ``grammars/<name>`` (e.g. ``"nccl.lark"``)."""
    return (grammar_dir() / name).read_text(encoding="utf-8")


def rules_dir() -> Path:
    return data_root() / "rules"


def reports_dir() -> Path:
    return data_root() / "reports"
