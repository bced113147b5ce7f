"""LeaveGroup L1/L2, a-e, S vs J batching (GroupMetadataManager#classicGroupLeave, GroupCoordinator#handleLeaveGroup);
OffsetCommit C1-C10 (OffsetMetadataManager#commitOffset); offset expiration and DeleteGroups
(OffsetMetadataManager#cleanupExpiredOffsets, W4)."""

from __future__ import annotations

import pytest

from coordinator_audit.core.coordinator import GroupState
from coordinator_audit.core.protocol import (
    Errors,
    LeaveGroupResponse,
    MemberIdentity,
    MemberResponse,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from coordinator_audit.core.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
)

from .scenario import Ctx


def leave_resp(ctx: Ctx, top: Errors, *members: tuple[str, str | None, Errors]) -> tuple[LeaveGroupResponse, ...]:
    return (LeaveGroupResponse(correlation_id=ctx._corr, error_code=top,
                               members=tuple(MemberResponse(*m) for m in members)),)


def test_l1_unknown_group() -> None:
    ctx = Ctx()
    res = ctx.leave("a", MemberIdentity("", "i"))
    assert res.responses == leave_resp(ctx, Errors.NONE, ("a", None, Errors.UNKNOWN_MEMBER_ID),
                                       ("", "i", Errors.UNKNOWN_MEMBER_ID))


def test_l2_dead_group() -> None:
    ctx = Ctx()
    (a,) = ctx.stable_group(1)
    ctx.coord._shard.groups["g"].state = GroupState.DEAD
    assert ctx.leave(a).responses == leave_resp(ctx, Errors.COORDINATOR_NOT_AVAILABLE)


@pytest.mark.parametrize("flavor", ["java", "scala"])
def test_leave_a_by_instance_id_and_last_member_writes_w2(flavor: str) -> None:
    ctx = Ctx(flavor=flavor)
    ctx.stable_group(1, static=True)
    ctx.advance(50)
    res = ctx.leave(MemberIdentity("", "inst-0", "bye"))
    assert res.responses == leave_resp(ctx, Errors.NONE, ("", "inst-0", Errors.NONE))
    assert res.records == (CoordinatorRecord(GroupMetadataKey("g"), GroupMetadataValue(
        "consumer", 2, None, None, ctx.now, ()), 2, 3),)
    assert ctx.view().state == GroupState.EMPTY and ctx.view().generation_id == 2


def test_leave_b_unknown_instance_without_member_id() -> None:
    ctx = Ctx()
    ctx.stable_group(1)
    res = ctx.leave(MemberIdentity("", "nope"), MemberIdentity("", None))
    assert res.responses == leave_resp(ctx, Errors.NONE, ("", "nope", Errors.UNKNOWN_MEMBER_ID),
                                       ("", None, Errors.UNKNOWN_MEMBER_ID))
    assert ctx.view().state == GroupState.STABLE


@pytest.mark.parametrize("flavor", ["java", "scala"])
def test_leave_c_pending_member(flavor: str) -> None:
    ctx = Ctx(flavor=flavor)
    ctx.stable_group(1)
    pending = ctx.member_id_required()
    res = ctx.leave(pending)
    assert res.responses == leave_resp(ctx, Errors.NONE, (pending, None, Errors.NONE))
    assert pending not in ctx.view().pending_members
    # J counts it as a successful leave: a Stable group rebalances although nobody left
    # (GroupMetadataManager#classicGroupLeaveToClassicGroup)
    if flavor == "java":
        assert ctx.view().state == GroupState.PREPARING_REBALANCE
        assert any(f"explicit `LeaveGroup` request for ({pending}) members." in line for line in res.logs)
    else:
        assert ctx.view().state == GroupState.STABLE


def test_leave_d_fenced_and_unknown() -> None:
    ctx = Ctx()
    ctx.stable_group(1, static=True)
    res = ctx.leave(MemberIdentity("x", "inst-0"), MemberIdentity("y"))
    assert res.responses == leave_resp(ctx, Errors.NONE, ("x", "inst-0", Errors.FENCED_INSTANCE_ID),
                                       ("y", None, Errors.UNKNOWN_MEMBER_ID))


