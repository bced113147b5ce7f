"""`coordinator_audit.jobs.whatif.sweep_groups`: the groups of a sweep replayed by a process pool give
what one process gives, in the same order, a group that cannot be replayed skipped with its reason,
and a long run says how far it got."""

from __future__ import annotations

import io
import json
import re
from functools import cache
from pathlib import Path

import pytest

from coordinator_audit.core.audit import (
    AssignmentRow,
    GenerationRow,
    OffsetCommitRow,
    RebalanceCauseRow,
    audit_group,
)
from coordinator_audit.core.sim.runner import run_scenario
from coordinator_audit.core.sim.scenario import Scenario
from coordinator_audit.jobs import whatif

LIBRARY = Path(__file__).resolve().parents[3] / "coordinator_audit" / "core" / "sim" / "scenarios"
SCENARIOS = ("eager-crash", "coop-scale-in", "static-rolling-bounce")


@cache
def inputs() -> tuple[whatif.GroupInput, ...]:
    """The audit rows of three library scenarios, and a group without generations (it cannot be replayed)."""
    out = []
    for name in SCENARIOS:
        data = json.loads((LIBRARY / f"{name}.json").read_text())
        records = [(r.partition, r.offset, r.timestamp_ms, r.key, r.value)
                   for r in run_scenario(Scenario.from_dict(data)).records]
        rows = list(audit_group(records, group_id=data["group"]))
        out.append(whatif.GroupInput(data["group"], [r for r in rows if isinstance(r, GenerationRow)],
                                     [r for r in rows if isinstance(r, AssignmentRow)],
                                     [r for r in rows if isinstance(r, OffsetCommitRow)],
                                     [r for r in rows if isinstance(r, RebalanceCauseRow)]))
    out.insert(1, whatif.GroupInput("no-generations", [], [], [], []))
    return tuple(out)


def sweep(workers: int, progress: io.StringIO | None = None, every_s: float = 3600.0) -> list[whatif.GroupOutcome]:
    args = whatif.parse_args(["--tables", "(in memory)", "--sweep", "--no-write"])
    return list(whatif.sweep_groups(inputs(), "(in memory)", args, whatif.configurations(args), 123,
                                    workers=workers, progress=progress, every_s=every_s))


@cache
def one_process() -> tuple[whatif.GroupOutcome, ...]:
    return tuple(sweep(1))


def test_the_pool_gives_what_one_process_gives() -> None:
    alone = list(one_process())
    assert [o.group for o in alone] == [g.group for g in inputs()]
    assert [len(o.rows) for o in alone] == [9, 0, 9, 9]  # the actual configuration and the eight of the sweep
    assert alone[1].error is not None and "no generations rows" in alone[1].error and not alone[1].printed
    assert all(o.error is None and o.printed.startswith(f"group {o.group}: ") for o in alone if o.rows)
    assert sweep(2) == alone


def test_progress_lines() -> None:
    said = io.StringIO()
    assert sweep(1, said, every_s=0.0) == list(one_process())
    lines = said.getvalue().splitlines()
    assert [re.sub(r", \d+ s$", "", line) for line in lines] == [f"whatif: {i}/4 groups" for i in range(1, 5)]
    quiet = io.StringIO()
    sweep(1, quiet)  # a run shorter than the interval says nothing
    assert quiet.getvalue() == ""


def test_workers_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    assert whatif.parse_args(["--tables", "t"]).workers >= 1
    assert whatif.parse_args(["--tables", "t", "--workers", "3"]).workers == 3
    with pytest.raises(SystemExit):
        whatif.parse_args(["--tables", "t", "--workers", "0"])
    assert "--workers must be >= 1, got 0" in capsys.readouterr().err
