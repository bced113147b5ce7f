"""Streams-group records (KIP-1071, key types 17 and 19–23), as laid out in StreamsGroup*Key.json /
StreamsGroup*Value.json of Kafka's group-coordinator module at releases 4.1–4.4 (4.0 writes none);
keys and values are encoded like the consumer-group records (`coordinator_key`,
`coordinator_value`). Type 18 was never released.

Every change across those releases added a tagged field, so one layout reads them all:
StreamsGroupMetadataValue's `validated_topology_epoch` (tag 0) and `last_assignment_configs`
(tag 1) in 4.2, `stored_description_topology_epoch` (tag 2) and `failed_description_topology_epoch`
(tag 3) in 4.4; StreamsGroupTargetAssignmentMetadataValue's `assignment_timestamp` (tag 0, 4.3); the
`assignment_epochs` of a member's current active tasks (tag 0, 4.2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from coordinator_audit.core.records_kip848 import RawTags, coordinator_key, coordinator_value, tagged
from coordinator_audit.core.wire import Array, Field, Message, Struct

# ---------------------------------------------------------------------------------------------
# keys


@dataclass(frozen=True, slots=True)
class StreamsGroupMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class StreamsGroupMemberMetadataKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class StreamsGroupTargetAssignmentMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class StreamsGroupTargetAssignmentMemberKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class StreamsGroupCurrentMemberAssignmentKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class StreamsGroupTopologyKey:
    group_id: str


# ---------------------------------------------------------------------------------------------
# values


@dataclass(frozen=True, slots=True)
class KeyValue:
    """A string pair: a LastAssignmentConfig, a ClientTags entry or a TopicConfig."""

    key: str
    value: str
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class StreamsGroupMetadataValue:
    epoch: int
    metadata_hash: int
    validated_topology_epoch: int = -1  # tagged field 0 (4.2+)
    last_assignment_configs: tuple[KeyValue, ...] | None = ()  # tagged field 1 (4.2+)
    stored_description_topology_epoch: int = -1  # tagged field 2 (4.4+)
    failed_description_topology_epoch: int = -1  # tagged field 3 (4.4+)
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class StreamsGroupMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    topology_epoch: int
    process_id: str
    user_endpoint: Endpoint | None
    client_tags: tuple[KeyValue, ...]
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class StreamsGroupTargetAssignmentMetadataValue:
    assignment_epoch: int
    assignment_timestamp: int = 0  # tagged field 0 (4.3+)
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class TaskIds:
    """A subtopology's tasks (by partition) in a target assignment (type 21)."""

    subtopology_id: str
    partitions: tuple[int, ...]
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class CurrentTaskIds:
    """A subtopology's tasks in a member's current assignment (type 22); `assignment_epochs` (4.2+,
    active tasks) holds the epoch each was assigned at, in the order of `partitions` (empty when the
    tag is absent, None when written as null)."""

    subtopology_id: str
    partitions: tuple[int, ...]
    assignment_epochs: tuple[int, ...] | None = ()  # tagged field 0 (4.2+)
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class StreamsGroupTargetAssignmentMemberValue:
    active_tasks: tuple[TaskIds, ...]
    standby_tasks: tuple[TaskIds, ...]
    warmup_tasks: tuple[TaskIds, ...]
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class StreamsGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    active_tasks: tuple[CurrentTaskIds, ...]
    standby_tasks: tuple[CurrentTaskIds, ...]
    warmup_tasks: tuple[CurrentTaskIds, ...]
    active_tasks_pending_revocation: tuple[CurrentTaskIds, ...]
    standby_tasks_pending_revocation: tuple[CurrentTaskIds, ...]
    warmup_tasks_pending_revocation: tuple[CurrentTaskIds, ...]
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    partitions: int
    replication_factor: int
    topic_configs: tuple[KeyValue, ...]
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class CopartitionGroup:
    """Indexes into the subtopology's source topics, source regexes and repartition source topics."""

    source_topics: tuple[int, ...]
    source_topic_regex: tuple[int, ...]
    repartition_source_topics: tuple[int, ...]
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class Subtopology:
    subtopology_id: str
    source_topics: tuple[str, ...]
    source_topic_regex: tuple[str, ...]
    state_changelog_topics: tuple[TopicInfo, ...]
    repartition_sink_topics: tuple[str, ...]
    repartition_source_topics: tuple[TopicInfo, ...]
    copartition_groups: tuple[CopartitionGroup, ...]
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class StreamsGroupTopologyValue:
    epoch: int
    subtopologies: tuple[Subtopology, ...]
    unknown_tagged_fields: RawTags = ()


StreamsKey: TypeAlias = (
    StreamsGroupMetadataKey | StreamsGroupMemberMetadataKey | StreamsGroupTargetAssignmentMetadataKey
    | StreamsGroupTargetAssignmentMemberKey | StreamsGroupCurrentMemberAssignmentKey | StreamsGroupTopologyKey)
"""Every key class this module decodes."""

StreamsValue: TypeAlias = (
    StreamsGroupMetadataValue | StreamsGroupMemberMetadataValue | StreamsGroupTargetAssignmentMetadataValue
    | StreamsGroupTargetAssignmentMemberValue | StreamsGroupCurrentMemberAssignmentValue
    | StreamsGroupTopologyValue)
"""Every value class this module decodes."""


# ---------------------------------------------------------------------------------------------
# schemas, declared once


def _key_value(name: str) -> Struct[KeyValue]:
    return Struct(name, (Field("key", "string"), Field("value", "string")), KeyValue)


_TASK_IDS = Struct("TaskIds", (
    Field("subtopology_id", "string"),
    Field("partitions", Array("int32")),
), TaskIds)

