"""Nightly runs that carry state (`coordinator_audit.jobs.nightly`): N consecutive windows written into one output give
the same tables as one run over the whole log, read as stored and compared on every column but
`run_id`/`run_window` (`coordinator_audit.jobs.compare`; the derived tables included), whether each run's input holds
the whole log or only its window; compaction gives `history_gap` causes that explain every difference;
re-running the latest window changes nothing; overlapping and earlier windows are refused; a run after
a skipped night audits it when its input holds it (else the offsets it lacks are history gaps, and
re-running the latest window with an input that holds them recovers it); an empty window is a
successful run that says so; a run killed while committing heals when re-run; warm-up rebuilds the
state from the input's records before the window.

The default run draws a fixed sample of cut points; `NIGHTLY_FULL=1` runs every combination."""

from __future__ import annotations

import base64
import itertools
import json
import os
import random
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from coordinator_audit.core.records import decode, partition_for
from coordinator_audit.core.sim.scale import ScaleConfig, generate
from coordinator_audit.jobs import delta_io, derived_step, offsets_path, query
from coordinator_audit.jobs.audit import Capabilities, RunSummary, run_audit
from coordinator_audit.jobs.compare import compare_outputs
from coordinator_audit.jobs.config import load_config
from coordinator_audit.jobs.delta_io import read_table, window_label
from coordinator_audit.jobs.nightly import ChainRun, WindowConflict, plan_run, read_note
from tools.make_samples import to_table

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "data" / "samples"
COMPARED = ("generations", "assignments", "rebalance_causes", "violations", "offset_commits", "quarantine")
RUN_COLUMNS = ("run_id", "run_window")
FULL = os.environ.get("NIGHTLY_FULL") == "1"


# ------------------------------------------------------------------------------------------------
# inputs


def _scale_log(path: Path, seed: int) -> Path:
    """A random multi-group log from the simulator's scale mode: static and cooperative groups,
    rebalance storms, several `__consumer_offsets` partitions."""
    config = ScaleConfig(records=6000, groups=24, seed=seed, duration_ms=600_000, offsets_partitions=3,
                         storm_fraction=0.3, max_members=6, static_fraction=0.3, cooperative_fraction=0.4)
    tables = [to_table(b.partition, b.offset, b.timestamp_ms, b.key, b.value)
              for b in generate(config, partitions=range(config.offsets_partitions), batch_rows=2000)]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.concat_tables(tables), path)
    return path


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("nightly-logs")
    return {
        "real_broker": SAMPLES / "real_broker_3_9_0.parquet",
        "sim_samples": _write(pa.concat_tables([pq.read_table(p) for p in sorted(SAMPLES.glob("sim_*.parquet"))]),
                              d / "sim_samples" / "log.parquet"),
        "scale_7": _scale_log(d / "scale_7" / "log.parquet", 7),
        "scale_11": _scale_log(d / "scale_11" / "log.parquet", 11),
    }


@pytest.fixture(scope="module")
def single_runs(spark, logs, tmp_path_factory) -> Callable[[str], Path]:
    """One run over the whole log, per log, made once."""
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            out = tmp_path_factory.mktemp(f"single-{name}")
            _run(spark, logs[name], out)
            made[name] = out
        return made[name]

    return get


def _read_log(path: Path) -> pa.Table:
    if path.is_dir():
        return pa.concat_tables([pq.read_table(p) for p in sorted(path.glob("*.parquet"))])
    return pq.read_table(path)


def _run(spark, inp: Path, out: Path, since: datetime | None = None, until: datetime | None = None,
         capabilities: Capabilities | None = None, **overrides) -> RunSummary:
    values = {"input.path": str(inp), "input.format": "parquet", "output.path": str(out), "job.shards": 2,
              "window.since": since.isoformat() if since else None,
              "window.until": until.isoformat() if until else None}
    values.update(overrides)
    return run_audit(spark, load_config(None, {k: v for k, v in values.items() if v is not None}),
                     capabilities=capabilities)


def _hashable(value):
    return tuple(_hashable(v) for v in value) if isinstance(value, list | tuple) else value


def _rows(spark, out: Path, table: str) -> Counter:
    """A table's rows without the run columns, read with delta-rs (no Spark job)."""
    arrow = DeltaTable(str(out / table)).to_pyarrow_table()
    arrow = arrow.select([c for c in arrow.column_names if c not in RUN_COLUMNS])
    return Counter(_hashable(tuple(r.values())) for r in arrow.to_pylist())


def _diff(a: Counter, b: Counter) -> str:
    return f"only in one run: {sorted(a - b)[:3]} ...; only in the windows: {sorted(b - a)[:3]} ..."


DERIVED = ("partition_ownership", "rebalances", "group_health")


