"""The single pass's Arrow reader on Parquet timestamps that are not milliseconds (Spark's default
INT96 reads as nanoseconds; TIMESTAMP_MICROS as microseconds), nulls included."""

from __future__ import annotations

import pyarrow as pa
import pytest

from udfs.scan import _input_batch


@pytest.mark.parametrize("unit,per_ms", [("ns", 1_000_000), ("us", 1000), ("ms", 1)])
def test_timestamps_of_any_unit_become_floored_epoch_ms_with_nulls_kept(unit: str, per_ms: int) -> None:
    ms = [1_795_304_591_298, None, -1]
    ts = pa.array([None if m is None else m * per_ms + (per_ms - 1) for m in ms], pa.timestamp(unit, tz="UTC"))
    batch = pa.record_batch({"key": pa.array([b"k"] * 3), "value": pa.array([b"v"] * 3),
                             "partition": pa.array([0, 0, 0], pa.int32()), "offset": pa.array([1, 2, 3], pa.int64()),
                             "timestamp": ts})
    out = _input_batch(batch, None, None)
    assert out.column("timestamp_ms").to_pylist() == ms