def test_leave_e_member_leaves_parked_join_answered() -> None:
    ctx = Ctx()
    a, b = ctx.stable_group(2)
    leader = ctx.view().leader_id
    follower = b if leader == a else a
    ctx.join(leader)  # leader parked in PreparingRebalance
    res = ctx.leave(leader)
    assert res.responses[0].error_code == Errors.UNKNOWN_MEMBER_ID and res.responses[0].member_id == ""
    assert res.responses[1] == leave_resp(ctx, Errors.NONE, (leader, None, Errors.NONE))[0]
    assert ctx.view().member_ids == (follower,)


def test_leave_v0_folds_member_error_into_top_level() -> None:
    ctx = Ctx()
    ctx.stable_group(1)
    res = ctx.leave("nobody", version=2)
    assert res.responses == (LeaveGroupResponse(correlation_id=ctx._corr, error_code=Errors.UNKNOWN_MEMBER_ID),)


def test_leave_batch_java_one_rebalance_reason_scala_first_member() -> None:
    logs = {}
    for flavor in ("java", "scala"):
        ctx = Ctx(flavor=flavor)
        ids = ctx.stable_group(3)
        res = ctx.leave(MemberIdentity(ids[0], None, "r1"), MemberIdentity(ids[1], None, "r2"))
        logs[flavor] = [line for line in res.logs if "Preparing to rebalance" in line]
        assert len(logs[flavor]) == 1
    assert "explicit `LeaveGroup` request for" in logs["java"][0]
    assert "on LeaveGroup; client reason: r1" in logs["scala"][0]


# ------------------------------------------------------------------------------------------------
# OffsetCommit


def commit_resp(ctx: Ctx, error: Errors, partitions=((("t", 0)),)) -> tuple[OffsetCommitResponse, ...]:
    topics: dict[str, list[OffsetCommitResponsePartition]] = {}
    for topic, p in partitions:
        topics.setdefault(topic, []).append(OffsetCommitResponsePartition(p, error))
    return (OffsetCommitResponse(correlation_id=ctx._corr, topics=tuple(
        OffsetCommitResponseTopic(t, tuple(ps)) for t, ps in topics.items())),)


def offset_record(group: str, topic: str, p: int, offset: int, ts: int, *, epoch: int = 5, metadata: str = "",
                  expire: int = -1, version: int = 3) -> CoordinatorRecord:
    return CoordinatorRecord(OffsetCommitKey(group, topic, p),
                             OffsetCommitValue(offset, epoch if version >= 3 else -1, metadata, ts, expire), 1, version)


def test_c1_simple_group_created() -> None:
    for flavor in ("java", "scala"):
        ctx = Ctx(flavor=flavor)
        ctx.at(100)
        res = ctx.commit()
        assert res.responses == commit_resp(ctx, Errors.NONE)
        assert res.records == (offset_record("g", "t", 0, 10, 100),)
        v = ctx.view()
        assert v.state == GroupState.EMPTY and v.protocol_type is None and v.generation_id == 0


@pytest.mark.parametrize("flavor,version,error", [
    ("java", 9, Errors.GROUP_ID_NOT_FOUND), ("java", 8, Errors.ILLEGAL_GENERATION), ("scala", 9, Errors.ILLEGAL_GENERATION)])
def test_c2_unknown_group_with_generation(flavor: str, version: int, error: Errors) -> None:
    ctx = Ctx(flavor=flavor)
    assert ctx.commit(generation=1, member_id="m", version=version).responses == commit_resp(ctx, error)
    assert ctx.coord.group("g") is None


def test_c3_dead() -> None:
    ctx = Ctx()
    ctx.commit()
    ctx.coord._shard.groups["g"].state = GroupState.DEAD
    assert ctx.commit().responses == commit_resp(ctx, Errors.COORDINATOR_NOT_AVAILABLE)


