"""The per-group replay adapter for `mapInArrow`: one pass over a Spark partition's records,
group by group, through `coordinator_audit.core.audit`, emitting the rows of every table at once.

`replay_frame(records)` is the entry point: `records` (columns `INPUT_COLUMNS`) must be
repartitioned by `group_id` and sorted within partitions by (`group_id`, `partition`, `offset`)
(see `coordinator_audit.jobs.audit`). `replay_handed_off` is its twin over input the single pass's tasks handed off
as local files (`coordinator_audit.udfs.handoff`): each task reads its buckets and sorts them itself. This module never assumes more than that a group's records are contiguous and
in log order. Memory is bounded by one group's audit state plus one output batch (flushed once
`batch_rows` rows are held, `FILE_FLUSH_ROWS` when the task writes its tables' files itself; a
group's closing rows and counts row may add to it), never by how many records a group has.

Output: one wide row per audit row (`REPLAY_SCHEMA`): `_table` names the table, and the columns
that hold that table's fields (`wide_column`; tables share columns of the same type) are set, the
others null. One extra row per group,
`_table == "_counts"`, carries the group's `AuditCounts` so the job's `runs` row adds up.
`split_table` turns the wide output back into one table's DataFrame, `split_counts` the counts.
A replay asked for some tables alone (`tables`, the offset path) outputs only the columns they use
(`replay_schema`).

Carried state (nightly runs). A record with a non-null `state` column is not a record but a
group's saved audit state (`GroupAuditor.to_dict()` as JSON, from the previous run's
`group_state` table); it sorts first in its group (partition -1) and starts the group's replay
from it. Every group takes one path, the core's `GroupReplay` (`coordinator_audit.core.audit.replayer`):
fresh or resumed from its saved state at its first record or stretch, or, when it reads none,
carried forward as saved (its state JSON and offset windows passed on as they came in, its counts
zero) when that is what resuming and finishing it would give. It sorts the rows into new rows and
rows the previous run left open that changed, which come out `_carried` (the writer merges them
into the earlier run's rows instead of adding them); `ResumeMode` says how (`resume`, `rerun`,
`warmup`). One more row per group, `_table == "_state"`, carries its state after this run
(`STATE_FIELDS`), so the next run can resume. A nightly run over a cluster whose groups are mostly
idle pays for the groups that moved.

Derived tables (`replay_frame(derive=True)`). When a run's own rows are all the derivation needs
(a fresh output: no earlier run's rows to add; no broker account to attach), each group's
`partition_ownership`, `rebalances` and `group_health` rows are derived at the group's end from the
rows it output (`coordinator_audit.udfs.history.derive_group`) and come out in the same wide output: the rows are
already in this worker, grouped, so no second shuffle, sort and Arrow trip is needed for them.

Table files (`replay_frame(direct=...)`). When the embedded writer writes the run to a local path,
the new rows of the tables `DirectWrite.stage_dirs` names do not come out at all: each task writes
them into one Parquet file per table itself (`coordinator_audit.udfs.table_files.TableFiles`) and outputs one
`FILES_TABLE` row per file (`split_files`), which the driver commits. The carried rows of the tables
`DirectWrite.carried_dirs` names go to files of their own too (reported as `carried:<table>`, which
the driver merges into the table); the other carried rows, the counts and the states still come out.

Cost: the audit yields row objects; they are kept per table and turned into Arrow columns only at
a flush (one `pa.array` per column of that table, `pa.nulls` for the other wide columns), so no
per-row work touches the columns a row does not use. Within a flush the rows come table by table (each
table's rows in the order the audit produced them); the wide output has no other order. The
single pass's stretches that open their topic-partition's summary in a window still open at the
group's end never become objects at all: their `offset_commits` rows, and the open windows the
group's state saves, are taken out of the input's Arrow columns at the flush, once per input batch
(`_Group.hold`, `_HeldBlock`, `_BlockArrays`). A member's assignments of one interval come from
the auditor as one `AssignmentRun`, and the ownership rows derived from them as they were stored as
one `coordinator_audit.udfs.history.OwnershipRun`: their columns are built from the values the rows share, once per
run (`_run_columns`, `_ownership_run_columns`); a run is taken apart into rows only where the
rows an earlier run left open are compared one by one (`_Group.route`).
"""

from __future__ import annotations

import base64
import dataclasses
import itertools
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from functools import partial
from operator import attrgetter
from time import perf_counter
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from coordinator_audit.core.audit import (
    NO_COUNTS,
    AssignmentRow,
    AssignmentRun,
    AtRest,
    AuditCounts,
    GroupAuditor,
    GroupReplay,
    HistoryGap,
    OffsetCommitRow,
    OffsetSummary,
    Regression,
    ResumeMode,
    SavedGroup,
)
from coordinator_audit.udfs.gc_batches import collected_in_bulk, freeze_survivors
from coordinator_audit.udfs.handoff import Handoff, HandoffWriter, Parts, parts_by_bucket, read_bucket
from coordinator_audit.udfs.history import (
    BASE_INPUTS,
    DEFAULT_HEALTH,
    OWNERSHIP_PER_ROW,
    HealthThresholds,
    OwnershipRow,
    OwnershipRun,
    derive_from_tables,
)
from coordinator_audit.udfs.scan import KIND_REGRESSION, KIND_SIDE, SCAN_FIELDS, group_matcher
from coordinator_audit.udfs.schemas import (
    AUDIT_TABLES,
    DERIVED_TABLES,
    OFFSET_WINDOW_STRUCT,
    TABLE_SCHEMAS,
    struct_type_from_dataclass,
)
from coordinator_audit.udfs.table_files import FILES_TABLE, DirectWrite, TableFiles

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "COUNTS_TABLE",
    "COUNT_FIELDS",
    "INPUT_COLUMNS",
    "OFFSETS_ONLY_TABLES",
    "OUTPUT_TABLES",
    "REPLAY_DERIVED_SCHEMA",
    "REPLAY_SCHEMA",
    "STATE_FIELDS",
    "STATE_TABLE",
    "STATE_WINDOWS_TYPE",
    "STRETCH_COLUMNS",
    "TIMING_FIELDS",
    "ResumeMode",
    "files_written",
    "group_runs",
    "hand_off_states",
    "make_handoff_fn",
    "make_handoff_replay_fn",
    "make_replay_fn",
    "replay_frame",
    "replay_handed_off",
    "replay_input",
    "replay_schema",
    "row_columns",
    "saved_states_table",
    "sorted_runs",
    "split_counts",
    "split_files",
    "split_state",
    "split_table",
    "wide_column",
]

INPUT_COLUMNS: tuple[str, ...] = ("group_id", "partition", "offset", "timestamp_ms", "key", "value", "state",
                                  "missing")
"""Columns the replay reads: the group (null when the key could not be read), the record's log
position, its timestamp in epoch ms, the raw key/value bytes, `state` (null for a record; a saved
audit state as JSON bytes, see the module docstring) and `missing` (the running count of offsets of
the record's partition never read, `GroupAuditor.observe_missing`; null: not tracked)."""

STRETCH_COLUMNS: tuple[str, ...] = (
    "_kind", "topic", "partition_key", "last_source_offset", "commits", "tombstones", "regressions",
    "first_commit_source_offset", "first_commit_record_ts", "first_offset", "first_commit_timestamp",
    "last_commit_source_offset", "last_offset", "last_commit_timestamp", "offset_value", "commit_timestamp",
    "previous_offset", "previous_commit_timestamp", "previous_source_offset", "first_topic_id", "last_topic_id")
"""Optional input columns: the single pass's summarised offset commits (`coordinator_audit.udfs.scan`, kinds `partial`
and `regression`, with the kernel's column names), placed among the group's records at their log
position (a stretch at its first record, a regression candidate at its commit); null `_kind` is a
record. The replay merges them into the open offset window (`GroupAuditor.merge_stretch`,
`stretch_regression`), so offset_commits rows, offset_regression violations and the causes' commit
evidence come out of the audit as if every commit had been fed; the topic ids a stretch's commits
carry (its first and last) name the topic at once (`GroupAuditor.learn_topic_id`), before the
group's next record, as its commits fed one by one would."""

STATE_WINDOWS_COLUMN = "state_windows"
"""Optional input column of a saved-state row: the group's open offset summaries, as
`group_state.offset_windows` stores them (a list of `OFFSET_WINDOW_STRUCT`, `STATE_WINDOWS_TYPE`
in Arrow), restored into the resumed audit (`GroupAuditor.restore_summaries`), or passed on as
they are for a group that reads no record."""

COUNTS_TABLE = "_counts"
COUNT_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(AuditCounts))
TIMING_FIELDS: tuple[str, ...] = ("feed_seconds", "merge_seconds", "derive_seconds")
"""Besides a group's counts: the Python time its audit took feeding records (the GroupMetadata
replay through the coordinator's load path, the observer, quarantine), merging the single pass's
stretches of offset commits, and deriving its ownership, rebalance and health rows (0 unless the
replay derives them), in seconds (`time.perf_counter` around each run of rows)."""
STATE_TABLE = "_state"
STATE_FIELDS: tuple[tuple[str, Any], ...] = (
    ("group_id", StringType()),
    ("auditor_state", StringType()),
    ("window_generation_id", IntegerType()),
    ("window_state", StringType()),
    ("window_partition", IntegerType()),
    ("window_start_offset", LongType()),
    ("window_value", BinaryType()),
    ("changed", BooleanType()),
    ("offset_windows", ArrayType(OFFSET_WINDOW_STRUCT, containsNull=False)),
)
"""A group's state after the run: the auditor's `to_dict(summaries=False, record_value=False)` as JSON, the open offset
window (its generation, state and opening record), whether this run fed the group any record, and
the open window's offset summaries (`OFFSET_WINDOW_STRUCT`: the open `offset_commits` row and its
last commit's log offset), which the next run restores."""


FILES_FIELDS: tuple[tuple[str, Any], ...] = (("table", StringType()), ("path", StringType()), ("rows", LongType()))
"""A file a replay task wrote itself (`replay_frame(direct=...)`, `coordinator_audit.udfs.table_files`): its table,
absolute path and rows."""


def _wide_fields(*, derived: bool) -> list[tuple[str, str, DataType]]:
    """(table, field, type) of every field the wide output carries, tables in `AUDIT_TABLES` order,
    then the counts, the state and the file rows, then (`derived`) the derived tables in
    `DERIVED_TABLES` order."""
    out = [(table, f.name, f.dataType) for table, cls in AUDIT_TABLES.items()
           for f in struct_type_from_dataclass(cls).fields]
    out.append((COUNTS_TABLE, "group_id", StringType()))
    out.extend((COUNTS_TABLE, name, LongType()) for name in COUNT_FIELDS)
    out.extend((COUNTS_TABLE, name, DoubleType()) for name in TIMING_FIELDS)
    out.extend((STATE_TABLE, name, t) for name, t in STATE_FIELDS)
    out.extend((FILES_TABLE, name, t) for name, t in FILES_FIELDS)
    if derived:
        out.extend((table, f.name, f.dataType) for table in DERIVED_TABLES for f in TABLE_SCHEMAS[table].fields)
    return out


def _wide_layout(*, derived: bool) -> tuple[dict[tuple[str, str], str], list[StructField]]:
    """Which wide column holds each table's field, and the wide columns. A row sets only its own
    table's fields, so tables share columns: the k-th field of an atomic type in a table goes to
    column `<type>_<k>` (a table's third long field to `long_2`); a field of a nested type keeps a
    column of its own, `<table>__<field>`. A wide row is then about as wide as the widest table, not
    all tables together (33 columns instead of 110 when written): less for Spark to convert and
    cache per row. The derived tables come last, so the layout with them (`REPLAY_DERIVED_SCHEMA`)
    is the layout without them plus a few columns at the end."""
    columns: dict[tuple[str, str], str] = {}
    fields: dict[str, StructField] = {}
    used: dict[tuple[str, str], int] = {}
    for table, name, t in _wide_fields(derived=derived):
        if isinstance(t, (ArrayType, StructType, MapType)):
            column = f"{table}__{name}"
        else:
            k = used.get((table, t.typeName()), 0)
            used[(table, t.typeName())] = k + 1
            column = f"{t.typeName()}_{k}"
        columns[(table, name)] = column
        fields.setdefault(column, StructField(column, t, True))
    return columns, [StructField("_table", StringType(), False), StructField("_carried", BooleanType(), True),
                     *fields.values()]


