"""The offset-commit path: record classification, the single pass over the input (`udfs.scan`),
the `offset_commits` summary and the `offset_regression` violations, with no per-record Python
objects and no shuffle of the input's bytes.

Definitions (the same as `coordinator_core.audit.offsets`, which the pure-Python audit follows;
the job's tests compare the two):

* Input: Kafka-source rows; repeated (partition, offset) rows count once. Log order = ascending
  (partition, offset) within a group; all of a group's records normally live in one
  `__consumer_offsets` partition.
* **Generation window**: each GroupMetadata record of the group (key type 2: a value or a
  tombstone) closes the current window and opens the next. The window's `generation_id` is the
  opening value's generation (None for a tombstone and before the first record); `window_state`
  is "Stable" if the opening value lists members, "Empty" if not, "Dead" for a tombstone, None
  before the first GroupMetadata record ("pre-history"). `window_start_offset` /
  `window_end_offset` are the log offsets of the opening / closing records (None: pre-history /
  still open). A same-generation static replacement (W3) starts a new window with the same id.
  GroupMetadata records the replay quarantines do not open windows: the job passes their
  positions as `exclude` to `group_metadata_windows`.
* **Commit**: an offset-commit record (key type 0 or 1) with a value that decodes (versions 0-3,
  and 4+ read with the flexible v4 layout); a null value is an offset **tombstone** (counted, not
  a commit). Keys of type 0 and 1 for the same group/topic/partition are one sequence. Records
  with an undecodable key or value go to the replay, which quarantines them.
* One **row** per (group, topic, partition, window) with at least one commit or tombstone:
  commits, tombstones, first/last committed offset and commitTimestamp in log order (None when
  only tombstones), first/last source offset over all its records (commits and tombstones).
* **Regression** ("a committed offset moving backwards while the group is Stable in one
  generation"): in a window whose state is "Stable", a commit whose offset is strictly lower than
  that of the previous commit (log order) of the same topic-partition in the same window;
  tombstones in between do not reset the comparison. Each one is counted in `regressions` and
  gives one `offset_regression` violation row (member_ids = the members the window's opening
  record assigns that partition to; detail and evidence texts as the pure path writes them).

How it stays close to a bare scan (issue 9):

* `scan_log` runs `udfs.scan`'s kernel in `mapInArrow`: each Python worker reads its chunk's key
  and value bytes as numpy arrays, recognises and decodes the offset commits with vectorised byte
  reads, and emits only per-chunk partial summaries, regression candidates and the few records
  that are not offset commits (`side` rows, for the replay). The input is never shuffled.
* Stitching needs log order across chunks: Kafka-source dumps are in (partition, offset) order, so
  the pass checks the chunks' offset ranges and only when they interleave scans again on input
  range-partitioned and sorted by (partition, offset).
* What follows works on the small outputs: windows from the side rows, one sort of the partials by
  group to give each its window, one more by (group, topic, partition, window) to stitch them.

"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from coordinator_core.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

    from udfs.scan import ParquetFooter

__all__ = [
    "OFFSET_COMMIT_TYPES",
    "Scan",
    "carried_partials",
    "chunk_overlap",
    "group_metadata_windows",
    "local_parquet_files",
    "offset_commits",
    "offset_path",
    "offset_regression_violations",
    "scan_frame",
    "scan_log",
]

OFFSET_COMMIT_TYPES = (0, 1)
GROUP_METADATA_TYPE = 2


# ------------------------------------------------------------------------------------------------
# GroupMetadata windows

def group_metadata_windows(classified: DataFrame, *, exclude: DataFrame | None = None,
                           carried: DataFrame | None = None) -> DataFrame:
    """One row per window-opening GroupMetadata record (a tombstone, or a value the codec decodes:
    generation and member count from the single pass's `gm_generation`/`gm_member_count` when
    present, else through `udfs.decode.group_metadata_header_udf` on these few rows): group_id,
    partition, offset, generation_id, window_state, window_end_offset (next opening record's
    offset of the group), key, value.
    `exclude` (columns partition, offset) lists records that must not open windows (the replay's
    quarantined GroupMetadata records). `carried` (group_id, partition, offset, generation_id,
    window_state, value) are the windows the previous run left open, opened by records before this
    run's. Small: GroupMetadata records are a few percent of a log."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from udfs.decode import group_metadata_header_udf

    gm = classified.where((F.col("record_type") == GROUP_METADATA_TYPE) & F.col("group_id").isNotNull())
    if "gm_generation" in classified.columns:  # decoded by the single pass (`Scan.side`)
        gm = gm.select("group_id", "partition", "offset", "key", "value", F.col("gm_generation").alias("generation"),
                       F.col("gm_member_count").alias("member_count"))
    else:
        gm = (gm.select("group_id", "partition", "offset", "key", "value")
              .withColumn("_h", group_metadata_header_udf()(F.col("key"), F.col("value")))
              .select("*", F.col("_h.generation").alias("generation"), F.col("_h.member_count").alias("member_count"))
              .drop("_h"))
    gm = gm.where(F.col("value").isNull() | F.col("generation").isNotNull())
    if exclude is not None:
        gm = gm.join(exclude.select("partition", "offset"), ["partition", "offset"], "left_anti")
    opening = gm.select(
        "group_id", F.col("partition").cast("int").alias("partition"), F.col("offset").cast("long").alias("offset"),
        F.when(F.col("value").isNotNull(), F.col("generation")).cast("int").alias("generation_id"),
        F.when(F.col("value").isNull(), F.lit("Dead"))
        .when(F.col("member_count") > 0, F.lit("Stable")).otherwise(F.lit("Empty")).alias("window_state"),
        "key", "value")
    if carried is not None:
        opening = opening.unionByName(carried.select(
            "group_id", F.col("partition").cast("int").alias("partition"), F.col("offset").cast("long").alias("offset"),
            F.col("generation_id").cast("int").alias("generation_id"), "window_state",
            F.lit(None).cast("binary").alias("key"), "value"))
    w = Window.partitionBy("group_id").orderBy("partition", "offset")
    return opening.select(
        "group_id", "partition", "offset", "generation_id", "window_state",
        F.lead("offset").over(w).alias("window_end_offset"), "key", "value")


