"""A group as one GroupMetadata record persisted it, with the embedded consumer-protocol bytes decoded.

The audit compares successive snapshots; everything here is derived from one record value. For
protocol type "consumer" each member's subscription and assignment are decoded (Kafka's
ConsumerProtocolSubscription / ConsumerProtocolAssignment, `ConsumerProtocol#deserializeSubscription`)
and so is the assignor's userData for the built-in sticky assignors (`StickyAssignor#memberData`,
`CooperativeStickyAssignor#memberData`); for any other protocol type
(Connect, ...) those bytes are opaque and only compared as bytes. An embedded part that does not
decode leaves that part unknown (None) and an error text in `MemberView.errors`; the record itself
is still valid for Kafka's load path, which never parses the assignment.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from coordinator_audit.core.consumer_protocol import (
    TopicPartitions,
    decode_assignment,
    decode_cooperative_user_data,
    decode_sticky_user_data,
    decode_subscription,
)
from coordinator_audit.core.errors import CoordinatorInvariantError, RecordDecodeError
from coordinator_audit.core.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    decode,
    encode,
)
from coordinator_audit.core.records_fast import assignment_groups_fast, subscription_fast

__all__ = ["EAGER_ONLY_ASSIGNORS", "GroupSnapshot", "MemberView", "TopicPartition", "check_unique_members"]

TopicPartition = tuple[str, int]

_I = struct.Struct(">i")

EAGER_ONLY_ASSIGNORS = frozenset({"range", "roundrobin", "sticky"})
"""Built-in assignors that support only the EAGER protocol (the default
`ConsumerPartitionAssignor#supportedProtocols`; only CooperativeStickyAssignor adds COOPERATIVE, KIP-429)."""


def _flatten(entries: tuple[TopicPartitions, ...]) -> tuple[TopicPartition, ...]:
    """[(topic, partitions)] entries -> ((topic, partition), ...) in wire order."""
    out: list[TopicPartition] = []
    for entry in entries:
        topic = entry.topic
        out.extend((topic, p) for p in entry.partitions)
    return tuple(out)


class MemberView:
    """One member of a persisted group, with its decoded subscription and assignment.

    A plain slotted class rather than a frozen dataclass: one is built per member of every replayed
    GroupMetadata record, and nothing changes it after construction (treat it as immutable)."""

    __slots__ = ("_assignment", "assigned_groups", "assigned_topics", "assignment_raw", "claims", "client_host",
                 "client_id", "errors", "group_instance_id", "identity", "member_id", "owned", "rebalance_timeout",
                 "session_timeout", "sticky_previous", "subscription_generation", "subscription_raw",
                 "subscription_version", "topics", "user_data_generation")

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
    assigned_groups: tuple[tuple[str, tuple[int, ...]], ...] | None
    """The assignment's (topic, partitions) entries with partitions, in wire order; () for an empty
    assignment, None when it did not decode. `assigned` and friends are derived from it on use."""
    assigned_topics: frozenset[str]
    """The topics of the assigned partitions."""
    errors: tuple[str, ...]
    identity: tuple[str, str]
    """Who this member is across generations: ("instance", its instance id) if static, else
    ("member", its member id)."""
    claims: frozenset[TopicPartition]
    """Partitions the member says it owns: ownedPartitions plus the sticky userData's list."""

    def __init__(self, member_id: str, group_instance_id: str | None, client_id: str, client_host: str,
                 rebalance_timeout: int, session_timeout: int, subscription_raw: bytes, assignment_raw: bytes,
                 subscription: _Decoded, assignment: _Assigned, errors: tuple[str, ...]) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout = rebalance_timeout
        self.session_timeout = session_timeout
        self.subscription_raw = subscription_raw
        self.assignment_raw = assignment_raw
        (self.subscription_version, self.topics, self.owned, self.sticky_previous, self.subscription_generation,
         self.user_data_generation) = subscription
        self._assignment = assignment
        self.assigned_groups = assignment.groups
        self.assigned_topics = assignment.topics
        self.errors = errors
        self.identity = ("member", member_id) if group_instance_id is None else ("instance", group_instance_id)
        self.claims = self.owned | self.sticky_previous if self.sticky_previous else self.owned

    def __repr__(self) -> str:
        return f"MemberView({self.label}, assigned={self.assigned})"

    @property
    def assigned(self) -> tuple[TopicPartition, ...] | None:
        """Assigned partitions in wire order; () for an empty assignment, None when it did not decode."""
        return self._assignment.pairs()

    @property
    def assigned_is_distinct(self) -> bool:
        """No (topic, partition) is listed twice in the assignment (True when it did not decode)."""
        return self._assignment.is_distinct()

    @property
    def assigned_distinct(self) -> tuple[TopicPartition, ...]:
        """`assigned` without repeats (first occurrence kept); () when the assignment did not decode."""
        return self._assignment.distinct()

    @property
    def assigned_set(self) -> frozenset[TopicPartition]:
        """The assigned partitions as a set (empty when the assignment did not decode)."""
        return self._assignment.pair_set()

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
                      cache: _DecodeCache | None = None, previous: _DecodeCache | None = None) -> MemberView:
        """Decodes one MemberMetadata; protocol_type "consumer" enables the embedded decoding.

        `previous` holds decoded embedded bytes of an earlier snapshot (same protocol type and
        protocol), reused when the bytes are identical; what this member decodes to is added to `cache`."""
        return _member_view(m, protocol_type, protocol, cache, previous)


