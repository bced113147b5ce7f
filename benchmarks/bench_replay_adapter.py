"""Cost of the replay adapter's input and output sides (coordinator_audit.udfs.replay), without Spark; prints figures.

Run from the project root: `.venv/bin/python benchmarks/bench_replay_adapter.py [--input DIR]
[--baseline-rev REV] [--batch-records N] [--limit N] [--no-check]`.

Input: the non-commit records of a benchmark input (`python -m benchmarks`' cache, Parquet with the
Kafka-source schema): keys whose first two bytes (the record type) are not 0 or 1, with the group
read from the key (int16 length + UTF-8 from byte 2; None when that does not parse), sorted by
(group, partition, offset) as `coordinator_audit.jobs.audit` sorts them (null group first), cut into Arrow batches of
`--batch-records` rows (Spark's `spark.sql.execution.arrow.maxRecordsPerBatch`, 10,000 by default).

Measured in this one process, on the same batches, one after the other (CPU seconds of this
process, and rows/s of wide output):

* `audit only`: the same loop feeding `GroupAuditor`, the rows counted and dropped: the floor;
* `before`: the `mapInPandas` adapter of `--baseline-rev` (loaded from git into a temporary module),
  with what Spark's worker does around it: each input batch to pandas (pyspark's
  `ArrowBatchTransformer.to_pandas`, struct as DataFrame) and each output frame back to Arrow
  (`PandasToArrowConversion.convert`, as `ArrowStreamPandasUDFSerializer` calls it);
* `after`: this tree's `make_replay_fn()` over the Arrow batches, each output batch wrapped into
  the struct column Spark's `mapInArrow` worker sends (`ArrowBatchTransformer.wrap_struct`).

Unless `--no-check`, both outputs are compared as multisets of rows (every column): the same rows.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402 (after the sys.path line)
import pyarrow.compute as pc  # noqa: E402
import pyarrow.dataset as ds  # noqa: E402
from pyspark.sql.conversion import ArrowBatchTransformer, PandasToArrowConversion  # noqa: E402

from coordinator_audit.core.audit import GroupAuditor  # noqa: E402
from coordinator_audit.udfs import replay  # noqa: E402

DEFAULT_INPUT = ROOT / ".cache" / "bench" / "input-r20221159-g5000-s0"
BASELINE_REV = "aedfb55bdebe7571ebf9bfc4da68e3904a821686"
"""The last commit of the mapInPandas adapter (object-dtype pandas frames of every wide column)."""

INPUT_SCHEMA = pa.schema([("group_id", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                          ("timestamp_ms", pa.int64()), ("key", pa.binary()), ("value", pa.binary())])


def _group_of(key: bytes | None) -> str | None:
    if key is None or len(key) < 4:
        return None
    n = int.from_bytes(key[2:4], "big", signed=True)
    if n < 0 or len(key) < 4 + n:
        return None
    try:
        return key[4:4 + n].decode("utf-8")
    except UnicodeDecodeError:
        return None


def load_input(path: Path, *, batch_records: int, limit: int | None) -> tuple[list[pa.RecordBatch], int]:
    """(sorted input batches, records scanned) of the non-commit records under `path`."""
    dataset = ds.dataset(str(path), format="parquet")
    kept: list[pa.Table] = []
    scanned = 0
    for batch in dataset.to_batches(columns=["key", "value", "partition", "offset", "timestamp"]):
        scanned += batch.num_rows
        head = pc.binary_slice(batch.column("key"), 0, 2)
        commit = pc.or_(pc.equal(head, pa.scalar(b"\x00\x00")), pc.equal(head, pa.scalar(b"\x00\x01")))
        keep = pc.invert(pc.fill_null(commit, False))
        kept.append(pa.Table.from_batches([batch.filter(keep)]))
    table = pa.concat_tables(kept)
    keys = table.column("key").to_pylist()
    rows = sorted(zip([_group_of(k) for k in keys], table.column("partition").to_pylist(),
                      table.column("offset").to_pylist(), range(len(keys)), strict=True),
                  key=lambda r: (r[0] is not None, r[0] or "", r[1], r[2]))
    if limit is not None:
        rows = rows[:limit]
    order = pa.array([r[3] for r in rows], pa.int64())
    ts = table.column("timestamp").cast(pa.int64()).take(order)
    sorted_table = pa.table({
        "group_id": pa.array([r[0] for r in rows], pa.string()),
        "partition": pa.array([r[1] for r in rows], pa.int32()),
        "offset": pa.array([r[2] for r in rows], pa.int64()),
        "timestamp_ms": ts,
        "key": table.column("key").take(order),
        "value": table.column("value").take(order),
    }, schema=INPUT_SCHEMA)
    return sorted_table.combine_chunks().to_batches(max_chunksize=batch_records), scanned


def load_baseline(rev: str, tmp: Path) -> Any:
    """`coordinator_audit/udfs/replay.py` at `rev`, imported as a module of its own."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:coordinator_audit/udfs/replay.py"], check=True,
                            capture_output=True, text=True).stdout
    path = tmp / "replay_baseline.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("replay_baseline", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def audit_only(batches: list[pa.RecordBatch]) -> int:
    """The adapter's loop without any output: rows produced by the audit (plus one counts row per group)."""
    n_rows = 0
    auditor: GroupAuditor | None = None
    current: object = object()
    for batch in batches:
        groups = batch.column("group_id").to_pylist()
        records = list(zip(*(batch.column(c).to_pylist() for c in replay.INPUT_COLUMNS[1:]), strict=True))
        for group, start, end in replay.group_runs(groups):
            if group != current:
                if auditor is not None:
                    n_rows += len(auditor.finish()) + 1
                auditor = GroupAuditor(group)
                current = group
            assert auditor is not None
            for _ in auditor.feed(records[start:end]):
                n_rows += 1
    if auditor is not None:
        n_rows += len(auditor.finish()) + 1
    return n_rows


