"""Golden bytes: twelve records (E1–E12) byte-identical to what Kafka's generated record classes
serialize, decoded field by field and re-encoded byte for byte. The hex is written one field per line."""

from __future__ import annotations

import pytest

from coordinator_audit.core.consumer_protocol import (
    Assignment,
    StickyUserData,
    Subscription,
    TopicPartitions,
    decode_assignment,
    decode_cooperative_user_data,
    decode_sticky_user_data,
    decode_subscription,
    encode_assignment,
    encode_cooperative_user_data,
    encode_sticky_user_data,
    encode_subscription,
)
from coordinator_audit.core.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    decode,
    encode,
)
from coordinator_audit.core.records_kip848 import (
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
)


def hx(text: str) -> bytes:
    """Hex from a spec-style listing: `|` separators, whitespace and `# comments` ignored."""
    lines = (line.split("#", 1)[0] for line in text.splitlines())
    return bytes.fromhex("".join(lines).replace("|", "").replace(" ", ""))


TS = 1700000000000  # 00 00 01 8b cf e5 68 00
assert hx("00 00 01 8b cf e5 68 00") == TS.to_bytes(8, "big")

E1_KEY = hx("""
    00 01                          # record type 1 (OffsetCommitKey)
    00 08 6d 79 2d 67 72 6f 75 70  # group "my-group"
    00 06 6f 72 64 65 72 73        # topic "orders"
    00 00 00 03                    # partition 3
""")

E2_VALUE = hx("""
    00 03                          # value version 3
    00 00 00 00 00 00 04 d2        # offset 1234
    00 00 00 05                    # leaderEpoch 5
    00 00                          # metadata "" (int16 length 0)
    00 00 01 8b cf e5 68 00        # commitTimestamp 1700000000000
""")

E3_VALUE = hx("""
    00 01                          # value version 1
    00 00 00 00 00 00 04 d2        # offset 1234
    00 01 78                       # metadata "x"
    00 00 01 8b cf e5 68 00        # commitTimestamp 1700000000000
    00 00 01 8b d5 0b c4 00        # expireTimestamp 1700086400000 (one day later)
""")

E4_VALUE = hx("""
    00 04                          # value version 4 (flexible)
    00 00 00 00 00 00 04 d2        # offset 1234
    00 00 00 05                    # leaderEpoch 5
    01                             # metadata "" as compact string: uvarint(0 + 1)
    00 00 01 8b cf e5 68 00        # commitTimestamp
    00                             # no tagged fields
""")

E5_KEY = hx("""
    00 02                          # record type 2 (GroupMetadataKey)
    00 08 6d 79 2d 67 72 6f 75 70  # group "my-group"
""")

E6_SUBSCRIPTION = hx("""
    00 01                          # Subscription version 1
    00 00 00 01                    # topics: 1
    00 06 6f 72 64 65 72 73        #   "orders"
    ff ff ff ff                    # userData null
    00 00 00 00                    # ownedPartitions: 0
""")

E6_ASSIGNMENT = hx("""
    00 01                          # Assignment version 1
    00 00 00 01                    # assignedPartitions: 1 topic
    00 06 6f 72 64 65 72 73        #   topic "orders"
    00 00 00 02                    #   partitions: 2
    00 00 00 00                    #     0
    00 00 00 01                    #     1
    ff ff ff ff                    # userData null
""")

E7_VALUE = hx("""
    00 03                              # value version 3
    00 08 63 6f 6e 73 75 6d 65 72      # protocolType "consumer"
    00 00 00 01                        # generation 1
    00 05 72 61 6e 67 65               # protocol "range"
    00 02 6d 31                        # leader "m1"
    00 00 01 8b cf e5 68 00            # currentStateTimestamp 1700000000000
    00 00 00 01                        # members: 1
      00 02 6d 31                      #   memberId "m1"
      ff ff                            #   groupInstanceId null
      00 02 63 31                      #   clientId "c1"
      00 09 2f 31 30 2e 30 2e 30 2e 31 #   clientHost "/10.0.0.1"
      00 04 93 e0                      #   rebalanceTimeout 300000
      00 00 af c8                      #   sessionTimeout 45000
      00 00 00 16                      #   subscription: 22 bytes (E6) follow
""") + E6_SUBSCRIPTION + hx("""
      00 00 00 1e                      #   assignment: 30 bytes (E6) follow
""") + E6_ASSIGNMENT