# ------------------------------------------------------------------------------------------------
# the single pass (udfs.scan) and the summary


@dataclass(frozen=True, slots=True)
class Scan:
    """The kernel's persisted output over the input (`udfs.scan.SCAN_SCHEMA`), its summed counts,
    and whether the input had to be put in log order first. `unpersist()` when done."""

    df: DataFrame
    counts: dict[str, int]
    reordered: bool
    reader: str
    """"arrow" (the workers read the Parquet files) or "spark" (fed through mapInArrow)."""
    chunks: tuple[tuple[int, int, int, int, int], ...] = ()
    """(partition, first offset, last offset, records, chunk) of every chunk, in log order."""

    @property
    def ranges(self) -> dict[int, tuple[int, int, int]]:
        """Per `__consumer_offsets` partition: (first, last) offset read in the window and how many
        distinct records; last - first + 1 - records offsets inside that span were not in the input."""
        out: dict[int, tuple[int, int, int]] = {}
        for partition, first, last, records, _ in self.chunks:
            lo, hi, n = out.get(partition, (first, last, 0))
            out[partition] = (min(lo, first), max(hi, last), n + records)
        return out

    def missing_counts(self, start_after: Mapping[int, int], base_missing: Mapping[int, int]
                       ) -> tuple[dict[tuple[int, int], int], dict[int, int]]:
        """The running count of offsets never read, per partition (`GroupAuditor.observe_missing`):
        ({(chunk, partition): c}, {partition: count at the end of the pass}). A side record at
        `offset` with rank `r` in its chunk has count `offset - r + c`: the base run's count, plus
        the offsets between the base's last one and this pass's first, plus the holes before it."""
        consts: dict[tuple[int, int], int] = {}
        ends: dict[int, int] = {}
        for partition, rows in itertools.groupby(self.chunks, key=lambda c: c[0]):
            chunk_rows = list(rows)
            first = chunk_rows[0][1]
            base = base_missing.get(partition, 0)
            if partition in start_after:
                base += max(first - start_after[partition] - 1, 0)
            before = 0
            for _, _, _, records, chunk in chunk_rows:
                consts[(chunk, partition)] = base - first - before
                before += records
            ends[partition] = base + (chunk_rows[-1][2] - first + 1 - before)
        return consts, ends

    def side(self, missing: Mapping[tuple[int, int], int] | None = None) -> DataFrame:
        """The records the kernel did not summarise, classified (record_type, group_id) for the
        replay: partition, offset, timestamp_ms, key, value, gm_generation, gm_member_count (a
        GroupMetadata value's header, decoded in the pass), record_type, group_id; with `missing`
        (`missing_counts()[0]`) also `missing_before`, the running count of offsets never read."""
        from pyspark.sql import functions as F

        from udfs.scan import KIND_SIDE

        rows = self.df.where(F.col("_kind") == KIND_SIDE)
        cols = ["partition", "offset", "timestamp_ms", "key", "value", "gm_generation", "gm_member_count",
                "record_type", "group_id"]
        if missing is None:
            return rows.select(*cols)
        spark = self.df.sparkSession
        consts = spark.createDataFrame([(c, p, v) for (c, p), v in missing.items()],
                                       "chunk long, partition int, _c long")
        side = (rows.select(*cols, "chunk", F.col("records_in").alias("_rank"))
                .join(F.broadcast(consts), ["chunk", "partition"], "left")
                .withColumn("missing_before", F.col("offset") - F.col("_rank") + F.col("_c"))
                .select(*cols, "missing_before"))
        return side

    def unpersist(self) -> None:
        self.df.unpersist()