_CURRENT_TASK_IDS = Struct("TaskIds", (
    Field("subtopology_id", "string"),
    Field("partitions", Array("int32")),
    tagged("assignment_epochs", Array("int32"), 0, (), nullable=True),
), CurrentTaskIds)

_TOPIC_INFO = Struct("TopicInfo", (
    Field("name", "string"),
    Field("partitions", "int32"),
    Field("replication_factor", "int16"),
    Field("topic_configs", Array(_key_value("TopicConfig"))),
), TopicInfo)

_CURRENT_TASK_FIELDS = ("active_tasks", "standby_tasks", "warmup_tasks", "active_tasks_pending_revocation",
                        "standby_tasks_pending_revocation", "warmup_tasks_pending_revocation")

# record type -> (key schema, value schema)
STREAMS_SCHEMAS: dict[int, tuple[Message[StreamsKey], Message[StreamsValue]]] = {
    17: (coordinator_key("StreamsGroupMetadataKey", StreamsGroupMetadataKey, 17, "group_id"),
         coordinator_value("StreamsGroupMetadataValue", StreamsGroupMetadataValue,
                           Field("epoch", "int32"),
                           Field("metadata_hash", "int64"),
                           tagged("validated_topology_epoch", "int32", 0, -1),
                           tagged("last_assignment_configs", Array(_key_value("LastAssignmentConfig")), 1, (),
                                  nullable=True),
                           tagged("stored_description_topology_epoch", "int32", 2, -1),
                           tagged("failed_description_topology_epoch", "int32", 3, -1))),
    19: (coordinator_key("StreamsGroupMemberMetadataKey", StreamsGroupMemberMetadataKey, 19, "group_id",
                         "member_id"),
         coordinator_value("StreamsGroupMemberMetadataValue", StreamsGroupMemberMetadataValue,
                           Field("instance_id", "string", nullable="0+"),
                           Field("rack_id", "string", nullable="0+"),
                           Field("client_id", "string"),
                           Field("client_host", "string"),
                           Field("rebalance_timeout_ms", "int32"),
                           Field("topology_epoch", "int32"),
                           Field("process_id", "string"),
                           Field("user_endpoint", Struct("Endpoint", (
                               Field("host", "string"),
                               Field("port", "uint16"),
                           ), Endpoint), nullable="0+"),
                           Field("client_tags", Array(_key_value("KeyValue"))))),
    20: (coordinator_key("StreamsGroupTargetAssignmentMetadataKey", StreamsGroupTargetAssignmentMetadataKey, 20,
                         "group_id"),
         coordinator_value("StreamsGroupTargetAssignmentMetadataValue", StreamsGroupTargetAssignmentMetadataValue,
                           Field("assignment_epoch", "int32"),
                           tagged("assignment_timestamp", "int64", 0, 0))),
    21: (coordinator_key("StreamsGroupTargetAssignmentMemberKey", StreamsGroupTargetAssignmentMemberKey, 21,
                         "group_id", "member_id"),
         coordinator_value("StreamsGroupTargetAssignmentMemberValue", StreamsGroupTargetAssignmentMemberValue,
                           *(Field(n, Array(_TASK_IDS)) for n in _CURRENT_TASK_FIELDS[:3]))),
    22: (coordinator_key("StreamsGroupCurrentMemberAssignmentKey", StreamsGroupCurrentMemberAssignmentKey, 22,
                         "group_id", "member_id"),
         coordinator_value("StreamsGroupCurrentMemberAssignmentValue", StreamsGroupCurrentMemberAssignmentValue,
                           Field("member_epoch", "int32"),
                           Field("previous_member_epoch", "int32"),
                           Field("state", "int8"),
                           *(Field(n, Array(_CURRENT_TASK_IDS)) for n in _CURRENT_TASK_FIELDS))),
    23: (coordinator_key("StreamsGroupTopologyKey", StreamsGroupTopologyKey, 23, "group_id"),
         coordinator_value("StreamsGroupTopologyValue", StreamsGroupTopologyValue,
                           Field("epoch", "int32"),
                           Field("subtopologies", Array(Struct("Subtopology", (
                               Field("subtopology_id", "string"),
                               Field("source_topics", Array("string")),
                               Field("source_topic_regex", Array("string")),
                               Field("state_changelog_topics", Array(_TOPIC_INFO)),
                               Field("repartition_sink_topics", Array("string")),
                               Field("repartition_source_topics", Array(_TOPIC_INFO)),
                               Field("copartition_groups", Array(Struct("CopartitionGroup", (
                                   Field("source_topics", Array("int16")),
                                   Field("source_topic_regex", Array("int16")),
                                   Field("repartition_source_topics", Array("int16")),
                               ), CopartitionGroup))),
                           ), Subtopology))))),
}

STREAMS_KEY_CLASSES: dict[type[StreamsKey], int] = {
    StreamsGroupMetadataKey: 17, StreamsGroupMemberMetadataKey: 19, StreamsGroupTargetAssignmentMetadataKey: 20,
    StreamsGroupTargetAssignmentMemberKey: 21, StreamsGroupCurrentMemberAssignmentKey: 22,
    StreamsGroupTopologyKey: 23,
}
STREAMS_VALUE_CLASSES: dict[type[StreamsValue], int] = {
    StreamsGroupMetadataValue: 17, StreamsGroupMemberMetadataValue: 19, StreamsGroupTargetAssignmentMetadataValue: 20,
    StreamsGroupTargetAssignmentMemberValue: 21, StreamsGroupCurrentMemberAssignmentValue: 22,
    StreamsGroupTopologyValue: 23,
}
assert all(STREAMS_SCHEMAS[t][0].root.factory is c for c, t in STREAMS_KEY_CLASSES.items())
assert all(STREAMS_SCHEMAS[t][1].root.factory is c for c, t in STREAMS_VALUE_CLASSES.items())
