"""`coordinator_audit.udfs.gc_batches.collected_in_bulk`: the batches pass unchanged, reference cycles made while a
batch is built are freed after it, and the collector's thresholds come back when the iteration ends
(Spark reuses a Python worker for the next task); `freeze_survivors` outside a task (inside one:
`tests/spark/test_spark_gc_freeze.py`)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from coordinator_audit.udfs.gc_batches import (
    FREEZE_SURVIVORS,
    SAFETY_THRESHOLD,
    collected_in_bulk,
    freeze_survivors,
)


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref[_Node]:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_batches_pass_and_cycles_are_freed_after_each_batch() -> None:
    before = gc.get_threshold()
    refs: list[weakref.ref[_Node]] = []

    def batches() -> Iterator[int]:
        for k in range(5):
            refs.append(_cycle())  # garbage only the cyclic collector frees
            assert gc.get_threshold()[0] == SAFETY_THRESHOLD
            yield k

    seen = []
    for k in collected_in_bulk(batches(), full_every=2):
        seen.append(k)
        if k:  # the previous batch's cycle was collected once that batch was passed on
            assert refs[k - 1]() is None
    assert seen == [0, 1, 2, 3, 4]
    assert gc.get_threshold() == before


def test_thresholds_come_back_when_the_iteration_stops_early_or_fails() -> None:
    before = gc.get_threshold()
    it = collected_in_bulk(iter(range(10)))
    assert next(it) == 0
    it.close()
    assert gc.get_threshold() == before

    def failing() -> Iterator[int]:
        yield 1
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        list(collected_in_bulk(failing()))
    assert gc.get_threshold() == before


def test_freeze_survivors_does_nothing_outside_a_spark_task() -> None:
    frozen = gc.get_freeze_count()
    keep = [[k] for k in range(FREEZE_SURVIVORS)]  # survivors enough to freeze, were this a task
    gc.collect()
    assert freeze_survivors() is False
    assert gc.get_freeze_count() == frozen
    del keep
