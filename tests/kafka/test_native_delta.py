"""The native Delta writer (Delta Spark from Maven Central on the classpath) against the embedded one
(Spark Parquet + a deltalake commit) on the bundled samples: the same tables row for row, after a
first run and after a second run that replaces the window (the update path), and each writer's
tables readable by the other side."""

from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import functions as F

from coordinator_audit.jobs import offsets_path
from coordinator_audit.jobs.audit import Capabilities, run_audit
from coordinator_audit.jobs.config import load_config
from coordinator_audit.jobs.delta_io import DeltaWriteError, delta_spark_available
from tests.kafka.truth import tables_at
from tests.support.parquet_files import table_codecs

pytestmark = pytest.mark.kafka

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"


def _run_twice(spark, out: Path, writer: str):
    cfg = load_config(None, {"input.path": str(SAMPLES), "input.format": "parquet", "output.path": str(out),
                             "output.writer": writer,
                             "input.server_log": str(SAMPLES / "real_broker_3_9_0.server.log")})
    first = run_audit(spark, cfg, run_id=f"first-{writer}")
    second = run_audit(spark, cfg, run_id=f"second-{writer}")
    assert first.writer == second.writer == writer
    return first, second


def test_native_and_embedded_writers_write_the_same_tables(spark, tmp_path: Path) -> None:
    assert delta_spark_available(spark), "the broker tier's session has Delta Spark (scripts/jars.sh spark)"
    _, native = _run_twice(spark, tmp_path / "native", "native")
    _, embedded = _run_twice(spark, tmp_path / "embedded", "embedded")
    n_tables, e_tables = tables_at(spark, native.locations), tables_at(spark, embedded.locations)
    assert set(n_tables) == set(e_tables)
    for name in n_tables:
        if name == "runs":
            continue
        assert n_tables[name] or name == "quarantine", f"{name}: the samples give rows"
        assert sorted(map(repr, n_tables[name])) == sorted(map(repr, e_tables[name])), name
    # the second run replaced the window: every row is the second run's, once
    for result in (native, embedded):
        import deltalake

        for name, loc in result.locations.items():
            df = deltalake.DeltaTable(loc).to_pandas()  # delta-rs reads both writers' tables
            if name == "runs":
                assert sorted(df["run_id"]) == sorted([f"first-{result.writer}", f"second-{result.writer}"])
            else:
                assert set(df["run_id"]) <= {f"second-{result.writer}"}, name
                assert len(df) == result.table_rows[name], name
    # and the generations carry the real broker's own account where its server.log covers them
    gens = [g for g in n_tables["generations"] if g["group_id"].startswith("grp-s0")]
    assert gens and all(g["stabilized_at"] is not None for g in gens)
    assert {g["broker_cause"] for g in gens} >= {"member_session_expired", "member_left", "member_joined"}


def _chain(spark, out: Path, writer: str) -> list:
    """Two nightly windows over the real broker's log: the second run merges into rows the first
    left open (generations ended, ownership intervals closed, offset windows continued)."""
    results = []
    for i, window in enumerate(({"window.until": "2026-11-21T23:43:40Z"}, {"window.since": "2026-11-21T23:43:40Z"})):
        cfg = load_config(None, {"input.path": str(SAMPLES / "real_broker_3_9_0.parquet"), "input.format": "parquet",
                                 "output.path": str(out), "output.writer": writer, **window})
        results.append(run_audit(spark, cfg, run_id=f"w{i}-{writer}"))
    return results


def test_native_and_embedded_merges_close_the_same_rows(spark, tmp_path: Path) -> None:
    native = _chain(spark, tmp_path / "native", "native")
    embedded = _chain(spark, tmp_path / "embedded", "embedded")
    assert native[1].rows_merged and native[1].rows_merged == embedded[1].rows_merged
    single = run_audit(spark, load_config(None, {
        "input.path": str(SAMPLES / "real_broker_3_9_0.parquet"), "input.format": "parquet",
        "output.path": str(tmp_path / "single"), "output.writer": "embedded"}), run_id="single")
    n_tables, e_tables = tables_at(spark, native[1].locations), tables_at(spark, embedded[1].locations)
    one = tables_at(spark, single.locations)

    def content(rows: list) -> list:
        return sorted(repr({k: v for k, v in r.items() if k not in ("run_id", "run_window")}) for r in rows)

    for name in ("generations", "assignments", "rebalance_causes", "violations", "offset_commits"):
        assert content(n_tables[name]) == content(e_tables[name]), name
        assert content(n_tables[name]) == content(one[name]), name  # two windows = one run
    # Delta Spark's writes and merges in the codec asked for (output.compression, default zstd), as
    # the embedded writer's (tests/spark/test_spark_table_files.py)
    for name, location in native[1].locations.items():
        found = table_codecs(location)
        assert set(found) <= {"ZSTD"}, (name, found)


