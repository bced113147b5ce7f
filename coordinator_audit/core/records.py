"""`__consumer_offsets` records: key/value schemas as data, `decode`, `encode` and `partition_for`
(OffsetCommitKey/Value.json, GroupMetadataKey/Value.json and the consumer, share and streams group
records of Kafka's group-coordinator module; GroupCoordinatorRecordSerde).

A key starts with an int16 record type (0/1 offset commit, 2 group metadata, 3–8 and 16 KIP-848
consumer groups, 9–15 share groups, 17 and 19–23 streams groups); a value starts with an int16
schema version; a null value is a tombstone. Decoding dispatches on the record type through one
table:

* every type Kafka 4.0–4.4 writes decodes to frozen dataclasses (`records_kip848`,
  `records_share`, `records_streams`);
* share groups' types 11 and 15 have two layouts under value version 0 (4.0's and 4.1+'s): a value
  decodes with the one layout that reads exactly its bytes, else `RecordDecodeError` names the
  field that tells the layouts apart (`records_share.LEGACY_LAYOUTS`);
* any other type (negative, 18, or beyond the table) decodes to an `UnknownRecordKey` keeping its
  raw bytes: Kafka's loaders skip and count such records, so it is not an error;
* with `is_control=True` the record is a transaction marker (key: int16 version, int16 type
  0=ABORT 1=COMMIT; value: int16 version, int32 coordinator epoch), never an offset key.

Versions: fields absent from an older value version take the defaults Kafka's readers fill (leader_epoch -1,
expire_timestamp -1, current_state_timestamp -1, group_instance_id None, rebalance_timeout -1: the generated
messages' field defaults). A value version above the highest known is read with the highest known (v4,
flexible) layout and unknown tagged fields are kept raw (KIP-915's intent; the Scala loader would throw
instead); `encode` refuses such a version with `RecordEncodeError`, because its layout is not actually known.
Negative value versions are a decode error (the Scala loader throws).

Kafka's readers ignore bytes after the last field. They are kept here in
`CoordinatorRecord.key_trailing`/`value_trailing` (normally empty) so that `encode` is the exact
inverse of `decode` and an audit can flag them (share groups' v0 types 11 and 15 excepted: bytes
left over there are what tells their layouts apart). `encode` writes canonical bytes: input that only a
non-Kafka writer produces (a non-minimal varint, a nullable string with length -5, unsorted tags)
decodes, but re-encodes to Kafka's canonical form.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TypeAlias

from coordinator_audit.core.errors import ConfigError, RecordDecodeError, RecordEncodeError
from coordinator_audit.core.jhash import java_string_hashcode, kafka_abs
from coordinator_audit.core.records_kip848 import (
    KIP848_KEY_CLASSES,
    KIP848_SCHEMAS,
    KIP848_VALUE_CLASSES,
    Kip848Key,
    Kip848Value,
)
from coordinator_audit.core.records_share import (
    LEGACY_LAYOUTS,
    SHARE_KEY_CLASSES,
    SHARE_SCHEMAS,
    SHARE_VALUE_CLASSES,
    ShareKey,
    ShareValue,
)
from coordinator_audit.core.records_streams import (
    STREAMS_KEY_CLASSES,
    STREAMS_SCHEMAS,
    STREAMS_VALUE_CLASSES,
    StreamsKey,
    StreamsValue,
)
from coordinator_audit.core.wire import Array, Field, Message, Struct, read_body, write_body

__all__ = [
    "GROUP_RECORD_TYPES",
    "OFFSETS_TOPIC_NUM_PARTITIONS",
    "RECORD_TYPE_NAMES",
    "ControlRecordKey",
    "ControlRecordValue",
    "CoordinatorRecord",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadata",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "UnknownRecordKey",
    "UnknownRecordValue",
    "decode",
    "encode",
    "offset_commit_key_fields",
    "offset_commit_value_fields",
    "partition_for",
]

RawTags = tuple[tuple[int, bytes], ...]


# ---------------------------------------------------------------------------------------------
# classic records


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    """Key types 0 and 1 (same layout): group, topic, partition."""

    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    """OffsetCommitValue v0–v4. leader_epoch exists from v3, expire_timestamp only in v1; -1 when absent."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    """Key type 2."""

    group: str


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    """One member inside a GroupMetadataValue; subscription/assignment are the embedded raw bytes
    (decode them with `coordinator_audit.core.consumer_protocol` when the protocol type is `consumer`)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    """GroupMetadataValue v0–v4; protocol and leader are None for an empty group."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberMetadata, ...] = ()
    unknown_tagged_fields: RawTags = ()


@dataclass(frozen=True, slots=True)
class UnknownRecordKey:
    """A key whose layout this codec does not decode: `raw` is everything after the int16 type."""

    record_type: int
    raw: bytes

    @property
    def name(self) -> str | None:
        """The key schema's name when Kafka names the record type (`_KEY_SCHEMA_NAMES`), else None."""
        return _KEY_SCHEMA_NAMES.get(self.record_type)


