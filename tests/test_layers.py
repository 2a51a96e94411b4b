"""Architecture rules (STYLE.md 1-4), checked on the import statements of every module."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "nccl_analyzer"
MODULES = sorted(p for p in PKG.rglob("*.py"))


def _name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Absolute names of everything a module imports (relative imports resolved), lazy imports included."""
    me = _name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
    return out


PIPELINE = ("model", "errors", "resources", "sources", "classify", "parse", "job", "engine", "diagnose", "analysis",
            "parallel", "export", "evaluate", "render", "redact", "ranks")


def _in(name: str, groups: tuple[str, ...]) -> bool:
    return any(name == f"nccl_analyzer.{g}" or name.startswith(f"nccl_analyzer.{g}.") for g in groups)


@pytest.mark.parametrize("path", MODULES, ids=[_name(p) for p in MODULES])
def test_layering(path):
    me, deps = _name(path), _imports(path)
    if me != "nccl_analyzer.__main__":
        assert "nccl_analyzer.cli" not in deps, "nothing imports the CLI"
    if not _in(me, ("reproduce",)):
        assert not any(d == "torch" or d.startswith("torch.") for d in deps), "only reproduce/ may import torch"
    if _in(me, PIPELINE):
        bad = [d for d in deps if _in(d, ("reproduce", "live", "launch"))]
        assert not bad, f"the analysis pipeline does not depend on {bad}"
    if me == "nccl_analyzer.model":
        assert not [d for d in deps if d.startswith("nccl_analyzer")], "model.py imports nothing of ours"
    if _in(me, ("render",)):
        bad = [d for d in deps if _in(d, ("analysis", "job", "engine", "diagnose", "parse", "classify"))]
        assert not bad, f"renderers read the Diagnosis, they do not recompute: {bad}"
