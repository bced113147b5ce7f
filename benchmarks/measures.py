"""The benchmark's measurements: the Spark ones (bare scan, the offset path, the audit end to end),
each a function of a session and an input, and the pure-Python replay rates (one process, one
core). The orchestration (inputs, steps, the child process) is `benchmarks.harness`."""

from __future__ import annotations

import collections
import contextlib
import io
import re
import resource
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from benchmarks.memory import MemorySampler
from coordinator_audit.core.audit import GroupAuditor
from coordinator_audit.jobs import offsets_path
from coordinator_audit.jobs.audit import run_audit
from coordinator_audit.jobs.config import DEFAULT_SCAN_CHUNK_ROWS, load_config
from coordinator_audit.jobs.delta_io import local_table_path, read_table
from coordinator_audit.jobs.delta_read import read_arrow
from coordinator_audit.udfs.gc_batches import freeze_survivors

__all__ = ["AUDIT_STAGES", "STAGE_LINE", "bare_scan_totals", "measure_audit", "measure_bare_scan", "measure_offset_path", "measure_output_write",
           "measure_read_floors", "replay_python_seconds", "replay_rates", "stage_seconds"]

InputFormat = Literal["parquet", "delta", "kafka"]

STAGE_LINE = re.compile(r"^stage (.+?): .* in ([0-9.]+) s")
"""A stage's log line (`coordinator_audit.jobs.spark_session.stage`): its name, then what it did and its wall time."""
AUDIT_STAGES: dict[str, str] = {"pass": "read input and scan it once", "replay": "replay", "write": "write Delta tables"}
"""The audit's stages whose times `stage_seconds` splits out, by the first words of their name
(`coordinator_audit.jobs.audit`): the single pass; the per-group replay, whose time covers the `mapInArrow` of
`coordinator_audit.udfs.replay` over the single pass's materialised side rows and stretches (their shuffle by group
included) up to its persisted output; and the commit of the tables."""
REPLAY_TIMES = re.compile(r"^\[coordinator-audit\] replay: ([0-9,.]+) s feeding .*, ([0-9,.]+) s merging")
"""The job's log line of the replay's own Python time (`coordinator_audit.udfs.replay.TIMING_FIELDS`, summed over the
workers): feeding records through the groups' audits, and merging the offset-commit stretches."""


def _noop(df: DataFrame) -> None:
    df.write.format("noop").mode("overwrite").save()


def _read(spark: SparkSession, path: str, fmt: InputFormat) -> DataFrame:
    """The input as Spark reads it: Parquet files, or a Delta table through the job's own reader."""
    return spark.read.parquet(path) if fmt == "parquet" else read_table(spark, path)


def bare_scan_totals(df: DataFrame) -> dict[str, int]:
    """The bare scan's aggregate: count + sum(length(key) + length(value)), every record read,
    every byte touched (one Spark job)."""
    row = df.agg(F.count(F.lit(1)).alias("n"), F.sum(F.length("key") + F.length("value")).alias("bytes")).first()
    assert row is not None
    return {"records": int(row["n"]), "key_value_bytes": int(row["bytes"] or 0)}


def measure_bare_scan(spark: SparkSession, path: str, fmt: InputFormat = "parquet", *,
                      floors: bool = False) -> dict[str, Any]:
    """`bare_scan_totals` of the input as Spark reads it, timed; with `floors` (Parquet input),
    then `measure_read_floors` of it (its two entries beside the bare scan's own figures)."""
    t0 = time.perf_counter()
    totals = bare_scan_totals(_read(spark, path, fmt))
    out: dict[str, Any] = {"seconds": time.perf_counter() - t0, **totals, "format": fmt}
    if floors:
        out.update(measure_read_floors(spark, path))
    return out


