"""The job on the real Kafka 4.4.0 log of a share group and a streams group
(tests/core/codec/data/real_broker_4_4_0_share_streams.*, made by tools/make_share_streams_log.py):
their tables, as stored, are the pure audit's rows, every column, and every record is replayed."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from coordinator_audit.jobs.audit import RunSummary, run_audit
from coordinator_audit.jobs.config import load_config
from coordinator_audit.jobs.delta_io import read_table
from tests.support.pure import stored_and_pure

pytestmark = pytest.mark.spark

LOG = (Path(__file__).resolve().parents[2] / "tests" / "core" / "codec" / "data"
       / "real_broker_4_4_0_share_streams.parquet")


@pytest.fixture(scope="module")
def share_streams_run(spark, tmp_path_factory) -> tuple[Path, RunSummary]:
    out = tmp_path_factory.mktemp("audit-share-streams")
    values = {"input.path": str(LOG), "input.format": "parquet", "output.path": str(out), "job.shards": 2}
    return out, run_audit(spark, load_config(None, values))


def test_every_record_is_replayed(share_streams_run) -> None:
    _, summary = share_streams_run
    c = summary.counts
    assert c["duplicates_dropped"] == 0 and c["quarantined"] == 0 and c["skipped_other_type"] == 0
    assert c["records_replayed"] == c["records_in"] == pq.read_metadata(LOG).num_rows


@pytest.mark.parametrize("table", ["generations", "assignments", "rebalance_causes", "violations"])
def test_share_and_streams_tables_as_stored_match_the_pure_audit(spark, share_streams_run, table: str) -> None:
    out, _ = share_streams_run
    got, pure = stored_and_pure(spark, out, table, LOG)
    assert got == pure
    if table != "violations":
        assert pure


def test_the_stored_tables_name_the_group_types_and_tasks(spark, share_streams_run) -> None:
    out, _ = share_streams_run
    gens = read_table(spark, str(out / "generations")).select("group_id", "group_type", "generation_id").collect()
    assert {(r.group_id, r.group_type) for r in gens} == {("share-audit", "share"), ("streams-audit", "streams")}
    assert sorted(r.generation_id for r in gens if r.group_type == "share") == [2, 3, 4, 5, 6]
    rows = read_table(spark, str(out / "assignments")).select("group_type", "topic", "topic_id").collect()
    assert {r.topic for r in rows if r.group_type == "share"} == {"share-in"}
    assert all(r.topic_id is not None for r in rows if r.group_type == "share")
    assert {r.topic for r in rows if r.group_type == "streams"} == {"active:0", "standby:0"}
