"""The exclusion check of a labeled set of public logs (issue 9): no thread of fixtures/<set>/ is used anywhere else.

Collects every GitHub issue/PR thread (and discuss.pytorch.org / forum URL) named by:
  * the "source" of every fixtures/**/label.json outside the set (every fixtures/blind*/ set included: of those,
    only label.json is read, never a log), and
  * any text file under fixtures/, tests/, docs/, rules/, messages/, nccl_analyzer/, benchmarks/, README.md
    and /work/shared/fixtures,
then fails if one of the set's label.json "source" names one of them. Threads compare as (owner/repo, number), so
issues/N and pull/N are one thread, and renamed repositories (microsoft/DeepSpeed -> deepspeedai/DeepSpeed)
compare equal. Also fails on two cases of the set from one thread. Each set's own check_exclusions.py calls it.
"""
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path("/work/shared/fixtures")
RENAMED = {"microsoft/deepspeed": "deepspeedai/deepspeed", "pytorchlightning/pytorch-lightning": "lightning-ai/pytorch-lightning",
           "lightning-ai/lightning": "lightning-ai/pytorch-lightning", "pytorchlightning/lightning": "lightning-ai/pytorch-lightning",
           "microsoft/megatron-deepspeed": "deepspeedai/megatron-deepspeed", "openai/triton": "triton-lang/triton",
           "vllm-project/vllm": "vllm-project/vllm", "hpcaitech/colossalai": "hpcaitech/colossalai"}
GH = re.compile(r"github\.com/([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)/(?:issues|pull|discussions)/(\d+)")
SHORT = re.compile(r"\b(NVIDIA/nccl(?:-tests)?|pytorch/pytorch|horovod/horovod)#(\d+)")
FORUM = re.compile(r"(?:discuss\.pytorch\.org|forums\.developer\.nvidia\.com|stackoverflow\.com)/[^\s\"')\]>]+")


def key_of(repo: str, num: str) -> tuple[str, int]:
    r = repo.lower()
    return RENAMED.get(r, r), int(num)


def keys_in(text: str) -> set:
    ks = {key_of(r, n) for r, n in GH.findall(text)} | {key_of(r, n) for r, n in SHORT.findall(text)}
    for m in FORUM.findall(text):
        t = re.search(r"/t/[^/]+/(\d+)", m) or re.search(r"/questions/(\d+)", m)
        ks.add(("forum:" + m.split("/")[0], int(t.group(1))) if t else ("url", m.rstrip("/.")))
    return ks


def used_elsewhere(root: Path, mine: str) -> dict:
    used: dict = {}
    roots = [root / d for d in ("fixtures", "tests", "docs", "rules", "messages", "nccl_analyzer", "benchmarks")]
    files = [p for r in roots if r.exists() for p in r.rglob("*") if p.is_file()] + [root / "README.md"]
    files += [p for p in SHARED.rglob("*") if p.is_file()] if SHARED.exists() else []
    for p in files:
        rel = p.relative_to(root).parts if p.is_relative_to(root) else ()
        if rel[:2] == ("fixtures", mine):
            continue  # this set itself
        if rel and rel[0] == "fixtures" and len(rel) > 1 and rel[1].startswith("blind") and p.name != "label.json":
            continue  # held-out logs: not opened, only their label.json
        try:
            text = p.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for k in keys_in(text):
            used.setdefault(k, str(p))
    return used


def main(mine: str, argv: list[str], masked: tuple[str, ...] = ()) -> int:
    """Check fixtures/<mine>/*/label.json; argv: [project_root]. A hit inside a ``masked`` set is not named."""
    root = Path(argv[0]) if argv else ROOT
    used = used_elsewhere(root, mine)
    bad, seen = 0, {}
    cases = sorted((root / "fixtures" / mine).glob("*/label.json"))
    for lab in cases:
        src = json.loads(lab.read_text())["source"]
        ks = keys_in(src)
        if not ks:
            print(f"NO THREAD KEY  {lab.parent.name}: {src}"); bad += 1
        for k in ks:
            if k in used:
                where = "a held-out set" if any(f"/fixtures/{m}/" in used[k] for m in masked) else used[k]
                print(f"ALREADY USED   {lab.parent.name}: {src}  (in {where})"); bad += 1
            if k in seen:
                print(f"SAME THREAD    {lab.parent.name} and {seen[k]}"); bad += 1
            seen[k] = lab.parent.name
    print(f"{len(cases)} cases checked against {len(used)} threads used elsewhere: {'OK' if not bad else f'{bad} problems'}")
    return 1 if bad else 0