_WIDE_COLUMNS, _WIDE_FIELDS = _wide_layout(derived=True)
_BASE_FIELDS = _wide_layout(derived=False)[1]
assert _WIDE_FIELDS[:len(_BASE_FIELDS)] == _BASE_FIELDS  # a base table's columns are where they were


def wide_column(table: str, name: str) -> str:
    """The wide output's column that holds `table`'s field `name`."""
    return _WIDE_COLUMNS[(table, name)]


_column = wide_column


REPLAY_SCHEMA: StructType = StructType(_BASE_FIELDS)
"""The wide output schema of the replay (see the module docstring)."""

REPLAY_DERIVED_SCHEMA: StructType = StructType(_WIDE_FIELDS)
"""The wide output schema of a replay that also derives the groups' ownership, rebalance and health
rows (`REPLAY_SCHEMA` and the columns only those tables use)."""


def replay_schema(tables: Collection[str] | None = None, *, derive: bool = False, direct: bool = False) -> StructType:
    """The replay's output schema for `tables` (`make_replay_fn`'s choice; None: every table, and
    the schema is `REPLAY_DERIVED_SCHEMA` when `derive`, else `REPLAY_SCHEMA`): with `tables`, only
    `_table`, `_carried` and the wide columns those tables' fields use (the `FILES_TABLE` ones too
    when the tasks write files, `direct`), in the full schema's order. Columns no row sets are then
    not moved to the JVM nor kept by Spark: the offset path's output needs fewer than two thirds of
    the columns, and the JVM converts and checkpoints only those."""
    full = REPLAY_DERIVED_SCHEMA if derive else REPLAY_SCHEMA
    keep = _kept_tables(tables, derive=derive)
    if keep is None:
        return full
    chosen = {*keep, *((FILES_TABLE,) if direct else ())}
    used = {"_table", "_carried", *(column for (table, _), column in _WIDE_COLUMNS.items() if table in chosen)}
    return StructType([f for f in full.fields if f.name in used])


_ARROW_SCHEMA: pa.Schema = to_arrow_schema(REPLAY_DERIVED_SCHEMA, timezone="UTC")
"""REPLAY_DERIVED_SCHEMA as Arrow (Spark's own mapping; strings and binaries as the 32-bit-offset
types the JVM reads by default); a replay that does not derive writes its first columns only."""

_BASE_ARROW_SCHEMA: pa.Schema = pa.schema(list(_ARROW_SCHEMA)[:len(_BASE_FIELDS)])
"""REPLAY_SCHEMA as Arrow: the first columns of `_ARROW_SCHEMA`."""


@dataclasses.dataclass(frozen=True)
class _TableOut:
    """How one table's rows become wide columns: the row's values (in field order) go to the wide
    columns at `positions`."""

    name: str
    values: Callable[[Any], tuple[Any, ...]]
    positions: tuple[int, ...]


def _table_out(table: str, names: tuple[str, ...], values: Callable[[Any], tuple[Any, ...]]) -> _TableOut:
    return _TableOut(table, values, tuple(_ARROW_SCHEMA.get_field_index(_column(table, n)) for n in names))


def _identity(values: tuple[Any, ...]) -> tuple[Any, ...]:
    return values


_ROW_TABLES: dict[type, _TableOut] = {}
for _name, _cls in (*AUDIT_TABLES.items(), *DERIVED_TABLES.items()):
    _names = tuple(f.name for f in dataclasses.fields(_cls))
    # attrgetter of one name returns the value itself, not a 1-tuple; every row class has several fields
    _ROW_TABLES[_cls] = _table_out(_name, _names, attrgetter(*_names))
_OFFSET_COMMITS_OUT = _ROW_TABLES[OffsetCommitRow]
_COUNTS_OUT = _table_out(COUNTS_TABLE, ("group_id", *COUNT_FIELDS, *TIMING_FIELDS), _identity)
_FILES_OUT = _table_out(FILES_TABLE, tuple(name for name, _ in FILES_FIELDS), _identity)
_STATE_OUT = _table_out(STATE_TABLE, tuple(name for name, _ in STATE_FIELDS), _identity)
_CARRIED_POSITION = _ARROW_SCHEMA.get_field_index("_carried")


def _dict_of(columns: tuple[str, ...]) -> Callable[[Any], dict[str, Any]]:
    """A function giving a row's `columns` as a dict, compiled once (`{"a": row.a, ...}`: half the
    time of `dict(zip(columns, attrgetter(*columns)(row)))`)."""
    if not all(c.isidentifier() for c in columns):
        raise ValueError(f"not attribute names: {columns}")
    namespace: dict[str, Any] = {}
    exec("def as_dict(row):\n    return {" + ", ".join(f"{c!r}: row.{c}" for c in columns) + "}\n", namespace)
    return namespace["as_dict"]  # type: ignore[no-any-return]


_BASE_ROWS: dict[type, tuple[str, Callable[[Any], Any]]] = {
    AUDIT_TABLES[name]: (name, attrgetter(*columns) if name == "offset_commits" else _dict_of(columns))
    for name, columns in BASE_INPUTS.items()}
"""Base row class -> (its table, the row as the derivation reads it: the dict of the columns it reads;
`offset_commits` rows as `CommitTimes`)."""
_COUNTS_VALUES = attrgetter(*COUNT_FIELDS)


_TRANSPOSE_ROWS = 128
"""Rows transposed at a time: `zip(*rows)` over a whole batch walks thousands of row tuples in
step, column by column, and is several times slower per row than over short slices."""


def row_columns(rows: list[Any], values: Callable[[Any], tuple[Any, ...]], width: int) -> list[list[Any]]:
    """The rows' values (`values(row)`: a tuple of `width`), one list per column."""
    columns: list[list[Any]] = [[] for _ in range(width)]
    for start in range(0, len(rows), _TRANSPOSE_ROWS):
        chunk = zip(*map(values, rows[start:start + _TRANSPOSE_ROWS]), strict=True)
        for column, part in zip(columns, chunk, strict=True):
            column.extend(part)
    return columns


def _columns(out: _TableOut, rows: list[Any]) -> list[list[Any]]:
    """The rows' values, one list per column of the table."""
    return row_columns(rows, out.values, len(out.positions))


