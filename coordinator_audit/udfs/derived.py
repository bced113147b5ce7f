"""The derived tables (`partition_ownership`, `rebalances`, `group_health`) as Spark transforms over
the base tables: a thin adapter over `coordinator_audit.udfs.history.derive_group`, run once per group with
`mapInArrow` over input repartitioned and sorted by group (as the replay does).

The base tables may come from the job's own run (in memory) or also from Delta, written by several
runs (nightly windows): they hold one row per natural key (`NATURAL_KEYS`; `coordinator_audit.jobs.derived_step`
replaces a stored row by the run's row of the same key); `derive_group` then closes what is still
open with the next record it knows of. A run writes its derived rows still current at or after its
window's start or derived from rows all still current at its history's floor
(`rederived_condition`), and replaces the stored rows of its groups that are
(`coordinator_audit.jobs.delta_io.Merge.scope`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StringType, StructField, StructType, TimestampType

from coordinator_audit.udfs import schemas
from coordinator_audit.udfs.gc_batches import collected_in_bulk, freeze_survivors
from coordinator_audit.udfs.history import (
    BASE_INPUTS,
    DEFAULT_HEALTH,
    DERIVED_KEYS,
    HealthThresholds,
    derive_from_tables,
    values_getter,
)
from coordinator_audit.udfs.replay import row_columns, sorted_runs

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "BASE_INPUTS",
    "DERIVED_KEYS",
    "DERIVED_SCHEMAS",
    "DERIVED_TABLES",
    "NATURAL_KEYS",
    "TOPIC_BY_ID",
    "derive_packed",
    "derive_partition",
    "derive_tables",
    "derive_wide",
    "first_whole_day",
    "overlapping_window",
    "pack_base",
    "rederived_condition",
    "split_wide",
    "wide_schema",
]

DERIVED_TABLES: tuple[str, ...] = tuple(schemas.DERIVED_TABLES)

DERIVED_SCHEMAS = {name: schemas.TABLE_SCHEMAS[name] for name in DERIVED_TABLES}
"""Content schema of each derived table (without the run columns `coordinator_audit.jobs.delta_io` appends)."""

NATURAL_KEYS: dict[str, tuple[str, ...]] = {
    "generations": ("group_id", "generation_id", "source_partition", "source_offset"),
    "assignments": ("group_id", "generation_id", "member_id", "topic", "topic_id", "partition", "source_partition",
                    "source_offset"),
    "offset_commits": ("group_id", "topic", "partition", "source_partition", "window_start_offset"),
    "rebalance_causes": ("group_id", "generation_id", "cause", "member_id", "source_partition", "source_offset"),
    "violations": ("group_id", "generation_id", "kind", "topic", "partition", "source_partition", "source_offset"),
}
"""Base table -> natural key: the identity of a row across runs (a later run re-emits, with the
same key, a row an earlier run left open). `topic` counts only where `topic_id` is null
(`TOPIC_BY_ID`): a consumer group's row is named once a later run learns its topic id's name."""

TOPIC_BY_ID: frozenset[str] = frozenset({"assignments"})
"""Tables whose natural key compares `topic` only where `topic_id` is null."""

OPTIONAL_INPUTS: dict[str, tuple[str, ...]] = {"generations": ("rebalance_started_at",)}
"""Columns read when the table has them: the broker's own join-phase start (given a broker log)."""


_TAG = "_base_table"
"""The packed input's column naming the base table of a row (`violations` has a `kind` already)."""


def wide_schema() -> StructType:
    """The derivation's output before the split (`derive_wide`): a `table` column, then one struct
    column per derived table."""
    return StructType([StructField("table", StringType(), False),
                       *[StructField(name, schema, True) for name, schema in DERIVED_SCHEMAS.items()]])


_ARROW_SCHEMA: list[pa.Schema] = []


def _arrow_schema() -> pa.Schema:
    """The wide schema in Arrow, built once per Python worker (not once per group)."""
    if not _ARROW_SCHEMA:
        _ARROW_SCHEMA.append(to_arrow_schema(wide_schema()))
    return _ARROW_SCHEMA[0]


