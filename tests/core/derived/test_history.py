"""`coordinator_audit.udfs.history.derive_group` on small inline histories: the eager join-phase gap and its evidence,
cooperative revocation rounds, departed owners, Empty groups, static replacements, aborted join
phases, rows an earlier run left open, and the health figures."""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import coordinator_audit.udfs.history
from coordinator_audit.core.audit import AssignmentRun, GroupAuditor, table_of
from coordinator_audit.core.sim.runner import run_scenario
from coordinator_audit.core.sim.scenario import Scenario
from coordinator_audit.udfs.history import (
    BASE_INPUTS,
    DAY_MS,
    CommitTimes,
    OwnershipRow,
    OwnershipRun,
    commit_times,
    derive_group,
    flapping_score,
    health_status,
)

G = "g"


def gen(generation_id: int, state_ts: int, record_ts: int, *, offset: int, members: int = 2, state: str = "Stable",
        protocol: str | None = "EAGER", ended_at: int | None = None, missing: int = 0, **extra: Any) -> dict[str, Any]:
    return {"group_id": G, "generation_id": generation_id, "state": state, "state_timestamp": state_ts,
            "record_timestamp": record_ts, "ended_at": ended_at, "ended_by_offset": None, "member_count": members,
            "missing_generations": missing, "rebalance_protocol": protocol,
            "protocol_name": "cooperative-sticky" if protocol == "COOPERATIVE" else "range",
            "source_partition": 7, "source_offset": offset, **extra}


def asg(generation_id: int, member: str, partition: int, valid_from: int, valid_to: int | None, *,
        instance: str | None = None, offset: int = 0) -> dict[str, Any]:
    return {"group_id": G, "generation_id": generation_id, "member_id": member, "group_instance_id": instance,
            "client_id": member.split("-")[0], "client_host": "/10.0.0.1", "topic": "t", "partition": partition,
            "valid_from": valid_from, "valid_to": valid_to, "source_offset": offset}


def commit(partition: int, last: int, generation_id: int | None = None) -> CommitTimes:
    """An offset_commits row of topic t as the derivation reads it (`generation_id`: what the row
    says, which the derivation does not read: it places a commit by its time)."""
    return commit_times([{"group_id": G, "generation_id": generation_id, "topic": "t", "partition": partition,
                          "first_commit_timestamp": last - 100, "last_commit_timestamp": last}])[0]


def cause(generation_id: int, name: str, member: str | None = None) -> dict[str, Any]:
    return {"group_id": G, "generation_id": generation_id, "cause": name, "member_id": member, "is_primary": True}


def spans(rows: list[Any], partition: int) -> list[tuple[Any, ...]]:
    return [(r.valid_from, r.valid_to, r.member_id if r.owned else r.unowned_reason, r.from_evidence, r.to_evidence)
            for r in rows if r.partition == partition]


# gen 1 (A: p0, B: p1) written at 1_000; gen 2 (join completed 5_000, written 5_040: A gets both)
EAGER_GENS = [gen(1, 900, 1_000, offset=10, ended_at=5_040), gen(2, 5_000, 5_040, offset=20, members=1)]
EAGER_ASGS = [asg(1, "a-1", 0, 1_000, 5_040, offset=10), asg(1, "b-1", 1, 1_000, 5_040, offset=10),
              asg(2, "a-1", 0, 5_040, None, offset=20), asg(2, "a-1", 1, 5_040, None, offset=20)]


