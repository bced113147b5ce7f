"""`GroupReplay`: one group's part of a run in a chain of runs. Two runs of it over a log cut anywhere,
the second resumed from the first's saved state, store what one pass over the whole log gives
(rows merged by identity as the job's writer merges carried rows); a saved group that reads nothing
is carried as saved exactly when resuming it would give the same."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from coordinator_audit.core.audit import (
    AssignmentRun,
    GroupAuditor,
    GroupReplay,
    HistoryGap,
    ResumeMode,
    SavedGroup,
)
from coordinator_audit.core.audit.replayer import _identity_key

from .audit_builders import LogBuilder
from .test_audit_stream import rich_log


def _rows(rows: list[Any]) -> list[Any]:
    out: list[Any] = []
    for row in rows:
        out.extend(row.rows() if type(row) is AssignmentRun else [row])
    return out


def _run(replay: GroupReplay, records: list[Any]) -> tuple[list[Any], list[Any], SavedGroup]:
    """One run of `replay` over `records`: its new rows, its carried rows, and the state it saves (its
    summaries kept apart, its GroupMetadata value apart, as the job saves them)."""
    new: list[Any] = []
    carried: list[Any] = []
    if records:
        replay.feeding()
        for row in replay.auditor.feed(records):
            replay.route(row, new, carried)
    closing, open_rows = replay.closing_rows()
    for row in closing:
        replay.route(row, new, carried)
    state, _, value, last_commits = replay.state(open_rows)
    assert last_commits == [replay.auditor.open_summaries()[(r.topic, r.partition)].last_commit_source_offset
                            for r in open_rows]
    summaries = copy.deepcopy(replay.auditor.open_summaries())
    return _rows(new), _rows(carried), SavedGroup(state, value, lambda: copy.deepcopy(summaries))


def _stored(first: list[Any], new: list[Any], carried: list[Any]) -> list[str]:
    """The table after two runs: the first run's rows, a carried row replacing the row of its
    identity, the new rows added (each row's repr, sorted)."""
    by_key = {_identity_key(row): k for k, row in enumerate(first) if _identity_key(row) is not None}
    table = list(first)
    for row in carried:
        table[by_key[_identity_key(row)]] = row
    return sorted(repr(row) for row in table + new)


def _one_pass(records: list[Any]) -> list[str]:
    auditor = GroupAuditor("g")
    return sorted(repr(row) for row in [*auditor.feed(records), *auditor.finish()])


@pytest.mark.parametrize("mode", ["resume", "rerun"])
def test_two_runs_cut_anywhere_store_what_one_pass_gives(mode: ResumeMode) -> None:
    records = rich_log().records
    whole = _one_pass(records)
    for k in range(len(records) + 1):
        first, carried0, saved = _run(GroupReplay("g", None, mode, {}), records[:k])
        assert carried0 == []  # a group without saved state has no earlier rows
        second = GroupReplay("g", saved, mode, {})
        new, carried, _ = _run(second, records[k:])
        assert _stored(first, new, carried) == whole, f"cut at {k}"
        if mode == "rerun":  # every row the first run left open comes out again, changed or not
            assert {_identity_key(r) for r in carried} == {
                _identity_key(r) for r in first if _identity_key(r) is not None and _open(r)}


def _open(row: Any) -> bool:
    return (getattr(row, "ended_at", 0) is None or getattr(row, "valid_to", 0) is None
            or getattr(row, "window_end_offset", 0) is None)


def test_warmup_rows_are_all_new() -> None:
    """Under `warmup` (no earlier rows stored): every row the resumed audit gives is new, open rows
    that did not change included."""
    records = rich_log().records
    for k in range(len(records) + 1):
        _, _, saved = _run(GroupReplay("g", None, "warmup", {}), records[:k])
        new, carried, _ = _run(GroupReplay("g", saved, "warmup", {}), records[k:])
        auditor = GroupAuditor.from_dict(json.loads(saved.state), record_value=saved.value)
        auditor.restore_summaries(saved.summaries())
        assert carried == []
        assert sorted(map(repr, new)) == sorted(map(repr, [*auditor.feed(records[k:]), *auditor.finish()])), k


def test_a_saved_group_that_reads_nothing_is_carried_as_resuming_it_would() -> None:
    """At every cut: carried as saved (no audit started) under `resume` with no gap, and then its
    state, window and value are what resuming and finishing it gives; never under `rerun` or with a
    gap on its partition, where resuming gives rows (all open rows again; a `history_gap` cause)."""
    records = rich_log().records
    partition = records[0][0]
    gap = HistoryGap(partition, 1, 9, 7, 1_700_000_000_000)
    for k in range(1, len(records) + 1):
        _, _, saved = _run(GroupReplay("g", None, "resume", {}), records[:k])
        rest = GroupReplay("g", saved, "resume", {}).carried_at_rest()
        assert rest is not None, k
        at_rest, text = rest
        resumed = GroupReplay("g", saved, "resume", {})
        new, carried, again = _run(resumed, [])
        assert (new, carried) == ([], [])
        assert text == again.state and at_rest.window == resumed.auditor.window()
        assert at_rest.window_record_value == again.value and at_rest.partitions == resumed.auditor.partitions
        assert GroupReplay("g", saved, "rerun", {}).carried_at_rest() is None
        with_gap = GroupReplay("g", saved, "resume", {partition: gap})
        assert with_gap.carried_at_rest() is None
        new, _, _ = _run(with_gap, [])
        assert any(type(r).__name__ == "RebalanceCauseRow" and r.cause == "history_gap" for r in new), k


def test_an_empty_saved_state_starts_afresh_with_its_saved_summaries() -> None:
    """A group an earlier run saw only through offset commits: no auditor state, its summaries apart;
    it is resumed (never carried as saved) and its windows continue from the saved summaries."""
    commits = LogBuilder("g").commit("t", 0, 10).commit("t", 1, 4).offset_tombstone("t", 2).records
    first = GroupAuditor("g")
    list(first.feed(commits))
    summaries = copy.deepcopy(first.open_summaries())
    replay = GroupReplay("g", SavedGroup(b"", None, lambda: copy.deepcopy(summaries)), "resume", {})
    assert replay.carried_at_rest() is None
    assert replay.auditor.open_summaries() == summaries
