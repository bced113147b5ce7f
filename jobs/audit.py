"""The coordinator-audit job: `__consumer_offsets` records in, the audit's Delta tables out.

    spark-submit jobs/audit.py --input <path> --output <base path> [options]
    python -m jobs.audit --input <path> --output <base path> [options]

Pipeline (one Spark application, one pass over the input's bytes):

1. read     the input (parquet / delta / json dumps / a catalog table)                `jobs.inputs`
2. scan     every record once, where it was read (`mapInArrow`, no shuffle): the run's time window
            and repeated (partition, offset) rows are dropped, offset commits are decoded and
            summarised per chunk with numpy, every other record is kept  `udfs.scan`, `jobs.offsets_path`
3. replay   the kept records (GroupMetadata, malformed commits, other types; a few percent of a
            log): repartition by group, sort within partitions by (group, partition, offset), and
            stream each partition group by group through `coordinator_core.audit` with
            `mapInArrow` (`udfs.replay`); one pass emits generations, assignments, rebalance
            causes, violations and quarantine rows
4. offsets  the chunks' partial summaries take their generation windows (from the replayed
            GroupMetadata records) and are stitched in log order: `offset_commits` and the
            `offset_regression` violations, with the same definitions as the pure path
5. write    every table in one run (`jobs.delta_io`): staged files, then one Delta commit per
            table with `runs` last
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from coordinator_core import __version__
from coordinator_core.errors import CoordinatorAuditError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from jobs.config import AuditConfig
    from jobs.offsets_path import Scan

__all__ = ["AUDIT_OUTPUT_TABLES", "RunSummary", "build_tables", "main", "parse_args", "run_audit"]

AUDIT_OUTPUT_TABLES: tuple[str, ...] = (
    "generations", "assignments", "rebalance_causes", "violations", "offset_commits", "quarantine",
    "partition_ownership", "rebalances", "group_health",
)
"""Every table a run writes, besides `runs`."""


def _log(line: str) -> None:
    print(f"[coordinator-audit] {line}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------
# command line


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="jobs.audit",
        description="Audit Kafka classic consumer groups from __consumer_offsets records: generations, "
                    "assignments, rebalance causes, protocol violations, offset-commit summaries and "
                    "quarantined records, written as Delta tables.",
        epilog="Values not given on the command line come from the config file (default conf/audit.toml).",
    )
    src = p.add_argument_group("input")
    src.add_argument("--input", metavar="PATH", help="records to audit: a file or directory (parquet, delta, json)")
    src.add_argument("--input-table", metavar="NAME", help="records to audit: a catalog table instead of a path")
    src.add_argument("--format", choices=["auto", "parquet", "delta", "json"],
                     help="input format (default auto: _delta_log => delta, *.parquet => parquet, *.json(l) => json)")
    src.add_argument("--text-encoding", choices=["auto", "hex", "base64"],
                     help="how JSON-lines dumps encode key and value (default auto)")
    src.add_argument("--since", metavar="TIME", help="keep records with timestamp >= TIME (ISO 8601, UTC default)")
    src.add_argument("--until", metavar="TIME", help="keep records with timestamp < TIME (ISO 8601)")
    src.add_argument("--group", action="append", metavar="GLOB",
                     help="audit only groups matching this glob (repeatable; default: every group)")
    out = p.add_argument_group("output")
    out.add_argument("--output", metavar="PATH", help="base path of the Delta tables (one directory per table)")
    out.add_argument("--catalog-schema", metavar="SCHEMA",
                     help="write catalog tables <SCHEMA>.<table> instead (needs Delta Spark and a metastore)")
    out.add_argument("--mode", choices=["replace_window", "overwrite", "append"],
                     help="replace_window (default): replace this window's rows; overwrite: replace all; append")
    out.add_argument("--writer", choices=["auto", "native", "embedded"],
                     help="auto (default): Delta Spark when on the classpath, else Spark Parquet + deltalake commit")
    job = p.add_argument_group("job")
    job.add_argument("--config", metavar="FILE", help="job configuration (TOML; default conf/audit.toml)")
    job.add_argument("--shards", type=int, metavar="N", help="Spark partitions of the per-group replay")
    job.add_argument("--no-quarantine", action="store_true",
                     help="count undecodable records but do not write them to the quarantine table")
    job.add_argument("--master", metavar="URL", help="Spark master (default: spark-submit's, else local[2])")
    job.add_argument("--run-id", metavar="ID", help="identifier of this run (default: time-based)")
    job.add_argument("--no-summary", action="store_true",
                     help="skip reading the tables back for the per-table summary lines")
    return p.parse_args(argv)


def config_from_args(args: argparse.Namespace) -> AuditConfig:
    from jobs.config import load_config

    overrides: dict[str, Any] = {
        "input.path": args.input, "input.table": args.input_table, "input.format": args.format,
        "input.text_encoding": args.text_encoding, "window.since": args.since, "window.until": args.until,
        "groups.include": args.group, "output.path": args.output, "output.catalog_schema": args.catalog_schema,
        "output.write_mode": args.mode, "output.writer": args.writer, "job.shards": args.shards,
        "job.quarantine": False if args.no_quarantine else None, "spark.master": args.master,
    }
    if args.input_table and not args.input:
        overrides["input.path"] = ""
    if args.input and not args.input_table:
        overrides["input.table"] = ""
    if args.catalog_schema and not args.output:
        overrides["output.path"] = ""
    return load_config(args.config, overrides)


# ------------------------------------------------------------------------------------------------
# the pipeline


@dataclass(frozen=True, slots=True)
class RunSummary:
    """What a run did: its id and window, every count of the `runs` row, rows per table, where."""

    run_id: str
    run_window: str
    counts: dict[str, int]
    table_rows: dict[str, int]
    locations: dict[str, str]
    writer: str
    duration_s: float


def build_tables(spark: SparkSession, scan: Scan, *, shards: int, groups: Sequence[str] = (),
                 stage: Callable[..., Any]) -> tuple[dict[str, DataFrame], dict[str, int], DataFrame]:
    """The audit tables from the single pass's output: ({table: DataFrame}, counts, wide).

    The replay reads the pass's side rows (everything but the summarised offset commits); its wide
    output is persisted (it feeds five tables and the counts); the caller unpersists `wide` after
    writing."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from jobs import offsets_path
    from jobs.inputs import filter_groups
    from udfs.replay import replay_frame, split_counts, split_table

    side = filter_groups(scan.side(), groups)
    with stage(spark, "replay (mapInArrow, one pass per group)") as st:
        replay_in = (side.select("group_id", "partition", "offset", "timestamp_ms", "key", "value")
                     .repartition(shards, "group_id")
                     .sortWithinPartitions("group_id", "partition", "offset"))
        wide = replay_frame(replay_in).persist(StorageLevel.MEMORY_AND_DISK)
        st.count(wide)

    counts_row = split_counts(wide).agg(*[F.sum(c).alias(c) for c in
                                          ("records_in", "duplicates", "replayed", "quarantined",
                                           "skipped_other_type", "group_records")]).first()
    counts = {k: int(counts_row[k] or 0) for k in counts_row.asDict()}

    quarantine = split_table(wide, "quarantine")
    excluded = quarantine.where(F.col("key_type") == offsets_path.GROUP_METADATA_TYPE).select(
        F.col("partition"), F.col("offset"))
    with stage(spark, "offsets (stitch the pass's partial summaries)") as st:
        windows = offsets_path.group_metadata_windows(side, exclude=excluded).persist(StorageLevel.MEMORY_AND_DISK)
        offset_rows, regressions = offsets_path.offset_commits(scan.df, windows)
        offset_rows = offset_rows.persist(StorageLevel.MEMORY_AND_DISK)
        st.count(offset_rows)

    # split_table already yields each table's columns with its schema's types (REPLAY_SCHEMA is built
    # from the same row dataclasses), and offsets_path conforms its own outputs.
    violations = split_table(wide, "violations").unionByName(
        offsets_path.offset_regression_violations(regressions, windows))
    tables = {
        "generations": split_table(wide, "generations"),
        "assignments": split_table(wide, "assignments"),
        "rebalance_causes": split_table(wide, "rebalance_causes"),
        "violations": violations,
        "offset_commits": offset_rows,
        "quarantine": quarantine,
    }
    return tables, counts, wide