def _assert_same(out: Path, single: Path) -> None:
    """Every table of `out` as stored equals one run's (`coordinator_audit.jobs.compare.compare_outputs`), the derived
    tables among them."""
    results = compare_outputs(out, single)
    assert {*COMPARED, *DERIVED} <= {r.table for r in results}
    assert all(r.equal for r in results), "\n".join(r.describe() for r in results if not r.equal)


def _cuts(log: pa.Table, n: int, rng: random.Random) -> list[datetime]:
    """n distinct whole-second cut times strictly inside the log's time span."""
    ts = pc.min_max(log.column("timestamp")).as_py()
    lo = ts["min"].replace(microsecond=0, tzinfo=UTC) + timedelta(seconds=1)
    hi = ts["max"].replace(microsecond=0, tzinfo=UTC)
    span = int((hi - lo).total_seconds())
    return [lo + timedelta(seconds=s) for s in sorted(rng.sample(range(span), n))]


def _filtered(log: pa.Table, since: datetime | None, until: datetime | None) -> pa.Table:
    ts = log.column("timestamp")
    mask = pa.array([True] * log.num_rows)
    if since is not None:
        mask = pc.and_(mask, pc.greater_equal(ts, pa.scalar(since, ts.type)))
    if until is not None:
        mask = pc.and_(mask, pc.less(ts, pa.scalar(until, ts.type)))
    return log.filter(mask)


def _compacted(log: pa.Table, before: datetime) -> pa.Table:
    """Kafka's log compaction of the records before `before`: the latest record per key survives
    (per `__consumer_offsets` partition, in offset order); later records are untouched."""
    ts = log.column("timestamp").to_pylist()
    keys, parts, offs = log.column("key").to_pylist(), log.column("partition").to_pylist(), log.column("offset").to_pylist()
    cut = before.replace(tzinfo=None) if ts and ts[0] is not None and ts[0].tzinfo is None else before
    latest: dict[tuple[int, bytes], int] = {}
    for i in sorted(range(log.num_rows), key=lambda i: (parts[i], offs[i])):
        latest[(parts[i], keys[i])] = i
    keep = [i for i in range(log.num_rows) if ts[i] >= cut or latest[(parts[i], keys[i])] == i]
    return log.take(pa.array(keep, pa.int64()))


