"""The generation observer: one group's persisted states, one GroupMetadata record after another,
turned into generations, assignment intervals, rebalance causes and protocol violations.

The observer keeps its own view of the group (`GroupSnapshot`, read from each record's value), not
the coordinator's replayed state: see `GroupAuditor` for why.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from coordinator_audit.core.audit.causes import Cause, new_generation_causes, same_generation_changes
from coordinator_audit.core.audit.offsets import OffsetSummary, TopicPartition
from coordinator_audit.core.audit.rows import (
    AuditRow,
    GenerationRow,
    RebalanceCauseRow,
    ViolationRow,
    make_assignment_run,
    make_cause_row,
    make_generation_row,
)
from coordinator_audit.core.audit.snapshot import GroupSnapshot, MemberView
from coordinator_audit.core.audit.violations import (
    Violation,
    assignment_violations,
    ownership_violations,
    replaced_member_moves,
    replacement_violations,
)

__all__ = ["GenerationObserver", "HistoryGap"]

GroupRecord = tuple[int, int, int, bytes, bytes]
"""(partition, offset, timestamp, key, value) of a GroupMetadata record, verbatim."""


@dataclass(frozen=True, slots=True)
class HistoryGap:
    """Offsets of a `__consumer_offsets` partition that the audit never read: `count` offsets
    between `after_offset` and `before_offset` (a run's input does not continue where the previous
    run stopped, or has holes: compaction, retention, a missing export). The group's history across
    them cannot be known, only labelled (`history_gap` causes)."""

    partition: int
    after_offset: int | None
    """The last offset read before the gap (None: unknown)."""
    before_offset: int
    """The first offset read after it."""
    count: int
    timestamp: int
    """When the gap was noticed (epoch ms): the time of a gap row that no later record of the group
    explains."""

    def describe(self) -> str:
        where = (f"between offsets {self.after_offset} and {self.before_offset}" if self.after_offset is not None
                 else f"before offset {self.before_offset}")
        return (f"{self.count} offset(s) of partition {self.partition} {where} were never read (compaction, "
                f"retention or a missing export): the group's history across them is unknown")

    def evidence(self) -> str:
        return f"partition {self.partition}: {self.count} offset(s) missing before offset {self.before_offset}"


class GenerationObserver:
    """Compares each persisted state of one group with the previous one: the generation open now
    (its row, built when it closes), who owns what since when, static instances seen, the members'
    last commits (evidence for causes), and the coordinator flavour the log reveals."""

    def __init__(self, group_id: str | None) -> None:
        self.group_id = group_id
        """The audited group (set by the auditor when it learns it, before the first `observe`)."""
        self.phase = "none"
        """"none" (no GroupMetadata record yet), "live", "deleted" (the last one was a tombstone)."""
        self.snapshot: GroupSnapshot | None = None
        """The state the last GroupMetadata record persisted (None: none yet, or a tombstone)."""
        self.record: GroupRecord | None = None
        """That record, verbatim (None with `snapshot`)."""
        self._gen_row: dict[str, Any] | None = None
        self._valid_from: dict[str, tuple[int, int, int]] = {}
        self._instances: dict[str, str] = {}  # static instance id -> its last member id in this history
        self._replaced: set[str] = set()  # instances replaced (W3) during the current generation
        self._gap: HistoryGap | None = None  # records known to be missing before the next record
        self._activity: dict[str, tuple[int, int]] = {}  # member id -> last (commit ts, offset) this generation
        self._flavour = "unknown"  # which coordinator wrote the log, as inferred (see GenerationRow)
        self.runs = False
        """Emit each member's assignments of an interval as one `AssignmentRun` instead of its rows."""

    # ------------------------------------------------------------------------------------------
    # the observer's face

    def observe(self, p: int, o: int, ts: int, key: bytes, value: bytes | None, snap: GroupSnapshot | None,
                closing: Mapping[TopicPartition, OffsetSummary]) -> list[AuditRow]:
        """The rows of the GroupMetadata record at `p`/`o` (`snap`: the state it persists, None for
        a tombstone); `closing` is the offset window it closes (its commits are evidence)."""
        gap, self._gap = self._gap, None
        prev_gen = self.snapshot.generation if self.snapshot is not None else None
        before = self.record
        rows = self._observe_record(p, o, ts, snap, closing)
        self.record = (p, o, ts, bytes(key), bytes(value)) if snap is not None and value is not None else None
        if gap is None or (self.phase == "none" and snap is None):
            return rows
        # What happened across the gap is unknown: a new generation's primary cause is the gap (the
        # causes the two records suggest stay, not primary); otherwise the gap is noted beside.
        gen = snap.generation if snap is not None else None
        new_generation = snap is not None and any(
            isinstance(r, RebalanceCauseRow) and r.is_primary and r.generation_id == gen for r in rows)
        evidence = f"{gap.evidence()}; " + self._evidence_at(p, o, prev_gen, before)
        detail = gap.describe() + (f" before generation {gen}" if gen is not None else " before the tombstone")
        row = self._cause_row(Cause("history_gap", detail=detail), gen, prev_gen, new_generation, p, o, ts, evidence)
        if new_generation:
            rows = [replace(r, is_primary=False) if isinstance(r, RebalanceCauseRow) and r.is_primary else r
                    for r in rows]
        rows.append(row)
        return rows

    def set_missing_generations(self, missing: int) -> None:
        """Sets the open generation's `missing_generations` (a conversion from a consumer group
        tells what the generation follows on from)."""
        if self._gen_row is not None:
            self._gen_row["missing_generations"] = missing

    def note_gap(self, gap: HistoryGap) -> None:
        """See `GroupAuditor.note_gap`."""
        self._gap = gap

    def gap_rows(self) -> list[AuditRow]:
        """See `GroupAuditor.gap_rows`."""
        gap, self._gap = self._gap, None
        if gap is None or self.phase == "none":
            return []
        gen = self.snapshot.generation if self.snapshot is not None else None
        cause = Cause("history_gap", detail=gap.describe() + "; no GroupMetadata record of the group followed")
        return [self._cause_row(cause, gen, gen, False, gap.partition, gap.before_offset, gap.timestamp,
                                gap.evidence())]

    def open_rows(self) -> list[AuditRow]:
        """The open generation's row and its assignments, as they stand (ended_at / valid_to None)."""
        rows: list[AuditRow] = []
        if self._gen_row is not None:
            rows.append(_generation_row(self._gen_row, None, None, None))
        if self.snapshot is not None:
            rows.extend(self._assignment_rows(self.snapshot, valid_to=None))
        return rows

    def to_dict(self, *, record_value: bool = True) -> dict[str, Any]:
        """The observer's part of `GroupAuditor.to_dict` (its keys, in its order); without
        `record_value`, the saved record's value is left out."""
        rec = None
        if self.record is not None:
            p, o, ts, key, value = self.record
            rec = {"partition": p, "offset": o, "timestamp": ts, "key": base64.b64encode(key).decode()}
            if record_value:
                rec["value"] = base64.b64encode(value).decode()
        return {
            "phase": self.phase,
            "group_record": rec,
            "generation": dict(self._gen_row) if self._gen_row is not None else None,
            "valid_from": [[m, *v] for m, v in self._valid_from.items()],
            "instances": sorted(self._instances.items()),
            "replaced": sorted(self._replaced),
            "activity": [[m, ts, o] for m, (ts, o) in sorted(self._activity.items())],
            "coordinator_flavour": self._flavour,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], snapshot: GroupSnapshot | None,
                  record: GroupRecord | None) -> GenerationObserver:
        """The observer `to_dict` saved; `snapshot` is `record` ("group_record") read again."""
        self = cls(data["group_id"])
        self.phase = data["phase"]
        self.snapshot, self.record = snapshot, record
        self._gen_row = dict(data["generation"]) if data["generation"] is not None else None
        self._valid_from = {m: (ts, p, o) for m, ts, p, o in data["valid_from"]}
        self._instances = dict(data["instances"])
        self._replaced = set(data["replaced"])
        self._activity = {m: (ts, o) for m, ts, o in data.get("activity", ())}
        self._flavour = data.get("coordinator_flavour", "unknown")
        return self

    # ------------------------------------------------------------------------------------------
    # one persisted state after another

    def _observe_record(self, p: int, o: int, ts: int, snap: GroupSnapshot | None,
                        closing: Mapping[TopicPartition, OffsetSummary]) -> list[AuditRow]:
        self._note_activity(closing)
        rows: list[AuditRow] = []
        prev = self.snapshot
        if snap is None:
            rows.extend(self._close_generation(ts, o))
            gen = prev.generation if prev is not None else None
            detail = "tombstone: the group and its metadata are deleted"
            if gen == 0:
                self._flavour = "java"  # the Scala coordinator writes no tombstone for a generation-0 group
                detail += " (a generation-0 group: only the Java coordinator deletes those with a tombstone)"
            # a tombstone is not a generation: primary only when the audited history starts with it
            primary = prev is None and self.phase == "none"
            rows.append(self._cause_row(Cause("group_deleted", detail=detail), gen, gen, primary, p, o, ts,
                                        self._evidence(p, o)))
            self.snapshot, self.phase, self._valid_from, self._instances = None, "deleted", {}, {}
            self._replaced = set()
            self._activity = {}
            return rows
        if prev is not None and snap.generation == prev.generation:
            rows.extend(self._same_generation(prev, snap, p, o, ts))
        else:
            rows.extend(self._new_generation(prev, snap, p, o, ts, had_offset_records=bool(closing)))
        self.snapshot, self.phase = snap, "live"
        return rows

    def _note_activity(self, closing: Mapping[TopicPartition, OffsetSummary]) -> None:
        """Credits the commits of the closing window to the members assigned their partitions (the
        evidence of who left or rejoined first, `causes.Activity`)."""
        snap = self.snapshot
        if snap is None or not closing or not snap.members:
            return
        owners = snap.owners()
        act = self._activity
        for tp, s in closing.items():
            if not s.commits:
                continue
            holders = owners.get(tp)
            if not holders:
                continue
            last_ts, last_src = s.last_commit_timestamp, s.last_commit_source_offset
            assert last_ts is not None and last_src is not None  # the summary has commits
            at = (last_ts, last_src)
            for m in holders:
                mine = act.get(m.member_id)
                if mine is None or at > mine:
                    act[m.member_id] = at

    def _new_generation(self, prev: GroupSnapshot | None, snap: GroupSnapshot, p: int, o: int, ts: int, *,
                        had_offset_records: bool) -> list[AuditRow]:
        rows = self._close_generation(ts, o)
        history_start: str | None = None
        if prev is None and self.phase == "none" and snap.generation > 1:
            history_start = (f"the audited history starts at generation {snap.generation}; earlier "
                             f"generations are not in the log (compaction, retention or a time window)")
        elif prev is not None and snap.generation < prev.generation:
            history_start = (f"generation went back from {prev.generation} to {snap.generation} without a "
                             f"tombstone: the history restarts here")
        missing: int | None
        prev_gen: int | None
        if history_start is not None:
            causes = [Cause("history_start", detail=history_start)]
            missing = None
            found = assignment_violations(snap)
            prev_gen = None
        else:
            base = prev if prev is not None else GroupSnapshot.initial()
            missing = max(snap.generation - base.generation - 1, 0)
            if prev is None and snap.generation == 0 and snap.is_empty and snap.protocol_type is None:
                # GroupMetadataManager#classicGroupJoin persists a new group before answering its first join
                self._flavour = "java"
                causes = [Cause("group_created", detail="the Java coordinator's creation record (generation 0, "
                                                        "no protocol type): a JoinGroup created the group")]
            else:
                if prev is None and snap.generation == 1 and not had_offset_records:
                    self._flavour = "scala"  # created by a JoinGroup, yet no creation record before it
                causes = new_generation_causes(base, snap, missing=missing, created=prev is None,
                                               known_instances=self._instances, activity=self._activity)
            found = assignment_violations(snap)
            if prev is not None:
                found += ownership_violations(prev, snap)
                found += replaced_member_moves(prev, snap, self._replaced)
            prev_gen = prev.generation if prev is not None else None
        evidence = self._evidence(p, o)
        for i, c in enumerate(causes):
            rows.append(self._cause_row(c, snap.generation, prev_gen, i == 0, p, o, ts,
                                        f"{evidence}; {c.evidence}" if c.evidence else evidence))
        rows.extend(self._violation_rows(found, snap.generation, p, o, ts))
        self._gen_row = {
            "group_id": self.group_id, "generation_id": snap.generation, "protocol_type": snap.protocol_type,
            "protocol_name": snap.protocol, "leader_id": snap.leader, "member_count": len(snap.members),
            "static_member_count": snap.static_member_count, "state": snap.state,
            "state_timestamp": snap.state_timestamp, "record_timestamp": ts,
            "sync_latency_ms": ts - snap.state_timestamp if snap.state_timestamp is not None else None,
            "source_partition": p, "source_offset": o, "missing_generations": missing,
            "static_replacements": 0, "rebalance_protocol": snap.rebalance_protocol,
            "coordinator_flavour": self._flavour,
        }
        self._valid_from = {m.member_id: (ts, p, o) for m in snap.members}
        self._remember_instances(snap)
        self._replaced = set()
        self._activity = {}
        return rows

    def _remember_instances(self, snap: GroupSnapshot) -> None:
        for m in snap.members:
            if m.group_instance_id is not None:
                self._instances[m.group_instance_id] = m.member_id

    def _same_generation(self, prev: GroupSnapshot, snap: GroupSnapshot, p: int, o: int, ts: int) -> list[AuditRow]:
        rows: list[AuditRow] = []
        causes, replacements = same_generation_changes(prev, snap)
        evidence = self._evidence(p, o)
        for c in causes:
            rows.append(self._cause_row(c, snap.generation, prev.generation, False, p, o, ts, evidence))
        rows.extend(self._violation_rows(replacement_violations(snap.generation, replacements),
                                         snap.generation, p, o, ts))
        # ownership intervals: a member whose id or assignment changed hands over at this record
        kept = {m.member_id: m for m in snap.members}
        for m in prev.members:
            now = kept.get(m.member_id)
            if now is None or now.assignment_raw != m.assignment_raw:
                rows.extend(self._member_rows(prev, m, valid_to=ts))
                self._valid_from.pop(m.member_id, None)
        for m in snap.members:
            self._valid_from.setdefault(m.member_id, (ts, p, o))
        self._remember_instances(snap)
        self._replaced.update(r.new.group_instance_id for r in replacements if r.new.group_instance_id is not None)
        if self._gen_row is not None:
            self._gen_row["leader_id"] = snap.leader
            self._gen_row["static_replacements"] += len(replacements)
        return rows

    def _close_generation(self, ts: int, o: int) -> list[AuditRow]:
        rows: list[AuditRow] = []
        if self._gen_row is not None:
            g = self._gen_row
            rows.append(_generation_row(g, ts, ts - g["record_timestamp"], o))
            self._gen_row = None
        if self.snapshot is not None:
            rows.extend(self._assignment_rows(self.snapshot, valid_to=ts))
        return rows

    def _assignment_rows(self, snap: GroupSnapshot, *, valid_to: int | None) -> list[AuditRow]:
        rows: list[AuditRow] = []
        for m in snap.members:
            rows.extend(self._member_rows(snap, m, valid_to=valid_to))
        return rows

    def _member_rows(self, snap: GroupSnapshot, m: MemberView, *, valid_to: int | None) -> list[AuditRow]:
        groups = m.assigned_groups
        if not groups:
            return []
        ts, p, o = self._valid_from[m.member_id]
        group, gen, member_id, instance = self.group_id or "", snap.generation, m.member_id, m.group_instance_id
        client_id, host, version, owned = m.client_id, m.client_host, m.subscription_version, m.owned
        ud_gen, sub_gen = m.user_data_generation, m.subscription_generation
        owned_before: bool | None = False  # the same for every row, or None: per row
        if owned:
            assigned = m.assigned_set
            owned_before = True if owned >= assigned else False if owned.isdisjoint(assigned) else None
        flags: bool | tuple[bool, ...]
        if owned_before is not None and not (snap.has_repeated_assignments() and not m.assigned_is_distinct):
            flags, size = owned_before, sum(len(partitions) for _, partitions in groups)
        else:  # per distinct partition
            distinct = m.assigned_distinct
            groups = tuple((t, (partition,)) for t, partition in distinct)
            flags = owned_before if owned_before is not None else tuple(tp in owned for tp in distinct)
            size = len(distinct)
        rebalance = m.rebalance_timeout if m.rebalance_timeout >= 0 else None  # value v0 does not carry it
        run = make_assignment_run(group, gen, member_id, instance, client_id, host, version, ud_gen, sub_gen, ts,
                                  valid_to, p, o, groups, flags, size, "classic", None, None, m.session_timeout,
                                  rebalance)
        if self.runs:
            return [run]
        return [*run.rows()]

    def _cause_row(self, c: Cause, gen: int | None, prev_gen: int | None, primary: bool, p: int, o: int,
                   ts: int, evidence: str) -> RebalanceCauseRow:
        return make_cause_row(self.group_id or "", gen, prev_gen, c.cause, c.member_id, c.group_instance_id,
                              c.detail, evidence, primary, ts, p, o)

    def _evidence(self, p: int, o: int) -> str:
        return self._evidence_at(p, o, self.snapshot.generation if self.snapshot is not None else None,
                                 self.record)

    @staticmethod
    def _evidence_at(p: int, o: int, prev_gen: int | None, before: GroupRecord | None) -> str:
        if before is not None and prev_gen is not None:
            return (f"partition {p} offset {o}; previous GroupMetadata at partition {before[0]} offset "
                    f"{before[1]} (generation {prev_gen})")
        return f"partition {p} offset {o}"

    def _violation_rows(self, found: list[Violation], gen: int, p: int, o: int, ts: int) -> list[AuditRow]:
        if not found:
            return []
        evidence = self._evidence(p, o)
        return [ViolationRow(self.group_id or "", gen, v.kind, v.topic, v.partition, v.member_ids, v.detail,
                             evidence, ts, p, o) for v in found]


def _generation_row(g: dict[str, Any], ended_at: int | None, lifetime_ms: int | None,
                    ended_by_offset: int | None) -> GenerationRow:
    """The GenerationRow of the open generation `g` (see `GenerationObserver._new_generation`)."""
    return make_generation_row(
        g["group_id"], g["generation_id"], g["protocol_type"], g["protocol_name"], g["leader_id"], g["member_count"],
        g["static_member_count"], g["state"], g["state_timestamp"], g["record_timestamp"], g["sync_latency_ms"],
        ended_at, lifetime_ms, g["source_partition"], g["source_offset"], g["missing_generations"], ended_by_offset,
        g["static_replacements"], g["rebalance_protocol"], g.get("coordinator_flavour", "unknown"),
        g.get("group_type", "classic"), g.get("assignment_epoch"), g.get("assignment_timestamp"), g.get("reached_at"),
        g.get("reconciliation_ms"))
