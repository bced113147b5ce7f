"""Byte-level readers of the codec's hot paths, in front of the schema-driven codec: GroupMetadata
records (the audit's replay reads one per generation) and the header of a GroupMetadata value.

The codec (`coordinator_audit.core.records.decode`, `coordinator_audit.core.consumer_protocol.decode_*`) is the
authority; these readers handle only the common, well-formed shapes the snapshot's brokers write
(GroupMetadataKey, GroupMetadataValue v0–v3, ConsumerProtocolSubscription v0–v3 and
ConsumerProtocolAssignment without trailing bytes) and return None for anything else (a flexible
v4+ value, a negative length where a value is required, bad UTF-8, a short buffer, ...), so that
the caller falls back to the codec, which then decodes or raises its `RecordDecodeError`. Whenever a
reader here returns a result it is field-for-field what the codec returns (tested with Hypothesis).

The readers are written flat (one `unpack_from` per length, no helper call per field): they run
once per member of every GroupMetadata record the audit replays.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import fields
from itertools import repeat
from typing import TYPE_CHECKING, Any, TypeVar

from coordinator_audit.core.errors import CoordinatorAuditError
from coordinator_audit.core.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    decode,
)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["GroupRecordReader", "assignment_fast", "assignment_groups_fast", "fast_constructor",
           "group_metadata_header", "group_record_fast", "subscription_fast"]

_h = struct.Struct(">h").unpack_from
_i = struct.Struct(">i").unpack_from
_q = struct.Struct(">q").unpack_from
_ii = struct.Struct(">ii").unpack_from
_Errors = (struct.error, UnicodeDecodeError, IndexError)
_int32s: dict[int, Callable[[bytes, int], tuple[int, ...]]] = {}
"""n -> the unpack_from of n big-endian int32s (filled on demand, for n up to 4096)."""


def _int32s_of(n: int) -> Callable[[bytes, int], tuple[int, ...]]:
    unpack = _int32s.get(n)
    if unpack is None:
        unpack = struct.Struct(f">{n}i").unpack_from
        if n <= 4096:
            _int32s[n] = unpack
    return unpack

_R = TypeVar("_R", bound="DataclassInstance")


def fast_constructor(cls: type[_R]) -> Callable[..., _R]:
    """A positional constructor for the frozen slotted class `cls`, about 5x cheaper than calling
    `cls(...)`: the audit builds one row per assigned partition per generation (and one record
    object per member of every replayed GroupMetadata value), and a frozen dataclass sets each
    field through `object.__setattr__`.

    The constructor is a plain slotted twin of `cls` (same `__slots__`, so the same memory layout)
    whose `__init__` fills the slots with ordinary attribute stores and then re-labels the object as
    a `cls` (`__class__` assignment between classes of compatible layout): calling it returns an
    ordinary frozen `cls` instance, equal, hashing and printing like one built by `cls(...)`. All
    arguments are required and positional, in field order; `__post_init__` does not run."""
    names = tuple(f.name for f in fields(cls))
    if getattr(cls, "__slots__", None) != names:
        raise TypeError(f"{cls.__name__} is not a slotted dataclass with one slot per field")
    source = (f"def __init__(self, {', '.join(names)}):\n"
              + "".join(f"    self.{n} = {n}\n" for n in names)
              + "    self.__class__ = cls\n")
    namespace: dict[str, Any] = {"cls": cls}
    exec(source, namespace)
    twin = type(f"make_{cls.__name__}", (), {
        "__slots__": names, "__init__": namespace["__init__"],
        "__doc__": f"{cls.__name__}(*values), built by `fast_constructor` (returns a {cls.__name__})."})
    return twin



# the codec's frozen record classes, built without their per-field object.__setattr__ (positional,
# every field given; CoordinatorRecord's __post_init__ only fills a missing value_version, always given here)
_member = fast_constructor(MemberMetadata)
_group_value = fast_constructor(GroupMetadataValue)
_group_key = fast_constructor(GroupMetadataKey)
_record = fast_constructor(CoordinatorRecord)


def group_record_fast(key: bytes, value: bytes | None) -> CoordinatorRecord | None:
    """A GroupMetadata record read with struct, or None: Kafka's GroupMetadataKey (key type 2) with a
    GroupMetadataValue v0–v3 (the non-flexible versions of `GroupMetadataValue.json` in Kafka's
    group-coordinator module) or a tombstone."""
    return _read_group(key, value, None)[0]


class GroupRecordReader:
    """`group_record_fast` for the successive records of one group: a member whose header bytes (member
    id, instance id, client id, host, timeouts) are those of the previous record's member at the same
    position (same value version) reuses that member's decoded header, and a member whose bytes are
    all unchanged reuses the previous MemberMetadata object. The result is the same as
    `group_record_fast`'s: equal bytes read the same way (tested with Hypothesis)."""

    __slots__ = ("_previous", "_version")

    def __init__(self) -> None:
        self._version = -1
        self._previous: list[_MemberBytes] = []

    def read(self, key: bytes, value: bytes | None) -> CoordinatorRecord | None:
        """The record, or None when the codec must decide (see the module docstring)."""
        previous = self._previous if value is not None and len(value) >= 2 and value[1] == self._version else None
        rec, seen = _read_group(key, value, previous)
        if seen is not None and value is not None:
            self._version, self._previous = value[1], seen
        return rec


