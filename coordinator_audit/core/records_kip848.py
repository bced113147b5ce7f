"""KIP-848 consumer-group records (key types 3–8) and the regular-expression record (type 16), as
laid out in ConsumerGroup*Key.json / ConsumerGroup*Value.json of Kafka's group-coordinator module
at releases 4.0–4.4: keys are classic (int16-length strings) after the int16 record type; values
are flexible v0 (compact encodings, a tagged-field section closing every struct).

Every change across those releases added a tagged field, so one layout reads them all:
`ConsumerGroupMetadataValue.metadata_hash` (tag 0, 4.1, KIP-1101; 4.1+ brokers stop writing type 4),
`ConsumerGroupTargetAssignmentMetadataValue.assignment_timestamp` (tag 0, 4.3, KIP-1263) and the
per-topic `assignment_epochs` of a member's current assignment (tag 0, 4.3). The 3.8 and 3.9
previews wrote 4.0's layouts (type 16 came with 4.0). A value of the 3.7 preview's layouts
(PartitionMetadata with a leading Epoch, MemberMetadata with an `Assignors` array) fails to decode
with a `RecordDecodeError` rather than being misread.

`coordinator_key` and `coordinator_value` declare the key and value schemas of every group record
type (share and streams groups too).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TypeAlias, TypeVar

from coordinator_audit.core.wire import Array, Field, Message, Struct

T = TypeVar("T")

RawTags = tuple[tuple[int, bytes], ...]

# ---------------------------------------------------------------------------------------------
# keys (one per record type; the field is GroupId, plus MemberId where the table lists it)


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionKey:
    group_id: str
    regular_expression: str


# ---------------------------------------------------------------------------------------------
# values


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    epoch: int
    metadata_hash: int = 0  # tagged field 0 (4.1+)
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    partition: int
    racks: tuple[str, ...]
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: uuid.UUID
    topic_name: str
    num_partitions: int
    partition_metadata: tuple[PartitionMetadata, ...]
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataValue:
    topics: tuple[TopicMetadata, ...]
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class ClassicProtocol:
    name: str
    metadata: bytes
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    session_timeout_ms: int
    supported_protocols: tuple[ClassicProtocol, ...]
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic_member_metadata: ClassicMemberMetadata | None = None  # tagged field 0 (absent: the empty struct)
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    assignment_epoch: int
    assignment_timestamp: int = 0  # tagged field 0 (4.3+)
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class TopicIdPartitions:
    topic_id: uuid.UUID
    partitions: tuple[int, ...]
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class CurrentTopicPartitions:
    """A topic's partitions in a member's current assignment (type 8); `assignment_epochs` (4.3+)
    holds the epoch each partition was assigned at, in the order of `partitions` (empty when the
    tag is absent, None when written as null)."""

    topic_id: uuid.UUID
    partitions: tuple[int, ...]
    assignment_epochs: tuple[int, ...] | None = ()  # tagged field 0 (4.3+)
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    topic_partitions: tuple[TopicIdPartitions, ...]
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: tuple[CurrentTopicPartitions, ...]
    partitions_pending_revocation: tuple[CurrentTopicPartitions, ...]
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionValue:
    topics: tuple[str, ...]
    version: int
    timestamp: int
    unknown_tagged_fields: RawTags = ()


Kip848Key: TypeAlias = (
    ConsumerGroupMetadataKey | ConsumerGroupPartitionMetadataKey | ConsumerGroupMemberMetadataKey
    | ConsumerGroupTargetAssignmentMetadataKey | ConsumerGroupTargetAssignmentMemberKey
    | ConsumerGroupCurrentMemberAssignmentKey | ConsumerGroupRegularExpressionKey)
"""Every key class this module decodes (one per record type in `KIP848_SCHEMAS`)."""

Kip848Value: TypeAlias = (
    ConsumerGroupMetadataValue | ConsumerGroupPartitionMetadataValue | ConsumerGroupMemberMetadataValue
    | ConsumerGroupTargetAssignmentMetadataValue | ConsumerGroupTargetAssignmentMemberValue
    | ConsumerGroupCurrentMemberAssignmentValue | ConsumerGroupRegularExpressionValue)
"""Every value class this module decodes (one per record type in `KIP848_SCHEMAS`)."""


# ---------------------------------------------------------------------------------------------
# schemas, declared once


def coordinator_key(name: str, cls: type[T], record_type: int, *field_names: str) -> Message[T]:
    """A group record's key: non-null int16-length strings; read and written at version
    `record_type` (the int16 in front of a key is its record type)."""
    v = str(record_type)
    return Message(Struct(name, tuple(Field(n, "string", v) for n in field_names), cls), valid=v)


def coordinator_value(name: str, cls: type[T], *fields: Field) -> Message[T]:
    """A group record's value: version 0, flexible."""
    return Message(Struct(name, fields, cls), valid="0", flexible="0+")


def tagged(name: str, ftype: str | Array | Struct[object], tag: int, default: object, *,
           nullable: bool = False) -> Field:
    """A tagged field present at every version. `default` is what an absent tag reads as and what
    is left out when written. A nullable array or struct whose schema default is JSON null has the
    empty array or struct as that default, and Kafka writes its None as a tag holding a null marker."""
    return Field(name, ftype, nullable="0+" if nullable else "none", default=default, tag=tag, tagged="0+")


_TOPIC_ID_PARTITIONS = Struct("TopicPartitions", (
    Field("topic_id", "uuid"),
    Field("partitions", Array("int32")),
), TopicIdPartitions)