def _wide_batch(out: _TableOut, rows: list[Any], *, schema: pa.Schema, carried: bool = False,
                built: Mapping[int, pa.Array] | None = None, columns: Sequence[Any] | None = None
                ) -> pa.RecordBatch:
    """The wide RecordBatch of one table's rows in `schema` (`_ARROW_SCHEMA`, or its first columns
    `_BASE_ARROW_SCHEMA`): its own columns built from the rows (those at the positions of `built`:
    given already; all of them from `columns` instead, when given: value lists or Arrow arrays), the
    rest null."""
    if columns is None:
        columns = _columns(out, rows)
    n = len(columns[0])
    arrays = [pa.nulls(n, f.type) for f in schema]
    arrays[0] = pa.repeat(pa.scalar(out.name, pa.string()), n)
    if carried:
        arrays[_CARRIED_POSITION] = pa.repeat(pa.scalar(True, pa.bool_()), n)
    for position, values in zip(out.positions, columns, strict=True):
        if built is not None and position in built:
            arrays[position] = built[position]
            continue
        field = _ARROW_SCHEMA.field(position)
        if isinstance(values, pa.Array):  # built already (held stretches' rows)
            arrays[position] = _typed(values, field.type)
            continue
        try:
            arrays[position] = pa.array(values, type=field.type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
            raise ValueError(f"replay output column {field.name!r} ({field.type}): {e}") from e
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


_WINDOWS_POSITION = _ARROW_SCHEMA.get_field_index(_column(STATE_TABLE, "offset_windows"))
STATE_WINDOWS_TYPE: pa.DataType = _ARROW_SCHEMA.field(_WINDOWS_POSITION).type
"""`STATE_WINDOWS_COLUMN`'s Arrow type: the `offset_windows` column of the `_state` rows."""


STATE_STORED_TABLE = "group_state"
"""The table the `_state` rows are stored in (`STATE_FIELDS` are its columns, in its order)."""
assert [name for name, _ in STATE_FIELDS] == TABLE_SCHEMAS[STATE_STORED_TABLE].fieldNames()


def _but_last(values: tuple[Any, ...]) -> tuple[Any, ...]:
    return values[:-1]


_OFFSET_COMMIT_FIELDS = [f.name for f in dataclasses.fields(OffsetCommitRow)]
_SOURCE_PARTITION = _OFFSET_COMMIT_FIELDS.index("source_partition")
_FIRST_SOURCE_OFFSET = _OFFSET_COMMIT_FIELDS.index("first_source_offset")


def _open_windows(groups: list[_OpenWindows], built: _BlockArrays | None = None) -> pa.Array:
    """The `offset_windows` column of some groups' `_state` rows (`OFFSET_WINDOW_STRUCT` lists: each
    open `offset_commits` row's fields, then its last commit's log offset): the open row objects'
    values converted, the held blocks' rows taken from `built` (the flush's, when given; built here
    otherwise), each group's rows in the order of the auditor's summaries."""
    row_blocks = [_RowBlock(_columns(_OFFSET_COMMITS_OUT, rows), offsets) for rows, offsets, _ in groups if rows]
    held = [block for _, _, blocks in groups for block in blocks]
    if built is None or not built.has(held):
        built = _BlockArrays(held)
    columns = built.columns
    if row_blocks:
        columns = [pa.concat_arrays([a, b]) for a, b in zip(columns, _blocks_columns(row_blocks), strict=True)]
    indices: list[int] = []
    ends = [0]
    at = built.size  # the row blocks' rows follow the held blocks' in `columns`
    next_row_block = iter(row_blocks)
    for rows, _, blocks in groups:
        spans = [built.span(block) for block in blocks]
        parts: list[_HeldRows] = list(blocks)
        if rows:
            row_block = next(next_row_block)
            spans.insert(0, range(at, at + len(row_block)))
            parts.insert(0, row_block)
            at += len(row_block)
        if len(spans) == 1:
            indices.extend(spans[0])
        elif spans:  # in the order of the auditor's summaries: by each one's first record
            mine = list(itertools.chain.from_iterable(spans))
            first_records = [record for part in parts for record in part.first_records()]
            indices.extend(mine[k] for k in sorted(range(len(mine)), key=first_records.__getitem__))
        ends.append(len(indices))
    if indices != list(range(len(columns[0]))):
        taken = pa.array(indices, pa.int64())
        columns = [column.take(taken) for column in columns]
    values = pa.StructArray.from_arrays(columns, fields=list(STATE_WINDOWS_TYPE.value_type))
    return pa.ListArray.from_arrays(pa.array(ends, pa.int32()), values, type=STATE_WINDOWS_TYPE)


@dataclasses.dataclass(frozen=True, slots=True)
class _KeptWindows:
    """A saved state's offset windows passed on as they came in: row `index` of `array` (an input
    batch's `STATE_WINDOWS_COLUMN`; None: the input has none, the windows are empty)."""

    array: pa.Array | None
    index: int


def _state_windows(items: list[_OpenWindows | _KeptWindows], built: _BlockArrays | None = None) -> pa.Array:
    """The `offset_windows` column of some `_state` rows, in order: built from the open rows
    (`_open_windows`) or taken from an array (`_KeptWindows`: the input's; a null taken as empty), run by run."""
    parts: list[pa.Array] = []
    for kept, run in itertools.groupby(items, key=lambda w: isinstance(w, _KeptWindows)):
        if not kept:
            parts.append(_open_windows(cast(list[_OpenWindows], list(run)), built))
            continue
        for _, refs in itertools.groupby(cast(Iterable[_KeptWindows], run), key=lambda w: id(w.array)):
            taken = list(refs)
            source = taken[0].array
            if source is None:
                parts.append(pa.array([[]] * len(taken), STATE_WINDOWS_TYPE))
                continue
            values = source.take(pa.array([w.index for w in taken], pa.int64())).cast(STATE_WINDOWS_TYPE)
            parts.append(pc.fill_null(values, pa.scalar([], STATE_WINDOWS_TYPE)))
    return parts[0] if len(parts) == 1 else pa.concat_arrays(parts)


class _Output:
    """Rows of the wide output since the last flush: audit row objects (any table), counts tuples,
    and `offset_commits` rows given as columns (`held`: the open rows of held-back stretches).
    With `files`, the new rows of the tables it writes go to its Parquet files at a flush instead
    (`coordinator_audit.udfs.table_files`), and the files it wrote come out as `FILES_TABLE` rows at the end."""

    __slots__ = ("carried", "counts", "files", "held", "held_rows", "keep", "rows", "run_rows", "schema", "states",
                 "written")

    def __init__(self, schema: pa.Schema, files: TableFiles | None = None,
                 keep: frozenset[str] | None = None) -> None:
        self.schema = schema
        self.files = files
        self.keep = keep
        """The tables whose rows come out (None: all); the others' rows are dropped at the flush."""
        self.rows: list[Any] = []
        self.carried: list[Any] = []
        self.counts: list[tuple[Any, ...]] = []
        self.states: list[tuple[Any, ...]] = []
        self.written: list[tuple[str, str, int]] = []
        self.held: list[_HeldRows] = []
        self.held_rows = 0
        self.run_rows = 0
        """The rows of the `AssignmentRun`s in `rows`, beyond one each."""

    def __len__(self) -> int:
        return (len(self.rows) + len(self.carried) + len(self.counts) + len(self.states) + self.held_rows
                + self.run_rows)

    def add_held(self, blocks: list[_HeldRows]) -> None:
        """New `offset_commits` rows given as held blocks, when that table's rows come out."""
        if blocks and self.wants(_OFFSET_COMMITS_OUT.name):
            self.held.extend(blocks)
            self.held_rows += sum(len(block) for block in blocks)

    def wants(self, table: str) -> bool:
        """Whether `table`'s rows come out (`keep`)."""
        return self.keep is None or table in self.keep

    def add_counts(self, group_id: str | None, counts: AuditCounts, seconds: tuple[float, float, float]) -> None:
        self.counts.append((group_id, *_COUNTS_VALUES(counts), *seconds))

    def add_state(self, group_id: str, state: str, window: tuple[Any, ...], value: bytes | None, changed: bool,
                  windows: _OpenWindows) -> None:
        """The group's `_state` row (`GroupReplay.state`): its auditor state as JSON, its open window and
        the window's GroupMetadata value, whether this run fed it anything, and its open offset
        windows (`_OpenWindows`: the open rows `GroupAuditor.finish` gave with each one's last
        commit's log offset, and the open rows of the stretches it held back)."""
        self.states.append((group_id, state, *window, value, changed, windows))

    def add_rest(self, rest: AtRest, state: str, windows: _KeptWindows) -> None:
        """The counts and `_state` rows of a group resumed from `state` (its saved auditor state, as
        saved) and `windows` (its saved offset windows) that read no record (`rest`: `GroupAuditor.
        at_rest`): both come out as they came in."""
        if self.wants(COUNTS_TABLE):
            self.add_counts(rest.group_id, NO_COUNTS, (0.0, 0.0, 0.0))
        if self.wants(STATE_TABLE):
            self.states.append((rest.group_id, state, *rest.window, rest.window_record_value, False, windows))

    def close_files(self) -> None:
        """Closes the task's files (the rows are all flushed): they come out at the next flush."""
        if self.files is not None:
            self.written = self.files.close()

    def flush(self) -> pa.RecordBatch:
        """One RecordBatch of everything collected (tables in `AUDIT_TABLES` order, then the counts,
        the states and the files written; the new rows of the tables `files` writes are in its
        files instead); the collector is empty afterwards."""
        by_type: dict[type, list[Any]] = {cls: [] for cls in (*_ROW_TABLES, AssignmentRun, OwnershipRun)}
        for row in self.rows:
            by_type[type(row)].append(row)
        runs: list[AssignmentRun] = by_type.pop(AssignmentRun)
        ownership_runs: list[OwnershipRun] = by_type.pop(OwnershipRun)
        schema = self.schema
        batches = []
        files = self.files
        state_blocks = [block for state in self.states if not isinstance(state[-1], _KeptWindows)
                        for block in state[-1][2]]
        built = _BlockArrays([*self.held, *state_blocks]) if self.held or state_blocks else None
        for cls, rows in by_type.items():
            out = _ROW_TABLES[cls]
            given: list[pa.Array] | None = None  # rows given as Arrow columns: held blocks', runs'
            if cls is OffsetCommitRow and self.held:
                assert built is not None
                given = built.rows_of(self.held)[:len(out.positions)]
            elif cls is AssignmentRow and runs:
                given = _run_columns(runs)
            elif cls is OwnershipRow and ownership_runs:
                given = _ownership_run_columns(ownership_runs)
            if not (rows or given) or not self.wants(out.name):
                continue
            columns: list[Any] = _columns(out, rows)
            if given is not None:
                columns = ([pa.concat_arrays([pa.array(values, type=a.type), a]) for values, a in zip(
                    columns, given, strict=True)] if rows else given)
            if files is not None and files.writes(out.name):
                files.add(out.name, columns)
            else:
                batches.append(_wide_batch(out, rows, schema=schema, columns=columns))
        carried: dict[type, list[Any]] = {}
        for row in self.carried:
            carried.setdefault(type(row), []).append(row)
        for cls, rows in carried.items():
            out = _ROW_TABLES[cls]
            if not self.wants(out.name):
                continue
            if files is not None and files.writes_carried(out.name):
                files.add(out.name, _columns(out, rows), carried=True)
            else:
                batches.append(_wide_batch(out, rows, schema=schema, carried=True))
        if self.counts:
            batches.append(_wide_batch(_COUNTS_OUT, self.counts, schema=schema))
        if self.states:
            windows = _state_windows([state[-1] for state in self.states], built)
            if files is not None and files.writes(STATE_STORED_TABLE):
                files.add(STATE_STORED_TABLE, [*row_columns(self.states, _but_last, len(STATE_FIELDS) - 1), windows])
            else:
                batches.append(_wide_batch(_STATE_OUT, self.states, schema=schema,
                                           built={_WINDOWS_POSITION: windows}))
        if self.written:
            batches.append(_wide_batch(_FILES_OUT, self.written, schema=schema))
        self.rows = []
        self.carried = []
        self.counts = []
        self.states = []
        self.written = []
        self.held = []
        self.held_rows = self.run_rows = 0
        if not batches:
            return pa.RecordBatch.from_pylist([], schema=schema)
        return batches[0] if len(batches) == 1 else pa.concat_batches(batches)


class _Stretches(dict[str, list[Any]]):
    """An input batch's `STRETCH_COLUMNS` and its record position columns (`partition`, `offset`):
    each as its Arrow array (`arrow`) and, read on first use, as a Python list (`x[name]`: a dict
    lookup once read). The stretches a group holds back become rows from the arrays (`_HeldBlock`);
    only those merged one by one read most lists, so a batch whose stretches are all held back
    converts few columns."""

    __slots__ = ("_arrays",)

    def __init__(self, batch: pa.RecordBatch) -> None:
        super().__init__()
        self._arrays = {name: batch.column(name) for name in (*STRETCH_COLUMNS, "partition", "offset")}

    def __missing__(self, name: str) -> list[Any]:
        values: list[Any] = self._arrays[name].to_pylist()
        self[name] = values
        return values

    def arrow(self, name: str) -> pa.Array:
        return self._arrays[name]


_Columns = tuple[list[Any], list[Any], list[Any], list[Any], list[Any], list[Any], list[Any], list[Any],
                 _Stretches | None, pa.Array | None]
"""One input batch as Python lists, in INPUT_COLUMNS order, then the `STRETCH_COLUMNS` (`_Stretches`;
None when the input has none), and the `STATE_WINDOWS_COLUMN` as Arrow (None when absent)."""


def group_runs(groups: list[Any]) -> Iterator[tuple[Any, int, int]]:
    """(group, start, end) of each run of equal consecutive values of `groups` (a batch of the
    replay's input, sorted by group: a group's records are one run, or continue the previous
    batch's last run). Keys may be None (the record's key did not parse); `sorted_runs` is the
    vectorized twin for Arrow columns without nulls."""
    start, n = 0, len(groups)
    while start < n:
        group = groups[start]
        end = start + 1
        while end < n and groups[end] == group:
            end += 1
        yield group, start, end
        start = end


def sorted_runs(values: pa.Array) -> list[tuple[Any, int, int]]:
    """`group_runs` over an Arrow column without nulls: the runs are found by comparing the array
    with itself shifted by one (no Python step per element)."""
    n = len(values)
    if n == 0:
        return []
    changes = pc.indices_nonzero(pc.not_equal(values.slice(1), values.slice(0, n - 1))).to_pylist()
    starts = [0, *(i + 1 for i in changes)]
    return list(zip(values.take(starts).to_pylist(), starts, [*starts[1:], n], strict=True))


@dataclasses.dataclass(frozen=True, slots=True)
class _HeldRun:
    """Stretches of one input batch (`x`: its `STRETCH_COLUMNS`; `partitions`, `offsets`,
    `timestamps`: its record columns) at `rows`, in log order, that a group holds back from its
    auditor (`_Group.hold`)."""

    x: _Stretches
    partitions: list[Any]
    offsets: list[Any]
    timestamps: list[Any]
    rows: range | list[int]

    def column(self, values: list[Any]) -> list[Any]:
        """The held stretches' values of an input column."""
        rows = self.rows
        if isinstance(rows, range):
            return values[rows.start:rows.stop]
        return [values[k] for k in rows]


@dataclasses.dataclass(frozen=True, slots=True)
class _HeldBlock:
    """The open `offset_commits` rows of held-back stretches (`run`) in the group's open `window`
    (`GroupAuditor.window()`), left where they are in the input until a flush builds every block's
    rows at once (`_BlockArrays`): what `GroupAuditor.merge_stretch` then `finish` give for
    stretches that each open their topic-partition's summary (`OffsetSummary.of_stretch`,
    `OffsetSummary.row`): no commit values for a stretch of tombstones only, its own regressions
    only in a Stable window."""

    run: _HeldRun
    group_id: str
    window: tuple[int | None, str | None, int | None, int | None]

    def __len__(self) -> int:
        return len(self.run.rows)

    def tombstones_only(self) -> bool:
        """Whether a stretch of tombstones only is among the rows (its commit values are null)."""
        return 0 in self.run.column(self.run.x["commits"])

    def commit_inputs(self) -> list[list[Any]]:
        """The rows' values of the derivation's `offset_commits` columns (`BASE_INPUTS`)."""
        run = self.run
        x, take = run.x, run.column
        values = [take(x["first_commit_timestamp"]), take(x["last_commit_timestamp"])]
        if self.tombstones_only():
            commits = take(x["commits"])
            values = [[v if c else None for v, c in zip(column, commits, strict=True)] for column in values]
        return [take(x["topic"]), take(x["partition_key"]), *values]

    def first_records(self) -> list[tuple[Any, Any]]:
        """Each row's first record (source partition, offset)."""
        return list(zip(self.run.column(self.run.partitions), self.run.column(self.run.offsets), strict=True))


@dataclasses.dataclass(frozen=True, slots=True)
class _RowBlock:
    """Open `offset_commits` rows given as value lists (`OffsetCommitRow` field order), and each
    one's last commit's log offset."""

    columns: list[list[Any]]
    last_commits: list[int | None]

    def __len__(self) -> int:
        return len(self.last_commits)

    def commit_inputs(self) -> list[list[Any]]:
        return [self.columns[k] for k in _HELD_COMMIT_INPUTS]

    def first_records(self) -> list[tuple[Any, Any]]:
        return list(zip(self.columns[_SOURCE_PARTITION], self.columns[_FIRST_SOURCE_OFFSET], strict=True))


_HeldRows = _HeldBlock | _RowBlock
"""Open `offset_commits` rows a group gives at its end besides its row objects: those of a run of
stretches it held back (`_Group.hold`), or of the stretches it held back merged (`_Group._fold`)."""

_OpenWindows = tuple[list[OffsetCommitRow], list[int | None], list[_HeldRows]]
"""A group's open offset windows: its open `offset_commits` rows and each one's last commit's log
offset, then the rows of the stretches it held back."""

_OFFSET_COMMIT_TYPES: tuple[pa.DataType, ...] = tuple(_ARROW_SCHEMA.field(p).type for p in _OFFSET_COMMITS_OUT.positions)
"""The Arrow types of the `offset_commits` columns (`OffsetCommitRow` field order): the wide output's."""
_LAST_COMMIT_TYPE: pa.DataType = STATE_WINDOWS_TYPE.value_type.field("last_commit_source_offset").type
assert [STATE_WINDOWS_TYPE.value_type.field(k).type for k in range(len(_OFFSET_COMMIT_TYPES))] == list(
    _OFFSET_COMMIT_TYPES), "offset_windows keeps the offset_commits columns' types"
_HELD_TYPES: tuple[pa.DataType, ...] = (*_OFFSET_COMMIT_TYPES, _LAST_COMMIT_TYPE)
"""The types of held rows' columns: the `offset_commits` ones, then the last commit's log offset."""
_WIDTH = len(_HELD_TYPES)
_LAST_COMMIT = _WIDTH - 1
"""Where a held row's last commit's log offset is (after the `offset_commits` columns)."""

_HELD_SOURCES: dict[int, str] = {_OFFSET_COMMIT_FIELDS.index(field): column for field, column in (
    ("topic", "topic"), ("partition", "partition_key"), ("commits", "commits"), ("tombstones", "tombstones"),
    ("first_offset", "first_offset"), ("last_offset", "last_offset"),
    ("first_commit_timestamp", "first_commit_timestamp"), ("last_commit_timestamp", "last_commit_timestamp"),
    ("regressions", "regressions"), ("source_partition", "partition"), ("first_source_offset", "offset"),
    ("last_source_offset", "last_source_offset"))}
_HELD_SOURCES[_LAST_COMMIT] = "last_commit_source_offset"
"""Held rows' columns taken from the input's (position -> input column); the others are the window's."""
_COMMIT_VALUES = (*(_OFFSET_COMMIT_FIELDS.index(name) for name in (
    "first_offset", "last_offset", "first_commit_timestamp", "last_commit_timestamp")), _LAST_COMMIT)
"""Held rows' columns that are null for a stretch of tombstones only."""
_WINDOW_VALUES = tuple(_OFFSET_COMMIT_FIELDS.index(name) for name in (
    "group_id", "generation_id", "window_state", "window_start_offset"))
"""Held rows' columns of their block's window (`_HeldBlock.window`), besides `window_end_offset`."""
_WINDOW_END = _OFFSET_COMMIT_FIELDS.index("window_end_offset")
_REGRESSIONS = _OFFSET_COMMIT_FIELDS.index("regressions")
_COMMITS = _OFFSET_COMMIT_FIELDS.index("commits")


def _typed(values: pa.Array, t: pa.DataType) -> pa.Array:
    """`values` as type `t` (cast when it is another)."""
    return values if values.type == t else values.cast(t)


def _offset_commit_arrays(columns: list[list[Any]]) -> list[pa.Array]:
    """`offset_commits` rows given as value lists (the table's, in `OffsetCommitRow` field order)
    as Arrow columns of `_OFFSET_COMMIT_TYPES`."""
    return [pa.array(values, type=t) for values, t in zip(columns, _OFFSET_COMMIT_TYPES, strict=True)]


_ASSIGNMENTS_OUT = _ROW_TABLES[AssignmentRow]
_ASSIGNMENT_TYPES: dict[str, pa.DataType] = {
    f.name: _ARROW_SCHEMA.field(p).type for f, p in zip(dataclasses.fields(AssignmentRow), _ASSIGNMENTS_OUT.positions,
                                                       strict=True)}
"""The Arrow types of the `assignments` columns (by `AssignmentRow` field): the wide output's."""
_RUN_PER_ROW = ("topic", "partition", "owned_before")
"""The `assignments` columns an `AssignmentRun` holds per row; it holds the others once."""
_RUN_SHARED = tuple(name for name in _ASSIGNMENT_TYPES if name not in _RUN_PER_ROW)
_RUN_SHARED_VALUES = attrgetter(*_RUN_SHARED)


def _spread_columns(types: Mapping[str, pa.DataType], shared: Mapping[str, list[Any]], sizes: list[int],
                    per_row: Mapping[str, list[Any]]) -> list[pa.Array]:
    """Columns of rows given by runs (`types`: every column, in order): `shared`, one value per
    run, spread over the run's `sizes` rows; `per_row`, one value per row."""
    spread: pa.Array | None = None
    rows = sum(sizes)
    by_name: dict[str, pa.Array] = {}
    for name, values in shared.items():
        if values and values.count(values[0]) == len(values):  # one value in every run (e.g. all open)
            by_name[name] = pa.repeat(pa.scalar(values[0], types[name]), rows)
            continue
        if spread is None:
            spread = pa.array(np.repeat(np.arange(len(sizes), dtype=np.int64), sizes))
        by_name[name] = pa.array(values, type=types[name]).take(spread)
    by_name.update((name, pa.array(values, type=types[name])) for name, values in per_row.items())
    return [by_name[name] for name in types]


def _run_columns(runs: list[AssignmentRun]) -> list[pa.Array]:
    """The rows of `runs`, in order, as the `assignments` table's Arrow columns (`AssignmentRow`
    field order): what a run's rows share converted once per run, the topics, partitions and
    flags as flat lists."""
    topics: list[str] = []
    partitions: list[int] = []
    owned: list[bool] = []
    for run in runs:
        for topic, run_partitions in run.groups:
            topics += [topic] * len(run_partitions)
            partitions += run_partitions
        flags = run.owned_before
        owned += [flags] * run.size if type(flags) is bool else flags
    shared = row_columns(runs, _RUN_SHARED_VALUES, len(_RUN_SHARED))
    return _spread_columns(_ASSIGNMENT_TYPES, dict(zip(_RUN_SHARED, shared, strict=True)),
                           [run.size for run in runs], dict(zip(_RUN_PER_ROW, (topics, partitions, owned), strict=True)))


_OWNERSHIP_TYPES: dict[str, pa.DataType] = {
    f.name: _ARROW_SCHEMA.field(p).type
    for f, p in zip(dataclasses.fields(OwnershipRow), _ROW_TABLES[OwnershipRow].positions, strict=True)}
"""The Arrow types of the `partition_ownership` columns (by `OwnershipRow` field): the wide output's."""
_OWNERSHIP_SHARED = tuple(name for name in _OWNERSHIP_TYPES if name not in OWNERSHIP_PER_ROW)


def _ownership_run_columns(runs: list[OwnershipRun]) -> list[pa.Array]:
    """The rows of `runs`, in order, as the `partition_ownership` table's Arrow columns
    (`OwnershipRow` field order), as `_run_columns`."""
    topics: list[str] = []
    partitions: list[int] = []
    for run in runs:  # a run has a key at least (`coordinator_audit.udfs.history._ownership` makes it for one)
        run_topics, run_partitions = zip(*run.keys, strict=True)
        topics += run_topics
        partitions += run_partitions
    shared = row_columns(runs, OwnershipRun.shared, len(_OWNERSHIP_SHARED))
    return _spread_columns(_OWNERSHIP_TYPES, dict(zip(_OWNERSHIP_SHARED, shared, strict=True)),
                           [len(run.keys) for run in runs], {"topic": topics, "partition": partitions})


def _blocks_columns(blocks: Sequence[_HeldRows]) -> list[pa.Array]:
    """The rows of `blocks`, in order, as Arrow columns (`_WIDTH`: the `offset_commits` ones, then
    the last commit's log offset): a row block's values converted; for a run of held blocks of one
    input batch, the input's columns taken once and the windows' values spread over their rows."""
    types = _HELD_TYPES
    pieces: list[list[pa.Array]] = [[] for _ in range(_WIDTH)]
    for same_input, run in itertools.groupby(blocks, key=lambda b: id(b.run.x) if isinstance(b, _HeldBlock) else None):
        if same_input is None:  # row blocks: every value given
            for row_block in cast(Iterator[_RowBlock], run):
                converted = [*_offset_commit_arrays(row_block.columns),
                             pa.array(row_block.last_commits, type=_LAST_COMMIT_TYPE)]
                for column, values in zip(pieces, converted, strict=True):
                    column.append(values)
            continue
        for k, column in enumerate(_held_columns(cast(list[_HeldBlock], list(run)))):
            pieces[k].append(column)
    return [pa.concat_arrays(column) if column else pa.array([], types[k]) for k, column in enumerate(pieces)]


def _held_columns(held: list[_HeldBlock]) -> list[pa.Array]:
    """The rows of held blocks of one input batch, in order, as Arrow columns (`_blocks_columns`)."""
    types = _HELD_TYPES
    ranges = [block.run.rows for block in held]
    x = held[0].run.x
    contiguous = ranges[0] if len(ranges) == 1 and isinstance(ranges[0], range) else None
    indices = None if contiguous is not None else pa.array(list(itertools.chain.from_iterable(ranges)), pa.int64())

    def take(values: pa.Array) -> pa.Array:
        return values.slice(contiguous.start, len(contiguous)) if contiguous is not None else values.take(indices)

    n = sum(len(r) for r in ranges)
    # each row's block, to spread the blocks' values over their rows
    block_of_row = pa.array(np.repeat(np.arange(len(held)), [len(r) for r in ranges]))

    def spread(values: list[Any], t: pa.DataType) -> pa.Array:
        return pa.array(values, type=t).take(block_of_row)

    out: list[pa.Array] = [pa.nulls(0)] * _WIDTH
    for k, column in _HELD_SOURCES.items():
        out[k] = _typed(take(x.arrow(column)), types[k])
    group_ids: list[Any] = []
    generation_ids: list[Any] = []
    states: list[Any] = []
    start_offsets: list[Any] = []
    for block in held:
        generation_id, state, _, start_offset = block.window
        group_ids.append(block.group_id)
        generation_ids.append(generation_id)
        states.append(state)
        start_offsets.append(start_offset)
    for k, values in zip(_WINDOW_VALUES, (group_ids, generation_ids, states, start_offsets), strict=True):
        out[k] = spread(values, types[k])
    out[_WINDOW_END] = pa.nulls(n, types[_WINDOW_END])  # the window is open
    tombstones_only = [block.tombstones_only() for block in held]
    if any(tombstones_only):  # no commit values where the stretch read none
        masked = pc.and_(spread(tombstones_only, pa.bool_()),
                         pc.invert(pc.fill_null(pc.not_equal(out[_COMMITS], 0), False)))
        for k in _COMMIT_VALUES:
            out[k] = pc.if_else(masked, pa.scalar(None, types[k]), out[k])
    unstable = [state != "Stable" for state in states]
    if any(unstable):  # a regression counts only in a Stable window
        out[_REGRESSIONS] = pc.if_else(spread(unstable, pa.bool_()), pa.scalar(0, types[_REGRESSIONS]),
                                       out[_REGRESSIONS])
    return out


class _BlockArrays:
    """The rows of some groups' held blocks as Arrow columns (`_blocks_columns`, each block once),
    and where each block's rows are among them."""

    __slots__ = ("columns", "order", "size", "starts")

    def __init__(self, blocks: Iterable[_HeldRows]) -> None:
        unique: dict[int, _HeldRows] = {}
        for block in blocks:
            unique.setdefault(id(block), block)
        self.order = list(unique)
        self.starts: dict[int, int] = {}
        at = 0
        for key, block in unique.items():
            self.starts[key] = at
            at += len(block)
        self.size = at
        self.columns = _blocks_columns(list(unique.values()))

    def has(self, blocks: Iterable[_HeldRows]) -> bool:
        return all(id(block) in self.starts for block in blocks)

    def span(self, block: _HeldRows) -> range:
        """Where `block`'s rows are."""
        start = self.starts[id(block)]
        return range(start, start + len(block))

    def rows_of(self, blocks: Sequence[_HeldRows]) -> list[pa.Array]:
        """The columns of `blocks`' rows, in their order."""
        if [id(b) for b in blocks] == self.order[:len(blocks)]:
            n = sum(len(b) for b in blocks)
            return self.columns if n == self.size else [column.slice(0, n) for column in self.columns]
        indices = pa.array(list(itertools.chain.from_iterable(self.span(b) for b in blocks)), pa.int64())
        return [column.take(indices) for column in self.columns]


_HELD_COMMIT_INPUTS = tuple(_OFFSET_COMMIT_FIELDS.index(name) for name in BASE_INPUTS["offset_commits"])
"""Where the derivation's `offset_commits` columns (`BASE_INPUTS`) are among a `_RowBlock`'s columns."""


class _Group:
    """One group's audit in the replay once it started (`GroupReplay`: fresh or resumed, and how its
    rows are sorted into new and carried rows), with the single pass's stretches it holds back and
    the Python time it took.

    Held-back stretches. Of a run of the single pass's stretches, those whose topic-partition opens
    its summary in the open window (it is not summarised there yet, no stretch of it is held back,
    no regression candidate of it is in the run) are held back instead of being merged stretch by
    stretch (`hold`; several stretches of one topic-partition in the run, which a task boundary
    makes, held back as their merged summary, `_fold`; the others merged at once): if the group ends with
    the window still open, which is where most of a group's commits are (after its last
    rebalance), their rows are built column by column from the input's columns (`_held_rows`), with
    no summary or row object per stretch; a record the audit is given first merges them
    (`merge_held`), as they would have been, since it may close the window or read its summaries."""

    __slots__ = ("auditor", "derive_seconds", "feed_seconds", "folded", "held", "held_tps", "merge_seconds",
                 "replay", "resumed_windows")

    def __init__(self, replay: GroupReplay) -> None:
        self.replay = replay
        self.auditor = replay.auditor  # (started here)
        self.feed_seconds = self.merge_seconds = self.derive_seconds = 0.0
        self.resumed_windows = replay.resumed_windows
        """Whether the previous run left offset windows open (their rows are routed one by one:
        nothing is held back)."""
        self.held: list[_HeldRun] = []
        self.folded: dict[tuple[str, int], OffsetSummary] = {}
        """Topic-partitions whose stretches in one run are held back merged (`_fold`)."""
        self.held_tps: set[tuple[str, int]] = set()

    def route(self, row: Any, out: _Output) -> None:
        """One of the auditor's rows into `out`'s new or carried rows (`GroupReplay.route`)."""
        replay = self.replay
        if type(row) is AssignmentRun and not replay.before:
            out.run_rows += row.size - 1
        replay.route(row, out.rows, out.carried)

    def hold(self, x: _Stretches, partitions: list[Any], offsets: list[Any], timestamps: list[Any],
             start: int, end: int, out: _Output) -> Iterable[int]:
        """Holds back the stretches [start, end) of an input batch that may be (class docstring);
        the rows of the others, to merge now, in order."""
        rows = range(start, end)
        if self.resumed_windows:
            return rows
        kinds = x["_kind"][start:end]
        tps = list(zip(x["topic"][start:end], x["partition_key"][start:end], strict=True))
        distinct = set(tps)
        if not distinct.isdisjoint(self.held_tps):  # a later stretch of a held-back one: both merged
            self.merge_held(out)
        summaries = self.auditor.open_summaries()
        held: range | list[int]
        now: list[int]
        if len(distinct) == len(tps) and KIND_REGRESSION not in kinds and distinct.isdisjoint(summaries):
            held, now = rows, []
        else:
            repeated = {tp for tp, n in Counter(tps).items() if n > 1}
            blocked = {tp for tp in distinct if tp in summaries}
            blocked.update(tp for tp, kind in zip(tps, kinds, strict=True) if kind == KIND_REGRESSION)
            held, now = [], []
            folds: dict[tuple[str, int], list[int]] = {}
            for k, tp, kind in zip(rows, tps, kinds, strict=True):
                if kind == KIND_REGRESSION or tp in blocked:
                    now.append(k)
                elif tp in repeated:
                    folds.setdefault(tp, []).append(k)
                else:
                    held.append(k)
            for tp, ks in folds.items():
                if not self._fold(tp, x, partitions, offsets, ks):
                    now.extend(ks)
            now.sort()
            if not held:
                return now
        run = _HeldRun(x, partitions, offsets, timestamps, held)
        self.held.append(run)
        self.held_tps.update(tps if isinstance(held, range) else (tps[k - start] for k in held))
        held_partitions, last_offsets = run.column(partitions), run.column(x["last_source_offset"])
        if held_partitions.count(held_partitions[0]) == len(held_partitions):  # a group's records: one partition
            self.auditor.reached(held_partitions[0], max(last_offsets))
        else:
            for p, o in zip(held_partitions, last_offsets, strict=True):
                self.auditor.reached(p, o)
        return now

    def _fold(self, tp: tuple[str, int], x: _Stretches, partitions: list[Any], offsets: list[Any],
              rows: list[int]) -> bool:
        """Holds back the stretches of one topic-partition at `rows` (in log order) as their merged
        summary (`OffsetSummary.merge`, as `GroupAuditor.merge_stretch` merges them into the open
        window, where the topic-partition has none yet), unless merging them finds a backwards
        step, whose `offset_regression` row only the auditor writes (False: merge them now)."""
        stable = self.auditor.window()[1] == "Stable"
        folded: OffsetSummary | None = None
        for k in rows:
            s = _stretch_summary(x, k, partitions[k], offsets[k])
            if not stable:
                s.regressions = 0
            if folded is None:
                folded = s
                continue
            if folded.steps_back(s, stable=stable):
                return False
            folded = folded.merge(s, stable=stable)
        assert folded is not None
        for k in rows:
            self.auditor.reached(partitions[k], x["last_source_offset"][k])
        self.folded[tp] = folded
        self.held_tps.add(tp)
        return True

    def merge_held(self, out: _Output) -> None:
        """Merges the stretches held back into the auditor in log order (`GroupAuditor.merge_stretch`:
        the window's summaries are then in the order they would have been)."""
        if not (self.held or self.folded):
            return
        merged_before = bool(self.auditor.open_summaries())
        items: list[tuple[int, int, _HeldRun | OffsetSummary, Any]] = [
            (run.partitions[i], run.offsets[i], run, i) for run in self.held for i in run.rows]
        items.extend((s.source_partition, s.first_source_offset, s, tp) for tp, s in self.folded.items())
        items.sort(key=lambda item: (item[0], item[1]))
        for p, o, what, ref in items:
            if isinstance(what, OffsetSummary):  # opens its topic-partition's summary: no row
                self.auditor.merge_stretch(ref[0], ref[1], what, first_commit_source_offset=None,
                                           first_commit_record_ts=None)
                continue
            for row in _stretch_rows(self.auditor, what.x, ref, p, o, what.timestamps[ref]):
                self.route(row, out)
        if merged_before:  # stretches merged at once came first: the summaries by first record, as fed
            self.auditor.summaries_in_log_order()
        self._let_go()

    def _let_go(self) -> None:
        """Forgets the stretches held back (merged, or their rows taken)."""
        self.held = []
        self.folded = {}
        self.held_tps = set()

    def take_held(self) -> list[_HeldRows]:
        """The open rows of the stretches held back (at the group's end), which are let go."""
        group_id = self.auditor.group_id
        assert group_id is not None or not self.held  # a stretch is of a group whose key was read
        window = self.auditor.window()
        rows: list[_HeldRows] = [_HeldBlock(run, group_id or "", window) for run in self.held]
        if self.folded:
            generation_id, state, _, start_offset = window
            folded = [s.row(group_id or "", topic, partition, generation_id=generation_id, window_state=state,
                            window_start_offset=start_offset, window_end_offset=None)
                      for (topic, partition), s in self.folded.items()]
            rows.append(_RowBlock(_columns(_OFFSET_COMMITS_OUT, folded),
                                  [s.last_commit_source_offset for s in self.folded.values()]))
        self._let_go()
        return rows

    def derived_rows(self, held: Sequence[_HeldRows] = (), health: HealthThresholds = DEFAULT_HEALTH) -> list[Any]:
        """The ownership, rebalance and health rows (days judged by `health`) of the group's kept rows
        (`derive_group`) and of `held`, the open rows of the stretches it held back."""
        kept = self.replay.kept
        assert kept is not None
        inputs: dict[str, list[Any]] = {name: [] for name in BASE_INPUTS}
        for row in kept:
            spec = _BASE_ROWS.get(type(row))
            if spec is not None:
                inputs[spec[0]].append(spec[1](row))
            elif type(row) is AssignmentRun:
                inputs["assignments"].append(row)
        for block in held:
            inputs["offset_commits"].extend(zip(*block.commit_inputs(), strict=True))
        self.replay.kept = []
        group_id = self.auditor.group_id
        assert group_id is not None
        return [row for rows in derive_from_tables(group_id, inputs, health) for row in rows]


def _segments(group: _Group, partitions: list[Any], offsets: list[Any], timestamps: list[Any], missing: list[Any],
              start: int, end: int) -> Iterator[tuple[int, int]]:
    """Splits a group's records [start, end) where the running count of offsets never read changes,
    telling the auditor before the record that follows the change (`observe_missing`)."""
    seg = start
    auditor = group.auditor
    for i in range(start, end):
        m = missing[i]
        p = partitions[i]
        if m is None or auditor.missing(p) == m:
            continue
        if i > seg:
            yield seg, i
            seg = i
        auditor.observe_missing(p, m, offsets[i], timestamps[i] or 0)
    if end > seg:
        yield seg, end


def _learn_topic_ids(auditor: GroupAuditor, x: _Stretches, start: int, end: int) -> None:
    """Names the topic ids the stretches [start, end) carry (`first_topic_id`, `last_topic_id`)."""
    firsts, lasts, topics = x["first_topic_id"], x["last_topic_id"], x["topic"]
    for i in range(start, end):
        for text in (firsts[i], lasts[i]):
            if text is not None:
                auditor.learn_topic_id(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)), topics[i])


