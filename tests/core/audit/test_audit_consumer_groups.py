"""KIP-848 consumer groups in the audit: the real Kafka 4.4.0 log against its clients' own callbacks,
mutated logs that break the protocol's guarantees, saved state between runs, and a group converted
from the classic protocol and back as one history."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from coordinator_audit.core.audit import (
    CAUSES,
    CONSUMER_CAUSES,
    CONSUMER_VIOLATION_KINDS,
    GroupAuditor,
    audit_group,
)
from coordinator_audit.core.audit.consumer import topic_id_text
from coordinator_audit.core.records import (
    CoordinatorRecord,
    OffsetCommitKey,
    OffsetCommitValue,
    decode,
    encode,
)
from coordinator_audit.core.records_kip848 import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    CurrentTopicPartitions,
    TopicIdPartitions,
)

from .audit_builders import LogBuilder, member, rows_by_table, tps

ROOT = Path(__file__).resolve().parents[3]
LOG = ROOT / "tests" / "core" / "codec" / "data" / "real_broker_4_4_0_kip848.parquet"
TRUTH = json.loads((ROOT / "tests" / "core" / "codec" / "data" / "real_broker_4_4_0_kip848.truth.json").read_text())
UNIFORM, REGEX = "k848-uniform-scale", "k848-regex"

Raw = tuple[int, int, int, bytes, bytes | None]


def _group_of(key: bytes) -> str:
    k = decode(key, None).key
    return str(getattr(k, "group_id", None) or k.group)  # type: ignore[union-attr]


def _records() -> dict[str, list[Raw]]:
    table = pq.read_table(LOG).to_pylist()
    table.sort(key=lambda r: (r["partition"], r["offset"]))
    out: dict[str, list[Raw]] = defaultdict(list)
    for r in table:
        ts = int(r["timestamp"].timestamp() * 1000)
        out[_group_of(r["key"])].append((r["partition"], r["offset"], ts, r["key"], r["value"]))
    return out


RECORDS = _records()


def _truth(group: str) -> dict[str, Any]:
    return next(g for g in TRUTH["groups"] if g["group"] == group)


def _audit(records: list[Raw]) -> dict[str, list[Any]]:
    t = rows_by_table(audit_group(records))
    consumer_gens = {g.generation_id for g in t["generations"] if g.group_type == "consumer"}
    for c in t["rebalance_causes"]:
        assert c.cause in CONSUMER_CAUSES or (c.cause in CAUSES and c.generation_id not in consumer_gens), c
    assert all(v.kind in CONSUMER_VIOLATION_KINDS for v in t["violations"])
    return t


@pytest.fixture(scope="module")
def tables() -> dict[str, dict[str, list[Any]]]:
    return {g: _audit(RECORDS[g]) for g in (UNIFORM, REGEX)}


@pytest.mark.parametrize("group", [UNIFORM, REGEX])
def test_every_member_epoch_the_clients_saw_has_its_partitions_in_the_tables(tables, group) -> None:
    """Per member and member epoch of a rebalance-listener callback: the epoch is a generation of
    the group, and the partitions the member held at that epoch (every callback's assignment, the
    revoked ones included: a revocation runs before the epoch advances) are its `assignments` rows
    of that epoch, no more, no fewer."""
    t = tables[group]
    epochs = {g.generation_id for g in t["generations"]}
    assert {g.group_type for g in t["generations"]} == {"consumer"}
    rows: dict[tuple[str, int], set[str]] = defaultdict(set)
    for a in t["assignments"]:
        assert a.group_type == "consumer" and a.topic != a.topic_id  # every topic id is named by the log
        rows[(a.member_id, a.generation_id)].add(f"{a.topic}-{a.partition}")
    checked = 0
    for m in _truth(group)["members_seen"]:
        held: dict[int, set[str]] = defaultdict(set)
        for cb in m["callbacks"]:
            held[cb["member_epoch"]] |= set(cb["assignment"]) | set(cb["partitions"])
        for epoch, partitions in held.items():
            assert epoch in epochs, (m["consumer"], epoch)
            assert rows.get((m["member_id"], epoch), set()) == partitions, (m["consumer"], epoch)
            checked += 1
    assert checked >= 5


@pytest.mark.parametrize("group", [UNIFORM, REGEX])
def test_causes_agree_with_what_the_driver_did(tables, group) -> None:
    """Each start after the first is a `member_joined` of that consumer, each kill (SIGKILL: the
    broker fences it when its session expires) and close a `member_left_or_expired` whose detail
    says the log cannot tell a fence from a leave; a topic created for the regex is picked up by a
    `regex_resolved` epoch; the first epoch is the group's creation."""
    t = tables[group]
    truth = _truth(group)
    who = {m["member_id"]: m["consumer"] for m in truth["members_seen"]}
    primary = sorted((c for c in t["rebalance_causes"] if c.is_primary), key=lambda c: c.generation_id)
    assert [c.generation_id for c in primary] == sorted(g.generation_id for g in t["generations"])
    assert primary[0].cause == "group_created"
    starts = [a for a in truth["actions"] if a["action"] == "start"]
    expected = Counter([("member_joined", a["consumer"]) for a in starts[1:]]
                       + [("member_left_or_expired", a["consumer"]) for a in truth["actions"]
                          if a["action"] in ("kill", "close")])
    seen = [(c.cause, who.get(c.member_id or "")) for c in primary[1:] if c.cause != "regex_resolved"]
    assert Counter(seen) == expected
    if group == UNIFORM:  # one driver action at a time: the same order
        order = [("member_joined" if a["action"] == "start" else "member_left_or_expired", a["consumer"])
                 for a in truth["actions"] if a["action"] in ("start", "kill", "close")][1:]
        assert seen == order
    for c in primary:
        if c.cause == "member_left_or_expired":
            assert "cannot tell" in c.detail
    if group == REGEX:
        created = next(a["ts"] for a in truth["actions"] if a["action"] == "create_topic")
        late = [c for c in primary if c.cause == "regex_resolved" and "k848-rx-late" in c.detail]
        assert len(late) == 1 and late[0].record_timestamp > created


