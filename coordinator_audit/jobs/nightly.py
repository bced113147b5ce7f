"""Runs that carry state: which earlier run a run continues, and what it resumes from.

A run over the window [since, until) continues the chain of runs already written to the same
output (`plan_run`):

* the **base** is the latest complete run (its `runs` row exists), when this window starts at or
  after its end; the run resumes every group from the base's `group_state` rows (the audit state,
  the open offset window; a group that reads no record in the run is carried forward as saved,
  without resuming its audit: `coordinator_audit.udfs.replay`) and reads each `__consumer_offsets` partition from
  just after the base's last offset there (`runs.end_offsets`), whatever the records' timestamps;
  a partition no run of the chain read is read from its first record in the input;
* so a run audits everything after its base: when `--since` is later than the base's end (a
  skipped night), the run's window starts where the base's ended (`RunPlan.since`, which its
  `runs.since` and `run_window` record), and the records in between that the input holds are
  audited; the offsets it lacks are history gaps (below);
* re-running the **latest** window replaces it: a window that ends where the latest one ends and
  starts within it (a widened window re-run with its own `--since`, or with the widened start); the
  base is then the run before it, and every row the replaced run merged into earlier windows is
  merged again (`rerun`);
* a window that overlaps an earlier run's window in any other way, or comes before the latest one,
  is refused with one line naming the run it conflicts with and what to do (`WindowConflict`):
  never duplicated rows;
* with no earlier run, records in the input before `since` rebuild the state first (`warmup`):
  they are replayed, their rows are not written, and the rows still open at `since` are;
* `overwrite` starts the chain afresh.

Continuity is checked, never assumed: when a partition's first offset in this run is not the one
after the base's last, the offsets in between were never read (compaction, retention, a skipped
export) and the groups of that partition get a `history_gap` cause (`gaps`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema

from coordinator_audit.core.audit import HistoryGap
from coordinator_audit.core.errors import ConfigError
from coordinator_audit.jobs.delta_io import _is_delta_table, delta_spark_available, read_table
from coordinator_audit.jobs.delta_read import iter_arrow, read_arrow
from coordinator_audit.udfs.schemas import GROUP_STATE_SCHEMA, RUNS_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["STATE_TABLE_COLUMNS", "ChainRun", "RunPlan", "WindowConflict", "gaps", "home_windows", "plan_run", "read_note", "read_runs",
           "read_runs_arrow", "read_state", "read_state_batches"]

Resume = Literal["fresh", "resume", "rerun", "warmup"]


class WindowConflict(ConfigError):
    """This run's window cannot follow the runs already written to the output: a refusal, found
    before the run reads its input (`coordinator_audit.jobs.audit.preflight`)."""


@dataclass(frozen=True, slots=True)
class ChainRun:
    """A complete earlier run, as the chain needs it (from its `runs` row)."""

    run_id: str
    run_window: str
    since: datetime | None
    until: datetime | None
    group_filter: str | None
    end_offsets: dict[int, int]
    finished_at: datetime
    missing_offsets: dict[int, int] = field(default_factory=dict)
    """Per partition: offsets never read since the chain began, up to `end_offsets`."""


@dataclass(frozen=True, slots=True)
class RunPlan:
    """What a run continues: its base run (None: none), how it resumes, where its window starts,
    and the earlier runs of the chain in order (for the partitions the carried rows live in)."""

    resume: Resume
    base: ChainRun | None
    since: datetime | None
    """Where the run's window starts: `--since`, or the base's end when the run continues a base
    that ended before it (a skipped night), or the replaced run's start (a re-run)."""
    chain: tuple[ChainRun, ...] = ()
    replaces: ChainRun | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def start_after(self) -> dict[int, int]:
        return dict(self.base.end_offsets) if self.base is not None else {}


def _utc(t: datetime | None) -> datetime | None:
    if t is None:
        return None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def _overlap(a: tuple[datetime | None, datetime | None], b: tuple[datetime | None, datetime | None]) -> bool:
    lo = max((t for t in (a[0], b[0]) if t is not None), default=None)
    hi = min((t for t in (a[1], b[1]) if t is not None), default=None)
    return lo is None or hi is None or lo < hi


def _fmt(t: datetime | None) -> str:
    return "the start of the log" if t is None else t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _window_text(r: ChainRun) -> str:
    return f"[{_fmt(r.since)}, {'open' if r.until is None else _fmt(r.until)})"