_MemberBytes = tuple[bytes, tuple[str, str | None, str, str, int, int], MemberMetadata]
"""(header bytes, decoded header fields, the member) of one member of a read record."""


def _read_group(key: bytes, value: bytes | None, previous: list[_MemberBytes] | None
                ) -> tuple[CoordinatorRecord | None, list[_MemberBytes] | None]:
    """(record or None, the members' bytes for the next read); `previous` is the members' bytes of the
    previous read of a value of the same version."""
    try:
        if len(key) < 4 or key[0] != 0 or key[1] != 2:
            return None, None
        n = _h(key, 2)[0]
        kend = 4 + n
        if n < 0 or kend > len(key):
            return None, None
        group = key[4:kend].decode()
        if value is None:
            return _record(_group_key(group), None, 2, None, key[kend:], b""), None
        size = len(value)
        if size < 2 or value[0] != 0 or value[1] > 3:
            return None, None
        version = value[1]
        n = _h(value, 2)[0]
        pos = 4 + n
        if n < 0 or pos > size:
            return None, None
        protocol_type = value[4:pos].decode()
        generation = _i(value, pos)[0]
        pos += 4
        n = _h(value, pos)[0]
        if n == -1:
            protocol = None
            pos += 2
        else:
            end = pos + 2 + n
            if n < 0 or end > size:
                return None, None
            protocol = value[pos + 2:end].decode()
            pos = end
        n = _h(value, pos)[0]
        if n == -1:
            leader = None
            pos += 2
        else:
            end = pos + 2 + n
            if n < 0 or end > size:
                return None, None
            leader = value[pos + 2:end].decode()
            pos = end
        state_ts = -1
        if version >= 2:
            state_ts = _q(value, pos)[0]
            pos += 8
        count = _i(value, pos)[0]
        pos += 4
        if count < 0 or count * 16 > size - pos:
            return None, None
        members = []
        seen: list[_MemberBytes] = []
        known = len(previous) if previous is not None else 0
        for index in range(count):
            start = pos
            before = previous[index] if previous is not None and index < known else None
            if before is not None and value[start:start + len(before[0])] == before[0]:
                header = before[1]
                pos = start + len(before[0])
            else:
                before = None
                n = _h(value, pos)[0]
                end = pos + 2 + n
                if n < 0 or end > size:
                    return None, None
                member_id = value[pos + 2:end].decode()
                pos = end
                instance: str | None = None
                if version >= 3:
                    n = _h(value, pos)[0]
                    if n == -1:
                        pos += 2
                    else:
                        end = pos + 2 + n
                        if n < 0 or end > size:
                            return None, None
                        instance = value[pos + 2:end].decode()
                        pos = end
                n = _h(value, pos)[0]
                end = pos + 2 + n
                if n < 0 or end > size:
                    return None, None
                client_id = value[pos + 2:end].decode()
                pos = end
                n = _h(value, pos)[0]
                end = pos + 2 + n
                if n < 0 or end > size:
                    return None, None
                client_host = value[pos + 2:end].decode()
                pos = end
                if version >= 1:
                    rebalance_timeout, session_timeout = _ii(value, pos)
                    pos += 8
                else:
                    rebalance_timeout = -1
                    session_timeout = _i(value, pos)[0]
                    pos += 4
                header = (member_id, instance, client_id, client_host, rebalance_timeout, session_timeout)
            header_end = pos
            n = _i(value, pos)[0]
            end = pos + 4 + n
            if n < 0 or end > size:
                return None, None
            subscription = value[pos + 4:end]
            pos = end
            n = _i(value, pos)[0]
            end = pos + 4 + n
            if n < 0 or end > size:
                return None, None
            assignment = value[pos + 4:end]
            pos = end
            if before is not None and before[2].subscription == subscription and before[2].assignment == assignment:
                member = before[2]
                seen.append(before)
            else:
                member = _member(header[0], header[1], header[2], header[3], header[4], header[5],
                                 subscription, assignment, ())
                seen.append((before[0] if before is not None else value[start:header_end], header, member))
            members.append(member)
        gm = _group_value(protocol_type, generation, protocol, leader, state_ts, tuple(members), ())
        return _record(_group_key(group), gm, 2, version, key[kend:], value[pos:]), seen
    except _Errors:
        return None, None


def _partitions(b: bytes, pos: int, out: list[tuple[str, int]]) -> int:
    """[topic string, [int32]] entries appended to `out` as (topic, partition) pairs; -1 when the
    bytes are not the well-formed shape."""
    size = len(b)
    topics = _i(b, pos)[0]
    pos += 4
    if topics < 0 or topics * 6 > size - pos:
        return -1
    for _ in range(topics):
        n = _h(b, pos)[0]
        end = pos + 2 + n
        if n < 0 or end > size:
            return -1
        topic = b[pos + 2:end].decode()
        n = _i(b, end)[0]
        pos = end + 4
        if n < 0 or n * 4 > size - pos:
            return -1
        if n == 1:
            out.append((topic, _i(b, pos)[0]))
        elif n:
            out.extend(zip(repeat(topic, n), _int32s_of(n)(b, pos), strict=True))
        pos += 4 * n
    return pos


