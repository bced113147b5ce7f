"""End-to-end tests of the audit job (`coordinator_audit.jobs.audit.run_audit`) on the bundled samples: every table's
content (chispa, expected rows inline), reopening with deltalake and with Spark, counts that add
up, idempotent reruns, quarantine of corrupted records, and the command line."""

from __future__ import annotations

import struct
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable

from coordinator_audit.core.errors import ConfigError
from coordinator_audit.jobs.audit import AUDIT_OUTPUT_TABLES, RunSummary, run_audit
from coordinator_audit.jobs.config import load_config
from coordinator_audit.jobs.delta_io import read_table
from coordinator_audit.udfs.schemas import stored_schema

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "data" / "samples"
ALL_TABLES = (*AUDIT_OUTPUT_TABLES, "runs")


def _run(spark, out: Path, **overrides) -> RunSummary:
    values = {"input.path": str(SAMPLES), "input.format": "parquet", "output.path": str(out), "job.shards": 2}
    values.update(overrides)
    return run_audit(spark, load_config(None, values))


@pytest.fixture(scope="module")
def sample_run(spark, tmp_path_factory) -> tuple[Path, RunSummary]:
    out = tmp_path_factory.mktemp("audit-samples")
    return out, _run(spark, out)


def _table(spark, out: Path, name: str):
    return read_table(spark, str(out / name))


def test_every_table_reopens_with_deltalake_and_spark(spark, sample_run) -> None:
    out, summary = sample_run
    assert set(summary.locations) == set(ALL_TABLES)
    for name in ALL_TABLES:
        dt = DeltaTable(str(out / name))
        arrow = dt.to_pyarrow_table()
        sdf = _table(spark, out, name)
        assert sdf.count() == arrow.num_rows, name
        assert sdf.columns == stored_schema(name).fieldNames(), name
        expected = 1 if name == "runs" else summary.table_rows[name]
        assert arrow.num_rows == expected, name
        assert dt.metadata().partition_columns == ["run_window"]


def test_runs_row_counts_add_up(spark, sample_run) -> None:
    out, summary = sample_run
    runs = _table(spark, out, "runs").collect()
    assert len(runs) == 1
    r = runs[0]
    n_input = sum(pq.read_metadata(p).num_rows for p in SAMPLES.glob("*.parquet"))
    assert r["records_in"] == n_input
    assert r["records_in"] == (r["records_replayed"] + r["quarantined"] + r["duplicates_dropped"]
                               + r["filtered_by_window"] + r["filtered_by_group"] + r["skipped_other_type"])
    assert r["quarantined"] == 0
    assert r["status"] == "succeeded" and r["run_id"] == summary.run_id
    assert dict(r["table_rows"]) == summary.table_rows


def test_a_run_id_already_in_runs_is_refused_before_any_work(spark, sample_run) -> None:
    out, summary = sample_run
    before = {name: DeltaTable(str(out / name)).version() for name in ALL_TABLES}
    with pytest.raises(ConfigError, match=rf"run id {summary.run_id}: .*runs already records a run with this id"):
        run_audit(spark, load_config(None, {"input.path": str(SAMPLES), "input.format": "parquet",
                                            "output.path": str(out), "job.shards": 2}), run_id=summary.run_id)
    assert {name: DeltaTable(str(out / name)).version() for name in ALL_TABLES} == before


def test_generations_of_real_broker_group(spark, sample_run) -> None:
    out, _ = sample_run
    got = (_table(spark, out, "generations").where("group_id = 'grp-s01'")
           .select("group_id", "generation_id", "protocol_name", "member_count", "static_member_count", "state",
                   "leader_id", "missing_generations"))
    leader = "grp-s01-c2-a35ac3d1-942b-4583-8de4-08185e6df93b"
    expected = spark.createDataFrame(
        [("grp-s01", 1, "range", 3, 0, "Stable", leader, 0),
         ("grp-s01", 2, "range", 1, 0, "Stable", leader, 0),
         ("grp-s01", 3, None, 0, 0, "Empty", None, 0)],
        got.schema)
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_primary_causes_match_the_broker_reasons(spark, sample_run, shared_dir) -> None:
    """truth.json holds the real 3.9.0 broker's own reasons per generation."""
    import json

    out, _ = sample_run
    truth = json.loads((shared_dir / "real-broker-sample" / "truth.json").read_text())
    rows = [(g["group"], o["generation"], o["cause"]) for g in truth["groups"]
            for o in g["observed_causes_by_generation"]]
    got = (_table(spark, out, "rebalance_causes")
           .where("is_primary AND group_id LIKE 'grp-s0%'")
           .select("group_id", "generation_id", "cause"))
    expected = spark.createDataFrame(rows, got.schema)
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_every_generation_has_exactly_one_primary_cause(spark, sample_run) -> None:
    from coordinator_audit.core.audit.causes import primary_problems

    out, _ = sample_run
    causes = _table(spark, out, "rebalance_causes").collect()
    generations = _table(spark, out, "generations").collect()
    assert len(generations) > 50
    assert primary_problems(causes, generations) == []


