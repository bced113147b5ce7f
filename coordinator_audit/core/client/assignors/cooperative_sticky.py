"""The `cooperative-sticky` assignor (KIP-429): the sticky algorithms on the OwnedPartitions members
report, then every partition that would change owner is withheld for one generation so its old owner
can revoke it first. Follows CooperativeStickyAssignor."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from coordinator_audit.core.client.assignors.abstract_sticky import AbstractStickyAssignor, MemberData
from coordinator_audit.core.client.assignors.base import (
    DEFAULT_GENERATION,
    GroupInput,
    MemberAssignment,
    MemberSubscription,
    PartitionsInput,
    RebalanceProtocol,
    TopicPartition,
)
from coordinator_audit.core.consumer_protocol import (
    TopicPartitions,
    decode_cooperative_user_data,
    encode_cooperative_user_data,
)


class CooperativeStickyAssignor(AbstractStickyAssignor):
    """Follows org.apache.kafka.clients.consumer.CooperativeStickyAssignor (COOPERATIVE and EAGER)."""

    name = "cooperative-sticky"
    supported_protocols = (RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER)

    def __init__(self) -> None:
        super().__init__()
        self.generation = DEFAULT_GENERATION

    def on_assignment(self, assignment: MemberAssignment | Sequence[PartitionsInput], generation: int) -> None:
        """Follows CooperativeStickyAssignor#onAssignment: only the generation is kept."""
        self.generation = generation

    def subscription_user_data(self, topics: Iterable[str],
                               current_assignment: Sequence[tuple[str, int] | TopicPartitions] | None = None,
                               generation: int | None = None) -> bytes | None:
        """Follows CooperativeStickyAssignor#subscriptionUserData: the 4-byte generation (-1 before the
        first assignment); owned partitions travel in the Subscription itself."""
        return encode_cooperative_user_data(self.generation if generation is None else generation)

    def member_data(self, subscription: MemberSubscription) -> MemberData:
        """Follows CooperativeStickyAssignor#memberData: the Subscription's generationId when present
        (v2+), else the generation in the user data."""
        if subscription.generation_id >= 0:
            return MemberData(subscription.owned_partitions, subscription.generation_id)
        return MemberData(subscription.owned_partitions, decode_cooperative_user_data(subscription.user_data))

    def _assign_partitions(self, group: GroupInput) -> dict[str, list[TopicPartition]]:
        """Follows CooperativeStickyAssignor#assignPartitions and #adjustAssignment."""
        assignments = super()._assign_partitions(group)
        transferring = self.partitions_transferring_ownership
        if transferring is None:
            transferring = partitions_transferring_ownership(group, assignments)
        for tp, consumer in transferring.items():
            partitions = assignments[consumer]
            if tp in partitions:
                partitions.remove(tp)
        return assignments


def partitions_transferring_ownership(group: GroupInput,
                                      assignments: dict[str, list[TopicPartition]]) -> dict[TopicPartition, str]:
    """Follows CooperativeStickyAssignor#computePartitionsTransferringOwnership: partitions newly given
    to one member that some member reported owning and no longer gets (added ∩ revoked)."""
    added: dict[TopicPartition, str] = {}
    revoked: set[TopicPartition] = set()
    for consumer, assigned in assignments.items():
        owned = group.subscriptions[consumer].owned_partitions
        owned_set = set(owned)
        for tp in assigned:
            if tp not in owned_set:
                added[tp] = consumer
        assigned_set = set(assigned)
        revoked.update(tp for tp in owned if tp not in assigned_set)
    return {tp: c for tp, c in added.items() if tp in revoked}
