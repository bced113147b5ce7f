"""The audit of one group: raw records in, table rows out, in one streaming pass.

Input: one group's raw `__consumer_offsets` records `(partition, offset, timestamp_ms, key, value)`
in log order (ascending partition, offset); a record at or before the last (partition, offset)
already seen is dropped as a duplicate (so overlapping re-reads are harmless). Output: a stream of
rows (`coordinator_audit.core.audit.rows`). Memory holds the group's state only: the last persisted group
snapshot, the open generation, and one summary per committed partition of the open window.

`GroupAuditor` is the dispatch by record type; the two concerns it feeds live beside it:
* offset commits (key types 0/1) take a fast path: the key is parsed once per topic-partition and
  cached, the value read by the codec's `offset_commit_value_fields`, and the open window's
  `OffsetSummary` updated in place (`coordinator_audit.core.audit.offsets` defines the rules,
  `coordinator_audit.core.audit.windows.OffsetWindow` tracks the open window);
* GroupMetadata records (type 2, values and tombstones) are decoded, checked, and replayed through
  the coordinator's load path (`_LoadPath`, the one place that calls it); the generation observer
  (`coordinator_audit.core.audit.observer`) then compares the new persisted state with the previous one
  (`causes`, `violations`), and the record closes the offset window and opens the next;
* KIP-848 consumer-group records (key types 3-8 and 16) are decoded and replayed by the group's
  `ConsumerGroupAudit` (`coordinator_audit.core.audit.consumer`: the broker's load path, epochs,
  ownership intervals, causes and violations); a group converted between the classic and the
  consumer protocol is one history: the `group_deleted` cause of the tombstone that ends one
  protocol's records is held until the group's next record, and dropped for a conversion cause
  when that record is the other protocol's (Kafka writes a conversion as one batch: the
  tombstone and the new protocol's records at one timestamp); `finish` reports a held cause as it
  stands, once: a run that ends with a tombstone reports the deletion, the state it saves after
  `finish` no longer holds it (a conversion split exactly there then shows both);
* the topic id an OffsetCommit value v4+ carries beside the topic name (every such commit, in log
  order: `learn_topic_id`) names the consumer group's topics, which its records give by id; a row
  written before its topic's id is named keeps the id as its topic (`topic_id` is always set);
* share-group records (key types 9-15) and streams-group records (17, 19-23) are decoded and
  replayed by the group's `ShareStreamsGroupAudit` (`coordinator_audit.core.audit.share_streams`);
* other record types (unknown types) are skipped and counted once they decode: a record of a type
  with a known layout (`GROUP_RECORD_TYPES`) that does not decode is
  quarantined like any other;
* a record that does not decode, belongs to another group, or breaks the load path's invariants
  is quarantined with an error naming partition, offset, field and byte position.

Whose state: the observer reads the group's state from each record's value itself
(`GroupSnapshot.from_value`) and never reads the coordinator's replayed state back. The replay is
a check (Kafka's `GroupMetadataManager#replay` / `ClassicGroup#fromRecord` rejecting a record makes
it quarantined) and keeps the port honest, but the audit needs what the coordinator does not keep:
the previous generation's members and assignments, decoded subscriptions and assignments, and the
records' log positions. `load_path=False` skips the replay and gives the same rows.

Offsets only: `observe=False` leaves the observer out (the offset path keeps only the
`offset_commits` rows and the `offset_regression` violations, which the offset windows give). Each
GroupMetadata record is still read, checked and replayed, so the windows open and close exactly
where a full audit's do; no generation, assignment, cause or observer violation row comes out, and
the state cannot be saved. With `embedded=False` too, the members' embedded subscription and
assignment bytes stay undecoded until an `offset_regression` names a partition's owners: they never
decide where a window opens (a part that does not decode only adds a quarantine row, which such a
caller does not keep).

Counts: records_in = duplicates + replayed + quarantined + skipped_other_type (consumer-, share-
and streams-group records count as group_records).

Incremental runs: `to_dict()` is a JSON-able snapshot of the state (the last GroupMetadata record
verbatim, the open generation row, ownership start times, the open window summaries, the last
offset per partition; and, when the group has them, the consumer group's replayed state
(`consumer_group`), a share or streams group's (`share_streams_group`), the topic names learnt (`topic_names`) and a held `group_deleted` cause
(`held_cause`)); `GroupAuditor.from_dict()` resumes. Rows of the open generation and window
are emitted when they close, or by `finish()` as they stand (ended_at / valid_to /
window_end_offset None), without closing them: auditing records[:k], saving, resuming with
records[k:] and finishing yields exactly the rows of one pass plus finish.
"""

from __future__ import annotations

