"""The coordinator-audit job: `__consumer_offsets` records in, the audit's Delta tables out.

    coordinator-audit run --input <path> --output <base path> [options]      (the installed command)
    python -m coordinator_audit run --input <path> --output <base path> [options]
    spark-submit --py-files coordinator_audit.zip coordinator_audit/jobs/audit.py --input <path> --output <base path> [options]

(spark-submit runs a script: this module is it, as `coordinator-audit run`.)

Pipeline (one Spark application, one pass over the input's bytes):

0. plan     which earlier run of the output this one continues, and its `group_state` rows; with
            none, the input's records before the window rebuild the state (warm-up)  `coordinator_audit.jobs.nightly`
1. read     the input (parquet / delta / json dumps / a catalog table)                `coordinator_audit.jobs.inputs`
2. scan     every record once, where it was read (`mapInArrow`, no shuffle): the run's window (after
            the base run's last offset per partition, from the first record on a partition no
            earlier run read, before `--until`; with no base run, the time bounds) and repeated
            (partition, offset) rows are dropped, offset commits are decoded and summarised per
            chunk in compiled code, every other record is kept   `coordinator_audit.udfs.scan`, `coordinator_audit.jobs.offsets_path`
3. replay   the kept records (GroupMetadata, malformed commits, other types; a few percent of a
            log), the pass's summarised stretches of offset commits and each carried group's saved
            state, by group (in a local session handed from task to task as local files cut into
            group buckets, `coordinator_audit.udfs.handoff`; else Spark repartitions them by group), sorted by (group,
            partition, offset), streamed group by group through `coordinator_audit.core.audit` with
            `mapInArrow` (`coordinator_audit.udfs.replay`); the stretches merge into the generation windows the replayed
            GroupMetadata records open (`GroupAuditor.merge_stretch`, the rules of
            `coordinator_audit.core.audit.offsets`), so one pass emits generations, assignments,
            rebalance causes (with the commits as evidence), violations (offset regressions
            included), offset_commits, quarantine rows and the groups' new state, and marks the
            rows that close or change rows an earlier run wrote
4. derive   the derived tables (ownership, rebalances, health) from those, per group: in the
            replay itself at each group's end when the run's own rows are all they need (a fresh
            output, no broker log), else in a stage of their own with the rows earlier runs
            stored                                                     `coordinator_audit.udfs.replay`, `coordinator_audit.udfs.derived`
5. write    every table in one run (`coordinator_audit.jobs.delta_io`): staged files, then one Delta commit per
            table (and a MERGE of the carried rows) with `runs` last; with the embedded writer on
            a local path the replay's tasks wrote most tables' files already (`coordinator_audit.udfs.table_files`,
            `direct_tables`) and only their commits are left
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

import pyarrow as pa
import pyarrow.compute as pc
from deltalake.exceptions import DeltaError
from pyspark import SparkContext, StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from coordinator_audit.cli import EXIT_CODES, PROG
from coordinator_audit.core import __version__
from coordinator_audit.core.errors import ConfigError, CoordinatorAuditError
from coordinator_audit.jobs import delta_io, nightly
from coordinator_audit.jobs.config import (
    DEFAULT_COMPRESSION,
    DEFAULT_OUTPUT_PATH,
    AuditConfig,
    Compression,
    load_config,
)
from coordinator_audit.jobs.delta_io import read_table
from coordinator_audit.jobs.delta_read import may_hold, read_arrow
from coordinator_audit.jobs.derived_step import (
    EXACT_MEDIAN_ROWS,
    HIGHLIGHT_COLUMNS,
    derived_highlights,
    derived_highlights_arrow,
    derived_tables_for_run,
    has_history,
)
from coordinator_audit.jobs.inputs import InputError, detect_format, filter_groups, read_input, skipped_files
from coordinator_audit.jobs.kafka_source import KafkaRead, parse_kafka_options, parse_offsets_json, read_kafka
from coordinator_audit.jobs.offsets_path import local_parquet_files, scan_log
from coordinator_audit.jobs.spark_session import (
    build_session,
    has_jvm,
    local_tasks,
    release,
    ship_code,
    stage,
)
from coordinator_audit.udfs.broker_log import attach_broker_account, broker_account_frame
from coordinator_audit.udfs.derived import DERIVED_TABLES, overlapping_window
from coordinator_audit.udfs.history import BASE_INPUTS, DEFAULT_HEALTH, HealthThresholds
from coordinator_audit.udfs.json_lines import DEFAULT_TOPIC
from coordinator_audit.udfs.replay import (
    STATE_WINDOWS_COLUMN,
    TIMING_FIELDS,
    ResumeMode,
    files_written,
    saved_states_table,
    split_counts,
    split_state,
    split_table,
)
from coordinator_audit.udfs.scan import footers_kept
from coordinator_audit.udfs.schemas import (
    BROKER_ACCOUNT_COLUMNS,
    GROUP_STATE_SCHEMA,
    RUNS_SCHEMA,
    epoch_ms,
    stored_schema,
    with_time_columns,
)
from coordinator_audit.udfs.table_files import (
    CARRIED_PREFIX,
    DirectWrite,
    carried_key,
    staged_rows,
    staged_schema,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from coordinator_audit.jobs.offsets_path import Scan

__all__ = ["AUDIT_OUTPUT_TABLES", "Capabilities", "ReplayOutput", "RunChoices", "RunSummary", "build_tables", "main",
           "parse_args", "preflight",
           "run_audit"]

AUDIT_OUTPUT_TABLES: tuple[str, ...] = (
    "generations", "assignments", "rebalance_causes", "violations", "offset_commits", "quarantine", "group_state",
    "partition_ownership", "rebalances", "group_health",
)
"""Every table a run writes, besides `runs`."""


def _log(line: str) -> None:
    print(f"[coordinator-audit] {line}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------
# command line


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog=f"{PROG} run", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Audit Kafka classic consumer groups from __consumer_offsets records: generations, "
                    "assignments, rebalance causes, protocol violations, offset-commit summaries and "
                    "quarantined records, written as Delta tables.",
        epilog="Values not given on the command line come from --config, else the built-in defaults\n"
               "(documented in conf/audit.toml).\n\n" + EXIT_CODES,
    )
    src = p.add_argument_group("input")
    src.add_argument("--input", metavar="PATH", help="records to audit: a file or directory (parquet, delta, json)")
    src.add_argument("--input-table", metavar="NAME", help="records to audit: a catalog table instead of a path")
    src.add_argument("--format", choices=["auto", "parquet", "delta", "json"],
                     help="input format (default auto: _delta_log => delta, *.parquet => parquet, *.json(l) => json)")
    src.add_argument("--text-encoding", choices=["auto", "hex", "base64"],
                     help="how JSON-lines dumps encode key and value (default auto)")
    src.add_argument("--since", metavar="TIME",
                     help="keep records with timestamp >= TIME (ISO 8601, UTC default); a run that continues an "
                          "earlier run of the output reads from where that run stopped instead (after a skipped "
                          "night, its window starts at that run's end)")
    src.add_argument("--until", metavar="TIME", help="keep records with timestamp < TIME (ISO 8601)")
    src.add_argument("--group", action="append", metavar="GLOB",
                     help="audit only groups matching this glob (repeatable; default: every group)")
    src.add_argument("--kafka-bootstrap", metavar="HOST:PORT",
                     help="read __consumer_offsets from this Kafka cluster (batch, Spark's Kafka source) "
                          "instead of --input")
    src.add_argument("--kafka-option", action="append", metavar="KEY=VALUE",
                     help="a Kafka client setting for --kafka-bootstrap, e.g. security.protocol=SASL_SSL "
                          "(repeatable; secret values are redacted in logs and runs.config_json)")
    src.add_argument("--kafka-partitions", type=int, metavar="N",
                     help="the partition count of __consumer_offsets (the brokers' offsets.topic.num.partitions, "
                          "50 unless they set it): needed on Spark Connect (--remote), which reads partitions "
                          "0..N-1; a classic session asks the cluster (and checks N when given)")
    src.add_argument("--kafka-starting-offsets", metavar="JSON",
                     help='next offset to read per partition, e.g. \'{"0": 1234, "1": 987}\' (default: earliest)')
    src.add_argument("--server-log", metavar="PATH",
                     help="the broker's server.log (file or directory): adds Kafka's own reason and timing "
                          "of each rebalance to generations")
    out = p.add_argument_group("output")
    out.add_argument("--output", metavar="PATH",
                     help=f"base path of the Delta tables, one directory per table (default {DEFAULT_OUTPUT_PATH}); "
                          "a folder holding anything but this job's tables, or inside a Delta table, is refused")
    out.add_argument("--force-output", action="store_true",
                     help="write to --output even when it holds other files or lies inside a Delta table")
    out.add_argument("--catalog-schema", metavar="SCHEMA",
                     help="write catalog tables <SCHEMA>.<table> instead (needs Delta Spark and a metastore)")
    out.add_argument("--mode", choices=["replace_window", "overwrite", "append"],
                     help="replace_window (default): replace this window's rows; overwrite: replace all; append")
    out.add_argument("--writer", choices=["auto", "native", "embedded"],
                     help="auto (default): Delta Spark when the session is configured for it (its extension and catalog, "
                          "not just its jars), else Spark Parquet + deltalake commit")
    out.add_argument("--compression", choices=list(get_args(Compression)),
                     help=f"codec of the Parquet files this run writes (default {DEFAULT_COMPRESSION})")
    job = p.add_argument_group("job")
    job.add_argument("--config", metavar="FILE",
                     help="job configuration overriding the built-in defaults (TOML; see conf/audit.toml)")
    job.add_argument("--shards", type=int, metavar="N", help="Spark partitions of the per-group replay")
    job.add_argument("--no-quarantine", action="store_true",
                     help="count undecodable records but do not write them to the quarantine table")
    job.add_argument("--master", metavar="URL", help="Spark master (default: spark-submit's, else local[2])")
    job.add_argument("--jars", action="append", metavar="JAR[,JAR]",
                     help="jars added to the Spark session the job starts, e.g. Spark's Kafka source for "
                          "--kafka-bootstrap (repeatable; config spark.jars)")
    job.add_argument("--packages", action="append", metavar="GROUP:ARTIFACT:VERSION[,...]",
                     help="Maven packages added to the Spark session the job starts, resolved from Maven "
                          "Central, e.g. org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0 (repeatable; config "
                          "spark.packages)")
    job.add_argument("--remote", metavar="URL",
                     help="run on a Spark Connect server, e.g. sc://host:15002 (default: SPARK_REMOTE from the "
                          "environment, else a classic session)")
    job.add_argument("--run-id", metavar="ID", help="identifier of this run (default: time-based)")
    job.add_argument("--no-summary", action="store_true",
                     help="skip reading the tables back for the per-table summary lines")
    job.add_argument("--verbose", action="store_true",
                     help="keep Spark's own log level (default: errors only) and print full traces on failure")
    return p.parse_args(argv)


def _listed(values: Sequence[str] | None) -> list[str] | None:
    """The comma-separated items of a repeatable flag (None: not given)."""
    if not values:
        return None
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


def config_from_args(args: argparse.Namespace) -> AuditConfig:
    overrides: dict[str, Any] = {
        "input.path": args.input, "input.table": args.input_table, "input.format": args.format,
        "input.text_encoding": args.text_encoding, "window.since": args.since, "window.until": args.until,
        "groups.include": args.group, "output.path": args.output, "output.catalog_schema": args.catalog_schema,
        "output.write_mode": args.mode, "output.writer": args.writer, "output.compression": args.compression,
        "job.shards": args.shards,
        "job.quarantine": False if args.no_quarantine else None, "spark.master": args.master,
        "input.kafka_bootstrap": args.kafka_bootstrap, "input.kafka_options": args.kafka_option,
        "input.kafka_partitions": args.kafka_partitions,
        "input.server_log": args.server_log, "spark.jars": _listed(args.jars), "spark.packages": _listed(args.packages),
    }
    if args.kafka_bootstrap:
        overrides["input.path"] = overrides["input.path"] or ""
        overrides["input.table"] = overrides["input.table"] or ""
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
    resume: str = "fresh"
    base_run_id: str | None = None
    rows_merged: dict[str, int] = field(default_factory=dict)
    note: str | None = None
    kafka_offsets: dict[int, tuple[int, int]] | None = None
    """Kafka input: {partition: (start, end)} read, end exclusive (the next run's start)."""


MERGE_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, str]]] = {
    "generations": (("group_id", "generation_id", "source_partition", "source_offset"), (),
                    ("source_partition", "source_offset")),
    "assignments": (("group_id", "member_id", "generation_id", "partition", "source_partition", "source_offset"),
                    ("topic_id",), ("source_partition", "source_offset")),
    "offset_commits": (("group_id", "topic", "partition"), ("window_start_offset",),
                       ("source_partition", "first_source_offset")),
}
"""Per table whose rows a later run can close: (key, null-safe key, the record the row starts at).
`assignments` compare `topic` only where `topic_id` is null (`delta_io.Merge.topic_by_id`): a
consumer group's row is one row whether or not its topic id had a name when it was written."""


