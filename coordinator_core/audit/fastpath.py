"""Struct-based readers for the audit's GroupMetadata path, in front of the schema-driven codec.

The codec (`coordinator_core.records.decode`, `coordinator_core.consumer_protocol.decode_*`) is the
authority; these readers handle only the common, well-formed shapes the snapshot's brokers write
(GroupMetadataKey, GroupMetadataValue v0–v3, ConsumerProtocolSubscription v0–v3 and
ConsumerProtocolAssignment without trailing bytes) and return None for anything else (a flexible
v4+ value, a negative length where a value is required, bad UTF-8, a short buffer, ...), so that
the caller falls back to the codec, which then decodes or raises its `RecordDecodeError`. Whenever a
reader here returns a result it is field-for-field what the codec returns (tested with Hypothesis).
"""

from __future__ import annotations

import struct

from coordinator_core.records import CoordinatorRecord, GroupMetadataKey, GroupMetadataValue, MemberMetadata

__all__ = ["assignment_fast", "group_record_fast", "subscription_fast"]

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_HI = struct.Struct(">hi")


class _Bad(Exception):
    """The bytes are not the common well-formed shape: let the codec decide."""


def _string(b: bytes, pos: int) -> tuple[str, int]:
    n = _H.unpack_from(b, pos)[0]
    end = pos + 2 + n
    if n < 0 or end > len(b):
        raise _Bad
    return b[pos + 2:end].decode(), end


def _nullable_string(b: bytes, pos: int) -> tuple[str | None, int]:
    n = _H.unpack_from(b, pos)[0]
    if n == -1:
        return None, pos + 2
    end = pos + 2 + n
    if n < 0 or end > len(b):
        raise _Bad
    return b[pos + 2:end].decode(), end


def _bytes(b: bytes, pos: int) -> tuple[bytes, int]:
    n = _I.unpack_from(b, pos)[0]
    end = pos + 4 + n
    if n < 0 or end > len(b):
        raise _Bad
    return b[pos + 4:end], end


def _nullable_bytes(b: bytes, pos: int) -> tuple[bytes | None, int]:
    n = _I.unpack_from(b, pos)[0]
    if n == -1:
        return None, pos + 4
    end = pos + 4 + n
    if n < 0 or end > len(b):
        raise _Bad
    return b[pos + 4:end], end


def _count(b: bytes, pos: int, min_item: int) -> int:
    n = _I.unpack_from(b, pos)[0]
    if n < 0 or n * min_item > len(b) - pos - 4:
        raise _Bad
    return int(n)


def group_record_fast(key: bytes, value: bytes | None) -> CoordinatorRecord | None:
    """A GroupMetadata record (key type 2, value v0–v3 or a tombstone) read with struct, or None."""
    try:
        if len(key) < 4 or key[0] != 0 or key[1] != 2:
            return None
        group, kend = _string(key, 2)
        if value is None:
            return CoordinatorRecord(GroupMetadataKey(group), None, 2, None, key[kend:], b"")
        if len(value) < 2 or value[0] != 0 or value[1] > 3:
            return None
        version = value[1]
        protocol_type, pos = _string(value, 2)
        generation = _I.unpack_from(value, pos)[0]
        protocol, pos = _nullable_string(value, pos + 4)
        leader, pos = _nullable_string(value, pos)
        state_ts = -1
        if version >= 2:
            state_ts = _Q.unpack_from(value, pos)[0]
            pos += 8
        count = _count(value, pos, 16)
        pos += 4
        members = []
        for _ in range(count):
            member_id, pos = _string(value, pos)
            instance: str | None = None
            if version >= 3:
                instance, pos = _nullable_string(value, pos)
            client_id, pos = _string(value, pos)
            client_host, pos = _string(value, pos)
            rebalance_timeout = -1
            if version >= 1:
                rebalance_timeout = _I.unpack_from(value, pos)[0]
                pos += 4
            session_timeout = _I.unpack_from(value, pos)[0]
            subscription, pos = _bytes(value, pos + 4)
            assignment, pos = _bytes(value, pos)
            members.append(MemberMetadata(member_id, instance, client_id, client_host, rebalance_timeout,
                                          session_timeout, subscription, assignment))
        gm = GroupMetadataValue(protocol_type, generation, protocol, leader, state_ts, tuple(members))
        return CoordinatorRecord(GroupMetadataKey(group), gm, 2, version, key[kend:], value[pos:])
    except (_Bad, struct.error, UnicodeDecodeError):
        return None


def _partitions(b: bytes, pos: int, out: list[tuple[str, int]]) -> int:
    """[topic string, [int32]] entries appended to `out` as (topic, partition) pairs."""
    topics = _count(b, pos, 6)
    pos += 4
    for _ in range(topics):
        topic, pos = _string(b, pos)
        n = _count(b, pos, 4)
        pos += 4
        out.extend((topic, p) for p in struct.unpack_from(f">{n}i", b, pos))
        pos += 4 * n
    return pos


SubscriptionFields = tuple[int, tuple[str, ...], bytes | None, tuple[tuple[str, int], ...], int, str | None]


def subscription_fast(b: bytes) -> SubscriptionFields | None:
    """(version, topics, user_data, owned (topic, partition) pairs, generation_id, rack_id) of a
    ConsumerProtocolSubscription v0–v3 with nothing after its last field, or None."""
    try:
        if len(b) < 2 or b[0] != 0 or b[1] > 3:
            return None
        version = b[1]
        n = _count(b, 2, 2)
        pos = 6
        topics = []
        for _ in range(n):
            topic, pos = _string(b, pos)
            topics.append(topic)
        user_data, pos = _nullable_bytes(b, pos)
        owned: list[tuple[str, int]] = []
        generation, rack = -1, None
        if version >= 1:
            pos = _partitions(b, pos, owned)
        if version >= 2:
            generation = _I.unpack_from(b, pos)[0]
            pos += 4
        if version >= 3:
            rack, pos = _nullable_string(b, pos)
        if pos != len(b):
            return None
        return version, tuple(topics), user_data, tuple(owned), generation, rack
    except (_Bad, struct.error, UnicodeDecodeError):
        return None


def assignment_fast(b: bytes) -> tuple[int, tuple[tuple[str, int], ...], bytes | None] | None:
    """(version, assigned (topic, partition) pairs, user_data) of a ConsumerProtocolAssignment
    v0–v3 with nothing after its last field, or None."""
    try:
        if len(b) < 2 or b[0] != 0 or b[1] > 3:
            return None
        assigned: list[tuple[str, int]] = []
        pos = _partitions(b, 2, assigned)
        user_data, pos = _nullable_bytes(b, pos)
        if pos != len(b):
            return None
        return b[1], tuple(assigned), user_data
    except (_Bad, struct.error, UnicodeDecodeError):
        return None
