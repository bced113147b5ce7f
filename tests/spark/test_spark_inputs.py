"""coordinator_audit.jobs.inputs: formats and auto-detection, text dumps (hex/base64), schema casts and errors,
the time window and deduplication with their counts."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from chispa import assert_df_equality
from deltalake import write_deltalake

from coordinator_audit.jobs.inputs import InputCounts, InputError, detect_format, read_input
from coordinator_audit.udfs.scan import RowGroupBounds

pytestmark = pytest.mark.spark

K1, V1 = b"\x00\x02\x00\x01g", b"\x00\x03abc"
K2, V2 = b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x00", None
MS = 1_700_000_000_000  # 2023-11-14T22:13:20Z


def _table(partition_type: pa.DataType | None = None) -> pa.Table:
    # (partition 0, offset 1) appears twice; offset 3 is outside the window used below
    return pa.table({
        "key": pa.array([K1, K2, K2, K1], pa.binary()),
        "value": pa.array([V1, V2, V2, V1], pa.binary()),
        "topic": ["__consumer_offsets"] * 4,
        "partition": pa.array([0, 0, 0, 0], partition_type or pa.int32()),
        "offset": pa.array([0, 1, 1, 3], pa.int64()),
        "timestamp": pa.array([MS, MS + 1000, MS + 1000, MS + 10_000], pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
    })


def _expected(spark, rows):
    return spark.createDataFrame(
        rows, "key binary, value binary, topic string, partition int, offset long, timestamp timestamp")


EXPECTED = [(K1, V1, "__consumer_offsets", 0, 0, datetime.fromtimestamp(MS / 1000, UTC)),
            (K2, None, "__consumer_offsets", 0, 1, datetime.fromtimestamp(MS / 1000 + 1, UTC)),
            (K1, V1, "__consumer_offsets", 0, 3, datetime.fromtimestamp(MS / 1000 + 10, UTC))]


def test_parquet_with_partition_long_is_cast_and_deduplicated(spark, tmp_path: Path) -> None:
    path = tmp_path / "in.parquet"
    pq.write_table(_table(pa.int64()), path)
    data = read_input(spark, str(path))
    assert data.format == "parquet"
    assert_df_equality(data.df, _expected(spark, EXPECTED), ignore_row_order=True, ignore_nullable=True)
    assert data.counts() == InputCounts(records_in=4, filtered_by_window=0, duplicates_dropped=1, records=3)


def test_window_counts(spark, tmp_path: Path) -> None:
    path = tmp_path / "in.parquet"
    pq.write_table(_table(), path)
    data = read_input(spark, str(path), since=datetime.fromtimestamp(MS / 1000, UTC),
                      until=datetime.fromtimestamp(MS / 1000 + 5, UTC))
    assert_df_equality(data.df, _expected(spark, EXPECTED[:2]), ignore_row_order=True, ignore_nullable=True)
    c = data.counts()
    assert c == InputCounts(records_in=4, filtered_by_window=1, duplicates_dropped=1, records=2)
    assert c.records_in == c.filtered_by_window + c.duplicates_dropped + c.records


def test_delta_input(spark, tmp_path: Path) -> None:
    write_deltalake(str(tmp_path / "t"), _table())
    assert detect_format(str(tmp_path / "t")) == "delta"
    data = read_input(spark, str(tmp_path / "t"))
    assert_df_equality(data.df, _expected(spark, EXPECTED), ignore_row_order=True, ignore_nullable=True)


def test_a_delta_input_comes_with_its_files_bounds_from_the_log(spark, tmp_path: Path) -> None:
    """`InputData.bounds`: per data file, the partitions, the highest offset and the times (in epoch
    ms, widened by one each way) the log's statistics give, from the partition values when the table
    is partitioned by a position column; the version read is the one they describe; none when a
    position may be null."""
    table = _table()
    write_deltalake(str(tmp_path / "t"), table.slice(0, 2))
    write_deltalake(str(tmp_path / "t"), table.slice(2), mode="append")
    data = read_input(spark, str(tmp_path / "t"))
    assert data.bounds is not None and data.bounds.records == 4
    assert sorted(data.bounds.units) == [RowGroupBounds(0, 0, 1, MS - 1, MS + 1001),
                                         RowGroupBounds(0, 0, 3, MS + 999, MS + 10_001)]
    assert data.bounds_note is None and data.rejects is None
    write_deltalake(str(tmp_path / "t"), table.slice(3), mode="append")  # after the read: not in its version
    assert data.raw.count() == 4
    parted = table.append_column("p", pa.array([0, 0, 1, 1], pa.int32()))
    write_deltalake(str(tmp_path / "by-partition"), parted.drop_columns(["partition"]).rename_columns(
        [*parted.drop_columns(["partition", "p"]).column_names, "partition"]), partition_by=["partition"])
    by_partition = read_input(spark, str(tmp_path / "by-partition")).bounds
    assert by_partition is not None
    units = sorted(by_partition.units)
    assert [(u.partition_min, u.partition_max, u.offset_max) for u in units] == [(0, 0, 1), (1, 1, 3)]
    nulls = table.set_column(5, "timestamp", pa.array([None, *table.column("timestamp").to_pylist()[1:]],
                                                       table.column("timestamp").type))
    write_deltalake(str(tmp_path / "nulls"), nulls)
    with_nulls = read_input(spark, str(tmp_path / "nulls"))
    assert with_nulls.bounds is None and "timestamp may be null" in (with_nulls.bounds_note or "")
    assert with_nulls.rejected() == 1


@pytest.mark.parametrize("encoding", ["hex", "base64"])
def test_json_lines_dumps(spark, tmp_path: Path, encoding: str) -> None:
    enc = (lambda b: b.hex()) if encoding == "hex" else (lambda b: base64.b64encode(b).decode())
    lines = [{"key": enc(K1), "value": enc(V1), "topic": "__consumer_offsets", "partition": 0, "offset": 0,
              "timestamp": MS},
             {"key": enc(K2), "value": None, "partition": 0, "offset": 1, "timestamp": "2023-11-14T22:13:21Z"},
             {"key": enc(K1), "value": enc(V1), "partition": 0, "offset": 3, "timestamp": MS + 10_000}]
    path = tmp_path / "dump.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines))
    data = read_input(spark, str(path))
    assert data.format == "json" and data.text_encoding == encoding
    assert_df_equality(data.df, _expected(spark, EXPECTED), ignore_row_order=True, ignore_nullable=True)


def test_errors_say_what_to_fix(spark, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file or directory"):
        read_input(spark, str(tmp_path / "missing.parquet"))
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(InputError, match="pass --format"):
        read_input(spark, str(tmp_path / "x.csv"))
    pq.write_table(_table().drop(["offset"]), tmp_path / "no_offset.parquet")
    with pytest.raises(InputError, match=r"missing column\(s\) offset; the input must have the Kafka-source schema"):
        read_input(spark, str(tmp_path / "no_offset.parquet"))
    t = _table()
    t = t.set_column(0, "key", pa.array([k.hex() for k in t.column("key").to_pylist()]))
    pq.write_table(t, tmp_path / "string_key.parquet")
    with pytest.raises(InputError, match=r"column key is string, expected binary .*--format json"):
        read_input(spark, str(tmp_path / "string_key.parquet"))
    (tmp_path / "bad.jsonl").write_text('{"a": 1}\n')
    with pytest.raises(InputError, match="no JSON line with 'partition' and 'offset'"):
        read_input(spark, str(tmp_path / "bad.jsonl"))
