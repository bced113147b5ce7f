"""Test helpers of the audit's tests. The log builders live in `coordinator_audit.core.sim.builders`
(`benchmarks/bench_audit.py` uses them too); they are re-exported here for the tests' imports."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from coordinator_audit.core.sim.builders import T0, TP, LogBuilder, grouped, member, tps

__all__ = ["T0", "TP", "LogBuilder", "grouped", "member", "rows_by_table", "tps"]


def rows_by_table(rows: Iterable[Any]) -> dict[str, list[Any]]:
    """The rows by table; checks on the way that every generation has exactly one primary cause
    (`causes.primary_problems`), so every audit the core tests run checks the invariant."""
    from coordinator_audit.core.audit import TABLES, table_of
    from coordinator_audit.core.audit.causes import primary_problems

    out: dict[str, list[Any]] = {t: [] for t in TABLES}
    for r in rows:
        out[table_of(r)].append(r)
    problems = primary_problems(out["rebalance_causes"], out["generations"])
    assert not problems, problems
    return out