@dataclass(frozen=True, slots=True)
class UnknownRecordValue:
    """The value of an `UnknownRecordKey`: `raw` is everything after the int16 version."""

    raw: bytes


@dataclass(frozen=True, slots=True)
class ControlRecordKey:
    """A transaction-marker (control) key; its int16 version is the record's key_version."""

    control_type: int

    @property
    def type_name(self) -> str:
        return _CONTROL_TYPES.get(self.control_type, "UNKNOWN")


@dataclass(frozen=True, slots=True)
class ControlRecordValue:
    """An ABORT/COMMIT marker value; its int16 version is the record's value_version."""

    coordinator_epoch: int


_CONTROL_TYPES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER",
                  5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}

RECORD_TYPE_NAMES: dict[int, str] = {
    0: "OffsetCommit", 1: "OffsetCommit", 2: "GroupMetadata",
    3: "ConsumerGroupMetadata", 4: "ConsumerGroupPartitionMetadata", 5: "ConsumerGroupMemberMetadata",
    6: "ConsumerGroupTargetAssignmentMetadata", 7: "ConsumerGroupTargetAssignmentMember",
    8: "ConsumerGroupCurrentMemberAssignment",
    9: "ShareGroupPartitionMetadata", 10: "ShareGroupMemberMetadata", 11: "ShareGroupMetadata",
    12: "ShareGroupTargetAssignmentMetadata", 13: "ShareGroupTargetAssignmentMember",
    14: "ShareGroupCurrentMemberAssignment", 15: "ShareGroupStatePartitionMetadata",
    16: "ConsumerGroupRegularExpression", 17: "StreamsGroupMetadata", 19: "StreamsGroupMemberMetadata",
    20: "StreamsGroupTargetAssignmentMetadata", 21: "StreamsGroupTargetAssignmentMember",
    22: "StreamsGroupCurrentMemberAssignment", 23: "StreamsGroupTopology",
}
_KEY_SCHEMA_NAMES = {t: n + "Key" for t, n in RECORD_TYPE_NAMES.items()}

RecordKey: TypeAlias = (OffsetCommitKey | GroupMetadataKey | Kip848Key | ShareKey | StreamsKey | UnknownRecordKey
                        | ControlRecordKey)
"""What `CoordinatorRecord.key` holds: a key class above or in `records_kip848`/`_share`/`_streams`."""

RecordValue: TypeAlias = (OffsetCommitValue | GroupMetadataValue | Kip848Value | ShareValue | StreamsValue
                          | UnknownRecordValue | ControlRecordValue)
"""What a non-tombstone `CoordinatorRecord.value` holds: a value class above or in
`records_kip848`/`_share`/`_streams`."""


# ---------------------------------------------------------------------------------------------
# schemas, declared once

OFFSET_COMMIT_KEY = Message(Struct("OffsetCommitKey", (
    Field("group", "string"),
    Field("topic", "string"),
    Field("partition", "int32"),
), OffsetCommitKey), valid="0-1")

OFFSET_COMMIT_VALUE = Message(Struct("OffsetCommitValue", (
    Field("offset", "int64"),
    Field("leader_epoch", "int32", versions="3+", default=-1, ignorable=True),
    Field("metadata", "string"),
    Field("commit_timestamp", "int64"),
    Field("expire_timestamp", "int64", versions="1", default=-1, ignorable=True),
), OffsetCommitValue), valid="0-4", flexible="4+")

