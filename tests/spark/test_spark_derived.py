"""The derived tables in the job: stored with their schemas, equal to the pure derivation of the
stored base rows, the same when the log is audited in two windows (nightly runs) as in one, and
answered by `coordinator_audit.jobs.query`."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from coordinator_audit.jobs import query
from coordinator_audit.jobs.audit import run_audit
from coordinator_audit.jobs.compare import compare_outputs
from coordinator_audit.jobs.config import load_config
from coordinator_audit.jobs.delta_io import read_table
from coordinator_audit.jobs.delta_read import _outside, may_hold, may_reach, plain_type, read_arrow
from coordinator_audit.jobs.derived_step import _ALIVE, HISTORY_LOOKBACK_MS, stored_history
from coordinator_audit.udfs.derived import NATURAL_KEYS
from coordinator_audit.udfs.history import commit_times, derive_group
from coordinator_audit.udfs.schemas import TIME_COMPANIONS, stored_schema
from tests.spark.test_spark_nightly import _scale_log

pytestmark = pytest.mark.spark

DERIVED = ("partition_ownership", "rebalances", "group_health")
BASE_TABLES = ("generations", "assignments", "rebalance_causes", "violations", "offset_commits", "quarantine")
RUN_COLUMNS = ("run_id", "run_window")
CUT = "2026-11-21T23:43:40Z"
"""Where `two_windows` cuts the real broker's log."""
ROOT = Path(__file__).resolve().parents[2]


def _rows(out: Path, table: str) -> list[dict]:
    return DeltaTable(str(out / table)).to_pyarrow_table().to_pylist()


COMPANIONS = {ts for pairs in TIME_COMPANIONS.values() for _, ts in pairs}
"""The stored TIMESTAMP companions of the millisecond columns (the derivation's rows have none)."""


def _content(rows: list[dict]) -> list[tuple]:
    return sorted((tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in r.items()
                                if k not in RUN_COLUMNS and k not in COMPANIONS)) for r in rows), key=repr)


def test_derived_tables_are_stored_with_their_schemas(derived_run: Path) -> None:
    for name in DERIVED:
        dt = DeltaTable(str(derived_run / name))
        assert [f.name for f in dt.schema().fields] == stored_schema(name).fieldNames(), name
        assert dt.to_pyarrow_table().num_rows > 0, name
    runs = _rows(derived_run, "runs")
    assert {n: dict(runs[0]["table_rows"])[n] for n in DERIVED} == {n: len(_rows(derived_run, n)) for n in DERIVED}


def test_spark_derivation_equals_the_pure_one_on_the_stored_base_rows(derived_run: Path) -> None:
    base = {t: _rows(derived_run, t) for t in ("generations", "assignments", "offset_commits", "rebalance_causes",
                                               "violations")}
    groups = sorted({r["group_id"] for r in base["generations"]})
    assert len(groups) == 6
    expected = {name: [] for name in DERIVED}
    for g in groups:
        mine = {t: [r for r in rows if r["group_id"] == g] for t, rows in base.items()}
        produced = derive_group(g, generations=mine["generations"], assignments=mine["assignments"],
                                commits=commit_times(mine["offset_commits"]), causes=mine["rebalance_causes"],
                                violations=mine["violations"])
        for name, rows in zip(DERIVED, produced, strict=True):
            expected[name].extend(r.__class__.__dataclass_fields__ and {f: getattr(r, f) for f in
                                                                         r.__dataclass_fields__} for r in rows)
    for name in DERIVED:
        assert _content(_rows(derived_run, name)) == _content(expected[name]), name


