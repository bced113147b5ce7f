"""The load path (GroupCoordinatorShard#replay), load completion, unload/failover, and the append-failure rows
(W2/W5, GroupMetadataManager#appendGroupMetadataErrorToResponseError)."""

from __future__ import annotations

from coordinator_audit.core.coordinator import (
    CoordinatorConfig,
    CoordinatorStatus,
    GroupCoordinator,
    GroupState,
)
from coordinator_audit.core.protocol import Errors, SyncGroupResponse
from coordinator_audit.core.records import (
    ControlRecordKey,
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownRecordKey,
    UnknownRecordValue,
)

from .scenario import RANGE, Ctx, persisted


def member(mid: str, *, rebalance: int = 60_000, instance: str | None = None) -> MemberMetadata:
    return MemberMetadata(mid, instance, "c", "/1.2.3.4", rebalance, 10_000, RANGE[0][1], b"asg")


def gm(group: str, members: tuple[MemberMetadata, ...], *, leader: str | None = "a", gen: int = 3) -> CoordinatorRecord:
    return CoordinatorRecord(GroupMetadataKey(group), GroupMetadataValue(
        "consumer", gen, "range" if members else None, leader if members else None, 500, members), 2, 3)


def test_group_record_replaces_group_and_tombstone_removes() -> None:
    c = GroupCoordinator()
    c.replay(gm("g", (member("a"), member("b"))))
    v = c.group("g")
    assert v is not None and v.state == GroupState.STABLE and v.generation_id == 3 and v.leader_id == "a"
    assert v.current_state_timestamp == 500 and set(v.member_ids) == {"a", "b"}
    assert v.member("a").supported_protocols == RANGE  # only the group's protocol
    c.replay(gm("g", (member("b"),), leader="b", gen=4))
    assert c.group("g").member_ids == ("b",)
    c.replay(CoordinatorRecord(GroupMetadataKey("g"), None, 2))
    assert c.group("g") is None


def test_null_leader_takes_first_listed_member_and_v0_rebalance_timeout() -> None:
    c = GroupCoordinator()
    c.replay(gm("g", (member("z", rebalance=-1), member("a")), leader=None))
    v = c.group("g")
    assert v.leader_id == "z"
    assert v.member("z").rebalance_timeout_ms == 10_000


def test_empty_record_gives_empty_group_and_empty_protocol_type_is_none() -> None:
    c = GroupCoordinator()
    c.replay(CoordinatorRecord(GroupMetadataKey("g"), GroupMetadataValue("", 0, None, None, -1, ()), 2, 3))
    v = c.group("g")
    assert v.state == GroupState.EMPTY and v.protocol_type is None and v.current_state_timestamp is None


def test_offsets_without_metadata_create_empty_group_and_tombstone_removes_offset() -> None:
    c = GroupCoordinator()
    c.replay(CoordinatorRecord(OffsetCommitKey("s", "t", 0), OffsetCommitValue(5, -1, "", 10, -1), 1, 3))
    v = c.group("s")
    assert v.state == GroupState.EMPTY and v.generation_id == 0 and v.protocol_type is None
    assert c.offsets("s")[("t", 0)].committed_offset == 5
    c.replay(CoordinatorRecord(OffsetCommitKey("s", "t", 0), None, 1))
    assert c.offsets("s") == {}


def test_unknown_types_are_skipped_and_counted_control_records_ignored() -> None:
    c = GroupCoordinator()
    c.replay(CoordinatorRecord(UnknownRecordKey(99, b"x"), UnknownRecordValue(b"y"), 99, 0))
    c.replay(CoordinatorRecord(ControlRecordKey(1), None, 0))
    assert c.unknown_records_skipped == 1 and c.group_ids() == ()


def test_complete_load_starts_session_timers() -> None:
    c = GroupCoordinator()
    c.replay(gm("g", (member("a"), member("b"))))
    c.complete_load(now_ms=1000)
    keys = {t.key: t.deadline for t in c.timers()}
    assert keys[("heartbeat", "g", "a")] == 11_000 and keys[("heartbeat", "g", "b")] == 11_000
    res = c.advance_time(now_ms=11_000)
    assert c.group("g").state == GroupState.EMPTY  # both expired; the join completed empty: W2
    assert res.records[-1].value.generation == 4


