"""Worked examples: the expectations of Kafka's own assignor test suites (RangeAssignorTest,
RoundRobinAssignorTest, AbstractStickyAssignorTest, StickyAssignorTest,
CooperativeStickyAssignorTest), restated, plus the Java-ordering details the port must keep."""

from __future__ import annotations

import pytest

from coordinator_audit.core.client.assignors import (
    ASSIGNORS,
    CooperativeStickyAssignor,
    MemberAssignment,
    MemberSubscription,
    RangeAssignor,
    RebalanceProtocol,
    RoundRobinAssignor,
    StickyAssignor,
    TopicPartition,
    assignor_for,
)
from coordinator_audit.core.client.assignors.jcollections import (
    JavaHashOrder,
    java_string_key,
    string_hash_order,
    topic_partition_hash,
)
from coordinator_audit.core.consumer_protocol import encode_sticky_user_data
from coordinator_audit.core.errors import AssignorError, ConfigError


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def parts(result: dict[str, MemberAssignment]) -> dict[str, list[TopicPartition]]:
    return {m: list(a.partitions) for m, a in result.items()}


def sub(*topics: str, instance: str | None = None) -> MemberSubscription:
    return MemberSubscription(topics, group_instance_id=instance)


def coop(topics: tuple[str, ...], owned: list[TopicPartition], generation: int) -> MemberSubscription:
    return MemberSubscription(topics, None, tuple(owned), generation)


# ---------------------------------------------------------------------------------------------
# names, protocols, user data


def test_names_and_protocols() -> None:
    assert {n: cls.supported_protocols for n, cls in ASSIGNORS.items()} == {
        "range": (RebalanceProtocol.EAGER,),
        "roundrobin": (RebalanceProtocol.EAGER,),
        "sticky": (RebalanceProtocol.EAGER,),
        "cooperative-sticky": (RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER),
    }
    assert int(RebalanceProtocol.COOPERATIVE) == 1
    assert isinstance(assignor_for("range"), RangeAssignor)
    with pytest.raises(ConfigError, match="unknown assignor 'rangee'"):
        assignor_for("rangee")


def test_user_data_follows_on_assignment() -> None:
    sticky = StickyAssignor()
    assert sticky.subscription_user_data(["t"]) is None  # before the first assignment
    sticky.on_assignment(MemberAssignment((tp("t", 1), tp("t", 0))), 7)
    assert sticky.subscription_user_data(["t"]) == encode_sticky_user_data([("t", 1), ("t", 0)], generation=7)
    coop_assignor = CooperativeStickyAssignor()
    assert coop_assignor.subscription_user_data(["t"]) == b"\xff\xff\xff\xff"
    coop_assignor.on_assignment([tp("t", 0)], 3)
    assert coop_assignor.subscription_user_data(["t"]) == b"\x00\x00\x00\x03"
    assert RangeAssignor().subscription_user_data(["t"]) is None


def test_member_data_sources() -> None:
    """StickyAssignorTest#testMemberDataWillHonorUserData / Cooperative's generation precedence."""
    sticky = StickyAssignor()
    data = sticky.member_data(MemberSubscription(("t",), encode_sticky_user_data([("t", 2)], generation=4),
                                                 (tp("t", 9),), 5))
    assert (data.partitions, data.generation) == ((tp("t", 2),), 4)
    assert sticky.member_data(MemberSubscription(("t",), b"")).generation is None
    assert sticky.member_data(MemberSubscription(("t",), b"\x01")).generation == -1  # unreadable
    c = CooperativeStickyAssignor()
    assert c.member_data(MemberSubscription(("t",), b"\x00\x00\x00\x02", (tp("t", 0),), 6)).generation == 6
    assert c.member_data(MemberSubscription(("t",), b"\x00\x00\x00\x02", (tp("t", 0),))).generation == 2
    assert c.member_data(MemberSubscription(("t",), None)).generation is None
    assert c.member_data(MemberSubscription(("t",), b"\x00")).generation == -1


# ---------------------------------------------------------------------------------------------
# range (RangeAssignorTest)


