"""Share-group records (KIP-932, key types 9–15), as laid out in ShareGroup*Key.json /
ShareGroup*Value.json of Kafka's group-coordinator module at releases 4.0–4.4; keys and values
are encoded like the consumer-group records (`coordinator_key`, `coordinator_value`).

Share groups were early access in 4.0, and 4.1 changed two value layouts without a new version
(both stay v0), so the same bytes can mean different fields:

* ShareGroupMetadataValue (11): 4.0 holds Epoch; 4.1+ holds Epoch then an untagged int64
  MetadataHash (`metadata_hash`).
* ShareGroupStatePartitionMetadataValue (15): 4.0 holds InitializedTopics, DeletingTopics; 4.1+
  puts InitializingTopics (`initializing_topics`) in front of them.

4.1 also stopped writing ShareGroupPartitionMetadata (9), which only 4.0 knows. For types 11 and
15, `LEGACY_LAYOUTS` names the 4.0 schema and the field that tells the layouts apart;
`coordinator_audit.core.records` decodes such a value by what its bytes prove (the one layout that reads
every byte) and otherwise raises `RecordDecodeError` naming that field.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TypeAlias

from coordinator_audit.core.records_kip848 import (
    PartitionMetadata,
    RawTags,
    TopicIdPartitions,
    TopicMetadata,
    coordinator_key,
    coordinator_value,
    tagged,
)
from coordinator_audit.core.wire import Array, Field, Message, Struct

# ---------------------------------------------------------------------------------------------
# keys


@dataclass(frozen=True, slots=True)
class ShareGroupPartitionMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataKey:
    group_id: str


# ---------------------------------------------------------------------------------------------
# values


@dataclass(frozen=True, slots=True)
class ShareGroupPartitionMetadataValue:
    """Type 9, written by 4.0 only: the subscribed topics' partitions and racks."""

    topics: tuple[TopicMetadata, ...]
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataValue:
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataValue:
    """Type 11 as 4.1+ writes it."""

    epoch: int
    metadata_hash: int
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataValue40:
    """Type 11 as 4.0 wrote it: no metadata hash."""

    epoch: int
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataValue:
    assignment_epoch: int
    assignment_timestamp: int = 0  # tagged field 0 (4.3+)
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberValue:
    topic_partitions: tuple[TopicIdPartitions, ...]
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: tuple[TopicIdPartitions, ...]
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class TopicPartitionsInfo:
    topic_id: uuid.UUID
    topic_name: str
    partitions: tuple[int, ...]
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class TopicInfo:
    topic_id: uuid.UUID
    topic_name: str
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataValue:
    """Type 15 as 4.1+ writes it."""

    initializing_topics: tuple[TopicPartitionsInfo, ...]
    initialized_topics: tuple[TopicPartitionsInfo, ...]
    deleting_topics: tuple[TopicInfo, ...]
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataValue40:
    """Type 15 as 4.0 wrote it: no topics being initialized."""

    initialized_topics: tuple[TopicPartitionsInfo, ...]
    deleting_topics: tuple[TopicInfo, ...]
    unknown_tagged_fields: RawTags = ()


ShareKey: TypeAlias = (
    ShareGroupPartitionMetadataKey | ShareGroupMemberMetadataKey | ShareGroupMetadataKey
    | ShareGroupTargetAssignmentMetadataKey | ShareGroupTargetAssignmentMemberKey
    | ShareGroupCurrentMemberAssignmentKey | ShareGroupStatePartitionMetadataKey)
"""Every key class this module decodes."""

ShareValue: TypeAlias = (
    ShareGroupPartitionMetadataValue | ShareGroupMemberMetadataValue | ShareGroupMetadataValue
    | ShareGroupMetadataValue40 | ShareGroupTargetAssignmentMetadataValue | ShareGroupTargetAssignmentMemberValue
    | ShareGroupCurrentMemberAssignmentValue | ShareGroupStatePartitionMetadataValue
    | ShareGroupStatePartitionMetadataValue40)
"""Every value class this module decodes (4.0's layouts of types 11 and 15 included)."""


# ---------------------------------------------------------------------------------------------
# schemas, declared once

_TOPIC_METADATA = Struct("TopicMetadata", (
    Field("topic_id", "uuid"),
    Field("topic_name", "string"),
    Field("num_partitions", "int32"),
    Field("partition_metadata", Array(Struct("PartitionMetadata", (
        Field("partition", "int32"),
        Field("racks", Array("string")),
    ), PartitionMetadata))),
), TopicMetadata)

_TOPIC_ID_PARTITIONS = Struct("TopicPartitions", (
    Field("topic_id", "uuid"),
    Field("partitions", Array("int32")),
), TopicIdPartitions)

_TOPIC_PARTITIONS_INFO = Struct("TopicPartitionsInfo", (
    Field("topic_id", "uuid"),
    Field("topic_name", "string"),
    Field("partitions", Array("int32")),
), TopicPartitionsInfo)

_TOPIC_INFO = Struct("TopicInfo", (
    Field("topic_id", "uuid"),
    Field("topic_name", "string"),
), TopicInfo)