def test_real_broker_steady_group(derived_run: Path) -> None:
    """grp-s01: range (EAGER), three members, then closed one by one (the broker's own lines say
    generation 2 was prepared at 23:43:26.137 when c3 left, and stabilised at 23:43:28.088)."""
    reb = sorted((r for r in _rows(derived_run, "rebalances") if r["group_id"] == "grp-s01"),
                 key=lambda r: r["generation_id"])
    assert [(r["generation_id"], r["outcome"], r["trigger"]) for r in reb] == [
        (1, "completed", "group_created"), (2, "completed", "member_left_or_expired"), (3, "emptied", "group_emptied")]
    g2 = reb[1]
    start = datetime.fromtimestamp(g2["started_at"] / 1000, UTC)
    broker_start = datetime(2026, 11, 21, 23, 43, 26, 137_000, tzinfo=UTC)
    assert g2["start_evidence"] == "last_commit" and not g2["start_exact"]
    # c2 (which stayed) committed and revoked when a heartbeat told it: within heartbeat.interval.ms (3 s)
    assert 0 <= (start - broker_start).total_seconds() < 3.0
    assert g2["join_completed_at"] == int(datetime(2026, 11, 21, 23, 43, 28, 88_000, tzinfo=UTC).timestamp() * 1000)
    assert (g2["members_before"], g2["members_after"], g2["partitions_moved"], g2["partitions_unowned"]) == (3, 1, 4, 6)
    own = [r for r in _rows(derived_run, "partition_ownership") if r["group_id"] == "grp-s01" and r["partition"] == 2]
    kinds = [(r["owned"], r["unowned_reason"], r["generation_id"]) for r in sorted(own, key=lambda r: r["valid_from"])]
    assert kinds == [(True, None, 1), (False, "eager_join_phase", 2), (True, None, 2), (False, "owner_departed", 3),
                     (False, "group_empty", 3)]