def _python_read_counts(batches: Any) -> Any:
    """mapInArrow body of `measure_read_floors`' Python read: each unit's row groups read with
    pyarrow as the single pass's file reader reads them (its columns, `key` dictionary-decoded),
    the rows and the key and value bytes counted, nothing else done (its worker's long-lived objects
    frozen as the job's task functions freeze them: `coordinator_audit.udfs.gc_batches.freeze_survivors`)."""
    freeze_survivors()
    rows = nbytes = 0
    for ub in batches:
        for path, row_groups in zip(ub.column("path").to_pylist(), ub.column("row_groups").to_pylist(), strict=True):
            with pq.ParquetFile(path, read_dictionary=["key"]) as pf:
                for b in pf.iter_batches(batch_size=131_072, row_groups=row_groups,
                                         columns=["key", "value", "partition", "offset", "timestamp"]):
                    rows += b.num_rows
                    nbytes += b.column("value").nbytes
    yield pa.RecordBatch.from_pydict({"rows": [rows], "value_buffer_bytes": [nbytes]})


def measure_read_floors(spark: SparkSession, path: str) -> dict[str, Any]:
    """Two floors under the offset path's marginal cost, on a Parquet input, each timed alone:

    * `python_read`: the single pass's own input read and nothing else: the files' row groups, in
      the job's work units and tasks (`coordinator_audit.udfs.scan.pass_tasks`, as `coordinator_audit.jobs.offsets_path.scan_log` plans
      them), read with pyarrow in the Python workers, the rows counted. Any pass in Python pays it.
    * `jvm_commit_summary`: the plainest summary of the offset commits Spark can compute without
      Python: the records whose key is an OffsetCommitKey (type 0 or 1), grouped by the key's
      bytes, count and min/max log offset, written to `noop`; no value decoded, no window, no log
      order, no regression. A pass kept in the JVM pays at least this."""
    from coordinator_audit.udfs.scan import pass_tasks

    footers, why = offsets_path.local_parquet_files(spark.read.parquet(path))
    if why is not None:
        raise ValueError(f"read floors: the input cannot be read directly ({why})")
    total = sum(sum(f.row_groups) for f in footers)
    chunk = DEFAULT_SCAN_CHUNK_ROWS
    tasks = pass_tasks(footers, total_rows=total, cores=spark.sparkContext.defaultParallelism, chunk_rows=chunk)
    unit_df = offsets_path.task_frame(spark, tasks)
    t0 = time.perf_counter()
    read = unit_df.mapInArrow(_python_read_counts, "rows long, value_buffer_bytes long").agg(
        F.sum("rows").alias("rows")).first()
    t1 = time.perf_counter()
    raw = spark.read.parquet(path)
    commits = raw.where(F.substring("key", 1, 2).isin(b"\x00\x00", b"\x00\x01"))
    summary = Observation("jvm_commit_summary")
    _noop(commits.groupBy(F.expr("substring(key, 3)").alias("k"))
          .agg(F.count(F.lit(1)).alias("n"), F.min("offset").alias("lo"), F.max("offset").alias("hi"))
          .observe(summary, F.count(F.lit(1)).alias("keys"), F.sum("n").alias("commits")))
    t2 = time.perf_counter()
    assert read is not None
    return {"python_read": {"seconds": t1 - t0, "records": int(read["rows"] or 0), "units": sum(map(len, tasks)),
                            "tasks": len(tasks)},
            "jvm_commit_summary": {"seconds": t2 - t1, "keys": int(summary.get["keys"]),
                                   "commits": int(summary.get["commits"] or 0)}}


