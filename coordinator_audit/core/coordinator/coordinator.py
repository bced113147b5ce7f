"""The public face of the port: `GroupCoordinator` and what it returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from coordinator_audit.core.protocol import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    Errors,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    Response,
    SyncGroupRequest,
    SyncGroupResponse,
)

from .commit import _all as _commit_error
from .commit import commit_offsets
from .config import CoordinatorConfig
from .expiration import cleanup_group_metadata, delete_groups, schedule_expiration
from .heartbeat import heartbeat
from .join import join_group
from .leave import leave_group
from .load import complete_load, replay, unload
from .rebalance import expire_heartbeat, expire_initial_delay, expire_join, expire_pending_sync
from .runtime import CoordinatorStatus, MemberIdSupplier, Shard
from .sync import sync_group
from .timers import Timer
from .views import GroupView, OffsetView, group_view

if TYPE_CHECKING:
    from coordinator_audit.core.records import CoordinatorRecord


@dataclass(frozen=True, slots=True)
class CoordinatorResult:
    """What one call produced: records written (in log order), responses completed, log lines, and the
    correlation ids of parked requests Kafka abandons unanswered (their future was replaced)."""

    records: tuple[CoordinatorRecord, ...]
    responses: tuple[Response, ...]
    logs: tuple[str, ...] = ()
    dropped: tuple[int, ...] = ()


class GroupCoordinator:
    """A deterministic port of Kafka's classic group coordinator (one coordinator's groups).

    Every request handler takes the request and the log time `now_ms`; timers due at or before `now_ms`
    fire first (in deadline order), as they would have in a running broker. Nothing here reads a clock,
    draws random numbers or does I/O.
    """

    def __init__(self, config: CoordinatorConfig | None = None, member_id_supplier: MemberIdSupplier | None = None) -> None:
        self.config = config or CoordinatorConfig()
        self._shard = Shard(self.config, member_id_supplier)

    # ----------------------------------------------------------------------------------------------
    # requests

    def join_group(self, request: JoinGroupRequest, *, now_ms: int) -> CoordinatorResult:
        """Handles a JoinGroup (GroupMetadataManager#classicGroupJoin / GroupCoordinator#handleJoinGroup)."""
        return self._run(now_ms, lambda: self._join(request))

    def sync_group(self, request: SyncGroupRequest, *, now_ms: int) -> CoordinatorResult:
        """Handles a SyncGroup (GroupMetadataManager#classicGroupSync / GroupCoordinator#handleSyncGroup)."""
        return self._run(now_ms, lambda: self._sync(request))

    def heartbeat(self, request: HeartbeatRequest, *, now_ms: int) -> CoordinatorResult:
        """Handles a Heartbeat (GroupMetadataManager#classicGroupHeartbeat / GroupCoordinator#handleHeartbeat)."""
        return self._run(now_ms, lambda: self._heartbeat(request))

    def leave_group(self, request: LeaveGroupRequest, *, now_ms: int) -> CoordinatorResult:
        """Handles a LeaveGroup (GroupMetadataManager#classicGroupLeave / GroupCoordinator#handleLeaveGroup)."""
        return self._run(now_ms, lambda: self._leave(request))

    def commit_offsets(self, request: OffsetCommitRequest, *, now_ms: int) -> CoordinatorResult:
        """Handles an OffsetCommit (OffsetMetadataManager#commitOffset / GroupCoordinator#handleCommitOffsets)."""
        return self._run(now_ms, lambda: self._commit(request))

    def delete_groups(self, request: DeleteGroupsRequest, *, now_ms: int) -> CoordinatorResult:
        """Handles a DeleteGroups: Empty groups only, offset and group tombstones (W4)."""
        return self._run(now_ms, lambda: self._delete(request))

    def advance_time(self, *, now_ms: int) -> CoordinatorResult:
        """Fires every timer due at or before `now_ms`, in (deadline, scheduling order)."""
        return self._run(now_ms, lambda: None)

    # ----------------------------------------------------------------------------------------------
    # load path and lifecycle

    def replay(self, record: CoordinatorRecord, *, now_ms: int | None = None) -> None:
        """The load path: applies one decoded `__consumer_offsets` record (GroupCoordinatorShard#replay /
        GroupMetadataManager#loadGroupsAndOffsets). `now_ms`, if given, stamps groups created from offsets
        alone; it starts no timer."""
        replay(self._shard, record, now_ms)

    def begin_load(self) -> None:
        """Marks the coordinator as loading: requests get COORDINATOR_LOAD_IN_PROGRESS until `complete_load`."""
        self._shard.status = CoordinatorStatus.LOADING

    def complete_load(self, *, now_ms: int) -> CoordinatorResult:
        """Load completion (GroupMetadataManager#onLoaded / GroupCoordinator#onGroupLoaded): session timers
        for every member, rebalance of over-capacity groups, the offset-expiration task; the coordinator
        becomes active."""
        return self._run(now_ms, lambda: complete_load(self._shard), fire_timers=False)

    def unload(self, *, now_ms: int) -> CoordinatorResult:
        """The partition emigrates: every group goes Dead, parked requests get NOT_COORDINATOR, state is
        dropped and later requests get NOT_COORDINATOR."""
        return self._run(now_ms, lambda: unload(self._shard), fire_timers=False)

    # ----------------------------------------------------------------------------------------------
    # append control (failure injection)

    def fail_next_append(self, error: Errors, *, written: bool = False) -> None:
        """Makes the next append fail with `error` (queued; one per call). With `written=True` the records
        still reach the log (an append that timed out after the leader wrote it)."""
        if not isinstance(error, Errors) or error == Errors.NONE:
            raise ValueError(f"fail_next_append needs a non-NONE Errors value, got {error!r}")
        self._shard.fail_queue.append((error, written))

    def defer_appends(self, enabled: bool = True) -> None:
        """When enabled, appends complete only at `complete_appends` (so other requests can run meanwhile)."""
        self._shard.defer_appends = enabled

    def complete_appends(self, *, now_ms: int) -> CoordinatorResult:
        """Delivers the completion of every deferred append, in write order."""
        return self._run(now_ms, self._shard.complete_pending_appends, fire_timers=False)

    # ----------------------------------------------------------------------------------------------
    # read-only views

    def group(self, group_id: str) -> GroupView | None:
        """A read-only snapshot of one group, or None if the coordinator holds no such group."""
        g = self._shard.groups.get(group_id)
        return None if g is None else group_view(g, self._shard)

    def group_ids(self) -> tuple[str, ...]:
        return tuple(self._shard.groups)

    def offsets(self, group_id: str) -> dict[tuple[str, int], OffsetView]:
        """The committed offsets of a group, keyed by (topic, partition)."""
        return {tp: OffsetView(o.committed_offset, o.leader_epoch, o.metadata, o.commit_timestamp_ms,
                               o.expire_timestamp_ms)
                for tp, o in self._shard.offsets.get(group_id, {}).items()}

    def timers(self) -> tuple[Timer, ...]:
        """The pending timers in firing order."""
        return tuple(self._shard.timers.all())

    def next_deadline(self) -> int | None:
        """The earliest pending timer deadline, or None."""
        return self._shard.timers.next_deadline()

    @property
    def status(self) -> CoordinatorStatus:
        return self._shard.status

    @property
    def unknown_records_skipped(self) -> int:
        """How many replayed records had a key type the coordinator does not handle."""
        return self._shard.unknown_records_skipped

    @property
    def now_ms(self) -> int:
        return self._shard.now

    # ----------------------------------------------------------------------------------------------
    # internals

    def _run(self, now_ms: int, action: Callable[[], None], *, fire_timers: bool = True) -> CoordinatorResult:
        shard = self._shard
        if not isinstance(now_ms, int) or isinstance(now_ms, bool):
            raise TypeError(f"now_ms must be an int, got {now_ms!r}")
        if now_ms < shard.now:
            raise ValueError(f"now_ms {now_ms} is before the coordinator's time {shard.now}: time cannot go back")
        out = shard.out
        out.records.clear()
        out.responses.clear()
        out.logs.clear()
        out.dropped.clear()
        if fire_timers:
            self._fire_due(now_ms)
        shard.now = now_ms
        if not shard.started and shard.status == CoordinatorStatus.ACTIVE:
            shard.started = True
            schedule_expiration(shard)
        action()
        return CoordinatorResult(tuple(out.records), tuple(out.responses), tuple(out.logs), tuple(out.dropped))

    def _fire_due(self, now_ms: int) -> None:
        shard = self._shard
        while True:
            timer = shard.timers.pop_due(now_ms)
            if timer is None:
                return
            shard.now = max(shard.now, timer.deadline)
            self._dispatch(timer)

    def _dispatch(self, timer: Timer) -> None:
        shard = self._shard
        p = timer.params
        if timer.kind == "heartbeat":
            expire_heartbeat(shard, str(p[0]), str(p[1]), len(p) > 2 and bool(p[2]))
        elif timer.kind == "join":
            expire_join(shard, str(p[0]))
        elif timer.kind == "initial-join":
            expire_initial_delay(shard, str(p[0]), int(p[1]), int(p[2]))
        elif timer.kind == "sync":
            expire_pending_sync(shard, str(p[0]), int(p[1]))
        elif timer.kind == "expiration":
            cleanup_group_metadata(shard)
        else:  # pragma: no cover - timers are created here only
            raise AssertionError(f"unknown timer kind {timer.kind!r}")

    def _precheck(self, group_id: str, *, api: str) -> Errors:
        """The checks before any group logic: the group id (GroupCoordinatorService#isGroupIdNotEmpty /
        GroupCoordinator#isValidGroupId), then the coordinator's state (GroupCoordinator#validateGroupStatus)."""
        shard = self._shard
        if api != "commit" and group_id == "":
            return Errors.INVALID_GROUP_ID
        if shard.status == CoordinatorStatus.LOADING:
            if api == "heartbeat":
                return Errors.NONE
            if api == "sync" and not self.config.is_java:
                return Errors.REBALANCE_IN_PROGRESS
            return Errors.COORDINATOR_LOAD_IN_PROGRESS
        if shard.status == CoordinatorStatus.UNLOADED:
            return Errors.NOT_COORDINATOR
        return Errors.NONE

    def _join(self, req: JoinGroupRequest) -> None:
        shard = self._shard

        def reject(error: Errors) -> None:
            shard.respond(JoinGroupResponse(correlation_id=req.correlation_id, error_code=error,
                                            member_id=req.member_id))

        if req.group_instance_id is not None and self.config.group_metadata_value_version < 3:
            reject(Errors.UNSUPPORTED_VERSION)
            return
        bad_timeout = not (self.config.group_min_session_timeout_ms <= req.session_timeout_ms
                           <= self.config.group_max_session_timeout_ms)
        if req.group_id == "":
            reject(Errors.INVALID_GROUP_ID)
            return
        if self.config.is_java and bad_timeout:
            reject(Errors.INVALID_SESSION_TIMEOUT)  # J1, before loading / NOT_COORDINATOR in J
            return
        error = self._precheck(req.group_id, api="join")
        if error != Errors.NONE:
            reject(error)
            return
        if bad_timeout:
            reject(Errors.INVALID_SESSION_TIMEOUT)  # J1
            return
        join_group(shard, req)

    def _sync(self, req: SyncGroupRequest) -> None:
        shard = self._shard
        error = Errors.NONE
        if req.group_instance_id is not None and self.config.group_metadata_value_version < 3:
            error = Errors.UNSUPPORTED_VERSION
        elif req.api_version >= 5 and (req.protocol_type is None or req.protocol_name is None):
            error = Errors.INCONSISTENT_GROUP_PROTOCOL
        else:
            error = self._precheck(req.group_id, api="sync")
        if error != Errors.NONE:
            shard.respond(SyncGroupResponse(correlation_id=req.correlation_id, error_code=error))
            return
        sync_group(shard, req)

    def _heartbeat(self, req: HeartbeatRequest) -> None:
        shard = self._shard
        error = self._precheck(req.group_id, api="heartbeat")
        if error != Errors.NONE or shard.status == CoordinatorStatus.LOADING:  # loading answers NONE
            shard.respond(HeartbeatResponse(correlation_id=req.correlation_id, error_code=error))
            return
        heartbeat(shard, req)

    def _leave(self, req: LeaveGroupRequest) -> None:
        shard = self._shard
        error = self._precheck(req.group_id, api="leave")
        if error != Errors.NONE:
            shard.respond(LeaveGroupResponse(correlation_id=req.correlation_id, error_code=error))
            return
        leave_group(shard, req)

    def _commit(self, req: OffsetCommitRequest) -> None:
        shard = self._shard
        error = self._precheck(req.group_id, api="commit")
        if error != Errors.NONE:
            shard.respond(_commit_error(req, error))
            return
        commit_offsets(shard, req)

    def _delete(self, req: DeleteGroupsRequest) -> None:
        shard = self._shard
        error = self._precheck("-", api="delete")
        if error != Errors.NONE:
            shard.respond(DeleteGroupsResponse(correlation_id=req.correlation_id,
                                               results=tuple((g, error) for g in req.group_ids)))
            return
        delete_groups(shard, req)