def test_eager_join_phase_gap_starts_at_the_old_owners_last_commit() -> None:
    own, reb, _ = derive_group(G, generations=EAGER_GENS, assignments=EAGER_ASGS,
                               commits=[commit(0, 4_200, 1), commit(1, 3_000, 1)],
                               causes=[cause(2, "member_left_or_expired", "b-1")])
    assert spans(own, 0) == [(1_000, 4_200, "a-1", "record", "last_commit"),
                             (4_200, 5_040, "eager_join_phase", "last_commit", "record"),
                             (5_040, None, "a-1", "record", None)]
    # b-1 left: its partition waited from its last commit, as an owner that departed
    assert spans(own, 1) == [(1_000, 3_000, "b-1", "record", "last_commit"),
                             (3_000, 5_040, "owner_departed", "last_commit", "record"),
                             (5_040, None, "a-1", "record", None)]
    gap = next(r for r in own if r.partition == 0 and not r.owned)
    assert (gap.from_exact, gap.to_exact, gap.to_source_offset, gap.generation_id, gap.duration_ms) == (
        False, True, 20, 2, 840)
    r = reb[-1]
    # the join phase began before a-1 (which stayed) committed and revoked: its final commit
    assert (r.generation_id, r.started_at, r.start_evidence, r.start_exact, r.join_completed_at, r.ended_at) == (
        2, 4_200, "last_commit", False, 5_000, 5_040)
    assert (r.duration_ms, r.join_ms, r.trigger, r.trigger_member_id) == (840, 800, "member_left_or_expired", "b-1")
    assert (r.members_before, r.members_after, r.members_joined, r.members_left, r.partitions_moved) == (2, 1, 0, 1, 1)
    assert (r.partitions_unowned, r.unowned_ms_sum, r.unowned_ms_max) == (2, 840 + 2_040, 2_040)


def test_only_departed_members_commits_give_the_latest_of_them() -> None:
    gens = [EAGER_GENS[0], {**EAGER_GENS[1], "state": "Empty", "member_count": 0}]
    _, reb, _ = derive_group(G, generations=gens, assignments=EAGER_ASGS[:2],
                             commits=[commit(0, 4_200, 1), commit(1, 3_000, 1)])
    assert (reb[-1].outcome, reb[-1].started_at, reb[-1].start_evidence) == ("emptied", 4_200, "last_commit")


def test_without_commits_the_gap_is_only_the_proven_sync_phase_and_marked_inferred() -> None:
    own, reb, _ = derive_group(G, generations=EAGER_GENS, assignments=EAGER_ASGS)
    assert spans(own, 0)[:2] == [(1_000, 5_000, "a-1", "record", "join_completed_latest"),
                                 (5_000, 5_040, "eager_join_phase", "join_completed_latest", "record")]
    assert (reb[-1].started_at, reb[-1].start_evidence) == (5_000, "join_completed_latest")


def test_the_brokers_rebalance_start_refines_only_what_the_commits_leave_open() -> None:
    gens = [EAGER_GENS[0], {**EAGER_GENS[1], "rebalance_started_at": 4_000}]
    departed = [cause(2, "member_left_or_expired", "b-1")]
    own, reb, _ = derive_group(G, generations=gens, assignments=EAGER_ASGS,
                               commits=[commit(0, 4_500, 1), commit(1, 3_000, 1)], causes=departed)
    without, _, _ = derive_group(G, generations=EAGER_GENS, assignments=EAGER_ASGS,
                                 commits=[commit(0, 4_500, 1), commit(1, 3_000, 1)], causes=departed)
    # p1's owner committed last before the broker's start (it crashed; the broker noticed a session
    # later): unowned from its last commit, as without the broker's log
    assert spans(own, 1)[1] == (3_000, 5_040, "owner_departed", "last_commit", "record")
    assert spans(own, 1) == spans(without, 1)
    # p0's owner committed after the start: it still held p0 then
    assert spans(own, 0)[1] == (4_500, 5_040, "eager_join_phase", "last_commit", "record")
    # the join phase itself began at the broker's line
    assert (reb[-1].started_at, reb[-1].start_evidence, reb[-1].duration_ms) == (4_000, "broker_rebalance_start", 1_040)
    # an owner with no commit in its generation: the broker's start bounds its revocation (the log
    # alone says only the latest possible moment)
    own, _, _ = derive_group(G, generations=gens, assignments=EAGER_ASGS, commits=[commit(0, 4_500, 1)])
    assert spans(own, 1)[:2] == [(1_000, 4_000, "b-1", "record", "broker_rebalance_start"),
                                 (4_000, 5_040, "eager_join_phase", "broker_rebalance_start", "record")]


