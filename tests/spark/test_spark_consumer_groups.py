"""The job on the real Kafka 4.4.0 KIP-848 log: its consumer groups' tables, as stored, are the pure
audit's rows (`coordinator_audit.core.audit` fed every record). The single pass cuts its offset-commit
stretches at a consumer group's own records as at GroupMetadata records, so none of them is taken
for a record already read."""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from coordinator_audit.core.audit import audit_group
from coordinator_audit.jobs.audit import RunSummary, run_audit
from coordinator_audit.jobs.compare import compare_outputs
from coordinator_audit.jobs.config import load_config
from coordinator_audit.jobs.delta_io import read_table
from coordinator_audit.udfs.history import BASE_INPUTS, OwnershipRun, commit_times, derive_from_tables
from coordinator_audit.udfs.schemas import AUDIT_TABLES
from tests.core.audit.test_audit_consumer_groups import _migration_log
from tests.spark.test_spark_nightly import _assert_same, _chain
from tests.support.pure import pure_rows, stored_and_pure
from tools.make_samples import to_table

pytestmark = pytest.mark.spark

LOG = Path(__file__).resolve().parents[2] / "tests" / "core" / "codec" / "data" / "real_broker_4_4_0_kip848.parquet"


@pytest.fixture(scope="module")
def kip848_run(spark, tmp_path_factory) -> tuple[Path, RunSummary]:
    out = tmp_path_factory.mktemp("audit-kip848")
    values = {"input.path": str(LOG), "input.format": "parquet", "output.path": str(out), "job.shards": 2}
    return out, run_audit(spark, load_config(None, values))


def test_every_record_is_replayed(kip848_run) -> None:
    _, summary = kip848_run
    c = summary.counts
    assert c["duplicates_dropped"] == 0 and c["quarantined"] == 0 and c["skipped_other_type"] == 0
    assert c["records_replayed"] == c["records_in"] == pq.read_metadata(LOG).num_rows


@pytest.mark.parametrize("table", ["generations", "assignments", "rebalance_causes", "violations"])
def test_consumer_group_tables_match_the_pure_audit(spark, kip848_run, table: str) -> None:
    """Row for row, topic names included: the single pass summarises the commits whose OffsetCommit
    v4 values name the topic ids and hands each stretch's ids to the replay."""
    out, _ = kip848_run
    got, pure = stored_and_pure(spark, out, table, LOG)
    assert got == pure
    if table != "violations":
        assert pure
    if table == "assignments":  # every topic of the log is named; the id stays beside the name
        named = read_table(spark, str(out / table)).select("topic", "topic_id").distinct().collect()
        assert named and all(r["topic"].startswith("k848-") and r["topic_id"] for r in named)


@pytest.mark.parametrize("table", ["partition_ownership", "rebalances", "group_health"])
def test_consumer_group_derived_tables_match_the_pure_derivation(spark, kip848_run, table: str) -> None:
    """The derived tables as stored are `derive_group` of the pure audit's rows: ownership intervals
    from the members' current assignments, epochs and reconciliation time in place of join phases."""
    out, _ = kip848_run
    rows = pure_rows(LOG)
    by_group: dict[str, list] = defaultdict(list)
    for r in rows:
        by_group[r.group_id].append(r)
    pure: list = []
    for group, group_rows in by_group.items():
        inputs = {name: [{c: getattr(r, c) for c in BASE_INPUTS[name]} for r in group_rows
                         if isinstance(r, AUDIT_TABLES[name])] for name in BASE_INPUTS if name != "offset_commits"}
        inputs["offset_commits"] = commit_times(dataclasses.asdict(r) for r in group_rows
                                                if isinstance(r, AUDIT_TABLES["offset_commits"]))
        own, reb, health = derive_from_tables(group, inputs)
        pure += {"partition_ownership": [x for o in own for x in (o.rows() if isinstance(o, OwnershipRun) else [o])],
                 "rebalances": reb, "group_health": health}[table]
    cls = type(pure[0])
    cols = [f.name for f in dataclasses.fields(cls)]
    want = sorted(repr(tuple(_plain(getattr(r, c)) for c in cols)) for r in pure)
    got = sorted(repr(tuple(_plain(v) for v in r)) for r in read_table(spark, str(out / table)).select(*cols).collect())
    assert got == want
    if table == "rebalances":
        assert {r.rebalance_protocol for r in pure} == {"consumer"}


def _plain(v):
    return tuple(v) if isinstance(v, list | tuple) else v


NAMED_LATER = datetime.fromtimestamp(1795911476, UTC)
"""After both groups' first current assignments, before their first offset commits: a window ending
here leaves rows open whose topic ids the next window names."""
RECONCILING = datetime.fromtimestamp(1795911482, UTC)
"""Inside the uniform group's epoch 3 reconciliation (bumped at ...481.021 s, reached at ...483.081 s):
its `rebalances` row is `reconciling` after the first window, `completed` after the next."""
FENCE_PENDING = datetime.fromtimestamp(1795911498, UTC)
"""After u2's SIGKILL, before the broker fences it: its partitions are carried open into the last window."""