@pytest.mark.parametrize("group", [UNIFORM, REGEX])
def test_clean_groups_have_no_violation_and_reach_their_epochs(tables, group) -> None:
    t = tables[group]
    assert t["violations"] == [] and t["quarantine"] == []
    gens = sorted(t["generations"], key=lambda g: g.generation_id)
    assert [g.missing_generations for g in gens] == [0] * len(gens)
    for g in gens:
        assert g.protocol_type == "consumer" and g.coordinator_flavour == "java"
        if g.state == "Stable":
            assert g.assignment_epoch == g.generation_id and g.reconciliation_ms is not None
            assert g.reached_at == g.record_timestamp + g.reconciliation_ms
    # every epoch with members and a target assignment reached it, but the last of a departing group
    stable = [g.generation_id for g in gens if g.state == "Stable"]
    assert stable == ([2, 3, 4, 5, 6] if group == UNIFORM else [2, 3, 4])
    assert gens[-1].state == "Empty" and gens[-1].member_count == 0 and gens[-1].ended_at is None


def test_the_killed_member_owns_its_partitions_until_the_broker_fences_it(tables) -> None:
    t = tables[UNIFORM]
    u2 = next(m["member_id"] for m in _truth(UNIFORM)["members_seen"] if m["consumer"] == "u2")
    fenced = max(a.valid_to for a in t["assignments"] if a.member_id == u2)
    killed = next(a["ts"] for a in _truth(UNIFORM)["actions"] if a["action"] == "kill")
    assert 9_000 <= fenced - killed <= 11_000  # group.consumer.session.timeout.ms=10000
    # a revocation: the partition stays owned, pending, until the member releases it
    pending = [a for a in t["assignments"] if a.pending_revocation_at is not None]
    assert pending and all(a.valid_from <= a.pending_revocation_at <= a.valid_to for a in pending)


# ---------------------------------------------------------------------------------------------
# mutated logs


def _mutate(records: list[Raw], offset: int, change: Any) -> list[Raw]:
    """`records` with the value at `offset` replaced by `change(decoded value)` (None: dropped)."""
    out: list[Raw] = []
    for p, o, ts, key, value in records:
        if o == offset:
            new = change(decode(key, value).value)
            if new is None:
                continue
            _, value = encode(CoordinatorRecord.of(decode(key, None).key, new))
        out.append((p, o, ts, key, value))
    return out


def _add_partition(topic_id: uuid.UUID, partition: int) -> Any:
    def change(v: ConsumerGroupCurrentMemberAssignmentValue) -> ConsumerGroupCurrentMemberAssignmentValue:
        extra = CurrentTopicPartitions(topic_id, (partition,), (v.member_epoch,))
        return dataclasses.replace(v, assigned_partitions=(*v.assigned_partitions, extra))
    return change


