"""The sticky assignors' constrained algorithm, used when every member subscribes to the same topics.
Follows AbstractStickyAssignor.ConstrainedAssignmentBuilder."""

from __future__ import annotations

from coordinator_audit.core.client.assignors.base import GroupInput, TopicPartition
from coordinator_audit.core.client.assignors.jcollections import (
    JavaListIterator,
    java_string_key,
    topic_partition_key,
)
from coordinator_audit.core.client.assignors.racks import RackInfo
from coordinator_audit.core.errors import AssignorError


def _partition_then_topic(tp: TopicPartition) -> tuple[int, bytes]:
    return tp.partition, java_string_key(tp.topic)


class ConstrainedAssignmentBuilder:
    """Follows AbstractStickyAssignor.ConstrainedAssignmentBuilder.

    minQuota = floor(P/C) and maxQuota = ceil(P/C); exactly P mod C members end with maxQuota.
    1. each member keeps up to its quota of what it owned (sorted by partition, then topic);
    2. with racks, unassigned partitions go round-robin to unfilled members on a matching rack;
    3. the rest go round-robin to the unfilled members (sorted by member id).
    Every partition given to a new owner while another member still claimed it is recorded in
    `transferring` (what cooperative-sticky withholds for one generation).
    """

    def __init__(self, group: GroupInput, rack_info: RackInfo, owned: dict[str, list[TopicPartition]],
                 multiple_owners: set[TopicPartition], transferring: dict[TopicPartition, str]) -> None:
        self.partitions_per_topic = group.partitions_per_topic
        self.rack_info = rack_info
        self.current_assignment = owned
        self.multiple_owners = multiple_owners
        self.transferring = transferring
        self.maybe_revoked: dict[TopicPartition, str] = {}
        self.unfilled_under_min: list[str] = []
        self.unfilled_exactly_min: list[str] = []
        total = sum(self.partitions_per_topic.values())
        consumers = len(owned)
        if consumers == 0:
            raise AssignorError("sticky assignment of a group without members (division by zero)",
                                java_exception="ArithmeticException")
        self.total_partitions = total
        self.min_quota = total // consumers
        self.max_quota = -(-total // consumers)
        self.expected_over_min = total % consumers
        self.current_over_min = 0
        self.assignment: dict[str, list[TopicPartition]] = {c: [] for c in owned}
        self.assigned_partitions: list[TopicPartition] = []

    def build(self) -> dict[str, list[TopicPartition]]:
        """Follows ConstrainedAssignmentBuilder#build."""
        self._assign_owned_partitions()
        unassigned = self._unassigned_partitions(self.assigned_partitions)
        self.unfilled_under_min.sort(key=java_string_key)
        self.unfilled_exactly_min.sort(key=java_string_key)
        unassigned = self.rack_info.sort_partitions_by_rack_consumers(unassigned)
        self._assign_rack_aware_round_robin(unassigned)
        self._assign_round_robin(unassigned)
        self._verify_unfilled_members()
        return self.assignment

    def _assign_owned_partitions(self) -> None:
        """Follows ConstrainedAssignmentBuilder#assignOwnedPartitions (members in HashMap order)."""
        for consumer, claimed in self.current_assignment.items():
            kept: list[TopicPartition] = []
            for tp in claimed:
                if self.rack_info.racks_mismatch(consumer, tp):
                    self.maybe_revoked[tp] = consumer
                else:
                    kept.append(tp)
            kept.sort(key=_partition_then_topic)
            for tp in self.multiple_owners:
                if tp in kept:
                    kept.remove(tp)
            target = self.assignment[consumer]
            if len(kept) < self.min_quota:
                target.extend(kept)
                self.assigned_partitions.extend(kept)
                self.unfilled_under_min.append(consumer)
            elif len(kept) >= self.max_quota and self.current_over_min < self.expected_over_min:
                self.current_over_min += 1
                if self.current_over_min == self.expected_over_min:
                    self.unfilled_exactly_min.clear()
                target.extend(kept[:self.max_quota])
                self.assigned_partitions.extend(kept[:self.max_quota])
                for tp in kept[self.max_quota:]:
                    self.maybe_revoked[tp] = consumer
            else:
                target.extend(kept[:self.min_quota])
                self.assigned_partitions.extend(kept[:self.min_quota])
                for tp in kept[self.min_quota:]:
                    self.maybe_revoked[tp] = consumer
                if self.current_over_min < self.expected_over_min:
                    self.unfilled_exactly_min.append(consumer)

    def _assign_rack_aware_round_robin(self, unassigned: list[TopicPartition]) -> None:
        """Follows ConstrainedAssignmentBuilder#assignRackAwareRoundRobin (removes what it assigns)."""
        if not self.rack_info.consumer_racks:
            return
        under, exact = self.unfilled_under_min, self.unfilled_exactly_min
        next_index = 0
        remaining: list[TopicPartition] = []
        for tp in unassigned:
            consumer: str | None = None
            index = self.rack_info.next_rack_consumer(tp, under, next_index)
            if index >= 0:
                consumer = under[index]
                count = len(self.assignment[consumer]) + 1
                if count >= self.min_quota:
                    under.remove(consumer)
                    if count < self.max_quota and self.current_over_min < self.expected_over_min:
                        exact.append(consumer)
                else:
                    index += 1
                next_index = index % len(under) if under else 0
            elif exact:
                first = self.rack_info.next_rack_consumer(tp, exact, 0)
                if first >= 0:
                    consumer = exact[first]
                    if len(self.assignment[consumer]) + 1 == self.max_quota:
                        del exact[first]
                        self.current_over_min += 1
                        if self.current_over_min == self.expected_over_min:
                            exact.clear()
            if consumer is not None:
                self._assign_new_partition(tp, consumer)
            else:
                remaining.append(tp)
        unassigned[:] = remaining

    def _assign_round_robin(self, unassigned: list[TopicPartition]) -> None:
        """Follows ConstrainedAssignmentBuilder#assignRoundRobin."""
        under, exact = self.unfilled_under_min, self.unfilled_exactly_min
        it = JavaListIterator(under)
        for tp in unassigned:
            if it.has_next():
                consumer = it.next()
            elif not under and not exact:
                raise AssignorError(f"no more unfilled consumers to be assigned {tp}",
                                    java_exception="IllegalStateException")
            elif not under:
                consumer = exact.pop(0)
            else:
                it = JavaListIterator(under)
                consumer = it.next()
            count = self._assign_new_partition(tp, consumer)
            if count == self.min_quota:
                it.remove()
                exact.append(consumer)
            elif count == self.max_quota:
                self.current_over_min += 1

    def _assign_new_partition(self, tp: TopicPartition, consumer: str) -> int:
        """Follows ConstrainedAssignmentBuilder#assignNewPartition."""
        target = self.assignment[consumer]
        target.append(tp)
        previous = self.maybe_revoked.get(tp)
        if (previous is not None and previous != consumer) or tp in self.multiple_owners:
            self.transferring[tp] = consumer
        return len(target)

    def _verify_unfilled_members(self) -> None:
        """Follows ConstrainedAssignmentBuilder#verifyUnfilledMembers."""
        if not self.unfilled_under_min:
            return
        if self.current_over_min != self.expected_over_min:
            raise AssignorError(
                f"{self.current_over_min} members above minQuota, {self.expected_over_min} expected, and no "
                f"partitions left for {self.unfilled_under_min}", java_exception="IllegalStateException")
        for member in self.unfilled_under_min:
            if len(self.assignment[member]) != self.min_quota:
                raise AssignorError(f"consumer {member!r} does not reach minQuota {self.min_quota}",
                                    java_exception="IllegalStateException")

    def _unassigned_partitions(self, assigned: list[TopicPartition]) -> list[TopicPartition]:
        """Follows ConstrainedAssignmentBuilder#getUnassignedPartitions: every partition in (topic,
        partition) order minus `assigned`, by the same merge walk as Java (sorts `assigned` in place)."""
        topics = sorted(self.partitions_per_topic, key=java_string_key)
        if not assigned:
            return [TopicPartition(t, p) for t in topics for p in range(self.partitions_per_topic[t])]
        assigned.sort(key=topic_partition_key)
        unassigned: list[TopicPartition] = []
        add_directly = False
        it = iter(assigned)
        nxt = next(it)
        for topic in topics:
            for p in range(self.partitions_per_topic[topic]):
                if add_directly or not (nxt.topic == topic and nxt.partition == p):
                    unassigned.append(TopicPartition(topic, p))
                else:
                    following = next(it, None)
                    if following is None:
                        add_directly = True
                    else:
                        nxt = following
        return unassigned