def test_coordinator_flavour_is_inferred_per_group(spark, sample_run) -> None:
    out, _ = sample_run
    got = {(r["group_id"], r["coordinator_flavour"]) for r in
           _table(spark, out, "generations").select("group_id", "coordinator_flavour").distinct().collect()}
    flavours = dict(got)
    assert len(flavours) == len(got)  # one flavour per group
    assert {flavours[g] for g in ("grp-s01", "grp-s02", "grp-s05", "grp-s07")} == {"scala"}  # Kafka 3.9.0
    assert flavours["sim-eager-rolling-bounce"] == "java"
    assert flavours["sim-eager-restart-leave-then-join-scala"] == "scala"
    assert flavours["sim-partial-eager-scale-out"] == "unknown"  # the history starts mid-life


def test_assignments_of_range_group_are_contiguous_ranges(spark, sample_run) -> None:
    out, _ = sample_run
    got = (_table(spark, out, "assignments").where("group_id = 'grp-s01' AND generation_id = 1")
           .select("client_id", "topic", "partition", "client_host"))
    expected = spark.createDataFrame(
        [(c, "tp-s01-a", p, "/127.0.0.1") for c, ps in
         (("grp-s01-c1", (0, 1)), ("grp-s01-c2", (2, 3)), ("grp-s01-c3", (4, 5))) for p in ps],
        got.schema)
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_violations_of_the_planted_bugs_and_none_elsewhere(spark, sample_run) -> None:
    out, _ = sample_run
    got = _table(spark, out, "violations").select("group_id", "generation_id", "kind", "topic", "partition")
    expected = spark.createDataFrame(
        [("sim-bug-duplicate-assignment", 2, "duplicate_assignment", "orders", 0),
         ("sim-bug-stale-claims-after-pause", 3, "stale_ownership_claim", "orders", 2),
         ("sim-bug-stale-claims-after-pause", 3, "stale_ownership_claim", "orders", 5)],
        got.schema)
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def _pure_rows() -> list:
    """Every row `coordinator_audit.core.audit` gives for the samples, each group's records fed one by one."""
    from coordinator_audit.core.audit import audit_group

    rows = []
    for path in sorted(SAMPLES.glob("*.parquet")):
        t = pq.read_table(path).to_pydict()
        by_group: dict[bytes, list] = {}
        recs = sorted(zip(t["partition"], t["offset"], t["timestamp"], t["key"], t["value"], strict=True),
                      key=lambda r: (r[0], r[1]))
        for p, o, ts, k, v in recs:
            glen = struct.unpack_from(">h", k, 2)[0]
            by_group.setdefault(k[4:4 + glen], []).append(
                (p, o, int(ts.replace(tzinfo=UTC).timestamp() * 1000), k, v))
        for records in by_group.values():
            rows += list(audit_group(records))
    return rows


@pytest.mark.parametrize("table", ["generations", "assignments", "rebalance_causes", "violations", "offset_commits"])
def test_every_audit_table_matches_the_pure_audit(spark, sample_run, table: str) -> None:
    """The job (the single pass's stretches merged into the replay) and coordinator_audit.core.audit fed
    every record agree row for row on the samples: offset rows and regressions, and the causes,
    whose evidence (a member's last commit) decides which member left or rejoined first."""
    import dataclasses

    from coordinator_audit.udfs.schemas import AUDIT_TABLES

    out, _ = sample_run
    cls = AUDIT_TABLES[table]
    cols = [f.name for f in dataclasses.fields(cls)]

    def norm(values) -> str:
        return repr(tuple(tuple(v) if isinstance(v, list | tuple) else v for v in values))

    pure = sorted(norm(dataclasses.astuple(r)) for r in _pure_rows() if isinstance(r, cls))
    got = sorted(norm(r) for r in _table(spark, out, table).select(*cols).collect())
    assert pure and got == pure