_COUNT_NAMES = ("records_in", "filtered_by_window", "duplicates", "filtered_by_group", "commits", "tombstones",
                "side_records")


def scan_frame(df: DataFrame, *, window: Column | None = None, groups: Sequence[str] = (),
               chunk_rows: int = 500_000) -> DataFrame:
    """The kernel over Kafka-source rows (lazy): `udfs.scan.make_scan_fn` in `mapInArrow`.
    `window` is the run's time-window condition (default: every record is inside)."""
    from pyspark.sql import functions as F

    from udfs.scan import SCAN_SCHEMA, make_scan_fn

    inside = F.coalesce(window, F.lit(False)) if window is not None else F.lit(True)
    rows = df.select("key", "value", F.col("partition").cast("int").alias("partition"),
                     F.col("offset").cast("long").alias("offset"),
                     F.unix_millis("timestamp").alias("timestamp_ms"), inside.alias("in_window"))
    return rows.mapInArrow(make_scan_fn(chunk_rows=chunk_rows, groups=tuple(groups)), SCAN_SCHEMA)


def _chunk_ranges(scanned: DataFrame) -> tuple[list[Any], dict[str, int]]:
    """The scan's `range` rows in log order and its summed `counts`, in one Spark job."""
    from pyspark.sql import functions as F

    from udfs.scan import KIND_COUNTS, KIND_RANGE

    rows = (scanned.where(F.col("_kind").isin(KIND_RANGE, KIND_COUNTS))
            .select("_kind", "partition", "offset", "last_source_offset", "chunk", *_COUNT_NAMES).collect())
    ranges = [r for r in rows if r["_kind"] == KIND_RANGE]
    ranges.sort(key=lambda r: (r["partition"], r["offset"], r["last_source_offset"]))
    counts = {c: sum(int(r[c] or 0) for r in rows if r["_kind"] == KIND_COUNTS) for c in _COUNT_NAMES}
    return ranges, counts


