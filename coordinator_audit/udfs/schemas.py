"""Spark schemas, declared once: the Kafka-source input, the output tables, and the decode UDFs' structs.

The four audit tables plus `offset_commits` and `quarantine` are derived from the row dataclasses of
`coordinator_audit.core.audit.rows` by `struct_type_from_dataclass`, so a column added to a row class
appears in the Delta table without a second declaration. `runs` is declared here directly (the
job, not the audit, fills it).

Type rule of `struct_type_from_dataclass` (annotation -> Spark type):

* `int` -> `LongType`, except Kafka's 32-bit fields, recognised by name: a field named
  `partition` or ending in `_partition`, `generation_id`, `_generation`, `_generations`,
  `_version`, `_count`, `_replacements` or `key_type` -> `IntegerType`. Offsets, timestamps,
  durations and record counts stay `LongType`.
* `str` -> `StringType`, `bool` -> `BooleanType`, `bytes` -> `BinaryType`, `float` -> `DoubleType`.
* `X | None` -> the type of X, nullable; every other field is non-nullable.
* `tuple[X, ...]` / `list[X]` -> `ArrayType(X, containsNull=False)`.

Times are epoch milliseconds as Kafka writes them. Each such column (`MILLIS_COLUMNS`) gets a Spark
`TIMESTAMP` companion, added in one place just before writing (`with_time_columns`) and named by
one rule (`time_column_name`): a trailing `_timestamp` becomes `_time` (`record_timestamp` ->
`record_time`), `timestamp` becomes `time`, any other name gains `_time` (`valid_from` ->
`valid_from_time`, `ended_at` -> `ended_at_time`). Companions follow the content columns.

Stored tables carry two more columns, appended by `coordinator_audit.jobs.delta_io` (`stored_schema`): `run_id`
(the run that wrote the row) and `run_window` (the partition column; see `coordinator_audit.jobs.delta_io`).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from datetime import datetime
from typing import Any, Union

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from coordinator_audit.core.audit import (
    AssignmentRow,
    GenerationRow,
    OffsetCommitRow,
    QuarantineRow,
    RebalanceCauseRow,
    ViolationRow,
)
from coordinator_audit.udfs.history import HealthRow, OwnershipRow, RebalanceRow

__all__ = [
    "ASSIGNMENT_STRUCT",
    "AUDIT_TABLES",
    "BROKER_ACCOUNT_COLUMNS",
    "DERIVED_TABLES",
    "GROUP_STATE_SCHEMA",
    "INT32_NAME_SUFFIXES",
    "KAFKA_SOURCE_SCHEMA",
    "MILLIS_COLUMNS",
    "OFFSET_WINDOW_STRUCT",
    "RECORD_STRUCT",
    "RUNS_SCHEMA",
    "RUN_COLUMNS",
    "SUBSCRIPTION_STRUCT",
    "TABLE_SCHEMAS",
    "TIME_COMPANIONS",
    "epoch_ms",
    "spark_type_for_field",
    "stored_schema",
    "struct_type_from_dataclass",
    "time_column_name",
    "with_time_columns",
]

# ------------------------------------------------------------------------------------------------
# the dataclass -> StructType rule

INT32_NAME_SUFFIXES: tuple[str, ...] = (
    "_partition", "generation_id", "_generation", "_generations", "_version", "_count", "_replacements",
    "key_type",
)
"""Name endings (besides the exact name `partition`) whose `int` fields map to IntegerType."""

_SCALARS: dict[Any, DataType] = {
    str: StringType(),
    bool: BooleanType(),
    bytes: BinaryType(),
    float: DoubleType(),
}


def _is_int32_name(name: str) -> bool:
    return name == "partition" or name.endswith(INT32_NAME_SUFFIXES)


def spark_type_for_field(name: str, annotation: Any) -> tuple[DataType, bool]:
    """(Spark type, nullable) of one dataclass field; raises TypeError naming the field otherwise."""
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"field {name!r}: only `X | None` unions map to Spark, got {annotation!r}")
        inner, _ = spark_type_for_field(name, args[0])
        return inner, True
    if origin in (tuple, list):
        items = typing.get_args(annotation)
        if origin is tuple and not (len(items) == 2 and items[1] is Ellipsis):
            raise TypeError(f"field {name!r}: only homogeneous tuple[X, ...] maps to an array, got {annotation!r}")
        element, element_nullable = spark_type_for_field(name, items[0])
        return ArrayType(element, containsNull=element_nullable), False
    if annotation is int:
        return (IntegerType() if _is_int32_name(name) else LongType()), False
    if annotation in _SCALARS:
        return _SCALARS[annotation], False
    raise TypeError(f"field {name!r}: no Spark type for annotation {annotation!r}")


def struct_type_from_dataclass(cls: type) -> StructType:
    """The StructType of a dataclass, one column per field in declaration order (rule: module docstring)."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    hints = typing.get_type_hints(cls)
    fields = []
    for f in dataclasses.fields(cls):
        dtype, nullable = spark_type_for_field(f.name, hints[f.name])
        fields.append(StructField(f.name, dtype, nullable))
    return StructType(fields)


