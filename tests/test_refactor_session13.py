"""Session 13 review follow-ups (ref13): the shared parsers and data-driven kinds keep every result, and the forms
they now share are read alike (docs/review-session13.md)."""
from __future__ import annotations

import pytest

from nccl_analyzer.analysis import analyze_text
from nccl_analyzer.engine import named


# -- 1. one CollectiveFingerPrint field parser (ProcessGroupWrapper.cpp operator<<) --------------------------------
@pytest.mark.parametrize("text, want", [
    # with tensors: ", " between the fields
    ("SequenceNumber=6, OpType=ALLREDUCE, TensorShape=[4, 32], TensorDtypes=Float, TensorDeviceTypes=TensorOptions("
     "dtype=float (default), device=cuda:0)", {"SequenceNumber": "6", "OpType": "ALLREDUCE", "TensorShape": "[4, 32]",
                                              "TensorDtypes": "Float", "TensorDeviceTypes": "TensorOptions"}),
    # without tensors (barrier, uneven ops): no separator after the number
    ("SequenceNumber=4OpType=BARRIER)", {"SequenceNumber": "4", "OpType": "BARRIER"}),
    # only the first fingerprint of the text
    ("SequenceNumber=1OpType=BARRIER), but Rank 2 is running collective: CollectiveFingerPrint(SequenceNumber=0, "
     "OpType=ALLREDUCE)", {"SequenceNumber": "1", "OpType": "BARRIER"}),
])
def test_fingerprint_fields_both_printed_forms(text, want):
    assert named._fp_fields(text) == want


def _mismatch(rank: int, mine: str, other: int, theirs: str) -> str:
    return (f"[rank{rank}]: RuntimeError: Detected mismatch between collectives on ranks. Rank {rank} is running "
            f"collective: CollectiveFingerPrint({mine}), but Rank {other} is running collective: "
            f"CollectiveFingerPrint({theirs}).")


BARRIER = "SequenceNumber=4OpType=BARRIER"
ALLREDUCE = ("SequenceNumber=4, OpType=ALLREDUCE, TensorShape=[4], TensorDtypes=Float, TensorDeviceTypes="
             "TensorOptions(dtype=float (default), device=cuda:2)")


def test_mismatch_messages_read_a_tensorless_fingerprint_too():
    # ranks 0, 1, 3 run a barrier (printed without a separator), rank 2 an all_reduce: each reports the mismatch
    # it saw; the odd one out is rank 2 only when the barrier fingerprints are read as well
    lines = [_mismatch(r, BARRIER, 2, ALLREDUCE) for r in (0, 1, 3)] + [_mismatch(2, ALLREDUCE, 0, BARRIER)]
    d = analyze_text("\n".join(lines) + "\n")
    assert d.root_cause is not None and d.root_cause.id == "collective_mismatch"
    assert tuple(d.root_cause.ranks) == (2,)