E8_VALUE = hx("""
    00 04                              # value version 4 (flexible)
    09 63 6f 6e 73 75 6d 65 72         # protocolType "consumer": uvarint(8 + 1)
    00 00 00 01                        # generation 1
    06 72 61 6e 67 65                  # protocol "range"
    03 6d 31                           # leader "m1"
    00 00 01 8b cf e5 68 00            # currentStateTimestamp
    02                                 # members: uvarint(1 + 1)
      03 6d 31                         #   memberId "m1"
      00                               #   groupInstanceId null (uvarint 0)
      03 63 31                         #   clientId "c1"
      0a 2f 31 30 2e 30 2e 30 2e 31    #   clientHost "/10.0.0.1"
      00 04 93 e0                      #   rebalanceTimeout 300000
      00 00 af c8                      #   sessionTimeout 45000
      17                               #   subscription: uvarint(22 + 1)
""") + E6_SUBSCRIPTION + hx("""
      1f                               #   assignment: uvarint(30 + 1)
""") + E6_ASSIGNMENT + hx("""
      00                               #   member: no tagged fields
    00                                 # top level: no tagged fields
""")

MEMBER_M1 = MemberMetadata(member_id="m1", group_instance_id=None, client_id="c1", client_host="/10.0.0.1",
                           rebalance_timeout=300000, session_timeout=45000,
                           subscription=E6_SUBSCRIPTION, assignment=E6_ASSIGNMENT)
GROUP_E7 = GroupMetadataValue(protocol_type="consumer", generation=1, protocol="range", leader="m1",
                              current_state_timestamp=TS, members=(MEMBER_M1,))


def assert_round_trip(key: bytes, value: bytes | None, expected: CoordinatorRecord) -> None:
    rec = decode(key, value)
    assert rec == expected
    assert encode(rec) == (key, value)
    assert encode(expected) == (key, value)


def test_e1_e2_offset_commit_v3() -> None:
    assert_round_trip(E1_KEY, E2_VALUE, CoordinatorRecord(
        OffsetCommitKey(group="my-group", topic="orders", partition=3),
        OffsetCommitValue(offset=1234, leader_epoch=5, metadata="", commit_timestamp=TS, expire_timestamp=-1),
        key_version=1, value_version=3))


def test_e3_offset_commit_v1_with_expire_timestamp() -> None:
    assert_round_trip(E1_KEY, E3_VALUE, CoordinatorRecord(
        OffsetCommitKey("my-group", "orders", 3),
        OffsetCommitValue(offset=1234, leader_epoch=-1, metadata="x", commit_timestamp=TS,
                          expire_timestamp=1700086400000),
        key_version=1, value_version=1))
    # the writer's rule (GroupCoordinatorRecordHelpers#newOffsetCommitRecord): an expire timestamp means v1
    assert CoordinatorRecord.of(OffsetCommitKey("my-group", "orders", 3),
                                decode(E1_KEY, E3_VALUE).value).value_version == 1


def test_e4_offset_commit_v4_flexible() -> None:
    assert_round_trip(E1_KEY, E4_VALUE, CoordinatorRecord(
        OffsetCommitKey("my-group", "orders", 3),
        OffsetCommitValue(1234, 5, "", TS), key_version=1, value_version=4))


def test_e5_group_metadata_key_and_tombstone() -> None:
    rec = decode(E5_KEY, None)
    assert rec == CoordinatorRecord(GroupMetadataKey("my-group"), None, key_version=2, value_version=None)
    assert rec.is_tombstone and rec.record_type_name == "GroupMetadata"
    assert encode(rec) == (E5_KEY, None)


def test_e6_embedded_subscription_and_assignment() -> None:
    assert len(E6_SUBSCRIPTION) == 22 and len(E6_ASSIGNMENT) == 30
    sub = Subscription(version=1, topics=("orders",), user_data=None, owned_partitions=(),
                       generation_id=-1, rack_id=None)
    asg = Assignment(version=1, assigned_partitions=(TopicPartitions("orders", (0, 1)),), user_data=None)
    assert decode_subscription(E6_SUBSCRIPTION) == sub
    assert decode_assignment(E6_ASSIGNMENT) == asg
    assert encode_subscription(sub) == E6_SUBSCRIPTION
    assert encode_assignment(asg) == E6_ASSIGNMENT