GROUP_METADATA_KEY = Message(Struct("GroupMetadataKey", (
    Field("group", "string", versions="2"),
), GroupMetadataKey), valid="2")

GROUP_METADATA_VALUE = Message(Struct("GroupMetadataValue", (
    Field("protocol_type", "string"),
    Field("generation", "int32"),
    Field("protocol", "string", nullable="0+"),
    Field("leader", "string", nullable="0+"),
    Field("current_state_timestamp", "int64", versions="2+", default=-1, ignorable=True),
    Field("members", Array(Struct("MemberMetadata", (
        Field("member_id", "string"),
        Field("group_instance_id", "string", versions="3+", nullable="3+", default=None, ignorable=True),
        Field("client_id", "string"),
        Field("client_host", "string"),
        Field("rebalance_timeout", "int32", versions="1+", default=-1, ignorable=True),
        Field("session_timeout", "int32"),
        Field("subscription", "bytes"),
        Field("assignment", "bytes"),
    ), MemberMetadata))),
), GroupMetadataValue), valid="0-4", flexible="4+")

# record type -> (key schema, value schema) for every type that decodes to dataclasses
_SCHEMAS: dict[int, tuple[Message[RecordKey], Message[RecordValue]]] = {
    0: (OFFSET_COMMIT_KEY, OFFSET_COMMIT_VALUE),
    1: (OFFSET_COMMIT_KEY, OFFSET_COMMIT_VALUE),
    2: (GROUP_METADATA_KEY, GROUP_METADATA_VALUE),
    **KIP848_SCHEMAS,
    **SHARE_SCHEMAS,
    **STREAMS_SCHEMAS,
}
GROUP_RECORD_TYPES: frozenset[int] = frozenset(t for t in _SCHEMAS if t > 2)
"""The consumer-, share- and streams-group record types whose layouts this codec knows."""
_GROUP_VALUE_CLASSES: dict[type[RecordValue], int] = {
    c: t for classes in (KIP848_VALUE_CLASSES, SHARE_VALUE_CLASSES, STREAMS_VALUE_CLASSES) for c, t in classes.items()}
_KEY_CLASS_TYPES: dict[type[RecordKey], tuple[int, ...]] = {
    OffsetCommitKey: (0, 1), GroupMetadataKey: (2,),
    **{c: (t,) for c, t in (KIP848_KEY_CLASSES | SHARE_KEY_CLASSES | STREAMS_KEY_CLASSES).items()},
}
_VALUE_CLASS_TYPES: dict[type[RecordValue], tuple[int, ...]] = {
    OffsetCommitValue: (0, 1), GroupMetadataValue: (2,), **{c: (t,) for c, t in _GROUP_VALUE_CLASSES.items()},
}


def _value_schema(cls: type[RecordValue], record_type: int) -> Message[RecordValue]:
    legacy = LEGACY_LAYOUTS.get(record_type)
    return legacy[0] if legacy is not None and legacy[0].root.factory is cls else _SCHEMAS[record_type][1]


# the value schema each class writes with (a 4.0 share layout's class: its own)
_VALUE_SCHEMAS: dict[type[RecordValue], Message[RecordValue]] = {
    c: _value_schema(c, ts[0]) for c, ts in _VALUE_CLASS_TYPES.items()}


# ---------------------------------------------------------------------------------------------
# the decoded record


