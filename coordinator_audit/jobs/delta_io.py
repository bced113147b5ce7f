"""All Delta I/O of the project: writing a run's tables, reading them back, checking run consistency.

Two writers, one contract (`write_tables`):

* **native** — when the session is configured for Delta Spark (its extension and catalog, with
  its jars: spark-submit `--packages io.delta:delta-spark_2.13:<v>`): `df.write.format("delta")`, with `replaceWhere`
  on the window for window replacement; path-based tables under a base path, or catalog tables
  (`saveAsTable("<schema>.<table>")`) when `catalog_schema` is given and a metastore with Delta
  exists.
* **embedded** — the default where Delta Spark is absent (this machine: no Maven Central): Spark
  tasks write the Parquet files in parallel straight into the table directory, under
  `<table>/run_window=<W>/<run_id>/`, so large outputs never pass through the driver; the
  driver then lists the new files (size, partition value, and stats read from the Parquet footers
  only: numRecords, nullCount, min/max of integer, timestamp and short string columns) and makes
  ONE Delta commit per table with `deltalake`'s transaction API: add actions for the new files,
  remove actions for the files they replace. Timestamps are written as TIMESTAMP_MICROS (Delta's
  encoding), never as Spark's legacy INT96. The tables are plain Delta (reader v1 / writer v2):
  readable by delta-rs, Delta Spark, and `read_table` below. A table may come with its files
  written already (`StagedFiles`: the replay's tasks write the new rows of most tables themselves,
  `coordinator_audit.udfs.table_files`, into the same staged directory, `stage_dirs`): the driver commits the files
  listed, deletes any other file there (a failed or recomputed task attempt's), and checks that
  the rows in the files' footers are the rows reported.

Idempotent windows. Every table is partitioned by one column, `run_window`, a path-safe label of
the run's `--since/--until` window (`window_label`: `20261121T000000Z--20261122T000000Z`, or
`all` for an unbounded run); every row also carries the `run_id` of the run that wrote it.
`replace_window` (the default) removes exactly the files of this window's partition and adds the
new ones in the same commit, so re-running a window replaces that window's rows and leaves every
other window alone, and the replacement is a metadata operation (no file is rewritten). Windows
are identified by their exact bounds: two runs with overlapping but different windows both stay.
Run aligned windows (e.g. daily) to make reruns replace. `overwrite` replaces the whole table,
`append` adds only. The `runs` table is always appended (one row per run, the run history).

Why partition by window and nothing else: the window is the unit of replacement, so partitioning
by it makes a rerun drop whole files instead of rewriting them (delete-by-predicate would rewrite
every file straddling the window), and nightly windows give day-sized partitions, the size Delta
works well with. Partitioning by group (thousands of groups, most with a few rows) or by
topic-partition would produce a small-files problem for no pruning gain: readers filter by
window, and by group through the Parquet min/max statistics.

Atomicity. Delta has no multi-table transactions; this module gives the following guarantee:

1. Phase 1 (data): Spark writes every table's files first, each into a directory named by the
   run id (the embedded writer runs up to `WRITE_THREADS` tables' writes as concurrent Spark
   jobs; `runs`, which records the rows written, goes after them). No table changes yet. If any
   write fails, the staged directories are deleted and every table stays at its previous version.
2. Phase 2 (commits): one atomic Delta commit per table, in a fixed order with `runs` LAST. Each
   commit records `{"run_id", "run_window", "table", "mode", ...}` as its commitInfo
   `userMetadata`. If commit k fails, the commits 1..k-1 of this run are compensated: the embedded
   writer commits their exact inverse (removes the files it added, re-adds the files it removed;
   tables created by this run are deleted), the native writer RESTOREs them to the version before
   the run. The staged files of uncommitted tables are deleted. The run then fails.
3. A crash between commits (process killed during phase 2) cannot be compensated at once; it is
   detectable: the run's `runs` commit is missing while some tables have commits tagged with its
   run id. `find_incomplete_runs(base_path)` lists them. Readers that need consistency join on
   `runs` (a run is complete iff its runs row exists). Re-running the same window heals every
   table (each replaces that window's partition).

Staged files of a crashed phase 1 are unreferenced by any table version (readers never see them);
`DeltaTable.vacuum(full=True)` removes them.

Merges (nightly runs). A run that resumes from an earlier run's state re-emits the rows that run
left open and this one changed (a generation's end, an ownership interval's `valid_to`, an offset
window's counts and end). `write_tables(..., merges=...)` merges them into the existing rows by
their key (`Merge`): a real Delta MERGE (delta-rs `DeltaTable.merge` on the embedded path, Delta
Spark's `DeltaTable.merge` on the native one), matched rows updated where they live (their
`run_window` is kept), unmatched ones inserted into this run's window. The merge is a second
commit of the table, tagged with the run id like the first; `home_windows` restricts the target
to the partitions that can hold the rows (a nightly merge reads a few partitions, not a year of
them). The derived tables are merged by replacement (`Merge.scope`): a run derives its groups'
rows anew, writes those it re-derives with authority into its window, and the merge deletes the
stored rows of those groups they replace and updates the intervals the run closes before its
reach (the merge's source is those); so every row is stored once, and re-running the latest window gives the same rows again. When a later commit of the run fails, every table this run committed is RESTOREd to its
version before the run (both writers), so the guarantees above hold with merges too.

Schema evolution. An output outlives versions of the job. When a version adds columns to a table, a
run into an output an earlier version wrote adds them to the stored table (`schema_change`, checked
for every table before anything is written): the columns the rows have and the table lacks, each
nullable in the rows (this version's readers take null there, which is what the rows stored before
read in them). The embedded writer adds them with delta-rs' `DeltaTable.alter.add_columns`, a
commit of its own tagged with the run id just before the files' commit (delta-rs' transactions
keep a table's schema); if that commit or a later one of the run fails, the table is RESTOREd to its
version before the run, schema included. The native writer writes the table with `mergeSchema`,
which adds them in the write's own commit. `CommitResult.columns_added` and the `runs` row
(`RunsRow`) are told. Any other difference is refused: a column the rows lack, a type changed, a new
column the rows never leave null (a renamed column is one lacking and one new).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import math
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable, Schema, WriterProperties
from deltalake import Field as DeltaField
from deltalake.transaction import AddAction, CommitProperties, RemoveAction, create_table_with_add_actions
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StringType, StructField

from coordinator_audit.core.errors import CoordinatorAuditError
from coordinator_audit.jobs.config import DEFAULT_COMPRESSION, Compression
from coordinator_audit.jobs.delta_read import WHATIF_TABLE, not_file_readable
from coordinator_audit.jobs.spark_session import job_description
from coordinator_audit.udfs.table_files import part_file_name

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "PARTITION_COLUMN",
    "RUNS_TABLE",
    "CommitResult",
    "DeltaWriteError",
    "IncompleteRun",
    "Merge",
    "StagedFiles",
    "WriteMode",
    "Writer",
    "delete_dir",
    "delta_spark_available",
    "find_incomplete_runs",
    "local_path",
    "local_table_path",
    "new_run_id",
    "output_refusal",
    "plain_parquet_snapshot",
    "read_table",
    "resolve_writer",
    "stage_dirs",
    "table_location",
    "window_label",
    "write_tables",
]

WriteMode = Literal["replace_window", "overwrite", "append"]
Writer = Literal["auto", "native", "embedded"]

PARTITION_COLUMN = "run_window"
RUN_ID_COLUMN = "run_id"
RUNS_TABLE = "runs"
METADATA_KEY = "coordinator_audit"
CHECKPOINT_INTERVAL = 10
"""`delta.checkpointInterval` of the tables the embedded writer creates: delta-rs then writes a
checkpoint every 10th commit, as Delta Spark does by default (delta-rs's own default is 100). A
nightly output gains one or two commits per table per night; opening a table replays the JSON
commits since its last checkpoint, so a year of nights opens in the time of a few commits."""


class DeltaWriteError(CoordinatorAuditError):
    """A run's tables could not be written; the message says which tables are in which state."""


@dataclass(frozen=True, slots=True)
class CommitResult:
    """One table's commit of a run."""

    table: str
    location: str
    version: int
    mode: WriteMode
    files_added: int
    files_removed: int
    rows_added: int
    created: bool
    rows_merged: int = 0
    merged: bool = False
    """The table also got a merge commit (`version` is then the merge's)."""
    version_before: int | None = None
    columns_added: tuple[str, ...] = ()
    """Columns the run added to the stored table (schema evolution, module docstring)."""


@dataclass(frozen=True, slots=True)
class Merge:
    """Rows to merge into a table's existing rows (see the module docstring): `rows` has the table's
    content columns (and their TIMESTAMP companions); as Arrow (embedded writer only), the stored
    columns but `run_window` (`coordinator_audit.udfs.table_files.stored_batch`, `read_carried`); `keys` identify a
    row (`null_safe_keys` may be null on both sides: equal); `home_windows` are the `run_window`
    partitions the matched rows can live in (None: any)."""

    rows: DataFrame | pa.Table
    keys: tuple[str, ...]
    null_safe_keys: tuple[str, ...] = ()
    home_windows: tuple[str, ...] | None = None
    keep_target: tuple[str, ...] = ()
    """Columns a matched row keeps where the merged row has null (facts from other inputs, e.g. the
    broker's account of a generation, that this run may not have)."""
    scope: str | None = None
    """With it, the merge replaces stored rows instead of adding any: the run's own commit wrote the
    rows it derived for the groups `scope_groups` that meet `scope` (an SQL condition on a row, `{r}`
    standing for its alias and a dot) into its window, and `rows` are the others it derived. In every
    other window (of `home_windows`), a stored row of those groups that meets `scope` is deleted (the
    run's window holds what replaces it), unless it matches one of `rows` by key (an interval the
    run now closes before its reach, e.g. of a member that crashed in an earlier window): that row
    is updated where it lives. No row is inserted."""
    scope_groups: tuple[str, ...] = ()
    topic_by_id: bool = False
    """With it, `topic` is part of the key only where `topic_id` (a null-safe key) is null: a
    consumer group's row keeps its identity when a later run learns its topic id's name."""

    def update_expression(self, column: str) -> str:
        if column in self.keep_target:
            return f"coalesce(s.`{column}`, t.`{column}`)"
        return f"s.`{column}`"


@dataclass(frozen=True, slots=True)
class IncompleteRun:
    """A table commit tagged with a run id that has no commit in the runs table."""

    table: str
    version: int
    run_id: str
    run_window: str


# ------------------------------------------------------------------------------------------------
# naming


def window_label(since: datetime | None, until: datetime | None) -> str:
    """The `run_window` partition value of a window: path-safe, sortable, exact to the second
    (`all`, `20261121T000000Z--20261122T000000Z`, `20261121T000000Z--open`, `open--...`)."""
    if since is None and until is None:
        return "all"

    def fmt(t: datetime | None) -> str:
        if t is None:
            return "open"
        t = t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)
        if t.microsecond:
            raise ValueError(f"window bound {t.isoformat()} has sub-second precision; use whole seconds")
        return t.strftime("%Y%m%dT%H%M%SZ")

    return f"{fmt(since)}--{fmt(until)}"


