"""The job's single pass over the input: a compiled kernel for `mapInArrow` that reads every record
once, in the Python worker that holds it, without a shuffle of the key and value bytes.

Per chunk (up to `chunk_rows` consecutive rows of one Spark task) it:

* puts the chunk in log order, (partition, offset), with a numpy sort (a no-op check when the input
  is already ordered, as Kafka-source dumps are) and drops repeated (partition, offset) rows;
* classifies every key in compiled code (`coordinator_audit.udfs.scan_kernel`, numba over the Arrow buffers): an
  offset-commit key gets the id of its topic-partition from a hash table the task keeps across
  its chunks (a dictionary-encoded key column, as the Parquet reader gives it, is classified once
  per dictionary entry), so names are decoded once per task, not once per record;
* recognises the offset commits it can summarise (key type 0/1 with a complete group/topic/
  partition, value a tombstone or a well-formed `OffsetCommitValue`, the layout Kafka's
  `OffsetCommitValue` schema versions 0-4 define) and reads their committed offset and
  commitTimestamp straight from the value bytes;
* sends every other record (GroupMetadata, malformed commits, other types) out unchanged as a
  `side` row, with its record type and group id: the per-group Python replay decodes or
  quarantines those;
* summarises the commits per (group, topic, partition, Kafka partition, stretch between two side
  records of the group: GroupMetadata records, malformed commits, other types) as `partial` rows:
  counts, first and last commit (committed offset, commitTimestamp, log offset), and the
  regressions inside the stretch. A stretch stays open from one chunk of the task to the next
  (`TaskKeys.open`) and is written when the next one of its topic-partition opens (its first
  record after the group's next side record) or at
  the end of the task. Every backwards step inside a stretch becomes a `regression` candidate
  row. Which generation window a stretch belongs to, and whether that window was Stable, is decided after the pass by
  the per-group replay (`coordinator_audit.udfs.replay`), which takes the stretches among the group's other records
  in log order and merges them into its open window (`GroupAuditor.merge_stretch`), stretches of
  the same window from other chunks included;
* reports its `range` per Kafka partition (first and last offset) and its `counts`.

A stretch never spans a side record of its group, so the replay reads each group's records in log
order (a record inside a stretch would come after the stretch's last one: a repeat to the audit),
and merging stretches in log order is exact provided no two chunks hold interleaving offsets of one Kafka partition, and a task that
carried a stretch from one chunk to a later one saw every record of that partition in between (a
`range` row names the chunk it continues, `previous_chunk`, which must come right before it). The
job checks both on the `range` rows and, when they do not hold (an input that is not in log order),
runs the pass again on input range-partitioned and sorted by (partition, offset). Chunks have
exactly `chunk_rows` rows (the last of a unit fewer), and a chunk drops a repeat of the record its
task's previous chunk ended on, so a sorted task never splits a repeated record across two chunks.

The functions here take and return pyarrow objects and are tested without Spark; `SCAN_SCHEMA`
is the Spark schema of `make_scan_fn`'s output.
"""

from __future__ import annotations

import fnmatch
import json
import os
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from coordinator_audit.core.audit.consumer import topic_id_text
from coordinator_audit.core.errors import CoordinatorAuditError
from coordinator_audit.core.records import OffsetCommitValue, decode, offset_commit_topic_id
from coordinator_audit.udfs.gc_batches import freeze_survivors
from coordinator_audit.udfs.handoff import Handoff, HandoffWriter
from coordinator_audit.udfs.scan_kernel import (
    KIND_COMMIT_KEY,
    S_COMMITS,
    S_FC_CTS,
    S_FC_OFF,
    S_FC_RTS,
    S_FC_SRC,
    S_FIRST_SRC,
    S_FT_HI,
    S_FT_LO,
    S_LAST_SRC,
    S_LC_CTS,
    S_LC_OFF,
    S_LC_SRC,
    S_LT_HI,
    S_LT_LO,
    S_PART,
    S_REGS,
    S_STRETCH,
    S_TOMBS,
    STATUS_CHECK,
    STATUS_COMMIT,
    STATUS_FILTERED,
    STATUS_SIDE,
    STATUS_TOMBSTONE,
    STRETCH_FIELDS,
    TS_MICROS,
    TS_MILLIS,
    TS_NANOS,
    TS_SECONDS,
    KeyTable,
    classify_keys,
    commit_status,
    copy_ranges,
    entry_fields,
    in_log_order,
    keep_rows,
    open_partitions,
    prepare,
    summarise,
    window_ms,
)

__all__ = [
    "FILE_UNIT_SCHEMA",
    "HANDED_KINDS",
    "INPUT_COLUMNS",
    "KIND_COUNTS",
    "KIND_HANDOFF",
    "KIND_PARTIAL",
    "KIND_RANGE",
    "KIND_REGRESSION",
    "KIND_SIDE",
    "NOTHING_INSIDE_MS",
    "POSITION_COLUMNS",
    "SCAN_FIELDS",
    "SCAN_SCHEMA",
    "UNITS_PER_CORE",
    "UNIT_CHUNKS",
    "ParquetFooter",
    "RowGroupBounds",
    "footer_null_positions",
    "footers_kept",
    "group_matcher",
    "make_file_scan_fn",
    "make_scan_fn",
    "outside_window",
    "parquet_input_problem",
    "parquet_tasks",
    "parquet_units",
    "pass_tasks",
    "read_footer",
    "row_group_bounds",
    "scan_chunk",
    "unit_rows_for",
    "window_floor",
]

KIND_SIDE = "side"
KIND_PARTIAL = "partial"
KIND_REGRESSION = "regression"
KIND_RANGE = "range"
KIND_COUNTS = "counts"
KIND_HANDOFF = "handoff"
HANDED_KINDS = (KIND_SIDE, KIND_PARTIAL, KIND_REGRESSION)
"""The rows the replay reads: with a handoff (`make_file_scan_fn(handoff=...)`) they go to the task's
file and a `handoff` row per record batch written comes out instead."""

INPUT_COLUMNS: tuple[str, ...] = ("key", "value", "partition", "offset", "timestamp_ms", "in_window")
"""What the kernel reads: raw key/value bytes, log position, record time in epoch ms, and whether
the record is inside the run's time window (null or false: outside)."""
SPARK_INPUT_COLUMNS: tuple[str, ...] = INPUT_COLUMNS[:-1]
"""What Spark hands the pass (`make_scan_fn`): the window is evaluated in the worker, as the file
reader evaluates it (`_input_batch`), not sent as a column: Spark's row-to-Arrow conversion costs
per column and record (`coordinator_audit.jobs.offsets_path.scan_frame`)."""

