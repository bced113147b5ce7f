"""The single pass's Arrow reader on Parquet timestamps that are not milliseconds (Spark's default
INT96 reads as nanoseconds; TIMESTAMP_MICROS as microseconds), nulls included; the row groups it
leaves unread because their statistics put every record outside the window; and the kernel's
big-endian reads of the values' bytes (unsigned-indexed, `coordinator_audit.udfs.scan_kernel._be_int64`)."""

from __future__ import annotations

import io
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator_audit.udfs.scan import (
    NOTHING_INSIDE_MS,
    RowGroupBounds,
    _input_batch,
    outside_window,
    row_group_bounds,
    window_floor,
)


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
       rows=st.lists(st.tuples(st.integers(0, 3), st.one_of(st.none(), st.integers(0, 40)),
                               st.one_of(st.none(), st.integers(-5000, 5000))), max_size=40),
       since=st.one_of(st.none(), st.integers(-3, 3)), until=st.one_of(st.none(), st.integers(-3, 3)),
       start_after=st.dictionaries(st.integers(0, 4), st.integers(-1, 40), max_size=3),
       offset=st.integers(0, 3))
def test_the_window_is_the_time_bounds_or_the_offsets_after_the_last_run(
        unit: str, rows: list[tuple[int, int | None, int | None]], since: int | None, until: int | None,
        start_after: dict[int, int], offset: int) -> None:
    """`_input_batch`'s window, written out per record: at or after `since` (or, on a partition of
    `start_after`, after its offset: a null offset is not) and before `until`; a null time is in no
    bounded window. Rows in any order, a batch sliced from a bigger one (`offset`)."""
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
            inside = o is not None and o > start_after[p]
        if until is not None:
            inside = inside and ms is not None and ms < until
        want_ms.append(ms)
        want_in.append(inside)
    assert out.column("timestamp_ms").to_pylist() == want_ms
    assert out.column("in_window").to_pylist() == want_in


_FOOTER_CASES = {
    "unit": st.sampled_from(sorted(_UNITS)),
    "rows": st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40), st.one_of(st.none(), st.integers(-5000, 5000))),
                     min_size=1, max_size=40),
    "row_group_size": st.integers(1, 12),
    "since": st.one_of(st.none(), st.integers(-3000, 3000)), "until": st.one_of(st.none(), st.integers(-3000, 3000)),
    "start_after": st.dictionaries(st.integers(0, 4), st.integers(-1, 40), max_size=4)}
"""Records (partition, offset, time) written as a Parquet file in row groups, and a run's window."""


def _parquet(rows: list[tuple[int, int, int | None]], unit: str, *, row_group_size: int,
             **write_options: object) -> pq.ParquetFile:
    """`rows` (partition, offset, time in `unit`) as a Parquet file with the Kafka-source columns."""
    n = len(rows)
    table = pa.table({"key": pa.array([b"k"] * n), "value": pa.array([b"v"] * n),
                      "partition": pa.array([p for p, _, _ in rows], pa.int32()),
                      "offset": pa.array([o for _, o, _ in rows], pa.int64()),
                      "timestamp": pa.array([t for _, _, t in rows], pa.timestamp(unit, tz="UTC"))})
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=row_group_size, **write_options)  # type: ignore[arg-type]
    return pq.ParquetFile(io.BytesIO(buf.getvalue()))


@settings(max_examples=300, deadline=None)
@given(**_FOOTER_CASES)
def test_a_row_group_left_unread_holds_no_record_of_the_window(
        unit: str, rows: list[tuple[int, int, int | None]], row_group_size: int, since: int | None,
        until: int | None, start_after: dict[int, int]) -> None:
    """`outside_window` on the statistics of a real Parquet footer (`row_group_bounds`), against the
    kernel's window on the records as the reader reads them back (`_input_batch`): a row group it
    leaves unread has none in the window, in any timestamp unit, nulls included."""
    raw = [(p, o, None if t is None else (t * 1000 if unit == "s" else t)) for p, o, t in rows]
    pf = _parquet(raw, unit, row_group_size=row_group_size)
    bounds = row_group_bounds(pf.metadata)
    assert len(bounds) == pf.metadata.num_row_groups
    for g, b in enumerate(bounds):
        if outside_window(b, since_ms=since, until_ms=until, start_after=start_after):
            batch = pf.read_row_group(g).to_batches()[0]
            assert not any(_input_batch(batch, since, until, start_after).column("in_window").to_pylist()), b


