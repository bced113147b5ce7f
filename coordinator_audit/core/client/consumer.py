"""The Java consumer's classic group loop (AbstractCoordinator + ConsumerCoordinator), event-driven.

`GroupConsumer` holds one consumer process's group state and never talks to a network: each method
takes the current virtual time and returns the requests to send; the caller (the simulator) delivers
them to the coordinator and hands the responses back through `handle`. `wake_at()` says when the
consumer next wants to act (heartbeat, auto-commit, backoff), and `tick(now)` lets it.

What follows the Java client (clients/.../consumer/internals, Kafka 3.x/4.x classic protocol):
* JoinGroup carries one protocol per configured assignor, each with a Subscription (topics sorted,
  assignor user data, owned partitions, KIP-341 generation, rack) of the configured version;
* rejoin rules of joinGroupIfNeeded and the response handlers: MEMBER_ID_REQUIRED (retry with the
  given id), UNKNOWN_MEMBER_ID (reset the member id), ILLEGAL_GENERATION (reset the generation, keep
  the id), REBALANCE_IN_PROGRESS (rejoin at once), coordinator errors (back off and retry),
  FENCED_INSTANCE_ID and the other fatal errors (the consumer stops);
* onJoinPrepare: auto-commit, then EAGER revokes everything, COOPERATIVE only unsubscribed topics;
  partitions are "lost" (dropped without commit) when the generation was reset;
* onJoinComplete: COOPERATIVE revokes owned-minus-assigned and requests a rejoin with the reason
  "need to revoke partitions and re-join"; a leader validates non-cooperative-sticky COOPERATIVE
  assignments (ConsumerCoordinator#validateCooperativeAssignment);
* heartbeats every heartbeat.interval.ms while COMPLETING_REBALANCE or STABLE; auto-commit every
  auto.commit.interval.ms while STABLE; close commits, then sends LeaveGroup unless static;
* the leader rejoins when the partition counts it assigned from change ("cached metadata has changed").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from coordinator_audit.core import consumer_protocol as cp
from coordinator_audit.core.client.assignors.base import (
    ConsumerPartitionAssignor,
    MemberAssignment,
    MemberSubscription,
    RebalanceProtocol,
    TopicPartition,
)
from coordinator_audit.core.errors import ConfigError
from coordinator_audit.core.protocol import (
    Errors,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberIdentity,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

PROTOCOL_TYPE = "consumer"
COOPERATIVE_STICKY = "cooperative-sticky"
REVOKE_REASON = "need to revoke partitions and re-join"

#: the errors on which the join and sync handlers mark the coordinator unknown before retrying
_COORDINATOR_ERRORS = frozenset({Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR,
                                 Errors.COORDINATOR_LOAD_IN_PROGRESS})

Request = JoinGroupRequest | SyncGroupRequest | HeartbeatRequest | LeaveGroupRequest | OffsetCommitRequest
Observer = Callable[[str, dict[str, Any]], None]


class MemberState(Enum):
    """Follows AbstractCoordinator.MemberState."""

    UNJOINED = "UNJOINED"
    PREPARING_REBALANCE = "PREPARING_REBALANCE"
    COMPLETING_REBALANCE = "COMPLETING_REBALANCE"
    STABLE = "STABLE"


@dataclass(frozen=True, slots=True)
class Generation:
    """Follows AbstractCoordinator.Generation."""

    generation_id: int = -1
    member_id: str = ""
    protocol_name: str | None = None


NO_GENERATION = Generation()


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerConfig:
    """The consumer settings the group loop reads (Java names in snake_case, Kafka 3.x defaults)."""

    group_id: str
    client_id: str
    client_host: str = "/127.0.0.1"
    group_instance_id: str | None = None
    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 3000
    max_poll_interval_ms: int = 300000
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5000
    retry_backoff_ms: int = 100
    subscription_version: int = 3
    client_rack: str | None = None
    join_api_version: int = 9
    records_per_sec: int = 50
    #: misbehaviour: keep owned partitions and the old generation after the group dropped this member
    stale_claims: bool = False

    def __post_init__(self) -> None:
        if self.subscription_version not in (0, 1, 2, 3):
            raise ConfigError(f"subscription_version must be 0..3, got {self.subscription_version}")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ConfigError("heartbeat_interval_ms must be lower than session_timeout_ms")


@dataclass(slots=True)
class _Position:
    base: int
    since_ms: int


@dataclass(slots=True)
class _Inflight:
    kind: str
    generation: Generation
    extra: dict[str, Any] = field(default_factory=dict)


def select_rebalance_protocol(assignors: Sequence[ConsumerPartitionAssignor]) -> RebalanceProtocol:
    """Follows the ConsumerCoordinator constructor: the highest protocol every assignor supports."""
    if not assignors:
        raise ConfigError("partition.assignment.strategy needs at least one assignor")
    common = set(assignors[0].supported_protocols)
    for a in assignors[1:]:
        common &= set(a.supported_protocols)
    if not common:
        raise ConfigError(f"assignors {[a.name for a in assignors]} have no commonly supported rebalance protocol")
    return max(common)


class GroupConsumer:
    """One consumer process's group membership, driven by explicit time (see the module docstring)."""

    def __init__(self, config: ConsumerConfig, assignors: Sequence[ConsumerPartitionAssignor], *,
                 topics: Iterable[str], metadata: Callable[[], Mapping[str, int]],
                 committed: Callable[[str, int], int | None], next_correlation_id: Callable[[], int],
                 observer: Observer | None = None) -> None:
        self.config = config
        self.assignors = list(assignors)
        self.protocol = select_rebalance_protocol(self.assignors)
        self.subscription: tuple[str, ...] = tuple(sorted(set(topics)))
        self._metadata = metadata
        self._committed = committed
        self._next_cid = next_correlation_id
        self._observe = observer or (lambda kind, data: None)
        self.state = MemberState.UNJOINED
        self.generation = NO_GENERATION
        self.owned: dict[TopicPartition, _Position] = {}
        self.rejoin_needed = True
        self.rejoin_reason = ""
        self.needs_join_prepare = True
        self.joined_subscription: tuple[str, ...] | None = None
        self.is_leader = False
        self.assignment_snapshot: dict[str, int] | None = None
        self.group_subscription: set[str] = set()
        self.fatal: str | None = None
        self.closed = False
        self.closing = False
        self.paused_until: int | None = None
        self._held: list[tuple[Any, int]] = []
        self._inflight: dict[int, _Inflight] = {}
        self._join_inflight = False
        self._prepare_commit_inflight = False
        self._prepare_commit_done = False
        self._commit_inflight = False
        self._hb_inflight = False
        self._next_heartbeat: int | None = None
        self._next_auto_commit: int | None = None
        self._coordinator_back_at = 0
        self._stale_generation: int | None = None
        self._now = 0

    # ----------------------------------------------------------------------------------------------
    # lifecycle

    def start(self, now: int) -> list[Request]:
        self._now = now
        self._observe("start", {})
        return self._drive(now)

    def crash(self) -> None:
        """The process dies: no LeaveGroup, no commit, in-flight responses are ignored."""
        self.closed = True
        self._observe("crash", {"member_id": self.generation.member_id})

    def close(self, now: int) -> list[Request]:
        """Follows ConsumerCoordinator#close: commit synchronously (auto-commit), then onLeavePrepare and
        maybeLeaveGroup (skipped for static members, whose membership only the session timeout ends)."""
        if self.closed or self.fatal:
            self.closed = True
            return []
        self._now = now
        self.closing = True
        if self.config.enable_auto_commit and self.state is MemberState.STABLE and self.owned:
            req = self._commit_request(now, "close")
            if req is not None:
                return [req]
        return self._finish_close(now)

    def _finish_close(self, now: int) -> list[Request]:
        out: list[Request] = []
        self.owned.clear()
        gen = self.generation
        if (self.config.group_instance_id is None and self.state is not MemberState.UNJOINED
                and gen.member_id):
            reason = "the consumer is being closed"
            req = LeaveGroupRequest(group_id=self.config.group_id, correlation_id=self._next_cid(),
                                    members=(MemberIdentity(gen.member_id, None, reason),))
            self._inflight[req.correlation_id] = _Inflight("leave", gen)
            out.append(req)
            self._observe("leave", {"member_id": gen.member_id, "reason": reason})
        self.closed = True
        self.state = MemberState.UNJOINED
        self.generation = NO_GENERATION
        return out

    def pause(self, now: int, ms: int) -> None:
        """The process stalls (GC pause, VM freeze): no heartbeats, no commits, no consumption."""
        self.paused_until = now + ms
        self._observe("pause", {"ms": ms, "member_id": self.generation.member_id})

    def subscribe(self, topics: Iterable[str], now: int) -> list[Request]:
        self.subscription = tuple(sorted(set(topics)))
        self._now = now
        if self.joined_subscription is not None and self.joined_subscription != self.subscription:
            self._request_rejoin("subscription has changed")
        return self._drive(now)

    def request_rejoin(self, reason: str, now: int) -> list[Request]:
        self._now = now
        self._request_rejoin(reason)
        return self._drive(now)

    def on_metadata_update(self, now: int) -> list[Request]:
        """Follows ConsumerCoordinator#rejoinNeededOrPending's first rule: a leader whose assignment
        snapshot no longer matches the metadata rejoins."""
        self._now = now
        if self.is_leader and self.assignment_snapshot is not None:
            meta = self._metadata()
            current = {t: meta.get(t, 0) for t in self.assignment_snapshot}
            if current != self.assignment_snapshot and not self.rejoin_needed:
                self._request_rejoin("cached metadata has changed")
        return self._drive(now)

    def rewind(self, topic: str, partition: int, by: int, now: int) -> None:
        """The application seeks back: the next commit of this partition is lower than the last one."""
        tp = TopicPartition(topic, partition)
        pos = self.owned.get(tp)
        if pos is None:
            return
        self.owned[tp] = _Position(max(0, self.position(tp, now) - by), now)

    def commit_with_generation(self, delta: int, now: int) -> list[Request]:
        """Misbehaviour: commits the owned positions with generation + delta (a wrong generation)."""
        if self.closed or self.fatal or not self.owned:
            return []
        gen = Generation(self.generation.generation_id + delta, self.generation.member_id,
                         self.generation.protocol_name)
        return [r for r in [self._commit_request(now, "wrong_generation", generation=gen)] if r is not None]

    # ----------------------------------------------------------------------------------------------
    # the loop

    @property
    def alive(self) -> bool:
        return not self.closed and self.fatal is None

    def position(self, tp: TopicPartition, now: int) -> int:
        pos = self.owned[tp]
        return pos.base + (max(0, now - pos.since_ms) * self.config.records_per_sec) // 1000

    def wake_at(self) -> int | None:
        """The next virtual time at which `tick` has something to do (None: only a response can help)."""
        if not self.alive or self.closing:
            return None
        if self.paused_until is not None:
            return self.paused_until
        times = []
        if (self.state in (MemberState.COMPLETING_REBALANCE, MemberState.STABLE) and not self._hb_inflight
                and self._next_heartbeat is not None):
            times.append(max(self._next_heartbeat, self._coordinator_back_at))
        if self.rejoin_needed or self.state is MemberState.UNJOINED:
            if not (self._join_inflight or self._prepare_commit_inflight):
                times.append(max(self._now, self._coordinator_back_at))
        elif (self._next_auto_commit is not None and self.state is MemberState.STABLE
              and not self._commit_inflight and self.config.enable_auto_commit):
            times.append(self._next_auto_commit)
        return min(times) if times else None

    def tick(self, now: int) -> list[Request]:
        return self._drive(now)

    def _drive(self, now: int) -> list[Request]:
        self._now = now
        if not self.alive or self.closing:
            return []
        if self.paused_until is not None:
            if now < self.paused_until:
                return []
            self._resume(now)
        out: list[Request] = []
        for response, _ in self._held:
            out.extend(self._handle(response, now))
        self._held.clear()
        if not self.alive:
            return out
        # heartbeat thread: only once the member has joined (hasNotJoinedGroup is false)
        if (self.state in (MemberState.COMPLETING_REBALANCE, MemberState.STABLE) and not self._hb_inflight
                and self._next_heartbeat is not None and now >= self._next_heartbeat
                and now >= self._coordinator_back_at):
            out.append(self._heartbeat_request(now))
        # main thread: poll()
        if self.rejoin_needed or self.state is MemberState.UNJOINED:
            out.extend(self._join_group_if_needed(now))
        elif (self.state is MemberState.STABLE and self.config.enable_auto_commit
              and self._next_auto_commit is not None and now >= self._next_auto_commit
              and not self._commit_inflight):
            self._next_auto_commit = now + self.config.auto_commit_interval_ms
            req = self._commit_request(now, "auto")
            if req is not None:
                out.append(req)
        return out

    def _resume(self, now: int) -> None:
        paused_for = now - (self.paused_until or now)
        start = (self.paused_until or now) - paused_for
        for tp, pos in self.owned.items():
            frozen = pos.base + (max(0, start - pos.since_ms) * self.config.records_per_sec) // 1000
            self.owned[tp] = _Position(frozen, now)
        self.paused_until = None
        if self._next_heartbeat is not None:
            self._next_heartbeat = now
        self._observe("resume", {"member_id": self.generation.member_id})

    def _join_group_if_needed(self, now: int) -> list[Request]:
        """Follows AbstractCoordinator#joinGroupIfNeeded (one step of its loop)."""
        if self._join_inflight or self._prepare_commit_inflight or now < self._coordinator_back_at:
            return []
        if self.needs_join_prepare:
            if (self.config.enable_auto_commit and self.state is MemberState.STABLE and self.owned
                    and not self._commit_inflight and not self._prepare_commit_done):
                req = self._commit_request(now, "join_prepare")
                if req is not None:
                    self._prepare_commit_inflight = True
                    return [req]
            self._on_join_prepare(now)
            self.needs_join_prepare = False
            self._prepare_commit_done = False
        return [self._join_request(now)]

    def _on_join_prepare(self, now: int) -> None:
        """Follows ConsumerCoordinator#onJoinPrepare (after its auto-commit)."""
        gen = self.generation
        if gen.generation_id == -1 or not gen.member_id:
            if self.owned:
                if self.config.stale_claims and self._stale_generation is not None:
                    self._observe("stale_claims", {"partitions": sorted(self.owned),
                                                   "generation": self._stale_generation})
                else:
                    self._observe("lost", {"partitions": sorted(self.owned)})
                    self.owned.clear()
        elif self.protocol is RebalanceProtocol.EAGER:
            if self.owned:
                self._observe("revoked", {"partitions": sorted(self.owned), "when": "join_prepare"})
            self.owned.clear()
        else:
            gone = [tp for tp in self.owned if tp.topic not in self.subscription]
            if gone:
                self._observe("revoked", {"partitions": sorted(gone), "when": "join_prepare"})
                for tp in gone:
                    del self.owned[tp]
        self.is_leader = False
        self.group_subscription = set()

    def _request_rejoin(self, reason: str) -> None:
        self.rejoin_reason = reason
        self.rejoin_needed = True

    def _reset_state_and_rejoin(self, reason: str, reset_member_id: bool) -> None:
        """Follows AbstractCoordinator#resetStateAndRejoin."""
        if self.generation.generation_id >= 0:
            self._stale_generation = self.generation.generation_id
        self.state = MemberState.UNJOINED
        self.generation = NO_GENERATION if reset_member_id else Generation(-1, self.generation.member_id, None)
        self._next_heartbeat = None
        self._request_rejoin(reason)
        self.needs_join_prepare = True

    def _fail(self, error: str) -> None:
        self.fatal = error
        self._observe("fatal", {"error": error, "member_id": self.generation.member_id})

    # ----------------------------------------------------------------------------------------------
    # requests

    def _owned_sorted(self) -> list[TopicPartition]:
        return sorted(self.owned)

    def _subscription_bytes(self, assignor: ConsumerPartitionAssignor) -> bytes:
        owned = self._owned_sorted()
        claim_generation = self.generation.generation_id
        if self.config.stale_claims and claim_generation == -1 and owned and self._stale_generation is not None:
            claim_generation = self._stale_generation
        if claim_generation != self.generation.generation_id:
            # the stale claimant reports what it owned in the generation it still believes in
            user_data = assignor.subscription_user_data(self.subscription, owned, claim_generation)
        else:
            user_data = assignor.subscription_user_data(self.subscription)
        grouped: dict[str, list[int]] = {}
        for tp in owned:
            grouped.setdefault(tp.topic, []).append(tp.partition)
        version = self.config.subscription_version
        sub = cp.Subscription(
            version=version,
            topics=self.subscription,
            user_data=user_data,
            owned_partitions=tuple(cp.TopicPartitions(t, tuple(ps)) for t, ps in grouped.items())
            if version >= 1 else (),
            generation_id=claim_generation if version >= 2 else -1,
            rack_id=self.config.client_rack if version >= 3 else None,
        )
        return cp.encode_subscription(sub)

    def _join_request(self, now: int) -> JoinGroupRequest:
        """Follows AbstractCoordinator#sendJoinGroupRequest and ConsumerCoordinator#metadata."""
        self.state = MemberState.PREPARING_REBALANCE
        self.joined_subscription = self.subscription
        protocols = tuple((a.name, self._subscription_bytes(a)) for a in self.assignors)
        reason = self.rejoin_reason or None
        req = JoinGroupRequest(
            group_id=self.config.group_id, session_timeout_ms=self.config.session_timeout_ms,
            rebalance_timeout_ms=self.config.max_poll_interval_ms, member_id=self.generation.member_id,
            group_instance_id=self.config.group_instance_id, protocol_type=PROTOCOL_TYPE, protocols=protocols,
            reason=reason[:255] if reason else None, client_id=self.config.client_id,
            client_host=self.config.client_host, api_version=self.config.join_api_version,
            correlation_id=self._next_cid())
        self._inflight[req.correlation_id] = _Inflight("join", self.generation)
        self._join_inflight = True
        self._observe("join", {"member_id": self.generation.member_id, "reason": self.rejoin_reason,
                               "topics": list(self.subscription),
                               "protocols": [a.name for a in self.assignors]})
        return req

    def _heartbeat_request(self, now: int) -> HeartbeatRequest:
        req = HeartbeatRequest(group_id=self.config.group_id, generation_id=self.generation.generation_id,
                               member_id=self.generation.member_id,
                               group_instance_id=self.config.group_instance_id, correlation_id=self._next_cid())
        self._inflight[req.correlation_id] = _Inflight("heartbeat", self.generation)
        self._hb_inflight = True
        self._next_heartbeat = now + self.config.heartbeat_interval_ms
        return req

    def _commit_request(self, now: int, why: str, *, generation: Generation | None = None
                        ) -> OffsetCommitRequest | None:
        """Follows ConsumerCoordinator#sendOffsetCommitRequest: every owned partition's position, with
        the generation only while STABLE (otherwise the commit fails locally and nothing is sent)."""
        if generation is None:
            if self.state is not MemberState.STABLE:
                return None
            generation = self.generation
        if not self.owned:
            return None
        by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
        offsets: dict[TopicPartition, int] = {}
        for tp in self._owned_sorted():
            off = self.position(tp, now)
            offsets[tp] = off
            by_topic.setdefault(tp.topic, []).append(OffsetCommitRequestPartition(tp.partition, off, 0, ""))
        req = OffsetCommitRequest(
            group_id=self.config.group_id, generation_id=generation.generation_id, member_id=generation.member_id,
            group_instance_id=self.config.group_instance_id,
            topics=tuple(OffsetCommitRequestTopic(t, tuple(ps)) for t, ps in by_topic.items()),
            correlation_id=self._next_cid())
        self._inflight[req.correlation_id] = _Inflight("commit", self.generation, {"why": why, "offsets": offsets})
        self._commit_inflight = True
        self._observe("commit", {"why": why, "generation_id": generation.generation_id,
                                 "member_id": generation.member_id,
                                 "offsets": {f"{t}-{p}": o for (t, p), o in offsets.items()}})
        return req

    # ----------------------------------------------------------------------------------------------
    # responses

    def handle(self, response: Any, now: int) -> list[Request]:
        """Takes the response to one of this consumer's requests; returns what to send next."""
        self._now = now
        if self.closed or self.fatal:
            return []
        if self.paused_until is not None and now < self.paused_until:
            self._held.append((response, now))
            return []
        out = self._handle(response, now)
        return out + self._drive(now)

    def request_timed_out(self, correlation_id: int, now: int) -> list[Request]:
        """A request got no answer within its timeout (the client disconnects and retries)."""
        sent = self._inflight.pop(correlation_id, None)
        if sent is None or not self.alive:
            return []
        if sent.kind in ("join", "sync"):
            self._join_inflight = False
            self._request_rejoin("rebalance failed due to TimeoutException")
        elif sent.kind == "heartbeat":
            self._hb_inflight = False
        elif sent.kind == "commit":
            self._commit_inflight = False
            self._prepare_commit_inflight = False
        self._coordinator_unknown(now)
        return self._drive(now)

    def _handle(self, response: Any, now: int) -> list[Request]:
        sent = self._inflight.pop(response.correlation_id, None)
        if sent is None:
            return []
        if isinstance(response, JoinGroupResponse):
            self._join_inflight = False
            return self._on_join_response(response, sent, now)
        if isinstance(response, SyncGroupResponse):
            self._join_inflight = False
            return self._on_sync_response(response, sent, now)
        if isinstance(response, HeartbeatResponse):
            self._hb_inflight = False
            self._on_heartbeat_response(response, sent, now)
            return []
        if isinstance(response, OffsetCommitResponse):
            self._commit_inflight = False
            return self._on_commit_response(response, sent, now)
        if isinstance(response, LeaveGroupResponse):
            return []
        raise TypeError(f"unexpected response {response!r}")

    def _generation_unchanged(self, sent: _Inflight) -> bool:
        return sent.generation == self.generation

    def _coordinator_unknown(self, now: int) -> None:
        self._coordinator_back_at = now + self.config.retry_backoff_ms

    def _on_join_response(self, resp: JoinGroupResponse, sent: _Inflight, now: int) -> list[Request]:
        """Follows AbstractCoordinator.JoinGroupResponseHandler#handle."""
        err = Errors(resp.error_code)
        if err is Errors.NONE:
            if self.state is not MemberState.PREPARING_REBALANCE:
                self._request_rejoin("rebalance failed due to UnjoinedGroupException")
                return []
            self.state = MemberState.COMPLETING_REBALANCE
            self._next_heartbeat = now + self.config.heartbeat_interval_ms
            self.generation = Generation(resp.generation_id, resp.member_id, resp.protocol_name)
            self._stale_generation = None
            self._observe("joined", {"generation_id": resp.generation_id, "member_id": resp.member_id,
                                     "leader": resp.leader == resp.member_id})
            if resp.leader == resp.member_id:
                return self._on_leader_elected(resp, now)
            return [self._sync_request(())]
        if err is Errors.MEMBER_ID_REQUIRED:
            self.generation = Generation(-1, resp.member_id, None)
            self._request_rejoin(f"need to re-join with the given member-id: {resp.member_id}")
            return []
        if err is Errors.UNKNOWN_MEMBER_ID:
            if self._generation_unchanged(sent):
                self._reset_state_and_rejoin(f"encountered {err.name} from JOIN_GROUP response", True)
            return self._rebalance_failed(err, now)
        if err in (Errors.REBALANCE_IN_PROGRESS, Errors.ILLEGAL_GENERATION) or err in _COORDINATOR_ERRORS:
            return self._rebalance_failed(err, now)
        self._fail(f"JoinGroup failed: {err.name}")
        return []

    def _rebalance_failed(self, err: Errors, now: int) -> list[Request]:
        """Follows AbstractCoordinator#joinGroupIfNeeded on a join or sync future that failed with a
        retriable error: a rejoin is requested with the exception's simple name; for a coordinator
        error the response handler has first marked the coordinator unknown."""
        if err in _COORDINATOR_ERRORS:
            self._coordinator_unknown(now)
        self._request_rejoin(f"rebalance failed due to {_exception_name(err)}")
        return []

    def _sync_request(self, assignments: tuple[tuple[str, bytes], ...]) -> SyncGroupRequest:
        gen = self.generation
        req = SyncGroupRequest(group_id=self.config.group_id, generation_id=gen.generation_id,
                               member_id=gen.member_id, group_instance_id=self.config.group_instance_id,
                               protocol_type=PROTOCOL_TYPE, protocol_name=gen.protocol_name,
                               assignments=assignments, correlation_id=self._next_cid())
        self._inflight[req.correlation_id] = _Inflight("sync", gen)
        self._join_inflight = True
        return req

    def _assignor(self, name: str | None) -> ConsumerPartitionAssignor:
        for a in self.assignors:
            if a.name == name:
                return a
        raise ConfigError(f"coordinator selected invalid assignment protocol: {name!r}")

    def _on_leader_elected(self, resp: JoinGroupResponse, now: int) -> list[Request]:
        """Follows ConsumerCoordinator#onLeaderElected."""
        assignor = self._assignor(resp.protocol_name)
        subscriptions: dict[str, MemberSubscription] = {}
        owned: dict[str, set[TopicPartition]] = {}
        for m in resp.members:
            sub = cp.decode_subscription(m.metadata)
            ms = MemberSubscription(
                topics=tuple(sub.topics), user_data=sub.user_data,
                owned_partitions=tuple(TopicPartition(tp.topic, p) for tp in sub.owned_partitions for p in tp.partitions),
                generation_id=sub.generation_id, group_instance_id=m.group_instance_id, rack_id=sub.rack_id)
            subscriptions[m.member_id] = ms
            owned[m.member_id] = set(ms.owned_partitions)
            self.group_subscription.update(ms.topics)
        self.is_leader = True
        meta = self._metadata()
        if resp.skip_assignment:
            self.assignment_snapshot = {t: meta.get(t, 0) for t in sorted(self.group_subscription)}
            return [self._sync_request(())]
        ppt = {t: meta[t] for t in sorted(self.group_subscription) if meta.get(t, 0) > 0}
        try:
            result = assignor.assign(ppt, subscriptions)
        except Exception as e:
            self._fail(f"assignor {assignor.name} failed: {e}")
            return []
        if self.protocol is RebalanceProtocol.COOPERATIVE and assignor.name != COOPERATIVE_STICKY:
            bad = _cooperative_violations(owned, result)
            if bad:
                self._fail("Assignor supporting the COOPERATIVE protocol violates its requirements")
                return []
        self.assignment_snapshot = {t: meta.get(t, 0) for t in sorted(self.group_subscription)}
        assignments = tuple((member, _encode_assignment(a)) for member, a in result.items())
        return [self._sync_request(assignments)]

    def _on_sync_response(self, resp: SyncGroupResponse, sent: _Inflight, now: int) -> list[Request]:
        """Follows AbstractCoordinator.SyncGroupResponseHandler#handle and joinGroupIfNeeded's tail."""
        err = Errors(resp.error_code)
        if err is Errors.NONE:
            if self.generation.generation_id == -1 or self.state is not MemberState.COMPLETING_REBALANCE:
                self._reset_state_and_rejoin("rebalance failed since the generation/state was modified", True)
                return []
            self.state = MemberState.STABLE
            self.rejoin_needed = False
            self.rejoin_reason = ""
            self._on_join_complete(resp.assignment, now)
            self.needs_join_prepare = True
            return []
        if err is Errors.FENCED_INSTANCE_ID:
            self._fail("SyncGroup failed: FENCED_INSTANCE_ID")
            return []
        if err in (Errors.UNKNOWN_MEMBER_ID, Errors.ILLEGAL_GENERATION):
            if self._generation_unchanged(sent):
                self._reset_state_and_rejoin(f"encountered {err.name} from SYNC_GROUP response",
                                             err is not Errors.ILLEGAL_GENERATION)
            return self._rebalance_failed(err, now)
        if err is Errors.REBALANCE_IN_PROGRESS or err in _COORDINATOR_ERRORS:
            return self._rebalance_failed(err, now)
        self._fail(f"SyncGroup failed: {err.name}")
        return []

    def _on_join_complete(self, assignment_bytes: bytes, now: int) -> None:
        """Follows ConsumerCoordinator#onJoinComplete."""
        if not self.is_leader:
            self.assignment_snapshot = None
        if len(assignment_bytes) < 2:
            self._fail("insufficient bytes to read the assignment from the sync-group response")
            return
        assignment = cp.decode_assignment(assignment_bytes)
        assigned = {TopicPartition(tp.topic, p) for tp in assignment.assigned_partitions for p in tp.partitions}
        if any(tp.topic not in self.subscription for tp in assigned):
            self._observe("assignment_mismatch", {"partitions": sorted(assigned)})
            self._request_rejoin("received assignment does not match the current subscription")
            return
        owned = set(self.owned)
        added = assigned - owned
        if self.protocol is RebalanceProtocol.COOPERATIVE:
            revoked = owned - assigned
            if revoked:
                for tp in revoked:
                    del self.owned[tp]
                self._observe("revoked", {"partitions": sorted(revoked), "when": "join_complete"})
                self._request_rejoin(REVOKE_REASON)
        else:
            for tp in owned - assigned:
                del self.owned[tp]
        assignor = self._assignor(self.generation.protocol_name)
        # Java hands onAssignment the partitions in wire order; sticky user data depends on it.
        wire_order = tuple(TopicPartition(tp.topic, p) for tp in assignment.assigned_partitions
                           for p in tp.partitions)
        assignor.on_assignment(MemberAssignment(wire_order, assignment.user_data),
                               self.generation.generation_id)
        self._next_auto_commit = now + self.config.auto_commit_interval_ms
        for tp in sorted(added):
            start = self._committed(tp.topic, tp.partition)
            self.owned[tp] = _Position(start or 0, now)
        self._observe("assigned", {"generation_id": self.generation.generation_id,
                                   "member_id": self.generation.member_id,
                                   "partitions": sorted(assigned), "added": sorted(added)})

    def _on_heartbeat_response(self, resp: HeartbeatResponse, sent: _Inflight, now: int) -> None:
        """Follows AbstractCoordinator.HeartbeatResponseHandler#handle."""
        err = Errors(resp.error_code)
        if err is Errors.NONE:
            return
        if err is Errors.REBALANCE_IN_PROGRESS:
            if self.state is MemberState.STABLE:
                self._request_rejoin("group is already rebalancing")
            return
        if err in (Errors.ILLEGAL_GENERATION, Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID):
            if self._generation_unchanged(sent):
                self._reset_state_and_rejoin(f"encountered {err.name} from HEARTBEAT response",
                                             err is not Errors.ILLEGAL_GENERATION)
            if err is Errors.FENCED_INSTANCE_ID:
                self._fail("Heartbeat failed: FENCED_INSTANCE_ID")
            return
        if err in (Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR):
            self._coordinator_unknown(now)
            self._next_heartbeat = now + self.config.retry_backoff_ms
            return
        self._fail(f"Heartbeat failed: {err.name}")

    def _on_commit_response(self, resp: OffsetCommitResponse, sent: _Inflight, now: int) -> list[Request]:
        """Follows ConsumerCoordinator.OffsetCommitResponseHandler#handle."""
        errors = {Errors(p.error_code) for t in resp.topics for p in t.partitions} - {Errors.NONE}
        why = sent.extra.get("why")
        self._observe("commit_result", {"why": why, "errors": sorted(e.name for e in errors)})
        err = min(errors) if errors else Errors.NONE
        if err is Errors.FENCED_INSTANCE_ID and self._generation_unchanged(sent):
            self._fail("OffsetCommit failed: FENCED_INSTANCE_ID")
            return []
        if err is Errors.REBALANCE_IN_PROGRESS:
            self._request_rejoin("offset commit failed since group is already rebalancing")
        elif err in (Errors.UNKNOWN_MEMBER_ID, Errors.ILLEGAL_GENERATION):
            if self._generation_unchanged(sent) or self.state is not MemberState.PREPARING_REBALANCE:
                self._reset_state_and_rejoin(f"encountered {err.name} from OFFSET_COMMIT response",
                                             err is not Errors.ILLEGAL_GENERATION)
        elif err in (Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR):
            self._coordinator_unknown(now)
        if why == "join_prepare":
            self._prepare_commit_inflight = False
            self._prepare_commit_done = True
        elif why == "close":
            return self._finish_close(now)
        return []


