"""Fidelity review: each test states a behaviour read in Kafka's own coordinator code that the
first port got wrong, naming the Kafka method it follows."""

from __future__ import annotations

from coordinator_audit.core.coordinator import GroupState
from coordinator_audit.core.coordinator.hashorder import champ_order
from coordinator_audit.core.jhash import java_string_hashcode, spread
from coordinator_audit.core.protocol import Errors, MemberIdentity, SyncGroupResponse

from .scenario import REBALANCE, Ctx


def _ids(*names: str):  # type: ignore[no-untyped-def]
    """A member-id supplier that hands out `names` in order."""
    it = iter(names)
    return lambda prefix: next(it)


def _messages(lines: tuple[str, ...]) -> list[str]:
    """Log lines without the `[date] ` prefix."""
    return [line.split("] ", 1)[1] for line in lines]


# ------------------------------------------------------------------------------------------------
# OffsetCommit


def test_java_commit_validation_logs_swapped_operation_name() -> None:
    """ClassicGroup#validateOffsetCommit passes `isTransactional ? "offset-commit" : "txn-offset-commit"`, so
    J logs a fenced plain OffsetCommit as "txn-offset-commit"; S (GroupCoordinator#validateOffsetCommit)
    logs "offset-commit"."""
    for flavor, op in (("java", "txn-offset-commit"), ("scala", "offset-commit")):
        ctx = Ctx(flavor=flavor)
        ctx.stable_group(1, static=True)
        res = ctx.commit(member_id="stale", generation=1, instance="inst-0")
        assert res.responses[0].topics[0].partitions[0].error_code == Errors.FENCED_INSTANCE_ID
        assert any("is fenced by" in line and line.split(" during operation ")[1].startswith(f"{op} ")
                   for line in res.logs), res.logs


# ------------------------------------------------------------------------------------------------
# append-failure log texts (error messages, not enum names)


def test_w2_failure_logs_mapped_error_message() -> None:
    """GroupMetadataManager#completeClassicGroupJoin (J, `error.message()`) and GroupCoordinator#onCompleteJoin
    (S, `${error.message}`) log the mapped error's message."""
    for flavor in ("java", "scala"):
        ctx = Ctx(flavor=flavor)
        (a,) = ctx.stable_group(1)
        ctx.fail_next_append(Errors.NOT_LEADER_OR_FOLLOWER)
        res = ctx.leave(a)
        assert "Failed to write empty metadata for group g: This is not the correct coordinator." \
            in _messages(res.logs)[-2 if flavor == "scala" else -1]


def test_w3_failure_log_texts() -> None:
    """GroupMetadataManager#updateStaticMemberThenRebalanceOrCompleteJoin logs the append exception's message
    (`t.getMessage()`, the raw error); GroupCoordinator#updateStaticMemberAndRebalance logs the mapped
    error's message."""
    for flavor in ("java", "scala"):
        ctx = Ctx(flavor=flavor, config_overrides={"group_max_size": 5})
        (old,) = ctx.stable_group(1, static=True)
        ctx.fail_next_append(Errors.REQUEST_TIMED_OUT)
        res = ctx.join(instance="inst-0")
        new = ctx.coord.group("g")
        assert new is not None and new.member_ids == (old,)
        warn = next(line for line in _messages(res.logs) if line.startswith("WARN"))
        if flavor == "java":
            assert warn.endswith(" due to The request timed out.. Reverting to old member id "
                                 f"{old}. (org.apache.kafka.coordinator.group.GroupMetadataManager)"), warn
        else:
            assert warn == ("WARN [GroupCoordinator 1]: Failed to persist metadata for group g: The group is "
                            "rebalancing, so a rejoin is needed. (kafka.coordinator.group.GroupCoordinator)")


def test_w5_failure_logs_exception_message() -> None:
    """GroupMetadataManager#classicGroupJoinToClassicGroup logs `t.getMessage()` of the failed W5 append."""
    ctx = Ctx()
    ctx.fail_next_append(Errors.NOT_ENOUGH_REPLICAS)
    res = ctx.join(instance="i")
    assert any(line.endswith("Failed to write empty metadata for group g: Messages are rejected since there are "
                             "fewer in-sync replicas than required. "
                             "(org.apache.kafka.coordinator.group.GroupMetadataManager)")
               for line in _messages(res.logs)), res.logs


# ------------------------------------------------------------------------------------------------
# SyncGroup protocol check