def test_c4_negative_generation_on_empty_group_even_with_member_id() -> None:
    ctx = Ctx()
    ctx.commit()
    assert ctx.commit(member_id="anything").responses == commit_resp(ctx, Errors.NONE)


def test_c5_member_validation_and_generation() -> None:
    ctx = Ctx()
    (a,) = ctx.stable_group(1, static=True)
    assert ctx.commit(member_id="x", generation=1).responses == commit_resp(ctx, Errors.UNKNOWN_MEMBER_ID)
    assert ctx.commit(member_id="x", generation=1, instance="inst-0").responses == commit_resp(
        ctx, Errors.FENCED_INSTANCE_ID)
    assert ctx.commit(member_id=a, generation=0).responses == commit_resp(ctx, Errors.ILLEGAL_GENERATION)


def test_c6_no_member_on_non_empty_group() -> None:
    ctx = Ctx()
    ctx.stable_group(1)
    assert ctx.commit().responses == commit_resp(ctx, Errors.UNKNOWN_MEMBER_ID)


def test_c7_completing_rebalance() -> None:
    ctx = Ctx()
    a = ctx.member_id_required()
    ctx.join(a)
    ctx.advance(3000)
    assert ctx.view().state == GroupState.COMPLETING_REBALANCE
    assert ctx.commit(member_id=a, generation=1).responses == commit_resp(ctx, Errors.REBALANCE_IN_PROGRESS)


def test_c8_stable_and_preparing_accept_and_reschedule_session() -> None:
    ctx = Ctx()
    a, b = ctx.stable_group(2)
    ctx.advance(1000)
    res = ctx.commit(member_id=a, generation=1)
    assert res.responses == commit_resp(ctx, Errors.NONE)
    assert {t.key: t.deadline for t in ctx.coord.timers()}[("heartbeat", "g", a)] == ctx.now + 10_000
    ctx.join(ctx.view().leader_id)  # PreparingRebalance, generation not bumped yet
    ctx.advance(10)
    assert ctx.commit(member_id=b, generation=1).responses == commit_resp(ctx, Errors.NONE)


def test_c9_empty_group_after_members_left() -> None:
    ctx = Ctx()
    (a,) = ctx.stable_group(1)
    ctx.leave(a)
    assert ctx.commit().responses == commit_resp(ctx, Errors.NONE)


def test_c10_metadata_too_large_per_partition_in_utf16_units() -> None:
    ctx = Ctx(config_overrides={"offset_metadata_max_bytes": 4})
    ctx.at(7)
    big = "\U0001F600\U0001F600x"  # 5 UTF-16 units, 3 code points
    res = ctx.commit({("t", 0): 1}, metadata=big)
    assert res.responses == commit_resp(ctx, Errors.OFFSET_METADATA_TOO_LARGE)
    assert res.records == ()
    res = ctx.commit({("t", 0): 1, ("t", 1): 2}, metadata="ok")
    assert res.records == (offset_record("g", "t", 0, 1, 7, metadata="ok"), offset_record("g", "t", 1, 2, 7, metadata="ok"))


def test_commit_retention_writes_v1_with_expire_timestamp() -> None:
    ctx = Ctx()
    ctx.at(1000)
    res = ctx.commit(retention=5000, version=2)
    assert res.records == (offset_record("g", "t", 0, 10, 1000, expire=6000, version=1),)


@pytest.mark.parametrize("flavor", ["java", "scala"])
def test_commit_append_failure_scope(flavor: str) -> None:
    ctx = Ctx(flavor=flavor, config_overrides={"offset_metadata_max_bytes": 2})
    ctx.commit()
    ctx.fail_next_append(Errors.MESSAGE_TOO_LARGE)
    from coordinator_audit.core.protocol import (
        OffsetCommitRequest,
        OffsetCommitRequestPartition,
        OffsetCommitRequestTopic,
    )

    req = OffsetCommitRequest(group_id="g", correlation_id=99, topics=(OffsetCommitRequestTopic("t", (
        OffsetCommitRequestPartition(0, 1, -1, "ok"), OffsetCommitRequestPartition(1, 1, -1, "toolong"))),))
    res = ctx.coord.commit_offsets(req, now_ms=ctx.now)
    errors = [p.error_code for p in res.responses[0].topics[0].partitions]
    if flavor == "java":  # every partition gets the mapped error
        assert errors == [Errors.UNKNOWN_SERVER_ERROR, Errors.UNKNOWN_SERVER_ERROR]
    else:  # only the accepted ones
        assert errors == [Errors.INVALID_COMMIT_OFFSET_SIZE, Errors.OFFSET_METADATA_TOO_LARGE]
    assert ctx.coord.offsets("g")[("t", 0)].committed_offset == 10