def test_cooperative_revocation_round_and_no_gap_for_kept_partitions() -> None:
    gens = [gen(1, 900, 1_000, offset=1, members=1, protocol="COOPERATIVE"),
            gen(2, 2_000, 2_010, offset=2, protocol="COOPERATIVE"),
            gen(3, 2_050, 2_060, offset=3, protocol="COOPERATIVE")]
    asgs = [asg(1, "a", 0, 1_000, 2_010), asg(1, "a", 1, 1_000, 2_010),
            asg(2, "a", 0, 2_010, 2_060),                     # p1 revoked from a in generation 2
            asg(3, "a", 0, 2_060, None), asg(3, "b", 1, 2_060, None)]
    own, reb, _ = derive_group(G, generations=gens, assignments=asgs, commits=[commit(0, 1_900), commit(1, 1_900)],
                               causes=[cause(2, "member_joined", "b"), cause(3, "cooperative_follow_up")])
    assert spans(own, 0) == [(1_000, 2_010, "a", "record", "record"), (2_010, 2_060, "a", "record", "record"),
                             (2_060, None, "a", "record", None)]
    assert spans(own, 1) == [(1_000, 2_010, "a", "record", "record"),
                             (2_010, 2_060, "cooperative_revocation", "record", "record"),
                             (2_060, None, "b", "record", None)]
    by_gen = {r.generation_id: r for r in reb}
    assert (by_gen[2].partitions_unowned, by_gen[2].unowned_ms_sum, by_gen[2].partitions_moved) == (1, 50, 0)
    assert (by_gen[3].partitions_moved, by_gen[3].members_joined, by_gen[3].trigger) == (1, 1, "cooperative_follow_up")


def test_group_emptied_then_deleted() -> None:
    gens = [gen(1, 900, 1_000, offset=1, members=1), gen(2, 3_000, 3_001, offset=2, members=0, state="Empty",
                                                        protocol=None, ended_at=9_000)]
    own, reb, _ = derive_group(G, generations=gens, assignments=[asg(1, "a", 0, 1_000, 3_001)],
                               commits=[commit(0, 2_500)])
    assert spans(own, 0) == [(1_000, 2_500, "a", "record", "last_commit"),
                             (2_500, 3_000, "owner_departed", "last_commit", "group_emptied"),
                             (3_000, 9_000, "group_empty", "group_emptied", "record")]
    assert [(r.generation_id, r.outcome) for r in reb] == [(1, "completed"), (2, "emptied")]


def test_static_replacement_keeps_ownership_without_a_gap() -> None:
    gens = [gen(3, 900, 1_000, offset=1, members=1), gen(3, 900, 2_000, offset=2, members=1)]
    asgs = [asg(3, "s-old", 0, 1_000, 2_000, instance="s"), asg(3, "s-new", 0, 2_000, None, instance="s", offset=2)]
    own, reb, health = derive_group(G, generations=gens, assignments=asgs)
    assert spans(own, 0) == [(1_000, 2_000, "s-old", "record", "record"), (2_000, None, "s-new", "record", None)]
    assert [r.generation_id for r in reb] == [3]  # the rewrite is no join phase
    assert (health[0].static_members, health[0].dynamic_members) == (1, 0)


def test_aborted_join_phases_are_rows_without_times() -> None:
    gens = [gen(1, 900, 1_000, offset=1), gen(4, 5_000, 5_010, offset=2, missing=2)]
    _, reb, health = derive_group(G, generations=gens, assignments=[])
    aborted = [(r.generation_id, r.outcome, r.started_at, r.observed_at) for r in reb if r.outcome == "aborted"]
    assert aborted == [(2, "aborted", None, 5_010), (3, "aborted", None, 5_010)]
    assert (health[0].rebalances, health[0].aborted_rebalances) == (2, 2)