@dataclass(frozen=True, slots=True)
class CoordinatorRecord:
    """One decoded `__consumer_offsets` record.

    key_version is the key's int16: the record type (0..23, or whatever an unknown key holds), or
    the control key's version for a transaction marker. value_version is the value's int16, None
    for a tombstone; left out, it defaults to what the snapshot's coordinator writes (OffsetCommit
    v3, or v1 when expire_timestamp is set; GroupMetadata v3; consumer, share and streams group records
    v0; markers v0).
    """

    key: RecordKey
    value: RecordValue | None
    key_version: int
    value_version: int | None = None
    key_trailing: bytes = b""
    value_trailing: bytes = b""

    def __post_init__(self) -> None:
        if self.value is None:
            if self.value_version is not None:
                raise ValueError(f"a tombstone has no value version (got {self.value_version})")
        elif self.value_version is None:
            object.__setattr__(self, "value_version", _default_value_version(self.value))

    @classmethod
    def of(cls, key: RecordKey, value: RecordValue | None = None, *, key_version: int | None = None,
           value_version: int | None = None) -> CoordinatorRecord:
        """Builds a record with the versions the snapshot's coordinator writes unless given."""
        return cls(key, value, _default_key_version(key) if key_version is None else key_version, value_version)

    @property
    def is_tombstone(self) -> bool:
        return self.value is None

    @property
    def is_control(self) -> bool:
        return isinstance(self.key, ControlRecordKey)

    @property
    def record_type_name(self) -> str:
        """"OffsetCommit", "GroupMetadata", a KIP-848/share/streams name (`_KEY_SCHEMA_NAMES`),
        "Control(COMMIT)"-style for markers, or "Unknown(<type>)"."""
        if isinstance(self.key, ControlRecordKey):
            return f"Control({self.key.type_name})"
        name = RECORD_TYPE_NAMES.get(self.key_version)
        return name if name is not None else f"Unknown({self.key_version})"


def _default_key_version(key: RecordKey) -> int:
    if isinstance(key, OffsetCommitKey):
        return 1
    if isinstance(key, UnknownRecordKey):
        return key.record_type
    if isinstance(key, ControlRecordKey):
        return 0
    types = _KEY_CLASS_TYPES.get(type(key))
    if types is None:
        raise ValueError(f"not a record key: {key!r}")
    return types[0]


def _default_value_version(value: RecordValue) -> int:
    if isinstance(value, OffsetCommitValue):
        return 1 if value.expire_timestamp != -1 else 3
    if isinstance(value, GroupMetadataValue):
        return 3
    if isinstance(value, ControlRecordValue) or type(value) in _GROUP_VALUE_CLASSES:
        return 0
    raise ValueError(f"give value_version explicitly for {type(value).__name__}")


# ---------------------------------------------------------------------------------------------
# the offset-commit fast path (99% of a real log)

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_QQ = struct.Struct(">qq")
_V3_HEAD = struct.Struct(">hqih")  # version, offset, leader epoch, metadata length
_V1_HEAD = struct.Struct(">hqh")  # version (0, 1 or 2), offset, metadata length


def _offset_key_fast(key: bytes) -> tuple[str, str, int, int] | None:
    """(group, topic, partition, end) for a well-formed type 0/1 key, None for anything unusual."""
    n = len(key)
    if n < 10 or key[0] != 0 or key[1] > 1:
        return None
    glen = (key[2] << 8) | key[3]
    p = 4 + glen
    if glen > 0x7FFF or p + 6 > n:  # a negative length reads as > 0x7fff here
        return None
    tlen = (key[p] << 8) | key[p + 1]
    q = p + 2 + tlen
    if tlen > 0x7FFF or q + 4 > n:
        return None
    try:
        group = key[4:p].decode()
        topic = key[p + 2:q].decode()
    except UnicodeDecodeError:
        return None
    return group, topic, _I.unpack_from(key, q)[0], q + 4


def _offset_value_fast(value: bytes) -> tuple[int, int, int, str, int, int, int] | None:
    """(version, offset, leader_epoch, metadata, commit_ts, expire_ts, end) for v0–v3, else None."""
    n = len(value)
    if n >= 24 and value[0] == 0 and value[1] == 3:
        _, offset, epoch, mlen = _V3_HEAD.unpack_from(value, 0)
        p = 16 + mlen
        if mlen < 0 or p + 8 > n:
            return None
        try:
            metadata = value[16:p].decode()
        except UnicodeDecodeError:
            return None
        return 3, offset, epoch, metadata, _Q.unpack_from(value, p)[0], -1, p + 8
    if n >= 20 and value[0] == 0 and value[1] <= 2:
        version, offset, mlen = _V1_HEAD.unpack_from(value, 0)
        p = 12 + mlen
        end = p + (16 if version == 1 else 8)
        if mlen < 0 or end > n:
            return None
        try:
            metadata = value[12:p].decode()
        except UnicodeDecodeError:
            return None
        if version == 1:
            commit, expire = _QQ.unpack_from(value, p)
            return 1, offset, -1, metadata, commit, expire, end
        return version, offset, -1, metadata, _Q.unpack_from(value, p)[0], -1, end
    return None