def _arrow_batch(produced: Mapping[str, list[Any]]) -> pa.RecordBatch:
    """Derived rows of some groups as one wide RecordBatch: `table`, and per table a struct column
    set on that table's rows only (built column-wise)."""
    schema = _arrow_schema()
    total = sum(len(rows) for rows in produced.values())
    columns: list[pa.Array] = []
    before = 0
    for name in DERIVED_TABLES:
        rows = produced[name]
        struct_type = schema.field(name).type
        values = row_columns(rows, values_getter(type(rows[0])) if rows else tuple, len(struct_type))
        fields = [pa.array([list(v) for v in col] if col and isinstance(col[0], tuple) else col,
                           type=struct_type.field(k).type) for k, col in enumerate(values)]
        struct = pa.StructArray.from_arrays(fields, fields=list(struct_type))
        pieces = [pa.nulls(before, struct_type), struct, pa.nulls(total - before - len(rows), struct_type)]
        columns.append(pa.concat_arrays([p for p in pieces if len(p)]) if total else pa.nulls(0, struct_type))
        before += len(rows)
    names = pa.array([name for name in DERIVED_TABLES for _ in produced[name]], type=pa.string())
    return pa.RecordBatch.from_arrays([names, *columns], schema=schema)


def _derive_batches(batches: Iterator[pa.RecordBatch], *, flush_rows: int = 8192,
                    health: HealthThresholds = DEFAULT_HEALTH) -> Iterator[pa.RecordBatch]:
    """mapInArrow body over one Spark partition of packed base rows, sorted by group: each group's
    rows (one run, possibly across batches) go to `derive_group` (days judged by `health`); the
    derived rows leave in batches of about `flush_rows`."""
    out: dict[str, list[Any]] = {name: [] for name in DERIVED_TABLES}
    inputs: dict[str, list[Any]] = {name: [] for name in BASE_INPUTS}
    current: object = object()

    def close() -> None:
        if isinstance(current, str):
            produced: tuple[list[Any], ...] = derive_from_tables(current, inputs, health)
            for name, rows in zip(DERIVED_TABLES, produced, strict=True):
                out[name].extend(rows)
        for pending in inputs.values():
            pending.clear()

    for batch in batches:
        # each table's rows of the batch as dicts (pyarrow builds them), then handed out group by
        # group: a group is one run of the sorted batch, and so of each table's part of it
        tags = batch.column(_TAG)
        parts: list[tuple[str, list[Any], dict[str, tuple[int, int]]]] = []
        for kind in pc.unique(tags).to_pylist():
            part = batch.filter(pc.equal(tags, kind))
            present = part.schema.names
            names = [c for c in (*BASE_INPUTS[kind], *OPTIONAL_INPUTS.get(kind, ())) if c in present]
            rows: list[Any] = (list(zip(*(part.column(c).to_pylist() for c in names), strict=True))
                               if kind == "offset_commits" else part.select(names).to_pylist())  # CommitTimes
            parts.append((kind, rows, {g: (start, end) for g, start, end in sorted_runs(part.column("group_id"))}))
        for group, _, _ in sorted_runs(batch.column("group_id")):
            if group != current:
                close()
                current = group
                if sum(len(rows) for rows in out.values()) >= flush_rows:
                    yield _arrow_batch(out)
                    out = {name: [] for name in DERIVED_TABLES}
            for kind, rows, runs in parts:
                span = runs.get(group)
                if span is not None:
                    inputs[kind].extend(rows[span[0]:span[1]])
    close()
    if any(out.values()):
        yield _arrow_batch(out)


def derive_partition(batches: Iterator[pa.RecordBatch], health: HealthThresholds = DEFAULT_HEALTH
                     ) -> Iterator[pa.RecordBatch]:
    """The `mapInArrow` function over one Spark partition of packed base rows (`_derive_batches`),
    the cyclic garbage collector run between its output batches (`coordinator_audit.udfs.gc_batches`)."""
    freeze_survivors()
    return collected_in_bulk(_derive_batches(batches, health=health))


def derive_tables(base: Mapping[str, DataFrame], health: HealthThresholds = DEFAULT_HEALTH) -> dict[str, DataFrame]:
    """{derived table: DataFrame} from {base table: DataFrame} (the five of BASE_INPUTS).

    One shuffle by group: the tables' needed columns are packed in one frame (a `_TAG` column says
    which table a row is from; shared column names have the same meaning and type), sorted by group
    within partitions, and `mapInArrow` streams each partition group by group through
    `derive_group` (one Python call per partition, not per group). The three tables share that one
    computation only if the caller persists `derive_wide`'s result and splits it (`split_wide`).
    `health` judges the health rows' days."""
    return split_wide(derive_wide(base, health))