def _exception_name(err: Errors) -> str:
    return {
        Errors.UNKNOWN_MEMBER_ID: "UnknownMemberIdException",
        Errors.ILLEGAL_GENERATION: "IllegalGenerationException",
        Errors.REBALANCE_IN_PROGRESS: "RebalanceInProgressException",
        Errors.COORDINATOR_NOT_AVAILABLE: "CoordinatorNotAvailableException",
        Errors.NOT_COORDINATOR: "NotCoordinatorException",
        Errors.COORDINATOR_LOAD_IN_PROGRESS: "CoordinatorLoadInProgressException",
    }.get(err, err.name)


def _cooperative_violations(owned: Mapping[str, set[TopicPartition]],
                            result: Mapping[str, MemberAssignment]) -> set[TopicPartition]:
    """Follows ConsumerCoordinator#validateCooperativeAssignment: partitions added to one member while
    revoked from another in the same assignment."""
    added: set[TopicPartition] = set()
    revoked: set[TopicPartition] = set()
    for member, a in result.items():
        mine = owned.get(member, set())
        parts = set(a.partitions)
        added |= parts - mine
        revoked |= mine - parts
    return added & revoked


def _encode_assignment(a: MemberAssignment) -> bytes:
    """Follows ConsumerProtocol#serializeAssignment (v3): partitions grouped by topic in first-seen order."""
    grouped: dict[str, list[int]] = {}
    for tp in a.partitions:
        grouped.setdefault(tp.topic, []).append(tp.partition)
    partitions = tuple(cp.TopicPartitions(t, tuple(ps)) for t, ps in grouped.items())
    return cp.encode_assignment(cp.Assignment(version=3, assigned_partitions=partitions, user_data=a.user_data))
