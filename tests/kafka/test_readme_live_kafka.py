"""The README's live-Kafka command, run as written with the installed console script against a real
Kafka 4.x broker on which one group rebalanced, its server.log beside it.

Only the placeholders naming the user's cluster and disks are replaced: `--kafka-bootstrap` (the
test broker's address), `--server-log` (its log directory) and `--output` (a temporary folder).
Nothing is added to the command: it relies on the default master (`local[2]` outside spark-submit),
and its `--packages` resolves through Ivy as for any user; the environment only points Ivy at
`.cache/ivy` (`spark.jars.ivy` in a `SPARK_CONF_DIR/spark-defaults.conf`, as the README says), so
a second run needs no network, and puts this checkout first on `PYTHONPATH` (the console script
imports the installed package otherwise)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyspark
import pytest
from deltalake import DeltaTable

from coordinator_audit.jobs.audit import config_from_args, parse_args
from coordinator_audit.jobs.kafka_source import parse_offsets_json
from tests.kafka.cluster import Broker
from tests.kafka.scenarios import Scenario
from tests.kafka.truth import assert_tables_match_truth

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
GROUP = "readme-live"
REPLACED = ("--kafka-bootstrap", "--server-log", "--output")
JAVA_TRACE = re.compile(r"^\s+at [\w$.]+\(|Exception in thread|^\S+(Exception|Error): ", re.MULTILINE)
PROGRESS_BAR = re.compile(r"\[Stage \d+|\r")


def readme_live_kafka_commands() -> list[list[str]]:
    """The runnable command, then the secured cluster's (which needs SASL and existing offsets)."""
    text = (ROOT / "README.md").read_text()
    section = text.split("Live Kafka, with the broker's own account of each rebalance", 1)[1]
    blocks = [b.split("```", 1)[0] for b in section.split("```bash")[1:3]]
    return [shlex.split(b.replace("\\\n", " ")) for b in blocks]


def readme_live_kafka_command() -> list[str]:
    return readme_live_kafka_commands()[0]


def test_the_readme_kafka_package_is_this_spark_version() -> None:
    args = readme_live_kafka_command()
    coordinate = args[args.index("--packages") + 1]
    _group, artifact, version = coordinate.split(":")
    assert artifact == "spark-sql-kafka-0-10_2.13" and version == pyspark.__version__, coordinate


def test_the_readme_secured_cluster_example_is_a_valid_run() -> None:
    """The second example cannot run here (SASL_SSL, offsets of another cluster's log): its flags
    parse and make the configuration it describes, without starting Spark."""
    args = readme_live_kafka_commands()[1]
    assert args[:2] == ["coordinator-audit", "run"], args
    parsed = parse_args(args[2:])
    cfg = config_from_args(parsed)
    assert cfg.kafka_bootstrap == "broker1:9093" and "security.protocol=SASL_SSL" in cfg.kafka_options
    assert parse_offsets_json(parsed.kafka_starting_offsets) == {0: 1234, 1: 987}
    assert cfg.spark_packages == (f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}",)


def _rebalanced_group(broker: Broker) -> dict[str, Any]:
    """Two range consumers of one topic; one closes (LeaveGroup, a rebalance the broker logs as a
    leave), then the other."""
    broker.create_topics({"readme-a": 2})
    s = Scenario(broker, GROUP, "readme")
    try:
        c = [s.member(f"r{i}", "readme-a", session_ms=6000) for i in (1, 2)]
        for m in c:
            m.start()
        s.step("start 2", c)
        c[1].close()
        s.step("close r2", c[:1], member="r2", audit="member_left_or_expired", broker="member_left")
        c[0].close()
        s.steps.append({"action": "close r1", "generation": None, "member": "r1"})
        return s.truth()
    finally:
        s.finish()


def test_the_readme_live_kafka_command_runs_as_written(tmp_path: Path) -> None:
    args = readme_live_kafka_command()
    assert args[:2] == ["coordinator-audit", "run"], args
    broker = Broker(tmp_path / "kafka", 4)
    try:
        broker.start()
        truth = _rebalanced_group(broker)
        out = tmp_path / "lake" / "coordinator_audit"
        values = dict(zip(REPLACED, (broker.bootstrap, str(broker.server_log), str(out)), strict=True))
        for flag in REPLACED:
            args[args.index(flag) + 1] = values[flag]
        conf_dir = tmp_path / "spark-conf"
        conf_dir.mkdir()
        (conf_dir / "spark-defaults.conf").write_text(f"spark.jars.ivy {ROOT / '.cache' / 'ivy'}\n")
        env = {k: v for k, v in os.environ.items()
               if k not in ("MASTER", "SPARK_REMOTE", "PYSPARK_SUBMIT_ARGS", "PYSPARK_GATEWAY_PORT",
                            "SPARK_SUBMIT_OPTS")}
        env.update({"SPARK_CONF_DIR": str(conf_dir), "PYTHONPATH": str(ROOT), "SPARK_LOCAL_IP": "127.0.0.1"})
        cmd = [str(Path(sys.executable).parent / "coordinator-audit"), *args[1:]]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env, check=False)
    finally:
        broker.stop()
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    assert not JAVA_TRACE.search(output), output[-5000:]
    assert not PROGRESS_BAR.search(output), output[-5000:]
    # what the JVM prints while it starts (Ivy's resolution report, its notices) is held back on success
    assert ":: resolution report ::" not in output and "Using incubator modules" not in output, output[-5000:]
    assert "kafka offsets read" in output, output[-5000:]

    tables = {name: DeltaTable(str(out / name)).to_pyarrow_table().to_pylist()
              for name in ("generations", "assignments", "rebalance_causes", "runs")}
    (run,) = tables["runs"]
    assert run["input_format"] == "kafka" and run["input"].startswith(f"kafka://{broker.bootstrap}"), run["input"]
    ours = [r for r in tables["generations"] if r["group_id"] == GROUP]
    assert len(ours) >= 2 and any(r["broker_cause"] == "member_left" for r in ours), ours
    assert_tables_match_truth(tables, {GROUP: truth}, broker_account=True)
