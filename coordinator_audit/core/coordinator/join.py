"""JoinGroup (GroupMetadataManager#classicGroupJoin / GroupCoordinator#handleJoinGroup): decision table
J2-J20; J1 and the pre-checks live in the facade."""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator_audit.core.protocol import UNKNOWN_MEMBER_ID, Errors, JoinGroupRequest, JoinGroupResponse

from .group import ClassicGroup, Member, ParkedJoin
from .rebalance import (
    check_join_completion,
    map_group_metadata_append_error,
    maybe_complete_join_phase,
    maybe_prepare_rebalance,
    prepare_rebalance,
    reschedule_heartbeat,
)
from .records_out import empty_group_metadata_record, group_metadata_record
from .state import COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE
from .timers import heartbeat_key

if TYPE_CHECKING:
    from .runtime import Shard


def _error(req: JoinGroupRequest, error: Errors, member_id: str) -> JoinGroupResponse:
    return JoinGroupResponse(correlation_id=req.correlation_id, error_code=error, member_id=member_id)


def _refused(shard: Shard, group: ClassicGroup, req: JoinGroupRequest, member_id: str) -> bool:
    """The checks both classicGroupJoinNewMember and classicGroupJoinExistingMember open with: a Dead
    group answers COORDINATOR_NOT_AVAILABLE (J4 / J10), protocols the group cannot take answer
    INCONSISTENT_GROUP_PROTOCOL (J5 / J11); `member_id` is the one the error response carries."""
    if group.is_in(DEAD):
        shard.respond(_error(req, Errors.COORDINATOR_NOT_AVAILABLE, member_id))
        return True
    if not group.supports_protocols(req.protocol_type, {n for n, _ in req.protocols}):
        shard.respond(_error(req, Errors.INCONSISTENT_GROUP_PROTOCOL, member_id))
        return True
    return False


def join_reason(shard: Shard, req: JoinGroupRequest) -> str:
    """Follows JoinGroupRequest#joinReason (J maps "" too) / S `reason.getOrElse("not provided")`."""
    if req.reason is None or (shard.config.is_java and req.reason == ""):
        return "not provided"
    return req.reason


def accept_joining_member(shard: Shard, group: ClassicGroup, member_id: str) -> bool:
    """Follows GroupMetadataManager#acceptJoiningMember."""
    max_size = shard.config.group_max_size
    if group.is_in(EMPTY, DEAD):
        return True
    if group.is_in(PREPARING_REBALANCE):
        existing = group.members.get(member_id)
        return (existing is not None and existing.is_awaiting_join) or group.num_members_awaiting_join < max_size
    return group.has_member(member_id) or len(group.members) < max_size


def join_group(shard: Shard, req: JoinGroupRequest) -> None:
    """Follows GroupMetadataManager#classicGroupJoinToClassicGroup / GroupCoordinator#handleJoinGroup
    (after the pre-checks and J1)."""
    is_unknown = req.member_id == UNKNOWN_MEMBER_ID
    group = shard.groups.get(req.group_id)
    is_new_group = group is None
    if group is None:
        if not is_unknown:
            shard.respond(_error(req, Errors.UNKNOWN_MEMBER_ID, req.member_id))  # J2
            return
        group = shard.get_or_create_group(req.group_id)
    appended_before = shard.appends_made

    if not accept_joining_member(shard, group, req.member_id):  # J3
        group.remove(req.member_id)
        shard.respond(_error(req, Errors.GROUP_MAX_SIZE_REACHED, UNKNOWN_MEMBER_ID))
    elif is_unknown:
        _join_new_member(shard, group, req)
    else:
        _join_existing_member(shard, group, req)

    check_join_completion(shard, group)
    if shard.config.is_java and is_new_group and shard.appends_made == appended_before:
        _write_new_group(shard, group, req)


def _write_new_group(shard: Shard, group: ClassicGroup, req: JoinGroupRequest) -> None:
    """W5 (Java only): make a group created by this JoinGroup durable; a failed write reverts it."""
    record = empty_group_metadata_record(group, version=shard.config.group_metadata_value_version)

    def on_written(error: Errors) -> None:
        if error == Errors.NONE:
            return
        shard.logs.empty_write_failed(group, error)  # J prints the exception's message: the raw error
        mapped = map_group_metadata_append_error(shard, error)
        if shard.groups.get(group.group_id) is group:
            del shard.groups[group.group_id]
        for m in group.all_members():
            if m.awaiting_join is not None:
                shard.respond(JoinGroupResponse(correlation_id=m.awaiting_join.correlation_id,
                                                error_code=mapped, member_id=""))
                m.awaiting_join = None
            if m.awaiting_sync is not None:
                m.awaiting_sync = None

    shard.append([record], on_written)


