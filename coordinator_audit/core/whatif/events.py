"""A group's member lifecycle, read back from its `__consumer_offsets` history.

`derive_history(records)` walks one group's records in log order. Every GroupMetadata value is read
the way the audit reads it (`GroupSnapshot`); consecutive states are compared member by member and
the offset commits between them date each member's last sign of life. The result, a
`GroupHistory`, lists per consumer process its starts, clean leaves, crashes (session expiries),
poll timeouts, subscription changes and rejoins (a rebalance the audit's cause
`metadata_or_leader_rejoin` explains: same members, subscriptions and assignor) with times, and the settings the log reveals (session and
rebalance timeouts, assignor, static instance ids, coordinator flavour, topics).

The log does not say everything. Each thing it cannot tell is decided by a rule written in
`Assumptions` (the defaults are the field values) and every event says, in `basis`, whether its time
was read from the log (or from the broker's own log, `BROKER_LOG`) or set by one of those rules.
Nothing is guessed silently.

Who is who across generations: a static member is its `group.instance.id`; a dynamic member is its
client id and client host (a restarted process keeps both and gets a new member id). Two processes
alive at once under the same client id and host become two consumers (`name`, `name#2`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from coordinator_audit.core.audit import (
    AssignmentRow,
    GenerationRow,
    GroupSnapshot,
    OffsetCommitRow,
    RebalanceCauseRow,
    audit_group,
)
from coordinator_audit.core.audit.causes import subscription_change
from coordinator_audit.core.errors import CoordinatorAuditError
from coordinator_audit.core.records import GroupMetadataKey, GroupMetadataValue, OffsetCommitKey, decode

__all__ = ["BROKER_LOG", "EXACT_BASES", "Assumptions", "BrokerStart", "Consumer", "GroupHistory", "HistoryError",
           "LifecycleEvent", "ObservedMember", "ObservedState", "derive_history", "derive_history_from_rows"]

EVENT_KINDS = ("start", "close", "crash", "poll_timeout", "subscribe", "rejoin")

BROKER_LOG = "broker log"
"""The basis of an event dated by the broker's own log: the "Preparing to rebalance" line of the
round a member's JoinGroup or LeaveGroup started (`GroupCoordinator#prepareRebalance`, logged with
the reason naming the member; the `generations` columns `rebalance_started_at` and `broker_reason`,
kept when the audit was given the broker's server.log)."""

EXACT_BASES = frozenset({"log", BROKER_LOG})
"""Bases of event times read, not inferred (a calibration leaves them)."""

_BROKER_JOIN = re.compile(r"^Adding new member (?P<member>\S+) with group instance id ")
_BROKER_LEAVE = re.compile(r"^(?:Removing member |explicit `LeaveGroup` request for \()(?P<member>[^\s,()]+)"
                           r"(?: on LeaveGroup|\) members)")
"""One member's LeaveGroup: the Scala coordinator's reason, then the Java coordinator's (Kafka 4)."""


class HistoryError(CoordinatorAuditError):
    """The records hold no history a replay can start from (named in the message)."""


