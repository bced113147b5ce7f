"""Group and member state of a classic group: ClassicGroup / GroupMetadata and their members."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from coordinator_audit.core.errors import CoordinatorInvariantError
from coordinator_audit.core.protocol import (
    Errors,
    JoinGroupResponse,
    JoinGroupResponseMember,
    SyncGroupResponse,
)

from .hashorder import HashSetOrder, JavaHashMap, ScalaHashMap, champ_order, java_hashmap_order
from .state import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    VALID_PREVIOUS_STATES,
    GroupState,
    check_transition,
)

if TYPE_CHECKING:
    from .runtime import Shard

CONSUMER_PROTOCOL_TYPE = "consumer"

_ParkedResponse = TypeVar("_ParkedResponse", JoinGroupResponse, SyncGroupResponse)


@dataclass(frozen=True, slots=True)
class ParkedJoin:
    """A JoinGroup whose response is withheld until the join phase ends."""

    correlation_id: int
    api_version: int


@dataclass(frozen=True, slots=True)
class ParkedSync:
    """A SyncGroup whose response is withheld until the leader's assignment is stored."""

    correlation_id: int


@dataclass(slots=True, eq=False)
class Member:
    """Follows ClassicGroupMember / MemberMetadata."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    supported_protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    awaiting_join: ParkedJoin | None = None
    awaiting_sync: ParkedSync | None = None
    is_new: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync is not None

    def metadata(self, protocol_name: str | None) -> bytes:
        """Follows ClassicGroupMember#metadata: the metadata sent for `protocol_name`."""
        for name, metadata in self.supported_protocols:
            if name == protocol_name:
                return metadata
        raise CoordinatorInvariantError(f"member {self.member_id!r} does not support protocol {protocol_name!r}")

    def has_satisfied_heartbeat(self) -> bool:
        """Follows ClassicGroupMember#hasSatisfiedHeartbeat (S's transient heartbeatSatisfied flag is
        always false when an expiry is evaluated, so both flavours reduce to this)."""
        if self.is_new:
            return False
        return self.is_awaiting_join or self.is_awaiting_sync

    def matches(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        """Follows ClassicGroupMember#matches: same names and bytes, in order."""
        return tuple(protocols) == self.supported_protocols

    def vote(self, candidates: set[str]) -> str:
        """Follows ClassicGroupMember#vote: the first own protocol that all members support."""
        for name, _ in self.supported_protocols:
            if name in candidates:
                return name
        raise CoordinatorInvariantError(f"member {self.member_id!r} supports none of {sorted(candidates)}")

    def protocol_names(self) -> set[str]:
        return {name for name, _ in self.supported_protocols}


@dataclass(slots=True, eq=False)
class ClassicGroup:
    """Follows ClassicGroup (Java) / GroupMetadata (Scala): the in-memory state of one classic group."""

    group_id: str
    shard: Shard
    state: GroupState = EMPTY
    previous_state: GroupState = DEAD
    current_state_timestamp: int | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: JavaHashMap[Member] | ScalaHashMap[Member] = field(default_factory=JavaHashMap)
    static_members: dict[str, str] = field(default_factory=dict)
    pending_members: set[str] = field(default_factory=set)
    num_members_awaiting_join: int = 0
    supported_protocols: dict[str, int] = field(default_factory=dict)
    pending_sync_members: HashSetOrder = field(default_factory=HashSetOrder)
    _subscribed_topics: frozenset[str] | None = None
    _deferred_subscriptions: tuple[bytes, ...] | None = None
    new_member_added: bool = False

    @classmethod
    def create(cls, group_id: str, shard: Shard, *, state: GroupState = EMPTY, now_ms: int | None,
               generation_id: int = 0, protocol_type: str | None = None, protocol_name: str | None = None,
               leader_id: str | None = None) -> ClassicGroup:
        """A new group object with the members map of the configured flavour."""
        members: JavaHashMap[Member] | ScalaHashMap[Member] = (
            JavaHashMap() if shard.config.is_java else ScalaHashMap())
        return cls(group_id=group_id, shard=shard, state=state, current_state_timestamp=now_ms,
                   generation_id=generation_id, protocol_type=protocol_type, protocol_name=protocol_name,
                   leader_id=leader_id, members=members,
                   pending_sync_members=HashSetOrder(java=shard.config.is_java))

    # ----------------------------------------------------------------------------------------------
    # simple queries

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def member(self, member_id: str) -> Member:
        m = self.members.get(member_id)
        if m is None:
            raise CoordinatorInvariantError(f"group {self.group_id!r} has no member {member_id!r}")
        return m

    def all_members(self) -> list[Member]:
        """The members in the emulated hash-map iteration order."""
        return self.members.values()

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def can_rebalance(self) -> bool:
        """Follows ClassicGroup#canRebalance."""
        return self.state in VALID_PREVIOUS_STATES[PREPARING_REBALANCE]

    def has_all_members_joined(self) -> bool:
        """Follows ClassicGroup#hasAllMembersJoined."""
        return len(self.members) == self.num_members_awaiting_join and not self.pending_members

    def rebalance_timeout_ms(self) -> int:
        """Follows ClassicGroup#rebalanceTimeoutMs: the largest member rebalance timeout (0 if none)."""
        return max((m.rebalance_timeout_ms for m in self.all_members()), default=0)

    def static_member_ids(self) -> set[str]:
        return set(self.static_members.values())

    def not_yet_rejoined_members(self) -> list[Member]:
        """Follows ClassicGroup#notYetRejoinedMembers (in members order)."""
        return [m for m in self.all_members() if not m.is_awaiting_join]

    # ----------------------------------------------------------------------------------------------
    # transitions

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        """Follows ClassicGroup#transitionTo: checks the move, remembers the previous state, stamps the time."""
        check_transition(self.group_id, self.state, target)
        self.previous_state = self.state
        self.state = target
        self.current_state_timestamp = now_ms

    # ----------------------------------------------------------------------------------------------
    # membership

    def add(self, member: Member, join: ParkedJoin | None = None) -> None:
        """Follows ClassicGroup#add."""
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise CoordinatorInvariantError(
                    f"group {self.group_id!r}: static member {member.group_instance_id!r} is already a member")
            self.static_members[member.group_instance_id] = member.member_id
        if len(self.members) == 0:
            self.protocol_type = member.protocol_type
        if self.protocol_type != member.protocol_type:
            raise CoordinatorInvariantError(
                f"group {self.group_id!r}: protocol type {member.protocol_type!r} != group's {self.protocol_type!r}")
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members.put(member.member_id, member)
        counts = self.supported_protocols  # _increment_protocols, inline (once per member of every replayed record)
        for name, _ in member.supported_protocols:
            counts[name] = counts.get(name, 0) + 1
        member.awaiting_join = join
        if join is not None:
            self.num_members_awaiting_join += 1
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> None:
        """Follows ClassicGroup#remove (does not answer the member's parked requests)."""
        removed = self.members.pop(member_id)
        if removed is not None:
            self._decrement_protocols(removed)
            if removed.is_awaiting_join:
                self.num_members_awaiting_join -= 1
            if removed.group_instance_id is not None:
                self.static_members.pop(removed.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = self.members.first_key()
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Follows ClassicGroup#maybeElectNewJoinedLeader."""
        if self.leader_id is None:
            return False
        current = self.member(self.leader_id)
        if current.is_awaiting_join:
            return True
        for m in self.all_members():
            if m.is_awaiting_join:
                self.leader_id = m.member_id
                self.shard.logs.leader_replaced(self, current, m)
                return True
        self.shard.logs.leader_not_replaced(self, current)
        return False

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """Follows ClassicGroup#replaceStaticMember (J: new member object, isNew false; S: same object re-keyed)."""
        removed = self.members.pop(old_id)
        if removed is None:
            raise CoordinatorInvariantError(f"group {self.group_id!r}: cannot replace unknown member {old_id!r}")
        self.complete_join_future(removed, JoinGroupResponse(
            correlation_id=0, error_code=Errors.FENCED_INSTANCE_ID, member_id=old_id, leader=""))
        self.complete_sync_future(removed, SyncGroupResponse(
            correlation_id=0, error_code=Errors.FENCED_INSTANCE_ID, assignment=b""))
        if self.shard.config.is_java:
            new = Member(member_id=new_id, group_instance_id=removed.group_instance_id,
                         client_id=removed.client_id, client_host=removed.client_host,
                         rebalance_timeout_ms=removed.rebalance_timeout_ms,
                         session_timeout_ms=removed.session_timeout_ms, protocol_type=removed.protocol_type,
                         supported_protocols=removed.supported_protocols, assignment=removed.assignment)
        else:
            removed.member_id = new_id
            new = removed
        self.members.put(new_id, new)
        if self.is_leader(old_id):
            self.leader_id = new_id
        self.static_members[instance_id] = new_id
        return new

    def update_member(self, member: Member, protocols: tuple[tuple[str, bytes], ...], rebalance_timeout_ms: int,
                      session_timeout_ms: int, join: ParkedJoin | None) -> None:
        """Follows ClassicGroup#updateMember."""
        self._decrement_protocols(member)
        member.supported_protocols = tuple(protocols)
        self._increment_protocols(member)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if join is not None and member.awaiting_join is not None and member.awaiting_join is not join:
            self.shard.drop(member.awaiting_join.correlation_id)
        if join is not None and not member.is_awaiting_join:
            self.num_members_awaiting_join += 1
        elif join is None and member.is_awaiting_join:
            self.num_members_awaiting_join -= 1
        member.awaiting_join = join

    def add_pending_member(self, member_id: str) -> None:
        """Follows ClassicGroup#addPendingMember."""
        if self.has_member(member_id):
            raise CoordinatorInvariantError(f"group {self.group_id!r}: pending member {member_id!r} is a member")
        self.pending_members.add(member_id)

    def add_pending_sync_member(self, member_id: str) -> None:
        """Follows ClassicGroup#addPendingSyncMember."""
        if not self.has_member(member_id):
            raise CoordinatorInvariantError(f"group {self.group_id!r}: pending sync for non-member {member_id!r}")
        self.pending_sync_members.add(member_id)

    def validate_member(self, member_id: str, instance_id: str | None, operation: str) -> Errors:
        """Follows ClassicGroup#validateMember / GroupCoordinator#validateCurrentMember."""
        if instance_id is not None:
            existing = self.static_members.get(instance_id)
            if existing is None:
                return Errors.UNKNOWN_MEMBER_ID
            if existing != member_id:
                self.shard.logs.fenced(self, member_id, instance_id, existing, operation)
                return Errors.FENCED_INSTANCE_ID
        if not self.has_member(member_id):
            return Errors.UNKNOWN_MEMBER_ID
        return Errors.NONE

    # ----------------------------------------------------------------------------------------------
    # protocols

    def _increment_protocols(self, member: Member) -> None:
        for name, _ in member.supported_protocols:
            self.supported_protocols[name] = self.supported_protocols.get(name, 0) + 1

    def _decrement_protocols(self, member: Member) -> None:
        for name, _ in member.supported_protocols:
            self.supported_protocols[name] = self.supported_protocols.get(name, 0) - 1

    def supports_protocols(self, protocol_type: str, names: set[str]) -> bool:
        """Follows ClassicGroup#supportsProtocols."""
        if self.state == EMPTY:
            return protocol_type != "" and len(names) > 0
        size = len(self.members)
        return self.protocol_type == protocol_type and any(
            self.supported_protocols.get(n, 0) == size for n in names)

    def select_protocol(self) -> str:
        """Follows ClassicGroup#selectProtocol: most votes; ties by the vote map's iteration order
        (J: java.util.HashMap; S: Scala 2.13 immutable.HashMap from groupBy)."""
        members = self.all_members()
        if not members:
            raise CoordinatorInvariantError(f"group {self.group_id!r}: cannot select a protocol without members")
        size = len(members)
        candidates = {n for n, c in self.supported_protocols.items() if c == size}
        votes: dict[str, int] = {}
        for m in members:
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        order = java_hashmap_order(votes) if self.shard.config.is_java else champ_order(votes)
        best: str | None = None
        for name in order:
            if best is None or votes[name] > votes[best]:
                best = name
        assert best is not None
        return best

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        """Follows ClassicGroup#computeSubscribedTopics."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if len(self.members) == 0:
            return frozenset()
        if self.protocol_name is None:
            return None
        try:
            subscriptions = tuple(m.metadata(self.protocol_name) for m in self.members.values_any_order())
        except CoordinatorInvariantError:
            return None
        return _topics_of(subscriptions)

    def compute_subscribed_topics_on_read(self) -> None:
        """Follows ClassicGroup#computeSubscribedTopics as the load path calls it, deferred: the members'
        subscription bytes for the selected protocol are captured now and decoded on the first read of
        `subscribed_topics`, which yields the value computing it now would (whatever happens to the
        members in between). Kafka computes it eagerly when it loads a group; nothing reads it while
        records are replayed, and decoding every subscription of every replayed record was most of the
        load path's cost."""
        self._subscribed_topics = None
        self._deferred_subscriptions = None
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return
        if len(self.members) == 0:
            self._subscribed_topics = frozenset()
            return
        if self.protocol_name is None:
            return
        try:
            self._deferred_subscriptions = tuple(m.metadata(self.protocol_name)
                                                 for m in self.members.values_any_order())
        except CoordinatorInvariantError:
            return

    @property
    def subscribed_topics(self) -> frozenset[str] | None:
        """ClassicGroup#subscribedTopics: the topics the members subscribe to (None when unknown)."""
        deferred = self._deferred_subscriptions
        if deferred is not None:
            self._subscribed_topics = _topics_of(deferred)
            self._deferred_subscriptions = None
        return self._subscribed_topics

    @subscribed_topics.setter
    def subscribed_topics(self, topics: frozenset[str] | None) -> None:
        self._subscribed_topics = topics
        self._deferred_subscriptions = None

    # ----------------------------------------------------------------------------------------------
    # parked requests

    def complete_join_future(self, member: Member, response: JoinGroupResponse) -> bool:
        """Follows ClassicGroup#completeJoinFuture: answers the parked JoinGroup with `response`."""
        parked = member.awaiting_join
        if parked is None:
            return False
        self.shard.respond(_with_correlation(response, parked.correlation_id))
        member.awaiting_join = None
        self.num_members_awaiting_join -= 1
        return True

    def complete_sync_future(self, member: Member, response: SyncGroupResponse) -> bool:
        """Follows ClassicGroup#completeSyncFuture: answers the parked SyncGroup with `response`."""
        parked = member.awaiting_sync
        if parked is None:
            return False
        self.shard.respond(_with_correlation(response, parked.correlation_id))
        member.awaiting_sync = None
        return True

    # ----------------------------------------------------------------------------------------------
    # generations

    def init_next_generation(self, now_ms: int) -> None:
        """Follows ClassicGroup#initNextGeneration."""
        self.generation_id += 1
        if len(self.members) > 0:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(EMPTY, now_ms)
        self.pending_sync_members.clear()

    def current_member_metadata(self) -> tuple[JoinGroupResponseMember, ...]:
        """Follows ClassicGroup#currentClassicGroupMembers: the member list sent to the leader."""
        if self.state in (DEAD, PREPARING_REBALANCE):
            raise CoordinatorInvariantError(
                f"group {self.group_id!r}: no member metadata in state {self.state}")
        return tuple(JoinGroupResponseMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
                     for m in self.all_members())

    def group_assignment(self) -> dict[str, bytes]:
        """Follows ClassicGroup#groupAssignment."""
        return {m.member_id: m.assignment for m in self.all_members()}


def _topics_of(subscriptions: tuple[bytes, ...]) -> frozenset[str] | None:
    """The union of the topics of the ConsumerProtocolSubscription bytes `subscriptions`; None when one
    does not decode (the rule of ClassicGroup#computeSubscribedTopics)."""
    from coordinator_audit.core.consumer_protocol import decode_subscription

    topics: set[str] = set()
    try:
        for raw in subscriptions:
            topics.update(decode_subscription(raw).topics)
    except ValueError:
        return None
    return frozenset(topics)


def _with_correlation(response: _ParkedResponse, correlation_id: int) -> _ParkedResponse:
    from dataclasses import replace

    return replace(response, correlation_id=correlation_id)
