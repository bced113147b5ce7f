"""The `roundrobin` assignor: every subscribed partition, topic by topic in name order, dealt to the
members in MemberInfo order, skipping members not subscribed to the partition's topic. Follows
RoundRobinAssignor."""

from __future__ import annotations

from coordinator_audit.core.client.assignors.base import (
    ConsumerPartitionAssignor,
    GroupInput,
    MemberInfo,
    TopicPartition,
    sorted_members,
)
from coordinator_audit.core.client.assignors.jcollections import java_string_key
from coordinator_audit.core.errors import AssignorError


class RoundRobinAssignor(ConsumerPartitionAssignor):
    """Follows org.apache.kafka.clients.consumer.RoundRobinAssignor (EAGER only, no user data)."""

    name = "roundrobin"

    def _assign_partitions(self, group: GroupInput) -> dict[str, list[TopicPartition]]:
        """Follows RoundRobinAssignor#assign(partitionsPerTopic, subscriptions)."""
        subs = group.subscriptions
        if not subs:
            raise AssignorError("roundrobin needs at least one member (CircularIterator over an empty list)",
                                java_exception="IllegalArgumentException")
        assignment: dict[str, list[TopicPartition]] = {m: [] for m in subs}
        members = sorted_members(MemberInfo(m, s.group_instance_id) for m, s in subs.items())
        topics = sorted({t for s in subs.values() for t in s.topics}, key=java_string_key)
        subscribed = {m: set(s.topics) for m, s in subs.items()}
        # CircularIterator: `nxt` is the index peek() would return.
        nxt = 0
        for topic in topics:
            for p in range(group.partitions_per_topic.get(topic, 0)):
                while topic not in subscribed[members[nxt].member_id]:
                    nxt = (nxt + 1) % len(members)
                assignment[members[nxt].member_id].append(TopicPartition(topic, p))
                nxt = (nxt + 1) % len(members)
        return assignment
