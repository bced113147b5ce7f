"""Regenerates tests/core/codec/data/real_broker_4_4_0_share_streams.{parquet,truth.json}: a real Kafka
4.4.0 broker's `__consumer_offsets` with one share group and one streams group, and what the broker
and the clients said at each quiet point.

    .venv/bin/python -m tools.make_share_streams_log

Starts a single-node broker (`scripts/kafka.sh start DIR 44`; share and streams groups are on by
default in 4.4; heartbeats every second, one standby replica per streams task), runs tools/java/ShareStreamsScenario.java
against kafka-clients and kafka-streams 4.4.0 (`scripts/jars.sh kafka44 streams44`):
* share group `share-audit` (KafkaShareConsumer, topic share-in, 3 partitions): c1 joins, c2 joins,
  c1 closes, c2 closes;
* streams group `streams-audit` (Kafka Streams, group.protocol=streams, a count over streams-in, 2
  partitions: subtopology 0, tasks 0_0 and 0_1): a starts, b starts, a closes, b closes;
then dumps `__consumer_offsets` with a plain consumer. The Parquet file keeps the records of those
two groups only (the layout of Spark's Kafka source: key, value, topic, partition, offset,
timestamp); truth.json holds, after each step, the broker's DescribeShareGroups /
DescribeStreamsGroups answer (group epoch, each member's epoch and assignment) and each streams
application's own tasks (`KafkaStreams#metadataForLocalThreads`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "tools" / "java" / "ShareStreamsScenario.java"
OUT = ROOT / "tests" / "core" / "codec" / "data" / "real_broker_4_4_0_share_streams"
GROUPS = ("share-audit", "streams-audit")
BROKER_PROPERTIES = "\n".join([
    "group.share.min.heartbeat.interval.ms=1000", "group.share.heartbeat.interval.ms=1000",
    "group.streams.min.heartbeat.interval.ms=1000", "group.streams.heartbeat.interval.ms=1000",
    "group.streams.initial.rebalance.delay.ms=0", "group.streams.num.standby.replicas=1",
])


def _lib(name: str) -> str:
    out = subprocess.run(["bash", str(ROOT / "scripts" / "jars.sh"), name], check=True, capture_output=True,
                         text=True, timeout=900).stdout
    return out.strip().splitlines()[-1]


def _group_of(key: bytes) -> str:
    """The group id every group record's key starts with (after its int16 type): an int16 length, UTF-8."""
    n = int.from_bytes(key[2:4], "big")
    return key[4:4 + n].decode()


def main() -> int:
    classpath = f"{_lib('kafka44')}/*:{_lib('streams44')}/*"
    with tempfile.TemporaryDirectory(prefix="share-streams-") as tmp:
        work = Path(tmp)
        subprocess.run(["javac", "-nowarn", "-cp", classpath, "-d", str(work / "classes"), str(SRC)], check=True,
                       timeout=300)
        env = {**os.environ, "KAFKA_EXTRA_PROPERTIES": BROKER_PROPERTIES, "KAFKA_OFFSETS_PARTITIONS": "2",
               "KAFKA_MAX_SECONDS": "600"}
        broker = work / "broker"
        start = subprocess.run(["bash", str(ROOT / "scripts" / "kafka.sh"), "start", str(broker), "44"], env=env,
                               check=True, capture_output=True, text=True, timeout=300).stdout
        bootstrap = next(line.split("=", 1)[1] for line in start.splitlines() if line.startswith("bootstrap="))
        try:
            subprocess.run(["timeout", "--kill-after=10", "300", "java", "-Xmx256m", f"-Dkafka.logs.dir={work / 'logs'}",
                            "-Dlog4j2.configurationFile=" + str(ROOT / "scripts" / "kafka" / "log4j2.properties"),
                            "-cp", f"{work / 'classes'}:{classpath}", "ShareStreamsScenario", bootstrap,
                            str(work / "out")], check=True, timeout=330)
        finally:
            subprocess.run(["bash", str(ROOT / "scripts" / "kafka.sh"), "stop", str(broker)], check=False, timeout=60)
        rows = [json.loads(line) for line in (work / "out" / "records.jsonl").read_text().splitlines()]
        truth = json.loads((work / "out" / "truth.json").read_text())
    keep = [r for r in rows if len(r["key"]) >= 8 and _group_of(bytes.fromhex(r["key"])) in GROUPS]
    keep.sort(key=lambda r: (r["partition"], r["offset"]))
    table = pa.table({
        "key": pa.array([bytes.fromhex(r["key"]) for r in keep], pa.binary()),
        "value": pa.array([bytes.fromhex(r["value"]) if r["value"] is not None else None for r in keep], pa.binary()),
        "topic": pa.array(["__consumer_offsets"] * len(keep), pa.string()),
        "partition": pa.array([r["partition"] for r in keep], pa.int32()),
        "offset": pa.array([r["offset"] for r in keep], pa.int64()),
        "timestamp": pa.array([datetime.fromtimestamp(r["timestamp"] / 1000, UTC) for r in keep],
                              pa.timestamp("ms", tz="UTC")),
    })
    pq.write_table(table, OUT.with_suffix(".parquet"), compression="zstd")
    OUT.with_suffix(".truth.json").write_text(json.dumps({"groups": GROUPS, "steps": truth}, indent=1) + "\n")
    print(f"{len(keep)} records of {', '.join(GROUPS)} -> {OUT.with_suffix('.parquet')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
