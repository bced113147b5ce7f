"""The replay's input handed from task to task as local Arrow IPC files, not through Spark's shuffle.

When the single pass reads local Parquet files itself (`coordinator_audit.udfs.scan.make_file_scan_fn`) or its
input's size is known ahead (the Kafka source's offset ranges, `coordinator_audit.udfs.scan.make_scan_fn`), and the
session runs on one machine, the rows the replay needs (the pass's `side`, `partial` and
`regression` rows; the saved states of a resumed run) need not travel to the JVM, through a
shuffle and a sort, and back into Python as Arrow, a trip that is most of the replay stage's Spark
side (`benchmarks.bench_replay_floor` measures it). Instead:

* each task that produces such rows writes them into one Arrow IPC file of its own (the file
  format, buffers LZ4-compressed: `HANDOFF_COMPRESSION`), cut into `Handoff.buckets` buckets by the
  group (`bucket_of`: CRC-32 of the group id's UTF-8, so every row of a group lands in one bucket;
  rows without a group in bucket 0), one record batch per bucket and flush, and reports (path,
  bucket, batch index, rows) per batch it wrote (`HandoffWriter`; the index is the report's
  `row_group` field);
* the driver collects the reports (`parts_by_bucket`) and starts one replay task per shard, each
  reading its buckets' batches (`read_bucket`), sorting them as the replay needs and replaying them.

The files are Arrow IPC, not Parquet: written once and read once on the same machine, their rows
need no Parquet encoding and decoding.

A bucket holds about `BUCKET_RECORDS` input records' worth of rows (`buckets_for`), so a replay
task's memory is bounded the way a pass task's is by its chunk. Files of a task attempt that failed
are in no report and are never read; the directory is the run's scratch space, deleted after it.
This module has no Spark imports: the writer runs in Python workers and is tested without Spark.
"""

from __future__ import annotations

import contextlib
import os
import uuid
import zlib
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "BUCKET_RECORDS",
    "FLUSH_ROWS",
    "REPORT_FIELDS",
    "Handoff",
    "HandoffWriter",
    "Parts",
    "bucket_of",
    "buckets_for",
    "parts_by_bucket",
    "read_bucket",
    "read_files",
]

BUCKET_RECORDS = 4_000_000
"""Input records per bucket (at most): the replay's input is a small share of the records it comes
from (2.8% on the benchmark), and a bucket is what one replay task holds in memory at a time."""

FLUSH_ROWS = 65_536
"""Rows a writer buffers before it writes them out, one record batch per bucket."""

HANDOFF_COMPRESSION = "lz4"
"""How the handoff files' buffers are compressed (Arrow IPC's LZ4 frame codec): uncompressed buffers
are several times larger and save next to no CPU."""
_WRITE_OPTIONS = pa.ipc.IpcWriteOptions(compression=HANDOFF_COMPRESSION)
_READ_OPTIONS = pa.ipc.IpcReadOptions(use_threads=False)
"""One thread decompresses: Spark runs a task per core already (as `coordinator_audit.udfs.scan`'s Parquet reads)."""

REPORT_FIELDS: tuple[tuple[str, pa.DataType], ...] = (
    ("path", pa.string()), ("bucket", pa.int32()), ("row_group", pa.int32()), ("rows", pa.int64()))
"""A record batch a writer wrote: its file, its bucket, its index in the file (`row_group`), its rows."""


@dataclass(frozen=True, slots=True)
class Handoff:
    """Where a step's tasks write the replay's input, and into how many buckets they cut it."""

    directory: str
    buckets: int

    def __post_init__(self) -> None:
        if self.buckets < 1:
            raise ValueError(f"handoff: buckets must be at least 1, got {self.buckets}")