# ------------------------------------------------------------------------------------------------
# input

KAFKA_SOURCE_SCHEMA = StructType([
    StructField("key", BinaryType(), True),
    StructField("value", BinaryType(), True),
    StructField("topic", StringType(), True),
    StructField("partition", IntegerType(), True),
    StructField("offset", LongType(), True),
    StructField("timestamp", TimestampType(), True),
])
"""What Spark's Kafka source, Kafka Connect sinks and the simulator write (extra columns are ignored)."""

# ------------------------------------------------------------------------------------------------
# output tables

AUDIT_TABLES: dict[str, type] = {
    "generations": GenerationRow,
    "assignments": AssignmentRow,
    "rebalance_causes": RebalanceCauseRow,
    "violations": ViolationRow,
    "offset_commits": OffsetCommitRow,
    "quarantine": QuarantineRow,
}
"""Table name -> row dataclass, for the tables whose rows `coordinator_audit.core.audit` produces."""

RUNS_SCHEMA = StructType([
    StructField("run_id", StringType(), False),
    StructField("status", StringType(), False),
    StructField("started_at", TimestampType(), False),
    StructField("finished_at", TimestampType(), False),
    StructField("duration_ms", LongType(), False),
    StructField("input", StringType(), False),
    StructField("input_format", StringType(), False),
    StructField("since", TimestampType(), True),
    StructField("until", TimestampType(), True),
    StructField("group_filter", StringType(), True),
    StructField("records_in", LongType(), False),
    StructField("duplicates_dropped", LongType(), False),
    StructField("filtered_by_window", LongType(), False),
    StructField("filtered_by_group", LongType(), False),
    StructField("records_replayed", LongType(), False),
    StructField("quarantined", LongType(), False),
    StructField("skipped_other_type", LongType(), False),
    StructField("table_rows", MapType(StringType(), LongType(), False), False),
    StructField("code_version", StringType(), False),
    StructField("spark_version", StringType(), False),
    StructField("writer", StringType(), False),
    StructField("config_json", StringType(), False),
    StructField("resume", StringType(), False),
    StructField("base_run_id", StringType(), True),
    StructField("end_offsets", MapType(IntegerType(), LongType(), False), False),
    StructField("missing_offsets", MapType(IntegerType(), LongType(), False), False),
    StructField("note", StringType(), True),
])
"""One row per run (appended, never replaced): what was read, what became of every record
(records_in = duplicates_dropped + filtered_by_window + filtered_by_group + records_replayed +
quarantined + skipped_other_type), rows per table, and what ran. The Delta version each table
reached is in the commit metadata of that table (see `coordinator_audit.jobs.delta_io`)."""

BROKER_ACCOUNT_COLUMNS = StructType([
    StructField("broker_reason", StringType(), True),
    StructField("broker_cause", StringType(), True),
    StructField("broker_client_reason", StringType(), True),
    StructField("rebalance_started_at", LongType(), True),
    StructField("stabilized_at", LongType(), True),
    StructField("rebalance_duration_ms", LongType(), True),
    StructField("broker_member_count", IntegerType(), True),
])
"""The broker's own account of a generation (`coordinator_audit.core.broker_log.BrokerGeneration`), appended
to `generations` by the job (`coordinator_audit.udfs.broker_log.attach_broker_account`); null without a server log."""

