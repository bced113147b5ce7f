"""The offset-commit rules, defined once: `OffsetSummary` is what the audit keeps per committed
partition and generation window, and its methods are the rules every path implements.

One scalar definition, one columnar form: the pure-Python audit folds records with these methods
(`commit`, `tombstone`) and merges stretches with `merge` (`GroupAuditor.merge_stretch`, which the
Spark job's replay calls for the single pass's stretches); the pass's numba kernel
(`coordinator_audit.udfs.scan_kernel.summarise`) is the rules' one columnar form, giving a stretch's summary from
Arrow buffers. `tests/spark/test_spark_scan_rules.py::test_kernel_partials_merged_are_the_core_fold`
is the contract between the two: on random commit sequences (commits, tombstones, GroupMetadata
records of Stable, Empty and Dead windows, undecodable commits, other record types, of two groups
over three topic-partitions, cut anywhere into chunks), the kernel's stretches merged with `merge`
equal this module's record-by-record fold.

Definitions:

* Records considered: one group's records after dropping repeated (partition, offset) pairs, in log
  order = ascending (partition, offset). A group's records all live in one `__consumer_offsets`
  partition; if the input holds several, each partition is taken in turn (partition ascending).
* **Generation window**: every GroupMetadata record of the group (key type 2) that is replayed —
  a value (W1, W2, W3, W5) or a tombstone — closes the current window and opens a new one. A
  window's `generation_id` is the opening record's generation (None for a tombstone and for the
  window before the first GroupMetadata record of the audited history), `window_state` is
  "Stable" if the opening value lists members, "Empty" if it lists none, "Dead" for a tombstone,
  None before the first record; `window_start_offset`/`window_end_offset` are the log offsets of
  the opening/closing records (None: before the first record / still open). A same-generation
  static replacement (W3) therefore starts a new window with the same generation id. Quarantined
  GroupMetadata records (undecodable, wrong group, broken invariant) do not open windows.
* **Commit** (`OffsetSummary.commit`): an offset-commit record (key type 0 or 1) of the group with
  a non-null value that decodes; a null value is an offset **tombstone** (`OffsetSummary.tombstone`:
  counted, not a commit; Kafka's `GroupMetadataManager` reads it as the removal of the committed
  offset). Undecodable commits are quarantined and take no part.
* One **row** per (topic, partition, window) with at least one commit or tombstone: `commits`,
  `tombstones`, first/last committed offset and commit timestamp (the value's commitTimestamp)
  in log order over the commits (None when only tombstones), `first_source_offset` /
  `last_source_offset` over all of the row's records, and `regressions`.
* **offset_regression**: within a "Stable" window, a commit whose offset is strictly lower than the
  previous commit of the same topic-partition in the same window (log order; tombstones in between
  do not reset the comparison). One violation row per regression, with `generation_id` of the
  window, the topic-partition, `member_ids` = the member(s) assigned that partition by the window's
  opening record (empty when none), and `evidence` naming both records' log offsets. Commits in
  "Empty", "Dead" or pre-history windows are never regressions (offset resets of an idle group are
  legitimate: Kafka's `kafka-consumer-groups --reset-offsets` requires an inactive group; a partial
  history cannot judge).
* **Merging** (`OffsetSummary.merge`): the summary of a window's records cut into consecutive
  stretches is the summaries of the stretches merged in log order: counts add, first/last are taken
  in log order, and one more regression when, in a Stable window, the later stretch's first commit
  is below the earlier stretch's last commit. Folding record by record and merging per-stretch
  summaries give the same summary (tested with Hypothesis): the law the Spark job's per-chunk
  kernel and the replay's merge are held to.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from coordinator_audit.core.audit.rows import OffsetCommitRow, make_offset_commit_row
from coordinator_audit.core.audit.snapshot import TopicPartition

__all__ = ["NO_OFFSET", "OffsetSummary", "Regression", "TopicPartition"]

NO_OFFSET = -(1 << 64)
"""`OffsetSummary.last_offset` before the first commit: lower than any int64 offset, so no commit
is ever below it (the first commit is never a regression)."""

_STATE_LAYOUT = ("commits", "tombstones", "first_offset", "last_offset", "first_commit_timestamp",
                 "last_commit_timestamp", "regressions", "first_source_offset", "last_source_offset",
                 "last_commit_source_offset", "source_partition")
"""`OffsetSummary`'s slots, in the order of the saved state's layout (`GroupAuditor.to_dict`, format 1)."""


class Regression(NamedTuple):
    """What a commit that counted as an `offset_regression` stepped back from: the previous
    commit of the same topic-partition in the window."""

    previous_offset: int
    previous_commit_timestamp: int
    previous_source_offset: int


class OffsetSummary:
    """The summary of one topic-partition's offset commits and tombstones within one generation
    window (or within a stretch of that window's records); see the module docstring for the rules.

    Mutable and slotted: the audit updates it in place once per offset-commit record."""

    __slots__ = _STATE_LAYOUT

    commits: int
    tombstones: int
    first_offset: int | None
    last_offset: int
    """The last commit's offset; NO_OFFSET before the first commit."""
    first_commit_timestamp: int | None
    last_commit_timestamp: int | None
    regressions: int
    first_source_offset: int
    """Log offset of the summary's first record (commit or tombstone)."""
    last_source_offset: int
    """Log offset of its last record (commit or tombstone)."""
    last_commit_source_offset: int | None
    """Log offset of its last commit (None before the first)."""
    source_partition: int
    """The `__consumer_offsets` partition of its records."""

    def __init__(self, source_partition: int, source_offset: int) -> None:
        """An empty summary whose first record is at `source_partition`/`source_offset` (the caller
        then applies that record with `commit` or `tombstone`)."""
        self.commits = self.tombstones = self.regressions = 0
        self.first_offset = self.first_commit_timestamp = self.last_commit_timestamp = None
        self.last_offset = NO_OFFSET
        self.first_source_offset = self.last_source_offset = source_offset
        self.last_commit_source_offset = None
        self.source_partition = source_partition

    @classmethod
    def of_commit(cls, offset: int, commit_timestamp: int, source_partition: int,
                  source_offset: int) -> OffsetSummary:
        """The summary of one commit: `OffsetSummary(p, o)` then `commit(...)`, in one step (the
        audit opens one per committed partition per window)."""
        s = cls.__new__(cls)
        s.commits, s.tombstones, s.regressions = 1, 0, 0
        s.first_offset = s.last_offset = offset
        s.first_commit_timestamp = s.last_commit_timestamp = commit_timestamp
        s.first_source_offset = s.last_source_offset = s.last_commit_source_offset = source_offset
        s.source_partition = source_partition
        return s

    @classmethod
    def of_stretch(cls, commits: int, tombstones: int, regressions: int, first_offset: int | None,
                   last_offset: int | None, first_commit_timestamp: int | None, last_commit_timestamp: int | None,
                   first_source_offset: int, last_source_offset: int, last_commit_source_offset: int | None,
                   source_partition: int) -> OffsetSummary:
        """The summary of a stretch summarised elsewhere (the Spark job's scan kernel, or an open
        `offset_commits` row kept in `group_state`), from its values; without commits the commit
        values are whatever the source left there and read as none (`last_offset` is NO_OFFSET)."""
        s = cls.__new__(cls)
        s.commits, s.tombstones, s.regressions = commits, tombstones, regressions
        s.first_source_offset, s.last_source_offset, s.source_partition = (first_source_offset, last_source_offset,
                                                                           source_partition)
        if commits:
            s.first_offset = first_offset
            s.last_offset = NO_OFFSET if last_offset is None else last_offset
            s.first_commit_timestamp, s.last_commit_timestamp = first_commit_timestamp, last_commit_timestamp
            s.last_commit_source_offset = last_commit_source_offset
        else:
            s.first_offset = s.first_commit_timestamp = s.last_commit_timestamp = s.last_commit_source_offset = None
            s.last_offset = NO_OFFSET
        return s

    def commit(self, offset: int, commit_timestamp: int, source_offset: int, stable: bool) -> Regression | None:
        """Applies the next commit in log order. In a Stable window (`stable`) a commit strictly
        below the previous commit is a regression: counted, and what it stepped back from returned
        (None otherwise). Tombstones in between do not reset the comparison."""
        if offset >= self.last_offset:  # the common case (and every first commit: last_offset is NO_OFFSET)
            if not self.commits:
                self.first_offset = offset
                self.first_commit_timestamp = commit_timestamp
            self.commits += 1
            self.last_offset = offset
            self.last_commit_timestamp = commit_timestamp
            self.last_source_offset = self.last_commit_source_offset = source_offset
            return None
        regression = None
        if stable:
            self.regressions += 1
            prev_ts, prev_src = self.last_commit_timestamp, self.last_commit_source_offset
            assert prev_ts is not None and prev_src is not None  # last_offset above NO_OFFSET: a commit was applied
            regression = Regression(self.last_offset, prev_ts, prev_src)
        self.commits += 1
        self.last_offset = offset
        self.last_commit_timestamp = commit_timestamp
        self.last_source_offset = self.last_commit_source_offset = source_offset
        return regression

    def tombstone(self, source_offset: int) -> None:
        """Applies the next offset tombstone in log order: counted; the commits' comparison goes on
        across it."""
        self.tombstones += 1
        self.last_source_offset = source_offset

    def steps_back(self, later: OffsetSummary, *, stable: bool) -> bool:
        """Whether `later` (the next stretch, as in `merge`) starts with a commit below this one's
        last: one `offset_regression` more where the window is Stable (nowhere else)."""
        return stable and self.commits > 0 and later.first_offset is not None and later.first_offset < self.last_offset

    def merge(self, later: OffsetSummary, *, stable: bool) -> OffsetSummary:
        """The summary of this stretch of records followed by `later` (the next stretch of the same
        group, topic-partition and window, `stable` when the window is Stable); neither is changed.
        Associative, and equal to folding the two stretches' records one by one."""
        out = OffsetSummary.__new__(OffsetSummary)
        out.commits = self.commits + later.commits
        out.tombstones = self.tombstones + later.tombstones
        out.regressions = self.regressions + later.regressions
        first = self if self.commits else later
        out.first_offset, out.first_commit_timestamp = first.first_offset, first.first_commit_timestamp
        last = later if later.commits else self
        out.last_offset, out.last_commit_timestamp = last.last_offset, last.last_commit_timestamp
        out.last_commit_source_offset = last.last_commit_source_offset
        if self.steps_back(later, stable=stable):
            out.regressions += 1
        out.first_source_offset, out.last_source_offset = self.first_source_offset, later.last_source_offset
        out.source_partition = self.source_partition
        return out

    def row(self, group_id: str, topic: str, partition: int, *, generation_id: int | None, window_state: str | None,
            window_start_offset: int | None, window_end_offset: int | None) -> OffsetCommitRow:
        """The `offset_commits` row of this summary."""
        has_commits = self.commits > 0
        # positional, in OffsetCommitRow's field order (an open window's rows are rebuilt at every run's end)
        return make_offset_commit_row(
            group_id, topic, partition, generation_id, window_state, window_start_offset, window_end_offset,
            self.commits, self.tombstones, self.first_offset if has_commits else None,
            self.last_offset if has_commits else None, self.first_commit_timestamp, self.last_commit_timestamp,
            self.regressions, self.source_partition, self.first_source_offset, self.last_source_offset)

    def to_list(self) -> list[Any]:
        """The slots in order: the saved state's layout (`GroupAuditor.to_dict`, format 1)."""
        return [getattr(self, name) for name in _STATE_LAYOUT]

    @classmethod
    def from_list(cls, values: list[Any]) -> OffsetSummary:
        """The summary `to_list` gave."""
        if len(values) != len(_STATE_LAYOUT):
            raise ValueError(f"an offset summary has {len(_STATE_LAYOUT)} values, not {len(values)}: {values!r}")
        s = cls.__new__(cls)
        for name, v in zip(_STATE_LAYOUT, values, strict=True):
            setattr(s, name, v)
        return s

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OffsetSummary):
            return NotImplemented
        return self.to_list() == other.to_list()

    def __repr__(self) -> str:
        return "OffsetSummary(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in _STATE_LAYOUT) + ")"