def buckets_for(records: int, shards: int) -> int:
    """Buckets for a pass over `records` input records replayed in `shards` tasks: a multiple of
    `shards` (every task gets as many) with at most about `BUCKET_RECORDS` records behind each."""
    per_shard = max(1, -(-records // (max(1, shards) * BUCKET_RECORDS)))
    return max(1, shards) * per_shard


def bucket_of(groups: pa.Array | pa.ChunkedArray, buckets: int) -> np.ndarray:
    """Each row's bucket (int32 numpy) from its group id: CRC-32 of the UTF-8 bytes modulo
    `buckets`, computed once per distinct group; a null group goes to bucket 0."""
    if isinstance(groups, pa.ChunkedArray):
        groups = groups.combine_chunks()
    if len(groups) == 0:
        return np.zeros(0, dtype=np.int32)
    encoded = pc.dictionary_encode(groups)
    names = encoded.dictionary.to_pylist()
    table = np.array([zlib.crc32(g.encode("utf-8")) % buckets for g in names] + [0], dtype=np.int32)
    codes = encoded.indices.fill_null(len(names)).to_numpy(zero_copy_only=False)
    out: np.ndarray = table[codes]
    return out


class HandoffWriter:
    """One task's handoff file: rows given to `add` (optionally only those whose `_kind` is in
    `kinds`, and only `columns` of them), buffered (`flush_rows` at most, default `FLUSH_ROWS`), cut
    by bucket and written a record batch per bucket; `close` returns the reports (`REPORT_FIELDS`
    values) of every batch written."""

    __slots__ = ("_buffered", "_columns", "_flush_rows", "_kinds", "_path", "_reports", "_row_groups", "_size",
                 "_writer", "spec", "task")

    def __init__(self, spec: Handoff, task: int, *, columns: Sequence[str],
                 kinds: Iterable[str] | None = None, flush_rows: int | None = None) -> None:
        self.spec = spec
        self.task = task
        self._flush_rows = flush_rows if flush_rows is not None else FLUSH_ROWS
        self._columns = list(columns)
        self._kinds = pa.array(sorted(kinds), pa.string()) if kinds is not None else None
        self._buffered: list[pa.RecordBatch] = []
        self._size = 0
        self._writer: pa.ipc.RecordBatchFileWriter | None = None
        self._path = ""
        self._row_groups = 0
        self._reports: list[tuple[str, int, int, int]] = []

    def add(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Takes `batch`'s rows to hand off (all, or those of `kinds`); returns the others."""
        if self._kinds is None:
            handed, rest = batch, batch.slice(0, 0)
        else:
            mask = pc.is_in(batch.column("_kind"), value_set=self._kinds)
            taken = pc.sum(mask).as_py() or 0
            if taken == 0:
                return batch
            if taken == batch.num_rows:  # the single pass's batches hold one kind each: no copies
                handed, rest = batch, batch.slice(0, 0)
            else:
                handed, rest = batch.filter(mask), batch.filter(pc.invert(mask))
        if handed.num_rows:
            self._buffered.append(handed.select(self._columns))
            self._size += handed.num_rows
            if self._size >= self._flush_rows:
                self._flush()
        return rest

    def _flush(self) -> None:
        if not self._size:
            return
        table = pa.Table.from_batches(self._buffered)
        self._buffered, self._size = [], 0
        buckets = bucket_of(table.column("group_id"), self.spec.buckets)
        order = np.argsort(buckets, kind="stable")
        table = table.take(pa.array(order))
        ordered = buckets[order]
        starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]]))
        ends = np.append(starts[1:], len(ordered))
        if self._writer is None:
            os.makedirs(self.spec.directory, exist_ok=True)
            self._path = os.path.join(self.spec.directory, f"part-{self.task:05d}-{uuid.uuid4()}.arrow")
            self._writer = pa.ipc.new_file(self._path, table.schema, options=_WRITE_OPTIONS)
        rows = table.combine_chunks()  # one record batch per bucket
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            for batch in rows.slice(start, end - start).to_batches():
                self._writer.write_batch(batch)
            self._reports.append((self._path, int(ordered[start]), self._row_groups, end - start))
            self._row_groups += 1

    def close(self) -> list[tuple[str, int, int, int]]:
        """Writes what is buffered and closes the file; the reports of its record batches."""
        self._flush()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        return list(self._reports)

    def hand_off(self, batches: Iterable[pa.RecordBatch]
                 ) -> Generator[pa.RecordBatch, None, list[tuple[str, int, int, int]]]:
        """`add` over `batches`, yielding the rows it does not take, then `close`; returns the
        reports (`yield from` gives them). A failure on the way closes the file (`abort`) and is raised."""
        try:
            for batch in batches:
                rest = self.add(batch)
                if rest.num_rows:
                    yield rest
            return self.close()
        except BaseException:
            self.abort()
            raise

    def write_all(self, batches: Iterable[pa.RecordBatch]) -> list[tuple[str, int, int, int]]:
        """`hand_off` of a writer that takes every row (no `kinds`: nothing passes on); the reports."""
        if self._kinds is not None:
            raise ValueError("HandoffWriter.write_all: this writer takes only some kinds; hand_off passes the others on")
        for _ in self.hand_off(batches):
            pass  # (never reached: every row is taken)
        return list(self._reports)

    def abort(self) -> None:
        """Closes the file after a failure (its rows are in no report: nothing reads them)."""
        if self._writer is not None:
            try:
                self._writer.close()
            finally:
                self._writer = None

    @staticmethod
    def report_batch(reports: Sequence[tuple[str, int, int, int]]) -> pa.RecordBatch:
        """The reports as a RecordBatch of `REPORT_FIELDS`."""
        columns: list[list[Any]] = [[r[k] for r in reports] for k in range(len(REPORT_FIELDS))]
        return pa.RecordBatch.from_arrays([pa.array(c, type=t) for c, (_, t) in zip(columns, REPORT_FIELDS, strict=True)],
                                          names=[name for name, _ in REPORT_FIELDS])