DERIVED_TABLES: dict[str, type] = {
    "partition_ownership": OwnershipRow,
    "rebalances": RebalanceRow,
    "group_health": HealthRow,
}
"""Table name -> row dataclass, for the tables derived from the others (`coordinator_audit.udfs.history`, `coordinator_audit.udfs.derived`)."""

TABLE_SCHEMAS: dict[str, StructType] = {
    **{name: struct_type_from_dataclass(cls) for name, cls in AUDIT_TABLES.items()},
    **{name: struct_type_from_dataclass(cls) for name, cls in DERIVED_TABLES.items()},
    "runs": RUNS_SCHEMA,
}
TABLE_SCHEMAS["generations"] = StructType(TABLE_SCHEMAS["generations"].fields + BROKER_ACCOUNT_COLUMNS.fields)
"""Content schema of every output table (without the run columns)."""

MILLIS_COLUMNS: dict[str, tuple[str, ...]] = {
    "generations": ("state_timestamp", "record_timestamp", "ended_at", "assignment_timestamp", "reached_at",
                    "rebalance_started_at", "stabilized_at"),
    "assignments": ("valid_from", "valid_to", "pending_revocation_at"),
    "rebalance_causes": ("record_timestamp",),
    "violations": ("record_timestamp",),
    "offset_commits": ("first_commit_timestamp", "last_commit_timestamp"),
    "quarantine": ("timestamp",),
    "partition_ownership": ("valid_from", "valid_to"),
    "rebalances": ("started_at", "join_completed_at", "ended_at", "observed_at"),
    "group_health": ("last_commit_at",),
}
"""Per table, the columns holding a time as epoch milliseconds (durations such as `lifetime_ms` are
not times). `runs` holds Spark timestamps already."""


@typing.overload
def epoch_ms(t: datetime) -> int: ...
@typing.overload
def epoch_ms(t: None) -> None: ...
@typing.overload
def epoch_ms(t: datetime | None) -> int | None: ...
def epoch_ms(t: datetime | None) -> int | None:
    """Epoch milliseconds of a time (a run's window bound), None for None."""
    return None if t is None else int(t.timestamp() * 1000)


def time_column_name(millis_column: str) -> str:
    """The name of the TIMESTAMP companion of an epoch-milliseconds column (module docstring rule)."""
    if millis_column == "timestamp":
        return "time"
    if millis_column.endswith("_timestamp"):
        return millis_column.removesuffix("_timestamp") + "_time"
    return millis_column + "_time"


TIME_COMPANIONS: dict[str, tuple[tuple[str, str], ...]] = {
    table: tuple((c, time_column_name(c)) for c in columns) for table, columns in MILLIS_COLUMNS.items()
}
"""Per table, (milliseconds column, its TIMESTAMP companion)."""


def with_time_columns(df: Any, table: str) -> Any:
    """`df` (a table's content columns) with the TIMESTAMP companion of each of its epoch-ms columns
    appended (`TIME_COMPANIONS`); tables without any are returned as they are."""
    pairs = TIME_COMPANIONS.get(table, ())
    if not pairs:
        return df
    return df.selectExpr("*", *[f"timestamp_millis(`{ms}`) AS `{ts}`" for ms, ts in pairs])


RUN_COLUMNS = StructType([
    StructField("run_id", StringType(), False),
    StructField("run_window", StringType(), False),
])
"""Columns `coordinator_audit.jobs.delta_io` appends to every table but `runs` (which has run_id already, and gets
run_window only)."""


def stored_schema(table: str) -> StructType:
    """The schema of a table as stored in Delta: content columns, their TIMESTAMP companions, then
    run_id (not for runs) and run_window."""
    try:
        content = TABLE_SCHEMAS[table]
    except KeyError:
        raise KeyError(f"unknown table {table!r}; known: {sorted(TABLE_SCHEMAS)}") from None
    times = [StructField(ts, TimestampType(), content[ms].nullable) for ms, ts in TIME_COMPANIONS.get(table, ())]
    extra = [f for f in RUN_COLUMNS.fields if f.name not in content.fieldNames()]
    return StructType([*content.fields, *times, *extra])


# ------------------------------------------------------------------------------------------------
# decode UDF structs (coordinator_audit/udfs/decode.py)

