"""Offset expiration (OffsetMetadataManager#cleanupExpiredOffsets / GroupMetadataManager#cleanupGroupMetadata),
group tombstones (W4) and DeleteGroups."""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator_audit.core.protocol import DeleteGroupsRequest, DeleteGroupsResponse, Errors

from .records_out import group_tombstone, offset_commit_tombstone
from .state import COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE
from .timers import EXPIRATION_KEY

if TYPE_CHECKING:
    from coordinator_audit.core.records import CoordinatorRecord

    from .group import ClassicGroup
    from .runtime import OffsetAndMetadata, Shard


def schedule_expiration(shard: Shard) -> None:
    """Follows GroupCoordinatorShard#scheduleGroupMetadataExpiration (every offsets.retention.check.interval.ms)."""
    shard.timers.schedule(EXPIRATION_KEY, "expiration", shard.now + shard.config.offsets_retention_check_interval_ms)


def _expiration_base(group: ClassicGroup) -> str | None:
    """Follows ClassicGroup#offsetExpirationCondition: which timestamp offsets age from, or None."""
    if group.protocol_type is not None:
        if group.is_in(EMPTY):
            return "state"
        if group.protocol_type == "consumer" and group.subscribed_topics is not None and group.is_in(STABLE):
            return "commit"
        return None
    return "commit"


def _is_expired(group: ClassicGroup, base: str, offset: OffsetAndMetadata, now: int, retention: int) -> bool:
    """Follows OffsetExpirationConditionImpl#isOffsetExpired."""
    if offset.expire_timestamp_ms is not None:
        return now >= offset.expire_timestamp_ms
    if base == "state" and group.current_state_timestamp is not None:
        start = group.current_state_timestamp
    else:
        start = offset.commit_timestamp_ms
    return now - start >= retention


def _subscribed(group: ClassicGroup, topic: str) -> bool:
    """Follows ClassicGroup#isSubscribedToTopic."""
    if group.subscribed_topics is not None:
        return topic in group.subscribed_topics
    return group.protocol_type == "consumer" and group.is_in(STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE)


def cleanup_group_metadata(shard: Shard) -> None:
    """Follows GroupCoordinatorShard#cleanupGroupMetadata (J) / GroupMetadataManager#cleanupGroupMetadata (S)."""
    retention = shard.config.offsets_retention_ms
    now = shard.now
    records: list[CoordinatorRecord] = []
    deleted: list[str] = []
    for group_id, group in list(shard.groups.items()):
        offsets = shard.offsets.get(group_id, {})
        base = _expiration_base(group)
        all_expired = True
        expired: list[tuple[str, int]] = []
        if offsets:
            if base is None:
                all_expired = False
            else:
                for (topic, partition), offset in offsets.items():
                    if not _subscribed(group, topic) and _is_expired(group, base, offset, now, retention):
                        expired.append((topic, partition))
                    else:
                        all_expired = False
        for tp in expired:
            records.append(offset_commit_tombstone(group_id, *tp))
        if all_expired and group.is_in(EMPTY):
            if shard.config.is_java or group.generation_id > 0:
                records.append(group_tombstone(group_id))
            deleted.append(group_id)
        for tp in expired:
            offsets.pop(tp, None)
    for group_id in deleted:
        _drop_group(shard, group_id, log_dead=True)
    shard.logs.cleanup(len(records), sum(1 for r in records if r.key_version == 1))
    if records:
        shard.append(records, None)
    schedule_expiration(shard)


def _drop_group(shard: Shard, group_id: str, *, log_dead: bool) -> None:
    """S moves the group to Dead (GroupMetadataManager#cleanupGroupMetadata logs it; DeleteGroups does the
    transition itself, silently); J only removes it (its tombstone replay)."""
    group = shard.groups.pop(group_id, None)
    shard.offsets.pop(group_id, None)
    if group is not None and not shard.config.is_java:
        if log_dead:
            shard.logs.transitioned_to_dead(group)
        group.transition_to(DEAD, shard.now)


def delete_groups(shard: Shard, req: DeleteGroupsRequest) -> None:
    """Follows GroupCoordinatorShard#deleteGroups (J) / GroupCoordinator#handleDeleteGroups (S): only Empty
    groups; offsets and group tombstones in one batch."""
    results: list[tuple[str, Errors]] = []
    records: list[CoordinatorRecord] = []
    deleted: list[str] = []
    for group_id in req.group_ids:
        group = shard.groups.get(group_id)
        if group is None or group.is_in(DEAD):
            results.append((group_id, Errors.GROUP_ID_NOT_FOUND))
            continue
        if group.is_in(STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE):
            results.append((group_id, Errors.NON_EMPTY_GROUP))
            continue
        for topic, partition in shard.offsets.get(group_id, {}):
            records.append(offset_commit_tombstone(group_id, topic, partition))
        if shard.config.is_java or group.generation_id > 0:
            records.append(group_tombstone(group_id))
        deleted.append(group_id)
        results.append((group_id, Errors.NONE))
    for group_id in deleted:
        _drop_group(shard, group_id, log_dead=False)
    shard.logs.groups_deleted(req.group_ids, deleted, sum(1 for r in records if r.key_version == 1))

    def on_written(error: Errors) -> None:
        final = results if error == Errors.NONE else [
            (g, e if e != Errors.NONE else error) for g, e in results]
        shard.respond(DeleteGroupsResponse(correlation_id=req.correlation_id, results=tuple(final)))

    if records:
        shard.append(records, on_written)
    else:
        on_written(Errors.NONE)