_L, _I, _H, _S, _B = pa.int64(), pa.int32(), pa.int16(), pa.string(), pa.binary()
SCAN_FIELDS: tuple[tuple[str, pa.DataType, str], ...] = (
    ("_kind", _S, "side / partial / regression / range / counts"),
    ("partition", _I, "Kafka partition (side, partial, regression, range)"),
    ("offset", _L, "side: the record's offset; partial: its first record's; regression: the regressing "
                   "commit's; range: the chunk's first offset in the partition"),
    ("timestamp_ms", _L, "side: the record's timestamp; regression: the regressing commit's"),
    ("key", _B, "side: raw key"),
    ("value", _B, "side: raw value"),
    ("group_id", _S, "partial, regression; side: the key's group string (null: unreadable)"),
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
    ("first_topic_id", _S, "partial: the first topic id its commits carry (OffsetCommit value v4+, Kafka's text "
                           "form; null: none)"),
    ("last_topic_id", _S, "partial: the last one (null: none)"),
    ("offset_value", _L, "regression: the committed offset that went backwards"),
    ("commit_timestamp", _L, "regression: its commitTimestamp"),
    ("previous_offset", _L, "regression: the previous commit's offset"),
    ("previous_commit_timestamp", _L, "regression: the previous commit's commitTimestamp"),
    ("previous_source_offset", _L, "regression: the previous commit's log offset"),
    ("chunk", _L, "side, range, counts: the chunk (task partition << 20 | chunk number)"),
    ("previous_chunk", _L, "range: the task's earlier chunk that last held records of this partition, when "
                           "stretches of the partition open there were carried into this chunk (null: none)"),
    ("records_in", _L, "counts: rows read; range: distinct in-window records of the partition in the chunk; "
                       "side: the record's rank among them (how many come before it)"),
    ("filtered_by_window", _L, "counts: rows outside the time window"),
    ("duplicates", _L, "counts: repeated (partition, offset) rows dropped"),
    ("filtered_by_group", _L, "counts: commits of groups outside the group filter"),
    ("side_records", _L, "counts: rows sent to the replay"),
    ("record_type", _H, "side: the key's int16 record type (null: a key under 2 bytes)"),
    ("path", _S, "handoff: a file the task wrote the replay's rows into (`coordinator_audit.udfs.handoff`)"),
    ("bucket", _I, "handoff: the bucket of one record batch of it"),
    ("row_group", _I, "handoff: the record batch's index in the file (`records_in`: its rows)"),
)
_ARROW_SCHEMA = pa.schema([pa.field(name, t, nullable=name != "_kind") for name, t, _ in SCAN_FIELDS])


def _spark_schema() -> Any:
    from pyspark.sql.types import (
        BinaryType,
        IntegerType,
        LongType,
        ShortType,
        StringType,
        StructField,
        StructType,
    )

    types = {_L: LongType(), _I: IntegerType(), _H: ShortType(), _S: StringType(), _B: BinaryType()}
    return StructType([StructField(name, types[t], name != "_kind") for name, t, _ in SCAN_FIELDS])


SCAN_SCHEMA = _spark_schema()
"""Spark schema of the kernel's output (`mapInArrow(make_scan_fn(...), SCAN_SCHEMA)`)."""

def _binary_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets as int64, data as uint8, null mask) of a binary or large-binary Arrow array, as numpy
    views where the layout allows (no copy of the bytes)."""
    n = len(arr)
    bufs = arr.buffers()
    large = pa.types.is_large_binary(arr.type)
    width = 8 if large else 4
    if n:
        offsets = np.frombuffer(bufs[1], dtype=np.int64 if large else np.int32, count=n + 1,
                                offset=arr.offset * width).astype(np.int64)
    else:
        offsets = np.zeros(1, dtype=np.int64)
    end = int(offsets[-1])
    data = np.frombuffer(bufs[2], dtype=np.uint8, count=end) if bufs[2] is not None and end else np.zeros(1, np.uint8)
    null = arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count else np.zeros(n, dtype=bool)
    return offsets, data, null


def _values(arr: pa.Array, dtype: Any) -> np.ndarray:
    """The values buffer of a fixed-width Arrow array of numpy `dtype`, as a view (nulls: whatever the
    buffer holds)."""
    if not len(arr):
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(arr.buffers()[1], dtype=dtype, count=len(arr), offset=arr.offset * np.dtype(dtype).itemsize)


def _bits(arr: pa.Array) -> np.ndarray:
    """The values bitmap of a boolean Arrow array, as a uint8 view (its first value at bit `arr.offset`)."""
    buf = arr.buffers()[1]
    return np.frombuffer(buf, dtype=np.uint8) if buf is not None and buf.size else np.zeros(1, dtype=np.uint8)


def _chunk_spans(col: pa.ChunkedArray, rows: np.ndarray) -> Iterator[tuple[pa.Array, int, int, int]]:
    """For each chunk of `col` that holds some of `rows` (ascending positions in `col`): the chunk,
    its first position in `col`, and the slice [lo, hi) of `rows` inside it."""
    start = 0
    for piece in col.chunks:
        end = start + len(piece)
        lo, hi = (int(j) for j in np.searchsorted(rows, (start, end)))
        if hi > lo:
            yield piece, start, lo, hi
        start = end


def _take_ascending(col: pa.ChunkedArray, rows: np.ndarray) -> pa.Array:
    """`col`'s values at `rows` (ascending), taken chunk by chunk (a take over a chunked array
    combines its chunks first)."""
    taken = [piece.take(pa.array(rows[lo:hi] - start)) for piece, start, lo, hi in _chunk_spans(col, rows)]
    return pa.concat_arrays(taken) if taken else pa.array([], col.type)


def _int64s(arr: pa.Array, null: int = 0) -> np.ndarray:
    """An integer Arrow array as int64 numpy (nulls as `null`)."""
    out: np.ndarray = np.asarray((arr.fill_null(null) if arr.null_count else arr).to_numpy(), dtype=np.int64)
    return out


def _codec_reads_commit(key: bytes, value: bytes) -> bool:
    """Whether `coordinator_audit.core.records.decode` reads this record as an offset commit."""
    try:
        return isinstance(decode(key, value).value, OffsetCommitValue)
    except CoordinatorAuditError:
        return False


def group_matcher(patterns: Sequence[str]) -> Callable[[str], bool] | None:
    """A predicate for the group filter (fnmatch globs, as `coordinator_audit.jobs.inputs.filter_groups`); None: all."""
    if not patterns:
        return None
    pats = tuple(patterns)
    return lambda group: any(fnmatch.fnmatchcase(group, p) for p in pats)


def _column(n: int, values: Any, t: pa.DataType) -> pa.Array:
    if values is None:
        return pa.nulls(n, t)
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        return values.cast(t) if values.type != t else values
    return pa.array(values, type=t)


def _rows(kind: str, n: int, columns: dict[str, Any]) -> pa.RecordBatch:
    arrays = [pa.array([kind] * n, type=_S) if name == "_kind" else _column(n, columns.get(name), t)
              for name, t, _ in SCAN_FIELDS]
    return pa.RecordBatch.from_arrays(arrays, schema=_ARROW_SCHEMA)


def _masked(values: np.ndarray, valid: np.ndarray) -> pa.Array:
    return pa.array(values, mask=~valid)


_NO_INDEX = np.zeros(0, dtype=np.int32)


class KeyClasses(NamedTuple):
    """What `scan_kernel.prepare` reads of one batch's keys: per entry (a dictionary's entries, or
    the keys themselves when `entry` is empty) its kind (`scan_kernel.KIND_*`), its topic-partition
    id (offset-commit keys, else -1), its group id (other keys whose group is complete, else -1) and
    whether it is an offset-commit key whose names are UTF-8; `entry`, `entry_null`: each key's entry."""

    entry: np.ndarray
    entry_null: np.ndarray
    kind: np.ndarray
    name: np.ndarray
    group: np.ndarray
    key_ok: np.ndarray


