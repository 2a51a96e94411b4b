"""Where the per-rank state is: deep sizes of the analysis's parts after reading a whole log, one process.

    python benchmarks/state_size.py LOG [LOG ...]      # e.g. /tmp/nccl-bench-real-2.28-1000r.log and the 3000r one
    python benchmarks/state_size.py --detail LOG       # also: which attributes, slots and events hold the bytes
    python benchmarks/state_size.py --tracemalloc 25 LOG   # also: the 25 source lines that allocated most (slow)

For each log: reads it with ``Analyzer.run_source`` (workers=1, what ``analyze`` does for one file before
``finish``), then sizes, in this order, what each part holds that an earlier part does not (an object shared by
two parts counts once, for the first): parser state (``EventStream``s), job model (``JobBuilder``), fail-safe
ledger, rule-engine slots (``Matcher``), the rest of the analyzer. Modules, classes and functions are not
followed (the base of imports, Lark tables and rules is the same at every size). With two or more logs it prints
the slope, KiB per rank, between the first and the last (the ranks are read from the file name ``-<N>r.log``).
"""
from __future__ import annotations

import gc
import re
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nccl_analyzer.analysis import Analyzer  # noqa: E402
from nccl_analyzer.sources import expand_inputs  # noqa: E402

_SKIP = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.CodeType,
         re.Pattern)


def deep_size(root: object, seen: set[int]) -> int:
    """Bytes of ``root`` and everything it reaches that is not in ``seen`` (which grows)."""
    total = 0
    stack = [root]
    while stack:
        o = stack.pop()
        i = id(o)
        if i in seen or isinstance(o, _SKIP):
            continue
        seen.add(i)
        total += sys.getsizeof(o)
        stack.extend(gc.get_referents(o))
    return total


def read(path: str) -> Analyzer:
    a = Analyzer()
    src = expand_inputs([path])[0]
    a.add_sources([src])
    a.run_source(src)
    return a


def parts(path: str, detail: bool = False) -> dict[str, int]:
    a = read(path)
    if detail:
        print_detail(a, path)
    seen: set[int] = set()
    # the rules, their compiled tests and the kind index are the base: the same at every size
    deep_size(a.rules, seen)
    out = {
        "parser state": deep_size(a._streams, seen),
        "job model": deep_size(a.builder, seen),
        "fail-safe ledger": deep_size(a.ledger, seen),
        "rule engine": deep_size(a.matcher, seen),
        "analyzer rest": deep_size(a, seen),
    }
    out["total"] = sum(out.values())
    return out


def _attrs(o: object) -> dict[str, object]:
    names = getattr(o, "__slots__", None)
    if names is not None:
        return {n: getattr(o, n) for n in names if hasattr(o, n)}
    return dict(vars(o))


def print_detail(a: Analyzer, path: str, top: int = 14) -> None:
    """Where the bytes are: the job model's and the ledger's attributes, the rule engine's events and slots (each
    part counted as in ``parts``: what no earlier part holds)."""
    mib = 2 ** 20
    seen: set[int] = set()
    deep_size(a.rules, seen)
    deep_size(a._streams, seen)
    print(f"-- {Path(path).name}")
    for label, obj in (("job model", a.builder), ("fail-safe ledger", a.ledger)):
        sizes = sorted(((deep_size(v, seen), n) for n, v in _attrs(obj).items()), reverse=True)
        print(f"{label}: " + ", ".join(f"{n} {b / mib:.2f}" for b, n in sizes[:top] if b >= 4096) + " MiB")
    m = a.matcher
    held: dict[int, object] = {}
    for st in m._states:
        for sl in st.slots:
            for ev in sl.held:
                held[id(ev)] = ev
    kinds: dict[str, list[int]] = {}
    for ev in held.values():
        k = kinds.setdefault(type(ev).__name__ + " " + ev.kind, [0, 0])
        k[0] += 1
        k[1] += deep_size(ev, seen)
    n_ev = sum(k[0] for k in kinds.values())
    b_ev = sum(k[1] for k in kinds.values())
    print(f"rule engine events: {n_ev} distinct, {b_ev / mib:.2f} MiB; by kind: " + ", ".join(
        f"{k} {v[0]} / {v[1] / mib:.2f}" for k, v in sorted(kinds.items(), key=lambda x: -x[1][1])[:top]))
    slots = sorted(((deep_size(sl, seen), st.rule.id, sl.part, sl.index, len(sl.held), len(sl.kcount))
                    for st in m._states for sl in st.slots), reverse=True)
    print(f"rule engine slots (matches kept, keys): {sum(x[0] for x in slots) / mib:.2f} MiB; " + ", ".join(
        f"{r}/{p}{i} {n}, {k}: {b / mib:.2f}" for b, r, p, i, n, k in slots[:top] if n))


def top_lines(path: str, n: int) -> None:
    """The source lines that allocated the most of what is still held after reading ``path`` (tracemalloc)."""
    import tracemalloc

    tracemalloc.start()
    a = read(path)
    snap = tracemalloc.take_snapshot()
    tracemalloc.stop()
    stats = snap.statistics("lineno")
    print(f"-- {Path(path).name}: {sum(s.size for s in stats) / 2**20:.2f} MiB traced; top {n} lines")
    for s in stats[:n]:
        fr = s.traceback[0]
        print(f"{s.size / 2**20:8.2f} MiB {s.count:>9} blocks  {Path(fr.filename).name}:{fr.lineno}")
    del a


def ranks_of(path: str) -> int | None:
    m = re.search(r"-(\d+)r\.log$", path)
    return int(m.group(1)) if m else None


def main(argv: list[str]) -> int:
    detail = "--detail" in argv
    argv = [x for x in argv if x != "--detail"]
    lines = 0
    if argv[:1] == ["--tracemalloc"] and len(argv) > 1 and argv[1].isdigit():
        lines, argv = int(argv[1]), argv[2:]
    if not argv:
        print(__doc__)
        return 2
    if lines:
        for p in argv:
            top_lines(p, lines)
        return 0
    rows = [(p, parts(p, detail)) for p in argv]
    names = list(rows[0][1])
    print(f"{'part':<18}" + "".join(f"{Path(p).name[-14:]:>16}" for p, _ in rows) + "  KiB/rank")
    r0, r1 = ranks_of(rows[0][0]), ranks_of(rows[-1][0])
    for n in names:
        line = f"{n:<18}" + "".join(f"{r[n] / 2**20:>13.2f} MiB" for _, r in rows)
        if len(rows) > 1 and r0 and r1 and r1 != r0:
            line += f"  {(rows[-1][1][n] - rows[0][1][n]) / 1024 / (r1 - r0):8.2f}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