def measure_offset_path(spark: SparkSession, path: str) -> dict[str, Any]:
    """The job's offset-commit path alone: what produces `offset_commits` and `offset_regression`
    (`coordinator_audit.jobs.offsets_path.offset_path`: the single pass, then the per-group replay that merges its
    stretches into the generation windows and outputs those two tables' rows only), both outputs
    forced with a write to `noop`. Its two steps are timed apart (`stage_seconds`): `pass`, the
    single pass (`offsets_path.offset_scan`), and `replay`, the rest (`offsets_path.replay_offsets`
    and the two writes)."""
    t0 = time.perf_counter()
    scan = offsets_path.offset_scan(spark.read.parquet(path))
    t_scan = time.perf_counter()
    rows, violations = offsets_path.replay_offsets(scan)
    rows_obs, viol_obs = Observation("offset_rows"), Observation("offset_regression")
    _noop(rows.observe(rows_obs, F.count(F.lit(1)).alias("rows"), F.sum("commits").alias("commits"),
                       F.sum("tombstones").alias("tombstones"), F.sum("regressions").alias("regressions")))
    t1 = time.perf_counter()
    _noop(violations.observe(viol_obs, F.count(F.lit(1)).alias("rows")))
    t2 = time.perf_counter()
    scan.unpersist()
    got = rows_obs.get
    return {"seconds": t2 - t0, "scan_seconds": t_scan - t0, "offset_commits_seconds": t1 - t_scan,
            "stage_seconds": {"pass": t_scan - t0, "replay": t2 - t_scan},
            "offset_regression_seconds": t2 - t1, "reordered": scan.reordered, "scan_counts": scan.counts,
            "offset_commits_rows": int(got["rows"]), "commits": int(got["commits"] or 0),
            "tombstones": int(got["tombstones"] or 0), "regressions": int(got["regressions"] or 0),
            "offset_regression_rows": int(viol_obs.get["rows"])}


class StageTee(io.TextIOBase):
    """stderr that also keeps the job's `stage ...` lines and its replay-time line (`REPLAY_TIMES`)."""

    def __init__(self, target: Any) -> None:
        self.target = target
        self.lines: list[str] = []
        self._buf = ""

    def write(self, s: str) -> int:
        self.target.write(s)
        self._buf += s
        while "\n" in self._buf:
            line, self._buf = self._buf.split("\n", 1)
            if line.startswith("stage ") or REPLAY_TIMES.match(line):
                self.lines.append(line)
        return len(s)

    def flush(self) -> None:
        self.target.flush()


def measure_output_write(spark: SparkSession, locations: dict[str, str], scratch: Path) -> dict[str, Any]:
    """What writing the rows the audit wrote costs alone (every table of `locations` but `runs`,
    already in memory, as plain Parquet into `scratch`, one table after the other, timed), by
    the two writers the job has: Spark (`seconds`: the native writer's floor) and pyarrow in as
    many threads as the session has cores (`arrow_seconds`: the floor of the embedded writer,
    whose replay tasks write their rows with pyarrow; measured when the tables are local). The rows
    grow with the input (groups, generations and assignments scale with the records in the
    benchmark's inputs), so these costs have slopes of their own that no change to the audit's
    computation removes: the floor of an audit that writes through that writer."""
    frames = {name: read_table(spark, loc).drop("run_window", "run_id").cache()
              for name, loc in locations.items() if name != "runs"}
    rows = {name: df.count() for name, df in frames.items()}  # materialised before the clock starts
    t0 = time.perf_counter()
    for name, df in frames.items():
        df.write.mode("overwrite").parquet(str(scratch / name))
    seconds = time.perf_counter() - t0
    for df in frames.values():
        df.unpersist()
    out: dict[str, Any] = {"seconds": seconds, "rows": sum(rows.values()), "rows_per_table": rows}
    if all(local_table_path(loc) for loc in locations.values()):
        out["arrow_seconds"] = arrow_write_seconds(
            {name: _without_run(read_arrow(loc)) for name, loc in locations.items() if name != "runs"},
            scratch / "arrow", threads=spark.sparkContext.defaultParallelism)
    return out