def _uvarint_at(data: bytes, at: int) -> tuple[int, int]:
    """(value, position after it) of the unsigned varint at `at`; (-1, at) when it runs off the end."""
    value = shift = 0
    while at < len(data) and shift < 35:
        b = data[at]
        at += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, at
        shift += 7
    return -1, at


_ZERO_UUID = bytes(16)


def offset_commit_topic_id(value: bytes) -> bytes | None:
    """The topic id of an OffsetCommitValue of version 4 or later (its tagged field 0, `TopicId`,
    written by Kafka 4.1+ brokers beside the topic name of the key), as its 16 bytes; None when the
    value is an earlier version, has no such tag, or holds the zero id (`Uuid.ZERO_UUID`).

    For a value `offset_commit_value_fields` reads (the layout is not checked again): version,
    offset, leader epoch, the compact metadata string, commitTimestamp, then the tagged fields."""
    if len(value) < 15 or (value[0] << 8 | value[1]) < 4 or value[0] & 0x80:
        return None
    n, at = _uvarint_at(value, 14)
    if n < 1:
        return None
    at += n - 1 + 8
    count, at = _uvarint_at(value, at)
    for _ in range(max(count, 0)):
        tag, at = _uvarint_at(value, at)
        size, at = _uvarint_at(value, at)
        if tag < 0 or size < 0 or at + size > len(value):
            return None
        if tag == 0 and size == 16:
            data = value[at:at + 16]
            return None if data == _ZERO_UUID else data
        at += size
    return None


def offset_commit_key_fields(key: bytes) -> tuple[str, str, int]:
    """(group, topic, partition) of an offset-commit key (type 0 or 1), without building a record.

    Falls back to the generic decoder for anything unusual, so bad bytes raise the same
    `RecordDecodeError`; a key of another record type is a `RecordDecodeError` too."""
    fast = _offset_key_fast(key) if type(key) is bytes else None
    if fast is not None:
        return fast[0], fast[1], fast[2]
    rec_key, _, _ = _decode_key(key, is_control=False)
    if not isinstance(rec_key, OffsetCommitKey):
        raise RecordDecodeError(f"not an offset commit key: record type {_H.unpack_from(key, 0)[0]}",
                                schema="OffsetCommitKey", field="<record type>", position=0)
    return rec_key.group, rec_key.topic, rec_key.partition


def offset_commit_value_fields(value: bytes) -> tuple[int, int, int, str, int, int]:
    """(value_version, offset, leader_epoch, metadata, commit_timestamp, expire_timestamp) of an
    OffsetCommitValue, without building a record; absent fields are -1 as in `decode`.

    Falls back to the generic decoder for v4+ and anything unusual (same `RecordDecodeError`)."""
    fast = _offset_value_fast(value) if type(value) is bytes else None
    if fast is not None:
        return fast[:6]
    if value is None:
        raise RecordDecodeError("a tombstone has no value fields", schema="OffsetCommitValue")
    v, version, _ = _decode_value(value, 1)
    assert isinstance(v, OffsetCommitValue) and version is not None
    return version, v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp


# ---------------------------------------------------------------------------------------------
# decode


def _as_bytes(data: object, what: str) -> bytes:
    if type(data) is bytes:
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise RecordDecodeError(f"expected bytes, got {type(data).__name__}", field=what)


