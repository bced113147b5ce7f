"""Rebalance procedures shared by the handlers and the timers (GroupMetadataManager / GroupCoordinator):
prepareRebalance, join completion, the initial delay, heartbeat / pending-member / pending-sync expiry,
assignment propagation."""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator_audit.core.protocol import Errors, JoinGroupResponse, SyncGroupResponse

from .records_out import group_metadata_record
from .state import COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE
from .timers import heartbeat_key, join_key, sync_key

if TYPE_CHECKING:
    from .group import ClassicGroup, Member
    from .runtime import Shard


# --------------------------------------------------------------------------------------------------
# session timers


def reschedule_heartbeat(shard: Shard, group: ClassicGroup, member: Member, timeout_ms: int | None = None) -> None:
    """Follows GroupMetadataManager#rescheduleClassicGroupMemberHeartbeat /
    GroupCoordinator#completeAndScheduleNextExpiration."""
    timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
    shard.timers.schedule(heartbeat_key(group.group_id, member.member_id), "heartbeat",
                          shard.now + timeout, (group.group_id, member.member_id))


def cancel_heartbeat(shard: Shard, group: ClassicGroup, member_id: str) -> None:
    shard.timers.cancel(heartbeat_key(group.group_id, member_id))


# --------------------------------------------------------------------------------------------------
# starting a rebalance


def prepare_rebalance(shard: Shard, group: ClassicGroup, reason: str) -> None:
    """Follows GroupMetadataManager#prepareRebalance / GroupCoordinator#prepareRebalance."""
    if group.is_in(COMPLETING_REBALANCE):
        reset_and_propagate_assignment_with_error(shard, group, Errors.REBALANCE_IN_PROGRESS)
    remove_sync_expiration(shard, group)
    initial = group.is_in(EMPTY)
    if initial:
        delay = shard.config.group_initial_rebalance_delay_ms
        remaining = max(group.rebalance_timeout_ms() - delay, 0)
        shard.timers.schedule(join_key(group.group_id), "initial-join", shard.now + delay,
                              (group.group_id, delay, remaining))
    group.transition_to(PREPARING_REBALANCE, shard.now)
    shard.logs.preparing_rebalance(group, reason)
    if not initial:
        if group.has_all_members_joined():
            complete_join(shard, group)
        else:
            shard.timers.schedule(join_key(group.group_id), "join",
                                  shard.now + group.rebalance_timeout_ms(), (group.group_id,))


def maybe_prepare_rebalance(shard: Shard, group: ClassicGroup, reason: str) -> None:
    """J: maybePrepareRebalanceOrCompleteJoin. S: maybePrepareRebalance (S then relies on the caller's
    join-completion check, which `check_join_completion` provides)."""
    if group.can_rebalance():
        prepare_rebalance(shard, group, reason)
    elif shard.config.is_java:
        maybe_complete_join_phase(shard, group)


def _in_initial_delay(shard: Shard, group: ClassicGroup) -> bool:
    if shard.config.is_java:
        return group.previous_state == EMPTY
    timer = shard.timers.get(join_key(group.group_id))
    return timer is not None and timer.kind == "initial-join"


def maybe_complete_join_phase(shard: Shard, group: ClassicGroup) -> None:
    """Follows GroupMetadataManager#maybeCompleteJoinPhase (J) and the join purgatory's checkAndComplete
    (S: DelayedJoin#tryComplete, InitialDelayedJoin never completes early)."""
    if not group.is_in(PREPARING_REBALANCE):
        return
    if _in_initial_delay(shard, group):
        return
    if not group.has_all_members_joined():
        return
    complete_join(shard, group)


def check_join_completion(shard: Shard, group: ClassicGroup) -> None:
    """S's `rebalancePurgatory.checkAndComplete(GroupJoinKey)` at the end of JoinGroup; a no-op in J,
    whose handlers check at each step themselves."""
    if not shard.config.is_java and group.is_in(PREPARING_REBALANCE):
        maybe_complete_join_phase(shard, group)