def test_range_two_consumers_two_topics_six_partitions() -> None:
    result = parts(RangeAssignor().assign({"topic1": 3, "topic2": 3},
                                          {"consumer1": sub("topic1", "topic2"), "consumer2": sub("topic1", "topic2")}))
    assert result["consumer1"] == [tp("topic1", 0), tp("topic1", 1), tp("topic2", 0), tp("topic2", 1)]
    assert result["consumer2"] == [tp("topic1", 2), tp("topic2", 2)]


def test_range_static_members_come_first_by_instance_id() -> None:
    """testOneStaticConsumerAndOneDynamicConsumerTwoTopicsSixPartitions: the static member sorts first
    even though its member id is larger."""
    result = parts(RangeAssignor().assign({"topic1": 3, "topic2": 3}, {
        "consumer-b": sub("topic1", "topic2", instance="instance1"),
        "consumer-a": sub("topic1", "topic2"),
    }))
    assert result["consumer-b"] == [tp("topic1", 0), tp("topic1", 1), tp("topic2", 0), tp("topic2", 1)]
    assert result["consumer-a"] == [tp("topic1", 2), tp("topic2", 2)]


def test_range_static_assignment_survives_member_id_changes() -> None:
    """testStaticMemberRangeAssignmentPersistentAfterMemberIdChanges."""
    members = {"c1": "instance1", "c2": "instance2", "c3": "instance3"}
    before = parts(RangeAssignor().assign({"t1": 5, "t2": 5}, {m: sub("t1", "t2", instance=i) for m, i in members.items()}))
    renamed = {"z" + m: i for m, i in members.items()}
    after = parts(RangeAssignor().assign({"t1": 5, "t2": 5}, {m: sub("t1", "t2", instance=i) for m, i in renamed.items()}))
    assert {members[m]: a for m, a in before.items()} == {renamed[m]: a for m, a in after.items()}


def test_range_mixed_topics_and_missing_metadata() -> None:
    """testMultipleConsumersMixedTopics plus a subscribed topic without metadata."""
    result = parts(RangeAssignor().assign({"topic1": 3, "topic2": 2}, {
        "consumer1": sub("topic1", "missing"), "consumer2": sub("topic1", "topic2"), "consumer3": sub("topic1"),
    }))
    assert result == {"consumer1": [tp("topic1", 0)], "consumer2": [tp("topic1", 1), tp("topic2", 0), tp("topic2", 1)],
                      "consumer3": [tp("topic1", 2)]}


def test_range_topic_order_is_java_hashmap_order() -> None:
    """A member's partitions come topic by topic in HashMap<String, ...> order, not name order
    ("t1" and "logs" share bucket 13 and keep insertion order; a JVM prints [A, t0, t1, logs])."""
    topics = ["t1", "logs", "A", "t0"]
    result = RangeAssignor().assign(dict.fromkeys(topics, 1), {"c": sub(*topics)})
    assert [p.topic for p in result["c"].partitions] == string_hash_order(topics) == ["A", "t0", "t1", "logs"]


def test_range_rack_aware_co_partitioning() -> None:
    """testRackAwareAssignmentWithCoPartitioning, reduced: same-numbered partitions of co-partitioned
    topics go to the member on the rack of their replicas."""
    racks = {(t, p): ["ab"[p % 2]] for t in ("t1", "t2") for p in range(4)}
    subs = {"c0": MemberSubscription(("t1", "t2"), rack_id="a"), "c1": MemberSubscription(("t1", "t2"), rack_id="b")}
    result = parts(RangeAssignor().assign({"t1": 4, "t2": 4}, subs, partition_racks=racks))
    assert result["c0"] == [tp("t1", 0), tp("t1", 2), tp("t2", 0), tp("t2", 2)]
    assert result["c1"] == [tp("t1", 1), tp("t1", 3), tp("t2", 1), tp("t2", 3)]


# ---------------------------------------------------------------------------------------------
# roundrobin (RoundRobinAssignorTest)


def test_roundrobin_mixed_topics() -> None:
    """testMultipleConsumersMixedTopics."""
    result = parts(RoundRobinAssignor().assign({"topic1": 3, "topic2": 2}, {
        "consumer1": sub("topic1"), "consumer2": sub("topic1", "topic2"), "consumer3": sub("topic1"),
    }))
    assert result == {"consumer1": [tp("topic1", 0)], "consumer2": [tp("topic1", 1), tp("topic2", 0), tp("topic2", 1)],
                      "consumer3": [tp("topic1", 2)]}


