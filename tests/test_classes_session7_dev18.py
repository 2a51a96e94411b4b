"""Session 7 round 2 (dev18)'s classes (docs/classes-session7.md, "Round 2 (dev18)"). Each log is written here after
what torchelastic / CPython / PyTorch Lightning print, not copied from a fixture."""
from __future__ import annotations

from nccl_analyzer.analysis import analyze
from nccl_analyzer.paste.boundary import _unglue

# -- class 1: a traceback header flattened mid-line after the record before it --------------------------------------
# torchelastic's agent logs the failed worker through Python logging's default format ("LEVEL:logger:msg"), then
# torchrun's own traceback follows; a paste that lost its line breaks runs them into one line.
RECORD = ("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 1 (pid: 88412) of "
          "binary: /home/u/venv/bin/python3")
FLAT_TB = ('Traceback (most recent call last): File "/home/u/venv/bin/torchrun", line 8, in <module> sys.exit(main()) '
           'File "/home/u/venv/lib/python3.10/site-packages/torch/distributed/run.py", line 794, in main run(args) '
           'File "/home/u/venv/lib/python3.10/site-packages/torch/distributed/launcher/api.py", line 250, in '
           'launch_agent raise ChildFailedError( torch.distributed.elastic.multiprocessing.errors.ChildFailedError:')


def _diag(tmp_path, text: str):
    p = tmp_path / "issue.txt"
    p.write_text(text)
    return analyze([str(p)])


def test_a_record_flattened_before_a_traceback_is_read(tmp_path):
    d = _diag(tmp_path, "The job dies after a few minutes:\n\n" + RECORD + " " + FLAT_TB + "\n\nAny idea?\n")
    assert d.root_cause is not None and d.root_cause.id == "host_oom"
    # the record is the evidence, on the line of the file it is on (the split keeps line numbers)
    assert any(e.line == 3 and "exitcode: -9" in e.text for e in d.root_cause.evidence)


def test_a_flattened_record_pasted_as_a_markdown_link_text_is_read(tmp_path):
    d = _diag(tmp_path, "[" + RECORD + " " + FLAT_TB + "](https://www.google.com/search?q=torch\n")
    assert d.root_cause is not None and d.root_cause.id == "host_oom"


def test_the_split_keeps_the_text_before_the_header():
    assert _unglue(RECORD + " " + FLAT_TB) == [RECORD + " ", FLAT_TB]


def test_a_header_that_ends_its_line_or_follows_a_prefix_is_no_flattened_paste():
    # Python ends the header's line: text before it alone is another rank's unfinished output (the parser's case)
    assert _unglue("step 4 loss=2.31 Traceback (most recent call last):") is None
    # torch's DataLoader re-raise and a rank's own prefix are parts of the traceback's line
    assert _unglue("Original Traceback (most recent call last): File \"w.py\", line 3") is None
    assert _unglue("[rank0]: Traceback (most recent call last): File \"w.py\", line 3") is None


# -- class 2: one global rank started by two processes (PyTorch Lightning's start-up lines) ------------------------
# Two nodes under srun without --ntasks-per-node: each believes it is node 0, so ranks 0-1 start twice and 2-3 never.
TWO_NODE_ZERO = """\
GPU available: True (cuda), used: True
TPU available: False, using: 0 TPU cores
GPU available: True (cuda), used: True
TPU available: False, using: 0 TPU cores
Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/4
Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/4
Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/4
Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/4
"""


def test_a_global_rank_started_twice_with_ranks_missing_is_the_launch(tmp_path):
    d = _diag(tmp_path, TWO_NODE_ZERO)
    assert d.root_cause is not None and d.root_cause.id == "other"
    assert d.root_cause.rule == "launcher-rank-started-twice"
    assert "0-1" in d.root_cause.title and "2-3" in d.root_cause.title


def test_lightnings_start_up_lines_of_a_healthy_job_are_no_failure(tmp_path):
    ok = "".join(f"Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/4\n" for r in (2, 0, 3, 1))
    ok += "distributed_backend=nccl\nAll distributed processes registered. Starting with 4 processes\n"
    assert _diag(tmp_path, ok).root_cause is None
    # the pre-1.6 wording, each rank once, then the node's training output: one node's part of a two-node job
    part = "".join(f"initializing ddp: GLOBAL_RANK: {r}, MEMBER: {r + 1}/8\n" for r in range(4))
    assert _diag(tmp_path, part + "Epoch 0: 10%| 10/100 loss=2.31\n").root_cause is None
    # the same lines and nothing after them: since session 15 a low-confidence hang (the members that never joined),
    # as an NCCL init log that stops is (hang-init-log-ends); docs/classes-session15.md
    d = _diag(tmp_path, part)
    assert d.root_cause is not None and d.root_cause.rule == "hang-members-never-joined"
    assert d.root_cause.confidence <= 0.2
