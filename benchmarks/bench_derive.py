"""Cost of the derivation's Python side (`coordinator_audit.udfs.derived.derive_partition`: `_derive_batches` around
`coordinator_audit.udfs.history.derive_group`), without Spark's scheduling; prints figures.

    .venv/bin/python -m coordinator_audit run --input .cache/bench/input-r20221159-g5000-s0 --output /tmp/o20
    .venv/bin/python -m benchmarks.bench_derive --tables /tmp/o20 [--repeat 3] [--json F]

Input: the base tables of an audit's output (one run: `--tables`), packed as the job packs them
(`coordinator_audit.udfs.derived.pack_base`, read with `coordinator_audit.jobs.delta_io.read_table` in a local Spark session), sorted
by group (then by every column, so that every run sees the same order) and collected once to Arrow; Spark is stopped before anything is timed. The packed rows are
cut into batches of 10,000 rows (Spark's `spark.sql.execution.arrow.maxRecordsPerBatch`).

Measured in this one process, CPU seconds, best of `--repeat`:

* `derive_batches_s`: the whole `mapInArrow` body over every batch (what a worker's core spends);
* of it, `to_pylist_s` (each table's rows of a batch as dicts), `derive_group_s` (the derivation
  itself, summed over groups) and `arrow_batch_s` (the derived rows back to Arrow);
* `rows_out` and `sha256`: the derived rows, hashed column by column in output order, so that two
  versions of the code can be compared on the same tables (the same hash: the same rows).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

import coordinator_audit.udfs.derived as derived
from coordinator_audit.jobs.delta_io import read_table
from coordinator_audit.jobs.spark_session import build_session

BATCH_ROWS = 10_000


def packed_batches(tables: Path) -> list[pa.RecordBatch]:
    """The output's base tables packed and sorted by group (module docstring), as Arrow batches."""
    spark = build_session(master="local[2]", conf={"spark.driver.memory": "6g"})
    spark.sparkContext.setLogLevel("ERROR")
    try:
        base = {name: read_table(spark, str(tables / name)).drop("run_id", "run_window")
                for name in derived.BASE_INPUTS}
        packed = derived.pack_base(base)
        table = packed.orderBy(*packed.columns).toArrow()  # every column: the same order every time
    finally:
        spark.stop()
    return table.combine_chunks().to_batches(max_chunksize=BATCH_ROWS)


def _timed(fn: Callable[..., Any], spent: list[float]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[0] += time.process_time() - t0
    return wrapper


def _to_pylist_seconds(batches: list[pa.RecordBatch]) -> float:
    """What `_derive_batches` spends building each table's rows of each batch as dicts."""
    t0 = time.process_time()
    for batch in batches:
        tags = batch.column(derived._TAG)
        for kind in pc.unique(tags).to_pylist():
            part = batch.filter(pc.equal(tags, kind))
            names = [c for c in (*derived.BASE_INPUTS[kind], *derived.OPTIONAL_INPUTS.get(kind, ()))
                     if c in part.schema.names]
            part.select(names).to_pylist()
    return time.process_time() - t0


def measure(batches: list[pa.RecordBatch], repeat: int) -> dict[str, Any]:
    best: dict[str, float] = {}
    out: list[pa.RecordBatch] = []
    # what the body calls per group (code older than derive_from_tables called derive_group itself)
    per_group = "derive_from_tables" if hasattr(derived, "derive_from_tables") else "derive_group"
    for _ in range(repeat):
        derive_s, arrow_s = [0.0], [0.0]
        real_derive, real_arrow = getattr(derived, per_group), derived._arrow_batch
        setattr(derived, per_group, _timed(real_derive, derive_s))
        derived._arrow_batch = _timed(real_arrow, arrow_s)  # type: ignore[assignment]
        try:
            t0 = time.process_time()
            # (code older than derive_partition: its body alone, for A/B runs against it)
            out = list(getattr(derived, "derive_partition", derived._derive_batches)(iter(batches)))
            total = time.process_time() - t0
        finally:
            setattr(derived, per_group, real_derive)
            derived._arrow_batch = real_arrow  # type: ignore[assignment]
        for key, value in (("derive_batches_s", total), ("derive_group_s", derive_s[0]),
                           ("arrow_batch_s", arrow_s[0]), ("to_pylist_s", _to_pylist_seconds(batches))):
            best[key] = min(best.get(key, value), value)
    table = pa.Table.from_batches(out)
    digest = hashlib.sha256()
    for name in table.column_names:
        digest.update(repr(table.column(name).to_pylist()).encode())
    return {"rows_in": sum(b.num_rows for b in batches), "groups_in": _groups(batches), "rows_out": table.num_rows,
            **{k: round(v, 3) for k, v in best.items()}, "sha256": digest.hexdigest()}


def _groups(batches: list[pa.RecordBatch]) -> int:
    seen: set[str] = set()
    for b in batches:
        seen.update(b.column("group_id").to_pylist())
    return len(seen)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_derive",
                                description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--tables", type=Path, required=True, help="an audit's output (one run's base tables)")
    p.add_argument("--repeat", type=int, default=3, help="runs; the best of each figure is kept (default 3)")
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args(argv)
    missing = [n for n in derived.BASE_INPUTS if not (args.tables / n / "_delta_log").is_dir()]
    if missing:
        p.error(f"--tables {args.tables}: no Delta table {', '.join(missing)} (run `coordinator-audit run` into it first)")
    batches = packed_batches(args.tables)
    figures = measure(batches, max(1, args.repeat))
    print(json.dumps(figures, indent=1))
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
