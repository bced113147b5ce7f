"""`coordinator_audit.udfs.history.derive_group` on KIP-848 consumer groups: the real Kafka 4.4.0 log's
ownership intervals against its clients' own callbacks, epochs and reconciliation time in place of
join phases, and a group migrated from the classic protocol and back."""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from typing import Any

import pytest

from coordinator_audit.core.audit import audit_group
from coordinator_audit.core.audit.rows import (
    AssignmentRow,
    GenerationRow,
    OffsetCommitRow,
    RebalanceCauseRow,
    ViolationRow,
)
from coordinator_audit.udfs.history import (
    BASE_INPUTS,
    JOIN_PHASE_GAPS,
    NOT_DERIVED_GROUP_TYPES,
    OwnershipRow,
    OwnershipRun,
    commit_times,
    derive_group,
)
from tests.core.audit.test_audit_consumer_groups import RECORDS, REGEX, UNIFORM, _migration_log, _truth


def _derive(records: list[Any]) -> tuple[dict[str, list[Any]], list[OwnershipRow], list[Any], list[Any]]:
    rows = list(audit_group(records))

    def of(cls: type, table: str) -> list[dict[str, Any]]:
        return [{k: v for k, v in dataclasses.asdict(r).items() if k in (*BASE_INPUTS[table], "group_id")}
                for r in rows if type(r) is cls]

    base = {"generations": [r for r in rows if type(r) is GenerationRow],
            "assignments": [r for r in rows if type(r) is AssignmentRow]}
    group = base["generations"][0].group_id
    own, reb, health = derive_group(group, generations=of(GenerationRow, "generations"),
                                    assignments=of(AssignmentRow, "assignments"),
                                    commits=commit_times([dataclasses.asdict(r) for r in rows
                                                          if type(r) is OffsetCommitRow]),
                                    causes=of(RebalanceCauseRow, "rebalance_causes"),
                                    violations=of(ViolationRow, "violations"))
    flat = [x for o in own for x in (o.rows() if isinstance(o, OwnershipRun) else [o])]
    return base, flat, reb, health


@pytest.fixture(scope="module")
def derived() -> dict[str, tuple[dict[str, list[Any]], list[OwnershipRow], list[Any], list[Any]]]:
    return {g: _derive(RECORDS[g]) for g in (UNIFORM, REGEX)}


@pytest.mark.parametrize("group", [UNIFORM, REGEX])
def test_ownership_is_one_interval_at_a_time_and_each_owned_one_is_an_assignment(derived, group) -> None:
    """Per partition, from its first owner on: consecutive intervals that never overlap, the owned
    ones exactly the members' current assignments as stored (bounded by their records), the
    unowned ones between them saying why, the last one open."""
    base, own, _, _ = derived[group]
    by_key: dict[tuple[str, int], list[OwnershipRow]] = defaultdict(list)
    for o in own:
        by_key[(o.topic, o.partition)].append(o)
    assigned = {(a.topic, a.partition, a.member_id, a.valid_from, a.valid_to) for a in base["assignments"]}
    assert {(o.topic, o.partition, o.member_id, o.valid_from, o.valid_to) for o in own if o.owned} == assigned
    for key, rows in by_key.items():
        rows.sort(key=lambda o: o.valid_from)
        assert rows[0].owned, key
        for a, b in itertools.pairwise(rows):
            assert a.valid_to == b.valid_from, (key, a, b)
        assert rows[-1].valid_to is None and rows[-1].unowned_reason == "group_empty", key
        for o in rows:
            assert o.from_evidence == "record" and o.to_evidence in ("record", None)
            if not o.owned:
                assert o.unowned_reason in ("cooperative_revocation", "owner_departed", "group_empty")


@pytest.mark.parametrize("group", [UNIFORM, REGEX])
def test_ownership_agrees_with_the_clients_callbacks(derived, group) -> None:
    """After each callback (the member's whole assignment as the client saw it), the member owns
    every partition of it in `partition_ownership` at that moment; a partition the client revoked is
    given up by the member's next current assignment, no earlier than the callback."""
    _, own, _, _ = derived[group]
    checked = 0
    for m in _truth(group)["members_seen"]:
        for cb in m["callbacks"]:
            after = set(cb["assignment"]) - (set(cb["partitions"]) if cb["event"] == "revoked" else set())
            for tp in after:
                topic, _, partition = tp.rpartition("-")
                owners = [o for o in own if o.topic == topic and o.partition == int(partition) and o.owned
                          and o.valid_from <= cb["ts"] and (o.valid_to is None or cb["ts"] < o.valid_to)]
                assert [o.member_id for o in owners] == [m["member_id"]], (m["consumer"], cb["event"], tp)
                checked += 1
            if cb["event"] == "revoked":
                for tp in cb["partitions"]:
                    topic, _, partition = tp.rpartition("-")
                    released = [o for o in own if o.topic == topic and o.partition == int(partition) and o.owned
                                and o.member_id == m["member_id"] and o.valid_from <= cb["ts"]]
                    assert released and max(o.valid_to or 0 for o in released) >= cb["ts"], (m["consumer"], tp)
    assert checked >= 15


