"""Turns what the simulator saw happen into ground truth rows (causes and violations).

The tracker is told, after every coordinator step, the group before and after the step, which
consumer caused it and why (the client's own rejoin reason), and every record written. Causes are
collected from the triggers observed since the last generation record and attached to the next
one; planted violations are confirmed against the record that carries them.

Attribution window: a step's records reach the tracker before the step itself (`on_record`, then
`on_step`). When a step writes a generation record (the LeaveGroup or session expiry that empties
the group writes its Empty record at once), the step's triggers caused that record and belong to
its window, not to the next generation's. The Java coordinator's creation record (generation 0,
written by the JoinGroup that creates the group) is a generation of its own, `group_created`, but
does not close the window: that JoinGroup's member starts generation 1.

Primary cause: the first step of the window that moved the group into PreparingRebalance (from
Empty, Stable or CompletingRebalance) names the trigger (its member joined, left, expired or
rejoined); the generation's primary cause is that trigger. An Empty generation's primary is
`group_emptied`, naming the member whose removal emptied the group. A tombstone's
`group_deleted` is not a generation's primary (it follows the generation it deletes).

Assignor bugs: when a planted assignor bug is confirmed by a record, the truth lists every
`duplicate_assignment` and `assignment_outside_subscription` of that record's assignment (the
assignment the buggy leader actually produced), not only the one the bug meant to plant: breaking
one rule can break another (a partition of an unsubscribed topic is usually someone else's too).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from coordinator_audit.core import consumer_protocol as cp
from coordinator_audit.core.client.consumer import REVOKE_REASON
from coordinator_audit.core.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
)
from coordinator_audit.core.sim.log import LogRecord
from coordinator_audit.core.sim.port import GroupSnapshot
from coordinator_audit.core.sim.truth import CauseRow, GenerationTruth, Truth, ViolationRow

_REBALANCING = ("PreparingRebalance", "CompletingRebalance")
_ASSIGNOR_BUG_KINDS = frozenset({"duplicate_assignment", "unsafe_cooperative_move", "assignment_outside_subscription",
                                 "ignore_static_order"})
"""Kinds reported by the deliberately broken leader assignors (`coordinator_audit.core.client.misbehaviour`)."""


@dataclass(slots=True)
class _Pending:
    cause: str
    member_id: str | None
    instance_id: str | None
    detail: str


@dataclass(slots=True)
class _Recorded:
    """The last generation record of the group's current life."""

    generation_id: int
    protocol_name: str | None
    members: dict[str, dict[str, Any]] = field(default_factory=dict)  # member id -> facts


def _partitions(tps: tuple[cp.TopicPartitions, ...]) -> list[tuple[str, int]]:
    return sorted((tp.topic, p) for tp in tps for p in tp.partitions)


def member_facts(m: Any) -> dict[str, Any]:
    """The consumer-protocol facts of one member of a GroupMetadata record."""
    facts: dict[str, Any] = {"group_instance_id": m.group_instance_id, "client_id": m.client_id,
                             "topics": [], "owned": [], "claim_generation": -1, "assigned": []}
    if m.subscription:
        sub = cp.decode_subscription(m.subscription)
        facts["topics"] = sorted(sub.topics)
        facts["owned"] = _partitions(sub.owned_partitions)
        facts["claim_generation"] = sub.generation_id
        if sub.generation_id < 0 and sub.user_data and len(sub.user_data) == 4:
            facts["claim_generation"] = cp.decode_cooperative_user_data(sub.user_data) or -1
    if len(m.assignment) >= 2:
        facts["assigned"] = _partitions(cp.decode_assignment(m.assignment).assigned_partitions)
    return facts


