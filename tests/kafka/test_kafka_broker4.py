"""The broker tier on Kafka 4.x (Java group coordinator): real consumers, the job reading
`__consumer_offsets` through Spark's Kafka source, the tables held against the consumers' truth,
the Parquet export of the same log, the native Delta writer against the embedded one, and the
broker's own server.log account."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from coordinator_audit.core.broker_log import broker_account, read_server_log
from coordinator_audit.jobs.audit import run_audit
from coordinator_audit.jobs.config import load_config
from coordinator_audit.jobs.kafka_source import BATCH_FETCH_MAX_WAIT_MS, KafkaInputError, read_kafka
from coordinator_audit.udfs.schemas import KAFKA_SOURCE_SCHEMA
from tests.kafka.cluster import Broker
from tests.kafka.scenarios import run_all
from tests.kafka.truth import assert_tables_match_truth, holders, seen_generations, tables_at

pytestmark = pytest.mark.kafka

SECRET = "hunter2-not-a-real-password"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory):
    """A Kafka 4.x broker with every scenario run on it; stopped when the module ends."""
    broker = Broker(tmp_path_factory.mktemp("kafka4"), 4)
    try:
        broker.start()
        truths = run_all(broker)
        (broker.directory / "truth.json").write_text(json.dumps(truths, indent=1))
        yield broker, truths
    finally:
        broker.stop()


def _cfg(out: Path, **overrides: Any):
    return load_config(None, {"input.path": "", "output.path": str(out), **overrides})


@pytest.fixture(scope="module")
def kafka_run(spark, live, tmp_path_factory: pytest.TempPathFactory):
    """The job through the Kafka source, with the broker's server.log, native Delta writer."""
    broker, _ = live
    out = tmp_path_factory.mktemp("kafka-run")
    cfg = _cfg(out, **{"input.kafka_bootstrap": broker.bootstrap, "input.server_log": str(broker.server_log),
                       "output.writer": "native",
                       "input.kafka_options": [f'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule '
                                               f'required username="audit" password="{SECRET}";',
                                               "client.id=coordinator-audit-test"]})
    log = io.StringIO()
    with contextlib.redirect_stderr(log):
        summary = run_audit(spark, cfg)
    sys.stderr.write(log.getvalue())
    return summary, tables_at(spark, summary.locations), log.getvalue()


def test_kafka_source_reads_every_offset_once_with_the_file_schema(spark, live) -> None:
    broker, _ = live
    read = read_kafka(spark, broker.bootstrap)
    assert read.df.schema.simpleString() == KAFKA_SOURCE_SCHEMA.simpleString()
    rows = read.df.select("partition", "offset").collect()
    expected = sum(end - read.start_offsets[p] for p, end in read.end_offsets.items())
    assert len(rows) == expected > 0
    assert len({(r.partition, r.offset) for r in rows}) == len(rows)
    # from given starting offsets to explicit ending ones: exactly that slice
    busiest = max(read.end_offsets, key=lambda p: read.end_offsets[p])
    mid = read.end_offsets[busiest] // 2
    part = read_kafka(spark, broker.bootstrap, starting_offsets={busiest: mid},
                      ending_offsets={**read.end_offsets, busiest: mid + 3})
    got = sorted(r.offset for r in part.df.where(f"partition = {busiest}").select("offset").collect())
    assert got == [mid, mid + 1, mid + 2]
    assert part.df.where(f"partition != {busiest}").count() == expected - read.end_offsets[busiest]
    # a bounded read does not wait at a partition's end for records it would not read; a user's value wins
    assert read.options["fetch.max.wait.ms"] == str(BATCH_FETCH_MAX_WAIT_MS) != "500"
    own = read_kafka(spark, broker.bootstrap, options={"fetch.max.wait.ms": "200"},
                     ending_offsets={**read.end_offsets, busiest: mid + 3})
    assert own.options["fetch.max.wait.ms"] == "200"
    assert own.df.where(f"partition = {busiest}").count() == mid + 3 - own.start_offsets[busiest]


