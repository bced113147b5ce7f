"""Every library scenario against the real coordinator: truth per action and misbehaviour, coverage of
the audit's vocabulary, determinism, and a log that decodes and replays to the same persisted state."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from coordinator_audit.core import consumer_protocol as cp
from coordinator_audit.core.coordinator import CoordinatorConfig, GroupCoordinator
from coordinator_audit.core.records import GroupMetadataKey, decode, partition_for
from coordinator_audit.core.sim.runner import RunResult, run_scenario
from coordinator_audit.core.sim.scenario import Scenario
from coordinator_audit.core.sim.truth import CAUSES, VIOLATIONS

LIBRARY = Path(__file__).resolve().parents[3] / "coordinator_audit" / "core" / "sim" / "scenarios"

# scenario -> (causes that must appear, exact set of violation kinds)
EXPECTED = {
    "bug-duplicate-assignment": ({"group_created", "member_joined"}, {"duplicate_assignment"}),
    "bug-offset-rewind": ({"group_created"}, {"offset_regression"}),
    "bug-outside-subscription": ({"group_created", "metadata_or_leader_rejoin"},
                                 {"assignment_outside_subscription", "duplicate_assignment"}),
    "bug-stale-claims-after-pause": ({"member_left_or_expired", "member_joined", "cooperative_follow_up"},
                                     {"stale_ownership_claim"}),
    "bug-static-order": ({"static_member_replaced", "metadata_or_leader_rejoin"},
                         {"static_replacement_changed_assignment"}),
    "bug-unsafe-cooperative-move": ({"member_joined", "cooperative_follow_up"}, {"unsafe_cooperative_move"}),
    "bug-wrong-generation-commit": ({"group_created"}, set()),
    "coop-coordinator-failover": ({"member_left_or_expired"}, set()),
    "coop-crash": ({"member_left_or_expired"}, set()),
    "coop-rolling-bounce": ({"member_left_or_expired", "member_joined", "cooperative_follow_up"}, set()),
    "coop-scale-in": ({"member_left_or_expired"}, set()),
    "coop-scale-out": ({"member_joined", "cooperative_follow_up"}, set()),
    "coop-subscription-change": ({"subscription_changed", "cooperative_follow_up"}, set()),
    "coop-emptied-then-deleted": ({"group_created", "member_joined", "group_emptied", "group_deleted"}, set()),
    "eager-coordinator-failover": ({"member_left_or_expired"}, set()),
    "eager-leader-rejoin-during-expiry": ({"metadata_or_leader_rejoin", "member_left_or_expired"}, set()),
    "eager-restart-leave-then-join": ({"member_left_or_expired", "member_joined"}, set()),
    "eager-two-join-one-round": ({"member_joined", "member_left_or_expired"}, set()),
    "eager-crash": ({"member_left_or_expired"}, set()),
    "eager-empty-and-return": ({"group_emptied", "member_joined"}, set()),
    "eager-failover-mid-rebalance": ({"member_joined"}, set()),
    "eager-leader-crash-mid-sync": ({"aborted_generations", "member_left_or_expired"}, set()),
    "eager-leader-rejoin": ({"metadata_or_leader_rejoin"}, set()),
    "eager-partition-change": ({"metadata_or_leader_rejoin"}, set()),
    "eager-pause-past-session": ({"member_left_or_expired", "member_joined"}, set()),
    "eager-restart-dynamic": ({"member_left_or_expired", "member_joined"}, set()),
    "eager-rolling-bounce": ({"member_left_or_expired", "member_joined"}, set()),
    "eager-scale-in": ({"member_left_or_expired"}, set()),
    "eager-scale-out": ({"member_joined"}, set()),
    "eager-steady": ({"group_created", "member_left_or_expired", "group_emptied"}, set()),
    "eager-subscription-change": ({"subscription_changed"}, set()),
    "eager-to-coop-upgrade": ({"assignor_changed", "cooperative_follow_up"}, set()),
    "group-deleted": ({"group_emptied", "group_deleted"}, set()),
    "partial-coop-crash": ({"history_start"}, set()),
    "partial-eager-scale-out": ({"history_start", "member_joined"}, set()),
    "rebalance-storm": ({"member_joined", "member_left_or_expired"}, set()),
    "roundrobin-scale-out": ({"member_joined", "member_left_or_expired"}, set()),
    "static-coop-rolling-bounce": ({"static_member_replaced"}, set()),
    "static-expired-and-back": ({"member_left_or_expired", "static_member_rejoined_new_generation"}, set()),
    "static-fenced-duplicate": ({"static_member_replaced"}, set()),
    "static-restart-during-rebalance": ({"member_joined", "static_member_rejoined_new_generation"}, set()),
    "static-rolling-bounce": ({"static_member_replaced"}, set()),
    "sticky-scale-out": ({"member_joined", "member_left_or_expired"}, set()),
}

_CACHE: dict[str, RunResult] = {}


def run(name: str) -> RunResult:
    if name not in _CACHE:
        _CACHE[name] = run_scenario(Scenario.load(LIBRARY / f"{name}.json"))
    return _CACHE[name]


def test_library_matches_the_table():
    assert {p.stem for p in LIBRARY.glob("*.json")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_scenario_truth(name):
    causes, violations = EXPECTED[name]
    truth = run(name).truth
    got = {c.cause for c in truth.causes}
    assert causes <= got, f"missing causes {causes - got}; truth has {truth.causes_by_generation()}"
    assert truth.violation_kinds() == violations
    if name.startswith("partial-"):
        first = truth.generations[0].generation_id
        assert truth.causes_by_generation()[first] == ["history_start"]


def test_library_covers_the_audit_vocabulary():
    causes = {c for name in EXPECTED for c in EXPECTED[name][0]}
    kinds = {k for name in EXPECTED for k in EXPECTED[name][1]}
    assert causes == set(CAUSES)
    assert kinds == set(VIOLATIONS)


def test_leave_that_empties_the_group_belongs_to_the_empty_generation():
    # the last LeaveGroup writes the Empty record in the same step: generation 3 (everyone back)
    # is not caused by that leave
    truth = run("eager-empty-and-return").truth
    # generation 0: the Java coordinator's creation record; 1: its creator's join started the round
    assert truth.causes_by_generation() == {0: ["group_created"], 1: ["member_joined"], 2: ["group_emptied"],
                                            3: ["member_joined"]}
    emptied = next(c for c in truth.causes if c.cause == "group_emptied")
    assert emptied.is_primary and emptied.member_id is not None  # the member whose leave emptied it
    scala = run_scenario(replace(Scenario.load(LIBRARY / "eager-empty-and-return.json"), flavor="scala")).truth
    assert scala.causes_by_generation() == {1: ["group_created"], 2: ["group_emptied"], 3: ["member_joined"]}
    assert scala.coordinator_flavour == "scala"


def test_assignor_bug_truth_lists_every_broken_rule_of_the_produced_assignment():
    # the bug hands audit-0 to a member that does not subscribe to "audit"; the subscriber keeps it
    truth = run("bug-outside-subscription").truth
    rows = {(v.generation_id, v.kind, v.topic, v.partition): v.member_ids for v in truth.violations}
    assert set(rows) == {(1, "assignment_outside_subscription", "audit", 0), (1, "duplicate_assignment", "audit", 0)}
    outside = rows[(1, "assignment_outside_subscription", "audit", 0)]
    assert len(rows[(1, "duplicate_assignment", "audit", 0)]) == 2 and set(outside) < set(
        rows[(1, "duplicate_assignment", "audit", 0)])


@pytest.mark.parametrize("name", ["eager-rolling-bounce", "coop-scale-out", "bug-stale-claims-after-pause",
                                  "eager-coordinator-failover"])
def test_deterministic(name):
    a = run_scenario(Scenario.load(LIBRARY / f"{name}.json"))
    b = run_scenario(Scenario.load(LIBRARY / f"{name}.json"))
    assert a.full_records == b.full_records
    assert a.truth.to_json() == b.truth.to_json()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_log_decodes_and_replays_to_the_same_state(name):
    result = run(name)
    s = result.scenario
    part = partition_for(s.group, s.offsets_partitions)
    records = result.full_records
    assert [r.offset for r in records] == list(range(len(records)))
    assert all(r.partition == part for r in records)
    assert [r.timestamp_ms for r in records] == sorted(r.timestamp_ms for r in records)
    assert records[0].timestamp_ms >= s.start_ms and records[-1].timestamp_ms <= s.start_ms + s.end_ms
    fresh = GroupCoordinator(CoordinatorConfig(offsets_topic_num_partitions=s.offsets_partitions))
    for r in records:
        fresh.replay(decode(r.key, r.value))
    live = result.port.coord
    assert fresh.offsets(s.group) == live.offsets(s.group)
    last_group = [decode(r.key, r.value) for r in records if decode(r.key, r.value).key == GroupMetadataKey(s.group)]
    replayed = fresh.group(s.group)
    if last_group[-1].value is None:
        assert replayed is None
        return
    value = last_group[-1].value
    assert replayed.generation_id == value.generation
    assert [(m.member_id, m.assignment) for m in replayed.members] == [(m.member_id, m.assignment)
                                                                        for m in value.members]
    view = live.group(s.group)
    if view is not None and str(view.state) in ("Stable", "Empty"):
        assert (view.generation_id, view.protocol_name, view.leader_id) == (
            replayed.generation_id, replayed.protocol_name, replayed.leader_id)
        assert {m.member_id: m.assignment for m in view.members} == {m.member_id: m.assignment
                                                                      for m in replayed.members}


def _subscriptions(result: RunResult) -> list[cp.Subscription]:
    out = []
    for r in result.full_records:
        rec = decode(r.key, r.value)
        if isinstance(rec.key, GroupMetadataKey) and rec.value is not None:
            out += [cp.decode_subscription(m.subscription) for m in rec.value.members]
    return out


def test_eager_members_report_no_owned_partitions_and_cooperative_ones_do():
    eager = _subscriptions(run("eager-rolling-bounce"))
    assert eager and all(not s.owned_partitions for s in eager)
    assert {s.version for s in eager} == {3}
    coop = _subscriptions(run("coop-scale-out"))
    assert any(s.owned_partitions for s in coop)
    # KIP-341: the owned partitions travel with the generation they were owned in
    assert all(s.generation_id >= 1 for s in coop if s.owned_partitions)


def test_cooperative_moves_take_two_generations():
    truth = run("coop-scale-out").truth
    gens = [g for g in truth.generations if g.kind == "rebalance"]
    g2, g3 = gens[1], gens[2]
    assigned2 = {tuple(tp) for m in g2.members for tp in m["assigned"]}
    assigned3 = {tuple(tp) for m in g3.members for tp in m["assigned"]}
    assert len(assigned2) < 6 and len(assigned3) == 6  # moved partitions are unassigned for one generation


def test_static_members_never_leave_and_bounces_keep_the_generation():
    result = run("static-rolling-bounce")
    gens = [g.generation_id for g in result.truth.generations]
    assert gens.count(1) == 4  # the rebalance record and three static replacements (W3)
    assert not any(e["event"] == "leave" for e in result.truth.events)


def test_fenced_instance_is_fatal():
    events = run("static-fenced-duplicate").truth.events
    fatal = [e for e in events if e["event"] == "fatal"]
    assert fatal and "FENCED_INSTANCE_ID" in fatal[0]["error"]


def test_wrong_generation_commit_is_rejected_and_leaves_no_record():
    truth = run("bug-wrong-generation-commit").truth
    assert [p["kind"] for p in truth.planted] == ["wrong_generation_commit"]
    assert not truth.violations


def test_clean_scenarios_hold_no_violation_facts():
    for name, (_, kinds) in EXPECTED.items():
        if kinds:
            continue
        for g in run(name).truth.generations:
            owners: dict[tuple[str, int], int] = {}
            for m in g.members:
                for tp in m["assigned"]:
                    owners[tuple(tp)] = owners.get(tuple(tp), 0) + 1
                    assert tp[0] in m["topics"], (name, g.generation_id)
            assert all(n == 1 for n in owners.values()), (name, g.generation_id)
