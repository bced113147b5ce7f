"""SyncGroup S1-S10 (GroupMetadataManager#classicGroupSync, W1) and Heartbeat H1-H8 (#classicGroupHeartbeat)."""

from __future__ import annotations

import pytest

from coordinator_audit.core.coordinator import GroupState
from coordinator_audit.core.protocol import Errors, HeartbeatResponse, SyncGroupResponse
from coordinator_audit.core.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
)

from .scenario import RANGE, REBALANCE, SESSION, Ctx


def sync_err(ctx: Ctx, error: Errors) -> tuple[SyncGroupResponse, ...]:
    return (SyncGroupResponse(correlation_id=ctx._corr, error_code=error),)


def completing(ctx: Ctx, n: int = 2) -> list[str]:
    """n members joined, group CompletingRebalance gen 1 (nobody synced yet)."""
    ids = []
    for _ in range(n):
        m = ctx.member_id_required()
        ctx.join(m)
        ids.append(m)
    for _ in range(n + 1):
        if ctx.view().state == GroupState.PREPARING_REBALANCE:
            ctx.advance(3000)
    assert ctx.view().state == GroupState.COMPLETING_REBALANCE
    return ids


def test_s1_unknown_group() -> None:
    ctx = Ctx()
    assert ctx.sync("m", 1).responses == sync_err(ctx, Errors.UNKNOWN_MEMBER_ID)


def test_s2_dead_group() -> None:
    ctx = Ctx(flavor="scala")
    (a,) = ctx.stable_group(1)
    ctx.coord._shard.groups["g"].state = GroupState.DEAD
    assert ctx.sync(a, 1).responses == sync_err(ctx, Errors.COORDINATOR_NOT_AVAILABLE)


def test_s3_unknown_and_fenced() -> None:
    ctx = Ctx()
    ctx.stable_group(1, static=True)
    assert ctx.sync("x", 1).responses == sync_err(ctx, Errors.UNKNOWN_MEMBER_ID)
    assert ctx.sync("x", 1, instance="inst-0").responses == sync_err(ctx, Errors.FENCED_INSTANCE_ID)


def test_s4_illegal_generation() -> None:
    ctx = Ctx()
    (a,) = ctx.stable_group(1)
    assert ctx.sync(a, 7).responses == sync_err(ctx, Errors.ILLEGAL_GENERATION)


def test_s5_inconsistent_protocol() -> None:
    ctx = Ctx()
    (a,) = ctx.stable_group(1)
    assert ctx.sync(a, 1, protocol_name="roundrobin").responses == sync_err(ctx, Errors.INCONSISTENT_GROUP_PROTOCOL)
    assert ctx.sync(a, 1, protocol_type="connect").responses == sync_err(ctx, Errors.INCONSISTENT_GROUP_PROTOCOL)
    # v5+ must carry both fields (KafkaApis); v4 may omit them
    assert ctx.sync(a, 1, protocol_type=None).responses == sync_err(ctx, Errors.INCONSISTENT_GROUP_PROTOCOL)
    assert ctx.sync(a, 1, protocol_type=None, protocol_name=None, version=4).responses[0].error_code == Errors.NONE


@pytest.mark.parametrize("flavor", ["java", "scala"])
def test_s6_empty_group(flavor: str) -> None:
    ctx = Ctx(flavor=flavor)
    (a,) = ctx.stable_group(1)
    ctx.leave(a)
    assert ctx.view().state == GroupState.EMPTY
    assert ctx.sync(a, 2).responses == sync_err(ctx, Errors.UNKNOWN_MEMBER_ID)


def test_s7_preparing_rebalance() -> None:
    ctx = Ctx()
    a, b = ctx.stable_group(2)
    ctx.join(ctx.view().leader_id)
    assert ctx.sync(b if ctx.view().leader_id == a else a, 1).responses == sync_err(ctx, Errors.REBALANCE_IN_PROGRESS)