def _runs_columns(location: str, columns: Sequence[str]) -> list[str]:
    """The chain's columns (`_RUNS_COLUMNS`) a `runs` table with `columns` has: a nullable one it lacks
    is read as null (a table an older version wrote); one never null is a refusal."""
    lacking = [c for c in _RUNS_COLUMNS if c not in columns and not RUNS_SCHEMA[c].nullable]
    if lacking:
        raise WindowConflict(f"{location}: written by an older version of the job (no {', '.join(lacking)} "
                             f"column{'s' if len(lacking) > 1 else ''}); write to a new output path (keep this "
                             f"one for its history)")
    return [c for c in _RUNS_COLUMNS if c in columns]


_RUNS_COLUMNS = ["run_id", "run_window", "since", "until", "group_filter", "end_offsets", "finished_at", "status",
                 "missing_offsets"]


def read_runs(spark: SparkSession, location: str, *, is_table: bool) -> list[ChainRun]:
    """The complete runs written to an output (every `runs` row is a complete run), oldest first."""
    if not is_table and not _is_delta_table(location):
        return []
    if not (is_table or delta_spark_available(spark)):
        return read_runs_arrow(location)
    if is_table and not spark.catalog.tableExists(location):
        return []
    df = spark.table(location) if is_table else read_table(spark, location)
    return _chain_runs([r.asDict() for r in df.select(*_runs_columns(location, df.columns)).collect()])


def read_runs_arrow(location: str) -> list[ChainRun]:
    """`read_runs` of a path-based `runs` table, read by delta-rs and pyarrow, without Spark: a few
    rows per night, in one file per night (the embedded reader would read a relation per window
    and one task per file); none when `location` holds no Delta table."""
    if not _is_delta_table(location):
        return []
    arrow = read_arrow(location)
    return _chain_runs(arrow.select(_runs_columns(location, arrow.column_names)).to_pylist())


def _chain_runs(rows: Sequence[Mapping[str, Any]]) -> list[ChainRun]:
    """The succeeded runs of `runs` rows, oldest first."""
    def offsets(value: Any) -> dict[int, int]:  # a map: a dict from Spark, (key, value) pairs from pyarrow
        return {int(k): int(v) for k, v in (dict(value) if value else {}).items()}

    runs = [ChainRun(r["run_id"], r["run_window"], _utc(r.get("since")), _utc(r.get("until")), r.get("group_filter"),
                     offsets(r["end_offsets"]), _utc(r["finished_at"]) or datetime.min.replace(tzinfo=UTC),
                     offsets(r["missing_offsets"]))
            for r in rows if r["status"] == "succeeded"]
    runs.sort(key=lambda r: (r.finished_at, r.run_id))
    return runs


def _reruns(since: datetime | None, until: datetime | None, last: ChainRun) -> bool:
    """Whether the window [since, until) re-runs the latest run's window: it ends where that one
    ends and starts where it starts or within it."""
    if until != last.until:
        return False
    if since == last.since:
        return True
    return (since is not None and last.since is not None and since > last.since
            and (last.until is None or since < last.until))


