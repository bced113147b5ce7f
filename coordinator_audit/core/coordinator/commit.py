"""OffsetCommit: OffsetMetadataManager#commitOffset (J) / GroupCoordinator#handleCommitOffsets (S), rows
C1-C10, and the records GroupCoordinatorRecordHelpers#newOffsetCommitRecord writes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator_audit.core.protocol import (
    DEFAULT_RETENTION_TIME,
    Errors,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)

from .rebalance import map_offset_commit_append_error, reschedule_heartbeat
from .records_out import offset_commit_record
from .runtime import OffsetAndMetadata
from .state import COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE

if TYPE_CHECKING:
    from .group import ClassicGroup
    from .runtime import Shard


def _java_string_length(s: str) -> int:
    """Java String#length: UTF-16 code units."""
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


def _all(req: OffsetCommitRequest, error: Errors) -> OffsetCommitResponse:
    return OffsetCommitResponse(correlation_id=req.correlation_id, topics=tuple(
        OffsetCommitResponseTopic(t.name, tuple(OffsetCommitResponsePartition(p.partition_index, error)
                                                for p in t.partitions))
        for t in req.topics))


def _validate(shard: Shard, group: ClassicGroup, req: OffsetCommitRequest) -> Errors:
    """Follows ClassicGroup#validateOffsetCommit / GroupCoordinator#validateOffsetCommit (C3-C7)."""
    if group.is_in(DEAD):
        return Errors.COORDINATOR_NOT_AVAILABLE  # C3
    if req.generation_id < 0 and group.is_in(EMPTY):
        return Errors.NONE  # C4
    if req.generation_id >= 0 or req.member_id != "" or req.group_instance_id is not None:  # C5
        # J passes the operation names swapped (`isTransactional ? "offset-commit" : "txn-offset-commit"`)
        operation = "txn-offset-commit" if shard.config.is_java else "offset-commit"
        error = group.validate_member(req.member_id, req.group_instance_id, operation)
        if error != Errors.NONE:
            return error
        if req.generation_id != group.generation_id:
            return Errors.ILLEGAL_GENERATION
    elif not group.is_in(EMPTY):
        return Errors.UNKNOWN_MEMBER_ID  # C6
    if group.is_in(COMPLETING_REBALANCE):
        return Errors.REBALANCE_IN_PROGRESS  # C7
    return Errors.NONE


def commit_offsets(shard: Shard, req: OffsetCommitRequest) -> None:
    """Follows OffsetMetadataManager#commitOffset / GroupCoordinator#handleCommitOffsets + doCommitOffsets."""
    group = shard.groups.get(req.group_id)
    if group is None:
        if req.generation_id < 0:  # C1
            shard.logs.simple_group(req.group_id)
            group = shard.get_or_create_group(req.group_id)
        else:  # C2
            java_v9 = shard.config.is_java and req.api_version >= 9
            shard.respond(_all(req, Errors.GROUP_ID_NOT_FOUND if java_v9 else Errors.ILLEGAL_GENERATION))
            return
    error = _validate(shard, group, req)
    if error != Errors.NONE:
        shard.respond(_all(req, error))
        return
    if group.is_in(STABLE, PREPARING_REBALANCE):  # C8: the commit counts as liveness
        reschedule_heartbeat(shard, group, group.member(req.member_id))

    now = shard.now
    expire = None if req.retention_time_ms == DEFAULT_RETENTION_TIME else now + req.retention_time_ms
    accepted: list[tuple[str, int, OffsetAndMetadata]] = []
    results: dict[tuple[str, int], Errors] = {}
    for topic in req.topics:
        for p in topic.partitions:
            metadata = p.committed_metadata
            if metadata is not None and _java_string_length(metadata) > shard.config.offset_metadata_max_bytes:
                results[(topic.name, p.partition_index)] = Errors.OFFSET_METADATA_TOO_LARGE  # C10
                continue
            results[(topic.name, p.partition_index)] = Errors.NONE
            commit_ts = p.commit_timestamp if (req.api_version == 1 and p.commit_timestamp != -1) else now
            accepted.append((topic.name, p.partition_index, OffsetAndMetadata(
                committed_offset=p.committed_offset, leader_epoch=p.committed_leader_epoch,
                metadata=metadata if metadata is not None else "", commit_timestamp_ms=commit_ts,
                expire_timestamp_ms=expire)))

    def respond() -> None:
        shard.respond(OffsetCommitResponse(correlation_id=req.correlation_id, topics=tuple(
            OffsetCommitResponseTopic(t.name, tuple(
                OffsetCommitResponsePartition(p.partition_index, results[(t.name, p.partition_index)])
                for p in t.partitions))
            for t in req.topics)))

    if not accepted:
        respond()
        return
    records = [offset_commit_record(req.group_id, topic, partition, offset,
                                    configured_version=shard.config.offset_commit_value_version)
               for topic, partition, offset in accepted]

    def on_written(error: Errors) -> None:
        if error == Errors.NONE:
            store = shard.offsets.setdefault(req.group_id, {})
            for topic, partition, offset in accepted:
                store[(topic, partition)] = offset
            respond()
            return
        mapped = map_offset_commit_append_error(shard, error)
        if shard.config.is_java:
            shard.respond(_all(req, mapped))
            return
        for topic, partition, _ in accepted:
            results[(topic, partition)] = mapped
        respond()

    shard.append(records, on_written)