@dataclass(slots=True)
class AuditPass:
    """One pass of the pipeline over a window: the new rows per table, the rows that continue rows an
    earlier run left open (`carried`), every group's state after the pass, and what was read."""

    tables: dict[str, DataFrame]
    carried: dict[str, DataFrame]
    group_state: DataFrame | None
    """Every group's state after the pass (None: the replay's tasks wrote it, `staged`)."""
    counts: dict[str, int]
    ranges: dict[int, tuple[int, int, int]]
    missing: dict[int, int]
    """Per partition read: the running count of offsets never read, at the pass's end."""
    persisted: list[DataFrame]
    """Local checkpoints to release once the tables are written (the replay's output, the scan's)."""
    staged: dict[str, delta_io.StagedFiles] = field(default_factory=dict)
    """Tables whose new rows the replay's tasks wrote as files themselves (`coordinator_audit.udfs.table_files`)."""
    carried_files: dict[str, delta_io.StagedFiles] = field(default_factory=dict)
    """Tables whose carried rows the replay's tasks wrote as files (`DirectWrite.carried_dirs`):
    the source of their merge, read by the driver."""


def saved_states(state: DataFrame, groups: Sequence[str] = ()) -> DataFrame:
    """The replay's saved states (group_id, `state`, `value`, `STATE_WINDOWS_COLUMN`) from
    `group_state` rows: every group `groups` keeps that the base run kept a state for (a group it saw
    only through offset commits has no auditor_state: it resumes afresh, with its open offset
    summaries), the state as UTF-8 bytes (empty for none), `value` its GroupMetadata record's value
    (`window_value`: a state of format 2 keeps it apart). `coordinator_audit.udfs.replay.saved_states_table` is its
    Arrow twin."""
    return filter_groups(state, groups).where(
        F.col("auditor_state").isNotNull() | (F.size("offset_windows") > 0)).select(
        "group_id", F.encode(F.coalesce("auditor_state", F.lit("")), "UTF-8").alias("state"),
        F.col("window_value").alias("value"), F.col("offset_windows").alias(STATE_WINDOWS_COLUMN))


_RESUME_MODES: dict[str, ResumeMode] = {"resume": "resume", "rerun": "rerun", "warmup": "warmup"}
"""The replay's mode for a pass's `resume` (a plan's "fresh" replays as "resume": no group has state)."""


@dataclass(slots=True)
class ReplayOutput:
    """What `build_tables` returns: the new rows per table (`group_state` included when given a
    state and Spark writes it), the rows continuing open rows of the base run, to merge (`carried`),
    every group's state after the pass (None: the replay's tasks wrote it, or no state was given),
    the replay's counts, its persisted wide output, and the files its tasks wrote themselves."""

    tables: dict[str, DataFrame]
    carried: dict[str, DataFrame]
    group_state: DataFrame | None
    counts: dict[str, int]
    wide: DataFrame
    """The replay's output, a local checkpoint: released after writing (`coordinator_audit.jobs.spark_session.release`)."""
    staged: dict[str, delta_io.StagedFiles]
    """Tables whose new rows the replay's tasks wrote as files themselves."""
    carried_files: dict[str, delta_io.StagedFiles]
    """Tables whose carried rows the replay's tasks wrote as files (`DirectWrite.carried_dirs`)."""


