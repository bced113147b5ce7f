"""Kafka's four built-in consumer partition assignors, ported from the Java client so that the same
input gives the same assignment (ordering and ties included): `range`, `roundrobin`, `sticky` and
`cooperative-sticky`, with KIP-881 rack awareness."""

from __future__ import annotations

from coordinator_audit.core.client.assignors.abstract_sticky import AbstractStickyAssignor, MemberData
from coordinator_audit.core.client.assignors.base import (
    DEFAULT_GENERATION,
    ConsumerPartitionAssignor,
    MemberAssignment,
    MemberSubscription,
    RebalanceProtocol,
    TopicPartition,
)
from coordinator_audit.core.client.assignors.cooperative_sticky import CooperativeStickyAssignor
from coordinator_audit.core.client.assignors.range import RangeAssignor
from coordinator_audit.core.client.assignors.roundrobin import RoundRobinAssignor
from coordinator_audit.core.client.assignors.sticky import StickyAssignor

ASSIGNORS: dict[str, type[ConsumerPartitionAssignor]] = {
    cls.name: cls for cls in (RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor)
}


def assignor_for(name: str) -> ConsumerPartitionAssignor:
    """A new instance of the built-in assignor called `name` (as in partition.assignment.strategy)."""
    try:
        return ASSIGNORS[name]()
    except KeyError:
        from coordinator_audit.core.errors import ConfigError

        raise ConfigError(f"unknown assignor {name!r}; built-in ones are {sorted(ASSIGNORS)}") from None


__all__ = [
    "ASSIGNORS",
    "DEFAULT_GENERATION",
    "AbstractStickyAssignor",
    "ConsumerPartitionAssignor",
    "CooperativeStickyAssignor",
    "MemberAssignment",
    "MemberData",
    "MemberSubscription",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "StickyAssignor",
    "TopicPartition",
    "assignor_for",
]
