"""The records the coordinator writes (GroupMetadata W1-W5, named in docs/architecture.md; offset commits):
follows GroupCoordinatorRecordHelpers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator_audit.core.errors import CoordinatorInvariantError
from coordinator_audit.core.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
)

if TYPE_CHECKING:
    from .group import ClassicGroup
    from .runtime import OffsetAndMetadata

GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_KEY_VERSION = 1


def group_metadata_record(group: ClassicGroup, assignment: dict[str, bytes], *, version: int) -> CoordinatorRecord:
    """Follows GroupCoordinatorRecordHelpers#newGroupMetadataRecord (W1, W2, W3).

    Members in the members map's iteration order; subscription = metadata of the selected protocol.
    Fields the value version does not carry are set to what a decoder yields for them (-1 / None), so the
    record equals its own encode/decode round trip.
    """
    members = []
    for m in group.all_members():
        if group.protocol_name is None:
            raise CoordinatorInvariantError(
                f"group {group.group_id!r}: non-empty group metadata without a selected protocol")
        if m.member_id not in assignment:
            raise CoordinatorInvariantError(f"group {group.group_id!r}: member {m.member_id!r} has no assignment")
        members.append(MemberMetadata(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id if version >= 3 else None,
            client_id=m.client_id,
            client_host=m.client_host,
            rebalance_timeout=m.rebalance_timeout_ms if version >= 1 else -1,
            session_timeout=m.session_timeout_ms,
            subscription=m.metadata(group.protocol_name),
            assignment=assignment[m.member_id],
        ))
    ts = group.current_state_timestamp if group.current_state_timestamp is not None else -1
    value = GroupMetadataValue(
        protocol_type=group.protocol_type if group.protocol_type is not None else "",
        generation=group.generation_id,
        protocol=group.protocol_name,
        leader=group.leader_id,
        current_state_timestamp=ts if version >= 2 else -1,
        members=tuple(members),
    )
    return CoordinatorRecord(GroupMetadataKey(group.group_id), value, GROUP_METADATA_KEY_VERSION, version)


def empty_group_metadata_record(group: ClassicGroup, *, version: int) -> CoordinatorRecord:
    """Follows GroupCoordinatorRecordHelpers#newEmptyGroupMetadataRecord (W5, Java only)."""
    ts = group.current_state_timestamp if group.current_state_timestamp is not None else -1
    value = GroupMetadataValue(protocol_type="", generation=0, protocol=None, leader=None,
                               current_state_timestamp=ts if version >= 2 else -1, members=())
    return CoordinatorRecord(GroupMetadataKey(group.group_id), value, GROUP_METADATA_KEY_VERSION, version)


def group_tombstone(group_id: str) -> CoordinatorRecord:
    """Follows GroupCoordinatorRecordHelpers#newGroupMetadataTombstoneRecord (W4)."""
    return CoordinatorRecord(GroupMetadataKey(group_id), None, GROUP_METADATA_KEY_VERSION, None)


def offset_commit_value_version(offset: OffsetAndMetadata, configured: int) -> int:
    """Follows MetadataVersion#offsetCommitValueVersion: v1 whenever an expire timestamp is present."""
    return 1 if offset.expire_timestamp_ms is not None else configured


def offset_commit_record(group_id: str, topic: str, partition: int, offset: OffsetAndMetadata, *,
                         configured_version: int) -> CoordinatorRecord:
    """Follows GroupCoordinatorRecordHelpers#newOffsetCommitRecord."""
    version = offset_commit_value_version(offset, configured_version)
    value = OffsetCommitValue(
        offset=offset.committed_offset,
        leader_epoch=offset.leader_epoch if version >= 3 else -1,
        metadata=offset.metadata,
        commit_timestamp=offset.commit_timestamp_ms,
        expire_timestamp=offset.expire_timestamp_ms if offset.expire_timestamp_ms is not None else -1,
    )
    return CoordinatorRecord(OffsetCommitKey(group_id, topic, partition), value, OFFSET_COMMIT_KEY_VERSION, version)


def offset_commit_tombstone(group_id: str, topic: str, partition: int) -> CoordinatorRecord:
    """Follows GroupCoordinatorRecordHelpers#newOffsetCommitTombstoneRecord."""
    return CoordinatorRecord(OffsetCommitKey(group_id, topic, partition), None, OFFSET_COMMIT_KEY_VERSION, None)
