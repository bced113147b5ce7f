"""The offset-commit summary and `offset_regression`, defined once for the pure path and the Spark SQL path.

Definitions (the Spark job's SQL implementation must give the same rows):

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
* **Commit**: an offset-commit record (key type 0 or 1) of the group with a non-null value that
  decodes; a null value is an offset **tombstone** (counted, not a commit). Undecodable commits are
  quarantined and take no part.
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
  legitimate; a partial history cannot judge).
"""

from __future__ import annotations

from typing import Any

from coordinator_core.audit.rows import OffsetCommitRow

__all__ = ["NO_OFFSET", "new_summary", "summary_row"]

# A window summary is a list mutated in place on the hot path; these are its slots.
COMMITS, TOMBSTONES, FIRST_OFFSET, LAST_OFFSET, FIRST_TS, LAST_TS, REGRESSIONS, FIRST_SRC, LAST_SRC, \
    LAST_COMMIT_SRC, SRC_PARTITION = range(11)

NO_OFFSET = -(1 << 64)
"""LAST_OFFSET before the first commit: lower than any int64 offset, so no regression is seen."""


def new_summary(source_offset: int, source_partition: int) -> list[Any]:
    """An empty summary whose first record is at `source_partition`/`source_offset`."""
    return [0, 0, None, NO_OFFSET, None, None, 0, source_offset, source_offset, None, source_partition]


def summary_row(group_id: str, topic: str, partition: int, s: list[Any], *, generation_id: int | None,
                window_state: str | None, window_start_offset: int | None, window_end_offset: int | None) -> OffsetCommitRow:
    """The table row of one window summary."""
    has_commits = s[COMMITS] > 0
    return OffsetCommitRow(
        group_id=group_id, topic=topic, partition=partition, generation_id=generation_id,
        window_state=window_state, window_start_offset=window_start_offset, window_end_offset=window_end_offset,
        commits=s[COMMITS], tombstones=s[TOMBSTONES],
        first_offset=s[FIRST_OFFSET] if has_commits else None,
        last_offset=s[LAST_OFFSET] if has_commits else None,
        first_commit_timestamp=s[FIRST_TS], last_commit_timestamp=s[LAST_TS],
        regressions=s[REGRESSIONS], source_partition=s[SRC_PARTITION],
        first_source_offset=s[FIRST_SRC], last_source_offset=s[LAST_SRC])