def plan_run(runs: Sequence[ChainRun], *, since: datetime | None, until: datetime | None,
             group_filter: str | None, mode: str) -> RunPlan:
    """Which run this one continues (module docstring). `runs` are the output's complete runs,
    oldest first; raises `WindowConflict` for a window that cannot follow them."""
    since, until = _utc(since), _utc(until)
    if mode == "overwrite" or not runs:
        return RunPlan("fresh", None, since)
    # the latest attempt of each window is what the tables hold
    latest: dict[str, ChainRun] = {}
    for r in runs:
        latest[r.run_window] = r
    chain = sorted(latest.values(), key=lambda r: (r.finished_at, r.run_id))
    for r in chain:
        if r.group_filter != group_filter:
            raise WindowConflict(
                f"run {r.run_id} (window {_window_text(r)}) audited groups {r.group_filter or 'all'}, this run "
                f"{group_filter or 'all'}: runs carrying state into one output must audit the same groups; "
                f"use another output path for a different group filter")
    last = chain[-1]
    if _reruns(since, until, last):
        if mode == "append":
            raise WindowConflict(f"window {_window_text(last)} was already written by run {last.run_id}; "
                                 f"--mode append would duplicate its rows: use --mode replace_window to re-run it")
        before = [r for r in chain[:-1] if r.until is not None and last.since is not None and r.until == last.since]
        note = (f"re-runs window {_window_text(last)} (replaces run {last.run_id})",)
        if not before:  # the window was the chain's first: it starts afresh again
            return RunPlan("fresh", None, last.since, replaces=last, notes=note)
        return RunPlan("rerun", before[-1], last.since, tuple(chain[:-1]), replaces=last, notes=note)
    for r in chain:
        if _overlap((since, until), (r.since, r.until)):
            bounds = " ".join(f"--{name} {_fmt(t)}" for name, t in (("since", r.since), ("until", r.until))
                              if t is not None)
            hint = (f"re-run that window ({bounds or 'without --since/--until'}) with an input that holds the "
                    f"records: it audits every record after the run before it"
                    if r is last else "only the latest window can be re-run; audit it into another output path, "
                    "or rebuild this one with --mode overwrite")
            raise WindowConflict(f"window [{_fmt(since)}, {'open' if until is None else _fmt(until)}) overlaps "
                                 f"run {r.run_id} (window {_window_text(r)}): {hint}")
    if since is None or last.until is None or since < last.until:
        raise WindowConflict(f"window [{_fmt(since)}, {'open' if until is None else _fmt(until)}) comes before "
                             f"the latest run {last.run_id} (window {_window_text(last)}): runs go forward in "
                             f"time; start at {_fmt(last.until)}, or rebuild with --mode overwrite")
    notes: tuple[str, ...] = ()
    if since > last.until:
        notes = (f"--since {_fmt(since)} is after the end of run {last.run_id} ({_fmt(last.until)}): this run "
                 f"audits from where that run stopped, its window is [{_fmt(last.until)}, "
                 f"{'open' if until is None else _fmt(until)})",)
    return RunPlan("resume", last, last.until, tuple(chain), notes=notes)


def read_state(spark: SparkSession, location: str, base: ChainRun, *, is_table: bool) -> DataFrame:
    """The base run's `group_state` rows (a path-based table's other windows' files are not read);
    a column of `GROUP_STATE_SCHEMA` the table lacks (an older version wrote it) read as null."""
    df = spark.table(location) if is_table else read_table(
        spark, location, files=lambda action: (action.get("partition") or {}).get("run_window") == base.run_window)
    for f in GROUP_STATE_SCHEMA.fields:
        if f.name not in df.columns:
            df = df.withColumn(f.name, F.lit(None).cast(f.dataType))
    return df.where((F.col("run_window") == base.run_window) & (F.col("run_id") == base.run_id))


STATE_TABLE_COLUMNS = ("group_id", "auditor_state", "window_value", "offset_windows")
"""The `group_state` columns a run resumes from (`coordinator_audit.udfs.replay.saved_states_table` reads these)."""


_STATE_ARROW = to_arrow_schema(GROUP_STATE_SCHEMA, timezone="UTC")
"""`group_state`'s columns in Arrow: the types of those `read_state_batches` reads as null."""


STATE_BATCH_ROWS = 256
"""Saved states the driver holds at a time while it hands them to the replay (`read_state_batches`):
about 22 KB a group on the 5,000-group benchmark (its open offset windows)."""


def read_state_batches(location: str, base: ChainRun, *, batch_rows: int = STATE_BATCH_ROWS) -> Iterator[pa.Table]:
    """`read_state` of a path-based table, read by the driver with pyarrow, at most `batch_rows`
    rows at a time (`coordinator_audit.jobs.delta_read.iter_arrow`: only the files of the base run's window, only
    `STATE_TABLE_COLUMNS` and `run_id`), no Spark job: the replay's handoff writes each piece to its
    buckets' files before the next is read, so the driver's memory does not grow with the number of
    groups: Arrow's peak is a batch's, where reading the states as one table would hold them all."""
    stored = pa.schema(DeltaTable(location).schema().to_arrow()).names
    lacking = [c for c in STATE_TABLE_COLUMNS if c not in stored]  # an older version's table: read as null
    for rows in iter_arrow(location, equals=("run_window", base.run_window),
                           columns=(*[c for c in STATE_TABLE_COLUMNS if c in stored], "run_id"), batch_rows=batch_rows):
        kept = rows.filter(pc.equal(rows.column("run_id"), pa.scalar(base.run_id, rows.schema.field("run_id").type)))
        for c in lacking:
            kept = kept.append_column(_STATE_ARROW.field(c), pa.nulls(kept.num_rows, _STATE_ARROW.field(c).type))
        if kept.num_rows:
            yield kept.select([*STATE_TABLE_COLUMNS, "run_id"])


