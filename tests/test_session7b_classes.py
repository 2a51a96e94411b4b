"""Session 7b's classes (docs/classes-session7b.md): the misses of fixtures/blind7h and of the older used sets
(blind7, blind5h, blind5, blind2, public6, healthy7). Each log is written here after what NCCL / PyTorch / vLLM /
Ray / the log viewers print, not copied from a fixture."""
from __future__ import annotations

import pytest

from nccl_analyzer.analysis import analyze_text
from nccl_analyzer.engine.loader import load_rules

RULES = load_rules()


def _rc(log: str):
    d = analyze_text(log, rules=RULES)
    return d.root_cause


# -- vLLM's multiproc executor prefix "(VllmWorker rank=N pid=N) " ------------------------------------------------
VLLM_V1_OOM = """\
(VllmWorker rank=3 pid=5121)   File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2760, in all_reduce
(VllmWorker rank=3 pid=5121)     work = group.allreduce([tensor], opts)
(VllmWorker rank=3 pid=5121) torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5
(VllmWorker rank=3 pid=5121) ncclUnhandledCudaError: Call to CUDA function failed.
(VllmWorker rank=3 pid=5121) Last error:
(VllmWorker rank=3 pid=5121) Cuda failure 'out of memory'
"""


def test_vllm_v1_worker_prefix_is_stripped_like_rays():
    """vLLM v1's MultiprocExecutor prefixes a worker's output with "(VllmWorker rank=N pid=N) " (no comma, unlike
    SkyPilot's "(head, rank=0, pid=N)"). A paste that starts mid-traceback has no header to
    group the block by: only with the prefix stripped is the "Last error:" block read the "Last error:" block is read and the OOM is named."""
    rc = _rc(VLLM_V1_OOM)
    assert rc is not None and rc.id == "cuda_oom"
