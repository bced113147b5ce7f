"""The audit of one group: raw records in, table rows out, in one streaming pass.

Input: one group's raw `__consumer_offsets` records `(partition, offset, timestamp_ms, key, value)`
in log order (ascending partition, offset); a record at or before the last (partition, offset)
already seen is dropped as a duplicate (so overlapping re-reads are harmless). Output: a stream of
rows (`coordinator_core.audit.rows`). Memory holds the group's state only: the last persisted group
snapshot, the open generation, and one summary per committed partition of the open window.

Routing:
* offset commits (key types 0/1) take a fast path: the key is parsed once per topic-partition and
  cached, the value read by the codec's `offset_commit_value_fields`, the window summary updated in
  place (`coordinator_core.audit.offsets` defines windows and regressions);
* GroupMetadata records (type 2, values and tombstones) are decoded, checked, and replayed through
  the coordinator's load path (`_LoadPath`, the one place that calls it); the audit observer then
  compares the new persisted state with the previous one (`causes`, `violations`);
* other record types (KIP-848, share, streams groups) are skipped and counted;
* a record that does not decode, belongs to another group, or breaks the load path's invariants
  is quarantined with an error naming partition, offset, field and byte position.

Counts: records_in = duplicates + replayed + quarantined + skipped_other_type.

Incremental runs: `to_dict()` is a JSON-able snapshot of the state (the last GroupMetadata record
verbatim, the open generation row, ownership start times, the open window summaries, the last
offset per partition); `GroupAuditor.from_dict()` resumes. Rows of the open generation and window
are emitted when they close, or by `finish()` as they stand (ended_at / valid_to /
window_end_offset None), without closing them: auditing records[:k], saving, resuming with
records[k:] and finishing yields exactly the rows of one pass plus finish.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from coordinator_core.audit.causes import (
    Cause,
    new_generation_causes,
    same_generation_changes,
)
from coordinator_core.audit.fastpath import GroupRecordReader
from coordinator_core.audit.offsets import (
    COMMITS,
    FIRST_OFFSET,
    FIRST_TS,
    LAST_COMMIT_SRC,
    LAST_OFFSET,
    LAST_SRC,
    LAST_TS,
    REGRESSIONS,
    TOMBSTONES,
    new_summary,
    summary_row,
)
from coordinator_core.audit.rows import (
    AuditRow,
    GenerationRow,
    QuarantineRow,
    RebalanceCauseRow,
    ViolationRow,
    make_assignment_row,
    make_cause_row,
    make_generation_row,
)
from coordinator_core.audit.snapshot import GroupSnapshot, MemberView
from coordinator_core.audit.violations import (
    Violation,
    assignment_violations,
    ownership_violations,
    replaced_member_moves,
    replacement_violations,
)
from coordinator_core.coordinator import CoordinatorConfig, GroupCoordinator
from coordinator_core.errors import CoordinatorAuditError, RecordDecodeError
from coordinator_core.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    decode,
    offset_commit_key_fields,
    offset_commit_value_fields,
)

__all__ = ["STATE_FORMAT", "AuditCounts", "GroupAuditor", "HistoryGap", "audit_group"]

STATE_FORMAT = 1
"""Version of the `to_dict()` layout; `from_dict` refuses others."""

_NO_POSITION = -(1 << 64)
RawRecord = tuple[int, int, int, Any, Any]


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


@dataclass(frozen=True, slots=True)
class HistoryGap:
    """Offsets of a `__consumer_offsets` partition that the audit never read: `count` offsets
    between `after_offset` and `before_offset` (a run's input does not continue where the previous
    run stopped, or has holes: compaction, retention, a missing export). The group's history across
    them cannot be known, only labelled (`history_gap` causes)."""

    partition: int
    after_offset: int | None
    """The last offset read before the gap (None: unknown)."""
    before_offset: int
    """The first offset read after it."""
    count: int
    timestamp: int
    """When the gap was noticed (epoch ms): the time of a gap row that no later record of the group
    explains."""

    def describe(self) -> str:
        where = (f"between offsets {self.after_offset} and {self.before_offset}" if self.after_offset is not None
                 else f"before offset {self.before_offset}")
        return (f"{self.count} offset(s) of partition {self.partition} {where} were never read (compaction, "
                f"retention or a missing export): the group's history across them is unknown")

    def evidence(self) -> str:
        return f"partition {self.partition}: {self.count} offset(s) missing before offset {self.before_offset}"


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

    def __init__(self, group_id: str | None = None, *, load_path: bool = True) -> None:
        """`group_id` None takes the group of the first decodable record. `load_path=False` skips the
        coordinator's replay of GroupMetadata records (same rows; only a record the coordinator
        itself would reject beyond the audit's own checks goes unnoticed): a speed option."""
        self.group_id = group_id
        self._load = _LoadPath() if load_path else None
        self._reader = GroupRecordReader()
        self._positions: dict[int, int] = {}
        self._key_cache: dict[bytes, tuple[str, int]] = {}
        # persisted group state
        self._phase = "none"  # "none" (no GroupMetadata yet), "live", "deleted" (last was a tombstone)
        self._snap: GroupSnapshot | None = None
        self._snap_record: tuple[int, int, int, bytes, bytes] | None = None
        self._gen_row: dict[str, Any] | None = None
        self._valid_from: dict[str, tuple[int, int, int]] = {}
        self._instances: dict[str, str] = {}  # static instance id -> its last member id in this history
        self._replaced: set[str] = set()  # instances replaced (W3) during the current generation
        self._gap: HistoryGap | None = None  # records known to be missing before the next record
        self._missing: dict[int, int] = {}  # per partition: offsets never read up to the last record fed
        self._activity: dict[str, tuple[int, int]] = {}  # member id -> last (commit ts, offset) this generation
        self._flavour = "unknown"  # which coordinator wrote the log, as inferred (see GenerationRow)
        # the open offset window
        self._window: dict[tuple[str, int], list[Any]] = {}
        self._win_gen: int | None = None
        self._win_state: str | None = None
        self._win_start: int | None = None
        self._win_partition: int | None = None
        self._win_owners: dict[tuple[str, int], tuple[str, ...]] | None = None
        # this run's counts
        self._records_in = self._duplicates = self._quarantined = self._skipped = 0
        self._group_records = self._commits = self._offset_tombstones = self._embedded_errors = 0

    # ------------------------------------------------------------------------------------------
    # public API

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
        window = self._window
        stable = self._win_state == "Stable"
        value_fields = offset_commit_value_fields
        n_in = dups = commits = tombs = 0
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
                try:
                    tp = cache.get(key)
                except TypeError:  # an unhashable bytes-like key (bytearray): the slow path copies it
                    tp = None
                if tp is None:
                    learned = self._slow_path(p, o, ts, key, value)
                    if type(learned) is not tuple:
                        window = self._window
                        stable = self._win_state == "Stable"
                        yield from learned  # type: ignore[misc]
                        continue
                    tp = learned
                if value is None:
                    s = window.get(tp)
                    if s is None:
                        s = window[tp] = new_summary(o, p)
                    s[TOMBSTONES] += 1
                    s[LAST_SRC] = o
                    tombs += 1
                    continue
                try:
                    _, off, _, _, cts, _ = value_fields(value)
                except RecordDecodeError as exc:
                    self._quarantined += 1
                    yield self._quarantine_row(p, o, ts, key, value, str(exc.at(f"partition {p} offset {o}")),
                                               replayed=False)
                    continue
                s = window.get(tp)
                if s is None:
                    window[tp] = [1, 0, off, off, cts, cts, 0, o, o, o, p]
                else:
                    if off < s[LAST_OFFSET]:
                        if stable:
                            s[REGRESSIONS] += 1
                            yield self._regression(tp, s, off, cts, p, o, ts)
                    elif s[COMMITS] == 0:
                        s[FIRST_OFFSET] = off
                        s[FIRST_TS] = cts
                    s[COMMITS] += 1
                    s[LAST_OFFSET] = off
                    s[LAST_TS] = cts
                    s[LAST_SRC] = o
                    s[LAST_COMMIT_SRC] = o
                commits += 1
        finally:
            if last_p is not None:
                positions[last_p] = last_o
            self._records_in += n_in
            self._duplicates += dups
            self._commits += commits
            self._offset_tombstones += tombs

    @property
    def partitions(self) -> tuple[int, ...]:
        """The `__consumer_offsets` partitions this group's records were read from (normally one)."""
        return tuple(sorted(self._positions))

    def window(self) -> tuple[int | None, str | None, int | None, int | None]:
        """The open offset window: (generation_id, window_state, start partition, start offset),
        all None before the group's first GroupMetadata record."""
        return self._win_gen, self._win_state, self._win_partition, self._win_start

    def window_record_value(self) -> bytes | None:
        """The GroupMetadata value that opened the current window (None for a tombstone or none)."""
        return self._snap_record[4] if self._snap_record is not None else None

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
        self._gap = gap

    def gap_rows(self) -> list[AuditRow]:
        """The `history_gap` cause of a gap that no later record of the group explained (the
        group wrote no GroupMetadata record after it), on the current generation, not primary;
        the gap is consumed."""
        gap, self._gap = self._gap, None
        if gap is None or self._phase == "none":
            return []
        gen = self._snap.generation if self._snap is not None else None
        cause = Cause("history_gap", detail=gap.describe() + "; no GroupMetadata record of the group followed")
        return [self._cause_row(cause, gen, gen, False, gap.partition, gap.before_offset, gap.timestamp,
                                gap.evidence())]

    def finish(self) -> list[AuditRow]:
        """Rows of what is still open (the current generation, its assignments, the open window),
        as they stand; the state is left as it was, so more records may follow."""
        rows: list[AuditRow] = []
        if self._gen_row is not None:
            rows.append(_generation_row(self._gen_row, None, None, None))
        if self._snap is not None:
            rows.extend(self._assignment_rows(self._snap, valid_to=None))
        rows.extend(self._window_rows(end_offset=None))
        return rows

    def to_dict(self) -> dict[str, Any]:
        """The audit state as JSON-able data (for a later run to resume with `from_dict`)."""
        snap = None
        if self._snap_record is not None:
            p, o, ts, key, value = self._snap_record
            snap = {"partition": p, "offset": o, "timestamp": ts,
                    "key": base64.b64encode(key).decode(), "value": base64.b64encode(value).decode()}
        return {
            "format": STATE_FORMAT,
            "group_id": self.group_id,
            "positions": [[p, o] for p, o in sorted(self._positions.items())],
            "missing": [[p, n] for p, n in sorted(self._missing.items())],
            "phase": self._phase,
            "group_record": snap,
            "generation": dict(self._gen_row) if self._gen_row is not None else None,
            "valid_from": [[m, *v] for m, v in self._valid_from.items()],
            "instances": sorted(self._instances.items()),
            "replaced": sorted(self._replaced),
            "activity": [[m, ts, o] for m, (ts, o) in sorted(self._activity.items())],
            "coordinator_flavour": self._flavour,
            "window": {
                "generation_id": self._win_gen, "state": self._win_state, "start_offset": self._win_start,
                "start_partition": self._win_partition,
                "summaries": [[t, part, *s] for (t, part), s in self._window.items()],
            },
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, load_path: bool = True) -> GroupAuditor:
        """Resumes an audit from `to_dict()` output; the coordinator's load path is replayed with the
        saved GroupMetadata record so it holds the same state as before."""
        if data.get("format") != STATE_FORMAT:
            raise ValueError(f"audit state format {data.get('format')!r} is not {STATE_FORMAT}")
        self = cls(data["group_id"], load_path=load_path)
        self._positions = {int(p): int(o) for p, o in data["positions"]}
        self._missing = {int(p): int(n) for p, n in data.get("missing", [])}
        self._phase = data["phase"]
        rec = data["group_record"]
        if rec is not None:
            key, value = base64.b64decode(rec["key"]), base64.b64decode(rec["value"])
            decoded = decode(key, value)
            if self._load is not None:
                self._load.replay(decoded)
            assert isinstance(decoded.key, GroupMetadataKey)
            self._snap = GroupSnapshot.from_value(decoded.value, group_id=decoded.key.group)  # type: ignore[arg-type]
            self._snap_record = (rec["partition"], rec["offset"], rec["timestamp"], key, value)
        self._gen_row = dict(data["generation"]) if data["generation"] is not None else None
        self._valid_from = {m: (ts, p, o) for m, ts, p, o in data["valid_from"]}
        self._instances = dict(data["instances"])
        self._replaced = set(data["replaced"])
        self._activity = {m: (ts, o) for m, ts, o in data.get("activity", ())}
        self._flavour = data.get("coordinator_flavour", "unknown")
        w = data["window"]
        self._win_gen, self._win_state, self._win_start = w["generation_id"], w["state"], w["start_offset"]
        self._win_partition = w.get("start_partition")
        self._window = {(t, part): list(s) for t, part, *s in w["summaries"]}
        return self

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
            if self.group_id is None:
                self.group_id = group
            elif group != self.group_id:
                return self._quarantine(p, o, ts, key, value, self._wrong_group(p, o, "offset commit", group), rtype)
            tp = (topic, partition)
            self._key_cache[key] = tp
            return tp
        if rtype == 2:
            return self._group_record(p, o, ts, key, value)
        self._skipped += 1
        return []

    def _undecodable(self, p: int, o: int, ts: int, key: Any, value: Any, rtype: int | None) -> list[AuditRow]:
        try:
            decode(key, value)
        except RecordDecodeError as exc:
            return self._quarantine(p, o, ts, key, value, str(exc.at(f"partition {p} offset {o}")), rtype)
        return self._quarantine(p, o, ts, key, value, f"partition {p} offset {o}: key is not bytes", rtype)

    def _wrong_group(self, p: int, o: int, what: str, group: str) -> str:
        return f"partition {p} offset {o}: {what} record of group {group!r} in the audit of group {self.group_id!r}"

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
        return QuarantineRow(self.group_id, p, o, ts, kb, vb, error, replayed, rtype)

    def _group_record(self, p: int, o: int, ts: int, key: bytes, value: Any) -> list[AuditRow]:
        where = f"partition {p} offset {o}"
        rec = self._reader.read(key, value) if value is None or type(value) is bytes else None
        if rec is None:
            try:
                rec = decode(key, value)
            except RecordDecodeError as exc:
                return self._quarantine(p, o, ts, key, value, str(exc.at(where)), 2)
        assert isinstance(rec.key, GroupMetadataKey)
        group = rec.key.group
        if self.group_id is None:
            self.group_id = group
        elif group != self.group_id:
            return self._quarantine(p, o, ts, key, value, self._wrong_group(p, o, "GroupMetadata", group), 2)
        snap: GroupSnapshot | None = None
        try:
            if rec.value is not None:
                snap = GroupSnapshot.from_value(rec.value, group_id=group,  # type: ignore[arg-type]
                                                previous=self._snap)
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
        rows.extend(self._observe(p, o, ts, snap))
        if snap is not None:
            self._snap_record = (p, o, ts, bytes(key), bytes(value))
        else:
            self._snap_record = None
        return rows

    # ------------------------------------------------------------------------------------------
    # the observer: one persisted state after another

    def _observe(self, p: int, o: int, ts: int, snap: GroupSnapshot | None) -> list[AuditRow]:
        gap, self._gap = self._gap, None
        prev_gen = self._snap.generation if self._snap is not None else None
        rows = self._observe_record(p, o, ts, snap)
        if gap is None or (self._phase == "none" and snap is None):
            return rows
        # What happened across the gap is unknown: a new generation's primary cause is the gap (the
        # causes the two records suggest stay, not primary); otherwise the gap is noted beside.
        gen = snap.generation if snap is not None else None
        new_generation = snap is not None and any(
            isinstance(r, RebalanceCauseRow) and r.is_primary and r.generation_id == gen for r in rows)
        evidence = f"{gap.evidence()}; " + self._evidence(p, o)
        detail = gap.describe() + (f" before generation {gen}" if gen is not None else " before the tombstone")
        row = self._cause_row(Cause("history_gap", detail=detail), gen, prev_gen, new_generation, p, o, ts, evidence)
        if new_generation:
            rows = [replace(r, is_primary=False) if isinstance(r, RebalanceCauseRow) and r.is_primary else r
                    for r in rows]
        rows.append(row)
        return rows

    def _observe_record(self, p: int, o: int, ts: int, snap: GroupSnapshot | None) -> list[AuditRow]:
        self._note_activity()
        rows: list[AuditRow] = self._window_rows(end_offset=o)
        prev = self._snap
        if snap is None:
            rows.extend(self._close_generation(ts, o))
            gen = prev.generation if prev is not None else None
            detail = "tombstone: the group and its metadata are deleted"
            if gen == 0:
                self._flavour = "java"  # the Scala coordinator writes no tombstone for a generation-0 group
                detail += " (a generation-0 group: only the Java coordinator deletes those with a tombstone)"
            # a tombstone is not a generation: primary only when the audited history starts with it
            primary = prev is None and self._phase == "none"
            rows.append(self._cause_row(Cause("group_deleted", detail=detail), gen, gen, primary, p, o, ts,
                                        self._evidence(p, o)))
            self._snap, self._phase, self._valid_from, self._instances = None, "deleted", {}, {}
            self._replaced = set()
            self._activity = {}
            self._open_window(None, "Dead", o, p)
            return rows
        if prev is not None and snap.generation == prev.generation:
            rows.extend(self._same_generation(prev, snap, p, o, ts))
        else:
            rows.extend(self._new_generation(prev, snap, p, o, ts))
        self._snap, self._phase = snap, "live"
        self._open_window(snap.generation, snap.state, o, p)
        return rows

    def _note_activity(self) -> None:
        """Credits the commits of the closing window to the members assigned their partitions (the
        evidence of who left or rejoined first, `causes.Activity`)."""
        snap = self._snap
        if snap is None or not self._window or not snap.members:
            return
        owners = snap.owners()
        act = self._activity
        for tp, s in self._window.items():
            if not s[COMMITS]:
                continue
            holders = owners.get(tp)
            if not holders:
                continue
            at = (s[LAST_TS], s[LAST_COMMIT_SRC])
            for m in holders:
                mine = act.get(m.member_id)
                if mine is None or at > mine:
                    act[m.member_id] = at

    def _new_generation(self, prev: GroupSnapshot | None, snap: GroupSnapshot, p: int, o: int,
                        ts: int) -> list[AuditRow]:
        rows = self._close_generation(ts, o)
        history_start: str | None = None
        if prev is None and self._phase == "none" and snap.generation > 1:
            history_start = (f"the audited history starts at generation {snap.generation}; earlier "
                             f"generations are not in the log (compaction, retention or a time window)")
        elif prev is not None and snap.generation < prev.generation:
            history_start = (f"generation went back from {prev.generation} to {snap.generation} without a "
                             f"tombstone: the history restarts here")
        missing: int | None
        if history_start is not None:
            causes = [Cause("history_start", detail=history_start)]
            missing = None
            found = assignment_violations(snap)
            prev_gen = None
        else:
            base = prev if prev is not None else GroupSnapshot.initial()
            missing = max(snap.generation - base.generation - 1, 0)
            if prev is None and snap.generation == 0 and snap.is_empty and snap.protocol_type is None:
                # GroupMetadataManager#classicGroupJoin persists a new group before answering its first join
                self._flavour = "java"
                causes = [Cause("group_created", detail="the Java coordinator's creation record (generation 0, "
                                                        "no protocol type): a JoinGroup created the group")]
            else:
                if prev is None and snap.generation == 1 and not self._window:
                    self._flavour = "scala"  # created by a JoinGroup, yet no creation record before it
                causes = new_generation_causes(base, snap, missing=missing, created=prev is None,
                                               known_instances=self._instances, activity=self._activity)
            found = assignment_violations(snap)
            if prev is not None:
                found += ownership_violations(prev, snap)
                found += replaced_member_moves(prev, snap, self._replaced)
            prev_gen = prev.generation if prev is not None else None
        evidence = self._evidence(p, o)
        for i, c in enumerate(causes):
            rows.append(self._cause_row(c, snap.generation, prev_gen, i == 0, p, o, ts,
                                        f"{evidence}; {c.evidence}" if c.evidence else evidence))
        rows.extend(self._violation_rows(found, snap.generation, p, o, ts))
        self._gen_row = {
            "group_id": self.group_id, "generation_id": snap.generation, "protocol_type": snap.protocol_type,
            "protocol_name": snap.protocol, "leader_id": snap.leader, "member_count": len(snap.members),
            "static_member_count": snap.static_member_count, "state": snap.state,
            "state_timestamp": snap.state_timestamp, "record_timestamp": ts,
            "sync_latency_ms": ts - snap.state_timestamp if snap.state_timestamp is not None else None,
            "source_partition": p, "source_offset": o, "missing_generations": missing,
            "static_replacements": 0, "rebalance_protocol": snap.rebalance_protocol,
            "coordinator_flavour": self._flavour,
        }
        self._valid_from = {m.member_id: (ts, p, o) for m in snap.members}
        self._remember_instances(snap)
        self._replaced = set()
        self._activity = {}
        return rows

    def _remember_instances(self, snap: GroupSnapshot) -> None:
        for m in snap.members:
            if m.group_instance_id is not None:
                self._instances[m.group_instance_id] = m.member_id

    def _same_generation(self, prev: GroupSnapshot, snap: GroupSnapshot, p: int, o: int, ts: int) -> list[AuditRow]:
        rows: list[AuditRow] = []
        causes, replacements = same_generation_changes(prev, snap)
        evidence = self._evidence(p, o)
        for c in causes:
            rows.append(self._cause_row(c, snap.generation, prev.generation, False, p, o, ts, evidence))
        rows.extend(self._violation_rows(replacement_violations(snap.generation, replacements),
                                         snap.generation, p, o, ts))
        # ownership intervals: a member whose id or assignment changed hands over at this record
        kept = {m.member_id: m for m in snap.members}
        for m in prev.members:
            now = kept.get(m.member_id)
            if now is None or now.assignment_raw != m.assignment_raw:
                rows.extend(self._member_rows(prev, m, valid_to=ts))
                self._valid_from.pop(m.member_id, None)
        for m in snap.members:
            self._valid_from.setdefault(m.member_id, (ts, p, o))
        self._remember_instances(snap)
        self._replaced.update(r.new.group_instance_id for r in replacements if r.new.group_instance_id is not None)
        if self._gen_row is not None:
            self._gen_row["leader_id"] = snap.leader
            self._gen_row["static_replacements"] += len(replacements)
        return rows

    def _close_generation(self, ts: int, o: int) -> list[AuditRow]:
        rows: list[AuditRow] = []
        if self._gen_row is not None:
            g = self._gen_row
            rows.append(_generation_row(g, ts, ts - g["record_timestamp"], o))
            self._gen_row = None
        if self._snap is not None:
            rows.extend(self._assignment_rows(self._snap, valid_to=ts))
        return rows

    def _assignment_rows(self, snap: GroupSnapshot, *, valid_to: int | None) -> list[AuditRow]:
        rows: list[AuditRow] = []
        for m in snap.members:
            rows.extend(self._member_rows(snap, m, valid_to=valid_to))
        return rows

    def _member_rows(self, snap: GroupSnapshot, m: MemberView, *, valid_to: int | None) -> list[AuditRow]:
        groups = m.assigned_groups
        if not groups:
            return []
        ts, p, o = self._valid_from[m.member_id]
        group, gen, member_id, instance = self.group_id or "", snap.generation, m.member_id, m.group_instance_id
        client_id, host, version, owned = m.client_id, m.client_host, m.subscription_version, m.owned
        ud_gen, sub_gen = m.user_data_generation, m.subscription_generation
        make = make_assignment_row
        owned_before: bool | None = False  # the same for every row, or None: per row
        if owned:
            assigned = m.assigned_set
            owned_before = True if owned >= assigned else False if owned.isdisjoint(assigned) else None
        if owned_before is None:
            return [make(group, gen, member_id, instance, client_id, host, tp[0], tp[1], version, tp in owned,
                         ud_gen, sub_gen, ts, valid_to, p, o) for tp in m.assigned_distinct]
        if snap.has_repeated_assignments() and not m.assigned_is_distinct:
            return [make(group, gen, member_id, instance, client_id, host, t, partition, version, owned_before,
                         ud_gen, sub_gen, ts, valid_to, p, o) for t, partition in m.assigned_distinct]
        return [make(group, gen, member_id, instance, client_id, host, t, partition, version, owned_before, ud_gen,
                     sub_gen, ts, valid_to, p, o) for t, partitions in groups for partition in partitions]

    def _cause_row(self, c: Cause, gen: int | None, prev_gen: int | None, primary: bool, p: int, o: int,
                   ts: int, evidence: str) -> RebalanceCauseRow:
        return make_cause_row(self.group_id or "", gen, prev_gen, c.cause, c.member_id, c.group_instance_id,
                                 c.detail, evidence, primary, ts, p, o)

    def _evidence(self, p: int, o: int) -> str:
        before = self._snap_record
        if before is not None and self._snap is not None:
            return (f"partition {p} offset {o}; previous GroupMetadata at partition {before[0]} offset "
                    f"{before[1]} (generation {self._snap.generation})")
        return f"partition {p} offset {o}"

    def _violation_rows(self, found: list[Violation], gen: int, p: int, o: int, ts: int) -> list[AuditRow]:
        if not found:
            return []
        evidence = self._evidence(p, o)
        return [ViolationRow(self.group_id or "", gen, v.kind, v.topic, v.partition, v.member_ids, v.detail,
                             evidence, ts, p, o) for v in found]

    # ------------------------------------------------------------------------------------------
    # offset windows

    def _open_window(self, gen: int | None, state: str | None, start: int, partition: int) -> None:
        self._window = {}
        self._win_gen, self._win_state, self._win_start = gen, state, start
        self._win_partition = partition
        self._win_owners = None

    def _window_rows(self, *, end_offset: int | None) -> list[AuditRow]:
        gid = self.group_id or ""
        return [summary_row(gid, t, part, s, generation_id=self._win_gen, window_state=self._win_state,
                            window_start_offset=self._win_start, window_end_offset=end_offset)
                for (t, part), s in self._window.items()]

    def _regression(self, tp: tuple[str, int], s: list[Any], off: int, cts: int, p: int, o: int,
                    ts: int) -> ViolationRow:
        if self._win_owners is None:
            snap = self._snap
            owners = snap.owners() if snap is not None else {}
            self._win_owners = {k: tuple(m.member_id for m in v) for k, v in owners.items()}
        topic, partition = tp
        prev_src = s[LAST_COMMIT_SRC]
        return ViolationRow(
            self.group_id or "", self._win_gen, "offset_regression", topic, partition,
            self._win_owners.get(tp, ()),
            f"{topic}-{partition}: committed offset {off} (commit time {cts}) after {s[LAST_OFFSET]} (commit time "
            f"{s[LAST_TS]}) while the group was Stable in generation {self._win_gen}",
            f"partition {p} offsets {prev_src} -> {o}", ts, p, o)


