"""The audit of a KIP-848 consumer group: its records (key types 3-8 and 16) replayed as the broker's
load path replays them, and the group's history read from them into the audit's rows.

The state follows `GroupMetadataManager#replay` for each record type and the classes it updates
(`ConsumerGroup`, `ConsumerGroupMember`, `ModernGroup`):
* type 3 (ConsumerGroupMetadata) sets the group epoch and metadata hash; its tombstone deletes the
  group, which the load path refuses while members, target-assignment members or the
  target-assignment epoch remain;
* type 5 (ConsumerGroupMemberMetadata) adds or updates a member's subscription
  (`ConsumerGroupMember.Builder#updateWith`); its tombstone removes the member, refused unless the
  member's current assignment was deleted first (member epoch -1) and its target assignment too;
* type 6 / 7 (target assignment epoch, a member's target partitions); type 6's tombstone is refused
  while target-assignment members remain;
* type 8 (a member's current assignment: member epoch, previous epoch, state, assigned partitions
  and partitions pending revocation, by topic id); its tombstone leaves the member at epoch -1
  with nothing assigned;
* type 16 (a regular expression's resolved topics);
* a record of these types creates the group when it does not exist
  (`GroupMetadataManager#getOrMaybeCreatePersistedConsumerGroup`); a group created that way starts at
  epoch 1 on a 4.3+ broker (`ModernGroup#ModernGroup`), which writes no type 3 for it (a 4.0-4.2
  broker starts at 0 and writes epoch 1 at once). A tombstone of a group or member that does not
  exist is ignored, as the load path ignores it.

History:
* `generations`: one row per group epoch, opened by the type 3 record that bumps it (or by the
  first member record at the implied epoch 1), closed by the next bump or the group's tombstone.
  It carries the members and preferred server assignor at the bump
  (`ConsumerGroup#computePreferredServerAssignor`: the name most members ask for), the target
  assignment's epoch, and when the group reached the epoch: every member's current assignment at the
  target's epoch and STABLE (`ConsumerGroup#maybeUpdateGroupState`, `ModernGroupMember#isReconciledTo`).
* `assignments`: each member's owned partitions (assigned plus pending revocation) as intervals
  from one type 8 record to the record that drops them; a partition kept across member epochs
  starts a new row at each epoch (`owned_before` True). Topic ids are named from the group's
  OffsetCommit values (v4 carries the topic id beside the name); an id the log does not name stays.
* `rebalance_causes`: why the epoch moved, read from the records since the previous bump: a member
  record of a new member (`member_joined`); a member's tombstones (8, 7, 5: `member_left_or_expired`;
  the log writes the same records for a clean leave, a session expiry and a rebalance-timeout
  fence, so it cannot tell them apart); a kept member's changed subscription or server assignor;
  a regular expression resolved to other topics (type 16: `regex_resolved`); a changed metadata
  hash alone (`topic_metadata_changed`: partitions or topics of the subscription changed). A static
  member leaving for a while writes member epoch -2 and no bump (`static_member_left_temporarily`).
  A group converted from or to the classic protocol keeps one history (`converted_to_consumer`,
  `converted_to_classic`).
* `violations`: a partition in two members' owned partitions at once (`duplicate_assignment` when
  both have it assigned, `assigned_before_released` when the other still has it pending
  revocation), a member epoch ahead of the group epoch (`member_epoch_ahead`), and a record the
  load path refuses in its place (`load_refused`; the replay then goes on as if it had been
  accepted, so the rest of the history is still read).
"""

from __future__ import annotations

import base64
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from coordinator_audit.core.audit.rows import (
    AssignmentRow,
    AuditRow,
    GenerationRow,
    RebalanceCauseRow,
    ViolationRow,
)
from coordinator_audit.core.records import CoordinatorRecord
from coordinator_audit.core.records_kip848 import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataValue,
)

__all__ = ["CONSUMER_CAUSES", "CONSUMER_RECORD_TYPES", "CONSUMER_VIOLATION_KINDS", "ConsumerGroupAudit",
           "topic_id_text"]

CONSUMER_RECORD_TYPES = frozenset({3, 4, 5, 6, 7, 8, 16})
"""The key types of a KIP-848 consumer group's records (4: the pre-4.1 subscription metadata)."""

