"""The load path (GroupCoordinatorShard#replay, GroupMetadataManager#onLoaded / #loadGroupsAndOffsets): replay
of `__consumer_offsets` records, load completion, unloading.

Transactional offset commits (TxnOffsetCommit, control batches) are not modelled: every offset record
is taken as a plain, committed one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from coordinator_audit.core.protocol import Errors, JoinGroupResponse, SyncGroupResponse
from coordinator_audit.core.records import (
    ControlRecordKey,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
)

from .expiration import schedule_expiration
from .group import ClassicGroup, Member
from .rebalance import prepare_rebalance, reschedule_heartbeat
from .runtime import CoordinatorStatus, OffsetAndMetadata
from .state import COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE

if TYPE_CHECKING:
    from coordinator_audit.core.records import CoordinatorRecord

    from .runtime import Shard


def replay(shard: Shard, record: CoordinatorRecord, now_ms: int | None) -> None:
    """Follows GroupCoordinatorShard#replay -> GroupMetadataManager#replay / OffsetMetadataManager#replay
    (and S's GroupMetadataManager#doLoadGroupsAndOffsets for one record)."""
    key = record.key
    # The casts state what `decode` guarantees (record types 0/1 carry an OffsetCommitValue, type 2 a
    # GroupMetadataValue); no check is added on this per-record path, so a hand-built record pairing a key
    # with another value class fails on attribute access, as it always did.
    if isinstance(key, OffsetCommitKey):
        _replay_offset(shard, key, cast("OffsetCommitValue | None", record.value), now_ms)
    elif isinstance(key, GroupMetadataKey):
        _replay_group(shard, key.group, cast("GroupMetadataValue | None", record.value), now_ms)
    elif isinstance(key, ControlRecordKey):
        shard.control_records_skipped += 1  # transaction markers: TxnOffsetCommit is not modelled
    else:
        shard.unknown_records_skipped += 1
        shard.logs.unknown_record(record)


def _replay_offset(shard: Shard, key: OffsetCommitKey, value: OffsetCommitValue | None, now_ms: int | None) -> None:
    if value is None:
        shard.offsets.get(key.group, {}).pop((key.topic, key.partition), None)
        return
    if key.group not in shard.groups:
        shard.groups[key.group] = ClassicGroup.create(key.group, shard, now_ms=now_ms)
    v = value
    expire = v.expire_timestamp if v.expire_timestamp != -1 else None
    shard.offsets.setdefault(key.group, {})[(key.topic, key.partition)] = OffsetAndMetadata(
        committed_offset=v.offset, leader_epoch=v.leader_epoch, metadata=v.metadata,
        commit_timestamp_ms=v.commit_timestamp, expire_timestamp_ms=expire)


def _replay_group(shard: Shard, group_id: str, value: GroupMetadataValue | None, now_ms: int | None) -> None:
    if value is None:
        shard.groups.pop(group_id, None)
        return
    v = value
    # Kafka writes `protocol` whenever the group has members. A malformed record's None is kept, as
    # GroupMetadataManager#replay copies it into the member's protocol too (it then matches the group's
    # None protocol name); the cast only states the well-formed case for Member's type.
    protocol = cast(str, v.protocol)
    member_protocol_type = v.protocol_type
    # Member's fields in order: member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
    # session_timeout_ms, protocol_type, supported_protocols, assignment (positional: once per member of
    # every replayed record)
    members = [Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                      m.session_timeout if m.rebalance_timeout == -1 else m.rebalance_timeout, m.session_timeout,
                      member_protocol_type, ((protocol, m.subscription),), m.assignment)
               for m in v.members]
    ts = v.current_state_timestamp
    group = ClassicGroup.create(
        group_id, shard, state=STABLE if members else EMPTY, now_ms=None if ts == -1 else ts,
        generation_id=v.generation, protocol_type=v.protocol_type or None, protocol_name=v.protocol,
        leader_id=v.leader)
    add = group.add
    for member in members:
        add(member)
    group.compute_subscribed_topics_on_read()
    shard.groups[group_id] = group
    del now_ms


def complete_load(shard: Shard) -> None:
    """Follows GroupMetadataManager#onLoaded / GroupCoordinator#onGroupLoaded: session timers for every
    member, and a rebalance for groups over group.max.size."""
    shard.status = CoordinatorStatus.ACTIVE
    for group in list(shard.groups.values()):
        shard.logs.loaded(group)
        if shard.config.is_java:  # J: session timers first, then the over-capacity rebalance; S the reverse
            for m in group.all_members():
                reschedule_heartbeat(shard, group, m)
        if len(group.members) > shard.config.group_max_size:
            if shard.config.is_java:
                reason = (f"Freshly-loaded group {group.group_id} (size {len(group.members)}) is over capacity "
                          f"{shard.config.group_max_size}. Rebalancing in order to give a chance for consumers "
                          f"to commit offsets")
            else:
                reason = (f"Freshly-loaded group is over capacity ({shard.config.group_max_size}). Rebalancing "
                          f"in order to give a chance for consumers to commit offsets")
            prepare_rebalance(shard, group, reason)
        if not shard.config.is_java:
            for m in group.all_members():
                reschedule_heartbeat(shard, group, m)
    schedule_expiration(shard)
    shard.started = True


def unload(shard: Shard) -> None:
    """Follows GroupMetadataManager#onUnloaded / GroupCoordinator#onGroupUnloaded: every group goes Dead and
    its parked requests get NOT_COORDINATOR; then all state is dropped."""
    for group in list(shard.groups.values()):
        shard.logs.unloading(group)
        previous = group.state
        group.transition_to(DEAD, shard.now)
        if previous == PREPARING_REBALANCE:
            for m in group.all_members():
                group.complete_join_future(m, JoinGroupResponse(
                    correlation_id=0, error_code=Errors.NOT_COORDINATOR, member_id=m.member_id))
        elif previous in (COMPLETING_REBALANCE, STABLE):
            for m in group.all_members():
                group.complete_sync_future(m, SyncGroupResponse(correlation_id=0, error_code=Errors.NOT_COORDINATOR))
    shard.groups.clear()
    shard.offsets.clear()
    shard.timers.clear()
    shard.pending_appends.clear()
    shard.status = CoordinatorStatus.UNLOADED