def _generation_row(g: dict[str, Any], ended_at: int | None, lifetime_ms: int | None,
                    ended_by_offset: int | None) -> GenerationRow:
    """The GenerationRow of the open generation `g` (see `GroupAuditor._new_generation`)."""
    return make_generation_row(
        g["group_id"], g["generation_id"], g["protocol_type"], g["protocol_name"], g["leader_id"], g["member_count"],
        g["static_member_count"], g["state"], g["state_timestamp"], g["record_timestamp"], g["sync_latency_ms"],
        ended_at, lifetime_ms, g["source_partition"], g["source_offset"], g["missing_generations"], ended_by_offset,
        g["static_replacements"], g["rebalance_protocol"], g.get("coordinator_flavour", "unknown"))


def audit_group(records: Iterable[RawRecord], *, group_id: str | None = None,
                state: dict[str, Any] | None = None) -> Iterator[AuditRow]:
    """One call for the whole audit of a group: the rows of `records` and then what is still open.

    `state` (from `GroupAuditor.to_dict()`) resumes an earlier audit. Use `GroupAuditor` directly
    to read the counts or save the state afterwards."""
    auditor = GroupAuditor.from_dict(state) if state is not None else GroupAuditor(group_id)
    yield from auditor.feed(records)
    yield from auditor.finish()
