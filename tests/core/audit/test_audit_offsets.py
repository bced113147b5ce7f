"""`OffsetSummary`: the offset-commit rules, against their definition, and the merge law the Spark
kernel and its stitching are held to (folding record by record == merging per-stretch summaries)."""

from __future__ import annotations

from functools import reduce
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator_audit.core.audit import OffsetSummary, Regression
from coordinator_audit.core.audit.offsets import NO_OFFSET

PARTITION = 7

# one record of a (group, topic-partition, window): a commit (offset, commitTimestamp) or a tombstone (None)
EVENT = st.one_of(st.none(), st.tuples(st.integers(0, 12), st.integers(1_000, 1_020)))
EVENTS = st.lists(EVENT, min_size=1, max_size=40)

Event = tuple[int, int] | None


def _records(events: list[Event], start: int = 100) -> list[tuple[int, Event]]:
    """The events at rising log offsets (with holes, as compaction leaves them)."""
    return [(start + 3 * i, e) for i, e in enumerate(events)]


def _fold(records: list[tuple[int, Event]], *, stable: bool) -> tuple[OffsetSummary, list[Regression]]:
    """The summary of `records` applied one by one, as the audit does (and what `commit` returned)."""
    found: list[Regression] = []
    s: OffsetSummary | None = None
    for o, e in records:
        if e is None:
            if s is None:
                s = OffsetSummary(PARTITION, o)
            s.tombstone(o)
        elif s is None:
            s = OffsetSummary.of_commit(e[0], e[1], PARTITION, o)
        else:
            r = s.commit(e[0], e[1], o, stable)
            if r is not None:
                found.append(r)
    assert s is not None
    return s, found


@given(EVENTS, st.booleans())
def test_the_fold_follows_the_definition(events: list[Event], stable: bool) -> None:
    records = _records(events)
    s, found = _fold(records, stable=stable)
    commits = [(o, e[0], e[1]) for o, e in records if e is not None]  # (log offset, offset, commitTimestamp)
    row = s.row("g", "t", 0, generation_id=1, window_state="Stable" if stable else "Empty", window_start_offset=1,
                window_end_offset=None)
    assert (row.commits, row.tombstones) == (len(commits), len(records) - len(commits))
    assert (row.first_source_offset, row.last_source_offset) == (records[0][0], records[-1][0])
    assert row.source_partition == PARTITION
    if commits:
        (_, off1, ts1), (on, offn, tsn) = commits[0], commits[-1]
        assert (row.first_offset, row.first_commit_timestamp, row.last_offset, row.last_commit_timestamp) == (
            off1, ts1, offn, tsn)
        assert s.last_commit_source_offset == on
    else:
        assert (row.first_offset, row.last_offset, row.first_commit_timestamp, row.last_commit_timestamp) == (
            None, None, None, None)
        assert s.last_offset == NO_OFFSET and s.last_commit_source_offset is None
    # a regression: a commit below the previous commit (tombstones between do not reset), Stable only
    expected = [Regression(off, ts, o) for (o, off, ts), (_, nxt, _) in pairwise(commits)
                if nxt < off] if stable else []
    assert found == expected
    assert row.regressions == s.regressions == len(expected)


@given(EVENTS, st.lists(st.integers(1, 39), max_size=6), st.booleans())
def test_merging_per_stretch_summaries_equals_the_fold(events: list[Event], cuts: list[int], stable: bool) -> None:
    """The law: cut a window's records anywhere into stretches; the stretches' summaries merged in
    log order (in any grouping: merge is associative) are the summary of the whole."""
    records = _records(events)
    bounds = [0, *sorted({c for c in cuts if c < len(records)}), len(records)]
    parts = [_fold(records[a:b], stable=stable)[0] for a, b in pairwise(bounds)]
    whole = _fold(records, stable=stable)[0]
    left = reduce(lambda a, b: a.merge(b, stable=stable), parts)
    right = reduce(lambda b, a: a.merge(b, stable=stable), reversed(parts))
    assert left == whole
    assert right == whole


@given(EVENTS, EVENTS, st.booleans())
def test_merge_leaves_its_operands_unchanged(first: list[Event], second: list[Event], stable: bool) -> None:
    records = _records(first + second)
    a = _fold(records[:len(first)], stable=stable)[0]
    b = _fold(records[len(first):], stable=stable)[0]
    a_before, b_before = a.to_list(), b.to_list()
    a.merge(b, stable=stable)
    assert (a.to_list(), b.to_list()) == (a_before, b_before)


def test_a_step_back_across_stretches_counts_once_and_only_when_stable() -> None:
    earlier = OffsetSummary.of_commit(50, 1_000, PARTITION, 10)
    later = OffsetSummary(PARTITION, 11)
    later.tombstone(11)  # does not reset the comparison
    assert later.commit(40, 1_001, 12, True) is None  # the later stretch's first commit: nothing to compare with
    merged = earlier.merge(later, stable=True)
    assert (merged.regressions, merged.commits, merged.tombstones) == (1, 2, 1)
    assert (merged.first_offset, merged.last_offset, merged.last_commit_source_offset) == (50, 40, 12)
    assert earlier.merge(later, stable=False).regressions == 0


def test_state_layout_round_trips_and_is_checked() -> None:
    s = OffsetSummary.of_commit(5, 1_000, PARTITION, 10)
    s.tombstone(11)
    assert s.to_list() == [1, 1, 5, 5, 1_000, 1_000, 0, 10, 11, 10, PARTITION]  # format 1's slot order
    assert OffsetSummary.from_list(s.to_list()) == s
    with pytest.raises(ValueError, match="11 values, not 3"):
        OffsetSummary.from_list([1, 2, 3])


def test_a_stretch_from_its_values_is_the_fold_of_its_records() -> None:
    """`OffsetSummary.of_stretch` (the kernel's or group_state's values) gives the summary folding
    the same records gives; without commits, whatever commit values the source left read as none."""
    folded = OffsetSummary.of_commit(10, 1000, 3, 40)
    folded.commit(8, 1001, 41, True)
    folded.tombstone(42)
    assert OffsetSummary.of_stretch(2, 1, 1, 10, 8, 1000, 1001, 40, 42, 41, 3) == folded
    only_tombstones = OffsetSummary(3, 50)
    only_tombstones.tombstone(50)
    assert OffsetSummary.of_stretch(0, 1, 0, 7, 7, 5, 5, 50, 50, 50, 3) == only_tombstones
    assert OffsetSummary.of_stretch(0, 1, 0, None, None, None, None, 50, 50, None, 3) == only_tombstones
