"""notebooks/coordinator_audit.py (Databricks source format), run cell by cell, top to bottom, on
the suite's local session: Databricks' globals `spark` and `display` are provided, the widgets fall
back to AUDIT_* environment variables, and `%md` cells are text. The `%pip install` cell is not run
here (this venv has the project installed already; tests/dist installs the wheel in a fresh venv)."""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "coordinator_audit.py"
HEADER = "# Databricks notebook source\n"
SEPARATOR = "\n# COMMAND ----------\n"


def _cells(text: str) -> list[str]:
    assert text.startswith(HEADER), "a Databricks source notebook starts with its header line"
    return [c.strip("\n") for c in text[len(HEADER):].split(SEPARATOR)]


def test_the_notebook_runs_top_to_bottom(spark, tmp_path: Path, monkeypatch) -> None:
    cells = _cells(NOTEBOOK.read_text())
    out = tmp_path / "audit"
    monkeypatch.setenv("AUDIT_INPUT_PATH", str(ROOT / "data" / "samples"))
    monkeypatch.setenv("AUDIT_OUTPUT_PATH", str(out))
    monkeypatch.setenv("AUDIT_GROUPS", "grp-*,sim-bug-*")
    shown: list = []
    namespace = {"spark": spark, "display": shown.append, "__name__": "__main__"}
    magics = []
    for i, cell in enumerate(cells):
        lines = cell.splitlines()
        if lines and all(line.startswith("# MAGIC") for line in lines):
            magics.append(lines[0].removeprefix("# MAGIC").split()[0])
            continue
        exec(compile(cell, f"{NOTEBOOK.name} cell {i + 1}", "exec"), namespace)
    assert magics == ["%md", "%pip", "%md", "%md", "%md", "%md", "%md"]

    summary = namespace["summary"]
    assert summary.counts["records_in"] > 0 and summary.counts["filtered_by_group"] > 0
    # runs, group_health, rebalance_causes, violations, generations, assignments, partition_ownership,
    # rebalances, offset_commits, quarantine: every table of the run but the job's saved state
    assert [df.columns[:2] for df in shown] == [
        ["run_id", "status"], ["group_id", "day"], ["group_id", "generation_id"], ["group_id", "generation_id"],
        ["group_id", "generation_id"], ["group_id", "generation_id"], ["group_id", "topic"],
        ["group_id", "generation_id"], ["group_id", "topic"], ["group_id", "partition"]]
    assert shown[0].count() == 1
    assert "duplicate_assignment" in {r["kind"] for r in shown[3].collect()}
    assert shown[2].where("record_time IS NULL").count() == 0
    assert {"broker_cause", "broker_reason"} <= set(shown[4].columns)
    assert all(df.count() > 0 for df in shown[:9] if df is not shown[3])
    assert DeltaTable(str(out / "generations")).to_pyarrow_table().num_rows == summary.table_rows["generations"]