def _stretch_rows(auditor: GroupAuditor, x: _Stretches, i: int, p: int, o: int,
                  ts: int | None) -> list[Any]:
    """The rows of the single pass's row `i` (a stretch or a regression candidate at `p`/`o`)."""
    if x["_kind"][i] == KIND_REGRESSION:
        back = Regression(x["previous_offset"][i], x["previous_commit_timestamp"][i], x["previous_source_offset"][i])
        return auditor.stretch_regression(x["topic"][i], x["partition_key"][i], back, x["offset_value"][i],
                                          x["commit_timestamp"][i], p, o, ts or 0)
    commits = x["commits"][i]
    return auditor.merge_stretch(x["topic"][i], x["partition_key"][i], _stretch_summary(x, i, p, o),
                                 first_commit_source_offset=x["first_commit_source_offset"][i] if commits else None,
                                 first_commit_record_ts=x["first_commit_record_ts"][i] if commits else None)


def _stretch_summary(x: _Stretches, i: int, p: int, o: int) -> OffsetSummary:
    """The summary of the single pass's stretch at row `i` (its first record at `p`/`o`)."""
    return OffsetSummary.of_stretch(x["commits"][i], x["tombstones"][i], x["regressions"][i], x["first_offset"][i],
                                    x["last_offset"][i], x["first_commit_timestamp"][i],
                                    x["last_commit_timestamp"][i], o, x["last_source_offset"][i],
                                    x["last_commit_source_offset"][i], p)


