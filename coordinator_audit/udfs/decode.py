"""Vectorized Spark adapters over `coordinator_audit.core`, reusable in notebooks.

Each public function is a module-level factory returning an Arrow UDF (`pyspark.sql.functions.
arrow_udf`: a batch of Arrow arrays in, one Arrow array out); the decoding itself is
`coordinator_audit.core`'s, tested without Spark. Output structs are declared once in `coordinator_audit.udfs.schemas`.

    from coordinator_audit.udfs.decode import decode_record_udf, decode_subscription_udf, partition_for_udf
    decoded = df.select(decode_record_udf()("key", "value").alias("r")).select("r.*")
    members = decoded.select(F.explode("members").alias("m"))
    subs = members.select(decode_subscription_udf()("m.subscription").alias("s")).select("s.*")
    df.withColumn("offsets_partition", partition_for_udf(50)("group_id"))

A value that does not decode gives a struct whose fields are null but `error` (the codec's
message, naming schema, field and byte position), never a failed Spark task.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa  # module level: the UDFs' `pa.Array` type hints are resolved against it
from pyspark.sql.pandas.functions import arrow_udf
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import DataType

from coordinator_audit.core.audit import GroupSnapshot
from coordinator_audit.core.consumer_protocol import decode_assignment, decode_subscription
from coordinator_audit.core.errors import CoordinatorAuditError
from coordinator_audit.core.records import (
    OFFSETS_TOPIC_NUM_PARTITIONS,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode,
    partition_for,
)
from coordinator_audit.core.records_fast import group_metadata_header
from coordinator_audit.udfs.schemas import ASSIGNMENT_STRUCT, RECORD_STRUCT, SUBSCRIPTION_STRUCT

__all__ = [
    "decode_assignment_udf",
    "decode_record_udf",
    "decode_subscription_udf",
    "group_metadata_header_udf",
    "owners_udf",
    "partition_for_udf",
    "record_to_dict",
]


def _arrow_type(spark_type: DataType) -> pa.DataType:
    return to_arrow_type(spark_type, timezone="UTC")


def _scalar_arrow_udf(return_type: DataType | str) -> Callable[[Callable[..., pa.Array]], Any]:
    """`arrow_udf(return_type)` as a decorator: a scalar Arrow UDF whose kind pyspark reads from the
    decorated function's type hints (`pa.Array` in, `pa.Array` out)."""
    # pyspark's stubs declare only the forms with an explicit functionType, which pyspark itself
    # warns against ("It is preferred to specify type hints for arrow UDF"); the hint form has no overload.
    udf: Callable[[Callable[..., pa.Array]], Any] = arrow_udf(return_type)  # type: ignore[call-overload]
    return udf


def _blank(names: list[str], error: str) -> dict[str, Any]:
    out: dict[str, Any] = dict.fromkeys(names)
    out["error"] = error
    return out


def record_to_dict(key: bytes | None, value: bytes | None) -> dict[str, Any]:
    """One record as a RECORD_STRUCT-shaped dict (pure; what `decode_record_udf` maps per row)."""
    names = RECORD_STRUCT.fieldNames()
    out: dict[str, Any] = dict.fromkeys(names)
    if key is None:
        out["error"] = "null key"
        return out
    if len(key) >= 2:
        out["record_type"] = int.from_bytes(key[:2], "big", signed=True)
    try:
        rec = decode(bytes(key), None if value is None else bytes(value))
    except CoordinatorAuditError as exc:
        out["error"] = str(exc)
        return out
    out.update(record_type_name=rec.record_type_name, key_version=rec.key_version,
               value_version=rec.value_version, tombstone=rec.value is None)
    k, v = rec.key, rec.value
    if isinstance(k, OffsetCommitKey):
        out.update(group_id=k.group, topic=k.topic, partition=k.partition)
        if isinstance(v, OffsetCommitValue):
            out.update(offset=v.offset, leader_epoch=v.leader_epoch, metadata=v.metadata,
                       commit_timestamp=v.commit_timestamp, expire_timestamp=v.expire_timestamp)
    elif isinstance(k, GroupMetadataKey):
        out["group_id"] = k.group
        if isinstance(v, GroupMetadataValue):
            out.update(protocol_type=v.protocol_type, generation=v.generation, protocol=v.protocol,
                       leader=v.leader, current_state_timestamp=v.current_state_timestamp,
                       members=[{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                                 "client_id": m.client_id, "client_host": m.client_host,
                                 "rebalance_timeout": m.rebalance_timeout, "session_timeout": m.session_timeout,
                                 "subscription": m.subscription, "assignment": m.assignment}
                                for m in v.members])
    else:
        group = getattr(k, "group", None) or getattr(k, "group_id", None)
        out["group_id"] = group if isinstance(group, str) else None
    return out


def _topic_partitions(entries: Any) -> list[dict[str, Any]]:
    return [{"topic": e.topic, "partitions": list(e.partitions)} for e in entries]