@dataclass(frozen=True, slots=True)
class Assumptions:
    """What the log cannot tell, and the rule used in its place (each field documents its rule).

    The defaults are Kafka's client defaults where one exists."""

    heartbeat_interval_ms: int = 3000
    """heartbeat.interval.ms is never persisted: Kafka's default 3000 ms (a third of the session timeout
    when that is shorter than 9 s)."""
    initial_rebalance_delay_ms: int = 3000
    """group.initial.rebalance.delay.ms is a broker setting the log does not carry: Kafka's default. The
    members of a group's first generation started that long before its join phase completed, except
    under the Java coordinator, whose creation record is written by the first JoinGroup (its time is
    then read from the log)."""
    expiry_gap_fraction: float = 0.5
    """A dynamic member that vanished between two generations left cleanly (LeaveGroup) when the next
    join phase completed less than this fraction of its session timeout after its last sign of life
    (last commit, or the previous join completion), else its session expired (it crashed). A closing
    consumer commits and leaves at once and the others rejoin within a heartbeat; an expiry comes a
    session timeout after the last heartbeat."""
    crash_before_expiry: str = "session"
    """When a crashed process died: one session timeout before the join phase its expiry started
    completed (the last heartbeat is up to one heartbeat interval before the crash, and the survivors
    rejoin up to one heartbeat after the expiry; the two cancel on average), and never before its
    last commit."""
    join_lead_ms: int | None = None
    """How long before a join phase completed a member that joined (or left cleanly, or changed its
    subscription) sent its request: None means half a heartbeat interval (the others rejoin at their
    next heartbeat). A group's first generation instead starts the initial rebalance delay earlier."""
    static_stop: str = "close"
    """A static member that disappeared sent no LeaveGroup either way (`AbstractCoordinator#maybeLeaveGroup`
    skips it for a group.instance.id, KIP-345); it is taken as an operator's close (under dynamic
    membership the replay's consumer then sends LeaveGroup), not a crash."""
    session_timeout_ms: int = 45000
    """session.timeout.ms of a member whose source does not say (assignments rows without the
    `session_timeout_ms` column, written before the audit kept it): Kafka's default."""
    rebalance_timeout_ms: int = 300000
    """max.poll.interval.ms (the rebalance timeout) of a member whose source does not say (a
    GroupMetadata value v0, or assignments rows without `rebalance_timeout_ms`): Kafka's default."""
    poll_timeout_fraction: float = 0.9
    """A member removed at least this fraction of its rebalance timeout (max.poll.interval.ms) after its
    last sign of life, when that timeout is longer than its session timeout, was removed by its
    heartbeat thread's LeaveGroup after a poll timeout (`AbstractCoordinator.HeartbeatThread#run`,
    KIP-62: the heartbeats go on while processing stalls): its processing stalled at that last sign."""

    def heartbeat(self, session_timeout_ms: int) -> int:
        return min(self.heartbeat_interval_ms, max(1, session_timeout_ms // 3))

    def lead(self, session_timeout_ms: int) -> int:
        return self.join_lead_ms if self.join_lead_ms is not None else self.heartbeat(session_timeout_ms) // 2


@dataclass(frozen=True, slots=True)
class Consumer:
    """One consumer process slot: what the log says about it when it first joined (a restart that
    changes the subscription is a `subscribe` event at its start; the timeouts are the first ones)."""

    name: str
    client_id: str
    client_host: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    """What the member sent as its rebalance timeout: max.poll.interval.ms for the Java client."""
    topics: tuple[str, ...]
    """Its subscription when it first joined (changes are `subscribe` events)."""


@dataclass(frozen=True, slots=True)
class LifecycleEvent:
    """One thing that happened to one consumer process, at `at_ms` (epoch ms)."""

    at_ms: int
    kind: str
    """start, close (a LeaveGroup or a static close), crash (no LeaveGroup: the session expires),
    poll_timeout (processing stalled at `at_ms`; the heartbeat thread leaves max.poll.interval.ms later),
    subscribe (`topics` is the new subscription), rejoin (a running member sent a JoinGroup on its own,
    e.g. on a metadata change: the member the audit's `metadata_or_leader_rejoin` cause names)."""
    consumer: str
    basis: str
    """How `at_ms` was found: "log" (a record's own time) or the `Assumptions` rule that set it."""
    topics: tuple[str, ...] = ()
    generation_id: int | None = None
    """The generation whose record revealed the event."""


@dataclass(frozen=True, slots=True)
class GroupHistory:
    """One group's lifecycle and settings, ready to replay (`coordinator_audit.core.whatif.replay`)."""

    group_id: str
    start_ms: int
    end_ms: int
    """The first and last record's timestamps."""
    topics: tuple[tuple[str, int], ...]
    """Topic -> partition count: one more than the highest partition any generation assigned."""
    assignor: str
    """The protocol (assignor) the group's generations selected, the last one when it changed."""
    flavour: str
    """The coordinator that wrote the log: "java" (a generation-0 creation record) or "scala"."""
    initial_rebalance_delay_ms: int
    static: bool
    """Every member carried a group.instance.id."""
    consumers: tuple[Consumer, ...]
    events: tuple[LifecycleEvent, ...]
    assumptions: Assumptions
    notes: tuple[str, ...] = ()
    """What was skipped or could not be told apart, in words (unreadable records, protocol changes)."""
    member_ids: tuple[str, ...] = ()
    """The member ids the coordinator gave, in the order they first appear."""

    def consumer(self, name: str) -> Consumer:
        for c in self.consumers:
            if c.name == name:
                return c
        raise KeyError(name)

    def describe(self) -> list[str]:
        """The history as lines of text (one per event), for a report."""
        out = []
        for e in self.events:
            extra = f" topics={list(e.topics)}" if e.kind == "subscribe" else ""
            out.append(f"+{(e.at_ms - self.start_ms) / 1000:8.3f}s {e.kind:<12} {e.consumer}{extra} ({e.basis})")
        return out


@dataclass(frozen=True, slots=True)
class ObservedMember:
    """One member of one persisted group state, as far as the source tells."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout: int
    rebalance_timeout: int
    topics: frozenset[str] | None
    """Its subscription; None when not known (then the topics of its assignment stand in)."""
    assigned: frozenset[tuple[str, int]]

    @property
    def assigned_topics(self) -> frozenset[str]:
        return frozenset(t for t, _ in self.assigned)


@dataclass(frozen=True, slots=True)
class BrokerStart:
    """The broker's start of the join phase that ended in a generation (`generations` columns
    `rebalance_started_at`, `broker_reason`): when, and the request that started it."""

    at_ms: int
    reason: str

    def member(self, pattern: re.Pattern[str]) -> str | None:
        m = pattern.match(self.reason)
        return m.group("member") if m else None


@dataclass(frozen=True, slots=True)
class ObservedState:
    """One persisted group state (a GroupMetadata record: assignment, empty, replacement or creation record)."""

    generation: int
    record_ms: int
    state_timestamp: int | None
    protocol: str | None
    members: tuple[ObservedMember, ...]
    broker_start: BrokerStart | None = None
    """The broker's start of the join phase that ended here, when its log was given."""
    rejoined: str | None = None
    """The kept member whose own JoinGroup began this round, when the audit's primary cause of the
    generation is `metadata_or_leader_rejoin` (it names that member)."""


@dataclass(slots=True)
class _Slot:
    name: str
    member_id: str
    member: ObservedMember
    last_sign: int
    """Last commit of a partition assigned to it, or its latest join completion."""


@dataclass(slots=True)
class _Walk:
    a: Assumptions
    group_id: str
    slots: dict[str, _Slot] = field(default_factory=dict)  # consumer name -> live slot
    consumers: dict[str, Consumer] = field(default_factory=dict)
    events: list[LifecycleEvent] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    topics: dict[str, int] = field(default_factory=dict)
    prev: ObservedState | None = None
    owners: dict[tuple[str, int], str] = field(default_factory=dict)  # partition -> consumer name
    stopped_at: dict[str, int] = field(default_factory=dict)  # consumer name -> its last stop event
    started_at: dict[str, int] = field(default_factory=dict)  # consumer name -> its last start event
    member_ids: list[str] = field(default_factory=list)  # in the order they first appear
    created: int | None = None
    """The Java coordinator's creation record's time while the group awaits its first generation."""
    delay: int = 3000

    def identity(self, m: ObservedMember) -> str:
        if m.group_instance_id is not None:
            return m.group_instance_id
        return f"{m.client_id}@{m.client_host}"

    def free_name(self, base: str) -> str:
        if base not in self.slots:
            return base
        n = 2
        while f"{base}#{n}" in self.slots:
            n += 1
        return f"{base}#{n}"

    def event(self, at: int, kind: str, name: str, basis: str, gen: int | None, topics: tuple[str, ...] = ()
              ) -> None:
        self.events.append(LifecycleEvent(at, kind, name, basis, topics, gen))
        if kind in ("close", "crash", "poll_timeout"):
            self.stopped_at[name] = at
        elif kind == "start":
            self.started_at[name] = at

    def on_commit(self, topic: str, partition: int, ts: int) -> None:
        name = self.owners.get((topic, partition))
        if name is not None and name in self.slots:
            slot = self.slots[name]
            slot.last_sign = max(slot.last_sign, ts)

    def on_state(self, snap: ObservedState) -> None:
        prev = self.prev
        ts = snap.record_ms
        done = snap.state_timestamp if snap.state_timestamp is not None else ts
        same_generation = prev is not None and prev.generation == snap.generation and snap.members
        if snap.generation == 0 and not snap.members and prev is None:
            self.prev = snap  # the Java coordinator's creation record
            self.created = snap.state_timestamp if snap.state_timestamp is not None else ts
            return
        now = {m.member_id: m for m in snap.members}
        by_member = {s.member_id: name for name, s in self.slots.items()}
        # who left: live slots whose member id is gone
        gone = [name for name, s in self.slots.items() if s.member_id not in now]
        for name in gone:
            slot = self.slots.pop(name)
            if same_generation:
                self._stop_replaced(name, slot, ts, snap.generation)
            else:
                self._stop(name, slot, done, ts, snap)
        if not same_generation and snap.members and self.first_stable_pending(prev):
            lead_first = self.delay
        else:
            lead_first = None
        for m in snap.members:
            current = by_member.get(m.member_id)
            if current is not None and current in self.slots:
                name = current
                slot = self.slots[name]
                if m.topics is not None and slot.member.topics is not None and m.topics != slot.member.topics:
                    t = tuple(sorted(m.topics))
                    self.event(max(done - self.a.lead(m.session_timeout), slot.last_sign), "subscribe", name,
                               "join_lead_ms", snap.generation, t)
                elif not same_generation and snap.rejoined == m.member_id:
                    self._rejoin(name, slot, done, snap.generation)
                slot.member = m
                if not same_generation:
                    slot.last_sign = max(slot.last_sign, done)
                continue
            name = self.free_name(self.identity(m))
            if same_generation:
                at, basis = ts - 1, "log"  # a replacement record is written at the static member's JoinGroup
            elif (lead_first is None and snap.broker_start is not None
                  and snap.broker_start.member(_BROKER_JOIN) == m.member_id):
                # its JoinGroup started the round (a group's first round waits the initial delay: its
                # members are dated by that rule, or by the creation record)
                at, basis = snap.broker_start.at_ms, BROKER_LOG
            elif lead_first is not None and self.created is not None:
                at, basis = self.created, "log"  # the Java coordinator's creation record: the first JoinGroup
            elif lead_first is not None:
                at, basis = done - lead_first, "initial_rebalance_delay_ms"
            else:
                at, basis = done - self.a.lead(m.session_timeout), "join_lead_ms"
            stopped = self.stopped_at.get(name)
            if stopped is not None and at <= stopped:
                at = stopped + 1  # a restarted process starts after its predecessor stopped
            topics = tuple(sorted(m.topics)) if m.topics is not None else tuple(sorted(m.assigned_topics))
            known = self.consumers.get(name)
            if known is None:
                self.consumers[name] = Consumer(name, m.client_id, m.client_host, m.group_instance_id,
                                                m.session_timeout, m.rebalance_timeout, topics)
            elif known.topics != topics:
                self.event(at, "subscribe", name, basis, snap.generation, topics)
            self.event(at, "start", name, basis, snap.generation)
            self.slots[name] = _Slot(name, m.member_id, m, max(at, done))
            self.member_ids.append(m.member_id)
        if snap.members:
            self.created = None
            self.owners = {}
            for name, s in self.slots.items():
                for topic, partition in s.member.assigned:
                    self.owners[(topic, partition)] = name
                    self.topics[topic] = max(self.topics.get(topic, 0), partition + 1)
        self.prev = snap

    def first_stable_pending(self, prev: ObservedState | None) -> bool:
        """The join phase that completed started from an Empty (or new) group: the initial delay applied."""
        return prev is None or not prev.members

    def _rejoin(self, name: str, slot: _Slot, done: int, gen: int) -> None:
        """A member's own JoinGroup began the round (`ConsumerCoordinator#onJoinPrepare` commits first,
        so its last commit dates it when that is close to the round's end; otherwise the join lead
        rule does)."""
        lead = self.a.lead(slot.member.session_timeout)
        if done - slot.last_sign <= 2 * lead:
            self.event(min(slot.last_sign, done), "rejoin", name, "last commit", gen)
        else:
            self.event(done - lead, "rejoin", name, "join_lead_ms", gen)

    def _stop_replaced(self, name: str, slot: _Slot, ts: int, gen: int) -> None:
        """A static member replaced in the same generation: its old process stopped (static close or
        crash: no LeaveGroup) at its last commit, and the new one joined at the replacement record. A
        process that never committed stopped after it started: at least a millisecond after its start
        (the new process then starts after that)."""
        at = max(min(slot.last_sign, ts - 1), self.started_at.get(name, ts - 2) + 1)
        self.event(at, "close" if self.a.static_stop == "close" else "crash", name, "last commit (static_stop)", gen)

    def _stop(self, name: str, slot: _Slot, done: int, ts: int, snap: ObservedState) -> None:
        m = slot.member
        gen = snap.generation
        session = m.session_timeout
        gap = done - slot.last_sign
        if m.group_instance_id is not None:
            # a static member only ever leaves by its session expiring (or by a poll timeout)
            if m.rebalance_timeout > session and gap >= self.a.poll_timeout_fraction * m.rebalance_timeout:
                self.event(slot.last_sign, "poll_timeout", name, "last commit (poll_timeout_fraction)", gen)
            else:
                at = max(slot.last_sign, done - session)
                kind = "close" if self.a.static_stop == "close" else "crash"
                self.event(at, kind, name, "crash_before_expiry (static_stop)", gen)
            return
        broker = snap.broker_start
        if m.rebalance_timeout > session and gap >= self.a.poll_timeout_fraction * m.rebalance_timeout:
            self.event(slot.last_sign, "poll_timeout", name, "last commit (poll_timeout_fraction)", gen)
        elif broker is not None and broker.member(_BROKER_LEAVE) == slot.member_id and broker.at_ms <= done:
            self.event(broker.at_ms, "close", name, BROKER_LOG, gen)  # its LeaveGroup started the round
        elif gap >= self.a.expiry_gap_fraction * session:
            self.event(max(slot.last_sign, done - session), "crash", name, "crash_before_expiry", gen)
        elif not snap.members:
            self.event(ts, "close", name, "log", gen)  # the leave that emptied the group wrote its record
        else:
            lead = self.a.lead(session)
            at = slot.last_sign if done - slot.last_sign <= 2 * lead else done - lead
            self.event(min(at, done), "close", name, "last commit" if at == slot.last_sign else "join_lead_ms", gen)


def derive_history(records: Iterable[tuple[int, int, int, Any, Any]], *, group_id: str | None = None,
                   assumptions: Assumptions | None = None) -> GroupHistory:
    """The lifecycle of one group from its records, (partition, offset, timestamp_ms, key, value) in log
    order (the audit's input). Records of other groups are refused; unreadable ones are skipped and
    counted in `notes` (the audit quarantines them). The audit's causes name the members that
    rejoined on their own (`metadata_or_leader_rejoin`)."""
    a = assumptions or Assumptions()
    records = list(records)
    rejoined = _rejoined(r for r in audit_group(records, group_id=group_id) if isinstance(r, RebalanceCauseRow))
    notes: list[str] = []
    items: list[_Item] = []
    unreadable = 0
    v0 = False
    seen: set[tuple[int, int]] = set()
    prev: GroupSnapshot | None = None
    for partition, offset, ts, key, value in records:
        if (partition, offset) in seen:
            continue
        seen.add((partition, offset))
        try:
            rec = decode(key, value)
        except CoordinatorAuditError:  # the codec refuses it (the audit quarantines it, naming why)
            unreadable += 1
            continue
        group = getattr(rec.key, "group", None)
        if group is None:
            continue
        if group_id is None:
            group_id = group
        elif group != group_id:
            raise HistoryError(f"record at partition {partition} offset {offset} belongs to group {group!r}, "
                               f"not {group_id!r}")
        if isinstance(rec.key, OffsetCommitKey):
            if rec.value is not None:
                items.append((rec.key.topic, rec.key.partition, ts))
            continue
        if not isinstance(rec.key, GroupMetadataKey):
            continue
        if not isinstance(rec.value, GroupMetadataValue):
            notes.append(f"tombstone at partition {partition} offset {offset}: the group was deleted")
            continue
        try:
            snap = GroupSnapshot.from_value(rec.value, group_id=group_id, previous=prev)
        except CoordinatorAuditError as e:
            notes.append(f"GroupMetadata at partition {partition} offset {offset} skipped: {e}")
            continue
        prev = snap
        items.append(ObservedState(snap.generation, ts, snap.state_timestamp, snap.protocol, tuple(
            ObservedMember(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.session_timeout,
                           m.rebalance_timeout if m.rebalance_timeout >= 0 else a.rebalance_timeout_ms, m.topics,
                           m.assigned_set) for m in snap.members), rejoined=rejoined.get((partition, offset))))
        v0 = v0 or any(m.rebalance_timeout < 0 for m in snap.members)
    if v0:
        notes.append(f"GroupMetadata value v0 keeps no rebalance timeout: max.poll.interval.ms "
                     f"{a.rebalance_timeout_ms} assumed where it is missing")
    if unreadable:
        notes.append(f"{unreadable} unreadable record(s) skipped (the audit quarantines them)")
    return _history(group_id, items, a, notes)


_JOINED = ("member_joined", "static_member_rejoined_new_generation")


def _rejoined(causes: Iterable[RebalanceCauseRow]) -> dict[tuple[int, int], str]:
    """(partition, offset) of a generation's record -> the member whose own rejoin began its round
    (a primary `metadata_or_leader_rejoin` cause naming one)."""
    return {(c.source_partition, c.source_offset): c.member_id for c in causes
            if c.is_primary and c.cause == "metadata_or_leader_rejoin" and c.member_id is not None}


def derive_history_from_rows(generations: Iterable[GenerationRow], assignments: Iterable[AssignmentRow],
                             offset_commits: Iterable[OffsetCommitRow], causes: Iterable[RebalanceCauseRow] = (), *,
                             assumptions: Assumptions | None = None,
                             broker_starts: Mapping[tuple[int, int], BrokerStart] | None = None) -> GroupHistory:
    """The lifecycle of one group from the audit's rows (its `generations`, `assignments`,
    `offset_commits` and `rebalance_causes` tables) instead of the log. The members' session and
    rebalance timeouts are the assignments rows' `session_timeout_ms` and `rebalance_timeout_ms`
    (where a row lacks one, `Assumptions.session_timeout_ms` / `rebalance_timeout_ms` stands in and
    `notes` counts those members). The tables keep less than the log, and what they lack is taken
    from `assumptions` and said in `notes`: the members' subscriptions (the topics of all their
    assignments, changed where a `subscription_changed` cause row names the topics a member added
    and removed, `_subscriptions`; a topic a member subscribes to but was never assigned a partition
    of is not seen), members assigned nothing (known only when a cause row names
    them joining and an assignments row of theirs, in any generation, gives their client; the others
    are absent and `notes` counts them), and each member's last commit (a window's last commit per
    partition). `broker_starts` ({(source_partition, source_offset) of a generations row: its
    `BrokerStart`}, from the columns `rebalance_started_at` and `broker_reason` when the audit was
    given the broker's log) dates the member whose JoinGroup or LeaveGroup started a round
    (`BROKER_LOG`): the log alone places a join only within a heartbeat interval before its round
    completed."""
    a = assumptions or Assumptions()
    gens = sorted(generations, key=lambda g: (g.source_partition, g.source_offset))
    if not gens:
        raise HistoryError("no generations rows: nothing to replay")
    group_id = gens[0].group_id
    by_record: dict[tuple[int, int], list[AssignmentRow]] = {}
    known: dict[str, AssignmentRow] = {}
    assignments = list(assignments)
    for r in assignments:
        if r.group_id != group_id:
            raise HistoryError(f"assignments row of group {r.group_id!r} among group {group_id!r}'s rows")
        by_record.setdefault((r.source_partition, r.source_offset), []).append(r)
        known.setdefault(r.member_id, r)
    joined: dict[int, list[str]] = {}
    causes = list(causes)
    rejoined = _rejoined(causes)
    subscription = _subscriptions(assignments, causes)
    for c in causes:
        if c.cause in _JOINED and c.member_id is not None and c.generation_id is not None:
            joined.setdefault(c.generation_id, []).append(c.member_id)
    stated = _stated_timeouts(assignments)
    notes: list[str] = []
    no_session = sorted(m for m in known if stated[m][0] is None)
    no_rebalance = sorted(m for m in known if stated[m][1] is None)
    if no_session:
        notes.append(f"the assignments rows of {len(no_session)} member(s) keep no session timeout: "
                     f"session.timeout.ms {a.session_timeout_ms} assumed")
    if no_rebalance:
        notes.append(f"the assignments rows of {len(no_rebalance)} member(s) keep no rebalance timeout: "
                     f"max.poll.interval.ms {a.rebalance_timeout_ms} assumed")
    # each generation's opening record, then its replacement records, in log order
    points: list[tuple[tuple[int, int], Any]] = []
    missing = 0
    for g in gens:
        members = _row_members(by_record.get((g.source_partition, g.source_offset), []), a, subscription, stated)
        if g.member_count > len(members):
            for member_id in joined.get(g.generation_id, []):
                seen = known.get(member_id)
                if member_id not in members and seen is not None:
                    members[member_id] = ObservedMember(member_id, seen.group_instance_id, seen.client_id,
                                                        seen.client_host, *_timeouts(seen, a, stated),
                                                        subscription(member_id, g.generation_id), frozenset())
        missing += max(0, g.member_count - len(members))
        points.append(((g.source_partition, g.source_offset), ObservedState(
            g.generation_id, g.record_timestamp, g.state_timestamp, g.protocol_name, tuple(members.values()),
            (broker_starts or {}).get((g.source_partition, g.source_offset)),
            rejoined.get((g.source_partition, g.source_offset)))))
        replacements = sorted(k for k, rows in by_record.items()
                              if rows[0].generation_id == g.generation_id and k > (g.source_partition, g.source_offset)
                              and (g.ended_by_offset is None or k[1] < g.ended_by_offset))
        for k in replacements:
            rows = by_record[k]
            for new in _row_members(rows, a, subscription, stated).values():
                members = {mid: m for mid, m in members.items() if m.group_instance_id != new.group_instance_id}
                members[new.member_id] = new
            points.append((k, ObservedState(g.generation_id, rows[0].valid_from, g.state_timestamp, g.protocol_name,
                                            tuple(members.values()))))
    if missing:
        notes.append(f"{missing} member(s) assigned nothing are absent from the assignments table and from the replay")
    for o in offset_commits:
        if o.last_commit_timestamp is None:
            continue
        end = o.window_end_offset if o.window_end_offset is not None else 1 << 62
        points.append(((o.source_partition, end), (o.topic, o.partition, o.last_commit_timestamp)))
    # a window's commits come before the record that closed it
    points.sort(key=lambda p: (p[0], isinstance(p[1], ObservedState)))
    return _history(group_id, [item for _, item in points], a, notes)


def _subscriptions(assignments: Iterable[AssignmentRow], causes: Iterable[RebalanceCauseRow]
                   ) -> Callable[[str, int], frozenset[str]]:
    """(member id, generation id) -> the member's subscription in that generation. The tables keep a
    member's partitions, not its topics: the topics of all its assignments stand in, unless a
    `subscription_changed` cause row names the topics the member added and removed
    (`causes.subscription_change`): then its subscription after its last change is the topics
    assigned to it from that generation on plus those added, and each earlier subscription undoes
    the changes after it."""
    changes: dict[str, list[tuple[int, frozenset[str], frozenset[str]]]] = {}
    for c in causes:
        change = subscription_change(c.detail) if c.cause == "subscription_changed" else None
        if change is not None and c.member_id is not None and c.generation_id is not None:
            changes.setdefault(c.member_id, []).append((c.generation_id, *change))
    assigned: dict[str, dict[int, set[str]]] = {}
    for r in assignments:
        assigned.setdefault(r.member_id, {}).setdefault(r.generation_id, set()).add(r.topic)

    def subscription(member_id: str, generation: int) -> frozenset[str]:
        gens = assigned.get(member_id, {})
        mine = sorted(changes.get(member_id, ()))
        if not mine:
            return frozenset(t for ts in gens.values() for t in ts)
        last, added, _ = mine[-1]
        topics = frozenset(t for g, ts in gens.items() if g >= last for t in ts) | added
        for gen, added, removed in reversed(mine):
            if generation >= gen:
                break
            topics = (topics - added) | removed
        return topics

    return subscription


def _row_members(rows: Iterable[AssignmentRow], a: Assumptions, subscription: Callable[[str, int], frozenset[str]],
                 stated: Mapping[str, tuple[int | None, int | None]]) -> dict[str, ObservedMember]:
    by_member: dict[str, list[AssignmentRow]] = {}
    for r in rows:
        by_member.setdefault(r.member_id, []).append(r)
    out = {}
    for member_id, mine in by_member.items():
        r = mine[0]
        assigned = frozenset((x.topic, x.partition) for x in mine)
        out[member_id] = ObservedMember(member_id, r.group_instance_id, r.client_id, r.client_host,
                                        *_timeouts(r, a, stated), subscription(member_id, r.generation_id),
                                        assigned)
    return out


def _stated_timeouts(assignments: Iterable[AssignmentRow]) -> dict[str, tuple[int | None, int | None]]:
    """Per member id, the first (session, rebalance) timeout its assignments rows state, in log
    order (None where none does): an output that outlived a version of the audit without these
    columns keeps them on the rows written since (the older ones read null), and a member's
    JoinGroup states the same ones on every join of one process."""
    out: dict[str, tuple[int | None, int | None]] = {}
    for r in sorted(assignments, key=lambda r: (r.source_partition, r.source_offset)):
        session, rebalance = out.get(r.member_id, (None, None))
        out[r.member_id] = (session if session is not None else r.session_timeout_ms,
                            rebalance if rebalance is not None else r.rebalance_timeout_ms)
    return out


def _timeouts(r: AssignmentRow, a: Assumptions, stated: Mapping[str, tuple[int | None, int | None]]
              ) -> tuple[int, int]:
    """(session, rebalance) timeout of the member of row `r`: the row's, else what the member's
    other rows state (`_stated_timeouts`), else the assumed ones."""
    session, rebalance = stated.get(r.member_id, (None, None))
    return (r.session_timeout_ms if r.session_timeout_ms is not None
            else session if session is not None else a.session_timeout_ms,
            r.rebalance_timeout_ms if r.rebalance_timeout_ms is not None
            else rebalance if rebalance is not None else a.rebalance_timeout_ms)


_Item = ObservedState | tuple[str, int, int]
"""A persisted state, or an offset commit (topic, partition, timestamp)."""


def _history(group_id: str | None, items: Iterable[_Item], a: Assumptions, notes: list[str]) -> GroupHistory:
    walk = _Walk(a, group_id or "", delay=a.initial_rebalance_delay_ms)
    walk.notes.extend(notes)
    first_ts: int | None = None
    last_ts = 0
    protocols: list[str] = []
    flavour = "scala"
    for item in items:
        ts = item.record_ms if isinstance(item, ObservedState) else item[2]
        first_ts = ts if first_ts is None else min(first_ts, ts)
        last_ts = max(last_ts, ts)
        if not isinstance(item, ObservedState):
            walk.on_commit(*item)
            continue
        if item.generation == 0 and not item.members and walk.prev is None:
            flavour = "java"
        if item.protocol and (not protocols or protocols[-1] != item.protocol):
            protocols.append(item.protocol)
        walk.on_state(item)
    if first_ts is None or not walk.consumers:
        raise HistoryError(f"group {group_id!r}: no GroupMetadata record with members, nothing to replay")
    if len(protocols) > 1:
        walk.notes.append(f"the selected assignor changed ({' -> '.join(protocols)}): replayed with the last one")
    consumers = tuple(walk.consumers.values())
    events = sorted(walk.events, key=lambda e: (e.at_ms, EVENT_KINDS.index(e.kind) if e.kind != "start" else 9))
    start = min([first_ts, *(e.at_ms for e in events)])
    return GroupHistory(
        group_id=walk.group_id, start_ms=start, end_ms=last_ts, topics=tuple(sorted(walk.topics.items())),
        assignor=protocols[-1] if protocols else "range", flavour=flavour, initial_rebalance_delay_ms=walk.delay,
        static=all(c.group_instance_id is not None for c in consumers), consumers=consumers, events=tuple(events),
        assumptions=a, notes=tuple(walk.notes), member_ids=tuple(walk.member_ids))
