"""`coordinator_audit.udfs.table_files`: the rows a replay task writes as Parquet files itself, in the layout Spark's path
stores (content columns, TIMESTAMP companions, run_id), one file per table per task, reported as
written; the derived rows cut to the run's window (the Spark twin is held equal in the Spark tier)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from coordinator_audit.core.audit import AssignmentRow, GenerationRow
from coordinator_audit.udfs import table_files
from coordinator_audit.udfs.schemas import stored_schema
from coordinator_audit.udfs.table_files import (
    DirectWrite,
    TableFiles,
    overlapping_rows,
    stored_arrow_schema,
    stored_batch,
)


def _assignment(i: int, valid_to: int | None) -> AssignmentRow:
    fields = {f.name: None for f in dataclasses.fields(AssignmentRow)}
    fields.update(group_id="g", member_id=f"m{i % 3}", generation_id=1, topic="t", partition=i,
                  valid_from=1_700_000_000_123 + i, valid_to=valid_to, source_partition=0, source_offset=i)
    return AssignmentRow(**fields)


def _columns(rows: list) -> list[list]:
    return [list(col) for col in zip(*(dataclasses.astuple(r) for r in rows), strict=True)]


def test_the_stored_layout_is_the_tables_stored_schema_without_the_partition_column() -> None:
    for table in ("generations", "assignments", "offset_commits", "partition_ownership", "group_health"):
        assert stored_arrow_schema(table).names == [n for n in stored_schema(table).fieldNames() if n != "run_window"]


def test_time_companions_and_run_id_are_computed_as_spark_does() -> None:
    rows = [_assignment(0, None), _assignment(1, 1_700_000_000_999)]
    batch = stored_batch("assignments", _columns(rows), "run-1")
    assert batch.schema == stored_arrow_schema("assignments")
    got = batch.to_pylist()
    assert got[0]["valid_from_time"] == datetime(2023, 11, 14, 22, 13, 20, 123_000, tzinfo=UTC)
    assert got[0]["valid_to_time"] is None and got[0]["valid_to"] is None
    assert got[1]["valid_to_time"] == datetime(2023, 11, 14, 22, 13, 20, 999_000, tzinfo=UTC)
    assert [r["run_id"] for r in got] == ["run-1", "run-1"]
    assert batch.schema.field("run_id").nullable is False


def test_generations_get_null_broker_columns() -> None:
    fields = {f.name: None for f in dataclasses.fields(GenerationRow)}
    fields.update(group_id="g", generation_id=3, member_count=2, static_member_count=0, state="Stable",
                  record_timestamp=1, source_partition=0, source_offset=9, static_replacements=0,
                  coordinator_flavour="java", protocol_type="consumer")
    batch = stored_batch("generations", _columns([GenerationRow(**fields)]), "r")
    row = batch.to_pylist()[0]
    assert row["broker_reason"] is None and row["broker_member_count"] is None
    assert row["coordinator_flavour"] == "java"
    with pytest.raises(ValueError, match="more value lists"):
        stored_batch("generations", [*_columns([GenerationRow(**fields)]), [1]], "r")


def test_a_bad_value_names_the_table_and_column() -> None:
    cols = _columns([_assignment(0, None)])
    cols[1] = ["not a number"]  # generation_id
    with pytest.raises(ValueError, match=r"table assignments column 'generation_id'"):
        stored_batch("assignments", cols, "r")


@pytest.mark.parametrize(("compression", "codec", "suffix"), [("zstd", "ZSTD", ".c000.zstd.parquet"),
                                                              ("snappy", "SNAPPY", ".c000.snappy.parquet"),
                                                              ("gzip", "GZIP", ".c000.gz.parquet"),
                                                              ("none", "UNCOMPRESSED", ".c000.parquet")])
def test_one_file_per_table_per_task_in_row_groups_reported_as_written(tmp_path: Path, monkeypatch, compression: str,
                                                                       codec: str, suffix: str) -> None:
    monkeypatch.setattr(table_files, "ROW_GROUP_ROWS", 4)
    spec = DirectWrite({"assignments": str(tmp_path / "a"), "violations": str(tmp_path / "v")}, "run-7",
                       compression=compression)
    files = TableFiles(spec, partition_id=3)
    assert files.writes("assignments") and not files.writes("generations")
    rows = [_assignment(i, None) for i in range(10)]
    for start in (0, 3, 6):  # three flushes: 3 + 3 + 4 rows
        files.add("assignments", _columns(rows[start:start + (3 if start < 6 else 4)]))
    written = files.close()
    assert len(written) == 1  # violations had no row: no file
    table, path, n = written[0]
    assert (table, n) == ("assignments", 10)
    assert Path(path).parent == tmp_path / "a" and Path(path).name.startswith("part-00003-")
    assert Path(path).name.endswith(suffix)  # Spark's naming: the codec in the name
    pf = pq.ParquetFile(path)
    assert {pf.metadata.row_group(g).column(c).compression for g in range(pf.metadata.num_row_groups)
            for c in range(pf.metadata.num_columns)} == {codec}
    assert pf.metadata.num_rows == 10 and pf.metadata.num_row_groups == 2  # 6 rows once past 4, then the rest
    assert [r["partition"] for r in pf.read().to_pylist()] == list(range(10))
    assert pf.schema_arrow == stored_arrow_schema("assignments")


def test_an_unknown_codec_is_named() -> None:
    with pytest.raises(ValueError, match=r"Parquet compression 'lzo' is not one of zstd, snappy, gzip, none"):
        table_files.part_file_name(0, "lzo")


def test_abort_closes_the_open_files(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(table_files, "ROW_GROUP_ROWS", 1)
    files = TableFiles(DirectWrite({"assignments": str(tmp_path)}, "r", compression="zstd"), partition_id=0)
    files.add("assignments", _columns([_assignment(0, None)]))
    (path,) = tmp_path.iterdir()
    with pytest.raises(pa.ArrowInvalid):  # open: no footer yet
        pq.read_metadata(path)
    files.abort()
    assert pq.read_metadata(path).num_rows == 1


def _ownership(valid_from: int | None, valid_to: int | None) -> dict:
    return {"valid_from": valid_from, "valid_to": valid_to}


def test_derived_rows_are_cut_to_the_window() -> None:
    schema = pa.schema([("valid_from", pa.int64()), ("valid_to", pa.int64())])
    batch = pa.RecordBatch.from_pylist([_ownership(0, 5), _ownership(5, 10), _ownership(10, None),
                                        _ownership(20, 30), _ownership(None, 12)], schema=schema)
    kept = overlapping_rows("partition_ownership", batch, 10, 20).to_pylist()
    # ends before 10: out; ends at 10: in (end >= since); open: in; starts at 20: out (start < until);
    # no start: out (Spark drops a null condition)
    assert kept == [_ownership(5, 10), _ownership(10, None)]
    assert overlapping_rows("partition_ownership", batch, None, None) is batch
    assert overlapping_rows("assignments", batch, 10, 20) is batch


def test_health_days_overlap_by_their_utc_day() -> None:
    batch = pa.RecordBatch.from_pylist([{"day": "2026-11-20"}, {"day": "2026-11-21"}, {"day": "2026-11-22"}])
    since = int(datetime(2026, 11, 21, 23, 0, tzinfo=UTC).timestamp() * 1000)
    until = int(datetime(2026, 11, 22, 0, 0, tzinfo=UTC).timestamp() * 1000)
    assert overlapping_rows("group_health", batch, since, until).to_pylist() == [{"day": "2026-11-21"}]


def test_a_column_may_come_as_an_array_of_its_type() -> None:
    windows_type = stored_arrow_schema("group_state").field("offset_windows").type
    windows = pa.array([[]], type=windows_type)
    assert windows_type.value_field.nullable  # as Spark's CAST leaves it (the replay builds it not null)
    columns = [["g"], ['{"format":1}'], [3], ["Stable"], [0], [17], [b"v"], [True], windows]
    row = stored_batch("group_state", columns, "r").to_pylist()[0]
    assert (row["group_id"], row["window_start_offset"], row["offset_windows"], row["run_id"]) == ("g", 17, [], "r")
    with pytest.raises(ValueError, match=r"column 'offset_windows': an array of list<item: int64>, not list"):
        stored_batch("group_state", [*columns[:-1], pa.array([[1]])], "r")


def test_a_tasks_rows_in_group_order_are_written_in_row_groups_a_one_group_read_can_pick(tmp_path: Path,
                                                                                          monkeypatch) -> None:
    """Row groups of `QUERY_ROW_GROUP_ROWS` rows: the groups a task wrote in order have narrow
    `group_id` statistics, so `coordinator_audit.jobs.delta_read` reads one row group of the file for one group."""
    from coordinator_audit.jobs.delta_read import _row_groups

    monkeypatch.setattr(table_files, "QUERY_ROW_GROUP_ROWS", 100)
    files = TableFiles(DirectWrite({"assignments": str(tmp_path)}, "r", compression="zstd"), partition_id=0)
    rows = [dataclasses.replace(_assignment(i, None), group_id=f"g{i // 50:03d}") for i in range(1000)]
    files.add("assignments", _columns(rows))
    ((_, path, written),) = files.close()
    pf = pq.ParquetFile(path)
    assert written == 1000 and pf.metadata.num_row_groups == 10
    assert _row_groups(pf, "group_id", "g007") == [3]  # its rows are 350-399
    assert _row_groups(pf, "group_id", "g010") == [5]
    assert _row_groups(pf, "group_id", "g999") == []
