"""Python's cyclic garbage collector in the Spark Python workers: run in bulk between the output
batches of a `mapInArrow` function that builds many long-lived objects (the replay's audits and
rows, the derivation's dicts), and kept off the objects that live as long as the worker.

With the default thresholds CPython runs a young collection every 700 net allocations of tracked
objects and, every hundred of those, a full one over every live object: the rows held until the
next flush, the group's audit, the worker's imported modules. Nearly all of those objects are freed
by reference counting, so that work finds little: on the 20M-record benchmark's replay input (the
replay's function run in one process over its collected input, with the collector on and off) it
was 15-25% of the replay's Python time. `collected_in_bulk` instead leaves automatic collection only as a safety
valve (a million net allocations) and collects the young generations after each batch it passes on,
everything every `full_every` batches, so reference cycles (an audit's objects refer to each other)
are still freed and memory stays bounded by what one batch's work allocates.

Between tasks, pyspark's daemon runs a full collection in the reused worker (`pyspark/daemon.py`,
after each task). With pyarrow, pandas, numba's compiled kernels and this project's modules loaded,
a full collection walks the many objects that live as long as the worker and finds nothing, in
every task (`benchmarks.bench_worker_cpu` reports the collector's state), and as much again for
each full collection `collected_in_bulk` makes.
`freeze_survivors`, called by every task function of the job at its start, moves those objects out
of the collector's reach (`gc.freeze`) once they are many, so that both walk only what the tasks
themselves allocate.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import TypeVar

__all__ = ["FREEZE_SURVIVORS", "collected_in_bulk", "freeze_survivors"]

T = TypeVar("T")

SAFETY_THRESHOLD = 1_000_000
"""Net allocations of tracked objects after which CPython still collects by itself."""

FREEZE_SURVIVORS = 10_000
"""Objects in the oldest generation at a task's start from which `freeze_survivors` freezes them."""


def freeze_survivors(threshold: int = FREEZE_SURVIVORS) -> bool:
    """At the start of a task in a Spark Python worker: when `threshold` or more objects have
    survived every collection so far (module docstring: the worker's imports, numba's kernels
    loaded at their first call, module-level caches), moves them to the permanent generation
    (`gc.freeze`), where no collection walks them again; True when it did. Outside a task (a test,
    a benchmark calling a task function in its own process) it does nothing.

    The daemon collected fully just before the task, so what is frozen is alive. The cost: an
    object frozen that later becomes unreachable through a reference cycle is never freed (reference
    counting still frees the rest). What is frozen besides the long-lived objects is what the task
    holds at its start (its function, its input stream), and freezing happens only when the
    survivors have grown by `threshold` since the last time (after imports and first calls: a few
    times in a worker's life), so that stays small."""
    from pyspark import TaskContext  # loaded already in a worker; this module stays importable without Spark

    if TaskContext.get() is None:
        return False
    if len(gc.get_objects(generation=2)) < threshold:
        return False
    gc.freeze()
    return True


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
