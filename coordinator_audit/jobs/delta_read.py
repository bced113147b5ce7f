"""Reading the audit's Delta tables without Spark (`coordinator_audit.jobs.query`, `coordinator_audit.jobs.report`, `coordinator_audit.jobs.nightly`, notebooks).

`read_arrow(path, equals=(column, value))` is the current version of a Delta table as one Arrow
table in the table's own schema, only the rows whose `column` equals `value` when asked. The data
files the Delta log lists are read with pyarrow's own filesystem for the table's URI; files whose
log statistics (min/max) exclude the value are skipped, and so are the row groups whose Parquet
statistics do; the remaining rows are cast to the table's schema and only then compared.
`iter_arrow` gives the same rows piece by piece (a file's row groups, or batches of a given size),
for a reader that must not hold the table (the nightly run's saved states, `coordinator_audit.jobs.nightly`).

Why not `deltalake.DeltaTable.to_pyarrow_table(filters=...)`, measured with deltalake 1.6.6 and
pyarrow 26 on a table the nightly run had merged into:

* delta-rs MERGE (the embedded writer's merge of carried rows, `coordinator_audit.jobs.delta_io`) writes its files
  with an Arrow schema whose string columns are `string_view`, and pyarrow has no compute kernels
  for view types: a filter over a table holding such a file fails with "Function 'equal' has no
  kernel matching input types (string, string_view)", whichever side does the filtering (delta-rs
  issue #4579 is the same for `delete`). Here the cast to the table's schema comes first.
* deltalake hands pyarrow a filesystem implemented in Python (`PyFileSystem(DeltaStorageHandler)`);
  Arrow's I/O threads can still hold it when the interpreter exits, and the process then aborts
  ("terminate called without an active exception", exit code 134) after it printed its answer.

Tables written with deletion vectors or column mapping (Delta Spark may enable both, Databricks by
default) cannot be read file by file, nor can tables on a storage pyarrow has no filesystem for:
those are read whole by deltalake and filtered afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable

__all__ = ["WHATIF_TABLE", "iter_arrow", "may_hold", "may_reach", "not_file_readable", "plain_schema", "plain_type",
           "read_arrow"]

WHATIF_TABLE = "whatif"
"""The table `coordinator-audit whatif` writes beside a run's tables (not partitioned by window)."""


def plain_type(t: pa.DataType) -> pa.DataType:
    """`t` with every view type (string_view, binary_view, list_view) replaced by its plain type,
    nested types included: the types pyarrow's compute kernels accept."""
    if pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_list(t) or pa.types.is_list_view(t):
        return pa.list_(_plain_field(t.value_field))
    if pa.types.is_large_list(t) or pa.types.is_large_list_view(t):
        return pa.large_list(_plain_field(t.value_field))
    if pa.types.is_map(t):
        return pa.map_(_plain_field(t.key_field), _plain_field(t.item_field))
    if pa.types.is_struct(t):
        return pa.struct([_plain_field(t.field(i)) for i in range(t.num_fields)])
    return t


def _plain_field(f: pa.Field) -> pa.Field:
    return f.with_type(plain_type(f.type))


def plain_schema(dt: DeltaTable) -> pa.Schema:
    """The Delta table's schema in Arrow, without view types."""
    return pa.schema([_plain_field(f) for f in pa.schema(dt.schema().to_arrow())])


def not_file_readable(dt: DeltaTable) -> str | None:
    """None when the current version's rows are exactly those of its data files plus the partition
    values of the log (no deletion vectors, no column mapping); else why not."""
    if "deletionVectors" in (dt.protocol().reader_features or []):
        return "deletion vectors enabled"
    mapping = (dt.metadata().configuration or {}).get("delta.columnMapping.mode", "none")
    if mapping != "none":
        return f"column mapping mode {mapping}"
    return None


def _outside(value: Any, low: Any, high: Any) -> bool:
    """True when statistics min `low` / max `high` (either may be None: unknown) prove that no row
    equals `value`. String statistics may be truncated prefixes (Delta and Parquet writers both cut
    long strings): a value above a truncated max that starts with it may still be present."""
    if low is not None and value < low:
        return True
    if high is None or not value > high:
        return False
    return not (isinstance(value, str) and isinstance(high, str) and value.startswith(high))


def may_reach(action: Mapping[str, Any], column: str, floor: int | str, *, or_null: bool) -> bool:
    """Whether a data file may hold a row whose `column` is at least `floor` (with `or_null`: or
    null), judged by its add action's statistics (`DeltaTable.get_add_actions(flatten=False)` rows:
    `num_records`, `null_count`, `max`). A file without statistics may; an empty file may not."""
    if action.get("num_records") == 0:
        return False
    if or_null:
        nulls = (action.get("null_count") or {}).get(column)
        if nulls is None or nulls > 0:
            return True
    high = (action.get("max") or {}).get(column)
    return high is None or high >= floor


def may_hold(action: Mapping[str, Any], column: str, value: Any) -> bool:
    """Whether a data file may hold a row whose `column` equals `value`, judged by its add action's
    statistics (`min`, `max`; truncated strings allowed for). A file without them may; an empty
    file may not."""
    if action.get("num_records") == 0:
        return False
    return not _outside(value, (action.get("min") or {}).get(column), (action.get("max") or {}).get(column))


def _row_groups(pf: pq.ParquetFile, column: str, value: Any) -> list[int]:
    """The row groups of `pf` whose statistics of `column` do not exclude `value`."""
    meta = pf.metadata
    leaf = next((j for j in range(meta.num_columns) if meta.schema.column(j).path == column), None)
    keep = []
    for i in range(meta.num_row_groups):
        stats = meta.row_group(i).column(leaf).statistics if leaf is not None else None
        if stats is not None and stats.has_min_max and _outside(value, stats.min, stats.max):
            continue
        keep.append(i)
    return keep


