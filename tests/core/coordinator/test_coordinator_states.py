"""Every legal and illegal state transition (ClassicGroupState) and the hash-map order emulation (java.util.HashMap)."""

from __future__ import annotations

import itertools

import pytest

from coordinator_audit.core.coordinator import VALID_PREVIOUS_STATES, GroupState, IllegalStateTransition
from coordinator_audit.core.coordinator.hashorder import (
    JavaHashMap,
    ScalaHashMap,
    champ_order,
    java_hashmap_order,
)
from coordinator_audit.core.coordinator.state import check_transition

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
    from coordinator_audit.core.coordinator import CoordinatorConfig
    from coordinator_audit.core.coordinator.group import ClassicGroup
    from coordinator_audit.core.coordinator.runtime import Shard

    group = ClassicGroup.create("g", Shard(CoordinatorConfig(), None), state=current, now_ms=1)
    group.transition_to(target, 42)
    assert (group.state, group.previous_state, group.current_state_timestamp) == (target, current, 42)


@pytest.mark.parametrize(("current", "target"), ILLEGAL, ids=[f"{a.value}->{b.value}" for a, b in ILLEGAL])
def test_illegal_transition_raises(current: GroupState, target: GroupState) -> None:
    with pytest.raises(IllegalStateTransition) as info:
        check_transition("grp", current, target)
    assert "grp" in str(info.value) and current.value in str(info.value) and target.value in str(info.value)


def test_java_hashmap_bucket_order_of_builtin_assignors() -> None:
    # the protocol vote's HashMap (ClassicGroup#selectProtocol): sticky 8, range 9, roundrobin 10,
    # cooperative-sticky 15 in a 16-bucket table
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
    from coordinator_audit.core.jhash import java_string_hashcode, spread

    buckets = [spread(java_string_hashcode(k)) & 63 for k in order]
    assert buckets == sorted(buckets)
    assert m.first_key() == order[0]


def test_scala_hashmap_sorted_by_hash_within_bucket() -> None:
    from coordinator_audit.core.jhash import java_string_hashcode, spread

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


def test_member_id_supplier_is_injectable_and_default_is_deterministic() -> None:
    from coordinator_audit.core.coordinator import CoordinatorConfig, GroupCoordinator
    from coordinator_audit.core.protocol import JoinGroupRequest

    def req(instance: str | None = None) -> JoinGroupRequest:
        return JoinGroupRequest(group_id="g", session_timeout_ms=10_000, protocol_type="consumer",
                                protocols=(("range", b""),), client_id="cli", group_instance_id=instance)

    c = GroupCoordinator(CoordinatorConfig())
    assert c.join_group(req(), now_ms=0).responses[0].member_id == "cli-00000000-0000-4000-8000-000000000001"
    c.join_group(req("inst"), now_ms=0)
    assert c.group("g").member_ids == ("inst-00000000-0000-4000-8000-000000000002",)
    seen: list[str] = []
    custom = GroupCoordinator(CoordinatorConfig(), member_id_supplier=lambda p: seen.append(p) or f"{p}-x{len(seen)}")
    assert custom.join_group(req(), now_ms=0).responses[0].member_id == "cli-x1"
    assert seen == ["cli"]


def test_log_lines_per_flavour() -> None:
    from .scenario import Ctx

    lines = {}
    for flavor in ("java", "scala"):
        ctx = Ctx(flavor=flavor)
        m = ctx.member_id_required()
        res = ctx.join(m, reason="r")
        lines[flavor] = next(line for line in res.logs if "Preparing to rebalance" in line)
    assert lines["java"] == (
        "[1970-01-01 00:00:00,000] INFO [GroupCoordinator id=1 topic=__consumer_offsets partition=3] Preparing to "
        "rebalance group g in state PreparingRebalance with old generation 0 (reason: Adding new member "
        "client-00000000-0000-4000-8000-000000000001 with group instance id null; client reason: r). "
        "(org.apache.kafka.coordinator.group.GroupMetadataManager)")
    assert lines["scala"] == (
        "[1970-01-01 00:00:00,000] INFO [GroupCoordinator 1]: Preparing to rebalance group g in state "
        "PreparingRebalance with old generation 0 (__consumer_offsets-3) (reason: Adding new member "
        "client-00000000-0000-4000-8000-000000000001 with group instance id None; client reason: r) "
        "(kafka.coordinator.group.GroupCoordinator)")


def test_config_rejects_bad_values() -> None:
    from coordinator_audit.core.coordinator import CoordinatorConfig
    from coordinator_audit.core.errors import ConfigError

    with pytest.raises(ConfigError, match="flavor"):
        CoordinatorConfig(flavor="go")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="group_max_size"):
        CoordinatorConfig(group_max_size=0)
    with pytest.raises(ConfigError, match="group_metadata_value_version"):
        CoordinatorConfig(group_metadata_value_version=4)


def test_old_ibp_rejects_static_members_and_writes_old_versions() -> None:
    from coordinator_audit.core.protocol import Errors

    from .scenario import Ctx

    ctx = Ctx(config_overrides={"group_metadata_value_version": 2})
    assert ctx.join(instance="i").responses[0].error_code == Errors.UNSUPPORTED_VERSION
    ctx.stable_group(1)
    w1 = next(r for r in ctx.records if r.value is not None and r.value.members)
    assert w1.value_version == 2 and w1.value.members[0].group_instance_id is None