_SUMMARY_FIELDS = ("topic", "partition", "commits", "tombstones", "regressions", "first_offset", "last_offset",
                   "first_commit_timestamp", "last_commit_timestamp", "first_source_offset", "last_source_offset",
                   "last_commit_source_offset", "source_partition")
"""The `OFFSET_WINDOW_STRUCT` fields a saved summary is rebuilt from (`_summaries`)."""
_OPTIONAL_SUMMARY_FIELDS = frozenset({"last_commit_source_offset"})
"""Fields a state saved by an earlier version may lack (read as null)."""


def _saved_windows(windows: pa.Array | None, index: int) -> pa.StructArray | None:
    """A saved state's offset windows (`OFFSET_WINDOW_STRUCT` values): row `index` of an input
    batch's `STATE_WINDOWS_COLUMN`, as its slice of the list's values (None: null, absent or empty)."""
    if windows is None or not windows[index].is_valid:
        return None
    lists = cast(pa.ListArray, windows)
    start, end = lists.offsets[index].as_py(), lists.offsets[index + 1].as_py()
    return lists.values.slice(start, end - start) if end > start else None


def _summaries(windows: pa.Array | None, index: int) -> dict[tuple[str, int], OffsetSummary]:
    """A saved state's open offset summaries (`_saved_windows`), read field by field (a Python list
    per field, no dict or scalar per window: a nightly run resumes thousands of groups of a hundred
    windows each)."""
    rows = _saved_windows(windows, index)
    if rows is None:
        return {}
    present = {f.name for f in rows.type}
    fields = rows.flatten()
    columns = []
    for name in _SUMMARY_FIELDS:
        if name in present:
            columns.append(fields[rows.type.get_field_index(name)].to_pylist())
        elif name in _OPTIONAL_SUMMARY_FIELDS:
            columns.append([None] * len(rows))
        else:
            raise ValueError(f"saved offset windows: no field {name!r} in {rows.type}")
    out: dict[tuple[str, int], OffsetSummary] = {}
    for (topic, partition, commits, tombstones, regressions, first_offset, last_offset, first_commit_ts,
         last_commit_ts, first_source_offset, last_source_offset, last_commit_source_offset,
         source_partition) in zip(*columns, strict=True):
        out[(topic, partition)] = OffsetSummary.of_stretch(
            commits, tombstones, regressions, first_offset, last_offset, first_commit_ts, last_commit_ts,
            first_source_offset, last_source_offset, last_commit_source_offset, source_partition)
    return out


