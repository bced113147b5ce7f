"""`assignment_groups_fast` (the codec's grouped assignment reader, used by the audit) reads what `assignment_fast` and the codec read."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator_audit.core.audit.snapshot import GroupSnapshot
from coordinator_audit.core.consumer_protocol import (
    Assignment,
    TopicPartitions,
    decode_assignment,
    encode_assignment,
)
from coordinator_audit.core.records import GroupMetadataValue, MemberMetadata
from coordinator_audit.core.records_fast import assignment_fast, assignment_groups_fast
from tests.support.codec import INT32

TOPICS = st.sampled_from(["", "a", "orders", "é"])
PARTS = st.lists(st.builds(TopicPartitions, TOPICS, st.lists(st.integers(-2, 6) | INT32, max_size=6).map(tuple)),
                 max_size=4).map(tuple)


def _flat(groups: tuple[tuple[str, tuple[int, ...]], ...]) -> tuple[tuple[str, int], ...]:
    return tuple((t, p) for t, ps in groups for p in ps)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 3), PARTS, st.none() | st.binary(max_size=8))
def test_groups_flatten_to_the_codec_pairs(version, parts, user_data) -> None:
    raw = encode_assignment(Assignment(version, parts, user_data))
    groups = assignment_groups_fast(raw)
    assert groups is not None
    assert all(ps for _, ps in groups)  # entries without partitions are left out
    d = decode_assignment(raw)
    assert _flat(groups) == tuple((tp.topic, p) for tp in d.assigned_partitions for p in tp.partitions)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=50))
def test_groups_step_aside_exactly_when_assignment_fast_does(raw: bytes) -> None:
    groups, pairs = assignment_groups_fast(raw), assignment_fast(raw)
    assert (groups is None) == (pairs is None)
    if groups is not None and pairs is not None:
        assert _flat(groups) == pairs[1]


@settings(max_examples=300, deadline=None)
@given(PARTS)
def test_member_view_derived_assignment_fields(parts) -> None:
    raw = encode_assignment(Assignment(3, parts, None))
    value = GroupMetadataValue("consumer", 1, "range", "m", 0, (MemberMetadata("m", None, "c", "h", 1, 1, b"", raw),))
    m = GroupSnapshot.from_value(value, group_id="g").members[0]
    pairs = tuple((tp.topic, p) for tp in parts for p in tp.partitions)
    assert m.assigned == pairs
    assert m.assigned_distinct == tuple(dict.fromkeys(pairs))
    assert m.assigned_is_distinct == (len(set(pairs)) == len(pairs))
    assert m.assigned_set == frozenset(pairs)
    assert m.assigned_topics == frozenset(t for t, _ in pairs)


@settings(max_examples=300, deadline=None)
@given(st.lists(PARTS, max_size=4))
def test_snapshot_repeat_check_and_distinct_members(assignments) -> None:
    members = tuple(MemberMetadata(f"m{i}", None, "c", "h", 1, 1, b"", encode_assignment(Assignment(3, parts, None)))
                    for i, parts in enumerate(assignments))
    snap = GroupSnapshot.from_value(GroupMetadataValue("consumer", 1, "range", "m0", 0, members), group_id="g")
    pairs = [[(tp.topic, p) for tp in parts for p in tp.partitions] for parts in assignments]
    every = [tp for member_pairs in pairs for tp in member_pairs]
    assert snap.has_repeated_assignments() == (len(every) != len(set(every)))
    for m, member_pairs in zip(snap.members, pairs, strict=True):
        assert m.assigned_is_distinct == (len(member_pairs) == len(set(member_pairs)))
