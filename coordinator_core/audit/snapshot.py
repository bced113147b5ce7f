"""A group as one GroupMetadata record persisted it, with the embedded consumer-protocol bytes decoded.

The audit compares successive snapshots; everything here is derived from one record value. For
protocol type "consumer" each member's subscription and assignment are decoded (spec §7.6) and so
is the assignor's userData for the built-in sticky assignors (§7.7); for any other protocol type
(Connect, ...) those bytes are opaque and only compared as bytes. An embedded part that does not
decode leaves that part unknown (None) and an error text in `MemberView.errors`; the record itself
is still valid for Kafka's load path, which never parses the assignment.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator_core.audit.fastpath import assignment_fast, subscription_fast
from coordinator_core.consumer_protocol import (
    decode_assignment,
    decode_cooperative_user_data,
    decode_sticky_user_data,
    decode_subscription,
)
from coordinator_core.errors import CoordinatorInvariantError, RecordDecodeError
from coordinator_core.records import GroupMetadataValue, MemberMetadata

__all__ = ["EAGER_ONLY_ASSIGNORS", "GroupSnapshot", "MemberView", "TopicPartition"]

TopicPartition = tuple[str, int]

EAGER_ONLY_ASSIGNORS = frozenset({"range", "roundrobin", "sticky"})
"""Built-in assignors that support only the EAGER protocol (spec §10.2)."""


def _flatten(entries: object) -> tuple[TopicPartition, ...]:
    """[(topic, partitions)] entries -> ((topic, partition), ...) in wire order."""
    out: list[TopicPartition] = []
    for entry in entries or ():  # type: ignore[attr-defined]
        topic = entry.topic
        out.extend((topic, p) for p in entry.partitions)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class MemberView:
    """One member of a persisted group, with its decoded subscription and assignment."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription_raw: bytes
    assignment_raw: bytes
    subscription_version: int | None
    topics: frozenset[str] | None
    """Subscribed topics; None when the subscription is opaque or did not decode."""
    owned: frozenset[TopicPartition]
    """Subscription.ownedPartitions (v1+): what the member still held when it joined (COOPERATIVE)."""
    sticky_previous: frozenset[TopicPartition]
    """The sticky assignor's userData previous assignment (EAGER sticky's ownership claim)."""
    subscription_generation: int | None
    user_data_generation: int | None
    assigned: tuple[TopicPartition, ...] | None
    """Assigned partitions in wire order; () for an empty assignment, None when it did not decode."""
    errors: tuple[str, ...]

    @property
    def identity(self) -> tuple[str, str]:
        """Who this member is across generations: its instance id if static, else its member id."""
        if self.group_instance_id is not None:
            return ("instance", self.group_instance_id)
        return ("member", self.member_id)

    @property
    def claims(self) -> frozenset[TopicPartition]:
        """Partitions the member says it owns: ownedPartitions plus the sticky userData's list."""
        if not self.sticky_previous:
            return self.owned
        return self.owned | self.sticky_previous

    @property
    def claim_generation(self) -> int | None:
        """The generation the member's claims come from, when the bytes carry it."""
        if self.subscription_generation is not None:
            return self.subscription_generation
        return self.user_data_generation

    @property
    def label(self) -> str:
        if self.group_instance_id is not None:
            return f"{self.member_id} (instance {self.group_instance_id})"
        return self.member_id

    @staticmethod
    def from_metadata(m: MemberMetadata, *, protocol_type: str | None, protocol: str | None,
                      previous: dict[bytes, MemberView] | None = None) -> MemberView:
        """Decodes one MemberMetadata; protocol_type "consumer" enables the embedded decoding.

        `previous` maps subscription and assignment bytes of the previous snapshot's members (same
        protocol) to those members, whose decoded parts are reused when the bytes are identical."""
        sub_raw, asg_raw = bytes(m.subscription), bytes(m.assignment)
        errors: list[str] = []
        sub_version: int | None = None
        topics: frozenset[str] | None = None
        owned: frozenset[TopicPartition] = frozenset()
        sticky_prev: frozenset[TopicPartition] = frozenset()
        sub_gen: int | None = None
        ud_gen: int | None = None
        assigned: tuple[TopicPartition, ...] | None = None
        if protocol_type == "consumer":
            same = previous.get(sub_raw) if previous is not None else None
            if same is not None and same.subscription_raw == sub_raw:
                sub_version, topics, owned = same.subscription_version, same.topics, same.owned
                sticky_prev, sub_gen, ud_gen = same.sticky_previous, same.subscription_generation, \
                    same.user_data_generation
            else:
                try:
                    sub_version, topic_list, user_data, owned_list, generation = _subscription(sub_raw)
                except RecordDecodeError as exc:
                    errors.append(f"member {m.member_id!r} subscription: {exc}")
                else:
                    topics = frozenset(topic_list)
                    owned = frozenset(owned_list)
                    if generation >= 0:
                        sub_gen = generation
                    if user_data is not None:
                        ud_gen, sticky_prev = _user_data(user_data, protocol, m.member_id, errors)
            same = previous.get(asg_raw) if previous is not None else None
            if len(asg_raw) == 0:
                assigned = ()
            elif same is not None and same.assignment_raw == asg_raw:
                assigned = same.assigned
            else:
                try:
                    assigned = _assignment(asg_raw)
                except RecordDecodeError as exc:
                    errors.append(f"member {m.member_id!r} assignment: {exc}")
        return MemberView(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout,
                          m.session_timeout, sub_raw, asg_raw, sub_version, topics,
                          owned, sticky_prev, sub_gen, ud_gen, assigned, tuple(errors))


