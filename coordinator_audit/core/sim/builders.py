"""Builders for hand-made `__consumer_offsets` logs of one group, written with the real codec
(`coordinator_audit.core.records.encode`, `coordinator_audit.core.consumer_protocol.encode_*`): the audit's
tests and `benchmarks/bench_audit.py` write their logs with them."""

from __future__ import annotations

from collections.abc import Iterable

from coordinator_audit.core.consumer_protocol import (
    Assignment,
    Subscription,
    TopicPartitions,
    encode_assignment,
    encode_cooperative_user_data,
    encode_sticky_user_data,
    encode_subscription,
)
from coordinator_audit.core.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    encode,
)

TP = tuple[str, int]
T0 = 1_700_000_000_000


def grouped(tps: Iterable[TP]) -> tuple[TopicPartitions, ...]:
    """(topic, partition) pairs -> TopicPartitions entries, topics in order of first appearance."""
    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    return tuple(TopicPartitions(t, tuple(ps)) for t, ps in by_topic.items())


def tps(topic: str, *partitions: int) -> tuple[TP, ...]:
    return tuple((topic, p) for p in partitions)


def member(member_id: str, assigned: Iterable[TP] = (), *, topics: Iterable[str] = ("t",), owned: Iterable[TP] = (),
           instance: str | None = None, sub_version: int = 3, generation_id: int = -1,
           user_data: bytes | None = None, sticky: tuple[Iterable[TP], int] | None = None,
           cooperative_generation: int | None = None, client_id: str | None = None, host: str = "/10.0.0.1",
           subscription: bytes | None = None, assignment: bytes | None = None) -> MemberMetadata:
    """One member of a GroupMetadata value with real consumer-protocol bytes."""
    if sticky is not None:
        user_data = encode_sticky_user_data(list(sticky[0]), generation=sticky[1])
    if cooperative_generation is not None:
        user_data = encode_cooperative_user_data(cooperative_generation)
    if subscription is None:
        subscription = encode_subscription(Subscription(
            sub_version, tuple(sorted(topics)), user_data, grouped(sorted(owned)) if sub_version >= 1 else (),
            generation_id, None))
    if assignment is None:
        assigned = tuple(assigned)
        assignment = encode_assignment(Assignment(3, grouped(assigned), None)) if assigned else b""
    return MemberMetadata(member_id=member_id, group_instance_id=instance, client_id=client_id or member_id.split("-")[0],
                          client_host=host, rebalance_timeout=300_000, session_timeout=10_000,
                          subscription=subscription, assignment=assignment)


class LogBuilder:
    """Appends one group's records at consecutive offsets of one partition, one second apart."""

    def __init__(self, group: str = "g", *, partition: int = 7, offset: int = 0, ts: int = T0) -> None:
        self.group_id = group
        self.partition = partition
        self.offset = offset
        self.ts = ts
        self.records: list[tuple[int, int, int, bytes, bytes | None]] = []

    def raw(self, key: bytes, value: bytes | None, *, at: int | None = None) -> LogBuilder:
        if at is not None:
            self.ts = at
        self.records.append((self.partition, self.offset, self.ts, key, value))
        self.offset += 1
        self.ts += 1000
        return self

    def record(self, rec: CoordinatorRecord, *, at: int | None = None) -> LogBuilder:
        key, value = encode(rec)
        return self.raw(key, value, at=at)

    def group(self, generation: int, members: Iterable[MemberMetadata] = (), *, protocol: str | None = "range",
              protocol_type: str = "consumer", leader: str | None = "", state_ts: int | None = None,
              at: int | None = None, value_version: int = 3) -> LogBuilder:
        members = tuple(members)
        if leader == "":
            leader = members[0].member_id if members else None
        if not members and protocol == "range":
            protocol = None
        ts = self.ts if at is None else at
        value = GroupMetadataValue(protocol_type=protocol_type, generation=generation, protocol=protocol,
                                   leader=leader, current_state_timestamp=ts - 50 if state_ts is None else state_ts,
                                   members=members)
        return self.record(CoordinatorRecord.of(GroupMetadataKey(self.group_id), value, value_version=value_version),
                           at=at)

    def tombstone(self, *, at: int | None = None) -> LogBuilder:
        return self.record(CoordinatorRecord.of(GroupMetadataKey(self.group_id), None), at=at)

    def commit(self, topic: str, partition: int, offset: int, *, at: int | None = None) -> LogBuilder:
        ts = self.ts if at is None else at
        value = OffsetCommitValue(offset=offset, leader_epoch=0, metadata="", commit_timestamp=ts)
        return self.record(CoordinatorRecord.of(OffsetCommitKey(self.group_id, topic, partition), value), at=at)

    def offset_tombstone(self, topic: str, partition: int, *, at: int | None = None) -> LogBuilder:
        return self.record(CoordinatorRecord.of(OffsetCommitKey(self.group_id, topic, partition), None), at=at)
