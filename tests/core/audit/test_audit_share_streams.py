"""Share groups (KIP-932) and streams groups (KIP-1071) in the audit: logs written with the codec the
way the broker writes a group's records (`GroupMetadataManager`: a member's record, the epoch bump,
the target assignment, the members' current assignments; tombstones in the order the load path
accepts), replayed into generations, assignments, causes and violations."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from coordinator_audit.core.audit import (
    SHARE_STREAMS_CAUSES,
    SHARE_STREAMS_VIOLATION_KINDS,
    GroupAuditor,
    audit_group,
)
from coordinator_audit.core.records import CoordinatorRecord, decode, encode
from coordinator_audit.core.records_kip848 import TopicIdPartitions
from coordinator_audit.core.records_share import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
    TopicPartitionsInfo,
)
from coordinator_audit.core.records_streams import (
    CurrentTaskIds,
    StreamsGroupCurrentMemberAssignmentKey,
    StreamsGroupCurrentMemberAssignmentValue,
    StreamsGroupMemberMetadataKey,
    StreamsGroupMemberMetadataValue,
    StreamsGroupMetadataKey,
    StreamsGroupMetadataValue,
    StreamsGroupTargetAssignmentMemberKey,
    StreamsGroupTargetAssignmentMemberValue,
    StreamsGroupTargetAssignmentMetadataKey,
    StreamsGroupTargetAssignmentMetadataValue,
    StreamsGroupTopologyKey,
    StreamsGroupTopologyValue,
    Subtopology,
    TaskIds,
)

from .audit_builders import LogBuilder, rows_by_table

ORDERS = uuid.UUID("a8009057-a49d-43f6-9817-180eb477c33e")
ORDERS_ID = "qACQV6SdQ_aYFxgOtHfDPg"


def _rec(log: LogBuilder, key: Any, value: Any, at: int) -> None:
    log.record(CoordinatorRecord.of(key, value), at=at)


def _share_current(epoch: int, parts: tuple[int, ...]) -> ShareGroupCurrentMemberAssignmentValue:
    return ShareGroupCurrentMemberAssignmentValue(epoch, epoch - 1 if epoch > 0 else 0, 0,
                                                  (TopicIdPartitions(ORDERS, parts),) if parts else ())


def share_log() -> LogBuilder:
    """s-1 joins (epoch 2: all three partitions), s-2 joins (epoch 3: both get all three, as the
    simple assignor shares partitions), s-1 leaves (epoch 4), s-2 leaves and the group is deleted."""
    g = "share-g"
    log = LogBuilder(g, partition=3, offset=10)
    at = log.ts
    _rec(log, ShareGroupMemberMetadataKey(g, "s-1"),
         ShareGroupMemberMetadataValue(None, "c1", "/10.0.0.1", ("orders",)), at)
    _rec(log, ShareGroupMetadataKey(g), ShareGroupMetadataValue(2, 11), at)
    _rec(log, ShareGroupTargetAssignmentMemberKey(g, "s-1"),
         ShareGroupTargetAssignmentMemberValue((TopicIdPartitions(ORDERS, (0, 1, 2)),)), at)
    _rec(log, ShareGroupTargetAssignmentMetadataKey(g), ShareGroupTargetAssignmentMetadataValue(2, at), at)
    _rec(log, ShareGroupCurrentMemberAssignmentKey(g, "s-1"), _share_current(2, (0, 1, 2)), at)
    _rec(log, ShareGroupStatePartitionMetadataKey(g), ShareGroupStatePartitionMetadataValue(
        (), (TopicPartitionsInfo(ORDERS, "orders", (0, 1, 2)),), ()), at + 50)
    at += 5000
    _rec(log, ShareGroupMemberMetadataKey(g, "s-2"),
         ShareGroupMemberMetadataValue(None, "c2", "/10.0.0.2", ("orders",)), at)
    _rec(log, ShareGroupMetadataKey(g), ShareGroupMetadataValue(3, 11), at)
    for m in ("s-1", "s-2"):
        _rec(log, ShareGroupTargetAssignmentMemberKey(g, m),
             ShareGroupTargetAssignmentMemberValue((TopicIdPartitions(ORDERS, (0, 1, 2)),)), at)
    _rec(log, ShareGroupTargetAssignmentMetadataKey(g), ShareGroupTargetAssignmentMetadataValue(3, at), at)
    _rec(log, ShareGroupCurrentMemberAssignmentKey(g, "s-2"), _share_current(3, (0, 1, 2)), at)
    _rec(log, ShareGroupCurrentMemberAssignmentKey(g, "s-1"), _share_current(3, (0, 1, 2)), at + 300)
    at += 5000
    _rec(log, ShareGroupCurrentMemberAssignmentKey(g, "s-1"), None, at)
    _rec(log, ShareGroupTargetAssignmentMemberKey(g, "s-1"), None, at)
    _rec(log, ShareGroupMemberMetadataKey(g, "s-1"), None, at)
    _rec(log, ShareGroupMetadataKey(g), ShareGroupMetadataValue(4, 11), at)
    _rec(log, ShareGroupTargetAssignmentMetadataKey(g), ShareGroupTargetAssignmentMetadataValue(4, at), at)
    _rec(log, ShareGroupCurrentMemberAssignmentKey(g, "s-2"), _share_current(4, (0, 1, 2)), at + 200)
    at += 5000
    _rec(log, ShareGroupCurrentMemberAssignmentKey(g, "s-2"), None, at)
    _rec(log, ShareGroupTargetAssignmentMemberKey(g, "s-2"), None, at)
    _rec(log, ShareGroupMemberMetadataKey(g, "s-2"), None, at)
    _rec(log, ShareGroupMetadataKey(g), ShareGroupMetadataValue(5, 0), at)
    _rec(log, ShareGroupTargetAssignmentMetadataKey(g), None, at + 1000)
    _rec(log, ShareGroupMetadataKey(g), None, at + 1000)
    return log


def _streams_member(process: str) -> StreamsGroupMemberMetadataValue:
    return StreamsGroupMemberMetadataValue(None, None, f"{process}-StreamThread-1", "/10.0.0.3", 300_000, 1,
                                           process, None, ())


def _tasks(**subtopologies: tuple[int, ...]) -> tuple[CurrentTaskIds, ...]:
    return tuple(CurrentTaskIds(s.lstrip("s"), ps) for s, ps in subtopologies.items())


def _streams_current(epoch: int, active: tuple[CurrentTaskIds, ...], standby: tuple[CurrentTaskIds, ...] = (),
                     revoking: tuple[CurrentTaskIds, ...] = (), state: int = 1
                     ) -> StreamsGroupCurrentMemberAssignmentValue:
    """State 1 is streams.MemberState.STABLE, 2 UNREVOKED_TASKS, 3 UNRELEASED_TASKS."""
    return StreamsGroupCurrentMemberAssignmentValue(epoch, epoch - 1, state, active, standby, (), revoking, (), ())


def streams_log() -> LogBuilder:
    """a-1 joins (epoch 1: tasks 0_0, 0_1, 1_0); b-1 joins (epoch 2): a-1 keeps 0_0 and 1_0, revokes
    0_1 (pending revocation), then releases it, b-1 gets 0_1 active and a standby of 0_0; the
    topology changes (epoch 3)."""
    g = "streams-g"
    log = LogBuilder(g, partition=4, offset=0)
    at = log.ts
    _rec(log, StreamsGroupTopologyKey(g), StreamsGroupTopologyValue(1, (
        Subtopology("0", ("in",), (), (), ("rep",), (), ()), Subtopology("1", ("rep",), (), (), (), (), ()))), at)
    _rec(log, StreamsGroupMemberMetadataKey(g, "a-1"), _streams_member("pa"), at)
    _rec(log, StreamsGroupMetadataKey(g), StreamsGroupMetadataValue(1, 5, validated_topology_epoch=1), at)
    _rec(log, StreamsGroupTargetAssignmentMemberKey(g, "a-1"), StreamsGroupTargetAssignmentMemberValue(
        (TaskIds("0", (0, 1)), TaskIds("1", (0,))), (), ()), at)
    _rec(log, StreamsGroupTargetAssignmentMetadataKey(g), StreamsGroupTargetAssignmentMetadataValue(1, at), at)
    _rec(log, StreamsGroupCurrentMemberAssignmentKey(g, "a-1"),
         _streams_current(1, _tasks(s0=(0, 1), s1=(0,))), at + 100)
    at += 5000
    _rec(log, StreamsGroupMemberMetadataKey(g, "b-1"), _streams_member("pb"), at)
    _rec(log, StreamsGroupMetadataKey(g), StreamsGroupMetadataValue(2, 5, validated_topology_epoch=1), at)
    _rec(log, StreamsGroupTargetAssignmentMemberKey(g, "a-1"), StreamsGroupTargetAssignmentMemberValue(
        (TaskIds("0", (0,)), TaskIds("1", (0,))), (), ()), at)
    _rec(log, StreamsGroupTargetAssignmentMemberKey(g, "b-1"), StreamsGroupTargetAssignmentMemberValue(
        (TaskIds("0", (1,)),), (TaskIds("0", (0,)),), ()), at)
    _rec(log, StreamsGroupTargetAssignmentMetadataKey(g), StreamsGroupTargetAssignmentMetadataValue(2, at), at)
    _rec(log, StreamsGroupCurrentMemberAssignmentKey(g, "a-1"),
         _streams_current(2, _tasks(s0=(0,), s1=(0,)), revoking=_tasks(s0=(1,)), state=2), at + 100)
    _rec(log, StreamsGroupCurrentMemberAssignmentKey(g, "b-1"),  # waits for 0_1: UNRELEASED_TASKS
         _streams_current(2, (), _tasks(s0=(0,)), state=3), at + 100)
    _rec(log, StreamsGroupCurrentMemberAssignmentKey(g, "a-1"),
         _streams_current(2, _tasks(s0=(0,), s1=(0,))), at + 900)
    _rec(log, StreamsGroupCurrentMemberAssignmentKey(g, "b-1"),
         _streams_current(2, _tasks(s0=(1,)), _tasks(s0=(0,))), at + 1200)
    at += 5000
    _rec(log, StreamsGroupTopologyKey(g), StreamsGroupTopologyValue(2, (
        Subtopology("0", ("in",), (), (), (), (), ()),)), at)
    _rec(log, StreamsGroupMetadataKey(g), StreamsGroupMetadataValue(3, 6, validated_topology_epoch=2), at)
    return log


def _audit(records: list[Any]) -> dict[str, list[Any]]:
    t = rows_by_table(audit_group(records))
    assert all(c.cause in SHARE_STREAMS_CAUSES for c in t["rebalance_causes"]), t["rebalance_causes"]
    assert all(v.kind in SHARE_STREAMS_VIOLATION_KINDS for v in t["violations"])
    return t


def _held(t: dict[str, list[Any]]) -> dict[tuple[str, int], set[tuple[str, int]]]:
    """(member, epoch) -> what it held in that epoch, from the assignments rows."""
    out: dict[tuple[str, int], set[tuple[str, int]]] = {}
    for a in t["assignments"]:
        out.setdefault((a.member_id, a.generation_id), set()).add((a.topic, a.partition))
    return out


def test_share_group_epochs_members_and_assignments() -> None:
    t = _audit(share_log().records)
    gens = [(g.generation_id, g.group_type, g.protocol_type, g.member_count, g.state, g.assignment_epoch,
             g.reached_at is not None, g.missing_generations) for g in t["generations"]]
    assert gens == [(2, "share", "share", 1, "Stable", 2, True, None),
                    (3, "share", "share", 2, "Stable", 3, True, 0),
                    (4, "share", "share", 1, "Stable", 4, True, 0),
                    (5, "share", "share", 0, "Empty", None, False, 0)]
    g3 = t["generations"][1]
    assert g3.reconciliation_ms == 300  # s-1's current assignment at epoch 3 came last
    orders = {("orders", p) for p in range(3)}
    assert _held(t) == {("s-1", 2): orders, ("s-1", 3): orders, ("s-2", 3): orders, ("s-2", 4): orders}
    assert {a.topic_id for a in t["assignments"]} == {ORDERS_ID}  # named from the share-partition state record
    assert all(a.group_type == "share" for a in t["assignments"])
    s1_end = max(a.valid_to for a in t["assignments"] if a.member_id == "s-1")
    assert s1_end == t["generations"][2].record_timestamp  # released with its tombstones, at the epoch-4 bump
    assert {a.owned_before for a in t["assignments"] if a.generation_id == 3 and a.member_id == "s-1"} == {True}
    primary = {c.generation_id: c.cause for c in t["rebalance_causes"] if c.is_primary}
    assert primary == {2: "group_created", 3: "member_joined", 4: "member_left_or_expired",
                       5: "member_left_or_expired"}
    assert [(c.generation_id, c.cause) for c in t["rebalance_causes"] if not c.is_primary] == [
        (2, "member_joined"), (3, "share_partitions_initialized"), (5, "group_deleted")]
    assert t["violations"] == [] and t["quarantine"] == []


def test_streams_group_tasks_as_assignments() -> None:
    t = _audit(streams_log().records)
    gens = [(g.generation_id, g.group_type, g.member_count, g.state, g.assignment_epoch, g.reconciliation_ms)
            for g in t["generations"]]
    assert gens == [(1, "streams", 1, "Stable", 1, 100), (2, "streams", 2, "Stable", 2, 1200),
                    (3, "streams", 2, "Assigning", None, None)]
    assert _held(t) == {
        ("a-1", 1): {("active:0", 0), ("active:0", 1), ("active:1", 0)},
        ("a-1", 2): {("active:0", 0), ("active:0", 1), ("active:1", 0)},
        ("b-1", 2): {("standby:0", 0), ("active:0", 1)},
    }
    revoked = next(a for a in t["assignments"] if a.member_id == "a-1" and a.generation_id == 2
                   and a.topic == "active:0" and a.partition == 1)
    assert revoked.pending_revocation_at == revoked.valid_from  # pending revocation from the epoch-2 record
    taken = next(a for a in t["assignments"] if a.member_id == "b-1" and a.topic == "active:0")
    assert revoked.valid_to is not None and taken.valid_from >= revoked.valid_to  # released before taken over
    assert all(a.topic_id is None and a.group_type == "streams" for a in t["assignments"])
    primary = {c.generation_id: c.cause for c in t["rebalance_causes"] if c.is_primary}
    assert primary == {1: "group_created", 2: "member_joined", 3: "topology_changed"}
    assert t["violations"] == [] and t["quarantine"] == []


def test_an_active_task_in_two_members_current_assignments_is_a_violation() -> None:
    log = streams_log()
    g = log.group_id
    _rec(log, StreamsGroupCurrentMemberAssignmentKey(g, "b-1"),
         _streams_current(2, _tasks(s0=(1,), s1=(0,)), _tasks(s0=(0,))), log.ts)
    t = _audit(log.records)
    assert [(v.kind, v.topic, v.partition, v.member_ids) for v in t["violations"]] == [
        ("duplicate_assignment", "active:1", 0, ("b-1", "a-1"))]


def test_a_member_tombstone_before_its_assignment_tombstone_is_refused_as_the_broker_does() -> None:
    log = share_log()
    g = log.group_id
    _rec(log, ShareGroupMemberMetadataKey(g, "s-9"), ShareGroupMemberMetadataValue(None, "c9", "h", ("orders",)),
         log.ts)
    _rec(log, ShareGroupCurrentMemberAssignmentKey(g, "s-9"), _share_current(1, (0,)), log.ts)
    _rec(log, ShareGroupMemberMetadataKey(g, "s-9"), None, log.ts)
    t = _audit(log.records)
    assert [(v.kind, v.member_ids) for v in t["violations"]] == [("load_refused", ("s-9",))]
    assert "current assignment was not deleted first" in t["violations"][0].detail


def test_share_and_streams_records_are_replayed_not_skipped() -> None:
    auditor = GroupAuditor()
    list(auditor.feed(share_log().records))
    auditor.finish()
    counts = auditor.counts
    assert counts.skipped_other_type == 0 and counts.group_records == len(share_log().records)


def test_two_runs_with_saved_state_equal_one_pass() -> None:
    for records in (share_log().records, streams_log().records):
        one_pass = list(audit_group(records))
        for k in range(len(records) + 1):
            first = GroupAuditor()
            rows = list(first.feed(records[:k]))
            second = GroupAuditor.from_dict(json.loads(json.dumps(first.to_dict())))
            assert rows + list(second.feed(records[k:])) + second.finish() == one_pass, f"split at {k}"


# ---------------------------------------------------------------------------------------------
# a real Kafka 4.4.0 broker's log (tools/make_share_streams_log.py): a share group and a streams
# group, each joined by two clients that then leave one by one

DATA = Path(__file__).resolve().parents[1] / "codec" / "data"
REAL = DATA / "real_broker_4_4_0_share_streams.parquet"
REAL_TRUTH = json.loads((DATA / "real_broker_4_4_0_share_streams.truth.json").read_text())


def _real_records() -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for r in sorted(pq.read_table(REAL).to_pylist(), key=lambda r: (r["partition"], r["offset"])):
        key = r["key"]
        group = key[4:4 + int.from_bytes(key[2:4], "big")].decode()
        out.setdefault(group, []).append((r["partition"], r["offset"], int(r["timestamp"].timestamp() * 1000), key,
                                          r["value"]))
    return out


def _task(text: str) -> tuple[str, int]:
    """"share-in:2" -> ("share-in", 2); "active:0:1" -> ("active:0", 1)."""
    topic, _, partition = text.rpartition(":")
    return topic, int(partition)


@pytest.fixture(scope="module")
def real() -> dict[str, dict[str, list[Any]]]:
    return {group: _audit(records) for group, records in _real_records().items()}


@pytest.mark.parametrize("step", REAL_TRUTH["steps"], ids=lambda s: f"{s['group']}: {s['step']}")
def test_real_log_every_member_epoch_the_broker_and_clients_saw_is_in_the_tables(real, step) -> None:
    t = real[step["group"]]
    gen = next(g for g in t["generations"] if g.generation_id == step["group_epoch"])
    assert (gen.group_type, gen.member_count, gen.assignment_epoch, gen.state) == (
        step["type"], len(step["members"]), step["assignment_epoch"], step["state"])
    at = step["at"]
    for m in step["members"]:
        held = {(a.topic, a.partition) for a in t["assignments"]
                if a.member_id == m["member_id"] and a.generation_id == m["member_epoch"]
                and a.valid_from <= at and (a.valid_to is None or a.valid_to > at)}
        assert held == {_task(x) for x in m["assigned"]}, m
        assert all(a.client_id == m["client_id"] for a in t["assignments"] if a.member_id == m["member_id"])
    for client in step.get("clients", ()):  # a streams application's own view of its tasks
        member = next(m for m in step["members"] if m["client_id"] == client["consumer_client_id"])
        assert {_task(x) for x in client["tasks"]} == {_task(x) for x in member["assigned"]
                                                       if not x.startswith("warmup:")}


def test_real_log_causes_agree_with_what_the_driver_did(real) -> None:
    """Each client that joined has its `member_joined` cause and each that left its
    `member_left_or_expired`, as the primary cause of the epoch the step settled at (the first
    client's join opened the group: its epoch came before the one the group settled at, below)."""
    for group in REAL_TRUTH["groups"]:
        steps = [s for s in REAL_TRUTH["steps"] if s["group"] == group]
        causes = real[group]["rebalance_causes"]
        primary = {c.generation_id: c for c in causes if c.is_primary}
        for i, step in enumerate(steps):
            was = {m["member_id"] for m in steps[i - 1]["members"]} if i else set()
            now = {m["member_id"] for m in step["members"]}
            if i == 0:
                (joined,) = now
                assert [c.generation_id for c in causes if c.cause == "member_joined"
                        and c.member_id == joined] == [min(primary)]
                continue
            cause = primary[step["group_epoch"]]
            expected = ("member_joined", *(now - was)) if now - was else ("member_left_or_expired", *(was - now))
            assert (cause.cause, cause.member_id) == expected, (step["step"], cause)
        assert real[group]["violations"] == [] and real[group]["quarantine"] == []


def test_real_log_first_epochs_as_the_broker_wrote_them(real) -> None:
    """Before the first client's assignment: a share group's epoch 2 assigns nothing until its share
    partitions are initialized (epoch 3); a streams group's epoch 2 waits for its topology to be
    validated (NotReady), and epoch 3 follows the changed topic metadata (its changelog topic)."""
    share = [(g.generation_id, g.state, g.reached_at is not None) for g in real["share-audit"]["generations"]][:2]
    assert share == [(2, "Stable", True), (3, "Stable", True)]
    assert not [a for a in real["share-audit"]["assignments"] if a.generation_id == 2]
    causes = {c.generation_id: c.cause for c in real["share-audit"]["rebalance_causes"] if c.is_primary}
    assert causes[3] == "share_partitions_initialized"
    streams = [(g.generation_id, g.state) for g in real["streams-audit"]["generations"]][:2]
    assert streams == [(2, "NotReady"), (3, "Stable")]
    causes = {c.generation_id: c.cause for c in real["streams-audit"]["rebalance_causes"] if c.is_primary}
    assert causes[3] == "topic_metadata_changed"
    standby = {(a.member_id, a.topic, a.partition) for a in real["streams-audit"]["assignments"]
               if a.topic.startswith("standby:")}
    assert len(standby) == 2  # one standby replica per task while two applications ran


def test_real_log_records_decode_and_encode_byte_exact() -> None:
    types = set()
    for records in _real_records().values():
        for _, _, _, key, value in records:
            rec = decode(key, value)
            types.add(rec.key_version)
            assert encode(rec) == (key, value)
    assert types >= {10, 11, 12, 13, 14, 15, 17, 19, 20, 21, 22, 23}
