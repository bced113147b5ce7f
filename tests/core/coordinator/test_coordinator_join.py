"""JoinGroup decision table J1-J20 (GroupMetadataManager#classicGroupJoin), acceptJoiningMember, static replacement
in every state (#updateStaticMemberThenRebalanceOrCompleteJoin)."""

from __future__ import annotations

import pytest

from coordinator_audit.core.coordinator import GroupState
from coordinator_audit.core.protocol import Errors, JoinGroupResponse, JoinGroupResponseMember
from coordinator_audit.core.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
)

from .scenario import RANGE, REBALANCE, SESSION, Ctx, sub


def mid(n: int, prefix: str = "client") -> str:
    return f"{prefix}-00000000-0000-4000-8000-{n:012d}"


def err(corr: int, error: Errors, member_id: str = "") -> JoinGroupResponse:
    return JoinGroupResponse(correlation_id=corr, error_code=error, member_id=member_id)


def w5(ts: int, group: str = "g") -> CoordinatorRecord:
    return CoordinatorRecord(GroupMetadataKey(group), GroupMetadataValue("", 0, None, None, ts, ()), 2, 3)


# ------------------------------------------------------------------------------------------------
# J1-J5


@pytest.mark.parametrize("session", [5999, 1_800_001])
def test_j1_invalid_session_timeout(session: int) -> None:
    ctx = Ctx()
    res = ctx.join("m", session=session)
    assert res.responses == (err(1, Errors.INVALID_SESSION_TIMEOUT, "m"),)
    assert res.records == () and ctx.coord.group("g") is None


def test_j1_java_checks_timeout_before_loading_scala_after() -> None:
    for flavor, expected in (("java", Errors.INVALID_SESSION_TIMEOUT), ("scala", Errors.COORDINATOR_LOAD_IN_PROGRESS)):
        ctx = Ctx(flavor=flavor)
        ctx.coord.begin_load()
        assert ctx.join(session=1).responses[0].error_code == expected


def test_j2_unknown_group_with_member_id() -> None:
    ctx = Ctx()
    res = ctx.join("ghost")
    assert res.responses == (err(1, Errors.UNKNOWN_MEMBER_ID, "ghost"),)
    assert ctx.coord.group("g") is None and res.records == ()


def test_j3_group_max_size_rejects_new_member_when_full() -> None:
    ctx = Ctx(config_overrides={"group_max_size": 1})
    ctx.stable_group(1)
    res = ctx.join()
    assert res.responses == (err(res.responses[0].correlation_id, Errors.GROUP_MAX_SIZE_REACHED),)
    assert len(ctx.view().members) == 1


def test_j3_preparing_rebalance_kicks_out_member_not_yet_rejoined() -> None:
    # max size shrinks between runs: a loaded group of 2 with max size 1; the second rejoiner is kicked out
    for flavor in ("java", "scala"):
        ctx = Ctx(flavor=flavor, config_overrides={"group_max_size": 2})
        a, b = ctx.stable_group(2)
        small = Ctx(flavor=flavor, config_overrides={"group_max_size": 1}, check_replay=False)
        for rec in ctx.records:
            small.coord.replay(rec)
        small.now = ctx.now
        small.coord.complete_load(now_ms=ctx.now)
        assert small.view().state == GroupState.PREPARING_REBALANCE  # over capacity -> rebalance
        first, second = small.view().member_ids
        assert small.join(first).responses == ()
        res = small.join(second)
        assert res.responses[0] == err(small._corr, Errors.GROUP_MAX_SIZE_REACHED)
        assert small.view().member_ids == (first,)
        if flavor == "scala":  # S runs the join-completion check after J3: everybody left has joined
            assert small.view().state == GroupState.COMPLETING_REBALANCE
            assert [r.member_id for r in res.responses[1:]] == [first]
        else:  # J does not
            assert small.view().state == GroupState.PREPARING_REBALANCE
            assert len(res.responses) == 1
        del a, b


