"""The offset-commit path's transforms after the single pass (`udfs.scan`), each a function of
DataFrames to DataFrames over the pass's small outputs: the GroupMetadata windows, the base run's
open rows as partial summaries, the stitched `offset_commits` rows with their regressions, and the
`offset_regression` violations.

The rules are `coordinator_core.audit.offsets` (`OffsetSummary`): a window's records cut into
stretches summarise to the stretches' summaries merged in log order (`OffsetSummary.merge`).
`offset_commits` is that merge in Spark SQL: each partial summary takes the window opened by the
latest window-opening GroupMetadata record of its group before it, counts add, first and last are
taken in log order, a partial whose first commit is below the previous partial's last commit of the
same topic-partition and window is one more regression, and regressions count in Stable windows
only. `tests/spark/test_spark_scan_rules.py` holds the kernel's partials merged so to the core's
fold; `tests/spark/test_spark_offsets_path.py` holds these transforms to the pure-Python audit.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, MapType, StructType

from udfs.decode import group_metadata_header_udf, owners_udf
from udfs.scan import KIND_PARTIAL, KIND_REGRESSION
from udfs.schemas import TABLE_SCHEMAS

__all__ = [
    "CARRIED_FLAG",
    "GROUP_METADATA_TYPE",
    "LAST_COMMIT_SOURCE",
    "OFFSET_COMMIT_TYPES",
    "UNCHANGED_FLAG",
    "carried_partials",
    "group_metadata_windows",
    "offset_commits",
    "offset_regression_violations",
]

OFFSET_COMMIT_TYPES = (0, 1)
"""Record types of OffsetCommitKey (versions 0 and 1: Kafka's `OffsetCommitKey` schema)."""
GROUP_METADATA_TYPE = 2
"""Record type of GroupMetadataKey (Kafka's `GroupMetadataKey` schema, version 2)."""


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


def offset_commits(scanned: DataFrame, windows: DataFrame, *, carried: DataFrame | None = None,
                   persisted: list[DataFrame] | None = None) -> tuple[DataFrame, DataFrame]:
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
    result then has three more columns: `CARRIED_FLAG`, `UNCHANGED_FLAG`, `LAST_COMMIT_SOURCE`.
    `persisted`: the stitched rows both results read are persisted and appended to it (the caller
    unpersists them once it has written the results); else they are a lazy local checkpoint."""


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
    resolved = events.withColumn("win", F.last("_win", ignorenulls=True).over(by_group)).where(
        F.col("_kind") != "window").drop("_win")
    stable = F.coalesce(F.col("win.state") == "Stable", F.lit(False))

    keys = ["group_id", "topic", "partition_key", "win"]
    # the previous partial with commits in log order, within the group's partition of the data (the
    # resolution's partitioning is kept: no shuffle), ordered by topic-partition and window first; it
    # counts only when it is of the same topic-partition and window (regression rows carry no commits)
    before = Window.partitionBy("group_id").orderBy("topic", "partition_key", F.col("win.pos"), "partition",
                                                    "offset").rowsBetween(Window.unboundedPreceding, -1)
    has_commit = F.col("commits") > 0
    prev = F.last(F.when(has_commit, F.struct(
        F.col("topic").alias("t"), F.col("partition_key").alias("p"), F.col("win.pos").alias("w"),
        F.col("last_offset").alias("o"), F.col("last_commit_timestamp").alias("ts"),
        F.col("last_commit_source_offset").alias("s"))), ignorenulls=True).over(before)
    same = ((F.col("_prev.t") == F.col("topic")) & (F.col("_prev.p") == F.col("partition_key"))
            & F.col("_prev.w").eqNullSafe(F.col("win.pos")))
    stitched = (resolved.withColumn("_prev", prev)
                .withColumn("_prev", F.when(same, F.col("_prev")))
                .withColumn("_boundary", F.coalesce(has_commit & stable & (F.col("first_offset") < F.col("_prev.o")),
                                                    F.lit(False))))
    # both results read these rows: computed once, on the first action. Persisted (the caller frees
    # it), the cache keeps the partitioning by group, so the summary below needs no second shuffle;
    # without `persisted`, a lazy local checkpoint, freed with the results
    if persisted is not None:
        stitched = stitched.persist(StorageLevel.MEMORY_AND_DISK)
        persisted.append(stitched)
    else:
        stitched = stitched.localCheckpoint(eager=False)
    partials = stitched.where(F.col("_kind") == KIND_PARTIAL)
    first_commit_pos = F.when(has_commit, _pos("partition", "first_commit_source_offset"))
    last_commit_pos = F.when(has_commit, _pos("partition", "last_commit_source_offset"))
    summary = partials.groupBy(*keys).agg(
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

    inside = stitched.where((F.col("_kind") == KIND_REGRESSION) & stable).select(
        "group_id", F.col("win.gen").alias("generation_id"), "topic", F.col("partition_key").alias("partition"),
        "offset_value", "commit_timestamp", "previous_offset", "previous_commit_timestamp",
        "previous_source_offset", F.col("timestamp_ms").alias("record_timestamp"),
        F.col("partition").alias("source_partition"), F.col("offset").alias("source_offset"),
        F.col("win.start").alias("window_start_offset"))
    across = partials.where("_boundary").select(
        "group_id", F.col("win.gen").alias("generation_id"), "topic", F.col("partition_key").alias("partition"),
        F.col("first_offset").alias("offset_value"), F.col("first_commit_timestamp").alias("commit_timestamp"),
        F.col("_prev.o").alias("previous_offset"), F.col("_prev.ts").alias("previous_commit_timestamp"),
        F.col("_prev.s").alias("previous_source_offset"), F.col("first_commit_record_ts").alias("record_timestamp"),
        F.col("partition").alias("source_partition"), F.col("first_commit_source_offset").alias("source_offset"),
        F.col("win.start").alias("window_start_offset"))
    regressions = inside.unionByName(across).withColumn("generation_id", F.col("generation_id").cast("int"))
    return out, regressions


def offset_regression_violations(regressions: DataFrame, windows: DataFrame) -> DataFrame:
    """`violations` rows (kind offset_regression) of `offset_commits(...)[1]`: member_ids are the
    owners of the partition in the window's opening GroupMetadata record (decoded with
    coordinator_core, on the regressing rows only), detail/evidence as the pure path words them."""


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

    cols = []
    for f in schema.fields:
        nested = isinstance(f.dataType, ArrayType | MapType | StructType)
        cols.append(F.col(f.name) if nested else F.col(f.name).cast(f.dataType).alias(f.name))
    return df.select(*cols, *extra)
