"""coordinator_audit.udfs.decode: the Arrow UDFs over coordinator_audit.core (record, subscription, assignment,
partition_for, owners)."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from coordinator_audit.core.consumer_protocol import (
    Assignment,
    Subscription,
    TopicPartitions,
    encode_assignment,
    encode_subscription,
)
from coordinator_audit.core.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    encode,
)
from coordinator_audit.udfs.decode import (
    decode_assignment_udf,
    decode_record_udf,
    decode_subscription_udf,
    owners_udf,
    partition_for_udf,
)

pytestmark = pytest.mark.spark

SUB = encode_subscription(Subscription(1, ("orders",), None, (TopicPartitions("orders", (0,)),)))
ASG = encode_assignment(Assignment(1, (TopicPartitions("orders", (0, 1)),)))


def test_decode_record_udf(spark) -> None:
    ck, cv = encode(CoordinatorRecord.of(OffsetCommitKey("my-group", "orders", 3), OffsetCommitValue(1234, 5, "", 17)))
    member = MemberMetadata("m1", "i1", "c1", "/10.0.0.1", 300000, 45000, SUB, ASG)
    gk, gv = encode(CoordinatorRecord.of(GroupMetadataKey("my-group"),
                                         GroupMetadataValue("consumer", 4, "range", "m1", 99, (member,))))
    df = spark.createDataFrame([(ck, cv), (gk, gv), (gk, None), (ck, b"\x00\x03\x00")], "key binary, value binary")
    rows = df.select(decode_record_udf()("key", "value").alias("r")).select("r.*").collect()
    c, g, tomb, bad = rows
    assert (c.record_type, c.record_type_name, c.group_id, c.topic, c.partition, c.offset, c.leader_epoch,
            c.commit_timestamp, c.error) == (1, "OffsetCommit", "my-group", "orders", 3, 1234, 5, 17, None)
    assert (g.record_type, g.group_id, g.generation, g.protocol, g.leader, g.current_state_timestamp) == \
        (2, "my-group", 4, "range", "m1", 99)
    assert [(m.member_id, m.group_instance_id, m.subscription, m.assignment) for m in g.members] == \
        [("m1", "i1", SUB, ASG)]
    assert tomb.tombstone is True and tomb.generation is None
    assert bad.record_type == 1 and bad.offset is None and "OffsetCommitValue" in bad.error


def test_subscription_and_assignment_udfs(spark) -> None:
    df = spark.createDataFrame([(SUB, ASG), (b"\x00", b"")], "s binary, a binary")
    out = df.select(decode_subscription_udf()("s").alias("s"), decode_assignment_udf()("a").alias("a")).collect()
    s, a = out[0]
    assert (s.version, s.topics, s.user_data, s.generation_id, s.error) == (1, ["orders"], None, -1, None)
    assert [(tp.topic, tp.partitions) for tp in s.owned_partitions] == [("orders", [0])]
    assert (a.version, [(tp.topic, tp.partitions) for tp in a.assigned_partitions], a.error) == \
        (1, [("orders", [0, 1])], None)
    s_bad, a_empty = out[1]
    assert s_bad.version is None and s_bad.error
    assert a_empty.assigned_partitions == [] and a_empty.error is None


def test_partition_for_udf_matches_the_jvm_table(spark) -> None:
    # Utils.abs(String#hashCode) % 50 (GroupCoordinatorService#partitionFor), checked on a JVM
    df = spark.createDataFrame([("my-group",), ("console-consumer-12345",), ("test",), ("",), (None,)], "g string")
    assert [r.p for r in df.select(partition_for_udf(50)("g").alias("p")).collect()] == [12, 6, 48, 0, None]


def test_owners_udf(spark) -> None:
    members = (MemberMetadata("m1", None, "c", "/h", 1, 1, SUB, ASG),
               MemberMetadata("m2", None, "c", "/h", 1, 1, SUB, encode_assignment(Assignment(1, (TopicPartitions("orders", (1,)),)))))
    _, gv = encode(CoordinatorRecord.of(GroupMetadataKey("g"), GroupMetadataValue("consumer", 1, "range", "m1", 1, members)))
    df = spark.createDataFrame([(gv, "g", "orders", 1), (gv, "g", "orders", 0), (gv, "g", "orders", 9), (None, "g", "x", 0)],
                               "v binary, g string, t string, p int")
    got = [r.o for r in df.select(owners_udf()(F.col("v"), F.col("g"), F.col("t"), F.col("p")).alias("o")).collect()]
    assert got == [["m1", "m2"], ["m1"], [], []]