def new_run_id(now: datetime | None = None) -> str:
    """A sortable, path-safe run id: UTC start time plus 8 random hex digits."""
    t = (now or datetime.now(UTC)).astimezone(UTC)
    return f"{t.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"


def table_location(table: str, *, base_path: str | None = None, catalog_schema: str | None = None) -> str:
    """`<base_path>/<table>` for path-based tables, `<catalog_schema>.<table>` for catalog tables."""
    if catalog_schema:
        return f"{catalog_schema}.{table}"
    if not base_path:
        raise DeltaWriteError("no output location: pass base_path or catalog_schema")
    return f"{base_path.rstrip('/')}/{table}"


# ------------------------------------------------------------------------------------------------
# writer choice


DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


def delta_spark_available(spark: SparkSession) -> bool:
    """True when the session is configured for Delta Spark: `spark.sql.extensions` names
    `DeltaSparkSessionExtension` and `spark.sql.catalog.spark_catalog` is `DeltaCatalog`, as Delta
    Spark asks (`DELTA_CONFIGURE_SPARK_SESSION_WITH_EXTENSION_AND_CATALOG`). Asked of the session's
    settings, on a classic and a Spark Connect session alike; the classes being on the classpath
    (e.g. from `scripts/jars.sh spark`'s jars) is not enough."""
    extensions = str(spark.conf.get("spark.sql.extensions", None) or "")
    catalog = str(spark.conf.get("spark.sql.catalog.spark_catalog", None) or "")
    return DELTA_EXTENSION in [e.strip() for e in extensions.split(",")] and catalog.strip() == DELTA_CATALOG


def resolve_writer(spark: SparkSession, writer: Writer = "auto") -> Literal["native", "embedded"]:
    """`auto` -> native when the session is configured for Delta Spark (`delta_spark_available`),
    else embedded; `native` on a session not configured for it is an error that says how to configure it."""
    has_delta = delta_spark_available(spark)
    if writer == "native" and not has_delta:
        raise DeltaWriteError(f"writer 'native' needs a session configured for Delta Spark: its jars (spark-submit "
                              f"--packages io.delta:delta-spark_2.13:<version>) and --conf spark.sql.extensions="
                              f"{DELTA_EXTENSION} --conf spark.sql.catalog.spark_catalog={DELTA_CATALOG}; or use "
                              f"writer 'embedded'")
    if writer == "embedded" or not has_delta:
        return "embedded"
    if importlib.util.find_spec("delta") is None:
        raise DeltaWriteError("writer 'native': the session is configured for Delta Spark, but its Python package "
                              "is not installed: pip install 'coordinator-audit[delta-spark]' (the delta-spark "
                              "version that matches the session's jars), or use writer 'embedded'")
    return "native"


# ------------------------------------------------------------------------------------------------
# writing


@dataclass(slots=True)
class _Staged:
    table: str
    uri: str
    df_schema: Any  # pyspark StructType of the stored columns without the partition column
    mode: WriteMode
    stage_dir: str
    adds: list[Any] = field(default_factory=list)
    rows: int = 0


def _with_run_columns(df: DataFrame, run_id: str) -> DataFrame:
    if PARTITION_COLUMN in df.columns:
        df = df.drop(PARTITION_COLUMN)
    if RUN_ID_COLUMN not in df.columns:
        df = df.withColumn(RUN_ID_COLUMN, F.lit(run_id))
    return df


@dataclass(frozen=True, slots=True)
class StagedFiles:
    """A table whose run's Parquet files are written already, into its staged directory
    (`stage_dirs`), by whoever held its rows (the replay's workers, `coordinator_audit.udfs.table_files`): `schema`
    is the Spark schema of the files' columns (as `_with_run_columns` gives them: content, time
    companions, run_id), `files` the absolute paths to commit. Any other file in the directory (a
    failed or recomputed task attempt's) is deleted before the commit. Embedded writer only."""

    schema: Any
    files: tuple[str, ...]
    rows: int


def stage_dir(table: str, *, base_path: str, run_id: str, run_window: str) -> str:
    """Where the embedded writer stages a run's files of `table` (`<table>/run_window=<W>/<run_id>`)."""
    return f"{table_location(table, base_path=base_path)}/{PARTITION_COLUMN}={run_window}/{run_id}"