def run_audit(spark: SparkSession, cfg: AuditConfig, *, run_id: str | None = None) -> RunSummary:
    """Runs the whole job on an existing session (notebooks call this directly)."""
    from pyspark import StorageLevel

    from jobs import delta_io
    from jobs.derived_step import derived_tables_for_run
    from jobs.inputs import read_input
    from jobs.offsets_path import scan_log
    from jobs.spark_session import stage
    from udfs.schemas import RUNS_SCHEMA

    started = datetime.now(UTC)
    t0 = time.perf_counter()
    run_id = run_id or delta_io.new_run_id(started)
    run_window = delta_io.window_label(cfg.since, cfg.until)
    source = cfg.input_path or cfg.input_table
    assert source is not None
    _log(f"run {run_id}: input {source}, window {run_window}, output "
         f"{cfg.output_path or cfg.catalog_schema}, mode {cfg.write_mode}")

    with stage(spark, "read input and scan it once (offset commits summarised, the rest kept)") as st:
        data = read_input(spark, source, format=cfg.input_format, is_table=cfg.input_table is not None,
                          text_encoding=cfg.text_encoding, since=cfg.since, until=cfg.until)
        scan = scan_log(data.raw, since=cfg.since, until=cfg.until, groups=cfg.groups,
                        chunk_rows=cfg.scan_chunk_rows, reader=cfg.scan_reader if data.format == "parquet" else "spark",
                        shards=cfg.shards, log=_log)
        st.rows = scan.counts["records_in"]
    sc = scan.counts
    _log(f"single pass: {scan.reader} reader{', input re-sorted' if scan.reordered else ''}; {sc['commits']:,} "
         f"commits and {sc['tombstones']:,} tombstones summarised, {sc['side_records']:,} records for the replay")

    tables, counts, wide = build_tables(spark, scan, shards=cfg.shards, groups=cfg.groups, stage=stage)
    if not cfg.quarantine:
        tables["quarantine"] = tables["quarantine"].limit(0)

    # The tables are small next to the input (summaries and per-generation rows): persisting them
    # makes the counts and the write share one computation instead of running every plan twice.
    tables = {name: df if df.is_cached else df.persist(StorageLevel.MEMORY_AND_DISK) for name, df in tables.items()}
    if cfg.derived_tables:  # from the persisted base tables (their first computation fills the cache)
        tables.update(derived_tables_for_run(spark, tables, run_id=run_id, run_window=run_window, since=cfg.since,
                                             until=cfg.until, base_path=cfg.output_path, stage=stage))
    with stage(spark, "count rows per table"):
        table_rows = {name: int(df.count()) for name, df in tables.items()}

    run_counts = {
        "records_in": sc["records_in"],
        "duplicates_dropped": sc["duplicates"] + counts["duplicates"],
        "filtered_by_window": sc["filtered_by_window"],
        "filtered_by_group": sc["filtered_by_group"] + sc["side_records"] - counts["records_in"],
        "records_replayed": counts["replayed"] + sc["commits"] + sc["tombstones"],
        "quarantined": counts["quarantined"],
        "skipped_other_type": counts["skipped_other_type"],
    }
    accounted = sum(v for k, v in run_counts.items() if k != "records_in")
    if accounted != run_counts["records_in"]:
        raise CoordinatorAuditError(
            f"run {run_id}: records do not add up: {run_counts['records_in']} in, {accounted} accounted for "
            f"({json.dumps(run_counts)}); nothing was written")

    finished = datetime.now(UTC)
    writer = delta_io.resolve_writer(spark, cfg.writer)
    runs_row = {
        "run_id": run_id, "status": "succeeded", "started_at": started, "finished_at": finished,
        "duration_ms": int((finished - started).total_seconds() * 1000), "input": source,
        "input_format": data.format, "since": cfg.since, "until": cfg.until,
        "group_filter": ",".join(cfg.groups) or None, **run_counts, "table_rows": table_rows,
        "code_version": __version__, "spark_version": spark.version, "writer": writer,
        "config_json": json.dumps(cfg.to_dict(), sort_keys=True),
    }
    tables_with_runs = {**tables, "runs": spark.createDataFrame([runs_row], RUNS_SCHEMA)}
    with stage(spark, "write Delta tables"):
        results = delta_io.write_tables(
            spark, tables_with_runs, run_id=run_id, run_window=run_window, base_path=cfg.output_path,
            catalog_schema=cfg.catalog_schema, mode=cfg.write_mode, writer=cfg.writer)
    wide.unpersist()
    scan.unpersist()
    for df in tables.values():
        df.unpersist()
    locations = {name: r.location for name, r in results.items()}
    return RunSummary(run_id, run_window, run_counts, table_rows, locations, writer,
                      time.perf_counter() - t0)


