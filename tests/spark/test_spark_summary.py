"""The summary the command prints after a run (`coordinator_audit.jobs.audit.table_highlights`): read back by the
driver with pyarrow (a run on the local file system that wrote few rows) or by Spark, the same
lines, on real runs (one window and the next) and on the derived lines' edge cases (nulls, ties,
the rebalances' median at many sizes, where Spark's `percentile_approx` is exact)."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest

from coordinator_audit.jobs import audit, delta_io
from coordinator_audit.jobs.audit import run_audit
from coordinator_audit.jobs.config import load_config
from coordinator_audit.jobs.derived_step import (
    HIGHLIGHT_COLUMNS,
    derived_highlights,
    derived_highlights_arrow,
)
from coordinator_audit.udfs.schemas import TABLE_SCHEMAS

pytestmark = pytest.mark.spark

CUT = "2026-11-21T23:43:40Z"
"""Inside the real broker's log (as `tests/spark/test_spark_derived.py` cuts it)."""


def _jobs(spark) -> int:
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup(None))


def test_the_driver_reads_the_summary_spark_reads(spark, derived_input: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    summaries = [run_audit(spark, load_config(None, {
        "input.path": str(derived_input), "input.format": "parquet", "output.path": str(out), "job.shards": 2,
        "window.since": since, "window.until": until})) for since, until in (("2000-01-01", CUT), (CUT, "2100-01-01"))]
    assert summaries[1].rows_merged  # the second window closed rows of the first
    for summary in summaries:
        before = _jobs(spark)
        lines = audit.table_highlights(spark, summary)
        assert _jobs(spark) == before  # read back by the driver: no Spark job
        assert lines == audit._highlights_spark(spark, summary)
        assert not lines["generations"].startswith("0 ") and "primary causes: none" not in lines["rebalance_causes"]
        assert "none" not in lines["group_health"]


def test_a_large_or_remote_run_is_read_back_by_spark(spark, derived_run: Path, monkeypatch) -> None:
    summary = audit.RunSummary("r", "all", {}, {"generations": 3}, {"generations": str(derived_run / "generations")},
                               "embedded", 1.0)
    assert delta_io.local_table_path(summary.locations["generations"])
    assert delta_io.local_table_path("out/delta/generations") and delta_io.local_table_path("file:///out/generations")
    for remote in ("s3://bucket/out/generations", "dbfs:/mnt/out/generations", "main.audit.generations"):
        assert not delta_io.local_table_path(remote)
    monkeypatch.setattr(audit, "SUMMARY_DRIVER_ROWS", 2)
    chosen = []
    monkeypatch.setattr(audit, "_highlights_spark", lambda spark, s: chosen.append("spark") or {})
    monkeypatch.setattr(audit, "_highlights_arrow", lambda s: chosen.append("driver") or {})
    audit.table_highlights(spark, summary)
    monkeypatch.setattr(audit, "SUMMARY_DRIVER_ROWS", 3)
    audit.table_highlights(spark, summary)
    assert chosen == ["spark", "driver"]


def _derived_tables(rng: random.Random, rebalances: int) -> dict[str, pa.Table]:
    def pick(*values):
        return rng.choice(values)

    own = [{"owned": pick(True, False, None), "unowned_reason": pick(None, "group_empty", "eager_join_phase",
                                                                      "owner_departed"),
            "duration_ms": pick(None, rng.randint(0, 10**7))} for _ in range(rng.randint(0, 60))]
    reb = [{"outcome": pick("completed", "aborted", None), "duration_ms": pick(None, rng.randint(0, 40),
                                                                            rng.randint(0, 10**6))}
           for _ in range(rebalances)]
    health = [{"group_id": f"g{rng.randint(0, 3)}", "day": f"2026-11-{rng.randint(10, 20)}",
               "flapping_score": pick(0.0, 0.5, 1.25, rng.random()), "violations": pick(0, 1, 2),
               "status": pick("healthy", "flapping")} for _ in range(rng.randint(0, 12))]
    rows = {"partition_ownership": own, "rebalances": reb, "group_health": health}
    out = {}
    for name, columns in HIGHLIGHT_COLUMNS.items():
        schema = pa.schema([pa.field(c, _arrow_type(name, c)) for c in columns])
        out[name] = pa.Table.from_pylist(rows[name], schema=schema)
    return out


def _arrow_type(table: str, column: str) -> pa.DataType:
    spark_type = TABLE_SCHEMAS[table][column].dataType.simpleString()
    return {"boolean": pa.bool_(), "string": pa.string(), "bigint": pa.int64(), "int": pa.int32(),
            "double": pa.float64()}[spark_type]


def test_the_derived_lines_are_sparks_on_edge_cases(spark) -> None:
    rng = random.Random(18)
    for rebalances in (0, 1, 2, 3, 4, 5, 8, 101, 1000, 2501, 6000, 9990):
        tables = _derived_tables(rng, rebalances)
        frames = {name: spark.createDataFrame(t.to_pylist(), ", ".join(
            f"{c} {TABLE_SCHEMAS[name][c].dataType.simpleString()}" for c in t.column_names))
            for name, t in tables.items()}
        assert derived_highlights_arrow(tables) == derived_highlights(frames), rebalances
