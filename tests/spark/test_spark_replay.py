"""coordinator_audit.udfs.replay: the mapInArrow adapter against the pure audit, without Spark (Arrow batches fed to
the function) and through Spark (`replay_frame`, then `split_table` / `split_counts`)."""

from __future__ import annotations

import dataclasses
import json
import random
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema

from coordinator_audit.core.audit import GroupAuditor, GroupReplay, HistoryGap, table_of
from coordinator_audit.core.sim.builders import LogBuilder, member, tps
from coordinator_audit.udfs.derived import BASE_INPUTS, DERIVED_TABLES, derive_tables
from coordinator_audit.udfs.replay import (
    COUNT_FIELDS,
    COUNTS_TABLE,
    INPUT_COLUMNS,
    REPLAY_DERIVED_SCHEMA,
    REPLAY_SCHEMA,
    STATE_TABLE,
    STATE_WINDOWS_TYPE,
    group_runs,
    make_replay_fn,
    replay_frame,
    replay_schema,
    sorted_runs,
    split_counts,
    split_table,
    wide_column,
)
from coordinator_audit.udfs.schemas import AUDIT_TABLES

pytestmark = pytest.mark.spark

A = tps("t", 0, 1, 2)
B = tps("t", 3, 4, 5)
INPUT_SCHEMA = pa.schema(list(zip(INPUT_COLUMNS[:6], (pa.string(), pa.int32(), pa.int64(), pa.int64(), pa.binary(),
                                                       pa.binary()), strict=True)))
"""The records' columns; `state` and `missing` (absent here) are optional."""

Record = tuple[str | None, int, int, int, bytes, bytes | None]


def _log() -> list[Record]:
    """Three groups (sorted as the job sorts them, the unreadable key first): generations,
    assignments, causes, a duplicate-assignment violation (member_ids), offset commits, a tombstone,
    a static member, and a quarantined record."""
    a = (LogBuilder("grp-a", partition=3)
         .group(1, [member("a-1", A + tps("t", 3)), member("b-1", B)])  # duplicate assignment of t-3
         .commit("t", 0, 10).commit("t", 0, 12)
         .group(2, [member("a-1", A, instance="inst-a"), member("b-1", B)])
         .commit("t", 1, 7).offset_tombstone("t", 1)
         .tombstone())
    b = LogBuilder("grp-b", partition=5).group(1, [member("c-1", A + B)]).commit("u", 4, 1)
    rows: list[Record] = [(None, 9, 0, 1_700_000_000_000, b"\x00\x02\xff", b"\x00\x03")]
    rows += [("grp-a", *r) for r in a.records]
    rows += [("grp-b", *r) for r in b.records]
    return rows


def _batches(log: list[Record], size: int) -> list[pa.RecordBatch]:
    columns = list(zip(*log, strict=True))
    table = pa.table([pa.array(c, t) for c, t in zip(columns, INPUT_SCHEMA.types, strict=True)], schema=INPUT_SCHEMA)
    return table.to_batches(max_chunksize=size)


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _expected(log: list[Record]) -> dict[str, Counter[tuple[Any, ...]]]:
    """Rows per table (and the counts rows) from GroupAuditor directly, group by group."""
    out: dict[str, Counter[tuple[Any, ...]]] = {t: Counter() for t in (*AUDIT_TABLES, COUNTS_TABLE)}
    for group in dict.fromkeys(r[0] for r in log):
        auditor = GroupAuditor(group)
        records = [r[1:] for r in log if r[0] == group]
        for row in [*auditor.feed(records), *auditor.finish()]:
            out[table_of(row)][tuple(map(_freeze, (_plain(v) for v in dataclasses.astuple(row))))] += 1
        counts = auditor.counts
        out[COUNTS_TABLE][(auditor.group_id if auditor.group_id is not None else group,
                           *(getattr(counts, n) for n in COUNT_FIELDS))] += 1
    return out


