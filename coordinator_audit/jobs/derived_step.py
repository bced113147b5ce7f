"""The audit job's last step before writing: the derived tables (`coordinator_audit.udfs.derived`) of the run's groups.

A nightly run sees one window of the log, but an interval, a rebalance or a day can start in an
earlier window, and a row an earlier run stored can change with what this run reads (a member that
crashed in an earlier window owns its partitions until its last commit there, which only the record
removing it, in this window, tells). So the derivation reads, besides the run's own base tables,
the rows earlier runs stored for the same groups (other windows of the same output, rows still
current at or after one day before the run's window: `HISTORY_LOOKBACK_MS`), a stored row replaced
by the run's row of the same natural key (`NATURAL_KEYS`: the run closed or continued it), and
derives every row of the run's groups. Those the history fully determines, or that are still
current at the window's start (`coordinator_audit.udfs.derived.rederived_condition`: from the floor on, or current),
replace the stored ones: the run writes them into its window, and a merge
(`coordinator_audit.jobs.delta_io.Merge.scope`) deletes its groups' stored rows meeting the condition and updates,
where it lives, an interval now closed before the floor's reach (a long-held partition whose
owner crashed in an earlier window). So the tables hold each row once, as one run over the whole
log gives it; a reader needs no de-duplication.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from deltalake import DeltaTable
from pyspark.sql import functions as F

from coordinator_audit.jobs.delta_io import (
    PARTITION_COLUMN,
    Merge,
    _is_delta_table,
    delta_spark_available,
    read_table,
)
from coordinator_audit.jobs.delta_read import may_reach
from coordinator_audit.udfs.derived import (
    BASE_INPUTS,
    DERIVED_KEYS,
    DERIVED_TABLES,
    NATURAL_KEYS,
    TOPIC_BY_ID,
    derive_wide,
    first_whole_day,
    overlapping_window,
    rederived_condition,
    split_wide,
    wide_schema,
)
from coordinator_audit.udfs.history import DEFAULT_HEALTH, HealthThresholds
from coordinator_audit.udfs.schemas import epoch_ms, with_time_columns

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["EXACT_MEDIAN_ROWS", "HIGHLIGHT_COLUMNS", "HISTORY_LOOKBACK_MS", "derived_highlights", "derived_highlights_arrow",
           "derived_tables_for_run", "has_history", "history_floor", "run_groups", "stored_history"]

HISTORY_LOOKBACK_MS = 86_400_000
"""Stored rows still current this long before the run's window are read back as history."""

_ALIVE: dict[str, tuple[str, bool]] = {
    "generations": ("ended_at", True),
    "assignments": ("valid_to", True),
    "offset_commits": ("last_commit_timestamp", False),
    "rebalance_causes": ("record_timestamp", False),
    "violations": ("record_timestamp", False),
}
"""Base table -> (the column that says until when a row is current, whether null means it still is
(an open generation or assignment)): a stored row is history while that column is at or after the
floor, or null where null means open."""


def _base_uris(base_path: str) -> dict[str, str]:
    return {name: f"{base_path.rstrip('/')}/{name}" for name in BASE_INPUTS}


def has_history(base_path: str | None) -> bool:
    """Whether earlier runs stored base tables at `base_path` (all five), whose rows the derivation
    must then read (`stored_history`); without them a run's own rows are all it needs, and the
    replay derives the tables itself (`coordinator_audit.udfs.replay.replay_frame(derive=True)`)."""
    if not base_path:
        return False
    return all(_is_delta_table(u) for u in _base_uris(base_path).values())


def stored_history(spark: SparkSession, base_path: str, group_ids: Sequence[str], *, run_window: str,
                   since: datetime | None) -> dict[str, DataFrame] | None:
    """The base rows earlier runs stored for `group_ids` in other windows, or None when the output
    has no base tables yet.

    Every nightly run adds a window to the tables, so this reads only the data files that may hold
    such rows: files of other windows whose statistics admit a row still current (`_ALIVE`; see
    `coordinator_audit.jobs.delta_read.may_reach`), as one relation per table, and the groups come as a local list
    (broadcast to the scan, no Spark job). Read as one relation per window, joined with the run's
    groups computed in Spark, the history would cost one Spark job per window and table, and the
    derived stage would grow with the chain (`benchmarks.bench_nightly` measures a chain)."""
    if not has_history(base_path):
        return None
    uris = _base_uris(base_path)
    floor = history_floor(since)
    native = delta_spark_available(spark)
    ids = F.broadcast(spark.createDataFrame([(g,) for g in sorted(group_ids)], "group_id string"))
    out = {}
    for name, uri in uris.items():
        column, open_when_null = _ALIVE[name]

        def wanted(action: Mapping[str, Any], column: str = column, open_when_null: bool = open_when_null) -> bool:
            if (action.get("partition") or {}).get(PARTITION_COLUMN) == run_window:
                return False
            return floor is None or may_reach(action, column, floor, or_null=open_when_null)

        if native:  # Delta Spark prunes the window and skips files by the filters below itself
            df = read_table(spark, uri).where(F.col(PARTITION_COLUMN) != run_window).drop(PARTITION_COLUMN)
        else:
            df = read_table(spark, uri, files=wanted, partitions=False)
        df = df.join(ids, "group_id", "left_semi")
        if floor is not None:
            alive = F.col(column) >= F.lit(floor)
            df = df.where(F.col(column).isNull() | alive if open_when_null else alive)
        out[name] = df
    return out