@pytest.mark.parametrize("group", [UNIFORM, REGEX])
def test_rebalances_are_epochs_with_their_reconciliation_time(derived, group) -> None:
    """One `rebalances` row per group epoch, started by its record (exact), ended when the group
    reached it: the duration is the generation's reconciliation time; unowned partition time is the
    ownership gaps the epoch's reconciliation left; the day's health sums them."""
    base, own, reb, health = derived[group]
    gens = {g.generation_id: g for g in base["generations"]}
    assert sorted(r.generation_id for r in reb) == sorted(gens)
    gaps: dict[int, list[int]] = defaultdict(list)
    for o in own:
        if not o.owned and o.unowned_reason in JOIN_PHASE_GAPS and o.duration_ms is not None:
            gaps[o.generation_id].append(o.duration_ms)
    for r in reb:
        g = gens[r.generation_id]
        assert r.rebalance_protocol == "consumer" and r.start_exact and r.started_at == g.record_timestamp
        assert r.join_completed_at is None and r.join_ms is None
        if g.state == "Stable":
            assert r.outcome == "completed" and r.duration_ms == g.reconciliation_ms and r.ended_at == g.reached_at
        elif g.member_count == 0:
            assert r.outcome == "emptied" and r.duration_ms == 0
        else:
            assert r.outcome == "superseded" and r.ended_at == g.ended_at
        assert r.unowned_ms_sum == sum(gaps[r.generation_id]) and r.partitions_unowned == len(gaps[r.generation_id])
    assert any(r.partitions_moved for r in reb) and any(r.unowned_ms_sum for r in reb)
    (day,) = health
    assert day.rebalances == len(reb) and day.rebalancing_ms == sum(r.duration_ms or 0 for r in reb)
    assert day.unowned_partition_ms == sum(sum(v) for v in gaps.values())
    assert day.members_joined == sum(r.members_joined for r in reb) > 0


def test_the_killed_member_s_partitions_are_unowned_from_its_fence_to_their_next_owner(derived) -> None:
    base, own, reb, _ = derived[UNIFORM]
    u2 = next(m["member_id"] for m in _truth(UNIFORM)["members_seen"] if m["consumer"] == "u2")
    fenced = max(a.valid_to for a in base["assignments"] if a.member_id == u2)
    after = [o for o in own if not o.owned and o.valid_from == fenced]
    assert after and {o.unowned_reason for o in after} == {"owner_departed"}
    revoked = [o for o in own if o.unowned_reason == "cooperative_revocation"]
    assert revoked and all(o.valid_to is not None for o in revoked)
    (fence,) = [r for r in reb if r.trigger_member_id == u2 and r.trigger == "member_left_or_expired"]
    assert fence.started_at == fenced and fence.members_left == 1 and fence.outcome == "completed"


def test_a_migrated_group_derives_each_protocol_s_part_its_own_way() -> None:
    """Classic generations, then consumer epochs, then classic again: the classic part keeps its join
    phases, the consumer part its epochs, one ownership history per partition without overlaps."""
    _, own, reb, _ = _derive(_migration_log().records)
    assert [(r.rebalance_protocol == "consumer", r.generation_id, r.trigger) for r in reb] == [
        (False, 3, "history_start"), (True, 3, "converted_to_consumer"), (True, 4, "member_joined"),
        (False, 4, "converted_to_classic")]  # one generation id in both protocols: each its own causes
    by_key: dict[tuple[str, int], list[OwnershipRow]] = defaultdict(list)
    for o in own:
        by_key[(o.topic, o.partition)].append(o)
    for key, rows in by_key.items():
        rows.sort(key=lambda o: (o.valid_from, o.owned))
        owned = [o for o in rows if o.owned]
        for a, b in itertools.pairwise(owned):
            assert a.valid_to is not None and a.valid_to <= b.valid_from, (key, a, b)
    c1 = [o for o in own if o.owned and o.member_id == "c-1"]
    assert [(o.topic, o.partition, o.generation_id) for o in c1] == [("t", 3, 4)]


def test_share_and_streams_groups_have_no_derived_rows() -> None:
    """A share partition may be held by several members and a streams member holds tasks: neither
    group type has one owner per partition, so the derived tables leave them out (their
    generations and assignments stay in the base tables)."""
    from tests.core.audit.test_audit_share_streams import share_log, streams_log

    for log in (share_log(), streams_log()):
        base, own, reb, health = _derive(log.records)
        assert base["generations"] and base["assignments"]
        assert {g.group_type for g in base["generations"]} <= NOT_DERIVED_GROUP_TYPES
        assert (own, reb, health) == ([], [], [])
