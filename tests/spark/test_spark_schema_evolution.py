"""An output that outlived a version of the job: its tables lack columns this version added (as
`assignments` lacked `session_timeout_ms` and `rebalance_timeout_ms`). The nightly run adds them to
the stored tables (the rows stored before read null in them), says so in its output and its `runs`
note, and the tables read as stored equal one run over the whole log but for those nulls. Any other
difference (a column of another type, a column this version no longer writes, a new column it never
leaves null) is refused in one line naming the table, the columns and the remedy, before anything is
written. The native writer's twin is in tests/kafka/test_native_delta.py (it needs Delta Spark)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import CommitProperties

from coordinator_audit import cli
from coordinator_audit.jobs import delta_io
from coordinator_audit.jobs.audit import RunSummary, run_audit
from coordinator_audit.jobs.compare import IGNORED_COLUMNS, canonical_rows
from coordinator_audit.jobs.config import load_config
from coordinator_audit.jobs.delta_read import read_arrow

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "samples" / "real_broker_3_9_0.parquet"
CUT = "2026-11-21T23:43:40+00:00"
END = "2026-11-22T00:00:00+00:00"
"""Two nights of the real broker's log, [.., CUT) and [CUT, END): the second closes rows the first
left open (merges)."""
NEW = ("session_timeout_ms", "rebalance_timeout_ms")
"""The columns this version added to `assignments`."""
COMPARED = ("generations", "assignments", "rebalance_causes", "violations", "offset_commits", "quarantine",
            "partition_ownership", "rebalances", "group_health")


def _night(spark, out: Path, run_id: str, **window: str) -> RunSummary:
    return run_audit(spark, load_config(None, {"input.path": str(SAMPLE), "input.format": "parquet",
                                               "output.path": str(out), "job.shards": 2, **window}), run_id=run_id)


def as_older_version(table: Path, rows: pa.Table) -> None:
    """Replaces the Delta table at `table` by `rows` in a table of their schema, as a version of the job
    writing that schema left it: partitioned by `run_window`, checkpoints every 10 commits, its one
    commit tagged with the run that wrote the rows."""
    (run_id,) = set(rows.column("run_id").to_pylist())
    (window,) = set(rows.column("run_window").to_pylist())
    shutil.rmtree(table)
    write_deltalake(str(table), rows, partition_by=["run_window"],
                    configuration={"delta.checkpointInterval": str(delta_io.CHECKPOINT_INTERVAL)},
                    commit_properties=CommitProperties(custom_metadata={"userMetadata": json.dumps(
                        {"coordinator_audit": {"run_id": run_id, "run_window": window, "table": table.name,
                                               "mode": "replace_window"}})}))


@pytest.fixture(scope="module")
def first_night(spark, tmp_path_factory) -> Path:
    """The first night's output, its `assignments` as the version before the two columns wrote it."""
    out = tmp_path_factory.mktemp("evolve") / "out"
    _night(spark, out, "night-1", **{"window.until": CUT})
    stored = read_arrow(str(out / "assignments"))
    assert stored.num_rows and all(stored.column(c).null_count < stored.num_rows for c in NEW)
    as_older_version(out / "assignments", stored.drop_columns(list(NEW)))
    return out