def test_roundrobin_static_and_dynamic() -> None:
    """testOneStaticConsumerAndOneDynamicConsumerTwoTopicsSixPartitions."""
    result = parts(RoundRobinAssignor().assign({"topic1": 3, "topic2": 3}, {
        "consumer-b": sub("topic1", "topic2", instance="instance1"), "consumer-a": sub("topic1", "topic2"),
    }))
    assert result["consumer-b"] == [tp("topic1", 0), tp("topic1", 2), tp("topic2", 1)]
    assert result["consumer-a"] == [tp("topic1", 1), tp("topic2", 0), tp("topic2", 2)]


def test_roundrobin_orders_by_utf16_code_units() -> None:
    """Java String.compareTo: U+FF5A sorts after U+1D518 (surrogate 0xD835 < 0xFF5A), unlike Python."""
    high, astral = "\uff5a", "\U0001d518"
    assert high < astral and java_string_key(astral) < java_string_key(high)
    result = parts(RoundRobinAssignor().assign({"t": 2}, {high: sub("t"), astral: sub("t")}))
    assert result == {astral: [tp("t", 0)], high: [tp("t", 1)]}


# ---------------------------------------------------------------------------------------------
# sticky family (AbstractStickyAssignorTest with the cooperative assignor's subscriptions)

T12 = ("topic1", "topic2")


def test_owning_min_quota_expected_max_quota() -> None:
    """testConsumerOwningMinQuotaExpectedMaxQuota."""
    a = CooperativeStickyAssignor()
    result = parts(a.assign({"topic1": 2, "topic2": 3}, {
        "consumer1": coop(T12, [tp("topic1", 0), tp("topic2", 1)], 1),
        "consumer2": coop(T12, [tp("topic1", 1), tp("topic2", 2)], 1),
    }))
    assert result == {"consumer1": [tp("topic1", 0), tp("topic2", 1), tp("topic2", 0)],
                      "consumer2": [tp("topic1", 1), tp("topic2", 2)]}
    assert a.partitions_transferring_ownership == {}


def test_max_quota_members_more_than_expected() -> None:
    """testMaxQuotaConsumerMoreThanNumExpectedMaxCapacityMembers (eager sticky: the move is immediate;
    cooperative: topic2-0 is withheld for a generation)."""
    subs = {"consumer1": coop(T12, [tp("topic1", 0), tp("topic2", 0)], 1),
            "consumer2": coop(T12, [tp("topic1", 1), tp("topic2", 1)], 1),
            "consumer3": coop(T12, [], 1)}
    a = CooperativeStickyAssignor()
    result = parts(a.assign({"topic1": 2, "topic2": 2}, subs))
    assert a.partitions_transferring_ownership == {tp("topic2", 0): "consumer3"}
    assert result == {"consumer1": [tp("topic1", 0)], "consumer2": [tp("topic1", 1), tp("topic2", 1)],
                      "consumer3": []}
    sticky_subs = {m: MemberSubscription(T12, encode_sticky_user_data(s.owned_partitions, generation=1), (), 1)
                   for m, s in subs.items()}
    assert parts(StickyAssignor().assign({"topic1": 2, "topic2": 2}, sticky_subs))["consumer3"] == [tp("topic2", 0)]


def test_all_consumers_under_min_quota() -> None:
    """testAllConsumersAreUnderMinQuota."""
    a = CooperativeStickyAssignor()
    result = parts(a.assign({"topic1": 2, "topic2": 3}, {
        "consumer1": coop(T12, [tp("topic1", 0)], 1),
        "consumer2": coop(T12, [tp("topic1", 1)], 1),
        "consumer3": coop(T12, [], 1),
    }))
    assert result == {"consumer1": [tp("topic1", 0), tp("topic2", 1)], "consumer2": [tp("topic1", 1), tp("topic2", 2)],
                      "consumer3": [tp("topic2", 0)]}


