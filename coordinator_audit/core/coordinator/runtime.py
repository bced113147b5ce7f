"""The coordinator's mutable core shared by the request handlers: groups, offsets, timers, the clock of
the current step, the append path (with injectable failures) and the step's output buffers."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from coordinator_audit.core.protocol import Errors, Response

from .config import CoordinatorConfig
from .logs import LogEmitter
from .timers import TimerQueue

if TYPE_CHECKING:
    from coordinator_audit.core.records import CoordinatorRecord

    from .group import ClassicGroup

MemberIdSupplier = Callable[[str], str]
"""Given the prefix (group instance id of a static member, else client id), returns a new member id."""


class DeterministicMemberIds:
    """Default member-id supplier: Kafka's `<prefix>-<uuid>` shape with uuid-looking strings taken
    from a counter (`UUID(int=n)` with the version-4 bits set), so runs are repeatable."""

    __slots__ = ("_counter",)

    def __init__(self) -> None:
        self._counter = 0

    def __call__(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}-{uuid.UUID(int=self._counter, version=4)}"


class CoordinatorStatus(Enum):
    """Whether this coordinator currently owns its groups (NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS:
    CoordinatorRuntime (J), GroupCoordinator#validateGroupStatus (S))."""

    ACTIVE = "active"
    LOADING = "loading"
    UNLOADED = "unloaded"


@dataclass(slots=True)
class OffsetAndMetadata:
    """Follows OffsetAndMetadata: one committed offset as kept in memory."""

    committed_offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None


AppendCallback = Callable[[Errors], None]


@dataclass(slots=True)
class PendingAppend:
    """A write whose completion (commit or failure) has not been delivered yet."""

    records: tuple[CoordinatorRecord, ...]
    error: Errors
    callback: AppendCallback | None


@dataclass(slots=True)
class StepOutput:
    """What one public call produced, in order."""

    records: list[CoordinatorRecord] = field(default_factory=list)
    responses: list[Response] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)


class Shard:
    """The state one coordinator keeps, plus the plumbing every handler uses."""

    def __init__(self, config: CoordinatorConfig, member_id_supplier: MemberIdSupplier | None) -> None:
        self.config = config
        self.groups: dict[str, ClassicGroup] = {}
        self.offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        self.timers = TimerQueue()
        self.now: int = 0
        self.started = False
        self.status = CoordinatorStatus.ACTIVE
        self.member_ids: MemberIdSupplier = member_id_supplier or DeterministicMemberIds()
        self.out = StepOutput()
        self.fail_queue: list[tuple[Errors, bool]] = []
        self.defer_appends = False
        self.pending_appends: list[PendingAppend] = []
        self.unknown_records_skipped = 0
        self.control_records_skipped = 0
        self.appends_made = 0
        self.logs: LogEmitter = LogEmitter(self)

    # ----------------------------------------------------------------------------------------------
    # output

    def respond(self, response: Response) -> None:
        self.out.responses.append(response)

    def drop(self, correlation_id: int) -> None:
        """A parked request Kafka abandons without an answer (its future was replaced by a newer one)."""
        self.out.dropped.append(correlation_id)

    def append(self, records: list[CoordinatorRecord] | tuple[CoordinatorRecord, ...],
               callback: AppendCallback | None) -> None:
        """Writes `records` as one batch. The outcome comes from the failure queue (`fail_next_append`):
        on success the records are emitted now; on failure they are not written. The callback runs when the
        append completes: at the end of this operation, or at `complete_appends` when appends are deferred."""
        self.appends_made += 1
        error = Errors.NONE
        written = True
        if self.fail_queue:
            error, written = self.fail_queue.pop(0)
        if written:
            self.out.records.extend(records)
        pending = PendingAppend(tuple(records), error, callback)
        if self.defer_appends:
            self.pending_appends.append(pending)
        elif callback is not None:
            callback(error)

    def complete_pending_appends(self) -> None:
        """Delivers the completion of every deferred append, in write order."""
        while self.pending_appends:
            pending = self.pending_appends.pop(0)
            if pending.callback is not None:
                pending.callback(pending.error)

    def new_member_id(self, client_id: str, instance_id: str | None) -> str:
        """Follows ClassicGroup#generateMemberId with the injected supplier in place of UUID.randomUUID."""
        return self.member_ids(instance_id if instance_id is not None else client_id)

    # ----------------------------------------------------------------------------------------------
    # groups

    def group_or_none(self, group_id: str) -> ClassicGroup | None:
        return self.groups.get(group_id)

    def get_or_create_group(self, group_id: str) -> ClassicGroup:
        """Follows GroupMetadataManager#getOrMaybeCreateClassicGroup(groupId, true)."""
        from .group import ClassicGroup

        group = self.groups.get(group_id)
        if group is None:
            group = ClassicGroup.create(group_id, self, now_ms=self.now)
            self.groups[group_id] = group
        return group

    def partition_for(self, group_id: str) -> int:
        """The `__consumer_offsets` partition of a group (GroupCoordinatorService#partitionFor)."""
        from coordinator_audit.core.jhash import java_string_hashcode, kafka_abs

        return kafka_abs(java_string_hashcode(group_id)) % self.config.offsets_topic_num_partitions