def test_s8_follower_parks_and_s9_leader_writes_w1_then_everyone_answered() -> None:
    ctx = Ctx()
    ids = completing(ctx, 2)
    v = ctx.view()
    leader = v.leader_id
    follower = next(m for m in ids if m != leader)
    completing_ts = v.current_state_timestamp
    r1 = ctx.sync(follower, 1)
    assert r1.responses == () and r1.records == ()
    assert ctx.view().member(follower).awaiting_sync
    ctx.advance(5)
    r2 = ctx.sync(leader, 1, ((leader, b"AL"),))  # follower omitted: gets b""
    members = tuple(MemberMetadata(m.member_id, None, "client", "/127.0.0.1", REBALANCE, SESSION, RANGE[0][1],
                                   b"AL" if m.member_id == leader else b"")
                    for m in ctx.view().members)
    assert r2.records == (CoordinatorRecord(GroupMetadataKey("g"), GroupMetadataValue(
        "consumer", 1, "range", leader, completing_ts, members), 2, 3),)
    assert set(r2.responses) == {
        SyncGroupResponse(correlation_id=ctx._corr - 1, error_code=Errors.NONE, protocol_type="consumer",
                          protocol_name="range", assignment=b""),
        SyncGroupResponse(correlation_id=ctx._corr, error_code=Errors.NONE, protocol_type="consumer",
                          protocol_name="range", assignment=b"AL")}
    assert ctx.view().state == GroupState.STABLE
    assert any("Setting empty assignments for members" in line for line in r2.logs)
    assert any("Sending empty assignment to member" in line for line in r2.logs)


def test_s9_assignment_for_unknown_member_is_ignored() -> None:
    ctx = Ctx()
    (a,) = completing(ctx, 1)
    res = ctx.sync(a, 1, ((a, b"x"), ("ghost", b"y")))
    assert [m.member_id for m in res.records[0].value.members] == [a]


@pytest.mark.parametrize("flavor,error,mapped", [
    ("java", Errors.REQUEST_TIMED_OUT, Errors.COORDINATOR_NOT_AVAILABLE),
    ("scala", Errors.REQUEST_TIMED_OUT, Errors.REBALANCE_IN_PROGRESS),
    ("java", Errors.MESSAGE_TOO_LARGE, Errors.UNKNOWN_SERVER_ERROR),
    ("scala", Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND, Errors.COORDINATOR_NOT_AVAILABLE),
    ("java", Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND, Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND),
])
def test_s9_append_failure_resets_and_rebalances(flavor: str, error: Errors, mapped: Errors) -> None:
    ctx = Ctx(flavor=flavor)
    a, b = completing(ctx, 2)
    leader = ctx.view().leader_id
    follower = b if leader == a else a
    ctx.sync(follower, 1)
    ctx.fail_next_append(error)
    res = ctx.sync(leader, 1, ((a, b"x"), (b, b"y")))
    assert res.records == ()
    assert {r.error_code for r in res.responses} == {mapped}
    assert all(r.protocol_type is None and r.assignment == b"" for r in res.responses)
    assert ctx.view().state == GroupState.PREPARING_REBALANCE
    text = "assignmentduring" if flavor == "java" else "assignment during"
    assert any(f"Error {mapped.name} when storing group {text}" in line for line in res.logs)


def test_s9_append_completing_after_state_change_does_nothing() -> None:
    ctx = Ctx()
    a, b = completing(ctx, 2)
    leader = ctx.view().leader_id
    follower = b if leader == a else a
    ctx.coord.defer_appends(True)
    ctx.tainted = True
    res = ctx.sync(leader, 1, ((a, b"x"), (b, b"y")))
    assert len(res.records) == 1 and res.responses == ()
    ctx.join(follower, protocols=(("range", b"changed"),))  # rebalance starts meanwhile
    assert ctx.view().state == GroupState.PREPARING_REBALANCE
    done = ctx.coord.complete_appends(now_ms=ctx.now)
    assert done.responses == () and ctx.view().state == GroupState.PREPARING_REBALANCE