import base64
import dataclasses
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from coordinator_audit.core.audit.consumer import CONSUMER_RECORD_TYPES, ConsumerGroupAudit, topic_id_text
from coordinator_audit.core.audit.observer import GenerationObserver, HistoryGap
from coordinator_audit.core.audit.offsets import OffsetSummary, Regression, TopicPartition
from coordinator_audit.core.audit.rows import (
    AuditRow,
    OffsetCommitRow,
    QuarantineRow,
    RebalanceCauseRow,
    ViolationRow,
)
from coordinator_audit.core.audit.share_streams import (
    SHARE_RECORD_TYPES,
    STREAMS_RECORD_TYPES,
    ShareStreamsGroupAudit,
)
from coordinator_audit.core.audit.snapshot import GroupSnapshot, check_unique_members
from coordinator_audit.core.audit.windows import OffsetWindow
from coordinator_audit.core.coordinator import CoordinatorConfig, GroupCoordinator
from coordinator_audit.core.errors import CoordinatorAuditError, RecordDecodeError
from coordinator_audit.core.records import (
    GROUP_RECORD_TYPES,
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    decode,
    offset_commit_key_fields,
    offset_commit_topic_id,
    offset_commit_value_fields,
)
from coordinator_audit.core.records_fast import GroupRecordReader

__all__ = ["NO_COUNTS", "STATE_FORMAT", "AtRest", "AuditCounts", "GroupAuditor", "HistoryGap", "audit_group"]

STATE_FORMAT = 2
"""Version of the `to_dict()` layout. 2: the saved GroupMetadata record's value
may be kept apart (`to_dict(record_value=False)`; the Spark job stores it once, as
`group_state.window_value`, instead of again in base64 inside the JSON). 1: the value always inside."""
_READ_FORMATS = (1, 2)
"""The layouts `from_dict` and `at_rest` read; they refuse others."""

_NO_POSITION = -(1 << 64)
RawRecord = tuple[int, int, int, Any, Any]
"""(partition, offset, timestamp_ms, key, value). Key and value are Any on purpose: the audit takes
whatever its input holds (bytes, bytearray, memoryview, None, or junk) and quarantines what is not
a readable record, naming it, instead of failing."""


@dataclass(frozen=True, slots=True)
class AuditCounts:
    """What happened to the records of one `GroupAuditor` (this run only; not part of the saved state).

    records_in = duplicates + replayed + quarantined + skipped_other_type, and
    replayed = group_records + offset_commits + offset_tombstones."""

    records_in: int
    duplicates: int
    replayed: int
    quarantined: int
    skipped_other_type: int
    group_records: int
    offset_commits: int
    offset_tombstones: int
    embedded_decode_errors: int


NO_COUNTS = AuditCounts(0, 0, 0, 0, 0, 0, 0, 0, 0)
"""The counts of an audit fed no record."""


@dataclass(frozen=True, slots=True)
class AtRest:
    """What an audit resumed from a saved state and fed no record reports at its end, read from the
    state without resuming it (`GroupAuditor.at_rest`): no GroupMetadata record is decoded or
    replayed, no row is built. Its rows and state are those of the saved state, unchanged."""

    group_id: str
    partitions: tuple[int, ...]
    """As `GroupAuditor.partitions`."""
    window: tuple[int | None, str | None, int | None, int | None]
    """As `GroupAuditor.window()`."""
    window_record_value: bytes | None
    """As `GroupAuditor.window_record_value()`."""


_LOAD_CONFIG = CoordinatorConfig()
"""The load path's configuration (Kafka's defaults; frozen, so one instance serves every auditor)."""


class _LoadPath:
    """Kafka's load path for the audited group: the coordinator's `replay`, called from here only.

    Offset commits do not pass through it (they take the audit's fast path; the coordinator's own
    offset map is not needed to explain the group), so it holds one group's metadata at most."""

    __slots__ = ("_coordinator",)

    def __init__(self) -> None:
        self._coordinator = GroupCoordinator(_LOAD_CONFIG)

    def replay(self, record: CoordinatorRecord) -> None:
        self._coordinator.replay(record)