class _Replay:
    """The replay over one Spark partition's input (`run`: column lists in, wide RecordBatches out),
    group after group, each through the core's `GroupReplay`: a saved state row starts its group's
    replay with that state; the group's records and stretches feed its audit; at the group's end
    its rows, counts and state come out (a saved group that read nothing: carried as saved)."""

    def __init__(self, *, batch_rows: int, load_path: bool, mode: ResumeMode, gaps: Mapping[int, HistoryGap],
                 derive: bool, files: TableFiles | None, tables: frozenset[str] | None, observe: bool,
                 health: HealthThresholds = DEFAULT_HEALTH) -> None:
        self.health = health
        self.out = _Output(_ARROW_SCHEMA if derive else _BASE_ARROW_SCHEMA, files, tables)
        # offset windows only, and neither the quarantine rows nor the counts kept: the members' embedded
        # bytes need not be decoded (`GroupAuditor(embedded=False)`)
        self.embedded = observe or tables is None or not tables.isdisjoint(("quarantine", COUNTS_TABLE))
        # most rows go to the task's files, not to the JVM: fewer, larger flushes
        self.batch_rows = max(batch_rows, FILE_FLUSH_ROWS) if files is not None else batch_rows
        self.load_path, self.mode, self.gaps, self.derive, self.observe = load_path, mode, gaps, derive, observe
        self.files = files
        self.current: object = object()  # no group yet (None is a real key: records whose key did not parse)
        self.replay: GroupReplay | None = None
        """The current group's replay (None until its first row)."""
        self.kept: _KeptWindows | None = None
        """The current group's saved offset windows, as they came in (None: no saved state)."""
        self.group: _Group | None = None
        """The current group's audit, once started (at its first record or stretch, or at its end)."""

    def run(self, batches: Iterable[_Columns]) -> Iterator[pa.RecordBatch]:
        out = self.out
        for batch in batches:
            groups, states, values, windows = batch[0], batch[6], batch[5], batch[9]
            for gid, start, end in group_runs(groups):
                if gid != self.current:
                    self.close()
                    self.current = gid
                    self.replay = self.group = self.kept = None
                while start < end and states[start] is not None:  # a saved state: its group's first row
                    if self.replay is None:
                        self.kept = _KeptWindows(windows, start)
                        saved = SavedGroup(states[start], values[start], partial(_summaries, windows, start))
                        self.replay = self._group_replay(gid, saved)
                    start += 1
                if start < end:
                    yield from self.feed(batch, start, end)
                if len(out) >= self.batch_rows:
                    yield out.flush()
            if len(out) >= self.batch_rows:
                yield out.flush()
        self.close()
        if len(out):
            yield out.flush()
        if self.files is not None:  # the rows are in the files: close them, report them
            out.close_files()
            yield out.flush()

    def _group_replay(self, gid: Any, saved: SavedGroup | None) -> GroupReplay:
        return GroupReplay(gid, saved, self.mode, self.gaps, load_path=self.load_path, observe=self.observe,
                           embedded=self.embedded, keep=self.derive)

    def feed(self, batch: _Columns, start: int, end: int) -> Iterator[pa.RecordBatch]:
        """The current group's rows [start, end) of `batch` (records and stretches) into its audit."""
        if self.replay is None:
            self.replay = self._group_replay(self.current, None)
        if self.group is None:
            self.group = _Group(self.replay)
        group = self.group
        group.replay.changed = True
        stretch = batch[8]
        kinds = stretch["_kind"] if stretch is not None else None
        i = start
        while i < end:
            if kinds is not None and kinds[i] is not None:  # summarised stretches of offset commits
                assert stretch is not None  # kinds come from it
                k = i + 1
                while k < end and kinds[k] is not None:
                    k += 1
                self.stretches(group, batch, stretch, i, k)
                i = k
                continue
            j = i + 1
            if kinds is None:
                j = end
            else:
                while j < end and kinds[j] is None:
                    j += 1
            yield from self.records(group, batch, i, j)
            i = j

    def stretches(self, group: _Group, batch: _Columns, stretch: _Stretches, start: int, end: int) -> None:
        """The single pass's stretches [start, end) of `batch`, held back or merged into the audit."""
        t0 = perf_counter()
        partitions, offsets, timestamps = batch[1], batch[2], batch[3]
        out = self.out
        _learn_topic_ids(group.auditor, stretch, start, end)
        for r in group.hold(stretch, partitions, offsets, timestamps, start, end, out):
            for row in _stretch_rows(group.auditor, stretch, r, partitions[r], offsets[r], timestamps[r]):
                group.route(row, out)
        group.merge_seconds += perf_counter() - t0

    def records(self, group: _Group, batch: _Columns, start: int, end: int) -> Iterator[pa.RecordBatch]:
        """The records [start, end) of `batch` fed to the audit (the held-back stretches merged first:
        the records may close the window or read its summaries), flushing when the output is full."""
        t0 = perf_counter()
        group.merge_held(self.out)
        group.replay.feeding()
        partitions, offsets, timestamps, keys, values, missing = batch[1], batch[2], batch[3], batch[4], batch[5], \
            batch[7]
        out, auditor = self.out, group.auditor
        for seg_start, seg_end in _segments(group, partitions, offsets, timestamps, missing, start, end):
            records = zip(partitions[seg_start:seg_end], offsets[seg_start:seg_end], timestamps[seg_start:seg_end],
                          keys[seg_start:seg_end], values[seg_start:seg_end], strict=True)
            for row in auditor.feed(records):
                group.route(row, out)
                if len(out) >= self.batch_rows:
                    group.feed_seconds += perf_counter() - t0
                    yield out.flush()
                    t0 = perf_counter()
        group.feed_seconds += perf_counter() - t0

    def close(self) -> None:
        """The current group's end: carried as saved when it read nothing and that gives what resuming
        it would (`GroupReplay.carried_at_rest`); otherwise its rows, counts and state."""
        replay = self.replay
        if replay is None:
            return
        if self.group is None:
            rest = replay.carried_at_rest()
            if rest is not None:
                assert self.kept is not None  # a group that reads nothing has a saved state
                self.out.add_rest(*rest, self.kept)
                return
            self.group = _Group(replay)
        self.finish(self.group, self.current if isinstance(self.current, str) else None)

    def finish(self, group: _Group, key: str | None) -> None:
        """The group's rows at its end (`key`: its group id when one is open)."""
        out, replay, auditor = self.out, group.replay, group.auditor
        closing, open_rows = replay.closing_rows()
        for row in closing:
            group.route(row, out)
        held = group.take_held()
        out.add_held(held)
        if replay.kept is not None and auditor.group_id is not None:
            t0 = perf_counter()
            derived = group.derived_rows(held, self.health)
            out.rows.extend(derived)
            out.run_rows += sum(len(row.keys) - 1 for row in derived if type(row) is OwnershipRun)
            group.derive_seconds += perf_counter() - t0
        if out.wants(COUNTS_TABLE):
            out.add_counts(auditor.group_id if auditor.group_id is not None else key, auditor.counts,
                           (group.feed_seconds, group.merge_seconds, group.derive_seconds))
        if auditor.group_id is not None and out.wants(STATE_TABLE):
            state, window, value, last_commits = replay.state(open_rows)
            out.add_state(auditor.group_id, state, window, value, replay.changed, (open_rows, last_commits, held))


def _replay(batches: Iterable[_Columns], *, batch_rows: int, load_path: bool, mode: ResumeMode = "resume",
            gaps: Mapping[int, HistoryGap] | None = None, derive: bool = False,
            files: TableFiles | None = None, tables: frozenset[str] | None = None,
            observe: bool = True, health: HealthThresholds = DEFAULT_HEALTH) -> Iterator[pa.RecordBatch]:
    """The replay over one Spark partition's input (as column lists), yielding wide RecordBatches
    (with the derived tables' rows and columns when `derive`; without the new rows of the tables
    `files` writes, and with a row per file it wrote, when given; only `tables`' rows, when given;
    the offset windows only, without the generation observer, unless `observe`; the derived health
    rows' days judged by `health`)."""
    return _Replay(batch_rows=batch_rows, load_path=load_path, mode=mode, gaps=gaps or {}, derive=derive, files=files,
                   tables=tables, observe=observe, health=health).run(batches)


def _arrow_columns(batch: pa.RecordBatch) -> _Columns:
    c = batch.column
    n = batch.num_rows
    names = batch.schema.names
    states = c("state").to_pylist() if "state" in names else [None] * n
    missing = c("missing").to_pylist() if "missing" in names else [None] * n
    stretch = _Stretches(batch) if "_kind" in names else None
    windows = c(STATE_WINDOWS_COLUMN) if STATE_WINDOWS_COLUMN in names else None
    return (c("group_id").to_pylist(), c("partition").to_pylist(), c("offset").to_pylist(),
            c("timestamp_ms").to_pylist(), c("key").to_pylist(), c("value").to_pylist(), states, missing,
            stretch, windows)


OUTPUT_TABLES: tuple[str, ...] = (*AUDIT_TABLES, COUNTS_TABLE, STATE_TABLE, *DERIVED_TABLES)
"""The `_table` values of the wide output that `replay_frame(tables=...)` may choose from (a task
that writes files always reports them, `FILES_TABLE`: the driver commits only what is reported)."""


