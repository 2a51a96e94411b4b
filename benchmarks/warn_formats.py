"""Write messages/nccl_warn_formats.json: the WARN formats of every NCCL release (2.3.5 .. 2.30.7) and the source
files that print each, so that a WARN pasted without its prefix (the message alone, "NET/IB : Got completion from
peer ... vendor err 129", "Error while creating shared memory segment ...") is still read as that WARN
(nccl_analyzer/parse/bare_warn.py). Generated from fixtures/reference/nccl_log_formats_history.jsonl, never by hand.

Kept: formats with at least MIN_LITERAL characters of their own text (a short format, "Error : %s", says too little
to be NCCL's). Only the first line of a format with a newline (its continuation lines are separate lines). Two
readers: parse/bare_warn.py (of these, the formats that begin with a word and have 16+ letters) and
messages.warn_sources (which file prints a WARN text that arrives without its ``file:line``).

    python benchmarks/warn_formats.py            # print the counts
    python benchmarks/warn_formats.py --write    # rewrite messages/nccl_warn_formats.json
    python benchmarks/warn_formats.py --check    # exit 1 when the file is stale (tests/test_bare_warn.py)
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HISTORY = ROOT / "fixtures" / "reference" / "nccl_log_formats_history.jsonl"
OUT = ROOT / "messages" / "nccl_warn_formats.json"
MIN_LITERAL = 12
_CONV = re.compile(r"%[-+ #0]*(?:\*|\d+)?(?:\.(?:\*|\d+))?(?:hh|h|ll|l|z|j|t|L|q)?[diouxXeEfgGcspnm]|\{name\}")


def build() -> dict:
    formats: dict[str, set[str]] = {}
    with open(HISTORY, encoding="utf-8") as fh:
        for row in map(json.loads, fh):
            if row.get("level") != "WARN":
                continue
            fmt = row["fmt"].split("\n", 1)[0].strip()
            if len("".join(_CONV.sub(" ", fmt.replace("%%", "%")).split())) < MIN_LITERAL:
                continue
            formats.setdefault(fmt, set()).update(f.removeprefix("src/") for f in row["files"])
    return {
        "_about": "NCCL WARN formats (first line), 2.3.5 .. 2.30.7, with the source files that print each; written by "
                  "benchmarks/warn_formats.py from fixtures/reference/nccl_log_formats_history.jsonl. Read by "
                  "nccl_analyzer/parse/bare_warn.py to recognise a WARN pasted without its prefix and by "
                  "messages.warn_sources to say which file prints a WARN text.",
        "formats": [[fmt, sorted(files)] for fmt, files in sorted(formats.items())],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    data = build()
    rows = ",\n".join(json.dumps(r, ensure_ascii=False) for r in data["formats"])
    text = f'{{"_about": {json.dumps(data["_about"])},\n"formats": [\n{rows}\n]}}\n'  # one format a line: diffs read
    if args.check:
        return 0 if OUT.exists() and OUT.read_text(encoding="utf-8") == text else 1
    if args.write:
        OUT.write_text(text, encoding="utf-8")
    print(f"{len(json.loads(text)['formats'])} WARN formats" + (f" -> {OUT.relative_to(ROOT)}" if args.write else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
