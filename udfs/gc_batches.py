"""Python's cyclic garbage collector, run in bulk between the output batches of a `mapInArrow`
function that builds many long-lived objects (the replay's audits and rows, the derivation's dicts).

With the default thresholds CPython runs a young collection every 700 net allocations of tracked
objects and, every hundred of those, a full one over every live object: the rows held until the
next flush, the group's audit, the worker's imported modules. Nearly all of those objects are freed
by reference counting, so that work finds little: on the 20M-record benchmark's replay input (the
replay's function run in one process over its collected input, with the collector on and off) it
was 15-25% of the replay's Python time. `collected_in_bulk` instead leaves automatic collection only as a safety
valve (a million net allocations) and collects the young generations after each batch it passes on,
everything every `full_every` batches, so reference cycles (an audit's objects refer to each other)
are still freed and memory stays bounded by what one batch's work allocates.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import TypeVar

__all__ = ["collected_in_bulk"]

T = TypeVar("T")

SAFETY_THRESHOLD = 1_000_000
"""Net allocations of tracked objects after which CPython still collects by itself."""


def collected_in_bulk(batches: Iterator[T], *, full_every: int = 20) -> Iterator[T]:
    """`batches`, passed on, with the cyclic collector run after each one (module docstring); the
    collector's thresholds are restored when the iteration ends (Spark reuses a Python worker
    for the next task)."""
    before = gc.get_threshold()
    gc.set_threshold(SAFETY_THRESHOLD, 1000, 1000)
    try:
        for k, batch in enumerate(batches, 1):
            yield batch
            gc.collect(2 if k % full_every == 0 else 1)
    finally:
        gc.set_threshold(*before)
