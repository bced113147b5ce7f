"""The audit job's last step before writing: the derived tables (`udfs.derived`) of the run's groups.

A nightly run sees one window of the log, but an interval, a rebalance or a day can start in an
earlier window. So the derivation reads, besides the run's own base tables, the rows earlier runs
stored for the same groups (other windows of the same output, rows still current at or after one
day before the run's window: `HISTORY_LOOKBACK_MS`), reduces them to one row per natural key
(`udfs.derived.latest_rows`: closing values win), derives, and keeps the rows overlapping the run's
window (`udfs.derived.overlapping_window`). Readers reduce the derived tables alike, so an interval
left open by one run and closed by the next is read closed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from jobs.delta_io import _is_delta_table, read_table
from udfs.derived import BASE_INPUTS, derive_packed, derive_wide, overlapping_window, split_wide

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["HISTORY_LOOKBACK_MS", "derived_highlights", "derived_tables_for_run", "stored_history"]

HISTORY_LOOKBACK_MS = 86_400_000
"""Stored rows still current this long before the run's window are read back as history."""

_ALIVE: dict[str, tuple[str, ...]] = {
    "generations": ("ended_at", "record_timestamp"),
    "assignments": ("valid_to", "valid_from"),
    "offset_commits": ("last_commit_timestamp",),
    "rebalance_causes": ("record_timestamp",),
    "violations": ("record_timestamp",),
}


def stored_history(spark: SparkSession, base_path: str, groups: DataFrame, *, run_window: str,
                   since: datetime | None) -> dict[str, DataFrame] | None:
    """The base rows earlier runs stored for `groups` (a one-column frame of group ids) in other
    windows, or None when the output has no base tables yet."""
    uris = {name: f"{base_path.rstrip('/')}/{name}" for name in BASE_INPUTS}
    if not all(_is_delta_table(u) for u in uris.values()):
        return None
    out = {}
    for name, uri in uris.items():
        df = read_table(spark, uri).where(F.col("run_window") != run_window).join(groups, "group_id", "left_semi")
        if since is not None:
            floor = F.lit(int(since.timestamp() * 1000) - HISTORY_LOOKBACK_MS)
            cols = _ALIVE[name]
            alive = F.col(cols[0]).isNull() | (F.col(cols[0]) >= floor) if len(cols) > 1 else F.col(cols[0]) >= floor
            df = df.where(alive)
        out[name] = df.drop("run_window")
    return out


def derived_tables_for_run(spark: SparkSession, tables: Mapping[str, DataFrame], *, run_id: str, run_window: str,
                           since: datetime | None, until: datetime | None, base_path: str | None,
                           stage: Callable[..., Any], packed: DataFrame | None = None) -> dict[str, DataFrame]:
    """{derived table: DataFrame} for the run (module docstring), computed once (checkpointed).
    `packed`: the run's base rows already packed (`udfs.derived.packed_from_wide`) and still in the
    replay's partitions (a group's rows in one), used when no earlier run's rows are added to them."""
    base = {name: tables[name] for name in BASE_INPUTS}
    history = None
    if base_path:
        groups = tables["generations"].select("group_id").distinct()
        history = stored_history(spark, base_path, groups, run_window=run_window, since=since)
    if history is not None:
        base = {name: df.withColumn("run_id", F.lit(run_id)).unionByName(history[name], allowMissingColumns=True)
                for name, df in base.items()}
    with stage(spark, "derived tables (ownership, rebalances, health; mapInArrow by group)"):
        # computed once for the three tables (localCheckpoint: the blocks go with the frames)
        wide = (derive_packed(packed, grouped=True) if packed is not None and history is None
                else derive_wide(base)).localCheckpoint(eager=True)
        derived = overlapping_window(split_wide(wide), since=since, until=until)
    return derived


def derived_highlights(t: Mapping[str, DataFrame]) -> dict[str, str]:
    """The job's one-line summaries of the derived tables (read back from Delta)."""
    o = t["partition_ownership"].agg(
        F.sum(F.when(~F.col("owned") & (F.col("unowned_reason") != "group_empty"), F.col("duration_ms"))).alias("ms"),
        F.sum(F.when(~F.col("owned"), 1)).alias("gaps")).collect()[0]
    r = t["rebalances"].where("outcome != 'aborted'").agg(
        F.count("*").alias("n"), F.percentile_approx("duration_ms", 0.5).alias("p50"),
        F.max("duration_ms").alias("max")).collect()[0]
    worst = t["group_health"].orderBy(F.desc("flapping_score"), F.desc("violations"), "group_id").limit(3).collect()
    return {
        "partition_ownership": f"{o['gaps'] or 0} unowned stretches, {(o['ms'] or 0) / 1000:,.1f} partition-seconds "
                               f"unowned by rebalances",
        "rebalances": f"{r['n']} join phases, duration median {r['p50'] or 0:,} ms, max {r['max'] or 0:,} ms",
        "group_health": "worst: " + (", ".join(f"{w['group_id']} {w['day']} {w['flapping_score']:.2f} ({w['status']})"
                                               for w in worst) or "none"),
    }