def _kept_tables(tables: Collection[str] | None, *, derive: bool) -> frozenset[str] | None:
    """`tables` checked against `OUTPUT_TABLES` (the derived tables only when `derive`)."""
    if tables is None:
        return None
    known = OUTPUT_TABLES if derive else tuple(t for t in OUTPUT_TABLES if t not in DERIVED_TABLES)
    unknown = sorted(set(tables) - set(known))
    if unknown:
        needs = " (a derived table needs derive=True)" if set(unknown) & set(DERIVED_TABLES) else ""
        raise ValueError(f"replay: unknown output table(s) {unknown}{needs}; choose from {list(known)}")
    return frozenset(tables)


OFFSETS_ONLY_TABLES: frozenset[str] = frozenset({"offset_commits", "violations", "quarantine", COUNTS_TABLE})
"""The tables a replay without the generation observer (`observe=False`) may output: its
violations are the offset windows' `offset_regression` rows alone."""


def _check_observe(keep: frozenset[str] | None, *, observe: bool, derive: bool) -> None:
    """`observe=False` needs `tables` within `OFFSETS_ONLY_TABLES` and no derivation."""
    if observe:
        return
    if derive or keep is None or not keep <= OFFSETS_ONLY_TABLES:
        asked = "all tables" if keep is None else sorted(keep)
        raise ValueError(f"replay: observe=False (offset windows only) gives only {sorted(OFFSETS_ONLY_TABLES)}, "
                         f"without derivation; asked for {asked}{' with derive=True' if derive else ''}")


FILE_FLUSH_ROWS = 50_000
"""The rows held before a flush when the task writes its tables' files itself (`direct`): a flush
converts every table's held rows to Arrow columns, a few milliseconds of fixed cost each time, and
its rows go to Parquet files rather than into the batch Spark moves to the JVM, so the batch size
that bounds that transfer (`batch_rows`) need not bound it (`python -m benchmarks.bench_replay_cpu
--instructions --only audit_files`, the first file of the 20M-record benchmark's replay input:
23.32 G instructions against 24.07 G flushing every 10,000 rows)."""


def make_replay_fn(*, batch_rows: int = 10_000, load_path: bool = True, mode: ResumeMode = "resume",
                   gaps: Mapping[int, HistoryGap] | None = None, derive: bool = False,
                   direct: DirectWrite | None = None, tables: Collection[str] | None = None, observe: bool = True,
                   health: HealthThresholds = DEFAULT_HEALTH,
                   ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function to pass to `mapInArrow(fn, replay_schema(tables, derive=derive, direct=...))`
    (`REPLAY_SCHEMA`, or `REPLAY_DERIVED_SCHEMA` when `derive`, unless `tables` narrows it; see
    `replay_frame`); closes over plain values only. A batch is flushed as soon as
    `batch_rows` rows are held (a group's closing rows, derived rows and counts row may add to it;
    with `direct`, `FILE_FLUSH_ROWS` at least), and at the end of the partition. `mode` says how
    resumed groups' rows are sorted (module docstring); `gaps` are the offsets never read per
    `__consumer_offsets` partition between the previous run and this one. `direct`: the task
    writes the new rows of its tables into Parquet files itself (`coordinator_audit.udfs.table_files`) and outputs a
    `FILES_TABLE` row per file instead. `tables`: only these tables' rows come out (`OUTPUT_TABLES`
    names; default all), in only their columns. `observe=False`: the offset windows only
    (`GroupAuditor(observe=False)`; `tables` within `OFFSETS_ONLY_TABLES`). `health` judges the
    derived health rows' days."""
    if batch_rows < 1:
        raise ValueError(f"make_replay_fn: batch_rows must be >= 1, got {batch_rows}")
    keep = _kept_tables(tables, derive=derive)
    _check_observe(keep, observe=observe, derive=derive)
    gap_map = dict(gaps or {})
    # with `tables`, only the columns their rows set (`replay_schema`): a zero-copy selection
    names = None if keep is None else replay_schema(keep, derive=derive, direct=direct is not None).fieldNames()

    def replay_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_survivors()
        files = None
        if direct is not None and direct.stage_dirs:
            ctx = TaskContext.get()
            files = TableFiles(direct, ctx.partitionId() if ctx is not None else 0)
        try:
            for batch in collected_in_bulk(_replay(map(_arrow_columns, batches), batch_rows=batch_rows,
                                                   load_path=load_path, mode=mode, gaps=gap_map, derive=derive,
                                                   files=files, tables=keep, observe=observe, health=health)):
                if batch.num_rows:
                    yield batch if names is None else batch.select(names)
        except BaseException:
            if files is not None:
                files.abort()
            raise

    return replay_partition


def replay_frame(records: DataFrame, *, load_path: bool = True, mode: ResumeMode = "resume",
                 gaps: Mapping[int, HistoryGap] | None = None, derive: bool = False,
                 direct: DirectWrite | None = None, tables: Collection[str] | None = None,
                 observe: bool = True, health: HealthThresholds = DEFAULT_HEALTH) -> DataFrame:
    """The wide replay output (`REPLAY_SCHEMA`) of `records`, which must hold `INPUT_COLUMNS` (`state`
    may be absent: no saved states), may hold the single pass's stretches (`STRETCH_COLUMNS`, all of
    them when `_kind` is there) and saved states' summaries (`STATE_WINDOWS_COLUMN`), and must be
    repartitioned by `group_id` and sorted within partitions by (`group_id`, `partition`, `offset`).

    `derive`: each group's `partition_ownership`, `rebalances` and `group_health` rows are derived
    from the rows the replay outputs for it (`coordinator_audit.udfs.history.derive_group`, at the group's end) and
    come out too (`REPLAY_DERIVED_SCHEMA`; `split_table` takes them out): what `coordinator_audit.udfs.derived` derives
    from those rows in a stage of its own, without moving them again. Only when those rows are all
    the derivation needs (no earlier run's rows, no broker account). `health` judges the health rows' days.

    `direct`: the new rows of its tables (`DirectWrite.stage_dirs`) are written by the replay's
    tasks into those directories (`coordinator_audit.udfs.table_files`) rather than output; `split_files` lists the
    files. Every task must then run exactly once per job that reads the output: keep it (the job
    checkpoints it) and commit only the files it lists.

    `tables`: only these tables' rows come out (`OUTPUT_TABLES` names, default all), in only the
    columns they use (`replay_schema`; `split_table` reads them as from the full schema): the offset
    path asks for `offset_commits` and `violations` alone, and the rows of the others are never
    turned into Arrow columns, nor moved to the JVM; with `observe=False`
    (its violations are then the `offset_regression` rows alone) the groups' generations are not
    even observed."""
    if "state" not in records.columns:
        records = records.withColumn("state", F.lit(None).cast("binary"))
    if "missing" not in records.columns:
        records = records.withColumn("missing", F.lit(None).cast("long"))
    missing = [c for c in INPUT_COLUMNS if c not in records.columns]
    if missing:
        raise ValueError(f"replay_frame: input lacks column(s) {missing}; it needs {list(INPUT_COLUMNS)}")
    optional = [*(STRETCH_COLUMNS if "_kind" in records.columns else ()),
                *((STATE_WINDOWS_COLUMN,) if STATE_WINDOWS_COLUMN in records.columns else ())]
    absent = [c for c in optional if c not in records.columns]
    if absent:
        raise ValueError(f"replay_frame: input has `_kind` but lacks stretch column(s) {absent}")
    return records.selectExpr(*[f"`{c}`" for c in (*INPUT_COLUMNS, *optional)]).mapInArrow(
        make_replay_fn(load_path=load_path, mode=mode, gaps=gaps, derive=derive, direct=direct, tables=tables,
                       observe=observe, health=health),
        replay_schema(tables, derive=derive, direct=direct is not None))


# ------------------------------------------------------------------------------------------------
# the replay's input as local files (`coordinator_audit.udfs.handoff`), not through Spark's shuffle