def test_claimed_by_two_members_of_one_generation() -> None:
    """testAllConsumersHaveOwnedPartitionInvalidatedWhenClaimedByMultipleConsumersInSameGeneration...:
    nobody keeps topic-0; cooperative withholds it, sticky hands it to consumer3 at once."""
    owned = {"consumer1": [tp("topic", 0), tp("topic", 1)], "consumer2": [tp("topic", 0), tp("topic", 2)],
             "consumer3": []}
    a = CooperativeStickyAssignor()
    result = parts(a.assign({"topic": 3}, {m: coop(("topic",), o, 1) for m, o in owned.items()}))
    assert result == {"consumer1": [tp("topic", 1)], "consumer2": [tp("topic", 2)], "consumer3": []}
    assert a.partitions_transferring_ownership == {tp("topic", 0): "consumer3"}
    eager = {m: MemberSubscription(("topic",), encode_sticky_user_data(o, generation=1), (), 1) for m, o in owned.items()}
    assert parts(StickyAssignor().assign({"topic": 3}, eager))["consumer3"] == [tp("topic", 0)]


def test_all_members_reach_quota() -> None:
    """testAllConsumersReachExpectedQuotaAndAreConsideredFilled."""
    result = parts(CooperativeStickyAssignor().assign({"topic": 4}, {
        "consumer1": coop(("topic",), [tp("topic", 0), tp("topic", 1)], 1),
        "consumer2": coop(("topic",), [tp("topic", 2)], 1),
        "consumer3": coop(("topic",), [], 1),
    }))
    assert result == {"consumer1": [tp("topic", 0), tp("topic", 1)], "consumer2": [tp("topic", 2)],
                      "consumer3": [tp("topic", 3)]}


@pytest.mark.parametrize("stale", [9, -1])
def test_stale_or_missing_generation_loses_claims(stale: int) -> None:
    """testOwnedPartitionsAreInvalidatedForConsumerWith{Stale,No}Generation."""
    claims = [tp("topic", 0), tp("topic", 2), tp("topic2", 1)]
    a = CooperativeStickyAssignor()
    result = a.assign({"topic": 3, "topic2": 3}, {"consumer1": coop(("topic", "topic2"), claims, 10),
                                                 "consumer2": coop(("topic", "topic2"), claims, stale)})
    assert set(result["consumer1"].partitions) == set(claims)
    assert set(result["consumer2"].partitions) == {tp("topic", 1), tp("topic2", 0), tp("topic2", 2)}
    assert a.partitions_transferring_ownership == {}


def test_highest_generation_keeps_partitions() -> None:
    """testEnsurePartitionsAssignedToHighestGeneration."""
    topics = ("topic", "topic2", "topic3")
    result = CooperativeStickyAssignor().assign(dict.fromkeys(topics, 3), {
        "consumer1": coop(topics, [tp("topic", 0), tp("topic2", 0), tp("topic3", 0)], 10),
        "consumer2": coop(topics, [tp("topic", 1), tp("topic2", 1), tp("topic3", 1)], 9),
        "consumer3": coop(topics, [tp("topic2", 1), tp("topic3", 0), tp("topic3", 2)], 8),
    })
    assert {m: set(a.partitions) for m, a in result.items()} == {
        "consumer1": {tp("topic", 0), tp("topic2", 0), tp("topic3", 0)},
        "consumer2": {tp("topic", 1), tp("topic2", 1), tp("topic3", 1)},
        "consumer3": {tp("topic", 2), tp("topic2", 2), tp("topic3", 2)},
    }


def test_no_reassignment_on_current_members() -> None:
    """testNoReassignmentOnCurrentMembers: a new member only gets what nobody owned."""
    topics = ("topic", "topic2", "topic3", "topic1")
    result = CooperativeStickyAssignor().assign(dict.fromkeys(topics, 3), {
        "consumer1": coop(topics, [], -1),
        "consumer2": coop(topics, [tp("topic", 0), tp("topic2", 0), tp("topic1", 0)], 9),
        "consumer3": coop(topics, [tp("topic3", 2), tp("topic2", 2), tp("topic1", 1)], 8),
        "consumer4": coop(topics, [tp("topic3", 1), tp("topic", 1), tp("topic", 2)], 7),
    })
    assert set(result["consumer1"].partitions) == {tp("topic1", 2), tp("topic2", 1), tp("topic3", 0)}


