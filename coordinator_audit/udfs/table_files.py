"""The run's table files, written by the replay's own Python workers (the embedded writer's fast path).

When the embedded writer writes a run's tables to a local base path, the replay's workers already
hold every new row of every table, grouped and typed. Handing them to the JVM only so that Spark can
cache them, filter them back into ten tables and encode them as Parquet costs more than the
replay's own Python, where pyarrow encodes the same rows for a fraction of that (the tables are
identical either way). So the job gives the replay a
`DirectWrite`: per table, the directory this run's files of that table go to (`coordinator_audit.jobs.delta_io`'s
staged directory, `<table>/run_window=<W>/<run_id>/`). Each replay task then writes, per table, one
Parquet file of its new rows there (`TableFiles`), with the columns Spark's path stores (the content
columns, their TIMESTAMP companions, `run_id`; `stored_arrow_schema`), and reports the files it wrote
as rows of the replay's output (`FILES_TABLE`); the driver commits exactly those files
(`coordinator_audit.jobs.delta_io.StagedFiles`), so the files of a failed or recomputed task attempt are never
committed (they are deleted before the commit).

The rows that continue an earlier run's open rows (carried rows: merged into the table, not added)
of those tables go to files of their own, in a directory outside the table (`DirectWrite.
carried_dirs`), reported as `carried:<table>` rows (`carried_key`): the driver reads them with
pyarrow as the source of the table's MERGE and deletes them after the run. A nightly run of active
groups carries most of its `offset_commits` rows (a window stays open across nights); through
Spark's wide output their way through the JVM, their count and their collection to the driver
would be a large share of such a run.

What stays on Spark's path: the carried rows of tables the tasks do not write, the `runs` row, the
tables the job still changes after the replay (the derived tables when they have a stage of their
own, `generations` with a broker log, `quarantine` with a JSON input's unreadable lines), and
outputs the workers cannot write themselves (a catalog table, Delta Spark, a non-local path).
`coordinator_audit.jobs.audit` decides (`direct_tables`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import ArrayType, DataType, MapType, StringType, StructField, StructType, TimestampType

from coordinator_audit.udfs.schemas import (
    BROKER_ACCOUNT_COLUMNS,
    DERIVED_TABLES,
    TABLE_SCHEMAS,
    TIME_COMPANIONS,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "CARRIED_PREFIX",
    "FILES_TABLE",
    "DirectWrite",
    "TableFiles",
    "carried_key",
    "overlapping_rows",
    "part_file_name",
    "staged_rows",
    "staged_schema",
    "stored_arrow_schema",
]

FILES_TABLE = "_file"
"""The replay output's rows that report a file a task wrote: (table, path, rows)."""

ROW_GROUP_ROWS = 131_072
"""Rows a task buffers per table before writing them (in row groups of `QUERY_ROW_GROUP_ROWS`):
a file of a few writes rather than one per output batch; the buffer bounds the worker's memory
with the replay's own batch size."""

QUERY_ROW_GROUP_ROWS = 16_384
"""Rows per Parquet row group of a task's files. A task writes its groups' rows in group order, so
each row group's `group_id` statistics span a few hundred groups, and a reader that wants one
group (`coordinator_audit.jobs.query`, `coordinator_audit.jobs.delta_read`; Spark's Parquet filter) skips the other row groups of every
night's files, where one row group per file spans them all. Smaller row groups make one-group
reads faster and the files larger; this size trades a modest growth of the files for one-group
reads that skip most of every night, and a year of nights multiplies the reads saved."""

CARRIED_PREFIX = "carried:"
"""How a `FILES_TABLE` row names a file of carried rows: `carried:<table>` (`carried_key`)."""


def carried_key(table: str) -> str:
    """The name a file of `table`'s carried rows is reported under (`FILES_TABLE` rows)."""
    return CARRIED_PREFIX + table


RUN_ID_COLUMN = "run_id"
"""The column `coordinator_audit.jobs.delta_io` appends to every row (the run that wrote it)."""


@dataclass(frozen=True, slots=True)
class DirectWrite:
    """What a replay task needs to write the run's new rows of `stage_dirs`' tables itself: per
    table the (local, absolute) directory of this run's files, the run id every row carries, and the
    run's window in epoch ms (the derived rows a run writes are those overlapping it)."""

    stage_dirs: Mapping[str, str]
    run_id: str
    since_ms: int | None = None
    until_ms: int | None = None
    carried_dirs: Mapping[str, str] = field(default_factory=dict)
    """Per table, the (local, absolute) directory its carried rows' files go to: rows continuing an
    earlier run's open rows, which the driver merges into the table (none: they go through Spark)."""
    compression: str = field(kw_only=True)
    """The files' Parquet codec (`output.compression`: zstd, snappy, gzip or none)."""


CAST_TABLES = frozenset({"group_state"})
"""Tables whose columns the job casts to their types by name (`coordinator_audit.jobs.audit.build_tables`): a cast to
a type written as text leaves every nested field, element and value nullable."""


