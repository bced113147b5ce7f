"""The consumer protocol's embedded bytes (ConsumerProtocolSubscription.json, ConsumerProtocolAssignment.json,
ConsumerProtocol; the sticky assignors' userData): ConsumerProtocolSubscription and
ConsumerProtocolAssignment v0–v3 (classic encoding, never flexible, int16 version prefix), and the
assignors' user data (sticky V0/V1, cooperative-sticky).

The codec writes what it is given, in the given order: sorting subscription topics or grouping
owned partitions the way the Java consumer does belongs to the client. Decoding keeps wire order.

Versions: a version above 3 is read with the v3 layout (Kafka's ConsumerProtocol clamps it) while
`version` keeps the wire value; bytes after the last v3 field (a newer version's extra fields, or
anything a reader ignores) are kept in `trailing`, so `encode_*(decode_*(b)) == b`. Kafka's own
serializer would write such a record back with version 3 instead; this codec keeps the version.
A negative version is an error, as in Kafka. Where Kafka's Subscription object differs from the
wire, this codec keeps the wire: a generation_id below 0 stays as written (Kafka: "none"), and an
empty rack_id stays "" (Kafka: "none").
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypedDict

from coordinator_audit.core.errors import RecordDecodeError, RecordEncodeError
from coordinator_audit.core.jhash import java_string_hashcode, spread
from coordinator_audit.core.wire import Array, Field, Message, Struct, read_body, write_body

__all__ = [
    "Assignment",
    "StickyUserData",
    "Subscription",
    "TopicPartitions",
    "decode_assignment",
    "decode_cooperative_user_data",
    "decode_sticky_user_data",
    "decode_subscription",
    "encode_assignment",
    "encode_cooperative_user_data",
    "encode_sticky_user_data",
    "encode_subscription",
]

HIGHEST_KNOWN_VERSION = 3


@dataclass(frozen=True, slots=True)
class TopicPartitions:
    """One topic's partitions, in wire order."""

    topic: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Subscription:
    """ConsumerProtocolSubscription: owned_partitions from v1, generation_id from v2 (-1 when
    absent), rack_id from v3 (None when absent)."""

    version: int
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartitions, ...] = ()
    generation_id: int = -1
    rack_id: str | None = None
    trailing: bytes = b""


@dataclass(frozen=True, slots=True)
class Assignment:
    """ConsumerProtocolAssignment (the same layout in v0–v3)."""

    version: int
    assigned_partitions: tuple[TopicPartitions, ...]
    user_data: bytes | None = None
    trailing: bytes = b""


class _SubscriptionFields(TypedDict):
    """What the wire reader hands `decode_subscription`: the body's fields, by their `Subscription` names."""

    topics: tuple[str, ...]
    user_data: bytes | None
    owned_partitions: tuple[TopicPartitions, ...]
    generation_id: int
    rack_id: str | None


class _AssignmentFields(TypedDict):
    """What the wire reader hands `decode_assignment`: the body's fields, by their `Assignment` names."""

    assigned_partitions: tuple[TopicPartitions, ...]
    user_data: bytes | None


def _subscription_fields(*, topics: tuple[str, ...], user_data: bytes | None,
                         owned_partitions: tuple[TopicPartitions, ...], generation_id: int,
                         rack_id: str | None) -> _SubscriptionFields:
    return {"topics": topics, "user_data": user_data, "owned_partitions": owned_partitions,
            "generation_id": generation_id, "rack_id": rack_id}


def _assignment_fields(*, assigned_partitions: tuple[TopicPartitions, ...],
                       user_data: bytes | None) -> _AssignmentFields:
    return {"assigned_partitions": assigned_partitions, "user_data": user_data}


_TOPIC_PARTITIONS = Struct("TopicPartition", (
    Field("topic", "string"),
    Field("partitions", Array("int32")),
), TopicPartitions)

SUBSCRIPTION = Message(Struct("ConsumerProtocolSubscription", (
    Field("topics", Array("string")),
    Field("user_data", "bytes", nullable="0+", default=None),
    Field("owned_partitions", Array(_TOPIC_PARTITIONS), versions="1+", default=(), ignorable=True),
    Field("generation_id", "int32", versions="2+", default=-1, ignorable=True),
    Field("rack_id", "string", versions="3+", nullable="3+", default=None, ignorable=True),
), _subscription_fields), valid="0-3")

ASSIGNMENT = Message(Struct("ConsumerProtocolAssignment", (
    Field("assigned_partitions", Array(_TOPIC_PARTITIONS)),
    Field("user_data", "bytes", nullable="0+", default=None),
), _assignment_fields), valid="0-3")