@pytest.fixture(scope="module")
def one_run(spark, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("evolve-one") / "out"
    _night(spark, out, "one")
    return out


def _copy(first_night: Path, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(first_night, out)
    return out


def test_a_nightly_run_adds_the_columns_the_earlier_version_lacked(spark, first_night: Path, one_run: Path,
                                                                  tmp_path: Path) -> None:
    out = _copy(first_night, tmp_path)
    assert not set(NEW) & set(DeltaTable(str(out / "assignments")).schema().to_arrow().names)
    second = _night(spark, out, "night-2", **{"window.since": CUT, "window.until": END})
    text = "assignments: added columns session_timeout_ms, rebalance_timeout_ms (the rows stored before read them as null)"
    assert second.resume == "resume" and second.rows_merged.get("assignments")
    assert second.note is not None and text in second.note
    runs = read_arrow(str(out / "runs"))
    notes = dict(zip(runs.column("run_id").to_pylist(), runs.column("note").to_pylist(), strict=True))
    assert notes["night-2"] is not None and text in notes["night-2"] and notes["night-1"] is None
    # the stored table gained the two columns, nullable, in a commit tagged with the run
    dt = DeltaTable(str(out / "assignments"))
    fields = {f.name: f for f in dt.schema().fields}
    assert all(fields[c].nullable for c in NEW)
    tags = [json.loads(h["userMetadata"])["coordinator_audit"] for h in dt.history() if h.get("userMetadata")]
    assert {"run_id": "night-2", "mode": "add_columns", "columns": list(NEW)}.items() <= next(
        t for t in tags if t["mode"] == "add_columns").items()
    assert delta_io.find_incomplete_runs(str(out)) == []
    # every table as stored equals one run over the whole log ...
    for table in COMPARED:
        ignore = (*IGNORED_COLUMNS, *NEW) if table == "assignments" else IGNORED_COLUMNS
        assert canonical_rows(out / table, ignore=ignore) == canonical_rows(one_run / table, ignore=ignore), table
    # ... the assignments' new columns included on the rows this run wrote or closed, null on the
    # rows stored before it that it left alone (the one run has them there)
    stored = read_arrow(str(out / "assignments"))
    older = stored.filter(pc.equal(stored.column("run_id"), "night-1"))
    assert older.num_rows and all(older.column(c).null_count == older.num_rows for c in NEW)
    written = stored.filter(pc.equal(stored.column("run_id"), "night-2"))
    one = read_arrow(str(one_run / "assignments"))
    full = set(canonical_rows(one_run / "assignments"))
    assert written.num_rows and all(
        json.dumps({k: v for k, v in r.items() if k not in IGNORED_COLUMNS}, sort_keys=True, default=str) in full
        for r in _plain_rows(written))
    assert one.filter(pc.is_valid(one.column(NEW[0]))).num_rows == one.num_rows  # the one run knows every row's
    # the next night after it goes on as usual: nothing more to add
    third = _night(spark, out, "night-3", **{"window.since": END, "window.until": "2026-11-23T00:00:00+00:00"})
    assert third.note is None or "added column" not in third.note


def _plain_rows(table: pa.Table) -> list[dict]:
    """`table`'s rows as `canonical_rows` writes them (times as ISO text, bytes as hex)."""
    from coordinator_audit.jobs.compare import _plain

    return [{k: _plain(v) for k, v in r.items()} for r in table.to_pylist()]


def test_a_failed_run_takes_the_added_columns_back(spark, first_night: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's last commit (`runs`) fails: `assignments`, whose columns the run added, is restored
    to its version before the run, schema included; a re-run of the window adds them again."""
    out = _copy(first_night, tmp_path)
    version = DeltaTable(str(out / "assignments")).version()
    commit = delta_io._commit_embedded

    def failing(st, *args, **kwargs):
        if st.table == "runs":
            raise OSError("the store refused the commit")
        return commit(st, *args, **kwargs)

    monkeypatch.setattr(delta_io, "_commit_embedded", failing)
    with pytest.raises(delta_io.DeltaWriteError, match="the tables committed before it were rolled back"):
        _night(spark, out, "night-2", **{"window.since": CUT, "window.until": END})
    monkeypatch.undo()
    dt = DeltaTable(str(out / "assignments"))
    assert dt.version() > version and not set(NEW) & set(dt.schema().to_arrow().names)
    assert read_arrow(str(out / "assignments")).num_rows == DeltaTable(str(out / "assignments"), version=version
                                                                        ).to_pyarrow_table().num_rows
    assert delta_io.find_incomplete_runs(str(out)) == []  # the restore covers the column commit too
    again = _night(spark, out, "night-2b", **{"window.since": CUT, "window.until": END})
    assert again.note is not None and "assignments: added columns" in again.note


def _refused(first_night: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: pa.Table) -> str:
    """Night 2 into a copy of the first night's output whose `assignments` holds `rows`: exit 1, one
    line, every table as it was; the line."""
    out = _copy(first_night, tmp_path)
    as_older_version(out / "assignments", rows)
    versions = {t.name: DeltaTable(str(t)).version() for t in out.iterdir() if (t / "_delta_log").is_dir()}
    code = cli.main(["run", "--input", str(SAMPLE), "--format", "parquet", "--output", str(out), "--since", CUT,
                     "--until", END, "--master", "local[2]", "--shards", "2", "--no-summary"])
    err = capsys.readouterr().err
    assert code == 1, err[-3000:]
    assert versions == {t.name: DeltaTable(str(t)).version() for t in out.iterdir() if (t / "_delta_log").is_dir()}
    assert sorted(p.name for p in out.iterdir()) == sorted(versions)  # (no staged or carried files left)
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"coordinator-audit run: table assignments ({out / 'assignments'}): its schema differs "
                           f"from the rows being written by more than added nullable columns: "), line
    assert line.endswith("Another version of the job wrote it: write to a new output path (keep this one for its "
                         "history)"), line
    return line


def test_a_column_of_another_type_is_refused(first_night: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    stored = read_arrow(str(first_night / "assignments"))
    i = stored.schema.get_field_index("generation_id")
    rows = stored.set_column(i, pa.field("generation_id", pa.int64(), False), stored.column(i).cast(pa.int64()))
    line = _refused(first_night, tmp_path, capsys, rows)
    assert ": generation_id is int64, the rows' int32. " in line


def test_a_column_no_longer_written_is_refused(first_night: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    stored = read_arrow(str(first_night / "assignments"))
    rows = stored.append_column(pa.field("member_epoch", pa.int32()), pa.nulls(stored.num_rows, pa.int32()))
    line = _refused(first_night, tmp_path, capsys, rows)
    assert ": column member_epoch not in the rows. " in line


def test_a_renamed_column_and_a_new_column_never_null_are_refused(first_night: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    stored = read_arrow(str(first_night / "assignments"))
    rows = stored.rename_columns(["kind" if n == "group_type" else n for n in stored.column_names])
    line = _refused(first_night, tmp_path, capsys, rows)
    assert ": column kind not in the rows; new column group_type never null in the rows. " in line


def test_saved_state_and_runs_without_a_nullable_column_read_it_as_null(tmp_path: Path) -> None:
    """The first run after an upgrade reads the chain and the saved states before it writes (and adds
    the columns): a nullable column an older version's `group_state` or `runs` lacks reads as null,
    one never null in this version is a refusal. (delta-rs only: no Spark job.)"""
    from datetime import UTC, datetime

    from pyspark.sql.pandas.types import to_arrow_schema

    from coordinator_audit.jobs import nightly
    from coordinator_audit.udfs.schemas import GROUP_STATE_SCHEMA, RUNS_SCHEMA

    state = to_arrow_schema(GROUP_STATE_SCHEMA, timezone="UTC")
    older_state = pa.schema([*[f for f in state if f.name != "window_value"], pa.field("run_id", pa.string()),
                             pa.field("run_window", pa.string())])
    rows = [{"group_id": g, "auditor_state": "{}", "changed": True, "offset_windows": [], "run_id": "r1",
             "run_window": "w1"} for g in ("g1", "g2")]
    write_deltalake(str(tmp_path / "group_state"), pa.Table.from_pylist(rows, older_state), partition_by=["run_window"])
    t = datetime(2026, 11, 21, tzinfo=UTC)
    run = {"run_id": "r1", "status": "succeeded", "started_at": t, "finished_at": t, "duration_ms": 1, "input": "x",
           "input_format": "parquet", "since": None, "until": t, "records_in": 0, "duplicates_dropped": 0,
           "filtered_by_window": 0, "filtered_by_group": 0, "records_replayed": 0, "quarantined": 0,
           "skipped_other_type": 0, "table_rows": [], "code_version": "0", "spark_version": "4", "writer": "embedded",
           "config_json": "{}", "resume": "fresh", "base_run_id": None, "end_offsets": [(0, 41)],
           "missing_offsets": [], "note": None, "run_window": "w1"}
    runs = to_arrow_schema(RUNS_SCHEMA, timezone="UTC").append(pa.field("run_window", pa.string()))
    without = pa.schema([f for f in runs if f.name != "group_filter"])
    write_deltalake(str(tmp_path / "runs"), pa.Table.from_pylist([run], without), partition_by=["run_window"])
    (base,) = nightly.read_runs_arrow(str(tmp_path / "runs"))
    assert (base.run_id, base.group_filter, base.end_offsets, base.until) == ("r1", None, {0: 41}, t)
    pieces = list(nightly.read_state_batches(str(tmp_path / "group_state"), base))
    read = pa.concat_tables(pieces)
    assert read.column_names == [*nightly.STATE_TABLE_COLUMNS, "run_id"]
    assert read.column("group_id").to_pylist() == ["g1", "g2"] and read.column("window_value").null_count == 2
    assert read.schema.field("window_value").type == pa.binary()
    lacking = pa.schema([f for f in runs if f.name != "end_offsets"])
    write_deltalake(str(tmp_path / "runs2"), pa.Table.from_pylist([run], lacking), partition_by=["run_window"])
    with pytest.raises(nightly.WindowConflict, match=r"runs2: written by an older version of the job \(no "
                                                     r"end_offsets column\); write to a new output path"):
        nightly.read_runs_arrow(str(tmp_path / "runs2"))