def test_general_case_with_three_generations_stays_valid() -> None:
    """testSubscriptionNotEqualAndAssignSamePartitionWith3Generation (general algorithm)."""
    for g1, g2, g3 in [(1, 2, 3), (1, 3, 2), (2, 1, 3), (2, 3, 1), (3, 1, 2), (3, 2, 1)]:
        result = CooperativeStickyAssignor().assign({"topic": 6, "topic1": 1}, {
            "consumer1": coop(("topic",), [tp("topic", 0), tp("topic", 2)], g1),
            "consumer2": coop(("topic",), [tp("topic", 1), tp("topic", 2), tp("topic", 3)], g2),
            "consumer3": coop(("topic",), [tp("topic", 2), tp("topic", 4), tp("topic", 5)], g3),
            "consumer4": coop(("topic1",), [tp("topic1", 0)], 2),
        })
        everything = [p for a in result.values() for p in a.partitions]
        assert len(everything) == len(set(everything))


def test_sticky_without_members_fails_like_java() -> None:
    with pytest.raises(AssignorError) as info:
        StickyAssignor().assign({"t": 1}, {})
    assert info.value.java_exception == "ArithmeticException"


def test_bad_input_is_named() -> None:
    with pytest.raises(AssignorError, match="owned_partitions"):
        MemberSubscription(("t",), owned_partitions=[("t",)])  # type: ignore[list-item]
    with pytest.raises(AssignorError, match=r"partitions_per_topic\['t'\]"):
        RangeAssignor().assign({"t": -1}, {"c": sub("t")})
    with pytest.raises(AssignorError, match="not MemberSubscription"):
        RangeAssignor().assign({"t": 1}, {"c": ("t",)})  # type: ignore[dict-item]


# ---------------------------------------------------------------------------------------------
# Java collection emulation


def test_topic_partition_hash_matches_java_formula() -> None:
    # 31 * (31 + 0) + "topic".hashCode() = 961 + 110546223
    assert topic_partition_hash("topic", 0) == 961 + 110546223
    # new TopicPartition("t", 2147483616).hashCode() on a JVM: the int arithmetic wraps
    assert topic_partition_hash("t", 2147483616) == -2147483563


def test_hash_order_keeps_insertion_order_within_a_bucket_and_resizes() -> None:
    order = JavaHashOrder(lambda k: k)  # integer keys hash to themselves
    for k in (17, 1, 33):  # same bucket at capacity 16
        order.add(k)
    assert list(order) == [17, 1, 33]
    for k in range(100, 110):  # 13 keys: the table doubles to 32 after the 13th insertion
        order.add(k)
    assert list(order)[:3] == [1, 33, 100]  # 1 and 33 still share bucket 1; 17 moved to bucket 17
    order.discard(1)
    assert 1 not in order and order.first() == 33 and list(order)[-1] == 17


def test_sticky_returns_partition_to_older_owner_even_if_unsubscribed() -> None:
    """A quirk of Kafka's general sticky algorithm, checked against kafka-clients 4.3.0: a member with
    an older generation that claims orders-0 but no longer subscribes to `orders` gets it back,
    because prevAssignment is not filtered by subscription. The port keeps Java's behaviour."""
    def member(topics: tuple[str, ...], claims: list[TopicPartition], generation: int) -> MemberSubscription:
        ud = encode_sticky_user_data(claims, generation=generation) if generation >= 0 else None
        return MemberSubscription(topics, ud, (), generation)

    subs = {f"member-{i}-0": member(("a",), [], -1) for i in (0, 1, 3, 4)}
    subs["member-2-0"] = member(("a", "b"), [tp("a", 0), tp("orders", 0)], 3)
    subs["member-5-0"] = member(("a", "b", "orders"), [], -1)
    subs["member-6-0"] = member(("a", "b", "orders"), [], 4)
    result = StickyAssignor().assign({"a": 1, "b": 1, "orders": 7, "t0": 1}, subs)
    assert result["member-2-0"].partitions == (tp("b", 0), tp("orders", 0))
