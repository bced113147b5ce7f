"""Requests, responses and error codes of the classic group protocol, as the coordinator port sees them.

Field names are Kafka's (JoinGroupRequest.json, SyncGroupRequest.json, ...) in snake_case. Only the
fields whose value changes the coordinator's behaviour are kept; wire-only details (throttle time,
tagged fields) are left out. Every request carries a `correlation_id` that its response echoes, so
a caller can match a parked JoinGroup answered steps later.

`api_version` defaults to the newest version at Kafka commit 1eb7644 (between 3.9 and 4.0); set it where
behaviour depends on it: JoinGroup v4+ (MEMBER_ID_REQUIRED), v9 (skipAssignment), LeaveGroup v0-2 (single
member id) vs v3+ (batch), OffsetCommit v9 (GROUP_ID_NOT_FOUND for unknown groups in the Java coordinator).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

__all__ = [
    "DeleteGroupsRequest",
    "DeleteGroupsResponse",
    "Errors",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "JoinGroupRequest",
    "JoinGroupResponse",
    "JoinGroupResponseMember",
    "LeaveGroupRequest",
    "LeaveGroupResponse",
    "MemberIdentity",
    "MemberResponse",
    "OffsetCommitRequest",
    "OffsetCommitRequestPartition",
    "OffsetCommitRequestTopic",
    "OffsetCommitResponse",
    "OffsetCommitResponsePartition",
    "OffsetCommitResponseTopic",
    "Response",
    "SyncGroupRequest",
    "SyncGroupResponse",
]

UNKNOWN_MEMBER_ID = ""
"""Kafka's JoinGroupRequest.UNKNOWN_MEMBER_ID: the member id of a member that has none yet."""

DEFAULT_RETENTION_TIME = -1
"""OffsetCommitRequest.DEFAULT_RETENTION_TIME: no explicit retention (broker default applies)."""


class Errors(IntEnum):
    """Error codes with Kafka's numbers (clients/.../protocol/Errors.java)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    UNSUPPORTED_VERSION = 35
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    INVALID_TXN_STATE = 48
    KAFKA_STORAGE_ERROR = 56
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    UNSTABLE_OFFSET_COMMIT = 88
    STALE_MEMBER_EPOCH = 113

    @property
    def message(self) -> str | None:
        """Kafka's default message for the error (Errors#message; None for NONE). Log lines that print
        `error.message` or an exception's default message use it."""
        return _ERROR_MESSAGES.get(self.name)