def stage_dirs(tables: Sequence[str], *, base_path: str, run_id: str, run_window: str) -> dict[str, str]:
    """The staged directories of `tables` for a run whose files are written outside `write_tables`
    (`StagedFiles`), as absolute local paths; an error when one exists already (a run id names one run)."""
    out: dict[str, str] = {}
    for table in tables:
        uri = stage_dir(table, base_path=base_path, run_id=run_id, run_window=run_window)
        if _dir_exists(uri):
            raise DeltaWriteError(_run_dir_exists(table, uri, run_id, run_window))
        out[table] = _fs_and_path(uri)[1]
    return out


CARRIED_ROOT = "_carried_rows"
"""The directory under a base path where a run's carried rows wait for their merge (`carried_dirs`)."""


def carried_dirs(tables: Sequence[str], *, base_path: str, run_id: str) -> dict[str, str]:
    """Where the replay's tasks write a run's carried rows of `tables` (rows continuing an earlier
    run's open rows, the source of the table's `Merge`): `<base>/_carried_rows/<run_id>/<table>`,
    absolute local paths, outside every table (no Delta log lists them); `delete_carried` removes
    them after the run."""
    root = _fs_and_path(f"{base_path.rstrip('/')}/{CARRIED_ROOT}/{run_id}")[1]
    return {table: os.path.join(root, table) for table in tables}


def delete_carried(base_path: str, run_id: str) -> None:
    """Deletes a run's carried rows' files (`carried_dirs`), and their root when no other run's remain."""
    parent = _fs_and_path(f"{base_path.rstrip('/')}/{CARRIED_ROOT}")[1]
    delete_dir(os.path.join(parent, run_id))
    with contextlib.suppress(OSError):  # another run's files (or none at all): it stays
        os.rmdir(parent)


def read_carried(files: StagedFiles) -> pa.Table:
    """The rows of a table's carried rows' files (`StagedFiles` of `carried_dirs`), read by the
    driver (they are the source of a merge, small next to the table)."""
    if not files.files:
        return to_arrow_schema(files.schema, timezone="UTC").empty_table()
    return pa.concat_tables([pq.read_table(path) for path in files.files])


def _run_dir_exists(table: str, uri: str, run_id: str, run_window: str) -> str:
    return (f"run {run_id}: table {table} already has a directory for this run id in window {run_window} ({uri}): "
            f"a run id names one run; give another --run-id (or none: the default is time-based)")


def local_path(uri: str | None) -> bool:
    """Whether `uri` is a path of this machine's file system: no scheme (a one-letter one is a
    Windows drive), or `file:`. `dbfs:/...`, `s3://...` and the like are not."""
    if not uri:
        return False
    scheme = urlparse(uri).scheme
    return len(scheme) <= 1 or scheme == "file"


def output_refusal(base_path: str, tables: Sequence[str]) -> str | None:
    """Why a run must not write its tables `tables` (besides `runs`) under the local base path
    `base_path` (None: it may; a remote path is not looked at): the path is a file, a Delta table, or
    inside one (the tables would nest in another table's files), or it holds anything but the job's
    tables (a directory per table holding its `_delta_log` and `run_window=` folders, the carried
    rows' folder, `CARRIED_ROOT`, and the what-if's Delta table, `WHATIF_TABLE`), whose files a
    run's `overwrite` or a user's clean-up would not tell from the job's."""
    if not local_path(base_path):
        return None
    root = Path(os.path.abspath(unquote(urlparse(base_path).path) if base_path.startswith("file:") else base_path))
    for folder in (root, *root.parents):
        if (folder / "_delta_log").is_dir():
            return "is a Delta table" if folder == root else f"lies inside the Delta table {folder}"
    if not root.exists():
        return None
    if not root.is_dir():
        return "is a file, not a folder"
    ours = {*tables, RUNS_TABLE}

    def job_table(entry: Path) -> bool:
        return entry.is_dir() and all(
            c.name == "_delta_log" or c.name.startswith(f"{PARTITION_COLUMN}=") for c in entry.iterdir())

    others = sorted(e.name for e in root.iterdir()
                    if not ((e.name in ours and job_table(e)) or (e.name == CARRIED_ROOT and e.is_dir())
                            or (e.name == WHATIF_TABLE and (e / "_delta_log").is_dir())))
    if not others:
        return None
    shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
    what = "an entry that is" if len(others) == 1 else f"{len(others)} entries that are"
    return f"holds {what} not one of this job's tables ({shown})"


def local_table_path(location: str) -> bool:
    """Whether a table location (`table_location`) is a path on this machine's file system
    (`local_path`), not a catalog table's name (a path has a "/", a `schema.table` name none)."""
    return local_path(location) and "/" in location


_Prepared = Any
"""A table's DataFrame ready to write, its `StagedFiles`, or (runs) a function of the other tables'
rows giving it."""


def _ordered(tables: Mapping[str, Any]) -> list[str]:
    names = [n for n in tables if n != RUNS_TABLE]
    return [*names, RUNS_TABLE] if RUNS_TABLE in tables else names


RunsRow = Callable[[Mapping[str, int], Mapping[str, tuple[str, ...]]], "DataFrame"]
"""The `runs` table's content given {table: rows written} of the run's other tables (written first)
and {table: the columns the write adds to it} (`schema_changes`). Its columns do not depend on them:
the writer calls it with both empty to learn them."""


def write_tables(spark: SparkSession, tables: Mapping[str, DataFrame | RunsRow], *, run_id: str, run_window: str,
                 base_path: str | None = None, catalog_schema: str | None = None,
                 mode: WriteMode = "replace_window", writer: Writer = "auto",
                 files_per_table: Mapping[str, int] | None = None,
                 merges: Mapping[str, Merge] | None = None,
                 compression: Compression = DEFAULT_COMPRESSION) -> dict[str, CommitResult]:
    """Writes one run's tables (name -> DataFrame of content columns) atomically per table and
    consistently across tables as far as Delta allows (module docstring: phases, commit order with
    `runs` last, compensation). `mode` applies to every table but `runs`, which is appended.
    `files_per_table` caps the number of files of a table (coalesce); `runs` gets 1 by default.
    `merges` (table -> `Merge`) are merged into existing rows after the table's own commit.
    `tables["runs"]` may be a `RunsRow`: it is called with the rows written to the other tables, so
    a run's row can record them without counting the tables beforehand. A table may also be given
    as `StagedFiles` (embedded writer only): its files are written already, phase 2 commits them.
    `compression` is the codec of the Parquet files this call writes (Spark's, delta-rs' merges, Delta
    Spark's; the files of `StagedFiles` were written with theirs).

    A stored table whose columns are a subset of the rows' (same names, same types) gains the others
    (module docstring, schema evolution: `CommitResult.columns_added`); any other difference is a
    `DeltaWriteError` (`schema_change`) before anything is written.

    Returns {table: CommitResult} in commit order."""
    if not run_id or not all(c.isalnum() or c in "-_" for c in run_id):
        raise DeltaWriteError(f"run_id {run_id!r} must be non-empty letters, digits, '-' or '_'")
    if not run_window or not all(c.isalnum() or c in "-_" for c in run_window):
        raise DeltaWriteError(f"run_window {run_window!r} must be non-empty letters, digits, '-' or '_' "
                              f"(use window_label)")
    kind = resolve_writer(spark, writer)
    if catalog_schema and kind == "embedded":
        raise DeltaWriteError(f"catalog schema {catalog_schema!r} needs Delta Spark and a metastore (writer "
                              f"'native'); the embedded writer writes path-based tables: pass a base path")
    def prepare(name: str, df: DataFrame) -> DataFrame:
        df = _with_run_columns(df, run_id)
        n = (files_per_table or {}).get(name, 1 if name == RUNS_TABLE else None)
        return df.coalesce(n) if n else df

    prepared: dict[str, _Prepared] = {}
    for name in _ordered(tables):
        content = tables[name]
        if isinstance(content, StagedFiles):
            if kind != "embedded":
                raise DeltaWriteError(f"table {name}: its files were written outside Spark, which only the "
                                      f"embedded writer commits (this run's writer: {kind})")
            prepared[name] = content
        elif callable(content):
            prepared[name] = lambda rows, added, fn=content, name=name: prepare(name, fn(rows, added))
        else:
            prepared[name] = prepare(name, content)
    added = schema_changes(spark, {name: _prepared_schema(content) for name, content in prepared.items()},
                           base_path=base_path, catalog_schema=catalog_schema)
    modes: dict[str, WriteMode] = {name: ("append" if name == RUNS_TABLE else mode) for name in prepared}
    merge_rows = {name: m for name, m in (merges or {}).items() if name in prepared}
    if kind == "native":
        arrow = sorted(name for name, m in merge_rows.items() if isinstance(m.rows, pa.Table))
        if arrow:
            raise DeltaWriteError(f"tables {', '.join(arrow)}: their carried rows were written outside Spark, which "
                                  f"only the embedded writer merges (this run's writer: {kind})")
        return _write_native(spark, prepared, modes, run_id=run_id, run_window=run_window,
                             base_path=base_path, catalog_schema=catalog_schema, merges=merge_rows,
                             compression=compression, added=added)
    assert base_path is not None
    return _write_embedded(spark, prepared, modes, run_id=run_id, run_window=run_window, base_path=base_path,
                           merges=merge_rows, compression=compression, added=added)