def _cast_type(t: DataType) -> DataType:
    """`t` as `CAST(x AS <t.simpleString()>)` yields it: every nested part nullable."""
    if isinstance(t, ArrayType):
        return ArrayType(_cast_type(t.elementType), True)
    if isinstance(t, MapType):
        return MapType(t.keyType, _cast_type(t.valueType), True)
    if isinstance(t, StructType):
        return StructType([StructField(f.name, _cast_type(f.dataType), True) for f in t.fields])
    return t


def staged_schema(table: str) -> StructType:
    """The Spark schema of a table's staged files, as the Spark path writes them: the content
    columns (every one nullable, as the replay's output makes them; nested parts too for the tables
    the job casts, `CAST_TABLES`), their TIMESTAMP companions, then `run_id` (not null).
    `generations` carries the broker account columns (null without a server log)."""
    content = TABLE_SCHEMAS[table]
    times = [StructField(ts, TimestampType(), True) for _, ts in TIME_COMPANIONS.get(table, ())]
    fields = [StructField(f.name, _cast_type(f.dataType) if table in CAST_TABLES else f.dataType, True)
              for f in content.fields]
    return StructType([*fields, *times, StructField(RUN_ID_COLUMN, StringType(), False)])


def staged_rows(spark: SparkSession, table: str, files: Sequence[str]) -> DataFrame:
    """The content columns (`TABLE_SCHEMAS` order) of `table`'s rows in Parquet files replay tasks
    wrote (`TableFiles`: the stored layout, `staged_schema`), read lazily by Spark; an empty
    DataFrame when there are none."""
    schema = staged_schema(table)
    columns = [f"`{name}`" for name in TABLE_SCHEMAS[table].fieldNames()]
    if not files:
        return spark.createDataFrame([], schema).selectExpr(*columns)
    return spark.read.schema(schema).parquet(*files).selectExpr(*columns)


@functools.cache
def stored_arrow_schema(table: str) -> pa.Schema:
    """`staged_schema` as Arrow (Spark's own mapping, timestamps in UTC); built once per table
    (`stored_batch` asks for it at every flush)."""
    return to_arrow_schema(staged_schema(table), timezone="UTC")


@functools.cache
def _content_arrow_types(table: str) -> tuple[pa.DataType, ...]:
    schema = stored_arrow_schema(table)
    return tuple(schema.field(f.name).type for f in TABLE_SCHEMAS[table].fields)


_BROKER_NAMES = frozenset(BROKER_ACCOUNT_COLUMNS.fieldNames())
_MS_TO_US = pa.scalar(1000, pa.int64())


def _day_start_ms(days: pa.Array) -> pa.Array:
    """Epoch ms of the UTC midnight of each `yyyy-MM-dd` day (Spark's `to_timestamp(day, 'yyyy-MM-dd')`
    in the job's UTC session)."""
    return pc.strptime(days, format="%Y-%m-%d", unit="ms", error_is_null=True).cast(pa.int64())


def overlapping_rows(table: str, batch: pa.RecordBatch, since_ms: int | None, until_ms: int | None) -> pa.RecordBatch:
    """The Arrow twin of `coordinator_audit.udfs.derived.overlapping_window` for one derived table's rows: those whose
    interval overlaps [since, until) (an interval with no end is open; a null start is dropped, as
    Spark's filter drops a null condition). Other tables and unbounded windows pass unchanged."""
    if table not in DERIVED_TABLES or (since_ms is None and until_ms is None) or batch.num_rows == 0:
        return batch
    col = batch.column
    if table == "partition_ownership":
        start, end = col("valid_from"), col("valid_to")
    elif table == "rebalances":
        start, end = pc.coalesce(col("started_at"), col("observed_at")), col("observed_at")
    else:  # group_health: the day
        start = _day_start_ms(col("day"))
        end = pc.add(start, pa.scalar(86_400_000 - 1, pa.int64()))
    keep: Any = pa.repeat(pa.scalar(True), batch.num_rows)
    if since_ms is not None:
        keep = pc.and_kleene(keep, pc.or_kleene(pc.is_null(end), pc.greater_equal(end, pa.scalar(since_ms, pa.int64()))))
    if until_ms is not None:
        keep = pc.and_kleene(keep, pc.less(start, pa.scalar(until_ms, pa.int64())))
    return batch.filter(keep, null_selection_behavior="drop")


