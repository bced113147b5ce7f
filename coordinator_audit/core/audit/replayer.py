"""One group's replay within a run of a chain: its saved state (or none), its records and the offset
stretches summarised elsewhere in; its rows, split into new rows and rows continuing an earlier
run's, and its new state out.

`GroupReplay` is the one path for every group a run meets: a group without saved state starts
afresh; a group with saved state is resumed from it at its first record or stretch; a saved group
that reads nothing in the run is carried forward as saved (`carried_at_rest`) when resuming and
finishing it would give the same, without decoding its GroupMetadata record or building its rows.
The caller feeds records and stretches through `auditor` (`GroupAuditor.feed`, `merge_stretch`,
`stretch_regression`) and passes every row the auditor gives to `route`.

Rows an earlier run left open (the current generation, its assignments, the open offset windows)
come out again when they change: `route` sorts each row into the new rows or the carried rows (the
writer merges a carried row into the earlier run's row of the same identity instead of adding it);
an open row that comes out unchanged is dropped, since it is already stored. The `ResumeMode` says
how a saved group's rows are sorted:

* `resume` (a later run): as just said;
* `rerun` (re-running the latest window): every carried row is merged again, changed or not, so the
  rows that window's first attempt wrote are all rewritten;
* `warmup` (the state was rebuilt in this job from records before the window): no earlier rows
  exist, every row is new.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from coordinator_audit.core.audit.auditor import AtRest, GroupAuditor
from coordinator_audit.core.audit.observer import HistoryGap
from coordinator_audit.core.audit.offsets import OffsetSummary, TopicPartition
from coordinator_audit.core.audit.rows import AssignmentRow, AssignmentRun, GenerationRow, OffsetCommitRow

ResumeMode = Literal["resume", "rerun", "warmup"]


@dataclass(frozen=True, slots=True)
class SavedGroup:
    """A group's state as an earlier run saved it: the auditor's `to_dict(summaries=False,
    record_value=False)` as JSON (empty: a group an earlier run saw only through offset commits,
    which starts afresh), the GroupMetadata record's value kept apart (`record_value`, None when
    there is none), and its open offset summaries kept apart (`summaries`: read only when the
    group is resumed)."""

    state: str | bytes
    value: bytes | None
    summaries: Callable[[], dict[TopicPartition, OffsetSummary]]


def _identity_key(row: Any) -> tuple[Any, ...] | None:
    """What identifies an open row across runs: the generation's opening record; an assignment
    interval's member, partition and the record it starts at; an offset window's topic-partition,
    first record's partition and opening record (None: a row that is never open)."""
    t = type(row)
    if t is GenerationRow:
        return ("g", row.generation_id, row.source_partition, row.source_offset)
    if t is AssignmentRow:
        return ("a", row.member_id, row.generation_id, row.topic, row.partition, row.source_partition,
                row.source_offset)
    if t is OffsetCommitRow:
        return ("o", row.topic, row.partition, row.source_partition, row.window_start_offset)
    return None


