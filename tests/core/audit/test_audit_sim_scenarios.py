"""The audit against the simulator's ground truth, on every scenario of the library.

Each scenario is run by the simulator (the coordinator's live path, simulated consumers), its
`__consumer_offsets` log is audited from the bytes alone, and the rows are scored against the
truth with `audit_scoring.score`. Bar (issue 5): >= 95% of generations agree and clean scenarios
yield no violation; every planted violation is found.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coordinator_core.audit import GroupAuditor
from coordinator_core.sim.runner import run_scenario
from coordinator_core.sim.scenario import Scenario

from .audit_builders import rows_by_table
from .audit_scoring import Score, score

SCENARIO_DIR = Path(__file__).resolve().parents[3] / "coordinator_core" / "sim" / "scenarios"
SCENARIOS = sorted(p.stem for p in SCENARIO_DIR.glob("*.json"))

_cache: dict[str, tuple[Any, dict[str, list[Any]], GroupAuditor, Score]] = {}


def audited(name: str) -> tuple[Any, dict[str, list[Any]], GroupAuditor, Score]:
    """(simulator result, audit tables, auditor, score) of one scenario, computed once."""
    if name not in _cache:
        result = run_scenario(Scenario.load(SCENARIO_DIR / f"{name}.json"))
        auditor = GroupAuditor()
        rows = list(auditor.feed(result.records)) + auditor.finish()
        truth = result.truth
        s = score(rows, truth.causes_by_generation(), [(v.generation_id, v.kind) for v in truth.violations])
        _cache[name] = (result, rows_by_table(rows), auditor, s)
    return _cache[name]


def test_library_is_large_enough() -> None:
    assert len(SCENARIOS) >= 30


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_audit(name: str) -> None:
    result, tables, auditor, s = audited(name)
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
