"""The audit against the simulator's ground truth, on every scenario of the library, written by
both coordinators (Java, Kafka 4.x: the default; Scala, <= 3.x), and on random scenarios.

Each scenario is run by the simulator (the coordinator's live path, simulated consumers), its
`__consumer_offsets` log is audited from the bytes alone, and the rows are scored against the
truth: `audit_scoring.score` (the primary cause is one of the truth's causes; clean scenarios
yield no violation; every planted violation is found) and `audit_scoring.score_primary` (the
primary cause and the member it names equal the truth's primary, generation by generation: >= 99%
per flavour on the library). Every audit also checks that each generation has exactly one primary
cause (`rows_by_table`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from coordinator_audit.core.audit import AssignmentRow, AssignmentRun, GroupAuditor
from coordinator_audit.core.sim.randomized import random_scenario
from coordinator_audit.core.sim.runner import run_scenario
from coordinator_audit.core.sim.scenario import FLAVORS, Scenario

from .audit_builders import rows_by_table
from .audit_scoring import PrimaryScore, Score, score, score_primary

SCENARIO_DIR = Path(__file__).resolve().parents[3] / "coordinator_audit" / "core" / "sim" / "scenarios"
SCENARIOS = sorted(p.stem for p in SCENARIO_DIR.glob("*.json"))

RANDOM_SEEDS = range(60)

_cache: dict[tuple[str, str], tuple[Any, dict[str, list[Any]], GroupAuditor, Score, PrimaryScore]] = {}


def _audit(scenario: Scenario) -> tuple[Any, dict[str, list[Any]], GroupAuditor, Score, PrimaryScore]:
    result = run_scenario(scenario)
    auditor = GroupAuditor()
    rows = list(auditor.feed(result.records)) + auditor.finish()
    truth = result.truth
    s = score(rows, truth.causes_by_generation(), [(v.generation_id, v.kind) for v in truth.violations])
    return result, rows_by_table(rows), auditor, s, score_primary(scenario.name, rows, truth.causes)


def audited(name: str, flavor: str = "java") -> tuple[Any, dict[str, list[Any]], GroupAuditor, Score, PrimaryScore]:
    """(simulator result, audit tables, auditor, score, primary score) of one library scenario as
    written by the `flavor` coordinator, computed once."""
    if (name, flavor) not in _cache:
        _cache[(name, flavor)] = _audit(replace(Scenario.load(SCENARIO_DIR / f"{name}.json"), flavor=flavor))
    return _cache[(name, flavor)]


def test_library_is_large_enough() -> None:
    assert len(SCENARIOS) >= 30


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_audit(name: str, flavor: str) -> None:
    result, tables, auditor, s, _ = audited(name, flavor)
    c = auditor.counts
    assert c.records_in == len(result.records) == c.duplicates + c.replayed + c.quarantined + c.skipped_other_type
    assert tables["quarantine"] == []
    planted = {(v.generation_id, v.kind) for v in result.truth.violations}
    found = {(v.generation_id, v.kind) for v in tables["violations"]}
    assert planted <= found, f"missed {sorted(planted - found)}\n{s.report()}"
    if "violation" not in result.scenario.tags and not planted:
        assert found == set(), f"false violations on a clean scenario: {sorted(found)}"
    assert s.agree == s.generations, s.report() + f"\nmismatches: {s.mismatches}"


def test_library_agreement(capsys) -> None:
    """Over the whole library: >= 95% of generations agree, clean scenarios yield no violation at all,
    and no scenario yields a violation its truth does not list."""
    total = Score()
    for name in SCENARIOS:
        total.add(audited(name)[3])
        total.add(audited(name, "scala")[3])
    with capsys.disabled():
        print(f"\nsimulator library ({len(SCENARIOS)} scenarios):\n{total.report()}")
        for m in total.mismatches:
            print(f"  set difference at generation {m[0]}: truth {m[1]} audit {m[2]} (primary {m[3]})")
    assert total.generations >= 100
    assert total.agreement >= 0.95
    clean = [name for name in SCENARIOS
             if "violation" not in audited(name)[0].scenario.tags and not audited(name)[0].truth.violations]
    assert len(clean) >= 25
    false_on_clean = {name: audited(name)[1]["violations"] for name in clean if audited(name)[1]["violations"]}
    assert false_on_clean == {}
    false_anywhere = {k: n["fp"] for k, n in total.per_kind.items() if n["fp"]}
    assert false_anywhere == {}, total.report()


def test_truth_has_one_primary_per_generation() -> None:
    for name in SCENARIOS:
        for flavor in FLAVORS:
            truth = audited(name, flavor)[0].truth
            primaries: dict[tuple[int, int], int] = {}
            life = 0
            for c in truth.causes:
                if c.is_primary:
                    primaries[(life, c.generation_id)] = primaries.get((life, c.generation_id), 0) + 1
                life += c.cause == "group_deleted"
            gens = {g.generation_id for g in truth.generations if g.kind != "tombstone"}
            assert all(n == 1 for n in primaries.values()), (name, flavor, primaries)
            assert gens <= {g for _, g in primaries}, (name, flavor)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_primary_cause_and_member_agree_with_the_truth(flavor: str, capsys) -> None:
    """The bar: on the library (which has a scenario for each shape the issue names), the
    primary cause and the member it names agree with the truth on >= 99% of generations, per flavour."""
    total = PrimaryScore()
    for name in SCENARIOS:
        total.add(audited(name, flavor)[4])
    with capsys.disabled():
        print(f"\nsimulator library, {flavor} coordinator ({len(SCENARIOS)} scenarios): {total.report()}")
    assert total.generations >= 110
    assert total.agreement >= 0.99, total.report()


@pytest.mark.parametrize("name", ["eager-restart-leave-then-join", "eager-leader-rejoin-during-expiry",
                                  "eager-two-join-one-round", "coop-emptied-then-deleted", "eager-empty-and-return",
                                  "eager-leader-rejoin", "coop-scale-out"])
@pytest.mark.parametrize("flavor", FLAVORS)
def test_issue_shapes_agree_exactly(name: str, flavor: str) -> None:
    s = audited(name, flavor)[4]
    assert s.agree == s.generations, s.report()


@pytest.mark.parametrize("flavor", FLAVORS)
def test_random_scenarios_agreement(flavor: str, capsys) -> None:
    """Random scenarios (`coordinator_audit.core.sim.randomized`): histories nobody shaped for the audit,
    including rounds where a crash, a restart and a rejoin overlap within a heartbeat, which the log
    cannot order. The figure is printed; the floor guards against regressions."""
    total = PrimaryScore()
    for seed in RANDOM_SEEDS:
        total.add(_audit(random_scenario(seed, flavor=flavor))[4])
    with capsys.disabled():
        print(f"\nrandom scenarios, {flavor} coordinator ({len(RANDOM_SEEDS)} seeds): {total.report()}")
    assert total.generations >= 180
    assert total.agreement >= 0.94, total.report()


def _expanded(rows: list[Any]) -> list[Any]:
    return [r for x in rows for r in (x.rows() if isinstance(x, AssignmentRun) else [x])]


_run_kinds: set[str] = set()


@pytest.mark.parametrize("name", SCENARIOS)
def test_assignment_runs_are_the_rows_in_place(name: str) -> None:
    """`GroupAuditor(assignment_runs=True)` emits each member's assignments of an interval as one
    `AssignmentRun`, whose rows are the plain auditor's rows at that place; also across a saved and
    resumed state (`from_dict(..., assignment_runs=True)`)."""
    records = run_scenario(Scenario.load(SCENARIO_DIR / f"{name}.json")).records
    half = len(records) // 2
    plain = GroupAuditor()
    expected = list(plain.feed(records[:half]))
    resumed_plain = GroupAuditor.from_dict(plain.to_dict())
    expected += list(resumed_plain.feed(records[half:])) + resumed_plain.finish()
    runs = GroupAuditor(assignment_runs=True)
    got = list(runs.feed(records[:half]))
    resumed = GroupAuditor.from_dict(runs.to_dict(), assignment_runs=True)
    got += list(resumed.feed(records[half:])) + resumed.finish()
    assert not any(isinstance(x, AssignmentRow) for x in got)
    assert _expanded(got) == expected
    for run in (x for x in got if isinstance(x, AssignmentRun)):
        assert run.size == len(run.rows()) > 0
        _run_kinds.add("owned per row" if isinstance(run.owned_before, tuple) else "owned once")
        if any(len(partitions) == 1 for _, partitions in run.groups) and len(run.groups) > 1:
            _run_kinds.add("one partition per topic entry")


def test_assignment_runs_cover_both_flag_forms() -> None:
    """The library exercises runs with one `owned_before` for all rows and runs with one per row
    (a cooperative member that kept some of its partitions)."""
    for name in SCENARIOS:
        if {"owned per row", "owned once"} <= _run_kinds:
            break
        test_assignment_runs_are_the_rows_in_place(name)
    assert {"owned per row", "owned once"} <= _run_kinds