def _corrupted_input(tmp_path: Path) -> Path:
    """A real sample plus four broken records in partitions of their own."""
    src = pq.read_table(SAMPLES / "sim_coop-scale-out.parquet")
    gm_key = struct.pack(">hh", 2, 5) + b"bad-g"
    oc_key = struct.pack(">hh", 1, 5) + b"bad-g" + struct.pack(">h", 1) + b"t" + struct.pack(">i", 0)
    ts = datetime(2026, 11, 21, tzinfo=UTC)
    bad = pa.table({
        "key": pa.array([gm_key, oc_key, b"\x00", struct.pack(">hh", 2, 40) + b"short"], pa.binary()),
        "value": pa.array([b"\x00\x03\x00\x08consum", b"\x00\x03\x00\x00", b"x", b"\x00\x03"], pa.binary()),
        "topic": pa.array(["__consumer_offsets"] * 4),
        "partition": pa.array([7, 7, 8, 9], pa.int32()),
        "offset": pa.array([0, 1, 0, 0], pa.int64()),
        "timestamp": pa.array([ts] * 4, pa.timestamp("us", tz="UTC")),
    })
    path = tmp_path / "input"
    path.mkdir()
    pq.write_table(src, path / "good.parquet")
    pq.write_table(bad.cast(src.schema), path / "bad.parquet")
    return path


def test_corrupted_records_are_quarantined_and_the_job_goes_on(spark, tmp_path) -> None:
    inp = _corrupted_input(tmp_path)
    summary = _run(spark, tmp_path / "out", **{"input.path": str(inp)})
    q = _table(spark, tmp_path / "out", "quarantine").select("partition", "offset", "error").collect()
    assert sorted((r["partition"], r["offset"]) for r in q) == [(7, 0), (7, 1), (8, 0), (9, 0)]
    for r in q:
        assert r["error"], r
    assert any("byte" in r["error"] for r in q)
    assert summary.counts["quarantined"] == 4
    assert summary.table_rows["generations"] > 0  # the good group was audited all the same
    total = pq.read_metadata(inp / "good.parquet").num_rows + 4
    assert summary.counts["records_in"] == total == sum(v for k, v in summary.counts.items() if k != "records_in")


def test_rerunning_a_window_replaces_it_and_keeps_other_windows(spark, tmp_path) -> None:
    out = tmp_path / "out"
    inp = str(SAMPLES / "real_broker_3_9_0.parquet")
    early = {"window.until": "2026-11-21T23:43:40Z"}
    late = {"window.since": "2026-11-21T23:43:40Z"}
    first = _run(spark, out, **{"input.path": inp, **early})
    second = _run(spark, out, **{"input.path": inp, **late})
    again = _run(spark, out, **{"input.path": inp, **late})
    assert second.run_window == again.run_window != first.run_window
    assert again.resume == "rerun" and again.base_run_id == first.run_id
    gens = _table(spark, out, "generations")
    by_window = {r["run_window"]: r["count"] for r in gens.groupBy("run_window").count().collect()}
    assert by_window == {first.run_window: first.table_rows["generations"],
                         again.run_window: again.table_rows["generations"]}
    runs_of_late = gens.where(gens.run_window == again.run_window).select("run_id").distinct().collect()
    assert [r["run_id"] for r in runs_of_late] == [again.run_id]
    assert _table(spark, out, "runs").count() == 3  # the run history is appended


def test_command_line_help_and_config_errors() -> None:
    helped = subprocess.run([sys.executable, "-m", "coordinator_audit", "run", "--help"], cwd=ROOT, capture_output=True,
                            text=True, check=False)
    assert helped.returncode == 0 and "--since" in helped.stdout and "--output" in helped.stdout
    bad = subprocess.run([sys.executable, "-m", "coordinator_audit", "run", "--input", str(ROOT / "no-such-dir"),
                          "--output", "/tmp/x", "--shards", "0"], cwd=ROOT, capture_output=True, text=True,
                         check=False)
    assert bad.returncode == 2 and "job.shards" in bad.stderr