def _decode_key(key: object, *, is_control: bool) -> tuple[RecordKey, int, bytes]:
    """(key object, key_version, trailing bytes)."""
    if key is None:
        raise RecordDecodeError("the record has no key", field="key")
    data = _as_bytes(key, "key")
    if len(data) < 2:
        raise RecordDecodeError(f"a key needs at least 2 bytes for its int16 type, got {len(data)}",
                                schema="ControlRecordKey" if is_control else "", field="<record type>",
                                position=0)
    rtype = _H.unpack_from(data, 0)[0]
    if is_control:
        if len(data) < 4:
            raise RecordDecodeError(f"a control key needs 4 bytes, got {len(data)}", schema="ControlRecordKey",
                                    field="type", position=2)
        if rtype < 0:
            raise RecordDecodeError(f"negative control key version {rtype}", schema="ControlRecordKey",
                                    field="version", position=0)
        return ControlRecordKey(_H.unpack_from(data, 2)[0]), rtype, data[4:]
    if rtype <= 1 and rtype >= 0:
        fast = _offset_key_fast(data)
        if fast is not None:
            return OffsetCommitKey(fast[0], fast[1], fast[2]), rtype, data[fast[3]:]
    schemas = _SCHEMAS.get(rtype)
    if schemas is None:
        return UnknownRecordKey(rtype, data[2:]), rtype, b""
    obj, end = read_body(schemas[0], data, 2, rtype)
    return obj, rtype, data[end:]


def _decode_value(value: object, rtype: int, *, control_type: int | None = None
                  ) -> tuple[RecordValue | None, int | None, bytes]:
    """(value object, value_version, trailing bytes) for a value of record type `rtype`."""
    if value is None:
        return None, None, b""
    schemas = _SCHEMAS.get(rtype) if control_type is None else None
    schema_name = (schemas[1].name if schemas else
                   "ControlRecordValue" if control_type is not None else "UnknownRecordValue")
    data = _as_bytes(value, "value")
    if len(data) < 2:
        raise RecordDecodeError(f"a value needs at least 2 bytes for its int16 version, got {len(data)}",
                                schema=schema_name, field="<version>", position=0)
    version = _H.unpack_from(data, 0)[0]
    if control_type is not None:
        if control_type not in (0, 1):  # only ABORT/COMMIT markers have a layout we know
            return UnknownRecordValue(data[2:]), version, b""
        if version < 0:
            raise RecordDecodeError(f"negative marker version {version}", schema=schema_name,
                                    field="<version>", position=0)
        if len(data) < 6:
            raise RecordDecodeError(f"a marker value needs 6 bytes, got {len(data)}", schema=schema_name,
                                    field="coordinator_epoch", position=2)
        return ControlRecordValue(_I.unpack_from(data, 2)[0]), version, data[6:]
    if schemas is None:
        return UnknownRecordValue(data[2:]), version, b""
    if version < 0:
        raise RecordDecodeError(f"unsupported value version {version}", schema=schema_name,
                                field="<version>", position=0)
    if rtype <= 1:
        fast = _offset_value_fast(data)
        if fast is not None:
            return OffsetCommitValue(fast[1], fast[2], fast[3], fast[4], fast[5]), version, data[fast[6]:]
    message = schemas[1]
    if version == 0 and rtype in LEGACY_LAYOUTS:
        return _decode_either_layout(data, message, *LEGACY_LAYOUTS[rtype]), 0, b""
    obj, end = read_body(message, data, 2, min(version, message.highest))
    return obj, version, data[end:]


def _decode_either_layout(data: bytes, current: Message[RecordValue], legacy: Message[RecordValue],
                          field: str) -> RecordValue:
    """A v0 value of a type whose layout changed in place between 4.0 and 4.1: decoded with the one
    layout (`current`, or `legacy` lacking `field`) that reads exactly its bytes. Kafka writes no
    trailing bytes, so a value both or neither layout reads exactly is an error naming `field`."""
    fits: list[RecordValue] = []
    why: list[str] = []
    for message in (current, legacy):
        try:
            obj, end = read_body(message, data, 2, 0)
        except RecordDecodeError as exc:
            why.append(f"as {message.name}: {exc}")
            continue
        if end == len(data):
            fits.append(obj)
        else:
            why.append(f"as {message.name}: {len(data) - end} byte(s) left over at byte {end}")
    if len(fits) == 1:
        return fits[0]
    if fits:
        raise RecordDecodeError(f"the bytes read exactly both as Kafka 4.1+'s layout (with {field}) and as "
                                f"4.0's ({legacy.name}, without it); which one wrote them is unknown",
                                schema=current.name, field=field, position=2)
    raise RecordDecodeError(f"the bytes fit neither Kafka 4.1+'s layout (with {field}) nor 4.0's (without it): "
                            + "; ".join(why), schema=current.name, field=field, position=2)