def table_highlights(spark: SparkSession, summary: RunSummary) -> dict[str, str]:
    """A one-line summary of each written table, read back from Delta (so it also proves the
    tables are readable): what a person checks first after a run."""
    from pyspark.sql import functions as F

    from jobs.delta_io import read_table
    from jobs.derived_step import derived_highlights

    def top(df: DataFrame, column: str, n: int = 6) -> str:
        rows = df.groupBy(column).count().orderBy(F.desc("count"), column).limit(n).collect()
        return ", ".join(f"{r[column]} {r['count']}" for r in rows) or "none"

    run = F.col("run_id") == summary.run_id
    t = {name: read_table(spark, loc).where(run) for name, loc in summary.locations.items() if name != "runs"}
    g = t["generations"].agg(F.countDistinct("group_id").alias("groups"), F.count("*").alias("n"),
                             F.sum("missing_generations").alias("missing")).first()
    a = t["assignments"].agg(F.countDistinct("group_id", "member_id").alias("members"),
                             F.countDistinct("group_id", "topic", "partition").alias("partitions")).first()
    o = t["offset_commits"].agg(F.sum("commits").alias("commits"), F.sum("regressions").alias("reg")).first()
    return {
        "generations": f"{g['n']} generations of {g['groups']} groups ({g['missing'] or 0} generation ids skipped)",
        "assignments": f"{a['members']} member ids owning {a['partitions']} group partitions over time",
        "rebalance_causes": "primary causes: " + top(t["rebalance_causes"].where("is_primary"), "cause"),
        "violations": "by kind: " + top(t["violations"], "kind"),
        "offset_commits": f"{o['commits'] or 0} commits, {o['reg'] or 0} regressions",
        "quarantine": "by record type: " + top(t["quarantine"], "key_type"),
        **(derived_highlights(t) if "group_health" in t else {}),
    }


