"""The replay's workers writing the run's table files themselves (`coordinator_audit.jobs.audit.direct_tables`,
`coordinator_audit.udfs.table_files`, `coordinator_audit.jobs.delta_io.StagedFiles`): the same tables, schema and rows, as when Spark
writes them (a session whose tasks do not all run on this machine: `Capabilities.local_tasks` False), over a windowed chain; only the files the tasks reported are committed; a table with no
rows still gets its file; the Arrow window cut equals the Spark one."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from benchmarks.output_hash import output_hashes
from coordinator_audit.jobs import delta_io
from coordinator_audit.jobs.audit import AUDIT_OUTPUT_TABLES, Capabilities, run_audit
from coordinator_audit.jobs.config import load_config
from coordinator_audit.jobs.delta_io import read_table
from coordinator_audit.udfs.derived import overlapping_window
from coordinator_audit.udfs.schemas import TABLE_SCHEMAS
from coordinator_audit.udfs.table_files import overlapping_rows, staged_schema, stored_batch
from tests.support.parquet_files import table_codecs

pytestmark = pytest.mark.spark

WINDOWS = (("2026-11-21T23:00:00", "2026-11-21T23:43:40"), ("2026-11-21T23:43:40", "2026-11-22T00:00:00"))
"""The samples cut in two: the first window is a fresh output (the replay derives, its workers
write every table but runs), the second has history (the derived tables have a stage of their
own, which reads the workers' files back; the carried rows are merged into the first window's
files)."""


def _spark_written(path: Path) -> bool:
    """Whether Spark wrote this Parquet file (its footer carries Spark's row metadata)."""
    return b"org.apache.spark.sql.parquet.row.metadata" in (pq.read_metadata(path).metadata or {})


def _files(out: Path, table: str, window: str, run_id: str) -> list[Path]:
    """The files the run wrote (a later run's MERGE adds its own files beside them)."""
    files = sorted((out / table / f"run_window={window}" / run_id).glob("*.parquet"))
    assert files, (out, table, window)
    return files


def test_tables_written_by_the_workers_equal_the_ones_spark_writes(spark, derived_input, tmp_path, capfd) -> None:
    src = derived_input
    outs, merged = {}, {}
    for direct in (True, False):
        out = tmp_path / f"direct-{direct}"
        for i, (since, until) in enumerate(WINDOWS):
            summary = run_audit(spark, load_config(None, {
                "input.path": str(src), "input.format": "parquet", "output.path": str(out), "job.shards": 2,
                "window.since": since, "window.until": until,
                **({} if direct else {"output.compression": "gzip"})}), run_id=f"w{i}",
                capabilities=Capabilities(local_files=True, local_tasks=direct))
            assert list(summary.locations) == [*AUDIT_OUTPUT_TABLES, "runs"]  # one order, whoever writes
        outs[direct], merged[direct] = out, summary.rows_merged
        log = capfd.readouterr().err
        # the second run's carried rows: files of the workers' own (read by the driver, merged, deleted)
        assert ("rows continuing the earlier run's open rows, to merge" in log) is direct
        assert not (out / delta_io.CARRIED_ROOT).exists()
    assert merged[True] == merged[False]
    assert merged[True].get("offset_commits", 0) > 0 and merged[True].get("generations", 0) > 0
    first = "20261121T230000Z--20261121T234340Z"
    second = "20261121T234340Z--20261122T000000Z"
    # who wrote the files: the workers for the replay's tables (the derived ones when the replay
    # derives them: in the fresh first window), Spark for the rest (the runs rows, the derived
    # tables of their own stage)
    assert not any(map(_spark_written, _files(outs[True], "assignments", first, "w0")))
    assert not any(map(_spark_written, _files(outs[True], "partition_ownership", first, "w0")))
    assert not any(map(_spark_written, _files(outs[True], "assignments", second, "w1")))
    assert all(map(_spark_written, _files(outs[True], "partition_ownership", second, "w1")))
    assert not any(map(_spark_written, _files(outs[True], "group_state", first, "w0")))
    assert not any(map(_spark_written, _files(outs[True], "group_state", second, "w1")))
    assert all(map(_spark_written, _files(outs[True], "runs", second, "w1")))
    assert all(map(_spark_written, _files(outs[False], "assignments", first, "w0")))
    # every file of every table in the codec asked for (the default zstd; gzip), whoever wrote it:
    # the workers, Spark, or delta-rs merging the carried rows
    for direct, codec in ((True, "ZSTD"), (False, "GZIP")):
        for table in (*AUDIT_OUTPUT_TABLES, "runs"):
            found = table_codecs(str(outs[direct] / table))
            assert set(found) <= {codec}, (direct, table, found)
    for direct in (True, False):  # (the merge's own files among them: delta-rs writes with parquet-rs)
        writers = [pq.read_metadata(u.removeprefix("file://")).created_by
                   for u in DeltaTable(str(outs[direct] / "offset_commits")).file_uris()]
        assert any(w.startswith(("parquet-rs", "delta-rs")) for w in writers), (direct, writers)
    direct, spark_written = output_hashes(outs[True]), output_hashes(outs[False])
    assert direct == spark_written
    assert direct["assignments"][0] > 0 and direct["partition_ownership"][0] > 0


def _assignments_batch(n: int, run_id: str = "r") -> pa.RecordBatch:
    fields = TABLE_SCHEMAS["assignments"].fieldNames()
    rows = [{f: None for f in fields} | {"group_id": "g", "generation_id": 1, "member_id": "m", "topic": "t",
                                         "partition": i, "valid_from": 1_000 + i, "source_partition": 0,
                                         "source_offset": i} for i in range(n)]
    return stored_batch("assignments", [[r[f] for r in rows] for f in fields], run_id)


def test_only_the_reported_files_are_committed_and_an_empty_table_gets_a_file(spark, tmp_path) -> None:
    run_id, window = "r1", "all"
    dirs = delta_io.stage_dirs(["assignments", "violations"], base_path=str(tmp_path), run_id=run_id,
                               run_window=window)
    reported = Path(dirs["assignments"]) / "part-00000-a.c000.snappy.parquet"
    stray = Path(dirs["assignments"]) / "part-00000-b.c000.snappy.parquet"  # a failed attempt's
    Path(dirs["assignments"]).mkdir(parents=True)
    pq.write_table(pa.Table.from_batches([_assignments_batch(3, run_id)]), reported)
    pq.write_table(pa.Table.from_batches([_assignments_batch(5, run_id)]), stray)
    results = delta_io.write_tables(spark, {
        "assignments": delta_io.StagedFiles(staged_schema("assignments"), (str(reported),), 3),
        "violations": delta_io.StagedFiles(staged_schema("violations"), (), 0),
    }, run_id=run_id, run_window=window, base_path=str(tmp_path), writer="embedded")
    assert results["assignments"].rows_added == 3 and results["violations"].rows_added == 0
    assert not stray.exists()
    assert DeltaTable(str(tmp_path / "assignments")).to_pyarrow_table().num_rows == 3
    empty = read_table(spark, str(tmp_path / "violations"))
    assert empty.count() == 0 and empty.columns == [*staged_schema("violations").fieldNames(), "run_window"]
    assert DeltaTable(str(tmp_path / "violations")).to_pyarrow_table().num_rows == 0
    with pytest.raises(delta_io.DeltaWriteError, match="already has a directory for this run id"):
        delta_io.stage_dirs(["assignments"], base_path=str(tmp_path), run_id=run_id, run_window=window)


def test_reported_rows_must_match_the_files(spark, tmp_path) -> None:
    dirs = delta_io.stage_dirs(["assignments"], base_path=str(tmp_path), run_id="r", run_window="all")
    Path(dirs["assignments"]).mkdir(parents=True)
    path = Path(dirs["assignments"]) / "part-00000-a.c000.snappy.parquet"
    pq.write_table(pa.Table.from_batches([_assignments_batch(2)]), path)
    with pytest.raises(delta_io.DeltaWriteError, match="hold 2 rows, the workers that wrote them reported 4"):
        delta_io.write_tables(spark, {"assignments": delta_io.StagedFiles(staged_schema("assignments"),
                                                                          (str(path),), 4)},
                              run_id="r", run_window="all", base_path=str(tmp_path), writer="embedded")
    assert not (tmp_path / "assignments" / "_delta_log").exists()  # nothing committed, staged files gone
    assert not path.exists()


def test_the_arrow_window_cut_equals_spark(spark) -> None:
    rnd = random.Random(7)
    lo, hi = 1_763_766_000_000, 1_763_768_620_000  # 2025-11-21T23:00Z .. 23:43:40Z

    def t() -> int | None:  # around the bounds, on both sides, and sometimes unknown
        return None if rnd.random() < 0.15 else rnd.choice([lo, hi, lo - 1, hi - 1, hi + 1]) + rnd.randint(-3, 3) * 600_000

    cases = {
        "partition_ownership": ("valid_from long, valid_to long",
                                [{"valid_from": t(), "valid_to": t()} for _ in range(300)]),
        "rebalances": ("started_at long, observed_at long",
                       [{"started_at": t(), "observed_at": t()} for _ in range(300)]),
        "group_health": ("day string", [{"day": d} for d in ("2025-11-19", "2025-11-20", "2025-11-21", "2025-11-22")]),
    }
    frames = {table: spark.createDataFrame(rows, ddl) for table, (ddl, rows) in cases.items()}
    since, until = datetime.fromtimestamp(lo / 1000, UTC), datetime.fromtimestamp(hi / 1000, UTC)
    for bounds in ((since, until), (since, None), (None, until)):
        cut = overlapping_window(frames, since=bounds[0], until=bounds[1])
        ms = [None if b is None else int(b.timestamp() * 1000) for b in bounds]
        for table, (_, rows) in cases.items():
            batch = frames[table].toArrow().combine_chunks().to_batches()[0]
            assert batch.num_rows == len(rows)
            got = sorted(map(repr, overlapping_rows(table, batch, ms[0], ms[1]).to_pylist()))
            want = sorted(repr(r.asDict()) for r in cut[table].collect())
            assert got == want, (table, bounds)
            assert 0 < len(got) < len(rows) or table == "group_health"


def test_a_run_that_fails_after_the_replay_wrote_its_files_leaves_none(spark, derived_input, tmp_path,
                                                                      monkeypatch) -> None:
    import coordinator_audit.jobs.audit

    seen: list[int] = []
    real = coordinator_audit.jobs.audit._staged_files

    def fail_after_listing(wide, stage_dirs, carried_dirs=None):  # the replay's tasks have written their files by now
        staged, _ = real(wide, stage_dirs, carried_dirs)
        seen.append(sum(len(f.files) for f in staged.values()))
        raise RuntimeError("injected failure after the replay")

    monkeypatch.setattr(coordinator_audit.jobs.audit, "_staged_files", fail_after_listing)
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="injected failure"):
        run_audit(spark, load_config(None, {"input.path": str(derived_input), "input.format": "parquet",
                                            "output.path": str(out), "job.shards": 2}), run_id="r")
    assert seen and seen[0] > 0
    assert not list(out.rglob("*.parquet"))