def _freeze(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _wide_rows(table: pa.Table) -> dict[str, Counter[tuple[Any, ...]]]:
    """The wide output split per table, as the row tuples `_expected` builds."""
    out: dict[str, Counter[tuple[Any, ...]]] = {}
    rows = table.to_pylist()
    for name, cls in (*AUDIT_TABLES.items(), (COUNTS_TABLE, None)):
        fields = [f.name for f in dataclasses.fields(cls)] if cls is not None else ["group_id", *COUNT_FIELDS]
        out[name] = Counter(tuple(_freeze(r[wide_column(name, f)]) for f in fields) for r in rows if r["_table"] == name)
    return out


def test_arrow_batches_give_the_audits_rows_in_bounded_batches() -> None:
    log = _log()
    expected = _expected(log)
    assert all(expected[t] for t in ("generations", "assignments", "rebalance_causes", "violations",
                                     "offset_commits", "quarantine", COUNTS_TABLE))
    assert any(len(v[5]) == 2 for v in expected["violations"])  # member_ids ("a-1", "b-1")
    arrow_schema = to_arrow_schema(REPLAY_SCHEMA, timezone="UTC")
    for input_rows, batch_rows in ((4, 5), (1000, 10_000)):
        out = list(make_replay_fn(batch_rows=batch_rows)(iter(_batches(log, input_rows))))
        assert all(b.schema == arrow_schema for b in out)
        # flushed once batch_rows audit rows are held (counts rows and the rows of the record that
        # crossed the mark may add a few)
        assert all(b.num_rows <= batch_rows + 2 for b in out[:-1])
        assert _wide_rows(pa.Table.from_batches(out)) == expected
        states = sum(1 for r in pa.Table.from_batches(out).column("_table").to_pylist() if r == STATE_TABLE)
        assert states == 2  # one saved state per group with a readable id
        assert sum(b.num_rows for b in out) == sum(sum(c.values()) for c in expected.values()) + states


def _windows(auditor: GroupAuditor) -> list[dict[str, Any]]:
    """The auditor's open summaries as `group_state.offset_windows` keeps them."""
    gen, state, _, start = auditor.window()
    assert auditor.group_id is not None
    return [{**dataclasses.asdict(s.row(auditor.group_id, t, p, generation_id=gen, window_state=state,
                                        window_start_offset=start, window_end_offset=None)),
             "last_commit_source_offset": s.last_commit_source_offset}
            for (t, p), s in auditor.open_summaries().items()]


STATE_INPUT_SCHEMA = pa.schema([*INPUT_SCHEMA, pa.field("state", pa.binary()), pa.field("missing", pa.int64()),
                                pa.field("state_windows", STATE_WINDOWS_TYPE)])
"""The records' columns, a saved state's and its offset windows'."""


@pytest.mark.parametrize("summaries", ["in_state", "apart"])
def test_a_resumed_group_gives_the_rows_of_one_pass_with_the_earlier_open_rows_carried(summaries: str) -> None:
    """Half of a group's records audited and saved, the rest fed after its saved state (a `state`
    row, its open offset summaries inside it or apart, as `group_state.offset_windows` keeps them):
    the earlier pass's closed rows, plus this pass's new rows and its carried rows (which replace
    the earlier pass's open rows) are exactly one pass's rows, offset_commits included."""
    log = [r for r in _log() if r[0] == "grp-a"]
    expected = _expected(log)
    for k in range(1, len(log)):
        first = GroupAuditor("grp-a")
        earlier = [*first.feed([r[1:] for r in log[:k]]), *first.finish()]
        state = first.to_dict(summaries=summaries == "in_state")
        windows = _windows(first) if summaries == "apart" else None
        marker = ("grp-a", -1, -1, None, None, None, json.dumps(state).encode(), None, windows)
        rows = [(*r, None, None, None) for r in log[k:]]
        table = pa.table(list(zip(*[marker, *rows], strict=True)), schema=STATE_INPUT_SCHEMA)
        out = pa.Table.from_batches(list(make_replay_fn(mode="resume")(iter(table.to_batches()))))
        carried = out.filter(pc.fill_null(out.column("_carried"), False))
        new = out.filter(pc.invert(pc.fill_null(out.column("_carried"), False)))
        got = _wide_rows(new)
        replaced = _wide_rows(carried)
        for row in earlier:
            t = table_of(row)
            key = tuple(map(_freeze, (_plain(v) for v in dataclasses.astuple(row))))
            open_row = (getattr(row, "ended_at", 0) is None or getattr(row, "valid_to", 0) is None
                        or (t == "offset_commits" and getattr(row, "window_end_offset", 0) is None))
            if open_row and any(_same_interval(t, key, c) for c in replaced[t]):
                continue  # closed or changed by the resumed pass
            got[t][key] += 1
        for t, rows_ in replaced.items():
            got[t].update(rows_)
        for t in AUDIT_TABLES:
            assert got[t] == expected[t], (k, t)


def test_a_resumed_group_builds_its_generation_rows_only_when_it_is_fed_records(monkeypatch) -> None:
    """Under `resume`, a group that is fed no record in the run (here: its saved state keeps its
    offset summaries inside, so it is resumed rather than carried forward at rest; in the job, a
    group whose run holds summarised offset commits only) never builds its open generation's rows:
    only a fed record can change them. A group fed records takes them once, before the first one,
    and builds them again at its end; its closed generation comes out carried (the test above holds
    the rows equal at every cut)."""
    from coordinator_audit.core.audit.observer import GenerationObserver

    log = [r for r in _log() if r[0] == "grp-a"]
    calls: list[str] = []
    real = GenerationObserver.open_rows

    def counted(self: GenerationObserver) -> list[Any]:
        calls.append(self.group_id or "")
        return real(self)

    monkeypatch.setattr(GenerationObserver, "open_rows", counted)
    first = GroupAuditor("grp-a")
    list(first.feed([r[1:] for r in log[:2]]))  # the first generation and a commit
    calls.clear()

    def replay(state: dict[str, Any], windows: Any, rest: list[Record]) -> pa.Table:
        marker = ("grp-a", -1, -1, None, None, None, json.dumps(state).encode(), None, windows)
        rows = [(*r, None, None, None) for r in rest]
        table = pa.table(list(zip(*[marker, *rows], strict=True)), schema=STATE_INPUT_SCHEMA)
        return pa.Table.from_batches(list(make_replay_fn(mode="resume")(iter(table.to_batches()))))

    out = replay(first.to_dict(summaries=False), _windows(first), log[2:])
    assert calls == ["grp-a", "grp-a"]  # before the first fed record, and at the end
    carried = out.filter(pc.fill_null(out.column("_carried"), False))
    assert "generations" in carried.column("_table").to_pylist()
    calls.clear()
    out = replay(first.to_dict(summaries=True), None, [])
    assert calls == []
    assert not pc.any(pc.fill_null(out.column("_carried"), False)).as_py()
    assert "_state" in out.column("_table").to_pylist()  # resumed, finished and saved


def test_saved_windows_are_read_field_by_field_as_their_values_say() -> None:
    """`_summaries` of a windows column (a slice of a larger one, a null row, a row of a state saved
    before `last_commit_source_offset` existed): each row's summaries, equal to those built from
    its values as dicts."""
    from coordinator_audit.core.audit import OffsetSummary
    from coordinator_audit.udfs.replay import _summaries

    def row(t: str, p: int, commits: int) -> dict[str, Any]:
        return {"group_id": "g", "topic": t, "partition": p, "generation_id": 1, "window_state": "Stable",
                "window_start_offset": 3, "window_end_offset": None, "commits": commits, "tombstones": 1,
                "first_offset": 10 if commits else None, "last_offset": 20 if commits else None,
                "first_commit_timestamp": 100 if commits else None,
                "last_commit_timestamp": 200 if commits else None, "regressions": 0, "source_partition": 4,
                "first_source_offset": 50 + p, "last_source_offset": 60 + p,
                "last_commit_source_offset": 59 + p if commits else None}

    values = [[row("a", 0, 2)], None, [row("a", 1, 0), row("b", 2, 5)], []]
    whole = pa.array([[row("z", 9, 1)], *values], STATE_WINDOWS_TYPE).slice(1)

    def by_dicts(windows: list[dict[str, Any]] | None) -> dict[tuple[str, int], Any]:
        return {(w["topic"], w["partition"]): vars_of(OffsetSummary.of_stretch(
            w["commits"], w["tombstones"], w["regressions"], w["first_offset"], w["last_offset"],
            w["first_commit_timestamp"], w["last_commit_timestamp"], w["first_source_offset"],
            w["last_source_offset"], w.get("last_commit_source_offset"), w["source_partition"]))
            for w in windows or ()}

    def vars_of(s: Any) -> tuple[Any, ...]:
        return tuple(getattr(s, f) for f in ("commits", "tombstones", "regressions", "first_offset", "last_offset",
                                             "first_commit_timestamp", "last_commit_timestamp", "first_source_offset",
                                             "last_source_offset", "last_commit_source_offset", "source_partition"))

    for i, windows in enumerate(values):
        assert {k: vars_of(v) for k, v in _summaries(whole, i).items()} == by_dicts(windows), i
    assert _summaries(None, 0) == {}
    older_type = pa.list_(pa.struct([f for f in STATE_WINDOWS_TYPE.value_type if f.name != "last_commit_source_offset"]))
    older = pa.array([[{k: v for k, v in row("a", 0, 2).items() if k != "last_commit_source_offset"}]], older_type)
    assert vars_of(_summaries(older, 0)[("a", 0)])[-2] is None
    broken = pa.array([[{"topic": "a", "partition": 0}]], pa.list_(pa.struct([("topic", pa.string()),
                                                                                ("partition", pa.int32())])))
    with pytest.raises(ValueError, match="no field 'commits'"):
        _summaries(broken, 0)


def _same_interval(table: str, a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Two rows of `table` describe the same generation / ownership interval (coordinator_audit.udfs.replay's keys)."""
    fields = [f.name for f in dataclasses.fields(AUDIT_TABLES[table])]
    keys = {"generations": ("generation_id", "source_partition", "source_offset"),
            "assignments": ("member_id", "generation_id", "topic", "partition", "source_partition",
                            "source_offset"),
            "offset_commits": ("topic", "partition", "source_partition", "window_start_offset")}.get(table)
    if keys is None:
        return False
    return all(a[fields.index(k)] == b[fields.index(k)] for k in keys)


def test_nothing_in_nothing_out() -> None:
    assert list(make_replay_fn()(iter([]))) == []
    with pytest.raises(ValueError, match="batch_rows"):
        make_replay_fn(batch_rows=0)


def test_chosen_tables_alone_come_out() -> None:
    """`tables` (the offset path's choice): those tables' rows, the same as in the full output, and
    no row of any other table, counts or states included."""
    log = _log()
    full = _wide_rows(pa.Table.from_batches(list(make_replay_fn(batch_rows=5)(iter(_batches(log, 4))))))
    chosen = ("offset_commits", "violations")
    out = pa.Table.from_batches(list(make_replay_fn(batch_rows=5, tables=chosen)(iter(_batches(log, 4)))))
    assert set(out.column("_table").to_pylist()) == set(chosen)
    # in the columns those tables use alone, in the full schema's order
    narrow = replay_schema(chosen)
    assert out.schema.names == narrow.fieldNames() == [n for n in REPLAY_SCHEMA.fieldNames() if n in narrow.fieldNames()]
    used = {wide_column(t, f.name) for t in chosen for f in dataclasses.fields(AUDIT_TABLES[t])}
    assert set(narrow.fieldNames()) == {"_table", "_carried", *used} and len(used) < len(REPLAY_SCHEMA.fields) - 2
    assert replay_schema(None) == REPLAY_SCHEMA and replay_schema(None, derive=True) == REPLAY_DERIVED_SCHEMA
    got = _wide_rows(out)
    assert all(got[t] == full[t] and full[t] for t in chosen)
    with pytest.raises(ValueError, match=r"unknown output table\(s\) \['offsets'\]"):
        make_replay_fn(tables=("offsets",))
    with pytest.raises(ValueError, match=r"\['partition_ownership'\]"):  # a derived table needs derive=True
        make_replay_fn(tables=("partition_ownership",))
    make_replay_fn(tables=("partition_ownership",), derive=True)


def test_replay_frame_through_spark(spark) -> None:
    log = _log()
    expected = _expected(log)
    records = (spark.createDataFrame(pa.Table.from_batches(_batches(log, 1000)).to_pandas())
               .repartition(2, "group_id").sortWithinPartitions("group_id", "partition", "offset"))
    wide = replay_frame(records.withColumn("extra", F.lit(1)))  # other columns are left out
    assert wide.schema == REPLAY_SCHEMA
    for table, cls in AUDIT_TABLES.items():
        got = split_table(wide, table)
        assert got.columns == [f.name for f in dataclasses.fields(cls)]
        assert Counter(tuple(_freeze(v) for v in r) for r in got.collect()) == expected[table], table
    counts = split_counts(wide).collect()
    assert Counter(tuple(r)[:1 + len(COUNT_FIELDS)] for r in counts) == expected[COUNTS_TABLE]
    # chosen tables (the offset path's): their columns alone, split as from the full schema
    chosen = ("offset_commits", "violations")
    narrow = replay_frame(records, tables=chosen)
    assert narrow.schema == replay_schema(chosen) != REPLAY_SCHEMA
    for table in chosen:
        got = split_table(narrow, table)
        assert got.schema == split_table(wide, table).schema
        assert Counter(tuple(_freeze(v) for v in r) for r in got.collect()) == expected[table], table
    # each group's Python time feeding its records and merging stretches (none here); nothing derived
    assert all(r["feed_seconds"] > 0 and r["merge_seconds"] == 0 and r["derive_seconds"] == 0
               for r in counts if r["records_in"])

    # derived in the replay: the same base rows and counts, and the derived tables are what
    # coordinator_audit.udfs.derived derives from those base rows in a stage of its own
    fused = replay_frame(records, derive=True).localCheckpoint()
    assert fused.schema == REPLAY_DERIVED_SCHEMA
    for table in AUDIT_TABLES:
        assert Counter(tuple(_freeze(v) for v in r) for r in split_table(fused, table).collect()) == expected[table]
    fused_counts = split_counts(fused).collect()
    assert Counter(tuple(r)[:1 + len(COUNT_FIELDS)] for r in fused_counts) == expected[COUNTS_TABLE]
    assert any(r["derive_seconds"] > 0 for r in fused_counts)
    separate = derive_tables({t: split_table(wide, t) for t in BASE_INPUTS})
    for name in DERIVED_TABLES:
        rows = Counter(map(repr, separate[name].collect()))
        assert rows, name
        assert split_table(fused, name).columns == separate[name].columns
        assert Counter(map(repr, split_table(fused, name).collect())) == rows, name


def test_replay_frame_names_missing_columns(spark) -> None:
    df = spark.createDataFrame([("g", 0)], "group_id string, partition int")
    with pytest.raises(ValueError, match=r"replay_frame: input lacks column\(s\) \['offset'"):
        replay_frame(df)


def test_a_group_saved_without_auditor_state_resumes_with_its_open_offset_summaries() -> None:
    """A `group_state` row of an earlier version for a group it saw only through offset commits has
    no auditor_state, only its open offset summaries: the replay resumes it afresh with them, so
    the open row continues (counts add up) and comes out carried."""
    log = [("grp-c", *r) for r in LogBuilder("grp-c", partition=4).commit("t", 0, 5).commit("t", 0, 9)
           .commit("t", 0, 7).records]
    first = GroupAuditor("grp-c")
    (open_row,) = [*first.feed([r[1:] for r in log[:2]]), *first.finish()]
    windows = _windows(first)
    marker = ("grp-c", -1, -1, None, None, None, b"", None, windows)
    table = pa.table(list(zip(*[marker, *[(*r, None, None, None) for r in log[2:]]], strict=True)), schema=STATE_INPUT_SCHEMA)
    out = pa.Table.from_batches(list(make_replay_fn(mode="resume")(iter(table.to_batches()))))
    rows = [r for r in out.to_pylist() if r["_table"] == "offset_commits"]
    assert len(rows) == 1 and rows[0]["_carried"]
    assert tuple(rows[0][wide_column("offset_commits", c)] for c in ("commits", "first_offset", "last_offset")
                 ) == (3, 5, 7)
    assert open_row.commits == 2  # what the earlier run wrote, which the carried row replaces


def test_the_open_window_value_is_the_open_row_and_its_last_commit() -> None:
    """`group_state.offset_windows` values, as the state rows' column is built (column by column, for
    several groups at once): the fields of each open `OffsetSummary.row` and its last commit's log
    offset, in `OFFSET_WINDOW_STRUCT`'s order; a group without open windows has an empty list."""
    from coordinator_audit.core.audit import OffsetSummary
    from coordinator_audit.udfs.replay import _open_windows, _RowBlock
    from coordinator_audit.udfs.schemas import OFFSET_WINDOW_STRUCT

    s = OffsetSummary.of_commit(10, 1000, 3, 40)
    s.commit(12, 1001, 41, True)
    s.tombstone(42)
    only_tombstones = OffsetSummary(3, 50)
    only_tombstones.tombstone(50)
    rows = [summary.row("g", "t", p, generation_id=5, window_state="Stable", window_start_offset=7,
                        window_end_offset=None) for p, summary in enumerate((s, only_tombstones))]
    last = [s.last_commit_source_offset, only_tombstones.last_commit_source_offset]
    got = _open_windows([(rows, last, []), ([], [], []), (rows[:1], last[:1], [])]).to_pylist()
    want = [{**dataclasses.asdict(r), "last_commit_source_offset": o} for r, o in zip(rows, last, strict=True)]
    assert got == [want, [], want[:1]]
    # rows held back as columns join a group's row objects in the order of their first records (log
    # order: the order the auditor's summaries would have had)
    held = _RowBlock([list(values) for values in zip(*map(dataclasses.astuple, rows), strict=True)], last)
    got = _open_windows([(rows[1:], last[1:], [held]), ([], [], [held])]).to_pylist()
    assert got == [[want[0], want[1], want[1]], want]
    assert last == [41, None] and list(got[0][0]) == [f.name for f in OFFSET_WINDOW_STRUCT.fields]


@pytest.mark.parametrize("groups", [[], ["a"], ["a", "a", "b", "c", "c", "c"], ["g1", "g2", "g2", "g3", "g3"]])
def test_sorted_runs_are_the_runs_group_runs_finds(groups: list[str]) -> None:
    """The vectorized run finder of the derivation's batches gives `group_runs`' runs."""
    assert sorted_runs(pa.array(groups, pa.string())) == list(group_runs(groups))


def test_a_replay_without_the_observer_gives_only_the_offset_windows_tables() -> None:
    make_replay_fn(tables=("offset_commits", "violations"), observe=False)  # the offset path's request
    for tables, derive in ((None, False), (("offset_commits", "generations"), False), (("offset_commits",), True)):
        with pytest.raises(ValueError, match="observe=False"):
            make_replay_fn(tables=tables, derive=derive, observe=False)


def _replayed(table: pa.Table, **options: Any) -> pa.Table:
    return pa.Table.from_batches(list(make_replay_fn(**options)(iter(table.to_batches()))))


@pytest.mark.parametrize(("summaries", "value"), [("in_state", "apart"), ("apart", "apart"), ("apart", "in_state")])
def test_a_saved_group_that_reads_no_record_is_carried_forward_as_resuming_it_would(
        summaries: str, value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Groups with a saved state and no record in the run (at every cut of their logs, under each
    resume mode, with and without a gap on their partition): the same output, state and counts
    rows included, as resuming each one's audit and finishing it. The state keeps its summaries
    inside or apart, and its GroupMetadata record's value apart (in the state row's `value`, as the
    job saves it) or inside (as states of format 1 have it: resumed, and saved in today's form)."""
    log = _log()
    real = GroupReplay.carried_at_rest
    taken: list[bool] = []

    def at_rest(self: GroupReplay) -> Any:
        rest = real(self)
        taken.append(rest is not None)
        return rest

    monkeypatch.setattr(GroupReplay, "carried_at_rest", at_rest)
    for k in range(1, 12):
        markers = []
        for group in ("grp-a", "grp-b"):
            records = [r[1:] for r in log if r[0] == group][:k]
            first = GroupAuditor(group)
            list(first.feed(records))
            first.finish()  # the job saves a group's state at its end (a tombstone's held cause reported)
            state = first.to_dict(summaries=summaries == "in_state", record_value=value == "in_state")
            windows = _windows(first) if summaries == "apart" else None
            markers.append((group, None, None, None, None, first.window_record_value() if value == "apart" else None,
                            json.dumps(state, separators=(",", ":")).encode(), None, windows))
        table = pa.table(list(zip(*markers, strict=True)), schema=STATE_INPUT_SCHEMA)
        for mode, gaps in (("resume", None), ("resume", {3: HistoryGap(3, 1, 9, 7, 1_700_000_000_000)}),
                           ("rerun", None)):
            carried = _replayed(table, mode=mode, gaps=gaps)
            with monkeypatch.context() as m:
                m.setattr(GroupReplay, "carried_at_rest", lambda _: None)
                resumed = _replayed(table, mode=mode, gaps=gaps)
            assert carried.to_pylist() == resumed.to_pylist(), (k, mode, gaps)
            tables = Counter(carried.column("_table").to_pylist())
            assert tables[STATE_TABLE] == tables[COUNTS_TABLE] == 2, (k, mode)
    # both paths were taken (rerun, a gap, summaries or the value saved inside the state: resumed)
    assert any(taken) and not all(taken)


# ------------------------------------------------------------------------------------------------
# saved groups that read only offset stretches: resumed, the stretches merged into their saved windows


STRETCH_INPUT_SCHEMA = pa.schema([
    *INPUT_SCHEMA, pa.field("state", pa.binary()), pa.field("missing", pa.int64()),
    pa.field("_kind", pa.string()), pa.field("topic", pa.string()), pa.field("partition_key", pa.int32()),
    *(pa.field(name, pa.int64()) for name in (
        "last_source_offset", "commits", "tombstones", "regressions", "first_commit_source_offset",
        "first_commit_record_ts", "first_offset", "first_commit_timestamp", "last_commit_source_offset",
        "last_offset", "last_commit_timestamp", "offset_value", "commit_timestamp", "previous_offset",
        "previous_commit_timestamp", "previous_source_offset")),
    pa.field("first_topic_id", pa.string()), pa.field("last_topic_id", pa.string()),
    pa.field("state_windows", STATE_WINDOWS_TYPE)])
"""The replay's input with the single pass's stretch columns (`coordinator_audit.udfs.replay.STRETCH_COLUMNS`)."""


def _stretch(group: str, partition: int, first: int, topic: str, key: int, commits: list[int], tombstones: int,
             ts: int, regressions: int = 0) -> dict[str, Any]:
    """A `partial` row: `commits` (committed offsets) then `tombstones` tombstones, one record each
    from log offset `first` of `partition`, with `regressions` steps back among the commits."""
    n = len(commits) + tombstones
    row: dict[str, Any] = {"group_id": group, "partition": partition, "offset": first, "timestamp_ms": ts,
                           "_kind": "partial", "topic": topic, "partition_key": key, "last_source_offset": first + n - 1,
                           "commits": len(commits), "tombstones": tombstones, "regressions": regressions}
    if commits:
        last = first + len(commits) - 1
        row.update(first_commit_source_offset=first, first_commit_record_ts=ts, first_offset=commits[0],
                   first_commit_timestamp=ts + 1, last_commit_source_offset=last, last_offset=commits[-1],
                   last_commit_timestamp=ts + len(commits))
    return row


def _random_nightly(rng: Any, groups: int) -> pa.Table:
    """Saved groups (a first half audited: a generation, Stable or Empty, and commits to up to five
    topic-partitions), then a second half of stretches: into saved windows, tombstones only, a new
    topic-partition, a stretch below its window's last commit, two stretches of one
    topic-partition, or a GroupMetadata record among them."""
    rows: list[dict[str, Any]] = []
    for g in range(groups):
        group, partition = f"grp-{g:03d}", g % 7
        b = LogBuilder(group, partition=partition, offset=100 * g)
        empty = rng.random() < 0.2
        b.group(1, [] if empty else [member("m-1", A + B)])
        keys = rng.sample(range(6), rng.randint(1, 5))
        for k in keys:
            for _ in range(rng.randint(0, 3)):
                b.commit("t", k, rng.randint(0, 50))
            if rng.random() < 0.2:
                b.offset_tombstone("t", k)
        first = GroupAuditor(group)
        list(first.feed(b.records))
        state = json.dumps(first.to_dict(summaries=False, record_value=False), separators=(",", ":")).encode()
        rows.append({"group_id": group, "state": state, "value": first.window_record_value(),
                     "state_windows": _windows(first)})  # (as the job saves it: the value apart)
        at = 100 * g + len(b.records) + 10
        ts = 1_700_100_000_000 + g
        later = [k for k in keys if first.open_summaries().get(("t", k)) is not None]
        if rng.random() < 0.15:
            later.append(6)  # a topic-partition the saved windows lack
        for k in later:
            for _ in range(2 if rng.random() < 0.1 else 1):  # two stretches: a task's edge cut it
                base = rng.randint(0, 60) if rng.random() < 0.2 else rng.randint(50, 60)
                commits = sorted(base + rng.randint(0, 9) for _ in range(rng.randint(0, 3)))
                tombstones = 0 if commits and rng.random() < 0.7 else rng.randint(1, 2)
                backs = 1 if len(commits) > 1 and rng.random() < 0.1 else 0  # (their own rows left out)
                if backs:
                    commits[0], commits[1] = commits[1] + 1, commits[0]
                rows.append(_stretch(group, partition, at, "t", k, commits, tombstones, ts, backs))
                at += len(commits) + tombstones
            if rng.random() < 0.05:
                gm = LogBuilder(group, partition=partition, offset=at).group(2, [member("m-1", A)])
                (p, o, t, key, value), = gm.records
                rows.append({"group_id": group, "partition": p, "offset": o, "timestamp_ms": t, "key": key,
                             "value": value})
                at += 1
    return pa.Table.from_pylist(rows, schema=STRETCH_INPUT_SCHEMA)


def _sorted_rows(table: pa.Table) -> list[str]:
    rows = []
    for r in table.to_pylist():
        if r["_table"] == COUNTS_TABLE:  # its Python timings differ from run to run
            r = {k: v for k, v in r.items() if not k.startswith("double_")}
        rows.append(repr(sorted(r.items())))
    return sorted(rows)


def test_saved_groups_that_read_only_stretches_give_the_same_rows_however_the_input_is_cut() -> None:
    """Random nightly inputs (`_random_nightly`): saved groups resumed with the stretches merged
    into their saved windows give the same rows whether their input comes in batches of 7 rows
    (groups cut between batches) or in one, and every group saves its state."""
    rng = random.Random(18)
    for _ in range(3):
        table = _random_nightly(rng, 40)
        cut, whole = (pa.Table.from_batches(list(make_replay_fn(mode="resume", batch_rows=50)(
            iter(table.to_batches(max_chunksize=size))))) for size in (7, 10_000))
        assert _sorted_rows(cut) == _sorted_rows(whole)
        states = [r for r in whole.to_pylist() if r["_table"] == STATE_TABLE]
        assert len(states) == 40
        assert any(r["_carried"] for r in whole.to_pylist() if r["_table"] == "offset_commits")


def test_side_records_missing_counts_leave_out_the_rejected_records_below_them() -> None:
    """`missing` of handed side rows (`_side_missing`, what `Scan.side(missing)` computes through
    Spark): offset - rank in the chunk - rejected records below it in its partition + the chunk's
    constant. Partition 0 holds records at 10, 11, 13 (side) and 16 (side) and rejected ones at 12
    and 15: one offset (14) was never read before 16, none before 13."""
    import numpy as np

    from coordinator_audit.udfs.replay import _side_missing

    rows = pa.table({"chunk": [1, 1, 1, 1], "partition": [0, 0, 0, 0], "offset": [10, 11, 13, 16],
                     "records_in": [0, 1, 2, 3]})
    side = np.array([False, False, True, True])
    consts = {(1, 0): -10}  # base 0 - first offset 10 - records before the chunk 0
    assert _side_missing(rows, side, consts, {0: (12, 15)}).to_pylist() == [None, None, 0, 1]
    assert _side_missing(rows, side, consts, {}).to_pylist() == [None, None, 1, 3]
