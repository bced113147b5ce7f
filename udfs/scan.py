"""The job's single pass over the input: an Arrow/numpy kernel for `mapInArrow` that reads every
record once, in the Python worker that holds it, without a shuffle of the key and value bytes.

Per chunk (up to `chunk_rows` consecutive rows of one Spark task) it:

* puts the chunk in log order, (partition, offset), with a numpy sort (a no-op check when the input
  is already ordered, as Kafka-source dumps are) and drops repeated (partition, offset) rows;
* recognises the offset commits it can summarise without Python objects (key type 0/1 with a
  complete group/topic/partition, value a tombstone or a well-formed OffsetCommitValue: exactly the
  layout checks of spec §7.2-7.3, see `_commit_mask`) and reads their committed offset and
  commitTimestamp straight from the value bytes;
* sends every other record (GroupMetadata, malformed commits, other types) out unchanged as a
  `side` row: the per-group Python replay decodes or quarantines those;
* summarises the commits per (group, topic, partition, Kafka partition, stretch between two
  GroupMetadata records of the group in this chunk) as `partial` rows: counts, first and last
  commit (committed offset, commitTimestamp, log offset), and the regressions inside the stretch;
  every backwards step inside a stretch becomes a `regression` candidate row. Which generation
  window a stretch belongs to, and whether that window was Stable, is decided after the pass
  (`jobs.offsets_path.offset_commits`), where stretches of the same window from other chunks are
  also stitched together;
* reports its `range` per Kafka partition (first and last offset) and its `counts`.

A stretch never spans a GroupMetadata record of its group, so stitching stretches in log order is
exact provided no two chunks hold interleaving offsets of one Kafka partition. The job checks that
on the `range` rows and, when it does not hold (an input that is not in log order), runs the pass
again on input range-partitioned and sorted by (partition, offset).

The functions here take and return pyarrow objects and are tested without Spark; `SCAN_SCHEMA`
is the Spark schema of `make_scan_fn`'s output.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from coordinator_core.records_fast import group_metadata_header

__all__ = [
    "FILE_UNIT_SCHEMA",
    "INPUT_COLUMNS",
    "KIND_COUNTS",
    "KIND_PARTIAL",
    "KIND_RANGE",
    "KIND_REGRESSION",
    "KIND_SIDE",
    "POSITION_COLUMNS",
    "SCAN_FIELDS",
    "SCAN_SCHEMA",
    "ParquetFooter",
    "footer_null_positions",
    "group_matcher",
    "make_file_scan_fn",
    "make_scan_fn",
    "parquet_input_problem",
    "parquet_units",
    "read_footer",
    "scan_chunk",
]

KIND_SIDE = "side"
KIND_PARTIAL = "partial"
KIND_REGRESSION = "regression"
KIND_RANGE = "range"
KIND_COUNTS = "counts"

INPUT_COLUMNS: tuple[str, ...] = ("key", "value", "partition", "offset", "timestamp_ms", "in_window")
"""What the kernel reads: raw key/value bytes, log position, record time in epoch ms, and whether
the record is inside the run's time window (null or false: outside)."""