def test_kafka_source_errors_name_what_is_wrong(spark, live) -> None:
    broker, _ = live
    with pytest.raises(KafkaInputError, match="partition"):
        read_kafka(spark, broker.bootstrap, starting_offsets={999: 0})
    with pytest.raises(KafkaInputError, match="past the partition's end"):
        read_kafka(spark, broker.bootstrap, starting_offsets={0: 10**12})
    with pytest.raises(KafkaInputError, match="HOST:PORT"):
        read_kafka(spark, "no-port-here")
    with pytest.raises(KafkaInputError, match=r"does not exist|cannot list"):
        read_kafka(spark, broker.bootstrap, topic="no-such-topic", timeout_ms=5000)


def test_the_job_through_kafka_agrees_with_the_consumers(live, kafka_run) -> None:
    _, truths = live
    summary, tables, _ = kafka_run
    assert summary.writer == "native"
    assert_tables_match_truth(tables, truths, broker_account=True)
    run = tables["runs"][0]
    assert run["input_format"] == "kafka" and run["input"].startswith("kafka://127.0.0.1:")
    assert summary.kafka_offsets and sum(e - s for s, e in summary.kafka_offsets.values()) == run["records_in"]


def test_the_replay_input_from_kafka_is_handed_off_as_local_files(kafka_run) -> None:
    """In a local session the Kafka input's offset ranges size the handoff's buckets, so the pass's
    rows reach the replay as local files, not through Spark's shuffle (the tables are those of the
    Parquet export's run: `test_the_same_log_exported_to_parquet_gives_identical_tables`)."""
    _, _, log = kafka_run
    assert "replay input: handed from task to task as local files" in log
    assert "single pass: spark reader" in log


def test_secrets_never_reach_runs_or_the_log(kafka_run) -> None:
    _, tables, log = kafka_run
    config_json = tables["runs"][0]["config_json"]
    assert SECRET not in config_json and "sasl.jaas.config=***" in config_json
    assert "client.id=coordinator-audit-test" in config_json
    assert "'sasl.jaas.config': '***'" in log and SECRET not in log


def test_the_same_log_exported_to_parquet_gives_identical_tables(spark, live, kafka_run, tmp_path: Path) -> None:
    broker, _ = live
    summary, kafka_tables, _ = kafka_run
    export = tmp_path / "export"
    ending = {p: e for p, (_, e) in summary.kafka_offsets.items()}
    read_kafka(spark, broker.bootstrap, ending_offsets=ending).df.write.parquet(str(export))
    cfg = _cfg(tmp_path / "out", **{"input.path": str(export), "input.format": "parquet",
                                    "input.server_log": str(broker.server_log), "output.writer": "embedded"})
    file_summary = run_audit(spark, cfg)
    assert file_summary.writer == "embedded"
    file_tables = tables_at(spark, file_summary.locations)
    for name in kafka_tables:
        if name == "runs":
            continue
        assert sorted(map(repr, file_tables[name])) == sorted(map(repr, kafka_tables[name])), name
    assert file_tables["runs"][0]["records_in"] == kafka_tables["runs"][0]["records_in"]


def test_the_broker_account_covers_every_generation_the_consumers_saw(live) -> None:
    broker, truths = live
    account = {(g.group_id, g.generation_id): g for g in broker_account(read_server_log(broker.server_log))}
    for group, truth in truths.items():
        for gen, members in seen_generations(truth).items():
            g = account[(group, gen)]
            assert g.broker_state == "Stable", (group, gen, g)
            assert g.broker_member_count is not None and g.broker_member_count >= len(holders(truth, members))
    crash = [g for g in account.values() if g.broker_cause == "member_session_expired"]
    leave = [g for g in account.values() if g.broker_cause == "member_left"]
    assert crash and leave and all("heartbeat expiration" in (g.broker_reason or "") for g in crash)