def test_a_resumed_run_that_fails_after_the_replay_leaves_no_carried_rows(spark, derived_input, tmp_path,
                                                                          monkeypatch) -> None:
    import coordinator_audit.jobs.audit

    out = tmp_path / "out"
    (since, until), (since2, until2) = WINDOWS

    def audit(i: int, a: str, b: str) -> None:
        run_audit(spark, load_config(None, {"input.path": str(derived_input), "input.format": "parquet",
                                            "output.path": str(out), "job.shards": 2, "window.since": a,
                                            "window.until": b}), run_id=f"w{i}")

    audit(0, since, until)
    before = {p for p in out.rglob("*.parquet")}
    seen: list[int] = []
    real = coordinator_audit.jobs.audit._staged_files

    def fail_after_listing(wide, stage_dirs, carried_dirs=None):
        _, carried = real(wide, stage_dirs, carried_dirs)
        seen.append(sum(f.rows for f in carried.values()))
        raise RuntimeError("injected failure after the replay")

    monkeypatch.setattr(coordinator_audit.jobs.audit, "_staged_files", fail_after_listing)
    with pytest.raises(RuntimeError, match="injected failure"):
        audit(1, since2, until2)
    assert seen and seen[0] > 0  # the tasks had written carried rows
    assert not (out / delta_io.CARRIED_ROOT).exists()
    assert {p for p in out.rglob("*.parquet")} == before


@pytest.mark.parametrize(("uri", "local"), [
    ("out/delta", True), ("/data/audit", True), ("file:///data/audit", True), ("C:/audit", True),
    (None, False), ("", False), ("s3://bucket/audit", False), ("dbfs:/mnt/audit", False),
    ("abfss://c@account.dfs.core.windows.net/audit", False),
])
def test_only_paths_of_this_file_system_are_written_by_the_workers(uri, local) -> None:
    assert delta_io.local_path(uri) is local