def decode(key: bytes, value: bytes | None, *, is_control: bool = False) -> CoordinatorRecord:
    """Decodes one `__consumer_offsets` record; `value` None is a tombstone.

    `is_control=True` reads a transaction marker from a control batch. Raises `RecordDecodeError`
    (naming schema, field and byte position) for bytes that do not decode; callers add the log
    position with `err.at("partition P offset O")`."""
    if not is_control and type(key) is bytes and type(value) is bytes:  # the offset-commit fast path
        fk = _offset_key_fast(key)
        if fk is not None:
            fv = _offset_value_fast(value)
            if fv is not None:
                return CoordinatorRecord(OffsetCommitKey(fk[0], fk[1], fk[2]),
                                         OffsetCommitValue(fv[1], fv[2], fv[3], fv[4], fv[5]),
                                         key[1], fv[0], key[fk[3]:], value[fv[6]:])
    rec_key, key_version, key_trailing = _decode_key(key, is_control=is_control)
    control_type = rec_key.control_type if isinstance(rec_key, ControlRecordKey) else None
    rec_value, value_version, value_trailing = _decode_value(value, key_version, control_type=control_type)
    return CoordinatorRecord(rec_key, rec_value, key_version, value_version, key_trailing, value_trailing)


# ---------------------------------------------------------------------------------------------
# encode


def _encode_key(rec: CoordinatorRecord) -> bytes:
    key, kv = rec.key, rec.key_version
    if not isinstance(kv, int) or not -(1 << 15) <= kv < (1 << 15):
        raise RecordEncodeError(f"key_version {kv!r} is not an int16")
    head = _H.pack(kv)
    if isinstance(key, ControlRecordKey):
        if kv < 0:
            raise RecordEncodeError(f"negative control key version {kv}")
        _check_int16(key.control_type, "ControlRecordKey.control_type")
        return head + _H.pack(key.control_type)
    if isinstance(key, UnknownRecordKey):
        if key.record_type != kv:
            raise RecordEncodeError(f"UnknownRecordKey type {key.record_type} but key_version {kv}")
        if kv in _SCHEMAS:
            raise RecordEncodeError(f"record type {kv} has a known layout: use {_SCHEMAS[kv][0].name}")
        return head + bytes(key.raw)
    types = _KEY_CLASS_TYPES.get(type(key))
    if types is None:
        raise RecordEncodeError(f"not a record key: {key!r}")
    if kv not in types:
        raise RecordEncodeError(f"{type(key).__name__} is written with record type {types}, not {kv}")
    # the offset-commit fast path; anything unusual goes to the generic writer. Only OffsetCommitKey is
    # written with record type 0/1, so this type test is the `kv <= 1` test it replaces (and narrows `key`).
    if type(key) is OffsetCommitKey:
        try:
            g, t, p = key.group.encode(), key.topic.encode(), key.partition
            if len(g) <= 0x7FFF and len(t) <= 0x7FFF and type(p) is int and -(1 << 31) <= p < (1 << 31):
                return head + _H.pack(len(g)) + g + _H.pack(len(t)) + t + _I.pack(p)
        except (AttributeError, UnicodeEncodeError):
            pass
    return head + write_body(_SCHEMAS[kv][0], key, kv)


def _check_int16(v: object, what: str) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or not -(1 << 15) <= v < (1 << 15):
        raise RecordEncodeError(f"{what} {v!r} is not an int16")