def _delta_export(path: Path, cut: str) -> list[int]:
    """The real broker's log as a Delta export of two nights (before and from `cut`), a data file
    per `__consumer_offsets` partition and night, as a streaming Kafka-source export writes them;
    the files of each night."""
    log = pq.read_table(SAMPLES / "real_broker_3_9_0.parquet")
    ts, at = log.column("timestamp"), pa.scalar(datetime.fromisoformat(cut), log.column("timestamp").type)
    files = []
    for night in (log.filter(pc.less(ts, at)), log.filter(pc.greater_equal(ts, at))):
        partitions = sorted(set(night.column("partition").to_pylist()))
        for partition in partitions:
            write_deltalake(str(path), night.filter(pc.equal(night.column("partition"), partition)).sort_by("offset"),
                            mode="append")
        files.append(len(partitions))
    return files


@pytest.mark.parametrize(("deletion_vectors", "catalog"), [(False, False), (True, False), (False, True)],
                         ids=["plain", "deletion-vectors", "catalog-table"])
def test_a_delta_export_read_by_delta_spark_skips_the_nights_before_the_window(spark, tmp_path: Path, monkeypatch,
                                                                                deletion_vectors: bool,
                                                                                catalog: bool) -> None:
    """A nightly run over a Delta export read through Delta Spark (as on a remote store: a session
    whose workers do not read this process's files, `Capabilities.local_files` False): the second night's run reads only the second night's files, Delta's data
    skipping ruling out the first night's by the condition the log's statistics give
    (`coordinator_audit.jobs.offsets_path._spark_window`), and two windows give one run's tables and counts. With
    deletion vectors enabled (and rows deleted from the first night's files) the statistics still
    bound the files' live rows, and Delta Spark counts them. A catalog table over the export
    (`input.table`) is read the same way, its location's log read by delta-rs."""
    cut = "2026-11-21T23:43:40+00:00"
    export = tmp_path / "export"
    first_night, second_night = _delta_export(export, cut)
    deleted = 0
    if deletion_vectors:  # rows of the first night deleted: the log's record counts no longer count the rows
        spark.sql(f"ALTER TABLE delta.`{export}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = true)")
        deleted = spark.read.format("delta").load(str(export)).where(f"timestamp < '{cut}' AND offset % 7 = 3").count()
        spark.sql(f"DELETE FROM delta.`{export}` WHERE timestamp < '{cut}' AND offset % 7 = 3")
        assert deleted and "deletionVectors" in (DeltaTable(str(export)).protocol().reader_features or [])
    read: list[int] = []
    window = offsets_path._spark_window

    def noted(*args, **kwargs):  # the real function, the files it leaves Delta Spark to read noted
        df, records, what = window(*args, **kwargs)
        read.append(len(df.inputFiles()))
        return df, records, what

    monkeypatch.setattr(offsets_path, "_spark_window", noted)
    out = tmp_path / "out"
    results = []
    source = {"input.path": str(export), "input.format": "delta"}
    if catalog:
        spark.sql("DROP TABLE IF EXISTS nightly_export")
        spark.sql(f"CREATE TABLE nightly_export USING delta LOCATION '{export}'")
        source = {"input.table": "nightly_export"}
    for i, bound in enumerate(({"window.until": cut}, {"window.since": cut})):
        cfg = load_config(None, {**source, "output.path": str(out), "output.writer": "embedded",  # (reading is tested)
                                 "job.derived_tables": False, **bound})
        results.append(run_audit(spark, cfg, run_id=f"night-{i}",
                                 capabilities=Capabilities(local_files=False, local_tasks=True)))
    files = len(DeltaTable(str(export)).file_uris())
    assert files == first_night + second_night and first_night and second_night
    assert read == [first_night, second_night]
    single = run_audit(spark, load_config(None, {"input.path": str(export), "input.format": "delta",
                                                 "output.path": str(tmp_path / "single"), "output.writer": "embedded",
                                                 "job.derived_tables": False}), run_id="single")
    chained, one = tables_at(spark, results[1].locations), tables_at(spark, single.locations)
    for name in ("generations", "assignments", "rebalance_causes", "violations", "offset_commits"):
        assert sorted(map(repr, chained[name])) == sorted(map(repr, one[name])), name
    assert results[1].counts["records_in"] == single.counts["records_in"] == 1138 - deleted


