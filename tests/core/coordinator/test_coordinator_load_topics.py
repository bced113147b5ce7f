"""The load path's subscribedTopics (ClassicGroup#computeSubscribedTopics): captured when a record is
replayed, decoded on first read; the value must be the one an eager computation gives at replay time."""

from __future__ import annotations

from coordinator_audit.core.consumer_protocol import Subscription, encode_subscription
from coordinator_audit.core.coordinator import GroupCoordinator
from coordinator_audit.core.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
)


def sub(*topics: str) -> bytes:
    return encode_subscription(Subscription(1, topics, None, (), -1, None))


def record(members: tuple[tuple[str, bytes], ...], *, protocol_type: str = "consumer",
           protocol: str | None = "range") -> CoordinatorRecord:
    ms = tuple(MemberMetadata(mid, None, "c", "/h", 60_000, 10_000, s, b"") for mid, s in members)
    return CoordinatorRecord(GroupMetadataKey("g"), GroupMetadataValue(
        protocol_type, 3, protocol if ms else None, ms[0].member_id if ms else None, 500, ms), 2, 3)


def topics_after(rec: CoordinatorRecord) -> frozenset[str] | None:
    c = GroupCoordinator()
    c.replay(rec)
    view = c.group("g")
    assert view is not None
    return view.subscribed_topics


def test_union_of_members_topics() -> None:
    assert topics_after(record((("a", sub("t", "u")), ("b", sub("v"))))) == frozenset({"t", "u", "v"})


def test_empty_group_subscribes_to_nothing_and_other_protocol_types_are_unknown() -> None:
    assert topics_after(record(())) == frozenset()
    assert topics_after(record((("a", b"\x01\x02"),), protocol_type="connect")) is None


def test_one_undecodable_subscription_makes_the_topics_unknown() -> None:
    assert topics_after(record((("a", sub("t")), ("b", b"\x00\x01\x00")))) is None


def test_value_is_fixed_at_replay_time() -> None:
    c = GroupCoordinator()
    c.replay(record((("a", sub("t")),)))
    group = c._shard.groups["g"]
    group.members.get("a").supported_protocols = (("range", sub("other")),)  # type: ignore[union-attr]
    assert group.subscribed_topics == frozenset({"t"})
    assert group.compute_subscribed_topics() == frozenset({"other"})