def test_java_sync_protocol_name_check_ignores_unset_group_protocol() -> None:
    """GroupMetadataManager#isProtocolInconsistent: inconsistent only when both the request's and the group's
    values are set. During the first join phase (no protocol selected yet) J answers REBALANCE_IN_PROGRESS;
    S (GroupCoordinator#validateSyncGroup, `!group.protocolName.contains(...)`) answers INCONSISTENT_GROUP_PROTOCOL."""
    for flavor, expected in (("java", Errors.REBALANCE_IN_PROGRESS), ("scala", Errors.INCONSISTENT_GROUP_PROTOCOL)):
        ctx = Ctx(flavor=flavor)
        m = ctx.member_id_required()
        ctx.join(m)
        assert ctx.view().state == GroupState.PREPARING_REBALANCE and ctx.view().protocol_name is None
        res = ctx.sync(m, 0)
        assert res.responses == (SyncGroupResponse(correlation_id=ctx._corr, error_code=expected),)


# ------------------------------------------------------------------------------------------------
# join completion logs


def _keep_alive(ctx: Ctx, members: list[str], generation: int, until: int) -> None:
    """Heartbeats `members` every 3 s until just before `until`."""
    while ctx.now + 3000 < until:
        ctx.advance(3000)
        for m in members:
            ctx.heartbeat(m, generation)


def test_leader_not_rejoined_and_nobody_joined_is_logged() -> None:
    """ClassicGroup#maybeElectNewJoinedLeader / GroupMetadata#maybeElectNewJoinedLeader log an INFO line when
    the leader did not rejoin and no other member did either (S's text lacks a space before "because")."""
    expected = {
        "java": "INFO [GroupCoordinator id=1 topic=__consumer_offsets partition=44] Group leader [memberId: {m}, "
                "groupInstanceId: {i}] failed to join before the rebalance timeout and the group couldn't "
                "proceed to the next generation because no member joined. "
                "(org.apache.kafka.coordinator.group.classic.ClassicGroup)",
        "scala": "INFO Group leader [member.id: {m}, group.instance.id: Some({i})] failed to join before "
                 "rebalance timeout, and the group couldn't proceed to next generationbecause no member joined. "
                 "(kafka.coordinator.group.GroupMetadata)",
    }
    for flavor in ("java", "scala"):
        ctx = Ctx(flavor=flavor, group="grp-s01")
        ids = ctx.stable_group(2, static=True)
        leader = ctx.view().leader_id
        assert leader is not None
        follower = next(m for m in ids if m != leader)
        ctx.join(leader, instance=f"inst-{ids.index(leader)}")  # J17 -> PreparingRebalance
        start = ctx.now
        ctx.leave(MemberIdentity(leader, f"inst-{ids.index(leader)}"))  # the follower becomes leader
        _keep_alive(ctx, [follower], 1, start + REBALANCE)
        res = ctx.at(start + REBALANCE)
        line = expected[flavor].format(m=follower, i=f"inst-{ids.index(follower)}")
        assert line in _messages(res.logs), res.logs


def test_scala_unexpected_sync_expiration_text() -> None:
    """GroupCoordinator#onExpirePendingSync (S) says "already transitioned to the <state> state." without a
    trailing period; J (GroupMetadataManager#expirePendingSync) "already transitioned to <state> state."."""
    from coordinator_audit.core.coordinator.rebalance import expire_pending_sync

    for flavor, text in (("scala", "already transitioned to the PreparingRebalance state."),
                         ("java", "already transitioned to PreparingRebalance state.")):
        ctx = Ctx(flavor=flavor)
        m = ctx.member_id_required()
        ctx.join(m)
        shard = ctx.coord._shard
        shard.out.logs.clear()
        expire_pending_sync(shard, "g", 0)
        (line,) = _messages(tuple(shard.out.logs))
        assert line.startswith("ERROR") and f"after group g {text} (" in line, line


# ------------------------------------------------------------------------------------------------
# iteration orders of the sets printed in logs (java.util.HashMap / Scala HashMap)


def _scala_small_or_champ(ids: list[str]) -> list[str]:
    return ids if len(ids) <= 4 else champ_order(ids)


def test_scala_removed_dynamic_members_set_uses_immutable_map_order() -> None:
    """GroupCoordinator#onCompleteJoin prints `notYetRejoinedMembers(...).keySet`, an immutable Map built by
    `.toMap`: with more than four entries it is a CHAMP HashMap, whose order is not the members map's."""
    ctx = Ctx(flavor="scala")
    ids = ctx.stable_group(6)
    leader = ctx.view().leader_id
    assert leader is not None
    others = [m for m in ids if m != leader]
    ctx.join(leader)  # J17; nobody else rejoins
    start = ctx.now
    _keep_alive(ctx, others, 1, start + REBALANCE)
    res = ctx.at(start + REBALANCE)
    expected = "Set(" + ", ".join(champ_order(others)) + ")"
    members_order = "Set(" + ", ".join(m for m in ctx.view().member_ids if m in others) + ")"
    assert expected != members_order  # the ids used here make the two orders differ
    assert any(line.endswith(f"removed dynamic members who haven't joined: {expected} "
                             "(kafka.coordinator.group.GroupCoordinator)") for line in res.logs), res.logs