# ------------------------------------------------------------------------------------------------
# expiration and deletion


def test_expiration_of_simple_group_offsets_then_group_deleted() -> None:
    for flavor in ("java", "scala"):
        ctx = Ctx(flavor=flavor, config_overrides={"offsets_retention_minutes": 1,
                                                   "offsets_retention_check_interval_ms": 10_000})
        ctx.commit()
        res = ctx.at(60_000)
        tombstones = [r for r in res.records if r.value is None]
        assert CoordinatorRecord(OffsetCommitKey("g", "t", 0), None, 1) in tombstones
        # S writes no group tombstone for a generation-0 group; J does
        assert (CoordinatorRecord(GroupMetadataKey("g"), None, 2) in tombstones) == (flavor == "java")
        assert ctx.coord.group("g") is None and ctx.coord.offsets("g") == {}


def test_expiration_empty_consumer_group_ages_from_state_timestamp() -> None:
    ctx = Ctx(config_overrides={"offsets_retention_minutes": 1, "offsets_retention_check_interval_ms": 1_000})
    (a,) = ctx.stable_group(1)
    ctx.commit(member_id=a, generation=1)
    ctx.at(8_000)
    ctx.leave(a)  # Empty at t=8000: offsets age from here, not from the commit
    ctx.at(67_999)
    assert ctx.coord.offsets("g")
    res = ctx.at(68_000)
    assert CoordinatorRecord(GroupMetadataKey("g"), None, 2) in res.records
    assert ctx.coord.group("g") is None


def test_expiration_keeps_subscribed_topics_of_stable_group() -> None:
    ctx = Ctx(config_overrides={"offsets_retention_minutes": 1, "offsets_retention_check_interval_ms": 1_000})
    (a,) = ctx.stable_group(1)
    ctx.commit({("t", 0): 1, ("other", 0): 2}, member_id=a, generation=1)
    for t in range(10_000, 70_001, 5_000):  # keep the member alive
        ctx.at(t)
        ctx.heartbeat(a, 1)
    assert set(ctx.coord.offsets("g")) == {("t", 0)}


def test_delete_groups_only_empty_groups() -> None:
    ctx = Ctx()
    ctx.stable_group(1)
    ctx.commit(group="simple")
    res = ctx.delete("g", "simple", "missing")
    assert res.responses[0].results == (("g", Errors.NON_EMPTY_GROUP), ("simple", Errors.NONE),
                                        ("missing", Errors.GROUP_ID_NOT_FOUND))
    assert res.records == (CoordinatorRecord(OffsetCommitKey("simple", "t", 0), None, 1),
                           CoordinatorRecord(GroupMetadataKey("simple"), None, 2))
    assert ctx.coord.group("simple") is None


def test_scala_pending_timer_fires_after_pending_member_left_and_only_logs() -> None:
    ctx = Ctx(flavor="scala")
    ctx.stable_group(1)
    pending = ctx.member_id_required(session=8000)
    ctx.leave(pending)
    res = ctx.advance(8000)
    assert any(f"Pending member {pending} in group g has been removed" in line for line in res.logs)
    jctx = Ctx()
    jctx.stable_group(1)
    jpending = jctx.member_id_required(session=8000)
    jctx.leave(jpending)  # J cancels the timer
    assert ("heartbeat", "g", jpending) not in {t.key for t in jctx.coord.timers()}
