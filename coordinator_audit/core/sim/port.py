"""The simulator's only contact points with the coordinator, the codec and the assignors.

Everything the runner needs from other packages goes through here, so an API change elsewhere is a
change in one file.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coordinator_audit.core import records as codec
from coordinator_audit.core.client.assignors.base import ConsumerPartitionAssignor
from coordinator_audit.core.coordinator import CoordinatorConfig, GroupCoordinator
from coordinator_audit.core.errors import ScenarioError
from coordinator_audit.core.protocol import (
    DeleteGroupsRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    SyncGroupRequest,
)


def make_assignor(name: str) -> ConsumerPartitionAssignor:
    """A fresh instance of the built-in assignor called `name` (one per consumer: they keep state)."""
    from coordinator_audit.core.client.assignors import ASSIGNORS

    if name not in ASSIGNORS:
        raise ScenarioError(f"unknown assignor {name!r} (built-in: {', '.join(sorted(ASSIGNORS))})")
    return ASSIGNORS[name]()


class SeededMemberIds:
    """Kafka's `<prefix>-<uuid4>` member ids, drawn from a seeded generator so runs repeat."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(f"member-ids-{seed}")

    def __call__(self, prefix: str) -> str:
        return f"{prefix}-{uuid.UUID(int=self._rng.getrandbits(128), version=4)}"


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    """What the runner reads of a group between steps (to tell what a step changed)."""

    state: str
    generation_id: int
    members: dict[str, str | None]  # member id -> group instance id
    leader_id: str | None
    protocol_name: str | None


class CoordinatorPort:
    """One coordinator instance plus the calls the simulator makes on it."""

    def __init__(self, *, initial_rebalance_delay_ms: int, offsets_partitions: int, seed: int,
                 member_ids: Callable[[str], str] | None = None, flavor: str = "java") -> None:
        if flavor not in ("java", "scala"):
            raise ScenarioError(f"unknown coordinator flavor {flavor!r} (java, scala)")
        self.config = CoordinatorConfig(group_initial_rebalance_delay_ms=initial_rebalance_delay_ms,
                                        offsets_topic_num_partitions=offsets_partitions,
                                        flavor="java" if flavor == "java" else "scala")
        self.member_ids = member_ids or SeededMemberIds(seed)
        self.coord = GroupCoordinator(self.config, member_id_supplier=self.member_ids)

    def call(self, request: Any, now: int) -> Any:
        if isinstance(request, JoinGroupRequest):
            return self.coord.join_group(request, now_ms=now)
        if isinstance(request, SyncGroupRequest):
            return self.coord.sync_group(request, now_ms=now)
        if isinstance(request, HeartbeatRequest):
            return self.coord.heartbeat(request, now_ms=now)
        if isinstance(request, LeaveGroupRequest):
            return self.coord.leave_group(request, now_ms=now)
        if isinstance(request, OffsetCommitRequest):
            return self.coord.commit_offsets(request, now_ms=now)
        if isinstance(request, DeleteGroupsRequest):
            return self.coord.delete_groups(request, now_ms=now)
        raise TypeError(f"not a request: {request!r}")

    def advance_time(self, now: int) -> Any:
        return self.coord.advance_time(now_ms=now)

    def next_deadline(self) -> int | None:
        return self.coord.next_deadline()

    def snapshot(self, group_id: str) -> GroupSnapshot | None:
        g = self.coord.group(group_id)
        if g is None:
            return None
        members = {m.member_id: m.group_instance_id for m in g.members}
        return GroupSnapshot(str(g.state), g.generation_id, members, g.leader_id, g.protocol_name)

    def failover(self, log: list[tuple[bytes, bytes | None]], now: int) -> Any:
        """The partition moves: this instance unloads (answering parked requests NOT_COORDINATOR) and a
        fresh instance loads the partition from the log it wrote. Returns the unload's result."""
        result = self.coord.unload(now_ms=now)
        fresh = GroupCoordinator(self.config, member_id_supplier=self.member_ids)
        fresh.begin_load()
        for key, value in log:
            fresh.replay(codec.decode(key, value))
        load = fresh.complete_load(now_ms=now)
        self.coord = fresh
        return result, load


def encode_record(rec: Any) -> tuple[bytes, bytes | None]:
    return codec.encode(rec)


def decode_record(key: bytes, value: bytes | None) -> Any:
    return codec.decode(key, value)


def partition_for(group_id: str, num_partitions: int) -> int:
    return codec.partition_for(group_id, num_partitions)