def _prepared_schema(content: _Prepared) -> Any:
    """The Spark schema of a prepared table's stored columns (a `RunsRow`'s: of its row for no rows)."""
    if isinstance(content, StagedFiles):
        return content.schema
    if callable(content):
        return content({}, {}).schema
    return content.schema


def _merge_condition(m: Merge, run_window: str, *, quote: str = "") -> str:
    """The MERGE ON condition of `m` (target alias t, source alias s); `quote` quotes column names."""
    def q(c: str) -> str:
        return f"{quote}{c}{quote}"

    parts = [f"t.{q(k)} = s.{q(k)}" for k in m.keys]
    parts += [f"(t.{q(k)} = s.{q(k)} OR (t.{q(k)} IS NULL AND s.{q(k)} IS NULL))" for k in m.null_safe_keys]
    if m.topic_by_id:
        parts.append(f"(t.{q('topic_id')} IS NOT NULL OR t.{q('topic')} = s.{q('topic')})")
    return " AND ".join([*parts, _target_windows(m, run_window, quote=quote)])


def _sql_list(values: Sequence[str]) -> str:
    return ", ".join("'" + v.replace("'", "''") + "'" for v in sorted(values))


def _target_windows(m: Merge, run_window: str, *, quote: str = "") -> str:
    """The condition on a stored row (alias t) that it is in a window `m` may change: one of its
    home windows, or any; a scoped merge never changes the run's own window, `run_window`."""
    column = f"t.{quote}{PARTITION_COLUMN}{quote}"
    parts = []
    if m.home_windows is not None:
        windows = _sql_list(m.home_windows)
        parts.append(f"{column} IN ({windows})" if windows else "false")
    if m.scope is not None:
        parts.append(f"{column} <> {_sql_list([run_window])}")
    return " AND ".join(parts) or "true"


def _scope_clauses(m: Merge, run_window: str, *, quote: str = "") -> tuple[str, str]:
    """A scoped merge's conditions (`Merge.scope`): (update a matched stored row, delete a stored row
    no merged row matches)."""
    assert m.scope is not None
    target = m.scope.format(r="t.")
    groups = _sql_list(m.scope_groups)
    mine = f"t.{quote}group_id{quote} IN ({groups})" if groups else "false"
    return target, f"{target} AND {mine} AND {_target_windows(m, run_window, quote=quote)}"


def _merge_source(m: Merge, run_id: str, run_window: str) -> DataFrame:
    if isinstance(m.rows, pa.Table):
        raise DeltaWriteError("a merge of Arrow rows (carried rows' files) is the embedded writer's only")
    return _with_run_columns(m.rows, run_id).withColumn(PARTITION_COLUMN, F.lit(run_window))


def _user_metadata(table: str, run_id: str, run_window: str, mode: WriteMode | Literal["merge", "add_columns"],
                   **extra: Any) -> str:
    return json.dumps({METADATA_KEY: {"run_id": run_id, "run_window": run_window, "table": table,
                                      "mode": mode, **extra}}, sort_keys=True)


# --- embedded -------------------------------------------------------------------------------------


def _fs_and_path(uri: str) -> tuple[Any, str]:
    if "://" not in uri:
        uri = os.path.abspath(uri)
        return pafs.LocalFileSystem(), uri
    fs, path = pafs.FileSystem.from_uri(uri)
    return fs, path


def _dir_exists(uri: str) -> bool:
    fs, path = _fs_and_path(uri)
    return bool(fs.get_file_info(path).type == pafs.FileType.Directory)


def delete_dir(uri: str) -> None:
    fs, path = _fs_and_path(uri)
    if fs.get_file_info(path).type == pafs.FileType.Directory:
        fs.delete_dir(path)


def _is_delta_table(uri: str) -> bool:
    return bool(DeltaTable.is_deltatable(uri))


def _arrow_schema(spark_schema: Any) -> pa.Schema:
    return to_arrow_schema(spark_schema, timezone="UTC")


def _table_schema(df_schema: Any) -> pa.Schema:
    """Arrow schema of the stored table: the written columns, then the partition column."""
    arrow = _arrow_schema(df_schema)
    return arrow.append(pa.field(PARTITION_COLUMN, pa.string(), nullable=False))


def _stats_json(metadata: Any, arrow_schema: pa.Schema) -> str:
    """Delta file statistics from a Parquet footer: numRecords, and nullCount / minValues /
    maxValues for top-level integer, timestamp (floored/ceiled to ms) and short string columns."""
    stats: dict[str, Any] = {"numRecords": metadata.num_rows}
    if metadata.num_row_groups == 0:
        return json.dumps(stats)
    leaf = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for f in arrow_schema:
        i = leaf.get(f.name)
        if i is None:
            continue
        t = f.type
        kind = ("int" if pa.types.is_integer(t) else "ts" if pa.types.is_timestamp(t) else
                "str" if pa.types.is_string(t) else None)
        col_stats = [metadata.row_group(r).column(i).statistics for r in range(metadata.num_row_groups)]
        if all(s is not None and s.has_null_count for s in col_stats):
            nulls[f.name] = sum(s.null_count for s in col_stats)
        if kind is None or not all(s is not None and s.has_min_max for s in col_stats):
            continue
        lo = min(s.min for s in col_stats)
        hi = max(s.max for s in col_stats)
        if kind == "int":
            mins[f.name], maxs[f.name] = int(lo), int(hi)
        elif kind == "ts":
            mins[f.name], maxs[f.name] = _ts_stat(lo, up=False), _ts_stat(hi, up=True)
        elif isinstance(lo, str) and isinstance(hi, str) and len(lo) <= 32 and len(hi) <= 32:
            mins[f.name], maxs[f.name] = lo, hi
    if nulls:
        stats["nullCount"] = nulls
    if mins:
        stats["minValues"] = mins
        stats["maxValues"] = maxs
    return json.dumps(stats)