SubscriptionFields = tuple[int, tuple[str, ...], bytes | None, tuple[tuple[str, int], ...], int, str | None]


def subscription_fast(b: bytes) -> SubscriptionFields | None:
    """(version, topics, user_data, owned (topic, partition) pairs, generation_id, rack_id) of a
    ConsumerProtocolSubscription v0–v3 (Kafka's `ConsumerProtocolSubscription.json`, read by
    `ConsumerProtocol#deserializeSubscription`) with nothing after its last field, or None."""
    try:
        size = len(b)
        if size < 2 or b[0] != 0 or b[1] > 3:
            return None
        version = b[1]
        count = _i(b, 2)[0]
        pos = 6
        if count < 0 or count * 2 > size - pos:
            return None
        topics = []
        for _ in range(count):
            n = _h(b, pos)[0]
            end = pos + 2 + n
            if n < 0 or end > size:
                return None
            topics.append(b[pos + 2:end].decode())
            pos = end
        n = _i(b, pos)[0]
        if n == -1:
            user_data = None
            pos += 4
        else:
            end = pos + 4 + n
            if n < 0 or end > size:
                return None
            user_data = b[pos + 4:end]
            pos = end
        owned: list[tuple[str, int]] = []
        generation, rack = -1, None
        if version >= 1:
            pos = _partitions(b, pos, owned)
            if pos < 0:
                return None
            if version >= 2:
                generation = _i(b, pos)[0]
                pos += 4
                if version >= 3:
                    n = _h(b, pos)[0]
                    if n == -1:
                        pos += 2
                    else:
                        end = pos + 2 + n
                        if n < 0 or end > size:
                            return None
                        rack = b[pos + 2:end].decode()
                        pos = end
        if pos != size:
            return None
        return version, tuple(topics), user_data, tuple(owned), generation, rack
    except _Errors:
        return None


def assignment_fast(b: bytes) -> tuple[int, tuple[tuple[str, int], ...], bytes | None] | None:
    """(version, assigned (topic, partition) pairs, user_data) of a ConsumerProtocolAssignment
    v0–v3 (Kafka's `ConsumerProtocolAssignment.json`, read by `ConsumerProtocol#deserializeAssignment`)
    with nothing after its last field, or None."""
    try:
        size = len(b)
        if size < 2 or b[0] != 0 or b[1] > 3:
            return None
        assigned: list[tuple[str, int]] = []
        pos = _partitions(b, 2, assigned)
        if pos < 0:
            return None
        n = _i(b, pos)[0]
        if n == -1:
            user_data = None
            pos += 4
        else:
            end = pos + 4 + n
            if n < 0 or end > size:
                return None
            user_data = b[pos + 4:end]
            pos = end
        if pos != size:
            return None
        return b[1], tuple(assigned), user_data
    except _Errors:
        return None


def assignment_groups_fast(b: bytes) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
    """The (topic, partitions) entries that have partitions, in wire order, of what `assignment_fast`
    reads (its pairs are these entries flattened), or None when it would return None."""
    try:
        size = len(b)
        if size < 2 or b[0] != 0 or b[1] > 3:
            return None
        count = _i(b, 2)[0]
        pos = 6
        if count < 0 or count * 6 > size - pos:
            return None
        groups: list[tuple[str, tuple[int, ...]]] = []
        for _ in range(count):
            n = _h(b, pos)[0]
            end = pos + 2 + n
            if n < 0 or end > size:
                return None
            topic = b[pos + 2:end].decode()
            n = _i(b, end)[0]
            pos = end + 4
            if n < 0 or n * 4 > size - pos:
                return None
            if n:
                groups.append((topic, _int32s_of(n)(b, pos)))
                pos += 4 * n
        n = _i(b, pos)[0]
        if n == -1:
            pos += 4
        else:
            pos += 4 + n
            if n < 0 or pos > size:
                return None
        if pos != size:
            return None
        return tuple(groups)
    except _Errors:
        return None


def group_metadata_header(key: bytes, value: bytes | None) -> tuple[int, int] | None:
    """(generation, member count) of a GroupMetadata record's value (Kafka's GroupMetadataValue,
    versions 0–4: `group-coordinator/src/main/resources/common/message/GroupMetadataValue.json`),
    read by `group_record_fast`, else by the codec (`decode`); None for a tombstone, another record
    type or bytes the codec rejects."""
    if value is None:
        return None
    try:
        rec = group_record_fast(key, value)  # None: the codec decides
        v = (rec if rec is not None else decode(key, value)).value
    except CoordinatorAuditError:
        return None
    return (v.generation, len(v.members)) if isinstance(v, GroupMetadataValue) else None