def _encode_value(rec: CoordinatorRecord) -> bytes | None:
    value, vv = rec.value, rec.value_version
    if value is None:
        return None
    _check_int16(vv, "value_version")
    assert vv is not None
    head = _H.pack(vv)
    if isinstance(rec.key, ControlRecordKey):
        if rec.key.control_type in (0, 1):
            if not isinstance(value, ControlRecordValue):
                raise RecordEncodeError(f"a {rec.key.type_name} marker needs a ControlRecordValue, "
                                        f"got {type(value).__name__}")
            if vv < 0:
                raise RecordEncodeError(f"negative marker version {vv}")
            epoch = value.coordinator_epoch
            if not isinstance(epoch, int) or not -(1 << 31) <= epoch < (1 << 31):
                raise RecordEncodeError(f"ControlRecordValue.coordinator_epoch {epoch!r} is not an int32")
            return head + _I.pack(epoch)
        if not isinstance(value, UnknownRecordValue):
            raise RecordEncodeError(f"a {rec.key.type_name} control record keeps its value raw")
        return head + bytes(value.raw)
    if isinstance(value, UnknownRecordValue):
        if not isinstance(rec.key, UnknownRecordKey):
            raise RecordEncodeError(f"an UnknownRecordValue needs an UnknownRecordKey, got {type(rec.key).__name__}")
        return head + bytes(value.raw)
    types = _VALUE_CLASS_TYPES.get(type(value))
    if types is None or rec.key_version not in types:
        raise RecordEncodeError(f"{type(value).__name__} is not the value of record type {rec.key_version}")
    if type(value) is OffsetCommitValue and 0 <= vv <= 3:  # the offset-commit fast path
        try:
            meta = value.metadata.encode()
            if len(meta) <= 0x7FFF:
                if vv == 3:
                    return (_V3_HEAD.pack(3, value.offset, value.leader_epoch, len(meta)) + meta
                            + _Q.pack(value.commit_timestamp))
                tail = (_QQ.pack(value.commit_timestamp, value.expire_timestamp) if vv == 1
                        else _Q.pack(value.commit_timestamp))
                return _V1_HEAD.pack(vv, value.offset, len(meta)) + meta + tail
        except (AttributeError, UnicodeEncodeError, struct.error):
            pass  # the generic writer names the offending field
    message = _VALUE_SCHEMAS[type(value)]
    if vv not in message.valid:
        raise RecordEncodeError(f"{message.name} version {vv} is unknown (this codec writes "
                                f"v{message.lowest}–v{message.highest})")
    return head + write_body(message, value, vv)


def encode(rec: CoordinatorRecord) -> tuple[bytes, bytes | None]:
    """(key bytes, value bytes or None) of `rec` at its key_version/value_version: the exact inverse
    of `decode` for Kafka-written bytes (trailing bytes included). Raises `RecordEncodeError` for a
    field that does not fit its type, a key/value mismatch or an unknown value version."""
    if not isinstance(rec, CoordinatorRecord):
        raise RecordEncodeError(f"expected a CoordinatorRecord, got {type(rec).__name__}")
    for name in ("key_trailing", "value_trailing"):
        if not isinstance(getattr(rec, name), bytes | bytearray | memoryview):
            raise RecordEncodeError(f"{name} must be bytes, got {type(getattr(rec, name)).__name__}")
    key = _encode_key(rec) + bytes(rec.key_trailing)
    value = _encode_value(rec)
    if value is not None:
        value += bytes(rec.value_trailing)
    elif rec.value_trailing:
        raise RecordEncodeError("a tombstone cannot carry value_trailing bytes")
    return key, value


# ---------------------------------------------------------------------------------------------
# partitioning


OFFSETS_TOPIC_NUM_PARTITIONS = 50
"""Kafka's default `offsets.topic.num.partitions` (GroupCoordinatorConfig.OFFSETS_TOPIC_PARTITIONS_DEFAULT)."""


def partition_for(group_id: str, num_partitions: int = OFFSETS_TOPIC_NUM_PARTITIONS) -> int:
    """The `__consumer_offsets` partition of a group: Utils.abs(String#hashCode) modulo
    the partition count; follows GroupMetadataManager#partitionFor."""
    if not isinstance(num_partitions, int) or num_partitions < 1:
        raise ConfigError(f"offsets.topic.num.partitions must be a positive int, got {num_partitions!r}")
    return kafka_abs(java_string_hashcode(group_id)) % num_partitions