def stored_batch(table: str, columns: Sequence[Sequence[Any]], run_id: str) -> pa.RecordBatch:
    """The stored row layout (`stored_arrow_schema`) of `table`'s rows given as one value list per
    content field (`TABLE_SCHEMAS` order; `generations` without the broker account columns, which
    come out null; a column may be given as an Arrow array of its type): the TIMESTAMP companions computed from their epoch-ms columns as Spark's
    `timestamp_millis` does, `run_id` repeated."""
    schema = stored_arrow_schema(table)
    fields = TABLE_SCHEMAS[table].fields
    given = iter(columns)
    n = len(columns[0]) if columns else 0
    arrays: list[pa.Array] = []
    for f, t in zip(fields, _content_arrow_types(table), strict=True):
        if table == "generations" and f.name in _BROKER_NAMES:
            arrays.append(pa.nulls(n, t))
            continue
        values = next(given)
        if isinstance(values, pa.Array):  # built already (group_state's offset_windows)
            try:  # (to the stored nesting's nullability)
                arrays.append(values if values.type == t else values.cast(t))
            except (pa.ArrowException, TypeError, ValueError) as e:
                raise ValueError(f"table {table} column {f.name!r}: an array of {values.type}, not {t}: {e}") from e
            continue
        try:
            arrays.append(pa.array(values, type=t))
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
            raise ValueError(f"table {table} column {f.name!r} ({t}): {e}") from e
    if next(given, None) is not None:
        raise ValueError(f"table {table}: more value lists than its {len(fields)} content columns")
    by_name = dict(zip((f.name for f in fields), arrays, strict=True))
    ts_type = pa.timestamp("us", tz="UTC")
    for ms, _ in TIME_COMPANIONS.get(table, ()):
        arrays.append(pc.multiply_checked(by_name[ms], _MS_TO_US).cast(ts_type))
    arrays.append(pa.repeat(pa.scalar(run_id, pa.string()), n))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


_CODEC_SUFFIXES = {"zstd": ".zstd", "snappy": ".snappy", "gzip": ".gz", "none": ""}


def part_file_name(partition_id: int, compression: str) -> str:
    """A staged file's name: the task's partition and a fresh uuid (a retried or recomputed attempt
    never overwrites the file of another), in Spark's `part-` naming (its codec's suffix included)."""
    if compression not in _CODEC_SUFFIXES:
        raise ValueError(f"Parquet compression {compression!r} is not one of {', '.join(_CODEC_SUFFIXES)}")
    return f"part-{partition_id:05d}-{uuid.uuid4()}.c000{_CODEC_SUFFIXES[compression]}.parquet"


class TableFiles:
    """One replay task's files: per table of `spec`, at most one Parquet file in its staged
    directory, opened at the table's first row, written a buffer at a time (`ROW_GROUP_ROWS`),
    closed by `close`, which returns what was written as (table, absolute path, rows)."""

    __slots__ = ("_buffered", "_files", "_partition", "_writers", "spec")

    def __init__(self, spec: DirectWrite, partition_id: int) -> None:
        self.spec = spec
        self._partition = partition_id
        self._buffered: dict[str, list[pa.RecordBatch]] = {}
        self._writers: dict[str, pq.ParquetWriter] = {}
        self._files: dict[str, tuple[str, int]] = {}

    def writes(self, table: str) -> bool:
        return table in self.spec.stage_dirs

    def writes_carried(self, table: str) -> bool:
        """Whether `table`'s carried rows go to files (`DirectWrite.carried_dirs`)."""
        return table in self.spec.carried_dirs

    def add(self, table: str, columns: Sequence[Sequence[Any]], *, carried: bool = False) -> None:
        """`table`'s new rows (`carried`: its carried rows, `writes_carried`), one value list per
        content column (see `stored_batch`)."""
        batch = stored_batch(table, columns, self.spec.run_id)
        if not carried:
            batch = overlapping_rows(table, batch, self.spec.since_ms, self.spec.until_ms)
        if batch.num_rows == 0:
            return
        key = carried_key(table) if carried else table
        buffered = self._buffered.setdefault(key, [])
        buffered.append(batch)
        if sum(b.num_rows for b in buffered) >= ROW_GROUP_ROWS:
            self._write(key)

    def _write(self, key: str) -> None:
        """Writes the rows buffered under `key` (a table, or `carried_key` of one) to its file."""
        batches = self._buffered.pop(key, [])
        if not batches:
            return
        writer = self._writers.get(key)
        if writer is None:
            carried = key.startswith(CARRIED_PREFIX)
            directory = (self.spec.carried_dirs[key.removeprefix(CARRIED_PREFIX)] if carried
                         else self.spec.stage_dirs[key])
            os.makedirs(directory, exist_ok=True)
            path = os.path.join(directory, part_file_name(self._partition, self.spec.compression))
            writer = pq.ParquetWriter(path, batches[0].schema, compression=self.spec.compression)
            self._writers[key] = writer
            self._files[key] = (path, 0)
        writer.write_table(pa.Table.from_batches(batches), row_group_size=QUERY_ROW_GROUP_ROWS)
        path, rows = self._files[key]
        self._files[key] = (path, rows + sum(b.num_rows for b in batches))

    def close(self) -> list[tuple[str, str, int]]:
        """Writes what is buffered, closes every file; (table, path, rows) per file written (a file of
        carried rows under `carried_key` of its table)."""
        for table in list(self._buffered):
            self._write(table)
        for writer in self._writers.values():
            writer.close()
        self._writers = {}
        return [(table, path, rows) for table, (path, rows) in self._files.items()]

    def abort(self) -> None:
        """Closes the files after a failure (the driver never commits them: they are in no report)."""
        for writer in self._writers.values():
            with contextlib.suppress(Exception):  # the task is failing already: its own error is the one to report
                writer.close()
        self._writers = {}