def test_row_groups_are_left_unread_when_the_statistics_prove_it() -> None:
    """The cases a nightly run meets: a row group whose records come after `until`, one of a
    partition the previous run read to its end, one of several partitions each read to its end, and
    one whose partitions are partly read to their end and partly before `since`. Unknown bounds
    prove nothing: no statistics, and Spark's default INT96 timestamps (none for the time)."""
    rows = [(0, o, 1000 + o) for o in range(10)] + [(1, o, 2000 + o) for o in range(10)]
    pf = _parquet(rows, "ms", row_group_size=10)
    first, second = row_group_bounds(pf.metadata)
    assert first == RowGroupBounds(0, 0, 9, 999, 1010) and second == RowGroupBounds(1, 1, 9, 1999, 2010)
    assert outside_window(second, since_ms=None, until_ms=1999, start_after={})
    assert not outside_window(second, since_ms=None, until_ms=2001, start_after={})
    assert outside_window(first, since_ms=None, until_ms=None, start_after={0: 9})
    assert not outside_window(first, since_ms=None, until_ms=None, start_after={0: 8})
    both = row_group_bounds(_parquet(rows, "ms", row_group_size=20).metadata)[0]
    assert outside_window(both, since_ms=None, until_ms=None, start_after={0: 9, 1: 12})
    assert not outside_window(both, since_ms=None, until_ms=None, start_after={0: 9})
    assert outside_window(both, since_ms=2011, until_ms=None, start_after={0: 9})
    assert not outside_window(both, since_ms=2009, until_ms=None, start_after={0: 9})
    unknown = row_group_bounds(_parquet(rows, "ms", row_group_size=10, write_statistics=False).metadata)
    assert unknown[0] == RowGroupBounds(None, None, None, None, None)
    assert not any(outside_window(b, since_ms=0, until_ms=0, start_after={0: 99, 1: 99}) for b in unknown)
    int96 = row_group_bounds(_parquet(rows, "ms", row_group_size=10, use_deprecated_int96_timestamps=True).metadata)
    assert int96[1] == RowGroupBounds(1, 1, 9, None, None)
    assert not outside_window(int96[1], since_ms=None, until_ms=1999, start_after={})


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=8, max_size=40), st.data())
def test_the_kernels_big_endian_reads_are_python_s(data: bytes, draw: st.DataObject) -> None:
    import numpy as np

    from coordinator_audit.udfs.scan_kernel import be_int64, be_signed

    buf = np.frombuffer(data, dtype=np.uint8)
    at = draw.draw(st.integers(0, len(data) - 8))
    assert be_int64(buf, at) == int.from_bytes(data[at:at + 8], "big", signed=True)
    for size in (2, 4):
        assert be_signed(buf, at, size) == int.from_bytes(data[at:at + size], "big", signed=True)


@settings(max_examples=300, deadline=None)
@given(**_FOOTER_CASES)
def test_every_record_of_the_window_is_at_or_after_the_window_floor(
        unit: str, rows: list[tuple[int, int, int | None]], row_group_size: int, since: int | None,
        until: int | None, start_after: dict[int, int]) -> None:
    """`window_floor` of a real Parquet footer's row groups: no record with a time that the kernel
    keeps in the window (`_input_batch`) is earlier, whatever the unit; a row group it needs without
    a time bound gives no floor."""
    raw = [(p, o, None if t is None else (t * 1000 if unit == "s" else t)) for p, o, t in rows]
    pf = _parquet(raw, unit, row_group_size=row_group_size)
    bounds = row_group_bounds(pf.metadata)
    floor = window_floor(bounds, since_ms=since, until_ms=until, start_after=start_after)
    batch = pf.read().combine_chunks().to_batches()[0]
    out = _input_batch(batch, since, until, start_after)
    inside = [ms for ms, w in zip(out.column("timestamp_ms").to_pylist(), out.column("in_window").to_pylist(),
                                  strict=True) if w]
    if floor is None:  # a row group it cannot rule out has no time bound (all its times null)
        assert any(b.time_min_ms is None and not outside_window(b, since_ms=since, until_ms=until,
                                                                start_after=start_after) for b in bounds)
    elif floor == NOTHING_INSIDE_MS:
        assert not inside
    else:
        assert all(ms >= floor for ms in inside if ms is not None)


def test_the_window_floor_is_the_earliest_time_of_the_row_groups_that_may_hold_the_window() -> None:
    rows = [(0, o, 1000 + o) for o in range(10)] + [(1, o, 2000 + o) for o in range(10)]
    bounds = row_group_bounds(_parquet(rows, "ms", row_group_size=10).metadata)
    assert window_floor(bounds, since_ms=None, until_ms=None, start_after={0: 9}) == 1999
    assert window_floor(bounds, since_ms=None, until_ms=None, start_after={0: 8}) == 999
    assert window_floor(bounds, since_ms=None, until_ms=None, start_after={0: 9, 1: 9}) == NOTHING_INSIDE_MS
    assert window_floor(bounds, since_ms=1500, until_ms=None, start_after={}) == 1999
    unknown = row_group_bounds(_parquet(rows, "ms", row_group_size=10, use_deprecated_int96_timestamps=True).metadata)
    assert window_floor(unknown, since_ms=None, until_ms=None, start_after={0: 9}) is None