def test_rows_an_earlier_run_left_open_are_closed_by_the_next_record() -> None:
    open_gens = [{**EAGER_GENS[0], "ended_at": None}, EAGER_GENS[1]]
    open_asgs = [{**a, "valid_to": None} if a["generation_id"] == 1 else a for a in EAGER_ASGS]
    assert derive_group(G, generations=open_gens, assignments=open_asgs) == derive_group(
        G, generations=EAGER_GENS, assignments=EAGER_ASGS)


def test_an_assignment_without_its_generation_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match=r"group 'g': assignment of t-0 to 'a' in generation 9"):
        derive_group(G, generations=EAGER_GENS, assignments=[asg(9, "a", 0, 1_000, None)])


def test_health_per_day_and_flapping_score() -> None:
    day0 = 20 * DAY_MS
    gens = [gen(i, day0 + i * 60_000 - 30_000, day0 + i * 60_000, offset=i, members=1,
                ended_at=day0 + (i + 1) * 60_000) for i in range(1, 9)]
    asgs = [asg(i, f"m{i}", 0, day0 + i * 60_000, day0 + (i + 1) * 60_000) for i in range(1, 9)]
    viol = [{"group_id": G, "generation_id": 2, "kind": "duplicate_assignment", "record_timestamp": day0 + 120_000}]
    _, _, health = derive_group(G, generations=gens, assignments=asgs, violations=viol,
                                commits=[commit(0, day0 + DAY_MS + 5)])
    assert [h.day for h in health] == ["1970-01-21", "1970-01-22"]
    h = health[0]
    assert (h.rebalances, h.peak_hour_rebalances, h.violations, h.partitions, h.dynamic_members) == (8, 8, 1, 1, 8)
    assert h.members_joined == 8 and h.members_left == 7  # the first generation brought m1
    assert h.flapping_score == pytest.approx(8 / 6, abs=1e-3) and h.status == "flapping"
    assert health[1].rebalances == 0 and health[1].last_commit_at == day0 + DAY_MS + 5


def test_score_thresholds() -> None:
    assert flapping_score(peak_hour_rebalances=3, rebalancing_ms=0, unowned_partition_ms=0, partitions=1,
                          observed_ms=DAY_MS) == 0.5
    assert flapping_score(peak_hour_rebalances=0, rebalancing_ms=DAY_MS // 10, unowned_partition_ms=0, partitions=1,
                          observed_ms=DAY_MS) == 1.0
    assert flapping_score(peak_hour_rebalances=0, rebalancing_ms=0, unowned_partition_ms=DAY_MS // 10, partitions=2,
                          observed_ms=DAY_MS) == 1.0
    assert [health_status(s) for s in (0.2, 0.5, 1.0)] == ["healthy", "unstable", "flapping"]


def test_docs_document_every_derived_column_and_command() -> None:
    import dataclasses
    import re
    from pathlib import Path

    from coordinator_audit.udfs.history import HealthRow, OwnershipRow, RebalanceRow

    root = Path(__file__).resolve().parents[3]
    readme = (root / "README.md").read_text(encoding="utf-8")
    tables = (root / "docs" / "tables.md").read_text(encoding="utf-8")
    for table, cls in (("partition_ownership", OwnershipRow), ("rebalances", RebalanceRow),
                       ("group_health", HealthRow)):
        assert f"| `{table}` |" in readme, f"README lists table {table}"
        parts = tables.split(f"**`{table}`**", 1)
        assert len(parts) == 2, f"docs/tables.md documents table {table}"
        text = parts[1].split("**`", 1)[0]
        for field in dataclasses.fields(cls):
            assert re.search(rf"\b{field.name}\b", text), f"docs/tables.md: column {table}.{field.name} is not described"
    for command in ("coordinator-audit query --tables out/delta owner", "coordinator-audit query --tables out/delta timeline",
                    "coordinator-audit query --tables out/delta worst", "coordinator-audit report --tables out/delta --out report.html"):
        assert command in readme
    assert (Path(__file__).resolve().parents[3] / "docs" / "report-timeline.png").is_file()


# ------------------------------------------------------------------------------------------------
# runs (AssignedRun): the replay's assignments as runs give the same rows, their common ones as OwnershipRuns