def gaps(start_after: Mapping[int, int], ranges: Mapping[int, tuple[int, int, int]],
         timestamp_ms: int) -> dict[int, HistoryGap]:
    """Per partition, the offsets never read between the base's last offset and this run's first."""
    out = {}
    for p, last in start_after.items():
        if p in ranges and ranges[p][0] > last + 1:
            out[p] = HistoryGap(p, last, ranges[p][0], ranges[p][0] - last - 1, timestamp_ms)
    return out


def home_windows(chain: Sequence[ChainRun], spans: Mapping[int, tuple[int, int]]) -> tuple[str, ...] | None:
    """The `run_window`s of the chain runs that read offsets in `spans` ({partition: (min, max)} of
    the records the carried rows start at): the partitions a merge must look into. A run read the
    offsets after the previous run's last one up to its own last one (the first run: everything up
    to its last one). None when a partition is in no run's record (no restriction is safe then)."""
    out: set[str] = set()
    for p, (lo, hi) in spans.items():
        previous: int | None = None
        for r in chain:
            end = r.end_offsets.get(p)
            if end is None:
                continue
            if lo <= end and (previous is None or hi > previous):
                out.add(r.run_window)
            previous = end if previous is None else max(previous, end)
        if previous is None:
            return None
    return tuple(sorted(out))


def spans_of(df: DataFrame, partition_col: str, offset_col: str) -> dict[int, tuple[int, int]]:
    """{partition: (min offset, max offset)} of a (small) DataFrame's rows."""
    rows = df.groupBy(partition_col).agg(F.min(offset_col).alias("lo"), F.max(offset_col).alias("hi")).collect()
    return {int(r[partition_col]): (int(r["lo"]), int(r["hi"])) for r in rows if r[partition_col] is not None}


def arrow_spans(rows: pa.Table, partition_col: str, offset_col: str) -> dict[int, tuple[int, int]]:
    """`spans_of` of rows in the driver's memory (Arrow)."""
    if rows.num_rows == 0:
        return {}
    spans = rows.select([partition_col, offset_col]).group_by(partition_col).aggregate(
        [(offset_col, "min"), (offset_col, "max")])
    return {int(p): (int(lo), int(hi)) for p, lo, hi in zip(
        spans[partition_col].to_pylist(), spans[f"{offset_col}_min"].to_pylist(), spans[f"{offset_col}_max"].to_pylist(),
        strict=True) if p is not None}


def read_note(plan: RunPlan, asked_since: datetime | None, ranges: Mapping[int, tuple[int, int, int]]) -> str | None:
    """What a run that continues a base read, per `__consumer_offsets` partition, when that is not
    simply the input's records of `--since`'s window: when its window starts before `asked_since`
    (a skipped night: the records in between are audited when the input holds them), or when it read
    partitions no earlier run read (from their first record). None otherwise."""
    if plan.base is None:
        return None
    after = plan.start_after
    first = sorted(p for p in ranges if p not in after)
    widened = asked_since is not None and plan.since is not None and _utc(asked_since) != plan.since
    if not widened and not first:
        return None
    parts = []
    for p in sorted({*after, *ranges}):
        if p not in ranges:
            parts.append(f"{p}: none after {after[p]}")
            continue
        lo, hi, n = ranges[p]
        new = "" if p in after else ", first read" + (f": offsets before {lo} are not in the input" if lo > 0 else "")
        parts.append(f"{p}: {lo}-{hi} ({n:,} records{new})")
    text = f"read after run {plan.base.run_id}'s last offsets, per partition: " + ", ".join(parts)
    if first:
        text += (f"; partition{'s' if len(first) > 1 else ''} {', '.join(map(str, first))} no earlier run read: "
                 f"from the first record in the input")
    if widened:
        text = (f"window [{_fmt(plan.since)}, ...) instead of --since {_fmt(_utc(asked_since))}: run "
                f"{plan.base.run_id} ended at {_fmt(plan.since)}; ") + text
    return text


def describe(plan: RunPlan) -> str:
    if plan.resume == "fresh":
        return "no earlier run to continue: the audit starts from the input" + "".join(f"; {n}" for n in plan.notes)
    if plan.resume == "warmup":
        return "no earlier run: the state was rebuilt from the input's records before the window (warm-up)"
    assert plan.base is not None or plan.resume == "rerun"
    base = (f"run {plan.base.run_id} (window {_window_text(plan.base)})" if plan.base is not None
            else "no earlier run")
    return f"continues {base}" + "".join(f"; {n}" for n in plan.notes)

