"""CPU seconds of the Spark Python workers and of the JVM during warm runs of the audit, of the
offset path and of a nightly run, read from /proc; prints figures.

    .venv/bin/python -m benchmarks.bench_worker_cpu [--input .cache/bench/input-r20221159-g5000-s0]
        [--what audit,offset_path,nightly] [--runs 3] [--json F]

`nightly` is the second of two nightly runs over the input (`benchmarks.bench_nightly.window_bounds`:
two windows of about equal numbers of records): the first window is audited once into a base
output, untimed; each timed run copies that base (untimed) and audits the second window into it
with `--mode append`, resuming every group from its saved state and merging the rows it continues.

On a machine shared with other jobs, wall seconds move with the load from run to run; the CPU the
job's own processes spend moves much less, so a change that saves work shows there first. In one
local[2] session, each of `--what` runs once to warm up (the JVM, the workers, numba's cache), then
`--runs` times; around each run the script reads, from /proc, the CPU seconds (user + system) of
the session's JVM, of its Python workers (every process of pyspark's daemon, the daemon's reaped
workers included) and of this process (the driver's Python). It prints each run's wall and CPU
seconds and, after the first warm-up and at the end, the Python workers' collector state,
measured in a task on each worker: objects frozen (`gc.freeze`, `coordinator_audit.udfs.gc_batches.
freeze_survivors`), objects in the oldest generation, the milliseconds of one full collection
(what pyspark's daemon runs after every task) and the worker's RSS. Linux only (/proc).

To time another tree (a `git worktree` of an earlier commit, which need not have this file), run this
file by its path from that tree's directory with `PYTHONPATH` set to it: `cd OTHER &&
PYTHONPATH=OTHER /path/to/.venv/bin/python /path/to/benchmarks/bench_worker_cpu.py` (pyspark's
workers start in the driver's working directory and import from it first).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file: the project's packages (a PYTHONPATH set first wins)
    sys.path.append(str(ROOT))

from benchmarks.bench_nightly import window_bounds  # noqa: E402
from benchmarks.measures import measure_offset_path  # noqa: E402
from benchmarks.memory import descendants, proc_children  # noqa: E402
from coordinator_audit.jobs.audit import run_audit  # noqa: E402
from coordinator_audit.jobs.config import load_config  # noqa: E402
from coordinator_audit.jobs.spark_session import build_session  # noqa: E402

DEFAULT_INPUT = ROOT / ".cache" / "bench" / "input-r20221159-g5000-s0"
WHAT = ("audit", "offset_path", "nightly")
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_ticks(pid: int) -> tuple[list[str], int, int]:
    """`pid`'s command line, its own CPU (user + system) and its reaped children's, in clock ticks
    (nothing for a process gone meanwhile)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        with open(f"/proc/{pid}/cmdline") as f:
            cmd = f.read().split("\0")
    except OSError:
        return [], 0, 0
    u, s, cu, cs = (int(x) for x in fields[11:15])
    return cmd, u + s, cu + cs


def session_cpu() -> dict[str, float]:
    """CPU seconds so far of this process's JVM and of its Python workers: pyspark's daemon (with the
    workers it reaped) and every worker it forked."""
    children = proc_children()
    jvm = workers = 0.0
    for pid in descendants(os.getpid(), children):
        cmd, own, _ = _cpu_ticks(pid)
        if not (cmd and cmd[0].endswith("java")):
            continue
        jvm += own / _TICKS
        for daemon in children.get(pid, []):
            cmd, own, reaped = _cpu_ticks(daemon)
            if "pyspark.daemon" in cmd:
                workers += (own + reaped + sum(_cpu_ticks(w)[1] for w in descendants(daemon, children))) / _TICKS
    return {"jvm": jvm, "python_workers": workers}