def split_wide(wide: DataFrame) -> dict[str, DataFrame]:
    return {name: wide.where(F.col("table") == name).select(f"{name}.*") for name in DERIVED_TABLES}


def derive_wide(base: Mapping[str, DataFrame], health: HealthThresholds = DEFAULT_HEALTH) -> DataFrame:
    """The derivation's output before the split: a `table` column and one struct column per table."""
    return derive_packed(pack_base(base), health)


def derive_packed(packed: DataFrame, health: HealthThresholds = DEFAULT_HEALTH) -> DataFrame:
    """`derive_wide` of the packed base rows (`pack_base`)."""
    return packed.repartition("group_id").sortWithinPartitions("group_id").mapInArrow(
        functools.partial(derive_partition, health=health), schema=wide_schema())


def pack_base(base: Mapping[str, DataFrame]) -> DataFrame:
    """The base tables' needed columns in one frame, a `_TAG` column naming each row's table."""
    packed = None
    for name, columns in BASE_INPUTS.items():
        df = base[name]
        cols = [F.col(c) for c in columns]
        for c in OPTIONAL_INPUTS.get(name, ()):
            if c in df.columns:  # epoch milliseconds, whether stored as a timestamp or a long
                ts = isinstance(df.schema[c].dataType, TimestampType)
                cols.append((F.unix_millis(F.col(c)) if ts else F.col(c).cast("long")).alias(c))
        part = df.select("group_id", F.lit(name).alias(_TAG), *cols)
        packed = part if packed is None else packed.unionByName(part, allowMissingColumns=True)
    assert packed is not None
    return packed


def overlapping_window(tables: Mapping[str, DataFrame], *, since: datetime | None,
                       until: datetime | None) -> dict[str, DataFrame]:
    """The derived rows a run writes into its window when it derives from its own rows only (the
    replay): those overlapping [since, until). Unbounded windows keep everything."""
    if since is None and until is None:
        return dict(tables)
    lo = F.lit(schemas.epoch_ms(since)) if since is not None else None
    hi = F.lit(schemas.epoch_ms(until)) if until is not None else None

    def overlaps(start: Any, end: Any) -> Any:
        cond = F.lit(True)
        if lo is not None:
            cond = cond & (end.isNull() | (end >= lo))
        if hi is not None:
            cond = cond & (start < hi)
        return cond

    day_start = F.unix_millis(F.to_timestamp(F.col("day"), "yyyy-MM-dd"))
    own, reb, hea = (tables[n] for n in DERIVED_TABLES)
    return {
        "partition_ownership": own.where(overlaps(F.col("valid_from"), F.col("valid_to"))),
        "rebalances": reb.where(overlaps(F.coalesce("started_at", "observed_at"), F.col("observed_at"))),
        "group_health": hea.where(overlaps(day_start, day_start + F.lit(86_400_000 - 1))),
    }


def rederived_condition(table: str, since_ms: int | None, floor_ms: int | None) -> str:
    """The SQL condition that a derived row is one a run re-derives, for its groups, from its own rows
    and the stored ones still current at `floor_ms` (`coordinator_audit.jobs.derived_step`): a row still current at the
    window's start `since_ms` (an ownership interval open or ending then or later), or one that starts
    at or after the floor (an ownership interval from then, a rebalance revealed then, a health row of
    a UTC day starting then: every base row it derives from is still current at the floor). `{r}`
    stands for the row's alias and its dot (`t.`, `s.`, or nothing). TRUE without a floor."""
    if since_ms is None or floor_ms is None:
        return "TRUE"
    if table == "partition_ownership":
        return f"({{r}}`valid_from` >= {floor_ms} OR {{r}}`valid_to` IS NULL OR {{r}}`valid_to` >= {since_ms})"
    if table == "rebalances":
        return f"{{r}}`observed_at` >= {floor_ms}"
    if table == "group_health":
        return f"{{r}}`day` >= '{first_whole_day(floor_ms)}'"
    raise ValueError(f"rederived_condition: {table} is no derived table ({', '.join(DERIVED_TABLES)})")


def first_whole_day(floor_ms: int) -> str:
    """The first UTC day (`yyyy-MM-dd`) that starts at or after `floor_ms`."""
    day = -(-floor_ms // 86_400_000) * 86_400_000
    return datetime.fromtimestamp(day / 1000, UTC).strftime("%Y-%m-%d")
