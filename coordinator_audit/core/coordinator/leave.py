"""LeaveGroup: GroupMetadataManager#classicGroupLeave (J) / GroupCoordinator#handleLeaveGroup (S), rows L1/L2 and
per-member a-e; S rebalances per member, J once per batch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator_audit.core.protocol import (
    UNKNOWN_MEMBER_ID,
    Errors,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberResponse,
)

from .rebalance import (
    cancel_heartbeat,
    maybe_complete_join_phase,
    maybe_prepare_rebalance,
    remove_member_and_update_group,
    remove_pending_member_and_update_group,
)
from .state import COMPLETING_REBALANCE, DEAD, PREPARING_REBALANCE, STABLE

if TYPE_CHECKING:
    from .group import ClassicGroup
    from .runtime import Shard


def leave_group(shard: Shard, req: LeaveGroupRequest) -> None:
    """Follows GroupMetadataManager#classicGroupLeaveToClassicGroup / GroupCoordinator#handleLeaveGroup."""
    identities = req.identities()
    group = shard.groups.get(req.group_id)
    if group is None:  # L1
        _answer(shard, req, Errors.NONE, [MemberResponse(i.member_id, i.group_instance_id, Errors.UNKNOWN_MEMBER_ID)
                                          for i in identities])
        return
    if group.is_in(DEAD):  # L2
        _answer(shard, req, Errors.COORDINATOR_NOT_AVAILABLE, [])
        return
    results: list[MemberResponse] = []
    for identity in identities:
        reason = identity.reason if identity.reason is not None else "not provided"
        error = Errors.NONE
        if identity.member_id == UNKNOWN_MEMBER_ID:
            current = (group.static_members.get(identity.group_instance_id)
                       if identity.group_instance_id is not None else None)
            if current is not None:  # a
                _remove_current_member(shard, group, current, reason)
            else:  # b
                error = Errors.UNKNOWN_MEMBER_ID
        elif identity.member_id in group.pending_members:  # c
            if shard.config.is_java:
                group.remove(identity.member_id)
                cancel_heartbeat(shard, group, identity.member_id)
            else:
                remove_pending_member_and_update_group(shard, group, identity.member_id)
            shard.logs.pending_member_left(group, identity.member_id, reason)
        else:
            error = group.validate_member(identity.member_id, identity.group_instance_id, "leave-group")
            if error == Errors.NONE:  # e
                _remove_current_member(shard, group, identity.member_id, reason)
            # d: error stays as validated
        results.append(MemberResponse(identity.member_id, identity.group_instance_id, error))

    if shard.config.is_java:
        succeeded = [r.member_id for r in results if r.error_code == Errors.NONE]
        if succeeded:
            if group.is_in(STABLE, COMPLETING_REBALANCE):
                maybe_prepare_rebalance(
                    shard, group, f"explicit `LeaveGroup` request for ({', '.join(succeeded)}) members.")
            elif group.is_in(PREPARING_REBALANCE):
                maybe_complete_join_phase(shard, group)
    _answer(shard, req, Errors.NONE, results)


def _remove_current_member(shard: Shard, group: ClassicGroup, member_id: str, reason: str) -> None:
    """Follows GroupMetadataManager#removeCurrentMemberFromClassicGroup (J: no per-member rebalance) /
    GroupCoordinator#removeCurrentMemberFromGroup (S: removeMemberAndUpdateGroup per member)."""
    member = group.member(member_id)
    if shard.config.is_java:
        cancel_heartbeat(shard, group, member_id)
        shard.logs.member_left(group, member, reason)
        group.complete_join_future(member, JoinGroupResponse(
            correlation_id=0, error_code=Errors.UNKNOWN_MEMBER_ID, member_id=UNKNOWN_MEMBER_ID))
        group.remove(member_id)
    else:
        remove_member_and_update_group(shard, group, member,
                                       f"Removing member {member_id} on LeaveGroup; client reason: {reason}")
        cancel_heartbeat(shard, group, member_id)
        shard.logs.member_left(group, member, reason)


def _answer(shard: Shard, req: LeaveGroupRequest, top: Errors, members: list[MemberResponse]) -> None:
    """v3+: the batch; v0-2: one error (the top-level one if set, else the first member error)."""
    if req.api_version >= 3:
        shard.respond(LeaveGroupResponse(correlation_id=req.correlation_id, error_code=top, members=tuple(members)))
        return
    error = top
    if error == Errors.NONE:
        error = next((m.error_code for m in members if m.error_code != Errors.NONE), Errors.NONE)
    shard.respond(LeaveGroupResponse(correlation_id=req.correlation_id, error_code=error))