def _ts_stat(value: Any, *, up: bool) -> str:
    """A Delta timestamp statistic (ms precision, UTC): floor for minima, ceiling for maxima, so
    truncation can never exclude a file wrongly."""
    if isinstance(value, datetime):
        dt = value if value.tzinfo else value.replace(tzinfo=UTC)
        micros = int(dt.timestamp()) * 1_000_000 + dt.microsecond
    else:  # raw int64 microseconds
        micros = int(value)
    ms = math.ceil(micros / 1000) if up else micros // 1000
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _list_staged(st: _Staged, run_window: str) -> None:
    """Fills `st.adds` with one AddAction per Parquet file of the staged directory."""
    fs, stage_path = _fs_and_path(st.stage_dir)
    _, table_path = _fs_and_path(st.uri)
    arrow = _arrow_schema(st.df_schema)
    infos = fs.get_file_info(pafs.FileSelector(stage_path, recursive=True))
    now = int(time.time() * 1000)
    for info in sorted(infos, key=lambda i: i.path):
        base = info.base_name
        if info.type != pafs.FileType.File or base.startswith(("_", ".")) or not base.endswith(".parquet"):
            continue
        with fs.open_input_file(info.path) as fh:
            md = pq.ParquetFile(fh).metadata
        rel = info.path[len(table_path.rstrip("/")) + 1:]
        mtime = int(info.mtime.timestamp() * 1000) if info.mtime is not None else now
        st.adds.append(AddAction(rel, info.size, {PARTITION_COLUMN: run_window}, mtime, True,
                                 _stats_json(md, arrow)))
        st.rows += md.num_rows


def _adopt_staged(st: _Staged, files: StagedFiles, run_window: str, compression: Compression) -> None:
    """Fills `st.adds` from files written into the staged directory outside Spark: the listed ones
    (an empty file with the table's columns when none was written, as Spark writes for no rows);
    every other Parquet file there is deleted (a failed or recomputed task attempt's)."""
    fs, stage_path = _fs_and_path(st.stage_dir)
    keep = {os.path.normpath(_fs_and_path(f)[1]) for f in files.files}
    if fs.get_file_info(stage_path).type == pafs.FileType.Directory:
        for info in fs.get_file_info(pafs.FileSelector(stage_path, recursive=True)):
            if info.type == pafs.FileType.File and os.path.normpath(info.path) not in keep:
                fs.delete_file(info.path)
    if not keep:
        fs.create_dir(stage_path, recursive=True)
        empty = f"{stage_path}/{part_file_name(0, compression)}"
        pq.write_table(_arrow_schema(st.df_schema).empty_table(), empty, filesystem=fs, compression=compression)
    _list_staged(st, run_window)
    if st.rows != files.rows:
        raise DeltaWriteError(f"table {st.table}: the staged files hold {st.rows:,} rows, the workers that wrote "
                              f"them reported {files.rows:,} ({st.stage_dir})")


def _current_files(uri: str) -> list[dict[str, Any]]:
    actions = pa.table(DeltaTable(uri).get_add_actions(flatten=False))
    out = []
    for row in actions.to_pylist():
        out.append({"path": row["path"], "size": row["size_bytes"], "mtime": row["modification_time"],
                    "num_records": row.get("num_records"), "partition": row.get("partition") or {}})
    return out


def _removes_for(uri: str, mode: WriteMode, run_window: str) -> list[dict[str, Any]]:
    if mode == "append":
        return []
    files = _current_files(uri)
    if mode == "overwrite":
        return files
    return [f for f in files if f["partition"].get(PARTITION_COLUMN) == run_window]


def schema_change(table: str, location: str, stored: pa.Schema, wanted: pa.Schema) -> tuple[pa.Field, ...]:
    """The columns to add to the stored table `table` (at `location`, schema `stored`) so that it
    takes rows of schema `wanted` (module docstring, schema evolution): the columns of `wanted` the
    table lacks, each nullable in `wanted` (this version's readers take null there, which is what
    the rows stored before read in them); none when the table has every column. Any other
    difference (a column the rows lack, one of another type, a new column the rows never leave null;
    a renamed column is two of these) is a `DeltaWriteError` naming the table, the columns and the
    remedy. Columns match by name; their order and a stored column's nullability do not count."""
    have = {f.name: _strip(f.type) for f in stored}
    new = {f.name: _strip(f.type) for f in wanted}
    gone = [n for n in have if n not in new]
    changed = [f"{n} is {have[n]}, the rows' {new[n]}" for n in have if n in new and have[n] != new[n]]
    required = [f.name for f in wanted if f.name not in have and not f.nullable]
    if gone or changed or required:
        parts = ([f"column{'s' if len(gone) > 1 else ''} {', '.join(gone)} not in the rows"] if gone else []) + (
            changed) + ([f"new column{'s' if len(required) > 1 else ''} {', '.join(required)} never null in the "
                         f"rows"] if required else [])
        raise DeltaWriteError(f"table {table} ({location}): its schema differs from the rows being written by more "
                              f"than added nullable columns: {'; '.join(parts)}. Another version of the job wrote "
                              f"it: write to a new output path (keep this one for its history)")
    return tuple(f for f in wanted if f.name not in have)


def _stored_schema(spark: SparkSession | None, location: str, *, catalog: bool) -> pa.Schema | None:
    """The Arrow schema of the table at `location` (a catalog table's name with `catalog`, read by
    Spark; else a path, read by delta-rs), None when there is none."""
    if catalog:
        assert spark is not None
        if not spark.catalog.tableExists(location):
            return None
        return _arrow_schema(spark.table(location).schema)
    if not _is_delta_table(location):
        return None
    return pa.schema(DeltaTable(location).schema().to_arrow())


def schema_changes(spark: SparkSession | None, schemas: Mapping[str, Any], *, base_path: str | None = None,
                   catalog_schema: str | None = None) -> dict[str, tuple[str, ...]]:
    """{table: the columns a write of rows of Spark schema `schemas[table]` (the stored columns,
    `run_window` included or not) adds to the stored table} for the tables of `schemas` stored
    already and lacking some; `DeltaWriteError` (`schema_change`) for a table whose stored schema
    differs otherwise. `spark` may be None for path-based tables."""
    out: dict[str, tuple[str, ...]] = {}
    for table, schema in schemas.items():
        location = table_location(table, base_path=base_path, catalog_schema=catalog_schema)
        stored = _stored_schema(spark, location, catalog=bool(catalog_schema))
        if stored is None:
            continue
        wanted = _arrow_schema(schema)
        if PARTITION_COLUMN not in wanted.names:
            wanted = wanted.append(pa.field(PARTITION_COLUMN, pa.string(), nullable=False))
        added = schema_change(table, location, stored, wanted)
        if added:
            out[table] = tuple(f.name for f in added)
    return out


def _strip(t: Any) -> str:
    """A type's identity for schema comparison: ignores nullability, large/view variants."""
    if pa.types.is_large_string(t) or pa.types.is_string_view(t) or pa.types.is_string(t):
        return "string"
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t) or pa.types.is_binary(t):
        return "binary"
    if pa.types.is_timestamp(t):
        return "timestamp"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        return f"list<{_strip(t.value_type)}>"
    if pa.types.is_map(t):
        return f"map<{_strip(t.key_type)},{_strip(t.item_type)}>"
    if pa.types.is_struct(t):
        return "struct<" + ",".join(f"{t.field(i).name}:{_strip(t.field(i).type)}" for i in range(t.num_fields)) + ">"
    return str(t)