_CURRENT_TOPIC_PARTITIONS = Struct("TopicPartitions", (
    Field("topic_id", "uuid"),
    Field("partitions", Array("int32")),
    tagged("assignment_epochs", Array("int32"), 0, (), nullable=True),
), CurrentTopicPartitions)

_CLASSIC_MEMBER_METADATA = Struct("ClassicMemberMetadata", (
    Field("session_timeout_ms", "int32"),
    Field("supported_protocols", Array(Struct("ClassicProtocol", (
        Field("name", "string"),
        Field("metadata", "bytes"),
    ), ClassicProtocol))),
), ClassicMemberMetadata)

# record type -> (key schema, value schema); the key's version on the wire is the record type
KIP848_SCHEMAS: dict[int, tuple[Message[Kip848Key], Message[Kip848Value]]] = {
    3: (coordinator_key("ConsumerGroupMetadataKey", ConsumerGroupMetadataKey, 3, "group_id"),
        coordinator_value("ConsumerGroupMetadataValue", ConsumerGroupMetadataValue,
               Field("epoch", "int32"),
               tagged("metadata_hash", "int64", 0, 0))),
    4: (coordinator_key("ConsumerGroupPartitionMetadataKey", ConsumerGroupPartitionMetadataKey, 4, "group_id"),
        coordinator_value("ConsumerGroupPartitionMetadataValue", ConsumerGroupPartitionMetadataValue,
               Field("topics", Array(Struct("TopicMetadata", (
                   Field("topic_id", "uuid"),
                   Field("topic_name", "string"),
                   Field("num_partitions", "int32"),
                   Field("partition_metadata", Array(Struct("PartitionMetadata", (
                       Field("partition", "int32"),
                       Field("racks", Array("string")),
                   ), PartitionMetadata))),
               ), TopicMetadata))))),
    5: (coordinator_key("ConsumerGroupMemberMetadataKey", ConsumerGroupMemberMetadataKey, 5, "group_id", "member_id"),
        coordinator_value("ConsumerGroupMemberMetadataValue", ConsumerGroupMemberMetadataValue,
               Field("instance_id", "string", nullable="0+"),
               Field("rack_id", "string", nullable="0+"),
               Field("client_id", "string"),
               Field("client_host", "string"),
               Field("subscribed_topic_names", Array("string")),
               Field("subscribed_topic_regex", "string", nullable="0+"),
               Field("rebalance_timeout_ms", "int32"),
               Field("server_assignor", "string", nullable="0+"),
               tagged("classic_member_metadata", _CLASSIC_MEMBER_METADATA, 0, ClassicMemberMetadata(0, ()),
                      nullable=True))),
    6: (coordinator_key("ConsumerGroupTargetAssignmentMetadataKey", ConsumerGroupTargetAssignmentMetadataKey, 6,
             "group_id"),
        coordinator_value("ConsumerGroupTargetAssignmentMetadataValue", ConsumerGroupTargetAssignmentMetadataValue,
               Field("assignment_epoch", "int32"),
               tagged("assignment_timestamp", "int64", 0, 0))),
    7: (coordinator_key("ConsumerGroupTargetAssignmentMemberKey", ConsumerGroupTargetAssignmentMemberKey, 7,
             "group_id", "member_id"),
        coordinator_value("ConsumerGroupTargetAssignmentMemberValue", ConsumerGroupTargetAssignmentMemberValue,
               Field("topic_partitions", Array(_TOPIC_ID_PARTITIONS)))),
    8: (coordinator_key("ConsumerGroupCurrentMemberAssignmentKey", ConsumerGroupCurrentMemberAssignmentKey, 8,
             "group_id", "member_id"),
        coordinator_value("ConsumerGroupCurrentMemberAssignmentValue", ConsumerGroupCurrentMemberAssignmentValue,
               Field("member_epoch", "int32"),
               Field("previous_member_epoch", "int32"),
               Field("state", "int8"),
               Field("assigned_partitions", Array(_CURRENT_TOPIC_PARTITIONS)),
               Field("partitions_pending_revocation", Array(_CURRENT_TOPIC_PARTITIONS)))),
    16: (coordinator_key("ConsumerGroupRegularExpressionKey", ConsumerGroupRegularExpressionKey, 16,
              "group_id", "regular_expression"),
         coordinator_value("ConsumerGroupRegularExpressionValue", ConsumerGroupRegularExpressionValue,
                Field("topics", Array("string")),
                Field("version", "int64"),
                Field("timestamp", "int64"))),
}

KIP848_KEY_CLASSES: dict[type[Kip848Key], int] = {
    ConsumerGroupMetadataKey: 3, ConsumerGroupPartitionMetadataKey: 4, ConsumerGroupMemberMetadataKey: 5,
    ConsumerGroupTargetAssignmentMetadataKey: 6, ConsumerGroupTargetAssignmentMemberKey: 7,
    ConsumerGroupCurrentMemberAssignmentKey: 8, ConsumerGroupRegularExpressionKey: 16,
}
KIP848_VALUE_CLASSES: dict[type[Kip848Value], int] = {
    ConsumerGroupMetadataValue: 3, ConsumerGroupPartitionMetadataValue: 4, ConsumerGroupMemberMetadataValue: 5,
    ConsumerGroupTargetAssignmentMetadataValue: 6, ConsumerGroupTargetAssignmentMemberValue: 7,
    ConsumerGroupCurrentMemberAssignmentValue: 8, ConsumerGroupRegularExpressionValue: 16,
}
assert all(KIP848_SCHEMAS[t][0].root.factory is c for c, t in KIP848_KEY_CLASSES.items())
assert all(KIP848_SCHEMAS[t][1].root.factory is c for c, t in KIP848_VALUE_CLASSES.items())