@pytest.mark.parametrize("cuts", [[FENCE_PENDING], [NAMED_LATER, RECONCILING]], ids=["2-windows", "3-windows"])
def test_nightly_windows_equal_one_run(spark, tmp_path, kip848_run, cuts) -> None:
    """The log cut into windows, each run reading its window's records only and carrying the
    groups' state: every table as stored equals one run's, the derived ones included; the open rows
    whose topic ids the first window could not name are the same rows once named."""
    out, summaries = _chain(spark, tmp_path, LOG, cuts, inputs="window")
    _assert_same(out, kip848_run[0])
    assert [s.resume for s in summaries] == ["fresh"] + ["resume"] * len(cuts)
    assert summaries[1].rows_merged.get("assignments")  # rows the first window left open, closed by the second
    first = [r for r in DeltaTable(str(out / "assignments")).to_pyarrow_table().to_pylist()
             if r["run_window"] == summaries[0].run_window]
    assert first and all(r["topic"].startswith("k848-") for r in first)  # merged where they live, named
    outcomes = {r["outcome"] for r in DeltaTable(str(out / "rebalances")).to_pyarrow_table().to_pylist()}
    assert "reconciling" not in outcomes


def test_the_json_lines_export_of_the_log_gives_the_same_tables(spark, tmp_path, kip848_run) -> None:
    rows = pq.read_table(LOG).to_pylist()
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps({
        "key": r["key"].hex(), "value": None if r["value"] is None else r["value"].hex(), "topic": r["topic"],
        "partition": r["partition"], "offset": r["offset"], "timestamp": int(r["timestamp"].timestamp() * 1000)}) + "\n"
        for r in rows))
    out = tmp_path / "out"
    run_audit(spark, load_config(None, {"input.path": str(path), "input.format": "json", "output.path": str(out),
                                        "job.shards": 2}))
    results = compare_outputs(out, kip848_run[0])
    assert {"generations", "assignments", "partition_ownership", "rebalances"} <= {r.table for r in results}
    assert all(r.equal for r in results), "\n".join(r.describe() for r in results if not r.equal)


def test_the_server_log_gives_each_epoch_the_broker_s_words(spark, tmp_path) -> None:
    """With the broker's server.log, a consumer group's epochs carry the member lines that caused
    them: the SIGKILLed member's session-expiry fence and the clean leaves, which the log itself
    cannot tell apart (`member_left_or_expired`)."""
    out = tmp_path / "out"
    server_log = LOG.with_name("real_broker_4_4_0_kip848.server_log.txt")
    run_audit(spark, load_config(None, {"input.path": str(LOG), "input.format": "parquet", "output.path": str(out),
                                        "job.shards": 2, "input.server_log": str(server_log)}))
    gens = {r["generation_id"]: r for r in read_table(spark, str(out / "generations"))
            .where("group_id = 'k848-uniform-scale'").collect()}
    assert [gens[e]["broker_cause"] for e in sorted(gens)] == [
        "member_joined", "member_joined", "member_joined", "member_session_expired", "member_left", "member_left"]
    assert "fenced from the group because the member session expired" in gens[5]["broker_reason"]
    assert gens[6]["broker_reason"].endswith("left the consumer group.")
    assert all(g["rebalance_started_at"] <= g["record_timestamp"] for g in gens.values())
    causes = read_table(spark, str(out / "rebalance_causes")).where(
        "group_id = 'k848-uniform-scale' AND is_primary AND generation_id IN (5, 6)").collect()
    assert {(c["generation_id"], c["cause"]) for c in causes} == {(5, "member_left_or_expired"),
                                                                   (6, "member_left_or_expired")}
    assert all(c["member_id"] in gens[c["generation_id"]]["broker_reason"] for c in causes)


def test_a_group_migrated_to_consumer_and_back_is_one_history_in_the_job(spark, tmp_path) -> None:
    """Classic generation 3, converted online to a consumer group (GroupMetadata tombstone, then the
    consumer group's records), epoch 4, converted back: the job's base tables as stored are the pure
    audit's (no `group_deleted`), and the same log in nightly windows cut at each conversion gives
    the one run's tables, the derived ones included."""
    records = _migration_log().records
    log = tmp_path / "migration.parquet"
    pq.write_table(to_table(*(list(c) for c in zip(*records, strict=True))), log)
    single = tmp_path / "single"
    run_audit(spark, load_config(None, {"input.path": str(log), "input.format": "parquet", "output.path": str(single),
                                        "job.shards": 2}))
    pure = list(audit_group(records))
    for table in ("generations", "assignments", "rebalance_causes", "violations"):
        cls = AUDIT_TABLES[table]
        cols = [f.name for f in dataclasses.fields(cls)]
        want = sorted(repr(tuple(_plain(getattr(r, c)) for c in cols)) for r in pure if isinstance(r, cls))
        got = sorted(repr(tuple(_plain(v) for v in r)) for r in read_table(spark, str(single / table)).select(*cols)
                     .collect())
        assert got == want, table
    causes = {r["cause"] for r in read_table(spark, str(single / "rebalance_causes")).collect()}
    assert {"converted_to_consumer", "converted_to_classic"} <= causes and "group_deleted" not in causes
    protocols = {r["rebalance_protocol"] for r in read_table(spark, str(single / "rebalances")).collect()}
    assert "consumer" in protocols and len(protocols) == 2
    cuts = [datetime.fromtimestamp(s, UTC) for s in (1700000003, 1700000008, 1700000013)]
    out, _ = _chain(spark, tmp_path, log, cuts, inputs="window")
    _assert_same(out, single)