def _probe(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: this worker's collector state (module docstring)."""
    for _ in batches:
        pass
    start = time.perf_counter()
    gc.collect()
    ms = (time.perf_counter() - start) * 1000
    with open(f"/proc/{os.getpid()}/statm") as f:
        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 2**20
    yield pa.RecordBatch.from_pylist([{"pid": os.getpid(), "frozen": gc.get_freeze_count(),
                                       "oldest_generation": len(gc.get_objects(generation=2)),
                                       "full_collection_ms": round(ms, 1), "rss_mib": rss}])


def worker_collectors(spark: Any) -> list[dict[str, Any]]:
    """`_probe` in several tasks (the idle workers take them), one row per worker seen."""
    df = spark.createDataFrame(spark.sparkContext.parallelize([(i,) for i in range(8)], 8), "x long")
    rows = df.mapInArrow(_probe, "pid long, frozen long, oldest_generation long, full_collection_ms double, "
                                 "rss_mib long").collect()
    return list({r["pid"]: r.asDict() for r in rows}.values())


def report_workers(spark: Any, when: str) -> list[dict[str, Any]]:
    workers = worker_collectors(spark)
    for w in workers:
        print(f"python worker {when}: " + "  ".join(f"{key} {v}" for key, v in w.items()), flush=True)
    return workers


def _audit(spark: Any, input_dir: Path, out_dir: Path, **settings: Any) -> None:
    run_audit(spark, load_config(None, {"input.path": str(input_dir), "input.format": "parquet", "input.table": "",
                                        "output.path": str(out_dir), **settings}), run_id=f"bench-{time.time_ns()}")


def prepare(spark: Any, what: str, input_dir: Path, scratch: Path) -> None:
    """What a run of `what` needs in place, untimed: an empty output; for `nightly`, a copy of the
    base output (the first window's audit, made at the first call)."""
    out = scratch / "out"
    shutil.rmtree(out, ignore_errors=True)
    if what == "nightly":
        base = scratch / "nightly-base"
        if not base.exists():
            (_, until), _ = window_bounds(input_dir, 2)
            _audit(spark, input_dir, base, **{"window.until": until, "output.write_mode": "overwrite"})
        shutil.copytree(base, out)


def run_once(spark: Any, what: str, input_dir: Path, scratch: Path) -> None:
    out = scratch / "out"
    if what == "audit":
        _audit(spark, input_dir, out, **{"output.write_mode": "overwrite"})
    elif what == "nightly":
        _, (since, _) = window_bounds(input_dir, 2)
        _audit(spark, input_dir, out, **{"window.since": since, "output.write_mode": "append"})
    else:
        measure_offset_path(spark, str(input_dir))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_worker_cpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--input", type=Path, default=DEFAULT_INPUT, help="a benchmark input (Kafka-source Parquet)")
    p.add_argument("--what", default=",".join(WHAT), help=f"comma-separated, of {', '.join(WHAT)}")
    p.add_argument("--runs", type=int, default=3, help="warm runs of each, after one to warm up")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = p.parse_args(argv)
    what = [w.strip() for w in args.what.split(",") if w.strip()]
    if not what or any(w not in WHAT for w in what):
        p.error(f"--what: some of {', '.join(WHAT)}")
    if not args.input.is_dir():
        p.error(f"--input {args.input}: no such directory (python -m benchmarks writes them under .cache/bench)")
    if args.runs < 1:
        p.error("--runs must be >= 1")
    if not Path("/proc/self/stat").exists():
        p.error("needs Linux's /proc")
    spark = build_session(master="local[2]", conf={"spark.driver.memory": "6g"})
    figures: dict[str, Any] = {"input": str(args.input)}
    with tempfile.TemporaryDirectory(prefix="bench-worker-cpu-") as scratch:
        for name in what:
            runs = []
            for k in range(args.runs + 1):
                prepare(spark, name, args.input, Path(scratch))
                before, driver0, wall0 = session_cpu(), time.process_time(), time.perf_counter()
                run_once(spark, name, args.input, Path(scratch))
                wall, after = time.perf_counter() - wall0, session_cpu()
                run = {"wall_s": round(wall, 2), "driver_python_cpu_s": round(time.process_time() - driver0, 2),
                       **{f"{key}_cpu_s": round(after[key] - before[key], 2) for key in after}}
                label = "warm-up" if k == 0 else f"run {k}"
                print(f"{name:12s} {label:8s} " + "  ".join(f"{key} {v}" for key, v in run.items()), flush=True)
                if k:
                    runs.append(run)
                elif name == what[0]:
                    figures["workers_after_warm_up"] = report_workers(spark, "after the warm-up")
            figures[name] = runs
    figures["workers"] = report_workers(spark, "at the end")
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
