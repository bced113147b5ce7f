"""The data the built-in assignors exchange and the interface they share, after Kafka's
ConsumerPartitionAssignor and AbstractPartitionAssignor (clients/.../consumer).

Ordering contract: `subscriptions` is read in mapping order as the insertion order of the Java
leader's `HashMap<String, Subscription>`, which ConsumerCoordinator#onLeaderElected fills in
JoinGroup-response member order. The assignors then iterate that map the way a JVM would, so the
same inputs in the same order give the Java client's exact assignment, ties included.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol, TypeAlias

from coordinator_audit.core.client.assignors.jcollections import java_string_key, string_hash_order
from coordinator_audit.core.errors import AssignorError

if TYPE_CHECKING:
    from coordinator_audit.core.consumer_protocol import TopicPartitions

DEFAULT_GENERATION = -1


class RebalanceProtocol(IntEnum):
    """Follows ConsumerPartitionAssignor.RebalanceProtocol (ids as sent on the wire)."""

    EAGER = 0
    COOPERATIVE = 1


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class GroupedPartitions(Protocol):
    """One topic's partitions given together (the codec's `TopicPartitions` has this shape)."""

    @property
    def topic(self) -> str: ...

    @property
    def partitions(self) -> Iterable[int]: ...


PartitionsInput: TypeAlias = tuple[str, int] | GroupedPartitions
"""A partition as a (topic, partition) pair, or one topic's partitions grouped: what `partitions_of` reads."""


def partitions_of(items: Iterable[Any], what: str) -> tuple[TopicPartition, ...]:
    """Accepts (topic, partition) pairs or grouped entries with `.topic` and `.partitions`
    (the codec's TopicPartitions) and flattens them, keeping their order.

    `items` should hold `PartitionsInput`; it is typed `Any` because this is where loosely typed input
    is validated (any two-item iterable is read as a pair), with an `AssignorError` for the rest."""
    out: list[TopicPartition] = []
    for item in items:
        if hasattr(item, "partitions") and hasattr(item, "topic"):
            out.extend(TopicPartition(item.topic, p) for p in item.partitions)
            continue
        try:
            topic, partition = item
        except (TypeError, ValueError):
            raise AssignorError(f"{what}: {item!r} is neither (topic, partition) nor TopicPartitions",
                                java_exception="IllegalArgumentException") from None
        out.append(TopicPartition(topic, partition))
    for tp in out:
        if not isinstance(tp.topic, str) or not isinstance(tp.partition, int) or isinstance(tp.partition, bool):
            raise AssignorError(f"{what}: bad topic-partition {tp!r}", java_exception="IllegalArgumentException")
    return tuple(out)


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """Follows ConsumerPartitionAssignor.Subscription plus the group.instance.id the leader learns from
    the JoinGroup member list. `generation_id` < 0 means absent (Subscription v0/v1)."""

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = DEFAULT_GENERATION
    group_instance_id: str | None = None
    rack_id: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.topics, str):
            raise AssignorError(f"subscription topics must be a sequence of names, got the string {self.topics!r}",
                                java_exception="IllegalArgumentException")
        topics = tuple(self.topics)
        if not all(isinstance(t, str) for t in topics):
            raise AssignorError(f"subscription topics must be strings: {topics!r}",
                                java_exception="IllegalArgumentException")
        object.__setattr__(self, "topics", topics)
        if self.user_data is not None and not isinstance(self.user_data, bytes):
            object.__setattr__(self, "user_data", bytes(self.user_data))
        object.__setattr__(self, "owned_partitions", partitions_of(self.owned_partitions, "owned_partitions"))


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    """Follows ConsumerPartitionAssignor.Assignment: partitions in the order the assignor produced them."""

    partitions: tuple[TopicPartition, ...]
    user_data: bytes | None = None


@dataclass(frozen=True, slots=True)
class MemberInfo:
    """Follows AbstractPartitionAssignor.MemberInfo; `sort_key` is its compareTo: members with a
    group.instance.id first (by instance id), then the others by member id, Java String order."""

    member_id: str
    group_instance_id: str | None = None
    rack_id: str | None = None
    sort_key: tuple[int, bytes] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.group_instance_id is not None:
            key = (0, java_string_key(self.group_instance_id))
        else:
            key = (1, java_string_key(self.member_id))
        object.__setattr__(self, "sort_key", key)