def _collide(n_other: int) -> list[str]:
    """Member ids: two that share a bucket of a 16-slot table but whose 32-slot buckets are in the opposite
    order of their insertion, plus `n_other` fillers."""
    cands = [f"m-{i:04d}" for i in range(5000)]
    for x in cands:
        hx = spread(java_string_hashcode(x))
        for y in cands:
            hy = spread(java_string_hashcode(y))
            if x != y and hx & 15 == hy & 15 and (hx & 31) > (hy & 31):
                fillers = [c for c in cands if c not in (x, y)][:n_other]
                return [x, y, *fillers]
    raise AssertionError("no colliding ids")


def test_java_pending_sync_set_copy_keeps_source_table_order() -> None:
    """GroupMetadataManager#expirePendingSync copies `pendingSyncMembers` (a HashSet that grew to 32 buckets)
    into `new HashSet<>(...)` (16 buckets): keys sharing a bucket keep the source's iteration order, which is
    the 32-bucket order, not their insertion order."""
    ids = _collide(11)
    x, y = ids[0], ids[1]
    order = [*ids[2:], x, y]  # fillers first, so the leader is a filler
    ctx = Ctx()
    ctx.coord = type(ctx.coord)(ctx.config, member_id_supplier=_ids(*order))
    joined = []
    for _ in order:
        m = ctx.member_id_required(session=70_000)
        joined.append(m)
    for m in joined:
        ctx.join(m, session=70_000)
    while ctx.view().state == GroupState.PREPARING_REBALANCE:
        ctx.advance(3000)
    v = ctx.view()
    assert v.state == GroupState.COMPLETING_REBALANCE and len(v.members) == 13
    leader = v.leader_id
    assert leader not in (x, y)
    ctx.sync(leader, 1, tuple((m, b"a") for m in order))
    for m in order[:-2]:
        if m != leader:
            ctx.sync(m, 1)
    res = ctx.at(ctx.now + REBALANCE)
    assert any(f"Removing [{y}, {x}] on pending sync request expiration" in line for line in res.logs), res.logs


# ------------------------------------------------------------------------------------------------
# deletion and expiration logs


def test_scala_delete_groups_logs() -> None:
    """GroupCoordinator#handleDeleteGroups moves the group to Dead itself (no "transitioned to Dead" line,
    which only GroupMetadataManager#cleanupGroupMetadata prints for Empty groups) and logs the deletion only
    when a group was deleted."""
    ctx = Ctx(flavor="scala")
    ctx.commit()
    res = ctx.delete("g")
    assert not any("transitioned to Dead" in line for line in res.logs), res.logs
    assert any("The following groups were deleted: g. A total of 1 offsets were removed." in line
               for line in res.logs)
    res = ctx.delete("nope")
    assert not any("were deleted" in line for line in res.logs), res.logs


def test_java_delete_groups_log_has_shard_prefix() -> None:
    """GroupCoordinatorShard#deleteGroups logs through the shard's log context (partition prefix)."""
    ctx = Ctx()
    ctx.commit()
    res = ctx.delete("g")
    assert any("INFO [GroupCoordinator id=1 topic=__consumer_offsets partition=" in line
               and "The following groups were deleted: g." in line for line in res.logs), res.logs


def test_scala_expiration_logs_removed_offsets() -> None:
    """GroupMetadataManager#cleanupGroupMetadata (S) logs "Removed N expired offsets in M milliseconds."."""
    ctx = Ctx(flavor="scala", config_overrides={"offsets_retention_minutes": 1,
                                                "offsets_retention_check_interval_ms": 60_000})
    ctx.commit()
    res = ctx.at(120_000)
    assert any("INFO [GroupMetadataManager brokerId=1] Removed 1 expired offsets in 0 milliseconds. "
               "(kafka.coordinator.group.GroupMetadataManager)" in line for line in res.logs), res.logs


# ------------------------------------------------------------------------------------------------
# load completion


def test_load_schedules_session_timers_and_over_capacity_rebalance_in_kafka_order() -> None:
    """GroupMetadataManager#onLoaded (J) reschedules every member's heartbeat, then rebalances an over-capacity
    group; GroupCoordinator#onGroupLoaded (S) rebalances first, then schedules the heartbeats. With equal
    session and rebalance timeouts the join timer therefore fires first in S and last in J."""
    for flavor, join_first in (("java", False), ("scala", True)):
        ctx = Ctx(flavor=flavor, config_overrides={"group_max_size": 2})
        ctx.stable_group(2, session=REBALANCE)
        small = Ctx(flavor=flavor, config_overrides={"group_max_size": 1}, check_replay=False)
        for rec in ctx.records:
            small.coord.replay(rec)
        small.coord.complete_load(now_ms=ctx.now)
        kinds = [t.kind for t in small.coord.timers() if t.kind in ("heartbeat", "join")]
        assert kinds == (["join", "heartbeat", "heartbeat"] if join_first else ["heartbeat", "heartbeat", "join"])