def build_tables(spark: SparkSession, scan: Scan, *, shards: int, groups: Sequence[str] = (),
                 stage: Callable[..., Any], state: DataFrame | None = None, resume: str = "resume",
                 gaps: Mapping[int, Any] | None = None, missing: Mapping[tuple[int, int], int] | None = None,
                 derive: bool = False, direct: DirectWrite | None = None, resumes: bool = True,
                 state_table: Callable[[], Iterator[pa.Table]] | None = None,
                 health: HealthThresholds = DEFAULT_HEALTH) -> ReplayOutput:
    """The audit tables from the single pass's output (`ReplayOutput`).

    The replay reads the pass's side rows (everything but the summarised offset commits) and its
    stretches of summarised commits (merged into the groups' windows) and, when `state` (the base
    run's `group_state` rows) is given, resumes every group from it; its wide output is kept once,
    a local checkpoint (every table and the counts are projections of it, `ReplayOutput.wide`).
    With `state`, the output also holds `carried` (rows continuing open rows of the base run, to
    merge) and `group_state` (every group's state after this pass). With `derive` the replay also
    derives the groups' ownership, rebalance and health rows from its own (`replay_frame`), and
    `tables` holds them (`DERIVED_TABLES`, not yet cut to the run's window; days judged by `health`). With `direct` the
    replay's tasks write the new rows of its tables themselves (`coordinator_audit.udfs.table_files`; the derived
    rows cut to the run's window): those tables are in `staged`, as the files written, not in
    `tables`; with `state` too, their carried rows are in `carried_files`
    (`DirectWrite.carried_dirs`), not in `carried`. `resumes` False: `state` is known to be empty (a
    fresh chain): no state is read. The replay reads the pass's rows from its handed-off files when
    it left some (`Scan.replay`); `state_table` then reads the same rows as `state` in the driver (a
    path-based output), and the driver hands them off itself, without a Spark job."""
    wide = _replay(spark, scan, shards=shards, groups=groups, stage=stage, state=state if resumes else None,
                   mode=_RESUME_MODES.get(resume, "resume"), gaps=gaps, missing=missing, derive=derive,
                   direct=direct, state_table=state_table, health=health)
    counts = _replay_counts(wide, derive=derive)
    written = direct.stage_dirs if direct is not None else {}
    carried_dirs = direct.carried_dirs if direct is not None else {}
    staged, carried_files = _staged_files(wide, written, carried_dirs) if written else ({}, {})
    # split_table yields each table's columns with its schema's types (REPLAY_SCHEMA is built from
    # the same row dataclasses)
    tables: dict[str, DataFrame] = {name: split_table(wide, name) for name in (
        "generations", "assignments", "rebalance_causes", "violations", "offset_commits", "quarantine",
        *(DERIVED_TABLES if derive else ())) if name not in written}
    out = ReplayOutput(tables, {}, None, counts, wide, staged, carried_files)
    if state is None:
        return out
    for name in ("generations", "assignments", "offset_commits"):
        if name not in carried_files:  # (else the tasks wrote them to files)
            out.carried[name] = split_table(wide, name, carried=True)
    if "group_state" not in written:
        tables["group_state"] = split_state(wide).selectExpr(
            *[f"CAST(`{f.name}` AS {f.dataType.simpleString()}) AS `{f.name}`" for f in GROUP_STATE_SCHEMA.fields])
    out.group_state = tables.get("group_state")
    return out


def _replay(spark: SparkSession, scan: Scan, *, shards: int, groups: Sequence[str], stage: Callable[..., Any],
            state: DataFrame | None, mode: ResumeMode, gaps: Mapping[int, Any] | None,
            missing: Mapping[tuple[int, int], int] | None, derive: bool, direct: DirectWrite | None,
            state_table: Callable[[], Iterator[pa.Table]] | None, health: HealthThresholds) -> DataFrame:
    """The replay's wide output (`build_tables`), resumed from the saved states of `state` (None:
    none), which the driver reads itself through `state_table` when the pass hands its rows off."""
    with stage(spark, "replay (mapInArrow, one pass per group, offset commits merged in)") as st:
        def replay(saved: DataFrame | Iterator[pa.Table] | None) -> DataFrame:
            # a local checkpoint, not a cache: Spark's columnar cache compresses every column of the
            # wide output as it builds, which a checkpoint does not; its blocks are freed with
            # `release` after the writes
            # (an executor lost before then fails the run, which re-running the window heals, as with
            # the derived tables)
            # (the checkpoint also makes the tasks that write files themselves, `direct`, run once: a
            # later job reads their output rows, never re-runs them)
            return scan.replay(shards=shards, groups=groups, states=saved, missing=missing, mode=mode, gaps=gaps,
                               derive=derive, direct=direct, health=health).localCheckpoint(eager=False)

        wide: DataFrame | None = None
        if state is not None and state_table is not None and scan.hands_off:
            t0 = time.perf_counter()
            read = [0]

            def kept(pieces: Iterator[pa.Table]) -> Iterator[pa.Table]:
                for piece in pieces:
                    states = saved_states_table(piece, groups)
                    read[0] += states.num_rows
                    yield states

            try:  # the driver reads the saved states piece by piece as the replay's handoff writes them
                wide = replay(kept(state_table()))
                _log(f"saved states: those of {read[0]:,} groups read by the driver in "
                     f"{time.perf_counter() - t0:.2f} s and handed to the replay (no Spark job)")
            except (DeltaError, pa.ArrowException, OSError) as e:  # e.g. a table feature delta-rs cannot read
                _log(f"saved states: the driver cannot read group_state ({type(e).__name__}: {e}); Spark reads them")
        if wide is None:
            wide = replay(saved_states(state, groups) if state is not None else None)
        st.count(wide)
    return wide


def _replay_counts(wide: DataFrame, *, derive: bool) -> dict[str, int]:
    """The replay's counts, summed over its tasks; logs the time its tasks spent."""
    counts_row = split_counts(wide).agg(*[F.sum(c).alias(c) for c in
                                          ("records_in", "duplicates", "replayed", "quarantined",
                                           "skipped_other_type", "group_records", *TIMING_FIELDS)]).collect()[0]
    counts = {k: int(counts_row[k] or 0) for k in counts_row.asDict() if k not in TIMING_FIELDS}
    derived = (f", {counts_row['derive_seconds'] or 0:,.3f} s deriving ownership, rebalances and health"
               if derive else "")
    _log(f"replay: {counts_row['feed_seconds'] or 0:,.3f} s feeding {counts['records_in']:,} records through the "
         f"groups' audits (the GroupMetadata replay, causes, violations), {counts_row['merge_seconds'] or 0:,.3f} s "
         f"merging the single pass's offset-commit stretches{derived} (Python time, all workers together)")
    return counts


def _staged_files(wide: DataFrame, stage_dirs: Mapping[str, str], carried_dirs: Mapping[str, str] | None = None,
                  ) -> tuple[dict[str, delta_io.StagedFiles], dict[str, delta_io.StagedFiles]]:
    """Per table the replay's tasks wrote themselves, the files they reported (`coordinator_audit.udfs.replay.files_written`); then,
    per table of `carried_dirs`, the files of its carried rows (reported as `carried_key(table)`)."""
    files = files_written(wide, [*stage_dirs, *(carried_key(name) for name in carried_dirs or {})])
    out = {}
    for key, listed in files.items():
        out[key] = delta_io.StagedFiles(staged_schema(key.removeprefix(CARRIED_PREFIX)),
                                        tuple(p for p, _ in listed), sum(n for _, n in listed))
    new = {k: f for k, f in out.items() if not k.startswith(CARRIED_PREFIX)}
    n_files = sum(len(f.files) for f in new.values())
    _log(f"replay: its tasks wrote {n_files:,} Parquet files of {len(new)} tables themselves "
         f"({', '.join(f'{name} {f.rows:,}' for name, f in new.items())} rows)")
    carried = {k.removeprefix(CARRIED_PREFIX): f for k, f in out.items() if k.startswith(CARRIED_PREFIX)}
    if carried:
        _log(f"replay: and the rows continuing the earlier run's open rows, to merge "
             f"({', '.join(f'{name} {f.rows:,}' for name, f in carried.items())} rows in "
             f"{sum(len(f.files) for f in carried.values()):,} files)")
    return new, carried


def _scan_reader(data: Any, capabilities: Capabilities) -> Literal["arrow", "spark"]:
    """The single pass's reader for this input (`coordinator_audit.jobs.offsets_path.scan_log`): "arrow" (the
    workers read the Parquet files themselves) for local Parquet files, or a Delta table whose
    current version is plain Parquet files (`delta_io.plain_parquet_snapshot`), that the session's
    workers can read (`Capabilities.local_files`, `coordinator_audit.jobs.offsets_path.local_parquet_files`);
    else "spark" (Spark reads the input, the rows reach the kernel through mapInArrow)."""
    files = data.format == "parquet"
    if data.format == "delta":
        not_plain = delta_io.plain_parquet_snapshot(data.source)
        files = not_plain is None
        if not_plain is not None:
            _log(f"single pass: Spark reads the Delta table ({not_plain})")
    if data.format in ("delta", "table") and data.bounds_note is not None:
        _log(f"single pass: the Delta log's statistics cannot tell which files hold the window: "
             f"{data.bounds_note}")
    if not files:
        return "spark"
    if not capabilities.local_files:
        _log("single pass: Spark reads the input (the session's workers may not see this process's files)")
        return "spark"
    why = local_parquet_files(data.raw)[1]
    if why is not None:
        _log(f"single pass: Spark reads the input ({why})")
        return "spark"
    return "arrow"