def _as_runs(assignments: list[dict[str, Any]]) -> list[Any]:
    """The assignments as `AssignedRun`s: one per set of rows that have every column but topic and
    partition in common (in the order of its first row), as the audit's `AssignmentRun` holds a
    member's rows of one interval."""
    runs: dict[tuple[Any, ...], tuple[dict[str, Any], dict[str, list[int]]]] = {}
    for a in assignments:
        shared = tuple(sorted((k, v) for k, v in a.items() if k not in ("topic", "partition")))
        _, topics = runs.setdefault(shared, (a, {}))
        topics.setdefault(a["topic"], []).append(a["partition"])
    return [SimpleNamespace(**{c: first.get(c) for c in BASE_INPUTS["assignments"] if c not in ("topic", "partition")},
                            groups=tuple((t, tuple(ps)) for t, ps in topics.items())) for first, topics in runs.values()]


def _same_with_runs(gens: list[dict[str, Any]], asgs: list[dict[str, Any]], runs: list[Any] | None = None,
                    **inputs: Any) -> list[Any]:
    """derive_group of `asgs` given as runs (`runs`, else `_as_runs`): the same rows as given as
    dicts (the ownership rows in another order, those of runs as `OwnershipRun`s); its ownership
    rows and runs."""
    plain = derive_group(G, generations=gens, assignments=asgs, **inputs)
    got = derive_group(G, generations=gens, assignments=_as_runs(asgs) if runs is None else runs, **inputs)
    expanded = [r for o in got[0] for r in (o.rows() if isinstance(o, OwnershipRun) else [o])]
    assert all(isinstance(o, OwnershipRow) for o in plain[0])
    assert sorted(map(repr, expanded)) == sorted(map(repr, plain[0]))
    assert got[1:] == plain[1:]
    return got[0]


def test_marked_runs_give_the_same_rows_on_the_inline_histories() -> None:
    # every partition had two owners (and an eager gap between them): rows, no run
    got = _same_with_runs(EAGER_GENS, EAGER_ASGS, commits=[commit(0, 4_000), commit(1, 4_500)])
    assert not any(isinstance(o, OwnershipRun) for o in got)
    gens = [gen(1, 900, 1_000, offset=10, members=1, ended_at=3_001), gen(2, 3_000, 3_001, offset=20, members=0,
                                                                          state="Empty")]
    _same_with_runs(gens, [asg(1, "a", 0, 1_000, 3_001)])
    # one owner each, never unowned: one run of five, open
    got = _same_with_runs(EAGER_GENS[:1], [asg(1, "a-1", p, 1_000, None, instance="i-1") for p in range(5)])
    assert [(len(o.keys), o.valid_to) for o in got if isinstance(o, OwnershipRun)] == [(5, None)]


@pytest.mark.parametrize("name", sorted(p.stem for p in (Path(__file__).resolve().parents[3] / "coordinator_audit" / "core" / "sim"
                                                         / "scenarios").glob("*.json")))
def test_marked_runs_give_the_same_rows_on_the_simulator_library(name: str) -> None:
    """Every library scenario's audit, derived from its assignment rows and from the runs an auditor
    with `assignment_runs=True` emits (the replay's input), and from those rows as `_as_runs`."""
    scenario = Scenario.load(Path(__file__).resolve().parents[3] / "coordinator_audit" / "core" / "sim" / "scenarios"
                             / f"{name}.json")
    records = run_scenario(scenario).records
    auditor, with_runs = GroupAuditor(), GroupAuditor(assignment_runs=True)
    rows = list(auditor.feed(records)) + auditor.finish()
    runs = [r for r in [*with_runs.feed(records), *with_runs.finish()] if isinstance(r, AssignmentRun)]
    tables: dict[str, list[Any]] = {table: [] for table in BASE_INPUTS}
    for row in rows:
        table = table_of(row)
        if table in tables:
            tables[table].append({c: getattr(row, c) for c in BASE_INPUTS[table]})
    if not tables["generations"]:
        return
    inputs = {"commits": commit_times(tables["offset_commits"]), "causes": tables["rebalance_causes"],
              "violations": tables["violations"]}
    assert sum(run.size for run in runs) == len(tables["assignments"])
    _same_with_runs(tables["generations"], tables["assignments"], runs, **inputs)
    _same_with_runs(tables["generations"], tables["assignments"], **inputs)


