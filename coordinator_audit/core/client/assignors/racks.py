"""KIP-881 rack awareness shared by the range and sticky assignors: when to use it
(AbstractPartitionAssignor#useRackAwareAssignment) and the sticky assignors' RackInfo."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from coordinator_audit.core.client.assignors.base import GroupInput, TopicPartition


def use_rack_aware_assignment(consumer_racks: Collection[str], partition_racks: Collection[str],
                              racks_per_partition: Mapping[TopicPartition, frozenset[str]]) -> bool:
    """Follows AbstractPartitionAssignor#useRackAwareAssignment: consumers have racks, some of them hold
    replicas, and not every partition has replicas on every rack."""
    if not consumer_racks or not set(consumer_racks) & set(partition_racks):
        return False
    everywhere = frozenset(partition_racks)
    return not all(racks == everywhere for racks in racks_per_partition.values())


class RackInfo:
    """Follows AbstractStickyAssignor.RackInfo. `consumer_racks`/`partition_racks` are empty unless
    rack-aware assignment applies; `num_consumers_by_partition` is filled whenever members have racks."""

    def __init__(self, group: GroupInput) -> None:
        consumers_by_rack: dict[str, list[str]] = {}
        for member, sub in group.subscriptions.items():
            if sub.rack_id:
                consumers_by_rack.setdefault(sub.rack_id, []).append(member)
        racks_per_partition: dict[TopicPartition, frozenset[str]] = {}
        all_partition_racks: set[str] = set()
        if consumers_by_rack:
            for topic, count in group.partitions_per_topic.items():
                for p in range(count):
                    tp = TopicPartition(topic, p)
                    racks_per_partition[tp] = group.racks_of(tp)
                    all_partition_racks |= racks_per_partition[tp]
        self.consumer_racks: dict[str, str] = {}
        self.partition_racks: dict[TopicPartition, frozenset[str]] = {}
        if use_rack_aware_assignment(consumers_by_rack.keys(), all_partition_racks, racks_per_partition):
            self.consumer_racks = {c: rack for rack, members in consumers_by_rack.items() for c in members}
            self.partition_racks = racks_per_partition
        self.num_consumers_by_partition = {
            tp: sum(len(consumers_by_rack.get(r, ())) for r in racks) for tp, racks in racks_per_partition.items()
        }

    def racks_mismatch(self, consumer: str, tp: TopicPartition) -> bool:
        """Follows RackInfo#racksMismatch: the consumer has a rack and the partition has no replica there."""
        rack = self.consumer_racks.get(consumer)
        if rack is None:
            return False
        replica_racks = self.partition_racks.get(tp)
        return replica_racks is None or rack not in replica_racks

    def sort_partitions_by_rack_consumers(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Follows RackInfo#sortPartitionsByRackConsumers: a stable sort by how many members share a rack
        with a replica (a fresh list; the input itself when no member has a rack)."""
        if not self.num_consumers_by_partition:
            return partitions
        counts = self.num_consumers_by_partition
        return sorted(partitions, key=lambda tp: counts.get(tp, 0))

    def next_rack_consumer(self, tp: TopicPartition, consumers: list[str], first_index: int) -> int:
        """Follows RackInfo#nextRackConsumer: index of the first member from `first_index` (circularly)
        whose rack holds a replica of `tp`, or -1."""
        racks = self.partition_racks.get(tp)
        if not racks:
            return -1
        n = len(consumers)
        for i in range(n):
            index = (first_index + i) % n
            rack = self.consumer_racks.get(consumers[index])
            if rack is not None and rack in racks:
                return index
        return -1