_ERROR_MESSAGES: dict[str, str] = {
    "UNKNOWN_SERVER_ERROR": 'The server experienced an unexpected error when processing the request.',
    "UNKNOWN_TOPIC_OR_PARTITION": 'This server does not host this topic-partition.',
    "INVALID_FETCH_SIZE": 'The requested fetch size is invalid.',
    "NOT_LEADER_OR_FOLLOWER": 'For requests intended only for the leader, this error indicates that the broker is not the current leader. For requests intended for any replica, this error indicates that the broker is not a replica of the topic partition.',
    "REQUEST_TIMED_OUT": 'The request timed out.',
    "MESSAGE_TOO_LARGE": 'The request included a message larger than the max message size the server will accept.',
    "OFFSET_METADATA_TOO_LARGE": 'The metadata field of the offset request was too large.',
    "NETWORK_EXCEPTION": 'The server disconnected before a response was received.',
    "COORDINATOR_LOAD_IN_PROGRESS": "The coordinator is loading and hence can't process requests.",
    "COORDINATOR_NOT_AVAILABLE": 'The coordinator is not available.',
    "NOT_COORDINATOR": 'This is not the correct coordinator.',
    "RECORD_LIST_TOO_LARGE": 'The request included message batch larger than the configured segment size on the server.',
    "NOT_ENOUGH_REPLICAS": 'Messages are rejected since there are fewer in-sync replicas than required.',
    "NOT_ENOUGH_REPLICAS_AFTER_APPEND": 'Messages are written to the log, but to fewer in-sync replicas than required.',
    "ILLEGAL_GENERATION": 'Specified group generation id is not valid.',
    "INCONSISTENT_GROUP_PROTOCOL": "The group member's supported protocols are incompatible with those of existing members or first group member tried to join with empty protocol type or empty protocol list.",
    "INVALID_GROUP_ID": 'The configured groupId is invalid.',
    "UNKNOWN_MEMBER_ID": 'The coordinator is not aware of this member.',
    "INVALID_SESSION_TIMEOUT": 'The session timeout is not within the range allowed by the broker (as configured by group.min.session.timeout.ms and group.max.session.timeout.ms).',
    "REBALANCE_IN_PROGRESS": 'The group is rebalancing, so a rejoin is needed.',
    "INVALID_COMMIT_OFFSET_SIZE": 'The committing offset data size is not valid.',
    "TOPIC_AUTHORIZATION_FAILED": 'Topic authorization failed.',
    "GROUP_AUTHORIZATION_FAILED": 'Group authorization failed.',
    "UNSUPPORTED_VERSION": 'The version of API is not supported.',
    "INVALID_REQUEST": 'This most likely occurs because of a request being malformed by the client library or the message was sent to an incompatible broker. See the broker logs for more details.',
    "UNSUPPORTED_FOR_MESSAGE_FORMAT": 'The message format version on the broker does not support the request.',
    "INVALID_TXN_STATE": 'The producer attempted a transactional operation in an invalid state.',
    "KAFKA_STORAGE_ERROR": 'Disk error when trying to access log file on the disk.',
    "NON_EMPTY_GROUP": 'The group is not empty.',
    "GROUP_ID_NOT_FOUND": 'The group id does not exist.',
    "MEMBER_ID_REQUIRED": 'The group member needs to have a valid member id before actually entering a consumer group.',
    "GROUP_MAX_SIZE_REACHED": 'The consumer group has reached its max size.',
    "FENCED_INSTANCE_ID": 'The broker rejected this static consumer since another consumer with the same group.instance.id has registered with a different member.id.',
    "GROUP_SUBSCRIBED_TO_TOPIC": 'Deleting offsets of a topic is forbidden while the consumer group is actively subscribed to it.',
    "UNSTABLE_OFFSET_COMMIT": 'There are unstable offsets that need to be cleared.',
    "STALE_MEMBER_EPOCH": 'The member epoch is stale. The member must retry after receiving its updated member epoch via the ConsumerGroupHeartbeat API.',
}
"""The default messages of clients/.../protocol/Errors.java, per error name."""


def _check_str(value: object, name: str, where: str, *, nullable: bool = False) -> None:
    if value is None and nullable:
        return
    if not isinstance(value, str):
        raise TypeError(f"{where}.{name} must be a str{' or None' if nullable else ''}, got {value!r}")