def _conform(table: pa.Table, schema: pa.Schema, partition: dict[str, Any]) -> pa.Table:
    """`table` (one data file's rows) in `schema`'s columns and types: view types cast to plain,
    partition columns filled from the log's partition values, columns the file predates null."""
    columns = []
    for f in schema:
        if f.name in partition:
            raw = partition[f.name]
            scalar = pa.scalar(raw, pa.string()).cast(f.type) if raw is not None else pa.scalar(None, f.type)
            columns.append(pa.repeat(scalar, table.num_rows))
        elif f.name in table.column_names:
            columns.append(table[f.name].cast(f.type))
        else:
            columns.append(pa.nulls(table.num_rows, f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _where(table: pa.Table, equals: tuple[str, Any] | None) -> pa.Table:
    if equals is None:
        return table
    column, value = equals
    return table.filter(pc.equal(table[column], pa.scalar(value, table.schema.field(column).type)))


def read_arrow(path: str, *, equals: tuple[str, Any] | None = None, dt: DeltaTable | None = None,
               columns: Sequence[str] | None = None) -> pa.Table:
    """The current version of the Delta table at `path` (opened once by the caller as `dt`, else
    here) in its schema without view types; only the rows whose column `equals[0]` equals
    `equals[1]` when given (see the module docstring for how files and row groups are skipped);
    only `columns` (in that order) when given."""
    dt = dt if dt is not None else DeltaTable(path)
    pieces = list(iter_arrow(path, equals=equals, dt=dt, columns=columns))
    if pieces:
        return pa.concat_tables(pieces)
    empty = _schema(path, dt, equals, columns).empty_table()
    return empty.select(list(columns) if columns is not None else empty.column_names)


def iter_arrow(path: str, *, equals: tuple[str, Any] | None = None, dt: DeltaTable | None = None,
               columns: Sequence[str] | None = None, batch_rows: int | None = None) -> Iterator[pa.Table]:
    """`read_arrow`'s rows piece by piece (no empty piece): a file's kept row groups at a time, or
    with `batch_rows` at most that many rows at a time, so that a reader that hands each piece on
    holds one piece, not the table (a table delta-rs must read whole, below, is one piece)."""
    dt = dt if dt is not None else DeltaTable(path)
    schema = _schema(path, dt, equals, columns)
    names = list(columns) if columns is not None else schema.names
    for piece in _read(dt, schema, equals, batch_rows):
        if piece.num_rows:
            yield piece.select(names)


def _schema(path: str, dt: DeltaTable, equals: tuple[str, Any] | None, columns: Sequence[str] | None) -> pa.Schema:
    """The schema `read_arrow` reads in: the table's without view types, or `columns` of it and the
    filter column; KeyError naming what is missing."""
    schema = plain_schema(dt)
    if equals is not None and equals[0] not in schema.names:
        raise KeyError(f"{path}: no column {equals[0]!r} to filter on (columns: {', '.join(schema.names)})")
    if columns is not None:
        unknown = [c for c in columns if c not in schema.names]
        if unknown:
            raise KeyError(f"{path}: no column(s) {unknown} (columns: {', '.join(schema.names)})")
        needed = {*columns, *((equals[0],) if equals is not None else ())}
        schema = pa.schema([f for f in schema if f.name in needed])  # (the filter column is read, then dropped)
    return schema


def _read(dt: DeltaTable, schema: pa.Schema, equals: tuple[str, Any] | None,
          batch_rows: int | None) -> Iterator[pa.Table]:
    """`iter_arrow`'s rows in `schema` (the table's, or some of its columns), piece by piece."""
    try:  # local paths, s3://, gs://, hdfs://, abfs://: pyarrow's own filesystems
        fs, root = pafs.FileSystem.from_uri(dt.table_uri)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
        fs = None
    if fs is None or not_file_readable(dt) is not None:  # deltalake reads it whole
        whole = dt.to_pyarrow_table(columns=schema.names)
        yield _where(whole.cast(schema), equals)
        return
    partition_cols = list(dt.metadata().partition_columns)
    actions = pa.table(dt.get_add_actions(flatten=True))
    wanted = ["path", *(f"partition.{c}" for c in partition_cols)]
    if equals is not None:
        wanted += [name for name in (f"min.{equals[0]}", f"max.{equals[0]}") if name in actions.column_names]
    for a in actions.select(wanted).to_pylist():
        partition = {c: a[f"partition.{c}"] for c in partition_cols}
        if equals is not None:
            column, value = equals
            if column in partition:
                if partition[column] is None or partition[column] != str(value):
                    continue
            elif _outside(value, a.get(f"min.{column}"), a.get(f"max.{column}")):
                continue
        with fs.open_input_file(f"{root.rstrip('/')}/{unquote(a['path'])}") as handle:
            pf = pq.ParquetFile(handle)
            names = [n for n in pf.schema_arrow.names if n in schema.names and n not in partition]
            keep = (list(range(pf.num_row_groups)) if equals is None or equals[0] in partition
                    else _row_groups(pf, equals[0], equals[1]))
            if not keep:
                continue
            if batch_rows is None:
                yield _where(_conform(pf.read_row_groups(keep, columns=names, use_threads=False), schema, partition),
                             equals)
                continue
            for batch in pf.iter_batches(batch_size=batch_rows, row_groups=keep, columns=names, use_threads=False):
                yield _where(_conform(pa.Table.from_batches([batch]), schema, partition), equals)