def _subscription_dict(data: bytes | None) -> dict[str, Any] | None:
    if data is None:
        return None
    try:
        s = decode_subscription(bytes(data))
    except CoordinatorAuditError as exc:
        return _blank(SUBSCRIPTION_STRUCT.fieldNames(), str(exc))
    return {"version": s.version, "topics": list(s.topics), "user_data": s.user_data,
            "owned_partitions": _topic_partitions(s.owned_partitions), "generation_id": s.generation_id,
            "rack_id": s.rack_id, "error": None}


def _assignment_dict(data: bytes | None) -> dict[str, Any] | None:
    if data is None:
        return None
    if len(data) == 0:  # a member the leader gave nothing (classicGroupSyncToClassicGroup: EMPTY_ASSIGNMENT)
        return {"version": None, "assigned_partitions": [], "user_data": None, "error": None}
    try:
        a = decode_assignment(bytes(data))
    except CoordinatorAuditError as exc:
        return _blank(ASSIGNMENT_STRUCT.fieldNames(), str(exc))
    return {"version": a.version, "assigned_partitions": _topic_partitions(a.assigned_partitions),
            "user_data": a.user_data, "error": None}


def decode_record_udf() -> Any:
    """UDF (key binary, value binary) -> RECORD_STRUCT: `coordinator_audit.core.records.decode` per row."""
    out_type = _arrow_type(RECORD_STRUCT)

    @_scalar_arrow_udf(RECORD_STRUCT)
    def decode_record(keys: pa.Array, values: pa.Array) -> pa.Array:
        return pa.array([record_to_dict(k, v) for k, v in zip(keys.to_pylist(), values.to_pylist(), strict=True)],
                        type=out_type)

    return decode_record


def decode_subscription_udf() -> Any:
    """UDF (binary) -> SUBSCRIPTION_STRUCT: `coordinator_audit.core.consumer_protocol.decode_subscription`."""
    out_type = _arrow_type(SUBSCRIPTION_STRUCT)

    @_scalar_arrow_udf(SUBSCRIPTION_STRUCT)
    def decode_subscription_bytes(data: pa.Array) -> pa.Array:
        return pa.array([_subscription_dict(d) for d in data.to_pylist()], type=out_type)

    return decode_subscription_bytes


def decode_assignment_udf() -> Any:
    """UDF (binary) -> ASSIGNMENT_STRUCT: `coordinator_audit.core.consumer_protocol.decode_assignment`."""
    out_type = _arrow_type(ASSIGNMENT_STRUCT)

    @_scalar_arrow_udf(ASSIGNMENT_STRUCT)
    def decode_assignment_bytes(data: pa.Array) -> pa.Array:
        return pa.array([_assignment_dict(d) for d in data.to_pylist()], type=out_type)

    return decode_assignment_bytes


def partition_for_udf(num_partitions: int = OFFSETS_TOPIC_NUM_PARTITIONS) -> Any:
    """UDF (group id string) -> int: the group's `__consumer_offsets` partition
    (`coordinator_audit.core.records.partition_for`); null for a null group."""
    partition_for("", num_partitions)  # validates num_partitions here, not inside a task

    @_scalar_arrow_udf("int")
    def partition_of(groups: pa.Array) -> pa.Array:
        return pa.array([None if g is None else partition_for(g, num_partitions) for g in groups.to_pylist()],
                        type=pa.int32())

    return partition_of


def group_metadata_header_udf() -> Any:
    """UDF (key binary, value binary) -> struct<generation int, member_count int>:
    `group_metadata_header` per row; null when it gives None."""
    out_type = pa.struct([("generation", pa.int32()), ("member_count", pa.int32())])

    @_scalar_arrow_udf("struct<generation int, member_count int>")
    def header(keys: pa.Array, values: pa.Array) -> pa.Array:
        out: list[dict[str, int] | None] = []
        for k, v in zip(keys.to_pylist(), values.to_pylist(), strict=True):
            h = None if k is None else group_metadata_header(k, v)
            out.append(None if h is None else {"generation": h[0], "member_count": h[1]})
        return pa.array(out, type=out_type)

    return header


def owners_udf() -> Any:
    """UDF (GroupMetadata value binary, group id, topic, partition) -> array<string>: the members
    the record assigns that partition to (`GroupSnapshot.owner_ids`), empty when none or unreadable."""
    @_scalar_arrow_udf("array<string>")
    def owners(values: pa.Array, groups: pa.Array, topics: pa.Array, partitions: pa.Array) -> pa.Array:
        cache: dict[tuple[bytes, str], dict[tuple[str, int], tuple[str, ...]]] = {}
        out: list[list[str]] = []
        for v, g, t, p in zip(values.to_pylist(), groups.to_pylist(), topics.to_pylist(), partitions.to_pylist(),
                              strict=True):
            if v is None or g is None:
                out.append([])
                continue
            key = (v, g)
            table = cache.get(key)
            if table is None:
                try:
                    table = GroupSnapshot.from_value_bytes(v, group_id=g).owner_ids()
                except CoordinatorAuditError:
                    table = {}
                cache[key] = table
            out.append(list(table.get((t, p), ())))
        return pa.array(out, type=pa.list_(pa.string()))

    return owners