def _orders_id() -> uuid.UUID:
    for _, o, _, key, value in RECORDS[UNIFORM]:
        if o == 172:
            v = decode(key, value).value
            assert isinstance(v, ConsumerGroupCurrentMemberAssignmentValue)
            return v.assigned_partitions[0].topic_id  # k848-u-orders
    raise AssertionError("offset 172 is u3's current assignment at epoch 4")


def test_a_partition_in_two_members_current_assignments_is_a_violation() -> None:
    # offset 172: u3 reaches epoch 4 with orders-3 and refunds-2; u1 owns orders-0 meanwhile
    records = _mutate(RECORDS[UNIFORM], 172, _add_partition(_orders_id(), 0))
    found = [v for v in _audit(records)["violations"]]
    assert [(v.kind, v.topic, v.partition, v.source_offset) for v in found] == [
        ("duplicate_assignment", "k848-u-orders", 0, 172)]
    assert set(found[0].member_ids) == {"Scqw9VKXRlSXw43tfcLIKA", "EYHDbsT3RuO2heCK91rrkg"}


def test_a_partition_assigned_before_its_owner_released_it_is_a_violation() -> None:
    # offset 110: u1 releases orders-4 and refunds 0-2 (pending since offset 93); u2 gets them at 119
    records = _mutate(RECORDS[UNIFORM], 110, lambda v: None)
    found = _audit(records)["violations"]
    assert {(v.kind, v.topic, v.partition, v.source_offset) for v in found} == {
        ("assigned_before_released", "k848-u-orders", 4, 119),
        *{("assigned_before_released", "k848-u-refunds", p, 119) for p in (0, 1, 2)}}


def test_a_member_epoch_ahead_of_the_group_epoch_is_a_violation() -> None:
    records = _mutate(RECORDS[UNIFORM], 172, lambda v: dataclasses.replace(v, member_epoch=9))
    found = _audit(records)["violations"]
    assert [(v.kind, v.generation_id, v.member_ids, v.source_offset) for v in found] == [
        ("member_epoch_ahead", 4, ("Scqw9VKXRlSXw43tfcLIKA",), 172)]


def test_a_member_tombstone_before_its_assignment_tombstone_is_refused_as_the_broker_does() -> None:
    # offsets 400-402: u2's current assignment, target assignment and member tombstones
    records = _mutate(RECORDS[UNIFORM], 400, lambda v: None)
    found = _audit(records)["violations"]
    assert [(v.kind, v.source_offset) for v in found] == [("load_refused", 402)]
    assert "current assignment (type 8) was not deleted first" in found[0].detail


# ---------------------------------------------------------------------------------------------
# state between runs


@pytest.mark.parametrize("group", [UNIFORM, REGEX])
def test_two_runs_with_saved_state_equal_one_pass(group) -> None:
    records = RECORDS[group]
    one_pass = list(audit_group(records))
    for k in range(0, len(records) + 1, 7):
        first = GroupAuditor()
        rows = list(first.feed(records[:k]))
        second = GroupAuditor.from_dict(json.loads(json.dumps(first.to_dict())))
        assert rows + list(second.feed(records[k:])) + second.finish() == one_pass, f"split at {k}"


# ---------------------------------------------------------------------------------------------
# migration: classic -> consumer -> classic, one history

T1 = uuid.UUID("a8009057-a49d-43f6-9817-180eb477c33e")


def _consumer(log: LogBuilder, key: Any, value: Any, at: int) -> None:
    log.record(CoordinatorRecord.of(key, value), at=at)


def _member_value(client: str) -> ConsumerGroupMemberMetadataValue:
    return ConsumerGroupMemberMetadataValue(None, None, client, "/10.0.0.1", ("t",), None, 300_000, None)


def _current(epoch: int, partitions: tuple[int, ...]) -> ConsumerGroupCurrentMemberAssignmentValue:
    return ConsumerGroupCurrentMemberAssignmentValue(
        epoch, epoch, 0, (CurrentTopicPartitions(T1, partitions, ()),) if partitions else (), ())


