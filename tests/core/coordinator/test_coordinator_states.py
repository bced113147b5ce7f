"""Every legal and illegal state transition (spec §1) and the hash-map order emulation (§2.5)."""

from __future__ import annotations

import itertools

import pytest

from coordinator_core.coordinator import VALID_PREVIOUS_STATES, GroupState, IllegalStateTransition
from coordinator_core.coordinator.hashorder import JavaHashMap, ScalaHashMap, champ_order, java_hashmap_order
from coordinator_core.coordinator.state import check_transition

ALL = list(GroupState)
PAIRS = list(itertools.product(ALL, ALL))
LEGAL = [(a, b) for a, b in PAIRS if a in VALID_PREVIOUS_STATES[b]]
ILLEGAL = [(a, b) for a, b in PAIRS if a not in VALID_PREVIOUS_STATES[b]]


def test_table_matches_spec() -> None:
    s = GroupState
    assert {
        s.PREPARING_REBALANCE: {s.STABLE, s.COMPLETING_REBALANCE, s.EMPTY},
        s.COMPLETING_REBALANCE: {s.PREPARING_REBALANCE},
        s.STABLE: {s.COMPLETING_REBALANCE},
        s.EMPTY: {s.PREPARING_REBALANCE},
        s.DEAD: {s.STABLE, s.PREPARING_REBALANCE, s.COMPLETING_REBALANCE, s.EMPTY, s.DEAD},
    } == VALID_PREVIOUS_STATES
    assert [x.value for x in ALL] == ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]
    assert len(LEGAL) == 11 and len(ILLEGAL) == 14


@pytest.mark.parametrize(("current", "target"), LEGAL, ids=[f"{a.value}->{b.value}" for a, b in LEGAL])
def test_legal_transition(current: GroupState, target: GroupState) -> None:
    from coordinator_core.coordinator import CoordinatorConfig
    from coordinator_core.coordinator.group import ClassicGroup
    from coordinator_core.coordinator.runtime import Shard

    group = ClassicGroup.create("g", Shard(CoordinatorConfig(), None), state=current, now_ms=1)
    group.transition_to(target, 42)
    assert (group.state, group.previous_state, group.current_state_timestamp) == (target, current, 42)


@pytest.mark.parametrize(("current", "target"), ILLEGAL, ids=[f"{a.value}->{b.value}" for a, b in ILLEGAL])
def test_illegal_transition_raises(current: GroupState, target: GroupState) -> None:
    with pytest.raises(IllegalStateTransition) as info:
        check_transition("grp", current, target)
    assert "grp" in str(info.value) and current.value in str(info.value) and target.value in str(info.value)


def test_java_hashmap_bucket_order_of_builtin_assignors() -> None:
    # spec §2.3: sticky 8, range 9, roundrobin 10, cooperative-sticky 15 in a 16-bucket table
    assert java_hashmap_order(["cooperative-sticky", "roundrobin", "range", "sticky"]) == [
        "sticky", "range", "roundrobin", "cooperative-sticky"]


def test_java_hashmap_resize_and_removal_keep_bucket_order() -> None:
    m: JavaHashMap[int] = JavaHashMap()
    keys = [f"member-{i}" for i in range(40)]
    for i, k in enumerate(keys):
        m.put(k, i)
    for k in keys[::3]:
        m.pop(k)
    order = m.keys()
    assert sorted(order) == sorted(k for k in keys if k not in keys[::3])
    # with capacity 64 now, order is by bucket index; insertion order inside a bucket
    from coordinator_core.jhash import java_string_hashcode, spread

    buckets = [spread(java_string_hashcode(k)) & 63 for k in order]
    assert buckets == sorted(buckets)
    assert m.first_key() == order[0]


def test_scala_hashmap_sorted_by_hash_within_bucket() -> None:
    from coordinator_core.jhash import java_string_hashcode, spread

    m: ScalaHashMap[int] = ScalaHashMap()
    for i in range(30):
        m.put(f"k{i}", i)
    order = m.keys()
    cap = 64  # grows before the 12th (->32) and the 24th (->64) insert
    keyed = [(spread(java_string_hashcode(k)) & (cap - 1), spread(java_string_hashcode(k))) for k in order]
    assert keyed == sorted(keyed)


def test_champ_order_is_a_permutation_and_deterministic() -> None:
    names = ["range", "roundrobin", "sticky", "cooperative-sticky", "custom"]
    assert sorted(champ_order(names)) == sorted(names)
    assert champ_order(names) == champ_order(list(reversed(names)))
