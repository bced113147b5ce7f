"""SyncGroup: GroupMetadataManager#classicGroupSync (J) / GroupCoordinator#handleSyncGroup (S), rows S1-S10;
the leader's GroupMetadata record (W1) and its "append completes" semantics."""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator_audit.core.protocol import Errors, SyncGroupRequest, SyncGroupResponse

from .group import ClassicGroup, ParkedSync
from .rebalance import (
    map_group_metadata_append_error,
    maybe_prepare_rebalance,
    remove_pending_sync_member,
    reschedule_heartbeat,
    reset_and_propagate_assignment_with_error,
    set_and_propagate_assignment,
)
from .records_out import group_metadata_record
from .state import COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE

if TYPE_CHECKING:
    from .runtime import Shard


def _error(req: SyncGroupRequest, error: Errors) -> SyncGroupResponse:
    return SyncGroupResponse(correlation_id=req.correlation_id, error_code=error)


def _protocol_inconsistent(shard: Shard, requested: str | None, current: str | None) -> bool:
    """J: GroupMetadataManager#isProtocolInconsistent (both set and different). S: GroupCoordinator#validateSyncGroup
    (`requested.isDefined && !current.contains(requested)`), so an unset group value is inconsistent too."""
    if requested is None:
        return False
    if shard.config.is_java:
        return current is not None and current != requested
    return current != requested


def sync_group(shard: Shard, req: SyncGroupRequest) -> None:
    """Follows GroupMetadataManager#classicGroupSync / GroupCoordinator#handleSyncGroup + doSyncGroup."""
    group = shard.groups.get(req.group_id)
    if group is None:
        shard.respond(_error(req, Errors.UNKNOWN_MEMBER_ID))  # S1
        return
    if shard.config.is_java and group.is_in(EMPTY):
        shard.respond(_error(req, Errors.UNKNOWN_MEMBER_ID))  # J answers Empty before validating (S3/S6)
        return
    if group.is_in(DEAD):
        shard.respond(_error(req, Errors.COORDINATOR_NOT_AVAILABLE))  # S2
        return
    error = group.validate_member(req.member_id, req.group_instance_id, "sync-group")
    if error != Errors.NONE:
        shard.respond(_error(req, error))  # S3
        return
    if req.generation_id != group.generation_id:
        shard.respond(_error(req, Errors.ILLEGAL_GENERATION))  # S4
        return
    if (_protocol_inconsistent(shard, req.protocol_type, group.protocol_type)
            or _protocol_inconsistent(shard, req.protocol_name, group.protocol_name)):
        shard.respond(_error(req, Errors.INCONSISTENT_GROUP_PROTOCOL))  # S5
        return
    if group.is_in(EMPTY):
        shard.respond(_error(req, Errors.UNKNOWN_MEMBER_ID))  # S6
        return
    if group.is_in(PREPARING_REBALANCE):
        shard.respond(_error(req, Errors.REBALANCE_IN_PROGRESS))  # S7
        return
    member = group.member(req.member_id)
    if group.is_in(COMPLETING_REBALANCE):  # S8 / S9
        if member.awaiting_sync is not None:
            shard.drop(member.awaiting_sync.correlation_id)
        member.awaiting_sync = ParkedSync(req.correlation_id)
        remove_pending_sync_member(shard, group, req.member_id)
        if group.is_leader(req.member_id):
            _store_leader_assignment(shard, group, req)
        return
    if group.is_in(STABLE):  # S10
        remove_pending_sync_member(shard, group, req.member_id)
        shard.respond(SyncGroupResponse(correlation_id=req.correlation_id, error_code=Errors.NONE,
                                        protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                                        assignment=member.assignment))
        if not shard.config.is_java:
            reschedule_heartbeat(shard, group, member)


def _store_leader_assignment(shard: Shard, group: ClassicGroup, req: SyncGroupRequest) -> None:
    """S9: build the full assignment, write W1, and finish the sync phase when the append completes."""
    shard.logs.assignment_received(group, req.member_id)
    assignment: dict[str, bytes] = {}
    for member_id, data in req.assignments:
        assignment[member_id] = data
    missing = [m.member_id for m in group.all_members() if m.member_id not in assignment]
    for member_id in missing:
        assignment[member_id] = b""
    if missing:
        shard.logs.missing_assignments(group, missing)
    generation = req.generation_id
    record = group_metadata_record(group, assignment, version=shard.config.group_metadata_value_version)

    def on_written(error: Errors) -> None:
        if not (group.is_in(COMPLETING_REBALANCE) and generation == group.generation_id):
            return
        if error != Errors.NONE:
            mapped = map_group_metadata_append_error(shard, error)
            reset_and_propagate_assignment_with_error(shard, group, mapped)
            if shard.config.is_java:
                reason = f"Error {mapped.name} when storing group assignmentduring SyncGroup (member: {req.member_id})."
            else:
                reason = f"Error {mapped.name} when storing group assignment during SyncGroup (member: {req.member_id})"
            maybe_prepare_rebalance(shard, group, reason)
        else:
            set_and_propagate_assignment(shard, group, assignment)
            group.transition_to(STABLE, shard.now)

    shard.append([record], on_written)