_SCAN_TYPES = {name: t for name, t, _ in SCAN_FIELDS}
_HANDED_SCHEMA = pa.schema([
    ("group_id", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("timestamp_ms", pa.int64()),
    ("key", pa.binary()), ("value", pa.binary()), ("state", pa.binary()), ("missing", pa.int64()),
    *((name, _SCAN_TYPES[name]) for name in STRETCH_COLUMNS), (STATE_WINDOWS_COLUMN, STATE_WINDOWS_TYPE)])
"""The replay's input (`replay_input`'s columns) as the handoff's replay tasks build it."""
_STATE_SCHEMA = pa.schema([("group_id", pa.string()), ("state", pa.binary()), ("value", pa.binary()),
                           (STATE_WINDOWS_COLUMN, STATE_WINDOWS_TYPE)])
_STATE_COLUMNS = tuple(_STATE_SCHEMA.names)
HANDOFF_REPORT_SCHEMA = "path string, bucket int, row_group int, rows long"
"""Spark schema of `make_handoff_fn`'s output (`coordinator_audit.udfs.handoff.REPORT_FIELDS`)."""


def _side_missing(rows: pa.Table, side: np.ndarray, consts: Mapping[tuple[int, int], int],
                  rejected: Mapping[int, Sequence[int]]) -> pa.Array:
    """`missing` of the handed rows: for a side row, its offset minus its rank in its chunk minus the
    rejected records below it in its partition (`rejected`: ascending offsets) plus the chunk's
    constant (`coordinator_audit.jobs.offsets_path.Scan.missing_counts`; null when the chunk has none), as
    `Scan.side(missing)` computes it; null for the other rows."""
    n = rows.num_rows
    out: list[int | None] = [None] * n
    at = np.flatnonzero(side).tolist()
    if at:
        idx = pa.array(at)
        chunks = rows.column("chunk").take(idx).to_pylist()
        parts = rows.column("partition").take(idx).to_pylist()
        offsets = rows.column("offset").take(idx).to_pylist()
        ranks = rows.column("records_in").take(idx).to_pylist()
        for i, c, p, o, r in zip(at, chunks, parts, offsets, ranks, strict=True):
            k = consts.get((c, p))
            if k is not None and o is not None and r is not None:
                out[i] = o - r - bisect_left(rejected.get(p, ()), o) + k
    return pa.array(out, pa.int64())


def handed_input(rows: pa.Table | None, states: pa.Table | None, *,
                 consts: Mapping[tuple[int, int], int] | None = None,
                 rejected: Mapping[int, Sequence[int]] | None = None,
                 group_ok: Callable[[str], bool] | None = None) -> pa.Table | None:
    """One bucket's replay input (`_HANDED_SCHEMA`) from the pass's handed rows (`SCAN_SCHEMA`
    columns: side rows become records, `_kind` null; partial and regression rows stretches) and
    saved states (group_id, state, value, state_windows): the rows of the groups `group_ok` keeps, sorted
    by (group, partition, offset), null group first, as `replay_input` sorts a shard."""
    tables = []
    if rows is not None and rows.num_rows:
        n = rows.num_rows
        kind = rows.column("_kind")
        side = pc.equal(kind, KIND_SIDE).to_numpy(zero_copy_only=False)
        columns: dict[str, Any] = {
            "group_id": rows.column("group_id"), "partition": rows.column("partition"),
            "offset": rows.column("offset"), "timestamp_ms": rows.column("timestamp_ms"),
            "key": rows.column("key"), "value": rows.column("value"), "state": pa.nulls(n, pa.binary()),
            "missing": (_side_missing(rows, side, consts, rejected or {}) if consts is not None
                        else pa.nulls(n, pa.int64())),
            "_kind": pc.if_else(pa.array(side), pa.scalar(None, pa.string()), kind),
            **{name: rows.column(name) for name in STRETCH_COLUMNS[1:]},
            STATE_WINDOWS_COLUMN: pa.nulls(n, STATE_WINDOWS_TYPE)}
        tables.append(pa.table(columns).cast(_HANDED_SCHEMA))
    if states is not None and states.num_rows:
        n = states.num_rows
        columns = {name: pa.nulls(n, field.type) for name, field in zip(_HANDED_SCHEMA.names, _HANDED_SCHEMA,
                                                                         strict=True)}
        columns.update(group_id=states.column("group_id"), partition=pa.repeat(pa.scalar(-1, pa.int32()), n),
                       offset=pa.repeat(pa.scalar(-1, pa.int64()), n), state=states.column("state"),
                       value=states.column("value"),
                       **{STATE_WINDOWS_COLUMN: states.column(STATE_WINDOWS_COLUMN)})
        tables.append(pa.table(columns).cast(_HANDED_SCHEMA))
    if not tables:
        return None
    table = (tables[0] if len(tables) == 1 else pa.concat_tables(tables)).combine_chunks()
    if group_ok is not None:
        encoded = pc.dictionary_encode(table.column("group_id").combine_chunks())
        names = encoded.dictionary.to_pylist()
        wanted = np.array([bool(group_ok(g)) for g in names] + [False], dtype=bool)
        table = table.filter(pa.array(wanted[encoded.indices.fill_null(len(names)).to_numpy(zero_copy_only=False)]))
    order = pc.sort_indices(table, sort_keys=[("group_id", "ascending", "at_start"),
                                              ("partition", "ascending", "at_start"),
                                              ("offset", "ascending", "at_start")])
    return table.take(order)


def make_handoff_replay_fn(parts: Parts, state_parts: Parts | None = None, *,
                           consts: Mapping[tuple[int, int], int] | None = None,
                           rejected: Mapping[int, Sequence[int]] | None = None, groups: Sequence[str] = (),
                           input_batch_rows: int = 10_000, **replay_options: Any,
                           ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function for `mapInArrow` over rows of buckets (`bucket int`) that replays each bucket's
    handed-off input (`parts`: the pass's rows, `state_parts`: saved states; `handed_input`), one
    bucket after the other, in batches of `input_batch_rows` (Spark's Arrow batch size), through
    `make_replay_fn(**replay_options)`: the same wide output as `replay_frame`."""
    inner = make_replay_fn(**replay_options)
    state_parts = state_parts or {}
    patterns = tuple(groups)
    const_map = dict(consts) if consts is not None else None

    def replay_buckets(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        buckets = [b for batch in batches for b in batch.column("bucket").to_pylist()]
        group_ok = group_matcher(patterns)

        def inputs() -> Iterator[pa.RecordBatch]:
            for b in buckets:
                table = handed_input(read_bucket(parts.get(b, ())), read_bucket(state_parts.get(b, ()), _STATE_SCHEMA),
                                     consts=const_map, rejected=rejected, group_ok=group_ok)
                if table is not None:
                    yield from table.to_batches(max_chunksize=input_batch_rows)

        yield from inner(inputs())

    return replay_buckets


def make_handoff_fn(handoff: Handoff, columns: Sequence[str] = _STATE_COLUMNS
                    ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function for `df.mapInArrow(fn, HANDOFF_REPORT_SCHEMA)` that hands `df`'s rows (`columns`;
    a `group_id` among them) off into a file per task, reporting its row groups."""
    def hand_off(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_survivors()
        ctx = TaskContext.get()
        writer = HandoffWriter(handoff, ctx.partitionId() if ctx is not None else 0, columns=columns)
        reports = writer.write_all(batches)
        if reports:
            yield HandoffWriter.report_batch(reports)

    return hand_off


def saved_states_table(rows: pa.Table, groups: Sequence[str] = ()) -> pa.Table:
    """The replay's saved states (`group_id`, `state`, `value`, `STATE_WINDOWS_COLUMN`) from `group_state`
    rows the driver read itself (`coordinator_audit.jobs.nightly.read_state_batches`): the Arrow twin of
    `coordinator_audit.jobs.audit.saved_states`. Every group `groups` keeps (fnmatch globs; none: all) that has an
    auditor state or open offset windows (a group an earlier run saw only through offset commits has
    no auditor state: it resumes afresh with its windows), its state as UTF-8 bytes (empty for none)."""
    auditor = rows.column("auditor_state")
    keep = pc.or_(pc.is_valid(auditor),
                  pc.greater(pc.fill_null(pc.list_value_length(rows.column("offset_windows")), 0), 0))
    group_ok = group_matcher(groups)
    if group_ok is not None:
        keep = pc.and_(keep, pa.array([g is not None and group_ok(g) for g in rows.column("group_id").to_pylist()],
                                      pa.bool_()))
    kept = rows.filter(keep)
    state = pc.fill_null(kept.column("auditor_state").cast(pa.string()), "").cast(pa.binary())
    return pa.Table.from_arrays([kept.column("group_id").cast(pa.string()), state,
                                 kept.column("window_value").cast(pa.binary()),
                                 kept.column("offset_windows").cast(STATE_WINDOWS_TYPE)], schema=_STATE_SCHEMA)


def hand_off_states(states: pa.Table | Iterable[pa.Table], handoff: Handoff) -> Parts:
    """Hands `saved_states_table`'s rows off from the driver, cut into `handoff`'s buckets as a
    pass task cuts its rows (one file): the `state_parts` of `replay_handed_off`, without a Spark job.
    Given piece by piece (`coordinator_audit.jobs.nightly.read_state_batches`), each piece is written before the next
    is taken: the driver holds one piece."""
    pieces = [states] if isinstance(states, pa.Table) else states
    batches = (batch for piece in pieces for batch in piece.to_batches())
    writer = HandoffWriter(handoff, 0, columns=_STATE_COLUMNS, flush_rows=1)  # (each piece: its own flush)
    return parts_by_bucket(writer.write_all(batches))


def replay_handed_off(spark: SparkSession, parts: Parts, *, buckets: int, shards: int, state_parts: Parts | None = None,
                      consts: Mapping[tuple[int, int], int] | None = None,
                      rejected: Mapping[int, Sequence[int]] | None = None, groups: Sequence[str] = (),
                      load_path: bool = True, mode: ResumeMode = "resume",
                      gaps: Mapping[int, HistoryGap] | None = None, derive: bool = False,
                      direct: DirectWrite | None = None, tables: Collection[str] | None = None,
                      observe: bool = True, health: HealthThresholds = DEFAULT_HEALTH) -> DataFrame:
    """`replay_frame`'s wide output from handed-off input (`coordinator_audit.udfs.handoff`): `buckets` buckets over
    `min(shards, buckets)` tasks, each replaying its buckets' rows (`make_handoff_replay_fn`); `consts`
    (`Scan.missing_counts()[0]`) and `rejected` (`Scan.rejected`) give the side records their `missing`
    count, `groups` filters."""
    conf = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch", "10000")
    batch_rows = int(conf) if conf and int(conf) > 0 else 10_000
    n = max(1, min(shards, buckets))
    frame = spark.range(0, buckets, 1, n).select(F.col("id").cast("int").alias("bucket"))  # buckets cut evenly
    fn = make_handoff_replay_fn(parts, state_parts, consts=consts, rejected=rejected, groups=groups,
                                input_batch_rows=batch_rows,
                                load_path=load_path, mode=mode, gaps=gaps, derive=derive, direct=direct, tables=tables,
                                observe=observe, health=health)
    return frame.mapInArrow(fn, replay_schema(tables, derive=derive, direct=direct is not None))


def split_table(wide: DataFrame, table: str, *, carried: bool | None = False) -> DataFrame:
    """One table's rows out of the replay's wide output, with the table's own column names and types:
    the new rows (`carried` False), the rows the previous run left open that changed (True), or all.
    A derived table (`replay_frame(derive=True)`) has new rows only."""
    schema = struct_type_from_dataclass(AUDIT_TABLES[table]) if table in AUDIT_TABLES else TABLE_SCHEMAS[table]
    # SQL text: one expression string per column costs the driver far less than building Column objects
    condition = f"_table = '{table}'"
    if carried is not None:
        condition += f" AND {'' if carried else 'NOT '}coalesce(_carried, false)"
    return wide.where(condition).selectExpr(*[f"`{_column(table, f.name)}` AS `{f.name}`" for f in schema.fields])


def split_state(wide: DataFrame) -> DataFrame:
    """The per-group `STATE_FIELDS` rows of the replay's wide output."""
    return wide.where(f"_table = '{STATE_TABLE}'").selectExpr(
        *[f"`{_column(STATE_TABLE, name)}` AS `{name}`" for name, _ in STATE_FIELDS])


def split_files(wide: DataFrame) -> DataFrame:
    """The files the replay's tasks wrote themselves (`replay_frame(direct=...)`): table, path, rows."""
    return wide.where(f"_table = '{FILES_TABLE}'").selectExpr(
        *[f"`{_column(FILES_TABLE, name)}` AS `{name}`" for name, _ in FILES_FIELDS])


def files_written(wide: DataFrame, keys: Collection[str]) -> dict[str, list[tuple[str, int]]]:
    """The files the replay's tasks wrote (`split_files`), collected (a Spark job: it runs the tasks
    unless their output is kept): per key of `keys` (a table, or `carried_key` of one; every key
    reported must be among them), its files' (path, rows), in path order."""
    files: dict[str, list[tuple[str, int]]] = {key: [] for key in keys}
    for row in split_files(wide).collect():
        files[row["table"]].append((row["path"], int(row["rows"])))
    return {key: sorted(listed) for key, listed in files.items()}


def split_counts(wide: DataFrame) -> DataFrame:
    """The per-group `AuditCounts` rows of the replay's wide output, with the `TIMING_FIELDS`."""
    names = ("group_id", *COUNT_FIELDS, *TIMING_FIELDS)
    return wide.where(f"_table = '{COUNTS_TABLE}'").selectExpr(
        *[f"`{_column(COUNTS_TABLE, name)}` AS `{name}`" for name in names])


def replay_input(records: DataFrame, stretches: DataFrame | None = None, states: DataFrame | None = None, *,
                 shards: int) -> DataFrame:
    """The replay's input rows as `replay_frame` takes them: `records` (group_id, partition, offset,
    timestamp_ms, key, value, and `missing` when the job tracks it), the single pass's `stretches`
    (`Scan.stretches`: group_id, partition, offset, timestamp_ms and `STRETCH_COLUMNS`) and saved
    `states` (group_id, `state` as JSON bytes, `value`: `group_state.window_value`, `STATE_WINDOWS_COLUMN`:
    `group_state.offset_windows`),
    each with the others' columns null, repartitioned by group into `shards` partitions and sorted within them by
    (group, partition, offset)."""
    from pyspark.sql.types import BinaryType, LongType

    def typed(df: DataFrame, name: str, t: Any) -> Any:
        return F.col(name) if name in df.columns else F.lit(None).cast(t).alias(name)

    frames = [records.select("group_id", "partition", "offset", "timestamp_ms", "key", "value",
                             F.lit(None).cast(BinaryType()).alias("state"), typed(records, "missing", LongType()))]
    if stretches is not None:
        frames.append(stretches.select("group_id", "partition", "offset", "timestamp_ms",
                                       *[F.lit(None).cast(BinaryType()).alias(c) for c in ("key", "value", "state")],
                                       F.lit(None).cast(LongType()).alias("missing"), *STRETCH_COLUMNS))
    if states is not None:
        frames.append(states.select(
            "group_id", F.lit(-1).cast("int").alias("partition"), F.lit(-1).cast("long").alias("offset"),
            F.lit(None).cast(LongType()).alias("timestamp_ms"), F.lit(None).cast(BinaryType()).alias("key"),
            typed(states, "value", BinaryType()), F.col("state").cast(BinaryType()),
            F.lit(None).cast(LongType()).alias("missing"), F.col(STATE_WINDOWS_COLUMN)))
    out = frames[0]
    for df in frames[1:]:
        out = out.unionByName(df, allowMissingColumns=True)
    return out.repartition(shards, "group_id").sortWithinPartitions("group_id", "partition", "offset")