def _audit_pass(spark: SparkSession, cfg: AuditConfig, data: Any, *, reader: Literal["arrow", "spark"],
                since: datetime | None, until: datetime | None, state: DataFrame | None, start_after: Mapping[int, int],
                base_missing: Mapping[int, int], resume: str, gap_time: datetime | None,
                derive: bool = False, direct: DirectWrite | None = None, scratch: str | None = None,
                state_table: Callable[[], Iterator[pa.Table]] | None = None) -> AuditPass:
    """Scan and replay one window (module docstring, steps 2-3) with the single pass's `reader`
    (`RunChoices.reader`); `derive`, `direct`, `state_table`: see `build_tables`; `scratch`: a local directory for the replay's handed-off input (`coordinator_audit.jobs.offsets_path.scan_log`'s
    `handoff_root`), None: it goes through Spark."""
    with stage(spark, "read input and scan it once (offset commits summarised, the rest kept)") as st:
        scan = scan_log(data.raw, since=since, until=until, groups=cfg.groups, chunk_rows=cfg.scan_chunk_rows,
                        reader=reader, shards=cfg.shards,
                        log=_log, start_after=start_after, handoff_root=scratch,
                        records_hint=data.records if isinstance(data, _KafkaInput) else None,
                        bounds=data.bounds, input_format=data.format)
        st.rows = scan.counts["records_in"]
    if data.rejects is not None:  # quarantined by the job, read all the same: no offsets never read
        scan = scan.with_rejected(data.rejected_in_window(since, until, start_after))
    sc = scan.counts
    _log(f"single pass: {scan.reader} reader{', input re-sorted' if scan.reordered else ''}; {sc['commits']:,} "
         f"commits and {sc['tombstones']:,} tombstones summarised, {sc['side_records']:,} records for the replay")
    gap_ms = epoch_ms(gap_time) if gap_time is not None else 0
    found_gaps = nightly.gaps(start_after, scan.ranges, gap_ms)
    for g in found_gaps.values():
        _log(f"history gap: {g.describe()}")
    resumes = state is not None
    if state is None:  # a fresh chain: no group resumes, every group's state still goes to group_state
        state = spark.createDataFrame([], GROUP_STATE_SCHEMA)
    consts, missing_end = scan.missing_counts(start_after, base_missing)
    out = build_tables(
        spark, scan, shards=cfg.shards, groups=cfg.groups, stage=stage, state=state, resume=resume, gaps=found_gaps,
        missing=consts, derive=derive, direct=direct, resumes=resumes, state_table=state_table, health=cfg.health)
    if scan.handoff is not None:
        _log(f"replay input: handed from task to task as local files ({scan.handoff.buckets} buckets), not "
             f"through Spark's shuffle")
    counts = out.counts
    run_counts = {
        "records_in": sc["records_in"],
        "duplicates_dropped": sc["duplicates"] + counts["duplicates"],
        "filtered_by_window": sc["filtered_by_window"],
        "filtered_by_group": sc["filtered_by_group"] + sc["side_records"] - counts["records_in"],
        "records_replayed": counts["replayed"] + sc["commits"] + sc["tombstones"],
        "quarantined": counts["quarantined"],
        "skipped_other_type": counts["skipped_other_type"],
    }
    return AuditPass(out.tables, out.carried, out.group_state, run_counts, scan.ranges, missing_end,
                     [out.wide, scan.df], out.staged, out.carried_files)


@dataclass(frozen=True, slots=True)
class _KafkaInput:
    """Records read from a cluster (`coordinator_audit.jobs.kafka_source.read_kafka`), shaped as `coordinator_audit.jobs.inputs.InputData`
    where the pipeline reads it."""

    raw: DataFrame
    records: int | None = None
    """At most how many records `raw` holds (the offset ranges read): sizes the replay's handed-off input."""
    rejects: DataFrame | None = None
    format: str = "kafka"
    bounds: None = None
    """(No file statistics: the source reads the offset ranges it is given.)"""

    def window_rejects(self, since: datetime | None, until: datetime | None,
                       start_after: Mapping[int, int] | None = None) -> tuple[None, int, int]:
        return None, 0, 0


def direct_tables(cfg: AuditConfig, *, writer: str, derive_in_replay: bool, input_rejects: bool,
                  local: bool = True) -> list[str]:
    """The tables whose new rows the replay's tasks write as Parquet files themselves
    (`coordinator_audit.udfs.table_files`), in `AUDIT_OUTPUT_TABLES` order: with the embedded
    writer, a local base path and tasks that run on this machine (`local`,
    `coordinator_audit.jobs.spark_session.local_tasks`: the driver lists and commits the files they write), every
    table whose new rows are the replay's rows as they are (the derived tables when the replay derives them; a stage of their own reads the base tables'
    files back, `coordinator_audit.udfs.table_files.staged_rows`): not `generations` with a server log (the broker's account is
    joined to it first), not `quarantine` when the input's unreadable lines join it or it is off.
    (The rows a run merges into earlier windows and the `runs` row always go through Spark.)"""
    if not (local and writer == "embedded" and delta_io.local_path(cfg.output_path)
            and not cfg.catalog_schema):
        return []
    names = ["assignments", "rebalance_causes", "violations", "offset_commits", "group_state"]
    if not cfg.server_log:
        names.append("generations")
    if cfg.quarantine and not input_rejects:
        names.append("quarantine")
    if derive_in_replay:
        names.extend(DERIVED_TABLES)
    return [t for t in AUDIT_OUTPUT_TABLES if t in names]


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What the session's workers can do, which decides the run's routes (`RunChoices`): a route
    that needs a capability is taken whenever the session has it (`benchmarks.bench_routes`
    measures each route against the one taken without it)."""

    local_files: bool
    """The workers read this process's local files (a classic session): the single pass reads local
    Parquet input itself (`RunChoices.reader` "arrow"), else Spark reads it."""
    local_tasks: bool
    """Every task runs on this machine (`coordinator_audit.jobs.spark_session.local_tasks`): the replay's input
    goes from task to task as local files (`coordinator_audit.udfs.handoff`) and the replay's tasks write the
    tables' files themselves (`direct_tables`), else Spark's shuffle and Spark's writer carry them."""

    @classmethod
    def of(cls, spark: SparkSession) -> Capabilities:
        """The capabilities of `spark`: a Spark Connect session has neither, a classic session with a
        cluster master the first only."""
        return cls(local_files=has_jvm(spark), local_tasks=local_tasks(spark))


def run_audit(spark: SparkSession, cfg: AuditConfig, *, run_id: str | None = None,
              kafka_starting_offsets: dict[int, int] | None = None,
              capabilities: Capabilities | None = None) -> RunSummary:
    """Runs the whole job on an existing session (notebooks call this directly).

    With `cfg.kafka_bootstrap` the records come from the cluster (`coordinator_audit.jobs.kafka_source.read_kafka`,
    to the end offsets at the start of the run) from `kafka_starting_offsets`, else from just after
    the base run's end offsets (`runs.end_offsets`), else from the earliest.

    The routes follow the session's `capabilities` (None: `Capabilities.of(spark)`; given, e.g. by
    a benchmark or a test, only to take the routes of a session without some of them). With
    `local_tasks` the run's scratch directory holds the replay's handed-off input
    (`coordinator_audit.udfs.handoff`) and is deleted when the run ends, written or failed. On a Spark Connect
    session the job first ships its code to the server (`ship_code`), and takes the routes that go
    through Spark alone: Spark reads the input, the replay's input goes through Spark's shuffle,
    and Spark writes every table's files."""
    ship_code(spark)
    caps = Capabilities.of(spark)
    if capabilities is not None:
        if (capabilities.local_files and not caps.local_files) or (capabilities.local_tasks and not caps.local_tasks):
            raise ValueError(f"capabilities {capabilities}: the session has only {caps}; a run can take the "
                             f"routes of a session with fewer, not more")
        caps = capabilities
    scratch = tempfile.mkdtemp(prefix="coordinator-audit-") if caps.local_tasks else None
    try:
        with footers_kept():  # the input's footers are read once per run (checks, nulls, the pass's plan)
            return _run_audit(spark, cfg, run_id=run_id, kafka_starting_offsets=kafka_starting_offsets,
                              scratch=scratch, capabilities=caps)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


@dataclass(frozen=True, slots=True)
class RunChoices:
    """The choices a run makes once, after reading its input and before any pass over it: what it
    continues (`plan`, `coordinator_audit.jobs.nightly.plan_run`), where the groups' saved state comes from, the
    writer (`delta_io.resolve_writer`), the single pass's reader, where the derived tables are
    derived, and which tables the replay's tasks write themselves (`direct_tables`). The routes
    follow the session's `Capabilities` and the output's state, never a setting."""

    run_id: str
    run_window: str
    source: str
    group_filter: str | None
    plan: nightly.RunPlan
    state_from: Literal["base", "warm-up", "none"]
    """The base run's `group_state` rows; the input's records before the window (a warm-up: a run
    that continues no earlier run and starts at `--since`); or none (a fresh chain from the log's start)."""
    driver_reads_state: bool
    """The driver reads the base's state itself when the replay's input is handed off (a path-based output)."""
    writer: Literal["native", "embedded"]
    reader: Literal["arrow", "spark"]
    """The single pass's reader (`_scan_reader`)."""
    derive_in_replay: bool
    """The replay derives the ownership, rebalance and health rows itself: the run's own rows are all
    the derivation reads (no earlier run's rows in the output, no broker account to attach)."""
    direct_tables: tuple[str, ...]

    @property
    def since(self) -> datetime | None:
        """Where the run's window starts (a run continuing a base starts where the base ended: `RunPlan.since`)."""
        return self.plan.since


