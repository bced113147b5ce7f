"""Live Kafka through Spark Connect: `coordinator-audit run --remote sc://... --kafka-bootstrap ...`
against a real broker, as a Spark Connect user runs it, equals the same command line on a classic
session (the broker tier's session, with Spark's Kafka source), table for table as stored; a nightly
pair through Connect (the second run starting from the first run's stored end offsets) equals the
classic pair.

The broker's `__consumer_offsets` holds the first half of a scale-mode log when each path's first
night runs (`--until` the cut), then both halves when each path's second night runs (`--since` the
cut). On Connect the offsets come from Spark itself (one aggregate over the source, then the read
pinned to its ends: `coordinator_audit.jobs.kafka_source`), the partitions from `--kafka-partitions`.

One Spark Connect server (pyspark's own, `tests.support.connect`, with the Kafka source's and
Delta's jars) serves the module; its Python workers run a Python without the project
(`tests.support.standalone.python_without_project`): the job's code reaches them as the artifacts
the client ships."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from benchmarks.kafka_input import KafkaBroker, interceptor_jar, kafka_source_jars, load_records
from coordinator_audit.jobs.kafka_source import KafkaInputError, read_kafka
from tests.conftest import spark_jars
from tests.kafka.test_kafka_nightly import PARTITIONS, _halves
from tests.support.connect import connect_server
from tests.support.outputs import differences
from tests.support.standalone import python_without_project

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
OFFSETS_LINE = re.compile(r"^\[coordinator-audit\] kafka \S+: options .*; offsets per partition (\{.*\}) \(start, end\)$", re.MULTILINE)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark Connect server on loopback with Spark's Kafka source on its classpath: its address."""
    python = python_without_project(tmp_path_factory.mktemp("venv"))
    with connect_server(tmp_path_factory.mktemp("connect"), python=python, jars=spark_jars()) as address:
        yield address


def _run_connect(address: str, args: Sequence[str], *, expect: int = 0) -> str:
    """`coordinator-audit run --remote <address> ARGS` from the checkout: its stderr (the job's lines)."""
    cmd = [sys.executable, "-m", "coordinator_audit", "run", "--remote", address, *args]
    result = subprocess.run(cmd, cwd=ROOT, env=_client_env(), capture_output=True, text=True, timeout=900, check=False)
    assert result.returncode == expect, f"{' '.join(cmd)}\n{(result.stdout + result.stderr)[-4000:]}"
    return result.stderr


def _client_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}


def _run_classic(spark: SparkSession, args: Sequence[str]) -> None:
    """The same command line on the broker tier's classic session."""
    from coordinator_audit.jobs.audit import config_from_args, parse_args, run_audit

    parsed = parse_args(list(args))
    run_audit(spark, config_from_args(parsed), run_id=parsed.run_id)


def _args(bootstrap: str, output: Path, run_id: str, *window: str) -> list[str]:
    """The command line of both paths: the embedded writer on both (the broker tier's session is
    configured for Delta Spark, the Connect server is not)."""
    return ["--kafka-bootstrap", bootstrap, "--kafka-partitions", str(PARTITIONS), "--output", str(output),
            "--run-id", run_id, "--shards", "2", "--writer", "embedded", "--no-summary", *window]


def _offsets_read(log: str) -> dict[int, tuple[int, int]]:
    """{partition: (start, end)} of the run's `kafka ...: offsets per partition` line."""
    found = OFFSETS_LINE.search(log)
    assert found, log
    parsed: dict[int, tuple[int, int]] = ast.literal_eval(found.group(1))
    return parsed