# --------------------------------------------------------------------------------------------------
# completing the join phase


def complete_join(shard: Shard, group: ClassicGroup) -> None:
    """Follows GroupMetadataManager#completeClassicGroupJoin / GroupCoordinator#onCompleteJoin."""
    shard.timers.cancel(join_key(group.group_id))
    not_yet = group.not_yet_rejoined_members()
    dropped = [m for m in not_yet if not m.is_static]
    if dropped:
        for m in dropped:
            group.remove(m.member_id)
            cancel_heartbeat(shard, group, m.member_id)
        shard.logs.removed_not_rejoined(group, [m.member_id for m in not_yet], {m.member_id for m in dropped})
    if group.is_in(DEAD):
        shard.logs.dead_skipping(group)
        return
    if not group.maybe_elect_new_joined_leader() and len(group.members) > 0:
        shard.logs.no_member_rejoined(group)
        shard.timers.schedule(join_key(group.group_id), "join",
                              shard.now + group.rebalance_timeout_ms(), (group.group_id,))
        return
    group.init_next_generation(shard.now)
    if group.is_in(EMPTY):
        shard.logs.now_empty(group)
        record = group_metadata_record(group, {}, version=shard.config.group_metadata_value_version)

        def on_empty_written(error: Errors) -> None:
            if error != Errors.NONE:
                shard.logs.empty_write_failed(group, map_group_metadata_append_error(shard, error))

        shard.append([record], on_empty_written)
        return
    shard.logs.stabilized(group)
    for m in group.all_members():
        response = JoinGroupResponse(
            correlation_id=0, error_code=Errors.NONE, member_id=m.member_id,
            generation_id=group.generation_id, protocol_type=group.protocol_type,
            protocol_name=group.protocol_name, leader=group.leader_id or "", skip_assignment=False,
            members=group.current_member_metadata() if group.is_leader(m.member_id) else ())
        group.complete_join_future(m, response)
        reschedule_heartbeat(shard, group, m)
        m.is_new = False
        group.add_pending_sync_member(m.member_id)
    shard.timers.schedule(sync_key(group.group_id), "sync", shard.now + group.rebalance_timeout_ms(),
                          (group.group_id, group.generation_id))


def expire_initial_delay(shard: Shard, group_id: str, delay_ms: int, remaining_ms: int) -> None:
    """Follows GroupMetadataManager#tryCompleteInitialRebalanceElseSchedule / InitialDelayedJoin#onComplete."""
    group = shard.groups.get(group_id)
    if group is None:
        return
    if group.new_member_added and remaining_ms != 0:
        group.new_member_added = False
        new_delay = min(shard.config.group_initial_rebalance_delay_ms, remaining_ms)
        new_remaining = max(remaining_ms - delay_ms, 0)
        shard.timers.schedule(join_key(group_id), "initial-join", shard.now + new_delay,
                              (group_id, new_delay, new_remaining))
        return
    complete_join(shard, group)


def expire_join(shard: Shard, group_id: str) -> None:
    """The join (rebalance) timer fired: complete the join phase (the timer of
    GroupMetadataManager#completeClassicGroupJoin(String) / DelayedJoin#onExpiration)."""
    group = shard.groups.get(group_id)
    if group is not None:
        complete_join(shard, group)


# --------------------------------------------------------------------------------------------------
# member removal


def remove_member_and_update_group(shard: Shard, group: ClassicGroup, member: Member, reason: str) -> None:
    """Follows GroupMetadataManager#removeMemberAndUpdateClassicGroup / GroupCoordinator#removeMemberAndUpdateGroup."""
    group.complete_join_future(member, JoinGroupResponse(
        correlation_id=0, error_code=Errors.UNKNOWN_MEMBER_ID, member_id=""))
    group.remove(member.member_id)
    if group.is_in(STABLE, COMPLETING_REBALANCE):
        maybe_prepare_rebalance(shard, group, reason)
    elif group.is_in(PREPARING_REBALANCE):
        _complete_join_after_removal(shard, group)


