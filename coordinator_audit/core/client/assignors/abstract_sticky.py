"""The part of AbstractStickyAssignor shared by `sticky` and `cooperative-sticky`: reading each member's
previous ownership, resolving conflicting claims by generation, and choosing between the constrained
algorithm (all members subscribe to the same topics) and the general one."""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass

from coordinator_audit.core.client.assignors.base import (
    DEFAULT_GENERATION,
    ConsumerPartitionAssignor,
    GroupInput,
    MemberSubscription,
    TopicPartition,
)
from coordinator_audit.core.client.assignors.racks import RackInfo
from coordinator_audit.core.client.assignors.sticky_constrained import ConstrainedAssignmentBuilder
from coordinator_audit.core.client.assignors.sticky_general import GeneralAssignmentBuilder


@dataclass(frozen=True, slots=True)
class MemberData:
    """Follows AbstractStickyAssignor.MemberData: what a member claims to own, and from which generation
    (None when unknown). Java's optional rackId field is omitted: the algorithms never read it."""

    partitions: tuple[TopicPartition, ...]
    generation: int | None


class AbstractStickyAssignor(ConsumerPartitionAssignor):
    """Follows org.apache.kafka.clients.consumer.internals.AbstractStickyAssignor.

    Like the Java class, an instance remembers the highest generation it has ever seen in `assign`
    (`max_generation`, never reset), and `partitions_transferring_ownership` holds the moves found by
    the constrained algorithm in the last call (None after the general algorithm ran)."""

    def __init__(self) -> None:
        self.max_generation = DEFAULT_GENERATION
        self.partitions_transferring_ownership: dict[TopicPartition, str] | None = {}

    @abstractmethod
    def member_data(self, subscription: MemberSubscription) -> MemberData:
        """Follows AbstractStickyAssignor#memberData."""

    def _assign_partitions(self, group: GroupInput) -> dict[str, list[TopicPartition]]:
        """Follows AbstractStickyAssignor#assignPartitions."""
        owned: dict[str, list[TopicPartition]] = {}
        multiple_owners: set[TopicPartition] = set()
        rack_info = RackInfo(group)
        if self._all_subscriptions_equal(group, owned, multiple_owners):
            self.partitions_transferring_ownership = {}
            return ConstrainedAssignmentBuilder(group, rack_info, owned, multiple_owners,
                                                self.partitions_transferring_ownership).build()
        self.partitions_transferring_ownership = None
        return GeneralAssignmentBuilder(group, rack_info, owned, self).build()

    def _all_subscriptions_equal(self, group: GroupInput, owned: dict[str, list[TopicPartition]],
                                 multiple_owners: set[TopicPartition]) -> bool:
        """Follows AbstractStickyAssignor#allSubscriptionsEqual: tells whether every member subscribes to
        the same topics, and fills `owned` with each member's still-valid claims. Two claims on one
        partition: the higher generation keeps it; equal generations lose it both (`multiple_owners`).
        As in Java, the rival's generation is its Subscription generationId, not its member data's."""
        all_equal = True
        subscribed: set[str] = set()
        previous_owner: dict[TopicPartition, str] = {}
        for consumer, sub in group.subscriptions.items():
            if not subscribed:
                subscribed.update(sub.topics)
            elif all_equal and not (len(sub.topics) == len(subscribed) and subscribed.issuperset(sub.topics)):
                all_equal = False
            data = self.member_data(sub)
            generation = DEFAULT_GENERATION if data.generation is None else data.generation
            self.max_generation = max(self.max_generation, generation)
            mine: list[TopicPartition] = []
            owned[consumer] = mine
            for tp in data.partitions:
                if tp.topic not in group.partitions_per_topic:
                    continue
                other = previous_owner.get(tp)
                if other is None:
                    mine.append(tp)
                    previous_owner[tp] = consumer
                    continue
                other_generation = max(group.subscriptions[other].generation_id, DEFAULT_GENERATION)
                if generation == other_generation:
                    multiple_owners.add(tp)
                    _remove_first(owned[other], tp)
                    previous_owner[tp] = consumer
                elif generation > other_generation:
                    mine.append(tp)
                    _remove_first(owned[other], tp)
                    previous_owner[tp] = consumer
        return all_equal


def _remove_first(items: list[TopicPartition], tp: TopicPartition) -> None:
    """java.util.List#remove(Object): drops the first occurrence, if any."""
    if tp in items:
        items.remove(tp)
