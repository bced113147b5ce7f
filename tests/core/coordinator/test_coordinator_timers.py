"""The coordinator's timers (CoordinatorTimer keys / S's delayed operations): session, new-member,
pending-member, initial delay (+ extensions, stale flag), join/rebalance, pending-sync; firing order."""

from __future__ import annotations

import pytest

from coordinator_audit.core.coordinator import GroupState
from coordinator_audit.core.protocol import Errors, JoinGroupResponse, MemberIdentity

from .scenario import REBALANCE, SESSION, Ctx


def deadlines(ctx: Ctx) -> dict[tuple[str, ...], int]:
    return {t.key: t.deadline for t in ctx.coord.timers()}


@pytest.mark.parametrize("flavor", ["java", "scala"])
def test_session_timeout_removes_silent_member_and_rebalances(flavor: str) -> None:
    ctx = Ctx(flavor=flavor)
    a, b = ctx.stable_group(2)
    t0 = ctx.now
    for t in range(t0 + 3000, t0 + SESSION + 1, 3000):
        ctx.at(t)
        ctx.heartbeat(a, 1)
    res = ctx.at(t0 + SESSION)
    assert any(f"Member {b} in group g has failed" in line for line in res.logs)
    v = ctx.view()
    assert b not in v.member_ids
    assert v.state == GroupState.PREPARING_REBALANCE


def test_session_expiry_of_last_member_writes_w2_at_expiry_time() -> None:
    ctx = Ctx()
    (a,) = ctx.stable_group(1)
    deadline = deadlines(ctx)[("heartbeat", "g", a)]
    res = ctx.at(deadline + 500)
    assert res.records[0].value.generation == 2 and res.records[0].value.current_state_timestamp == deadline
    assert ctx.view().state == GroupState.EMPTY


def test_session_expiry_ignored_while_awaiting_join() -> None:
    ctx = Ctx()
    _a, _b = ctx.stable_group(2)
    leader = ctx.view().leader_id
    ctx.join(leader)  # leader parked (not new) -> its expiry is ignored
    ctx.at(ctx.now + SESSION)
    assert leader in ctx.view().member_ids


def test_new_member_join_timeout_300s() -> None:
    ctx = Ctx()
    a, _b = ctx.stable_group(2, static=True)
    leader = ctx.view().leader_id
    ctx.join(leader, instance="inst-0" if leader == a else "inst-1")  # Preparing; static b never rejoins
    new = ctx.member_id_required()
    ctx.join(new)  # parked new member
    assert deadlines(ctx)[("heartbeat", "g", new)] == ctx.now + 300_000
    # keep static members alive so only the new one can time out
    t = ctx.now
    while t < ctx.now + 300_000:
        t += 5_000
        ctx.at(t)
        for m in ctx.view().member_ids:
            if m != new and not ctx.view().member(m).awaiting_join:
                ctx.heartbeat(m, 1)
        if new not in ctx.view().member_ids:
            break
    assert new not in ctx.view().member_ids


def test_pending_member_timeout() -> None:
    ctx = Ctx()
    pending = ctx.member_id_required(session=7000)
    assert deadlines(ctx)[("heartbeat", "g", pending)] == 7000
    res = ctx.at(7000)
    assert pending not in ctx.view().pending_members
    assert any(f"Pending member {pending} in group g has been removed" in line for line in res.logs)


def test_initial_delay_extends_while_members_join() -> None:
    ctx = Ctx()
    a = ctx.member_id_required()
    ctx.join(a)  # t=0: delay until 3000, remaining 57000
    ctx.at(1200)
    b = ctx.member_id_required()
    ctx.join(b)  # flag set
    assert deadlines(ctx)[("join", "g")] == 3000
    ctx.at(3000)  # extended: next at 6000
    assert ctx.view().state == GroupState.PREPARING_REBALANCE
    assert deadlines(ctx)[("join", "g")] == 6000
    res = ctx.at(6000)
    assert ctx.view().state == GroupState.COMPLETING_REBALANCE
    assert {r.member_id for r in res.responses} == {a, b}


def test_initial_delay_does_not_complete_early_even_if_all_joined() -> None:
    ctx = Ctx()
    a = ctx.member_id_required()
    ctx.join(a)
    assert ctx.view().state == GroupState.PREPARING_REBALANCE and ctx.view().num_members_awaiting_join == 1


def test_initial_delay_capped_by_rebalance_timeout() -> None:
    ctx = Ctx()
    a = ctx.member_id_required()
    ctx.join(a, rebalance=4000)  # remaining = 1000
    ctx.at(100)
    ctx.join(ctx.member_id_required(), rebalance=4000)
    ctx.at(3000)
    assert deadlines(ctx)[("join", "g")] == 4000  # min(D, remaining) = 1000
    ctx.at(4000)
    assert ctx.view().state == GroupState.COMPLETING_REBALANCE


@pytest.mark.parametrize("flavor,extended", [("java", True), ("scala", False)])
def test_initial_delay_extension_for_reforming_group(flavor: str, extended: bool) -> None:
    # S sets newMemberAdded only at generation 0 (GroupCoordinator#addMemberAndRebalance)
    ctx = Ctx(flavor=flavor)
    (a,) = ctx.stable_group(1)
    ctx.leave(a)  # Empty, generation 2
    b = ctx.member_id_required()
    ctx.join(b)
    ctx.advance(100)
    c = ctx.member_id_required()
    ctx.join(c)
    start = ctx.now - 100
    ctx.at(start + 3000)
    assert (ctx.view().state == GroupState.PREPARING_REBALANCE) == extended


