"""The `__consumer_offsets` log as the simulator writes it: raw records with contiguous offsets.

A record is the tuple `(partition, offset, timestamp_ms, key, value)` (value None = tombstone),
the same shape the audit reads. Offsets are contiguous per partition from `first_offset`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

from coordinator_audit.core.errors import ScenarioError


class LogRecord(NamedTuple):
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes
    value: bytes | None


class LogWriter:
    """Appends records to the partitions of a simulated `__consumer_offsets` topic."""

    def __init__(self, *, first_offset: int = 0) -> None:
        self._next: dict[int, int] = {}
        self._last_ts: dict[int, int] = {}
        self._first = first_offset
        self.records: list[LogRecord] = []

    def append(self, partition: int, timestamp_ms: int, key: bytes, value: bytes | None) -> LogRecord:
        if not isinstance(key, bytes | bytearray) or not key:
            raise ScenarioError(f"partition {partition}: a record needs non-empty key bytes, got {key!r}")
        if timestamp_ms < self._last_ts.get(partition, timestamp_ms):
            raise ScenarioError(f"partition {partition}: timestamp {timestamp_ms} goes back in time "
                                f"(last {self._last_ts[partition]})")
        offset = self._next.get(partition, self._first)
        rec = LogRecord(partition, offset, timestamp_ms, bytes(key), None if value is None else bytes(value))
        self._next[partition] = offset + 1
        self._last_ts[partition] = timestamp_ms
        self.records.append(rec)
        return rec

    def extend(self, partition: int, timestamp_ms: int, pairs: Iterable[tuple[bytes, bytes | None]]
               ) -> list[LogRecord]:
        return [self.append(partition, timestamp_ms, k, v) for k, v in pairs]

    def next_offset(self, partition: int) -> int:
        return self._next.get(partition, self._first)

    def __iter__(self) -> Iterator[LogRecord]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)


def drop_prefix(records: list[LogRecord], count: int) -> list[LogRecord]:
    """What a reader sees after log cleaning removed the first `count` records (offsets keep their values)."""
    if count < 0 or count > len(records):
        raise ScenarioError(f"cannot drop {count} of {len(records)} records")
    return records[count:]