class GroupAuditor:
    """Streams one group's records into audit rows; see the module docstring for the contract."""

    def __init__(self, group_id: str | None = None, *, load_path: bool = True, observe: bool = True,
                 assignment_runs: bool = False, embedded: bool = True) -> None:
        """`group_id` None takes the group of the first decodable record. `load_path=False` skips the
        coordinator's replay of GroupMetadata records (same rows; only a record the coordinator
        itself would reject beyond the audit's own checks goes unnoticed): a speed option.
        `observe=False`: the offset windows only (module docstring). `assignment_runs`: each
        member's `assignments` rows of one interval come as one `AssignmentRun` (for a consumer that
        builds columns; `AssignmentRun.rows()` are the rows). `embedded=False` (with `observe=False`
        only): the members' embedded subscription and assignment bytes are not decoded, so a part
        that does not decode is neither quarantined nor counted (`embedded_errors`); the window's
        snapshot is built only when an `offset_regression` row names the partition's owners. For a
        caller that keeps the offset_commits and violations rows alone (the offset path)."""
        if embedded is False and observe:
            raise ValueError("GroupAuditor: embedded=False needs observe=False "
                             "(the observer reads the decoded members)")
        self._group_id = group_id
        self._observe = observe
        self._embedded = embedded
        self._load = _LoadPath() if load_path else None
        self._reader = GroupRecordReader()
        self._positions: dict[int, int] = {}
        self._key_cache: dict[bytes, TopicPartition] = {}
        self._missing: dict[int, int] = {}  # per partition: offsets never read up to the last record fed
        self._observer = GenerationObserver(group_id)
        self._observer.runs = assignment_runs
        self._window = OffsetWindow()
        self._consumer: ConsumerGroupAudit | None = None  # the group's KIP-848 history, once it has a record
        self._topic_names: dict[str, str] = {}  # topic id text -> name, from OffsetCommit values v4+
        self._topic_ids: dict[bytes, str] = {}  # the same, by the id's 16 bytes (what a commit holds)
        self._share_streams: ShareStreamsGroupAudit | None = None  # a share or streams group's history
        self._held: RebalanceCauseRow | None = None  # a group_deleted cause waiting for the group's next record
        self._held_protocol = "classic"  # whose tombstone `_held` is: "classic" or "consumer"
        self._held_reported = False  # `finish` gave `_held` as it stands: not again, and not saved
        self._converting: int | None = None  # a consumer group's last epoch, while it becomes a classic group
        # this run's counts
        self._records_in = self._duplicates = self._quarantined = self._skipped = 0
        self._group_records = self._commits = self._offset_tombstones = self._embedded_errors = 0

    # ------------------------------------------------------------------------------------------
    # public API

    @property
    def group_id(self) -> str | None:
        """The audited group (None until the first decodable record when not given)."""
        return self._group_id

    @group_id.setter
    def group_id(self, group_id: str | None) -> None:
        self._group_id = self._observer.group_id = group_id

    @property
    def counts(self) -> AuditCounts:
        """This run's counts; final once `feed` has been exhausted."""
        replayed = self._group_records + self._commits + self._offset_tombstones
        return AuditCounts(self._records_in, self._duplicates, replayed, self._quarantined, self._skipped,
                           self._group_records, self._commits, self._offset_tombstones, self._embedded_errors)

    def feed(self, records: Iterable[RawRecord]) -> Iterator[AuditRow]:
        """Audits `records` (more of the same group, in log order) and yields the rows they close."""
        cache = self._key_cache
        positions = self._positions
        window = self._window.summaries
        stable = self._window.stable
        value_fields = offset_commit_value_fields
        of_commit = OffsetSummary.of_commit
        topic_ids = self._topic_ids
        n_in = dups = commits = tombs = 0
        held = self._held is not None
        last_p: int | None = None
        last_o = _NO_POSITION
        try:
            for p, o, ts, key, value in records:
                n_in += 1
                if p != last_p:
                    if last_p is not None:
                        positions[last_p] = last_o
                    last_o = positions.get(p, _NO_POSITION)
                    last_p = p
                if o <= last_o:
                    dups += 1
                    continue
                last_o = o
                if held:
                    yield from self._release_held(key, value)
                    held = self._held is not None
                try:
                    tp = cache.get(key)
                except TypeError:  # an unhashable bytes-like key (bytearray): the slow path copies it
                    tp = None
                if tp is None:
                    learned = self._slow_path(p, o, ts, key, value)
                    if not isinstance(learned, tuple):  # the rows of a record handled there
                        window = self._window.summaries
                        stable = self._window.stable
                        held = self._held is not None
                        yield from learned
                        continue
                    tp = learned
                if value is None:
                    s = window.get(tp)
                    if s is None:
                        s = window[tp] = OffsetSummary(p, o)
                    s.tombstone(o)
                    tombs += 1
                    continue
                try:
                    version, off, _, _, cts, _ = value_fields(value)
                except RecordDecodeError as exc:
                    self._quarantined += 1
                    yield self._quarantine_row(p, o, ts, key, value, str(exc.at(f"partition {p} offset {o}")),
                                               replayed=False)
                    continue
                if version >= 4:
                    topic_id = offset_commit_topic_id(value)
                    if topic_id is not None and topic_ids.get(topic_id) != tp[0]:
                        self.learn_topic_id(topic_id, tp[0])
                s = window.get(tp)
                if s is None:
                    window[tp] = of_commit(off, cts, p, o)
                else:
                    regression = s.commit(off, cts, o, stable)
                    if regression is not None:
                        yield self._window.regression_row(self._group_id or "", tp, regression, off, cts, p, o, ts)
                commits += 1
        finally:
            if last_p is not None:
                positions[last_p] = last_o
            self._records_in += n_in
            self._duplicates += dups
            self._commits += commits
            self._offset_tombstones += tombs

    def merge_stretch(self, topic: str, partition: int, stretch: OffsetSummary, *,
                      first_commit_source_offset: int | None, first_commit_record_ts: int | None) -> list[AuditRow]:
        """Applies a stretch of this group's offset records summarised elsewhere (the Spark job's
        scan kernel: consecutive records of one topic-partition in log order, none of the group's
        other records among them) as if they had been fed one by one: the open window's
        summary of the topic-partition merges it (`OffsetSummary.merge`). In a Stable window the
        stretch's own regressions count (their violation rows are `stretch_regression`'s) and a
        first commit below the window's last one is one more `offset_regression`, whose row is
        returned; elsewhere neither counts. `first_commit_source_offset` / `first_commit_record_ts`:
        the log offset and timestamp of the stretch's first commit (None: tombstones only). The
        stretch's records are not in this run's counts (the job counts them where it summarised them).

        `stretch` becomes part of the auditor's state: the caller must not reuse it."""
        w = self._window
        stable = w.stable
        if not stable:
            stretch.regressions = 0
        tp = (topic, partition)
        p = stretch.source_partition
        self.reached(p, stretch.last_source_offset)
        before = w.summaries.get(tp)
        if before is None:
            w.summaries[tp] = stretch
            return []
        w.summaries[tp] = before.merge(stretch, stable=stable)
        if not before.steps_back(stretch, stable=stable):
            return []
        first = stretch.first_offset
        assert first is not None  # a step back starts with a commit
        assert before.last_commit_timestamp is not None and before.last_commit_source_offset is not None
        assert stretch.first_commit_timestamp is not None and first_commit_source_offset is not None
        back = Regression(before.last_offset, before.last_commit_timestamp, before.last_commit_source_offset)
        return [w.regression_row(self._group_id or "", tp, back, first, stretch.first_commit_timestamp, p,
                                 first_commit_source_offset, first_commit_record_ts or 0)]

    def reached(self, partition: int, offset: int) -> None:
        """Notes that this group's records were read up to `offset` of `partition` (what
        `merge_stretch` does for a stretch's last record): for a caller that holds stretches back
        and merges them later, or writes their rows itself (the Spark job's replay)."""
        if self._positions.get(partition, _NO_POSITION) < offset:
            self._positions[partition] = offset

    def stretch_regression(self, topic: str, partition: int, regression: Regression, offset: int,
                           commit_timestamp: int, source_partition: int, source_offset: int,
                           record_ts: int) -> list[AuditRow]:
        """The `offset_regression` row of a backwards commit inside a stretch `merge_stretch` took
        (the commit at `source_partition`/`source_offset`, stepping back from `regression`), when
        the open window is Stable; none otherwise (the window decides, as in `feed`)."""
        w = self._window
        if not w.stable:
            return []
        return [w.regression_row(self._group_id or "", (topic, partition), regression, offset, commit_timestamp,
                                 source_partition, source_offset, record_ts)]

    def open_summaries(self) -> dict[TopicPartition, OffsetSummary]:
        """The open window's summaries (the auditor's own: read, do not change)."""
        return self._window.summaries

    def restore_summaries(self, summaries: dict[TopicPartition, OffsetSummary]) -> None:
        """Puts back the open window's summaries kept apart from `to_dict(summaries=False)`."""
        self._window.summaries = summaries

    def summaries_in_log_order(self) -> None:
        """Orders the open window's summaries by their first records, as merging every stretch in
        log order leaves them: for a caller that merged some stretches before earlier ones (held
        back, then merged)."""
        w = self._window
        w.summaries = dict(sorted(w.summaries.items(),
                                  key=lambda item: (item[1].source_partition, item[1].first_source_offset)))

    def last_commit_offsets(self, rows: Iterable[OffsetCommitRow]) -> list[int | None]:
        """The log offset of the last commit of each open window's `offset_commits` row of `rows`
        (those `finish` gave), as `to_dict` would save it with the window's summaries."""
        summaries = self._window.summaries
        return [summaries[(r.topic, r.partition)].last_commit_source_offset for r in rows]

    @property
    def partitions(self) -> tuple[int, ...]:
        """The `__consumer_offsets` partitions this group's records were read from (normally one)."""
        return tuple(sorted(self._positions))

    def window(self) -> tuple[int | None, str | None, int | None, int | None]:
        """The open offset window: (generation_id, window_state, start partition, start offset),
        all None before the group's first GroupMetadata record."""
        w = self._window
        return w.generation_id, w.state, w.start_partition, w.start_offset

    def window_record_value(self) -> bytes | None:
        """The GroupMetadata value that opened the current window (None for a tombstone or none)."""
        rec = self._observer.record
        return rec[4] if rec is not None else None

    def missing(self, partition: int) -> int | None:
        """The running count of offsets never read last told for `partition` (`observe_missing`)."""
        return self._missing.get(partition)

    def observe_missing(self, partition: int, missing: int, offset: int, timestamp: int) -> None:
        """Tells the auditor that, up to the next record it is fed (at `offset` of `partition`),
        `missing` offsets of that partition were never read since the chain of runs began (a
        running count the job keeps); when that grew since the group's previous record, the records
        in between may be lost: `note_gap`."""
        last = self._missing.get(partition)
        self._missing[partition] = missing
        if last is not None and missing > last:
            self.note_gap(HistoryGap(partition, self._positions.get(partition), offset, missing - last, timestamp))

    def note_gap(self, gap: HistoryGap) -> None:
        """Records that `gap` lies between what this auditor has seen and the records fed next: the
        next GroupMetadata record of the group gets a `history_gap` cause (primary when it opens a
        new generation: what happened in between is unknown)."""
        self._observer.note_gap(gap)

    def gap_rows(self) -> list[AuditRow]:
        """The `history_gap` cause of a gap that no later record of the group explained (the
        group wrote no GroupMetadata record after it), on the current generation, not primary;
        the gap is consumed."""
        return self._observer.gap_rows()

    def finish(self, *, generation: bool = True) -> list[AuditRow]:
        """Rows of what is still open (the current generation, its assignments, the open window),
        as they stand; the state is left as it was, so more records may follow. `generation=False`:
        the open window's rows only (`generation_rows` are the others)."""
        rows = self.generation_rows() if generation else []
        if self._held is not None:
            rows.append(self._held)
            self._held_reported = True
        rows.extend(self._window.rows(self._group_id or "", end_offset=None))
        return rows

    def generation_rows(self) -> list[AuditRow]:
        """The open generation's row and its assignments as they stand (`finish`'s first rows): only
        a fed record changes them (a GroupMetadata record the generation observer reads, a
        consumer-group record)."""
        rows = self._observer.open_rows()
        if self._consumer is not None:
            rows.extend(self._consumer.open_rows())
        if self._share_streams is not None:
            rows.extend(self._share_streams.open_rows())
        return rows

    def to_dict(self, *, summaries: bool = True, record_value: bool = True) -> dict[str, Any]:
        """The audit state as JSON-able data (for a later run to resume with `from_dict`).
        `summaries=False` leaves the open window's summaries out (a caller that keeps them apart,
        as the Spark job's `group_state.offset_windows` does, puts them back with
        `restore_summaries`); `record_value=False` leaves out the saved GroupMetadata record's value
        (`window_record_value()`; a caller that keeps it apart, as `group_state.window_value` does,
        gives it back to `from_dict` and `at_rest`)."""
        if not self._observe:
            raise ValueError(f"group {self._group_id!r}: an offsets-only audit (observe=False) has no state to save")
        state = {
            "format": STATE_FORMAT,
            "group_id": self._group_id,
            "positions": [[p, o] for p, o in sorted(self._positions.items())],
            "missing": [[p, n] for p, n in sorted(self._missing.items())],
            **self._observer.to_dict(record_value=record_value),
            "window": self._window.to_dict(summaries=summaries),
        }
        # a classic group's state keeps its keys; these come only when there is something to keep
        if self._consumer is not None:
            state["consumer_group"] = self._consumer.to_dict()
        if self._share_streams is not None:
            state["share_streams_group"] = self._share_streams.to_dict()
        if self._topic_names:
            state["topic_names"] = dict(sorted(self._topic_names.items()))
        if self._held is not None and not self._held_reported:
            state["held_cause"] = {"row": dataclasses.asdict(self._held), "protocol": self._held_protocol}
        return state

    @staticmethod
    def _checked(data: dict[str, Any]) -> None:
        if data.get("format") not in _READ_FORMATS:
            raise ValueError(f"audit state format {data.get('format')!r} is not one of "
                             f"{', '.join(map(str, _READ_FORMATS))}")

    @staticmethod
    def _saved_value(data: dict[str, Any], record_value: bytes | None) -> bytes:
        """The saved GroupMetadata record's value: inside the state, else `record_value`."""
        rec = data["group_record"]
        if "value" in rec:
            return base64.b64decode(rec["value"])
        if record_value is None:
            raise ValueError(f"audit state of group {data['group_id']!r}: its GroupMetadata record's value is kept "
                             f"apart (to_dict(record_value=False)) and none was given (record_value)")
        return record_value

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, load_path: bool = True, observe: bool = True,
                  assignment_runs: bool = False, record_value: bytes | None = None) -> GroupAuditor:
        """Resumes an audit from `to_dict()` output; the coordinator's load path is replayed with the
        saved GroupMetadata record so it holds the same state as before (`observe=False`: the
        offset windows only, from there on; `assignment_runs` as in the constructor). `record_value`:
        the record's value when the state keeps it apart (`to_dict(record_value=False)`)."""
        cls._checked(data)
        self = cls(data["group_id"], load_path=load_path, observe=observe)
        self._positions = {int(p): int(o) for p, o in data["positions"]}
        self._missing = {int(p): int(n) for p, n in data.get("missing", [])}
        snap: GroupSnapshot | None = None
        record: tuple[int, int, int, bytes, bytes] | None = None
        rec = data["group_record"]
        if rec is not None:
            key, value = base64.b64decode(rec["key"]), cls._saved_value(data, record_value)
            # the byte-level reader first, as `_group_record` reads a fed record (the codec when it
            # declines): a resumed group's next GroupMetadata record then reuses its members' headers
            decoded = self._reader.read(key, value) or decode(key, value)
            if self._load is not None:
                self._load.replay(decoded)
            if not isinstance(decoded.key, GroupMetadataKey) or not isinstance(decoded.value, GroupMetadataValue):
                raise ValueError(f"audit state of group {data['group_id']!r}: the saved group_record is a "
                                 f"{decoded.record_type_name} record, not a GroupMetadata value")
            snap = GroupSnapshot.from_value(decoded.value, group_id=decoded.key.group)
            record = (rec["partition"], rec["offset"], rec["timestamp"], key, value)
        self._observer = GenerationObserver.from_dict(data, snap, record)
        self._observer.runs = assignment_runs
        self._window = OffsetWindow.from_dict(data["window"], snap)
        self._topic_names = dict(data.get("topic_names", {}))
        self._topic_ids = {_topic_id_bytes(t): name for t, name in self._topic_names.items()}
        consumer = data.get("consumer_group")
        if consumer is not None:
            self._consumer = ConsumerGroupAudit.from_dict(data["group_id"], consumer, self._topic_names)
        share_streams = data.get("share_streams_group")
        if share_streams is not None:
            self._share_streams = ShareStreamsGroupAudit.from_dict(data["group_id"], share_streams, self._topic_names)
        held = data.get("held_cause")
        if held is not None:
            self._held, self._held_protocol = RebalanceCauseRow(**held["row"]), held["protocol"]
        return self

    @classmethod
    def at_rest(cls, data: dict[str, Any], *, record_value: bytes | None = None) -> AtRest:
        """What `from_dict(data, record_value=record_value)` would report after `finish()` with no
        record fed (`AtRest`), without resuming: a run that reads none of a group's records carries
        its state forward at the cost of reading the JSON. A state saved with `to_dict(summaries=
        False)` is its own `to_dict(summaries=False)` after resuming, and its open summaries (kept
        apart) are unchanged."""
        cls._checked(data)
        w = OffsetWindow.from_dict(data["window"], None)
        rec = data["group_record"]
        return AtRest(data["group_id"], tuple(sorted(int(p) for p, _ in data["positions"])),
                      (w.generation_id, w.state, w.start_partition, w.start_offset),
                      cls._saved_value(data, record_value) if rec is not None else None)

    # ------------------------------------------------------------------------------------------
    # slow path: first record of a topic-partition, GroupMetadata, anything unusual

    def _slow_path(self, p: int, o: int, ts: int, key: Any, value: Any) -> tuple[str, int] | list[AuditRow]:
        """Either the (topic, partition) of a newly learnt offset-commit key of this group (the caller
        then handles the record on the fast path), or the rows of a record handled here."""
        if isinstance(key, bytearray | memoryview):
            key = bytes(key)
        if type(key) is not bytes or len(key) < 2:
            return self._undecodable(p, o, ts, key, value, None)
        rtype = (key[0] << 8 | key[1]) - (0x10000 if key[0] & 0x80 else 0)
        if rtype in (0, 1):
            try:
                group, topic, partition = offset_commit_key_fields(key)
            except RecordDecodeError as exc:
                return self._quarantine(p, o, ts, key, value, str(exc.at(f"partition {p} offset {o}")), rtype)
            if self._group_id is None:
                self.group_id = group
            elif group != self._group_id:
                return self._quarantine(p, o, ts, key, value, self._wrong_group(p, o, "offset commit", group), rtype)
            tp = (topic, partition)
            self._key_cache[key] = tp
            return tp
        if rtype == 2:
            return self._group_record(p, o, ts, key, value)
        if rtype in CONSUMER_RECORD_TYPES:
            return self._consumer_record(p, o, ts, key, value, rtype)
        if rtype in SHARE_RECORD_TYPES or rtype in STREAMS_RECORD_TYPES:
            return self._share_streams_record(p, o, ts, key, value, rtype)
        if rtype in GROUP_RECORD_TYPES:
            try:
                decode(key, value)
            except RecordDecodeError as exc:
                return self._quarantine(p, o, ts, key, value, str(exc.at(f"partition {p} offset {o}")), rtype)
        self._skipped += 1
        return []

    def _undecodable(self, p: int, o: int, ts: int, key: Any, value: Any, rtype: int | None) -> list[AuditRow]:
        try:
            decode(key, value)
        except RecordDecodeError as exc:
            return self._quarantine(p, o, ts, key, value, str(exc.at(f"partition {p} offset {o}")), rtype)
        return self._quarantine(p, o, ts, key, value, f"partition {p} offset {o}: key is not bytes", rtype)

    def _wrong_group(self, p: int, o: int, what: str, group: str) -> str:
        return f"partition {p} offset {o}: {what} record of group {group!r} in the audit of group {self._group_id!r}"

    def _quarantine(self, p: int, o: int, ts: int, key: Any, value: Any, error: str,
                    rtype: int | None) -> list[AuditRow]:
        self._quarantined += 1
        return [self._quarantine_row(p, o, ts, key, value, error, replayed=False, rtype=rtype)]

    def _quarantine_row(self, p: int, o: int, ts: int, key: Any, value: Any, error: str, *, replayed: bool,
                        rtype: int | None = 0) -> QuarantineRow:
        kb = bytes(key) if isinstance(key, bytes | bytearray | memoryview) else b""
        vb = bytes(value) if isinstance(value, bytes | bytearray | memoryview) else None
        if rtype == 0 and len(kb) >= 2:  # the fast path does not know the type: read it
            rtype = int.from_bytes(kb[:2], "big", signed=True)
        return QuarantineRow(self._group_id, p, o, ts, kb, vb, error, replayed, rtype)

    def _group_record(self, p: int, o: int, ts: int, key: bytes, value: Any) -> list[AuditRow]:
        where = f"partition {p} offset {o}"
        rec = self._reader.read(key, value) if value is None or type(value) is bytes else None
        if rec is None:
            try:
                rec = decode(key, value)
            except RecordDecodeError as exc:
                return self._quarantine(p, o, ts, key, value, str(exc.at(where)), 2)
        assert isinstance(rec.key, GroupMetadataKey)  # key type 2, read by the codec
        group = rec.key.group
        if self._group_id is None:
            self.group_id = group
        elif group != self._group_id:
            return self._quarantine(p, o, ts, key, value, self._wrong_group(p, o, "GroupMetadata", group), 2)
        snap: GroupSnapshot | None = None
        persisted = rec.value
        try:
            if isinstance(persisted, GroupMetadataValue):
                if self._embedded:
                    # the open window's snapshot is the previous record's (the observer's, when it observes)
                    snap = GroupSnapshot.from_value(persisted, group_id=group, previous=self._window.snapshot)
                elif len(persisted.members) > 1:  # what from_value checks besides decoding
                    check_unique_members(persisted.members, group)
            if self._load is not None:
                self._load.replay(rec)
        except CoordinatorAuditError as exc:
            return self._quarantine(p, o, ts, key, value, f"{where}: the load path rejects the record: {exc}", 2)
        self._group_records += 1
        rows: list[AuditRow] = []
        if rec.key_trailing or rec.value_trailing:
            rows.append(self._quarantine_row(
                p, o, ts, key, value, f"{where}: {len(rec.key_trailing)} trailing key byte(s) and "
                f"{len(rec.value_trailing)} trailing value byte(s) ignored (as Kafka's readers do)", replayed=True,
                rtype=2))
        if snap is not None:
            for m in snap.members:
                if m.errors:
                    self._embedded_errors += len(m.errors)
                    rows.append(self._quarantine_row(p, o, ts, key, value, f"{where}: " + "; ".join(m.errors),
                                                     replayed=True, rtype=2))
        # the record closes the offset window (its rows first), the observer compares the states,
        # and the record opens the next window
        window = self._window
        rows.extend(window.rows(group, end_offset=o))
        if self._observe:
            observed = self._observer.observe(p, o, ts, key, value, snap, window.summaries)
            if snap is None:
                self._hold_deletion(observed, "classic")
            elif self._converting is not None:
                observed = self._converted_to_classic(observed, snap.generation, p, o, ts)
            rows.extend(observed)
        self._converting = None
        if snap is not None:
            window.open(snap.generation, snap.state, o, p, snap)
        elif isinstance(persisted, GroupMetadataValue):  # not `embedded`: generation and state as from_value gives them
            window.open(persisted.generation, "Stable" if persisted.members else "Empty", o, p, None,
                        deferred=partial(GroupSnapshot.from_value, persisted, group_id=group))
        else:
            window.open(None, "Dead", o, p, None)
        return rows


    # ------------------------------------------------------------------------------------------
    # KIP-848 consumer groups, and conversions between the protocols

    def learn_topic_id(self, topic_id: bytes, topic: str) -> None:
        """Names the topic id `topic_id` (16 bytes) `topic`: what an OffsetCommit value v4+ of the
        group says (its tagged `TopicId` beside the key's topic name). The replay names a consumer
        group's topic ids with what it has learnt when it writes a row (`ConsumerGroupAudit`);
        the Spark job's single pass hands over the ids of the commits it summarises this way."""
        self._topic_ids[topic_id] = topic
        self._topic_names[topic_id_text(uuid.UUID(bytes=topic_id))] = topic

    def _consumer_record(self, p: int, o: int, ts: int, key: bytes, value: Any, rtype: int) -> list[AuditRow]:
        try:
            rec = decode(key, value)
        except RecordDecodeError as exc:
            return self._quarantine(p, o, ts, key, value, str(exc.at(f"partition {p} offset {o}")), rtype)
        group = getattr(rec.key, "group_id", None)
        assert isinstance(group, str)  # every consumer-group key has one
        if self._group_id is None:
            self.group_id = group
        elif group != self._group_id:
            return self._quarantine(p, o, ts, key, value,
                                    self._wrong_group(p, o, rec.record_type_name, group), rtype)
        self._group_records += 1
        if not self._observe:
            return []
        if self._consumer is None:
            self._consumer = ConsumerGroupAudit(group, self._topic_names)
        rows: list[AuditRow] = []
        snap = self._observer.snapshot
        if value is not None and snap is not None and not (snap.protocol_type is None and snap.is_empty):
            # GroupMetadataManager#getOrMaybeCreatePersistedConsumerGroup: only a simple classic group
            # (no protocol type, no member) gives way to a consumer group without a tombstone
            rows.append(ViolationRow(
                group, snap.generation, "load_refused", None, None, (),
                f"a {rec.record_type_name} record while the group is a classic group (generation "
                f"{snap.generation}, no GroupMetadata tombstone before it): the broker's load path refuses it",
                f"partition {p} offset {o}", ts, p, o))
        rows.extend(self._consumer.apply(rec, p, o, ts))
        if rtype == 3 and value is None:
            self._hold_deletion(rows, "consumer")
        return rows

    def _share_streams_record(self, p: int, o: int, ts: int, key: bytes, value: Any, rtype: int) -> list[AuditRow]:
        """A share- or streams-group record: decoded (or quarantined) and replayed by the group's
        `ShareStreamsGroupAudit`."""
        try:
            rec = decode(key, value)
        except RecordDecodeError as exc:
            return self._quarantine(p, o, ts, key, value, str(exc.at(f"partition {p} offset {o}")), rtype)
        group = getattr(rec.key, "group_id", None)
        assert isinstance(group, str)  # every share and streams key has one
        if self._group_id is None:
            self.group_id = group
        elif group != self._group_id:
            return self._quarantine(p, o, ts, key, value,
                                    self._wrong_group(p, o, rec.record_type_name, group), rtype)
        self._group_records += 1
        if not self._observe:
            return []
        group_type = "share" if rtype in SHARE_RECORD_TYPES else "streams"
        if self._share_streams is None:
            self._share_streams = ShareStreamsGroupAudit(group, group_type, self._topic_names)
        elif self._share_streams.group_type != group_type:
            return self._quarantine(p, o, ts, key, value,
                                    f"partition {p} offset {o}: a {rec.record_type_name} record of group {group!r}, "
                                    f"which is a {self._share_streams.group_type} group", rtype)
        return self._share_streams.apply(rec, p, o, ts)

    def _hold_deletion(self, rows: list[AuditRow], protocol: str) -> None:
        """Takes the `group_deleted` cause out of a tombstone's `rows` and holds it for the group's
        next record (`_release_held`)."""
        for i, row in enumerate(rows):
            if isinstance(row, RebalanceCauseRow) and row.cause == "group_deleted":
                del rows[i]
                self._held = row
                self._held_protocol = protocol
                self._held_reported = False
                return

    def _release_held(self, key: Any, value: Any) -> list[AuditRow]:
        """Before the group's next record after a held `group_deleted`: a record of the other
        protocol with a value is the conversion (`GroupMetadataManager#convertToConsumerGroup` /
        `#convertToClassicGroup` write the old group's tombstones, then the new group's records in
        one batch), and the cause is dropped; any other record releases it."""
        held = self._held
        assert held is not None
        rtype = (key[0] << 8 | key[1]) if isinstance(key, bytes) and len(key) >= 2 else None
        if value is not None:
            was_classic = self._held_protocol == "classic"
            if was_classic and rtype in CONSUMER_RECORD_TYPES:
                if self._consumer is None:
                    self._consumer = ConsumerGroupAudit(self._group_id or "", self._topic_names)
                self._consumer.converted_from_classic(held.generation_id)
                self._held = None
                return []
            if not was_classic and rtype == 2:
                self._converting = held.generation_id if held.generation_id is not None else -1
                self._held = None
                return []
        self._held = None
        return [] if self._held_reported else [held]

    def _converted_to_classic(self, rows: list[AuditRow], generation: int, p: int, o: int,
                              ts: int) -> list[AuditRow]:
        """The observer's rows of the GroupMetadata record a consumer group became (its epoch is the
        classic generation, `ClassicGroup#fromConsumerGroup`): its causes, read as a group's first
        record, give way to `converted_to_classic`."""
        epoch = self._converting if self._converting is not None and self._converting >= 0 else None
        out: list[AuditRow] = [r for r in rows if not (isinstance(r, RebalanceCauseRow) and r.generation_id == generation)]
        out.append(RebalanceCauseRow(
            self._group_id or "", generation, epoch, "converted_to_classic", None, None,
            f"the consumer group{f' (epoch {epoch})' if epoch is not None else ''} became a classic group: its "
            f"last consumer-protocol member left and the broker converted the group (the consumer group's "
            f"tombstones, then a GroupMetadata record)", f"partition {p} offset {o}", True, ts, p, o))
        if epoch is not None:
            self._observer.set_missing_generations(max(generation - epoch - 1, 0))
        return out


def _topic_id_bytes(text: str) -> bytes:
    """The 16 bytes of a topic id in Kafka's text form (`topic_id_text`)."""
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def audit_group(records: Iterable[RawRecord], *, group_id: str | None = None,
                state: dict[str, Any] | None = None) -> Iterator[AuditRow]:
    """One call for the whole audit of a group: the rows of `records` and then what is still open.

    `state` (from `GroupAuditor.to_dict()`) resumes an earlier audit. Use `GroupAuditor` directly
    to read the counts or save the state afterwards."""
    auditor = GroupAuditor.from_dict(state) if state is not None else GroupAuditor(group_id)
    yield from auditor.feed(records)
    yield from auditor.finish()