class TaskKeys:
    """What one task knows of the keys it has seen, across its chunks: the topic-partitions of
    offset-commit keys (`scan_kernel.KeyTable`: id, group id, names, whether the names are UTF-8 and
    the group filter keeps them) and the groups; and the stretches still open (`open`: one row of
    `scan_kernel.STRETCH_FIELDS` per topic-partition id, with each group's count of side records so
    far in `breaks`), carried to the next chunk: a topic-partition committed to in every
    chunk gives one stretch per generation window, not one per chunk. `last_chunk` is the chunk that
    last held records of each Kafka partition."""

    MAX_KEYS = 1_000_000
    """The tables are emptied between chunks once they hold this many keys (bounds a worker's memory;
    the open stretches are closed first)."""

    def __init__(self, group_ok: Callable[[str], bool] | None = None, *, max_keys: int = MAX_KEYS) -> None:
        self.group_ok = group_ok
        self.max_keys = max_keys
        self.keys = KeyTable()
        self.groups = KeyTable(1 << 12, 1 << 16)
        self.last_position = np.zeros(3, dtype=np.int64)
        """(Kafka partition, offset, 1) of the last record the previous chunk kept ((0, 0, 0): none)."""
        self.clear()

    def clear(self) -> None:
        self.keys.clear()
        self.groups.clear()
        self.valid = np.empty(0, dtype=bool)
        self.wanted = np.empty(0, dtype=bool)
        self._chunks: list[tuple[pa.Array, pa.Array, pa.Array]] = []
        self._columns: tuple[pa.Array, pa.Array, pa.Array] | None = None
        self._dictionary: tuple[pa.Array, tuple[np.ndarray, ...]] | None = None
        self.open = np.full((0, STRETCH_FIELDS), -1, dtype=np.int64)
        self.breaks = np.zeros(0, dtype=np.int64)
        self.last_chunk: dict[int, int] = {}

    def ready(self) -> None:
        """Room in `open` for every topic-partition id and in `breaks` for every group id."""
        if len(self.open) < len(self.keys):  # a new row is closed (S_STRETCH -1); its other fields are unread
            grown = np.empty((max(len(self.keys), 2 * len(self.open)), STRETCH_FIELDS), dtype=np.int64)
            grown[:len(self.open)] = self.open
            grown[len(self.open):, S_STRETCH] = -1
            self.open = grown
        if len(self.breaks) < max(len(self.groups), 1):
            grow_g = np.zeros(max(len(self.groups), 1, 2 * len(self.breaks)) - len(self.breaks), dtype=np.int64)
            self.breaks = np.concatenate([self.breaks, grow_g])

    def open_partitions(self) -> set[int]:
        """The Kafka partitions with a stretch open (begun in an earlier chunk)."""
        return set(open_partitions(self.open, min(len(self.open), len(self.keys))).tolist())

    def flush(self) -> list[pa.RecordBatch]:
        """The open stretches as `partial` rows, closed (at the end of the task, or before `clear`)."""
        rows = self.open[: len(self.keys)]
        names = np.flatnonzero(rows[:, S_STRETCH] >= 0)
        if not len(names):
            return []
        out = _stretch_rows(self, names, rows[names])
        rows[names, S_STRETCH] = -1
        return [out]

    def __len__(self) -> int:
        return len(self.keys)

    def classify(self, keys: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """(kind, id) of each key of a binary array: `scan_kernel.intern_keys`."""
        before = len(self.keys)
        kind, ids = classify_keys(*_binary_buffers(keys), self.keys, self.groups)
        if len(self.keys) > before:
            self._learn(before, len(self.keys))
        return kind, ids

    def classes(self, keys: pa.Array) -> KeyClasses:
        """The classes of a binary or dictionary-encoded binary array's keys (a dictionary's entries
        are classified once, `classify`)."""
        if not pa.types.is_dictionary(keys.type):
            return KeyClasses(_NO_INDEX, _NONE, *self._entry_classes(*self.classify(keys)))
        # pyarrow hands every batch of a row group the row group's whole dictionary: an equal one is
        # compared, not hashed again
        entries = keys.dictionary
        cached = self._dictionary
        if cached is not None and cached[0].equals(entries):
            classes = cached[1]
        else:
            classes = self._entry_classes(*self.classify(entries))
            self._dictionary = (entries, classes)
        indices = keys.indices
        if indices.type != _I:
            indices = indices.cast(_I)
        index = np.frombuffer(indices.buffers()[1], dtype=np.int32, count=len(indices), offset=4 * indices.offset)
        return KeyClasses(index, _nulls(indices), *classes)

    def _entry_classes(self, kind: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, ...]:
        """(kind, topic-partition id, group id, commit key with UTF-8 names) of classified keys."""
        is_commit_key = kind == KIND_COMMIT_KEY
        name = np.where(is_commit_key, ids, -1)
        key_ok = is_commit_key & self.valid[np.where(is_commit_key, ids, 0)] if len(self.valid) else is_commit_key
        return kind, name, np.where(kind != KIND_COMMIT_KEY, ids, -1), key_ok

    def _learn(self, first: int, last: int) -> None:
        n = last - first
        glen, tlen, part = (np.empty(n, dtype=np.int64) for _ in range(3))
        valid = np.empty(n, dtype=bool)
        entry_fields(self.keys.arena, self.keys.e_start, first, last, glen, tlen, part, valid)
        start = self.keys.e_start[first:last]
        glen, tlen = np.where(valid, glen, 0), np.where(valid, tlen, 0)
        group_col = _strings(self.keys.arena, start + 2, glen)
        topic_col = _strings(self.keys.arena, start + 4 + glen, tlen)
        self._chunks.append((group_col, topic_col, pa.array(part, type=_I)))
        self._columns = None
        wanted = valid.copy()
        if self.group_ok is not None:
            ok = self.group_ok
            wanted &= np.array([ok(g) for g in group_col.to_pylist()], dtype=bool)
        self.valid = np.concatenate([self.valid, valid])
        self.wanted = np.concatenate([self.wanted, wanted])

    @property
    def key_group(self) -> np.ndarray:
        return self.keys.aux

    def columns(self) -> tuple[pa.Array, pa.Array, pa.Array]:
        """(group_id, topic, partition_key) of every topic-partition id, to `take` from."""
        if self._columns is None:
            if self._chunks:
                self._columns = (pa.concat_arrays([c[0] for c in self._chunks]),
                                 pa.concat_arrays([c[1] for c in self._chunks]),
                                 pa.concat_arrays([c[2] for c in self._chunks]))
                self._chunks = [self._columns]
            else:
                self._columns = (pa.array([], type=_S), pa.array([], type=_S), pa.array([], type=_I))
        return self._columns


def _strings(arena: np.ndarray, start: np.ndarray, length: np.ndarray) -> pa.Array:
    """A string array of the UTF-8 byte ranges (`start`, `length`) of `arena` (validated by the
    caller; a length of 0 gives "")."""
    total = int(length.sum())
    if total >= 1 << 31:
        raise ValueError(f"single pass: {total:,} bytes of group or topic names in one task's key table, more than "
                         "a string column holds (2 GiB); lower TaskKeys.MAX_KEYS")
    offsets = np.empty(len(start) + 1, dtype=np.int32)
    data = np.empty(max(total, 1), dtype=np.uint8)
    copy_ranges(arena, start, length, offsets, data)
    return pa.StringArray.from_buffers(len(start), pa.py_buffer(offsets), pa.py_buffer(data))


def _side_classes(keys: list[bytes | None]) -> tuple[list[int | None], list[str | None]]:
    """record_type (the key's int16 type; None for a key under 2 bytes) and group_id (the key's
    group string, undecodable bytes replaced; None when it cannot be read) of the side records."""
    types: list[int | None] = []
    groups: list[str | None] = []
    for raw in keys:
        if raw is None or len(raw) < 2:
            types.append(None)
            groups.append(None)
            continue
        types.append(int.from_bytes(raw[0:2], "big", signed=True))
        glen = int.from_bytes(raw[2:4], "big", signed=True) if len(raw) >= 4 else -1
        groups.append(raw[4:4 + glen].decode("utf-8", "replace") if 0 <= glen <= len(raw) - 4 else None)
    return types, groups


def scan_chunk(batch: pa.RecordBatch | pa.Table, *, chunk: int, group_ok: Callable[[str], bool] | None = None,
               keys: TaskKeys | None = None, final: bool = True) -> pa.Table:
    """One chunk's `side`, `partial`, `regression`, `range` and `counts` rows (see the module
    docstring); `batch` has `INPUT_COLUMNS` (the key column may be dictionary-encoded). `keys`
    keeps what the task's earlier chunks learnt of the keys (emptied when it grows large) and the
    stretches they left open; `final` closes every stretch still open at the chunk's end (else they
    stay open in `keys` for the next chunk, and `keys.flush()` closes them)."""
    out: list[pa.RecordBatch] = []
    if keys is None:
        keys = TaskKeys(group_ok)
    elif len(keys) > keys.max_keys:
        out.extend(keys.flush())
        keys.clear()
    carried = keys.open_partitions()
    table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
    n = table.num_rows
    part, off, ts, name, group, inw, positioned, key_ok, kind = _chunk_arrays(table, keys)

    order = np.empty(0, dtype=np.int64) if in_log_order(part, off) else np.lexsort((off, part))
    keep = np.empty(n, dtype=np.int64)
    n_keep, n_window, n_dup = keep_rows(order, part, off, inw, positioned, keep, keys.last_position)
    keep = keep[:n_keep]  # in-window, distinct, in log order
    if n_keep:  # a repeat of the last record may begin the next chunk (a chunk ends at a fixed size)
        last_kept = keep[-1]
        keys.last_position[:] = (part[last_kept], off[last_kept], 1 if positioned[last_kept] else 0)
    every = not len(order) and n_keep == n  # keep is every row, in order: its gathers are the arrays

    in_order = not len(order)  # keep ascends: each input batch's values are read where they are
    status, commit_offset, commit_ts, topic_id, vcol = _commit_statuses(table, keep, in_order, kind, key_ok,
                                                                        positioned)
    summarised = (status == STATUS_COMMIT) | (status == STATUS_TOMBSTONE)
    filtered_by_group = _filter_groups(keys, status, summarised, name, keep)

    # the records the replay decodes (side rows); each ends its group's stretches (`summarise`)
    side_j = np.flatnonzero(status == STATUS_SIDE)
    side = side_j if every else keep[side_j]
    kp = part if every else part[keep]
    first = np.concatenate([[0], np.flatnonzero(kp[1:] != kp[:-1]) + 1])  # each partition's first position
    if len(side):
        rank = side_j - first[np.searchsorted(first, side_j, side="right") - 1]
        out.append(_side_rows(table, vcol, chunk, side, rank, part, off, ts))

    n_sum = int(summarised.sum()) - filtered_by_group
    commits = int((status == STATUS_COMMIT).sum())
    tombstones = int((status == STATUS_TOMBSTONE).sum())
    keys.ready()
    # also with no commit to summarise: the chunk's side records end the open stretches of their groups
    out.extend(_summaries(keys, n_sum, keep, status, kind, name, group, part, off, ts, commit_offset, commit_ts,
                          topic_id))

    if len(keep):
        out.append(_range_rows(keys, carried, chunk, len(keep), first, kp, off if every else off[keep]))
    out.append(_rows(KIND_COUNTS, 1, {
        "chunk": [chunk], "records_in": [n], "filtered_by_window": [n - n_window],
        "duplicates": [n_dup], "filtered_by_group": [filtered_by_group], "commits": [commits],
        "tombstones": [tombstones], "side_records": [len(side)]}))
    if final:
        out.extend(keys.flush())
    return pa.Table.from_batches(out, schema=_ARROW_SCHEMA)


def _chunk_arrays(table: pa.Table, keys: TaskKeys) -> tuple[np.ndarray, ...]:
    """The chunk's columns as the kernel's arrays (`scan_kernel.prepare`, one compiled loop per
    input batch): partition, offset, timestamp, topic-partition id, group id, in window, positioned,
    key readable, and record kind."""
    n = table.num_rows
    part, off, ts, name, group = (np.empty(n, dtype=np.int64) for _ in range(5))
    inw, positioned, key_ok = (np.empty(n, dtype=bool) for _ in range(3))
    kind = np.empty(n, dtype=np.int8)
    at = 0
    for b in table.to_batches():
        p, o, t, w = (b.column(c) for c in ("partition", "offset", "timestamp_ms", "in_window"))
        if p.type != _I:
            p = p.cast(_I)
        o, t = (a if a.type == _L else a.cast(_L) for a in (o, t))
        prepare(at, _values(p, np.int32), _nulls(p), _values(o, np.int64), _nulls(o), _values(t, np.int64), _nulls(t),
                _bits(w), w.offset, _nulls(w), *keys.classes(b.column("key")), part, off, ts, inw, positioned, kind,
                name, group, key_ok)
        at += b.num_rows
    return part, off, ts, name, group, inw, positioned, key_ok, kind


def _raw(col: pa.ChunkedArray | pa.Array, row: int) -> bytes | None:
    """A binary column's value at `row`."""
    value: bytes | None = col[row].as_py()
    return value


def _commit_statuses(table: pa.Table, keep: np.ndarray, in_order: bool, kind: np.ndarray, key_ok: np.ndarray,
                     positioned: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, pa.ChunkedArray | pa.Array]:
    """Each kept record's status (`scan_kernel.commit_status`; the codec decides the rare v4+ values
    with tagged fields other than the topic id), and an offset commit's offset, commit time and
    topic id (two int64 halves, 0 and 0: none); with the value column as read (`in_order`: `keep`
    ascends, and the column's chunks stay as they are)."""
    status = np.zeros(len(keep), dtype=np.int8)
    commit_offset = np.zeros(len(keep), dtype=np.int64)
    commit_ts = np.zeros(len(keep), dtype=np.int64)
    topic_id = np.zeros((len(keep), 2), dtype=np.int64)
    vcol: pa.ChunkedArray | pa.Array = table.column("value")
    if in_order and vcol.num_chunks > 1:
        for piece, start, j0, j1 in _chunk_spans(vcol, keep):
            end = start + len(piece)
            commit_status(keep[j0:j1] - start, kind[start:end], key_ok[start:end], positioned[start:end],
                          *_binary_buffers(piece), status[j0:j1], commit_offset[j0:j1], commit_ts[j0:j1],
                          topic_id[j0:j1])
    else:
        vcol = vcol.combine_chunks()
        commit_status(keep, kind, key_ok, positioned, *_binary_buffers(vcol), status, commit_offset, commit_ts,
                      topic_id)
    kcol = table.column("key")
    for j in np.flatnonzero(status == STATUS_CHECK):  # v4+ values with other tagged fields: the codec decides
        key, value = _raw(kcol, int(keep[j])), _raw(vcol, int(keep[j]))
        assert key is not None and value is not None  # an offset-commit key with a value
        status[j] = STATUS_COMMIT if _codec_reads_commit(key, value) else STATUS_SIDE
        tid = offset_commit_topic_id(value) if status[j] == STATUS_COMMIT else None
        if tid is not None:
            topic_id[j] = np.frombuffer(tid, dtype=">i8")
    return status, commit_offset, commit_ts, topic_id, vcol


def _filter_groups(keys: TaskKeys, status: np.ndarray, summarised: np.ndarray, name: np.ndarray,
                   keep: np.ndarray) -> int:
    """Marks the summarised records of unwanted groups `STATUS_FILTERED` (with `keys.group_ok`);
    how many."""
    if keys.group_ok is None or not summarised.any():
        return 0
    unwanted = np.zeros(len(keep), dtype=bool)
    sj = np.flatnonzero(summarised)
    unwanted[sj] = ~keys.wanted[name[keep[sj]]]
    status[unwanted] = STATUS_FILTERED
    return int(unwanted.sum())


def _side_rows(table: pa.Table, vcol: pa.ChunkedArray | pa.Array, chunk: int, side: np.ndarray, rank: np.ndarray,
               part: np.ndarray, off: np.ndarray, ts: np.ndarray) -> pa.RecordBatch:
    """The `side` rows of the chunk's rows `side` (`vcol`: its value column as `_commit_statuses`
    read it; `rank`: each one's position among its partition's kept records)."""
    kcol = table.column("key")
    side_keys = [_raw(kcol, int(r)) for r in side]
    types, side_groups = _side_classes(side_keys)
    return _rows(KIND_SIDE, len(side), {
        "partition": _side_values(table, "partition", part, side),
        "offset": _side_values(table, "offset", off, side),
        "timestamp_ms": _side_values(table, "timestamp_ms", ts, side),
        "value": _take_ascending(vcol, side) if isinstance(vcol, pa.ChunkedArray) else vcol.take(pa.array(side)),
        "key": pa.array(side_keys, type=_B), "record_type": types, "group_id": side_groups,
        "chunk": np.full(len(side), chunk, dtype=np.int64), "records_in": rank})


def _summaries(keys: TaskKeys, n_sum: int, keep: np.ndarray, status: np.ndarray, kind: np.ndarray, name: np.ndarray,
               group: np.ndarray, part: np.ndarray, off: np.ndarray, ts: np.ndarray, commit_offset: np.ndarray,
               commit_ts: np.ndarray, topic_id: np.ndarray) -> list[pa.RecordBatch]:
    """The `partial` rows of the stretches the chunk closes and its `regression` rows
    (`scan_kernel.summarise` over its `n_sum` summarised records)."""
    out: list[pa.RecordBatch] = []
    closed = np.empty((n_sum, STRETCH_FIELDS), dtype=np.int64)
    c_name, r_cur, r_name = (np.empty(n_sum, dtype=np.int64) for _ in range(3))
    r_prev = np.empty((n_sum, 3), dtype=np.int64)
    n_closed, n_regs = summarise(keep, status, kind, name, group, keys.key_group, part, off, ts, commit_offset,
                                 commit_ts, topic_id, keys.breaks, keys.open, closed, c_name, r_cur, r_name, r_prev)
    if n_closed:
        out.append(_stretch_rows(keys, c_name[:n_closed], closed[:n_closed]))
    if n_regs:
        out.append(_regression_rows(keys, keep, part, off, ts, commit_offset, commit_ts, r_cur[:n_regs],
                                    r_name[:n_regs], r_prev[:n_regs]))
    return out


def _range_rows(keys: TaskKeys, carried: set[int], chunk: int, n_keep: int, first: np.ndarray,
                kp: np.ndarray, ko: np.ndarray) -> pa.RecordBatch:
    """The chunk's `range` rows: per partition (`first`: its first kept position; `kp`, `ko`: the
    kept records' partitions and offsets), its first and last offset, linked to the task's
    previous chunk of it when a stretch of it was left open (`carried`)."""
    last = np.concatenate([first[1:] - 1, [n_keep - 1]])
    parts = kp[first].tolist()
    linked = [keys.last_chunk.get(p) if p in carried else None for p in parts]
    keys.last_chunk.update(dict.fromkeys(parts, chunk))
    return _rows(KIND_RANGE, len(first), {
        "partition": kp[first], "offset": ko[first], "last_source_offset": ko[last],
        "chunk": np.full(len(first), chunk, dtype=np.int64), "records_in": last - first + 1,
        "previous_chunk": linked})


def _side_values(table: pa.Table, column: str, values: np.ndarray, rows: np.ndarray) -> np.ndarray | pa.Array:
    """`column`'s values at `rows`: from `values` (its int64 copy, nulls as 0) unless it has nulls."""
    col = table.column(column)
    return col.combine_chunks().take(pa.array(rows)) if col.null_count else values[rows]


def _stretch_rows(keys: TaskKeys, names: np.ndarray, v: np.ndarray) -> pa.RecordBatch:
    """`partial` rows of closed stretches: topic-partition ids and their `scan_kernel.STRETCH_FIELDS` rows."""
    groups, topics, parts = keys.columns()
    ids = pa.array(names)
    has = v[:, S_COMMITS] > 0
    return _rows(KIND_PARTIAL, len(names), {
        "partition": v[:, S_PART], "offset": v[:, S_FIRST_SRC], "group_id": groups.take(ids),
        "topic": topics.take(ids), "partition_key": parts.take(ids), "last_source_offset": v[:, S_LAST_SRC],
        "commits": v[:, S_COMMITS], "tombstones": v[:, S_TOMBS], "regressions": v[:, S_REGS],
        "first_commit_source_offset": _masked(v[:, S_FC_SRC], has),
        "first_commit_record_ts": _masked(v[:, S_FC_RTS], has),
        "first_offset": _masked(v[:, S_FC_OFF], has), "first_commit_timestamp": _masked(v[:, S_FC_CTS], has),
        "last_commit_source_offset": _masked(v[:, S_LC_SRC], has), "last_offset": _masked(v[:, S_LC_OFF], has),
        "last_commit_timestamp": _masked(v[:, S_LC_CTS], has),
        "first_topic_id": _topic_ids(v[:, S_FT_HI], v[:, S_FT_LO]),
        "last_topic_id": _topic_ids(v[:, S_LT_HI], v[:, S_LT_LO])})


def _topic_ids(hi: np.ndarray, lo: np.ndarray) -> list[str | None]:
    """Topic ids kept as two int64 halves (0, 0: none) in Kafka's text form (`Uuid#toString`)."""
    out: list[str | None] = [None] * len(hi)
    for k in np.flatnonzero((hi != 0) | (lo != 0)):
        raw = int(hi[k]).to_bytes(8, "big", signed=True) + int(lo[k]).to_bytes(8, "big", signed=True)
        out[k] = topic_id_text(uuid.UUID(bytes=raw))
    return out


def _regression_rows(keys: TaskKeys, keep: np.ndarray, part: np.ndarray, off: np.ndarray, ts: np.ndarray,
                     commit_offset: np.ndarray, commit_ts: np.ndarray, r_cur: np.ndarray, r_name: np.ndarray,
                     r_prev: np.ndarray) -> pa.RecordBatch:
    """`regression` rows of `scan_kernel.summarise`'s backwards steps (positions in `keep`)."""
    groups, topics, parts = keys.columns()
    ids = pa.array(r_name)
    rows = keep[r_cur]
    return _rows(KIND_REGRESSION, len(r_cur), {
        "partition": part[rows], "offset": off[rows], "timestamp_ms": ts[rows],
        "group_id": groups.take(ids), "topic": topics.take(ids), "partition_key": parts.take(ids),
        "offset_value": commit_offset[r_cur], "commit_timestamp": commit_ts[r_cur],
        "previous_offset": r_prev[:, 0], "previous_commit_timestamp": r_prev[:, 1],
        "previous_source_offset": r_prev[:, 2]})


def _scan_stream(batches: Iterator[pa.RecordBatch | None], *, task: int, chunk_rows: int,
                 group_ok: Callable[[str], bool] | None) -> Iterator[pa.RecordBatch]:
    """`scan_chunk` over a stream of input batches, `chunk_rows` rows per chunk (a batch is sliced
    where a chunk ends); None in the stream ends the current chunk (a unit boundary: a chunk never
    joins two files' row ranges). The stretches still open at the end are closed last."""
    pending: list[pa.RecordBatch] = []
    size = number = 0
    keys = TaskKeys(group_ok)
    for b in _with_end(batches):
        at = 0
        while b is not None and at < b.num_rows:
            take = min(chunk_rows - size, b.num_rows - at)
            pending.append(b.slice(at, take))
            size += take
            at += take
            if size >= chunk_rows:
                yield from scan_chunk(pa.Table.from_batches(pending), chunk=(task << 20) | number, keys=keys,
                                      final=False).to_batches()
                pending, size = [], 0
                number += 1
        if b is None and pending:
            yield from scan_chunk(pa.Table.from_batches(pending), chunk=(task << 20) | number, keys=keys,
                                  final=False).to_batches()
            pending, size = [], 0
            number += 1
    yield from keys.flush()


def _with_end(batches: Iterator[pa.RecordBatch | None]) -> Iterator[pa.RecordBatch | None]:
    yield from batches
    yield None


def _task_id() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


def make_scan_fn(*, chunk_rows: int, groups: Sequence[str] = (), handoff: Handoff | None = None,
                 since_ms: int | None = None, until_ms: int | None = None,
                 start_after: dict[int, int] | None = None,
                 ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function for `df.select(*SPARK_INPUT_COLUMNS).mapInArrow(fn, SCAN_SCHEMA)`: each batch's
    window evaluated in the worker (`_input_batch`: the run's window `since_ms`, `until_ms`,
    `start_after`, as the file reader has it), then up to `chunk_rows` rows per chunk (bounding the
    worker's memory), `scan_chunk` on each. With `handoff`, the rows the replay reads go into a
    file of the task's own, as in `make_file_scan_fn`."""
    patterns = tuple(groups)
    after = dict(start_after or {})

    def scan_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_survivors()
        inputs = (_input_batch(b, since_ms, until_ms, after) for b in batches)
        yield from _scan_task(inputs, chunk_rows=chunk_rows, patterns=patterns, handoff=handoff)

    return scan_partition


def _scan_task(batches: Iterator[pa.RecordBatch | None], *, chunk_rows: int, patterns: tuple[str, ...],
               handoff: Handoff | None) -> Iterator[pa.RecordBatch]:
    """One pass task's output (`_scan_stream`), without the rows the replay reads when `handoff`
    takes them into the task's file (`handed_off`)."""
    task = _task_id()
    stream = _scan_stream(batches, task=task, chunk_rows=chunk_rows, group_ok=group_matcher(patterns))
    if handoff is None:
        yield from stream
        return
    yield from handed_off(stream, HandoffWriter(handoff, task, columns=_ARROW_SCHEMA.names, kinds=HANDED_KINDS))


# ------------------------------------------------------------------------------------------------
# reading Parquet files in the workers (no trip through the JVM)

FILE_UNIT_SCHEMA = "path string, row_groups array<int>"
"""Spark schema of the work units of `make_file_scan_fn`: a local Parquet file and row groups."""


class RowGroupBounds(NamedTuple):
    """What a row group's statistics say of its records' positions and times (None: no statistics):
    its lowest and highest Kafka partition, its highest offset, and its earliest and latest record
    time in epoch ms, widened by a millisecond each way (a reader that converts the stored unit may
    round where the kernel floors)."""

    partition_min: int | None
    partition_max: int | None
    offset_max: int | None
    time_min_ms: int | None
    time_max_ms: int | None


class ParquetFooter(NamedTuple):
    """What the driver needs of one local Parquet file, read once from its footer."""

    path: str
    schema: pa.Schema
    row_groups: tuple[int, ...]
    """Rows of each row group."""
    null_positions: bool = False
    """partition, offset or timestamp may hold nulls (the statistics count some, or have no count):
    such records cannot be placed in the log, and `coordinator_audit.jobs.inputs` rejects them through Spark."""
    bounds: tuple[RowGroupBounds, ...] = ()
    """Each row group's bounds (`row_group_bounds`; empty: none known)."""


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


_MS_PER_UNIT = {"milliseconds": 1, "microseconds": 1_000, "nanoseconds": 1_000_000}
"""Units of a Parquet INT64 timestamp (its logical type's `timeUnit`) per millisecond."""


def row_group_bounds(meta: Any) -> tuple[RowGroupBounds, ...]:
    """Every row group's `RowGroupBounds`, read from a Parquet file's metadata. A bound is None where
    the column is missing, its statistics hold no min/max, or (time) the column is not an INT64
    timestamp of a known unit (Spark's INT96 timestamps have none)."""
    names = [meta.schema.column(i).path for i in range(meta.num_columns)]
    col = {c: names.index(c) for c in POSITION_COLUMNS if c in names}
    per_ms = None
    if "timestamp" in col:
        column = meta.schema.column(col["timestamp"])
        if column.physical_type == "INT64" and column.logical_type.type == "TIMESTAMP":
            per_ms = _MS_PER_UNIT.get(json.loads(column.logical_type.to_json()).get("timeUnit"))

    def min_max(group: Any, name: str) -> tuple[int | None, int | None]:
        if name not in col:
            return None, None
        column = group.column(col[name])
        stats = column.statistics
        if column.physical_type not in ("INT32", "INT64") or stats is None or not stats.has_min_max:
            return None, None
        return int(stats.min_raw), int(stats.max_raw)

    out = []
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        p_min, p_max = min_max(group, "partition")
        _, o_max = min_max(group, "offset")
        t_min = t_max = None
        if per_ms is not None:
            raw_min, raw_max = min_max(group, "timestamp")
            if raw_min is not None and raw_max is not None:
                t_min, t_max = raw_min // per_ms - 1, raw_max // per_ms + 1
        out.append(RowGroupBounds(p_min, p_max, o_max, t_min, t_max))
    return tuple(out)


def outside_window(b: RowGroupBounds, *, since_ms: int | None, until_ms: int | None,
                   start_after: Mapping[int, int]) -> bool:
    """Whether a row group's bounds prove that none of its records is in the run's window, as
    `scan_kernel.window_ms` decides it per record: each is at or after `until_ms`, or none is
    after its partition's `start_after` offset (on the partitions that have one) nor at or after
    `since_ms` (on the others). False whenever a bound it needs is unknown."""
    if until_ms is not None and b.time_min_ms is not None and b.time_min_ms >= until_ms:
        return True
    if b.partition_min is None or b.partition_max is None:
        return False
    after = [p for p in start_after if b.partition_min <= p <= b.partition_max]
    if after and (b.offset_max is None or any(b.offset_max > start_after[p] for p in after)):
        return False
    if len(after) == b.partition_max - b.partition_min + 1:  # every partition it holds has an offset bound
        return True
    return since_ms is not None and b.time_max_ms is not None and b.time_max_ms < since_ms


NOTHING_INSIDE_MS = 2**62
"""`window_floor` when every unit is outside the window: a time no record reaches."""


def window_floor(bounds: Iterable[RowGroupBounds], *, since_ms: int | None, until_ms: int | None,
                 start_after: Mapping[int, int]) -> int | None:
    """A time (epoch ms) that every record of the run's window with a time is at or after, from the
    input's units' bounds (row groups, or a Delta table's data files): the earliest `time_min_ms`
    of the units `outside_window` does not rule out (`NOTHING_INSIDE_MS` when it rules out all). A
    reader that leaves out the records before it (and those at or after `until_ms`) leaves out no
    record of the window, so Spark may skip whole files and row groups by their statistics even when
    the window's lower bound is an offset per partition. None when a unit it keeps has no time
    bound. Records without a time are not its concern: a window bounded in time holds none, and an
    input that may hold them is not read this way (`coordinator_audit.jobs.offsets_path._spark_window`)."""
    floor = NOTHING_INSIDE_MS
    for b in bounds:
        if outside_window(b, since_ms=since_ms, until_ms=until_ms, start_after=start_after):
            continue
        if b.time_min_ms is None:
            return None
        floor = min(floor, b.time_min_ms)
    return floor


_KEPT_FOOTERS: ContextVar[dict[str, ParquetFooter] | None] = ContextVar("kept_footers", default=None)


@contextmanager
def footers_kept() -> Iterator[None]:
    """Within it, `read_footer` reads each file's footer once and gives it again from memory: one
    run's input files (checked, their nulls looked up, then planned) do not change while it runs, and
    an export directory that keeps a year holds thousands of them."""
    outer = _KEPT_FOOTERS.get()
    token = _KEPT_FOOTERS.set(outer if outer is not None else {})
    try:
        yield
    finally:
        _KEPT_FOOTERS.reset(token)


def read_footer(path: str) -> ParquetFooter:
    """A local Parquet file's `ParquetFooter` (within `footers_kept`, read once)."""
    import pyarrow.parquet as pq

    kept = _KEPT_FOOTERS.get()
    key = os.path.abspath(path)  # the input check lists the files itself; Spark gives absolute paths
    if kept is not None and key in kept:
        footer = kept[key]
        return footer if footer.path == path else footer._replace(path=path)
    with pq.ParquetFile(path) as pf:
        meta = pf.metadata
        footer = ParquetFooter(path, pf.schema_arrow, tuple(meta.row_group(i).num_rows
                                                            for i in range(meta.num_row_groups)),
                               footer_null_positions(meta), row_group_bounds(meta))
    if kept is not None:
        kept[key] = footer
    return footer


UNITS_PER_CORE = 2
"""Work units of the pass over local Parquet files per core (`unit_rows_for`)."""
UNIT_CHUNKS = 16
"""The most chunks in one work unit (`unit_rows_for`): a bigger input gets more units."""


def unit_rows_for(total_rows: int, cores: int, chunk_rows: int) -> int:
    """Rows per work unit (`parquet_units`) of a pass over `total_rows` rows on `cores` cores: about
    `UNITS_PER_CORE` units per core, each at least one chunk and at most `UNIT_CHUNKS` chunks. Each
    unit is a task: a Python round trip, a key table learnt afresh, and a cut in every stretch open
    across it, which the replay merges back (`coordinator_audit.udfs.replay._Group._fold`). Two units per core keep
    both cores busy while a task finishes; more units cost those round trips and cuts
    (`python -m benchmarks.bench_worker_cpu --what offset_path,audit` measures them)."""
    return max(chunk_rows, min(UNIT_CHUNKS * chunk_rows, total_rows // (UNITS_PER_CORE * max(1, cores))))


def parquet_tasks(units: Sequence[tuple[str, list[int]]], footers: Sequence[ParquetFooter], *,
                  task_rows: int) -> list[list[tuple[str, list[int]]]]:
    """`units` (`parquet_units`, in file order) packed into the pass's tasks: runs of consecutive
    units of at most `task_rows` rows together (a bigger unit alone). A task reads its units one
    after the other and keeps what it learnt of the keys across them, so an input of many small
    files (an export directory of a file per `__consumer_offsets` partition and night) costs a few
    tasks, not one per file."""
    rows_of = {f.path: f.row_groups for f in footers}
    tasks: list[list[tuple[str, list[int]]]] = []
    task: list[tuple[str, list[int]]] = []
    rows = 0
    for path, groups in units:
        n = sum(rows_of[path][g] for g in groups)
        if task and rows + n > task_rows:
            tasks.append(task)
            task, rows = [], 0
        task.append((path, groups))
        rows += n
    if task:
        tasks.append(task)
    return tasks


def pass_tasks(footers: Sequence[ParquetFooter], *, total_rows: int, cores: int, chunk_rows: int,
               skip: Collection[tuple[str, int]] = ()) -> list[list[tuple[str, list[int]]]]:
    """The file reader's tasks over `footers` as the job plans them (`coordinator_audit.jobs.offsets_path.scan_log`;
    the benchmarks' floors follow it): units sized for `total_rows` rows on `cores` cores
    (`unit_rows_for`, `parquet_units`, without the row groups of `skip`), packed into tasks of about
    one unit's rows (`parquet_tasks`)."""
    unit_rows = unit_rows_for(total_rows, cores, chunk_rows)
    return parquet_tasks(parquet_units(footers, unit_rows=unit_rows, skip=skip), footers, task_rows=unit_rows)


def parquet_units(footers: Sequence[ParquetFooter], *, unit_rows: int,
                  skip: Collection[tuple[str, int]] = ()) -> list[tuple[str, list[int]]]:
    """Work units over local Parquet files: runs of row groups of one file of at most `unit_rows`
    rows (or one bigger row group: a row group is never split), in file order, without the row
    groups of `skip` ((path, index) pairs)."""
    units: list[tuple[str, list[int]]] = []
    for footer in footers:
        run: list[int] = []
        rows = 0
        for i, n in enumerate(footer.row_groups):
            if skip and (footer.path, i) in skip:
                continue
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


_TS_UNITS = {"s": TS_SECONDS, "ms": TS_MILLIS, "us": TS_MICROS, "ns": TS_NANOS}
_NONE = np.zeros(0, dtype=bool)
"""An empty null mask: no nulls (`scan_kernel.prepare`, `window_ms`)."""


def _nulls(arr: pa.Array) -> np.ndarray:
    """`arr`'s null mask, or an empty one when it has no nulls."""
    return arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count else _NONE


def _input_batch(b: pa.RecordBatch, since_ms: int | None, until_ms: int | None,
                 start_after: dict[int, int] | None = None) -> pa.RecordBatch:
    """A batch of Kafka-source columns as the kernel's input (`INPUT_COLUMNS`): timestamps as epoch
    ms (floored, as Spark's unix_millis), the time window evaluated (a null timestamp is outside a
    bounded window); on the partitions of `start_after` the lower bound is `offset > start_after[partition]`
    instead of the time (`coordinator_audit.jobs.inputs.window_condition`). The time is a Parquet batch's `timestamp`
    (any unit) or, from Spark, `timestamp_ms` (epoch ms). One compiled loop (`scan_kernel.window_ms`)."""
    if "timestamp_ms" in b.schema.names:
        ts_col, unit = b.column("timestamp_ms"), TS_MILLIS
        if ts_col.type != _L:
            ts_col = ts_col.cast(_L)
    else:
        ts_col = b.column("timestamp")
        unit = _TS_UNITS[ts_col.type.unit]
    null = _nulls(ts_col)
    n = b.num_rows
    ms, inside = np.empty(n, dtype=np.int64), np.empty(n, dtype=bool)
    sa_part = sa_last = part = offs = np.zeros(0, dtype=np.int64)
    off_null = _NONE
    if start_after:
        part = _int64s(b.column("partition"), null=-1)
        offs = _int64s(b.column("offset"))
        off_null = _nulls(b.column("offset"))
        sa_part = np.array(sorted(start_after), dtype=np.int64)
        sa_last = np.array([start_after[int(k)] for k in sa_part], dtype=np.int64)
    window_ms(_values(ts_col, np.int64), unit, null, part, offs, off_null, since_ms or 0, since_ms is not None,
              until_ms or 0, until_ms is not None, sa_part, sa_last, ms, inside)
    p, o = b.column("partition"), b.column("offset")
    return pa.RecordBatch.from_arrays(
        [b.column("key"), b.column("value"), p if p.type == _I else p.cast(_I), o if o.type == _L else o.cast(_L),
         pa.array(ms, mask=null if len(null) else None), pa.array(inside)],
        names=list(INPUT_COLUMNS))


def make_file_scan_fn(*, chunk_rows: int, groups: Sequence[str] = (), since_ms: int | None = None,
                      until_ms: int | None = None, batch_rows: int = 131_072,
                      start_after: dict[int, int] | None = None, handoff: Handoff | None = None,
                      ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function for `units.mapInArrow(fn, SCAN_SCHEMA)` over a DataFrame of `FILE_UNIT_SCHEMA`
    rows: each worker reads its units' row groups with pyarrow (a task's units one after the other,
    `parquet_tasks`) and runs the same kernel, in chunks of about `chunk_rows` rows (a chunk never
    spans two units). With `handoff`, the rows the replay
    reads (`HANDED_KINDS`) go into a file of the task's own (`coordinator_audit.udfs.handoff.HandoffWriter`) and
    `handoff` rows report its record batches."""
    import pyarrow.parquet as pq

    patterns = tuple(groups)
    columns = ["key", "value", "partition", "offset", "timestamp"]

    def read(units: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch | None]:
        for ub in units:
            for path, row_groups in zip(ub.column("path").to_pylist(), ub.column("row_groups").to_pylist(),
                                        strict=True):
                with pq.ParquetFile(path, read_dictionary=["key"]) as pf:
                    # one thread: Spark runs a task per core already, and pyarrow's decoding threads
                    # can only compete with the other tasks for the cores
                    for b in pf.iter_batches(batch_size=batch_rows, row_groups=row_groups, columns=columns,
                                             use_threads=False):
                        yield _input_batch(b, since_ms, until_ms, start_after)
                yield None  # a chunk never spans two units

    def scan_units(units: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_survivors()
        yield from _scan_task(read(units), chunk_rows=chunk_rows, patterns=patterns, handoff=handoff)

    return scan_units


def handed_off(stream: Iterator[pa.RecordBatch], writer: HandoffWriter) -> Iterator[pa.RecordBatch]:
    """`stream`'s batches without the rows `writer` takes, then a `handoff` row per record batch it wrote."""
    reports = yield from writer.hand_off(stream)
    if reports:
        paths, buckets, row_groups, rows = zip(*reports, strict=True)
        yield _rows(KIND_HANDOFF, len(reports), {"path": list(paths), "bucket": list(buckets),
                                                 "row_group": list(row_groups), "records_in": list(rows)})