def test_accept_joining_member_preparing_counts_awaiting_members() -> None:
    ctx = Ctx(config_overrides={"group_max_size": 2})
    a, _b = ctx.stable_group(2)
    ctx.join(a)  # leader rejoin -> PreparingRebalance, 1 awaiting
    assert ctx.view().state == GroupState.PREPARING_REBALANCE
    res = ctx.join()  # new member: awaiting (1) < 2 -> accepted (MEMBER_ID_REQUIRED)
    assert res.responses[0].error_code == Errors.MEMBER_ID_REQUIRED


def test_j4_unknown_member_dead_group() -> None:
    ctx = Ctx()
    ctx.stable_group(1)
    ctx.coord._shard.groups["g"].state = GroupState.DEAD  # a Dead group object still in the map
    res = ctx.join()
    assert res.responses == (err(res.responses[0].correlation_id, Errors.COORDINATOR_NOT_AVAILABLE),)


def test_j5_inconsistent_protocol_for_new_member() -> None:
    ctx = Ctx()
    ctx.stable_group(1)
    res = ctx.join(protocols=(("roundrobin", b"x"),))
    assert res.responses == (err(res.responses[0].correlation_id, Errors.INCONSISTENT_GROUP_PROTOCOL),)
    res = ctx.join(protocol_type="connect")
    assert res.responses[0].error_code == Errors.INCONSISTENT_GROUP_PROTOCOL


def test_j5_empty_protocol_type_on_new_group_writes_w5_in_java() -> None:
    ctx = Ctx()
    res = ctx.join(protocol_type="")
    assert res.responses == (err(1, Errors.INCONSISTENT_GROUP_PROTOCOL),)
    assert res.records == (w5(0),)
    sctx = Ctx(flavor="scala")
    assert sctx.join(protocol_type="").records == ()


# ------------------------------------------------------------------------------------------------
# J6-J9 (unknown member id)


def test_j7_new_static_member_parks_and_starts_initial_delay() -> None:
    ctx = Ctx()
    res = ctx.join(instance="i1")
    assert res.responses == ()
    assert res.records == (w5(0),)  # W5: the group was created and nothing else was written
    v = ctx.view()
    assert v.state == GroupState.PREPARING_REBALANCE
    assert v.member_ids == (mid(1, "i1"),)
    assert v.static_members == (("i1", mid(1, "i1")),)
    res = ctx.advance(3000)
    assert res.responses == (JoinGroupResponse(
        correlation_id=1, error_code=Errors.NONE, member_id=mid(1, "i1"), generation_id=1, protocol_type="consumer",
        protocol_name="range", leader=mid(1, "i1"), members=(JoinGroupResponseMember(mid(1, "i1"), "i1", RANGE[0][1]),)),)


def test_j8_member_id_required() -> None:
    ctx = Ctx()
    res = ctx.join(version=4)
    assert res.responses == (err(1, Errors.MEMBER_ID_REQUIRED, mid(1)),)
    assert ctx.view().pending_members == {mid(1)}
    assert ctx.view().state == GroupState.EMPTY
    assert res.records == (w5(0),)


def test_j8_scala_writes_no_w5() -> None:
    ctx = Ctx(flavor="scala")
    assert ctx.join().records == ()


def test_j9_old_version_dynamic_member_is_added_directly() -> None:
    ctx = Ctx()
    res = ctx.join(version=3)
    assert res.responses == ()
    assert ctx.view().member_ids == (mid(1),)
    assert ctx.view().state == GroupState.PREPARING_REBALANCE
    assert ctx.view().members[0].is_new


def test_j9_v0_uses_session_timeout_as_rebalance_timeout() -> None:
    ctx = Ctx()
    ctx.join(version=0, rebalance=99_000)
    assert ctx.view().members[0].rebalance_timeout_ms == SESSION


# ------------------------------------------------------------------------------------------------
# J6: static replacement in every state


def _static_stable(ctx: Ctx, n: int = 1) -> list[str]:
    return ctx.stable_group(n, static=True)