_H = struct.Struct(">h")
_I = struct.Struct(">i")


def _read_version(data: object, message: Message[object]) -> tuple[bytes, int]:
    if isinstance(data, bytearray | memoryview):
        data = bytes(data)
    if not isinstance(data, bytes):
        raise RecordDecodeError(f"expected bytes, got {type(data).__name__}", schema=message.name)
    if len(data) < 2:
        raise RecordDecodeError(f"needs 2 bytes for its int16 version, got {len(data)}", schema=message.name,
                                field="<version>", position=0)
    version = _H.unpack_from(data, 0)[0]
    if version < 0:
        raise RecordDecodeError(f"unsupported version {version}", schema=message.name, field="<version>",
                                position=0)
    return data, version


def decode_subscription(data: bytes) -> Subscription:
    """Follows ConsumerProtocol#deserializeSubscription, keeping wire values (see the module doc)."""
    data, version = _read_version(data, SUBSCRIPTION)
    body, end = read_body(SUBSCRIPTION, data, 2, min(version, HIGHEST_KNOWN_VERSION))
    return Subscription(version=version, trailing=data[end:], **body)


def decode_assignment(data: bytes) -> Assignment:
    """Follows ConsumerProtocol#deserializeAssignment, keeping wire order and version."""
    data, version = _read_version(data, ASSIGNMENT)
    body, end = read_body(ASSIGNMENT, data, 2, min(version, HIGHEST_KNOWN_VERSION))
    return Assignment(version=version, trailing=data[end:], **body)


def _encode(message: Message[object], obj: Subscription | Assignment, cls: type) -> bytes:
    if not isinstance(obj, cls):
        raise RecordEncodeError(f"expected a {cls.__name__}, got {type(obj).__name__}")
    v = obj.version
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < (1 << 15):
        raise RecordEncodeError(f"{message.name}.version {v!r} is not a non-negative int16")
    if not isinstance(obj.trailing, bytes | bytearray):
        raise RecordEncodeError(f"{message.name}.trailing must be bytes")
    return _H.pack(v) + write_body(message, obj, min(v, HIGHEST_KNOWN_VERSION)) + bytes(obj.trailing)


def encode_subscription(subscription: Subscription) -> bytes:
    """The version-prefixed bytes of `subscription` at its version, as given (no sorting); fields the
    version lacks are dropped, as Kafka drops ignorable fields."""
    return _encode(SUBSCRIPTION, subscription, Subscription)


def encode_assignment(assignment: Assignment) -> bytes:
    """The version-prefixed bytes of `assignment` at its version, as given."""
    return _encode(ASSIGNMENT, assignment, Assignment)


# ---------------------------------------------------------------------------------------------
# assignor user data


@dataclass(frozen=True, slots=True)
class StickyUserData:
    """What StickyAssignor reads from a member's user data: the previous assignment (wire order)
    and the generation: an int for V1, None for V0 or absent data, -1 for unreadable data."""

    previous_assignment: tuple[TopicPartitions, ...]
    generation: int | None


class _Short(Exception):
    """The old Struct reader ran out of bytes or met a negative size."""


def _sticky_read_assignment(data: bytes) -> tuple[tuple[TopicPartitions, ...], int]:
    n = len(data)
    if n < 4:
        raise _Short
    count = _I.unpack_from(data, 0)[0]
    pos = 4
    if count < 0 or count > n - pos:
        raise _Short
    topics = []
    for _ in range(count):
        if pos + 2 > n:
            raise _Short
        length = _H.unpack_from(data, pos)[0]
        pos += 2
        if length < 0 or length > n - pos:
            raise _Short
        # Java decodes with replacement characters rather than failing
        topic = data[pos:pos + length].decode("utf-8", "replace")
        pos += length
        if pos + 4 > n:
            raise _Short
        pcount = _I.unpack_from(data, pos)[0]
        pos += 4
        if pcount < 0 or pcount > n - pos or pos + 4 * pcount > n:
            raise _Short
        partitions = struct.unpack_from(f">{pcount}i", data, pos)
        pos += 4 * pcount
        topics.append(TopicPartitions(topic, partitions))
    return tuple(topics), pos


def decode_sticky_user_data(data: bytes | None) -> StickyUserData:
    """Follows StickyAssignor#memberData: no or empty data gives ((), None); otherwise read V1
    (assignment + generation), else V0 (assignment only, generation None), else ((), -1).
    Bytes after what a version needs are ignored, as Kafka's Schema#read ignores them."""
    if not data:
        return StickyUserData((), None)
    raw = bytes(data)
    try:
        topics, pos = _sticky_read_assignment(raw)
    except _Short:
        return StickyUserData((), -1)
    if pos + 4 <= len(raw):
        return StickyUserData(topics, _I.unpack_from(raw, pos)[0])
    return StickyUserData(topics, None)