def _overlap(ranges: list[Any]) -> str | None:
    for a, b in itertools.pairwise(ranges):
        if a["partition"] == b["partition"] and b["offset"] <= a["last_source_offset"]:
            return (f"partition {a['partition']}: offsets {a['offset']}-{a['last_source_offset']} (chunk "
                    f"{a['chunk']}) and {b['offset']}-{b['last_source_offset']} (chunk {b['chunk']}) interleave")
    return None


def chunk_overlap(scanned: DataFrame) -> str | None:
    """None when no two chunks of the scan hold interleaving offsets of one Kafka partition (the
    condition for stitching the kernel's partial summaries in log order); else the first such pair."""
    return _overlap(_chunk_ranges(scanned)[0])


def local_parquet_files(df: DataFrame) -> tuple[list[ParquetFooter], str | None]:
    """The footers of the local Parquet files behind `df` (a plain Parquet read), in path order,
    when the kernel can read them itself, else ([], why not)."""
    from urllib.parse import unquote, urlparse

    from udfs.scan import parquet_input_problem, read_footer

    uris = df.inputFiles()
    if not uris:
        return [], "no input files"
    paths = []
    for uri in uris:
        parsed = urlparse(uri)
        if parsed.scheme not in ("", "file"):
            return [], f"{uri}: not a local file"
        paths.append(unquote(parsed.path))
    footers = []
    for path in sorted(paths):
        try:
            footer = read_footer(path)
        except Exception as exc:  # any unreadable footer means: let Spark read it
            return [], f"{path}: {exc}"
        problem = parquet_input_problem(footer)
        if problem is not None:
            return [], problem
        footers.append(footer)
    return footers, None


def _millis(t: datetime | None) -> int | None:
    return None if t is None else int(t.timestamp() * 1000)


def scan_log(df: DataFrame, *, since: datetime | None = None, until: datetime | None = None,
             groups: Sequence[str] = (), chunk_rows: int = 500_000, reader: str = "auto",
             shards: int | None = None, log: Callable[[str], None] | None = None,
             start_after: Mapping[int, int] | None = None) -> Scan:
    """Runs the single pass over `df` (Kafka-source rows, not deduplicated: the kernel drops
    repeated (partition, offset) rows and those outside since <= timestamp < until), persisted.

    `reader`: "spark" feeds the kernel through Spark (`mapInArrow` over `df`); "arrow" has each
    worker read `df`'s local Parquet files itself with pyarrow (no trip through the JVM; `df`
    must be a plain Parquet read whose columns have the Kafka-source types); "auto" is arrow
    when that holds, else spark. When the chunks' offsets interleave (input not in log order),
    the pass runs again through Spark on `df` range-partitioned and sorted by (partition, offset).
    `start_after`: the previous run's last offset per partition (`jobs.inputs.window_condition`)."""
    from pyspark import StorageLevel

    from jobs.inputs import window_condition
    from udfs.scan import (
        FILE_UNIT_SCHEMA,
        SCAN_SCHEMA,
        make_file_scan_fn,
        parquet_units,
    )

    spark = df.sparkSession
    window = window_condition(since, until, start_after)
    files: list[ParquetFooter] = []
    if reader != "spark":
        files, why = local_parquet_files(df)
        if why is not None:
            if reader == "arrow":
                raise ConfigError(f"job.scan_reader = arrow: the input cannot be read directly ({why})")
            if log is not None:
                log(f"the single pass reads through Spark ({why})")
    if files:
        # a task reads one unit of several chunks: few tasks (each costs a Python round trip), at
        # least four per core for balance; the chunk bounds the worker's memory
        total = sum(sum(f.row_groups) for f in files)
        per_task = total // (4 * spark.sparkContext.defaultParallelism)
        units = parquet_units(files, unit_rows=max(chunk_rows, min(8 * chunk_rows, per_task)))
        fn = make_file_scan_fn(chunk_rows=chunk_rows, groups=tuple(groups), since_ms=_millis(since),
                               until_ms=_millis(until), start_after=dict(start_after or {}))
        unit_df = spark.createDataFrame(spark.sparkContext.parallelize(units, max(1, len(units))), FILE_UNIT_SCHEMA)
        scanned = unit_df.mapInArrow(fn, SCAN_SCHEMA)
    else:
        scanned = scan_frame(df, window=window, groups=groups, chunk_rows=chunk_rows)
    scanned = scanned.persist(StorageLevel.MEMORY_AND_DISK)
    ranges, counts = _chunk_ranges(scanned)
    overlap = _overlap(ranges)
    reordered = overlap is not None
    if overlap is not None:
        if log is not None:
            log(f"input not in log order ({overlap}): scanning it again sorted by (partition, offset)")
        scanned.unpersist()
        n = shards or spark.sparkContext.defaultParallelism
        ordered = df.repartitionByRange(n, "partition", "offset").sortWithinPartitions("partition", "offset")
        scanned = scan_frame(ordered, window=window, groups=groups, chunk_rows=chunk_rows).persist(
            StorageLevel.MEMORY_AND_DISK)
        ranges, counts = _chunk_ranges(scanned)
        again = _overlap(ranges)
        if again is not None:  # cannot happen: range partitioning keeps equal positions together
            raise AssertionError(f"sorted input still interleaves: {again}")
    chunks = tuple((int(r["partition"]), int(r["offset"]), int(r["last_source_offset"]), int(r["records_in"] or 0),
                    int(r["chunk"])) for r in ranges)
    return Scan(scanned, counts, reordered, "arrow" if files and not reordered else "spark", chunks)


