"""The offset-commit path's single pass over the input (`coordinator_audit.udfs.scan` in `mapInArrow`): `scan_log`
reads every record once, in the Python worker that holds it, with no per-record Python objects and
no shuffle of the input's bytes, and returns the kept `Scan`; `offset_path` runs the pass and
the per-group replay that merges its stretches (`coordinator_audit.udfs.replay`) for tests, notebooks and the
benchmark. The offset rules are `coordinator_audit.core.audit.offsets`.

How it stays close to a bare scan:

* the kernel (`coordinator_audit.udfs.scan_kernel`, compiled) classifies and decodes the keys and values in place
  and emits only partial summaries (one per topic-partition and stretch between two records of
  its group that the replay reads, kept open across a task's chunks), regression candidates and the few
  records that are not offset commits (`side` rows, for the replay). Local Parquet files (and plain Delta tables) are
  read by pyarrow in the workers; other inputs reach the kernel through Spark's Arrow batches.
* A run with a window does not read the row groups of those files whose footer statistics put
  every record outside it (`coordinator_audit.udfs.scan.outside_window`: offsets at or below the previous run's last
  one, or times outside [since, until)); their records are counted as filtered by the window, as
  reading them would count them. A nightly run over a directory that keeps the whole log reads the
  new day's row groups, not the year's. Small files share a task (`coordinator_audit.udfs.scan.parquet_tasks`).
  Files Spark reads itself (remote, or a Delta table with deletion vectors) come with a condition
  on the time that every record of the window meets (`_spark_window`, from the Delta log's or the
  footers' statistics), so that Spark's readers skip the same files and row groups.
* Stitching needs log order across chunks: Kafka-source dumps are in (partition, offset) order, so
  the pass checks the chunks' offset ranges (and that a chunk a task carried stretches into comes
  right after the chunk it carried them from) and only when that fails scans again on input
  range-partitioned and sorted by (partition, offset).
* What follows works on the small outputs: the replay takes the stretches with the group's
  other records, in log order, and merges them into its generation windows
  (`GroupAuditor.merge_stretch`), so the audit's offset rows, regressions and commit evidence are
  those of feeding every commit.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
from pyspark.sql import DataFrame as SparkDataFrame
from pyspark.sql import functions as F

from coordinator_audit.core.errors import ConfigError
from coordinator_audit.jobs.config import DEFAULT_SCAN_CHUNK_ROWS
from coordinator_audit.jobs.inputs import InputBounds, filter_groups
from coordinator_audit.jobs.spark_session import (
    default_parallelism,
    has_jvm,
    input_files,
    local_tasks,
    release,
)
from coordinator_audit.udfs.handoff import Handoff, Parts, buckets_for, parts_by_bucket, read_files
from coordinator_audit.udfs.replay import (
    HANDOFF_REPORT_SCHEMA,
    STRETCH_COLUMNS,
    files_written,
    hand_off_states,
    make_handoff_fn,
    replay_frame,
    replay_handed_off,
    replay_input,
    split_table,
)
from coordinator_audit.udfs.scan import (
    FILE_UNIT_SCHEMA,
    KIND_COUNTS,
    KIND_HANDOFF,
    KIND_PARTIAL,
    KIND_RANGE,
    KIND_REGRESSION,
    KIND_SIDE,
    NOTHING_INSIDE_MS,
    SCAN_SCHEMA,
    RowGroupBounds,
    make_file_scan_fn,
    make_scan_fn,
    outside_window,
    parquet_input_problem,
    pass_tasks,
    read_footer,
    window_floor,
)
from coordinator_audit.udfs.schemas import epoch_ms
from coordinator_audit.udfs.table_files import DirectWrite, staged_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from coordinator_audit.udfs.scan import ParquetFooter

__all__ = [
    "OFFSET_PATH_TABLES",
    "Scan",
    "chunk_overlap",
    "local_parquet_files",
    "local_session",
    "offset_path",
    "offset_scan",
    "replay_offsets",
    "scan_frame",
    "scan_log",
    "task_frame",
]



# ------------------------------------------------------------------------------------------------
# GroupMetadata windows


# ------------------------------------------------------------------------------------------------
# the single pass (coordinator_audit.udfs.scan) and the summary


@dataclass(frozen=True, slots=True)
class Scan:
    """The kernel's kept output (a local checkpoint) over the input (`coordinator_audit.udfs.scan.SCAN_SCHEMA`), its
    summed counts, and whether the input had to be put in log order first. `unpersist()` when done."""

    df: DataFrame
    counts: dict[str, int]
    reordered: bool
    reader: str
    """"arrow" (the workers read the Parquet files) or "spark" (fed through mapInArrow)."""
    chunks: tuple[tuple[int, int, int, int, int], ...] = ()
    """(partition, first offset, last offset, records, chunk) of every chunk, in log order."""
    handoff: Handoff | None = None
    """Where the pass's tasks wrote the rows the replay reads (`coordinator_audit.udfs.handoff`), or None: they are in `df`."""
    parts: Parts | None = None
    """With `handoff`: the record batches of each bucket."""
    rejected: Mapping[int, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    """Per partition, the offsets (ascending, none a kept record's) of the records in the window
    that the input could not read (`coordinator_audit.jobs.inputs.InputData.rejects` with a log position, which the
    job quarantines): they were read, so they are no offsets never read (`with_rejected`)."""

    def with_rejected(self, positions: Iterable[tuple[int, int]]) -> Scan:
        """This pass with the log positions (partition, offset) of rejected records read in its
        window (`rejected`)."""
        by_partition: dict[int, set[int]] = {}
        for p, o in positions:
            by_partition.setdefault(p, set()).add(o)
        return dataclasses.replace(self, rejected={p: tuple(sorted(o)) for p, o in sorted(by_partition.items())})

    def _rows(self) -> DataFrame:
        """The pass's rows the replay reads: in `df`, or read back from the handed-off files."""
        if self.handoff is None or self.parts is None:
            return self.df
        files: dict[str, list[int]] = {}
        for bucket_files in self.parts.values():
            for path, batches in bucket_files:
                files.setdefault(path, []).extend(batches)
        spark = self.df.sparkSession
        if not files:
            return spark.createDataFrame([], SCAN_SCHEMA)
        units = spark.createDataFrame(sorted((path, sorted(batches)) for path, batches in files.items()),
                                      "path string, batches array<int>")
        return units.mapInArrow(read_files, SCAN_SCHEMA)

    @property
    def ranges(self) -> dict[int, tuple[int, int, int]]:
        """Per `__consumer_offsets` partition: (first, last) offset read in the window and how many
        distinct records (rejected ones included); last - first + 1 - records offsets inside that
        span were not in the input."""
        out: dict[int, tuple[int, int, int]] = {}
        spans = [(p, first, last, records) for p, first, last, records, _ in self.chunks]
        spans += [(p, offsets[0], offsets[-1], len(offsets)) for p, offsets in self.rejected.items() if offsets]
        for partition, first, last, records in spans:
            lo, hi, n = out.get(partition, (first, last, 0))
            out[partition] = (min(lo, first), max(hi, last), n + records)
        return out

    def missing_counts(self, start_after: Mapping[int, int], base_missing: Mapping[int, int]
                       ) -> tuple[dict[tuple[int, int], int], dict[int, int]]:
        """The running count of offsets never read, per partition (`GroupAuditor.observe_missing`):
        ({(chunk, partition): c}, {partition: count at the end of the pass}). A side record at
        `offset` with rank `r` in its chunk, and `b` rejected records below it in its partition
        (`rejected`), has count `offset - r - b + c`: the base run's count, plus the offsets between
        the base's last one and this pass's first, plus the holes before it."""
        consts: dict[tuple[int, int], int] = {}
        ends: dict[int, int] = {}
        chunks = {p: list(rows) for p, rows in itertools.groupby(self.chunks, key=lambda c: c[0])}
        for partition, (first, last, records) in self.ranges.items():
            base = base_missing.get(partition, 0)
            if partition in start_after:
                base += max(first - start_after[partition] - 1, 0)
            before = 0
            for _, _, _, n, chunk in chunks.get(partition, ()):
                consts[(chunk, partition)] = base - first - before
                before += n
            ends[partition] = base + (last - first + 1 - records)
        return consts, ends

    def side(self, missing: Mapping[tuple[int, int], int] | None = None) -> DataFrame:
        """The records the kernel did not summarise, classified (record_type, group_id) for the
        replay: partition, offset, timestamp_ms, key, value, record_type, group_id; with `missing`
        (`missing_counts()[0]`) also `missing_before`, the running count of offsets never read."""
        rows = self._rows().where(F.col("_kind") == KIND_SIDE)
        cols = ["partition", "offset", "timestamp_ms", "key", "value", "record_type", "group_id"]
        if missing is None:
            return rows.select(*cols)
        spark = self.df.sparkSession
        consts = spark.createDataFrame([(c, p, v) for (c, p), v in missing.items()],
                                       "chunk long, partition int, _c long")
        side = (rows.select(*cols, "chunk", F.col("records_in").alias("_rank"))
                .join(F.broadcast(consts), ["chunk", "partition"], "left"))
        below = F.lit(0)
        if self.rejected:  # per partition, the rejected records below each side record: steps between them
            steps = spark.createDataFrame(
                [(p, lo, hi, b) for p, offsets in self.rejected.items()
                 for b, (lo, hi) in enumerate(itertools.pairwise((-1, *offsets, 2**63 - 1)))],
                "_p int, _lo long, _hi long, _below long")
            side = side.join(F.broadcast(steps), (F.col("partition") == F.col("_p")) & (F.col("offset") > F.col("_lo"))
                             & (F.col("offset") <= F.col("_hi")), "left")
            below = F.coalesce(F.col("_below"), F.lit(0))
        return side.withColumn("missing_before", F.col("offset") - F.col("_rank") - below + F.col("_c")).select(
            *cols, "missing_before")

    def stretches(self) -> DataFrame:
        """The summarised offset commits for the replay (`coordinator_audit.udfs.replay.STRETCH_COLUMNS`): one row per
        stretch (kind `partial`, at its first record) and per backwards step inside one (kind
        `regression`, at its commit), with group_id, partition, offset and timestamp_ms."""
        return self._rows().where(F.col("_kind").isin(KIND_PARTIAL, KIND_REGRESSION)).selectExpr(
            *[f"`{c}`" for c in ("group_id", "partition", "offset", "timestamp_ms", *STRETCH_COLUMNS)])

    def unpersist(self) -> None:
        """Frees the pass's kept output (`coordinator_audit.jobs.spark_session.release`) and deletes its handed-off files."""
        release(self.df)
        if self.handoff is not None:
            shutil.rmtree(self.handoff.directory, ignore_errors=True)

    @property
    def hands_off(self) -> bool:
        """Whether the replay reads this pass's rows from handed-off local files (`replay`)."""
        return self.handoff is not None and self.parts is not None

    def replay(self, *, shards: int, groups: Sequence[str] = (),
               states: DataFrame | pa.Table | Iterable[pa.Table] | None = None,
               missing: Mapping[tuple[int, int], int] | None = None, **replay_options: Any) -> DataFrame:
        """The replay's wide output (`coordinator_audit.udfs.replay.replay_frame`) over this pass's rows, the groups
        `groups` keeps, and `states` (group_id, state, state_windows; the groups to resume) when given; `missing`:
        `missing_counts()[0]`. From the handed-off files when there are some (`coordinator_audit.udfs.replay.
        replay_handed_off`; `states` handed off too: by a Spark job, or by the driver when they are an
        Arrow table it read or its pieces, `coordinator_audit.udfs.replay.saved_states_table`, each written before the
        next is read), else through Spark (`replay_input`; `states` then must be a DataFrame)."""
        if self.handoff is not None and self.parts is not None:
            state_parts = None
            if states is not None:
                state_dir = tempfile.mkdtemp(prefix="states-", dir=self.handoff.directory)
                if not isinstance(states, SparkDataFrame):  # read by the driver: a table, or its pieces
                    state_parts = hand_off_states(states, Handoff(state_dir, self.handoff.buckets))
                else:
                    fn = make_handoff_fn(Handoff(state_dir, self.handoff.buckets))
                    state_parts = parts_by_bucket(
                        tuple(r) for r in states.mapInArrow(fn, HANDOFF_REPORT_SCHEMA).collect())
            return replay_handed_off(self.df.sparkSession, self.parts, buckets=self.handoff.buckets, shards=shards,
                                     state_parts=state_parts, consts=missing, rejected=self.rejected, groups=groups,
                                     **replay_options)
        if states is not None and not isinstance(states, SparkDataFrame):
            raise ValueError("Scan.replay: saved states given as Arrow need the handed-off replay input "
                             "(this pass's rows go through Spark): give them as a DataFrame")
        records = filter_groups(self.side(missing), groups).withColumn(
            "missing", F.col("missing_before") if missing is not None else F.lit(None).cast("long"))
        return replay_frame(replay_input(records, filter_groups(self.stretches(), groups), states, shards=shards),
                            **replay_options)


_COUNT_NAMES = ("records_in", "filtered_by_window", "duplicates", "filtered_by_group", "commits", "tombstones",
                "side_records")


def scan_frame(df: DataFrame, *, since: datetime | None = None, until: datetime | None = None,
               start_after: Mapping[int, int] | None = None, groups: Sequence[str] = (),
               chunk_rows: int = DEFAULT_SCAN_CHUNK_ROWS, handoff: Handoff | None = None) -> DataFrame:
    """The kernel over Kafka-source rows (lazy): `coordinator_audit.udfs.scan.make_scan_fn` in `mapInArrow`. The
    run's window (`since`, `until`, `start_after`: `coordinator_audit.jobs.inputs.window_condition`'s rule) is
    evaluated in the workers, on the record times in epoch ms, as the file reader evaluates it; with
    `handoff` the replay's rows go into the tasks' files (`coordinator_audit.udfs.handoff`) instead of the output."""
    rows = df.select("key", "value", F.col("partition").cast("int").alias("partition"),
                     F.col("offset").cast("long").alias("offset"), F.unix_millis("timestamp").alias("timestamp_ms"))
    fn = make_scan_fn(chunk_rows=chunk_rows, groups=tuple(groups), handoff=handoff, since_ms=epoch_ms(since),
                      until_ms=epoch_ms(until), start_after=dict(start_after or {}))
    return rows.mapInArrow(fn, SCAN_SCHEMA)


def _chunk_ranges(scanned: DataFrame) -> tuple[list[Any], dict[str, int], Parts]:
    """The scan's `range` rows in log order, its summed `counts` and the record batches it handed off
    per bucket (`handoff` rows), in one Spark job."""
    rows = (scanned.where(F.col("_kind").isin(KIND_RANGE, KIND_COUNTS, KIND_HANDOFF))
            .select("_kind", "partition", "offset", "last_source_offset", "chunk", "previous_chunk",
                    *_COUNT_NAMES, "path", "bucket", "row_group").collect())
    ranges = [r for r in rows if r["_kind"] == KIND_RANGE]
    ranges.sort(key=lambda r: (r["partition"], r["offset"], r["last_source_offset"]))
    counts = {c: sum(int(r[c] or 0) for r in rows if r["_kind"] == KIND_COUNTS) for c in _COUNT_NAMES}
    parts = parts_by_bucket((r["path"], r["bucket"], r["row_group"], r["records_in"])
                            for r in rows if r["_kind"] == KIND_HANDOFF)
    return ranges, counts, parts


def _overlap(ranges: list[Any]) -> str | None:
    """Why the chunks' stretches cannot be merged in log order (None: they can): two chunks hold
    interleaving offsets of one Kafka partition, or a task carried its open stretches from one chunk
    to a later one (`previous_chunk`) while another chunk holds offsets of that partition between the two."""
    previous: Any = None
    for r in ranges:
        same = previous is not None and previous["partition"] == r["partition"]
        if same and r["offset"] <= previous["last_source_offset"]:
            return (f"partition {r['partition']}: offsets {previous['offset']}-{previous['last_source_offset']} (chunk "
                    f"{previous['chunk']}) and {r['offset']}-{r['last_source_offset']} (chunk {r['chunk']}) interleave")
        linked = r["previous_chunk"]
        if linked is not None and not (same and previous["chunk"] == linked):
            return (f"partition {r['partition']}: chunk {r['chunk']} (offsets {r['offset']}-{r['last_source_offset']}) "
                    f"carries stretches on from chunk {linked}, which does not come right before it in log order")
        previous = r
    return None


def chunk_overlap(scanned: DataFrame) -> str | None:
    """None when the kernel's stretches can be merged in log order (no two chunks of the scan hold
    interleaving offsets of one Kafka partition, and every chunk a task carried stretches into
    comes right after the chunk it carried them from); else why not (`_overlap`)."""
    return _overlap(_chunk_ranges(scanned)[0])


def local_parquet_files(df: DataFrame) -> tuple[list[ParquetFooter], str | None]:
    """The footers of the local Parquet files behind `df` (a plain Parquet read), in path order,
    when the kernel can read them itself, else ([], why not). On a Spark Connect session the files
    are the server's, which this process may not see: Spark reads them."""
    if not has_jvm(df.sparkSession):
        return [], "a Spark Connect session: its server reads the input"
    uris = input_files(df)
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


def task_frame(spark: SparkSession, tasks: Sequence[Sequence[tuple[str, list[int]]]]) -> DataFrame:
    """The file reader's work units (`FILE_UNIT_SCHEMA` rows), one Spark partition per task of
    `tasks` (`coordinator_audit.udfs.scan.pass_tasks`): a task's units reach one worker, in order. (The file reader
    runs on a classic session only, `local_parquet_files`.)"""
    units = spark.sparkContext.parallelize(tasks, max(1, len(tasks))).flatMap(lambda task: task)  # a task per slice
    return spark.createDataFrame(units, FILE_UNIT_SCHEMA)


SKIP_OUTSIDE_WINDOW = True
"""Whether the pass leaves out the row groups of local Parquet files whose statistics put every
record outside the run's window (`_outside_row_groups`); off, it reads and filters them (tests)."""


def _outside_row_groups(files: Sequence[ParquetFooter], since: datetime | None, until: datetime | None,
                        start_after: Mapping[int, int]) -> dict[tuple[str, int], int]:
    """The row groups of `files` that hold no record of the window (`coordinator_audit.udfs.scan.outside_window`), as
    {(path, index): rows}. A nightly run over an input that keeps the whole log (an export
    directory that grows by a day) reads that day's row groups and only the footers of the rest."""
    if not SKIP_OUTSIDE_WINDOW or (since is None and until is None and not start_after):
        return {}
    since_ms, until_ms = epoch_ms(since), epoch_ms(until)
    return {(f.path, i): n for f in files if f.bounds
            for i, (n, b) in enumerate(zip(f.row_groups, f.bounds, strict=True))
            if outside_window(b, since_ms=since_ms, until_ms=until_ms, start_after=start_after)}


def _spark_window(df: DataFrame, units: Sequence[RowGroupBounds] | None, records: int | None, *,
                  since: datetime | None, until: datetime | None, start_after: Mapping[int, int]
                  ) -> tuple[DataFrame, int | None, str | None]:
    """`df` for Spark to read with a condition every record of the window meets (time at or after
    `coordinator_audit.udfs.scan.window_floor` of the input's `units`, or `since` when the window has no offset
    bound; before `until`), so that its readers skip the files and row groups whose statistics rule
    them out (Delta's data skipping, Parquet's row-group filter); (that, how many records `df`
    holds, what it reads) or (`df`, None, None) when there is no window or no such condition, or the
    condition would be `until` alone on an input of unknown size. `records` None: `df` is counted
    (a Spark job: Parquet and Delta count from metadata). `units` must come from an input without
    null times (a window without a time bound may hold them)."""
    if not SKIP_OUTSIDE_WINDOW or (since is None and until is None and not start_after):
        return df, None, None
    since_ms = epoch_ms(since)
    floor = (window_floor(units, since_ms=since_ms, until_ms=epoch_ms(until), start_after=start_after)
             if units is not None else None if start_after else since_ms)
    if floor is None and records is None:
        # `until` alone: a nightly input's files before the window all pass it, so it would skip next to
        # nothing, and counting an input without statistics is a scan of its positions: neither is done
        return df, None, None
    if floor == NOTHING_INSIDE_MS:
        cond, what = F.lit(False), "no record: the statistics put every file outside the window"
    else:
        terms = []
        if floor is not None:
            terms.append((F.col("timestamp") >= F.timestamp_millis(F.lit(floor)),
                          f"timestamp >= {datetime.fromtimestamp(floor / 1000, UTC).isoformat()}"))
        if until is not None:
            terms.append((F.col("timestamp") < F.lit(until), f"timestamp < {until.isoformat()}"))
        if not terms:
            return df, None, None
        cond = functools.reduce(lambda a, b: a & b, [c for c, _ in terms])
        what = ("the records where " + " and ".join(t for _, t in terms) + ", as every record of the window is "
                "(its readers skip the files and row groups whose statistics rule them out)")
    return df.where(cond), records if records is not None else df.count(), what


def scan_log(df: DataFrame, *, since: datetime | None = None, until: datetime | None = None,
             groups: Sequence[str] = (), chunk_rows: int = DEFAULT_SCAN_CHUNK_ROWS, reader: str = "auto",
             shards: int | None = None, log: Callable[[str], None] | None = None,
             start_after: Mapping[int, int] | None = None, handoff_root: str | None = None,
             records_hint: int | None = None, bounds: InputBounds | None = None,
             input_format: str | None = None) -> Scan:
    """Runs the single pass over `df` (Kafka-source rows, not deduplicated: the kernel drops
    repeated (partition, offset) rows and those outside since <= timestamp < until), kept (a local
    checkpoint).

    `reader`: "spark" feeds the kernel through Spark (`mapInArrow` over `df`); "arrow" has each
    worker read `df`'s local Parquet files itself with pyarrow (no trip through the JVM; `df`
    must be a plain Parquet read whose columns have the Kafka-source types; the row groups whose
    statistics put every record outside the window are not read, `_outside_row_groups`, and the
    files' units are packed into tasks, `coordinator_audit.udfs.scan.parquet_tasks`); "auto" is arrow
    when that holds, else spark. When the chunks' offsets interleave (input not in log order),
    the pass runs again through Spark on `df` range-partitioned and sorted by (partition, offset).
    `start_after`: the previous run's last offset per partition (`coordinator_audit.jobs.inputs.window_condition`).
    `handoff_root`: a local directory (the session runs on this machine) under which the pass's
    workers hand the replay's rows off as files (`coordinator_audit.udfs.handoff`; `Scan.replay` reads them) instead
    of keeping them in the checkpoint; `Scan.unpersist` deletes them. The workers that read the
    files themselves always do; those fed through Spark do when `records_hint` says about how many
    records `df` holds (the Kafka source's offset ranges: what sizes the buckets), and otherwise
    keep the rows in the checkpoint.

    `input_format` "parquet" or "delta", or `bounds` given (a catalog table that is a Delta
    table): `df` reads files. When Spark reads them (the "spark"
    reader, or the sorted pass) it is given a condition on the timestamp that every record of the
    window meets (`_spark_window`), from the files' statistics (`bounds`, a Delta input's log; the
    footers of local Parquet files, or of a Delta table's when they are its rows, as the "arrow"
    reader has them) or, without an offset bound, from the window's own times; the records it
    leaves unread are counted as filtered by the window, as reading them would count them."""

    spark = df.sparkSession
    files: list[ParquetFooter] = []
    spark_read: list[tuple[DataFrame, int | None, str | None]] = []

    def spark_input() -> tuple[DataFrame, int | None, str | None]:
        """`df` as Spark reads it for the pass (`_spark_input`), decided once."""
        if not spark_read:
            spark_read.append(_spark_input(df, files, input_format, bounds, since=since, until=until,
                                           start_after=start_after, log=log))
        return spark_read[0]

    if reader != "spark":
        files = _arrow_files(df, reader, log)
    skipped: dict[tuple[str, int], int] = {}
    if files:
        skipped = _skipped_row_groups(files, since, until, start_after, log)
        scanned, handoff = _arrow_scan(spark, files, skipped, since=since, until=until,
                                       start_after=start_after, groups=groups, chunk_rows=chunk_rows,
                                       shards=shards, handoff_root=handoff_root)
    else:
        scanned, handoff = _spark_scan(spark, spark_input()[0], since=since, until=until, start_after=start_after,
                                       groups=groups, chunk_rows=chunk_rows, shards=shards,
                                       handoff_root=handoff_root, records_hint=records_hint)
    # kept as a local checkpoint rather than Spark's columnar cache, which compresses every column as
    # it builds; the replay's wide output likewise (coordinator_audit.jobs.audit)
    scanned = scanned.localCheckpoint(eager=False)
    ranges, counts, parts = _chunk_ranges(scanned)
    overlap = _overlap(ranges)
    reordered = overlap is not None
    if overlap is not None:
        if log is not None:
            log(f"input not in log order ({overlap}): scanning it again sorted by (partition, offset)")
        release(scanned)
        if handoff is not None:  # the sorted pass goes through Spark: its rows stay in its checkpoint
            shutil.rmtree(handoff.directory, ignore_errors=True)
            handoff, parts = None, {}
        scanned, ranges, counts = _sorted_scan(spark_input()[0], shards or default_parallelism(spark), since=since,
                                               until=until, start_after=start_after, groups=groups,
                                               chunk_rows=chunk_rows)
    elif skipped:  # the records of the row groups not read were outside the window: counted so
        skipped_rows = sum(skipped.values())
        counts["records_in"] += skipped_rows
        counts["filtered_by_window"] += skipped_rows
    _count_unread(counts, spark_read[0][1] if spark_read else None, log)
    return Scan(scanned, counts, reordered, "arrow" if files and not reordered else "spark", _chunks(ranges),
                handoff, parts if handoff is not None else None)


def _skipped_row_groups(files: Sequence[ParquetFooter], since: datetime | None, until: datetime | None,
                        start_after: Mapping[int, int] | None, log: Callable[[str], None] | None
                        ) -> dict[tuple[str, int], int]:
    """The row groups the pass does not read (`_outside_row_groups`), logged."""
    skipped = _outside_row_groups(files, since, until, start_after or {})
    if skipped and log is not None:
        log(f"single pass: {len(skipped):,} of {sum(len(f.row_groups) for f in files):,} row groups "
            f"({sum(skipped.values()):,} records) not read: their statistics put every record outside the window")
    return skipped


def _chunks(ranges: Iterable[Any]) -> tuple[tuple[int, int, int, int, int], ...]:
    """`Scan.chunks` of the pass's `range` rows."""
    return tuple((int(r["partition"]), int(r["offset"]), int(r["last_source_offset"]), int(r["records_in"] or 0),
                  int(r["chunk"])) for r in ranges)


def _arrow_files(df: DataFrame, reader: str, log: Callable[[str], None] | None) -> list[ParquetFooter]:
    """The local Parquet files the workers read themselves, or none: the pass reads through Spark
    (an error when `reader` is "arrow")."""
    files, why = local_parquet_files(df)
    if why is not None:
        if reader == "arrow":
            raise ConfigError(f"the single pass cannot read the input's files itself ({why}): Spark must read them")
        if log is not None:
            log(f"the single pass reads through Spark ({why})")
    return files


def _spark_input(df: DataFrame, files: Sequence[ParquetFooter], input_format: str | None,
                 bounds: InputBounds | None, *, since: datetime | None, until: datetime | None,
                 start_after: Mapping[int, int] | None, log: Callable[[str], None] | None
                 ) -> tuple[DataFrame, int | None, str | None]:
    """`df` as Spark reads it for the pass: under `_spark_window` when it reads files (`scan_log`)."""
    if input_format not in ("parquet", "delta") and bounds is None:  # (a catalog table may have them)
        return df, None, None
    # a Delta table's files are its rows only when the arrow reader may read them (`files`)
    footers = files or (local_parquet_files(df)[0] if input_format == "parquet" else [])
    units: Sequence[RowGroupBounds] | None = bounds.units if bounds is not None else None
    records = bounds.records if bounds is not None else None
    if footers:
        records = sum(sum(f.row_groups) for f in footers)
        if all(len(f.bounds) == len(f.row_groups) for f in footers):
            units = [b for f in footers for b in f.bounds]
    read = _spark_window(df, units, records, since=since, until=until, start_after=start_after or {})
    if read[2] is not None and log is not None:
        log(f"single pass: Spark reads {read[2]}")
    return read


def _arrow_scan(spark: SparkSession, files: Sequence[ParquetFooter], skipped: Mapping[tuple[str, int], int], *,
                since: datetime | None, until: datetime | None,
                start_after: Mapping[int, int] | None, groups: Sequence[str], chunk_rows: int, shards: int | None,
                handoff_root: str | None) -> tuple[DataFrame, Handoff | None]:
    """The pass whose workers read the Parquet files themselves (the row groups in `skipped` left
    out), and where they hand the replay's rows off (with `handoff_root`)."""
    # a task reads one unit of several chunks (`unit_rows_for`); the chunk bounds the worker's memory
    total = sum(sum(f.row_groups) for f in files) - sum(skipped.values())
    tasks = pass_tasks(files, total_rows=total, cores=default_parallelism(spark),
                       chunk_rows=chunk_rows, skip=skipped)
    handoff = None
    if handoff_root is not None:
        handoff = Handoff(tempfile.mkdtemp(prefix="coordinator-audit-pass-", dir=handoff_root),
                          buckets_for(total, shards or default_parallelism(spark)))
    fn = make_file_scan_fn(chunk_rows=chunk_rows, groups=tuple(groups), since_ms=epoch_ms(since),
                           until_ms=epoch_ms(until), start_after=dict(start_after or {}), handoff=handoff)
    return task_frame(spark, tasks).mapInArrow(fn, SCAN_SCHEMA), handoff


def _spark_scan(spark: SparkSession, source: DataFrame, *, since: datetime | None, until: datetime | None,
                start_after: Mapping[int, int] | None, groups: Sequence[str], chunk_rows: int, shards: int | None,
                handoff_root: str | None, records_hint: int | None) -> tuple[DataFrame, Handoff | None]:
    """The pass fed through Spark (`mapInArrow` over `source`), and where it hands the replay's rows
    off (with `handoff_root` and `records_hint`)."""
    # Every task costs a Python round trip, and through Spark's Kafka source a consumer too: the
    # source makes one task per topic-partition (50 for __consumer_offsets). Merging adjacent
    # splits (coalesce: no shuffle, each split's rows read one split after the other) to at most
    # four per core saves most of those round trips and keeps every core busy.
    most = 4 * default_parallelism(spark)
    fewer = source.coalesce(most)  # (no more partitions than it has: a coalesce never adds any)
    handoff = None
    if handoff_root is not None and records_hint is not None:
        handoff = Handoff(tempfile.mkdtemp(prefix="coordinator-audit-pass-", dir=handoff_root),
                          buckets_for(records_hint, shards or default_parallelism(spark)))
    scanned = scan_frame(fewer, since=since, until=until, start_after=start_after, groups=groups,
                         chunk_rows=chunk_rows, handoff=handoff)
    return scanned, handoff


def _sorted_scan(source: DataFrame, n: int, *, since: datetime | None, until: datetime | None,
                 start_after: Mapping[int, int] | None, groups: Sequence[str], chunk_rows: int
                 ) -> tuple[DataFrame, list[Any], dict[str, int]]:
    """The pass again over `source` range-partitioned into `n` tasks and sorted by (partition,
    offset), for input not in log order: kept, its chunks' ranges and its counts."""
    ordered = source.repartitionByRange(n, "partition", "offset").sortWithinPartitions("partition", "offset")
    scanned = scan_frame(ordered, since=since, until=until, start_after=start_after, groups=groups,
                         chunk_rows=chunk_rows)
    scanned = scanned.localCheckpoint(eager=False)
    ranges, counts, _ = _chunk_ranges(scanned)
    again = _overlap(ranges)
    if again is not None:  # cannot happen: range partitioning keeps equal positions in one task, and a
        # chunk drops a repeat of the record its task's previous chunk ended on
        raise AssertionError(f"sorted input still interleaves: {again}")
    return scanned, ranges, counts


def _count_unread(counts: dict[str, int], records: int | None, log: Callable[[str], None] | None) -> None:
    """Counts the records of the input (`records` of them, when Spark read it under the pass's
    condition) that Spark's readers left out as filtered by the window."""
    if records is None:
        return
    unread = records - counts["records_in"]
    if unread < 0:  # cannot happen: the condition only leaves records out
        raise AssertionError(f"the pass read {counts['records_in']:,} records of an input of {records:,}")
    counts["records_in"] += unread
    counts["filtered_by_window"] += unread
    if log is not None:
        log(f"single pass: {unread:,} of {records:,} records left out by Spark's readers, which skipped "
            f"or filtered them by the condition (outside the window)")



def local_session(spark: Any) -> bool:
    """Whether every task of the session runs on this machine and sees this process's files (a
    classic session with a `local` master, `coordinator_audit.jobs.spark_session.local_tasks`): files one task writes
    to a local directory, another can read (`coordinator_audit.udfs.handoff`)."""
    return local_tasks(spark)


OFFSET_PATH_TABLES = ("offset_commits", "violations")
"""The tables `offset_path` outputs (its violations are the `offset_regression` rows alone)."""


def offset_path(df: DataFrame, *, shards: int | None = None, **scan_options: Any
                ) -> tuple[DataFrame, DataFrame, Scan]:
    """The offset-commit path alone on Kafka-source rows: (offset_commits rows, offset_regression
    violations, the scan): the single pass, then the replay of its side records and stretches
    (`coordinator_audit.udfs.replay`, `shards` partitions, default the session's parallelism; asked for those two
    tables only, and without the generation observer: `observe=False`), computed once for both
    results. For tests, notebooks and the benchmark.

    When the pass handed its rows off as local files (a local session), the replay's tasks write
    the two tables' rows as Parquet files beside them (`coordinator_audit.udfs.table_files`, as the audit's embedded
    writer has them write its tables), and the results read those files: the rows never cross to
    the JVM as Arrow batches nor sit in a checkpoint, which saves the JVM more than writing Parquet
    costs the workers (`benchmarks.bench_worker_cpu` measures both). Read them before
    `scan.unpersist()`, which deletes them with the handed-off files. Otherwise the replay's output
    (in only the two tables' columns, `coordinator_audit.udfs.replay.replay_schema`) is kept as a lazy local checkpoint."""
    scan = offset_scan(df, shards=shards, **scan_options)
    oc, violations = replay_offsets(scan, shards=shards)
    return oc, violations, scan


def offset_scan(df: DataFrame, *, shards: int | None = None, **scan_options: Any) -> Scan:
    """`offset_path`'s first step: the single pass (`scan_log`), its rows handed off as local files
    when the session runs on this machine (unless `handoff_root` is given)."""
    if "handoff_root" not in scan_options and local_session(df.sparkSession):
        scan_options["handoff_root"] = tempfile.gettempdir()
    return scan_log(df, shards=shards, **scan_options)


def replay_offsets(scan: Scan, *, shards: int | None = None) -> tuple[DataFrame, DataFrame]:
    """`offset_path`'s second step: the replay of `scan`'s side records and stretches asked for the
    two tables only, (offset_commits rows, offset_regression violations); run at once when `scan`
    handed its rows off (the rows are then in files), lazily otherwise."""
    spark = scan.df.sparkSession
    n = shards or default_parallelism(spark)
    # only the two tables it returns, from the offset windows alone: no generation is observed, so
    # the only violations are the windows' offset_regression rows
    if scan.hands_off:
        assert scan.handoff is not None  # (hands_off says so)
        out = tempfile.mkdtemp(prefix="offset-path-", dir=scan.handoff.directory)
        # temporary files, read once below (not a table's): the codec the tables had before output.compression
        direct = DirectWrite({t: os.path.join(out, t) for t in OFFSET_PATH_TABLES}, run_id="offset-path",
                             compression="snappy")
        wide = scan.replay(shards=n, tables=OFFSET_PATH_TABLES, observe=False, direct=direct)
        files = files_written(wide, OFFSET_PATH_TABLES)  # runs the replay, once
        oc, violations = (staged_rows(spark, t, [path for path, _ in files[t]]) for t in OFFSET_PATH_TABLES)
        return oc, violations
    wide = scan.replay(shards=n, tables=OFFSET_PATH_TABLES, observe=False).localCheckpoint(eager=False)
    return split_table(wide, "offset_commits"), split_table(wide, "violations")