@dataclass(slots=True)
class _Start:
    """Where the run's audit pass starts: the groups' saved state (None: a fresh chain) and, with a
    base's state on a path, its reader for the driver; per partition the last offset already read
    and the running count of offsets never read; the resume mode; the warm-up pass, if any."""

    state: DataFrame | None
    state_table: Callable[[], Iterator[pa.Table]] | None
    start_after: dict[int, int]
    base_missing: dict[int, int]
    resume: str
    warm: AuditPass | None = None


@dataclass(slots=True)
class _RunTables:
    """The run's tables as the writer takes them (`to_write`, `runs` last) and its merges, with the
    frames to release after writing, its counts and its note."""

    to_write: dict[str, Any]
    merges: dict[str, delta_io.Merge]
    tables: dict[str, DataFrame]
    carried: dict[str, DataFrame]
    counts: dict[str, int]
    note: str | None


def _run_audit(spark: SparkSession, cfg: AuditConfig, *, run_id: str | None,
               kafka_starting_offsets: dict[int, int] | None, scratch: str | None,
               capabilities: Capabilities) -> RunSummary:
    started = datetime.now(UTC)
    t0 = time.perf_counter()
    run_id = run_id or delta_io.new_run_id(started)
    plan = _plan(spark, cfg, run_id)
    _check_schemas(spark, cfg)
    data, kafka = _read_records(spark, cfg, plan, kafka_starting_offsets)
    choices = _choose(spark, cfg, plan, run_id, data, capabilities)
    start = _start_state(spark, cfg, choices, data, scratch)
    direct = _direct_write(cfg, choices, start)
    try:  # until the writer takes the replay's files over, a failure deletes them (nothing is committed)
        # after a base, each partition is bounded below by the base's last offset, or not at all (a
        # partition no earlier run read is read from its first record), never by a time
        main = _audit_pass(spark, cfg, data, reader=choices.reader, since=choices.since if plan.base is None else None, until=cfg.until,
                           state=start.state, start_after=start.start_after, base_missing=start.base_missing,
                           resume=start.resume, gap_time=choices.since, derive=choices.derive_in_replay,
                           direct=direct, scratch=scratch, state_table=start.state_table)
        out = _run_tables(spark, cfg, choices, start, data, main, started)
    except BaseException:
        if direct is not None:
            for path in direct.stage_dirs.values():
                delta_io.delete_dir(path)
        raise
    finally:  # the carried rows are in memory now (the merges' sources), or not needed
        if direct is not None and direct.carried_dirs:
            assert cfg.output_path is not None
            delta_io.delete_carried(cfg.output_path, run_id)
    with stage(spark, "write Delta tables"):
        results = delta_io.write_tables(
            spark, out.to_write, run_id=run_id, run_window=choices.run_window, base_path=cfg.output_path,
            catalog_schema=cfg.catalog_schema, mode=cfg.write_mode, writer=choices.writer, merges=out.merges,
            compression=cfg.compression)
    for df in main.persisted + (start.warm.persisted if start.warm is not None else []):
        release(df)
    for df in (*out.tables.values(), *out.carried.values()):
        release(df)
    if start.state is not None:
        start.state.unpersist()
    locations = {name: r.location for name, r in results.items()}
    table_rows = {name: r.rows_added for name, r in results.items() if name != "runs"}
    added = {name: r.columns_added for name, r in results.items() if r.columns_added}
    if added:
        _log(f"schema: {schema_text(added)}")
    kafka_offsets = None if kafka is None else {
        p: (kafka.start_offsets[p], end) for p, end in sorted(kafka.end_offsets.items())}
    return RunSummary(run_id, choices.run_window, out.counts, table_rows, locations, choices.writer,
                      time.perf_counter() - t0, start.resume, plan.base.run_id if plan.base is not None else None,
                      {name: r.rows_merged for name, r in results.items() if r.rows_merged},
                      with_schema_note(out.note, added), kafka_offsets)


def _check_schemas(spark: SparkSession, cfg: AuditConfig) -> None:
    """Refuses, before the run reads the output's state or its input, an output whose tables differ
    from this version's by more than columns this version added (`delta_io.schema_changes`: the
    writer adds those when it writes, and checks again)."""
    tables = [t for t in AUDIT_OUTPUT_TABLES if cfg.derived_tables or t not in DERIVED_TABLES]
    delta_io.schema_changes(spark, {name: stored_schema(name) for name in (*tables, "runs")},
                            base_path=cfg.output_path, catalog_schema=cfg.catalog_schema)


def schema_text(added: Mapping[str, Sequence[str]]) -> str:
    """The columns a run added to its tables, as its output line and `runs.note` say it."""
    return "; ".join(f"{table}: added column{'s' if len(columns) > 1 else ''} {', '.join(columns)}"
                     for table, columns in added.items()) + " (the rows stored before read them as null)"


def with_schema_note(note: str | None, added: Mapping[str, Sequence[str]]) -> str | None:
    """A run's note with the columns it added to its tables (`schema_text`), if any."""
    if not added:
        return note
    return f"{note}; {schema_text(added)}" if note else schema_text(added)


def _source(cfg: AuditConfig) -> str:
    """The run's input as `runs.input` names it."""
    return cfg.input_path or cfg.input_table or f"kafka://{cfg.kafka_bootstrap}/{DEFAULT_TOPIC}"


def _location(cfg: AuditConfig, table: str) -> str:
    return delta_io.table_location(table, base_path=cfg.output_path, catalog_schema=cfg.catalog_schema)


def _plan(spark: SparkSession, cfg: AuditConfig, run_id: str) -> nightly.RunPlan:
    """Which earlier run of the output this run continues (`coordinator_audit.jobs.nightly.plan_run`), logged; a run id
    the output's `runs` already records, or a window that cannot follow its runs, is refused before any work."""
    earlier = nightly.read_runs(spark, _location(cfg, "runs"), is_table=bool(cfg.catalog_schema))
    plan = _chain_plan(cfg, run_id, earlier)
    _log(f"run {run_id}: input {_source(cfg)}, window {delta_io.window_label(plan.since, cfg.until)}, output "
         f"{cfg.output_path or cfg.catalog_schema}, mode {cfg.write_mode}; {nightly.describe(plan)}")
    return plan


def _chain_plan(cfg: AuditConfig, run_id: str | None, earlier: Sequence[nightly.ChainRun]) -> nightly.RunPlan:
    """The run's plan after the output's runs `earlier`; ConfigError for a run id they hold already,
    `nightly.WindowConflict` (a ConfigError) for a window that cannot follow them."""
    if any(r.run_id == run_id for r in earlier):  # before any work: the tables could not take it anyway
        raise ConfigError(f"run id {run_id}: {_location(cfg, 'runs')} already records a run with this id; a run id "
                          f"names one run: give another --run-id (or none: the default is time-based)")
    return nightly.plan_run(earlier, since=cfg.since, until=cfg.until, group_filter=",".join(cfg.groups) or None,
                            mode=cfg.write_mode)


def preflight(cfg: AuditConfig, *, run_id: str | None = None, force_output: bool = False) -> None:
    """The command's refusals that need no Spark, made before a session starts (ConfigError, exit
    status 2): a local input path that does not exist or whose format `auto` cannot tell
    (`coordinator_audit.jobs.inputs.detect_format`); a local `--output` that is, or lies inside, a
    Delta table or holds anything but this job's tables (`delta_io.output_refusal`; `force_output`
    writes there anyway); a run id the output's `runs` already records, or a window that cannot
    follow its runs (`nightly.read_runs_arrow`, `_chain_plan`). The run checks the chain again
    where it reads it with Spark (`_plan`): a `runs` table delta-rs cannot read is left to it."""
    if cfg.input_path and delta_io.local_path(cfg.input_path):
        if cfg.input_format == "auto":
            detect_format(cfg.input_path)
        elif not Path(cfg.input_path.removeprefix("file://")).exists():
            raise InputError(f"input {cfg.input_path}: no such file or directory")
    if cfg.catalog_schema or not cfg.output_path:
        return
    why = None if force_output else delta_io.output_refusal(cfg.output_path, AUDIT_OUTPUT_TABLES)
    if why is not None:
        raise ConfigError(f"--output {cfg.output_path}: {why}; write to a new or empty folder, or pass "
                          f"--force-output to write there anyway")
    try:
        earlier = nightly.read_runs_arrow(_location(cfg, "runs"))
    except (DeltaError, pa.ArrowException, OSError):  # e.g. a table feature delta-rs cannot read: Spark reads it
        return
    _chain_plan(cfg, run_id, earlier)


SKIPPED_NAMES_SHOWN = 50
"""At most this many names of the input's skipped files on the line that reports them (then their count)."""