def print_summary(summary: RunSummary, *, out: Any = None, highlights: dict[str, str] | None = None) -> None:
    out = out or sys.stdout
    c = summary.counts
    print(f"coordinator-audit run {summary.run_id} (window {summary.run_window}, writer {summary.writer}, "
          f"{summary.duration_s:.1f} s)", file=out)
    print(f"  records in {c['records_in']:,} = replayed {c['records_replayed']:,} + quarantined "
          f"{c['quarantined']:,} + duplicates {c['duplicates_dropped']:,} + outside window "
          f"{c['filtered_by_window']:,} + other groups {c['filtered_by_group']:,} + other record types "
          f"{c['skipped_other_type']:,}", file=out)
    width = max(len(t) for t in summary.locations)
    for table, location in summary.locations.items():
        rows = summary.table_rows.get(table, 1 if table == "runs" else 0)
        print(f"  {table:<{width}}  {rows:>10,} rows  {location}", file=out)
        if highlights and table in highlights:
            print(f"  {'':<{width}}  {highlights[table]}", file=out)


def main(argv: Sequence[str] | None = None) -> int:
    from jobs.spark_session import build_session

    args = parse_args(argv)
    try:
        cfg = config_from_args(args)
    except CoordinatorAuditError as exc:
        print(f"jobs.audit: configuration error: {exc}", file=sys.stderr)
        return 2
    spark = build_session(master=cfg.spark_master, app_name=cfg.app_name, local_conf=cfg.spark_local_conf)
    try:
        summary = run_audit(spark, cfg, run_id=args.run_id)
    except CoordinatorAuditError as exc:
        print(f"jobs.audit: {exc}", file=sys.stderr)
        return 1
    print_summary(summary, highlights=None if args.no_summary else table_highlights(spark, summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
