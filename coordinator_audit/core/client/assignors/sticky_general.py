"""The sticky assignors' general algorithm, used when members subscribe to different topics.
Follows AbstractStickyAssignor.GeneralAssignmentBuilder and its PartitionMovements bookkeeping."""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import TYPE_CHECKING

from coordinator_audit.core.client.assignors.base import DEFAULT_GENERATION, GroupInput, TopicPartition
from coordinator_audit.core.client.assignors.jcollections import (
    JavaHashOrder,
    java_string_key,
    topic_partition_hash_set,
)
from coordinator_audit.core.client.assignors.racks import RackInfo
from coordinator_audit.core.errors import AssignorError

if TYPE_CHECKING:
    from coordinator_audit.core.client.assignors.abstract_sticky import AbstractStickyAssignor


class PartitionMovements:
    """Follows AbstractStickyAssignor.PartitionMovements: which partitions moved between which members
    in this rebalance, per topic, so a move can be undone rather than chained (stickiness)."""

    def __init__(self) -> None:
        self.by_topic: dict[str, dict[tuple[str, str], JavaHashOrder[tuple[str, int]]]] = {}
        self.movements: dict[TopicPartition, tuple[str, str]] = {}

    def _remove_record(self, tp: TopicPartition) -> tuple[str, str]:
        pair = self.movements.pop(tp)
        for_topic = self.by_topic[tp.topic]
        for_topic[pair].discard(tp)
        if not len(for_topic[pair]):
            del for_topic[pair]
        if not for_topic:
            del self.by_topic[tp.topic]
        return pair

    def _add_record(self, tp: TopicPartition, pair: tuple[str, str]) -> None:
        self.movements[tp] = pair
        for_topic = self.by_topic.setdefault(tp.topic, {})
        if pair not in for_topic:
            for_topic[pair] = topic_partition_hash_set()
        for_topic[pair].add(tp)

    def move_partition(self, tp: TopicPartition, old: str, new: str) -> None:
        """Follows PartitionMovements#movePartition: a partition moving back to where it started this
        rebalance leaves no record; a second move keeps the original source."""
        if tp in self.movements:
            src, _dst = self._remove_record(tp)
            if src != new:
                self._add_record(tp, (src, new))
        else:
            self._add_record(tp, (old, new))

    def actual_partition_to_move(self, tp: TopicPartition, old: str, new: str) -> TopicPartition:
        """Follows PartitionMovements#getTheActualPartitionToBeMoved: if some partition of the same topic
        already moved new -> old, move that one back instead (the first of its HashSet)."""
        for_topic = self.by_topic.get(tp.topic)
        if for_topic is None:
            return tp
        if tp in self.movements:
            old = self.movements[tp][0]
        reverse = for_topic.get((new, old))
        if reverse is None:
            return tp
        first = reverse.first()
        return TopicPartition(first[0], first[1])


class _SortedMembers:
    """A TreeSet<String> ordered by SubscriptionComparator: assignment size, then member id (Java order).
    Callers remove a member before its assignment changes and add it back after, as the Java code does."""

    def __init__(self, assignment: dict[str, list[TopicPartition]]) -> None:
        self._assignment = assignment
        self._keys: list[tuple[int, bytes, str]] = []

    def _key(self, member: str) -> tuple[int, bytes, str]:
        partitions = self._assignment.get(member)
        if partitions is None:
            raise AssignorError(f"member {member!r} has no current assignment",
                                java_exception="NullPointerException")
        return len(partitions), java_string_key(member), member

    def add(self, member: str) -> None:
        key = self._key(member)
        i = bisect.bisect_left(self._keys, key)
        if i == len(self._keys) or self._keys[i][:2] != key[:2]:
            self._keys.insert(i, key)

    def remove(self, member: str) -> None:
        key = self._key(member)
        i = bisect.bisect_left(self._keys, key)
        if i < len(self._keys) and self._keys[i][:2] == key[:2]:
            del self._keys[i]

    def first(self) -> str:
        if not self._keys:
            raise AssignorError("no members left to balance", java_exception="NoSuchElementException")
        return self._keys[0][2]

    def last(self) -> str:
        if not self._keys:
            raise AssignorError("no members left to balance", java_exception="NoSuchElementException")
        return self._keys[-1][2]

    def __iter__(self) -> Iterator[str]:
        return (k[2] for k in list(self._keys))