@pytest.mark.parametrize("flavor", ["java", "scala"])
def test_j6_stable_same_protocol_writes_w3_and_skips_assignment_v9(flavor: str) -> None:
    ctx = Ctx(flavor=flavor)
    (old,) = _static_stable(ctx)
    stable_ts = ctx.view().current_state_timestamp
    ctx.advance(100)
    res = ctx.join(instance="inst-0", session=20_000)
    new = mid(2, "inst-0")
    assert res.records == (CoordinatorRecord(GroupMetadataKey("g"), GroupMetadataValue(
        "consumer", 1, "range", new, stable_ts,
        (MemberMetadata(new, "inst-0", "client", "/127.0.0.1", REBALANCE, 20_000, RANGE[0][1], f"a-{old}".encode()),)),
        2, 3),)
    assert res.responses == (JoinGroupResponse(
        correlation_id=res.responses[0].correlation_id, error_code=Errors.NONE, member_id=new, generation_id=1,
        protocol_type="consumer", protocol_name="range", leader=new, skip_assignment=True,
        members=(JoinGroupResponseMember(new, "inst-0", RANGE[0][1]),)),)
    v = ctx.view()
    assert v.state == GroupState.STABLE and v.member_ids == (new,) and v.leader_id == new
    sync = ctx.sync(new, 1)
    assert sync.responses[0].assignment == f"a-{old}".encode()


def test_j6_stable_before_v9_returns_old_leader_id() -> None:
    ctx = Ctx()
    (old,) = _static_stable(ctx)
    res = ctx.join(instance="inst-0", version=8)
    (resp,) = res.responses
    assert resp.leader == old and resp.members == () and not resp.skip_assignment
    assert resp.member_id == mid(2, "inst-0")


@pytest.mark.parametrize("flavor", ["java", "scala"])
def test_j6_stable_w3_failure_rolls_back(flavor: str) -> None:
    ctx = Ctx(flavor=flavor)
    (old,) = _static_stable(ctx)
    ctx.fail_next_append(Errors.NOT_LEADER_OR_FOLLOWER)
    new_protocols = (("range", sub("t", "u")),)
    res = ctx.join(instance="inst-0", session=20_000, protocols=new_protocols)
    assert res.records == ()
    assert res.responses == (JoinGroupResponse(
        correlation_id=res.responses[0].correlation_id, error_code=Errors.NOT_COORDINATOR, member_id="",
        generation_id=1, protocol_type="consumer", protocol_name="range", leader=old),)
    v = ctx.view()
    assert v.state == GroupState.STABLE and v.member_ids == (old,) and v.leader_id == old
    m = v.members[0]
    assert m.session_timeout_ms == SESSION  # both restore the timeouts
    # J restores the old protocols; S keeps the request's (updateStaticMemberThenRebalanceOrCompleteJoin /
    # updateStaticMemberAndRebalance)
    assert m.supported_protocols == (RANGE if flavor == "java" else new_protocols)


def test_j6_stable_protocol_change_rebalances() -> None:
    ctx = Ctx()
    _static_stable(ctx)
    res = ctx.join(instance="inst-0", protocols=(("roundrobin", b"rr"), RANGE[0]))
    assert res.records == ()
    assert [(r.error_code, r.generation_id, r.protocol_name) for r in res.responses] == [
        (Errors.NONE, 2, "roundrobin")]
    assert any("selectedProtocol will change" in line for line in res.logs)
    assert ctx.view().state == GroupState.COMPLETING_REBALANCE  # all (1) joined -> completes at once
    assert ctx.view().protocol_name == "roundrobin"


def test_j6_completing_rebalance_always_rebalances_and_fences_old_sync() -> None:
    ctx = Ctx()
    a, b = ctx.stable_group(2, static=True)
    ctx.join(a, instance="inst-0")  # leader rejoin -> Preparing
    ctx.join(b, instance="inst-1")  # all joined -> CompletingRebalance gen 2
    assert ctx.view().state == GroupState.COMPLETING_REBALANCE
    sync = ctx.sync(b, 2, instance="inst-1")  # follower parks
    assert sync.responses == ()
    res = ctx.join(instance="inst-1")
    new_b = mid(3, "inst-1")
    assert res.responses[0].error_code == Errors.FENCED_INSTANCE_ID  # old id's parked sync fenced
    assert res.responses[0].correlation_id == sync_corr(ctx, 1)
    assert ctx.view().state == GroupState.PREPARING_REBALANCE
    assert new_b in ctx.view().member_ids


def sync_corr(ctx: Ctx, back: int) -> int:
    return ctx._corr - back