def _commit_embedded(st: _Staged, run_id: str, run_window: str) -> tuple[CommitResult, list[dict[str, Any]]]:
    wanted = _table_schema(st.df_schema)
    created = not _is_delta_table(st.uri)
    removes: list[dict[str, Any]] = []
    columns_added: tuple[str, ...] = ()
    meta = _user_metadata(st.table, run_id, run_window, st.mode, files_added=len(st.adds), rows_added=st.rows)
    props = CommitProperties(custom_metadata={"userMetadata": meta})
    if created:
        create_table_with_add_actions(st.uri, Schema.from_arrow(wanted), st.adds, mode="error",
                                      partition_by=[PARTITION_COLUMN], commit_properties=props,
                                      configuration={"delta.checkpointInterval": str(CHECKPOINT_INTERVAL)})
    else:
        dt = DeltaTable(st.uri)
        before = dt.version()
        added = schema_change(st.table, st.uri, pa.schema(dt.schema().to_arrow()), wanted)
        if added:  # a commit of its own, before the files' (delta-rs' transactions keep the table's schema)
            columns_added = tuple(f.name for f in added)
            dt.alter.add_columns([DeltaField.from_arrow(f) for f in added], commit_properties=CommitProperties(
                custom_metadata={"userMetadata": _user_metadata(st.table, run_id, run_window, "add_columns",
                                                                columns=list(columns_added))}))
            dt = DeltaTable(st.uri)
        removes = _removes_for(st.uri, st.mode, run_window)
        now = int(time.time() * 1000)
        actions: list[Any] = list(st.adds) + [
            RemoveAction(r["path"], True, now, r["size"], dict(r["partition"])) for r in removes]
        try:
            dt.create_write_transaction(actions, "append", dt.schema(), partition_by=[PARTITION_COLUMN],
                                        commit_properties=props)
        except BaseException:
            if columns_added:  # the columns go with the files they came for
                dt.restore(before, commit_properties=CommitProperties(custom_metadata={"userMetadata": _user_metadata(
                    st.table, run_id, run_window, st.mode, compensates_version=before + 1, restores_version=before)}))
            raise
    version = DeltaTable(st.uri).version()
    return CommitResult(st.table, st.uri, version, st.mode, len(st.adds), len(removes), st.rows, created,
                        columns_added=columns_added), removes


_DELTA_RS_CODECS: dict[str, Any] = {"zstd": "ZSTD", "snappy": "SNAPPY", "gzip": "GZIP", "none": "UNCOMPRESSED"}
"""`output.compression` as delta-rs' `WriterProperties` names it."""


def _merge_embedded(spark: SparkSession, st: _Staged, m: Merge, run_id: str, run_window: str,
                    compression: Compression) -> int:
    """Merges `m` into the table with delta-rs (module docstring, merges); returns the rows merged.
    The rows pass through the driver: they are a run's carried rows (the open rows of the groups
    that changed), small next to the table."""
    if isinstance(m.rows, pa.Table):  # the replay's tasks wrote them with this run's id already
        arrow = m.rows.drop_columns([c for c in (PARTITION_COLUMN,) if c in m.rows.column_names])
        arrow = arrow.append_column(PARTITION_COLUMN, pa.repeat(pa.scalar(run_window, pa.string()), arrow.num_rows))
    else:
        arrow = _merge_source(m, run_id, run_window).toArrow()
    if arrow.num_rows == 0 and m.scope is None:
        return 0
    dt = DeltaTable(st.uri)
    target = pa.schema(dt.schema().to_arrow())
    arrow = arrow.select(target.names).cast(pa.schema([pa.field(f.name, f.type) for f in target]))
    meta = _user_metadata(st.table, run_id, run_window, "merge", rows_merged=arrow.num_rows)
    columns = [c for c in target.names if c != PARTITION_COLUMN]
    updates = {f"`{c}`": m.update_expression(c) for c in columns}
    merger = dt.merge(arrow, _merge_condition(m, run_window, quote="`"), source_alias="s", target_alias="t",
                      writer_properties=WriterProperties(compression=_DELTA_RS_CODECS[compression]),
                      commit_properties=CommitProperties(custom_metadata={"userMetadata": meta}))
    if m.scope is None:
        merger.when_matched_update(updates).when_not_matched_insert_all().execute()
        return int(arrow.num_rows)
    closed, gone = _scope_clauses(m, run_window, quote="`")
    metrics = merger.when_matched_update(updates, closed).when_not_matched_by_source_delete(gone).execute()
    return int(metrics["num_target_rows_updated"]) + int(metrics["num_target_rows_deleted"])


def _compensate_embedded(st: _Staged, result: CommitResult, removed: list[dict[str, Any]], run_id: str,
                         run_window: str) -> None:
    """Undoes one committed table of a failed run (module docstring, phase 2)."""
    if result.created:
        delete_dir(st.uri)
        return
    if result.merged or result.columns_added:  # more than one commit: back to the version before them all
        if result.version_before is None:  # only a table this run created has none (handled above)
            raise DeltaWriteError(f"{st.table}: changed at {st.uri} without a version before the run to restore")
        meta = _user_metadata(st.table, run_id, run_window, st.mode, compensates_version=result.version,
                              restores_version=result.version_before)
        DeltaTable(st.uri).restore(result.version_before, commit_properties=CommitProperties(
            custom_metadata={"userMetadata": meta}))
        return
    dt = DeltaTable(st.uri)
    now = int(time.time() * 1000)
    actions: list[Any] = [RemoveAction(a.path, True, now, a.size, dict(a.partition_values)) for a in st.adds]
    actions += [AddAction(r["path"], r["size"], dict(r["partition"]), r["mtime"], True,
                          json.dumps({"numRecords": r["num_records"]}) if r["num_records"] is not None else "{}")
                for r in removed]
    meta = _user_metadata(st.table, run_id, run_window, st.mode, compensates_version=result.version)
    dt.create_write_transaction(actions, "append", dt.schema(), partition_by=[PARTITION_COLUMN],
                                commit_properties=CommitProperties(custom_metadata={"userMetadata": meta}))


WRITE_THREADS = 3
"""Tables whose Parquet files the embedded writer has Spark write at once: a run's tables are
small and many (a few tasks each), so one table's job alone leaves the cores idle between tasks
and during the driver's footer reads; three overlap them."""


def _concurrently(calls: Sequence[Callable[[], None]], *, threads: int) -> None:
    """Runs `calls` on `threads` threads (each a Spark job submitter: pyspark pins a JVM thread to
    each) and waits for all of them; then re-raises the first failure in `calls` order."""
    errors: list[BaseException | None] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            calls[i]()
        except BaseException as exc:  # kept and re-raised below, after every call has ended
            errors[i] = exc

    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        list(pool.map(run, range(len(calls))))
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        raise first


def _write_embedded(spark: SparkSession, prepared: Mapping[str, _Prepared], modes: Mapping[str, WriteMode], *,
                    run_id: str, run_window: str, base_path: str,
                    merges: Mapping[str, Merge] | None = None,
                    compression: Compression = DEFAULT_COMPRESSION,
                    added: Mapping[str, tuple[str, ...]] | None = None) -> dict[str, CommitResult]:
    """The embedded writer (delta-rs): every table's data files staged first, then committed table by
    table; `added` the columns the commits add to the tables (told to the `runs` row)."""
    staged = _stage_embedded(spark, prepared, modes, run_id=run_id, run_window=run_window, base_path=base_path,
                             compression=compression, added=added or {})
    return _commit_staged_embedded(spark, staged, merges, run_id=run_id, run_window=run_window,
                                   compression=compression)


