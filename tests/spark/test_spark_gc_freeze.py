"""`coordinator_audit.udfs.gc_batches.freeze_survivors` in real Spark Python workers: inside a task it moves the
objects that survived every collection to the permanent generation once they are many (and not
again until they are), and every task function of the job calls it at its start; and the readings
of `benchmarks.bench_worker_cpu`, which measures what it saves."""

from __future__ import annotations

import gc
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from benchmarks.bench_worker_cpu import session_cpu, worker_collectors
from coordinator_audit.udfs.derived import derive_partition
from coordinator_audit.udfs.gc_batches import FREEZE_SURVIVORS, freeze_survivors
from coordinator_audit.udfs.handoff import Handoff
from coordinator_audit.udfs.json_lines import make_fit_fn, make_json_read_fn
from coordinator_audit.udfs.replay import make_handoff_fn, make_replay_fn
from coordinator_audit.udfs.scan import make_file_scan_fn, make_scan_fn

REPORT = "name string, before long, after long, frozen_more long, again boolean"


def _in_one_task(spark: Any, probe: Callable[[], Iterator[dict[str, Any]]]) -> list[Any]:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for _ in batches:
            pass
        rows = list(probe())
        yield pa.RecordBatch.from_pylist(rows, schema=pa.schema([("name", pa.string()), ("before", pa.int64()),
                                                                 ("after", pa.int64()), ("frozen_more", pa.int64()),
                                                                 ("again", pa.bool_())]))

    return spark.range(1, numPartitions=1).mapInArrow(run, REPORT).collect()  # type: ignore[no-any-return]


def _survivors(n: int) -> list[list[int]]:
    """`n` tracked objects that survive a full collection (into the oldest generation), as the
    daemon leaves a worker's long-lived objects before a task."""
    keep = [[k] for k in range(n)]
    gc.collect()
    return keep


def test_inside_a_task_survivors_are_frozen_once_they_are_many(spark: Any) -> None:
    def probe() -> Iterator[dict[str, Any]]:
        keep = _survivors(2 * FREEZE_SURVIVORS)
        before, frozen = len(gc.get_objects(generation=2)), gc.get_freeze_count()
        did = freeze_survivors()
        after = len(gc.get_objects(generation=2))
        yield {"name": f"first:{did}", "before": before, "after": after,
               "frozen_more": gc.get_freeze_count() - frozen, "again": freeze_survivors()}
        del keep

    (row,) = _in_one_task(spark, probe)
    assert row.name == "first:True"
    assert row.before >= 2 * FREEZE_SURVIVORS
    assert row.after < FREEZE_SURVIVORS  # the daemon's next full collection walks only what is new
    assert row.frozen_more >= 2 * FREEZE_SURVIVORS
    assert row.again is False  # nothing survived since: no second freeze


def test_every_task_function_of_the_job_freezes_at_its_start(spark: Any) -> None:
    functions: dict[str, Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]] = {
        "scan of files (coordinator_audit.udfs.scan.make_file_scan_fn)": make_file_scan_fn(chunk_rows=1000),
        "scan through Spark (coordinator_audit.udfs.scan.make_scan_fn)": make_scan_fn(chunk_rows=1000),
        "replay (coordinator_audit.udfs.replay.make_replay_fn)": make_replay_fn(),
        "derivation (coordinator_audit.udfs.derived.derive_partition)": derive_partition,
        "JSON lines read (coordinator_audit.udfs.json_lines.make_json_read_fn)": make_json_read_fn("hex"),
        "JSON lines fit (coordinator_audit.udfs.json_lines.make_fit_fn)": make_fit_fn(),
    }
    functions["hand-off (coordinator_audit.udfs.replay.make_handoff_fn)"] = make_handoff_fn(
        Handoff(tempfile.mkdtemp(prefix="gc-freeze-"), 2))

    def probe() -> Iterator[dict[str, Any]]:
        for name, fn in functions.items():
            keep = _survivors(2 * FREEZE_SURVIVORS)
            before, frozen = len(gc.get_objects(generation=2)), gc.get_freeze_count()
            for _ in fn(iter([])):  # no input: only what the function does at its start
                pass
            yield {"name": name, "before": before, "after": len(gc.get_objects(generation=2)),
                   "frozen_more": gc.get_freeze_count() - frozen, "again": False}
            del keep

    rows = _in_one_task(spark, probe)
    assert [r.name for r in rows] == list(functions)
    for r in rows:
        assert r.frozen_more >= 2 * FREEZE_SURVIVORS, r
        assert r.after < r.before, r



def test_the_worker_cpu_benchmark_reads_the_sessions_processes(spark: Any) -> None:
    """`benchmarks.bench_worker_cpu`'s readings: the JVM's and the Python workers' CPU grow with a
    job that burns CPU in the workers, and its probe reports each worker's collector state."""
    def burn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import time

        end = time.process_time() + 0.3
        while time.process_time() < end:
            pass
        yield from batches

    before = session_cpu()
    spark.range(2, numPartitions=2).mapInArrow(burn, "id long").collect()
    after = session_cpu()
    assert after["jvm"] > before["jvm"] > 0
    assert after["python_workers"] - before["python_workers"] >= 0.5  # two tasks of 0.3 s each
    workers = worker_collectors(spark)
    assert workers and all(w["full_collection_ms"] >= 0 and w["rss_mib"] > 0 for w in workers)