NEW_ASSIGNMENT_COLUMNS = ("session_timeout_ms", "rebalance_timeout_ms")
"""The columns this version added to `assignments` (tests/spark/test_spark_schema_evolution.py is the
embedded writer's twin of the test below)."""


def test_native_writer_adds_the_columns_an_earlier_version_lacked(spark, tmp_path: Path) -> None:
    """Delta Spark writes the first night; its `assignments` is rewritten by Delta Spark without the
    two timeout columns, as the version before them wrote it. The second night adds them (its write's
    `mergeSchema`) and closes earlier rows in them (its MERGE): every table equals one run over the
    log but for the null columns of the earlier rows the second night left alone. A stored column of
    another type is refused before anything is written."""
    out = tmp_path / "native"
    cut, end = "2026-11-21T23:43:40Z", "2026-11-22T00:00:00Z"

    def night(run_id: str, **window: str):
        return run_audit(spark, load_config(None, {
            "input.path": str(SAMPLES / "real_broker_3_9_0.parquet"), "input.format": "parquet",
            "output.path": str(out), "output.writer": "native", **window}), run_id=run_id)

    night("n1", **{"window.until": cut})
    location = str(out / "assignments")
    older = spark.read.format("delta").load(location).drop(*NEW_ASSIGNMENT_COLUMNS).localCheckpoint(eager=True)
    shutil.rmtree(location)
    older.write.format("delta").partitionBy("run_window").save(location)
    copy = tmp_path / "refused"
    shutil.copytree(out, copy)

    second = night("n2", **{"window.since": cut, "window.until": end})
    assert second.writer == "native" and second.rows_merged.get("assignments")
    assert second.note is not None and ("assignments: added columns session_timeout_ms, rebalance_timeout_ms (the "
                                        "rows stored before read them as null)") in second.note
    stored = spark.read.format("delta").load(location)
    assert all(stored.schema[c].nullable for c in NEW_ASSIGNMENT_COLUMNS)
    single = run_audit(spark, load_config(None, {
        "input.path": str(SAMPLES / "real_broker_3_9_0.parquet"), "input.format": "parquet",
        "output.path": str(tmp_path / "single"), "output.writer": "embedded"}), run_id="single")
    chained, one = tables_at(spark, second.locations), tables_at(spark, single.locations)

    def content(rows: list, drop: tuple[str, ...] = ()) -> list:
        return sorted(repr(sorted((k, v) for k, v in r.items() if k not in drop)) for r in rows)

    for name in ("generations", "rebalance_causes", "violations", "offset_commits"):
        assert content(chained[name]) == content(one[name]), name
    assert content(chained["assignments"], NEW_ASSIGNMENT_COLUMNS) == content(one["assignments"], NEW_ASSIGNMENT_COLUMNS)
    rows = [r.asDict() for r in stored.collect()]
    earlier = [r for r in rows if r["run_id"] == "n1"]
    assert earlier and all(r[c] is None for r in earlier for c in NEW_ASSIGNMENT_COLUMNS)
    full = content(one["assignments"])
    later = [{k: v for k, v in r.items() if k not in ("run_id", "run_window")} for r in rows if r["run_id"] == "n2"]
    assert later and all(content([r])[0] in full for r in later)  # set on the rows written and closed

    # another type: refused in one line, every table as it was
    location = str(copy / "assignments")
    changed = spark.read.format("delta").load(location).withColumn(
        "generation_id", F.col("generation_id").cast("long")).localCheckpoint(eager=True)
    shutil.rmtree(location)
    changed.write.format("delta").partitionBy("run_window").save(location)
    versions = {t.name: DeltaTable(str(t)).version() for t in copy.iterdir() if (t / "_delta_log").is_dir()}
    with pytest.raises(DeltaWriteError, match=r"^table assignments \(.*\): its schema differs from the rows being "
                                              r"written by more than added nullable columns: generation_id is int64, "
                                              r"the rows' int32\. Another version of the job wrote it: write to a "
                                              r"new output path"):
        run_audit(spark, load_config(None, {
            "input.path": str(SAMPLES / "real_broker_3_9_0.parquet"), "input.format": "parquet",
            "output.path": str(copy), "output.writer": "native", "window.since": cut, "window.until": end}),
            run_id="n2-refused")
    assert versions == {t.name: DeltaTable(str(t)).version() for t in copy.iterdir() if (t / "_delta_log").is_dir()}