def _report_skipped(cfg: AuditConfig, fmt: str) -> None:
    """One line naming the files of the input directory that the format's reader skips (`skipped_files`)."""
    if not cfg.input_path:
        return
    skipped = skipped_files(cfg.input_path, fmt)
    if skipped:
        names = ", ".join(skipped[:SKIPPED_NAMES_SHOWN])
        more = f" and {len(skipped) - SKIPPED_NAMES_SHOWN:,} more" if len(skipped) > SKIPPED_NAMES_SHOWN else ""
        _log(f"input: format {fmt} skips {len(skipped):,} other file{'s' if len(skipped) != 1 else ''} of "
             f"{cfg.input_path}: {names}{more}")


def _read_records(spark: SparkSession, cfg: AuditConfig, plan: nightly.RunPlan,
                  kafka_starting_offsets: dict[int, int] | None) -> tuple[Any, KafkaRead | None]:
    """The run's input (`coordinator_audit.jobs.inputs.read_input`), or its cluster's records (`_KafkaInput`) with the
    offsets read: from `kafka_starting_offsets`, else just after the base run's end offsets."""
    if not cfg.kafka_bootstrap:
        data = read_input(spark, _source(cfg), format=cfg.input_format, is_table=cfg.input_table is not None,
                          text_encoding=cfg.text_encoding, since=plan.since, until=cfg.until)
        _report_skipped(cfg, data.format)
        return data, None
    starting = kafka_starting_offsets
    if starting is None and plan.start_after:  # continue where the base run stopped
        starting = {p: end + 1 for p, end in plan.start_after.items()}
    kafka = read_kafka(spark, cfg.kafka_bootstrap, options=parse_kafka_options(cfg.kafka_options),
                       starting_offsets=starting, partitions=cfg.kafka_partitions)
    if kafka.limits is not None:
        _log(f"kafka: {kafka.limits}")
    for partition, (asked, earliest) in kafka.gone.items():
        _log(f"kafka: __consumer_offsets-{partition} offsets {asked}..{earliest - 1} are no longer in the "
             f"log (retention or deletion): they cannot be audited")
    for partition, (asked, first) in kafka.unseen.items():
        _log(f"kafka: __consumer_offsets-{partition} has no record at offsets {asked}..{first - 1} (compacted "
             f"away, aborted, or removed by retention: Spark Connect cannot tell which); offsets the run does not "
             f"read are counted as never read")
    _log(f"kafka {cfg.kafka_bootstrap}: options {kafka.options}; offsets per partition "
         f"{ {p: (kafka.start_offsets[p], e) for p, e in sorted(kafka.end_offsets.items())} } (start, end)")
    return _KafkaInput(kafka.df, kafka.records), kafka


def _choose(spark: SparkSession, cfg: AuditConfig, plan: nightly.RunPlan, run_id: str, data: Any,
            capabilities: Capabilities) -> RunChoices:
    """The run's `RunChoices`, made once."""
    derive_in_replay = cfg.derived_tables and not cfg.server_log and not has_history(cfg.output_path)
    writer = delta_io.resolve_writer(spark, cfg.writer)
    direct = direct_tables(cfg, writer=writer, derive_in_replay=derive_in_replay,
                           input_rejects=data.rejects is not None, local=capabilities.local_tasks)
    state_from: Literal["base", "warm-up", "none"] = (
        "base" if plan.base is not None else "warm-up" if plan.since is not None else "none")
    return RunChoices(run_id, delta_io.window_label(plan.since, cfg.until), _source(cfg), ",".join(cfg.groups) or None,
                      plan, state_from, state_from == "base" and not cfg.catalog_schema, writer,
                      _scan_reader(data, capabilities), derive_in_replay, tuple(direct))


def _start_state(spark: SparkSession, cfg: AuditConfig, choices: RunChoices, data: Any,
                 scratch: str | None) -> _Start:
    """The groups' saved state the run starts from: the base run's (`coordinator_audit.jobs.nightly.read_state`), or
    the one a warm-up rebuilds, or none."""
    plan = choices.plan
    if choices.state_from == "base":
        assert plan.base is not None
        state = nightly.read_state(spark, _location(cfg, "group_state"), plan.base,
                                   is_table=bool(cfg.catalog_schema)).persist(StorageLevel.MEMORY_AND_DISK)
        state_table = (functools.partial(nightly.read_state_batches, _location(cfg, "group_state"), plan.base)
                       if choices.driver_reads_state else None)
        return _Start(state, state_table, plan.start_after, dict(plan.base.missing_offsets), plan.resume)
    if choices.state_from == "warm-up":
        return _warm_up(spark, cfg, choices, data, scratch)
    return _Start(None, None, plan.start_after, {}, plan.resume)


def _warm_up(spark: SparkSession, cfg: AuditConfig, choices: RunChoices, data: Any, scratch: str | None) -> _Start:
    """Warm-up: the input's records before the window rebuild the state they leave behind."""
    since = choices.since
    assert since is not None
    _log(f"warm-up: replaying the input's records before {since.isoformat()} to rebuild the groups' state "
         f"(their rows are not written)")
    warm = _audit_pass(spark, cfg, data, reader=choices.reader, since=None, until=since, state=None, start_after={},
                       base_missing={}, resume="fresh", gap_time=None, scratch=scratch)
    read = warm.counts["records_in"] - warm.counts["filtered_by_window"]
    if read <= 0:
        _log("warm-up: no records before the window in the input")
        return _Start(None, None, choices.plan.start_after, {}, choices.plan.resume, warm)
    assert warm.group_state is not None  # the warm-up pass writes nothing itself
    state = warm.group_state.persist(StorageLevel.MEMORY_AND_DISK)
    start = _Start(state, None, {p: last for p, (_, last, _) in warm.ranges.items()}, dict(warm.missing),
                   "warmup", warm)
    _log(f"warm-up: {state.count():,} groups' state rebuilt from {read:,} earlier records")
    return start


def _direct_write(cfg: AuditConfig, choices: RunChoices, start: _Start) -> DirectWrite | None:
    """Where the replay's tasks write the files of `choices.direct_tables` (None: Spark writes every table)."""
    if not choices.direct_tables:
        return None
    assert cfg.output_path is not None  # direct_tables asks for a local base path
    names = list(choices.direct_tables)
    # a resumed run's rows that continue open rows (merged, not added) go to files of their own too
    merged_names = [name for name in MERGE_KEYS if name in names] if start.state is not None else []
    direct = DirectWrite(delta_io.stage_dirs(names, base_path=cfg.output_path, run_id=choices.run_id,
                                             run_window=choices.run_window),
                         choices.run_id, epoch_ms(choices.since), epoch_ms(cfg.until),
                         delta_io.carried_dirs(merged_names, base_path=cfg.output_path, run_id=choices.run_id),
                         compression=cfg.compression)
    _log(f"write: the replay's tasks write {', '.join(names)} themselves (embedded writer, local path)")
    return direct


def _run_tables(spark: SparkSession, cfg: AuditConfig, choices: RunChoices, start: _Start, data: Any,
                main: AuditPass, started: datetime) -> _RunTables:
    """The pass's tables completed (the input's rejects, the broker's account, the derived tables),
    the counts checked, the merges into earlier windows' rows and the `runs` row, for the writer."""
    tables = main.tables
    rejected, rejected_outside = _input_rejects(cfg, data, tables, start.start_after)
    account = broker_account_frame(spark, cfg.server_log) if cfg.server_log else None
    if "generations" in tables:
        tables["generations"] = attach_broker_account(tables["generations"], account)
    if "generations" in main.carried:
        main.carried["generations"] = attach_broker_account(main.carried["generations"], account)

    # Read twice (the derived tables, the write), the base tables are projections of the replay's
    # persisted output: building a cache of each costs more than filtering the cached frame again.
    carried = {name: df.persist(StorageLevel.MEMORY_AND_DISK) for name, df in main.carried.items()}
    derived_merges = _derived_tables(spark, cfg, choices, main, carried)
    merged_rows: dict[str, int] = {}
    if carried and start.state is not None:  # a fresh chain resumes nothing: there is nothing to merge
        with stage(spark, "count the earlier windows' rows this run closes"):
            merged_rows = {name: int(df.count()) for name, df in carried.items()}
    if start.state is not None:  # (the tasks counted the rows of the files they wrote)
        merged_rows.update({name: files.rows for name, files in main.carried_files.items()})

    run_counts = _run_counts(choices.run_id, main.counts, rejected, rejected_outside)
    end_offsets, missing, note = _offsets_and_note(cfg, choices, start, main, run_counts)
    merges = _merges(choices.plan, main, carried, merged_rows)
    merges.update(derived_merges)

    finished = datetime.now(UTC)
    runs_row = {
        "run_id": choices.run_id, "status": "succeeded", "started_at": started, "finished_at": finished,
        "duration_ms": int((finished - started).total_seconds() * 1000), "input": choices.source,
        "input_format": data.format, "since": choices.since, "until": cfg.until,
        "group_filter": choices.group_filter, **run_counts,
        "code_version": __version__, "spark_version": spark.version, "writer": choices.writer,
        "config_json": json.dumps(cfg.to_dict(), sort_keys=True), "resume": start.resume,
        "base_run_id": choices.plan.base.run_id if choices.plan.base is not None else None,
        "end_offsets": end_offsets, "missing_offsets": missing, "note": note,
    }

    def runs(rows: Mapping[str, int], added: Mapping[str, tuple[str, ...]]) -> DataFrame:  # as the writer wrote them
        return spark.createDataFrame([{**runs_row, "table_rows": dict(rows), "note": with_schema_note(note, added)}],
                                     RUNS_SCHEMA)

    written: dict[str, Any] = {**{name: with_time_columns(df, name) for name, df in tables.items()},
                               **main.staged}
    # in one order whoever writes a table (the commits, and the summary's lines, follow it)
    to_write: dict[str, Any] = {**{name: written[name] for name in sorted(written, key=AUDIT_OUTPUT_TABLES.index)},
                                "runs": runs}
    return _RunTables(to_write, merges, tables, carried, run_counts, note)