def _complete_join_after_removal(shard: Shard, group: ClassicGroup) -> None:
    """J completes the join as soon as everybody joined, even during the initial delay
    (GroupMetadataManager#removeMemberAndUpdateClassicGroup); S runs the purgatory check, which
    InitialDelayedJoin#tryComplete refuses."""
    if shard.config.is_java:
        if group.has_all_members_joined():
            complete_join(shard, group)
    else:
        maybe_complete_join_phase(shard, group)


def remove_pending_member_and_update_group(shard: Shard, group: ClassicGroup, member_id: str) -> None:
    """Follows GroupMetadataManager#removePendingMemberAndUpdateClassicGroup."""
    group.remove(member_id)
    if group.is_in(PREPARING_REBALANCE):
        _complete_join_after_removal(shard, group)


def expire_heartbeat(shard: Shard, group_id: str, member_id: str, scheduled_as_pending: bool = False) -> None:
    """Follows GroupMetadataManager#expireClassicGroupMemberHeartbeat / GroupCoordinator#onExpireHeartbeat.
    J asks whether the id is pending when the timer fires; S's delayed heartbeat remembers that it was
    created for a pending id and takes the pending path even after the id left (DelayedHeartbeat's
    isPending)."""
    group = shard.groups.get(group_id)
    if group is None:
        return
    if group.is_in(DEAD):
        return
    pending = scheduled_as_pending if not shard.config.is_java else member_id in group.pending_members
    if pending:
        shard.logs.pending_member_expired(group, member_id)
        remove_pending_member_and_update_group(shard, group, member_id)
        return
    member = group.members.get(member_id)
    if member is None:
        return
    if not member.has_satisfied_heartbeat():
        shard.logs.member_failed(group, member_id)
        reason = f"removing member {member_id} on heartbeat expiration" + ("." if shard.config.is_java else "")
        remove_member_and_update_group(shard, group, member, reason)


# --------------------------------------------------------------------------------------------------
# sync phase


def remove_sync_expiration(shard: Shard, group: ClassicGroup) -> None:
    """Follows GroupMetadataManager#removeSyncExpiration."""
    group.pending_sync_members.clear()
    shard.timers.cancel(sync_key(group.group_id))


def remove_pending_sync_member(shard: Shard, group: ClassicGroup, member_id: str) -> None:
    """Follows GroupMetadataManager#removePendingSyncMember: the sync timer ends once everybody synced."""
    group.pending_sync_members.discard(member_id)
    if group.is_in(DEAD, EMPTY, PREPARING_REBALANCE) or not group.pending_sync_members:
        shard.timers.cancel(sync_key(group.group_id))


def expire_pending_sync(shard: Shard, group_id: str, generation_id: int) -> None:
    """Follows GroupMetadataManager#expirePendingSync / GroupCoordinator#onExpirePendingSync."""
    group = shard.groups.get(group_id)
    if group is None:
        return
    if generation_id != group.generation_id:
        shard.logs.unexpected_sync_expiration(group, generation_id)
        return
    if group.is_in(DEAD, EMPTY, PREPARING_REBALANCE):
        shard.logs.unexpected_sync_expiration(group, generation_id)
        return
    if group.pending_sync_members:
        missing = shard.logs.pending_sync_copy_order(list(group.pending_sync_members))
        for member_id in missing:
            group.remove(member_id)
            cancel_heartbeat(shard, group, member_id)
        rendered = shard.logs.render_set(missing)
        shard.logs.removed_not_synced(group, rendered)
        prepare_rebalance(shard, group, f"Removing {rendered} on pending sync request expiration")


def reset_and_propagate_assignment_with_error(shard: Shard, group: ClassicGroup, error: Errors) -> None:
    """Follows GroupMetadataManager#resetAndPropagateAssignmentWithError."""
    for m in group.all_members():
        m.assignment = b""
    propagate_assignment(shard, group, error)