def test_complete_load_over_capacity_rebalances() -> None:
    for flavor, text in (("java", "Freshly-loaded group g (size 2) is over capacity 1."),
                         ("scala", "Freshly-loaded group is over capacity (1).")):
        c = GroupCoordinator(CoordinatorConfig(flavor=flavor, group_max_size=1))
        c.replay(gm("g", (member("a"), member("b"))))
        res = c.complete_load(now_ms=0)
        assert c.group("g").state == GroupState.PREPARING_REBALANCE
        assert any(text in line for line in res.logs)


def test_failover_unload_replay_complete_load_same_coordinator() -> None:
    ctx = Ctx()
    a, _b = ctx.stable_group(2)
    ctx.commit(member_id=a, generation=1)
    before = persisted(ctx.view())
    ctx.check_replay = False
    ctx.coord.unload(now_ms=ctx.now)
    assert ctx.coord.status == CoordinatorStatus.UNLOADED
    ctx.coord.begin_load()
    assert ctx.heartbeat(a, 1).responses[0].error_code == Errors.NONE  # answered blindly while loading
    for rec in ctx.records:
        ctx.coord.replay(rec)
    ctx.coord.complete_load(now_ms=ctx.now)
    assert persisted(ctx.view()) == before and ctx.view().state == GroupState.STABLE
    assert ctx.heartbeat(a, 1).responses[0].error_code == Errors.NONE
    assert ctx.coord.offsets("g")[("t", 0)].committed_offset == 10


def test_unload_answers_parked_syncs() -> None:
    ctx = Ctx()
    a = ctx.member_id_required()
    ctx.join(a)
    b = ctx.member_id_required()
    ctx.join(b)
    ctx.at(3000)
    ctx.at(6000)
    follower = b if ctx.view().leader_id == a else a
    ctx.sync(follower, 1)
    res = ctx.coord.unload(now_ms=ctx.now)
    assert res.responses == (SyncGroupResponse(correlation_id=ctx._corr, error_code=Errors.NOT_COORDINATOR),)


def test_w5_failure_reverts_new_group_and_answers_parked_join() -> None:
    ctx = Ctx()
    ctx.fail_next_append(Errors.NOT_ENOUGH_REPLICAS)
    res = ctx.join(instance="i")
    assert res.records == ()
    assert [(r.error_code, r.member_id) for r in res.responses] == [(Errors.COORDINATOR_NOT_AVAILABLE, "")]
    assert ctx.coord.group("g") is None
    assert any("Failed to write empty metadata for group g" in line for line in res.logs)


def test_w5_failure_after_member_id_required_loses_group() -> None:
    ctx = Ctx()
    ctx.fail_next_append(Errors.NOT_LEADER_OR_FOLLOWER)
    res = ctx.join()
    m = res.responses[0].member_id
    assert res.responses[0].error_code == Errors.MEMBER_ID_REQUIRED
    assert ctx.coord.group("g") is None
    assert ctx.join(m).responses[0].error_code == Errors.UNKNOWN_MEMBER_ID  # J2


def test_w2_failure_is_only_logged() -> None:
    ctx = Ctx()
    (a,) = ctx.stable_group(1)
    ctx.fail_next_append(Errors.NOT_LEADER_OR_FOLLOWER)
    res = ctx.leave(a)
    assert res.records == ()
    assert ctx.view().state == GroupState.EMPTY
    assert any("Failed to write empty metadata for group g: This is not the correct coordinator." in line
               for line in res.logs)


def test_written_but_failed_append_reaches_the_log() -> None:
    ctx = Ctx()
    a = ctx.member_id_required()
    ctx.join(a)
    ctx.at(3000)
    ctx.fail_next_append(Errors.REQUEST_TIMED_OUT, written=True)
    res = ctx.sync(a, 1, ((a, b"x"),))
    assert len(res.records) == 1  # in the log although the coordinator saw a failure (not verified on a broker)
    assert res.responses[0].error_code == Errors.COORDINATOR_NOT_AVAILABLE
    assert ctx.view().state == GroupState.PREPARING_REBALANCE


def test_time_cannot_go_back() -> None:
    import pytest

    c = GroupCoordinator()
    c.advance_time(now_ms=10)
    with pytest.raises(ValueError, match="time cannot go back"):
        c.advance_time(now_ms=9)
