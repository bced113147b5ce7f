"""Nightly chain benchmark: one input audited as many consecutive windows into one output, as a
nightly job fills its tables over a year; prints each window's time and how it grows with the
number of windows already stored (the figure that must stay near zero).

    .venv/bin/python -m benchmarks.bench_nightly --windows 60 [--exports]

The input is the main benchmark's scale-mode input (`benchmarks.harness.ensure_input`, cached in
`.cache/bench/`; 5M records and 1,250 groups by default), cut into `--windows` windows holding
equal numbers of records. Every window reads the whole input and keeps its own records (as a run
over a day's export would), so the scan costs the same in every window; what may grow is what a
run reads back from the earlier windows (the base run's state, the derivation's history, the runs
table). With `--exports` the input is instead an export directory that grows by a night: before
each window's run, that window's records are added to it as one Parquet file per Kafka partition
(sorted by offset, as a Spark Kafka-source export job writes a day), and the run reads the whole
directory; what may then grow is also what a run reads of the earlier nights' files (their
footers, and their records where the statistics do not put them outside the window:
`coordinator_audit.jobs.offsets_path._outside_row_groups`). `--exports-format delta` makes the export a Delta table
that each window appends a file per partition to; `--reader spark` has Spark read the input, as it
does on a remote store (`coordinator_audit.jobs.offsets_path._spark_window` then gives it a condition the Delta log's
statistics allow); `--read-all` turns both skips off (every record read and filtered), for an A/B. `growth_s_per_window` is the slope of a window's seconds over its index (least squares,
the first window left out: it warms the session and starts the chain), and `per_year_s` that slope
times 365: how much slower the 365th night would be than the first for this reason alone. After
each run it also times the summary the command prints (`coordinator_audit.jobs.audit.table_highlights`, which reads
the run's rows back from Delta): `summary_s` per window, its median and its growth.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from deltalake import write_deltalake

from benchmarks.harness import DEFAULT_DRIVER_MEMORY, ROOT, ensure_input, scale_config
from benchmarks.measures import StageTee
from coordinator_audit.jobs import offsets_path
from coordinator_audit.jobs.audit import Capabilities, run_audit, table_highlights
from coordinator_audit.jobs.config import load_config
from coordinator_audit.jobs.spark_session import build_session


def window_bounds(input_dir: Path, windows: int) -> list[tuple[datetime, datetime]]:
    """`windows` consecutive [since, until) bounds (whole seconds) that hold about equal numbers of
    the input's records, the last one ending after its latest record."""
    ts = ds.dataset(str(input_dir), format="parquet").to_table(columns=["timestamp"])["timestamp"]
    ms = np.sort(pc.cast(pc.cast(ts, pa.timestamp("ms", "UTC"), safe=False), pa.int64()).to_numpy())
    cuts = [int(ms[0]) // 1000] + [int(ms[len(ms) * k // windows]) // 1000 for k in range(1, windows)]
    cuts = sorted(set([*cuts, int(ms[-1]) // 1000 + 1]))  # whole seconds, as the job's windows are
    cuts = [c * 1000 for c in cuts]
    return [(datetime.fromtimestamp(a / 1000, UTC), datetime.fromtimestamp(b / 1000, UTC))
            for a, b in itertools.pairwise(cuts)]


def add_export(table: pa.Table, exports: Path, index: int, since: datetime, until: datetime, *,
               delta: bool = False) -> int:
    """Writes the records of `table` in [since, until) into `exports` as one Parquet file per Kafka
    partition (`night-NNNN-partition-PP.parquet`, sorted by offset), or with `delta` as a file per
    Kafka partition appended to a Delta table there (a commit each: a streaming export's tasks
    write a file per partition; delta-rs writes one commit's batches into shared files); returns
    how many records."""
    ts = table["timestamp"]
    lo, hi = pa.scalar(since, type=ts.type), pa.scalar(until, type=ts.type)
    night = table.filter(pc.and_(pc.greater_equal(ts, lo), pc.less(ts, hi)))
    exports.mkdir(parents=True, exist_ok=True)
    parts = [night.filter(pc.equal(night["partition"], partition)).sort_by("offset")
             for partition in sorted(pc.unique(night["partition"]).to_pylist())]
    if delta:
        for rows in parts:
            write_deltalake(str(exports), rows, mode="append")
    else:
        for rows in parts:
            partition = rows["partition"][0].as_py()
            pq.write_table(rows, exports / f"night-{index:04d}-partition-{partition:02d}.parquet")
    return int(night.num_rows)


def growth(seconds: list[float]) -> float:
    """Least-squares slope of seconds over window index, the first window left out."""
    if len(seconds) < 3:
        return float("nan")
    x = np.arange(1, len(seconds), dtype=float)
    return float(np.polyfit(x, np.asarray(seconds[1:]), 1)[0])


def audit_window(spark: Any, input_dir: Path, out: Path, since: datetime, until: datetime, *,
                 run_id: str | None = None, input_format: str = "parquet", reader: str = "auto"
                 ) -> tuple[Any, float, list[str]]:
    """One window of a chain audited into `out`: (the run's summary, its seconds, its stage lines).
    `reader` "spark": as a session whose workers do not read this process's files
    (`coordinator_audit.jobs.audit.Capabilities.local_files` False) reads it."""
    cfg = load_config(None, {"input.path": str(input_dir), "input.format": input_format, "output.path": str(out),
                             "window.since": since.isoformat(), "window.until": until.isoformat()})
    caps = None if reader == "auto" else Capabilities(local_files=False, local_tasks=True)
    tee = StageTee(sys.stderr)
    t0 = time.perf_counter()
    with contextlib.redirect_stderr(tee):
        summary = run_audit(spark, cfg, run_id=run_id, capabilities=caps)
    return summary, time.perf_counter() - t0, tee.lines


def chain_arguments(prog: str, description: str | None) -> argparse.ArgumentParser:
    """The options of a benchmark that audits the scale-mode input as a chain of windows: the
    input (records, groups, seed, cache dir), the master, the work dir and the JSON figures."""
    p = argparse.ArgumentParser(prog=prog, description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=5_000_000, help="records of the input (default 5,000,000)")
    p.add_argument("--groups", type=int, default=1250, help="consumer groups of the input (default 1,250)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--cache-dir", type=Path, default=ROOT / ".cache" / "bench")
    p.add_argument("--work-dir", type=Path, help="parent of the temp dir it works in (default: system temp)")
    p.add_argument("--json", type=Path, help="also write the figures here")
    return p


def main(argv: list[str] | None = None) -> int:
    p = chain_arguments("python -m benchmarks.bench_nightly", __doc__)
    p.add_argument("--windows", type=int, default=60, help="consecutive windows (nightly runs; default 60)")
    p.add_argument("--keep", type=Path, help="move the output here at the end (replacing it) instead of deleting it")
    p.add_argument("--exports", action="store_true",
                   help="read an export directory that grows by each window's files (module docstring)")
    p.add_argument("--exports-format", choices=("parquet", "delta"), default="parquet",
                   help="with --exports: Parquet files, or a Delta table appended to (default parquet)")
    p.add_argument("--reader", choices=("auto", "spark"), default="auto",
                   help="spark: Spark reads the input, as in a session whose workers do not see this "
                        "process's files (default auto)")
    p.add_argument("--read-all", action="store_true",
                   help="read every record and filter it (no skipping by statistics): the A side of an A/B")
    args = p.parse_args(argv)
    if args.read_all:
        offsets_path.SKIP_OUTSIDE_WINDOW = False
    if args.windows < 3:
        p.error("--windows must be at least 3")

    input_dir, manifest = ensure_input(scale_config(args.records, args.groups, args.seed), args.cache_dir)
    bounds = window_bounds(input_dir, args.windows)
    spark = build_session(master=args.master, conf={"spark.driver.memory": DEFAULT_DRIVER_MEMORY})
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(tempfile.mkdtemp(prefix="bench-nightly-", dir=args.work_dir))
    out = work / "out"
    rows: list[dict[str, Any]] = []
    source, records = input_dir, None
    if args.exports:
        source, records = work / "exports", ds.dataset(str(input_dir), format="parquet").to_table()
    try:
        for i, (since, until) in enumerate(bounds):
            if records is not None:
                add_export(records, source, i, since, until, delta=args.exports_format == "delta")
            t0 = time.perf_counter()
            summary, seconds, stages = audit_window(
                spark, source, out, since, until, run_id=f"bench-nightly-{i:04d}",
                input_format=args.exports_format if args.exports else "parquet", reader=args.reader)
            table_highlights(spark, summary)  # what the command prints after a run (read back from Delta)
            summary_s = time.perf_counter() - t0 - seconds
            in_window = summary.counts.get("records_in", 0) - summary.counts.get("filtered_by_window", 0)
            rows.append({"window": i, "seconds": round(seconds, 3), "summary_s": round(summary_s, 3),
                         "records": in_window, "resume": summary.resume, "stages": stages})
            print(f"window {i:3d}/{len(bounds)}: {seconds:6.2f} s + summary {summary_s:5.2f} s, {in_window:,} "
                  f"records, {summary.resume}", flush=True)
    finally:
        spark.stop()
        if args.keep is not None:
            shutil.rmtree(args.keep, ignore_errors=True)
            shutil.move(str(out), str(args.keep))
            print(f"output kept at {args.keep}", flush=True)
        shutil.rmtree(work, ignore_errors=True)

    secs = [r["seconds"] for r in rows]
    quarter = max(1, len(secs) // 4)
    slope = growth(secs)
    figures = {"windows": len(rows), "input_records": manifest["rows"], "exports": args.exports,
               "exports_format": args.exports_format if args.exports else None, "reader": args.reader,
               "read_all": args.read_all,
               "first_window_s": secs[0], "median_s": float(np.median(secs[1:])),
               "second_quarter_mean_s": float(np.mean(secs[quarter:2 * quarter])),
               "last_quarter_mean_s": float(np.mean(secs[-quarter:])),
               "growth_s_per_window": round(slope, 4), "per_year_s": round(slope * 365, 1),
               "summary_median_s": float(np.median([r["summary_s"] for r in rows[1:]])),
               "summary_growth_s_per_window": round(growth([r["summary_s"] for r in rows]), 4)}
    print(json.dumps(figures, indent=1))
    if args.json is not None:
        args.json.write_text(json.dumps({"figures": figures, "windows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