def test_e7_group_metadata_v3() -> None:
    assert len(E7_VALUE) == 128
    assert_round_trip(E5_KEY, E7_VALUE, CoordinatorRecord(GroupMetadataKey("my-group"), GROUP_E7, 2, 3))


def test_e8_group_metadata_v4_flexible() -> None:
    assert len(E8_VALUE) == 114
    assert_round_trip(E5_KEY, E8_VALUE, CoordinatorRecord(GroupMetadataKey("my-group"), GROUP_E7, 2, 4))


E9_V3 = hx("""
    00 03                          # value version 3
    00 08 63 6f 6e 73 75 6d 65 72  # protocolType "consumer"
    00 00 00 02                    # generation 2
    ff ff                          # protocol null
    ff ff                          # leader null
    00 00 01 8b cf e6 ee a0        # currentStateTimestamp 1700000100000
    00 00 00 00                    # members: 0
""")
E9_V0 = hx("""
    00 00                          # value version 0
    00 08 63 6f 6e 73 75 6d 65 72  # protocolType "consumer"
    00 00 00 02                    # generation 2
    ff ff                          # protocol null
    ff ff                          # leader null
                                   # (no currentStateTimestamp before v2)
    00 00 00 00                    # members: 0
""")
E9_W5 = hx("""
    00 03                          # value version 3
    00 00                          # protocolType ""
    00 00 00 00                    # generation 0
    ff ff                          # protocol null
    ff ff                          # leader null
    00 00 01 8b cf e5 68 00        # currentStateTimestamp = creation time
    00 00 00 00                    # members: 0
""")


@pytest.mark.parametrize(("value", "version", "expected"), [
    (E9_V3, 3, GroupMetadataValue("consumer", 2, None, None, 1700000100000, ())),
    (E9_V0, 0, GroupMetadataValue("consumer", 2, None, None, -1, ())),  # absent timestamp reads -1
    (E9_W5, 3, GroupMetadataValue("", 0, None, None, TS, ())),
], ids=["v3", "v0", "w5"])
def test_e9_empty_group(value: bytes, version: int, expected: GroupMetadataValue) -> None:
    assert_round_trip(E5_KEY, value, CoordinatorRecord(GroupMetadataKey("my-group"), expected, 2, version))


E10_SUBSCRIPTION = hx("""
    00 03                          # Subscription version 3
    00 00 00 02                    # topics: 2 (the client sorted [b, a])
    00 01 61                       #   "a"
    00 01 62                       #   "b"
    00 00 00 04 00 00 00 04        # userData: 4 bytes, int32 4
    00 00 00 01                    # ownedPartitions: 1 topic
    00 01 61                       #   topic "a"
    00 00 00 01                    #   partitions: 1
    00 00 00 00                    #     0
    00 00 00 04                    # generationId 4
    00 02 72 31                    # rackId "r1"
""")
E10_ASSIGNMENT = hx("""
    00 03                          # Assignment version 3
    00 00 00 02                    # assignedPartitions: 2 topics
    00 01 61                       #   topic "a"
    00 00 00 01                    #   partitions: 1
    00 00 00 00                    #     0
    00 01 62                       #   topic "b"
    00 00 00 02                    #   partitions: 2
    00 00 00 01                    #     1
    00 00 00 02                    #     2
    ff ff ff ff                    # userData null
""")


def test_e10_subscription_and_assignment_v3() -> None:
    sub = Subscription(3, ("a", "b"), b"\x00\x00\x00\x04", (TopicPartitions("a", (0,)),), 4, "r1")
    asg = Assignment(3, (TopicPartitions("a", (0,)), TopicPartitions("b", (1, 2))), None)
    assert decode_subscription(E10_SUBSCRIPTION) == sub
    assert encode_subscription(sub) == E10_SUBSCRIPTION
    assert decode_assignment(E10_ASSIGNMENT) == asg
    assert encode_assignment(asg) == E10_ASSIGNMENT
    assert decode_cooperative_user_data(sub.user_data) == 4