def _subscription(raw: bytes) -> tuple[int, tuple[str, ...], bytes | None, tuple[TopicPartition, ...], int]:
    """(version, topics, user_data, owned pairs, generation_id); the codec reads what the fast path cannot."""
    fast = subscription_fast(raw)
    if fast is not None:
        return fast[0], fast[1], fast[2], fast[3], fast[4]
    sub = decode_subscription(raw)
    return sub.version, sub.topics, sub.user_data, _flatten(sub.owned_partitions), sub.generation_id


def _assignment(raw: bytes) -> tuple[TopicPartition, ...]:
    fast = assignment_fast(raw)
    if fast is not None:
        return fast[1]
    return _flatten(decode_assignment(raw).assigned_partitions)


def _user_data(data: bytes, protocol: str | None, member_id: str,
               errors: list[str]) -> tuple[int | None, frozenset[TopicPartition]]:
    """(userData generation, sticky previous assignment) for the built-in sticky assignors; other
    assignors' userData (range/roundrobin send none, custom ones are opaque) yields (None, {})."""
    try:
        if protocol == "cooperative-sticky":
            gen = decode_cooperative_user_data(data)
            return (gen if gen is not None and gen >= 0 else None), frozenset()
        if protocol == "sticky":
            sticky = decode_sticky_user_data(data)
            gen = sticky.generation
            return (gen if gen is not None and gen >= 0 else None), frozenset(_flatten(sticky.previous_assignment))
    except RecordDecodeError as exc:
        errors.append(f"member {member_id!r} {protocol} userData: {exc}")
    return None, frozenset()


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    """The persisted state of a group after one GroupMetadata record (what Kafka's load path rebuilds)."""

    generation: int
    protocol_type: str | None
    """None for "" (Kafka loads "" as no protocol type)."""
    protocol: str | None
    leader: str | None
    state_timestamp: int | None
    members: tuple[MemberView, ...]

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    @property
    def is_empty(self) -> bool:
        return not self.members

    @property
    def static_member_count(self) -> int:
        return sum(1 for m in self.members if m.group_instance_id is not None)

    @property
    def rebalance_protocol(self) -> str | None:
        """COOPERATIVE if any member reported owned partitions, EAGER for an eager-only assignor."""
        if any(m.owned for m in self.members):
            return "COOPERATIVE"
        if self.members and self.protocol in EAGER_ONLY_ASSIGNORS:
            return "EAGER"
        return None

    def by_identity(self) -> dict[tuple[str, str], MemberView]:
        return {m.identity: m for m in self.members}

    def owners(self) -> dict[TopicPartition, list[MemberView]]:
        """Each assigned partition -> the members it is assigned to (more than one is a violation)."""
        out: dict[TopicPartition, list[MemberView]] = {}
        for m in self.members:
            for tp in dict.fromkeys(m.assigned or ()):
                out.setdefault(tp, []).append(m)
        return out

    def revocations(self) -> dict[str, tuple[TopicPartition, ...]]:
        """member id -> partitions it reported owning at join but was not assigned (it must revoke
        them and, under COOPERATIVE, rejoin at once: the next generation is a follow-up round)."""
        out: dict[str, tuple[TopicPartition, ...]] = {}
        for m in self.members:
            if m.owned and m.assigned is not None:
                gone = m.owned.difference(m.assigned)
                if gone:
                    out[m.member_id] = tuple(sorted(gone))
        return out

    @staticmethod
    def initial() -> GroupSnapshot:
        """The group before its first generation: gen 0, no members, no protocol type."""
        return GroupSnapshot(0, None, None, None, None, ())

    @staticmethod
    def from_value(value: GroupMetadataValue, *, group_id: str, previous: GroupSnapshot | None = None
                   ) -> GroupSnapshot:
        """Builds the snapshot of one GroupMetadata value; a duplicate member id or instance id, which
        Kafka's load path cannot represent, raises CoordinatorInvariantError. `previous` (the prior
        snapshot) lets identical embedded bytes skip decoding."""
        protocol_type = value.protocol_type or None
        reuse: dict[bytes, MemberView] | None = None
        if previous is not None and previous.protocol == value.protocol and previous.protocol_type == protocol_type:
            reuse = {}
            for pm in previous.members:
                if not pm.errors:
                    reuse[pm.subscription_raw] = pm
                    reuse[pm.assignment_raw] = pm
        members = tuple(MemberView.from_metadata(m, protocol_type=protocol_type, protocol=value.protocol,
                                                 previous=reuse)
                        for m in value.members)
        seen_ids: set[str] = set()
        seen_instances: set[str] = set()
        for m in members:
            if m.member_id in seen_ids:
                raise CoordinatorInvariantError(
                    f"group {group_id!r}: member id {m.member_id!r} listed twice in one GroupMetadata record")
            seen_ids.add(m.member_id)
            if m.group_instance_id is not None:
                if m.group_instance_id in seen_instances:
                    raise CoordinatorInvariantError(
                        f"group {group_id!r}: group instance id {m.group_instance_id!r} listed twice in one "
                        f"GroupMetadata record")
                seen_instances.add(m.group_instance_id)
        ts = value.current_state_timestamp
        leader = value.leader
        if leader is None and members:  # the load path adds members in order: the first one leads
            leader = members[0].member_id
        return GroupSnapshot(value.generation, protocol_type, value.protocol, leader,
                             ts if ts is not None and ts >= 0 else None, members)
