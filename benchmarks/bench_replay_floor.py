"""The replay stage's Spark side alone: what the stage costs before any Python work is done.

    .venv/bin/python -m benchmarks.bench_replay_floor [--input DIR] [--shards 8,2] [--repeat 2]

On the benchmark's input (`.cache/bench/input-r20221159-g5000-s0` by default: run `python -m
benchmarks` once to make it), the job's single pass runs once; then, per shard count, the replay's
input (`coordinator_audit.udfs.replay.replay_input`: the side records and the stretches, repartitioned by group and
sorted) is handed to the Python workers as Arrow batches that are only counted there
(`to_python_s`), and counted in the JVM alone (`jvm_s`). The first is the floor of the replay stage
(the job's replay adds its Python on top); the difference between them is the input's trip to Python.
This is the route of a session whose tasks do not all run on one machine
(`coordinator_audit.jobs.audit.Capabilities.local_tasks` False): in a local session the job hands the input off as
local files instead (`coordinator_audit.udfs.handoff`), which skips it.
Prints one line per run; wall-clock seconds on whatever else the machine is doing.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from pyspark.sql import functions as F

from coordinator_audit.jobs import offsets_path
from coordinator_audit.jobs.spark_session import build_session
from coordinator_audit.udfs.replay import REPLAY_SCHEMA, replay_input

DEFAULT_INPUT = Path(__file__).resolve().parents[1] / ".cache" / "bench" / "input-r20221159-g5000-s0"


def _consume(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    rows = 0
    for b in batches:
        rows += b.num_rows
    return iter([])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_replay_floor", description=__doc__.split("\n\n")[0])
    p.add_argument("--input", type=Path, default=DEFAULT_INPUT, help="Kafka-source Parquet records")
    p.add_argument("--shards", default="8,2", help="replay partitions to try (comma-separated)")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--master", default="local[2]")
    args = p.parse_args(argv)
    if not args.input.exists():
        p.error(f"{args.input}: no such input (python -m benchmarks generates it)")
    spark = build_session(master=args.master)
    spark.sparkContext.setLogLevel("ERROR")
    scan = offsets_path.scan_log(spark.read.parquet(str(args.input)))
    side = scan.side().withColumn("missing", F.lit(None).cast("long"))
    stretches = scan.stretches()
    for shards in (int(s) for s in args.shards.split(",")):
        for run in range(1, args.repeat + 1):
            frame = replay_input(side, stretches, shards=shards)
            t0 = time.perf_counter()
            frame.mapInArrow(_consume, REPLAY_SCHEMA).localCheckpoint(eager=True)
            to_python = time.perf_counter() - t0
            t0 = time.perf_counter()
            rows = frame.count()
            jvm = time.perf_counter() - t0
            print(f"shards {shards} run {run}: {rows:,} rows; to_python_s {to_python:.2f}; jvm_s {jvm:.2f}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