@pytest.mark.parametrize("flavor", ["java", "scala"])
def test_s10_stable_returns_assignment_and_scala_reschedules_session(flavor: str) -> None:
    ctx = Ctx(flavor=flavor)
    (a,) = ctx.stable_group(1)
    ctx.advance(4000)
    before = {t.key: t.deadline for t in ctx.coord.timers()}
    res = ctx.sync(a, 1)
    assert res.responses == (SyncGroupResponse(correlation_id=ctx._corr, error_code=Errors.NONE,
                                               protocol_type="consumer", protocol_name="range",
                                               assignment=f"a-{a}".encode()),)
    after = {t.key: t.deadline for t in ctx.coord.timers()}
    key = ("heartbeat", "g", a)
    if flavor == "scala":
        assert after[key] == ctx.now + SESSION
    else:
        assert after[key] == before[key]


# ------------------------------------------------------------------------------------------------
# Heartbeat


def hb(ctx: Ctx, error: Errors) -> tuple[HeartbeatResponse, ...]:
    return (HeartbeatResponse(correlation_id=ctx._corr, error_code=error),)


def test_h1_unknown_group() -> None:
    ctx = Ctx()
    assert ctx.heartbeat("m", 1).responses == hb(ctx, Errors.UNKNOWN_MEMBER_ID)


def test_h2_dead() -> None:
    ctx = Ctx()
    (a,) = ctx.stable_group(1)
    ctx.coord._shard.groups["g"].state = GroupState.DEAD
    assert ctx.heartbeat(a, 1).responses == hb(ctx, Errors.COORDINATOR_NOT_AVAILABLE)


def test_h3_unknown_member_and_fenced() -> None:
    ctx = Ctx()
    ctx.stable_group(1, static=True)
    assert ctx.heartbeat("x", 1).responses == hb(ctx, Errors.UNKNOWN_MEMBER_ID)
    assert ctx.heartbeat("x", 1, instance="inst-0").responses == hb(ctx, Errors.FENCED_INSTANCE_ID)


def test_h4_illegal_generation() -> None:
    ctx = Ctx()
    (a,) = ctx.stable_group(1)
    assert ctx.heartbeat(a, 0).responses == hb(ctx, Errors.ILLEGAL_GENERATION)


def test_h5_empty() -> None:
    ctx = Ctx(check_replay=False)
    ctx.stable_group(1)
    ctx.leave(ctx.view().member_ids[0])
    from .test_coordinator_join import _ghost

    group = ctx.coord._shard.groups["g"]
    group.members.put("m", _ghost())  # unreachable through requests: plant a member in an Empty group
    assert ctx.heartbeat("m", 2).responses == hb(ctx, Errors.UNKNOWN_MEMBER_ID)


def test_h6_preparing_rebalance_reschedules() -> None:
    ctx = Ctx()
    a, b = ctx.stable_group(2)
    leader = ctx.view().leader_id
    follower = b if leader == a else a
    ctx.join(leader)
    ctx.advance(100)
    assert ctx.heartbeat(follower, 1).responses == hb(ctx, Errors.REBALANCE_IN_PROGRESS)
    assert {t.key: t.deadline for t in ctx.coord.timers()}[("heartbeat", "g", follower)] == ctx.now + SESSION


def test_h7_completing_rebalance_and_h8_stable() -> None:
    ctx = Ctx()
    (a,) = completing(ctx, 1)
    ctx.advance(100)
    assert ctx.heartbeat(a, 1).responses == hb(ctx, Errors.NONE)
    assert {t.key: t.deadline for t in ctx.coord.timers()}[("heartbeat", "g", a)] == ctx.now + SESSION
    ctx.sync(a, 1, ((a, b""),))
    ctx.advance(100)
    assert ctx.heartbeat(a, 1).responses == hb(ctx, Errors.NONE)
    assert {t.key: t.deadline for t in ctx.coord.timers()}[("heartbeat", "g", a)] == ctx.now + SESSION


def test_heartbeat_while_loading_answers_none_and_sync_differs_by_flavour() -> None:
    for flavor, sync_error in (("java", Errors.COORDINATOR_LOAD_IN_PROGRESS), ("scala", Errors.REBALANCE_IN_PROGRESS)):
        ctx = Ctx(flavor=flavor)
        ctx.coord.begin_load()
        assert ctx.heartbeat("m", 1).responses == hb(ctx, Errors.NONE)
        assert ctx.sync("m", 1).responses == sync_err(ctx, sync_error)
        assert ctx.join().responses[0].error_code == Errors.COORDINATOR_LOAD_IN_PROGRESS