# --------------------------------------------------------------------------------------------------
# unknown member id (J4-J9)


def _join_new_member(shard: Shard, group: ClassicGroup, req: JoinGroupRequest) -> None:
    """Follows GroupMetadataManager#classicGroupJoinNewMember."""
    if _refused(shard, group, req, UNKNOWN_MEMBER_ID):  # J4, J5
        return
    new_id = shard.new_member_id(req.client_id, req.group_instance_id)
    if req.group_instance_id is not None:
        old_id = group.static_members.get(req.group_instance_id)
        if old_id is not None:  # J6
            shard.logs.static_replaced(group, req.group_instance_id, old_id)
            _update_static_member(shard, group, req, old_id, new_id)
        else:  # J7
            shard.logs.static_new(group, req.group_instance_id, new_id)
            add_member_and_rebalance(shard, group, req, new_id)
        return
    if req.api_version >= 4:  # J8
        shard.logs.dynamic_id_required(group, new_id)
        group.add_pending_member(new_id)
        shard.timers.schedule(heartbeat_key(group.group_id, new_id), "heartbeat",
                              shard.now + req.session_timeout_ms, (group.group_id, new_id, True))
        shard.respond(_error(req, Errors.MEMBER_ID_REQUIRED, new_id))
        return
    shard.logs.dynamic_new(group, new_id)  # J9
    add_member_and_rebalance(shard, group, req, new_id)


def add_member_and_rebalance(shard: Shard, group: ClassicGroup, req: JoinGroupRequest, member_id: str) -> None:
    """Follows GroupMetadataManager#addMemberThenRebalanceOrCompleteJoin / GroupCoordinator#addMemberAndRebalance."""
    member = Member(member_id=member_id, group_instance_id=req.group_instance_id, client_id=req.client_id,
                    client_host=req.client_host, rebalance_timeout_ms=req.effective_rebalance_timeout_ms,
                    session_timeout_ms=req.session_timeout_ms, protocol_type=req.protocol_type,
                    supported_protocols=req.protocols, is_new=True)
    if group.is_in(PREPARING_REBALANCE):
        if shard.config.is_java:
            if group.previous_state == EMPTY:
                group.new_member_added = True
        elif group.generation_id == 0:
            group.new_member_added = True
    group.add(member, ParkedJoin(req.correlation_id, req.api_version))
    reschedule_heartbeat(shard, group, member, shard.config.new_member_join_timeout_ms)
    instance = (req.group_instance_id if req.group_instance_id is not None else "null") if shard.config.is_java \
        else (f"Some({req.group_instance_id})" if req.group_instance_id is not None else "None")
    maybe_prepare_rebalance(shard, group, f"Adding new member {member_id} with group instance id {instance}; "
                                          f"client reason: {join_reason(shard, req)}")


def _update_static_member(shard: Shard, group: ClassicGroup, req: JoinGroupRequest, old_id: str, new_id: str) -> None:
    """Follows GroupMetadataManager#updateStaticMemberThenRebalanceOrCompleteJoin /
    GroupCoordinator#updateStaticMemberAndRebalance."""
    instance_id = req.group_instance_id
    assert instance_id is not None
    current_leader = group.leader_id
    member = group.replace_static_member(instance_id, old_id, new_id)
    reschedule_heartbeat(shard, group, member)
    old_rebalance_timeout = member.rebalance_timeout_ms
    old_session_timeout = member.session_timeout_ms
    old_protocols = member.supported_protocols
    group.update_member(member, req.protocols, req.effective_rebalance_timeout_ms, req.session_timeout_ms,
                        ParkedJoin(req.correlation_id, req.api_version))
    if not shard.config.is_java:
        old_protocols = member.supported_protocols  # S reads them back after the update
    reason = join_reason(shard, req)
    if group.is_in(STABLE):
        if group.protocol_name == group.select_protocol():
            shard.logs.static_no_rebalance(group)
            assignment = group.group_assignment()
            record = group_metadata_record(group, assignment, version=shard.config.group_metadata_value_version)

            def on_written(error: Errors) -> None:
                if error != Errors.NONE:
                    mapped = map_group_metadata_append_error(shard, error)
                    shard.logs.static_persist_failed(group, new_id, instance_id, error, mapped, old_id)
                    group.update_member(member, old_protocols, old_rebalance_timeout, old_session_timeout, None)
                    old_member = group.replace_static_member(instance_id, new_id, old_id)
                    reschedule_heartbeat(shard, group, old_member)
                    shard.respond(JoinGroupResponse(
                        correlation_id=req.correlation_id, error_code=mapped, member_id=UNKNOWN_MEMBER_ID,
                        generation_id=group.generation_id, protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name, leader=current_leader or "", skip_assignment=False))
                elif req.api_version >= 9:
                    is_leader = group.is_leader(new_id)
                    group.complete_join_future(member, JoinGroupResponse(
                        correlation_id=0, error_code=Errors.NONE, member_id=new_id,
                        generation_id=group.generation_id, protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name, leader=group.leader_id or "",
                        skip_assignment=is_leader,
                        members=group.current_member_metadata() if is_leader else ()))
                else:
                    group.complete_join_future(member, JoinGroupResponse(
                        correlation_id=0, error_code=Errors.NONE, member_id=new_id,
                        generation_id=group.generation_id, protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name, leader=current_leader or "", skip_assignment=False))

            shard.append([record], on_written)
            return
        maybe_prepare_rebalance(
            shard, group, f"Group's selectedProtocol will change because static member {member.member_id} "
                          f"with instance id {instance_id} joined with change of protocol; client reason: {reason}")
        return
    if group.is_in(COMPLETING_REBALANCE):
        prepare_rebalance(shard, group, f"Updating metadata for static member {member.member_id} with instance id "
                                        f"{instance_id}; client reason: {reason}")
        return
    if group.is_in(EMPTY, DEAD):
        from coordinator_audit.core.errors import CoordinatorInvariantError

        raise CoordinatorInvariantError(
            f"group {group.group_id!r}: unknown static member {instance_id!r} rejoined in state {group.state}")
    if shard.config.is_java:
        maybe_complete_join_phase(shard, group)


