"""coordinator_audit.jobs.delta_io, embedded writer: round trip (deltalake and Spark), idempotent window reruns,
failed runs leaving every table at its previous version, crash detection."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable, Schema
from deltalake.transaction import AddAction, create_table_with_add_actions

from coordinator_audit.jobs import delta_io
from coordinator_audit.jobs.delta_io import (
    DeltaWriteError,
    Merge,
    find_incomplete_runs,
    read_table,
    window_label,
    write_tables,
)

pytestmark = pytest.mark.spark

GEN_SCHEMA = "group_id string, generation_id int, ended_at timestamp"
RUNS_SCHEMA = "run_id string, records_in long"
T0 = datetime(2026, 11, 21, 1, 2, 3, 456789, tzinfo=UTC)


def _gens(spark, rows):
    return spark.createDataFrame(rows, GEN_SCHEMA)


def _runs(spark, run_id, n=1):
    return spark.createDataFrame([(run_id, n)], RUNS_SCHEMA)


def _rows(path: str) -> list[tuple]:
    return sorted(tuple(r.values()) for r in DeltaTable(path).to_pyarrow_table().to_pylist())


def test_window_label() -> None:
    assert window_label(None, None) == "all"
    assert window_label(datetime(2026, 11, 21, tzinfo=UTC), datetime(2026, 11, 22, tzinfo=UTC)) == \
        "20261121T000000Z--20261122T000000Z"
    assert window_label(datetime(2026, 11, 21, tzinfo=UTC), None) == "20261121T000000Z--open"
    with pytest.raises(ValueError, match="sub-second"):
        window_label(T0, None)


def test_round_trip_read_by_deltalake_and_spark(spark, tmp_path: Path) -> None:
    base = str(tmp_path)
    res = write_tables(spark, {"generations": _gens(spark, [("g", 1, T0), ("g", 2, None)]),
                               "runs": _runs(spark, "r1")},
                       run_id="r1", run_window="w1", base_path=base, writer="embedded")
    assert list(res) == ["generations", "runs"]  # runs last
    assert res["generations"].created and res["generations"].rows_added == 2 and res["runs"].files_added == 1
    assert _rows(f"{base}/generations") == [("g", 1, T0, "r1", "w1"), ("g", 2, None, "r1", "w1")]
    expected = spark.createDataFrame([("g", 1, T0, "r1", "w1"), ("g", 2, None, "r1", "w1")],
                                     GEN_SCHEMA + ", run_id string, run_window string")
    assert_df_equality(read_table(spark, f"{base}/generations"), expected, ignore_row_order=True,
                       ignore_nullable=True)
    dt = DeltaTable(f"{base}/generations")
    assert dt.metadata().partition_columns == ["run_window"]
    stats = dt.get_add_actions(flatten=True)
    assert sum(stats.column("num_records").to_pylist()) == 2


def test_the_log_is_checkpointed_every_tenth_commit(spark, tmp_path: Path) -> None:
    base = str(tmp_path)
    for i in range(delta_io.CHECKPOINT_INTERVAL + 1):
        write_tables(spark, {"generations": _gens(spark, [("g", i, T0)]), "runs": _runs(spark, f"r{i}")},
                     run_id=f"r{i}", run_window=f"w{i}", base_path=base, writer="embedded")
    log = tmp_path / "generations" / "_delta_log"
    assert DeltaTable(f"{base}/generations").metadata().configuration["delta.checkpointInterval"] == "10"
    assert sorted(p.name for p in log.glob("*.checkpoint.parquet")) == ["00000000000000000009.checkpoint.parquet"]
    # read from the checkpoint and the commit after it: every window's row
    assert [r[1] for r in _rows(f"{base}/generations")] == list(range(delta_io.CHECKPOINT_INTERVAL + 1))
    assert read_table(spark, f"{base}/generations").count() == delta_io.CHECKPOINT_INTERVAL + 1


def _table_of_files(root: Path, files: list[tuple[str, str, int]]) -> str:
    """A Delta table (delta-rs transaction) of one-row files: (path, run_window, generation_id)."""
    adds = []
    for rel, window, gen in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"group_id": ["g"], "generation_id": pa.array([gen], pa.int32())}), root / rel)
        adds.append(AddAction(rel, (root / rel).stat().st_size, {"run_window": window}, 0, True, '{"numRecords": 1}'))
    schema = pa.schema([("group_id", pa.string()), ("generation_id", pa.int32()), ("run_window", pa.string())])
    create_table_with_add_actions(str(root), Schema.from_arrow(schema), adds, mode="error", partition_by=["run_window"])
    return str(root)


def test_partition_values_come_from_the_log_not_the_paths(spark, tmp_path: Path) -> None:
    # one relation joined to the log's values by file name; paths that spell other values or none
    # (a path the log stores percent-encoded is read from its file: "a b/" is "a%20b/" in the log)
    table = _table_of_files(tmp_path / "t", [("run_window=w9/a.parquet", "w1", 1), ("flat/b.parquet", "w2", 2),
                                             ("c.parquet", "w3", 3), ("a b/d.parquet", "w 4", 4)])
    df = read_table(spark, table)
    assert df.columns == ["group_id", "generation_id", "run_window"]
    assert df._jdf.queryExecution().optimizedPlan().toString().count("Relation [") == 1  # not one per window
    assert sorted(tuple(r) for r in df.collect()) == [("g", 1, "w1"), ("g", 2, "w2"), ("g", 3, "w3"), ("g", 4, "w 4")]
    assert sorted(tuple(r) for r in read_table(spark, table, files=lambda a: a["partition"]["run_window"] != "w2")
                  .collect()) == [("g", 1, "w1"), ("g", 3, "w3"), ("g", 4, "w 4")]
    # two files of one name (not written by this project): still each with its own value
    same = _table_of_files(tmp_path / "u", [("x/part-0.parquet", "w1", 1), ("y/part-0.parquet", "w2", 2)])
    assert sorted(tuple(r) for r in read_table(spark, same).collect()) == [("g", 1, "w1"), ("g", 2, "w2")]


def test_rerun_replaces_only_its_window_and_runs_are_appended(spark, tmp_path: Path) -> None:
    base = str(tmp_path)
    write_tables(spark, {"generations": _gens(spark, [("a", 1, None), ("a", 2, None)]), "runs": _runs(spark, "r1")},
                 run_id="r1", run_window="w1", base_path=base, writer="embedded")
    write_tables(spark, {"generations": _gens(spark, [("b", 7, None)]), "runs": _runs(spark, "r2")},
                 run_id="r2", run_window="w2", base_path=base, writer="embedded")
    res = write_tables(spark, {"generations": _gens(spark, [("a", 3, None)]), "runs": _runs(spark, "r3")},
                       run_id="r3", run_window="w1", base_path=base, writer="embedded")
    assert res["generations"].files_removed >= 1
    assert _rows(f"{base}/generations") == [("a", 3, None, "r3", "w1"), ("b", 7, None, "r2", "w2")]
    assert [r[0] for r in _rows(f"{base}/runs")] == ["r1", "r2", "r3"]
    assert find_incomplete_runs(base) == []
    # rerunning the same window with the same rows leaves the same rows (idempotent)
    write_tables(spark, {"generations": _gens(spark, [("a", 3, None)]), "runs": _runs(spark, "r4")},
                 run_id="r4", run_window="w1", base_path=base, writer="embedded")
    assert [r[:3] for r in _rows(f"{base}/generations")] == [("a", 3, None), ("b", 7, None)]


def test_a_repeated_run_id_is_refused_and_the_earlier_run_keeps_its_files(spark, tmp_path: Path) -> None:
    # the embedded writer stages a run's files under <table>/run_window=<w>/<run id>/: the same run id
    # in the same window once deleted the earlier run's committed files while cleaning up its failure
    base = str(tmp_path)
    write_tables(spark, {"generations": _gens(spark, [("a", 1, None)]), "runs": _runs(spark, "r1")},
                 run_id="r1", run_window="w1", base_path=base, writer="embedded")
    with pytest.raises(DeltaWriteError, match=r"run r1: table generations already has a directory for this run id"):
        write_tables(spark, {"generations": _gens(spark, [("a", 2, None)]), "runs": _runs(spark, "r1")},
                     run_id="r1", run_window="w1", base_path=base, writer="embedded")
    assert _rows(f"{base}/generations") == [("a", 1, None, "r1", "w1")]
    assert read_table(spark, f"{base}/generations").count() == 1  # every file the log names is still there
    assert [r[0] for r in _rows(f"{base}/runs")] == ["r1"]


def test_failed_commit_leaves_every_table_at_its_previous_version(spark, tmp_path: Path, monkeypatch) -> None:
    base = str(tmp_path)
    write_tables(spark, {"generations": _gens(spark, [("a", 1, None)]),
                         "violations": spark.createDataFrame([("a", "dup")], "group_id string, kind string"),
                         "runs": _runs(spark, "r1")},
                 run_id="r1", run_window="w1", base_path=base, writer="embedded")
    before = {t: (DeltaTable(f"{base}/{t}").version(), _rows(f"{base}/{t}"))
              for t in ("generations", "violations", "runs")}
    real = delta_io._commit_embedded

    def failing(st, run_id, run_window):
        if st.table == "violations":
            raise OSError("disk full (injected)")
        return real(st, run_id, run_window)

    monkeypatch.setattr(delta_io, "_commit_embedded", failing)
    with pytest.raises(DeltaWriteError, match=r"commit of table violations failed .*rolled back"):
        write_tables(spark, {"generations": _gens(spark, [("a", 2, None)]),
                             "violations": spark.createDataFrame([("a", "x")], "group_id string, kind string"),
                             "newtable": spark.createDataFrame([(1,)], "x int"),
                             "runs": _runs(spark, "r2")},
                     run_id="r2", run_window="w1", base_path=base, writer="embedded")
    for t, (_, rows) in before.items():
        assert _rows(f"{base}/{t}") == rows, t
    assert DeltaTable(f"{base}/generations").version() == before["generations"][0] + 2  # commit + its inverse
    assert not (tmp_path / "newtable").exists() or not DeltaTable.is_deltatable(f"{base}/newtable")
    assert not (tmp_path / "violations" / "run_window=w1" / "r2").exists()  # staged files cleaned up
    assert find_incomplete_runs(base) == []


def test_failed_data_write_changes_no_table(spark, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    base = str(tmp_path)
    write_tables(spark, {"generations": _gens(spark, [("a", 1, None)])}, run_id="r1", run_window="w1",
                 base_path=base, writer="embedded")
    bad = _gens(spark, [("a", 2, None)]).withColumn("generation_id", F.raise_error("boom").cast("int"))
    with pytest.raises(Exception, match="boom"):
        write_tables(spark, {"generations": bad}, run_id="r2", run_window="w1", base_path=base, writer="embedded")
    assert DeltaTable(f"{base}/generations").version() == 0
    assert not (tmp_path / "generations" / "run_window=w1" / "r2").exists()


def test_failed_concurrent_data_write_cleans_every_staged_table(spark, tmp_path: Path) -> None:
    """The embedded writer writes tables' files as concurrent jobs: when one of them fails, the files
    the others staged meanwhile are deleted too, and no table changes (`runs` is not created)."""
    from pyspark.sql import functions as F

    base = str(tmp_path)
    write_tables(spark, {"generations": _gens(spark, [("a", 1, None)]), "violations": _gens(spark, [("a", 1, None)])},
                 run_id="r1", run_window="w1", base_path=base, writer="embedded")
    bad = _gens(spark, [("a", 2, None)]).withColumn("generation_id", F.raise_error("boom").cast("int"))
    tables = {"generations": _gens(spark, [("b", 3, None)]), "violations": bad, "runs": _runs(spark, "r2")}
    with pytest.raises(Exception, match="boom"):
        write_tables(spark, tables, run_id="r2", run_window="w1", base_path=base, writer="embedded")
    for name in ("generations", "violations"):
        assert DeltaTable(f"{base}/{name}").version() == 0
        assert not (tmp_path / name / "run_window=w1" / "r2").exists()
    assert not DeltaTable.is_deltatable(f"{base}/runs")
    assert not (tmp_path / "runs" / "run_window=w1" / "r2").exists()


def test_concurrently_runs_every_call_then_raises_the_first_failure() -> None:
    done: list[int] = []

    def call(i: int) -> None:
        done.append(i)
        if i in (1, 3):
            raise ValueError(f"call {i}")

    with pytest.raises(ValueError, match="call 1"):
        delta_io._concurrently([lambda i=i: call(i) for i in range(5)], threads=2)
    assert sorted(done) == [0, 1, 2, 3, 4]


def test_crash_between_commits_is_detected(spark, tmp_path: Path) -> None:
    base = str(tmp_path)
    write_tables(spark, {"generations": _gens(spark, [("a", 1, None)]), "runs": _runs(spark, "r1")},
                 run_id="r1", run_window="w1", base_path=base, writer="embedded")
    # a run whose process died before its runs commit: its table commit is there, its runs row is not
    write_tables(spark, {"generations": _gens(spark, [("a", 2, None)])}, run_id="r2", run_window="w1",
                 base_path=base, writer="embedded")
    found = find_incomplete_runs(base)
    assert [(f.table, f.run_id, f.run_window) for f in found] == [("generations", "r2", "w1")]


def test_schema_change_and_bad_names_are_refused(spark, tmp_path: Path) -> None:
    base = str(tmp_path)
    write_tables(spark, {"generations": _gens(spark, [("a", 1, None)])}, run_id="r1", run_window="w1",
                 base_path=base, writer="embedded")
    with pytest.raises(DeltaWriteError, match="schema differs"):
        write_tables(spark, {"generations": spark.createDataFrame([("a",)], "group_id string")}, run_id="r2",
                     run_window="w1", base_path=base, writer="embedded")
    with pytest.raises(DeltaWriteError, match="run_window"):
        write_tables(spark, {"generations": _gens(spark, [])}, run_id="r3", run_window="a/b", base_path=base)
    with pytest.raises(DeltaWriteError, match=r"needs a session configured for Delta Spark.*"
                                              r"spark\.sql\.extensions=io\.delta\.sql\.DeltaSparkSessionExtension.*"
                                              r"spark_catalog=org\.apache\.spark\.sql\.delta\.catalog\.DeltaCatalog"):
        write_tables(spark, {"generations": _gens(spark, [])}, run_id="r3", run_window="w", base_path=base,
                     writer="native")


def test_added_nullable_columns_are_added_to_the_stored_tables(spark, tmp_path: Path) -> None:
    """Rows with columns a stored table lacks (nullable in the rows): the table gains them, the rows
    stored before read null in them, and a merge into an earlier window's row sets them there; `runs`
    (appended) the same, its row told which columns each table gained."""
    from pyspark.sql import functions as F

    base = str(tmp_path)
    write_tables(spark, {"generations": _gens(spark, [("a", 1, None), ("b", 1, None)]), "runs": _runs(spark, "r1")},
                 run_id="r1", run_window="w1", base_path=base, writer="embedded")
    wide = f"{GEN_SCHEMA}, broker_cause string"
    told: list[dict] = []

    def runs(rows, added):
        told.append(dict(added))
        note = "; ".join(f"{t}: {', '.join(c)}" for t, c in added.items()) or None
        return spark.createDataFrame([("r2", 1, note)], f"{RUNS_SCHEMA}, note string")

    closed = spark.createDataFrame([("a", 1, T0, "member_left")], wide)
    res = write_tables(spark, {"generations": spark.createDataFrame([("a", 2, None, "member_joined")], wide),
                               "runs": runs}, run_id="r2", run_window="w2", base_path=base, writer="embedded",
                       merges={"generations": Merge(closed, ("group_id", "generation_id"), home_windows=("w1",))})
    assert res["generations"].columns_added == ("broker_cause",) and res["generations"].merged
    assert res["runs"].columns_added == ("note",)
    assert told[-1] == {"generations": ("broker_cause",), "runs": ("note",)}
    # the stored order: the columns there before, then the added ones
    assert _rows(f"{base}/generations") == [("a", 1, T0, "r2", "w1", "member_left"), ("a", 2, None, "r2", "w2", "member_joined"),
                                            ("b", 1, None, "r1", "w1", None)]
    assert _rows(f"{base}/runs") == [("r1", 1, "w1", None), ("r2", 1, "w2", "generations: broker_cause; runs: note")]
    spark_rows = read_table(spark, f"{base}/generations").where(F.col("broker_cause").isNull()).collect()
    assert [(r["group_id"], r["run_id"]) for r in spark_rows] == [("b", "r1")]
    # a next write with every column adds none
    res = write_tables(spark, {"generations": spark.createDataFrame([("c", 1, None, None)], wide)}, run_id="r3",
                       run_window="w3", base_path=base, writer="embedded")
    assert res["generations"].columns_added == ()


def test_other_schema_differences_are_refused_before_anything_is_written(spark, tmp_path: Path) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    base = str(tmp_path)
    write_tables(spark, {"generations": _gens(spark, [("a", 1, None)]), "runs": _runs(spark, "r1")},
                 run_id="r1", run_window="w1", base_path=base, writer="embedded")
    versions = {t: DeltaTable(f"{base}/{t}").version() for t in ("generations", "runs")}
    never_null = StructType([*spark.createDataFrame([], GEN_SCHEMA).schema.fields,
                             StructField("group_type", StringType(), False)])
    cases = {
        "generation_id is int32, the rows' int64": _gens(spark, [("a", 2, None)]).withColumn(
            "generation_id", F.col("generation_id").cast(LongType())),
        "column ended_at not in the rows": _gens(spark, [("a", 2, None)]).drop("ended_at"),
        "column ended_at not in the rows; new column ended_at_ms never null in the rows": _gens(
            spark, [("a", 2, T0)]).withColumn("ended_at_ms", F.lit(1)).drop("ended_at"),
        "new column group_type never null in the rows": spark.createDataFrame([("a", 2, None, "classic")], never_null),
    }
    for says, rows in cases.items():
        with pytest.raises(DeltaWriteError) as refused:
            write_tables(spark, {"generations": rows, "runs": _runs(spark, "r2")}, run_id="r2", run_window="w2",
                         base_path=base, writer="embedded")
        assert str(refused.value).startswith(
            f"table generations ({base}/generations): its schema differs from the rows being written by more than "
            f"added nullable columns: {says}. Another version of the job wrote it: write to a new output path"), (
            str(refused.value))
        assert {t: DeltaTable(f"{base}/{t}").version() for t in versions} == versions
        assert not (tmp_path / "generations" / "run_window=w2").exists()  # no file staged


def test_auto_picks_delta_spark_only_for_a_session_configured_for_it(spark) -> None:
    """`auto` asks the session's settings (Delta's extension and catalog), not the classpath: the
    suite's session is not configured for Delta Spark, so `auto` is the embedded writer. (A server
    with Delta Spark's jars but not configured for it: tests/spark/test_spark_connect.py; a session
    configured for it: tests/kafka/test_native_delta.py.)"""
    from coordinator_audit.jobs.delta_io import delta_spark_available, resolve_writer

    assert spark.conf.get("spark.sql.extensions", None) is None
    assert not delta_spark_available(spark) and resolve_writer(spark, "auto") == "embedded"
