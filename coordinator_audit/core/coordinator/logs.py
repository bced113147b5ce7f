"""server.log lines the coordinator would print (the log.info calls of GroupCoordinator (S) and
GroupMetadataManager (J)), per flavour, kept as data on each result.

Layout `[%d] %p %m (%c)` with the date rendered in UTC from the step's `now_ms`. Only the INFO lines
of the events the port reaches are emitted; DEBUG/TRACE lines are not.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from .hashorder import (
    java_hashmap_order,
    java_hashset_copy_order,
    scala_hashmap_order,
    scala_immutable_set_order,
)

if TYPE_CHECKING:
    from coordinator_audit.core.protocol import Errors
    from coordinator_audit.core.records import CoordinatorRecord

    from .group import ClassicGroup, Member
    from .runtime import Shard

S_COORDINATOR = "kafka.coordinator.group.GroupCoordinator"
S_MANAGER = "kafka.coordinator.group.GroupMetadataManager"
S_GROUP = "kafka.coordinator.group.GroupMetadata"
J_MANAGER = "org.apache.kafka.coordinator.group.GroupMetadataManager"
J_GROUP = "org.apache.kafka.coordinator.group.classic.ClassicGroup"
J_OFFSETS = "org.apache.kafka.coordinator.group.OffsetMetadataManager"
J_SHARD = "org.apache.kafka.coordinator.group.GroupCoordinatorShard"
J_LOADER = "kafka.coordinator.group.CoordinatorLoaderImpl"


def _scala_option(value: str | None) -> str:
    return f"Some({value})" if value is not None else "None"


class LogEmitter:
    """Renders log events into `shard.out.logs`."""

    def __init__(self, shard: Shard) -> None:
        self.shard = shard

    # ----------------------------------------------------------------------------------------------
    # plumbing

    @property
    def java(self) -> bool:
        return self.shard.config.is_java

    def _emit(self, level: str, logger: str, message: str, group_id: str | None = None) -> None:
        ms = self.shard.now
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms // 1000)) + f",{ms % 1000:03d}"
        broker = self.shard.config.broker_id
        if logger in (S_COORDINATOR,):
            prefix = f"[GroupCoordinator {broker}]: "
        elif logger == S_MANAGER:
            prefix = f"[GroupMetadataManager brokerId={broker}] "
        elif logger in (J_MANAGER, J_GROUP, J_OFFSETS, J_SHARD) and group_id is not None:
            prefix = (f"[GroupCoordinator id={broker} topic=__consumer_offsets "
                      f"partition={self.shard.partition_for(group_id)}] ")
        else:
            prefix = ""
        self.shard.out.logs.append(f"[{stamp}] {level} {prefix}{message} ({logger})")

    def _info(self, group_id: str | None, s_text: str, j_text: str, *, s_logger: str = S_COORDINATOR,
              j_logger: str = J_MANAGER, level: str = "INFO") -> None:
        if self.java:
            self._emit(level, j_logger, j_text, group_id)
        else:
            self._emit(level, s_logger, s_text, group_id)

    def _tp(self, group: ClassicGroup) -> str:
        return f"__consumer_offsets-{self.shard.partition_for(group.group_id)}"

    def pending_sync_copy_order(self, source_order: list[str]) -> list[str]:
        """The order of the pending-sync set Kafka prints, given the live set's iteration order:
        J `new HashSet<>(pendingSyncMembers)`; S `pendingSyncMembers.toSet` (an immutable Set)."""
        if self.java:
            return java_hashset_copy_order(source_order)
        return scala_immutable_set_order(source_order)

    def render_set(self, ordered: list[str]) -> str:
        return f"[{', '.join(ordered)}]" if self.java else f"Set({', '.join(ordered)})"

    @staticmethod
    def _scala_member(m: Member) -> str:
        protocols = ", ".join(n for n, _ in m.supported_protocols)
        return (f"MemberMetadata(memberId={m.member_id}, groupInstanceId={_scala_option(m.group_instance_id)}, "
                f"clientId={m.client_id}, clientHost={m.client_host}, sessionTimeoutMs={m.session_timeout_ms}, "
                f"rebalanceTimeoutMs={m.rebalance_timeout_ms}, supportedProtocols=List({protocols}))")

    @staticmethod
    def _java_member(m: Member) -> str:
        protocols = ", ".join(n for n, _ in m.supported_protocols)
        return (f"ClassicGroupMember(memberId='{m.member_id}', groupInstanceId='{m.group_instance_id or ''}', "
                f"clientId='{m.client_id}', clientHost='{m.client_host}', rebalanceTimeoutMs={m.rebalance_timeout_ms}, "
                f"sessionTimeoutMs={m.session_timeout_ms}, protocolType='{m.protocol_type}', "
                f"supportedProtocols=[{protocols}])")

    # ----------------------------------------------------------------------------------------------
    # rebalance

    def preparing_rebalance(self, g: ClassicGroup, reason: str) -> None:
        self._info(g.group_id,
                   f"Preparing to rebalance group {g.group_id} in state {g.state} with old generation "
                   f"{g.generation_id} ({self._tp(g)}) (reason: {reason})",
                   f"Preparing to rebalance group {g.group_id} in state {g.state} with old generation "
                   f"{g.generation_id} (reason: {reason}).")

    def stabilized(self, g: ClassicGroup) -> None:
        self._info(g.group_id,
                   f"Stabilized group {g.group_id} generation {g.generation_id} ({self._tp(g)}) with "
                   f"{len(g.members)} members",
                   f"Stabilized group {g.group_id} generation {g.generation_id} with {len(g.members)} members.")

    def now_empty(self, g: ClassicGroup) -> None:
        self._info(g.group_id,
                   f"Group {g.group_id} with generation {g.generation_id} is now empty ({self._tp(g)})",
                   f"Group {g.group_id} with generation {g.generation_id} is now empty.")

    def removed_not_rejoined(self, g: ClassicGroup, not_yet: list[str], dropped: set[str]) -> None:
        """`not_yet`: every member not awaiting join, in members-map order; `dropped`: the dynamic ones.
        J: `notYetRejoinedMembers()` is a HashMap, filtered into another by `Collectors.toMap`. S: the members
        map filtered into a fresh mutable.HashMap, then `.toMap` (immutable), then filtered."""
        if self.java:
            first = java_hashmap_order(not_yet)
            ordered = java_hashmap_order([m for m in first if m in dropped])
        else:
            fresh = scala_hashmap_order(not_yet)
            ordered = [m for m in scala_immutable_set_order(fresh) if m in dropped]
        self._info(g.group_id,
                   f"Group {g.group_id} removed dynamic members who haven't joined: {self.render_set(ordered)}",
                   f"Group {g.group_id} removed dynamic members who haven't joined: {self.render_set(ordered)}")

    def dead_skipping(self, g: ClassicGroup) -> None:
        self._info(g.group_id, f"Group {g.group_id} is dead, skipping rebalance stage",
                   f"Group {g.group_id} is dead, skipping rebalance stage.")

    def no_member_rejoined(self, g: ClassicGroup) -> None:
        self._info(g.group_id, f"Group {g.group_id} could not complete rebalance because no members rejoined",
                   f"Group {g.group_id} could not complete rebalance because no members rejoined.", level="ERROR")

    def leader_replaced(self, g: ClassicGroup, old: Member, new: Member) -> None:
        self._info(g.group_id,
                   f"Group leader [member.id: {old.member_id}, group.instance.id: {_scala_option(old.group_instance_id)}] "
                   f"failed to join before rebalance timeout, while new leader {self._scala_member(new)} was elected.",
                   f"Group leader [memberId: {old.member_id}, groupInstanceId: {old.group_instance_id or 'None'}] "
                   f"failed to join before the rebalance timeout. Member {self._java_member(new)} was elected "
                   f"as the new leader.", s_logger=S_GROUP, j_logger=J_GROUP)

    def leader_not_replaced(self, g: ClassicGroup, old: Member) -> None:
        self._info(g.group_id,
                   f"Group leader [member.id: {old.member_id}, group.instance.id: {_scala_option(old.group_instance_id)}] "
                   f"failed to join before rebalance timeout, and the group couldn't proceed to next generation"
                   f"because no member joined.",
                   f"Group leader [memberId: {old.member_id}, groupInstanceId: {old.group_instance_id or 'None'}] "
                   f"failed to join before the rebalance timeout and the group couldn't proceed to the next "
                   f"generation because no member joined.", s_logger=S_GROUP, j_logger=J_GROUP)

    def empty_write_failed(self, g: ClassicGroup, error: Errors) -> None:
        """`error` is what Kafka prints the message of: the mapped error after a W2 failure (S and J), the
        append's own error after a W5 failure (J's `t.getMessage()`)."""
        text = f"Failed to write empty metadata for group {g.group_id}: {error.message}"
        self._info(g.group_id, text, text, level="WARN")

    def member_failed(self, g: ClassicGroup, member_id: str) -> None:
        self._info(g.group_id, f"Member {member_id} in group {g.group_id} has failed, removing it from the group",
                   f"Member {member_id} in group {g.group_id} has failed, removing it from the group.")

    def pending_member_expired(self, g: ClassicGroup, member_id: str) -> None:
        text = f"Pending member {member_id} in group {g.group_id} has been removed after session timeout expiration."
        self._info(g.group_id, text, text)

    def unexpected_sync_expiration(self, g: ClassicGroup, generation: int) -> None:
        if generation != g.generation_id:
            text = (f"Received unexpected notification of sync expiration for {g.group_id} with an old "
                    f"generation {generation} while the group has {g.generation_id}.")
            self._info(g.group_id, text, text, level="ERROR")
            return
        self._info(g.group_id,
                   f"Received unexpected notification of sync expiration after group {g.group_id} already "
                   f"transitioned to the {g.state} state.",
                   f"Received unexpected notification of sync expiration after group {g.group_id} already "
                   f"transitioned to {g.state} state.", level="ERROR")

    def removed_not_synced(self, g: ClassicGroup, rendered: str) -> None:
        del g, rendered  # DEBUG in both flavours: not emitted

    # ----------------------------------------------------------------------------------------------
    # sync

    def assignment_received(self, g: ClassicGroup, leader: str) -> None:
        text = (f"Assignment received from leader {leader} for group {g.group_id} for generation {g.generation_id}. "
                f"The group has {len(g.members)} members, {len(g.static_member_ids())} of which are static.")
        self._info(g.group_id, text, text)

    def missing_assignments(self, g: ClassicGroup, missing: list[str]) -> None:
        self._info(g.group_id,
                   f"Setting empty assignments for members {self.render_set(scala_immutable_set_order(missing))} of "
                   f"{g.group_id} for generation {g.generation_id}",
                   f"Setting empty assignments for members {{{', '.join(f'{m}=[B' for m in java_hashmap_order(missing))}}} "
                   f"of {g.group_id} for generation {g.generation_id}.", level="WARN")

    def empty_assignment_sent(self, g: ClassicGroup, member_id: str) -> None:
        text = (f"Sending empty assignment to member {member_id} of {g.group_id} for generation "
                f"{g.generation_id} with no errors")
        self._info(g.group_id, text, text, level="WARN")

    # ----------------------------------------------------------------------------------------------
    # join

    def fenced(self, g: ClassicGroup, member_id: str, instance_id: str, current: str, operation: str) -> None:
        self._info(g.group_id,
                   f"Request memberId={member_id} for static member with groupInstanceId={instance_id} is fenced "
                   f"by current memberId={current} during operation {operation}",
                   f"Request memberId={member_id} for static member with groupInstanceId={instance_id} is fenced "
                   f"by existing memberId={current} during operation {operation}", j_logger=J_GROUP)

    def static_replaced(self, g: ClassicGroup, instance_id: str, old_id: str) -> None:
        text = (f"Static member with groupInstanceId={instance_id} and unknown member id joins group {g.group_id} "
                f"in {g.state} state. Replacing previously mapped member {old_id} with this groupInstanceId.")
        self._info(g.group_id, text, text)

    def static_new(self, g: ClassicGroup, instance_id: str, new_id: str) -> None:
        head = (f"Static member with groupInstanceId={instance_id} and unknown member id joins group {g.group_id} "
                f"in {g.state} state. Created a new member id {new_id} for this member and ")
        self._info(g.group_id, head + "add to the group.", head + "added to the group.")

    def static_no_rebalance(self, g: ClassicGroup) -> None:
        self._info(g.group_id,
                   "Static member which joins during Stable stage and doesn't affect selectProtocol will not "
                   "trigger rebalance.",
                   "Static member which joins during Stable stage and doesn't affect the selected protocol will "
                   "not trigger a rebalance.")

    def static_persist_failed(self, g: ClassicGroup, new_id: str, instance_id: str, raw: Errors, mapped: Errors,
                              old_id: str) -> None:
        """S prints the mapped error's message; J the append exception's message (the raw error's)."""
        self._info(g.group_id, f"Failed to persist metadata for group {g.group_id}: {mapped.message}",
                   f"Failed to persist metadata for group {g.group_id} static member {new_id} with group instance "
                   f"id {instance_id} due to {raw.message}. Reverting to old member id {old_id}.", level="WARN")

    def dynamic_id_required(self, g: ClassicGroup, new_id: str) -> None:
        self._info(g.group_id,
                   f"Dynamic member with unknown member id joins group {g.group_id} in {g.state} state. Created a "
                   f"new member id {new_id} and request the member to rejoin with this id.",
                   f"Dynamic member with unknown member id joins group {g.group_id} in {g.state} state. Created a "
                   f"new member id {new_id} and requesting the member to rejoin with this id.")

    def dynamic_new(self, g: ClassicGroup, new_id: str) -> None:
        self._info(g.group_id,
                   f"Dynamic Member with unknown member id joins group {g.group_id} in {g.state} state. Created a "
                   f"new member id {new_id} for this member and add to the group.",
                   f"Dynamic member with unknown member id joins group {g.group_id} in state {g.state}. Created a "
                   f"new member id {new_id} and added the member to the group.")

    def pending_rejoins(self, g: ClassicGroup, member_id: str) -> None:
        text = (f"Pending dynamic member with id {member_id} joins group {g.group_id} in {g.state} state. "
                f"Adding to the group now.")
        self._info(g.group_id, text, text)

    def bad_rejoin_state(self, g: ClassicGroup, member_id: str) -> None:
        text = (f"Attempt to add rejoining member {member_id} of group {g.group_id} in unexpected group state "
                f"{g.state}")
        self._info(g.group_id, text, text, level="WARN")

    # ----------------------------------------------------------------------------------------------
    # leave / commit / lifecycle

    def member_left(self, g: ClassicGroup, m: Member, reason: str) -> None:
        self._info(g.group_id,
                   f"Member {self._scala_member(m)} has left group {g.group_id} through explicit `LeaveGroup`; "
                   f"client reason: {reason}",
                   f"[Group {g.group_id}] Member {m.member_id} has left group through explicit `LeaveGroup` "
                   f"request; client reason: {reason}")

    def pending_member_left(self, g: ClassicGroup, member_id: str, reason: str) -> None:
        self._info(g.group_id,
                   f"Pending member with memberId={member_id} has left group {g.group_id} through explicit "
                   f"`LeaveGroup` request",
                   f"[Group {g.group_id}] Pending member {member_id} has left group through explicit `LeaveGroup` "
                   f"request; client reason: {reason}")

    def simple_group(self, group_id: str) -> None:
        self._info(group_id, f"Creating simple consumer group {group_id} via manual offset commit.",
                   f"[GroupId {group_id}] Creating a simple consumer group via manual offset commit.",
                   j_logger=J_OFFSETS)

    def cleanup(self, num_records: int, num_offsets: int) -> None:
        """J: GroupCoordinatorShard#cleanupGroupMetadata, every run. S: GroupMetadataManager#cleanupGroupMetadata,
        only when offsets were removed. Durations are 0: the port takes no time."""
        if self.java:
            self._emit("INFO", J_SHARD, f"Generated {num_records} tombstone records while cleaning up group "
                                        f"metadata in 0 milliseconds.")
        elif num_offsets > 0:
            self._emit("INFO", S_MANAGER, f"Removed {num_offsets} expired offsets in 0 milliseconds.")

    def transitioned_to_dead(self, g: ClassicGroup) -> None:
        self._emit("INFO", S_MANAGER, f"Group {g.group_id} transitioned to Dead in generation {g.generation_id}")

    def groups_deleted(self, requested: tuple[str, ...], group_ids: list[str], num_offsets: int) -> None:
        """J (GroupCoordinatorShard#deleteGroups) logs every request, through the shard's log context; S
        (GroupCoordinator#handleDeleteGroups) only when a group was deleted."""
        if not self.java and not group_ids:
            return
        text = (f"The following groups were deleted: {', '.join(group_ids)}. A total of {num_offsets} offsets "
                f"were removed.")
        self._info(requested[0] if requested else None, text, text, j_logger=J_SHARD)

    def unknown_record(self, record: CoordinatorRecord) -> None:
        kind = record.key_version
        self._info(None,
                   f"Unknown message key with version {kind} while loading offsets and group metadata. "
                   f"Ignoring it. It could be a left over from an aborted upgrade.",
                   f"Unknown record type {kind} while loading offsets and group metadata. Ignoring it. It could "
                   f"be a left over from an aborted upgrade.", s_logger=S_MANAGER, j_logger=J_LOADER, level="WARN")

    def loaded(self, g: ClassicGroup) -> None:
        if self.java:
            self._emit("INFO", J_MANAGER, f"Loaded classic group {g.group_id} with {len(g.members)} members.",
                       g.group_id)
        else:
            self._emit("INFO", S_COORDINATOR,
                       f"Loading group metadata for {g.group_id} with generation {g.generation_id}", g.group_id)

    def unloading(self, g: ClassicGroup) -> None:
        self._info(g.group_id, f"Unloading group metadata for {g.group_id} with generation {g.generation_id}",
                   f"[GroupId={g.group_id}] Unloading group metadata for generation {g.generation_id}.")