def test_stale_new_member_added_flag_gives_one_extra_extension() -> None:
    ctx = Ctx()
    a = ctx.member_id_required()
    ctx.join(a, rebalance=3000)  # remaining 0: no extension possible
    ctx.advance(10)
    b = ctx.member_id_required()
    ctx.join(b, rebalance=3000)  # flag set during the last window
    ctx.at(3000)
    assert ctx.view().state == GroupState.COMPLETING_REBALANCE
    assert ctx.view().new_member_added  # stale
    for m in (a, b):
        ctx.leave(m)
    assert ctx.view().state == GroupState.EMPTY
    c = ctx.member_id_required()
    ctx.join(c)  # R = 60000 > D
    t = ctx.now
    ctx.at(t + 3000)
    assert ctx.view().state == GroupState.PREPARING_REBALANCE  # one extra extension, nobody joined
    ctx.at(t + 6000)
    assert ctx.view().state == GroupState.COMPLETING_REBALANCE


def test_join_timeout_drops_dynamic_non_rejoiners_keeps_static() -> None:
    ctx = Ctx()
    ids = ctx.stable_group(2)
    leader = ctx.view().leader_id
    follower = next(m for m in ids if m != leader)
    ctx.join(leader)
    assert deadlines(ctx)[("join", "g")] == ctx.now + REBALANCE
    start = ctx.now
    while ctx.now + 3_000 < start + REBALANCE:  # alive but never rejoins
        ctx.advance(3_000)
        ctx.heartbeat(follower, 1)
    res = ctx.at(start + REBALANCE)
    assert any("removed dynamic members who haven't joined" in line for line in res.logs)
    assert ctx.view().member_ids == (leader,) and ctx.view().generation_id == 2


def _keep_alive_until(ctx: Ctx, member: str, generation: int, deadline: int) -> None:
    while ctx.now + 3_000 < deadline:
        ctx.advance(3_000)
        ctx.heartbeat(member, generation)


def test_join_timeout_no_static_member_rejoined_restarts_join_timer() -> None:
    ctx = Ctx()
    ids = ctx.stable_group(2, static=True)
    leader = ctx.view().leader_id
    follower = next(m for m in ids if m != leader)
    ctx.join(leader, instance=f"inst-{ids.index(leader)}")  # leader rejoin -> PreparingRebalance
    start = ctx.now
    ctx.leave(MemberIdentity(leader, f"inst-{ids.index(leader)}"))  # only the static follower is left
    _keep_alive_until(ctx, follower, 1, start + REBALANCE)
    res = ctx.at(start + REBALANCE)
    assert any("could not complete rebalance because no members rejoined" in line for line in res.logs)
    v = ctx.view()
    assert v.state == GroupState.PREPARING_REBALANCE and v.member_ids == (follower,)
    assert deadlines(ctx)[("join", "g")] == start + 2 * REBALANCE


def test_join_timeout_elects_a_joined_leader_when_static_leader_did_not_rejoin() -> None:
    ctx = Ctx()
    ids = ctx.stable_group(2, static=True)
    leader = ctx.view().leader_id
    follower = next(m for m in ids if m != leader)
    ctx.join(follower, instance=f"inst-{ids.index(follower)}", protocols=(("range", b"changed"),))  # J18
    start = ctx.now
    _keep_alive_until(ctx, leader, 1, start + REBALANCE)
    res = ctx.at(start + REBALANCE)
    v = ctx.view()
    assert v.leader_id == follower and v.state == GroupState.COMPLETING_REBALANCE
    assert set(v.member_ids) == {leader, follower}  # the static non-rejoiner is kept
    assert [r.member_id for r in res.responses] == [follower]
    assert any("failed to join before the rebalance timeout" in line for line in res.logs)


def test_pending_sync_timeout_removes_members_that_did_not_sync() -> None:
    for flavor, rendered in (("java", "["), ("scala", "Set(")):
        ctx = Ctx(flavor=flavor)
        ids = []
        for _ in range(2):
            m = ctx.member_id_required()
            ctx.join(m)
            ids.append(m)
        ctx.at(3000)
        ctx.at(6000)
        assert ctx.view().state == GroupState.COMPLETING_REBALANCE
        leader = ctx.view().leader_id
        follower = next(m for m in ids if m != leader)
        assert deadlines(ctx)[("sync", "g")] == 6000 + REBALANCE
        ctx.sync(leader, 1, ((leader, b"x"), (follower, b"y")))
        assert ctx.view().state == GroupState.STABLE
        t = 6000
        while t + 3000 < 6000 + REBALANCE:
            t += 3000
            ctx.at(t)
            for m in ids:
                if m in ctx.view().member_ids:
                    ctx.heartbeat(m, ctx.view().generation_id)
        res = ctx.at(6000 + REBALANCE)
        assert follower not in ctx.view().member_ids
        assert any(f"Removing {rendered}{follower}" in line for line in res.logs)


def test_pending_sync_timer_cancelled_when_everyone_synced() -> None:
    ctx = Ctx()
    ctx.stable_group(2)
    assert ("sync", "g") not in deadlines(ctx)


def test_timers_fire_in_deadline_order_then_schedule_order() -> None:
    ctx = Ctx()
    p1 = ctx.member_id_required(session=8000)
    p2 = ctx.member_id_required(session=8000)
    res = ctx.at(100_000)
    expired = [line for line in res.logs if "Pending member" in line]
    assert [p1 in expired[0], p2 in expired[1]] == [True, True]


def test_unload_answers_parked_requests_not_coordinator() -> None:
    ctx = Ctx()
    a = ctx.member_id_required()
    ctx.join(a)
    res = ctx.coord.unload(now_ms=ctx.now)
    assert res.responses == (JoinGroupResponse(correlation_id=2, error_code=Errors.NOT_COORDINATOR, member_id=a),)
    assert ctx.coord.group("g") is None
    assert ctx.join().responses[0].error_code == Errors.NOT_COORDINATOR