_POS_SHIFT = 40
_OFFSET_MASK = (1 << _POS_SHIFT) - 1
_STITCH_COLUMNS = (
    "_kind", "group_id", "topic", "partition_key", "partition", "offset", "timestamp_ms", "last_source_offset",
    "commits", "tombstones", "regressions", "first_commit_source_offset", "first_commit_record_ts", "first_offset",
    "first_commit_timestamp", "last_commit_source_offset", "last_offset", "last_commit_timestamp", "offset_value",
    "commit_timestamp", "previous_offset", "previous_commit_timestamp", "previous_source_offset")
"""The kernel's columns the stitching reads (partial summaries and regression candidates)."""


def _pos(partition: str, offset: str) -> Column:
    """(partition, offset) as one long that sorts in log order (offsets below 2^40)."""
    from pyspark.sql import functions as F

    return F.shiftleft(F.col(partition).cast("long"), _POS_SHIFT) + F.col(offset)


CARRIED_FLAG = "_carried"
"""Column of `offset_commits(..., carried=...)` rows: the row continues one the previous run wrote
open, and changed (the writer merges it into that row)."""
LAST_COMMIT_SOURCE = "_last_commit_source_offset"
"""Column of `offset_commits(..., carried=...)` rows: the log offset of the row's last commit (what a
later run's regression evidence cites), kept in the carried state."""
UNCHANGED_FLAG = "_unchanged"
"""Column of `offset_commits(..., carried=...)` rows: a carried open row that this run did not touch."""


def carried_partials(open_rows: DataFrame) -> DataFrame:
    """The previous run's open `offset_commits` rows (with `last_commit_source_offset`, as
    `udfs.schemas.OFFSET_WINDOW_STRUCT` keeps them) as `partial` rows of
    the kernel's shape, placed at the row's first record: stitched with this run's partials they
    continue the same window (counts add up, a commit below the carried last one is a regression)."""
    from pyspark.sql import functions as F

    from udfs.scan import KIND_PARTIAL

    has_commit = F.col("commits") > 0
    return open_rows.select(
        F.lit(KIND_PARTIAL).alias("_kind"), "group_id", "topic", F.col("partition").alias("partition_key"),
        F.col("source_partition").alias("partition"), F.col("first_source_offset").alias("offset"),
        F.lit(None).cast("long").alias("timestamp_ms"), "last_source_offset", "commits", "tombstones", "regressions",
        F.when(has_commit, F.col("first_source_offset")).alias("first_commit_source_offset"),
        F.lit(None).cast("long").alias("first_commit_record_ts"), "first_offset", "first_commit_timestamp",
        "last_commit_source_offset", "last_offset", "last_commit_timestamp",
        *[F.lit(None).cast("long").alias(c) for c in ("offset_value", "commit_timestamp", "previous_offset",
                                                       "previous_commit_timestamp", "previous_source_offset")],
        F.lit(True).alias(CARRIED_FLAG))


