"""coordinator_audit.udfs.scan (the single pass's Arrow/numpy kernel) and its Spark wiring in coordinator_audit.jobs.offsets_path.

The kernel's record-level decision (which records it summarises, with which committed offset and
commitTimestamp) is checked against the codec on generated and mangled records, without Spark.
With Spark: the summary is the same whatever the chunking (every chunk size down to one record,
so every stretch is carried or stitched across chunks) and for input out of log order (the
re-scan), including a task that carried its stretches over another task's records."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from chispa import assert_df_equality
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator_audit.core.errors import RecordDecodeError
from coordinator_audit.core.records import (
    CoordinatorRecord,
    OffsetCommitKey,
    OffsetCommitValue,
    decode,
    encode,
)
from coordinator_audit.jobs import offsets_path as op
from coordinator_audit.udfs.replay import replay_frame, replay_input, split_table
from coordinator_audit.udfs.scan import (
    INPUT_COLUMNS,
    KIND_COUNTS,
    KIND_PARTIAL,
    KIND_SIDE,
    UNIT_CHUNKS,
    UNITS_PER_CORE,
    ParquetFooter,
    TaskKeys,
    _input_batch,
    footers_kept,
    parquet_tasks,
    parquet_units,
    read_footer,
    scan_chunk,
    unit_rows_for,
)
from coordinator_audit.udfs.scan_kernel import (
    S_PART,
    S_STRETCH,
    STRETCH_FIELDS,
    KeyTable,
    classify_keys,
    insert,
    lookup,
    open_partitions,
    same_bytes,
)
from coordinator_audit.udfs.schemas import TABLE_SCHEMAS, epoch_ms
from tests.spark.test_spark_offsets_path import EXPECTED_SUMMARY, LOG, SCHEMA, T, _frame

_ARROW_INPUT = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("partition", pa.int32()),
                          ("offset", pa.int64()), ("timestamp_ms", pa.int64()), ("in_window", pa.bool_())])


def _batch(records: list[tuple[bytes | None, bytes | None]], *, partition: int = 0,
           in_window: list[bool] | None = None) -> pa.RecordBatch:
    n = len(records)
    cols = {"key": [k for k, _ in records], "value": [v for _, v in records], "partition": [partition] * n,
            "offset": list(range(n)), "timestamp_ms": [T + i for i in range(n)],
            "in_window": in_window if in_window is not None else [True] * n}
    return pa.RecordBatch.from_pydict({c: cols[c] for c in INPUT_COLUMNS}, schema=_ARROW_INPUT)


def _by_kind(table: pa.Table) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for row in table.to_pylist():
        out.setdefault(row["_kind"], []).append(row)
    return out


def _codec_commit(key: bytes | None, value: bytes | None) -> tuple[int, int] | bool | None:
    """What the codec makes of a record: (offset, commit time) for a commit, True for an offset
    tombstone, None when it is not a decodable offset-commit record."""
    if key is None or len(key) < 2 or key[0] != 0 or key[1] > 1:
        return None
    try:
        rec = decode(key, value)
    except RecordDecodeError:
        return None
    if not isinstance(rec.key, OffsetCommitKey):
        return None
    if rec.value is None:
        return True
    assert isinstance(rec.value, OffsetCommitValue)
    return rec.value.offset, rec.value.commit_timestamp


_names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=12)


@st.composite
def _records(draw: st.DrawFn) -> tuple[bytes | None, bytes | None]:
    group, topic = draw(_names), draw(_names)
    part = draw(st.integers(-(2 ** 31), 2 ** 31 - 1))
    version = draw(st.integers(0, 4))
    meta = draw(st.one_of(st.just(""), _names, st.text(max_size=300)))
    value = None if draw(st.booleans()) and draw(st.booleans()) else OffsetCommitValue(
        draw(st.integers(-(2 ** 63), 2 ** 63 - 1)), 5 if version >= 3 else -1, meta,
        draw(st.integers(-(2 ** 63), 2 ** 63 - 1)), draw(st.integers(0, 2 ** 40)) if version == 1 else -1)
    key, raw_value = encode(CoordinatorRecord.of(OffsetCommitKey(group, topic, part), value,
                                                 key_version=draw(st.integers(0, 1)),
                                                 value_version=None if value is None else version))
    mangle = draw(st.sampled_from(["none", "truncate_key", "truncate_value", "append", "flip_key", "flip_value"]))
    if mangle == "truncate_key":
        key = key[:draw(st.integers(0, len(key)))]
    elif mangle == "truncate_value" and raw_value is not None:
        raw_value = raw_value[:draw(st.integers(0, len(raw_value)))]
    elif mangle == "append":
        raw_value = (raw_value or b"") + draw(st.binary(min_size=1, max_size=4))
    elif mangle in ("flip_key", "flip_value"):
        target = key if mangle == "flip_key" else raw_value
        if target:
            i = draw(st.integers(0, len(target) - 1))
            flipped = target[:i] + bytes([target[i] ^ draw(st.integers(1, 255))]) + target[i + 1:]
            key, raw_value = (flipped, raw_value) if mangle == "flip_key" else (key, flipped)
    return key, raw_value


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_records(), min_size=1, max_size=12))
def test_kernel_summarises_exactly_what_the_codec_decodes(records) -> None:
    got = _by_kind(scan_chunk(_batch(records), chunk=0))
    side = {r["offset"] for r in got.get(KIND_SIDE, [])}
    expected = [_codec_commit(k, v) for k, v in records]
    assert side == {i for i, e in enumerate(expected) if e is None}
    counts = got[KIND_COUNTS][0]
    assert counts["tombstones"] == sum(e is True for e in expected)
    assert counts["commits"] == sum(isinstance(e, tuple) for e in expected)
    # every summarised commit's offset and time, read back from one-record stretches: each record is
    # its own chunk here, so first == last == that record
    for i, (k, v) in enumerate(records):
        if isinstance(expected[i], tuple):
            one = _by_kind(scan_chunk(_batch([(k, v)]), chunk=0))[KIND_PARTIAL][0]
            assert (one["first_offset"], one["first_commit_timestamp"]) == expected[i]
            assert (one["last_offset"], one["last_commit_timestamp"]) == expected[i]


def test_kernel_drops_repeats_and_records_outside_the_window() -> None:
    recs = [LOG[0], LOG[2], LOG[2], LOG[4]]
    batch = _batch(recs, in_window=[True, True, True, False])
    rows = batch.to_pylist()
    rows[2]["offset"] = 1  # a second copy of offset 1
    got = _by_kind(scan_chunk(pa.RecordBatch.from_pylist(rows, schema=_ARROW_INPUT), chunk=3))
    c = got[KIND_COUNTS][0]
    assert (c["records_in"], c["filtered_by_window"], c["duplicates"], c["commits"]) == (4, 1, 1, 2)
    (partial,) = got[KIND_PARTIAL]
    assert (partial["first_offset"], partial["last_offset"], partial["commits"]) == (10, 20, 2)




@pytest.mark.spark
@pytest.mark.parametrize("chunk_rows", [1, 2, 5])
def test_summary_is_the_same_whatever_the_chunks(spark, chunk_rows) -> None:
    summary, violations, scan = op.offset_path(_frame(spark, LOG).coalesce(1), chunk_rows=chunk_rows)
    assert not scan.reordered
    assert_df_equality(summary, spark.createDataFrame(EXPECTED_SUMMARY, TABLE_SCHEMAS["offset_commits"]),
                       ignore_row_order=True, ignore_nullable=True)
    # the regression 20 -> 15 spans chunks when they are smaller than 3 records
    assert [(r["source_offset"], r["evidence"]) for r in violations.collect()] == [(4, "partition 3 offsets 2 -> 4")]
    scan.unpersist()


@pytest.mark.spark
def test_input_out_of_log_order_is_scanned_again_sorted(spark) -> None:
    frame = _frame(spark, LOG)
    shuffled = frame.unionByName(frame.where("offset IN (2, 4)")).repartition(3)  # interleaved, with repeats
    summary, violations, scan = op.offset_path(shuffled, chunk_rows=2)
    assert scan.reordered
    assert scan.counts["duplicates"] == 2
    assert_df_equality(summary, spark.createDataFrame(EXPECTED_SUMMARY, TABLE_SCHEMAS["offset_commits"]),
                       ignore_row_order=True, ignore_nullable=True)
    assert violations.count() == 1
    scan.unpersist()


@pytest.mark.spark
def test_stretches_carried_over_another_tasks_records_are_scanned_again(spark) -> None:
    # one task reads offsets 0-7 and 10-12 in chunks of four and carries g's open stretch of t-0 from
    # its second chunk into its third; another task holds 8-9, among them the GroupMetadata record
    # that ends generation 1: no two chunks interleave, but the carried stretch spans that record
    rows = _frame(spark, LOG).collect()
    tasks = [[r for r in rows if r["offset"] not in (8, 9)], [r for r in rows if r["offset"] in (8, 9)]]
    split = spark.createDataFrame(spark.sparkContext.parallelize(tasks, 2).flatMap(lambda task: task), SCHEMA)
    assert split.rdd.glom().map(len).collect() == [11, 2]
    summary, violations, scan = op.offset_path(split, chunk_rows=4)
    assert scan.reordered
    assert_df_equality(summary, spark.createDataFrame(EXPECTED_SUMMARY, TABLE_SCHEMAS["offset_commits"]),
                       ignore_row_order=True, ignore_nullable=True)
    assert violations.count() == 1
    scan.unpersist()


def _merged(scan: op.Scan):
    """The scan's offset rows and regression violations, through the job's replay."""
    wide = replay_frame(replay_input(scan.side(), scan.stretches(), shards=2))
    return split_table(wide, "offset_commits"), split_table(wide, "violations").where("kind = 'offset_regression'")


@pytest.mark.spark
def test_arrow_and_spark_readers_agree_on_the_samples(spark) -> None:
    from datetime import UTC, datetime
    from pathlib import Path

    samples = Path(__file__).resolve().parents[2] / "data" / "samples"
    df = spark.read.option("pathGlobFilter", "*.parquet").parquet(str(samples))
    bounds = spark.read.parquet(str(samples / "real_broker_3_9_0.parquet")).agg({"timestamp": "min"}).first()[0]
    since = bounds.replace(tzinfo=UTC) if bounds.tzinfo is None else bounds
    until = datetime(2100, 1, 1, tzinfo=UTC)
    results = {}
    for reader in ("arrow", "spark"):
        scan = op.scan_log(df, since=since, until=until, reader=reader, chunk_rows=300)
        assert scan.reader == reader and not scan.reordered
        rows, regressions = _merged(scan)
        results[reader] = (scan.counts, sorted(map(tuple, rows.collect())), sorted(map(tuple, regressions.collect())),
                           sorted(map(tuple, scan.side().drop("group_id").collect())))
        scan.unpersist()
    assert results["arrow"] == results["spark"]
    counts = results["arrow"][0]
    assert counts["filtered_by_window"] > 0 and counts["commits"] > 0 and counts["side_records"] > 0


@pytest.mark.spark
def test_the_window_the_workers_evaluate_is_the_one_spark_evaluates(spark) -> None:
    """Records that Spark reads reach the pass without a window column: each worker evaluates the
    run's window on the record times in epoch ms (`coordinator_audit.udfs.scan._input_batch`). On Kafka record times
    (whole milliseconds), nulls in every position column and windows with and without each bound
    and the previous run's offsets, it is `coordinator_audit.jobs.inputs.window_condition` as Spark evaluates it
    (null: outside), record by record."""
    from datetime import UTC, datetime, timedelta

    from pyspark.sql import functions as F

    from coordinator_audit.jobs.inputs import window_condition

    rng = np.random.default_rng(3)
    base = datetime(2026, 11, 21, 23, 43, 40, tzinfo=UTC)
    n = 400
    rows = [(i, None if rng.random() < 0.05 else int(rng.integers(0, 4)),
             None if rng.random() < 0.05 else int(rng.integers(0, 50)),
             None if rng.random() < 0.05 else base + timedelta(milliseconds=int(rng.integers(-30, 30))))
            for i in range(n)]
    df = spark.createDataFrame(rows, "id long, partition int, offset long, timestamp timestamp").withColumns(
        {"key": F.lit(b"k"), "value": F.lit(b"v")})
    ms = timedelta(milliseconds=1)
    windows = [(None, None, {}), (base, None, {}), (None, base, {}), (base - 7 * ms, base + 9 * ms, {}),
               (base, base + 20 * ms, {0: 20, 2: -1}), (None, base + 3 * ms, {1: 25}), (None, None, {3: 10})]
    for since, until, start_after in windows:
        condition = window_condition(since, until, start_after)
        spark_says = F.coalesce(condition, F.lit(False)) if condition is not None else F.lit(True)
        want = {r["id"]: r["inside"] for r in df.select("id", spark_says.alias("inside")).collect()}
        since_ms, until_ms = epoch_ms(since), epoch_ms(until)  # as `scan_frame` gives them

        def evaluate(batches, since_ms=since_ms, until_ms=until_ms, start_after=start_after):
            for b in batches:
                out = _input_batch(b, since_ms, until_ms, start_after)
                yield pa.record_batch({"id": b.column("id"), "inside": out.column("in_window")})

        sent = df.select("id", "key", "value", F.col("partition").cast("int").alias("partition"),
                         F.col("offset").cast("long").alias("offset"),
                         F.unix_millis("timestamp").alias("timestamp_ms"))  # as `scan_frame` sends them
        got = {r["id"]: r["inside"] for r in sent.mapInArrow(evaluate, "id long, inside boolean").collect()}
        assert got == want, (since, until, start_after)
        assert 0 < sum(want.values()) < n or condition is None


@pytest.mark.spark
def test_the_spark_reader_merges_many_splits_and_finds_the_same(spark) -> None:
    # Spark's Kafka source gives one split per topic-partition, each in log order; the pass merges
    # them into at most four tasks per core and must summarise exactly what one split per file gives
    from pathlib import Path

    samples = Path(__file__).resolve().parents[2] / "data" / "samples"
    df = spark.read.option("pathGlobFilter", "*.parquet").parquet(str(samples))
    split = df.repartition(24, "partition").sortWithinPartitions("partition", "offset")
    results = {}
    for name, frame in (("files", df), ("splits", split)):
        scan = op.scan_log(frame, reader="spark", chunk_rows=300)
        assert not scan.reordered
        if name == "splits":
            assert scan.df.rdd.getNumPartitions() == 4 * spark.sparkContext.defaultParallelism < 24
        rows, regressions = _merged(scan)
        results[name] = (scan.counts, sorted(map(repr, rows.collect())), sorted(map(repr, regressions.collect())),
                         sorted(map(repr, scan.side().drop("group_id").collect())))
        scan.unpersist()
    assert results["files"] == results["splits"]
    assert results["files"][0]["commits"] > 0


def test_an_equal_dictionary_is_classified_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """pyarrow gives each batch of a row group the row group's whole key dictionary: `TaskKeys`
    classifies an equal dictionary again only by comparing it, and a different one afresh; the
    classes of each key are those of the plain keys either way."""
    commit = [encode(CoordinatorRecord.of(OffsetCommitKey(f"g{i % 3}", "orders", i), OffsetCommitValue(1, 0, "", T)))[0]
              for i in range(6)]
    keys = [*commit, b"\x00\x02\x00\x02g0", b"\x01", None, commit[0]]
    calls: list[int] = []
    monkeypatch.setattr("coordinator_audit.udfs.scan.classify_keys", lambda *a: calls.append(1) or classify_keys(*a))

    task = TaskKeys()

    def per_key(arr: pa.Array) -> list[tuple[int, int, int, bool]]:  # each key's classes (ids are the task's own)
        c = task.classes(arr)
        entries = list(zip(c.kind.tolist(), c.name.tolist(), c.group.tolist(), c.key_ok.tolist(), strict=True))
        if not len(c.entry):
            return entries
        nulls = c.entry_null.tolist() if len(c.entry_null) else [False] * len(c.entry)
        return [(0, -1, -1, False) if null else entries[i] for i, null in zip(c.entry.tolist(), nulls, strict=True)]

    def plain(values: list[bytes | None]) -> list[tuple[int, int, int, bool]]:
        return per_key(pa.array(values, type=pa.binary()))

    first = pa.array(keys, type=pa.binary()).dictionary_encode()
    again = pa.array(keys[::-1], type=pa.binary()).dictionary_encode()  # other indices, the same entries reordered
    same = pa.DictionaryArray.from_arrays(pa.array([3, 0, None, 3]), first.dictionary.slice(0))  # an equal copy
    for arr, values, classified in ((first, keys, 1), (same, [keys[3], keys[0], None, keys[3]], 0),
                                    (again, keys[::-1], 1), (first, keys, 1), (first.slice(2, 5), keys[2:7], 0)):
        calls.clear()
        got = per_key(arr)
        assert calls == [1] * classified  # `same`: equal to the dictionary before it, compared only
        assert got == plain(values)
    assert per_key(first)[:8] == [(1, i, -1, True) for i in range(6)] + [(2, -1, 0, False), (0, -1, -1, False)]


@pytest.mark.parametrize("seed", range(4))
def test_keys_interned_in_tables_that_grow_get_the_ids_of_first_appearance(seed: int) -> None:
    """`classify_keys` over tables that start tiny and grow many times (their slots rehashed, an
    insert undone when the group table is the one full): each offset-commit key's topic-partition
    (its group, topic and partition bytes: a type 1 key and trailing bytes are the same one) gets
    the id of its first appearance and its entry the id of its group; each GroupMetadata key its
    group's; names of every length from 0 to 70 bytes, so that the word-at-a-time hash and
    comparison meet every tail; called again, the same ids."""
    rng = np.random.default_rng(seed)
    alphabet = np.frombuffer(b"abcdefghij", dtype=np.uint8)

    def name(n: int) -> bytes:
        return bytes(rng.choice(alphabet[: 2 + seed], size=n).tolist())  # few letters: names alike

    groups = [name(int(n)) for n in rng.integers(0, 71, 40)]
    topics = [name(int(n)) for n in rng.integers(0, 71, 30)]
    keys: list[bytes | None] = []
    for _ in range(3000):
        g = groups[int(rng.integers(len(groups)))]
        roll = rng.random()
        if roll < 0.1:
            keys.append(b"\x00\x02" + len(g).to_bytes(2, "big") + g)
            continue
        if roll < 0.12:
            keys.append(None if roll < 0.11 else b"\x00\x05junk")
            continue
        t = topics[int(rng.integers(len(topics)))]
        version = b"\x00\x01" if roll < 0.2 else b"\x00\x00"
        tail = b"\xff" if roll > 0.97 else b""
        keys.append(version + len(g).to_bytes(2, "big") + g + len(t).to_bytes(2, "big") + t
                    + int(rng.integers(3)).to_bytes(4, "big") + tail)
    want_tp: dict[bytes, int] = {}
    want_group: dict[bytes, int] = {}
    want: list[tuple[int, int]] = []
    entry_group: dict[int, int] = {}
    for k in keys:
        if k is None or k[1] > 2 or k[:1] != b"\x00":
            want.append((0, -1))
            continue
        glen = int.from_bytes(k[2:4], "big")
        g = k[4:4 + glen]
        if k[1] == 2:
            want.append((2, want_group.setdefault(g, len(want_group))))
            continue
        tlen = int.from_bytes(k[4 + glen:6 + glen], "big")
        tp = k[2:10 + glen + tlen]
        if tp not in want_tp:
            want_tp[tp] = len(want_tp)
            entry_group[want_tp[tp]] = want_group.setdefault(g, len(want_group))
        want.append((1, want_tp[tp]))
    arr = pa.array(keys, type=pa.binary())
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32).astype(np.int64)
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8)
    null = arr.is_null().to_numpy(zero_copy_only=False)
    table, group_table = KeyTable(4, 8), KeyTable(4, 8)
    for _ in range(2):
        kind, ids = classify_keys(offsets, data, null, table, group_table)
        assert list(zip(kind.tolist(), ids.tolist(), strict=True)) == want
        assert len(table) == len(want_tp) and len(group_table) == len(want_group)
        assert table.aux[: len(table)].tolist() == [entry_group[e] for e in range(len(table))]
        assert [bytes(table.arena[a:a + n]) for a, n in zip(table.e_start[: len(table)], table.e_len[: len(table)],
                                                            strict=True)] == list(want_tp)


def test_a_lookup_compares_the_bytes_of_entries_whose_hashes_are_equal() -> None:
    """Two byte strings given the same hash are two entries: `lookup` compares the bytes (every
    position of a word and of the tail) and the length, not the hash alone."""
    for n in range(0, 21):
        a = np.arange(1, n + 2, dtype=np.uint8)  # n bytes, then one more
        for i in range(n):
            b = a.copy()
            b[i] ^= 0x40
            assert not same_bytes(a, 0, b, 0, n) and same_bytes(a, 0, a.copy(), 0, n)
        table = KeyTable(8, 64)
        slots, arena = table.slots, table.arena
        hv = 12345
        assert insert(a, 0, n, hv, -1 - lookup(a, 0, n, hv, slots, arena), *table.arrays()) == 0
        for i in range(n):
            b = a.copy()
            b[i] ^= 0x40
            assert lookup(b, 0, n, hv, slots, arena) < 0
        assert lookup(a, 0, n + 1, hv, slots, arena) < 0  # a longer string that begins alike
        assert lookup(a.copy(), 0, n, hv, slots, arena) == 0


def test_open_partitions_of_the_open_stretches() -> None:
    rng = np.random.default_rng(7)
    for n in (0, 1, 5, 1000):
        rows = np.full((n + 3, STRETCH_FIELDS), -1, dtype=np.int64)
        rows[:, S_PART] = np.sort(rng.integers(0, 50, n + 3))
        rows[:, S_STRETCH] = rng.integers(-1, 3, n + 3)
        rows[n:, S_STRETCH] = 5  # beyond n: not looked at
        want = set(rows[:n][rows[:n, S_STRETCH] >= 0, S_PART].tolist())
        assert set(open_partitions(rows, n).tolist()) == want
        assert len(open_partitions(rows, n)) == len(want)


@pytest.mark.parametrize("batch_rows", [1, 7, 100])
def test_a_chunk_of_many_batches_gives_what_one_combined_batch_gives(batch_rows: int) -> None:
    """The kernel reads a chunk's values batch by batch where the chunk is in log order (and over
    the combined column where it is not): the bundled samples cut into batches of `batch_rows`
    give the same rows as one batch, in log order and shuffled."""

    samples = sorted((Path(__file__).resolve().parents[2] / "data" / "samples").glob("*.parquet"))
    assert samples
    for path in samples:
        read = pq.read_table(path, columns=["key", "value", "partition", "offset", "timestamp"])
        table = pa.Table.from_batches([_input_batch(b, None, None) for b in read.to_batches()]).combine_chunks()
        shuffled = table.take(pa.array(np.random.default_rng(0).permutation(table.num_rows)))
        for rows in (table, shuffled):
            pieces = pa.Table.from_batches(rows.to_batches(max_chunksize=batch_rows))
            assert pieces.column("value").num_chunks > 1 or rows.num_rows <= batch_rows
            assert scan_chunk(pieces, chunk=1).equals(scan_chunk(rows, chunk=1)), path.name


def test_nulls_in_the_position_time_window_and_key_columns_reach_the_output_as_nulls() -> None:
    """A chunk whose partition, offset, timestamp, in_window or key is null (records the pass
    cannot place or must not summarise go to the replay, their nulls kept), given as one batch with
    plain keys, and as sliced batches of a dictionary-encoded key column: the same rows."""
    recs = [*LOG[:6], (None, LOG[0][1])]
    batch = _batch(recs).to_pylist()
    batch[1]["partition"] = None  # cannot be placed: a side row, partition null
    batch[2]["offset"] = None
    batch[3]["timestamp_ms"] = None  # placed: still summarised, its time read as 0
    batch[4]["in_window"] = None  # outside the window
    rows = pa.RecordBatch.from_pylist(batch, schema=_ARROW_INPUT)
    plain = scan_chunk(rows, chunk=1)
    keys = pa.array([r["key"] for r in batch], pa.binary()).dictionary_encode()
    encoded = pa.RecordBatch.from_arrays([keys, *rows.columns[1:]], names=list(INPUT_COLUMNS))
    pieces = pa.Table.from_batches([encoded.slice(0, 3), encoded.slice(3, 1), encoded.slice(4)])
    assert scan_chunk(pieces, chunk=1).equals(plain)
    got = _by_kind(plain)
    side = {(r["partition"], r["offset"]) for r in got[KIND_SIDE]}
    assert (None, 1) in side and (0, None) in side and (0, 6) in side  # the null key: a side row
    assert got[KIND_COUNTS][0]["filtered_by_window"] == 1


@pytest.mark.parametrize(("total", "cores"), [(0, 2), (1_000, 2), (5_000_000, 2), (20_000_000, 2), (40_000_000, 2),
                                              (400_000_000, 2), (20_000_000, 8), (20_000_000, 0)])
def test_work_units_are_two_per_core_within_one_to_sixteen_chunks(total: int, cores: int) -> None:
    chunk = 500_000
    rows = unit_rows_for(total, cores, chunk)
    assert chunk <= rows <= UNIT_CHUNKS * chunk
    if chunk < rows < UNIT_CHUNKS * chunk:  # neither bound: about UNITS_PER_CORE units per core
        assert total // rows in range(UNITS_PER_CORE * max(cores, 1), UNITS_PER_CORE * max(cores, 1) + 2)
    assert (unit_rows_for(400_000_000, 2, chunk), unit_rows_for(1_000, 2, chunk)) == (UNIT_CHUNKS * chunk, chunk)


def test_small_files_share_a_task_and_every_unit_is_read_once_in_order() -> None:
    """`parquet_tasks` over an export directory's footers (many small files, one bigger file, row
    groups left out): every unit once, in file order; a task holds at most `task_rows` rows unless
    it is one unit; no task could have taken the next task's first unit."""
    schema = pa.schema([("key", pa.binary())])
    footers = [ParquetFooter(f"night-{i:02d}.parquet", schema, (1_000, 1_000, 500)) for i in range(50)]
    footers.append(ParquetFooter("big.parquet", schema, (20_000, 20_000, 3_000)))
    skip = {("night-03.parquet", 0), ("night-03.parquet", 1), ("night-03.parquet", 2), ("big.parquet", 1)}
    units = parquet_units(footers, unit_rows=10_000, skip=skip)
    assert ("night-03.parquet", [0, 1, 2]) not in units and ("big.parquet", [0]) in units
    rows = {f.path: f.row_groups for f in footers}

    def size(unit: tuple[str, list[int]]) -> int:
        return sum(rows[unit[0]][g] for g in unit[1])

    tasks = parquet_tasks(units, footers, task_rows=10_000)
    assert [u for task in tasks for u in task] == units
    assert all(sum(map(size, task)) <= 10_000 or len(task) == 1 for task in tasks)
    assert all(sum(map(size, a)) + size(b[0]) > 10_000 for a, b in itertools.pairwise(tasks))
    assert len(tasks) == 15  # 49 files of 2,500 rows: 12 tasks of four and one of one; the big file: 2 alone


