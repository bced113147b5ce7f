"""A round trip for every version of every schema, the defaults of absent fields, versions above
the highest known, tagged fields, trailing bytes, control records, unknown record types and
encode-side validation."""

from __future__ import annotations

import uuid

import pytest

from coordinator_audit.core.consumer_protocol import (
    Assignment,
    Subscription,
    TopicPartitions,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from coordinator_audit.core.errors import RecordDecodeError, RecordEncodeError
from coordinator_audit.core.records import (
    RECORD_TYPE_NAMES,
    ControlRecordKey,
    ControlRecordValue,
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownRecordKey,
    UnknownRecordValue,
    decode,
    encode,
    offset_commit_key_fields,
    offset_commit_value_fields,
)
from coordinator_audit.core.records_kip848 import (
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    CurrentTopicPartitions,
    PartitionMetadata,
    TopicIdPartitions,
    TopicMetadata,
)
from tests.support.codec import round_trip

TS = 1700000000000
OFFSET_KEY = OffsetCommitKey("grp", "orders", 7)
FULL_OFFSET = OffsetCommitValue(42, 3, "meta", TS, TS + 86_400_000)
MEMBER = MemberMetadata("m1", "inst-1", "c1", "/10.0.0.1", 300000, 45000, b"\x00\x01sub", b"\x00\x01asg")
FULL_GROUP = GroupMetadataValue("consumer", 5, "range", "m1", TS, (MEMBER, MEMBER))


# ---- OffsetCommit key v0/v1 and value v0–v4 ---------------------------------------------------

@pytest.mark.parametrize("key_version", [0, 1])
def test_offset_commit_key_versions(key_version: int) -> None:
    back = round_trip(CoordinatorRecord(OFFSET_KEY, None, key_version))
    assert back == CoordinatorRecord(OFFSET_KEY, None, key_version)
    assert back.record_type_name == "OffsetCommit"


@pytest.mark.parametrize(("version", "expected"), [
    (0, OffsetCommitValue(42, -1, "meta", TS, -1)),  # no leader epoch, no expire timestamp
    (1, OffsetCommitValue(42, -1, "meta", TS, TS + 86_400_000)),  # the only version with expire
    (2, OffsetCommitValue(42, -1, "meta", TS, -1)),
    (3, OffsetCommitValue(42, 3, "meta", TS, -1)),  # leader epoch from v3
    (4, OffsetCommitValue(42, 3, "meta", TS, -1)),  # flexible
])
def test_offset_commit_value_versions(version: int, expected: OffsetCommitValue) -> None:
    """Writing drops the (ignorable) fields a version lacks; reading fills -1 (the generated messages' defaults)."""
    back = round_trip(CoordinatorRecord(OFFSET_KEY, FULL_OFFSET, 1, version))
    assert back.value == expected and back.value_version == version


# ---- GroupMetadata value v0–v4 --------------------------------------------------------------

@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_group_metadata_value_versions(version: int) -> None:
    back = round_trip(CoordinatorRecord(GroupMetadataKey("grp"), FULL_GROUP, 2, version))
    value = back.value
    assert isinstance(value, GroupMetadataValue)
    assert (value.protocol_type, value.generation, value.protocol, value.leader) == ("consumer", 5, "range", "m1")
    assert value.current_state_timestamp == (TS if version >= 2 else -1)
    for m in value.members:
        assert m.group_instance_id == ("inst-1" if version >= 3 else None)
        assert m.rebalance_timeout == (300000 if version >= 1 else -1)
        assert (m.member_id, m.client_id, m.client_host, m.session_timeout) == ("m1", "c1", "/10.0.0.1", 45000)
        assert (m.subscription, m.assignment) == (MEMBER.subscription, MEMBER.assignment)


def test_group_metadata_null_protocol_and_leader_in_flexible_version() -> None:
    empty = GroupMetadataValue("consumer", 3, None, None, TS, ())
    assert round_trip(CoordinatorRecord(GroupMetadataKey("g"), empty, 2, 4)).value == empty


# ---- KIP-848 records (types 3-8) and the regex record (16) -----------------------------------

TOPIC_ID = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
KIP848 = [
    (ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(7)),
    (ConsumerGroupPartitionMetadataKey("g"), ConsumerGroupPartitionMetadataValue((
        TopicMetadata(TOPIC_ID, "orders", 3, (PartitionMetadata(0, ("r1", "r2")), PartitionMetadata(1, ()))),
    ))),
    (ConsumerGroupMemberMetadataKey("g", "m"), ConsumerGroupMemberMetadataValue(
        "i", "rack", "c", "/h", ("a", "b"), "re.*", 300000, "uniform",
        ClassicMemberMetadata(45000, (ClassicProtocol("range", b"\x00"), ClassicProtocol("roundrobin", b""))))),
    (ConsumerGroupTargetAssignmentMetadataKey("g"), ConsumerGroupTargetAssignmentMetadataValue(9)),
    (ConsumerGroupTargetAssignmentMemberKey("g", "m"), ConsumerGroupTargetAssignmentMemberValue((
        TopicIdPartitions(TOPIC_ID, (0, 2)),))),
    (ConsumerGroupCurrentMemberAssignmentKey("g", "m"), ConsumerGroupCurrentMemberAssignmentValue(
        4, 3, 1, (CurrentTopicPartitions(TOPIC_ID, (1,), (4,)),), ())),
    (ConsumerGroupRegularExpressionKey("g", "t.*"), ConsumerGroupRegularExpressionValue(("t1", "t2"), 12, TS)),
]


@pytest.mark.parametrize(("key", "value"), KIP848, ids=[type(k).__name__ for k, _ in KIP848])
def test_kip848_records(key: object, value: object) -> None:
    rec = CoordinatorRecord.of(key, value)
    assert rec.value_version == 0
    back = round_trip(rec)
    assert back == rec
    assert back.record_type_name == RECORD_TYPE_NAMES[back.key_version]
    assert round_trip(CoordinatorRecord.of(key)) == CoordinatorRecord.of(key)  # tombstone


def test_kip848_value_of_the_3_7_layout_is_a_decode_error_not_a_misread() -> None:
    # 3.7's ConsumerGroupPartitionMetadataValue began with an int32 Epoch (ConsumerGroupPartitionMetadataValue.json)
    key = encode(CoordinatorRecord.of(ConsumerGroupPartitionMetadataKey("g")))[0]
    with pytest.raises(RecordDecodeError, match="ConsumerGroupPartitionMetadataValue"):
        decode(key, bytes.fromhex("0000" "00000005" "02" "0f1e2d3c4b5a69788796a5b4c3d2e1f0" "02" "6f"))


# ---- unknown types, control records ----------------------------------------------------------

@pytest.mark.parametrize("record_type", [18, 1000, -1, -32768])
def test_types_beyond_the_table_are_unknown_records_not_errors(record_type: int) -> None:
    key = record_type.to_bytes(2, "big", signed=True) + b"junk"
    rec = decode(key, b"\xff\xff\x00")
    assert rec.key == UnknownRecordKey(record_type, b"junk") and rec.key.name is None
    assert rec.record_type_name == f"Unknown({record_type})"
    assert encode(rec) == (key, b"\xff\xff\x00")


@pytest.mark.parametrize(("control_type", "name"), [(0, "ABORT"), (1, "COMMIT")])
def test_transaction_markers(control_type: int, name: str) -> None:
    key = b"\x00\x00" + control_type.to_bytes(2, "big")  # version 0, type
    value = b"\x00\x00" + (17).to_bytes(4, "big")  # version 0, coordinator epoch 17
    rec = decode(key, value, is_control=True)
    assert rec == CoordinatorRecord(ControlRecordKey(control_type), ControlRecordValue(17), 0, 0)
    assert rec.is_control and rec.key.type_name == name and rec.record_type_name == f"Control({name})"
    assert encode(rec) == (key, value)


def test_a_marker_is_never_read_as_an_offset_key() -> None:
    commit_key = bytes.fromhex("00000001")
    with pytest.raises(RecordDecodeError, match="OffsetCommitKey"):
        decode(commit_key, bytes.fromhex("0000 00000011"))  # without the flag: a cut-off offset key
    assert not isinstance(decode(commit_key, bytes.fromhex("000000000011"), is_control=True).key, OffsetCommitKey)


def test_other_control_types_keep_raw_values() -> None:
    rec = decode(bytes.fromhex("00000002"), bytes.fromhex("0000 0102"), is_control=True)
    assert rec.key.type_name == "LEADER_CHANGE" and rec.value == UnknownRecordValue(b"\x01\x02")
    assert encode(rec) == (bytes.fromhex("00000002"), bytes.fromhex("00000102"))


@pytest.mark.parametrize(("key", "value", "match"), [
    ("0000", "000000000001", "control key needs 4 bytes"),
    ("ffff0001", "000000000001", "negative control key version"),
    ("00000001", "000000", "marker value needs 6 bytes"),
    ("00000000", "ffff00000001", "negative marker version"),
])
def test_bad_markers(key: str, value: str, match: str) -> None:
    with pytest.raises(RecordDecodeError, match=match):
        decode(bytes.fromhex(key), bytes.fromhex(value), is_control=True)


# ---- versions above the highest known, tags, trailing bytes ----------------------------------

def test_value_version_above_highest_reads_with_v4_layout_and_keeps_unknown_tags() -> None:
    body = encode(CoordinatorRecord(OFFSET_KEY, OffsetCommitValue(5, 1, "", TS), 1, 4))[1]
    assert body is not None
    v7 = b"\x00\x07" + body[2:-1] + bytes.fromhex("01" "05" "02" "abcd")  # one unknown tag 5, 2 bytes
    key = encode(CoordinatorRecord(OFFSET_KEY, None, 1))[0]
    rec = decode(key, v7)
    assert rec.value_version == 7
    assert rec.value == OffsetCommitValue(5, 1, "", TS, unknown_tagged_fields=((5, b"\xab\xcd"),))
    with pytest.raises(RecordEncodeError, match="version 7 is unknown"):
        encode(rec)
    # the same unknown tag at a known version round-trips byte for byte
    v4 = b"\x00\x04" + v7[2:]
    assert encode(decode(key, v4)) == (key, v4)


def test_unknown_tags_merge_around_known_ones_like_kafka() -> None:
    value = ConsumerGroupMemberMetadataValue(None, None, "c", "/h", (), None, 1, None,
                                             ClassicMemberMetadata(10, ()),
                                             unknown_tagged_fields=((1, b"\x09"), (3, b"")))
    rec = CoordinatorRecord.of(ConsumerGroupMemberMetadataKey("g", "m"), value)
    raw = encode(rec)[1]
    assert raw is not None
    # tags in ascending order: 0 (known, nullable struct: size 1+4+1+1, presence 01), then 1 and 3
    assert raw.endswith(bytes.fromhex("03" "00 07 01 0000000a 01 00" "01 01 09" "03 00"))
    assert decode(encode(rec)[0], raw) == rec


def test_negative_value_version_is_an_error() -> None:
    with pytest.raises(RecordDecodeError, match=r"OffsetCommitValue\.<version>, byte 0: unsupported value version -2"):
        decode(encode(CoordinatorRecord(OFFSET_KEY, None, 1))[0], b"\xff\xfe" + bytes(20))


def test_trailing_bytes_are_ignored_like_kafka_but_kept_for_encode() -> None:
    key, value = encode(CoordinatorRecord(OFFSET_KEY, FULL_OFFSET, 1, 3))
    assert value is not None
    rec = decode(key + b"\x01", value + b"\x02\x03")
    assert rec.key == OFFSET_KEY and rec.value == OffsetCommitValue(42, 3, "meta", TS)
    assert (rec.key_trailing, rec.value_trailing) == (b"\x01", b"\x02\x03")
    assert encode(rec) == (key + b"\x01", value + b"\x02\x03")


# ---- consumer protocol versions -------------------------------------------------------------

FULL_SUB = Subscription(3, ("a", "b"), b"ud", (TopicPartitions("a", (0, 1)),), 6, "rack-1")


@pytest.mark.parametrize(("version", "expected"), [
    (0, Subscription(0, ("a", "b"), b"ud")),
    (1, Subscription(1, ("a", "b"), b"ud", (TopicPartitions("a", (0, 1)),))),
    (2, Subscription(2, ("a", "b"), b"ud", (TopicPartitions("a", (0, 1)),), 6)),
    (3, FULL_SUB),
])
def test_subscription_versions(version: int, expected: Subscription) -> None:
    data = encode_subscription(Subscription(version, *(getattr(FULL_SUB, f) for f in (
        "topics", "user_data", "owned_partitions", "generation_id", "rack_id"))))
    assert decode_subscription(data) == expected
    assert encode_subscription(expected) == data


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_assignment_versions(version: int) -> None:
    asg = Assignment(version, (TopicPartitions("b", (2, 0)), TopicPartitions("a", ())), None)
    data = encode_assignment(asg)
    assert data[:2] == version.to_bytes(2, "big")
    assert decode_assignment(data) == asg


def test_protocol_version_above_3_reads_with_v3_layout_and_keeps_the_rest() -> None:
    v3 = encode_subscription(FULL_SUB)
    v5 = b"\x00\x05" + v3[2:] + b"\x00\x00\x00\x2a"  # a future field appended
    sub = decode_subscription(v5)
    assert sub.version == 5 and sub.trailing == b"\x00\x00\x00\x2a"
    assert (sub.topics, sub.generation_id, sub.rack_id) == (FULL_SUB.topics, 6, "rack-1")
    assert encode_subscription(sub) == v5
    asg = decode_assignment(b"\x00\x09" + encode_assignment(Assignment(3, ()))[2:])
    assert asg == Assignment(9, (), None)


def test_protocol_wire_values_are_kept() -> None:
    """Kafka's Subscription object turns a negative generation and an empty rack into "none";
    the codec keeps what the bytes say (so it can re-encode them)."""
    sub = Subscription(3, (), None, (), -7, "")
    assert decode_subscription(encode_subscription(sub)) == sub


@pytest.mark.parametrize(("data", "match"), [
    ("00", "needs 2 bytes for its int16 version"),
    ("ffff", "unsupported version -1"),
    ("0000ffffffff", r"topics, byte 2: non-nullable array is null"),
    ("000000000001", r"topics, byte 2: array count 1 exceeds the 0 byte\(s\) remaining"),
    ("0000 00000001 0002 61", r"topics\[0\], byte 8: string of length 2 needs 2 byte"),
])
def test_bad_subscriptions(data: str, match: str) -> None:
    with pytest.raises(RecordDecodeError, match=match):
        decode_subscription(bytes.fromhex(data.replace(" ", "")))


# ---- the record object and encode-side validation --------------------------------------------

def test_record_defaults() -> None:
    assert CoordinatorRecord.of(OFFSET_KEY, OffsetCommitValue(1, 2, "", TS)).value_version == 3
    assert CoordinatorRecord.of(OFFSET_KEY, FULL_OFFSET).value_version == 1
    assert CoordinatorRecord.of(GroupMetadataKey("g"), FULL_GROUP) == CoordinatorRecord(GroupMetadataKey("g"),
                                                                                         FULL_GROUP, 2, 3)
    assert CoordinatorRecord.of(OFFSET_KEY).key_version == 1 and CoordinatorRecord.of(OFFSET_KEY).is_tombstone
    with pytest.raises(ValueError, match="tombstone has no value version"):
        CoordinatorRecord(OFFSET_KEY, None, 1, 3)


@pytest.mark.parametrize(("rec", "match"), [
    (CoordinatorRecord(OFFSET_KEY, OffsetCommitValue(2**63, 0, "", 0), 1, 3), r"offset: 9223372036854775808 does not fit in int64"),
    (CoordinatorRecord(OFFSET_KEY, OffsetCommitValue(1, 0, None, 0), 1, 3), r"metadata: is None but the field is not nullable"),  # type: ignore[arg-type]
    (CoordinatorRecord(OFFSET_KEY, OffsetCommitValue(1, 0, "", 0), 1, 5), "version 5 is unknown"),
    (CoordinatorRecord(OFFSET_KEY, OffsetCommitValue(1, 0, "", 0), 2, 3), r"written with record type \(0, 1\), not 2"),
    (CoordinatorRecord(OFFSET_KEY, FULL_GROUP, 1, 3), "GroupMetadataValue is not the value of record type 1"),
    (CoordinatorRecord(GroupMetadataKey("g"), GroupMetadataValue("c", 1, None, None, -1, ("x",)), 2, 3),  # type: ignore[arg-type]
     r"members\[0\]: expected MemberMetadata, got str"),
    (CoordinatorRecord(GroupMetadataKey("\ud800"), None, 2), r"GroupMetadataKey.group: cannot be written as UTF-8"),
    (CoordinatorRecord(UnknownRecordKey(2, b""), None, 2), "record type 2 has a known layout"),
    (CoordinatorRecord.of(ConsumerGroupMemberMetadataKey("g", "m"), ConsumerGroupMemberMetadataValue(
        None, None, "c", "h", (), None, 1, None, None, ((0, b"\x00"),))), "tag 0 is a known field here"),
])
def test_encode_errors(rec: CoordinatorRecord, match: str) -> None:
    with pytest.raises(RecordEncodeError, match=match):
        encode(rec)


def test_unsorted_unknown_tags_are_written_as_given() -> None:
    """Kafka's raw-tag writer emits unknown tags in list order (decoding keeps wire order)."""
    rec = CoordinatorRecord.of(ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(
        1, unknown_tagged_fields=((2, b""), (1, b""))))
    assert encode(rec)[1] == bytes.fromhex("0000 00000001 02 0200 0100")
    assert decode(*encode(rec)) == rec


def test_fast_path_functions_on_other_inputs() -> None:
    key, value = encode(CoordinatorRecord(OFFSET_KEY, FULL_OFFSET, 0, 1))
    assert value is not None
    assert offset_commit_key_fields(bytearray(key)) == ("grp", "orders", 7)
    assert offset_commit_value_fields(memoryview(value)) == (1, 42, -1, "meta", TS, TS + 86_400_000)
    v4 = encode(CoordinatorRecord(OFFSET_KEY, FULL_OFFSET, 1, 4))[1]
    assert v4 is not None and offset_commit_value_fields(v4) == (4, 42, 3, "meta", TS, -1)
    with pytest.raises(RecordDecodeError, match="not an offset commit key: record type 2"):
        offset_commit_key_fields(encode(CoordinatorRecord.of(GroupMetadataKey("g")))[0])
    with pytest.raises(RecordDecodeError, match="tombstone has no value fields"):
        offset_commit_value_fields(None)  # type: ignore[arg-type]