def run_groups(tables: Mapping[str, DataFrame]) -> list[str]:
    """The groups with a row in the run's base tables (new, or continuing an earlier run's): those
    whose derived rows the run can change (an offset commit alone moves a day's `last_commit_at`)."""
    frames = [tables[name].select("group_id") for name in BASE_INPUTS]
    return sorted(r[0] for r in functools.reduce(lambda a, b: a.unionByName(b), frames).distinct().collect())


def _replace_stored(history: DataFrame, run_rows: DataFrame, table: str) -> DataFrame:
    """The stored rows `history` but those the run's rows replace (the same natural key)."""
    key = NATURAL_KEYS[table]
    keys = run_rows.select(*[F.col(k).alias(f"_run_{k}") for k in key]).distinct()
    by_id = table in TOPIC_BY_ID
    on = [history[k].eqNullSafe(keys[f"_run_{k}"]) for k in key if not (by_id and k == "topic")]
    if by_id:
        on.append(history["topic_id"].isNotNull() | history["topic"].eqNullSafe(keys["_run_topic"]))
    return history.join(keys, functools.reduce(lambda a, b: a & b, on), "left_anti")


def history_floor(since: datetime | None) -> int | None:
    """Epoch ms from which stored rows are read back as history: `HISTORY_LOOKBACK_MS` before the
    window's start (None: every stored row)."""
    return None if since is None else epoch_ms(since) - HISTORY_LOOKBACK_MS


def _may_hold_rederived(action: Mapping[str, Any], table: str, since_ms: int, floor_ms: int) -> bool:
    """Whether a derived table's data file may hold a row `rederived_condition` names, by its
    statistics (`may_reach`)."""
    if table == "partition_ownership":
        return (may_reach(action, "valid_to", since_ms, or_null=True)
                or may_reach(action, "valid_from", floor_ms, or_null=False))
    if table == "rebalances":
        return may_reach(action, "observed_at", floor_ms, or_null=False)
    return may_reach(action, "day", first_whole_day(floor_ms), or_null=False)


def _rederived_windows(base_path: str, table: str, run_window: str, since: datetime | None) -> tuple[str, ...]:
    """The other windows of a derived table whose data files may hold a row the run re-derives
    (`rederived_condition`), by their statistics."""
    uri = f"{base_path.rstrip('/')}/{table}"
    if not _is_delta_table(uri):
        return ()
    since_ms, floor_ms = epoch_ms(since), history_floor(since)
    windows: set[str] = set()
    for a in pa.table(DeltaTable(uri).get_add_actions(flatten=False)).to_pylist():
        window = (a.get("partition") or {}).get(PARTITION_COLUMN)
        if window is None or window == run_window:
            continue
        if since_ms is None or floor_ms is None or _may_hold_rederived(a, table, since_ms, floor_ms):
            windows.add(str(window))
    return tuple(sorted(windows))


def derived_tables_for_run(spark: SparkSession, tables: Mapping[str, DataFrame], *, run_window: str,
                           since: datetime | None, until: datetime | None, base_path: str | None, stage: Callable[..., Any],
                           log: Callable[[str], None] = print, health: HealthThresholds = DEFAULT_HEALTH,
                           ) -> tuple[dict[str, DataFrame], dict[str, Merge]]:
    """({derived table: the rows the run writes into its window}, {derived table: the merge replacing
    the stored rows of its groups}) (module docstring), computed once (checkpointed), in a stage of
    its own: for a run whose derivation reads more than its own rows (earlier runs' rows, a broker
    account); otherwise the replay derives the tables (`coordinator_audit.udfs.replay.replay_frame`). Nothing, without
    a stage, when the run has no base row (`log` says so). `health` judges the health rows' days."""
    base = {name: tables[name] for name in BASE_INPUTS}
    group_ids = run_groups(base)
    if not group_ids:
        log("derived tables: no group has a record in this run: nothing to derive")
        return split_wide(spark.createDataFrame([], wide_schema())), {}
    history = None
    if base_path:
        history = stored_history(spark, base_path, group_ids, run_window=run_window, since=since)
    if history is not None:
        base = {name: df.unionByName(_replace_stored(history[name], df, name), allowMissingColumns=True)
                for name, df in base.items()}
    with stage(spark, "derived tables (ownership, rebalances, health; mapInArrow by group)"):
        # computed once for the three tables (localCheckpoint: the blocks go with the frames)
        derived = split_wide(derive_wide(base, health).localCheckpoint(eager=True))
    if history is None:  # its own rows only, as the replay derives them
        return overlapping_window(derived, since=since, until=until), {}
    assert base_path is not None
    scope = {name: rederived_condition(name, epoch_ms(since), history_floor(since)) for name in DERIVED_TABLES}
    merges: dict[str, Merge] = {}
    native = delta_spark_available(spark)  # (Delta Spark prunes the target by the condition itself)
    for name in DERIVED_TABLES:
        homes = None if native else _rederived_windows(base_path, name, run_window, since)
        if homes == ():
            continue  # no other window holds a row of the table the run re-derives
        key = DERIVED_KEYS[name]
        beyond = derived[name].where(~F.expr(scope[name].format(r="")))  # (a row's scope is never null)
        merges[name] = Merge(with_time_columns(beyond, name), ("group_id",),
                             tuple(k for k in key if k != "group_id"), homes,
                             scope=scope[name], scope_groups=tuple(group_ids))
    return {name: df.where(F.expr(scope[name].format(r=""))) for name, df in derived.items()}, merges