_L, _I, _S, _B = pa.int64(), pa.int32(), pa.string(), pa.binary()
SCAN_FIELDS: tuple[tuple[str, pa.DataType, str], ...] = (
    ("_kind", _S, "side / partial / regression / range / counts"),
    ("partition", _I, "Kafka partition (side, partial, regression, range)"),
    ("offset", _L, "side: the record's offset; partial: its first record's; regression: the regressing "
                   "commit's; range: the chunk's first offset in the partition"),
    ("timestamp_ms", _L, "side: the record's timestamp; regression: the regressing commit's"),
    ("key", _B, "side: raw key"),
    ("value", _B, "side: raw value"),
    ("group_id", _S, "partial, regression"),
    ("topic", _S, "partial, regression"),
    ("partition_key", _I, "partial, regression: the committed topic-partition's partition"),
    ("last_source_offset", _L, "partial: its last record's offset; range: the chunk's last offset"),
    ("commits", _L, "partial: commits; counts: commits summarised"),
    ("tombstones", _L, "partial: offset tombstones; counts: tombstones summarised"),
    ("regressions", _L, "partial: backwards steps between its own commits"),
    ("first_commit_source_offset", _L, "partial: log offset of its first commit"),
    ("first_commit_record_ts", _L, "partial: record timestamp of its first commit"),
    ("first_offset", _L, "partial: committed offset of its first commit"),
    ("first_commit_timestamp", _L, "partial: commitTimestamp of its first commit"),
    ("last_commit_source_offset", _L, "partial: log offset of its last commit"),
    ("last_offset", _L, "partial: committed offset of its last commit"),
    ("last_commit_timestamp", _L, "partial: commitTimestamp of its last commit"),
    ("offset_value", _L, "regression: the committed offset that went backwards"),
    ("commit_timestamp", _L, "regression: its commitTimestamp"),
    ("previous_offset", _L, "regression: the previous commit's offset"),
    ("previous_commit_timestamp", _L, "regression: the previous commit's commitTimestamp"),
    ("previous_source_offset", _L, "regression: the previous commit's log offset"),
    ("chunk", _L, "side, range, counts: the chunk (task partition << 20 | chunk number)"),
    ("records_in", _L, "counts: rows read; range: distinct in-window records of the partition in the chunk; "
                       "side: the record's rank among them (how many come before it)"),
    ("filtered_by_window", _L, "counts: rows outside the time window"),
    ("duplicates", _L, "counts: repeated (partition, offset) rows dropped"),
    ("filtered_by_group", _L, "counts: commits of groups outside the group filter"),
    ("side_records", _L, "counts: rows sent to the replay"),
    ("gm_generation", _I, "side: a GroupMetadata value's generation (null: a tombstone, or it does not decode)"),
    ("gm_member_count", _I, "side: that value's number of members"),
)
_ARROW_SCHEMA = pa.schema([pa.field(name, t, nullable=name != "_kind") for name, t, _ in SCAN_FIELDS])


def _spark_schema() -> Any:
    from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

    types = {_L: LongType(), _I: IntegerType(), _S: StringType(), _B: BinaryType()}
    return StructType([StructField(name, types[t], name != "_kind") for name, t, _ in SCAN_FIELDS])


SCAN_SCHEMA = _spark_schema()
"""Spark schema of the kernel's output (`mapInArrow(make_scan_fn(...), SCAN_SCHEMA)`)."""

_PAD = 16
_MISSING: Any = object()


class _Binary:
    """Zero-copy view of a binary Arrow array: per-row start, length and null mask over its byte
    buffer (reads past a row's end return other bytes, clipped into the buffer; callers mask them
    by length)."""

    __slots__ = ("data", "length", "null", "start")

    def __init__(self, arr: pa.Array) -> None:
        n = len(arr)
        bufs = arr.buffers()
        width = 8 if pa.types.is_large_binary(arr.type) else 4
        offsets = np.frombuffer(bufs[1], dtype=np.int64 if width == 8 else np.int32, count=n + 1,
                                offset=arr.offset * width).astype(np.int64) if n else np.zeros(1, np.int64)
        self.start = offsets[:-1]
        self.length = offsets[1:] - offsets[:-1]
        self.null = (arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count
                     else np.zeros(n, dtype=bool))
        end = int(offsets[-1]) if n else 0
        data = np.frombuffer(bufs[2], dtype=np.uint8, count=end) if bufs[2] is not None and end else np.empty(0, np.uint8)
        # reads are clipped into the buffer, so only a tiny buffer needs padding (no copy otherwise)
        self.data = data if len(data) >= _PAD else np.concatenate([data, np.zeros(_PAD, dtype=np.uint8)])

    def u8(self, rows: np.ndarray, at: np.ndarray | int) -> np.ndarray:
        """Byte `at` (relative) of each row in `rows`, as int64."""
        return self.u8_at(self.start[rows] + at)

    def u8_at(self, pos: np.ndarray) -> np.ndarray:
        """The byte at each absolute buffer position, as int64."""
        return self.data[np.clip(pos, 0, len(self.data) - 1)].astype(np.int64)

    def be_at(self, pos: np.ndarray, size: int) -> np.ndarray:
        """Signed big-endian integers of `size` bytes at absolute buffer positions."""
        window = np.lib.stride_tricks.sliding_window_view(self.data, size)  # zero-copy (len, size) view
        return window[np.clip(pos, 0, len(self.data) - size)].view(f">i{size}").reshape(-1).astype(np.int64)