def _migration_log() -> LogBuilder:
    g = "mig"
    log = LogBuilder(g, partition=2, offset=100)
    log.group(3, [member("a-1", tps("t", 0, 1)), member("b-1", tps("t", 2, 3))], protocol="range")
    log.record(CoordinatorRecord.of(OffsetCommitKey(g, "t", 0), OffsetCommitValue(
        5, 0, "", log.ts, unknown_tagged_fields=((0, T1.bytes),)), value_version=4))
    # a consumer-protocol member joins: GroupMetadataManager#convertToConsumerGroup, one batch
    at = log.ts + 1000
    log.tombstone(at=at)
    for m in ("a-1", "b-1"):
        _consumer(log, ConsumerGroupMemberMetadataKey(g, m), _member_value(m.split("-")[0]), at)
    _consumer(log, ConsumerGroupMetadataKey(g), ConsumerGroupMetadataValue(3, 77), at)
    for m, ps in (("a-1", (0, 1)), ("b-1", (2, 3))):
        _consumer(log, ConsumerGroupTargetAssignmentMemberKey(g, m),
                  ConsumerGroupTargetAssignmentMemberValue((TopicIdPartitions(T1, ps),)), at)
    _consumer(log, ConsumerGroupTargetAssignmentMetadataKey(g), ConsumerGroupTargetAssignmentMetadataValue(3), at)
    for m, ps in (("a-1", (0, 1)), ("b-1", (2, 3))):
        _consumer(log, ConsumerGroupCurrentMemberAssignmentKey(g, m), _current(3, ps), at)
    # the consumer member c-1 joins: epoch 4
    at += 5000
    _consumer(log, ConsumerGroupMemberMetadataKey(g, "c-1"), _member_value("c"), at)
    _consumer(log, ConsumerGroupMetadataKey(g), ConsumerGroupMetadataValue(4, 77), at)
    _consumer(log, ConsumerGroupTargetAssignmentMemberKey(g, "b-1"),
              ConsumerGroupTargetAssignmentMemberValue((TopicIdPartitions(T1, (2,)),)), at)
    _consumer(log, ConsumerGroupTargetAssignmentMemberKey(g, "c-1"),
              ConsumerGroupTargetAssignmentMemberValue((TopicIdPartitions(T1, (3,)),)), at)
    _consumer(log, ConsumerGroupTargetAssignmentMetadataKey(g), ConsumerGroupTargetAssignmentMetadataValue(4), at)
    _consumer(log, ConsumerGroupCurrentMemberAssignmentKey(g, "a-1"), _current(4, (0, 1)), at + 100)
    _consumer(log, ConsumerGroupCurrentMemberAssignmentKey(g, "b-1"), _current(4, (2,)), at + 200)
    _consumer(log, ConsumerGroupCurrentMemberAssignmentKey(g, "c-1"), _current(4, (3,)), at + 300)
    # c-1, the last consumer-protocol member, leaves: GroupMetadataManager#convertToClassicGroup
    at += 5000
    for m in ("a-1", "b-1", "c-1"):
        _consumer(log, ConsumerGroupCurrentMemberAssignmentKey(g, m), None, at)
    for m in ("a-1", "b-1", "c-1"):
        _consumer(log, ConsumerGroupTargetAssignmentMemberKey(g, m), None, at)
    _consumer(log, ConsumerGroupTargetAssignmentMetadataKey(g), None, at)
    for m in ("a-1", "b-1", "c-1"):
        _consumer(log, ConsumerGroupMemberMetadataKey(g, m), None, at)
    _consumer(log, ConsumerGroupMetadataKey(g), None, at)
    log.group(4, [member("a-1", tps("t", 0, 1)), member("b-1", tps("t", 2))], protocol="range", at=at)
    return log


def test_a_group_converted_to_consumer_and_back_is_one_history() -> None:
    records = _migration_log().records
    t = _audit(records)
    assert t["quarantine"] == [] and t["violations"] == []
    assert [(g.group_type, g.generation_id, g.missing_generations) for g in t["generations"]] == [
        ("classic", 3, None), ("consumer", 3, 0), ("consumer", 4, 0), ("classic", 4, 0)]
    causes = [(c.cause, c.generation_id, c.previous_generation_id) for c in t["rebalance_causes"] if c.is_primary]
    assert causes == [("history_start", 3, None), ("converted_to_consumer", 3, 3), ("member_joined", 4, 3),
                      ("converted_to_classic", 4, 4)]
    assert "group_deleted" not in {c.cause for c in t["rebalance_causes"]}
    consumer = [a for a in t["assignments"] if a.group_type == "consumer"]
    assert {a.topic for a in consumer} == {"t"} and {a.topic_id for a in consumer} == {topic_id_text(T1)}
    # the saved state carries the conversion across a run boundary, wherever the runs split
    one_pass = list(audit_group(records))
    for k in range(len(records) + 1):
        first = GroupAuditor()
        rows = list(first.feed(records[:k]))
        second = GroupAuditor.from_dict(json.loads(json.dumps(first.to_dict())))
        assert rows + list(second.feed(records[k:])) + second.finish() == one_pass, f"split at {k}"


