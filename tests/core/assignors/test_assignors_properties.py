"""Properties the four assignors promise (Kafka's javadoc and its tests' verifyValidityAndBalance),
checked with Hypothesis on random groups."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator_audit.core.client.assignors import (
    ASSIGNORS,
    CooperativeStickyAssignor,
    MemberAssignment,
    MemberSubscription,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    TopicPartition,
)
from coordinator_audit.core.consumer_protocol import encode_sticky_user_data

TOPIC_NAMES = ("a", "b", "orders", "t0", "t1")
EAGER_NAMES = ("range", "roundrobin", "sticky")


@st.composite
def groups(draw: st.DrawFn, *, same: bool | None = None, owned: bool = True, max_members: int = 8):
    """(partitions_per_topic, {member: (topics, owned partitions, generation, instance id)})."""
    topics = draw(st.lists(st.sampled_from(TOPIC_NAMES), min_size=1, max_size=4, unique=True))
    ppt = {t: draw(st.integers(1, 12)) for t in topics}
    n = draw(st.integers(1, max_members))
    same = draw(st.booleans()) if same is None else same
    common = tuple(draw(st.permutations(topics)))
    all_tps = [TopicPartition(t, p) for t, c in ppt.items() for p in range(c)]
    members = {}
    for i in range(n):
        subscribed = common if same else tuple(draw(st.lists(st.sampled_from(topics), min_size=1, unique=True)))
        claims = tuple(draw(st.lists(st.sampled_from(all_tps), unique=True, max_size=8))) if owned else ()
        generation = draw(st.sampled_from((-1, 3, 4, 5)))
        instance = draw(st.none() | st.just(f"instance-{n - i}"))
        members[f"member-{i}-{draw(st.integers(0, 99))}"] = (subscribed, claims, generation, instance)
    return ppt, members


def subscriptions_for(name: str, members: dict) -> dict[str, MemberSubscription]:
    """What members of this assignor would send: sticky claims travel in user data, cooperative ones
    in OwnedPartitions; eager range/roundrobin members own nothing."""
    out = {}
    for m, (topics, claims, generation, instance) in members.items():
        if name == "sticky":
            ud = encode_sticky_user_data(claims, generation=generation) if generation >= 0 else None
            out[m] = MemberSubscription(topics, ud, (), generation, instance)
        elif name == "cooperative-sticky":
            out[m] = MemberSubscription(topics, None, claims, generation, instance)
        else:
            out[m] = MemberSubscription(topics, None, (), generation, instance)
    return out


def subscribed_partitions(ppt: dict[str, int], subs: dict[str, MemberSubscription]) -> set[TopicPartition]:
    topics = {t for s in subs.values() for t in s.topics if t in ppt}
    return {TopicPartition(t, p) for t in topics for p in range(ppt[t])}


def check_valid(result: dict[str, MemberAssignment], subs: dict[str, MemberSubscription],
                members: dict | None = None) -> Counter:
    """Nobody gets a topic it does not subscribe to; returns how often each partition was handed out.

    Kafka's sticky general algorithm has one exception, kept by the port: a partition goes back to
    its previous owner from an older generation even if that member has unsubscribed from the topic
    (prevAssignment is not filtered by subscription). `members` (the claims) allows exactly that."""
    assert set(result) == set(subs)
    max_generation = max((g for _, _, g, _ in members.values()), default=-1) if members else -1
    seen: Counter = Counter()
    for m, a in result.items():
        for tp in a.partitions:
            if tp.topic not in subs[m].topics:
                assert members is not None, f"{m} got {tp} without subscribing to {tp.topic}"
                _, claims, generation, _ = members[m]
                assert tp in claims and generation < max_generation, f"{m} got {tp} without subscribing"
            seen[tp] += 1
    return seen


def kafka_balanced(result: dict[str, MemberAssignment], subs: dict[str, MemberSubscription]) -> bool:
    """AbstractStickyAssignorTest#verifyValidityAndBalance: a member holding two or more partitions more
    than another only holds partitions of topics the other does not subscribe to."""
    for a in result.values():
        for small, b in result.items():
            if len(a.partitions) > len(b.partitions) + 1 and any(tp.topic in subs[small].topics for tp in a.partitions):
                return False
    return True


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(EAGER_NAMES), groups())
def test_eager_assignors_hand_out_every_partition_once(name: str, group) -> None:
    ppt, members = group
    subs = subscriptions_for(name, members)
    result = ASSIGNORS[name]().assign(ppt, subs)
    seen = check_valid(result, subs, members if name == "sticky" else None)
    assert set(seen) == subscribed_partitions(ppt, subs)
    assert set(seen.values()) <= {1}


@settings(max_examples=60, deadline=None)
@given(groups())
def test_cooperative_never_moves_a_partition_in_one_generation(group) -> None:
    """The KIP-429 two-phase rule ((∪ added) ∩ (∪ revoked) = ∅), and what is missing this generation
    is exactly what is in transit."""
    ppt, members = group
    subs = subscriptions_for("cooperative-sticky", members)
    assignor = CooperativeStickyAssignor()
    result = assignor.assign(ppt, subs)
    seen = check_valid(result, subs, members)
    assert set(seen.values()) <= {1}
    added: set[TopicPartition] = set()
    revoked: set[TopicPartition] = set()
    for m, a in result.items():
        owned = set(subs[m].owned_partitions)
        added |= set(a.partitions) - owned
        revoked |= owned - set(a.partitions)
    assert not added & revoked
    missing = subscribed_partitions(ppt, subs) - set(seen)
    assert missing <= revoked | {tp for s in subs.values() for tp in s.owned_partitions}


@settings(max_examples=40, deadline=None)
@given(groups())
def test_cooperative_converges_in_a_follow_up_rebalance(group) -> None:
    """Members revoke what they lost and rejoin with the next generation: the follow-up rebalance
    hands out the withheld partitions and then nothing moves any more."""
    ppt, members = group
    subs = subscriptions_for("cooperative-sticky", members)
    assignor = CooperativeStickyAssignor()
    result = assignor.assign(ppt, subs)
    generation = 6
    for _ in range(3):
        subs = {m: MemberSubscription(s.topics, None, result[m].partitions, generation, s.group_instance_id)
                for m, s in subs.items()}
        result = assignor.assign(ppt, subs)
        generation += 1
    seen = check_valid(result, subs)
    assert set(seen) == subscribed_partitions(ppt, subs)
    assert all(set(result[m].partitions) == set(s.owned_partitions) for m, s in subs.items())


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(("sticky", "cooperative-sticky")), groups(same=True))
def test_sticky_identical_subscriptions_are_balanced(name: str, group) -> None:
    """The constrained algorithm: sizes differ by at most one (cooperative: once settled)."""
    ppt, members = group
    subs = subscriptions_for(name, members)
    assignor = ASSIGNORS[name]()
    result = assignor.assign(ppt, subs)
    if name == "cooperative-sticky":
        subs = {m: MemberSubscription(s.topics, None, result[m].partitions, 9) for m, s in subs.items()}
        result = assignor.assign(ppt, subs)
    sizes = [len(a.partitions) for a in result.values()]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=40, deadline=None)
@given(groups(owned=False))
def test_sticky_fresh_group_is_balanced_as_kafka_checks(group) -> None:
    ppt, members = group
    subs = subscriptions_for("sticky", members)
    result = StickyAssignor().assign(ppt, subs)
    assert kafka_balanced(result, subs)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(("sticky", "cooperative-sticky")), groups())
def test_sticky_keeps_everything_when_nothing_changes(name: str, group) -> None:
    """Once settled, a rebalance with the same members and subscriptions moves nothing."""
    ppt, members = group
    subs = subscriptions_for(name, members)
    assignor = ASSIGNORS[name]()
    generation = 6
    result = assignor.assign(ppt, subs)
    for _ in range(3):  # cooperative: let withheld partitions land
        subs = reported(name, subs, result, generation)
        result = assignor.assign(ppt, subs)
        generation += 1
    again = assignor.assign(ppt, reported(name, subs, result, generation))
    assert {m: set(a.partitions) for m, a in again.items()} == {m: set(a.partitions) for m, a in result.items()}


def reported(name: str, subs: dict[str, MemberSubscription], result: dict[str, MemberAssignment],
             generation: int) -> dict[str, MemberSubscription]:
    if name == "sticky":
        return {m: MemberSubscription(s.topics, encode_sticky_user_data(result[m].partitions, generation=generation),
                                      (), generation) for m, s in subs.items()}
    return {m: MemberSubscription(s.topics, None, result[m].partitions, generation) for m, s in subs.items()}


@settings(max_examples=40, deadline=None)
@given(groups(same=True, owned=False))
def test_roundrobin_identical_subscriptions_differ_by_one(group) -> None:
    ppt, members = group
    subs = subscriptions_for("roundrobin", members)
    sizes = [len(a.partitions) for a in RoundRobinAssignor().assign(ppt, subs).values()]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=40, deadline=None)
@given(groups(owned=False))
def test_range_contiguous_balanced_ranges_per_topic(group) -> None:
    ppt, members = group
    subs = subscriptions_for("range", members)
    result = RangeAssignor().assign(ppt, subs)
    for topic, count in ppt.items():
        takers = [m for m, s in subs.items() if topic in s.topics]
        if not takers:
            continue
        per_member = {m: [tp.partition for tp in result[m].partitions if tp.topic == topic] for m in takers}
        sizes = sorted((len(p) for p in per_member.values()), reverse=True)
        assert sizes[0] - sizes[-1] <= 1 and sum(sizes) == count
        for got in per_member.values():
            assert got == list(range(got[0], got[0] + len(got))) if got else True


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(("range", "roundrobin")), groups(owned=False))
def test_static_members_keep_their_partitions_across_new_member_ids(name: str, group) -> None:
    """KIP-345: with every member static, new member ids do not change who gets what."""
    ppt, members = group
    static = {m: (t, c, g, f"instance-{i}") for i, (m, (t, c, g, _)) in enumerate(members.items())}
    before = ASSIGNORS[name]().assign(ppt, subscriptions_for(name, static))
    renamed = {f"new-{m[::-1]}": v for m, v in static.items()}
    after = ASSIGNORS[name]().assign(ppt, subscriptions_for(name, renamed))
    assert [a.partitions for a in before.values()] == [a.partitions for a in after.values()]
