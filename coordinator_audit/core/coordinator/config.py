"""Broker settings the classic coordinator reads (GroupCoordinatorConfig), with Kafka's defaults, plus the flavour
switch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from coordinator_audit.core.errors import ConfigError
from coordinator_audit.core.records import OFFSETS_TOPIC_NUM_PARTITIONS

Flavor = Literal["java", "scala"]

NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000
"""Hard-coded in Kafka (S `NewMemberJoinTimeoutMs`, J `CLASSIC_GROUP_NEW_MEMBER_JOIN_TIMEOUT_MS`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CoordinatorConfig:
    """The coordinator's configuration.

    `flavor` picks the implementation being imitated: "java" (the group-coordinator module, the only one in
    4.x) or "scala" (core's GroupCoordinator, the default up to 3.x); the `is_java` branches of the port are
    the differences. The value versions mimic the inter-broker/metadata version: GroupMetadataValue v3 and
    OffsetCommitValue v3 for every modern broker; lower values imitate old IBPs
    (GroupCoordinatorRecordHelpers#newGroupMetadataRecord, #newOffsetCommitRecord).
    """

    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = 2_147_483_647
    offsets_topic_num_partitions: int = OFFSETS_TOPIC_NUM_PARTITIONS
    offsets_retention_minutes: int = 10080
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    offsets_commit_timeout_ms: int = 5000
    offsets_topic_replication_factor: int = 3
    offsets_topic_segment_bytes: int = 104_857_600
    offsets_topic_compression_codec: int = 0
    offsets_load_buffer_size: int = 5_242_880
    new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS
    flavor: Flavor = "java"
    group_metadata_value_version: int = 3
    offset_commit_value_version: int = 3
    broker_id: int = 1

    def __post_init__(self) -> None:
        if self.flavor not in ("java", "scala"):
            raise ConfigError(f"flavor must be 'java' or 'scala', got {self.flavor!r}")
        positive = ("group_max_size", "offsets_topic_num_partitions", "offsets_retention_minutes",
                    "offsets_retention_check_interval_ms", "new_member_join_timeout_ms")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an int >= 1, got {value!r}")
        non_negative = ("group_min_session_timeout_ms", "group_max_session_timeout_ms",
                        "group_initial_rebalance_delay_ms", "offset_metadata_max_bytes",
                        "offsets_commit_timeout_ms")
        for name in non_negative:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ConfigError(f"{name} must be an int >= 0, got {value!r}")
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ConfigError("group_min_session_timeout_ms must not exceed group_max_session_timeout_ms")
        if self.group_metadata_value_version not in (0, 1, 2, 3):
            raise ConfigError(f"group_metadata_value_version must be 0..3 (written versions), "
                              f"got {self.group_metadata_value_version!r}")
        if self.offset_commit_value_version not in (1, 2, 3):
            raise ConfigError(f"offset_commit_value_version must be 1..3 (written versions), "
                              f"got {self.offset_commit_value_version!r}")

    @property
    def is_java(self) -> bool:
        """True when imitating the Java (group-coordinator module) implementation."""
        return self.flavor == "java"

    @property
    def offsets_retention_ms(self) -> int:
        """offsets.retention.minutes in milliseconds."""
        return self.offsets_retention_minutes * 60_000