def _member_view(m: MemberMetadata, protocol_type: str | None, protocol: str | None, cache: _DecodeCache | None,
                 previous: _DecodeCache | None) -> MemberView:
    """MemberView.from_metadata, positional (it runs for every member of every replayed record)."""
    sub_raw = m.subscription if type(m.subscription) is bytes else bytes(m.subscription)
    asg_raw = m.assignment if type(m.assignment) is bytes else bytes(m.assignment)
    if protocol_type != "consumer":
        return MemberView(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout,
                          m.session_timeout, sub_raw, asg_raw, _OPAQUE, _UNKNOWN, ())
    if cache is None:
        cache = _DecodeCache()
    errors: list[str] = []
    member_id = m.member_id
    entry = cache.subscriptions.get(sub_raw)
    if entry is None and previous is not None:
        entry = previous.subscriptions.get(sub_raw)
        if entry is None:
            entry = previous.same_but_generation(member_id, sub_raw)
    if entry is None:
        entry = _decode_subscription(sub_raw, protocol, member_id, errors)
    sub = entry[0]
    if not errors:
        cache.subscriptions[sub_raw] = entry
        cache.latest[member_id] = sub_raw
    assignment: _Assigned | None
    if not asg_raw:
        assignment = _NONE_ASSIGNED
    else:
        assignment = cache.assignments.get(asg_raw)
        if assignment is None:
            assignment = previous.assignments.get(asg_raw) if previous is not None else None
            if assignment is None:
                assignment = _decode_assignment(asg_raw, member_id, errors)
            if assignment.groups is not None:
                cache.assignments[asg_raw] = assignment
    return MemberView(member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout,
                      m.session_timeout, sub_raw, asg_raw, sub, assignment, tuple(errors) if errors else ())


_Decoded = tuple[int | None, frozenset[str] | None, frozenset[TopicPartition], frozenset[TopicPartition],
                 int | None, int | None]
"""(subscription_version, topics, owned, sticky_previous, subscription_generation, user_data_generation)."""

_EMPTY: frozenset[TopicPartition] = frozenset()
_NO_TOPICS: frozenset[str] = frozenset()
_OPAQUE: _Decoded = (None, None, _EMPTY, _EMPTY, None, None)


class _Assigned:
    """One assignment's decoded bytes, shared by every member (of this and later snapshots) whose
    assignment bytes are the same; the pair forms are derived on first use and kept."""

    __slots__ = ("_distinct", "_is_distinct", "_pairs", "_set", "groups", "topics")

    def __init__(self, groups: tuple[tuple[str, tuple[int, ...]], ...] | None, topics: frozenset[str]) -> None:
        self.groups = groups
        """The (topic, partitions) entries that have partitions, in wire order; None: did not decode."""
        self.topics = topics
        self._pairs: tuple[TopicPartition, ...] | None = None
        self._distinct: tuple[TopicPartition, ...] | None = None
        self._set: frozenset[TopicPartition] | None = None
        self._is_distinct: bool | None = None

    def pairs(self) -> tuple[TopicPartition, ...] | None:
        out = self._pairs
        if out is None:
            groups = self.groups
            if groups is None:
                return None
            out = self._pairs = tuple([(t, p) for t, ps in groups for p in ps])
        return out

    def is_distinct(self) -> bool:
        out = self._is_distinct
        if out is None:
            groups = self.groups
            if not groups:
                out = True
            elif len(groups) == 1:
                out = len(set(groups[0][1])) == len(groups[0][1])
            else:
                pairs = self.pairs() or ()
                out = len(set(pairs)) == len(pairs)
            self._is_distinct = out
        return out

    def mark_distinct(self) -> None:
        """Records that no pair repeats (known from a check over the whole snapshot)."""
        self._is_distinct = True

    def distinct(self) -> tuple[TopicPartition, ...]:
        out = self._distinct
        if out is None:
            out = self.pairs() or ()
            if not self.is_distinct():
                out = tuple(dict.fromkeys(out))
            self._distinct = out
        return out

    def pair_set(self) -> frozenset[TopicPartition]:
        out = self._set
        if out is None:
            out = self._set = frozenset(self.pairs() or ())
        return out