def offset_commits(scanned: DataFrame, windows: DataFrame, *,
                   carried: DataFrame | None = None) -> tuple[DataFrame, DataFrame]:
    """(offset_commits rows, regression rows) from the kernel's `partial` and `regression` rows and
    the GroupMetadata `windows` (`group_metadata_windows`).

    Each partial summary (and regression candidate) takes the window of the latest window-opening
    record of its group before it (one sort of these few rows by group and log position); the
    partials of one (group, topic, partition, window) are then stitched in log order: a commit
    lower than the previous partial's last commit is one more regression. Regressions count only
    in Stable windows. The first result has the `offset_commits` table's columns; the second one
    row per regression (group_id, generation_id, topic, partition, offset_value, commit_timestamp,
    previous_offset, previous_commit_timestamp, previous_source_offset, record_timestamp,
    source_partition, source_offset, window_start_offset) for `offset_regression_violations`.

    `carried` (`carried_partials`) continues the windows the previous run left open; the first
    result then has three more columns: `CARRIED_FLAG`, `UNCHANGED_FLAG`, `LAST_COMMIT_SOURCE`."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from udfs.scan import KIND_PARTIAL, KIND_REGRESSION
    from udfs.schemas import TABLE_SCHEMAS

    rows = scanned.where(F.col("_kind").isin(KIND_PARTIAL, KIND_REGRESSION)).select(*_STITCH_COLUMNS)
    rows = rows.withColumn(CARRIED_FLAG, F.lit(False))
    if carried is not None:
        rows = rows.unionByName(carried.select(*_STITCH_COLUMNS, CARRIED_FLAG))
    opening = windows.select(
        "group_id", "partition", "offset", F.lit("window").alias("_kind"),
        F.struct(F.col("offset").alias("start"), F.col("generation_id").alias("gen"),
                 F.col("window_state").alias("state"), _pos("partition", "offset").alias("pos")).alias("_win"))
    events = rows.withColumn("_win", F.lit(None).cast(opening.schema["_win"].dataType)).unionByName(
        opening, allowMissingColumns=True)
    by_group = Window.partitionBy("group_id").orderBy("partition", "offset").rowsBetween(
        Window.unboundedPreceding, Window.currentRow)
    # both results read these few rows: computed once, on the first action (freed with the results)
    resolved = (events.withColumn("win", F.last("_win", ignorenulls=True).over(by_group))
                .where(F.col("_kind") != "window").drop("_win").localCheckpoint(eager=False))
    stable = F.coalesce(F.col("win.state") == "Stable", F.lit(False))

    keys = ["group_id", "topic", "partition_key", "win"]
    partials = resolved.where(F.col("_kind") == KIND_PARTIAL)
    # the previous partial with commits in log order, within the group's partition of the data (the
    # resolution's partitioning is kept: no shuffle), ordered by topic-partition and window first; it
    # counts only when it is of the same topic-partition and window
    before = Window.partitionBy("group_id").orderBy("topic", "partition_key", F.col("win.pos"), "partition",
                                                    "offset").rowsBetween(Window.unboundedPreceding, -1)
    has_commit = F.col("commits") > 0
    prev = F.last(F.when(has_commit, F.struct(
        F.col("topic").alias("t"), F.col("partition_key").alias("p"), F.col("win.pos").alias("w"),
        F.col("last_offset").alias("o"), F.col("last_commit_timestamp").alias("ts"),
        F.col("last_commit_source_offset").alias("s"))), ignorenulls=True).over(before)
    same = ((F.col("_prev.t") == F.col("topic")) & (F.col("_prev.p") == F.col("partition_key"))
            & F.col("_prev.w").eqNullSafe(F.col("win.pos")))
    stitched = (partials.withColumn("_prev", prev)
                .withColumn("_prev", F.when(same, F.col("_prev")))
                .withColumn("_boundary", F.coalesce(has_commit & stable & (F.col("first_offset") < F.col("_prev.o")),
                                                    F.lit(False))))
    first_commit_pos = F.when(has_commit, _pos("partition", "first_commit_source_offset"))
    last_commit_pos = F.when(has_commit, _pos("partition", "last_commit_source_offset"))
    summary = stitched.groupBy(*keys).agg(
        F.sum("commits").alias("commits"),
        F.sum("tombstones").alias("tombstones"),
        F.min_by("first_offset", first_commit_pos).alias("first_offset"),
        F.max_by("last_offset", last_commit_pos).alias("last_offset"),
        F.min_by("first_commit_timestamp", first_commit_pos).alias("first_commit_timestamp"),
        F.max_by("last_commit_timestamp", last_commit_pos).alias("last_commit_timestamp"),
        (F.sum(F.when(stable, F.col("regressions")).otherwise(0)) + F.count_if("_boundary")).alias("regressions"),
        F.min(_pos("partition", "offset")).alias("_first_pos"),
        F.max(_pos("partition", "last_source_offset")).alias("_last_pos"),
        F.max_by("last_commit_source_offset", last_commit_pos).alias(LAST_COMMIT_SOURCE),
        F.max(CARRIED_FLAG).alias("_has_carried"),
        F.count_if(~F.col(CARRIED_FLAG)).alias("_new_parts"),
    )
    ends = windows.select(F.col("group_id").alias("_eg"), F.col("offset").alias("_start"), "window_end_offset")
    firsts = windows.groupBy(F.col("group_id").alias("_fg")).agg(F.min(_pos("partition", "offset")).alias("_gm_pos"))
    summary = (summary
               .join(F.broadcast(ends), (F.col("group_id") == F.col("_eg")) & (F.col("win.start") == F.col("_start")),
                     "left")
               .join(F.broadcast(firsts), F.col("group_id") == F.col("_fg"), "left"))
    out = summary.select(
        "group_id", "topic", F.col("partition_key").alias("partition"),
        F.col("win.gen").alias("generation_id"), F.col("win.state").alias("window_state"),
        F.col("win.start").alias("window_start_offset"),
        F.when(F.col("win").isNull(), F.col("_gm_pos").bitwiseAND(_OFFSET_MASK))
        .otherwise(F.col("window_end_offset")).alias("window_end_offset"),
        "commits", "tombstones", "first_offset", "last_offset", "first_commit_timestamp", "last_commit_timestamp",
        "regressions", F.shiftright("_first_pos", _POS_SHIFT).alias("source_partition"),
        F.col("_first_pos").bitwiseAND(_OFFSET_MASK).alias("first_source_offset"),
        F.col("_last_pos").bitwiseAND(_OFFSET_MASK).alias("last_source_offset"),
        "_has_carried", "_new_parts", LAST_COMMIT_SOURCE)
    extra: tuple[str, ...] = ()
    if carried is not None:
        closed = F.col("window_end_offset").isNotNull()
        out = out.select("*", (F.col("_has_carried") & ((F.col("_new_parts") > 0) | closed)).alias(CARRIED_FLAG),
                         (F.col("_has_carried") & (F.col("_new_parts") == 0) & ~closed).alias(UNCHANGED_FLAG))
        extra = (CARRIED_FLAG, UNCHANGED_FLAG, LAST_COMMIT_SOURCE)
    out = _conform(out, TABLE_SCHEMAS["offset_commits"], extra=extra)

    inside = resolved.where((F.col("_kind") == KIND_REGRESSION) & stable).select(
        "group_id", F.col("win.gen").alias("generation_id"), "topic", F.col("partition_key").alias("partition"),
        "offset_value", "commit_timestamp", "previous_offset", "previous_commit_timestamp",
        "previous_source_offset", F.col("timestamp_ms").alias("record_timestamp"),
        F.col("partition").alias("source_partition"), F.col("offset").alias("source_offset"),
        F.col("win.start").alias("window_start_offset"))
    across = stitched.where("_boundary").select(
        "group_id", F.col("win.gen").alias("generation_id"), "topic", F.col("partition_key").alias("partition"),
        F.col("first_offset").alias("offset_value"), F.col("first_commit_timestamp").alias("commit_timestamp"),
        F.col("_prev.o").alias("previous_offset"), F.col("_prev.ts").alias("previous_commit_timestamp"),
        F.col("_prev.s").alias("previous_source_offset"), F.col("first_commit_record_ts").alias("record_timestamp"),
        F.col("partition").alias("source_partition"), F.col("first_commit_source_offset").alias("source_offset"),
        F.col("win.start").alias("window_start_offset"))
    regressions = inside.unionByName(across).withColumn("generation_id", F.col("generation_id").cast("int"))
    return out, regressions


def offset_path(df: DataFrame, **scan_options: Any) -> tuple[DataFrame, DataFrame, Scan]:
    """The offset-commit path alone on Kafka-source rows: (offset_commits rows, offset_regression
    violations, the scan). Windows come from every readable GroupMetadata record (the job also
    leaves out those the replay quarantines). For tests, notebooks and the benchmark."""
    scan = scan_log(df, **scan_options)
    windows = group_metadata_windows(scan.side())
    rows, regressions = offset_commits(scan.df, windows)
    return rows, offset_regression_violations(regressions, windows), scan


def offset_regression_violations(regressions: DataFrame, windows: DataFrame) -> DataFrame:
    """`violations` rows (kind offset_regression) of `offset_commits(...)[1]`: member_ids are the
    owners of the partition in the window's opening GroupMetadata record (decoded with
    coordinator_core, on the regressing rows only), detail/evidence as the pure path words them."""
    from pyspark.sql import functions as F

    from udfs.decode import owners_udf
    from udfs.schemas import TABLE_SCHEMAS

    w = windows.select("group_id", F.col("offset").alias("window_start_offset"), F.col("value").alias("_gm"))
    r = regressions.join(w, ["group_id", "window_start_offset"], "left")
    detail = F.format_string(
        "%s-%d: committed offset %d (commit time %d) after %d (commit time %d) while the group was Stable in "
        "generation %d", "topic", "partition", "offset_value", "commit_timestamp", "previous_offset",
        "previous_commit_timestamp", "generation_id")
    evidence = F.format_string("partition %d offsets %d -> %d", "source_partition", "previous_source_offset",
                               "source_offset")
    out = r.select(
        "group_id", "generation_id", F.lit("offset_regression").alias("kind"), "topic", "partition",
        owners_udf()(F.col("_gm"), F.col("group_id"), F.col("topic"), F.col("partition")).alias("member_ids"),
        detail.alias("detail"), evidence.alias("evidence"), "record_timestamp", "source_partition",
        "source_offset")
    return _conform(out, TABLE_SCHEMAS["violations"])


def _conform(df: DataFrame, schema: StructType, *, extra: Sequence[str] = ()) -> DataFrame:
    """Columns of `schema` in its order, atomic types cast to it (nested types are left as built),
    then the `extra` columns as they are."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StructType

    cols = []
    for f in schema.fields:
        nested = isinstance(f.dataType, ArrayType | MapType | StructType)
        cols.append(F.col(f.name) if nested else F.col(f.name).cast(f.dataType).alias(f.name))
    return df.select(*cols, *extra)