# --------------------------------------------------------------------------------------------------
# known member id (J10-J20)


def _join_existing_member(shard: Shard, group: ClassicGroup, req: JoinGroupRequest) -> None:
    """Follows GroupMetadataManager#classicGroupJoinExistingMember / GroupCoordinator#doCurrentMemberJoinGroup."""
    member_id = req.member_id
    if _refused(shard, group, req, member_id):  # J10, J11
        return
    if member_id in group.pending_members:  # J12
        if req.group_instance_id is not None:
            from coordinator_audit.core.errors import CoordinatorInvariantError

            raise CoordinatorInvariantError(
                f"group {group.group_id!r}: JoinGroup with group instance id {req.group_instance_id!r} "
                f"for pending member {member_id!r}")
        shard.logs.pending_rejoins(group, member_id)
        add_member_and_rebalance(shard, group, req, member_id)
        return
    error = group.validate_member(member_id, req.group_instance_id, "join-group")
    if error != Errors.NONE:
        shard.respond(_error(req, error, member_id))  # J13
        return
    member = group.member(member_id)
    reason = join_reason(shard, req)
    state = group.state
    if state == PREPARING_REBALANCE:  # J14
        verb = "is joining" if shard.config.is_java else "joining"
        _update_member_and_rebalance(shard, group, member, req,
                                     f"Member {member_id} {verb} group during {state}; client reason: {reason}")
    elif state == COMPLETING_REBALANCE:
        if member.matches(req.protocols):  # J15
            shard.respond(_current_generation(group, req, members=group.is_leader(member_id)))
        else:  # J16
            _update_member_and_rebalance(shard, group, member, req,
                                         f"Updating metadata for member {member_id} during {state}; "
                                         f"client reason: {reason}")
    elif state == STABLE:
        if group.is_leader(member_id):  # J17
            _update_member_and_rebalance(shard, group, member, req,
                                         f"Leader {member_id} re-joining group during {state}; client reason: {reason}")
        elif not member.matches(req.protocols):  # J18
            _update_member_and_rebalance(shard, group, member, req,
                                         f"Updating metadata for member {member_id} during {state}; "
                                         f"client reason: {reason}")
        else:  # J19
            shard.respond(_current_generation(group, req, members=False))
    else:  # J20
        shard.logs.bad_rejoin_state(group, member_id)
        shard.respond(_error(req, Errors.UNKNOWN_MEMBER_ID, member_id))


def _current_generation(group: ClassicGroup, req: JoinGroupRequest, *, members: bool) -> JoinGroupResponse:
    return JoinGroupResponse(
        correlation_id=req.correlation_id, error_code=Errors.NONE, member_id=req.member_id,
        generation_id=group.generation_id, protocol_type=group.protocol_type, protocol_name=group.protocol_name,
        leader=group.leader_id or "", skip_assignment=False,
        members=group.current_member_metadata() if members else ())


def _update_member_and_rebalance(shard: Shard, group: ClassicGroup, member: Member, req: JoinGroupRequest,
                                 reason: str) -> None:
    """Follows GroupMetadataManager#updateMemberThenRebalanceOrCompleteJoin / GroupCoordinator#updateMemberAndRebalance."""
    group.update_member(member, req.protocols, req.effective_rebalance_timeout_ms, req.session_timeout_ms,
                        ParkedJoin(req.correlation_id, req.api_version))
    maybe_prepare_rebalance(shard, group, reason)