_NONE_ASSIGNED = _Assigned((), _NO_TOPICS)
_UNKNOWN = _Assigned(None, _NO_TOPICS)


class _DecodeCache:
    """Decoded subscription and assignment bytes of one snapshot's members (same protocol type and
    protocol), keyed by the bytes; only decodes without errors are kept (error texts name the member).

    A subscription entry is (decoded fields, position of its int32 GenerationId or -1). Consecutive
    generations of a member usually send the same subscription but for that field (v2+), so a
    subscription equal to the member's previous one outside those 4 bytes reuses the decoding: the
    reader would take the same path through the same bytes and read only a different generation."""

    __slots__ = ("assignments", "latest", "subscriptions")

    def __init__(self) -> None:
        self.subscriptions: dict[bytes, tuple[_Decoded, int]] = {}
        self.latest: dict[str, bytes] = {}  # member id -> its subscription bytes
        self.assignments: dict[bytes, _Assigned] = {}

    def same_but_generation(self, member_id: str, raw: bytes) -> tuple[_Decoded, int] | None:
        """The decoding of `raw` when it differs from `member_id`'s cached subscription at most in
        the GenerationId field, else None."""
        before = self.latest.get(member_id)
        if before is None or len(before) != len(raw):
            return None
        decoded, g = self.subscriptions[before]
        if g < 0 or before[:g] != raw[:g] or before[g + 4:] != raw[g + 4:]:
            return None
        generation = _I.unpack_from(raw, g)[0]
        return (decoded[0], decoded[1], decoded[2], decoded[3], generation if generation >= 0 else None,
                decoded[5]), g


def _decode_subscription(raw: bytes, protocol: str | None, member_id: str,
                         errors: list[str]) -> tuple[_Decoded, int]:
    """(decoded fields, position of the GenerationId field or -1); errors are appended to `errors`."""
    generation_at = -1
    fast = subscription_fast(raw)
    try:
        if fast is not None:
            version, topic_list, user_data, owned_list, generation, rack = fast
            if version >= 2:  # the GenerationId is the last field of v2, followed by the rack id in v3
                generation_at = len(raw) - 4
                if version >= 3:
                    generation_at -= 2 if rack is None else 2 + len(rack.encode())
        else:
            sub = decode_subscription(raw)
            version, topic_list, user_data, generation = sub.version, sub.topics, sub.user_data, sub.generation_id
            owned_list = _flatten(sub.owned_partitions)
    except RecordDecodeError as exc:
        errors.append(f"member {member_id!r} subscription: {exc}")
        return _OPAQUE, -1
    ud_gen: int | None = None
    sticky_prev = _EMPTY
    if user_data is not None:
        ud_gen, sticky_prev = _user_data(user_data, protocol, member_id, errors)
    return (version, frozenset(topic_list), frozenset(owned_list) if owned_list else _EMPTY, sticky_prev,
            generation if generation >= 0 else None, ud_gen), generation_at


def _decode_assignment(raw: bytes, member_id: str, errors: list[str]) -> _Assigned:
    groups = assignment_groups_fast(raw)
    if groups is None:
        try:
            entries = decode_assignment(raw).assigned_partitions
        except RecordDecodeError as exc:
            errors.append(f"member {member_id!r} assignment: {exc}")
            return _UNKNOWN
        groups = tuple([(e.topic, tuple(e.partitions)) for e in entries if e.partitions])
    if not groups:
        return _NONE_ASSIGNED
    return _Assigned(groups, frozenset([t for t, _ in groups]))


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