class GeneralAssignmentBuilder:
    """Follows AbstractStickyAssignor.GeneralAssignmentBuilder:
    1. keep every still-valid owned partition (rack-matching ones only, when rack-aware);
    2. hand each unassigned partition to the least-loaded eligible member (on a matching rack first);
    3. move partitions from more- to less-loaded members until balanced, preferring to return a
       partition to its previous owner, and revert if the result is no better balanced.
    """

    def __init__(self, group: GroupInput, rack_info: RackInfo, owned: dict[str, list[TopicPartition]],
                 assignor: AbstractStickyAssignor) -> None:
        self.assignor = assignor
        self.partitions_per_topic = group.partitions_per_topic
        self.subscriptions = group.subscriptions
        self.rack_info = rack_info
        self.current_assignment = owned
        self.total_partitions = sum(self.partitions_per_topic.values())
        self.topic_consumers: dict[str, list[str]] = {t: [] for t in self.partitions_per_topic}
        self.consumer_topics: dict[str, list[str]] = {}
        for consumer, sub in self.subscriptions.items():
            topics = [t for t in sub.topics if t in self.partitions_per_topic]
            self.consumer_topics[consumer] = topics
            for t in topics:
                self.topic_consumers[t].append(consumer)
            owned.setdefault(consumer, [])
        self.partition_consumer: dict[TopicPartition, str] = {}
        for consumer, partitions in self.current_assignment.items():
            for tp in partitions:
                self.partition_consumer[tp] = consumer
        topics = sorted(self.topic_consumers, key=lambda t: (len(self.topic_consumers[t]), java_string_key(t)))
        self.sorted_all_partitions = [TopicPartition(t, p) for t in topics for p in range(self.partitions_per_topic[t])]
        self.sorted_members = _SortedMembers(self.current_assignment)
        self.revocation_required = False
        self.movements = PartitionMovements()

    def build(self) -> dict[str, list[TopicPartition]]:
        """Follows GeneralAssignmentBuilder#build."""
        prev_assignment: dict[TopicPartition, tuple[str, int]] = {}
        self._prepopulate_current_assignments(prev_assignment)
        assigned = self._assign_owned_partitions()
        unassigned = self._unassigned_partitions(assigned)
        for consumer in self.current_assignment:
            self.sorted_members.add(consumer)
        self._balance(prev_assignment, unassigned)
        return self.current_assignment

    def _assign_owned_partitions(self) -> list[TopicPartition]:
        """Follows GeneralAssignmentBuilder#assignOwnedPartitions."""
        assigned: list[TopicPartition] = []
        for consumer in list(self.current_assignment):
            partitions = self.current_assignment[consumer]
            sub = self.subscriptions.get(consumer)
            if sub is None:
                for tp in partitions:
                    self.partition_consumer.pop(tp, None)
                del self.current_assignment[consumer]
                continue
            kept: list[TopicPartition] = []
            for tp in partitions:
                if tp.topic not in self.topic_consumers:
                    self.partition_consumer.pop(tp, None)
                elif tp.topic not in sub.topics or self.rack_info.racks_mismatch(consumer, tp):
                    self.revocation_required = True
                else:
                    kept.append(tp)
                    assigned.append(tp)
            partitions[:] = kept
        return assigned

    def _unassigned_partitions(self, assigned: list[TopicPartition]) -> list[TopicPartition]:
        """Follows GeneralAssignmentBuilder#getUnassignedPartitions (returns `sorted_all_partitions`
        itself when nothing is assigned, as Java does)."""
        if not assigned:
            return self.sorted_all_partitions
        tc = self.topic_consumers
        assigned.sort(key=lambda tp: (len(tc[tp.topic]), java_string_key(tp.topic), tp.partition))
        unassigned: list[TopicPartition] = []
        add_directly = False
        it = iter(assigned)
        nxt = next(it)
        for tp in self.sorted_all_partitions:
            if add_directly or nxt != tp:
                unassigned.append(tp)
            else:
                following = next(it, None)
                if following is None:
                    add_directly = True
                else:
                    nxt = following
        return unassigned

    def _prepopulate_current_assignments(self, prev: dict[TopicPartition, tuple[str, int]]) -> None:
        """Follows GeneralAssignmentBuilder#prepopulateCurrentAssignments: remembers, per partition, the
        older-generation owner with the highest generation (first one wins ties)."""
        max_generation = self.assignor.max_generation
        for consumer, sub in self.subscriptions.items():
            data = self.assignor.member_data(sub)
            if data.generation is not None and data.generation < max_generation:
                generation = data.generation
            elif data.generation is None and max_generation > DEFAULT_GENERATION:
                generation = DEFAULT_GENERATION
            else:
                continue
            for tp in data.partitions:
                if tp not in prev or generation > prev[tp][1]:
                    prev[tp] = (consumer, generation)

    def _size(self, consumer: str | None) -> int:
        partitions = self.current_assignment.get(consumer) if consumer is not None else None
        if partitions is None:
            raise AssignorError(f"no current assignment for member {consumer!r}",
                                java_exception="NullPointerException")
        return len(partitions)

    def _max_assignment_size(self, topics: list[str]) -> int:
        """Follows GeneralAssignmentBuilder#getMaxAssignmentSize."""
        if len(topics) == len(self.partitions_per_topic):
            return self.total_partitions
        return sum(self.partitions_per_topic[t] for t in topics)

    def _is_balanced(self) -> bool:
        """Follows GeneralAssignmentBuilder#isBalanced: no member could take a partition of its topics
        from a member holding at least two more. Same answer as Java's scan, found through each
        topic's partitions sorted by their owner's load."""
        current = self.current_assignment
        low = self._size(self.sorted_members.first())
        high = self._size(self.sorted_members.last())
        if low >= high - 1:
            return True
        owner: dict[TopicPartition, str] = {}
        for consumer, partitions in current.items():
            for tp in partitions:
                owner[tp] = consumer
        by_load: dict[str, list[tuple[int, TopicPartition]]] = {}
        for consumer in self.sorted_members:
            partitions = current[consumer]
            count = len(partitions)
            topics = self.consumer_topics[consumer]
            if count == self._max_assignment_size(topics):
                continue
            mine = set(partitions)
            for topic in dict.fromkeys(topics):
                loads = by_load.get(topic)
                if loads is None:
                    loads = []
                    for p in range(self.partitions_per_topic[topic]):
                        tp = TopicPartition(topic, p)
                        holder = owner.get(tp)
                        loads.append((self._size(holder), tp))
                    loads.sort(key=lambda x: -x[0])
                    by_load[topic] = loads
                for load, tp in loads:
                    if load <= count + 1:
                        break
                    if tp not in mine:
                        return False
        return True

    @staticmethod
    def _balance_score(assignment: dict[str, list[TopicPartition]]) -> int:
        """Follows GeneralAssignmentBuilder#getBalanceScore: sum of |size difference| over member pairs."""
        sizes = sorted(len(p) for p in assignment.values())
        return sum(s * (2 * i - len(sizes) + 1) for i, s in enumerate(sizes))

    def _maybe_assign(self, partitions: list[TopicPartition], rack_info: RackInfo | None, remove: bool) -> None:
        """Follows GeneralAssignmentBuilder#maybeAssign/#maybeAssignPartition: each partition to the
        least-loaded member subscribed to its topic (and on a matching rack when `rack_info` is given)."""
        left: list[TopicPartition] = []
        for tp in partitions:
            done = False
            if self.topic_consumers[tp.topic]:
                for consumer in self.sorted_members:
                    if tp.topic in self.consumer_topics[consumer] and (
                            rack_info is None or not rack_info.racks_mismatch(consumer, tp)):
                        self.sorted_members.remove(consumer)
                        self.current_assignment[consumer].append(tp)
                        self.partition_consumer[tp] = consumer
                        self.sorted_members.add(consumer)
                        done = True
                        break
            if not (done and remove):
                left.append(tp)
        if remove:
            partitions[:] = left

    def _can_consumer_participate(self, consumer: str) -> bool:
        """Follows GeneralAssignmentBuilder#canConsumerParticipateInReassignment."""
        partitions = self.current_assignment[consumer]
        if len(partitions) < self._max_assignment_size(self.consumer_topics[consumer]):
            return True
        return any(len(self.topic_consumers[tp.topic]) >= 2 for tp in partitions)

    def _balance(self, prev: dict[TopicPartition, tuple[str, int]], unassigned: list[TopicPartition]) -> None:
        """Follows GeneralAssignmentBuilder#balance."""
        current = self.current_assignment
        initializing = not current[self.sorted_members.last()]
        to_assign = unassigned
        if self.rack_info.consumer_racks:
            to_assign = list(unassigned)
            self._maybe_assign(to_assign, self.rack_info, True)
        self._maybe_assign(to_assign, None, False)

        fixed_topics = {t for t, consumers in self.topic_consumers.items() if len(consumers) < 2}
        self.sorted_all_partitions[:] = [tp for tp in self.sorted_all_partitions if tp.topic not in fixed_topics]
        unassigned[:] = [tp for tp in unassigned if tp.topic not in fixed_topics]

        fixed: dict[str, list[TopicPartition]] = {}
        for consumer in self.consumer_topics:
            if not self._can_consumer_participate(consumer):
                self.sorted_members.remove(consumer)
                fixed[consumer] = current.pop(consumer)

        before = {c: list(p) for c, p in current.items()}
        before_owners = dict(self.partition_consumer)
        if not self.revocation_required:
            self._perform_reassignments(unassigned, prev)
        performed = self._perform_reassignments(self.sorted_all_partitions, prev)
        if not initializing and performed and self._balance_score(current) >= self._balance_score(before):
            current.clear()
            current.update(before)
            self.partition_consumer = before_owners
        for consumer, partitions in fixed.items():
            current[consumer] = partitions
            self.sorted_members.add(consumer)

    def _perform_reassignments(self, partitions: list[TopicPartition],
                               prev: dict[TopicPartition, tuple[str, int]]) -> bool:
        """Follows GeneralAssignmentBuilder#performReassignments."""
        performed = False
        modified = True
        while modified:
            modified = False
            for tp in partitions:
                if self._is_balanced():
                    break
                consumer = self.partition_consumer.get(tp)
                if tp in prev and self._size(consumer) > self._size(prev[tp][0]) + 1:
                    self._reassign(tp, prev[tp][0])
                    performed = modified = True
                    continue
                if self._has_lighter_candidate(tp, consumer):
                    self._reassign(tp, self._least_loaded_for(tp))
                    performed = modified = True
        return performed

    def _has_lighter_candidate(self, tp: TopicPartition, consumer: str | None) -> bool:
        """The two searches of performReassignments: does a member subscribed to the partition's topic
        hold at least two partitions fewer than its owner? Java first looks among members on a matching
        rack, then among all; both searches lead to the same move (the least-loaded subscribed member),
        and a rack-matching candidate is also a candidate, so one search over all gives the same result."""
        size = self._size(consumer)
        return any(size > self._size(other) + 1 for other in self.topic_consumers[tp.topic])

    def _least_loaded_for(self, tp: TopicPartition) -> str:
        """Follows GeneralAssignmentBuilder#reassignPartition(partition): the first member of the sorted
        set subscribed to the partition's topic."""
        for consumer in self.sorted_members:
            if tp.topic in self.consumer_topics[consumer]:
                return consumer
        raise AssignorError(f"no member can take {tp}", java_exception="NullPointerException")

    def _reassign(self, tp: TopicPartition, new_consumer: str) -> None:
        """Follows GeneralAssignmentBuilder#reassignPartition(partition, newConsumer) and
        #processPartitionMovement."""
        consumer = self.partition_consumer[tp]
        moved = self.movements.actual_partition_to_move(tp, consumer, new_consumer)
        old = self.partition_consumer[moved]
        self.sorted_members.remove(old)
        self.sorted_members.remove(new_consumer)
        self.movements.move_partition(moved, old, new_consumer)
        self.current_assignment[old].remove(moved)
        self.current_assignment[new_consumer].append(moved)
        self.partition_consumer[moved] = new_consumer
        self.sorted_members.add(new_consumer)
        self.sorted_members.add(old)