def test_a_connect_nightly_pair_over_a_live_broker_equals_the_classic_sessions(
        spark: SparkSession, server: str, tmp_path: Path) -> None:
    first, second, cut = _halves(tmp_path)
    interceptor = interceptor_jar(kafka_source_jars())
    broker = KafkaBroker(tmp_path / "broker", partitions=PARTITIONS).start()
    connect, classic = tmp_path / "connect", tmp_path / "classic"
    try:
        load_records(spark, str(first), broker.bootstrap, PARTITIONS, interceptor)
        with pytest.raises(KafkaInputError, match=f"has {PARTITIONS} partitions, not {PARTITIONS + 1}"):
            read_kafka(spark, broker.bootstrap, partitions=PARTITIONS + 1)  # a classic session checks the count
        night_1 = _args(broker.bootstrap, connect, "night-1", "--until", cut.isoformat())
        log_1 = _run_connect(server, night_1)
        _run_classic(spark, _args(broker.bootstrap, classic, "night-1", "--until", cut.isoformat()))
        load_records(spark, str(second), broker.bootstrap, PARTITIONS, interceptor, append=True)
        log_2 = _run_connect(server, _args(broker.bootstrap, connect, "night-2", "--since", cut.isoformat()))
        _run_classic(spark, _args(broker.bootstrap, classic, "night-2", "--since", cut.isoformat()))
    finally:
        broker.stop()
    assert differences(connect, classic) == []  # every table as stored, and runs' offsets and counts
    runs = {r["run_id"]: r for r in DeltaTable(str(connect / "runs")).to_pyarrow_table().to_pylist()}
    halves = [pq.read_metadata(p / "log.parquet").num_rows for p in (first, second)]
    assert [runs["night-1"]["records_in"], runs["night-2"]["records_in"]] == halves
    assert runs["night-2"]["resume"] == "resume" and runs["night-2"]["base_run_id"] == "night-1"
    # the second night starts where the first night's stored end offsets say, and reads to the end
    stored = {int(p): int(o) for p, o in dict(runs["night-1"]["end_offsets"]).items()}  # (a map: pairs)
    read_1, read_2 = _offsets_read(log_1), _offsets_read(log_2)
    assert {p: start for p, (start, _) in read_2.items()} == {p: end + 1 for p, end in stored.items()}
    assert {p: end for p, (_, end) in read_1.items()} == {p: end + 1 for p, end in stored.items()}
    assert sum(end - start for start, end in read_2.values()) == halves[1]  # (the loaded log has no gaps)
    for log in (log_1, log_2):  # what Spark Connect cannot tell is said on every run
        assert f"kafka: on Spark Connect the read takes partitions 0..{PARTITIONS - 1}" in log, log


def test_on_connect_the_partition_count_is_asked_for(server: str, tmp_path: Path) -> None:
    """Without --kafka-partitions a Spark Connect run is refused (exit 2) with the reason, before it
    asks the cluster anything (the address here answers nothing)."""
    args = ["--kafka-bootstrap", "127.0.0.1:9", "--output", str(tmp_path / "out"), "--no-summary"]
    log = _run_connect(server, args, expect=2)
    assert "give the partition count of __consumer_offsets (--kafka-partitions N" in log, log


UNREACHABLE = """
import faulthandler
import sys
from pyspark.sql import SparkSession
faulthandler.dump_traceback_later(100, exit=True)  # a hang shows where it is
from coordinator_audit.jobs.kafka_source import KafkaInputError, read_kafka
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
try:
    read_kafka(spark, "127.0.0.1:9", partitions=2, timeout_ms=5000)
except KafkaInputError as exc:
    print(exc)
"""


def test_on_connect_an_unreachable_cluster_is_named_within_the_timeout(server: str) -> None:
    """Spark's Kafka source waits without bound for a cluster that does not answer; on Connect the
    probe gives up after its timeout (interrupting its query, or stopping the session when Spark
    cannot interrupt it) and the error names the address."""
    result = subprocess.run([sys.executable, "-c", UNREACHABLE, server], cwd=ROOT, env=_client_env(),
                            capture_output=True, text=True, timeout=150, check=False)
    assert "kafka 127.0.0.1:9: no answer within 5000 ms" in result.stdout, result.stdout + result.stderr[-3000:]