@pytest.fixture(scope="module")
def two_windows(spark, derived_input: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The log audited as two windows into one output (replace_window), the second reading the
    first's rows back as history and merging the rows it carried."""
    out = tmp_path_factory.mktemp("two-windows")
    cut = CUT  # inside the real broker's log: grp-s02, s05 and s07 span it
    for since, until in (("2000-01-01", cut), (cut, "2100-01-01")):
        run_audit(spark, load_config(None, {"input.path": str(derived_input), "input.format": "parquet",
                                            "output.path": str(out), "job.shards": 2,
                                            "window.since": since, "window.until": until}))
    return out


def test_two_nightly_windows_give_the_same_tables_as_one_run(two_windows: Path, derived_run: Path) -> None:
    """Read as stored (no de-duplication), every table of the two windows, the derived ones
    included, is that of one run over all (`coordinator_audit.jobs.compare`)."""
    assert len({r["run_window"] for r in _rows(two_windows, "partition_ownership")}) == 2
    results = compare_outputs(two_windows, derived_run)
    assert set(DERIVED) <= {r.table for r in results}
    assert all(r.equal for r in results), "\n".join(r.describe() for r in results if not r.equal)


def test_compare_exits_cleanly_in_a_fresh_interpreter(two_windows: Path, derived_run: Path) -> None:
    """`coordinator-audit compare` as a user runs it, on tables a nightly merge rewrote: its answer and exit
    code 0, every time (read through deltalake's Python filesystem, the exit once aborted: code 134)."""
    for _ in range(6):
        done = subprocess.run([sys.executable, "-m", "coordinator_audit", "compare", str(two_windows), str(derived_run)],
                              capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
        assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
        assert done.stdout.rstrip().endswith("all tables equal"), done.stdout[-1000:]


def _view_typed_files(table: Path) -> list[str]:
    dt = DeltaTable(str(table))
    return [u for u in dt.file_uris()
            if any(pa.types.is_string_view(f.type) for f in pq.read_schema(u))]


def test_a_window_of_offset_commits_only_updates_the_days_health(spark, tmp_path, capfd) -> None:
    """A quiet window (offset commits only: no generation opens or closes) still changes its
    groups' health of the day (`last_commit_at`, the observed part of the day): it derives them, and
    the two windows' tables as stored equal one run's."""
    log = _scale_log(tmp_path / "log" / "log.parquet", 5)
    rows = pq.read_table(log, columns=["key", "timestamp"]).to_pylist()
    last_group_record = max(r["timestamp"] for r in rows if r["key"][:2] == b"\x00\x02")  # key version 2
    cut = (last_group_record.replace(microsecond=0) + timedelta(seconds=1)).astimezone(UTC).isoformat()
    assert sum(r["timestamp"] >= datetime.fromisoformat(cut) for r in rows) > 1000  # commits after the cut

    def run(out: Path, since: str | None, until: str | None) -> None:
        window = {"window.since": since, "window.until": until}
        run_audit(spark, load_config(None, {"input.path": str(log), "input.format": "parquet",
                                            "output.path": str(out), "job.shards": 2,
                                            **{k: v for k, v in window.items() if v is not None}}))

    run(tmp_path / "one", None, None)
    for since, until in ((None, cut), (cut, None)):
        capfd.readouterr()
        run(tmp_path / "windows", since, until)
    assert "stage derived tables" in capfd.readouterr().err
    results = compare_outputs(tmp_path / "windows", tmp_path / "one")
    assert all(r.equal for r in results), "\n".join(r.describe() for r in results if not r.equal)


def test_tables_a_merge_rewrote_are_read_and_filtered(two_windows: Path) -> None:
    """delta-rs MERGE writes string_view files, which deltalake's filtered read cannot compare;
    `read_arrow` reads them in the table's plain types, skipping nothing it should keep."""
    merged = two_windows / "generations"
    assert _view_typed_files(merged), "precondition: the second window's merge rewrote a generations file"
    everything = read_arrow(str(merged))
    assert everything.schema == pa.schema(DeltaTable(str(merged)).to_pyarrow_table().schema)
    for group in sorted(set(everything["group_id"].to_pylist())):
        got = read_arrow(str(merged), equals=("group_id", group)).to_pylist()
        want = [r for r in everything.to_pylist() if r["group_id"] == group]
        assert sorted(map(repr, got)) == sorted(map(repr, want))
    assert read_arrow(str(merged), equals=("group_id", "no-such-group")).num_rows == 0


def test_statistics_skip_only_what_they_exclude() -> None:
    """Min/max prune a file or row group only when they prove the value absent; a string max may be
    a truncated prefix, so a value above it that starts with it is kept."""
    assert _outside("grp-a", "grp-b", "grp-z") and _outside("grp-zz", "grp-b", "grp-y")
    assert not _outside("grp-c", "grp-b", "grp-z") and not _outside("grp-c", None, None)
    assert not _outside("grp-s02-long-name", "grp-a", "grp-s02")  # max cut to "grp-s02"
    assert _outside("grp-s03", "grp-a", "grp-s02") and _outside(7, 1, 5) and not _outside(5, 1, 5)
    nested = pa.struct([pa.field("a", pa.list_view(pa.string_view())), pa.field("b", pa.binary_view())])
    assert plain_type(nested) == pa.struct([pa.field("a", pa.list_(pa.string())), pa.field("b", pa.binary())])
    assert plain_type(pa.map_(pa.string_view(), pa.int32())) == pa.map_(pa.string(), pa.int32())


def test_history_skips_only_files_without_a_current_row() -> None:
    """A file is read back as history unless its statistics prove every row closed before the floor
    (or it is empty); a file without statistics is read."""
    closed = {"num_records": 3, "null_count": {"ended_at": 0}, "max": {"ended_at": 99}}
    assert not may_reach(closed, "ended_at", 100, or_null=True)
    assert may_reach(closed, "ended_at", 99, or_null=True)
    assert may_reach({**closed, "null_count": {"ended_at": 1}}, "ended_at", 100, or_null=True)
    assert not may_reach({**closed, "null_count": {"ended_at": 1}}, "ended_at", 100, or_null=False)
    assert may_reach({"num_records": 3, "null_count": None, "max": None}, "ended_at", 100, or_null=True)
    assert not may_reach({"num_records": 0, "null_count": None, "max": None}, "ended_at", 100, or_null=True)


def test_a_runs_files_are_found_by_their_run_id_statistics(two_windows: Path) -> None:
    """`may_hold` on the run id (what the job's summary reads back) admits every file holding a row
    of the second run, the first window's files a merge rewrote among them, and skips the rest."""
    second = max(r["run_id"] for r in _rows(two_windows, "runs"))
    skipped = 0
    for table in ("generations", "assignments", "offset_commits", "partition_ownership"):
        dt = DeltaTable(str(two_windows / table))
        for action in pa.table(dt.get_add_actions(flatten=False)).to_pylist():
            ids = set(pq.read_table(two_windows / table / action["path"], columns=["run_id"]).column(0).to_pylist())
            assert may_hold(action, "run_id", second) or second not in ids, (table, action["path"])
            skipped += not may_hold(action, "run_id", second)
    assert skipped > 0
    assert not may_hold({"num_records": 0, "min": None, "max": None}, "run_id", second)
    assert may_hold({"num_records": 2, "min": None, "max": None}, "run_id", second)


def test_history_reads_every_row_a_full_scan_keeps(spark, two_windows: Path) -> None:
    """`stored_history` (files skipped by their statistics, one relation per table) returns for the
    second window exactly the rows a full read filtered in Python gives."""
    windows = sorted({r["run_window"] for r in _rows(two_windows, "generations")})
    assert len(windows) == 2
    since = datetime.fromisoformat(CUT)
    floor = int(since.timestamp() * 1000) - HISTORY_LOOKBACK_MS
    groups = sorted({r["group_id"] for r in _rows(two_windows, "generations")})[::2]
    history = stored_history(spark, str(two_windows), groups, run_window=windows[1], since=since)
    assert history is not None
    for table, df in history.items():
        key = [*NATURAL_KEYS[table], "run_id"]
        column, open_when_null = _ALIVE[table]

        def alive(r: dict, column: str = column, open_when_null: bool = open_when_null) -> bool:
            value = r[column]
            return (value is None and open_when_null) or (value is not None and value >= floor)

        want = sorted(tuple(r[c] for c in key) for r in _rows(two_windows, table)
                      if r["run_window"] != windows[1] and r["group_id"] in groups and alive(r))
        got = sorted(tuple(r[c] for c in key) for r in df.select(*key).collect())
        assert got == want, table
        assert "run_window" not in df.columns
    assert any(history[t].count() for t in history), "precondition: the first window left rows to read back"
    nothing = read_table(spark, str(two_windows / "generations"), files=lambda action: False, partitions=False)
    assert nothing.count() == 0 and "generation_id" in nothing.columns


def test_query_exits_cleanly_in_a_fresh_interpreter(two_windows: Path) -> None:
    """`coordinator-audit query` as an operator runs it, on tables a nightly merge rewrote: the answer
    and exit code 0, every time (deltalake's Python filesystem once aborted the exit, code 134)."""
    t = str(two_windows)
    for args in (["timeline", "--group", "grp-s02"], ["worst", "--day", "2023-11-14"]) * 2:
        done = subprocess.run([sys.executable, "-m", "coordinator_audit", "query", "--tables", t, *args], capture_output=True,
                              text=True, cwd=ROOT, timeout=120, check=False)
        assert done.returncode == 0, (args, done.returncode, done.stderr[-2000:])
        expected = "grp-s02: " if args[0] == "timeline" else "least healthy groups on 2023-11-14"
        assert done.stdout.startswith(expected), done.stdout[:500]


def test_query_commands(derived_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    t = str(derived_run)
    assert query.main(["--tables", t, "owner", "--group", "grp-s01", "--topic", "tp-s01-a", "--partition", "2",
                       "--at", "2026-11-21T23:43:28.080Z"]) == 0
    out = capsys.readouterr().out
    assert "UNOWNED (eager_join_phase, generation 2)" in out and "(last_commit, inferred)" in out
    assert query.main(["--tables", t, "owner", "--group", "grp-s01", "--topic", "tp-s01-a", "--partition", "2",
                       "--at", "2026-11-21T23:43:20Z"]) == 0
    assert "owned by grp-s01-c2-" in capsys.readouterr().out
    assert query.main(["--tables", t, "timeline", "--group", "grp-s01", "--since", "2026-11-21T23:43:20Z"]) == 0
    out = capsys.readouterr().out
    assert "generation 2 completed (EAGER): member_left_or_expired" in out and "generation 1 " not in out
    assert query.main(["--tables", t, "worst", "--day", "2023-11-14"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("least healthy groups on 2023-11-14") and len(out) == 4
    assert query.main(["--tables", t, "owner", "--group", "grp-s01", "--topic", "nope", "--partition", "0",
                       "--at", "2026-11-21"]) == 2
    assert "partition nope-0 was never assigned; known: tp-s01-a-0" in capsys.readouterr().err
    assert query.main(["--tables", t, "worst", "--day", "1999-01-01"]) == 2
    assert "no group_health rows for day 1999-01-01" in capsys.readouterr().err


def test_query_violations_across_groups(derived_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`violations`: every group's, counted by day and kind and by group, then listed; filtered by
    group glob, kind and day; the kinds in the table named when nothing matches."""
    t = str(derived_run)
    stored = _rows(derived_run, "violations")
    assert [(v["group_id"], v["kind"]) for v in stored] == [("sim-bug-duplicate-assignment", "duplicate_assignment")]
    assert query.main(["--tables", t, "violations"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("1 violation in 1 group, 2023-11-14 .. 2023-11-14\n")
    assert "day         duplicate_assignment  total\n2023-11-14                     1      1\n" in out
    assert "       1  sim-bug-duplicate-assignment\n" in out
    assert "2023-11-14T22:13:26.005Z  sim-bug-duplicate-assignment  generation 2  duplicate_assignment orders-0" in out
    assert "[partition 14 offset 6;" in out
    for args in (["--group", "sim-bug-*", "--kind", "duplicate_assignment"], ["--day", "2023-11-14"],
                 ["--since", "2023-11-14T22:13:26.005Z", "--until", "2023-11-14T22:13:26.006Z"]):
        assert query.main(["--tables", t, "violations", *args]) == 0
        assert capsys.readouterr().out.startswith("1 violation in 1 group ("), args
    for args in (["--group", "grp-*"], ["--kind", "offset_regression"], ["--day", "2023-11-15"],
                 ["--until", "2023-11-14T22:13:26.005Z"]):
        assert query.main(["--tables", t, "violations", *args]) == 0
        assert capsys.readouterr().out.startswith("no violations ("), args
    assert query.main(["--tables", t, "violations", "--kind", "offset_regression"]) == 0
    assert f"kinds in {t}/violations: duplicate_assignment" in capsys.readouterr().out
    assert query.main(["--tables", t, "violations", "--limit", "0"]) == 0
    assert "in time order" not in capsys.readouterr().out
    assert query.main(["--tables", t, "violations", "--day", "14/11/2023"]) == 2
    assert "--day '14/11/2023': expected YYYY-MM-DD" in capsys.readouterr().err


def test_the_brokers_rebalance_start_column_is_used_when_present(spark, derived_run: Path) -> None:
    """`generations.rebalance_started_at` (written when the job is given the broker's log) may be a
    timestamp or epoch milliseconds; either way it is the start of the join phase."""
    from pyspark.sql import functions as F

    from coordinator_audit.jobs.delta_io import read_table
    from coordinator_audit.udfs.derived import derive_tables

    base = {t: read_table(spark, str(derived_run / t)).where("group_id = 'grp-s01'")
            for t in ("generations", "assignments", "offset_commits", "rebalance_causes", "violations")}
    broker_start = datetime(2026, 11, 21, 23, 43, 26, 137_000, tzinfo=UTC)
    ms = int(broker_start.timestamp() * 1000)
    for value in (F.lit(broker_start).cast("timestamp"), F.lit(ms)):
        gens = base["generations"].withColumn(
            "rebalance_started_at", F.when(F.col("generation_id") == 2, value))
        got = derive_tables({**base, "generations": gens})["rebalances"].where("generation_id = 2").collect()
        assert [(r["started_at"], r["start_evidence"], r["duration_ms"]) for r in got] == [
            (ms, "broker_rebalance_start", ms_of(2026, 11, 21, 23, 43, 28, 96) - ms)]


def test_the_brokers_log_never_moves_a_crashed_owners_end_past_its_last_commit(spark, derived_run: Path) -> None:
    """grp-s02's c3 was killed at 23:43:59; the broker started the rebalance when its session timed
    out (23:44:04.674). tp-s02-a-4 is unowned from c3's last commit with the broker's log as without
    it (the broker's times only refine what the log leaves open)."""
    from coordinator_audit.udfs.broker_log import attach_broker_account, broker_account_frame
    from coordinator_audit.udfs.derived import derive_tables
    from coordinator_audit.udfs.schemas import BROKER_ACCOUNT_COLUMNS

    base = {t: read_table(spark, str(derived_run / t)).where("group_id = 'grp-s02'")
            for t in ("generations", "assignments", "offset_commits", "rebalance_causes", "violations")}
    account = broker_account_frame(spark, str(ROOT / "data" / "samples" / "real_broker_3_9_0.server.log"))

    def partition_4(gens) -> list[tuple]:
        rows = derive_tables({**base, "generations": gens})["partition_ownership"].where(
            "topic = 'tp-s02-a' AND partition = 4").collect()
        return sorted((r["valid_from"], r["valid_to"], r["owned"], r["unowned_reason"], r["from_evidence"],
                       r["to_evidence"]) for r in rows)

    plain = partition_4(base["generations"])
    with_log = partition_4(attach_broker_account(
        base["generations"].drop(*BROKER_ACCOUNT_COLUMNS.fieldNames()), account))
    crash = next(r for r in with_log if r[3] == "owner_departed" and r[1] == ms_of(2026, 11, 21, 23, 44, 6, 719))
    assert crash[0] == ms_of(2026, 11, 21, 23, 43, 58, 661) and crash[4] == "last_commit"
    assert with_log == plain


def ms_of(*parts: int) -> int:
    *ymdhms, milli = parts
    return int(datetime(*ymdhms, milli * 1000, tzinfo=UTC).timestamp() * 1000)


def test_the_batch_adapter_joins_a_group_split_across_batches(derived_run: Path) -> None:
    """`_derive_batches` (the mapInArrow body) on input sorted by group, with one group's rows cut
    across two Arrow batches and small flushes: the same rows as `derive_group` group by group."""
    import pyarrow as pa

    from coordinator_audit.udfs.derived import _TAG, BASE_INPUTS, _derive_batches

    rows = []
    for table, cols in BASE_INPUTS.items():
        for r in _rows(derived_run, table):
            if r["group_id"] in ("grp-s01", "grp-s02"):
                rows.append({"group_id": r["group_id"], _TAG: table, **{c: r[c] for c in cols}})
    rows.sort(key=lambda r: r["group_id"])
    columns = sorted({c for r in rows for c in r})
    cut = sum(1 for r in rows if r["group_id"] == "grp-s01") // 2
    batches = [pa.RecordBatch.from_pylist([{c: r.get(c) for c in columns} for r in part])
               for part in (rows[:cut], rows[cut:])]
    out = pa.Table.from_batches(list(_derive_batches(iter(batches), flush_rows=10))).to_pylist()
    got = sorted((r["table"], repr(sorted(r[r["table"]].items()))) for r in out)
    expected = []
    for g in ("grp-s01", "grp-s02"):
        mine = {t: [r for r in rows if r["group_id"] == g and r[_TAG] == t] for t in BASE_INPUTS}
        produced = derive_group(g, generations=mine["generations"], assignments=mine["assignments"],
                                commits=commit_times(mine["offset_commits"]), causes=mine["rebalance_causes"],
                                violations=mine["violations"])
        for name, items in zip(DERIVED, produced, strict=True):
            expected += [(name, repr(sorted({f: (list(v) if isinstance(v := getattr(x, f), tuple) else v)
                                             for f in x.__dataclass_fields__}.items()))) for x in items]
    assert got == sorted(expected) and len(got) > 40
