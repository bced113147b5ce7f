"""The audit of a share group (KIP-932, key types 9-15) and of a streams group (KIP-1071, key types
17 and 19-23): their records replayed as the broker's load path replays them, and the group's
epochs, members and assignments read from them into the audit's rows.

The state follows `GroupMetadataManager#replay` for each record type and the groups it updates
(`ShareGroup`, `ShareGroupMember`, `StreamsGroup`, `StreamsGroupMember`):
* the group's epoch record (share 11, streams 17) sets the group epoch and metadata hash; its
  tombstone deletes the group, which the load path refuses while members remain, a share group's
  target assignment has members, or the target-assignment epoch was not deleted first;
* the member record (share 10, streams 19) adds or updates a member (`ShareGroupMember.Builder#
  updateWith`, `StreamsGroupMember.Builder#updateWith`); its tombstone removes the member, refused
  unless its current assignment was deleted first (member epoch -1) and its target assignment too;
* the target assignment's epoch (12, 20) and members (13, 21); the epoch's tombstone is refused while
  target-assignment members remain;
* a member's current assignment (share 14: member epoch, previous epoch, state, assigned partitions by
  topic id; streams 22: the same with active, standby and warmup tasks and the tasks of each kind
  pending revocation); its tombstone leaves the member at epoch -1 with nothing assigned;
* a streams group's topology (23, its epoch) and a share group's share-partition state (15, which
  names the topics by id and name; 9, written by 4.0 only, holds nothing the history reads);
* a record of these types with a value creates the group (`GroupMetadataManager#
  getOrMaybeCreatePersistedShareGroup` / `#getOrMaybeCreatePersistedStreamsGroup`); a tombstone of a
  group or member that does not exist is ignored, as the load path ignores it.

History:
* `generations` (`group_type` "share" / "streams", `protocol_type` the same): one row per group epoch,
  opened by the epoch record that bumps it, closed by the next bump or the group's tombstone. It
  carries the members at the bump, the target assignment's epoch (12 / 20) and when the group reached
  the epoch: the target at it and every member's current assignment at it and STABLE
  (`StreamsGroupMember#isReconciledTo`; a share member takes its target at once, there is nothing to
  revoke). `state` is the broker's: a share group is "Empty" or "Stable" (`ShareGroup#
  maybeUpdateGroupState`); a streams group "Empty", "NotReady" (its topology not validated at its
  epoch: the metadata record's validated topology epoch against the topology record's; a 4.1
  broker does not write it, and its groups are never NotReady here), "Assigning", "Reconciling" or
  "Stable" (`StreamsGroup#maybeUpdateGroupState`).
* `assignments`: a share member's assigned partitions, topic ids named from the group's
  share-partition state records (15) or OffsetCommit values, ids kept when the log does not name
  them; a streams member's tasks, one row per task: `topic` is the task's kind and subtopology
  ("active:0", "standby:1", "warmup:0"), `partition` the task's partition (Kafka's task id
  "0_3" is subtopology 0, partition 3), `topic_id` None. A task pending revocation stays the
  member's until a later record drops it (`pending_revocation_at`). Intervals as a consumer
  group's: from one current-assignment record to the record that drops the task or partition, a
  new row at each member epoch (`owned_before` True).
* `rebalance_causes`: `group_created`, `history_start`, `member_joined` (a member record of a new
  member), `member_left_or_expired` (a member's tombstones: the log writes the same records for a
  leave and a fence), `subscription_changed` (a share member's topics),
  `share_partitions_initialized` (a share-partition state record, 15, names partitions initialized
  since: the broker then bumps the epoch to assign them, `GroupMetadataManager#
  initializedAssignmentPending`), `topology_changed` (a
  streams topology record with a new topology epoch), `topic_metadata_changed` (the metadata hash
  alone), `epoch_bump_unexplained`, `group_deleted`.
* `violations`: `load_refused` (a record the load path refuses in its place; the replay goes on as
  if accepted), `member_epoch_ahead` (a member epoch above the group epoch), `duplicate_assignment`
  (a streams active task in two members' current assignments at once: the assignor gives each
  task one active owner). A share partition held by several members is what share groups do, not
  a violation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from coordinator_audit.core.audit.consumer import topic_id_text
from coordinator_audit.core.audit.rows import (
    AssignmentRow,
    AuditRow,
    GenerationRow,
    RebalanceCauseRow,
    ViolationRow,
)
from coordinator_audit.core.records import CoordinatorRecord
from coordinator_audit.core.records_share import (
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataValue,
    ShareGroupMetadataValue40,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupStatePartitionMetadataValue40,
    ShareGroupTargetAssignmentMetadataValue,
)
from coordinator_audit.core.records_streams import (
    CurrentTaskIds,
    StreamsGroupCurrentMemberAssignmentValue,
    StreamsGroupMemberMetadataValue,
    StreamsGroupMetadataValue,
    StreamsGroupTargetAssignmentMetadataValue,
    StreamsGroupTopologyValue,
)

__all__ = ["SHARE_RECORD_TYPES", "SHARE_STREAMS_CAUSES", "SHARE_STREAMS_VIOLATION_KINDS", "STREAMS_RECORD_TYPES",
           "ShareStreamsGroupAudit"]

SHARE_RECORD_TYPES = frozenset(range(9, 16))
STREAMS_RECORD_TYPES = frozenset({17, 19, 20, 21, 22, 23})

_EPOCH_TYPES = {11: "share", 17: "streams"}
_MEMBER_TYPES = {10: "share", 19: "streams"}
_TARGET_EPOCH_TYPES = {12: "share", 20: "streams"}
_TARGET_MEMBER_TYPES = {13: "share", 21: "streams"}
_CURRENT_TYPES = {14: "share", 22: "streams"}

LEAVE_EPOCH = -1
"""`LEAVE_GROUP_MEMBER_EPOCH`: what a deleted current assignment leaves."""
SHARE_STABLE = 0
"""A share member's `MemberState.STABLE` (the consumer groups' enum)."""
STREAMS_STABLE = 1
"""A streams member's `streams.MemberState.STABLE` (0 is not a state there; 2 and 3 are
UNREVOKED_TASKS and UNRELEASED_TASKS)."""

SHARE_STREAMS_CAUSES: tuple[str, ...] = (
    "history_start", "group_created", "member_left_or_expired", "member_joined", "subscription_changed",
    "share_partitions_initialized", "topology_changed", "topic_metadata_changed", "epoch_bump_unexplained", "group_deleted",
)
"""The causes of a share or streams group's epochs, in the order their primary is chosen."""
_RANK = {c: i for i, c in enumerate(SHARE_STREAMS_CAUSES)}
_MEMBERSHIP = frozenset({"member_joined", "member_left_or_expired", "subscription_changed", "topology_changed"})