def before(module: Any, batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """The mapInPandas adapter between Spark's own pandas conversions (worker side)."""
    fn = module.make_replay_fn()

    def frames() -> Iterator[Any]:
        for batch in batches:
            wrapped = ArrowBatchTransformer.wrap_struct(batch)
            yield ArrowBatchTransformer.to_pandas(wrapped, timezone="UTC", struct_in_pandas="dict",
                                                  df_for_struct=True)[0]

    return [PandasToArrowConversion.convert(pdf, replay.REPLAY_SCHEMA, timezone="UTC", safecheck=True,
                                            arrow_cast=True, assign_cols_by_name=True)
            for pdf in fn(frames())]


def after(batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """The mapInArrow adapter, with the worker's struct wrapping of its output."""
    out = list(replay.make_replay_fn()(iter(batches)))
    for batch in out:
        ArrowBatchTransformer.wrap_struct(batch)
    return out


def _timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    t0, w0 = time.process_time(), time.perf_counter()
    result = fn()
    return result, time.process_time() - t0, time.perf_counter() - w0


def _row_multiset(batches: list[pa.RecordBatch]) -> collections.Counter[tuple[Any, ...]]:
    def frozen(v: Any) -> Any:
        return tuple(v) if isinstance(v, list) else v

    table = pa.Table.from_batches(batches).cast(replay._ARROW_SCHEMA)
    columns = [c.to_pylist() for c in table.columns]
    return collections.Counter(tuple(frozen(v) for v in row) for row in zip(*columns, strict=True))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--input", type=Path, default=DEFAULT_INPUT, help="benchmark input (Parquet directory)")
    p.add_argument("--baseline-rev", default=BASELINE_REV, help="git revision of the 'before' coordinator_audit/udfs/replay.py")
    p.add_argument("--batch-records", type=int, default=10_000, help="input rows per Arrow batch")
    p.add_argument("--limit", type=int, default=None, help="only the first N sorted records")
    p.add_argument("--no-check", action="store_true", help="skip the row-for-row comparison")
    args = p.parse_args(argv)

    t0 = time.perf_counter()
    batches, scanned = load_input(args.input, batch_records=args.batch_records, limit=args.limit)
    records = sum(b.num_rows for b in batches)
    groups = len(set(pc.unique(pa.chunked_array([b.column("group_id") for b in batches])).to_pylist()))
    print(f"input: {args.input} ({scanned:,} records scanned), {records:,} non-commit records of {groups:,} "
          f"groups in {len(batches)} batches, read and sorted in {time.perf_counter() - t0:.1f} s")

    with tempfile.TemporaryDirectory() as tmp:
        baseline = load_baseline(args.baseline_rev, Path(tmp))
        n_audit, cpu_audit, wall_audit = _timed(lambda: audit_only(batches))
        old, cpu_old, wall_old = _timed(lambda: before(baseline, batches))
        new, cpu_new, wall_new = _timed(lambda: after(batches))

    n_old = sum(b.num_rows for b in old)
    n_new = sum(b.num_rows for b in new)
    print(f"{'':<44}{'wide rows':>10}{'CPU s':>9}{'wall s':>9}{'rows/s (CPU)':>15}{'output s/1M rows':>18}")
    for label, n, cpu, wall in (("audit only (no output)", n_audit, cpu_audit, wall_audit),
                                (f"before: mapInPandas @ {args.baseline_rev[:10]}", n_old, cpu_old, wall_old),
                                ("after: mapInArrow (this tree)", n_new, cpu_new, wall_new)):
        over = (cpu - cpu_audit) / n * 1e6 if n else float("nan")
        print(f"{label:<44}{n:>10,}{cpu:>9.2f}{wall:>9.2f}{n / cpu:>15,.0f}{over:>18.2f}")
    print(f"after vs before: {cpu_old / cpu_new:.2f}x less CPU end to end; adapter overhead over the audit "
          f"{cpu_old - cpu_audit:.2f} s -> {cpu_new - cpu_audit:.2f} s "
          f"({(cpu_old - cpu_audit) / max(cpu_new - cpu_audit, 1e-9):.1f}x less)")
    print(f"output batches: before {len(old)}, after {len(new)} (max {max(b.num_rows for b in new):,} rows)")

    if not args.no_check:
        t0 = time.perf_counter()
        same = _row_multiset(old) == _row_multiset(new)
        print(f"same rows (multiset over all {len(replay.REPLAY_SCHEMA.fields)} columns): {same} "
              f"({time.perf_counter() - t0:.1f} s)")
        if not same:
            sys.exit(1)


if __name__ == "__main__":
    main()