class TruthTracker:
    def __init__(self, truth: Truth) -> None:
        self.truth = truth
        self.pending: list[_Pending] = []
        self.recorded: _Recorded | None = None
        self.ever_recorded: dict[str, dict[str, Any]] = {}  # instance id -> last facts in any record
        self.last_topics: dict[str, tuple[str, ...]] = {}
        self.planted: list[dict[str, Any]] = []  # awaiting confirmation by a record
        self.replaced_instances: set[str] = set()
        self.commits: dict[tuple[str, int], tuple[int, int, str, int]] = {}  # tp -> (offset, gen, member, log off)
        self._committer: str | None = None
        self._window_closed = False  # a generation record (or tombstone) was written by the current step
        self.trigger: _Pending | None = None  # the event that started the current window's round
        self._step: list[_Pending] = []  # the triggers of the current step
        self._emptied: int | None = None  # index in truth.causes of a group_emptied row awaiting its member

    # ----------------------------------------------------------------------------------------------
    # triggers

    def on_step(self, before: GroupSnapshot | None, after: GroupSnapshot | None, *, member_id: str | None,
                reason: str | None, topics: tuple[str, ...] | None, is_join: bool, is_leave: bool) -> None:
        closed, self._window_closed = self._window_closed, False
        self._step = []
        self._triggers(before, after, member_id=member_id, reason=reason, topics=topics, is_join=is_join,
                       is_leave=is_leave)
        entered = (after is not None and after.state == "PreparingRebalance"
                   and (before is None or before.state != "PreparingRebalance"))
        if entered and self.trigger is None and self._step and not closed:
            self.trigger = self._step[0]
        if self._emptied is not None:
            left = [m for m in (before.members if before else {}) if m not in (after.members if after else {})]
            row = self.truth.causes[self._emptied]
            if left:
                inst = before.members[left[-1]] if before else None
                self.truth.causes[self._emptied] = CauseRow(row.generation_id, row.previous_generation_id,
                                                            row.cause, left[-1], inst, "the last member to leave",
                                                            row.is_primary)
            self._emptied = None
        if closed:
            # this step wrote a generation record: its triggers were that record's causes (an Empty
            # record's cause is group_emptied), the next generation starts a fresh window
            self.pending.clear()
            self.trigger = None

    def _triggers(self, before: GroupSnapshot | None, after: GroupSnapshot | None, *, member_id: str | None,
                  reason: str | None, topics: tuple[str, ...] | None, is_join: bool, is_leave: bool) -> None:
        b_members = before.members if before else {}
        a_members = after.members if after else {}
        b_instances = {inst: m for m, inst in b_members.items() if inst}
        joined = [m for m in a_members if m not in b_members]
        left = [m for m in b_members if m not in a_members]
        replaced_old = set()
        for m in joined:
            inst = a_members[m]
            if inst and inst in b_instances:
                replaced_old.add(b_instances[inst])
                in_place = (before is not None and after is not None and before.state == "Stable"
                            and after.state == "Stable" and before.generation_id == after.generation_id)
                if in_place:
                    assert after is not None
                    self.truth.causes.append(CauseRow(after.generation_id, after.generation_id,
                                                      "static_member_replaced", m, inst,
                                                      f"replaces {b_instances[inst]}"))
                    self.replaced_instances.add(inst)
                else:
                    self._add("static_member_rejoined_new_generation", m, inst, f"replaces {b_instances[inst]}")
            elif inst and inst in self.ever_recorded:
                self._add("static_member_rejoined_new_generation", m, inst, "instance returns")
            else:
                self._add("member_joined", m, inst, "")
        for m in left:
            if m in replaced_old:
                continue
            self._add("member_left_or_expired", m, b_members[m], "LeaveGroup" if is_leave else "removed")
        if is_join and member_id and member_id in b_members and member_id in a_members:
            prev_topics = self.last_topics.get(member_id)
            triggered = (before is not None and after is not None and before.state not in _REBALANCING
                         and after.state in _REBALANCING)
            if reason == REVOKE_REASON:
                self._add("cooperative_follow_up", member_id, a_members[member_id], reason)
            elif topics is not None and prev_topics is not None and tuple(topics) != prev_topics:
                self._add("subscription_changed", member_id, a_members[member_id],
                          f"{list(prev_topics)} -> {list(topics)}")
            elif triggered:
                self._add("metadata_or_leader_rejoin", member_id, a_members[member_id], reason or "")
        if is_join and member_id is not None and topics is not None:
            target = member_id if member_id in a_members else (joined[0] if len(joined) == 1 else None)
            if target:
                self.last_topics[target] = tuple(topics)
        for m in joined:
            if topics is not None and m not in self.last_topics:
                self.last_topics[m] = tuple(topics)

    def _add(self, cause: str, member_id: str | None, instance_id: str | None, detail: str) -> None:
        for p in self.pending:
            if p.cause == cause and p.member_id == member_id:
                self._step.append(p)
                return
        entry = _Pending(cause, member_id, instance_id, detail)
        self.pending.append(entry)
        self._step.append(entry)

    def plant(self, kind: str, detail: dict[str, Any], *, at_ms: int, consumer: str,
              confirm: bool = True) -> None:
        entry = {"kind": kind, "at_ms": at_ms, "consumer": consumer, **detail}
        self.truth.planted.append(entry)
        if confirm:
            self.planted.append(entry)

    # ----------------------------------------------------------------------------------------------
    # records

    def on_record(self, rec: Any, logged: LogRecord, snapshot: GroupSnapshot | None) -> None:
        if isinstance(rec.key, OffsetCommitKey):
            if rec.value is not None:
                self.truth.offset_commit_records += 1
                self._on_commit(rec.key, rec.value, logged, snapshot)
            return
        if not isinstance(rec.key, GroupMetadataKey):
            return
        if rec.value is None:
            last = self.recorded.generation_id if self.recorded else 0
            self.truth.generations.append(GenerationTruth(last, "Dead", None, None, [], logged.partition,
                                                          logged.offset, logged.timestamp_ms, "tombstone"))
            first = self.recorded is None and not self.truth.generations[:-1]
            self.truth.causes.append(CauseRow(last, last, "group_deleted", None, None, "tombstone", first))
            self.recorded = None
            self.pending.clear()
            self.trigger = None
            self.commits.clear()
            self._window_closed = True
            return
        self._on_group_value(rec.value, logged)

    def _on_group_value(self, v: GroupMetadataValue, logged: LogRecord) -> None:
        members = {m.member_id: member_facts(m) for m in v.members}
        gen = v.generation
        prev = self.recorded
        if gen == 0 and not members and (prev is None or prev.generation_id != 0):
            # the Java coordinator's creation record: a generation of its own, written by the JoinGroup
            # that created the group, whose member goes on to start generation 1 (the window stays open)
            self.truth.generations.append(GenerationTruth(0, "Empty", None, None, [], logged.partition, logged.offset,
                                                          logged.timestamp_ms, "created"))
            self.truth.causes.append(CauseRow(0, None, "group_created", None, None, "creation record", True))
            self.recorded = _Recorded(0, None, {})
            return
        if prev is not None and gen == prev.generation_id:
            kind = "static_replacement"
        elif members:
            kind = "rebalance"
        else:
            kind = "empty"
        self.truth.generations.append(GenerationTruth(
            gen, "Stable" if members else "Empty", v.protocol, v.leader,
            [{"member_id": m, **f} for m, f in members.items()], logged.partition, logged.offset,
            logged.timestamp_ms, kind))
        if kind != "static_replacement":
            prev_gen = prev.generation_id if prev else None
            rows = self._causes_for(gen, prev, v, members)
            for i, (cause, member, inst, detail) in enumerate(rows):
                if cause == "group_emptied":
                    self._emptied = len(self.truth.causes)
                self.truth.causes.append(CauseRow(gen, prev_gen, cause, member, inst, detail, i == 0))
            self.pending.clear()
            self.trigger = None
            self._window_closed = True
            self._violations(gen, prev, members, logged)
            self.commits.clear()
        self.recorded = _Recorded(gen, v.protocol, members)
        for m, f in members.items():
            if f["group_instance_id"]:
                self.ever_recorded[f["group_instance_id"]] = {"member_id": m, **f}

    def _causes_for(self, gen: int, prev: _Recorded | None, v: GroupMetadataValue,
                    members: dict[str, dict[str, Any]]) -> list[tuple[str, str | None, str | None, str]]:
        """The causes of generation `gen`, the primary first."""
        rows: list[tuple[str, str | None, str | None, str]] = []
        prev_gen = prev.generation_id if prev else 0
        pending = list(self.pending)
        if self.trigger is not None and self.trigger in pending:
            pending.remove(self.trigger)
            pending.insert(0, self.trigger)
        if not members:
            rows.append(("group_emptied", None, None, ""))
        elif prev is None and not any(p.cause == "static_member_rejoined_new_generation" for p in self.pending):
            first = next((p.member_id for p in pending if p.cause == "member_joined"), v.leader)
            rows.append(("group_created", first, members.get(first or "", {}).get("group_instance_id"),
                         f"{len(members)} members"))
            rows += [(p.cause, p.member_id, p.instance_id, p.detail) for p in pending
                     if p.cause not in ("member_joined", "member_left_or_expired")]
        else:
            rows += [(p.cause, p.member_id, p.instance_id, p.detail) for p in pending]
            if (prev is not None and prev.protocol_name and v.protocol
                    and prev.protocol_name != v.protocol):
                rows.append(("assignor_changed", None, None, f"{prev.protocol_name} -> {v.protocol}"))
            if not rows:
                rows.append(("metadata_or_leader_rejoin", None, None, "no membership or subscription change"))
        if gen > prev_gen + 1:
            rows.append(("aborted_generations", None, None, f"{gen - prev_gen - 1} generation(s) without a record"))
        return rows

    def _violations(self, gen: int, prev: _Recorded | None, members: dict[str, dict[str, Any]],
                    logged: LogRecord) -> None:
        owners: dict[tuple[str, int], list[str]] = {}
        for m, f in members.items():
            for topic, partition in f["assigned"]:
                owners.setdefault((topic, partition), []).append(m)
        confirmed: list[dict[str, Any]] = []
        for planted in list(self.planted):
            kind = planted["kind"]
            tp: tuple[str, int] = (planted.get("topic", ""), planted.get("partition", -1))
            rows: list[ViolationRow] = []
            if kind == "duplicate_assignment" and len(owners.get(tp, [])) > 1:
                rows.append(ViolationRow(gen, kind, tp[0], tp[1], tuple(sorted(owners[tp])),
                                         "leader assigned the partition twice", (logged.offset,)))
            elif kind == "assignment_outside_subscription":
                for m in owners.get(tp, []):
                    if tp[0] not in members[m]["topics"]:
                        rows.append(ViolationRow(gen, kind, tp[0], tp[1], (m,),
                                                 "assigned a topic the member does not subscribe to",
                                                 (logged.offset,)))
            elif kind == "unsafe_cooperative_move":
                src, dst = planted["from"], planted["to"]
                if (src in members and dst in members and tp in members[src]["owned"]
                        and tp in members[dst]["assigned"]):
                    rows.append(ViolationRow(gen, kind, tp[0], tp[1], (src, dst),
                                             f"moved from {src} to {dst} while {src} still owned it",
                                             (logged.offset,)))
            elif kind == "stale_ownership_claim":
                stale = planted.get("member_id")
                rows += self._stale_rows(gen, members, logged)
                if stale and stale not in members:
                    continue
            elif kind == "ignore_static_order":
                rows += self._static_change_rows(gen, prev, members, logged)
            else:
                continue
            if rows:
                self.truth.violations.extend(rows)
                confirmed.append(planted)
        for planted in confirmed:
            self.planted.remove(planted)
        if any(p["kind"] in _ASSIGNOR_BUG_KINDS for p in confirmed):
            self._assignment_truth(gen, members, owners, logged)

    def _assignment_truth(self, gen: int, members: dict[str, dict[str, Any]],
                          owners: dict[tuple[str, int], list[str]], logged: LogRecord) -> None:
        """Every duplicate and out-of-subscription assignment of generation `gen`'s record, beyond
        the rows already in the truth for it."""
        have = {(v.generation_id, v.kind, v.topic, v.partition) for v in self.truth.violations}
        for tp, holders in sorted(owners.items()):
            if len(holders) > 1 and (gen, "duplicate_assignment", tp[0], tp[1]) not in have:
                self.truth.violations.append(ViolationRow(
                    gen, "duplicate_assignment", tp[0], tp[1], tuple(sorted(holders)),
                    "the buggy leader's assignment gives the partition to several members", (logged.offset,)))
        for m, f in members.items():
            for tp in dict.fromkeys(tuple(tp) for tp in f["assigned"]):
                if tp[0] not in f["topics"] and (gen, "assignment_outside_subscription", tp[0], tp[1]) not in have:
                    self.truth.violations.append(ViolationRow(
                        gen, "assignment_outside_subscription", tp[0], tp[1], (m,),
                        "the buggy leader's assignment gives a topic the member does not subscribe to",
                        (logged.offset,)))

    def _stale_rows(self, gen: int, members: dict[str, dict[str, Any]], logged: LogRecord) -> list[ViolationRow]:
        rows = []
        claims: dict[tuple[str, int], list[tuple[int, str]]] = {}
        for m, f in members.items():
            for tp in f["owned"]:
                claims.setdefault(tuple(tp), []).append((f["claim_generation"], m))
        for tp, who in sorted(claims.items()):
            if len(who) < 2:
                continue
            top = max(g for g, _ in who)
            stale = sorted(m for g, m in who if g < top)
            if stale:
                rows.append(ViolationRow(gen, "stale_ownership_claim", tp[0], tp[1], tuple(sorted(m for _, m in who)),
                                         f"stale claimant(s) {stale} (generation < {top})", (logged.offset,)))
        return rows

    def _static_change_rows(self, gen: int, prev: _Recorded | None, members: dict[str, dict[str, Any]],
                            logged: LogRecord) -> list[ViolationRow]:
        if prev is None:
            return []
        by_inst_prev = {f["group_instance_id"]: (m, f) for m, f in prev.members.items() if f["group_instance_id"]}
        by_inst_now = {f["group_instance_id"]: (m, f) for m, f in members.items() if f["group_instance_id"]}
        same_shape = (set(by_inst_prev) == set(by_inst_now) and len(prev.members) == len(members)
                      and all(by_inst_prev[i][1]["topics"] == by_inst_now[i][1]["topics"] for i in by_inst_now))
        if not same_shape:
            return []
        rows = []
        for inst, (m, f) in sorted(by_inst_now.items()):
            _old_m, old_f = by_inst_prev[inst]
            if inst in self.replaced_instances and old_f["assigned"] != f["assigned"]:
                rows.append(ViolationRow(gen, "static_replacement_changed_assignment", None, None, (m,),
                                         f"instance {inst}: {old_f['assigned']} -> {f['assigned']}",
                                         (logged.offset,)))
        return rows

    def _on_commit(self, key: OffsetCommitKey, value: OffsetCommitValue, logged: LogRecord,
                   snapshot: GroupSnapshot | None) -> None:
        if snapshot is None or snapshot.state != "Stable":
            self.commits.pop((key.topic, key.partition), None)
            return
        tp = (key.topic, key.partition)
        prev = self.commits.get(tp)
        committer = self._committer or ""
        if prev is not None and prev[1] == snapshot.generation_id and value.offset < prev[0]:
            self.truth.violations.append(ViolationRow(
                snapshot.generation_id, "offset_regression", key.topic, key.partition,
                tuple(sorted({prev[2], committer})), f"{prev[0]} -> {value.offset}", (prev[3], logged.offset)))
        self.commits[tp] = (value.offset, snapshot.generation_id, committer, logged.offset)

    def set_committer(self, member_id: str | None) -> None:
        """Called by the runner before the records of every coordinator step (with the member that sent
        the step's request, if any): also the start of the step for the attribution window."""
        self._committer = member_id
        self._window_closed = False