SHARE_STREAMS_VIOLATION_KINDS: tuple[str, ...] = ("duplicate_assignment", "member_epoch_ahead", "load_refused")

_TASK_KINDS = ("active", "standby", "warmup")

Owned = tuple[str, int]
"""(topic id text, partition) of a share member; (task kind:subtopology, partition) of a streams member."""


@dataclass(slots=True)
class _Member:
    has_metadata: bool = False
    instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    topics: tuple[str, ...] = ()
    epoch: int = 0
    state: int = SHARE_STABLE
    owned: dict[Owned, bool] = field(default_factory=dict)  # -> pending revocation

    def to_list(self) -> list[Any]:
        return [self.has_metadata, self.instance_id, self.client_id, self.client_host, list(self.topics), self.epoch,
                self.state, sorted([t, p, v] for (t, p), v in self.owned.items())]

    @staticmethod
    def from_list(d: list[Any]) -> _Member:
        return _Member(d[0], d[1], d[2], d[3], tuple(d[4]), d[5], d[6], {(t, p): v for t, p, v in d[7]})


class ShareStreamsGroupAudit:
    """One share or streams group's replayed state and open history; `apply` takes its records in
    log order and returns the rows they close. JSON-able state: `to_dict` / `from_dict`."""

    def __init__(self, group_id: str, group_type: str, names: dict[str, str]) -> None:
        self.group_id = group_id
        self.group_type = group_type
        self.names = names
        """topic id text -> topic name (the auditor's, from OffsetCommit values; share state records add)."""
        self.exists = False
        self.epoch = 0
        self.metadata_hash = 0
        self.members: dict[str, _Member] = {}
        self.targets: set[str] = set()
        self.assignment_epoch = -1
        self.topology_epoch: int | None = None
        self.validated_topology_epoch: int | None = None  # None: the log does not say (a 4.1 broker's)
        self.initialized: set[Owned] = set()  # a share group's initialized share partitions (type 15)
        self._stable = SHARE_STABLE if group_type == "share" else STREAMS_STABLE
        self._gen: dict[str, Any] | None = None
        self._last_epoch: int | None = None
        self._intervals: dict[str, dict[Owned, list[Any]]] = {}  # [epoch, valid_from, p, o, owned_before, pending_at]
        self._events: list[list[Any]] = []

    # ------------------------------------------------------------------------------------------
    # public face

    def apply(self, record: CoordinatorRecord, p: int, o: int, ts: int) -> list[AuditRow]:
        """The rows closed by one record of the group, replayed."""
        t, v = record.key_version, record.value
        rows: list[AuditRow] = []
        where = f"partition {p} offset {o}"
        if v is None and not self.exists:
            return rows  # the load path ignores a tombstone of a group it does not have
        if v is not None:
            self._create(where)
        if t in _EPOCH_TYPES:
            if v is None:
                self._delete_group(p, o, ts, rows)
            else:
                assert isinstance(v, ShareGroupMetadataValue | ShareGroupMetadataValue40 | StreamsGroupMetadataValue)
                self._epoch_record(v.epoch, getattr(v, "metadata_hash", self.metadata_hash), p, o, ts, rows)
                if isinstance(v, StreamsGroupMetadataValue):
                    # 4.2+ write the validated topology epoch (-1: not validated yet) beside the last
                    # assignment configs; a record with neither comes from a 4.1 broker, which kept it in memory
                    known = v.validated_topology_epoch != -1 or bool(v.last_assignment_configs)
                    self.validated_topology_epoch = v.validated_topology_epoch if known else None
                    self._check_reached(ts)
        elif t in _MEMBER_TYPES:
            member_id = _member_id(record)
            if v is None:
                self._remove_member(member_id, p, o, ts, rows)
            else:
                assert isinstance(v, ShareGroupMemberMetadataValue | StreamsGroupMemberMetadataValue)
                self._member_record(member_id, v, where)
        elif t in _TARGET_EPOCH_TYPES:
            if v is None:
                if self.targets:
                    rows.append(self._violation(
                        "load_refused", None, None, tuple(sorted(self.targets)),
                        f"a target-assignment epoch tombstone while {len(self.targets)} member(s) still have a "
                        f"target assignment (GroupMetadataManager#replay refuses it)", p, o, ts))
                self.assignment_epoch = -1
            else:
                assert isinstance(v, ShareGroupTargetAssignmentMetadataValue | StreamsGroupTargetAssignmentMetadataValue)
                self.assignment_epoch = v.assignment_epoch
                if self._gen is not None and v.assignment_epoch == self._gen["generation_id"]:
                    self._gen["assignment_epoch"] = v.assignment_epoch
                    self._gen["assignment_timestamp"] = ts
                self._check_reached(ts)
        elif t in _TARGET_MEMBER_TYPES:
            member_id = _member_id(record)
            if v is None:
                self.targets.discard(member_id)
            else:
                self.targets.add(member_id)
        elif t in _CURRENT_TYPES:
            member_id = _member_id(record)
            if v is None:
                self._assignment_tombstone(member_id, ts, rows)
            else:
                assert isinstance(v, ShareGroupCurrentMemberAssignmentValue | StreamsGroupCurrentMemberAssignmentValue)
                self._current_assignment(member_id, v, p, o, ts, rows)
        elif t == 23:
            if v is None:
                self.topology_epoch = None
            else:
                assert isinstance(v, StreamsGroupTopologyValue)
                if self.topology_epoch is not None and v.epoch != self.topology_epoch:
                    self._event("topology_changed", None, None,
                                f"topology epoch {self.topology_epoch} -> {v.epoch} "
                                f"({len(v.subtopologies)} subtopologies)", where)
                self.topology_epoch = v.epoch
        elif t == 15 and v is not None:
            assert isinstance(v, ShareGroupStatePartitionMetadataValue | ShareGroupStatePartitionMetadataValue40)
            infos = (*getattr(v, "initializing_topics", ()), *v.initialized_topics, *v.deleting_topics)
            for info in infos:
                self.names.setdefault(topic_id_text(info.topic_id), info.topic_name)
            initialized = {(topic_id_text(t.topic_id), part) for t in v.initialized_topics for part in t.partitions}
            new = initialized - self.initialized
            self.initialized = initialized
            if new:
                # GroupMetadataManager#initializedAssignmentPending: initialized partitions not yet
                # in the target assignment make the next heartbeat bump the epoch
                topics = sorted({self.names.get(t, t) for t, _ in new})
                self._event("share_partitions_initialized", None, None,
                            f"{len(new)} share partition(s) of [{', '.join(topics)}] initialized (their share state "
                            f"exists): the assignor can assign them", where)
        return rows

    def open_rows(self) -> list[AuditRow]:
        """The open generation's row and the open intervals, as they stand."""
        rows: list[AuditRow] = []
        if self._gen is not None:
            rows.append(self._generation_row(self._gen, None, None))
        for member_id in sorted(self._intervals):
            rows.extend(self._interval_rows(member_id, self._intervals[member_id], None))
        return rows

    # ------------------------------------------------------------------------------------------
    # the group

    def _create(self, where: str) -> None:
        if self.exists:
            return
        self.exists = True
        self.epoch, self.metadata_hash, self.assignment_epoch = 0, 0, -1
        self._event("group_created", None, None, "the group's first record in the audited history", where)

    def _epoch_record(self, epoch: int, metadata_hash: int, p: int, o: int, ts: int, rows: list[AuditRow]) -> None:
        """`GroupMetadataManager#replay(ShareGroupMetadataKey / StreamsGroupMetadataKey, ...)`: the
        epoch and hash are set; an epoch other than the open generation's opens the next one."""
        old_hash, self.metadata_hash, self.epoch = self.metadata_hash, metadata_hash, epoch
        prev = self._gen["generation_id"] if self._gen is not None else self._last_epoch
        if self._gen is not None and epoch == prev:
            return  # the same epoch written again
        where = f"partition {p} offset {o}"
        explained = any(e[0] in _MEMBERSHIP for e in self._events)
        if old_hash not in (0, metadata_hash) and not explained:
            self._event("topic_metadata_changed", None, None,
                        f"metadata hash {old_hash} -> {metadata_hash} (the partitions or the set of the group's "
                        f"topics changed)", where)
        self._close_generation(ts, o, rows)
        events, self._events = self._events, []
        created = any(e[0] == "group_created" for e in events)
        missing: int | None
        prev_gen: int | None = prev
        if created and prev is None:
            missing = None
            prev_gen = None
        elif prev is None:
            events.insert(0, ["history_start", None, None,
                              f"the audited history starts at epoch {epoch}; earlier epochs are not in the log", where])
            missing = None
        elif epoch < prev:
            events.insert(0, ["history_start", None, None,
                              f"the group epoch went back from {prev} to {epoch}: the history restarts here", where])
            missing, prev_gen = None, None
        else:
            missing = epoch - prev - 1
        if not events:
            events = [["epoch_bump_unexplained", None, None,
                       "no member, subscription, topology or metadata-hash change is in the records since the "
                       "previous epoch", where]]
        events.sort(key=lambda e: _RANK[e[0]])
        for i, (cause, member_id, instance_id, detail, evidence) in enumerate(events):
            rows.append(RebalanceCauseRow(self.group_id, epoch, prev_gen, cause, member_id, instance_id, detail,
                                          evidence, i == 0, ts, p, o))
        live = [m for m in self.members.values() if m.has_metadata and m.epoch != LEAVE_EPOCH]
        self._gen = {
            "generation_id": epoch, "member_count": len(live),
            "static_member_count": sum(1 for m in live if m.instance_id is not None),
            "record_timestamp": ts, "source_partition": p, "source_offset": o, "missing_generations": missing,
            "assignment_epoch": None, "assignment_timestamp": None, "reached_at": None,
        }
        self._last_epoch = epoch
        self._check_reached(ts)

    def _close_generation(self, ts: int, o: int, rows: list[AuditRow]) -> None:
        if self._gen is not None:
            rows.append(self._generation_row(self._gen, ts, o))
            self._gen = None

    def _generation_row(self, g: dict[str, Any], ended_at: int | None, ended_by: int | None) -> GenerationRow:
        reached_at = g["reached_at"]
        if g["member_count"] == 0:
            state = "Empty"
        elif self.group_type == "share" or reached_at is not None:
            state = "Stable"
        elif not self._topology_ready():
            state = "NotReady"
        else:
            state = "Reconciling" if g["assignment_epoch"] is not None else "Assigning"
        return GenerationRow(
            self.group_id, g["generation_id"], self.group_type, None, None, g["member_count"],
            g["static_member_count"], state, None, g["record_timestamp"], None, ended_at,
            ended_at - g["record_timestamp"] if ended_at is not None else None, g["source_partition"],
            g["source_offset"], g["missing_generations"], ended_by, 0, None, "java", self.group_type,
            g["assignment_epoch"], g["assignment_timestamp"], reached_at,
            reached_at - g["record_timestamp"] if reached_at is not None else None)

    def _check_reached(self, ts: int) -> None:
        """Marks the open epoch reached when the target assignment is at it and every member's
        current assignment is at it and STABLE (`StreamsGroupMember#isReconciledTo`)."""
        g = self._gen
        if g is None or g["reached_at"] is not None or self.assignment_epoch != g["generation_id"]:
            return
        if not self._topology_ready():
            return
        live = [m for m in self.members.values() if m.epoch != LEAVE_EPOCH]
        if all(m.state == self._stable and m.epoch == self.assignment_epoch for m in live):
            g["reached_at"] = ts

    def _topology_ready(self) -> bool:
        """A streams group is NOT_READY while its topology is not validated at its epoch
        (`StreamsGroup#maybeUpdateGroupState`); a share group, or a log that does not record it, is ready."""
        if self.group_type != "streams" or self.validated_topology_epoch is None:
            return True
        return self.topology_epoch is not None and self.topology_epoch == self.validated_topology_epoch

    def _delete_group(self, p: int, o: int, ts: int, rows: list[AuditRow]) -> None:
        problems = []
        if self.members:
            problems.append(f"{len(self.members)} member(s) remain")
        if self.targets and self.group_type == "share":
            problems.append(f"{len(self.targets)} target assignment(s) remain")
        if self.assignment_epoch != -1:
            problems.append(f"the target-assignment epoch ({self.assignment_epoch}) was not deleted first")
        if problems:
            rows.append(self._violation("load_refused", None, None, tuple(sorted(self.members)),
                                        "a group tombstone while " + "; ".join(problems)
                                        + " (GroupMetadataManager#replay refuses it)", p, o, ts))
        epoch = self._gen["generation_id"] if self._gen is not None else self._last_epoch
        self._close_generation(ts, o, rows)
        for member_id in sorted(self._intervals):
            rows.extend(self._interval_rows(member_id, self._intervals[member_id], ts))
        self._intervals = {}
        rows.append(RebalanceCauseRow(self.group_id, epoch, epoch, "group_deleted", None, None,
                                      f"tombstone of the {self.group_type} group's epoch record: the group is deleted",
                                      f"partition {p} offset {o}", False, ts, p, o))
        self.exists = False
        self.members, self.targets, self._events = {}, set(), []
        self.assignment_epoch, self.epoch, self.metadata_hash, self.topology_epoch = -1, 0, 0, None
        self.validated_topology_epoch, self.initialized = None, set()

    # ------------------------------------------------------------------------------------------
    # members

    def _member_record(self, member_id: str, v: ShareGroupMemberMetadataValue | StreamsGroupMemberMetadataValue,
                       where: str) -> None:
        m = self.members.get(member_id)
        if m is None:
            m = self.members[member_id] = _Member()
        instance_id = v.instance_id if isinstance(v, StreamsGroupMemberMetadataValue) else None
        topics = tuple(sorted(v.subscribed_topic_names)) if isinstance(v, ShareGroupMemberMetadataValue) else ()
        if not m.has_metadata:
            what = (f"subscribed to [{', '.join(topics)}]" if isinstance(v, ShareGroupMemberMetadataValue)
                    else f"process {v.process_id}, topology epoch {v.topology_epoch}")
            self._event("member_joined", member_id, instance_id, f"{member_id} joined ({what})", where)
        elif m.topics != topics:
            self._event("subscription_changed", member_id, instance_id,
                        f"{member_id} subscription [{', '.join(m.topics)}] -> [{', '.join(topics)}]", where)
        m.has_metadata = True
        m.instance_id, m.client_id, m.client_host, m.topics = instance_id, v.client_id, v.client_host, topics

    def _remove_member(self, member_id: str, p: int, o: int, ts: int, rows: list[AuditRow]) -> None:
        """`GroupMetadataManager#replay(ShareGroupMemberMetadataKey / StreamsGroupMemberMetadataKey, null)`."""
        m = self.members.get(member_id)
        if m is None:
            return
        problems = []
        if m.epoch != LEAVE_EPOCH:
            problems.append("its current assignment was not deleted first")
        if member_id in self.targets:
            problems.append("its target assignment was not deleted first")
        if problems:
            rows.append(self._violation("load_refused", None, None, (member_id,),
                                        f"member tombstone of {member_id}: " + " and ".join(problems)
                                        + " (GroupMetadataManager#replay refuses it)", p, o, ts))
        self._close_member(member_id, ts, rows)
        del self.members[member_id]
        self._event("member_left_or_expired", member_id, m.instance_id,
                    f"{member_id} was removed (tombstones of its current assignment, target assignment and member "
                    f"record): a leave and a fence write the same records, so the log cannot tell which",
                    f"partition {p} offset {o}")
        self._check_reached(ts)

    def _assignment_tombstone(self, member_id: str, ts: int, rows: list[AuditRow]) -> None:
        m = self.members.get(member_id)
        if m is None:
            return
        m.epoch, m.owned = LEAVE_EPOCH, {}
        self._close_member(member_id, ts, rows)
        self._check_reached(ts)

    def _current_assignment(self, member_id: str,
                            v: ShareGroupCurrentMemberAssignmentValue | StreamsGroupCurrentMemberAssignmentValue,
                            p: int, o: int, ts: int, rows: list[AuditRow]) -> None:
        """`ShareGroupMember.Builder#updateWith` / `StreamsGroupMember.Builder#updateWith` of the
        member's current assignment, and the ownership intervals it implies."""
        m = self.members.get(member_id)
        if m is None:
            m = self.members[member_id] = _Member()
        if v.member_epoch > self.epoch and self._gen is not None:
            rows.append(self._violation(
                "member_epoch_ahead", None, None, (member_id,),
                f"{member_id} at member epoch {v.member_epoch} while the group epoch is {self.epoch}", p, o, ts))
        owned: dict[Owned, bool] = {}
        if isinstance(v, ShareGroupCurrentMemberAssignmentValue):
            for tp in v.assigned_partitions:
                for part in tp.partitions:
                    owned[(topic_id_text(tp.topic_id), part)] = False
        else:
            for kind, tasks, revoking in zip(_TASK_KINDS, (v.active_tasks, v.standby_tasks, v.warmup_tasks),
                                             (v.active_tasks_pending_revocation, v.standby_tasks_pending_revocation,
                                              v.warmup_tasks_pending_revocation), strict=True):
                _add_tasks(owned, kind, tasks, False)
                _add_tasks(owned, kind, revoking, True)
        before = set(m.owned)
        m.epoch, m.state, m.owned = v.member_epoch, v.state, owned
        if self.group_type == "streams":
            for key in sorted(set(owned) - before):
                if not key[0].startswith("active:"):
                    continue
                for other_id, other in sorted(self.members.items()):
                    if other_id != member_id and other.epoch != LEAVE_EPOCH and key in other.owned:
                        rows.append(self._violation(
                            "duplicate_assignment", key[0], key[1], (member_id, other_id),
                            f"{key[0].partition(':')[2]}_{key[1]} is an active task of both {member_id} (member "
                            f"epoch {v.member_epoch}) and {other_id}", p, o, ts))
        held_at = self.epoch if v.member_epoch == 0 else v.member_epoch
        open_ = self._intervals.setdefault(member_id, {})
        for key in sorted(before - set(owned)):
            iv = open_.pop(key, None)
            if iv is not None:
                rows.append(self._interval_row(member_id, m, key, iv, ts))
        for key, pending in sorted(owned.items()):
            iv = open_.get(key)
            if iv is not None and held_at >= 0 and iv[0] != held_at:
                rows.append(self._interval_row(member_id, m, key, iv, ts))
                open_[key] = [held_at, ts, p, o, True, ts if pending else None]
            elif iv is None:
                open_[key] = [held_at, ts, p, o, False, ts if pending else None]
            elif pending and iv[5] is None:
                iv[5] = ts
        if not open_:
            del self._intervals[member_id]
        self._check_reached(ts)

    def _close_member(self, member_id: str, ts: int, rows: list[AuditRow]) -> None:
        open_ = self._intervals.pop(member_id, None)
        if open_:
            rows.extend(self._interval_rows(member_id, open_, ts))

    # ------------------------------------------------------------------------------------------
    # rows

    def _interval_rows(self, member_id: str, open_: dict[Owned, list[Any]], valid_to: int | None) -> list[AuditRow]:
        m = self.members.get(member_id) or _Member()
        return [self._interval_row(member_id, m, key, iv, valid_to) for key, iv in sorted(open_.items())]

    def _interval_row(self, member_id: str, m: _Member, key: Owned, iv: list[Any], valid_to: int | None
                      ) -> AssignmentRow:
        epoch, valid_from, sp, so, owned_before, pending_at = iv
        if self.group_type == "share":
            topic, topic_id = self.names.get(key[0], key[0]), key[0]
        else:
            topic, topic_id = key[0], None
        return AssignmentRow(self.group_id, epoch, member_id, m.instance_id, m.client_id, m.client_host, topic,
                             key[1], None, owned_before, None, None, valid_from, valid_to, sp, so, self.group_type,
                             topic_id, pending_at, None, None)

    def _violation(self, kind: str, topic: str | None, partition: int | None, members: tuple[str, ...],
                   detail: str, p: int, o: int, ts: int) -> ViolationRow:
        gen = self._gen["generation_id"] if self._gen is not None else None
        return ViolationRow(self.group_id, gen, kind, topic, partition, members, detail, f"partition {p} offset {o}",
                            ts, p, o)

    def _event(self, cause: str, member_id: str | None, instance_id: str | None, detail: str, evidence: str) -> None:
        self._events.append([cause, member_id, instance_id, detail, evidence])

    # ------------------------------------------------------------------------------------------
    # saved state

    def to_dict(self) -> dict[str, Any]:
        return {
            "group_type": self.group_type, "exists": self.exists, "epoch": self.epoch,
            "metadata_hash": self.metadata_hash,
            "members": {k: m.to_list() for k, m in sorted(self.members.items())},
            "targets": sorted(self.targets), "assignment_epoch": self.assignment_epoch,
            "topology_epoch": self.topology_epoch, "validated_topology_epoch": self.validated_topology_epoch,
            "initialized": sorted([t, p] for t, p in self.initialized),
            "generation": dict(self._gen) if self._gen is not None else None, "last_epoch": self._last_epoch,
            "intervals": {k: [[t, p, *iv] for (t, p), iv in sorted(v.items())]
                          for k, v in sorted(self._intervals.items())},
            "events": [list(e) for e in self._events],
        }

    @classmethod
    def from_dict(cls, group_id: str, d: dict[str, Any], names: dict[str, str]) -> ShareStreamsGroupAudit:
        self = cls(group_id, d["group_type"], names)
        self.exists, self.epoch, self.metadata_hash = d["exists"], d["epoch"], d["metadata_hash"]
        self.members = {k: _Member.from_list(v) for k, v in d["members"].items()}
        self.targets, self.assignment_epoch = set(d["targets"]), d["assignment_epoch"]
        self.topology_epoch, self.validated_topology_epoch = d["topology_epoch"], d["validated_topology_epoch"]
        self.initialized = {(t, p) for t, p in d["initialized"]}
        self._gen = dict(d["generation"]) if d["generation"] is not None else None
        self._last_epoch = d["last_epoch"]
        self._intervals = {k: {(e[0], e[1]): list(e[2:]) for e in v} for k, v in d["intervals"].items()}
        self._events = [list(e) for e in d["events"]]
        return self


def _add_tasks(owned: dict[Owned, bool], kind: str, tasks: tuple[CurrentTaskIds, ...], pending: bool) -> None:
    for t in tasks:
        for part in t.partitions:
            owned[(f"{kind}:{t.subtopology_id}", part)] = pending


def _member_id(record: CoordinatorRecord) -> str:
    member_id = getattr(record.key, "member_id", None)
    assert isinstance(member_id, str)  # every member-keyed share and streams record has one
    return member_id