# record type -> (key schema, value schema as 4.1+ writes it; type 9 as 4.0 wrote it)
SHARE_SCHEMAS: dict[int, tuple[Message[ShareKey], Message[ShareValue]]] = {
    9: (coordinator_key("ShareGroupPartitionMetadataKey", ShareGroupPartitionMetadataKey, 9, "group_id"),
        coordinator_value("ShareGroupPartitionMetadataValue", ShareGroupPartitionMetadataValue,
                          Field("topics", Array(_TOPIC_METADATA)))),
    10: (coordinator_key("ShareGroupMemberMetadataKey", ShareGroupMemberMetadataKey, 10, "group_id", "member_id"),
         coordinator_value("ShareGroupMemberMetadataValue", ShareGroupMemberMetadataValue,
                           Field("rack_id", "string", nullable="0+"),
                           Field("client_id", "string"),
                           Field("client_host", "string"),
                           Field("subscribed_topic_names", Array("string")))),
    11: (coordinator_key("ShareGroupMetadataKey", ShareGroupMetadataKey, 11, "group_id"),
         coordinator_value("ShareGroupMetadataValue", ShareGroupMetadataValue,
                           Field("epoch", "int32"),
                           Field("metadata_hash", "int64"))),
    12: (coordinator_key("ShareGroupTargetAssignmentMetadataKey", ShareGroupTargetAssignmentMetadataKey, 12,
                         "group_id"),
         coordinator_value("ShareGroupTargetAssignmentMetadataValue", ShareGroupTargetAssignmentMetadataValue,
                           Field("assignment_epoch", "int32"),
                           tagged("assignment_timestamp", "int64", 0, 0))),
    13: (coordinator_key("ShareGroupTargetAssignmentMemberKey", ShareGroupTargetAssignmentMemberKey, 13,
                         "group_id", "member_id"),
         coordinator_value("ShareGroupTargetAssignmentMemberValue", ShareGroupTargetAssignmentMemberValue,
                           Field("topic_partitions", Array(_TOPIC_ID_PARTITIONS)))),
    14: (coordinator_key("ShareGroupCurrentMemberAssignmentKey", ShareGroupCurrentMemberAssignmentKey, 14,
                         "group_id", "member_id"),
         coordinator_value("ShareGroupCurrentMemberAssignmentValue", ShareGroupCurrentMemberAssignmentValue,
                           Field("member_epoch", "int32"),
                           Field("previous_member_epoch", "int32"),
                           Field("state", "int8"),
                           Field("assigned_partitions", Array(_TOPIC_ID_PARTITIONS)))),
    15: (coordinator_key("ShareGroupStatePartitionMetadataKey", ShareGroupStatePartitionMetadataKey, 15,
                         "group_id"),
         coordinator_value("ShareGroupStatePartitionMetadataValue", ShareGroupStatePartitionMetadataValue,
                           Field("initializing_topics", Array(_TOPIC_PARTITIONS_INFO)),
                           Field("initialized_topics", Array(_TOPIC_PARTITIONS_INFO)),
                           Field("deleting_topics", Array(_TOPIC_INFO)))),
}

# record type -> (4.0's value schema, the 4.1+ field it lacks)
LEGACY_LAYOUTS: dict[int, tuple[Message[ShareValue], str]] = {
    11: (coordinator_value("ShareGroupMetadataValue40", ShareGroupMetadataValue40,
                           Field("epoch", "int32")), "metadata_hash"),
    15: (coordinator_value("ShareGroupStatePartitionMetadataValue40", ShareGroupStatePartitionMetadataValue40,
                           Field("initialized_topics", Array(_TOPIC_PARTITIONS_INFO)),
                           Field("deleting_topics", Array(_TOPIC_INFO))), "initializing_topics"),
}

SHARE_KEY_CLASSES: dict[type[ShareKey], int] = {
    ShareGroupPartitionMetadataKey: 9, ShareGroupMemberMetadataKey: 10, ShareGroupMetadataKey: 11,
    ShareGroupTargetAssignmentMetadataKey: 12, ShareGroupTargetAssignmentMemberKey: 13,
    ShareGroupCurrentMemberAssignmentKey: 14, ShareGroupStatePartitionMetadataKey: 15,
}
SHARE_VALUE_CLASSES: dict[type[ShareValue], int] = {
    ShareGroupPartitionMetadataValue: 9, ShareGroupMemberMetadataValue: 10, ShareGroupMetadataValue: 11,
    ShareGroupMetadataValue40: 11, ShareGroupTargetAssignmentMetadataValue: 12,
    ShareGroupTargetAssignmentMemberValue: 13, ShareGroupCurrentMemberAssignmentValue: 14,
    ShareGroupStatePartitionMetadataValue: 15, ShareGroupStatePartitionMetadataValue40: 15,
}
assert all(SHARE_SCHEMAS[t][0].root.factory is c for c, t in SHARE_KEY_CLASSES.items())
assert all(SHARE_SCHEMAS[t][1].root.factory is c or LEGACY_LAYOUTS[t][0].root.factory is c
           for c, t in SHARE_VALUE_CLASSES.items())