def set_and_propagate_assignment(shard: Shard, group: ClassicGroup, assignment: dict[str, bytes]) -> None:
    """Follows GroupMetadataManager#setAndPropagateAssignment."""
    for m in group.all_members():
        m.assignment = assignment.get(m.member_id, b"")
    propagate_assignment(shard, group, Errors.NONE)


def propagate_assignment(shard: Shard, group: ClassicGroup, error: Errors) -> None:
    """Follows GroupMetadataManager#propagateAssignment: answers every parked SyncGroup and restarts
    the session timer of each member answered."""
    ok = error == Errors.NONE
    for m in group.all_members():
        if ok and not m.assignment:
            shard.logs.empty_assignment_sent(group, m.member_id)
        response = SyncGroupResponse(
            correlation_id=0, error_code=error,
            protocol_type=group.protocol_type if ok else None,
            protocol_name=group.protocol_name if ok else None,
            assignment=m.assignment)
        if group.complete_sync_future(m, response):
            reschedule_heartbeat(shard, group, m)


# --------------------------------------------------------------------------------------------------
# append errors


def map_group_metadata_append_error(shard: Shard, error: Errors) -> Errors:
    """Follows GroupMetadataManager#appendGroupMetadataErrorToResponseError (J) and
    GroupMetadataManager#storeGroup's mapping (S)."""
    if error in (Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.NOT_ENOUGH_REPLICAS):
        return Errors.COORDINATOR_NOT_AVAILABLE
    if error == Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND:
        return error if shard.config.is_java else Errors.COORDINATOR_NOT_AVAILABLE
    if error == Errors.REQUEST_TIMED_OUT:
        return Errors.COORDINATOR_NOT_AVAILABLE if shard.config.is_java else Errors.REBALANCE_IN_PROGRESS
    if error in (Errors.NOT_LEADER_OR_FOLLOWER, Errors.KAFKA_STORAGE_ERROR):
        return Errors.NOT_COORDINATOR
    if error in (Errors.MESSAGE_TOO_LARGE, Errors.RECORD_LIST_TOO_LARGE, Errors.INVALID_FETCH_SIZE):
        return Errors.UNKNOWN_SERVER_ERROR
    return error


def map_offset_commit_append_error(shard: Shard, error: Errors) -> Errors:
    """S: GroupMetadataManager#storeOffsets' mapping; J: the generic operation-error mapping
    (CoordinatorOperationExceptionHelper#handleOperationException)."""
    if not shard.config.is_java:
        if error in (Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.NOT_ENOUGH_REPLICAS,
                     Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND):
            return Errors.COORDINATOR_NOT_AVAILABLE
        if error in (Errors.NOT_LEADER_OR_FOLLOWER, Errors.KAFKA_STORAGE_ERROR):
            return Errors.NOT_COORDINATOR
        if error in (Errors.MESSAGE_TOO_LARGE, Errors.RECORD_LIST_TOO_LARGE, Errors.INVALID_FETCH_SIZE):
            return Errors.INVALID_COMMIT_OFFSET_SIZE
        if error == Errors.NETWORK_EXCEPTION:
            return Errors.COORDINATOR_LOAD_IN_PROGRESS
        return error
    if error in (Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.NOT_ENOUGH_REPLICAS, Errors.REQUEST_TIMED_OUT):
        return Errors.COORDINATOR_NOT_AVAILABLE
    if error in (Errors.NOT_LEADER_OR_FOLLOWER, Errors.KAFKA_STORAGE_ERROR):
        return Errors.NOT_COORDINATOR
    if error in (Errors.MESSAGE_TOO_LARGE, Errors.RECORD_LIST_TOO_LARGE, Errors.INVALID_FETCH_SIZE):
        return Errors.UNKNOWN_SERVER_ERROR
    if error == Errors.NETWORK_EXCEPTION:
        return Errors.COORDINATOR_LOAD_IN_PROGRESS
    return error