def _input_rejects(cfg: AuditConfig, data: Any, tables: dict[str, DataFrame],
                   start_after: Mapping[int, int]) -> tuple[int, int]:
    """Adds the input's unreadable lines or records in the window to `tables`' quarantine (emptied
    with `job.quarantine` off); (how many in the window, how many outside it)."""
    rejects, rejected, rejected_outside = data.window_rejects(cfg.since, cfg.until, start_after)
    if rejected:
        _log(f"input: {rejected:,} lines or records are no readable record (see quarantine.error): quarantined")
    if rejected_outside:
        _log(f"input: {rejected_outside:,} more are no readable record, outside the window: left to its runs")
    if rejects is not None:
        tables["quarantine"] = tables["quarantine"].unionByName(rejects)
    if not cfg.quarantine:
        tables["quarantine"] = tables["quarantine"].limit(0)
    return rejected, rejected_outside


def _derived_tables(spark: SparkSession, cfg: AuditConfig, choices: RunChoices, main: AuditPass,
                    carried: Mapping[str, DataFrame]) -> dict[str, delta_io.Merge]:
    """Puts the derived tables into `main.tables` (cut to the run's window when the replay derived
    them, else derived in a stage of their own from the run's base rows with the rows it closes or
    changes); the derived rows to merge into earlier windows'."""
    tables = main.tables
    if choices.derive_in_replay:
        if not set(DERIVED_TABLES) <= set(main.staged):  # (the replay's own files hold the window's rows only)
            tables.update(overlapping_window({name: tables[name] for name in DERIVED_TABLES}, since=choices.since,
                                             until=cfg.until))
        _log("derived tables: derived in the replay (the run's own rows are all they need)")
        return {}
    if not cfg.derived_tables:
        return {}
    new_rows = {**tables, **{name: staged_rows(spark, name, files.files) for name, files in main.staged.items()
                             if name in BASE_INPUTS}}
    closed = {**carried, **{name: staged_rows(spark, name, files.files)
                            for name, files in main.carried_files.items()}}
    base = {name: df.unionByName(closed[name]) if name in closed else df for name, df in new_rows.items()}
    derived, derived_merges = derived_tables_for_run(spark, base, run_window=choices.run_window, since=choices.since,
                                                     until=cfg.until, base_path=cfg.output_path,
                                                     stage=stage, log=_log, health=cfg.health)
    tables.update(derived)
    return derived_merges


def _run_counts(run_id: str, counts: Mapping[str, int], rejected: int, rejected_outside: int) -> dict[str, int]:
    """The `runs` row's counts: the pass's with the input's rejects; every record accounted for, or
    the run fails before writing."""
    run_counts = dict(counts)
    run_counts["records_in"] += rejected + rejected_outside
    run_counts["quarantined"] += rejected
    run_counts["filtered_by_window"] += rejected_outside
    accounted = sum(v for k, v in run_counts.items() if k != "records_in")
    if accounted != run_counts["records_in"]:
        raise CoordinatorAuditError(
            f"run {run_id}: records do not add up: {run_counts['records_in']} in, {accounted} accounted for "
            f"({json.dumps(run_counts)}); nothing was written")
    return run_counts


def _offsets_and_note(cfg: AuditConfig, choices: RunChoices, start: _Start, main: AuditPass,
                      run_counts: Mapping[str, int]) -> tuple[dict[int, int], dict[int, int], str | None]:
    """The `runs` row's end_offsets and missing_offsets, and its note (logged): what the run read
    and did not read."""
    end_offsets = dict(start.start_after)
    for p, (_, last, _) in main.ranges.items():
        end_offsets[p] = max(last, end_offsets.get(p, last))
    missing = {p: n for p, n in {**start.base_missing, **main.missing}.items() if n}
    new_missing = {p: n - start.base_missing.get(p, 0) for p, n in main.missing.items()
                   if n > start.base_missing.get(p, 0)}
    in_window = run_counts["records_in"] - run_counts["filtered_by_window"]
    note = nightly.read_note(choices.plan, cfg.since, main.ranges)
    if note is not None:
        _log(note)
    if in_window == 0:
        empty = "empty window: no records of the input fall in it; the groups' state is carried forward unchanged"
        _log(empty)
        note = empty if note is None else f"{empty}; {note}"
    if new_missing:
        text = ", ".join(f"partition {p}: {n:,}" for p, n in sorted(new_missing.items()))
        note = ((note + "; ") if note else "") + f"offsets never read (history gaps): {text}"
    return end_offsets, missing, note


def _merges(plan: nightly.RunPlan, main: AuditPass, carried: Mapping[str, DataFrame],
            merged_rows: Mapping[str, int]) -> dict[str, delta_io.Merge]:
    """The MERGE of each table's carried rows into the windows that hold the rows they continue."""
    merges: dict[str, delta_io.Merge] = {}
    for name in MERGE_KEYS:
        if not merged_rows.get(name):
            continue
        keys, null_safe, (pcol, ocol) = MERGE_KEYS[name]
        keep = tuple(BROKER_ACCOUNT_COLUMNS.fieldNames()) if name == "generations" else ()
        if name in main.carried_files:  # read by the driver: no Spark job
            rows = delta_io.read_carried(main.carried_files[name])
            homes = nightly.home_windows(plan.chain, nightly.arrow_spans(rows, pcol, ocol))
            merges[name] = delta_io.Merge(rows, keys, null_safe, homes, keep, topic_by_id=name == "assignments")
        else:
            df = carried[name]
            homes = nightly.home_windows(plan.chain, nightly.spans_of(df, pcol, ocol))
            merges[name] = delta_io.Merge(with_time_columns(df, name), keys, null_safe, homes, keep,
                                          topic_by_id=name == "assignments")
    return merges


SUMMARY_DRIVER_ROWS = 2_000_000
"""A run that wrote at most this many rows (new and merged) on a local file system has its summary
read back by the driver itself (`table_highlights`)."""

_HIGHLIGHT_COLUMNS: dict[str, tuple[str, ...]] = {
    "generations": ("group_id", "missing_generations"),
    "assignments": ("group_id", "member_id", "topic", "partition"),
    "offset_commits": ("commits", "regressions"),
    "rebalance_causes": ("cause", "is_primary"),
    "violations": ("kind",),
    "quarantine": ("key_type",),
    **HIGHLIGHT_COLUMNS,
}
"""The columns the summary reads of each table."""


def table_highlights(spark: SparkSession, summary: RunSummary) -> dict[str, str]:
    """A one-line summary of each written table, read back from Delta (so it also proves the
    tables are readable): what a person checks first after a run. It reads the rows that carry this
    run's id: the new ones and the earlier windows' rows this run closed or updated (merged). A run
    on the local file system that wrote at most `SUMMARY_DRIVER_ROWS` rows is read back by the
    driver with pyarrow (`_highlights_arrow`: the same lines, without a Spark job per table);
    otherwise by Spark."""
    rows = sum(summary.table_rows.values()) + sum(summary.rows_merged.values())
    local = all(delta_io.local_table_path(loc) for loc in summary.locations.values())
    if local and rows <= SUMMARY_DRIVER_ROWS and summary.table_rows.get("rebalances", 0) < EXACT_MEDIAN_ROWS:
        return _highlights_arrow(summary)
    return _highlights_spark(spark, summary)


def _top_line(column: pa.ChunkedArray | pa.Array, n: int = 6) -> str:
    """The `n` most frequent values of `column` with their counts (ties by value, null first), as
    `_highlights_spark`'s `top` writes them."""
    counted = Counter(column.to_pylist()).most_common()
    counted.sort(key=lambda vc: (-vc[1], vc[0] is not None, vc[0] if vc[0] is not None else 0))
    return ", ".join(f"{v} {c}" for v, c in counted[:n]) or "none"