def arrow_write_seconds(tables: dict[str, pa.Table], scratch: Path, *, threads: int) -> float:
    """Wall seconds pyarrow takes to write `tables` (in memory) as Parquet files under `scratch`,
    each cut into `threads` slices written by `threads` threads at once (pyarrow's writer releases
    the GIL, as the replay's tasks write in parallel)."""
    parts: list[tuple[pa.Table, Path]] = []
    for name, table in tables.items():
        (scratch / name).mkdir(parents=True, exist_ok=True)
        step = max(1, -(-table.num_rows // threads))
        parts += [(table.slice(i, step), scratch / name / f"part-{i // step:05d}.parquet")
                 for i in range(0, max(table.num_rows, 1), step)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(lambda part: pq.write_table(*part), parts))
    return time.perf_counter() - t0


def _without_run(table: pa.Table) -> pa.Table:
    return table.drop_columns([c for c in ("run_window", "run_id") if c in table.column_names])


def measure_audit(spark: SparkSession, path: str, out_dir: Path, *, master: str, shards: int | None,
                  sample_memory: bool, derived_tables: bool = True, fmt: InputFormat = "parquet",
                  output_write: bool = False, kafka_bootstrap: str | None = None) -> dict[str, Any]:
    """`coordinator_audit.jobs.audit.run_audit` end to end into `out_dir` (fresh), timed; memory sampled meanwhile.
    `fmt` is the job's `input.format`: Parquet files, or a Delta table that Spark reads itself;
    "kafka": the records of the broker at `kafka_bootstrap` (`input.kafka_bootstrap`; `path` is
    only the input they were loaded from). `output_write`: afterwards, also `measure_output_write`
    of the tables it wrote."""
    source: dict[str, Any] = ({"input.path": "", "input.kafka_bootstrap": kafka_bootstrap} if fmt == "kafka"
                              else {"input.path": path, "input.format": fmt})
    cfg = load_config(None, {**source, "input.table": "", "output.path": str(out_dir),
                             "output.write_mode": "overwrite", "spark.master": master, "job.shards": shards,
                             "job.derived_tables": derived_tables})
    sampler = MemorySampler() if sample_memory else None
    if sampler is not None:
        sampler.reset_peaks()
        sampler.start()
    tee = StageTee(sys.stderr)
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stderr(tee):
            summary = run_audit(spark, cfg, run_id=f"bench-{out_dir.name}")
    finally:
        elapsed = time.perf_counter() - t0
        memory = sampler.stop() if sampler is not None else None
    stages = stage_seconds(tee.lines)
    out: dict[str, Any] = {"seconds": elapsed, "shards": cfg.shards, "counts": summary.counts,
                           "table_rows": summary.table_rows, "writer": summary.writer, "stages": tee.lines,
                           "format": fmt, "replay_stage_seconds": stages.get("replay"), "stage_seconds": stages,
                           "cores": spark.sparkContext.defaultParallelism, **replay_python_seconds(tee.lines)}
    if memory is not None:
        memory["driver_python_peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        out["memory"] = memory
    if output_write:
        out["output_write"] = measure_output_write(spark, summary.locations, out_dir.with_name(out_dir.name + "-floor"))
    return out


def replay_python_seconds(lines: list[str]) -> dict[str, float | None]:
    """The replay's own Python time from an audit's logged lines (`REPLAY_TIMES`, summed over a
    warm-up pass and the window's pass): {"replay_feed_seconds", "replay_merge_seconds"}, None when
    the job logged no such line."""
    found = [(float(m.group(1).replace(",", "")), float(m.group(2).replace(",", "")))
             for m in map(REPLAY_TIMES.match, lines) if m]
    return {"replay_feed_seconds": sum(f for f, _ in found) if found else None,
            "replay_merge_seconds": sum(g for _, g in found) if found else None}


def stage_seconds(stage_lines: list[str]) -> dict[str, float]:
    """Wall seconds per stage of `AUDIT_STAGES` in an audit's stage lines (`STAGE_LINE`; a stage
    logged more than once, summed; one the job did not log is left out, never guessed), and
    `other`: its other stages together."""
    out: dict[str, float] = {}
    for m in filter(None, map(STAGE_LINE.match, stage_lines)):
        stage = m.group(1)
        name = next((k for k, words in AUDIT_STAGES.items() if stage == words or stage.startswith(words + " ")),
                    "other")
        out[name] = out.get(name, 0.0) + float(m.group(2))
    return out


# ------------------------------------------------------------------------------------------------
# pure-Python measurements (run in a fresh process each: one core, a clean RSS)


def _group_of(key: bytes) -> str:
    n = int.from_bytes(key[2:4], "big", signed=True)
    return key[4:4 + n].decode("utf-8", "replace") if n >= 0 else ""


def replay_rates(path: str, *, commit_records: int) -> dict[str, Any]:
    """GroupMetadata records/s and offset commits/s of `GroupAuditor` (load path on) in this process,
    per second of this process's CPU time (per core: what holds on a shared machine).

    GroupMetadata: every record of the input that is not an offset commit, group by group in log
    order (a fresh auditor per group). Commits: the groups of the first `__consumer_offsets`
    partitions (until about `commit_records` records), each fed its head (everything up to its
    last non-commit record, untimed) and then its commit tail, timed."""
    dataset = ds.dataset(path, format="parquet")
    cols = ["partition", "offset", "timestamp", "key", "value"]

    def rows(table: pa.Table) -> list[tuple[int, int, int, bytes, bytes | None]]:
        ts = pc.cast(table["timestamp"], pa.int64()).to_pylist()
        return list(zip(table["partition"].to_pylist(), table["offset"].to_pylist(), ts,
                        table["key"].to_pylist(), table["value"].to_pylist(), strict=True))

    def by_group(recs: list[tuple[int, int, int, bytes, bytes | None]]) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {}
        for r in sorted(recs, key=lambda r: (r[0], r[1])):
            out.setdefault(_group_of(r[3]), []).append(r)
        return out

    t_read = time.perf_counter()
    prefix = pc.binary_slice(ds.field("key"), 0, 2) if hasattr(pc, "binary_slice") else None
    not_commit = ~((prefix == b"\x00\x01") | (prefix == b"\x00\x00")) if prefix is not None else None
    meta = dataset.to_table(columns=cols, filter=not_commit)
    groups = by_group(rows(meta))
    read_s = time.perf_counter() - t_read

    gm_records = other = 0
    t0 = time.process_time()
    for gid, recs in groups.items():
        a = GroupAuditor(gid)
        collections.deque(a.feed(recs), maxlen=0)
        a.finish()
        gm_records += a.counts.group_records
        other += len(recs)
    gm_s = time.process_time() - t0

    # commits: whole groups of the first partitions, up to about commit_records records
    sizes = dataset.to_table(columns=["partition"]).group_by("partition").aggregate([("partition", "count")])
    per_part = dict(zip(sizes["partition"].to_pylist(), sizes["partition_count"].to_pylist(), strict=True))
    chosen, total = [], 0
    for p in sorted(per_part):
        if total >= commit_records:
            break
        chosen.append(p)
        total += per_part[p]
    part_groups = by_group(rows(dataset.to_table(columns=cols, filter=ds.field("partition").isin(chosen))))
    commits = 0
    tail_s = 0.0
    for gid, recs in part_groups.items():
        cut = max((i + 1 for i, r in enumerate(recs) if r[3][:2] not in (b"\x00\x00", b"\x00\x01")), default=0)
        a = GroupAuditor(gid)
        collections.deque(a.feed(recs[:cut]), maxlen=0)
        t1 = time.process_time()
        collections.deque(a.feed(recs[cut:]), maxlen=0)
        a.finish()
        tail_s += time.process_time() - t1
        commits += len(recs) - cut
    return {
        "groups": len(groups), "group_metadata_records": gm_records, "non_commit_records": other,
        "group_metadata_seconds": gm_s,
        "group_metadata_per_s": gm_records / gm_s if gm_s > 0 else None,
        "commit_groups": len(part_groups), "commit_partitions": len(chosen), "commit_records": commits,
        "commit_seconds": tail_s, "commits_per_s": commits / tail_s if tail_s > 0 else None,
        "read_seconds": read_s,
    }