LEAVE_EPOCH = -1
"""`ConsumerGroupHeartbeatRequest#LEAVE_GROUP_MEMBER_EPOCH`: what a deleted current assignment leaves."""
STATIC_LEAVE_EPOCH = -2
"""`ConsumerGroupHeartbeatRequest#LEAVE_GROUP_STATIC_MEMBER_EPOCH`: a static member gone for a while."""
STABLE = 0
"""`MemberState.STABLE`."""
_IMPLIED_START_EPOCH = 1
"""The epoch `ModernGroup#ModernGroup` gives a new group on a 4.3+ broker (no record is written)."""

CONSUMER_CAUSES: tuple[str, ...] = (
    "history_start", "group_created", "converted_to_consumer", "converted_to_classic", "member_left_or_expired",
    "member_joined", "static_member_rejoined", "assignor_changed", "subscription_changed", "regex_resolved",
    "topic_metadata_changed", "epoch_bump_unexplained", "group_deleted", "static_member_left_temporarily",
)
"""The causes of a consumer group's epochs, in the order their primary is chosen (the first present)."""
_RANK = {c: i for i, c in enumerate(CONSUMER_CAUSES)}

CONSUMER_VIOLATION_KINDS: tuple[str, ...] = (
    "duplicate_assignment", "assigned_before_released", "member_epoch_ahead", "load_refused")

_MEMBERSHIP_EVENTS = frozenset({"member_joined", "member_left_or_expired", "static_member_rejoined",
                                "subscription_changed", "regex_resolved"})
"""Events that change the subscribed topics themselves: a metadata hash that moves with them is
their consequence (`ModernGroup#computeMetadataHash` hashes the subscribed topics), not a cause."""

TopicKey = tuple[str, int]
"""(topic id text, partition)."""


