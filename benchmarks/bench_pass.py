"""The single pass's Python work alone, in this one process, without Spark.

    .venv/bin/python -m benchmarks.bench_pass [--input DIR] [--repeat 4] [--hash]

On the benchmark's input (`.cache/bench/input-r20221159-g5000-s0` by default: run `python -m
benchmarks` once to make it), the job's file-reading pass (`coordinator_audit.udfs.scan.make_file_scan_fn`, the tasks
the job would make for two cores, `coordinator_audit.udfs.scan.pass_tasks`) runs over every task in turn, once to warm numba's cache,
then `--repeat` times. Prints the CPU seconds of each run (`time.process_time`: every thread of the
process, pyarrow's reader included), the best, its wall time and the rows the pass output. Compare
two versions of the code by running it from each (a git worktree), alternating.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from pathlib import Path

import pyarrow as pa

from coordinator_audit.jobs.config import DEFAULT_SCAN_CHUNK_ROWS
from coordinator_audit.udfs.scan import make_file_scan_fn, pass_tasks, read_footer

DEFAULT_INPUT = Path(__file__).resolve().parents[1] / ".cache" / "bench" / "input-r20221159-g5000-s0"
CORES = 2
"""The tasks are planned as the job plans them for a `local[2]` session (`coordinator_audit.udfs.scan.pass_tasks`)."""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_pass", description=__doc__.split("\n\n")[0])
    p.add_argument("--input", type=Path, default=DEFAULT_INPUT, help="Kafka-source Parquet records (a directory)")
    p.add_argument("--repeat", type=int, default=4)
    p.add_argument("--hash", action="store_true",
                   help="hash the warm-up run's output (compare two versions of the pass: the same hash, the same rows)")
    args = p.parse_args(argv)
    files = sorted(args.input.glob("*.parquet"))
    if not files:
        p.error(f"{args.input}: no Parquet files (python -m benchmarks generates the default input)")
    footers = [read_footer(str(f)) for f in files]
    chunk = DEFAULT_SCAN_CHUNK_ROWS
    total = sum(sum(f.row_groups) for f in footers)
    tasks = pass_tasks(footers, total_rows=total, cores=CORES, chunk_rows=chunk)
    fn = make_file_scan_fn(chunk_rows=chunk)
    batches = [pa.RecordBatch.from_pylist([{"path": path, "row_groups": groups} for path, groups in task])
               for task in tasks]  # a task's units in one call, as a worker reads them

    def run() -> int:
        return sum(out.num_rows for b in batches for out in fn(iter([b])))

    if args.hash:  # the warm-up run's output, hashed (untimed)
        digest = hashlib.sha256()
        rows = 0
        for b in batches:
            for out in fn(iter([b])):
                rows += out.num_rows
                for column in out.columns:
                    digest.update(repr(column.to_pylist()).encode())
        print(f"output: {rows:,} rows, sha256 {digest.hexdigest()[:16]} (every column of every output batch, in order)",
              flush=True)
    else:
        rows = run()  # numba's compile or cache load, pyarrow's first reads
    best = (float("inf"), 0.0)
    for i in range(1, max(1, args.repeat) + 1):
        w0, c0 = time.perf_counter(), time.process_time()
        rows = run()
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        best = min(best, (cpu, wall))
        print(f"run {i}: {total:,} records, {len(tasks)} tasks, {rows:,} rows out; cpu_s {cpu:.3f}; wall_s {wall:.3f}",
              flush=True)
    print(f"best: cpu_s {best[0]:.3f}; wall_s {best[1]:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
