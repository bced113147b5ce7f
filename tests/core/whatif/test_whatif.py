"""What-if replays (coordinator_audit.core.whatif): events read back from a log, the actual configuration
reproducing the log, and an alternative configuration predicting what the simulator gives when run under
it directly with the same events; the real Kafka 3.9 sample's reproduction scores."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections import defaultdict
from functools import cache
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from coordinator_audit.core.audit import (
    AssignmentRow,
    AuditRow,
    GenerationRow,
    OffsetCommitRow,
    RebalanceCauseRow,
    audit_group,
)
from coordinator_audit.core.audit.causes import subscription_change, subscription_change_detail
from coordinator_audit.core.errors import ScenarioError
from coordinator_audit.core.records import OffsetCommitKey, decode
from coordinator_audit.core.sim.runner import run_scenario
from coordinator_audit.core.sim.scenario import Scenario
from coordinator_audit.core.whatif.events import (
    BROKER_LOG,
    Assumptions,
    BrokerStart,
    GroupHistory,
    HistoryError,
    derive_history,
    derive_history_from_rows,
)
from coordinator_audit.core.whatif.replay import (
    Configuration,
    _MeasuringRunner,
    _plan,
    calibrate,
    fit,
    measure,
    replay,
)

ROOT = Path(__file__).resolve().parents[3]
LIBRARY = ROOT / "coordinator_audit" / "core" / "sim" / "scenarios"
REAL_SAMPLE = ROOT / "data" / "samples" / "real_broker_3_9_0.parquet"

Raw = tuple[int, int, int, Any, Any]

# Library scenarios made only of what a history can express (starts, clean leaves, crashes, restarts,
# static replacements, subscription changes, a member's own rejoin, coordinator failovers, pauses past
# the session timeout):
# the actual configuration's replay reproduces every generation of their log.
REPRODUCED = ["bug-offset-rewind", "bug-stale-claims-after-pause", "bug-wrong-generation-commit",
              "coop-coordinator-failover", "coop-crash", "coop-rolling-bounce", "coop-scale-in", "coop-scale-out",
              "coop-subscription-change", "eager-coordinator-failover", "eager-crash", "eager-empty-and-return",
              "eager-failover-mid-rebalance", "eager-leader-rejoin", "eager-leader-rejoin-during-expiry",
              "eager-pause-past-session", "eager-restart-dynamic",
              "eager-restart-leave-then-join", "eager-rolling-bounce", "eager-scale-in", "eager-scale-out",
              "eager-steady", "eager-subscription-change", "eager-two-join-one-round", "group-deleted",
              "roundrobin-scale-out", "static-coop-rolling-bounce", "static-expired-and-back",
              "static-fenced-duplicate", "static-rolling-bounce", "sticky-scale-out"]

# alternative -> (Configuration, the same change written into the scenario file)
ALTERNATIVES: dict[str, tuple[Configuration, dict[str, Any]]] = {
    "cooperative-sticky+static": (Configuration(assignor="cooperative-sticky", static=True),
                                  {"assignors": ["cooperative-sticky"], "static": True}),
    "cooperative-sticky": (Configuration(assignor="cooperative-sticky"), {"assignors": ["cooperative-sticky"]}),
    "static": (Configuration(static=True), {"static": True}),
    "roundrobin": (Configuration(assignor="roundrobin"), {"assignors": ["roundrobin"]}),
    "session=30000": (Configuration(session_timeout_ms=30000), {"session_timeout_ms": 30000}),
}


def raw(records: Any) -> list[Raw]:
    return [(r.partition, r.offset, r.timestamp_ms, r.key, r.value) for r in records]


@cache
def library(name: str) -> tuple[dict[str, Any], list[Raw]]:
    data = json.loads((LIBRARY / f"{name}.json").read_text())
    return data, raw(run_scenario(Scenario.from_dict(data)).records)


@cache
def fitted(name: str) -> tuple[GroupHistory, Any, Any, list[AuditRow]]:
    data, records = library(name)
    observed = list(audit_group(records, group_id=data["group"]))
    history, result, rep = fit(lambda a: derive_history(records, group_id=data["group"], assumptions=a), observed)
    return history, result, rep, observed


def test_events_of_a_crash_and_a_rolling_bounce():
    data, records = library("eager-crash")
    h = derive_history(records)
    assert h.group_id == data["group"] and h.flavour == "java" and h.assignor == "range" and not h.static
    assert h.topics == (("orders", 6),)
    assert [c.session_timeout_ms for c in h.consumers] == [10000] * 3
    crash = [e for e in h.events if e.kind == "crash"]
    assert len(crash) == 1 and crash[0].basis == "crash_before_expiry"
    # the scenario kills c3 at 30 s; the log puts the crash a session timeout before its expiry's round
    assert abs(crash[0].at_ms - (Scenario.from_dict(data).start_ms + 30000)) <= 3000
    h = derive_history(library("eager-rolling-bounce")[1])
    later = [(e.kind, e.consumer) for e in h.events if e.kind != "start" or e.generation_id != 1]
    names = [c.name for c in h.consumers]
    assert len(names) == 3  # a restarted process keeps its client id and host: the same consumer
    assert sorted(later) == sorted([("close", n) for n in names] + [("start", n) for n in names])
    # every event says how its time was found
    assert all(e.basis for e in h.events)


def test_static_replacements_are_restarts_of_one_instance():
    h = derive_history(library("static-rolling-bounce")[1])
    assert h.static and {c.group_instance_id for c in h.consumers} == {"c1", "c2", "c3"}
    starts = [e for e in h.events if e.kind == "start"]
    restarts = [e for i, e in enumerate(starts) if any(f.consumer == e.consumer for f in starts[:i])]
    assert len(restarts) == 3 and all(e.basis == "log" for e in restarts)  # each replacement record's time
    assert all(any(s.kind == "close" and s.consumer == e.consumer and s.at_ms < e.at_ms for s in h.events)
               for e in restarts)


def test_assumptions_are_the_documented_rules():
    records = library("eager-crash")[1]
    strict = derive_history(records, assumptions=Assumptions(expiry_gap_fraction=10.0))
    assert not [e for e in strict.events if e.kind == "crash"]  # a gap rule that never says "expired"
    assert derive_history(records).assumptions == Assumptions()


def test_history_refuses_other_groups_and_empty_input():
    a = library("eager-crash")[1]
    b = library("eager-scale-out")[1]
    with pytest.raises(HistoryError, match="belongs to group"):
        derive_history(a + b)
    with pytest.raises(HistoryError, match="nothing to replay"):
        derive_history([])


@pytest.mark.parametrize("name", [n for n in REPRODUCED if "subscription" not in n])
def test_the_tables_give_the_logs_history(name):
    # the audit's rows hold the same lifecycle as the log, the members' timeouts included
    data, records = library(name)
    rows = list(audit_group(records, group_id=data["group"]))
    from_log = derive_history(records)
    from_rows = _from_rows(rows)
    assert sorted(from_rows.events, key=repr) == sorted(from_log.events, key=repr)
    assert sorted(from_rows.consumers, key=repr) == sorted(from_log.consumers, key=repr)
    assert (from_rows.topics, from_rows.flavour, from_rows.assignor) == (from_log.topics, from_log.flavour,
                                                                         from_log.assignor)
    assert not any("timeout" in n for n in from_rows.notes)


def _from_rows(rows: list[AuditRow], assumptions: Assumptions | None = None) -> GroupHistory:
    return derive_history_from_rows([r for r in rows if isinstance(r, GenerationRow)],
                                    [r for r in rows if isinstance(r, AssignmentRow)],
                                    [r for r in rows if isinstance(r, OffsetCommitRow)],
                                    [r for r in rows if isinstance(r, RebalanceCauseRow)], assumptions=assumptions)


def test_the_assignments_rows_keep_each_members_timeouts():
    # eager-crash's consumers run with a 10 s session timeout and Kafka's 300 s max.poll.interval.ms:
    # the rows say so, per member per generation
    data, records = library("eager-crash")
    rows = list(audit_group(records, group_id=data["group"]))
    assigned = [r for r in rows if isinstance(r, AssignmentRow)]
    assert assigned and {(r.session_timeout_ms, r.rebalance_timeout_ms) for r in assigned} == {(10000, 300000)}
    assert {c.session_timeout_ms for c in _from_rows(rows, Assumptions(session_timeout_ms=6000)).consumers} == {10000}
    # rows without them (tables written before the audit kept them): the assumption stands in, and says so
    bare = [dataclasses.replace(r, session_timeout_ms=None, rebalance_timeout_ms=None)
            if isinstance(r, AssignmentRow) else r for r in rows]
    h = _from_rows(bare, Assumptions(session_timeout_ms=6000, rebalance_timeout_ms=20000))
    assert {(c.session_timeout_ms, c.rebalance_timeout_ms) for c in h.consumers} == {(6000, 20000)}
    assert any("keep no session timeout: session.timeout.ms 6000 assumed" in n for n in h.notes)
    assert any("keep no rebalance timeout: max.poll.interval.ms 20000 assumed" in n for n in h.notes)


def test_rows_stored_before_the_timeouts_take_them_from_the_members_later_rows():
    # an output that outlived the version without the columns: its generation-1 rows (stored before)
    # read null in them, the generation-2 rows (written since) state them. eager-crash's members 1
    # and 2 are in both generations: what their later rows state; member 3 crashed in generation 1:
    # no row of it says, the assumption stands in
    data, records = library("eager-crash")
    rows = list(audit_group(records, group_id=data["group"]))
    stored = [dataclasses.replace(r, session_timeout_ms=None, rebalance_timeout_ms=None)
              if isinstance(r, AssignmentRow) and r.generation_id == 1 else r for r in rows]
    assigned = [r for r in rows if isinstance(r, AssignmentRow)]
    client = {r.member_id: r.client_id for r in assigned}
    later = {r.member_id for r in assigned if r.generation_id == 2}
    crashed = {r.member_id for r in assigned} - later
    assert len(later) == 2 and len(crashed) == 1
    h = _from_rows(stored, Assumptions(session_timeout_ms=6000, rebalance_timeout_ms=20000))
    timeouts = {c.client_id: (c.session_timeout_ms, c.rebalance_timeout_ms) for c in h.consumers}
    assert {timeouts[client[m]] for m in later} == {(10000, 300000)}
    assert {timeouts[client[m]] for m in crashed} == {(6000, 20000)}
    assert any("the assignments rows of 1 member(s) keep no session timeout" in n for n in h.notes)


def test_a_subscription_change_detail_reads_back_its_topics():
    detail = subscription_change_detail({"orders", "audit"}, {"payments"})
    assert detail == "topics +['audit', 'orders'] -['payments']"
    assert subscription_change(detail) == (frozenset({"orders", "audit"}), frozenset({"payments"}))
    assert subscription_change("consumer member metadata changed") is None


@pytest.mark.parametrize("name", ["eager-subscription-change", "coop-subscription-change"])
def test_the_causes_give_the_tables_a_subscription_change(name):
    # the assignments table shows a member's partitions, not its subscription: a change of topics by a
    # member that stays is in the rows only through its subscription_changed cause, which names the
    # topics added and removed; the history then has the log's subscribe event, with its topics
    data, records = library(name)
    rows = list(audit_group(records, group_id=data["group"]))
    tables = ([r for r in rows if isinstance(r, GenerationRow)], [r for r in rows if isinstance(r, AssignmentRow)],
              [r for r in rows if isinstance(r, OffsetCommitRow)])
    from_log = [(e.consumer, e.topics) for e in derive_history(records).events if e.kind == "subscribe"]
    from_rows = derive_history_from_rows(*tables, [r for r in rows if isinstance(r, RebalanceCauseRow)])
    assert len(from_log) == 1
    assert [(e.consumer, e.topics) for e in from_rows.events if e.kind == "subscribe"] == from_log
    assert "subscribe" not in [e.kind for e in derive_history_from_rows(*tables).events]
    observed = [*tables[0], *tables[1], *[r for r in rows if isinstance(r, RebalanceCauseRow)]]
    _h, _result, rep = fit(lambda a: derive_history_from_rows(
        *tables, [r for r in rows if isinstance(r, RebalanceCauseRow)], assumptions=a), observed)
    assert rep.score == 1.0, rep.diffs


def test_a_members_own_rejoin_is_an_event_of_the_log_and_of_the_tables():
    # the leader re-joins with unchanged metadata: a round with the same members, which the audit
    # explains as metadata_or_leader_rejoin and names the member; the history repeats that JoinGroup
    data, records = library("eager-leader-rejoin")
    rows = list(audit_group(records, group_id=data["group"]))
    named = [r.member_id for r in rows if isinstance(r, RebalanceCauseRow) and r.is_primary
             and r.cause == "metadata_or_leader_rejoin"]
    assert len(named) == 1
    from_rows = derive_history_from_rows([r for r in rows if isinstance(r, GenerationRow)],
                                         [r for r in rows if isinstance(r, AssignmentRow)],
                                         [r for r in rows if isinstance(r, OffsetCommitRow)],
                                         [r for r in rows if isinstance(r, RebalanceCauseRow)])
    member_of = {r.member_id: f"{r.client_id}@{r.client_host}" for r in rows if isinstance(r, AssignmentRow)}
    for h in (derive_history(records), from_rows):
        rejoins = [e for e in h.events if e.kind == "rejoin"]
        assert [e.consumer for e in rejoins] == [member_of[named[0]]]
        assert rejoins[0].basis == "last commit"
    # without the causes the tables' rows cannot tell it: the round has no event
    assert "rejoin" not in [e.kind for e in derive_history_from_rows(
        [r for r in rows if isinstance(r, GenerationRow)], [r for r in rows if isinstance(r, AssignmentRow)],
        [r for r in rows if isinstance(r, OffsetCommitRow)]).events]


def test_the_replay_gives_the_members_their_observed_ids():
    # every process under one client id (Kafka's default client.id is per JVM): the member ids differ
    # only in the coordinator's UUID, and range orders the members by id. The replay's coordinator
    # hands out the ids the log shows, so the same process gets the same partitions
    data = json.loads((LIBRARY / "eager-scale-out.json").read_text())
    for i, c in enumerate(data["consumers"]):
        c["client_id"], c["client_host"] = "consumer-shared-1", f"/10.1.0.{i + 1}"
    records = raw(run_scenario(Scenario.from_dict(data)).records)
    observed = list(audit_group(records, group_id=data["group"]))
    ids = {r.member_id for r in observed if isinstance(r, AssignmentRow)}
    history, result, rep = fit(lambda a: derive_history(records, assumptions=a), observed)
    assert set(history.member_ids) == ids and len(ids) == len(data["consumers"])
    assert {r.member_id for r in result.rows if isinstance(r, AssignmentRow)} == ids
    assert rep.score == 1.0, rep.diffs
    # an alternative that needs more ids than the log has gets seeded ones past them
    static = replay(history, Configuration(static=True))
    assert not ({r.member_id for r in static.rows if isinstance(r, AssignmentRow)} & ids)


def test_configuration_is_checked():
    with pytest.raises(ScenarioError, match="assignor 'sticky-ish'"):
        Configuration(assignor="sticky-ish")
    with pytest.raises(ScenarioError, match="session_timeout_ms 3000: the broker accepts 6000 to 1800000"):
        Configuration(session_timeout_ms=3000)  # Kafka refuses the JoinGroup: INVALID_SESSION_TIMEOUT
    with pytest.raises(ScenarioError, match="max_poll_interval_ms"):
        Configuration(max_poll_interval_ms=0)


@pytest.mark.parametrize("name", REPRODUCED)
def test_actual_configuration_reproduces_the_log(name):
    _history, result, rep, _observed = fitted(name)
    assert rep.score == 1.0, rep.diffs
    assert rep.generations_observed == rep.generations_replayed
    assert rep.mean_time_error_ms is not None and rep.mean_time_error_ms < 1000
    assert result.config.is_actual


def test_reproduction_says_when_the_history_cannot_express_the_night():
    # a partition count change is not a member event: the replay misses the generation it caused
    _history, _result, rep, _observed = fitted("eager-partition-change")
    assert rep.score < 1.0 and rep.diffs


# (scenario, alternative): every alternative on each scenario, but a stall that a longer session timeout
# outlasts (test_a_stall_reads_as_a_crash_and_restart)
PREDICTED = [(name, alt) for name in ["eager-rolling-bounce", "eager-crash", "eager-restart-dynamic", "eager-scale-out",
                                      "coop-scale-in", "static-rolling-bounce", "eager-pause-past-session",
                                      "eager-leader-rejoin"]
             for alt in sorted(ALTERNATIVES) if (name, alt) != ("eager-pause-past-session", "session=30000")]


@pytest.mark.parametrize(("name", "alternative"), PREDICTED)
def test_alternative_matches_the_simulator_run_under_it(name, alternative):
    config, change = ALTERNATIVES[alternative]
    data, _records = library(name)
    history, _result, rep, _observed = fitted(name)
    assert rep.score == 1.0
    direct = json.loads(json.dumps(data))
    direct.setdefault("defaults", {}).update(change)
    for c in direct["consumers"]:
        for key in change:
            c.pop(key, None)
    _run, truth, _rows = measure(Scenario.from_dict(direct))
    predicted = replay(history, config).costs
    assert predicted.rebalances == truth.rebalances
    assert predicted.members_stopped == truth.members_stopped
    assert predicted.partitions_moved == truth.partitions_moved
    assert predicted.static_replacements == truth.static_replacements
    assert predicted.unowned_partition_ms is not None and truth.unowned_partition_ms is not None
    assert abs(predicted.unowned_partition_ms - truth.unowned_partition_ms) <= max(
        3000, 0.1 * truth.unowned_partition_ms)
    assert predicted.longest_unowned_ms is not None and truth.longest_unowned_ms is not None
    assert abs(predicted.longest_unowned_ms - truth.longest_unowned_ms) <= 1500


def test_a_stall_reads_as_a_crash_and_restart():
    # the log cannot tell a process that stalled past its session timeout and came back from one that
    # crashed and was restarted: both expire and rejoin as a new member under the same client id. The
    # replay takes the crash, so under a session timeout longer than the stall it still expires
    # (the documented limit), where the stalled process would have stayed
    history = fitted("eager-pause-past-session")[0]
    assert [e.kind for e in history.events if e.kind != "start"] == ["crash"]
    assert replay(history, Configuration(session_timeout_ms=30000)).costs.rebalances == 2


def test_replay_is_deterministic():
    history = fitted("eager-rolling-bounce")[0]
    config = Configuration(assignor="cooperative-sticky", static=True)
    assert replay(history, config).costs == replay(history, config).costs


@cache
def real_groups() -> dict[str, list[Raw]]:
    by: dict[str, list[Raw]] = defaultdict(list)
    for r in pq.read_table(REAL_SAMPLE).to_pylist():
        ts = r["timestamp"]
        ms = ts if isinstance(ts, int) else int(ts.timestamp() * 1000)
        by[decode(r["key"], None).key.group].append((r["partition"], r["offset"], ms, r["key"], r["value"]))
    return dict(by)


# group -> (generations matched with Kafka's default heartbeat.interval.ms, the heartbeat fitted);
# every group then reproduces all its generations
REAL_FIT = {"grp-s01": (2, 2000), "grp-s02": (5, 3000), "grp-s05": (1, 2000), "grp-s07": (7, 3000)}


@pytest.mark.parametrize("group", sorted(REAL_FIT))
def test_real_broker_sample_reproduction(group):
    records = real_groups()[group]
    observed = list(audit_group(records, group_id=group))
    assumed = calibrate(derive_history(records, group_id=group), observed)[2]
    assert assumed.matched == REAL_FIT[group][0]
    history, result, rep = fit(lambda a: derive_history(records, group_id=group, assumptions=a), observed)
    assert rep.score == 1.0 and rep.generations_observed == rep.generations_replayed
    assert history.assumptions.heartbeat_interval_ms == REAL_FIT[group][1]
    assert result.history is history
    fitted_note = [n for n in history.notes if n.startswith("heartbeat.interval.ms")]
    assert bool(fitted_note) == (REAL_FIT[group][1] != 3000)


def test_costs_of_a_crash_follow_the_session_timeout():
    # c3 is killed at 30 s: its two partitions are unowned until its expiry's round reassigns them
    history = fitted("eager-crash")[0]
    for session in (10000, 30000):
        costs = replay(history, Configuration(session_timeout_ms=session)).costs
        assert costs.longest_unowned_ms is not None and costs.unowned_partition_ms is not None
        assert session - 3000 <= costs.longest_unowned_ms <= session + 3000
        assert costs.unowned_partition_ms >= 2 * (session - 3000)
        assert costs.rebalances == 2 and costs.members_stopped == 2  # c1 and c2 revoke everything (eager)


def test_a_poll_timeout_leaves_after_max_poll_interval():
    # read c3's disappearance as a poll timeout (a rule of Assumptions): it stalls at its last sign of
    # life, holds its partitions without processing them, and its heartbeat thread leaves the group
    # max.poll.interval.ms later
    _data, records = library("eager-crash")
    history = derive_history(records, assumptions=Assumptions(poll_timeout_fraction=1e-6))
    stall = [e for e in history.events if e.kind == "poll_timeout"]
    assert len(stall) == 1 and not [e for e in history.events if e.kind == "crash"]
    short = replay(history, Configuration(max_poll_interval_ms=20000))
    long = replay(history, Configuration(max_poll_interval_ms=60000))
    assert short.costs.rebalances == long.costs.rebalances == 2
    for result, interval in ((short, 20000), (long, 60000)):
        leave = [s for s in result.scenario.timeline if s.do == "close"]
        assert [s.at + result.scenario.start_ms for s in leave] == [stall[0].at_ms + interval]
        assert result.costs.longest_unowned_ms is not None
        assert interval <= result.costs.longest_unowned_ms <= interval + 3000


def test_a_configuration_with_the_actual_scenario_reuses_its_replay():
    history, actual, _rep, _observed = fitted("eager-rolling-bounce")
    same = replay(history, Configuration(assignor="range", static=False), known=[actual])
    assert same.run is actual.run and same.costs == actual.costs and same.config.label() == "range dynamic"
    other = replay(history, Configuration(assignor="cooperative-sticky"), known=[actual])
    assert other.run is not actual.run
    assert same.costs == replay(history, Configuration(assignor="range", static=False)).costs


def test_static_members_restarted_twice_without_committing_replay_from_the_rows():
    """A static group whose members are replaced twice in one generation and commit nothing between
    (the scale generator's rebalance storm): each old process stops after it started, so every
    consumer's starts and stops alternate and the replay runs (it refused "started twice" when a
    stop was dated at its process's own start)."""
    from coordinator_audit.core.sim.scale import GroupPlan, ScaleConfig, generate

    plan = GroupPlan("app-00085", 0, 3, (("orders-00085", 2),), True, False, True, 320146)
    config = ScaleConfig(records=480, groups=120, seed=5, duration_ms=3_600_000, offsets_partitions=1, max_members=3)
    records = [(b.partition[i], b.offset[i], b.timestamp_ms[i], b.key[i], b.value[i])
               for b in generate(config, plans=[plan]) for i in range(len(b))]
    rows = list(audit_group(records, group_id="app-00085"))
    assert sum(1 for r in rows if isinstance(r, RebalanceCauseRow) and r.cause == "static_member_replaced") >= 4
    history = _from_rows(rows)
    for consumer in history.consumers:
        starts = [e.kind == "start" for e in history.events
                  if e.consumer == consumer.name and e.kind in ("start", "close", "crash")]
        assert starts[0] and all(a != b for a, b in itertools.pairwise(starts)), (consumer.name, starts)
    replay(history, Configuration(assignor="cooperative-sticky", static=True))  # refused before: "started twice"


# scenarios whose every stretch starts at a commit (a revocation's or a close's own, KIP-429/KIP-345):
# the audited unowned time is what the simulated clients held to the millisecond's rounding
AUDITED_EXACT = ["coop-rolling-bounce", "coop-scale-out", "eager-rolling-bounce", "eager-steady",
                 "eager-two-join-one-round", "eager-restart-leave-then-join", "static-coop-rolling-bounce",
                 "static-rolling-bounce"]


@pytest.mark.parametrize("name", REPRODUCED)
def test_audited_costs_are_what_the_simulated_clients_did(name):
    """`audited_costs` (the what-if's actual row: what happened, from the audit's rows) against the
    simulator's own measure of the run that wrote the log: the same rebalances, moves and static
    replacements; the same unowned time where every stretch starts at a commit, more where one starts
    at an earlier commit than the loss (a crash: up to an auto-commit interval per partition) or never
    (a group that emptied and came back: its rejoin is not a rebalance's cost in the audit)."""
    from coordinator_audit.jobs.whatif import audited_costs

    data, records = library(name)
    rows = list(audit_group(records, group_id=data["group"]))
    audited = audited_costs(*(_of(rows, cls) for cls in (GenerationRow, AssignmentRow, OffsetCommitRow,
                                                          RebalanceCauseRow)))
    _run, truth, _rows = measure(Scenario.from_dict(data))
    assert (audited.rebalances, audited.partitions_moved, audited.static_replacements) == (
        truth.rebalances, truth.partitions_moved, truth.static_replacements)
    assert audited.unowned_partition_ms is not None and truth.unowned_partition_ms is not None
    if name in AUDITED_EXACT:
        assert abs(audited.unowned_partition_ms - truth.unowned_partition_ms) <= 200
    if name not in ("coop-subscription-change", "eager-empty-and-return", "static-fenced-duplicate"):
        assert audited.members_stopped == truth.members_stopped
        assert audited.unowned_partition_ms >= truth.unowned_partition_ms - 200


def _of(rows: list[AuditRow], cls: type) -> list[Any]:
    return [r for r in rows if isinstance(r, cls)]


def _restarts(down_ms: int, assignor: str, static: bool) -> Scenario:
    """4 consumers of 8 partitions (heartbeat 3 s, session 15 s), each closed and started again
    `down_ms` later in turn, 10 s apart, then c2 crashed."""
    consumers = [{"name": f"c{i}", "static": static, "topics": ["t"], "assignors": [assignor],
                  "session_timeout_ms": 15000, "heartbeat_interval_ms": 3000, "auto_commit_interval_ms": 500}
                 for i in (1, 2, 3, 4)]
    timeline: list[dict[str, Any]] = [{"at": 0, "do": "start", "consumers": ["c1", "c2", "c3", "c4"]}]
    for i in range(4):
        timeline += [{"at": 8000 + i * 10000, "do": "close", "consumer": f"c{i + 1}"},
                     {"at": 8000 + i * 10000 + down_ms, "do": "start", "consumer": f"c{i + 1}"}]
    timeline.append({"at": 48000, "do": "crash", "consumer": "c2"})
    return Scenario.from_dict({"name": "restarts", "group": f"restarts-{assignor}", "topics": {"t": 8},
                               "consumers": consumers, "timeline": timeline, "end_ms": 71000})


def test_the_broker_log_dates_a_restart_that_a_static_alternative_turns_into_downtime():
    """A dynamic eager group whose consumers restart 4 s after closing (longer than a heartbeat: the
    LeaveGroup's round is over when the new process joins, so its JoinGroup starts a round of its
    own). The log alone places each JoinGroup only within that round's last heartbeat interval,
    which under static membership is downtime; the broker's "Preparing to rebalance ... Adding new
    member" line (`generations.rebalance_started_at`, `broker_reason`) dates it, and the static
    alternative's unowned time is then the one the simulator gives under it directly."""
    down = 4000
    actual = _restarts(down, "range", False)
    rows = list(audit_group(raw(run_scenario(actual).records), group_id=actual.group))
    gens, assigned, commits, causes = (_of(rows, cls) for cls in (GenerationRow, AssignmentRow, OffsetCommitRow,
                                                                  RebalanceCauseRow))
    # the broker's account of each restart's two rounds: the LeaveGroup's (Kafka 4's wording) and the JoinGroup's
    starts: dict[tuple[int, int], BrokerStart] = {}
    seen: set[str] = set()
    before: dict[str, str] = {}
    expiry = max(g.source_offset for g in gens)  # the last round is c2's session expiry
    for g in sorted(gens, key=lambda g: g.source_offset):
        members = {r.member_id: r.client_host for r in assigned if r.source_offset == g.source_offset}
        key = (g.source_partition, g.source_offset)
        for member_id, host in before.items():
            if member_id not in members and g.source_offset != expiry:
                i = int(host.rsplit(".", 1)[1]) - 1
                starts[key] = BrokerStart(actual.start_ms + 8000 + i * 10000,
                                          f"explicit `LeaveGroup` request for ({member_id}) members.")
        for member_id, host in members.items():
            if member_id not in seen and g.generation_id > 1:
                i = int(host.rsplit(".", 1)[1]) - 1
                starts[key] = BrokerStart(actual.start_ms + 8000 + i * 10000 + down,
                                          f"Adding new member {member_id} with group instance id null; client reason: "
                                          f"need to re-join with the given member-id: {member_id}")
        seen |= members.keys()
        before = members
    assert len(starts) == 8
    alternative = Configuration(assignor="cooperative-sticky", static=True)
    _run, truth, _rows = measure(_restarts(down, "cooperative-sticky", True))
    assert truth.unowned_partition_ms is not None
    for given, tolerance in ((starts, 0.01), (None, 0.2)):
        history, result, rep = fit(lambda a, given=given: derive_history_from_rows(
            gens, assigned, commits, causes, assumptions=a, broker_starts=given), [*gens, *assigned, *causes])
        assert rep.score == 1.0
        restarted = [e for e in history.events if e.kind == "start" and (e.generation_id or 0) > 1]
        closed = [e for e in history.events if e.kind == "close"]
        assert len(restarted) == len(closed) == 4
        assert all(e.basis == BROKER_LOG for e in restarted + closed) == (given is not None)
        predicted = replay(history, alternative, known=[result]).costs
        assert predicted.rebalances == truth.rebalances == 2
        assert predicted.unowned_partition_ms is not None
        assert abs(predicted.unowned_partition_ms - truth.unowned_partition_ms) <= tolerance * truth.unowned_partition_ms


def test_real_broker_sample_with_its_broker_log():
    """The real Kafka 3.9 sample with its server.log, as the job's what-if takes it (`group_rows`, the
    generations' broker columns as `BrokerStart`s): every group still reproduced in every generation.
    grp-s02's second consumer is dated by its JoinGroup's "Preparing to rebalance" line and both
    closes by their LeaveGroup's; grp-s01, whose two members left in one round, reproduces only
    without the broker's dates (the simulated survivors' heartbeats do not fall when the real ones
    did), and says so."""
    import io

    from coordinator_audit.core.broker_log import broker_account, read_server_log
    from coordinator_audit.jobs import whatif

    account = {(b.group_id, b.generation_id): b for b in broker_account(read_server_log(
        REAL_SAMPLE.with_suffix(".server.log")))}
    args = whatif.parse_args(["--tables", "(in memory)", "--no-write"])
    notes = {}
    for group, records in real_groups().items():
        rows = list(audit_group(records, group_id=group))
        gens, assigned, commits, causes = (_of(rows, cls) for cls in (GenerationRow, AssignmentRow, OffsetCommitRow,
                                                                      RebalanceCauseRow))
        starts = {(g.source_partition, g.source_offset): BrokerStart(b.rebalance_started_at, b.broker_reason)
                  for g in gens if (b := account.get((group, g.generation_id))) is not None
                  and b.rebalance_started_at is not None and b.broker_reason}
        assert starts, group
        out = whatif.group_rows("(in memory)", group, gens, assigned, commits, causes, args, [], io.StringIO(), 0,
                                starts)
        assert out[0]["reproduction_score"] == 1.0, group
        notes[group] = out[0]["assumptions"]
        if group == "grp-s02":
            history = derive_history_from_rows(gens, assigned, commits, causes, broker_starts=starts)
            dated = [(e.kind, e.consumer.split("@")[0]) for e in history.events if e.basis == BROKER_LOG]
            assert sorted(dated) == [("close", "grp-s02-c1"), ("close", "grp-s02-c2"), ("start", "grp-s02-c2")]
    assert "the broker's log's dates of joins and leaves not used" in notes["grp-s01"]
    assert all("broker's log" not in n for g, n in notes.items() if g != "grp-s01")

class _ToTheEnd(_MeasuringRunner):
    """The measuring runner without its early stop: every run goes on to the scenario's end."""

    def _settled(self, end: int) -> bool:
        return False


def _kept(records: Any, group: str) -> list[AuditRow]:
    """The audit rows a replay reads: generations, assignments and causes."""
    return [r for r in audit_group(raw(records), group_id=group)
            if isinstance(r, GenerationRow | AssignmentRow | RebalanceCauseRow)]


def _settled_cases() -> list[tuple[str, str]]:
    return [(name, alt) for name in REPRODUCED for alt in ("actual", "cooperative-sticky+static")]


@pytest.mark.parametrize(("name", "alternative"), _settled_cases())
def test_a_replay_that_settles_stops_with_what_running_on_gives(name, alternative):
    # a replay stops once nothing but heartbeats and offset commits can happen: its log is a prefix of
    # the simulator's own run of the scenario to its end, which adds offset commits only after it; the
    # costs are those of measuring on to the end, and the audit reads the same generations,
    # assignments and causes from both logs
    history = fitted(name)[0]
    config = ALTERNATIVES[alternative][0] if alternative != "actual" else Configuration()
    scenario, stalls = _plan(history, config)
    runner = _MeasuringRunner(scenario, stalls)
    settled = runner.run().records
    direct = run_scenario(scenario).records
    assert direct[:len(settled)] == settled
    assert all(isinstance(decode(r.key, r.value).key, OffsetCommitKey) for r in direct[len(settled):])
    full = _ToTheEnd(scenario, stalls)
    full.run()
    assert (runner.unowned, runner.longest, runner.moved, runner.stopped) == (
        full.unowned, full.longest, full.moved, full.stopped)
    assert _kept(settled, scenario.group) == _kept(direct, scenario.group)


def test_a_stalled_consumer_settles_after_its_stall():
    # a poll timeout's stall ends with the heartbeat thread's LeaveGroup: the replay runs past it
    _data, records = library("eager-crash")
    history = derive_history(records, assumptions=Assumptions(poll_timeout_fraction=1e-6))
    scenario, stalls = _plan(history, Configuration(max_poll_interval_ms=20000))
    assert stalls
    runner = _MeasuringRunner(scenario, stalls)
    settled = runner.run().records
    direct = run_scenario(scenario).records
    assert settled[-1].timestamp_ms >= stalls[0][2] and direct[:len(settled)] == settled
    full = _ToTheEnd(scenario, stalls)
    full.run()
    assert (runner.unowned, runner.longest, runner.moved) == (full.unowned, full.longest, full.moved)
    assert _kept(settled, scenario.group) == _kept(direct, scenario.group)