_TOPIC_PARTITIONS = ArrayType(StructType([
    StructField("topic", StringType(), False),
    StructField("partitions", ArrayType(IntegerType(), False), False),
]), False)

SUBSCRIPTION_STRUCT = StructType([
    StructField("version", ShortType(), True),
    StructField("topics", ArrayType(StringType(), False), True),
    StructField("user_data", BinaryType(), True),
    StructField("owned_partitions", _TOPIC_PARTITIONS, True),
    StructField("generation_id", IntegerType(), True),
    StructField("rack_id", StringType(), True),
    StructField("error", StringType(), True),
])
"""ConsumerProtocolSubscription; all fields null and `error` set when the bytes do not decode."""

ASSIGNMENT_STRUCT = StructType([
    StructField("version", ShortType(), True),
    StructField("assigned_partitions", _TOPIC_PARTITIONS, True),
    StructField("user_data", BinaryType(), True),
    StructField("error", StringType(), True),
])
"""ConsumerProtocolAssignment; all fields null and `error` set when the bytes do not decode."""

_MEMBER = StructType([
    StructField("member_id", StringType(), False),
    StructField("group_instance_id", StringType(), True),
    StructField("client_id", StringType(), False),
    StructField("client_host", StringType(), False),
    StructField("rebalance_timeout", IntegerType(), False),
    StructField("session_timeout", IntegerType(), False),
    StructField("subscription", BinaryType(), False),
    StructField("assignment", BinaryType(), False),
])

RECORD_STRUCT = StructType([
    StructField("record_type", ShortType(), True),
    StructField("record_type_name", StringType(), True),
    StructField("key_version", ShortType(), True),
    StructField("value_version", ShortType(), True),
    StructField("tombstone", BooleanType(), True),
    StructField("group_id", StringType(), True),
    # offset commits (key types 0/1)
    StructField("topic", StringType(), True),
    StructField("partition", IntegerType(), True),
    StructField("offset", LongType(), True),
    StructField("leader_epoch", IntegerType(), True),
    StructField("metadata", StringType(), True),
    StructField("commit_timestamp", LongType(), True),
    StructField("expire_timestamp", LongType(), True),
    # group metadata (key type 2)
    StructField("protocol_type", StringType(), True),
    StructField("generation", IntegerType(), True),
    StructField("protocol", StringType(), True),
    StructField("leader", StringType(), True),
    StructField("current_state_timestamp", LongType(), True),
    StructField("members", ArrayType(_MEMBER, False), True),
    StructField("error", StringType(), True),
])
"""One decoded `__consumer_offsets` record: the fields of its kind are set, the others null;
a record that does not decode has every field null but `error` (and record_type when readable)."""



OFFSET_WINDOW_STRUCT = StructType([
    *[StructField(f.name, f.dataType, True) for f in struct_type_from_dataclass(OffsetCommitRow).fields],
    StructField("last_commit_source_offset", LongType(), True),
])
"""An offset window a run left open, as `group_state` keeps it: the open `offset_commits` row plus
the log offset of its last commit (a later regression's evidence cites it)."""

GROUP_STATE_SCHEMA = StructType([
    StructField("group_id", StringType(), False),
    StructField("auditor_state", StringType(), True),
    StructField("window_generation_id", IntegerType(), True),
    StructField("window_state", StringType(), True),
    StructField("window_partition", IntegerType(), True),
    StructField("window_start_offset", LongType(), True),
    StructField("window_value", BinaryType(), True),
    StructField("changed", BooleanType(), False),
    StructField("offset_windows", ArrayType(OFFSET_WINDOW_STRUCT, containsNull=False), False),
])
"""`group_state`: one row per group per run, what the next run resumes from (`coordinator_audit.jobs.nightly`):
`auditor_state` is `GroupAuditor.to_dict(summaries=False, record_value=False)` as JSON (the
record's value is `window_value`; state format 1 kept it inside too; earlier versions left it
null
for a group seen only through offset commits), the `window_*` columns the offset window open at the
run's end (its generation, state and opening GroupMetadata record), `changed` whether the run read
records of the group, and `offset_windows` the open window's offset summaries (what the replay
restores into the resumed audit, `GroupAuditor.restore_summaries`)."""
TABLE_SCHEMAS["group_state"] = GROUP_STATE_SCHEMA
