"""The one place that knows where grammars, rules and report templates live (checkout or installed wheel)."""
from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path


@lru_cache(maxsize=None)
def data_root() -> Path:
    """Folder holding ``grammars/``, ``rules/``, ``reports/`` and ``messages/``.

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


def messages_dir() -> Path:
    """The message classification tables (``messages/*.toml``: what each NCCL WARN / torch / error line means)."""
    return data_root() / "messages"


def parser_cache(name: str) -> str | bool:
    """Where Lark may keep the built LALR tables of grammar ``name`` between runs, or False.

    Building the three parsers takes ~0.8 s, loading them ~15 ms. Lark's cache file is a pickle, so it lives
    only in a private per-user folder (``~/.cache/nccl-analyzer``, mode 0700, owned by us), never in a shared
    place such as /tmp, and an existing file is used only if we own it and nobody else may write it. Lark
    checks a hash of the grammar text, options and its own version stored in the file and rebuilds (and
    rewrites) on any mismatch or damage.

    The file name carries a hash of the grammar text (``grammars/<name>.lark``) and of the grammars folder's path
    (Lark's stored hash covers ``import_paths``, which name that folder: measured 2.4 s of CPU a run, main process,
    where two checkouts of the same grammar alternated): two versions of the tool (two
    checkouts, two virtual environments) each keep their own tables instead of rebuilding each other's on every
    run (measured: 2-2.5 s of CPU a run where two versions alternated). At most ``_CACHE_KEEP`` files per grammar
    are kept, the least recently written removed first.
    """
    import hashlib
    import os
    import stat
    import sys

    try:
        import lark

        base = Path.home() / ".cache" / "nccl-analyzer"
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = base.stat()
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            return False
        try:
            # the folder too: Lark's own check hashes its options, and nccl.lark's ``import_paths`` name this
            # checkout's grammars folder, so two checkouts of one grammar text would rebuild each other's tables
            key = read_grammar(f"{name}.lark") + "\0" + str(grammar_dir().resolve())
            digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]
        except OSError:
            digest = "x"
        path = base / f"{name}-{digest}-lark{lark.__version__}-py{sys.version_info[0]}{sys.version_info[1]}.cache"
        try:
            fst = path.stat()
        except FileNotFoundError:
            _prune(base, f"{name}-", _CACHE_KEEP - 1)  # room for the one Lark is about to write
            return str(path)
        if fst.st_uid != os.getuid() or fst.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or not stat.S_ISREG(fst.st_mode):
            return False
        return str(path)
    except (OSError, RuntimeError):  # no home, read-only home, ...: build without a cache
        return False


#: Cache files kept per grammar (one per version of the grammar text and checkout: ~0.1 MiB each).
_CACHE_KEEP = 24


def _prune(base: Path, prefix: str, keep: int) -> None:
    """Remove all but the ``keep`` most recently written ``prefix*.cache`` files of ``base`` (our private folder)."""
    try:
        files = sorted((f for f in base.iterdir() if f.name.startswith(prefix) and f.name.endswith(".cache")),
                       key=lambda f: f.stat().st_mtime, reverse=True)
        for f in files[keep:]:
            f.unlink()
    except OSError:
        pass
