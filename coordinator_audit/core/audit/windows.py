"""The offset-window tracker: the generation window open now and one `OffsetSummary` per
topic-partition committed in it (the rules are `coordinator_audit.core.audit.offsets`')."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coordinator_audit.core.audit.offsets import OffsetSummary, Regression, TopicPartition
from coordinator_audit.core.audit.rows import AuditRow, ViolationRow, iso_ms
from coordinator_audit.core.audit.snapshot import GroupSnapshot

__all__ = ["OffsetWindow"]


class OffsetWindow:
    """The open generation window of one group: opened by each replayed GroupMetadata record (value
    or tombstone), closed by the next; before the first one, the pre-history window (all None).

    `summaries` is updated in place by the audit's per-record path (`OffsetSummary.commit` /
    `tombstone`); `open` replaces it with a new dict, so a holder of the old one must fetch it again."""

    __slots__ = ("_deferred", "_owners", "_snapshot", "generation_id", "start_offset", "start_partition", "state",
                 "summaries")

    def __init__(self) -> None:
        self.summaries: dict[TopicPartition, OffsetSummary] = {}
        self.generation_id: int | None = None
        self.state: str | None = None
        """"Stable", "Empty", "Dead" or None (see `OffsetCommitRow.window_state`)."""
        self.start_offset: int | None = None
        self.start_partition: int | None = None
        self._snapshot: GroupSnapshot | None = None
        self._deferred: Callable[[], GroupSnapshot] | None = None
        self._owners: dict[TopicPartition, tuple[str, ...]] | None = None

    @property
    def snapshot(self) -> GroupSnapshot | None:
        """The persisted state of the window's opening record (None for a tombstone or none); built
        now if `open` was given how to build it (`deferred`)."""
        if self._deferred is not None:
            self._snapshot, self._deferred = self._deferred(), None
        return self._snapshot

    @property
    def stable(self) -> bool:
        """Whether a backwards commit in this window is an `offset_regression`."""
        return self.state == "Stable"

    def open(self, generation_id: int | None, state: str | None, start_offset: int, start_partition: int,
             snapshot: GroupSnapshot | None, *, deferred: Callable[[], GroupSnapshot] | None = None) -> None:
        """Opens the window of the GroupMetadata record at `start_partition`/`start_offset`
        (`snapshot`: its persisted state, None for a tombstone; or `deferred`, how to build it when
        first read, e.g. by an `offset_regression` row naming the partition's owners), with no
        summaries."""
        self.summaries = {}
        self.generation_id, self.state = generation_id, state
        self.start_offset, self.start_partition = start_offset, start_partition
        self._snapshot, self._deferred = snapshot, deferred
        self._owners = None

    def rows(self, group_id: str, *, end_offset: int | None) -> list[AuditRow]:
        """The `offset_commits` rows of the window, closed at `end_offset` (None: still open)."""
        gen, state, start = self.generation_id, self.state, self.start_offset
        return [s.row(group_id, t, part, generation_id=gen, window_state=state, window_start_offset=start,
                      window_end_offset=end_offset)
                for (t, part), s in self.summaries.items()]

    def regression_row(self, group_id: str, tp: TopicPartition, r: Regression, offset: int, commit_timestamp: int,
                       p: int, o: int, ts: int) -> ViolationRow:
        """The `offset_regression` violation of the commit at `p`/`o` (`OffsetSummary.commit`
        returned `r`), naming the members the window's opening record assigns the partition to."""
        if self._owners is None:
            snapshot = self.snapshot
            self._owners = snapshot.owner_ids() if snapshot is not None else {}
        topic, partition = tp
        return ViolationRow(
            group_id, self.generation_id, "offset_regression", topic, partition, self._owners.get(tp, ()),
            f"{topic}-{partition}: committed offset {offset} (commit time {iso_ms(commit_timestamp)}) after "
            f"{r.previous_offset} (commit time {iso_ms(r.previous_commit_timestamp)}) while the group was Stable in "
            f"generation {self.generation_id}",
            f"partition {p} offsets {r.previous_source_offset} -> {o}", ts, p, o)

    def to_dict(self, *, summaries: bool = True) -> dict[str, Any]:
        """The window as JSON-able data (the "window" entry of `GroupAuditor.to_dict`); without
        `summaries`, their list is empty."""
        return {"generation_id": self.generation_id, "state": self.state, "start_offset": self.start_offset,
                "start_partition": self.start_partition,
                "summaries": [[t, part, *s.to_list()] for (t, part), s in self.summaries.items()] if summaries else []}

    @classmethod
    def from_dict(cls, data: dict[str, Any], snapshot: GroupSnapshot | None) -> OffsetWindow:
        """The window `to_dict` saved; `snapshot` is the persisted state of its opening record."""
        w = cls()
        w.generation_id, w.state, w.start_offset = data["generation_id"], data["state"], data["start_offset"]
        w.start_partition = data.get("start_partition")
        w.summaries = {(t, part): OffsetSummary.from_list(s) for t, part, *s in data["summaries"]}
        w._snapshot = snapshot
        return w
