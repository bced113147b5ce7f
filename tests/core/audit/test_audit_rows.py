"""The rows' fast constructors build ordinary frozen row objects, field for field."""

from __future__ import annotations

import dataclasses

import pytest

from coordinator_audit.core.audit.rows import (
    AssignmentRow,
    GenerationRow,
    RebalanceCauseRow,
    make_assignment_row,
    make_cause_row,
    make_generation_row,
)
from coordinator_audit.core.records_fast import fast_constructor

CASES = [
    (make_assignment_row, AssignmentRow,
     ("g", 3, "m-1", None, "c", "/10.0.0.1", "t", 7, 3, True, None, 2, 1_000, None, 5, 42, "classic", None,
      None, 10_000, 300_000)),
    (make_cause_row, RebalanceCauseRow,
     ("g", 3, 2, "member_joined", "m-1", "i-1", "new member", "partition 5 offset 42", True, 1_000, 5, 42)),
    (make_generation_row, GenerationRow,
     ("g", 3, "consumer", "range", "m-1", 2, 1, "Stable", 950, 1_000, 50, 2_000, 1_000, 5, 42, 0, 43, 0, "EAGER", "java",
      "classic", None, None, None, None)),
]


@pytest.mark.parametrize(("make", "cls", "values"), CASES)
def test_fast_constructor_equals_the_dataclass(make, cls, values) -> None:
    fast, slow = make(*values), cls(*values)
    assert type(fast) is cls and isinstance(fast, cls)
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert dataclasses.astuple(fast) == values
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.group_id = "other"


def test_fast_constructor_needs_every_field() -> None:
    with pytest.raises(TypeError):
        make_assignment_row("g", 3)


def test_fast_constructor_refuses_classes_without_one_slot_per_field() -> None:
    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        a: int

    with pytest.raises(TypeError, match="slotted"):
        fast_constructor(NoSlots)