def topic_id_text(topic_id: uuid.UUID) -> str:
    """Kafka's text form of a topic id (`Uuid#toString`: URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


@dataclass(slots=True)
class _Member:
    """One member as the load path holds it (`ConsumerGroupMember`): its subscription (type 5) and
    current assignment (type 8)."""

    has_metadata: bool = False
    instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    topics: tuple[str, ...] = ()
    regex: str | None = None
    assignor: str | None = None
    classic: bool = False
    epoch: int = 0
    previous_epoch: int = 0
    state: int = STABLE
    assigned: dict[str, tuple[int, ...]] = field(default_factory=dict)
    pending: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def owned(self) -> set[TopicKey]:
        return {(t, p) for parts in (self.assigned, self.pending) for t, ps in parts.items() for p in ps}

    def pending_set(self) -> set[TopicKey]:
        return {(t, p) for t, ps in self.pending.items() for p in ps}

    def to_list(self) -> list[Any]:
        return [self.has_metadata, self.instance_id, self.client_id, self.client_host, list(self.topics), self.regex,
                self.assignor, self.classic, self.epoch, self.previous_epoch, self.state,
                sorted([t, list(ps)] for t, ps in self.assigned.items()),
                sorted([t, list(ps)] for t, ps in self.pending.items())]

    @staticmethod
    def from_list(d: list[Any]) -> _Member:
        return _Member(d[0], d[1], d[2], d[3], tuple(d[4]), d[5], d[6], d[7], d[8], d[9], d[10],
                       {t: tuple(ps) for t, ps in d[11]}, {t: tuple(ps) for t, ps in d[12]})


@dataclass(slots=True)
class _Interval:
    """An open ownership interval of one member and partition."""

    epoch: int
    valid_from: int
    partition: int
    offset: int
    owned_before: bool
    pending_at: int | None


class ConsumerGroupAudit:
    """One consumer group's replayed state and open history; `apply` takes its records in log order
    and returns the rows they close. JSON-able state: `to_dict` / `from_dict`."""

    def __init__(self, group_id: str, names: dict[str, str]) -> None:
        self.group_id = group_id
        self.exists = False
        self.epoch = 0
        self.epoch_written = False
        self.metadata_hash = 0
        self.members: dict[str, _Member] = {}
        self.targets: dict[str, dict[str, tuple[int, ...]]] = {}
        self.assignment_epoch = -1
        self.regexes: dict[str, tuple[str, ...]] = {}
        self.names = names
        """topic id text -> topic name, learnt from the group's OffsetCommit values (the auditor's)."""
        self._gen: dict[str, Any] | None = None
        self._last_epoch: int | None = None  # the last epoch that had a generation row in this history
        self._intervals: dict[str, dict[TopicKey, _Interval]] = {}
        self._events: list[list[Any]] = []  # [cause, member_id, instance_id, detail, evidence] since the bump
        self._converted_from: int | None = None  # the classic generation a conversion started from
        self._departed: dict[str, tuple[str, _Member]] = {}  # static members removed since the last epoch

    # ------------------------------------------------------------------------------------------
    # public face

    def converted_from_classic(self, generation: int | None) -> None:
        """The classic group (last generation `generation`) was deleted to become this consumer group
        (`GroupMetadataManager#convertToConsumerGroup` writes the GroupMetadata tombstone, then the
        consumer group's records)."""
        self._converted_from = generation if generation is not None else -1

    def apply(self, record: CoordinatorRecord, p: int, o: int, ts: int) -> list[AuditRow]:
        """The rows closed by one record of the group (key type 3-8 or 16), replayed."""
        rtype = record.key_version
        value = record.value
        rows: list[AuditRow] = []
        if rtype == 3:
            if value is None:
                self._delete_group(p, o, ts, rows)
            else:
                assert isinstance(value, ConsumerGroupMetadataValue)
                self._create(p, o, ts, rows)
                self._epoch_record(value, p, o, ts, rows)
        elif rtype == 5:
            key5 = record.key
            assert isinstance(key5, ConsumerGroupMemberMetadataKey)
            if value is None:
                self._remove_member(key5.member_id, p, o, ts, rows)
            else:
                assert isinstance(value, ConsumerGroupMemberMetadataValue)
                self._create(p, o, ts, rows)
                self._member_metadata(key5.member_id, value, p, o, ts, rows)
        elif rtype == 6:
            if value is None:
                if self.exists:
                    if self.targets:
                        rows.append(self._violation("load_refused", None, None, tuple(sorted(self.targets)),
                                                    f"a target-assignment epoch tombstone while {len(self.targets)} "
                                                    f"member(s) still have a target assignment "
                                                    f"(GroupMetadataManager#replay refuses it)", p, o, ts))
                    self.assignment_epoch = -1
            else:
                assert isinstance(value, ConsumerGroupTargetAssignmentMetadataValue)
                self._create(p, o, ts, rows)
                self.assignment_epoch = value.assignment_epoch
                if self._gen is not None and value.assignment_epoch == self._gen["generation_id"]:
                    self._gen["assignment_epoch"] = value.assignment_epoch
                    self._gen["assignment_timestamp"] = ts
                self._check_stable(ts)
        elif rtype == 7:
            key7 = record.key
            assert isinstance(key7, ConsumerGroupTargetAssignmentMemberKey)
            if value is None:
                if self.exists:
                    self.targets.pop(key7.member_id, None)
            else:
                assert isinstance(value, ConsumerGroupTargetAssignmentMemberValue)
                self._create(p, o, ts, rows)
                self.targets[key7.member_id] = {topic_id_text(t.topic_id): tuple(t.partitions)
                                                for t in value.topic_partitions}
        elif rtype == 8:
            key8 = record.key
            assert isinstance(key8, ConsumerGroupCurrentMemberAssignmentKey)
            if value is None:
                self._assignment_tombstone(key8.member_id, p, o, ts, rows)
            else:
                assert isinstance(value, ConsumerGroupCurrentMemberAssignmentValue)
                self._create(p, o, ts, rows)
                self._current_assignment(key8.member_id, value, p, o, ts, rows)
        elif rtype == 16:
            key16 = record.key
            assert isinstance(key16, ConsumerGroupRegularExpressionKey)
            if value is None:
                if self.exists and key16.regular_expression in self.regexes:
                    del self.regexes[key16.regular_expression]
            else:
                assert isinstance(value, ConsumerGroupRegularExpressionValue)
                self._create(p, o, ts, rows)
                before = self.regexes.get(key16.regular_expression)
                topics = tuple(sorted(value.topics))
                self.regexes[key16.regular_expression] = topics
                if before != topics:
                    was = "unresolved" if before is None else f"[{', '.join(before)}]"
                    self._event("regex_resolved", None, None,
                                f"regular expression {key16.regular_expression!r} resolved to "
                                f"[{', '.join(topics)}] (was {was})", f"partition {p} offset {o}")
        elif rtype == 4 and value is not None:
            self._create(p, o, ts, rows)
        return rows

    def open_rows(self) -> list[AuditRow]:
        """The open generation's row and the open ownership intervals, as they stand."""
        rows: list[AuditRow] = []
        if self._gen is not None:
            rows.append(self._generation_row(self._gen, None, None))
        for member_id in sorted(self._intervals):
            rows.extend(self._interval_rows(member_id, self._intervals[member_id], None))
        return rows

    # ------------------------------------------------------------------------------------------
    # the group

    def _create(self, p: int, o: int, ts: int, rows: list[AuditRow]) -> None:
        if self.exists:
            return
        self.exists = True
        self.epoch = _IMPLIED_START_EPOCH
        self.epoch_written = False
        self.metadata_hash = 0
        self.assignment_epoch = -1
        if self._converted_from is None:
            self._event("group_created", None, None, "the group's first record in the audited history",
                        f"partition {p} offset {o}")

    def _epoch_record(self, value: ConsumerGroupMetadataValue, p: int, o: int, ts: int,
                      rows: list[AuditRow]) -> None:
        """`GroupMetadataManager#replay(ConsumerGroupMetadataKey, ...)`: the epoch and hash are set;
        an epoch above the open generation's opens the next one."""
        epoch, old_hash = value.epoch, self.metadata_hash
        self.metadata_hash = value.metadata_hash
        open_epoch = self._gen["generation_id"] if self._gen is not None else None
        first_written = not self.epoch_written
        self.epoch = epoch
        self.epoch_written = True
        if open_epoch is not None and epoch == open_epoch:
            return  # the same epoch written again (a 4.0-4.2 broker's first epoch, a conversion)
        if first_written and old_hash == 0 and self.metadata_hash != 0:
            old_hash = self.metadata_hash  # the group's first hash is no change of topic metadata
        explained = any(e[0] in _MEMBERSHIP_EVENTS for e in self._events)
        if old_hash != self.metadata_hash and self._converted_from is None and not explained:
            self._event("topic_metadata_changed", None, None,
                        f"metadata hash {old_hash} -> {self.metadata_hash} (the subscribed topics' partitions "
                        f"or the set of subscribed topics that exist changed)", f"partition {p} offset {o}")
        self._open_generation(epoch, p, o, ts, rows)

    def _open_generation(self, epoch: int, p: int, o: int, ts: int, rows: list[AuditRow]) -> None:
        prev = self._gen["generation_id"] if self._gen is not None else self._last_epoch
        self._close_generation(ts, o, rows)
        events, self._events = self._events, []
        self._departed = {}
        missing: int | None = None
        prev_gen: int | None = prev
        converted = self._converted_from
        self._converted_from = None
        if converted is not None:
            g = converted if converted >= 0 else None
            events = [["converted_to_consumer", None, None,
                       f"the classic group{f' (generation {g})' if g is not None else ''} became a consumer group: "
                       f"a member joined with the consumer protocol and the broker converted the group "
                       f"(GroupMetadata tombstone, then the consumer group's records)", f"partition {p} offset {o}"]]
            prev_gen = g
            missing = max(epoch - g - 1, 0) if g is not None else None
        elif any(e[0] == "group_created" for e in events) and epoch <= _IMPLIED_START_EPOCH + 1:
            missing = 0  # epoch 1 (4.0-4.2 write it; 4.3+ imply it) or the first bump after it
            prev_gen = None
        elif prev is None:
            events = [e for e in events if e[0] != "group_created"]
            events.insert(0, ["history_start", None, None,
                              f"the audited history starts at epoch {epoch}; earlier epochs are not in the log",
                              f"partition {p} offset {o}"])
        elif epoch < prev:
            events.insert(0, ["history_start", None, None,
                              f"the group epoch went back from {prev} to {epoch}: the history restarts here",
                              f"partition {p} offset {o}"])
            prev_gen = None
        else:
            missing = epoch - prev - 1
        if not events:
            events = [["epoch_bump_unexplained", None, None,
                       "no member, subscription, assignor, regular expression or metadata-hash change is in the "
                       "records since the previous epoch", f"partition {p} offset {o}"]]
        events.sort(key=lambda e: _RANK[e[0]])
        for i, (cause, member_id, instance_id, detail, evidence) in enumerate(events):
            rows.append(RebalanceCauseRow(self.group_id, epoch, prev_gen, cause, member_id, instance_id, detail,
                                          evidence, i == 0, ts, p, o))
        members = [m for m in self.members.values() if m.has_metadata and m.epoch != LEAVE_EPOCH]
        assignors = Counter(m.assignor for m in members if m.assignor)
        preferred = max(sorted(assignors), key=lambda a: assignors[a]) if assignors else None
        self._gen = {
            "generation_id": epoch, "protocol_name": preferred, "member_count": len(members),
            "static_member_count": sum(1 for m in members if m.instance_id is not None),
            "record_timestamp": ts, "source_partition": p, "source_offset": o, "missing_generations": missing,
            "static_replacements": 0, "assignment_epoch": None, "assignment_timestamp": None, "reached_at": None,
        }
        self._last_epoch = epoch
        self._check_stable(ts)

    def _close_generation(self, ts: int, o: int, rows: list[AuditRow]) -> None:
        if self._gen is not None:
            rows.append(self._generation_row(self._gen, ts, o))
            self._gen = None

    def _generation_row(self, g: dict[str, Any], ended_at: int | None, ended_by: int | None) -> GenerationRow:
        reached_at = g["reached_at"]
        members = g["member_count"]
        if members == 0:
            state = "Empty"
        elif reached_at is not None:
            state = "Stable"
        else:  # the epoch ended (or stands) before the group reached it
            state = "Reconciling" if g["assignment_epoch"] is not None else "Assigning"
        return GenerationRow(
            self.group_id, g["generation_id"], "consumer", g["protocol_name"], None, members,
            g["static_member_count"], state, None, g["record_timestamp"], None, ended_at,
            ended_at - g["record_timestamp"] if ended_at is not None else None, g["source_partition"],
            g["source_offset"], g["missing_generations"], ended_by, g["static_replacements"], None, "java",
            "consumer", g["assignment_epoch"], g["assignment_timestamp"], reached_at,
            reached_at - g["record_timestamp"] if reached_at is not None else None)

    def _check_stable(self, ts: int) -> None:
        """Marks the open epoch reached when the target assignment is at it and every member is
        reconciled to it (`ConsumerGroup#maybeUpdateGroupState` would say Stable)."""
        g = self._gen
        if g is None or g["reached_at"] is not None or self.assignment_epoch != g["generation_id"]:
            return
        live = [m for m in self.members.values() if m.epoch != LEAVE_EPOCH]
        if all(m.state == STABLE and m.epoch == self.assignment_epoch for m in live if m.epoch != STATIC_LEAVE_EPOCH):
            g["reached_at"] = ts

    def _delete_group(self, p: int, o: int, ts: int, rows: list[AuditRow]) -> None:
        if not self.exists:
            return  # the load path ignores the tombstone of a group it does not have
        problems = []
        if self.members:
            problems.append(f"{len(self.members)} member(s) remain")
        if self.targets:
            problems.append(f"{len(self.targets)} target assignment(s) remain")
        if self.assignment_epoch != -1:
            problems.append(f"the target-assignment epoch ({self.assignment_epoch}) was not deleted first")
        if problems:
            rows.append(self._violation("load_refused", None, None, tuple(sorted(self.members)),
                                        "a group tombstone (type 3) while " + "; ".join(problems)
                                        + " (GroupMetadataManager#replay refuses it)", p, o, ts))
        epoch = self._gen["generation_id"] if self._gen is not None else self._last_epoch
        self._close_generation(ts, o, rows)
        for member_id in sorted(self._intervals):
            rows.extend(self._interval_rows(member_id, self._intervals[member_id], ts))
        self._intervals = {}
        rows.append(RebalanceCauseRow(self.group_id, epoch, epoch, "group_deleted", None, None,
                                      "tombstone of the consumer group's epoch record (type 3): the group is deleted",
                                      f"partition {p} offset {o}", False, ts, p, o))
        self.exists = False
        self.members, self.targets, self.regexes, self._events, self._departed = {}, {}, {}, [], {}
        self.assignment_epoch, self.epoch, self.epoch_written, self.metadata_hash = -1, 0, False, 0

    # ------------------------------------------------------------------------------------------
    # members

    def _member_metadata(self, member_id: str, v: ConsumerGroupMemberMetadataValue, p: int, o: int, ts: int,
                         rows: list[AuditRow]) -> None:
        m = self.members.get(member_id)
        where = f"partition {p} offset {o}"
        topics = tuple(sorted(v.subscribed_topic_names))
        regex = v.subscribed_topic_regex or None
        classic = v.classic_member_metadata is not None and bool(v.classic_member_metadata.supported_protocols)
        how = "the classic protocol" if classic else "the consumer protocol"
        if m is None or not m.has_metadata:
            if m is None:
                m = self.members[member_id] = _Member()
            departed = self._departed.pop(v.instance_id, None) if v.instance_id is not None else None
            if departed is not None and self._converted_from is None:
                # GroupMetadataManager#replaceMember: the old member's tombstones, then the new member
                # with the old one's subscription, target and assignment; a new epoch only if the
                # subscription changed
                old_id, old = departed
                self._events = [e for e in self._events if not (e[0] == "member_left_or_expired" and e[1] == old_id)]
                gen = self._gen["generation_id"] if self._gen is not None else None
                rows.append(RebalanceCauseRow(
                    self.group_id, gen, gen, "static_member_rejoined", member_id, v.instance_id,
                    f"static instance {v.instance_id!r} is back as {member_id} (was {old_id}), using {how}: it "
                    f"takes over the old member's assignment without a new epoch", where, False, ts, p, o))
                if self._gen is not None:
                    self._gen["static_replacements"] += 1
                self._subscription_events(member_id, old, topics, regex, v, where)
            elif self._converted_from is None:
                sub = f"regex {regex!r}" if regex else f"[{', '.join(topics)}]"
                self._event("member_joined", member_id, v.instance_id,
                            f"{member_id} joined using {how}, subscribed to {sub}", where)
        else:
            self._subscription_events(member_id, m, topics, regex, v, where)
        m.has_metadata = True
        m.instance_id, m.client_id, m.client_host = v.instance_id, v.client_id, v.client_host
        m.topics, m.regex, m.assignor, m.classic = topics, regex, v.server_assignor, classic

    def _subscription_events(self, member_id: str, m: _Member, topics: tuple[str, ...], regex: str | None,
                             v: ConsumerGroupMemberMetadataValue, where: str) -> None:
        if (m.topics, m.regex) != (topics, regex):
            self._event("subscription_changed", member_id, v.instance_id,
                        f"{member_id} subscription [{', '.join(m.topics)}]{f' regex {m.regex!r}' if m.regex else ''}"
                        f" -> [{', '.join(topics)}]{f' regex {regex!r}' if regex else ''}", where)
        if m.assignor != v.server_assignor:
            self._event("assignor_changed", member_id, v.instance_id,
                        f"{member_id} server assignor {m.assignor!r} -> {v.server_assignor!r}", where)

    def _remove_member(self, member_id: str, p: int, o: int, ts: int, rows: list[AuditRow]) -> None:
        """`GroupMetadataManager#replay(ConsumerGroupMemberMetadataKey, null)`."""
        if not self.exists:
            return
        m = self.members.get(member_id)
        if m is None:
            return
        problems = []
        if m.epoch != LEAVE_EPOCH:
            problems.append("its current assignment (type 8) was not deleted first")
        if member_id in self.targets:
            problems.append("its target assignment (type 7) was not deleted first")
        if problems:
            rows.append(self._violation("load_refused", None, None, (member_id,),
                                        f"member tombstone (type 5) of {member_id}: " + " and ".join(problems)
                                        + " (GroupMetadataManager#replay refuses it)", p, o, ts))
        self._close_member(member_id, ts, rows)
        del self.members[member_id]
        if m.instance_id is not None:
            self._departed[m.instance_id] = (member_id, m)  # a static member may be replaced next
        if self._converted_from is None:
            self._event("member_left_or_expired", member_id, m.instance_id,
                        f"{member_id} was removed (tombstones of its current assignment, target assignment and "
                        f"member record): a clean leave, a session expiry and a rebalance-timeout fence write the "
                        f"same records, so the log cannot tell which (the broker's server.log names it)",
                        f"partition {p} offset {o}")

    def _assignment_tombstone(self, member_id: str, p: int, o: int, ts: int, rows: list[AuditRow]) -> None:
        if not self.exists or member_id not in self.members:
            return
        m = self.members[member_id]
        m.epoch = m.previous_epoch = LEAVE_EPOCH
        m.assigned, m.pending = {}, {}
        self._close_member(member_id, ts, rows)
        self._check_stable(ts)

    def _current_assignment(self, member_id: str, v: ConsumerGroupCurrentMemberAssignmentValue, p: int, o: int,
                            ts: int, rows: list[AuditRow]) -> None:
        """`ConsumerGroupMember.Builder#updateWith(..., ConsumerGroupCurrentMemberAssignmentValue)`,
        with the ownership it implies checked against the other members."""
        m = self.members.get(member_id)
        if m is None:
            m = self.members[member_id] = _Member()
        if self._gen is None and self.exists and not self.epoch_written and v.member_epoch == self.epoch:
            self._open_generation(self.epoch, p, o, ts, rows)  # the implied first epoch (4.3+)
        if self.epoch_written and v.member_epoch > self.epoch:
            rows.append(self._violation(
                "member_epoch_ahead", None, None, (member_id,),
                f"{member_id} at member epoch {v.member_epoch} while the group epoch is {self.epoch}", p, o, ts))
        if v.member_epoch == STATIC_LEAVE_EPOCH and m.epoch != STATIC_LEAVE_EPOCH:
            gen = self._gen["generation_id"] if self._gen is not None else None
            rows.append(RebalanceCauseRow(
                self.group_id, gen, gen, "static_member_left_temporarily", member_id, m.instance_id,
                f"static member {m.instance_id!r} ({member_id}) left for now (member epoch -2): its assignment is "
                f"kept for its return within the session timeout, no new epoch", f"partition {p} offset {o}",
                False, ts, p, o))
        before = m.owned()
        m.epoch, m.previous_epoch, m.state = v.member_epoch, v.previous_member_epoch, v.state
        m.assigned = {topic_id_text(t.topic_id): tuple(t.partitions) for t in v.assigned_partitions if t.partitions}
        m.pending = {topic_id_text(t.topic_id): tuple(t.partitions) for t in v.partitions_pending_revocation
                     if t.partitions}
        now = m.owned()
        # two owners at once
        for tp in sorted(now - before):
            for other_id, other in self.members.items():
                if other_id == member_id or other.epoch == LEAVE_EPOCH:
                    continue
                if tp in other.owned():
                    kind = "assigned_before_released" if tp in other.pending_set() else "duplicate_assignment"
                    what = ("still has it pending revocation" if kind == "assigned_before_released"
                            else "has it in its current assignment")
                    rows.append(self._violation(
                        kind, tp[0], tp[1], (member_id, other_id),
                        f"{self._topic(tp[0])}-{tp[1]} in the current assignment of {member_id} (member epoch "
                        f"{v.member_epoch}) while {other_id} {what}", p, o, ts))
        # ownership intervals; a member at epoch 0 is joining the group's epoch (a static member's
        # replacement takes over the old member's partitions at epoch 0, GroupMetadataManager#replaceMember,
        # before it is reconciled to the group epoch): it holds them in that epoch
        held_at = self.epoch if v.member_epoch == 0 else v.member_epoch
        open_ = self._intervals.setdefault(member_id, {})
        pending_now = m.pending_set()
        for tp in sorted(before - now):
            iv = open_.pop(tp, None)
            if iv is not None:
                rows.append(self._interval_row(member_id, m, tp, iv, ts))
        for tp in sorted(now):
            iv = open_.get(tp)
            if iv is not None and held_at >= 0 and iv.epoch != held_at:
                rows.append(self._interval_row(member_id, m, tp, iv, ts))
                iv = None
                open_[tp] = _Interval(held_at, ts, p, o, True, ts if tp in pending_now else None)
            elif iv is None:
                open_[tp] = _Interval(held_at, ts, p, o, False, ts if tp in pending_now else None)
            elif tp in pending_now and iv.pending_at is None:
                iv.pending_at = ts
        if not open_:
            del self._intervals[member_id]
        self._check_stable(ts)

    def _close_member(self, member_id: str, ts: int, rows: list[AuditRow]) -> None:
        open_ = self._intervals.pop(member_id, None)
        if open_:
            rows.extend(self._interval_rows(member_id, open_, ts))

    # ------------------------------------------------------------------------------------------
    # rows

    def _topic(self, topic_id: str) -> str:
        return self.names.get(topic_id, topic_id)

    def _interval_rows(self, member_id: str, open_: dict[TopicKey, _Interval], valid_to: int | None
                       ) -> list[AuditRow]:
        m = self.members.get(member_id) or _Member()
        return [self._interval_row(member_id, m, tp, iv, valid_to) for tp, iv in sorted(open_.items())]

    def _interval_row(self, member_id: str, m: _Member, tp: TopicKey, iv: _Interval,
                      valid_to: int | None) -> AssignmentRow:
        return AssignmentRow(self.group_id, iv.epoch, member_id, m.instance_id, m.client_id, m.client_host,
                             self._topic(tp[0]), tp[1], None, iv.owned_before, None, None, iv.valid_from, valid_to,
                             iv.partition, iv.offset, "consumer", tp[0], iv.pending_at, None, None)

    def _violation(self, kind: str, topic_id: str | None, partition: int | None, members: tuple[str, ...],
                   detail: str, p: int, o: int, ts: int) -> ViolationRow:
        gen = self._gen["generation_id"] if self._gen is not None else None
        topic = self._topic(topic_id) if topic_id is not None else None
        return ViolationRow(self.group_id, gen, kind, topic, partition, members, detail, f"partition {p} offset {o}",
                            ts, p, o)

    def _event(self, cause: str, member_id: str | None, instance_id: str | None, detail: str, evidence: str) -> None:
        self._events.append([cause, member_id, instance_id, detail, evidence])

    # ------------------------------------------------------------------------------------------
    # saved state

    def to_dict(self) -> dict[str, Any]:
        return {
            "exists": self.exists, "epoch": self.epoch, "epoch_written": self.epoch_written,
            "metadata_hash": self.metadata_hash,
            "members": {k: m.to_list() for k, m in sorted(self.members.items())},
            "targets": {k: sorted([t, list(ps)] for t, ps in v.items()) for k, v in sorted(self.targets.items())},
            "assignment_epoch": self.assignment_epoch,
            "regexes": {k: list(v) for k, v in sorted(self.regexes.items())},
            "generation": dict(self._gen) if self._gen is not None else None,
            "last_epoch": self._last_epoch,
            "intervals": {k: [[t, p, iv.epoch, iv.valid_from, iv.partition, iv.offset, iv.owned_before, iv.pending_at]
                              for (t, p), iv in sorted(v.items())] for k, v in sorted(self._intervals.items())},
            "events": [list(e) for e in self._events],
            "departed": {i: [k, m.to_list()] for i, (k, m) in sorted(self._departed.items())},
            "converted_from": self._converted_from,
        }

    @classmethod
    def from_dict(cls, group_id: str, d: dict[str, Any], names: dict[str, str]) -> ConsumerGroupAudit:
        self = cls(group_id, names)
        self.exists, self.epoch, self.epoch_written = d["exists"], d["epoch"], d["epoch_written"]
        self.metadata_hash = d["metadata_hash"]
        self.members = {k: _Member.from_list(v) for k, v in d["members"].items()}
        self.targets = {k: {t: tuple(ps) for t, ps in v} for k, v in d["targets"].items()}
        self.assignment_epoch = d["assignment_epoch"]
        self.regexes = {k: tuple(v) for k, v in d["regexes"].items()}
        self._gen = dict(d["generation"]) if d["generation"] is not None else None
        self._last_epoch = d["last_epoch"]
        self._intervals = {k: {(t, p): _Interval(e, vf, sp, so, ob, pa) for t, p, e, vf, sp, so, ob, pa in v}
                           for k, v in d["intervals"].items()}
        self._events = [list(e) for e in d["events"]]
        self._departed = {i: (k, _Member.from_list(m)) for i, (k, m) in d["departed"].items()}
        self._converted_from = d["converted_from"]
        return self
