"""Read-only snapshots of coordinator state for callers and tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .state import GroupState

if TYPE_CHECKING:
    from .group import ClassicGroup
    from .runtime import Shard


@dataclass(frozen=True, slots=True)
class MemberView:
    """One member as the coordinator holds it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    supported_protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes
    is_new: bool
    awaiting_join: bool
    awaiting_sync: bool


@dataclass(frozen=True, slots=True)
class GroupView:
    """One group as the coordinator holds it; `members` in Kafka's iteration order."""

    group_id: str
    state: GroupState
    previous_state: GroupState
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str | None
    current_state_timestamp: int | None
    members: tuple[MemberView, ...]
    static_members: tuple[tuple[str, str], ...]
    pending_members: frozenset[str]
    pending_sync_members: frozenset[str]
    num_members_awaiting_join: int
    subscribed_topics: frozenset[str] | None
    new_member_added: bool

    def member(self, member_id: str) -> MemberView:
        for m in self.members:
            if m.member_id == member_id:
                return m
        raise KeyError(f"group {self.group_id!r} has no member {member_id!r}")

    @property
    def member_ids(self) -> tuple[str, ...]:
        return tuple(m.member_id for m in self.members)


@dataclass(frozen=True, slots=True)
class OffsetView:
    """One committed offset."""

    committed_offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None


def group_view(group: ClassicGroup, shard: Shard) -> GroupView:
    del shard
    members = tuple(MemberView(
        member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
        client_host=m.client_host, rebalance_timeout_ms=m.rebalance_timeout_ms,
        session_timeout_ms=m.session_timeout_ms, protocol_type=m.protocol_type,
        supported_protocols=m.supported_protocols, assignment=m.assignment, is_new=m.is_new,
        awaiting_join=m.is_awaiting_join, awaiting_sync=m.is_awaiting_sync) for m in group.all_members())
    return GroupView(
        group_id=group.group_id, state=group.state, previous_state=group.previous_state,
        generation_id=group.generation_id, protocol_type=group.protocol_type, protocol_name=group.protocol_name,
        leader_id=group.leader_id, current_state_timestamp=group.current_state_timestamp, members=members,
        static_members=tuple(sorted(group.static_members.items())),
        pending_members=frozenset(group.pending_members),
        pending_sync_members=frozenset(group.pending_sync_members),
        num_members_awaiting_join=group.num_members_awaiting_join,
        subscribed_topics=group.subscribed_topics, new_member_added=group.new_member_added)