def _check_int(value: object, name: str, where: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{where}.{name} must be an int, got {value!r}")


# --------------------------------------------------------------------------------------------------
# JoinGroup (API key 11)


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinGroupRequest:
    """A JoinGroup request. `rebalance_timeout_ms` -1 (or api_version 0) means "same as session"."""

    group_id: str
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    member_id: str = UNKNOWN_MEMBER_ID
    group_instance_id: str | None = None
    rebalance_timeout_ms: int = -1
    reason: str | None = None
    client_id: str = "consumer"
    client_host: str = "/127.0.0.1"
    api_version: int = 9
    correlation_id: int = 0

    def __post_init__(self) -> None:
        where = "JoinGroupRequest"
        _check_str(self.group_id, "group_id", where)
        _check_str(self.member_id, "member_id", where)
        _check_str(self.group_instance_id, "group_instance_id", where, nullable=True)
        _check_str(self.protocol_type, "protocol_type", where)
        _check_str(self.client_id, "client_id", where)
        _check_str(self.client_host, "client_host", where)
        _check_str(self.reason, "reason", where, nullable=True)
        for name in ("session_timeout_ms", "rebalance_timeout_ms", "api_version", "correlation_id"):
            _check_int(getattr(self, name), name, where)
        if not 0 <= self.api_version <= 9:
            raise ValueError(f"{where}.api_version must be 0..9, got {self.api_version}")
        if self.group_instance_id is not None and self.api_version < 5:
            raise ValueError(f"{where}.group_instance_id needs api_version >= 5, got {self.api_version}")
        protocols = tuple(self.protocols)
        for i, entry in enumerate(protocols):
            if (not isinstance(entry, tuple) or len(entry) != 2 or not isinstance(entry[0], str)
                    or not isinstance(entry[1], bytes | bytearray)):
                raise TypeError(f"{where}.protocols[{i}] must be a (name: str, metadata: bytes) pair, got {entry!r}")
        object.__setattr__(self, "protocols", tuple((n, bytes(m)) for n, m in protocols))

    @property
    def effective_rebalance_timeout_ms(self) -> int:
        """JoinGroup v0 has no rebalance timeout: the session timeout stands in for it."""
        if self.api_version == 0 or self.rebalance_timeout_ms == -1:
            return self.session_timeout_ms
        return self.rebalance_timeout_ms


@dataclass(frozen=True, slots=True)
class JoinGroupResponseMember:
    """One entry of the member list sent to the leader."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinGroupResponse:
    """A JoinGroup response. Error responses carry generation -1 and null protocol fields."""

    correlation_id: int
    error_code: Errors
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: tuple[JoinGroupResponseMember, ...] = ()


# --------------------------------------------------------------------------------------------------
# SyncGroup (API key 14)


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncGroupRequest:
    """A SyncGroup request; `assignments` is non-empty only from the leader."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: tuple[tuple[str, bytes], ...] = ()
    api_version: int = 5
    correlation_id: int = 0

    def __post_init__(self) -> None:
        where = "SyncGroupRequest"
        _check_str(self.group_id, "group_id", where)
        _check_str(self.member_id, "member_id", where)
        _check_str(self.group_instance_id, "group_instance_id", where, nullable=True)
        _check_str(self.protocol_type, "protocol_type", where, nullable=True)
        _check_str(self.protocol_name, "protocol_name", where, nullable=True)
        _check_int(self.generation_id, "generation_id", where)
        assignments = tuple(self.assignments)
        for i, entry in enumerate(assignments):
            if (not isinstance(entry, tuple) or len(entry) != 2 or not isinstance(entry[0], str)
                    or not isinstance(entry[1], bytes | bytearray)):
                raise TypeError(f"{where}.assignments[{i}] must be a (member_id, bytes) pair, got {entry!r}")
        object.__setattr__(self, "assignments", tuple((m, bytes(a)) for m, a in assignments))


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncGroupResponse:
    """A SyncGroup response."""

    correlation_id: int
    error_code: Errors
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


# --------------------------------------------------------------------------------------------------
# Heartbeat (API key 12)


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatRequest:
    """A Heartbeat request."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None
    api_version: int = 4
    correlation_id: int = 0

    def __post_init__(self) -> None:
        where = "HeartbeatRequest"
        _check_str(self.group_id, "group_id", where)
        _check_str(self.member_id, "member_id", where)
        _check_str(self.group_instance_id, "group_instance_id", where, nullable=True)
        _check_int(self.generation_id, "generation_id", where)


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatResponse:
    """A Heartbeat response."""

    correlation_id: int
    error_code: Errors


# --------------------------------------------------------------------------------------------------
# LeaveGroup (API key 13)


@dataclass(frozen=True, slots=True)
class MemberIdentity:
    """One leaving member of a LeaveGroup v3+ batch (reason is v5+)."""

    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaveGroupRequest:
    """A LeaveGroup request: v0-2 carry `member_id`, v3+ carry the `members` batch."""

    group_id: str
    member_id: str = UNKNOWN_MEMBER_ID
    members: tuple[MemberIdentity, ...] = ()
    api_version: int = 5
    correlation_id: int = 0

    def __post_init__(self) -> None:
        where = "LeaveGroupRequest"
        _check_str(self.group_id, "group_id", where)
        _check_str(self.member_id, "member_id", where)
        object.__setattr__(self, "members", tuple(self.members))
        for i, m in enumerate(self.members):
            if not isinstance(m, MemberIdentity):
                raise TypeError(f"{where}.members[{i}] must be a MemberIdentity, got {m!r}")
        if self.api_version < 3 and self.members:
            raise ValueError(f"{where}: api_version {self.api_version} carries member_id, not members")
        if self.api_version >= 3 and self.member_id:
            raise ValueError(f"{where}: api_version {self.api_version} carries members, not member_id")

    def identities(self) -> tuple[MemberIdentity, ...]:
        """The batch as the coordinator sees it (v0-2: one identity without instance id)."""
        if self.api_version < 3:
            return (MemberIdentity(self.member_id, None, None),)
        return self.members


@dataclass(frozen=True, slots=True)
class MemberResponse:
    """The per-member result of a LeaveGroup."""

    member_id: str
    group_instance_id: str | None
    error_code: Errors


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaveGroupResponse:
    """A LeaveGroup response. For v0-2 `members` is empty and `error_code` folds the member error."""

    correlation_id: int
    error_code: Errors
    members: tuple[MemberResponse, ...] = ()


# --------------------------------------------------------------------------------------------------
# OffsetCommit (API key 8)


@dataclass(frozen=True, slots=True)
class OffsetCommitRequestPartition:
    """One partition of an OffsetCommit (commit_timestamp is the v1-only explicit timestamp)."""

    partition_index: int
    committed_offset: int
    committed_leader_epoch: int = -1
    committed_metadata: str | None = ""
    commit_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class OffsetCommitRequestTopic:
    """One topic of an OffsetCommit."""

    name: str
    partitions: tuple[OffsetCommitRequestPartition, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitRequest:
    """An OffsetCommit request. `generation_id` is Kafka's generationIdOrMemberEpoch (-1 = none)."""

    group_id: str
    topics: tuple[OffsetCommitRequestTopic, ...]
    generation_id: int = -1
    member_id: str = UNKNOWN_MEMBER_ID
    group_instance_id: str | None = None
    retention_time_ms: int = DEFAULT_RETENTION_TIME
    api_version: int = 9
    correlation_id: int = 0

    def __post_init__(self) -> None:
        where = "OffsetCommitRequest"
        _check_str(self.group_id, "group_id", where)
        _check_str(self.member_id, "member_id", where)
        _check_str(self.group_instance_id, "group_instance_id", where, nullable=True)
        _check_int(self.generation_id, "generation_id", where)
        object.__setattr__(self, "topics", tuple(self.topics))
        for i, t in enumerate(self.topics):
            if not isinstance(t, OffsetCommitRequestTopic):
                raise TypeError(f"{where}.topics[{i}] must be an OffsetCommitRequestTopic, got {t!r}")
            object.__setattr__(t, "partitions", tuple(t.partitions))


@dataclass(frozen=True, slots=True)
class OffsetCommitResponsePartition:
    """The result of one committed partition."""

    partition_index: int
    error_code: Errors


@dataclass(frozen=True, slots=True)
class OffsetCommitResponseTopic:
    """The results of one topic."""

    name: str
    partitions: tuple[OffsetCommitResponsePartition, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitResponse:
    """An OffsetCommit response."""

    correlation_id: int
    topics: tuple[OffsetCommitResponseTopic, ...] = field(default=())


# --------------------------------------------------------------------------------------------------
# DeleteGroups (API key 42)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteGroupsRequest:
    """A DeleteGroups request."""

    group_ids: tuple[str, ...]
    correlation_id: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteGroupsResponse:
    """A DeleteGroups response: (group_id, error) per requested group, in request order."""

    correlation_id: int
    results: tuple[tuple[str, Errors], ...]


Response = (JoinGroupResponse | SyncGroupResponse | HeartbeatResponse | LeaveGroupResponse
            | OffsetCommitResponse | DeleteGroupsResponse)