def test_j6_preparing_rebalance_fences_old_parked_join() -> None:
    ctx = Ctx()
    a, b = ctx.stable_group(2, static=True)
    first = ctx.join(a, instance="inst-0")  # Preparing, a parked
    assert first.responses == ()
    res = ctx.join(instance="inst-0")
    new_a = mid(3, "inst-0")
    assert res.responses == (JoinGroupResponse(correlation_id=ctx._corr - 1, error_code=Errors.FENCED_INSTANCE_ID,
                                               member_id=a, leader=""),)
    v = ctx.view()
    assert v.leader_id == new_a and v.member(new_a).awaiting_join
    done = ctx.join(b, instance="inst-1")
    assert {r.member_id for r in done.responses} == {new_a, b}


# ------------------------------------------------------------------------------------------------
# J10-J20 (known member id)


def test_j10_known_member_dead_group() -> None:
    ctx = Ctx()
    (a,) = ctx.stable_group(1)
    ctx.coord._shard.groups["g"].state = GroupState.DEAD
    res = ctx.join(a)
    assert res.responses == (err(ctx._corr, Errors.COORDINATOR_NOT_AVAILABLE, a),)


def test_j11_known_member_inconsistent_protocol() -> None:
    ctx = Ctx()
    (a,) = ctx.stable_group(1)
    res = ctx.join(a, protocols=(("roundrobin", b""),))
    assert res.responses == (err(ctx._corr, Errors.INCONSISTENT_GROUP_PROTOCOL, a),)


def test_j12_pending_member_rejoins() -> None:
    ctx = Ctx()
    m = ctx.member_id_required()
    res = ctx.join(m)
    assert res.responses == () and res.records == ()
    v = ctx.view()
    assert v.pending_members == frozenset() and v.member_ids == (m,)
    assert v.state == GroupState.PREPARING_REBALANCE


def test_j13_unknown_and_fenced_member() -> None:
    ctx = Ctx()
    ctx.stable_group(1, static=True)
    assert ctx.join("nobody").responses == (err(ctx._corr, Errors.UNKNOWN_MEMBER_ID, "nobody"),)
    assert ctx.join("other", instance="inst-0").responses == (err(ctx._corr, Errors.FENCED_INSTANCE_ID, "other"),)
    assert ctx.join("x", instance="unknown-inst").responses == (err(ctx._corr, Errors.UNKNOWN_MEMBER_ID, "x"),)


@pytest.mark.parametrize("flavor,verb", [("java", "is joining"), ("scala", "joining")])
def test_j14_join_during_preparing_rebalance(flavor: str, verb: str) -> None:
    ctx = Ctx(flavor=flavor)
    a, b = ctx.stable_group(2)
    ctx.join(a)  # Preparing
    res = ctx.join(b, reason="because")
    assert any(f"Member {b} {verb} group during PreparingRebalance" in line for line in res.logs) is False
    assert ctx.view().state == GroupState.COMPLETING_REBALANCE  # everybody joined
    assert {r.member_id for r in res.responses} == {a, b}


def test_j14_reason_logged_when_already_preparing() -> None:
    ctx = Ctx()
    a, b, _c = ctx.stable_group(3)
    ctx.join(a)
    res = ctx.join(b)
    assert res.responses == () and ctx.view().state == GroupState.PREPARING_REBALANCE


def test_j15_completing_rebalance_same_metadata_returns_current_generation() -> None:
    ctx = Ctx()
    a, b = ctx.stable_group(2)
    ctx.join(a)
    ctx.join(b)
    assert ctx.view().state == GroupState.COMPLETING_REBALANCE
    res = ctx.join(a)
    leader = ctx.view().leader_id
    assert res.responses == (JoinGroupResponse(
        correlation_id=ctx._corr, error_code=Errors.NONE, member_id=a, generation_id=2, protocol_type="consumer",
        protocol_name="range", leader=leader or "",
        members=ctx.coord._shard.groups["g"].current_member_metadata() if leader == a else ()),)


def test_j16_completing_rebalance_changed_metadata_rebalances() -> None:
    ctx = Ctx()
    a, b = ctx.stable_group(2)
    ctx.join(a)
    ctx.join(b)
    res = ctx.join(b, protocols=(("range", sub("t", "x")),))
    assert res.responses == ()
    assert ctx.view().state == GroupState.PREPARING_REBALANCE
    assert any("Updating metadata for member" in line for line in res.logs)


