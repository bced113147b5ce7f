"""The per-group replay adapter for `mapInPandas`: one pass over a Spark partition's records,
group by group, through `coordinator_core.audit`, emitting the rows of every table at once.

The input DataFrame must be repartitioned by `group_id` and sorted within partitions by
(`group_id`, `partition`, `offset`) (see `jobs.audit`); this module never assumes more than that a
group's records are contiguous and in log order. Memory is bounded by one group's audit state plus
one output batch, never by how many records a group has.

Output: one wide row per audit row (`REPLAY_SCHEMA`): `_table` names the table, and the columns
`<table>__<field>` of that table are set (the others null). One extra row per group,
`_table == "_counts"`, carries the group's `AuditCounts` so the job's `runs` row adds up.
`split_table` turns the wide output back into one table's DataFrame.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from coordinator_core.audit import AuditCounts, GroupAuditor, table_of
from udfs.schemas import AUDIT_TABLES, struct_type_from_dataclass

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame

__all__ = [
    "COUNTS_TABLE",
    "COUNT_FIELDS",
    "INPUT_COLUMNS",
    "REPLAY_SCHEMA",
    "make_replay_fn",
    "split_counts",
    "split_table",
]

INPUT_COLUMNS: tuple[str, ...] = ("group_id", "partition", "offset", "timestamp_ms", "key", "value")
"""Columns the replay reads: the group (null when the key could not be read), the record's log
position, its timestamp in epoch ms, and the raw key/value bytes."""

COUNTS_TABLE = "_counts"
COUNT_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(AuditCounts))


def _column(table: str, name: str) -> str:
    return f"{table}__{name}"


def _replay_schema() -> StructType:
    fields = [StructField("_table", StringType(), False)]
    for table, cls in AUDIT_TABLES.items():
        for f in struct_type_from_dataclass(cls).fields:
            fields.append(StructField(_column(table, f.name), f.dataType, True))
    fields.append(StructField(_column(COUNTS_TABLE, "group_id"), StringType(), True))
    fields.extend(StructField(_column(COUNTS_TABLE, name), LongType(), True) for name in COUNT_FIELDS)
    return StructType(fields)


REPLAY_SCHEMA: StructType = _replay_schema()
"""The wide output schema of the replay (see the module docstring)."""

_FIELDS: dict[str, tuple[str, ...]] = {
    table: tuple(f.name for f in dataclasses.fields(cls)) for table, cls in AUDIT_TABLES.items()
}


class _Batch:
    """Column lists of the wide output, filled row by row and flushed as a pandas DataFrame."""

    __slots__ = ("columns", "n")

    def __init__(self) -> None:
        self.columns: dict[str, list[Any]] = {name: [] for name in REPLAY_SCHEMA.fieldNames()}
        self.n = 0

    def _add(self, table: str, values: dict[str, Any]) -> None:
        for name, column in self.columns.items():
            column.append(values.get(name))
        self.columns["_table"][-1] = table
        self.n += 1

    def add_row(self, row: Any) -> None:
        table = table_of(row)
        values = {}
        for name in _FIELDS[table]:
            value = getattr(row, name)
            values[_column(table, name)] = list(value) if isinstance(value, tuple) else value
        self._add(table, values)

    def add_counts(self, group_id: str | None, counts: AuditCounts) -> None:
        values: dict[str, Any] = {_column(COUNTS_TABLE, "group_id"): group_id}
        for name in COUNT_FIELDS:
            values[_column(COUNTS_TABLE, name)] = getattr(counts, name)
        self._add(COUNTS_TABLE, values)

    def frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame({name: pd.Series(values, dtype=object) for name, values in self.columns.items()})


def make_replay_fn(*, batch_rows: int = 10_000,
                   load_path: bool = True) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """The function to pass to `mapInPandas(fn, REPLAY_SCHEMA)`; closes over plain values only."""

    def replay_partition(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        out = _Batch()
        auditor: GroupAuditor | None = None
        current: object = object()  # no group yet (None is a real key: records whose key did not parse)

        def close() -> None:
            if auditor is not None:
                for row in auditor.finish():
                    out.add_row(row)
                out.add_counts(auditor.group_id if auditor.group_id is not None else current,  # type: ignore[arg-type]
                               auditor.counts)

        for pdf in batches:
            groups = pdf["group_id"].tolist()
            records = list(zip(pdf["partition"].tolist(), pdf["offset"].tolist(), pdf["timestamp_ms"].tolist(),
                               pdf["key"].tolist(), pdf["value"].tolist(), strict=True))
            start = 0
            n = len(groups)
            while start < n:
                group = groups[start]
                end = start + 1
                while end < n and groups[end] == group:
                    end += 1
                if group != current:
                    close()
                    auditor = GroupAuditor(group, load_path=load_path)
                    current = group
                assert auditor is not None
                for row in auditor.feed(records[start:end]):
                    out.add_row(row)
                    if out.n >= batch_rows:
                        yield out.frame()
                        out = _Batch()
                start = end
            if out.n >= batch_rows:
                yield out.frame()
                out = _Batch()
        close()
        if out.n:
            yield out.frame()

    return replay_partition


def split_table(wide: DataFrame, table: str) -> DataFrame:
    """One table's rows out of the replay's wide output, with the table's own column names and types."""
    schema = struct_type_from_dataclass(AUDIT_TABLES[table])
    return wide.where(F.col("_table") == table).select(
        *[F.col(_column(table, f.name)).alias(f.name) for f in schema.fields]
    )


def split_counts(wide: DataFrame) -> DataFrame:
    """The per-group `AuditCounts` rows of the replay's wide output."""
    names = ("group_id", *COUNT_FIELDS)
    return wide.where(F.col("_table") == COUNTS_TABLE).select(
        *[F.col(_column(COUNTS_TABLE, name)).alias(name) for name in names]
    )