class GroupReplay:
    """One group's replay in a run (module docstring): `saved` None starts afresh; `mode` applies to
    a saved group; `gaps` (per `__consumer_offsets` partition: offsets never read before the run)
    give a resumed group a `history_gap` when its partitions have one. `load_path`, `observe`,
    `embedded`: as `GroupAuditor`'s. `keep`: the rows routed out are also kept (`kept`), for a
    caller that derives more rows from them at the group's end."""

    __slots__ = ("_auditor", "_embedded", "_gaps", "_load_path", "_observe", "before", "changed", "group_id", "kept",
                 "mode", "observed", "saved")

    def __init__(self, group_id: str | None, saved: SavedGroup | None, mode: ResumeMode,
                 gaps: Mapping[int, HistoryGap], *, load_path: bool = True, observe: bool = True,
                 embedded: bool = True, keep: bool = False) -> None:
        self.group_id = group_id
        self.saved = saved
        self.mode: ResumeMode | None = mode if saved is not None else None
        self._gaps = gaps
        self._load_path = load_path
        self._observe = observe
        self._embedded = embedded
        self._auditor: GroupAuditor | None = None
        self.changed = False
        """Whether the run gave the group a record or a stretch."""
        self.kept: list[Any] | None = [] if keep else None
        self.before: dict[tuple[Any, ...], Any] = {}
        """The rows the earlier run left open, by identity (`_identity_key`), until they come out again."""
        self.observed = self.mode != "resume"
        """Whether the open generation's rows are in `before` (or the group is not resumed). Under
        `resume` they are taken only when the group is first fed records (`feeding`): only those can
        change them (`GroupAuditor.generation_rows`), and the group's end drops them unchanged
        otherwise. Most saved groups of a nightly run read offset commits only: their generation's
        rows are then never built."""

    @property
    def opened(self) -> bool:
        """Whether the group's audit has started (fresh or resumed)."""
        return self._auditor is not None

    @property
    def auditor(self) -> GroupAuditor:
        """The group's audit: started at first use (afresh, or resumed from the saved state with its
        saved summaries, the rows it left open taken into `before`, a gap on its partitions noted)."""
        if self._auditor is None:
            self._auditor = self._start()
        return self._auditor

    def _start(self) -> GroupAuditor:
        saved = self.saved
        if saved is None or not saved.state:
            auditor = GroupAuditor(self.group_id, load_path=self._load_path, observe=self._observe,
                                   assignment_runs=True, embedded=self._embedded)
        else:
            auditor = GroupAuditor.from_dict(json.loads(saved.state), load_path=self._load_path,
                                             observe=self._observe, assignment_runs=True, record_value=saved.value)
        if saved is not None:
            summaries = saved.summaries()
            if summaries:
                auditor.restore_summaries(summaries)
        if self.mode in ("resume", "rerun"):
            self._keep_before(auditor.finish(generation=self.observed))
        if self.mode is not None:
            for p in auditor.partitions:
                if p in self._gaps:
                    auditor.note_gap(self._gaps[p])
                    break
        return auditor

    @property
    def resumed_windows(self) -> bool:
        """Whether the earlier run left offset windows open (their rows are compared one by one)."""
        return any(key[0] == "o" for key in self.before)

    def carried_at_rest(self) -> tuple[AtRest, str] | None:
        """For a saved group that read nothing in the run (never `opened`): its `AtRest` and its saved
        state's JSON, carried forward as they are, when that is what resuming and finishing it would
        give. That holds under `resume` (its unchanged open rows are dropped; `rerun` would carry them
        again), from a state that is not empty (an empty one starts afresh), keeps its offset
        summaries and its GroupMetadata record's value apart (as the job saves them: the saved JSON
        is then what resuming would save again), with no offsets missing before the run on its
        partitions (a gap would add a `history_gap` cause), and holds no tombstone's cause
        (`GroupAuditor.finish` reports it). None otherwise: `auditor` resumes it."""
        saved = self.saved
        if self._auditor is not None or saved is None or self.mode != "resume" or not saved.state:
            return None
        text = saved.state.decode() if isinstance(saved.state, bytes) else str(saved.state)
        data = json.loads(text)
        if data.get("window", {}).get("summaries"):
            return None
        if "value" in (data.get("group_record") or {}):  # (format 1): resuming saves it without the value
            return None
        if "held_cause" in data:  # resuming reports a tombstone's held cause and saves the state without it
            return None
        rest = GroupAuditor.at_rest(data, record_value=saved.value)
        if any(p in self._gaps for p in rest.partitions):
            return None
        return rest, text

    def _keep_before(self, rows: Iterable[Any]) -> None:
        for row in rows:
            if type(row) is AssignmentRun:
                self._keep_before(row.rows())
                continue
            key = _identity_key(row)
            if key is not None:
                self.before[key] = row

    def feeding(self) -> None:
        """Before the group's audit is fed records: its open generation's rows as they stand go into
        `before` (`observed`), once."""
        if not self.observed:
            self.observed = True
            self._keep_before(self.auditor.generation_rows())

    def route(self, row: Any, new: list[Any], carried: list[Any]) -> None:
        """Sorts one of the auditor's rows into `new` or `carried` (module docstring), or drops it (an
        open row the earlier run stored, unchanged). An `AssignmentRun` goes whole into `new` unless
        rows the earlier run left open are to be compared: then row by row."""
        if self.before:
            if type(row) is AssignmentRun:
                for one in row.rows():
                    self.route(one, new, carried)
                return
            key = _identity_key(row)
            if key is not None:
                old = self.before.pop(key, None)
                if old is not None:
                    if self.mode == "rerun" or old != row:
                        carried.append(row)
                        if self.kept is not None:
                            self.kept.append(row)
                    return
        new.append(row)
        if self.kept is not None:
            self.kept.append(row)

    def closing_rows(self) -> tuple[list[Any], list[Any]]:
        """At the group's end: the rows to route (the `history_gap` cause of a gap no record
        explained, then what is still open, as it stands), and the open offset windows' rows among
        them."""
        auditor = self.auditor
        finished = auditor.finish(generation=self.observed)
        return [*auditor.gap_rows(), *finished], [r for r in finished if type(r) is OffsetCommitRow]

    def state(self, open_rows: list[OffsetCommitRow]) -> tuple[str, tuple[Any, ...], bytes | None, list[int | None]]:
        """The group's state after the run: the auditor's `to_dict(summaries=False, record_value=False)`
        as JSON, its open window (`GroupAuditor.window()`), the window's GroupMetadata value, and the
        last commit's log offset of each of `open_rows` (the open windows' rows `closing_rows` gave)."""
        auditor = self.auditor
        return (json.dumps(auditor.to_dict(summaries=False, record_value=False), separators=(",", ":")),
                auditor.window(), auditor.window_record_value(), auditor.last_commit_offsets(open_rows))