Parts = dict[int, list[tuple[str, list[int]]]]
"""Per bucket: (file, its record batches of that bucket), files in path order."""


def parts_by_bucket(reports: Iterable[tuple[str, int, int, int]]) -> Parts:
    """The reports (path, bucket, batch index, rows) as `Parts` (batches without rows left out)."""
    acc: dict[int, dict[str, list[int]]] = {}
    for path, bucket, row_group, rows in reports:
        if rows:
            acc.setdefault(int(bucket), {}).setdefault(path, []).append(int(row_group))
    return {b: [(p, sorted(groups)) for p, groups in sorted(files.items())] for b, files in sorted(acc.items())}


def read_bucket(parts: Sequence[tuple[str, Sequence[int]]], schema: pa.Schema | None = None) -> pa.Table | None:
    """One bucket's rows from its files' record batches (None: none); `schema` unifies the files' tables."""
    tables = []
    for path, row_groups in parts:
        with _reader(path) as reader:
            tables.append(pa.Table.from_batches([reader.get_batch(i) for i in row_groups], schema=reader.schema))
    if not tables:
        return None
    if schema is not None:
        tables = [t.select(schema.names).cast(schema) for t in tables]
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def read_files(units: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The record batches of handoff files, for `mapInArrow` over rows of (path string, batches
    array<int>): each file's listed batches, in order (what Spark cannot read itself, e.g. to look
    at a pass's handed-off rows as a DataFrame)."""
    for unit in units:
        for path, indices in zip(unit.column("path").to_pylist(), unit.column("batches").to_pylist(), strict=True):
            with _reader(path) as reader:
                for i in indices:
                    yield reader.get_batch(i)


@contextlib.contextmanager
def _reader(path: str) -> Iterator[pa.ipc.RecordBatchFileReader]:
    """A handoff file open for reading its record batches by index (`_READ_OPTIONS`)."""
    with pa.OSFile(path) as source:
        yield pa.ipc.open_file(source, options=_READ_OPTIONS)