def _stage_embedded(spark: SparkSession, prepared: Mapping[str, _Prepared], modes: Mapping[str, WriteMode], *,
                    run_id: str, run_window: str, base_path: str, compression: Compression,
                    added: Mapping[str, tuple[str, ...]]) -> list[_Staged]:
    """Phase 1 of `_write_embedded`: every table's data files in its run's stage directory, listed,
    in `prepared` order; on failure, the stage directories this run made are deleted."""
    staged: list[_Staged] = []
    previous = spark.conf.get("spark.sql.parquet.outputTimestampType", None)
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")

    def stage(name: str, df: DataFrame) -> _Staged:
        uri = table_location(name, base_path=base_path)
        st = _Staged(name, uri, df.schema, modes[name],
                     stage_dir(name, base_path=base_path, run_id=run_id, run_window=run_window))
        if _dir_exists(st.stage_dir):  # checked before it joins `staged`: a failure deletes only what this run made
            raise DeltaWriteError(_run_dir_exists(name, st.stage_dir, run_id, run_window))
        staged.append(st)
        return st

    def adopt(name: str, files: StagedFiles) -> None:  # written already: keep the listed files only
        st = _Staged(name, table_location(name, base_path=base_path), files.schema, modes[name],
                     stage_dir(name, base_path=base_path, run_id=run_id, run_window=run_window))
        staged.append(st)
        _adopt_staged(st, files, run_window, compression)

    def write(st: _Staged, df: DataFrame) -> None:
        job_description(spark, f"coordinator-audit: write {st.table} files")
        df.write.mode("error").option("compression", compression).parquet(st.stage_dir)
        _list_staged(st, run_window)

    try:  # the tables' writes run as concurrent Spark jobs (module docstring)
        for name, content in prepared.items():
            if isinstance(content, StagedFiles):
                adopt(name, content)
        _concurrently([functools.partial(write, stage(name, df), df) for name, df in prepared.items()
                       if not callable(df) and not isinstance(df, StagedFiles)], threads=WRITE_THREADS)
        position = {name: i for i, name in enumerate(prepared)}  # phase 2 commits in `prepared` order
        staged.sort(key=lambda st: position[st.table])
        for name, content in prepared.items():  # the rest (`runs`) are functions of the rows written
            if callable(content):
                df = content({st.table: st.rows for st in staged}, added)
                write(stage(name, df), df)
    except BaseException:
        for st in staged:
            delete_dir(st.stage_dir)
        raise
    finally:
        job_description(spark, None)
        if previous is not None:
            spark.conf.set("spark.sql.parquet.outputTimestampType", previous)
    return staged


def _commit_staged_embedded(spark: SparkSession, staged: Sequence[_Staged], merges: Mapping[str, Merge] | None, *,
                            run_id: str, run_window: str, compression: Compression) -> dict[str, CommitResult]:
    """Phase 2 of `_write_embedded`: one commit per staged table, in order (runs last), then its
    merge; when one fails, the tables committed before it are rolled back and the stage
    directories not committed yet deleted."""
    results: dict[str, CommitResult] = {}
    done: list[tuple[_Staged, CommitResult, list[dict[str, Any]]]] = []
    for i, st in enumerate(staged):
        try:
            version_before = DeltaTable(st.uri).version() if _is_delta_table(st.uri) else None
            result, removed = _commit_embedded(st, run_id, run_window)
            result = replace(result, version_before=version_before)
            m = (merges or {}).get(st.table)
            if m is not None:  # into a table created just now, the merge only inserts
                done_first = (st, result, removed)
                try:
                    n = _merge_embedded(spark, st, m, run_id, run_window, compression)
                except BaseException:
                    done.append(done_first)
                    raise
                result = replace(result, rows_merged=n, merged=n > 0 or m.scope is not None,
                                 version=DeltaTable(st.uri).version())
        except BaseException as exc:
            problems = []
            for prev_st, prev_result, prev_removed in reversed(done):
                try:
                    _compensate_embedded(prev_st, prev_result, prev_removed, run_id, run_window)
                except Exception as undo_exc:
                    problems.append(f"{prev_st.table} (version {prev_result.version}): {undo_exc}")
            for later in staged[i:]:
                delete_dir(later.stage_dir)
            state = ("the tables committed before it were rolled back" if not problems else
                     "could NOT roll back " + "; ".join(problems) + " — re-run the same window to heal, "
                     "find_incomplete_runs() lists the affected tables")
            raise DeltaWriteError(f"run {run_id}: the commit of table {st.table} failed ({exc}); {state}") from exc
        results[st.table] = result
        done.append((st, result, removed))
    return results


# --- native ---------------------------------------------------------------------------------------


def _write_native(spark: SparkSession, prepared: Mapping[str, _Prepared], modes: Mapping[str, WriteMode], *,
                  run_id: str, run_window: str, base_path: str | None,
                  catalog_schema: str | None, merges: Mapping[str, Merge] | None = None,
                  compression: Compression = DEFAULT_COMPRESSION,
                  added: Mapping[str, tuple[str, ...]] | None = None) -> dict[str, CommitResult]:
    """Delta Spark path: `format("delta")` writes, `replaceWhere` windows, `DeltaTable.merge`; a
    table that gains columns (`added`, checked by `schema_changes`) is written with `mergeSchema`,
    which adds them in the write's own commit."""
    added = added or {}
    # the delta-spark extra: only the native writer needs it (`resolve_writer` checks it is there)
    from delta.tables import DeltaTable as SparkDeltaTable

    def handle(name: str) -> tuple[str, Any]:
        loc = table_location(name, base_path=base_path, catalog_schema=catalog_schema)
        try:
            dt = SparkDeltaTable.forName(spark, loc) if catalog_schema else SparkDeltaTable.forPath(spark, loc)
        except Exception:
            return loc, None
        return loc, dt

    results: dict[str, CommitResult] = {}
    before: list[tuple[str, str, Any, int | None]] = []
    restored: list[str] = []
    try:
        for name, content in prepared.items():
            df = content({t: r.rows_added for t, r in results.items()}, added) if callable(content) else content
            loc, dt = handle(name)
            version_before = dt.history(1).first()["version"] if dt is not None else None
            before.append((name, loc, dt, version_before))
            mode = modes[name]
            out = df.withColumn(PARTITION_COLUMN, F.lit(run_window))
            w = out.write.format("delta").partitionBy(PARTITION_COLUMN).option(
                "userMetadata", _user_metadata(name, run_id, run_window, mode)).option("compression", compression)
            if mode == "replace_window":
                w = w.mode("overwrite").option("replaceWhere", f"{PARTITION_COLUMN} = '{run_window}'")
            else:
                w = w.mode("overwrite" if mode == "overwrite" else "append")
            if added.get(name):
                w = w.option("mergeSchema", "true")
            job_description(spark, f"coordinator-audit: write {name}")
            if catalog_schema:
                w.saveAsTable(loc)
            else:
                w.save(loc)
            _, dt_after = handle(name)
            row = dt_after.history(1).first()
            metrics = row["operationMetrics"] or {}
            results[name] = CommitResult(name, loc, int(row["version"]), mode, int(metrics.get("numFiles", 0)),
                                         int(metrics.get("numRemovedFiles", 0)),
                                         int(metrics.get("numOutputRows", 0)), dt is None,
                                         version_before=version_before, columns_added=added.get(name, ()))
            m = (merges or {}).get(name)
            if m is not None:
                n = _merge_native(spark, dt_after, m, name, run_id, run_window, compression)
                if n or m.scope is not None:
                    _, dt_merged = handle(name)
                    results[name] = replace(results[name], rows_merged=n, merged=True,
                                            version=int(dt_merged.history(1).first()["version"]))
    except BaseException as exc:
        problems = []
        for name, _loc, dt, version_before in before:
            if name not in results:
                continue
            try:
                if version_before is not None:
                    dt.restoreToVersion(version_before)
                    restored.append(name)
                else:
                    problems.append(f"{name} (created by this run; left in place)")
            except Exception as undo_exc:
                problems.append(f"{name}: {undo_exc}")
        state = "earlier tables restored" if not problems else "not restored: " + "; ".join(problems)
        raise DeltaWriteError(f"run {run_id}: writing failed ({exc}); {state}") from exc
    finally:
        job_description(spark, None)
    return results