def _write(table: pa.Table, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def _windows(cuts: list[datetime]) -> list[tuple[datetime | None, datetime | None]]:
    return list(itertools.pairwise([None, *cuts, None]))


def _export(night: pa.Table, exports: Path, index: int) -> None:
    """A night's records added to an export directory as a Spark Kafka-source export writes them: a
    file per `__consumer_offsets` partition, in offset order (row groups of 200 records)."""
    exports.mkdir(parents=True, exist_ok=True)
    for partition in sorted(set(night.column("partition").to_pylist())):
        rows = night.filter(pc.equal(night.column("partition"), partition)).sort_by("offset")
        pq.write_table(rows, exports / f"night-{index}-partition-{partition}.parquet", row_group_size=200)


def _export_delta(night: pa.Table, table: Path) -> None:
    """A night's records appended to a Delta table as a streaming Kafka-source export writes them: a
    data file per `__consumer_offsets` partition, in offset order (a commit each here)."""
    for partition in sorted(set(night.column("partition").to_pylist())):
        write_deltalake(str(table), night.filter(pc.equal(night.column("partition"), partition)).sort_by("offset"),
                        mode="append")


def _chain(spark, tmp_path: Path, log_path: Path, cuts: list[datetime], *, inputs: str,
           capabilities: Capabilities | None = None, **overrides) -> tuple[Path, list[RunSummary]]:
    """Runs the windows in order into one output. `inputs`: "whole" (every run reads the whole log),
    "window" (each run reads its window's records only), "compacted" (every run reads the log with
    the records before its window compacted), "compacted-window" (each run reads its window's records
    from a log compacted up to the window's end: the window itself has holes), "exports" (every run
    reads one directory, to which each window's records are added before its run: `_export`),
    "delta-exports" (likewise, one Delta table: `_export_delta`). `overrides`: the runs' settings;
    `capabilities`: the session's, as the runs take them (None: this session's)."""
    out = tmp_path / "windows"
    log = _read_log(log_path)
    summaries = []
    for i, (since, until) in enumerate(_windows(cuts)):
        if inputs == "whole":
            inp = log_path
        elif inputs == "exports":
            inp = tmp_path / "exports"
            _export(_filtered(log, since, until), inp, i)
        elif inputs == "delta-exports":
            inp = tmp_path / "exports"
            _export_delta(_filtered(log, since, until), inp)
            overrides["input.format"] = "delta"
        elif inputs == "window":
            inp = _write(_filtered(log, since, until), tmp_path / f"in{i}" / "log.parquet")
        elif inputs == "compacted":
            inp = _write(_compacted(log, since) if since else log, tmp_path / f"in{i}" / "log.parquet")
        else:
            inp = _write(_filtered(_compacted(log, until) if until else log, since, until),
                         tmp_path / f"in{i}" / "log.parquet")
        summaries.append(_run(spark, inp, out, since, until, capabilities, **overrides))
    return out, summaries


CASES = [("real_broker", 1, "whole"), ("real_broker", 3, "window"), ("scale_7", 3, "window"), ("scale_7", 5, "whole"),
         ("sim_samples", 2, "whole")]
if FULL:
    CASES = [(log, n, inputs) for log in ("real_broker", "scale_7", "scale_11", "sim_samples")
             for n in (1, 2, 5) for inputs in ("whole", "window")]


@pytest.mark.parametrize(("log", "n_cuts", "inputs"), CASES, ids=[f"{a}-{b}cuts-{c}" for a, b, c in CASES])
def test_windows_in_order_equal_one_run(spark, tmp_path, logs, single_runs, log, n_cuts, inputs) -> None:
    cuts = _cuts(_read_log(logs[log]), n_cuts, random.Random(f"{log}-{n_cuts}-{inputs}"))
    out, summaries = _chain(spark, tmp_path, logs[log], cuts, inputs=inputs)
    single = single_runs(log)
    _assert_same(out, single)
    assert [s.resume for s in summaries] == ["fresh"] + ["resume"] * n_cuts
    # the chain carried something: later runs closed or continued rows earlier runs left open
    assert any(s.rows_merged for s in summaries[1:])
    runs = read_table(spark, str(out / "runs")).orderBy("finished_at").collect()
    assert [r["base_run_id"] for r in runs] == [None] + [s.run_id for s in summaries[:-1]]
    assert all(not r["missing_offsets"] for r in runs)  # nothing was missing: no gap invented


def test_a_growing_export_directory_is_read_a_night_at_a_time(spark, tmp_path, logs, single_runs, monkeypatch) -> None:
    """The nightly recipe's input: one directory that grows by a night's files. Each run leaves
    unread every row group of the nights before it (their offsets are at or below the previous run's
    last ones, `coordinator_audit.jobs.offsets_path._outside_row_groups`), and its tables and the runs table's counts
    are those of reading and filtering them."""
    single = single_runs("scale_7")
    left_out: list[int] = []
    outside = offsets_path._outside_row_groups

    def counted(*args, **kwargs):  # the real function, its answers noted
        found = outside(*args, **kwargs)
        left_out.append(sum(found.values()))
        return found

    monkeypatch.setattr(offsets_path, "_outside_row_groups", counted)
    log = _read_log(logs["scale_7"])
    cuts = _cuts(log, 2, random.Random("exports"))
    out, summaries = _chain(spark, tmp_path / "skipping", logs["scale_7"], cuts, inputs="exports")
    _assert_same(out, single)
    nights = [_filtered(log, since, until).num_rows for since, until in _windows(cuts)]
    assert left_out == [0, nights[0], nights[0] + nights[1]]
    monkeypatch.setattr(offsets_path, "SKIP_OUTSIDE_WINDOW", False)
    _, reading = _chain(spark, tmp_path / "reading", logs["scale_7"], cuts, inputs="exports")
    assert [s.counts for s in summaries] == [s.counts for s in reading]
    assert [s.counts["filtered_by_window"] for s in summaries] == [0, nights[0], nights[0] + nights[1]]


def test_a_growing_delta_export_read_by_spark_is_read_a_night_at_a_time(spark, tmp_path, logs, single_runs,
                                                                        monkeypatch) -> None:
    """The nightly recipe's input as a Delta table that grows by a night's files, read by Spark (as
    on a remote store: a session whose workers do not read this process's files). Each run gives Spark a condition on the time from
    the Delta log's statistics (`offsets_path._spark_window`), so it reads the night's records and
    not the nights before; its tables and counts are those of reading and filtering everything."""
    single = single_runs("scale_7")
    read: list[tuple[int, int | None]] = []  # (records Spark reads, records of the input), per pass
    window = offsets_path._spark_window

    def noted(*args, **kwargs):  # the real function, what it leaves Spark to read noted
        df, records, what = window(*args, **kwargs)
        read.append((df.count(), records))
        return df, records, what

    monkeypatch.setattr(offsets_path, "_spark_window", noted)
    log = _read_log(logs["scale_7"])
    cuts = _cuts(log, 2, random.Random("delta-exports"))
    remote = Capabilities(local_files=False, local_tasks=True)
    out, summaries = _chain(spark, tmp_path / "skipping", logs["scale_7"], cuts, inputs="delta-exports",
                            capabilities=remote)
    _assert_same(out, single)
    nights = [_filtered(log, since, until).num_rows for since, until in _windows(cuts)]
    # the first run has no lower bound (its window is open below): it reads all there is
    assert read == [(nights[0], nights[0]), (nights[1], sum(nights[:2])), (nights[2], sum(nights))]
    monkeypatch.setattr(offsets_path, "SKIP_OUTSIDE_WINDOW", False)
    read.clear()
    _, reading = _chain(spark, tmp_path / "reading", logs["scale_7"], cuts, inputs="delta-exports",
                        capabilities=remote)
    assert [r[1] for r in read] == [None] * 3
    assert [s.counts for s in summaries] == [s.counts for s in reading]
    assert [s.counts["filtered_by_window"] for s in summaries] == [0, nights[0], nights[0] + nights[1]]


def test_compaction_before_each_window_changes_nothing(spark, tmp_path, logs, single_runs) -> None:
    """Exports taken after compaction of the already-audited part: each run continues where the
    previous one stopped, so what compaction removed was read before."""
    cuts = _cuts(_read_log(logs["scale_11"]), 2, random.Random(5))
    out, _ = _chain(spark, tmp_path, logs["scale_11"], cuts, inputs="compacted")
    single = single_runs("scale_11")
    _assert_same(out, single)


def test_compacted_windows_report_history_gaps_that_explain_every_difference(spark, tmp_path, logs,
                                                                             single_runs) -> None:
    """Each window read from a log compacted up to its end (holes inside the windows and across runs):
    every generation, ownership interval and cause that differs from one run over the uncompacted log
    belongs to a group the audit reports a history gap for; nothing is invented elsewhere."""
    cuts = _cuts(_read_log(logs["scale_11"]), 2, random.Random(9))
    out, summaries = _chain(spark, tmp_path, logs["scale_11"], cuts, inputs="compacted-window")
    single = single_runs("scale_11")
    causes = read_table(spark, str(out / "rebalance_causes"))
    gap_groups = {r["group_id"] for r in causes.where("cause = 'history_gap'").select("group_id").collect()}
    assert gap_groups, "compaction removed records: gaps must be reported"
    assert any(s.note and "never read" in s.note for s in summaries)
    primaries = Counter((r["group_id"], r["generation_id"]) for r in causes.where("is_primary").collect())
    assert all(n == 1 for n in primaries.values())
    for table in ("generations", "assignments", "rebalance_causes", "violations"):
        a, b = _rows(spark, single, table), _rows(spark, out, table)
        differing = {row[0] for row in (a - b) + (b - a)}  # group_id is every table's first column
        unexplained = differing - gap_groups
        assert not unexplained, f"{table}: differences without a history_gap for groups {sorted(unexplained)[:5]}"


# ------------------------------------------------------------------------------------------------
# windows that do not simply follow


CRASH_CUTS = [datetime(2026, 11, 21, 23, 43, 40, tzinfo=UTC), datetime(2026, 11, 21, 23, 44, 5, tzinfo=UTC)]
"""The README's nightly recipe on the real broker's log: grp-s02's consumer c3 is killed at 23:43:59,
in the second window; the record that removes it falls in the third."""


def _owner(out: Path, at: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert query.main(["--tables", str(out), "owner", "--group", "grp-s02", "--topic", "tp-s02-a", "--partition", "4",
                       "--at", at]) == 0
    return capsys.readouterr().out


def test_a_member_crashed_in_an_earlier_window_is_unowned_from_its_last_commit(spark, tmp_path, logs, single_runs,
                                                                               capsys) -> None:
    """c3's interval, left open by the second window, closes at its last commit when the third window
    reads the record that removed it: the tables as stored are one run's, and the owner of
    tp-s02-a-4 is the one run's answer (UNOWNED, owner_departed, then c2), never c3 "still current"."""
    out, _ = _chain(spark, tmp_path, logs["real_broker"], CRASH_CUTS, inputs="whole")
    single = single_runs("real_broker")
    _assert_same(out, single)
    answers = {at: _owner(out, at, capsys) for at in ("2026-11-21T23:44:02Z", "2026-11-21T23:44:10Z")}
    assert answers == {at: _owner(single, at, capsys) for at in answers}
    assert "UNOWNED (owner_departed" in answers["2026-11-21T23:44:02Z"]
    assert "owned by grp-s02-c2-" in answers["2026-11-21T23:44:10Z"]
    assert not any("grp-s02-c3" in a or "still current" in a for a in answers.values())
    c3 = [r for r in DeltaTable(str(out / "partition_ownership")).to_pyarrow_table().to_pylist()
          if r["group_id"] == "grp-s02" and (r["member_id"] or "").startswith("grp-s02-c3")]
    assert c3 and all(r["valid_to"] is not None for r in c3)


def test_a_long_held_partition_of_a_crashed_member_closes_where_it_is_stored(spark, tmp_path, logs, single_runs,
                                                                             capsys, monkeypatch) -> None:
    """The same crash with history read back only 10 s before the last window (as a partition held
    for more than a day before its owner crashed): c3's interval starts before that floor and ends
    before the window, so the run does not re-derive it whole; the merge closes the stored row
    where it lives, and the ownership is one run's."""
    monkeypatch.setattr(derived_step, "HISTORY_LOOKBACK_MS", 10_000)
    out, summaries = _chain(spark, tmp_path, logs["real_broker"], CRASH_CUTS, inputs="whole")
    single = single_runs("real_broker")
    [ownership] = [r for r in compare_outputs(out, single) if r.table == "partition_ownership"]
    assert ownership.equal, ownership.describe()
    assert summaries[-1].rows_merged.get("partition_ownership")
    c3 = [r for r in DeltaTable(str(out / "partition_ownership")).to_pyarrow_table().to_pylist()
          if (r["member_id"] or "").startswith("grp-s02-c3") and r["generation_id"] == 2]
    assert all(r["valid_from"] < _ms(CRASH_CUTS[1]) - 10_000 for r in c3)  # before the floor
    assert c3 and all(r["to_evidence"] == "last_commit" and r["run_window"] != summaries[-1].run_window for r in c3)
    assert "UNOWNED (owner_departed" in _owner(out, "2026-11-21T23:44:02Z", capsys)


def _ms(t: datetime) -> int:
    return int(t.timestamp() * 1000)


def test_rerunning_the_latest_window_changes_nothing(spark, tmp_path, logs, single_runs) -> None:
    log = logs["real_broker"]
    out, summaries = _chain(spark, tmp_path, log, CRASH_CUTS, inputs="whole")
    before = {t: DeltaTable(str(out / t)).to_pyarrow_table().num_rows for t in (*COMPARED, *DERIVED)}
    again = _run(spark, log, out, CRASH_CUTS[-1], None)
    assert again.resume == "rerun" and again.base_run_id == summaries[-2].run_id
    assert {t: DeltaTable(str(out / t)).to_pyarrow_table().num_rows for t in before} == before
    _assert_same(out, single_runs("real_broker"))


def test_overlapping_and_earlier_windows_are_refused(spark, tmp_path, logs) -> None:
    log = logs["real_broker"]
    cuts = _cuts(_read_log(log), 2, random.Random(4))
    out, summaries = _chain(spark, tmp_path, log, cuts, inputs="whole")
    first, second, last = summaries
    before = _rows(spark, out, "generations")
    with pytest.raises(WindowConflict, match=f"overlaps run {second.run_id}"):
        _run(spark, log, out, cuts[0] + timedelta(seconds=1), None)
    with pytest.raises(WindowConflict, match=f"overlaps run {first.run_id}"):
        _run(spark, log, out, None, cuts[0])  # an earlier window, not the latest
    with pytest.raises(WindowConflict, match="same groups"):
        _run(spark, log, out, cuts[1], None, **{"groups.include": ["sc*"]})
    with pytest.raises(WindowConflict, match="--mode append would duplicate"):
        _run(spark, log, out, cuts[1], None, **{"output.write_mode": "append"})
    assert _rows(spark, out, "generations") == before  # nothing was written
    assert read_table(spark, str(out / "runs")).count() == 3
    assert last.run_window.endswith("--open")


def test_an_empty_window_is_a_successful_run_that_says_so(spark, tmp_path, logs) -> None:
    log = logs["real_broker"]
    end = pc.max(_read_log(log).column("timestamp")).as_py().replace(microsecond=0, tzinfo=UTC)
    out = tmp_path / "out"
    first = _run(spark, log, out, None, end + timedelta(hours=1))
    empty = _run(spark, log, out, end + timedelta(hours=1), end + timedelta(hours=2))
    assert empty.counts["records_replayed"] == 0 and empty.resume == "resume"
    assert empty.note and empty.note.startswith("empty window")
    runs = {r["run_id"]: r for r in read_table(spark, str(out / "runs")).collect()}
    assert runs[empty.run_id]["note"].startswith("empty window")
    assert runs[empty.run_id]["end_offsets"] == runs[first.run_id]["end_offsets"]  # carried forward
    state = read_table(spark, str(out / "group_state"))
    assert state.where(f"run_id = '{empty.run_id}'").count() == state.where(f"run_id = '{first.run_id}'").count() > 0
    assert not empty.rows_merged


SAMPLE_CUTS = (datetime(2026, 11, 21, 23, 43, 40, tzinfo=UTC), datetime(2026, 11, 21, 23, 44, 5, tzinfo=UTC))
"""The real broker sample's nightly cuts: no record of `__consumer_offsets` partitions 0 and 45 comes
before the first one; partitions 0, 45 and 48 hold records between them."""


def _runs_row(out: Path, run_id: str) -> dict:
    """A run's `runs` row as stored (delta-rs: times in UTC, maps as (key, value) pairs)."""
    rows = [r for r in DeltaTable(str(out / "runs")).to_pyarrow_table().to_pylist() if r["run_id"] == run_id]
    assert len(rows) == 1
    return {**rows[0], "missing_offsets": dict(rows[0]["missing_offsets"] or [])}


def _group_rows(out: Path, table: str, groups: set[str], *, keep: bool) -> Counter:
    """`_rows` of the groups in `groups` (`keep`) or of every other group."""
    arrow = DeltaTable(str(out / table)).to_pyarrow_table()
    arrow = arrow.filter(pc.is_in(arrow.column("group_id"), pa.array(sorted(groups), pa.string())) if keep
                         else pc.invert(pc.is_in(arrow.column("group_id"), pa.array(sorted(groups), pa.string()))))
    arrow = arrow.select([c for c in arrow.column_names if c not in RUN_COLUMNS])
    return Counter(_hashable(tuple(r.values())) for r in arrow.to_pylist())


def _groups_of(records: pa.Table) -> set[str]:
    return {decode(k, v).key.group for k, v in zip(records.column("key").to_pylist(),  # type: ignore[union-attr]
                                                   records.column("value").to_pylist(), strict=True)}


def _chain_run(run_id: str, since: datetime | None, until: datetime | None, ends: dict[int, int],
               minute: int) -> ChainRun:
    return ChainRun(run_id, window_label(since, until), since, until, None, ends,
                    datetime(2026, 11, 22, 0, minute, tzinfo=UTC))


def test_the_plan_of_a_run_after_a_skipped_night_and_of_its_rerun() -> None:
    """`plan_run` without Spark: a window after a gap continues the latest run from its end; a window
    ending where the latest ends and starting within it re-runs it from the run before it; the
    skipped window, or a window starting inside an earlier run, is refused; `read_note` says per
    partition what a run read."""
    d1, d2, d3 = (datetime(2026, 11, day, tzinfo=UTC) for day in (21, 22, 23))
    first = _chain_run("r1", None, d1, {44: 142, 48: 229}, 1)
    plan = plan_run([first], since=d2, until=d3, group_filter=None, mode="replace_window")
    assert (plan.resume, plan.base, plan.since) == ("resume", first, d1)
    assert "its window is [2026-11-21T00:00:00Z, 2026-11-23T00:00:00Z)" in plan.notes[0]
    note = read_note(plan, d2, {0: (149, 353, 205), 48: (230, 258, 29)})
    assert note == ("window [2026-11-21T00:00:00Z, ...) instead of --since 2026-11-22T00:00:00Z: run r1 ended at "
                    "2026-11-21T00:00:00Z; read after run r1's last offsets, per partition: 0: 149-353 (205 records, "
                    "first read: offsets before 149 are not in the input), 44: none after 142, 48: 230-258 "
                    "(29 records); partition 0 no earlier run read: from the first record in the input")
    third = _chain_run("r3", d1, d3, {0: 353, 44: 142, 48: 258}, 3)
    for since in (d2, d1):  # the same command again, or the window's widened start
        again = plan_run([first, third], since=since, until=d3, group_filter=None, mode="replace_window")
        assert (again.resume, again.base, again.since, again.replaces) == ("rerun", first, d1, third)
    with pytest.raises(WindowConflict, match=r"overlaps run r3 .*--since 2026-11-21T00:00:00Z --until 2026-11-23"):
        plan_run([first, third], since=d1, until=d2, group_filter=None, mode="replace_window")
    with pytest.raises(WindowConflict, match=r"overlaps run r1 .*only the latest window"):
        plan_run([first, third], since=d1 - timedelta(hours=1), until=d3, group_filter=None, mode="replace_window")
    assert read_note(plan_run([first], since=d1, until=d2, group_filter=None, mode="replace_window"), d1,
                     {48: (230, 258, 29)}) is None  # a night that simply follows: nothing to say


def test_a_skipped_night_with_the_whole_log_as_input_equals_one_run(spark, tmp_path, logs, single_runs) -> None:
    """Window 1, then window 3 of the real broker's log, every input the whole log: the third run
    continues the first from its end (its window, `runs.since` and `run_window` say so) and audits the
    skipped window's records, on partitions the first run read (after its last offsets) and on those
    it never read (0 and 45: from their first record); the tables equal one run. The skipped window
    cannot be run afterwards (its records are audited); the same command again re-runs the latest
    window."""
    log_path = logs["real_broker"]
    log = _read_log(log_path)
    cut1, cut2 = SAMPLE_CUTS
    out = tmp_path / "out"
    first = _run(spark, log_path, out, None, cut1)
    third = _run(spark, log_path, out, cut2, None)
    assert third.resume == "resume" and third.base_run_id == first.run_id
    assert third.run_window == window_label(cut1, None)
    before = _filtered(log, None, cut1)
    assert third.counts["filtered_by_window"] == before.num_rows
    assert third.counts["records_replayed"] == log.num_rows - before.num_rows
    row = _runs_row(out, third.run_id)
    assert row["since"] == cut1 and row["until"] is None and not row["missing_offsets"]
    unread = sorted(set(log.column("partition").to_pylist()) - set(before.column("partition").to_pylist()))
    assert unread == [0, 45]
    for p in unread:
        offsets = log.filter(pc.equal(log.column("partition"), p)).column("offset")
        lo, hi = pc.min_max(offsets).as_py().values()
        assert f"{p}: {lo}-{hi} ({len(offsets)} records, first read)" in row["note"]
    assert row["note"] == third.note and third.note.startswith(f"window [{cut1:%Y-%m-%dT%H:%M:%SZ}, ...)")
    single = single_runs("real_broker")
    _assert_same(out, single)
    with pytest.raises(WindowConflict, match=f"overlaps run {third.run_id} .*re-run that window \\(--since {cut1:%Y-%m-%dT%H:%M:%SZ}\\) with"):
        _run(spark, log_path, out, cut1, cut2)
    again = _run(spark, log_path, out, cut2, None)
    assert (again.resume, again.base_run_id, again.run_window) == ("rerun", first.run_id, third.run_window)
    _assert_same(out, single)


def test_a_skipped_night_missing_from_the_input_is_a_history_gap(spark, tmp_path, logs, single_runs) -> None:
    """Window 1, then window 3, each input its window's records only: the offsets of the skipped
    window are counted per partition (`runs.missing_offsets`, the note); the groups of those
    partitions get a `history_gap` cause (all the groups with records in the skipped window among
    them; the others' rows are one run's plus that cause), every other group's rows equal one run's.
    Re-running the latest window (the same command) with an input that holds the skipped night
    recovers it: the tables equal one run, no offset is missing."""
    log_path = logs["scale_7"]
    log = _read_log(log_path)
    a, b = _cuts(log, 2, random.Random(21))
    out = tmp_path / "out"
    first = _run(spark, _write(_filtered(log, None, a), tmp_path / "in0" / "log.parquet"), out, None, a)
    after = _run(spark, _write(_filtered(log, b, None), tmp_path / "in1" / "log.parquet"), out, b, None)
    assert after.run_window == window_label(a, None)
    skipped = _filtered(log, a, b)
    row = _runs_row(out, after.run_id)
    assert row["missing_offsets"] == dict(Counter(skipped.column("partition").to_pylist()))
    assert after.note and "never read" in after.note
    causes = DeltaTable(str(out / "rebalance_causes")).to_pyarrow_table()
    gaps = causes.filter(pc.equal(causes.column("cause"), "history_gap"))
    assert all("never read" in d for d in gaps.column("detail").to_pylist())
    gap_groups = set(gaps.column("group_id").to_pylist())
    # which groups' records the missing offsets held is unknown: every group the chain knew on a
    # partition with missing offsets gets the cause, among them every group with records there
    known = _groups_of(_filtered(log, None, a))
    on_gaps = {g for g in known if partition_for(g, 3) in row["missing_offsets"]}
    assert _groups_of(skipped) <= gap_groups == on_gaps
    single = single_runs("scale_7")
    for table in COMPARED:
        x, y = (_group_rows(o, table, gap_groups, keep=False) for o in (single, out))
        assert x == y, f"{table}: {_diff(x, y)}"
    # a group with no record among the missing offsets: its rows are one run's, and one cause says
    # that its history across the gap is unknown
    idle = gap_groups - _groups_of(skipped)
    for table in COMPARED:
        x, y = (_group_rows(o, table, idle, keep=True) for o in (single, out))
        if table == "rebalance_causes":
            added = y - x
            assert not x - y and sorted(r[0] for r in added) == sorted(idle)
            assert all(r[3] == "history_gap" and r[8] is False for r in added)
        else:
            assert x == y, f"{table}: {_diff(x, y)}"
    primaries = Counter((r["group_id"], r["generation_id"]) for r in causes.to_pylist() if r["is_primary"])
    assert all(n == 1 for n in primaries.values())
    healed = _run(spark, log_path, out, b, None)
    assert (healed.resume, healed.base_run_id, healed.run_window) == ("rerun", first.run_id, after.run_window)
    assert not _runs_row(out, healed.run_id)["missing_offsets"]
    _assert_same(out, single)


# ------------------------------------------------------------------------------------------------
# failures


@pytest.mark.parametrize("fail_at", ["offset_commits-merge", "runs"] + (["violations"] if FULL else []))
def test_a_run_killed_while_committing_heals_when_rerun(spark, tmp_path, logs, single_runs, monkeypatch,
                                                         fail_at) -> None:
    """The second window's run dies at a commit (compensation disabled: a killed process cannot
    compensate): a re-run of that window gives the same tables as runs that never failed."""
    log = logs["real_broker"]
    cuts = _cuts(_read_log(log), 1, random.Random(8))
    out = tmp_path / "windows"
    _run(spark, log, out, None, cuts[0])
    commit, merge = delta_io._commit_embedded, delta_io._merge_embedded

    def failing_commit(st, *args, **kwargs):
        if st.table == fail_at:
            raise KeyboardInterrupt(f"killed at the commit of {st.table}")
        return commit(st, *args, **kwargs)

    def failing_merge(spark_, st, *args, **kwargs):
        if f"{st.table}-merge" == fail_at:
            raise KeyboardInterrupt(f"killed at the merge of {st.table}")
        return merge(spark_, st, *args, **kwargs)

    monkeypatch.setattr(delta_io, "_commit_embedded", failing_commit)
    monkeypatch.setattr(delta_io, "_merge_embedded", failing_merge)
    monkeypatch.setattr(delta_io, "_compensate_embedded", lambda *a, **k: None)
    with pytest.raises(delta_io.DeltaWriteError):
        _run(spark, log, out, cuts[0], None)
    monkeypatch.undo()
    assert delta_io.find_incomplete_runs(str(out))  # the kill left commits without a runs row
    healed = _run(spark, log, out, cuts[0], None)
    assert healed.resume == "resume"
    single = single_runs("real_broker")
    _assert_same(out, single)


# ------------------------------------------------------------------------------------------------
# warm-up


def test_warm_up_rebuilds_the_state_from_records_before_the_window(spark, tmp_path, logs, single_runs) -> None:
    log_path = logs["real_broker"]
    cut = _cuts(_read_log(log_path), 1, random.Random(2))[0]
    out = tmp_path / "out"
    summary = _run(spark, log_path, out, cut, None)
    assert summary.resume == "warmup"
    single = single_runs("real_broker")
    cut_ms = int(cut.timestamp() * 1000)
    for table in ("generations", "assignments", "rebalance_causes", "offset_commits", "violations"):
        a, b = _rows(spark, single, table), _rows(spark, out, table)
        assert not b - a, f"{table}: rows the one run does not have: {sorted(b - a)[:3]}"
    gens = read_table(spark, str(out / "generations"))
    alive = read_table(spark, str(single / "generations")).where(
        f"ended_at IS NULL OR ended_at >= {cut_ms}").count()
    assert gens.count() == alive  # every generation alive at the cut or later, nothing before
    causes = read_table(spark, str(out / "rebalance_causes"))
    assert causes.where("cause = 'history_start'").count() == 0
    assert causes.where(f"record_timestamp < {cut_ms}").count() == 0  # the warm-up's causes are not re-audited


def test_states_saved_by_an_earlier_version_continue_the_chain(spark, tmp_path, logs, single_runs) -> None:
    """An output written by an earlier version holds `group_state` rows of format 1: the GroupMetadata
    record's value inside the JSON (base64) as well as in `window_value`. A run of today's code
    continues from them as from its own (the chain equals one run), and saves its states in
    format 2, the value stored once, in `window_value`."""
    log = _read_log(logs["scale_7"])
    (cut,) = _cuts(log, 1, random.Random("format-1"))
    out = tmp_path / "chain"
    _run(spark, logs["scale_7"], out, until=cut)
    location = str(out / "group_state")
    saved = DeltaTable(location).to_pyarrow_table()
    old_form = []
    for text, value in zip(saved.column("auditor_state").to_pylist(), saved.column("window_value").to_pylist(),
                           strict=True):
        data = json.loads(text)
        assert data["format"] == 2 and "value" not in (data["group_record"] or {})
        if data["group_record"] is not None:  # as the earlier version wrote it
            data["group_record"]["value"] = base64.b64encode(value).decode()
        old_form.append(json.dumps({**data, "format": 1}, separators=(",", ":")))
    assert any('"value":' in s for s in old_form)
    column = saved.schema.get_field_index("auditor_state")
    write_deltalake(location, saved.set_column(column, saved.schema.field(column), pa.array(old_form, pa.string())),
                    mode="overwrite", partition_by=["run_window"])
    _run(spark, logs["scale_7"], out, since=cut)
    single = single_runs("scale_7")
    _assert_same(out, single)
    later = DeltaTable(location).to_pyarrow_table().filter(pc.ends_with(pc.field("run_window"), "--open"))
    states = [json.loads(s) for s in later.column("auditor_state").to_pylist()]
    assert states and all(s["format"] == 2 and "value" not in (s["group_record"] or {}) for s in states)