def _commit_mask(keys: _Binary, values: _Binary, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For `rows` (indices): (summarisable offset-commit record, committed offset, commitTimestamp).
    The UTF-8 of the names is checked later, per distinct key (`_decode_commit_key`); that of the
    metadata string here (`_metadata_utf8`), as the codec checks both.

    Key: type 0 or 1, group string (int16 length >= 0), topic string, int32 partition, all present
    (trailing bytes allowed). Value: null (an offset tombstone), or version >= 0 (any version above
    3 reads as v4: Kafka's clamp) whose layout is complete: v0/v2 20 + m bytes, v1 28 + m, v3 24 + m,
    v4+ 23 + varint + m (m = metadata length, the v4+ compact length in one or two varint bytes).
    Every field is read only on the rows that still qualify. Offsets and times are 0 where not a
    commit."""
    n = len(rows)
    ok = np.zeros(n, dtype=bool)
    offset = np.zeros(n, dtype=np.int64)
    commit_ts = np.zeros(n, dtype=np.int64)
    klen = keys.length[rows]
    ks = keys.start[rows]
    c = np.flatnonzero(~keys.null[rows] & (klen >= 4) & (keys.u8_at(ks) == 0) & (keys.u8_at(ks + 1) <= 1))
    ks, klen = ks[c], klen[c]
    glen = keys.be_at(ks + 2, 2)
    tlen = keys.be_at(ks + 4 + np.maximum(glen, 0), 2)
    c = c[(glen >= 0) & (klen >= 6 + glen) & (tlen >= 0) & (klen >= 10 + glen + tlen)]  # key complete

    vnull = values.null[rows[c]]
    ok[c[vnull]] = True  # offset tombstones
    c = c[~vnull]
    vs, vlen = values.start[rows[c]], values.length[rows[c]]
    ver = np.where(vlen >= 2, values.be_at(vs, 2), -1)
    m = np.full(len(c), -1, dtype=np.int64)
    vl = np.zeros(len(c), dtype=np.int64)
    old, v3, flex = (ver >= 0) & (ver <= 2), ver == 3, ver >= 4
    if old.any():
        m[old] = values.be_at(vs[old] + 10, 2)
    if v3.any():
        m[v3] = values.be_at(vs[v3] + 14, 2)
    if flex.any():
        b14, b15 = values.u8_at(vs[flex] + 14), values.u8_at(vs[flex] + 15)
        one, two = b14 < 128, (b14 >= 128) & (b15 < 128)
        m[flex] = np.where(one, b14 - 1, np.where(two, (b14 - 128) + b15 * 128 - 1, -1))
        vl[flex] = np.where(one, 1, np.where(two, 2, 0))
    need = np.select([(ver == 0) | (ver == 2), ver == 1, v3], [20 + m, 28 + m, 24 + m], 23 + vl + m)
    good = (ver >= 0) & (m >= 0) & (vlen >= need) & (~flex | (vl > 0))
    c, vs, m, ver = c[good], vs[good], m[good], ver[good]
    ts_at = np.select([ver <= 2, ver == 3], [12 + m, 16 + m], 14 + vl[good] + m)
    keep = np.ones(len(c), dtype=bool)
    tagged = np.flatnonzero((ver >= 4) & (values.u8_at(vs + ts_at + 8) != 0))
    if len(tagged):  # v4+ with tagged fields (rare): the codec says whether they are well formed
        keep[tagged] = [_codec_reads_commit(keys, values, int(r)) for r in rows[c[tagged]]]
    with_meta = np.flatnonzero(keep & (m > 0))
    if len(with_meta):
        keep[with_meta] = _metadata_utf8(values, rows[c[with_meta]], (ts_at - m)[with_meta], m[with_meta])
    c, vs, ts_at = c[keep], vs[keep], ts_at[keep]
    ok[c] = True
    offset[c] = values.be_at(vs + 2, 8)
    commit_ts[c] = values.be_at(vs + ts_at, 8)
    return ok, offset, commit_ts


def _codec_reads_commit(keys: _Binary, values: _Binary, row: int) -> bool:
    """Whether `coordinator_core.records.decode` reads this record as an offset commit."""
    from coordinator_core.errors import CoordinatorAuditError
    from coordinator_core.records import OffsetCommitValue, decode

    def raw(b: _Binary) -> bytes:
        start = int(b.start[row])
        return b.data[start:start + int(b.length[row])].tobytes()

    try:
        return isinstance(decode(raw(keys), raw(values)).value, OffsetCommitValue)
    except CoordinatorAuditError:
        return False


def _metadata_utf8(values: _Binary, rows: np.ndarray, at: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Whether each row's metadata bytes (`m` > 0 bytes at `at`) are UTF-8: all-ASCII ones by one
    vectorised max, the others (rare) decoded strictly."""
    begin = values.start[rows] + at
    bounds = np.empty(2 * len(rows), dtype=np.int64)
    bounds[0::2], bounds[1::2] = begin, begin + m
    order = np.argsort(bounds[0::2], kind="stable")  # reduceat wants the slices in buffer order
    pairs = np.empty_like(bounds)
    pairs[0::2], pairs[1::2] = bounds[0::2][order], bounds[1::2][order]
    top = np.empty(len(rows), dtype=np.int64)
    top[order] = np.maximum.reduceat(values.data, pairs)[0::2]
    good = top < 0x80
    for i in np.flatnonzero(~good):
        try:
            values.data[begin[i]:begin[i] + m[i]].tobytes().decode("utf-8")
            good[i] = True
        except UnicodeDecodeError:
            pass
    return good


def _decode_commit_key(raw: bytes) -> tuple[str, str, int] | None:
    """(group, topic, partition) of an OffsetCommitKey body without its version (layout checked by
    `_commit_mask`); None when a name is not UTF-8 (the codec refuses it: the replay quarantines)."""
    glen = int.from_bytes(raw[0:2], "big")
    tlen = int.from_bytes(raw[2 + glen:4 + glen], "big")
    topic_end = 4 + glen + tlen
    try:
        return (raw[2:2 + glen].decode("utf-8"), raw[4 + glen:topic_end].decode("utf-8"),
                int.from_bytes(raw[topic_end:topic_end + 4], "big", signed=True))
    except UnicodeDecodeError:
        return None


def group_matcher(patterns: Sequence[str]) -> Callable[[str], bool] | None:
    """A predicate for the group filter (fnmatch globs, as `jobs.inputs.filter_groups`); None: all."""
    if not patterns:
        return None
    pats = tuple(patterns)
    return lambda group: any(fnmatch.fnmatchcase(group, p) for p in pats)


def _column(n: int, values: Any, t: pa.DataType) -> pa.Array:
    if values is None:
        return pa.nulls(n, t)
    if isinstance(values, pa.Array | pa.ChunkedArray):
        return values.cast(t) if values.type != t else values
    return pa.array(values, type=t)


def _rows(kind: str, n: int, columns: dict[str, Any]) -> pa.RecordBatch:
    arrays = [pa.array([kind] * n, type=_S) if name == "_kind" else _column(n, columns.get(name), t)
              for name, t, _ in SCAN_FIELDS]
    return pa.RecordBatch.from_arrays(arrays, schema=_ARROW_SCHEMA)


def _masked(values: np.ndarray, valid: np.ndarray) -> pa.Array:
    return pa.array(values, mask=~valid)


def _local_stretch(gm_rank: np.ndarray, gm_group: np.ndarray, rec_rank: np.ndarray, rec_group: np.ndarray) -> np.ndarray:
    """For each record: how many GroupMetadata records of its group come before it in the chunk
    (ranks are positions in the chunk's log order; group -1: the group has none here)."""
    out = np.zeros(len(rec_rank), dtype=np.int64)
    if not len(gm_rank):
        return out
    scale = np.int64(max(int(rec_rank.max(initial=0)), int(gm_rank.max(initial=0))) + 1)
    gm_key = np.sort(gm_group * scale + gm_rank)
    has = rec_group >= 0
    base = rec_group[has] * scale
    out[has] = np.searchsorted(gm_key, base + rec_rank[has]) - np.searchsorted(gm_key, base)
    return out


def scan_chunk(batch: pa.RecordBatch, *, chunk: int, group_ok: Callable[[str], bool] | None = None,
               names_cache: dict[bytes, tuple[str, str, int] | None] | None = None) -> pa.Table:
    """One chunk's `side`, `partial`, `regression`, `range` and `counts` rows (see the module
    docstring); `batch` has `INPUT_COLUMNS`. `names_cache` keeps decoded keys between the chunks
    of one task (it is cleared when it grows past 200,000 keys)."""
    cache = names_cache if names_cache is not None else {}
    if len(cache) > 200_000:
        cache.clear()
    n = batch.num_rows
    part_a, off_a = batch.column("partition"), batch.column("offset")
    positioned = ~(part_a.is_null().to_numpy(zero_copy_only=False) | off_a.is_null().to_numpy(zero_copy_only=False))
    part = part_a.fill_null(0).to_numpy().astype(np.int64)
    off = off_a.fill_null(0).to_numpy().astype(np.int64)
    inw = batch.column("in_window").fill_null(False).to_numpy(zero_copy_only=False)
    ts = batch.column("timestamp_ms").fill_null(0).to_numpy().astype(np.int64)

    in_order = n < 2 or bool(np.all((part[1:] > part[:-1]) | ((part[1:] == part[:-1]) & (off[1:] >= off[:-1]))))
    order = np.arange(n) if in_order else np.lexsort((off, part))
    order = order[inw[order]]
    n_window = len(order)
    dup = np.zeros(n_window, dtype=bool)
    if n_window > 1:
        p, o = part[order], off[order]
        dup[1:] = (p[1:] == p[:-1]) & (o[1:] == o[:-1]) & positioned[order[1:]] & positioned[order[:-1]]
    keep = order[~dup]  # in-window, distinct, in log order

    kcol = batch.column("key")
    keys, values = _Binary(kcol), _Binary(batch.column("value"))
    ok, commit_offset, commit_ts = _commit_mask(keys, values, keep)
    ok &= positioned[keep]
    out: list[pa.RecordBatch] = []

    # in-chunk GroupMetadata records (key type 2), by group: a stretch ends at each one
    gm_local = np.flatnonzero(~ok & ~keys.null[keep] & (keys.length[keep] >= 4) & (keys.u8(keep, 0) == 0)
                              & (keys.u8(keep, 1) == 2))
    gm_groups: dict[str, int] = {}
    gm_group_ids = np.empty(len(gm_local), dtype=np.int64)
    gm_rank = gm_local.astype(np.int64)
    gm_header: dict[int, tuple[int, int]] = {}
    vcol = batch.column("value")
    for j, row in enumerate(keep[gm_local].tolist()):
        raw = kcol[row].as_py()
        glen = int.from_bytes(raw[2:4], "big", signed=True)
        name = raw[4:4 + glen].decode("utf-8", "replace") if 0 <= glen <= len(raw) - 4 else None
        gm_group_ids[j] = -1 if name is None else gm_groups.setdefault(name, len(gm_groups))
        header = group_metadata_header(raw, vcol[row].as_py())
        if header is not None:
            gm_header[row] = header
    valid_gm = gm_group_ids >= 0
    gm_rank, gm_group_ids = gm_rank[valid_gm], gm_group_ids[valid_gm]

    commit_offset, commit_ts = commit_offset[ok], commit_ts[ok]
    commit_local = np.flatnonzero(ok)
    rows = keep[commit_local]
    filtered_by_group = commits = tombstones = 0
    names: list[tuple[str, str, int]] = []
    cid = np.empty(0, dtype=np.int64)
    if len(rows):
        enc = pc.dictionary_encode(kcol.take(pa.array(rows)))
        canon: dict[tuple[str, str, int], int] = {}
        entry_to_cid = np.empty(len(enc.dictionary), dtype=np.int64)
        for e, raw in enumerate(enc.dictionary.to_pylist()):
            body = raw[2:]
            name = cache.get(body, _MISSING)
            if name is _MISSING:
                name = cache[body] = _decode_commit_key(body)
            entry_to_cid[e] = -1 if name is None else canon.setdefault(name, len(canon))
        names = list(canon)
        cid = entry_to_cid[enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)]
        named = cid >= 0
        if not named.all():  # names that are not UTF-8: to the replay, which quarantines them
            ok[commit_local[~named]] = False
            rows, cid, commit_local = rows[named], cid[named], commit_local[named]
            commit_offset, commit_ts = commit_offset[named], commit_ts[named]
        if group_ok is not None and len(rows):
            wanted = np.array([group_ok(g) for g, _, _ in names], dtype=bool)[cid]
            filtered_by_group = int((~wanted).sum())
            rows, cid, commit_local = rows[wanted], cid[wanted], commit_local[wanted]
            commit_offset, commit_ts = commit_offset[wanted], commit_ts[wanted]

    side_local = np.flatnonzero(~ok)
    side = keep[side_local]
    if len(side):
        idx = pa.array(side)
        headers = [gm_header.get(r) for r in side.tolist()]
        kp = part[keep]
        block = np.concatenate([[0], np.flatnonzero(kp[1:] != kp[:-1]) + 1])  # each partition's first position
        rank = side_local - block[np.searchsorted(block, side_local, side="right") - 1]
        out.append(_rows(KIND_SIDE, len(side), {
            **{name: batch.column(name).take(idx) for name in ("partition", "offset", "timestamp_ms", "key", "value")},
            "gm_generation": [None if h is None else h[0] for h in headers],
            "gm_member_count": [None if h is None else h[1] for h in headers],
            "chunk": np.full(len(side), chunk, dtype=np.int64), "records_in": rank}))

    if len(rows):
        cid_gm = np.array([gm_groups.get(g, -1) for g, _, _ in names], dtype=np.int64)
        stretch = _local_stretch(gm_rank, gm_group_ids, commit_local.astype(np.int64), cid_gm[cid])
        out.extend(_summarise(rows, cid, stretch, names, part, off, ts, values.null, commit_offset, commit_ts))
        tombstones = int(values.null[rows].sum())
        commits = len(rows) - tombstones

    if len(keep):
        kp = part[keep]
        first = np.concatenate([[0], np.flatnonzero(kp[1:] != kp[:-1]) + 1])
        last = np.concatenate([first[1:] - 1, [len(keep) - 1]])
        out.append(_rows(KIND_RANGE, len(first), {
            "partition": kp[first], "offset": off[keep][first], "last_source_offset": off[keep][last],
            "chunk": np.full(len(first), chunk, dtype=np.int64), "records_in": last - first + 1}))
    out.append(_rows(KIND_COUNTS, 1, {
        "chunk": [chunk], "records_in": [n], "filtered_by_window": [n - n_window],
        "duplicates": [int(dup.sum())], "filtered_by_group": [filtered_by_group], "commits": [commits],
        "tombstones": [tombstones], "side_records": [len(side)]}))
    return pa.Table.from_batches(out, schema=_ARROW_SCHEMA)


def _summarise(rows: np.ndarray, cid: np.ndarray, stretch: np.ndarray, names: list[tuple[str, str, int]],
               part: np.ndarray, off: np.ndarray, ts: np.ndarray, tomb_all: np.ndarray,
               commit_offset: np.ndarray, commit_ts: np.ndarray) -> list[pa.RecordBatch]:
    """`partial` and `regression` rows of a chunk's commits (`rows` in log order)."""
    perm = np.argsort(cid, kind="stable")  # (topic-partition key, log order)
    r, c, s = rows[perm], cid[perm], stretch[perm]
    p, o_src, rts = part[r], off[r], ts[r]
    tomb = tomb_all[r]
    o, cts = commit_offset[perm], commit_ts[perm]
    n = len(r)
    new = np.ones(n, dtype=bool)
    new[1:] = (c[1:] != c[:-1]) | (s[1:] != s[:-1]) | (p[1:] != p[:-1])
    starts = np.flatnonzero(new)
    ends = np.concatenate([starts[1:], [n]]) - 1
    seg = np.cumsum(new) - 1
    nseg = len(starts)
    tombs = np.add.reduceat(tomb.astype(np.int64), starts)
    counts = (ends - starts + 1) - tombs

    live = np.flatnonzero(~tomb)
    lseg = seg[live]
    has = np.zeros(nseg, dtype=bool)
    first_i = np.zeros(nseg, dtype=np.int64)
    last_i = np.zeros(nseg, dtype=np.int64)
    regress = np.zeros(nseg, dtype=np.int64)
    reg_cur = reg_prev = np.empty(0, dtype=np.int64)
    if len(live):
        head = np.ones(len(live), dtype=bool)
        head[1:] = lseg[1:] != lseg[:-1]
        tail = np.ones(len(live), dtype=bool)
        tail[:-1] = lseg[1:] != lseg[:-1]
        has[lseg[head]] = True
        first_i[lseg[head]] = live[head]
        last_i[lseg[tail]] = live[tail]
        back = ~head[1:] & (o[live[1:]] < o[live[:-1]])
        reg_cur, reg_prev = live[1:][back], live[:-1][back]
        regress = np.bincount(lseg[1:][back], minlength=nseg).astype(np.int64)

    groups = np.array([g for g, _, _ in names], dtype=object)
    topics = np.array([t for _, t, _ in names], dtype=object)
    parts = np.array([q for _, _, q in names], dtype=np.int64)
    sc = c[starts]
    out = [_rows(KIND_PARTIAL, nseg, {
        "partition": p[starts], "offset": o_src[starts], "group_id": groups[sc].tolist(),
        "topic": topics[sc].tolist(), "partition_key": parts[sc], "last_source_offset": o_src[ends],
        "commits": counts, "tombstones": tombs, "regressions": regress,
        "first_commit_source_offset": _masked(o_src[first_i], has),
        "first_commit_record_ts": _masked(rts[first_i], has),
        "first_offset": _masked(o[first_i], has), "first_commit_timestamp": _masked(cts[first_i], has),
        "last_commit_source_offset": _masked(o_src[last_i], has),
        "last_offset": _masked(o[last_i], has), "last_commit_timestamp": _masked(cts[last_i], has)})]
    if len(reg_cur):
        rc = c[reg_cur]
        out.append(_rows(KIND_REGRESSION, len(reg_cur), {
            "partition": p[reg_cur], "offset": o_src[reg_cur], "timestamp_ms": rts[reg_cur],
            "group_id": groups[rc].tolist(), "topic": topics[rc].tolist(), "partition_key": parts[rc],
            "offset_value": o[reg_cur], "commit_timestamp": cts[reg_cur], "previous_offset": o[reg_prev],
            "previous_commit_timestamp": cts[reg_prev], "previous_source_offset": o_src[reg_prev]}))
    return out


def _scan_stream(batches: Iterator[pa.RecordBatch | None], *, task: int, chunk_rows: int,
                 group_ok: Callable[[str], bool] | None) -> Iterator[pa.RecordBatch]:
    """`scan_chunk` over a stream of input batches, up to `chunk_rows` rows per chunk; None in the
    stream ends the current chunk (a unit boundary: a chunk never joins two files' row ranges)."""
    pending: list[pa.RecordBatch] = []
    size = number = 0
    names: dict[bytes, tuple[str, str, int] | None] = {}
    for b in _with_end(batches):
        if b is not None and b.num_rows:
            pending.append(b)
            size += b.num_rows
        if pending and (b is None or size >= chunk_rows):
            merged = pa.Table.from_batches(pending).combine_chunks().to_batches()[0]
            pending, size = [], 0
            yield from scan_chunk(merged, chunk=(task << 20) | number, group_ok=group_ok,
                                  names_cache=names).to_batches()
            number += 1


def _with_end(batches: Iterator[pa.RecordBatch | None]) -> Iterator[pa.RecordBatch | None]:
    yield from batches
    yield None


def _task_id() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


def make_scan_fn(*, chunk_rows: int = 500_000, groups: Sequence[str] = ()
                 ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function for `df.select(*INPUT_COLUMNS).mapInArrow(fn, SCAN_SCHEMA)`: gathers up to
    `chunk_rows` rows per chunk (bounding the worker's memory), then runs `scan_chunk` on each."""
    patterns = tuple(groups)

    def scan_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from _scan_stream(iter(batches), task=_task_id(), chunk_rows=chunk_rows,
                                group_ok=group_matcher(patterns))

    return scan_partition


# ------------------------------------------------------------------------------------------------
# reading Parquet files in the workers (no trip through the JVM)

FILE_UNIT_SCHEMA = "path string, row_groups array<int>"
"""Spark schema of the work units of `make_file_scan_fn`: a local Parquet file and row groups."""


class ParquetFooter(NamedTuple):
    """What the driver needs of one local Parquet file, read once from its footer."""

    path: str
    schema: pa.Schema
    row_groups: tuple[int, ...]
    """Rows of each row group."""
    null_positions: bool = False
    """partition, offset or timestamp may hold nulls (the statistics count some, or have no count):
    such records cannot be placed in the log, and `jobs.inputs` rejects them through Spark."""


POSITION_COLUMNS: tuple[str, ...] = ("partition", "offset", "timestamp")


def footer_null_positions(meta: Any) -> bool:
    """Whether a Parquet file's metadata admits a null partition, offset or timestamp (a missing
    column or statistics without a null count count as yes)."""
    names = [meta.schema.column(i).path for i in range(meta.num_columns)]
    for col in POSITION_COLUMNS:
        if col not in names:
            return True
        i = names.index(col)
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(i).statistics
            if stats is None or not stats.has_null_count or stats.null_count:
                return True
    return False


def read_footer(path: str) -> ParquetFooter:
    import pyarrow.parquet as pq

    with pq.ParquetFile(path) as pf:
        meta = pf.metadata
        return ParquetFooter(path, pf.schema_arrow, tuple(meta.row_group(i).num_rows
                                                          for i in range(meta.num_row_groups)),
                             footer_null_positions(meta))


def parquet_units(footers: Sequence[ParquetFooter], *, unit_rows: int) -> list[tuple[str, list[int]]]:
    """Work units over local Parquet files: runs of consecutive row groups of one file of at most
    `unit_rows` rows (or one bigger row group: a row group is never split), in file order."""
    units: list[tuple[str, list[int]]] = []
    for footer in footers:
        run: list[int] = []
        rows = 0
        for i, n in enumerate(footer.row_groups):
            if run and rows + n > unit_rows:
                units.append((footer.path, run))
                run, rows = [], 0
            run.append(i)
            rows += n
        if run:
            units.append((footer.path, run))
    return units


def parquet_input_problem(footer: ParquetFooter) -> str | None:
    """None when the kernel can read this Parquet file directly: key and value binary, partition
    and offset integers, timestamp a timestamp; else what is not so."""
    schema = footer.schema
    names = set(schema.names)
    for col, ok in (("key", pa.types.is_binary), ("value", pa.types.is_binary), ("partition", pa.types.is_integer),
                    ("offset", pa.types.is_integer), ("timestamp", pa.types.is_timestamp)):
        if col not in names:
            return f"{footer.path}: no column {col}"
        t = schema.field(col).type
        if not (ok(t) or (col in ("key", "value") and pa.types.is_large_binary(t))):
            return f"{footer.path}: column {col} is {t}"
    if footer.null_positions:
        return f"{footer.path}: partition, offset or timestamp may be null"
    return None


def _input_batch(b: pa.RecordBatch, since_ms: int | None, until_ms: int | None,
                 start_after: dict[int, int] | None = None) -> pa.RecordBatch:
    """A Parquet batch as the kernel's input: timestamps as epoch ms (floored, as Spark's
    unix_millis), the time window evaluated (a null timestamp is outside a bounded window); on the
    partitions of `start_after` the lower bound is `offset > start_after[partition]` instead of the
    time (`jobs.inputs.window_condition`)."""
    ts_col = b.column("timestamp")
    unit = ts_col.type.unit
    raw = ts_col.cast(pa.timestamp(unit)).cast(pa.int64())
    per_ms = {"s": None, "ms": 1, "us": 1000, "ns": 1_000_000}[unit]
    ms = pc.multiply(raw, 1000) if per_ms is None else (
        raw if per_ms == 1 else pa.array(np.floor_divide(raw.fill_null(0).to_numpy(), per_ms),
                                         mask=raw.is_null().to_numpy(zero_copy_only=False)))
    inside: pa.Array = pa.array(np.ones(b.num_rows, dtype=bool))
    if since_ms is not None:
        inside = pc.and_(inside, pc.greater_equal(ms, since_ms))
    if start_after:
        part = b.column("partition").cast(pa.int64())
        pnum = part.fill_null(-1).to_numpy(zero_copy_only=False)
        offs = b.column("offset").cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
        keys = np.array(sorted(start_after), dtype=np.int64)
        lasts = np.array([start_after[int(k)] for k in keys], dtype=np.int64)
        at = np.clip(np.searchsorted(keys, pnum), 0, len(keys) - 1)
        known = keys[at] == pnum
        by_offset = pa.array(offs > lasts[at])
        inside = pc.if_else(pa.array(known), by_offset, inside)
    if until_ms is not None:
        inside = pc.and_(inside, pc.less(ms, until_ms))
    return pa.RecordBatch.from_arrays(
        [b.column("key"), b.column("value"), b.column("partition").cast(pa.int32()),
         b.column("offset").cast(pa.int64()), ms, inside], names=list(INPUT_COLUMNS))


def make_file_scan_fn(*, chunk_rows: int = 500_000, groups: Sequence[str] = (), since_ms: int | None = None,
                      until_ms: int | None = None, batch_rows: int = 131_072,
                      start_after: dict[int, int] | None = None,
                      ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function for `units.mapInArrow(fn, SCAN_SCHEMA)` over a DataFrame of `FILE_UNIT_SCHEMA`
    rows: each worker reads its units' row groups with pyarrow and runs the same kernel, in chunks
    of about `chunk_rows` rows (a chunk never spans two units)."""
    import pyarrow.parquet as pq

    patterns = tuple(groups)
    columns = ["key", "value", "partition", "offset", "timestamp"]

    def read(units: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch | None]:
        for ub in units:
            for path, row_groups in zip(ub.column("path").to_pylist(), ub.column("row_groups").to_pylist(),
                                        strict=True):
                with pq.ParquetFile(path) as pf:
                    for b in pf.iter_batches(batch_size=batch_rows, row_groups=row_groups, columns=columns):
                        yield _input_batch(b, since_ms, until_ms, start_after)
                yield None  # a chunk never spans two units

    def scan_units(units: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from _scan_stream(read(units), task=_task_id(), chunk_rows=chunk_rows, group_ok=group_matcher(patterns))

    return scan_units