# ------------------------------------------------------------------------------------------------
# the ownership rows' shorter way for groups whose every partition had one assignment (ONE_OWNER_PATH)


def _both_ways(monkeypatch: pytest.MonkeyPatch, gens: list[dict[str, Any]], assignments: list[Any],
               **inputs: Any) -> Any:
    """derive_group with and without `ONE_OWNER_PATH`: the same rows in the same order."""
    fast = derive_group(G, generations=gens, assignments=assignments, **inputs)
    monkeypatch.setattr(coordinator_audit.udfs.history, "ONE_OWNER_PATH", False)
    general = derive_group(G, generations=gens, assignments=assignments, **inputs)
    monkeypatch.undo()
    assert list(map(repr, fast[0])) == list(map(repr, general[0]))
    assert fast[1:] == general[1:]
    return fast


def _random_history(rng: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """Up to four generations (eager or cooperative, some Empty, some rewriting the same generation),
    each Stable one assigning a random few of six partitions to up to three members, with commits and
    departures."""
    n = rng.randint(1, 4)
    times = [1_000]
    for _ in range(n):
        times.append(times[-1] + rng.randint(1, 5_000))
    gens, asgs, commits, causes = [], [], [], []
    generation_id = 0
    for i in range(n):
        generation_id += 0 if i and rng.random() < 0.15 else 1
        state = "Empty" if rng.random() < 0.25 else "Stable"
        t, nxt = times[i], times[i + 1] if i + 1 < n else None
        gens.append(gen(generation_id, t - rng.randint(0, 60), t, offset=10 * (i + 1), state=state,
                        protocol=rng.choice(["EAGER", "COOPERATIVE"]), members=0 if state == "Empty" else 2))
        if state == "Empty":
            continue
        members = rng.sample(["a-1", "b-1", "c-1"], rng.randint(1, 3))
        for p in rng.sample(range(6), rng.randint(0, 6)):
            member = rng.choice(members)
            asgs.append(asg(generation_id, member, p, t, nxt, offset=10 * (i + 1),
                            instance="i-" + member if member == "c-1" else None))
            if rng.random() < 0.5:
                commits.append(commit(p, t + rng.randint(0, max(1, (nxt or t + 100) - t - 1))))
        if rng.random() < 0.3:
            causes.append(cause(generation_id, "member_left_or_expired", rng.choice(members)))
    return gens, asgs, {"commits": commits, "causes": causes}


def test_one_owner_path_gives_the_general_rows_on_random_histories(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(18)
    single = 0
    for _ in range(400):
        gens, asgs, inputs = _random_history(rng)
        keys = [(a["topic"], a["partition"]) for a in asgs]
        single += len(set(keys)) == len(keys)
        _both_ways(monkeypatch, gens, asgs, **inputs)
        _both_ways(monkeypatch, gens, _as_runs(asgs), **inputs)
    assert 100 < single < 400  # both ways are taken


def test_one_owner_path_gives_the_general_rows_on_the_inline_histories(monkeypatch: pytest.MonkeyPatch) -> None:
    emptied = [gen(1, 900, 1_000, offset=10, members=1), gen(2, 3_000, 3_001, offset=20, members=0, state="Empty")]
    for gens, asgs in [(EAGER_GENS, EAGER_ASGS), (emptied, [asg(1, "a", 0, 1_000, 3_001), asg(1, "b", 1, 1_000, 3_001)]),
                       (EAGER_GENS[:1], [asg(1, "a-1", p, 1_000, None, instance="i-1") for p in range(5)])]:
        for given in (asgs, _as_runs(asgs)):
            _both_ways(monkeypatch, gens, given, commits=[commit(0, 900), commit(1, 950)])