def _merge_native(spark: SparkSession, dt: Any, m: Merge, table: str, run_id: str, run_window: str,
                  compression: Compression) -> int:
    """Merges `m` into the Delta Spark table `dt` (module docstring, merges); returns the rows merged.
    A merge takes no writer options: the codec is the session's, set for the merge and restored."""
    src = _merge_source(m, run_id, run_window).persist()
    try:
        n = src.count()
        if n == 0 and m.scope is None:
            return 0
        columns = [c for c in src.columns if c != PARTITION_COLUMN]
        settings = {"spark.databricks.delta.commitInfo.userMetadata":
                    _user_metadata(table, run_id, run_window, "merge", rows_merged=n),
                    "spark.sql.parquet.compression.codec": compression}
        previous = {key: spark.conf.get(key, None) for key in settings}
        for key, value in settings.items():
            spark.conf.set(key, value)
        try:
            merger = dt.alias("t").merge(src.alias("s"), _merge_condition(m, run_window, quote="`"))
            updates = {c: m.update_expression(c) for c in columns}
            if m.scope is None:
                merger.whenMatchedUpdate(set=updates).whenNotMatchedInsertAll().execute()
            else:
                closed, gone = _scope_clauses(m, run_window, quote="`")
                merger.whenMatchedUpdate(closed, set=updates).whenNotMatchedBySourceDelete(gone).execute()
                metrics = dt.history(1).first()["operationMetrics"] or {}
                n = int(metrics.get("numTargetRowsUpdated", 0)) + int(metrics.get("numTargetRowsDeleted", 0))
        finally:
            for key, before in previous.items():
                if before is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, before)
        return int(n)
    finally:
        src.unpersist()


# ------------------------------------------------------------------------------------------------
# reading and checking


def plain_parquet_snapshot(path: str) -> str | None:
    """None when the current version of the local Delta table at `path` is exactly the rows of its
    data files (no partition columns, no deletion vectors, no column mapping): then a reader may read
    those Parquet files itself. Else why not."""
    if "://" in path and not path.startswith("file:"):
        return f"{path}: not a local table"
    dt = DeltaTable(path)
    partition_columns = dt.metadata().partition_columns
    if partition_columns:
        return f"{path}: partitioned by {', '.join(partition_columns)}"
    why = not_file_readable(dt)
    return None if why is None else f"{path}: {why}"


def read_table(spark: SparkSession, path: str, *, version: int | None = None,
               files: Callable[[Mapping[str, Any]], bool] | None = None, partitions: bool = True) -> DataFrame:
    """A Delta table as a Spark DataFrame: through Delta Spark when present, otherwise the Parquet
    files of the requested version (listed by delta-rs) with the partition columns added from the
    Delta log. For tests, notebooks and the derivation's reading of earlier runs' rows.

    `files`: a test on each data file's add action (`DeltaTable.get_add_actions(flatten=False)`
    rows: `partition`, `num_records`, `null_count`, `min`, `max`); the files it rejects are not
    read. It only skips: callers still filter the rows, and Delta Spark skips files by those
    filters itself, so it is not applied there. `partitions=False` leaves the partition columns
    out. The files are read as one relation (with partition columns: joined by file name to their
values in the log), so a table of a year of nightly windows plans and reads like one of a few."""
    if delta_spark_available(spark):
        reader = spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        df = reader.load(path)
        if not partitions:
            df = df.drop(*DeltaTable(path).metadata().partition_columns)
        return df

    dt = DeltaTable(path, version=version)
    arrow = pa.schema(dt.schema().to_arrow())
    spark_schema = from_arrow_schema(arrow, prefer_timestamp_ntz=False)
    partition_cols = list(dt.metadata().partition_columns)
    data_schema = type(spark_schema)([f for f in spark_schema.fields if f.name not in partition_cols])
    actions = pa.table(dt.get_add_actions(flatten=False)).to_pylist()
    if files is not None:
        actions = [a for a in actions if files(a)]
    root = dt.table_uri.rstrip("/")
    if not actions:
        return spark.createDataFrame([], data_schema if not partitions else spark_schema)
    df = spark.read.schema(data_schema).parquet(*[f"{root}/{unquote(a['path'])}" for a in actions])
    if not partitions or not partition_cols:
        return df
    # the partition values come from the log (a file's path need not spell them), attached by file
    # name: one relation whatever the number of partitions (a union of one relation per value costs
    # planning and counting time that grows with every nightly window)
    names = [unquote(a["path"].rsplit("/", 1)[-1]) for a in actions]
    if len(set(names)) < len(names):  # not this project's writers: a relation per partition value
        return _union_by_partition(spark, root, actions, data_schema, spark_schema)
    values_schema = type(spark_schema)([StructField(_FILE_COLUMN, StringType(), False),
                                        *[StructField(c, spark_schema[c].dataType, True) for c in partition_cols]])
    values = spark.createDataFrame(
        [(name, *[(a.get("partition") or {}).get(c) for c in partition_cols]) for name, a in zip(names, actions,
                                                                                               strict=True)],
        values_schema)
    return (df.withColumn(_FILE_COLUMN, F.col("_metadata.file_name"))
            .join(F.broadcast(values), _FILE_COLUMN).select(*[f.name for f in spark_schema.fields]))


_FILE_COLUMN = "_delta_file_name"
"""`read_table`'s join column: a data file's name, the key of its partition values."""


def _union_by_partition(spark: SparkSession, root: str, actions: Sequence[Mapping[str, Any]], data_schema: Any,
                        spark_schema: Any) -> DataFrame:
    """`read_table`'s files as a union of one relation per partition value (the value a literal)."""
    by_partition: dict[tuple[tuple[str, Any], ...], list[str]] = {}
    for a in actions:
        key = tuple(sorted((a.get("partition") or {}).items()))
        by_partition.setdefault(key, []).append(f"{root}/{unquote(a['path'])}")
    frames = []
    for key, paths in sorted(by_partition.items()):
        df = spark.read.schema(data_schema).parquet(*paths)
        for col, value in key:
            df = df.withColumn(col, F.lit(value).cast(spark_schema[col].dataType))
        frames.append(df.select(*[f.name for f in spark_schema.fields]))
    return functools.reduce(lambda a, b: a.unionByName(b), frames)


def _run_ids_of(path: str) -> list[tuple[int, dict[str, Any]]]:
    out = []
    for entry in DeltaTable(path).history():
        raw = entry.get("userMetadata")
        if not raw:
            continue
        try:
            meta = json.loads(raw).get(METADATA_KEY)
        except (ValueError, AttributeError):
            continue
        if meta:
            out.append((int(entry["version"]), meta))
    return out


def find_incomplete_runs(base_path: str, tables: Sequence[str] | None = None) -> list[IncompleteRun]:
    """Table commits whose run never committed its `runs` row (a crash between commits, or a
    compensation that failed): what to heal by re-running that window. Path-based tables only.

    `tables` None checks every Delta table directly under `base_path`."""
    if tables is None:
        tables = sorted(d for d in os.listdir(base_path) if _is_delta_table(os.path.join(base_path, d)))
    runs_uri = f"{base_path.rstrip('/')}/{RUNS_TABLE}"
    complete = {m["run_id"] for _, m in _run_ids_of(runs_uri)} if _is_delta_table(runs_uri) else set()
    out = []
    for t in tables:
        if t == RUNS_TABLE:
            continue
        uri = f"{base_path.rstrip('/')}/{t}"
        if not _is_delta_table(uri):
            continue
        compensated: set[int] = set()
        for _, meta in _run_ids_of(uri):  # a restore undoes every version after the one it restores
            if meta.get("compensates_version") is not None:
                first = meta.get("restores_version", meta["compensates_version"] - 1) + 1
                compensated.update(range(first, meta["compensates_version"] + 1))
        for version, meta in _run_ids_of(uri):
            if meta.get("compensates_version") is not None or version in compensated:
                continue
            if meta["run_id"] not in complete:
                out.append(IncompleteRun(t, version, meta["run_id"], meta["run_window"]))
    return out