def _group_partitions_by_topic(pairs: Iterable[tuple[str, int]]) -> list[tuple[str, list[int]]]:
    """Follows CollectionUtils#groupPartitionsByTopic: returns the topics in the iteration order of
    the java.util.HashMap it fills with computeIfAbsent, each with its partitions in given order.

    computeIfAbsent differs from put (`hashorder.JavaHashMap` emulates put): it resizes *before* looking a key
    up, once size > threshold (so only on the call after the one that crossed it), and links a new
    key at the *head* of its bucket. A bucket reaching 8 keys resizes the table while capacity < 64;
    from 64 on Java turns the bucket into a tree, whose order is not emulated (it needs 8 topics
    in one bucket of a 64+ table)."""
    capacity, threshold = 0, 0
    buckets: list[list[tuple[int, str]]] = []
    values: dict[str, list[int]] = {}

    def resize() -> None:
        nonlocal capacity, threshold, buckets
        if capacity == 0:
            capacity, threshold = 16, 12
            buckets = [[] for _ in range(16)]
            return
        old, old_cap = buckets, capacity
        capacity, threshold = capacity * 2, threshold * 2
        buckets = [[] for _ in range(capacity)]
        for j, chain in enumerate(old):  # a split keeps each chain's relative order
            buckets[j] = [e for e in chain if not e[0] & old_cap]
            buckets[j + old_cap] = [e for e in chain if e[0] & old_cap]

    for topic, partition in pairs:
        if capacity == 0 or len(values) > threshold:
            resize()
        existing = values.get(topic)
        if existing is not None:
            existing.append(partition)
            continue
        h = spread(java_string_hashcode(topic))
        chain = buckets[h & (capacity - 1)]
        chain.insert(0, (h, topic))
        if len(chain) >= 8 and capacity < 64:
            resize()
        values[topic] = [partition]
    return [(topic, values[topic]) for chain in buckets for _, topic in chain]


def encode_sticky_user_data(partitions: Iterable[tuple[str, int] | TopicPartitions], *, generation: int) -> bytes:
    """Follows StickyAssignor#serializeTopicPartitionAssignment: V1 user data for a member whose
    assignment is `partitions` ((topic, partition) pairs or TopicPartitions, in assignment order).

    Partitions are grouped per topic as CollectionUtils#groupPartitionsByTopic does (a HashMap
    filled with computeIfAbsent), so topics come out in that map's iteration order and each
    topic's partitions in the given order."""
    pairs: list[tuple[str, int]] = []
    for item in partitions:
        if isinstance(item, TopicPartitions):
            pairs.extend((item.topic, p) for p in item.partitions)
        else:
            topic, partition = item
            pairs.append((topic, partition))
    for topic, _ in pairs:
        if not isinstance(topic, str):
            raise RecordEncodeError(f"sticky user data: topic {topic!r} is not a str")
    _check_int32(generation, "generation")
    groups = _group_partitions_by_topic(pairs)
    out = bytearray(_I.pack(len(groups)))
    for topic, parts in groups:
        raw = topic.encode("utf-8", "replace")
        if len(raw) > 0x7FFF:
            raise RecordEncodeError(f"sticky user data: topic {topic[:40]!r}... is longer than 32767 bytes")
        out += _H.pack(len(raw)) + raw + _I.pack(len(parts))
        for p in parts:
            _check_int32(p, f"partition of {topic!r}")
            out += _I.pack(p)
    out += _I.pack(generation)
    return bytes(out)


def _check_int32(v: object, what: str) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or not -(1 << 31) <= v < (1 << 31):
        raise RecordEncodeError(f"{what} {v!r} is not an int32")


def decode_cooperative_user_data(data: bytes | None) -> int | None:
    """Follows CooperativeStickyAssignor#memberData's user-data branch: None for no data, the int32
    generation when at least 4 bytes are there (more are ignored), else -1."""
    if data is None:
        return None
    if len(data) < 4:
        return -1
    value: int = _I.unpack_from(bytes(data[:4]), 0)[0]
    return value


def encode_cooperative_user_data(generation: int) -> bytes:
    """Follows CooperativeStickyAssignor#subscriptionUserData: the 4-byte generation."""
    _check_int32(generation, "generation")
    return _I.pack(generation)
