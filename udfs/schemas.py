"""Spark schemas, declared once: the Kafka-source input, the output tables, and the decode UDFs' structs.

The four audit tables plus `offset_commits` and `quarantine` are derived from the row dataclasses of
`coordinator_core.audit.rows` by `struct_type_from_dataclass`, so a column added to a row class
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

Stored tables carry two more columns, appended by `jobs.delta_io` (`stored_schema`): `run_id`
(the run that wrote the row) and `run_window` (the partition column; see `jobs.delta_io`).
"""

from __future__ import annotations

import dataclasses
import types
import typing
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

from coordinator_core.audit.rows import (
    AssignmentRow,
    GenerationRow,
    OffsetCommitRow,
    QuarantineRow,
    RebalanceCauseRow,
    ViolationRow,
)
from udfs.history import HealthRow, OwnershipRow, RebalanceRow

__all__ = [
    "ASSIGNMENT_STRUCT",
    "AUDIT_TABLES",
    "DERIVED_TABLES",
    "INT32_NAME_SUFFIXES",
    "KAFKA_SOURCE_SCHEMA",
    "OFFSET_COMMIT_STRUCT",
    "RECORD_STRUCT",
    "RUNS_SCHEMA",
    "RUN_COLUMNS",
    "SUBSCRIPTION_STRUCT",
    "TABLE_SCHEMAS",
    "spark_type_for_field",
    "stored_schema",
    "struct_type_from_dataclass",
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
        args = typing.get_args(annotation)
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            raise TypeError(f"field {name!r}: only homogeneous tuple[X, ...] maps to an array, got {annotation!r}")
        element, element_nullable = spark_type_for_field(name, args[0])
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
"""Table name -> row dataclass, for the tables whose rows `coordinator_core.audit` produces."""

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
])
"""One row per run (appended, never replaced): what was read, what became of every record
(records_in = duplicates_dropped + filtered_by_window + filtered_by_group + records_replayed +
quarantined + skipped_other_type), rows per table, and what ran. The Delta version each table
reached is in the commit metadata of that table (see `jobs.delta_io`)."""

DERIVED_TABLES: dict[str, type] = {
    "partition_ownership": OwnershipRow,
    "rebalances": RebalanceRow,
    "group_health": HealthRow,
}
"""Table name -> row dataclass, for the tables derived from the others (`udfs.history`, `udfs.derived`)."""

TABLE_SCHEMAS: dict[str, StructType] = {
    **{name: struct_type_from_dataclass(cls) for name, cls in AUDIT_TABLES.items()},
    **{name: struct_type_from_dataclass(cls) for name, cls in DERIVED_TABLES.items()},
    "runs": RUNS_SCHEMA,
}
"""Content schema of every output table (without the run columns)."""

RUN_COLUMNS = StructType([
    StructField("run_id", StringType(), False),
    StructField("run_window", StringType(), False),
])
"""Columns `jobs.delta_io` appends to every table but `runs` (which has run_id already, and gets
run_window only)."""


def stored_schema(table: str) -> StructType:
    """The schema of a table as stored in Delta: content columns, then run_id (not for runs) and run_window."""
    try:
        content = TABLE_SCHEMAS[table]
    except KeyError:
        raise KeyError(f"unknown table {table!r}; known: {sorted(TABLE_SCHEMAS)}") from None
    extra = [f for f in RUN_COLUMNS.fields if f.name not in content.fieldNames()]
    return StructType([*content.fields, *extra])


# ------------------------------------------------------------------------------------------------
# decode UDF structs (udfs/decode.py)

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

OFFSET_COMMIT_STRUCT = StructType([
    StructField("value_version", ShortType(), True),
    StructField("offset", LongType(), True),
    StructField("leader_epoch", IntegerType(), True),
    StructField("metadata_length", IntegerType(), True),
    StructField("commit_timestamp", LongType(), True),
    StructField("expire_timestamp", LongType(), True),
])
"""The SQL decode of an OffsetCommitValue (`jobs.offsets_path.decode_offset_commits`)."""