@dataclass(frozen=True, slots=True)
class GroupInput:
    """What AbstractPartitionAssignor#assign hands to assignPartitions, in JVM iteration order:
    `partitions_per_topic` (subscribed topics with metadata and at least one partition, in
    HashMap<String, List<PartitionInfo>> order), `subscriptions` (HashMap<String, Subscription> order)
    and the replica racks of each partition (empty when unknown)."""

    partitions_per_topic: dict[str, int]
    subscriptions: dict[str, MemberSubscription]
    partition_racks: dict[TopicPartition, frozenset[str]]

    def racks_of(self, tp: TopicPartition) -> frozenset[str]:
        return self.partition_racks.get(tp, frozenset())


PartitionRacks = Mapping[tuple[str, int], Iterable[str | None]]


class ConsumerPartitionAssignor(ABC):
    """Follows ConsumerPartitionAssignor (with AbstractPartitionAssignor#assign's common work).

    Instances carry the state the Java classes keep between rebalances (what `on_assignment` saw and,
    for the sticky ones, the highest generation seen by `assign`), so use one instance per consumer.
    """

    name: ClassVar[str]
    supported_protocols: ClassVar[tuple[RebalanceProtocol, ...]] = (RebalanceProtocol.EAGER,)
    version: ClassVar[int] = 0

    def assign(self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, MemberSubscription],
               *, partition_racks: PartitionRacks | None = None) -> dict[str, MemberAssignment]:
        """Follows AbstractPartitionAssignor#assign(Cluster, GroupSubscription).

        `partitions_per_topic` is the leader's metadata (topic -> partition count; absent or 0 means no
        metadata, and the topic is skipped). `partition_racks` optionally gives each partition's replica
        racks (KIP-881 rack-aware assignment). Returns one assignment per member, in `subscriptions` order.
        """
        group = build_group_input(partitions_per_topic, subscriptions, partition_racks)
        raw = self._assign_partitions(group)
        return {member: MemberAssignment(tuple(raw[member])) for member in subscriptions if member in raw}

    @abstractmethod
    def _assign_partitions(self, group: GroupInput) -> dict[str, list[TopicPartition]]:
        """Follows the subclass's assignPartitions(partitionsPerTopic, subscriptions)."""

    def subscription_user_data(self, topics: Iterable[str],
                               current_assignment: Sequence[tuple[str, int] | TopicPartitions] | None = None,
                               generation: int | None = None) -> bytes | None:
        """Follows ConsumerPartitionAssignor#subscriptionUserData: the bytes a member puts in its
        Subscription userData. `current_assignment`/`generation` override what `on_assignment` recorded."""
        return None

    def on_assignment(self, assignment: MemberAssignment | Sequence[PartitionsInput], generation: int) -> None:
        """Follows ConsumerPartitionAssignor#onAssignment (the generation comes from ConsumerGroupMetadata)."""
        return None


def build_group_input(partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, MemberSubscription],
                      partition_racks: PartitionRacks | None) -> GroupInput:
    """Validates the inputs and puts them in the JVM's iteration order (AbstractPartitionAssignor#assign)."""
    subs: dict[str, MemberSubscription] = {}
    for member in string_hash_order(subscriptions):
        sub = subscriptions[member]
        if not isinstance(member, str):
            raise AssignorError(f"member id {member!r} is not a string", java_exception="IllegalArgumentException")
        if not isinstance(sub, MemberSubscription):
            raise AssignorError(f"subscription of member {member!r} is a {type(sub).__name__}, not MemberSubscription",
                                java_exception="IllegalArgumentException")
        subs[member] = sub
    for topic, count in partitions_per_topic.items():
        if not isinstance(topic, str) or not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise AssignorError(f"partitions_per_topic[{topic!r}] = {count!r}: need a topic name and a count >= 0",
                                java_exception="IllegalArgumentException")
    all_topics = string_hash_order(t for sub in subs.values() for t in sub.topics)
    ppt = {t: partitions_per_topic[t] for t in string_hash_order(
        t for t in all_topics if partitions_per_topic.get(t, 0) > 0)}
    racks: dict[TopicPartition, frozenset[str]] = {}
    for key, replica_racks in (partition_racks or {}).items():
        topic, partition = key
        racks[TopicPartition(topic, partition)] = frozenset(r for r in replica_racks if r is not None)
    return GroupInput(ppt, subs, racks)


def sorted_members(members: Iterable[MemberInfo]) -> list[MemberInfo]:
    """Collections.sort over MemberInfo (stable, by MemberInfo#compareTo)."""
    return sorted(members, key=lambda m: m.sort_key)