def test_j17_leader_rejoin_in_stable_rebalances() -> None:
    ctx = Ctx()
    a, b = ctx.stable_group(2)
    leader = ctx.view().leader_id
    res = ctx.join(leader)
    assert res.responses == ()
    assert ctx.view().state == GroupState.PREPARING_REBALANCE
    assert any(f"Leader {leader} re-joining group during Stable" in line for line in res.logs)
    del a, b


def test_j18_follower_changed_metadata_in_stable_rebalances() -> None:
    ctx = Ctx()
    ids = ctx.stable_group(2)
    follower = next(m for m in ids if m != ctx.view().leader_id)
    res = ctx.join(follower, protocols=(("range", sub("z")),))
    assert res.responses == () and ctx.view().state == GroupState.PREPARING_REBALANCE


def test_j19_follower_same_metadata_in_stable_gets_current_generation() -> None:
    ctx = Ctx()
    ids = ctx.stable_group(2)
    leader = ctx.view().leader_id
    follower = next(m for m in ids if m != leader)
    res = ctx.join(follower)
    assert res.responses == (JoinGroupResponse(
        correlation_id=ctx._corr, error_code=Errors.NONE, member_id=follower, generation_id=1,
        protocol_type="consumer", protocol_name="range", leader=leader or ""),)
    assert ctx.view().state == GroupState.STABLE


def test_j20_known_member_in_empty_group() -> None:
    # unreachable through requests (an Empty group has no members): a member is planted directly
    ctx = Ctx(check_replay=False)
    ctx.stable_group(1)
    # a static member id left in the static map of an Empty group cannot happen; use a loaded Empty group
    ctx.leave(ctx.view().member_ids[0])
    assert ctx.view().state == GroupState.EMPTY
    ctx.coord._shard.groups["g"].members.put("m", ctx.coord._shard.groups["g"].all_members()[0]
                                             if ctx.coord._shard.groups["g"].all_members() else _ghost())
    res = ctx.join("m")
    assert res.responses == (err(ctx._corr, Errors.UNKNOWN_MEMBER_ID, "m"),)
    assert any("Attempt to add rejoining member m" in line for line in res.logs)


def _ghost():  # type: ignore[no-untyped-def]
    from coordinator_audit.core.coordinator.group import Member

    return Member("m", None, "c", "/h", 1, 1, "consumer", RANGE)


# ------------------------------------------------------------------------------------------------
# protocol selection


def test_select_protocol_java_tie_order_sticky_before_range() -> None:
    ctx = Ctx()
    a = ctx.member_id_required()
    ctx.join(a, protocols=(("range", b"r"), ("sticky", b"s")))
    b = ctx.member_id_required()
    ctx.join(b, protocols=(("sticky", b"s"), ("range", b"r")))
    ctx.advance(3000)
    ctx.advance(3000)
    assert ctx.view().protocol_name == "sticky"  # 1:1 tie, HashMap bucket 8 (sticky) < 9 (range)


def test_select_protocol_majority_wins() -> None:
    ctx = Ctx()
    for protocols in ((("range", b"r"), ("roundrobin", b"s")), (("roundrobin", b"s"), ("range", b"r")),
                      (("roundrobin", b"s"), ("range", b"r"))):
        ctx.join(ctx.member_id_required(), protocols=protocols)
    for _ in range(4):
        ctx.advance(3000)
    assert ctx.view().protocol_name == "roundrobin"


def test_select_protocol_scala_tie_uses_champ_order() -> None:
    from coordinator_audit.core.coordinator.hashorder import champ_order

    ctx = Ctx(flavor="scala")
    a = ctx.member_id_required()
    ctx.join(a, protocols=(("range", b"r"), ("sticky", b"s")))
    b = ctx.member_id_required()
    ctx.join(b, protocols=(("sticky", b"s"), ("range", b"r")))
    for _ in range(3):
        ctx.advance(3000)
    assert ctx.view().protocol_name == champ_order(["range", "sticky"])[0]
