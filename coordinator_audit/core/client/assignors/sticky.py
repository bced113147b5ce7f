"""The `sticky` assignor (KIP-54, EAGER only): balance first, then keep as much of the previous
assignment as possible, which each member reports in its Subscription userData (V1: its last
assignment and generation). Follows StickyAssignor; the algorithms live in abstract_sticky."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from coordinator_audit.core.client.assignors.abstract_sticky import AbstractStickyAssignor, MemberData
from coordinator_audit.core.client.assignors.base import (
    DEFAULT_GENERATION,
    MemberAssignment,
    MemberSubscription,
    PartitionsInput,
    TopicPartition,
    partitions_of,
)
from coordinator_audit.core.consumer_protocol import (
    TopicPartitions,
    decode_sticky_user_data,
    encode_sticky_user_data,
)


class StickyAssignor(AbstractStickyAssignor):
    """Follows org.apache.kafka.clients.consumer.StickyAssignor. Keeps, as the Java class does, the
    partitions and generation of the member's last assignment (`on_assignment`) for its user data."""

    name = "sticky"

    def __init__(self) -> None:
        super().__init__()
        self.member_assignment: tuple[TopicPartition, ...] | None = None
        self.generation = DEFAULT_GENERATION

    def on_assignment(self, assignment: MemberAssignment | Sequence[PartitionsInput], generation: int) -> None:
        """Follows StickyAssignor#onAssignment."""
        partitions = assignment.partitions if isinstance(assignment, MemberAssignment) else assignment
        self.member_assignment = partitions_of(partitions, "assignment")
        self.generation = generation

    def subscription_user_data(self, topics: Iterable[str],
                               current_assignment: Sequence[tuple[str, int] | TopicPartitions] | None = None,
                               generation: int | None = None) -> bytes | None:
        """Follows StickyAssignor#subscriptionUserData: null before the first assignment, else V1 user
        data (last assignment + generation). The optional arguments stand in for the recorded state."""
        partitions = self.member_assignment if current_assignment is None else current_assignment
        if partitions is None:
            return None
        return encode_sticky_user_data(partitions, generation=self.generation if generation is None else generation)

    def member_data(self, subscription: MemberSubscription) -> MemberData:
        """Follows StickyAssignor#memberData: previous ownership and generation always come from the
        user data, since an EAGER member has revoked everything before joining."""
        decoded = decode_sticky_user_data(subscription.user_data)
        return MemberData(partitions_of(decoded.previous_assignment, "sticky user data"), decoded.generation)
