"""Review fix 8 (review13.md, session 13): srun's "Job step aborted: Waiting up to N seconds" follows the failure it
reacts to; it is a consequence line, not a cause (messages/mpi_runtime.toml srun-step-aborted)."""
from __future__ import annotations

from nccl_analyzer.analysis import analyze_text

_ABORT = "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n"


def test_srun_step_aborted_alone_is_no_failure_of_its_own():
    d = analyze_text("step 10 loss 2.1\n" + _ABORT)
    assert d.root_cause is None or d.root_cause.id != "peer_exit"


def test_srun_step_aborted_is_not_chosen_over_the_cancel_that_caused_it():
    d = analyze_text("step 10 loss 2.1\n" + _ABORT
                     + "slurmstepd: error: *** STEP 1234.0 ON node1 CANCELLED AT 2026-12-01T10:00:00 ***\n")
    assert d.root_cause is not None
    assert [e.line for e in d.root_cause.evidence] == [3]


def test_srun_node_failure_stays_peer_exit():
    d = analyze_text("srun: error: Node failure on node7\n" + _ABORT)
    assert d.root_cause.id == "peer_exit"
    assert [e.line for e in d.root_cause.evidence] == [1]