def test_a_deleted_classic_group_still_reports_its_deletion() -> None:
    log = LogBuilder("g", partition=1, offset=10)
    log.group(1, [member("a-1", tps("t", 0))])
    log.tombstone()
    auditor = GroupAuditor()
    rows = list(auditor.feed(log.records))
    assert "group_deleted" not in {getattr(r, "cause", None) for r in rows}  # held for the group's next record
    saved = json.loads(json.dumps(auditor.to_dict()))
    assert saved["held_cause"]["row"]["cause"] == "group_deleted"  # a run that goes on holds it
    log.group(1, [member("b-1", tps("t", 0))])
    resumed = GroupAuditor.from_dict(saved)
    assert [getattr(r, "cause", None) for r in resumed.feed(log.records[2:])][:1] == ["group_deleted"]
    # a run that ends reports it once, and the state it saves then does not hold it again
    assert [r.cause for r in auditor.finish() if hasattr(r, "cause")] == ["group_deleted"]
    assert "held_cause" not in auditor.to_dict()
    assert "group_deleted" not in {getattr(r, "cause", None) for r in auditor.feed(log.records[2:])}


def test_a_static_member_leaving_for_a_while_and_coming_back_makes_no_new_epoch() -> None:
    """A static member's leave writes member epoch -2 and no bump; its return under a new member id
    replaces it (`GroupMetadataManager#replaceMember`: the old member's tombstones, then the new
    member with the old one's assignment) without a new epoch."""
    g = "static"
    log = LogBuilder(g, partition=0, offset=0)
    value = dataclasses.replace(_member_value("s"), instance_id="i1")
    at = log.ts
    _consumer(log, ConsumerGroupMemberMetadataKey(g, "s-1"), value, at)
    _consumer(log, ConsumerGroupMetadataKey(g), ConsumerGroupMetadataValue(2, 9), at)
    _consumer(log, ConsumerGroupTargetAssignmentMemberKey(g, "s-1"),
              ConsumerGroupTargetAssignmentMemberValue((TopicIdPartitions(T1, (0, 1)),)), at)
    _consumer(log, ConsumerGroupTargetAssignmentMetadataKey(g), ConsumerGroupTargetAssignmentMetadataValue(2), at)
    _consumer(log, ConsumerGroupCurrentMemberAssignmentKey(g, "s-1"), _current(2, (0, 1)), at)
    left = at + 4000
    _consumer(log, ConsumerGroupCurrentMemberAssignmentKey(g, "s-1"),
              dataclasses.replace(_current(2, (0, 1)), member_epoch=-2), left)
    back = left + 3000
    _consumer(log, ConsumerGroupCurrentMemberAssignmentKey(g, "s-1"), None, back)
    _consumer(log, ConsumerGroupTargetAssignmentMemberKey(g, "s-1"), None, back)
    _consumer(log, ConsumerGroupMemberMetadataKey(g, "s-1"), None, back)
    _consumer(log, ConsumerGroupMemberMetadataKey(g, "s-2"), value, back)
    _consumer(log, ConsumerGroupTargetAssignmentMemberKey(g, "s-2"),
              ConsumerGroupTargetAssignmentMemberValue((TopicIdPartitions(T1, (0, 1)),)), back)
    _consumer(log, ConsumerGroupCurrentMemberAssignmentKey(g, "s-2"),
              dataclasses.replace(_current(0, (0, 1)), previous_member_epoch=0), back)
    _consumer(log, ConsumerGroupCurrentMemberAssignmentKey(g, "s-2"), _current(2, (0, 1)), back + 500)
    t = _audit(log.records)
    assert t["violations"] == [] and t["quarantine"] == []
    assert [(g.generation_id, g.static_member_count, g.static_replacements) for g in t["generations"]] == [(2, 1, 1)]
    assert [(c.cause, c.generation_id, c.member_id, c.is_primary) for c in t["rebalance_causes"]] == [
        ("group_created", 2, None, True), ("member_joined", 2, "s-1", False),
        ("static_member_left_temporarily", 2, "s-1", False), ("static_member_rejoined", 2, "s-2", False)]
    # the replacement holds the old member's partitions from its epoch-0 record on, in the group's
    # epoch 2 (member epoch 0 is no generation of the group)
    intervals = sorted({(a.member_id, a.generation_id, a.valid_from, a.valid_to) for a in t["assignments"]})
    assert intervals == [("s-1", 2, at, back), ("s-2", 2, back, None)]
    assert {a.generation_id for a in t["assignments"]} <= {g.generation_id for g in t["generations"]}