def _highlights_arrow(summary: RunSummary) -> dict[str, str]:
    """`_highlights_spark`'s lines from the run's rows read by the driver (`coordinator_audit.jobs.delta_read.read_arrow`
    with the run id: only the files and row groups whose statistics admit it)."""
    t = {name: read_arrow(loc, equals=("run_id", summary.run_id), columns=_HIGHLIGHT_COLUMNS[name])
         for name, loc in summary.locations.items() if name in _HIGHLIGHT_COLUMNS}
    gens = t["generations"]
    groups = len({g for g in gens.column("group_id").to_pylist() if g is not None})
    missing = [m for m in gens.column("missing_generations").to_pylist() if m is not None]
    a = t["assignments"].to_pydict()
    members = {k for k in zip(a["group_id"], a["member_id"], strict=True) if None not in k}
    partitions = {k for k in zip(a["group_id"], a["topic"], a["partition"], strict=True) if None not in k}
    o = t["offset_commits"]
    commits, regressions = (pc.sum(o.column(c)).as_py() for c in ("commits", "regressions"))
    causes = t["rebalance_causes"]
    primary = causes.filter(pc.fill_null(causes.column("is_primary"), False)).column("cause")
    return {
        "generations": f"{gens.num_rows} generations of {groups} groups ({sum(missing) if missing else 0} generation "
                       "ids skipped)" + (f"; {summary.rows_merged['generations']} of them earlier windows' rows this "
                                         f"run closed or updated" if summary.rows_merged.get("generations") else ""),
        "assignments": f"{len(members)} member ids owning {len(partitions)} group partitions over time",
        "rebalance_causes": "primary causes: " + _top_line(primary),
        "violations": "by kind: " + _top_line(t["violations"].column("kind")),
        "offset_commits": f"{commits or 0} commits, {regressions or 0} regressions",
        "quarantine": "by record type: " + _top_line(t["quarantine"].column("key_type")),
        **(derived_highlights_arrow(t) if "group_health" in t else {}),
    }


def _highlights_spark(spark: SparkSession, summary: RunSummary) -> dict[str, str]:
    """`table_highlights` read back by Spark."""
    def top(df: DataFrame, column: str, n: int = 6) -> str:
        rows = df.groupBy(column).count().orderBy(F.desc("count"), column).limit(n).collect()
        return ", ".join(f"{r[column]} {r['count']}" for r in rows) or "none"

    run = F.col("run_id") == summary.run_id
    mine = functools.partial(may_hold, column="run_id", value=summary.run_id)  # not every window's files
    t = {name: read_table(spark, loc, files=mine).where(run) for name, loc in summary.locations.items()
         if name != "runs"}
    g = t["generations"].agg(F.countDistinct("group_id").alias("groups"), F.count("*").alias("n"),
                             F.sum("missing_generations").alias("missing")).collect()[0]
    a = t["assignments"].agg(F.countDistinct("group_id", "member_id").alias("members"),
                             F.countDistinct("group_id", "topic", "partition").alias("partitions")).collect()[0]
    o = t["offset_commits"].agg(F.sum("commits").alias("commits"), F.sum("regressions").alias("reg")).collect()[0]
    return {
        "generations": f"{g['n']} generations of {g['groups']} groups ({g['missing'] or 0} generation ids skipped)"
                       + (f"; {summary.rows_merged['generations']} of them earlier windows' rows this run closed or "
                          f"updated" if summary.rows_merged.get("generations") else ""),
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
    base = f" from run {summary.base_run_id}" if summary.base_run_id else ""
    print(f"  state: {summary.resume}{base}" + ("; rows of earlier runs updated: " + ", ".join(
        f"{t} {n:,}" for t, n in summary.rows_merged.items()) if summary.rows_merged else ""), file=out)
    if summary.note:
        print(f"  note: {summary.note}", file=out)
    if summary.kafka_offsets is not None:
        read = sum(end - start for start, end in summary.kafka_offsets.values())
        print("  kafka offsets read (partition: start-end): " + ", ".join(
            f"{p}: {start}-{end}" for p, (start, end) in summary.kafka_offsets.items()) + f" ({read:,} offsets)", file=out)
    width = max(len(t) for t in summary.locations)
    for table, location in summary.locations.items():
        rows = summary.table_rows.get(table, 1 if table == "runs" else 0)
        print(f"  {table:<{width}}  {rows:>10,} rows  {location}", file=out)
        if highlights and table in highlights:
            print(f"  {'':<{width}}  {highlights[table]}", file=out)


QUIET_SPARK_LOG_LEVEL = "ERROR"
"""Spark's log level during a run unless `--verbose`: its INFO and WARN lines would bury the job's
own progress lines and summary (printed to stderr and stdout, not through log4j)."""


def _first_line(exc: BaseException) -> str:
    """The message of an exception on one line: for an error of a Python worker, its last line
    (``TypeError: ...``); for a JVM error, its first line that is not a stack frame."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if any(ln.startswith("Traceback") for ln in lines):
        python_error = [ln for ln in lines if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b: ", ln)
                        and not ln.startswith(("pyspark.", "py4j.", "org.apache.", "java."))]
        if python_error:
            return python_error[-1][:500]
    for ln in lines:
        if not ln.startswith(("at ", "File ", "Traceback", "An exception was thrown")):
            return ln[:500]
    return type(exc).__name__


def _quiet_jvm_start() -> None:
    """When this process is about to start Spark's JVM itself (python -m, the console command), let
    it log errors only from its first line (`coordinator_audit/jobs/log4j2-quiet.properties`), unless the environment
    already names a log4j configuration. Under spark-submit the JVM runs already (see
    scripts/spark-submit.sh)."""
    conf = Path(__file__).resolve().with_name("log4j2-quiet.properties")
    opts = os.environ.get("SPARK_SUBMIT_OPTS", "")
    running = "PYSPARK_GATEWAY_PORT" in os.environ or SparkContext._active_spark_context is not None
    if running or "log4j" in opts or not conf.is_file():
        return
    os.environ["SPARK_SUBMIT_OPTS"] = f"{opts} -Dlog4j2.configurationFile=file:{conf}".strip()


def main(argv: Sequence[str] | None = None) -> int:
    """`coordinator-audit run`: one clear line on stderr for any failure; exit status 2 for a usage
    error or a refusal (a bad setting, an input that cannot be read as records, a refused output,
    window or run id: `preflight` finds most before Spark starts), 1 for a failure once the run
    started, 0 for success (`coordinator_audit.cli.EXIT_CODES`); the full trace only with --verbose.
    A session the command started (not one that existed in this process already) is stopped
    before it returns."""
    args = parse_args(argv)
    prog = f"{PROG} run"
    hint = "" if args.verbose else " (--verbose shows the full trace)"
    starting: dict[int, int] | None = None
    try:
        cfg = config_from_args(args)
        if args.kafka_starting_offsets:
            starting = parse_offsets_json(args.kafka_starting_offsets, what="--kafka-starting-offsets")
    except CoordinatorAuditError as exc:
        print(f"{prog}: configuration error: {exc}", file=sys.stderr)
        return 2
    try:
        preflight(cfg, run_id=args.run_id, force_output=args.force_output)
    except ConfigError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    if not args.verbose:
        _quiet_jvm_start()
    spark: SparkSession | None = None
    starts_session = bool(args.remote or os.environ.get("SPARK_REMOTE")) or SparkContext._active_spark_context is None
    try:
        spark = build_session(master=cfg.spark_master, app_name=cfg.app_name, local_conf=cfg.spark_local_conf,
                              remote=args.remote, jars=cfg.spark_jars, packages=cfg.spark_packages,
                              quiet=not args.verbose)
        if not args.verbose and has_jvm(spark):  # (a Spark Connect server logs as its owner set it)
            spark.sparkContext.setLogLevel(QUIET_SPARK_LOG_LEVEL)
        summary = run_audit(spark, cfg, run_id=args.run_id, kafka_starting_offsets=starting)
        highlights = None if args.no_summary else table_highlights(spark, summary)
    except ConfigError as exc:  # the input cannot be read as records (InputError), a bad setting, a refusal
        if args.verbose:
            traceback.print_exc()
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except CoordinatorAuditError as exc:
        if args.verbose:
            traceback.print_exc()
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # Spark, py4j and worker errors: one line, the trace only when asked
        if args.verbose:
            traceback.print_exc()
        print(f"{prog}: the run failed: {type(exc).__name__}: {_first_line(exc)}{hint}", file=sys.stderr)
        return 1
    finally:
        if spark is not None and starts_session:
            _stop(spark)
    print_summary(summary, highlights=highlights)
    return 0


def _stop(spark: SparkSession) -> None:
    """Stops the run's session: its executors' heartbeat thread ends with it, rather than meeting a
    stopped SparkContext when the JVM exits (a NullPointerException trace on `executor-heartbeater`)."""
    try:
        spark.stop()
    except Exception as exc:  # the answer is written: a session that does not stop cleanly changes nothing
        _log(f"stopping the Spark session: {type(exc).__name__}: {_first_line(exc)}")


if __name__ == "__main__":
    sys.exit(main())
