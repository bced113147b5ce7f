"""The single pass's Arrow reader on Parquet timestamps that are not milliseconds (Spark's default
INT96 reads as nanoseconds; TIMESTAMP_MICROS as microseconds), nulls included; and the kernel's
big-endian reads of the values' bytes (unsigned-indexed, `udfs.scan_kernel._be_int64`)."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


_UNITS = {"s": 1 / 1000, "ms": 1, "us": 1000, "ns": 1_000_000}


@settings(max_examples=300, deadline=None)
@given(unit=st.sampled_from(sorted(_UNITS)),
       rows=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40), st.one_of(st.none(), st.integers(-5000, 5000))),
                     max_size=40),
       since=st.one_of(st.none(), st.integers(-3, 3)), until=st.one_of(st.none(), st.integers(-3, 3)),
       start_after=st.dictionaries(st.integers(0, 4), st.integers(-1, 40), max_size=3),
       offset=st.integers(0, 3))
def test_the_window_is_the_time_bounds_or_the_offsets_after_the_last_run(
        unit: str, rows: list[tuple[int, int, int | None]], since: int | None, until: int | None,
        start_after: dict[int, int], offset: int) -> None:
    """`_input_batch`'s window, written out per record: at or after `since` (or, on a partition of
    `start_after`, after its offset) and before `until`; a null time is in no bounded window. Rows
    in any order, a batch sliced from a bigger one (`offset`)."""
    scale = _UNITS[unit]
    raw = [None if t is None else (t * 1000 if unit == "s" else t) for _, _, t in rows]  # in the unit
    pad = [(0, 0, 0)] * offset
    batch = pa.record_batch({
        "key": pa.array([b"k"] * (offset + len(rows))), "value": pa.array([b"v"] * (offset + len(rows))),
        "partition": pa.array([p for p, _, _ in pad + rows], pa.int32()),
        "offset": pa.array([o for _, o, _ in pad + rows], pa.int64()),
        "timestamp": pa.array([0] * offset + raw, pa.timestamp(unit, tz="UTC"))}).slice(offset)
    out = _input_batch(batch, since, until, start_after)
    want_ms: list[int | None] = []
    want_in: list[bool] = []
    for (p, o, _), r in zip(rows, raw, strict=True):
        ms = None if r is None else (r * 1000 if unit == "s" else math.floor(r / scale) if scale > 1 else r)
        inside = since is None or (ms is not None and ms >= since)
        if p in start_after:
            inside = o > start_after[p]
        if until is not None:
            inside = inside and ms is not None and ms < until
        want_ms.append(ms)
        want_in.append(inside)
    assert out.column("timestamp_ms").to_pylist() == want_ms
    assert out.column("in_window").to_pylist() == want_in


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=8, max_size=40), st.data())
def test_the_kernels_big_endian_reads_are_python_s(data: bytes, draw: st.DataObject) -> None:
    import numpy as np

    from udfs.scan_kernel import be_int64, be_signed

    buf = np.frombuffer(data, dtype=np.uint8)
    at = draw.draw(st.integers(0, len(data) - 8))
    assert be_int64(buf, at) == int.from_bytes(data[at:at + 8], "big", signed=True)
    for size in (2, 4):
        assert be_signed(buf, at, size) == int.from_bytes(data[at:at + size], "big", signed=True)
