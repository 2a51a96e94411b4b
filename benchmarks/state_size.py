"""Where the per-rank state is: deep sizes of the analysis's parts after reading a whole log, one process.

    python benchmarks/state_size.py LOG [LOG ...]      # e.g. /tmp/nccl-bench-real-2.28-1000r.log and the 3000r one

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


def parts(path: str) -> dict[str, int]:
    a = Analyzer()
    src = expand_inputs([path])[0]
    a.add_sources([src])
    a.run_source(src)
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


def ranks_of(path: str) -> int | None:
    m = re.search(r"-(\d+)r\.log$", path)
    return int(m.group(1)) if m else None


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    rows = [(p, parts(p)) for p in argv]
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