# ---------------------------------------------------------------------------------------------
# topic names: learnt from the group's OffsetCommit values v4+, in log order


def test_a_topic_id_is_named_from_the_first_commit_that_carries_it_not_the_first_commit_of_its_key() -> None:
    """A commit of the topic-partition before the upgrade (v3, no id) does not hide the id a later
    v4 commit of the same partition carries: rows written before it keep the id as their topic,
    rows written after it name the topic; `topic_id` is always set, and the state carries the name."""
    g = "names"
    log = LogBuilder(g, partition=0, offset=0)
    at = log.ts
    _consumer(log, ConsumerGroupMemberMetadataKey(g, "m-1"), _member_value("m"), at)
    _consumer(log, ConsumerGroupMetadataKey(g), ConsumerGroupMetadataValue(2, 9), at)
    _consumer(log, ConsumerGroupTargetAssignmentMetadataKey(g), ConsumerGroupTargetAssignmentMetadataValue(2), at)
    _consumer(log, ConsumerGroupCurrentMemberAssignmentKey(g, "m-1"), _current(2, (0, 1)), at)
    log.record(CoordinatorRecord.of(OffsetCommitKey(g, "t", 0), OffsetCommitValue(5, 0, "", at + 10),
                                    value_version=3), at=at + 10)
    _consumer(log, ConsumerGroupMetadataKey(g), ConsumerGroupMetadataValue(3, 9), at + 20)
    _consumer(log, ConsumerGroupTargetAssignmentMetadataKey(g), ConsumerGroupTargetAssignmentMetadataValue(3),
              at + 20)
    _consumer(log, ConsumerGroupCurrentMemberAssignmentKey(g, "m-1"), _current(3, (0,)), at + 30)
    log.record(CoordinatorRecord.of(OffsetCommitKey(g, "t", 0), OffsetCommitValue(
        6, 0, "", at + 40, unknown_tagged_fields=((0, T1.bytes),)), value_version=4), at=at + 40)
    _consumer(log, ConsumerGroupMetadataKey(g), ConsumerGroupMetadataValue(4, 9), at + 50)
    _consumer(log, ConsumerGroupCurrentMemberAssignmentKey(g, "m-1"), _current(4, ()), at + 60)
    t = _audit(log.records)
    ident = topic_id_text(T1)
    rows = sorted((a.generation_id, a.partition, a.valid_to, a.topic, a.topic_id) for a in t["assignments"])
    assert rows == [(2, 0, at + 30, ident, ident), (2, 1, at + 30, ident, ident), (3, 0, at + 60, "t", ident)]
    auditor = GroupAuditor()
    list(auditor.feed(log.records[:9]))
    assert auditor.to_dict()["topic_names"] == {ident: "t"}


def _without(records: list[Raw], rtype: int) -> list[Raw]:
    """`records` without the tombstones of key type `rtype`."""
    return [r for r in records if not (r[4] is None and int.from_bytes(r[3][:2], "big") == rtype)]


def test_a_group_tombstone_while_members_remain_is_refused_as_the_broker_does() -> None:
    """`GroupMetadataManager#replay(ConsumerGroupMetadataKey, null)` refuses to delete a group that
    still has members; `#replay(ConsumerGroupTargetAssignmentMetadataKey, null)` one whose members
    still have a target assignment: the conversion back to classic without those tombstones."""
    records = _migration_log().records
    assert _audit(records)["violations"] == []
    found = _audit(_without(records, 5))["violations"]
    assert [(v.kind, v.generation_id) for v in found] == [("load_refused", 4)]
    assert "a group tombstone (type 3) while 3 member(s) remain" in found[0].detail
    found = _audit(_without(records, 7))["violations"]
    assert [v.kind for v in found] == ["load_refused"] * 5  # the epoch's, each member's, the group's tombstone
    assert "target-assignment epoch tombstone while 3 member(s)" in found[0].detail
    assert "target assignment (type 7) was not deleted first" in found[1].detail
    assert "while 3 target assignment(s) remain" in found[-1].detail
