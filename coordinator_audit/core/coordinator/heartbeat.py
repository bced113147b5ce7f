"""Heartbeat: GroupMetadataManager#classicGroupHeartbeat (J) / GroupCoordinator#handleHeartbeat (S), rows H1-H8."""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator_audit.core.protocol import Errors, HeartbeatRequest, HeartbeatResponse

from .rebalance import reschedule_heartbeat
from .state import DEAD, EMPTY, PREPARING_REBALANCE

if TYPE_CHECKING:
    from .runtime import Shard


def heartbeat(shard: Shard, req: HeartbeatRequest) -> None:
    """Follows GroupMetadataManager#classicGroupHeartbeatToClassicGroup / GroupCoordinator#handleHeartbeat."""

    def answer(error: Errors) -> None:
        shard.respond(HeartbeatResponse(correlation_id=req.correlation_id, error_code=error))

    group = shard.groups.get(req.group_id)
    if group is None:
        answer(Errors.UNKNOWN_MEMBER_ID)  # H1
        return
    if group.is_in(DEAD):
        answer(Errors.COORDINATOR_NOT_AVAILABLE)  # H2
        return
    error = group.validate_member(req.member_id, req.group_instance_id, "heartbeat")
    if error != Errors.NONE:
        answer(error)  # H3
        return
    if req.generation_id != group.generation_id:
        answer(Errors.ILLEGAL_GENERATION)  # H4
        return
    if group.is_in(EMPTY):
        answer(Errors.UNKNOWN_MEMBER_ID)  # H5
        return
    reschedule_heartbeat(shard, group, group.member(req.member_id))
    answer(Errors.REBALANCE_IN_PROGRESS if group.is_in(PREPARING_REBALANCE) else Errors.NONE)  # H6 / H7 / H8