def derived_highlights(t: Mapping[str, DataFrame]) -> dict[str, str]:
    """The job's one-line summaries of the derived tables (read back from Delta)."""
    o = t["partition_ownership"].agg(
        F.sum(F.when(~F.col("owned") & (F.col("unowned_reason") != "group_empty"), F.col("duration_ms"))).alias("ms"),
        F.sum(F.when(~F.col("owned"), 1)).alias("gaps")).collect()[0]
    r = t["rebalances"].where("outcome != 'aborted'").agg(
        F.count("*").alias("n"), F.percentile_approx("duration_ms", 0.5).alias("p50"),
        F.max("duration_ms").alias("max")).collect()[0]
    worst = t["group_health"].orderBy(F.desc("flapping_score"), F.desc("violations"), "group_id", "day").limit(3).collect()
    return {
        "partition_ownership": f"{o['gaps'] or 0} unowned stretches, {(o['ms'] or 0) / 1000:,.1f} partition-seconds "
                               f"unowned by rebalances",
        "rebalances": f"{r['n']} join phases, duration median {r['p50'] or 0:,} ms, max {r['max'] or 0:,} ms",
        "group_health": "worst: " + (", ".join(f"{w['group_id']} {w['day']} {w['flapping_score']:.2f} ({w['status']})"
                                               for w in worst) or "none"),
    }


HIGHLIGHT_COLUMNS: dict[str, tuple[str, ...]] = {
    "partition_ownership": ("owned", "unowned_reason", "duration_ms"),
    "rebalances": ("outcome", "duration_ms"),
    "group_health": ("group_id", "day", "flapping_score", "violations", "status"),
}
"""The columns `derived_highlights` reads of each derived table."""

EXACT_MEDIAN_ROWS = 10_000
"""Below this many values, Spark's `percentile_approx` (its default accuracy, 10,000) is exact: it
keeps every value and returns the one at rank ceil(p * n) (`ApproximatePercentile`)."""


def derived_highlights_arrow(t: Mapping[str, pa.Table]) -> dict[str, str]:
    """`derived_highlights` of the run's rows read by the driver (`HIGHLIGHT_COLUMNS` of each table),
    the same lines; the rebalances' median needs fewer than `EXACT_MEDIAN_ROWS` of them."""
    own = t["partition_ownership"].to_pydict()
    gap_ms = [d for owned, reason, d in zip(own["owned"], own["unowned_reason"], own["duration_ms"], strict=True)
              if owned is False and reason is not None and reason != "group_empty" and d is not None]
    gaps = sum(1 for owned in own["owned"] if owned is False)
    reb = t["rebalances"].to_pydict()
    done = [d for outcome, d in zip(reb["outcome"], reb["duration_ms"], strict=True)
            if outcome is not None and outcome != "aborted"]
    durations = sorted(d for d in done if d is not None)
    if len(durations) >= EXACT_MEDIAN_ROWS:
        raise ValueError(f"derived_highlights_arrow: {len(durations):,} rebalances, more than Spark's "
                         f"percentile_approx keeps exactly ({EXACT_MEDIAN_ROWS:,}): use derived_highlights")
    p50 = durations[math.ceil(0.5 * len(durations)) - 1] if durations else None
    worst = t["group_health"].sort_by([("flapping_score", "descending"), ("violations", "descending"),
                                       ("group_id", "ascending"), ("day", "ascending")]).slice(0, 3).to_pylist()
    return {
        "partition_ownership": f"{gaps} unowned stretches, {(sum(gap_ms) if gap_ms else 0) / 1000:,.1f} "
                               f"partition-seconds unowned by rebalances",
        "rebalances": f"{len(done)} join phases, duration median {p50 or 0:,} ms, max "
                      f"{max(durations) if durations else 0:,} ms",
        "group_health": "worst: " + (", ".join(f"{w['group_id']} {w['day']} {w['flapping_score']:.2f} ({w['status']})"
                                               for w in worst) or "none"),
    }