E11_STICKY_V1 = hx("""
    00 00 00 01                    # previous_assignment: 1 topic
    00 01 74                       #   topic "t"
    00 00 00 02                    #   partitions: 2
    00 00 00 00                    #     0
    00 00 00 02                    #     2
    00 00 00 07                    # generation 7
""")


def test_e11_user_data() -> None:
    expected = StickyUserData(previous_assignment=(TopicPartitions("t", (0, 2)),), generation=7)
    assert decode_sticky_user_data(E11_STICKY_V1) == expected
    assert encode_sticky_user_data([("t", 0), ("t", 2)], generation=7) == E11_STICKY_V1
    assert encode_sticky_user_data([TopicPartitions("t", (0, 2))], generation=7) == E11_STICKY_V1
    assert decode_cooperative_user_data(hx("00 00 00 07")) == 7
    assert encode_cooperative_user_data(7) == hx("00 00 00 07")


E12_KEY = hx("""
    00 03                          # record type 3 (ConsumerGroupMetadataKey)
    00 01 67                       # GroupId "g"
""")
E12_VALUE = hx("""
    00 00                          # value version 0 (flexible)
    00 00 00 05                    # Epoch 5
    00                             # no tagged fields
""")
E12_MEMBER_KEY = hx("""
    00 05                          # record type 5 (ConsumerGroupMemberMetadataKey)
    00 01 67                       # GroupId "g"
    00 02 6d 31                    # MemberId "m1"
""")
E12_MEMBER_VALUE = hx("""
    00 00                          # value version 0
    00                             # InstanceId null
    00                             # RackId null
    02 63                          # ClientId "c"
    03 2f 68                       # ClientHost "/h"
    02 02 74                       # SubscribedTopicNames: 1, "t"
    00                             # SubscribedTopicRegex null
    00 04 93 e0                    # RebalanceTimeoutMs 300000
    00                             # ServerAssignor null
    01                             # tagged fields: 1
    00                             #   tag 0 (ClassicMemberMetadata)
    11                             #   size 17
    01                             #   present
    00 00 af c8                    #   SessionTimeoutMs 45000
    02                             #   SupportedProtocols: 1
    06 72 61 6e 67 65              #     Name "range"
    03 01 02                       #     Metadata 01 02
    00                             #     protocol: no tagged fields
    00                             #   ClassicMemberMetadata: no tagged fields
""")


def test_e12_kip848_records() -> None:
    rec = decode(E12_KEY, E12_VALUE)
    assert rec == CoordinatorRecord(ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(epoch=5), 3, 0)
    assert rec.record_type_name == "ConsumerGroupMetadata"
    assert encode(rec) == (E12_KEY, E12_VALUE)

    member = ConsumerGroupMemberMetadataValue(
        instance_id=None, rack_id=None, client_id="c", client_host="/h", subscribed_topic_names=("t",),
        subscribed_topic_regex=None, rebalance_timeout_ms=300000, server_assignor=None,
        classic_member_metadata=ClassicMemberMetadata(45000, (ClassicProtocol("range", b"\x01\x02"),)))
    rec = decode(E12_MEMBER_KEY, E12_MEMBER_VALUE)
    assert rec == CoordinatorRecord(ConsumerGroupMemberMetadataKey("g", "m1"), member, 5, 0)
    assert encode(rec) == (E12_MEMBER_KEY, E12_MEMBER_VALUE)
    # without classic metadata (None) the tag still goes out, holding a null marker: its schema default is
    # the empty struct (a JSON-null default), so Kafka's writer leaves out only that, as a real 4.4 broker shows
    plain = CoordinatorRecord.of(ConsumerGroupMemberMetadataKey("g", "m1"),
                                 ConsumerGroupMemberMetadataValue(None, None, "c", "/h", ("t",), None, 300000, None))
    assert encode(plain)[1] == E12_MEMBER_VALUE[:18] + b"\x01\x00\x01\x00"  # 1 tag: tag 0, size 1, null
    absent = decode(E12_MEMBER_KEY, E12_MEMBER_VALUE[:18] + b"\x00")  # no tags: the schema default
    assert absent.value == ConsumerGroupMemberMetadataValue(None, None, "c", "/h", ("t",), None, 300000, None,
                                                           ClassicMemberMetadata(0, ()))
    assert encode(absent)[1] == E12_MEMBER_VALUE[:18] + b"\x00"