@dataclass(slots=True, eq=False)
class GroupSnapshot:
    """The persisted state of a group after one GroupMetadata record (what Kafka's load path rebuilds).

    Not frozen (one is built per replayed record and `by_identity` is cached), but never changed after
    construction: treat it as immutable."""

    generation: int
    protocol_type: str | None
    """None for "" (Kafka loads "" as no protocol type)."""
    protocol: str | None
    leader: str | None
    state_timestamp: int | None
    members: tuple[MemberView, ...]
    decoded: _DecodeCache | None = field(default=None, repr=False)
    """The members' decoded embedded bytes, for the next snapshot to reuse."""
    _by_identity: dict[tuple[str, str], MemberView] | None = field(default=None, repr=False)
    _repeats: bool | None = field(default=None, repr=False)

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
        """identity -> member (the same dict on every call: do not change it)."""
        out = self._by_identity
        if out is None:
            out = self._by_identity = {m.identity: m for m in self.members}
        return out

    def has_repeated_assignments(self) -> bool:
        """Some (topic, partition) is listed more than once in the members' assignments (twice by one
        member, or by two members); False means every member's assignment is distinct and no
        partition is assigned twice."""
        out = self._repeats
        if out is None:
            listed = 0
            union: dict[str, set[int]] = {}
            for m in self.members:
                for topic, partitions in m.assigned_groups or ():
                    listed += len(partitions)
                    seen = union.get(topic)
                    if seen is None:
                        union[topic] = set(partitions)
                    else:
                        seen.update(partitions)
            out = self._repeats = listed != sum(map(len, union.values()))
            if not out:
                for m in self.members:
                    m._assignment.mark_distinct()
        return out

    def owners(self) -> dict[TopicPartition, list[MemberView]]:
        """Each assigned partition -> the members it is assigned to (more than one is a violation)."""
        out: dict[TopicPartition, list[MemberView]] = {}
        for m in self.members:
            for tp in dict.fromkeys(m.assigned or ()):
                out.setdefault(tp, []).append(m)
        return out

    def owner_ids(self) -> dict[TopicPartition, tuple[str, ...]]:
        """Each assigned partition -> the ids of the members it is assigned to (what an
        `offset_regression` in this snapshot's window names)."""
        return {tp: tuple(m.member_id for m in ms) for tp, ms in self.owners().items()}

    @staticmethod
    def from_value_bytes(value: bytes, *, group_id: str) -> GroupSnapshot:
        """The snapshot of a GroupMetadata value given as bytes (the codec reads it as the value of
        `group_id`'s GroupMetadataKey); raises the codec's RecordDecodeError, or
        CoordinatorInvariantError (`from_value`), when it cannot be read."""
        key, _ = encode(CoordinatorRecord.of(GroupMetadataKey(group_id), None))
        value_record = decode(key, value).value
        if not isinstance(value_record, GroupMetadataValue):
            raise RecordDecodeError(f"group {group_id!r}: a GroupMetadata value is required, not a tombstone")
        return GroupSnapshot.from_value(value_record, group_id=group_id)

    def revocations(self) -> dict[str, tuple[TopicPartition, ...]]:
        """member id -> partitions it reported owning at join but was not assigned (it must revoke
        them and, under COOPERATIVE, rejoin at once: the next generation is a follow-up round)."""
        out: dict[str, tuple[TopicPartition, ...]] = {}
        for m in self.members:
            if m.owned and m.assigned is not None and not m.owned <= m.assigned_set:
                out[m.member_id] = tuple(sorted(m.owned - m.assigned_set))
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
        protocol = value.protocol
        reuse: _DecodeCache | None = None
        if previous is not None and previous.protocol == protocol and previous.protocol_type == protocol_type:
            reuse = previous.decoded
        cache = _DecodeCache()
        members = tuple([_member_view(m, protocol_type, protocol, cache, reuse) for m in value.members])
        if len(members) > 1:
            check_unique_members(members, group_id)
        ts = value.current_state_timestamp
        leader = value.leader
        if leader is None and members:  # the load path adds members in order: the first one leads
            leader = members[0].member_id
        return GroupSnapshot(value.generation, protocol_type, protocol, leader,
                             ts if ts is not None and ts >= 0 else None, members, cache)


def check_unique_members(members: Sequence[MemberView] | Sequence[MemberMetadata], group_id: str) -> None:
    """Raises CoordinatorInvariantError when one GroupMetadata record lists a member id or instance
    id twice, which Kafka's load path cannot represent (`ClassicGroup#add`, which
    `ClassicGroup#fromRecord` calls per member, keeps the members in a map by member id and refuses
    an instance id it holds already); `GroupSnapshot.from_value` checks its members with it, and an
    audit that does not build the snapshot checks the record's own members."""
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
