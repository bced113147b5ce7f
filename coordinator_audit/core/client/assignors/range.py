"""The `range` assignor: per topic, contiguous ranges of partitions handed to the topic's members in
MemberInfo order (static members by instance id first). Follows RangeAssignor, including its
KIP-881 rack-matching pass."""

from __future__ import annotations

from collections.abc import Callable

from coordinator_audit.core.client.assignors.base import (
    ConsumerPartitionAssignor,
    GroupInput,
    MemberInfo,
    TopicPartition,
    sorted_members,
)
from coordinator_audit.core.client.assignors.jcollections import topic_partition_key
from coordinator_audit.core.client.assignors.racks import use_rack_aware_assignment


def consumer_racks(group: GroupInput) -> dict[str, str]:
    """Follows RangeAssignor#consumerRacks: members with a non-empty rack id."""
    return {m: s.rack_id for m, s in group.subscriptions.items() if s.rack_id}


class _TopicAssignmentState:
    """Follows RangeAssignor.TopicAssignmentState: one topic's members, quotas and unassigned partitions."""

    def __init__(self, topic: str, num_partitions: int, members: list[MemberInfo], racks: dict[str, str],
                 group: GroupInput) -> None:
        self.topic = topic
        self.consumers: dict[str, str | None] = {}
        for info in sorted_members(members):
            self.consumers.setdefault(info.member_id, racks.get(info.member_id))
        self.unassigned = [TopicPartition(topic, p) for p in range(num_partitions)]
        self.num_assigned = dict.fromkeys(self.consumers, 0)
        n = len(self.consumers)
        self.num_per_consumer = num_partitions // n if n else 0
        self.remaining_with_extra = num_partitions % n if n else 0
        all_consumer_racks = {racks[m.member_id] for m in members if m.member_id in racks}
        self.partition_racks: dict[TopicPartition, frozenset[str]] = {}
        all_partition_racks: set[str] = set()
        if all_consumer_racks:
            for tp in self.unassigned:
                self.partition_racks[tp] = group.racks_of(tp)
                all_partition_racks |= self.partition_racks[tp]
        self.needs_rack_aware = use_rack_aware_assignment(all_consumer_racks, all_partition_racks,
                                                          self.partition_racks)

    def racks_match(self, consumer: str, tp: TopicPartition) -> bool:
        rack = self.consumers[consumer]
        return rack is None or rack in self.partition_racks.get(tp, frozenset())

    def max_assignable(self, consumer: str) -> int:
        extra = 1 if self.remaining_with_extra > 0 else 0
        return max(0, self.num_per_consumer + extra - self.num_assigned[consumer])

    def on_assigned(self, consumer: str, partitions: list[TopicPartition]) -> None:
        self.num_assigned[consumer] += len(partitions)
        if self.num_assigned[consumer] > self.num_per_consumer:
            self.remaining_with_extra -= 1
        gone = set(partitions)
        self.unassigned = [tp for tp in self.unassigned if tp not in gone]


class RangeAssignor(ConsumerPartitionAssignor):
    """Follows org.apache.kafka.clients.consumer.RangeAssignor (EAGER only, no user data)."""

    name = "range"

    def _assign_partitions(self, group: GroupInput) -> dict[str, list[TopicPartition]]:
        """Follows RangeAssignor#assignPartitions."""
        members_per_topic: dict[str, list[MemberInfo]] = {}
        for member, sub in group.subscriptions.items():
            info = MemberInfo(member, sub.group_instance_id, sub.rack_id)
            for topic in sub.topics:
                members_per_topic.setdefault(topic, []).append(info)
        racks = consumer_racks(group)
        states = [_TopicAssignmentState(topic, n, members_per_topic.get(topic, []), racks, group)
                  for topic, n in group.partitions_per_topic.items() if n > 0]
        assignment: dict[str, list[TopicPartition]] = {m: [] for m in group.subscriptions}
        use_rack_aware = any(s.needs_rack_aware for s in states)
        if use_rack_aware:
            self._assign_with_rack_matching(states, assignment)
        for state in states:
            self._assign_ranges(state, lambda c, tp: True, assignment)
        if use_rack_aware:
            for partitions in assignment.values():
                partitions.sort(key=topic_partition_key)
        return assignment

    @staticmethod
    def _assign_ranges(state: _TopicAssignmentState, may_assign: Callable[[str, TopicPartition], bool],
                       assignment: dict[str, list[TopicPartition]]) -> None:
        """Follows RangeAssignor#assignRanges."""
        for consumer in state.consumers:
            if not state.unassigned:
                break
            limit = state.max_assignable(consumer)
            chosen = [tp for tp in state.unassigned if may_assign(consumer, tp)][:limit]
            if chosen:
                assignment[consumer].extend(chosen)
                state.on_assigned(consumer, chosen)

    def _assign_with_rack_matching(self, states: list[_TopicAssignmentState],
                                   assignment: dict[str, list[TopicPartition]]) -> None:
        """Follows RangeAssignor#assignWithRackMatching: topics with the same members and the same
        number of partitions are co-partitioned and matched together. Topics are independent and the
        result is sorted afterwards, so the order the groups are visited in does not matter."""
        by_consumers: dict[frozenset[tuple[str, str | None]], list[_TopicAssignmentState]] = {}
        for state in states:
            by_consumers.setdefault(frozenset(state.consumers.items()), []).append(state)
        for same_consumers in by_consumers.values():
            by_count: dict[int, list[_TopicAssignmentState]] = {}
            for state in same_consumers:
                by_count.setdefault(len(state.partition_racks), []).append(state)
            for num_partitions, co_partitioned in by_count.items():
                if len(co_partitioned) > 1:
                    self._assign_co_partitioned(list(co_partitioned[0].consumers), num_partitions,
                                                co_partitioned, assignment)
                elif co_partitioned[0].needs_rack_aware:
                    state = co_partitioned[0]
                    self._assign_ranges(state, state.racks_match, assignment)

    @staticmethod
    def _assign_co_partitioned(consumers: list[str], num_partitions: int, states: list[_TopicAssignmentState],
                               assignment: dict[str, list[TopicPartition]]) -> None:
        """Follows RangeAssignor#assignCoPartitionedWithRackMatching."""
        remaining = list(consumers)
        for p in range(num_partitions):
            match = next((c for c in remaining
                          if all(s.racks_match(c, TopicPartition(s.topic, p)) and s.max_assignable(c) > 0
                                 for s in states)), None)
            if match is None:
                continue
            for s in states:
                tp = TopicPartition(s.topic, p)
                assignment[match].append(tp)
                s.on_assigned(match, [tp])
            if not any(s.max_assignable(match) > 0 for s in states):
                remaining.remove(match)
                if not remaining:
                    break