def test_within_a_run_each_footer_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`footers_kept` (a run of the job): a file's footer is read once, whichever path names it;
    outside it every call reads the file."""
    path = tmp_path / "log.parquet"
    pq.write_table(pa.table({"partition": pa.array([0, 1], pa.int32())}), path)
    monkeypatch.chdir(tmp_path)
    with footers_kept():
        first = read_footer(str(path))
        pq.write_table(pa.table({"partition": pa.array([0, 1, 2], pa.int32())}), path)
        assert read_footer(str(path)) is first and first.row_groups == (2,)
        relative = read_footer("log.parquet")
        assert relative.path == "log.parquet" and relative.row_groups == (2,)
    assert read_footer(str(path)).row_groups == (3,)



@pytest.mark.parametrize("extra_tag", [False, True], ids=["topic-id-only", "with-another-tag"])
def test_each_stretch_carries_the_topic_ids_its_commits_hold(extra_tag: bool) -> None:
    """The real Kafka 4.4 log's OffsetCommit v4 values carry their topic id (tagged field 0): the
    kernel reads it in place (a value with another tagged field too goes to the codec, which reads
    it the same), and each `partial` row holds its stretch's first and last id in Kafka's text form,
    equal to what the codec reads from the stretch's commits."""
    import uuid

    from coordinator_audit.core.audit.consumer import topic_id_text
    from coordinator_audit.core.records import CoordinatorRecord, decode, encode, offset_commit_topic_id

    path = Path(__file__).resolve().parents[2] / "tests" / "core" / "codec" / "data" / "real_broker_4_4_0_kip848.parquet"
    read = pq.read_table(path, columns=["key", "value", "partition", "offset", "timestamp"])
    if extra_tag:  # every commit value with a second tagged field (7, 2 bytes) after the topic id
        values = []
        for key, value in zip(read.column("key").to_pylist(), read.column("value").to_pylist(), strict=True):
            rec = decode(key, value) if value is not None else None
            if rec is not None and rec.key_version in (0, 1):
                v = rec.value
                v = type(v)(**{**{f: getattr(v, f) for f in v.__slots__}, "unknown_tagged_fields":
                               (*v.unknown_tagged_fields, (7, b"\x01\x02"))})
                value = encode(CoordinatorRecord.of(rec.key, v, value_version=rec.value_version))[1]
            values.append(value)
        read = read.set_column(1, "value", pa.array(values, pa.binary()))
    table = pa.Table.from_batches([_input_batch(b, None, None) for b in read.to_batches()])
    ids: dict[tuple[int, int], str] = {}
    for p, o, v in zip(read.column("partition").to_pylist(), read.column("offset").to_pylist(),
                       read.column("value").to_pylist(), strict=True):
        raw = offset_commit_topic_id(v) if v is not None else None
        if raw is not None:
            ids[(p, o)] = topic_id_text(uuid.UUID(bytes=raw))
    partial = [r for r in scan_chunk(table, chunk=1).to_pylist() if r["_kind"] == "partial" and r["commits"]]
    assert partial and ids
    for r in partial:
        first = ids[(r["partition"], r["first_commit_source_offset"])]
        last = ids[(r["partition"], r["last_commit_source_offset"])]
        assert (r["first_topic_id"], r["last_topic_id"]) == (first, last), r
