"""Writes golden vectors of the consumer, share and streams group records with Kafka's own serde.

    .venv/bin/python -m tools.group_record_vectors [--kafka-libs DIR]   # rewrite one vector file

Every case below is a record in Kafka's JSON form (the field names of its message schemas), and,
as Kafka's GroupCoordinatorRecordSerdeTest does, every group record type with all its fields at
their defaults. The Java filter `tools/java/GroupRecordSerde.java`, compiled against a Kafka
release's jars (by default the Kafka 4.1.1 jars `scripts/jars.sh` fetches), builds each key and
value with that release's generated classes from the JSON (their JSON converters), writes them as
GroupCoordinatorRecordSerde does (the int16 record type or value version, then the generated
writer's bytes), and reads the bytes back with the generated readers and JSON converters. The
result, `tests/core/codec/data/group_records_kafka_<v>.jsonl`, is what
`tests/core/codec/test_codec_groups.py` checks the codec against: the same bytes both ways and the
same fields. Cases of fields a later release added (`LATER_CASES`) run only against a Kafka that
has them; against 4.0, the share-group records take 4.0's layouts (`KAFKA_4_0_CASES`). Needs a JDK (javac, java). Another release's jars, e.g. 4.4.0's: a pom depending on
org.apache.kafka:kafka-group-coordinator:4.4.0 and `mvn dependency:copy-dependencies
-DoutputDirectory=DIR`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from coordinator_audit.core.records import RECORD_TYPE_NAMES

ROOT = Path(__file__).resolve().parents[1]
JAVA = ROOT / "tools" / "java" / "GroupRecordSerde.java"
DEFAULT_LIBS = ROOT / ".cache" / "jars" / "kafka-4.1.1" / "lib"
OUT_DIR = ROOT / "tests" / "core" / "codec" / "data"

T1 = "qACQV6SdQ_aYFxgOtHfDPg"  # topic ids in Kafka's JSON form (Uuid#toString: URL-safe base64)
T2 = "qbzVbg0QTQWpzOlKw0Iwng"
G = {"groupId": "g-1"}
GM = {"groupId": "g-1", "memberId": "m-1"}
PARTS = [{"topicId": T1, "partitions": [0, 1, 2]}, {"topicId": T2, "partitions": []}]
TOPIC_INFO = {"name": "app-store-changelog", "partitions": 4, "replicationFactor": 3,
              "topicConfigs": [{"key": "cleanup.policy", "value": "compact"}]}
TASKS = [{"subtopologyId": "0", "partitions": [0, 2]}, {"subtopologyId": "1", "partitions": [1]}]

# (record type, key, value or None for a tombstone); every value version is 0
CASES: list[tuple[int, dict[str, Any], dict[str, Any] | None]] = [
    (3, G, {"epoch": 12, "metadataHash": -4121981020345018763}),
    (3, G, {"epoch": 0}),
    (3, G, None),
    (4, G, {"topics": [{"topicId": T1, "topicName": "orders", "numPartitions": 2, "partitionMetadata": [
        {"partition": 0, "racks": ["r1", "r2"]}, {"partition": 1, "racks": []}]}]}),
    (5, GM, {"instanceId": "i-1", "rackId": "r1", "clientId": "c", "clientHost": "/10.0.0.1",
             "subscribedTopicNames": ["orders", "refunds"], "subscribedTopicRegex": "ord.*",
             "rebalanceTimeoutMs": 300000, "serverAssignor": "range",
             "classicMemberMetadata": {"sessionTimeoutMs": 45000, "supportedProtocols": [
                 {"name": "range", "metadata": "AAEAAAABAAZvcmRlcnM="}, {"name": "cooperative-sticky", "metadata": ""}]}}),
    (5, GM, {"instanceId": None, "rackId": None, "clientId": "", "clientHost": "", "subscribedTopicNames": [],
             "subscribedTopicRegex": None, "rebalanceTimeoutMs": -1, "serverAssignor": None,
             "classicMemberMetadata": None}),
    (5, GM, {"instanceId": None, "rackId": None, "clientId": "c", "clientHost": "h", "subscribedTopicNames": ["t"],
             "subscribedTopicRegex": "", "rebalanceTimeoutMs": 1, "serverAssignor": "uniform"}),
    (5, GM, None),
    (6, G, {"assignmentEpoch": 12}),
    (7, GM, {"topicPartitions": PARTS}),
    (8, GM, {"memberEpoch": 12, "previousMemberEpoch": 11, "state": 2, "assignedPartitions": PARTS,
             "partitionsPendingRevocation": [{"topicId": T2, "partitions": [5]}]}),
    (8, GM, None),
    (10, GM, {"rackId": "r2", "clientId": "share-c", "clientHost": "/10.0.0.2", "subscribedTopicNames": ["orders"]}),
    (10, GM, {"rackId": None, "clientId": "", "clientHost": "", "subscribedTopicNames": []}),
    (11, G, {"epoch": 3, "metadataHash": 987654321}),
    (11, G, {"epoch": 1, "metadataHash": 0}),
    (12, G, {"assignmentEpoch": 3}),
    (13, GM, {"topicPartitions": PARTS}),
    (14, GM, {"memberEpoch": 3, "previousMemberEpoch": 2, "state": 0, "assignedPartitions": PARTS}),
    (15, G, {"initializingTopics": [{"topicId": T2, "topicName": "refunds", "partitions": [0, 1]}],
             "initializedTopics": [{"topicId": T1, "topicName": "orders", "partitions": [0, 1, 2]}],
             "deletingTopics": [{"topicId": T2, "topicName": "old"}]}),
    (15, G, {"initializingTopics": [], "initializedTopics": [], "deletingTopics": []}),
    (15, G, None),
    (16, {"groupId": "g-1", "regularExpression": "ord.*"}, {"topics": ["orders", "ordinals"], "version": 17,
                                                           "timestamp": 1795911475221}),
    (17, G, {"epoch": 4, "metadataHash": -1}),
    (19, GM, {"instanceId": "s-1", "rackId": None, "clientId": "app-1-StreamThread-1", "clientHost": "/10.0.0.3",
              "rebalanceTimeoutMs": 300000, "topologyEpoch": 2, "processId": "6f1c0a2e-8a5b-4c8e-9a43-0d7f2f3b5c11",
              "userEndpoint": {"host": "app-1.local", "port": 65535},
              "clientTags": [{"key": "zone", "value": "eu-1a"}]}),
    (19, GM, {"instanceId": None, "rackId": "r3", "clientId": "c", "clientHost": "h", "rebalanceTimeoutMs": -1,
              "topologyEpoch": 0, "processId": "p", "userEndpoint": None, "clientTags": []}),
    (20, G, {"assignmentEpoch": 4}),
    (21, GM, {"activeTasks": TASKS, "standbyTasks": [{"subtopologyId": "1", "partitions": [0]}], "warmupTasks": []}),
    (22, GM, {"memberEpoch": 4, "previousMemberEpoch": 3, "state": 1, "activeTasks": TASKS,
              "standbyTasks": [], "warmupTasks": [{"subtopologyId": "0", "partitions": [3]}],
              "activeTasksPendingRevocation": [{"subtopologyId": "1", "partitions": [2]}],
              "standbyTasksPendingRevocation": [], "warmupTasksPendingRevocation": []}),
    (23, G, {"epoch": 2, "subtopologies": [
        {"subtopologyId": "0", "sourceTopics": ["input"], "sourceTopicRegex": ["in-.*"],
         "stateChangelogTopics": [TOPIC_INFO], "repartitionSinkTopics": ["app-repartition"],
         "repartitionSourceTopics": [], "copartitionGroups": [
             {"sourceTopics": [0], "sourceTopicRegex": [0], "repartitionSourceTopics": []}]},
        {"subtopologyId": "1", "sourceTopics": [], "sourceTopicRegex": [], "stateChangelogTopics": [],
         "repartitionSinkTopics": [], "repartitionSourceTopics": [
             {"name": "app-repartition", "partitions": -1, "replicationFactor": -1, "topicConfigs": []}],
         "copartitionGroups": []}]}),
    (23, G, None),
]


# Kafka 4.0's layouts of the share-group records 4.1 changed or dropped (types 9, 11 and 15)
KAFKA_4_0_CASES: list[tuple[int, dict[str, Any], dict[str, Any] | None]] = [
    (9, G, {"topics": [{"topicId": T1, "topicName": "orders", "numPartitions": 3, "partitionMetadata": [
        {"partition": 2, "racks": ["r1"]}]}]}),
    (9, G, None),
    (11, G, {"epoch": 3}),
    (11, G, {"epoch": 0}),
    (15, G, {"initializedTopics": [{"topicId": T1, "topicName": "orders", "partitions": [0, 1, 2]}],
             "deletingTopics": [{"topicId": T2, "topicName": "old"}]}),
    (15, G, {"initializedTopics": [], "deletingTopics": []}),
]

# (the release that added the fields, record type, key, value): tagged fields of 4.2-4.4
LATER_CASES: list[tuple[tuple[int, int], int, dict[str, Any], dict[str, Any]]] = [
    ((4, 2), 17, G, {"epoch": 4, "metadataHash": 99, "validatedTopologyEpoch": 2,
                     "lastAssignmentConfigs": [{"key": "num.standby.replicas", "value": "1"}]}),
    ((4, 2), 17, G, {"epoch": 4, "metadataHash": 99, "validatedTopologyEpoch": -1, "lastAssignmentConfigs": None}),
    ((4, 2), 22, GM, {"memberEpoch": 5, "previousMemberEpoch": 4, "state": 0,
                      "activeTasks": [{"subtopologyId": "0", "partitions": [0, 2], "assignmentEpochs": [3, 5]}],
                      "standbyTasks": [{"subtopologyId": "1", "partitions": [1], "assignmentEpochs": None}],
                      "warmupTasks": [], "activeTasksPendingRevocation": [], "standbyTasksPendingRevocation": [],
                      "warmupTasksPendingRevocation": []}),
    ((4, 3), 6, G, {"assignmentEpoch": 12, "assignmentTimestamp": 1795911475212}),
    ((4, 3), 8, GM, {"memberEpoch": 12, "previousMemberEpoch": 11, "state": 0,
                     "assignedPartitions": [{"topicId": T1, "partitions": [0, 1], "assignmentEpochs": [11, 12]},
                                            {"topicId": T2, "partitions": [3], "assignmentEpochs": None}],
                     "partitionsPendingRevocation": []}),
    ((4, 3), 12, G, {"assignmentEpoch": 3, "assignmentTimestamp": 1795911475999}),
    ((4, 3), 20, G, {"assignmentEpoch": 4, "assignmentTimestamp": -5}),
    ((4, 4), 17, G, {"epoch": 4, "metadataHash": 99, "validatedTopologyEpoch": 3, "lastAssignmentConfigs": [],
                     "storedDescriptionTopologyEpoch": -2, "failedDescriptionTopologyEpoch": 3}),
]


def _release(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def cases_for(version: str) -> list[dict[str, Any]]:
    """The input lines of `GroupRecordSerde.java` for Kafka `version` ("4.0.0", "4.4.0", ...)."""
    if _release(version) < (4, 1):  # no streams groups yet; share groups' 4.0 layouts
        chosen = [c for c in CASES if c[0] < 17 and c[0] not in (11, 15)] + KAFKA_4_0_CASES
    else:
        chosen = CASES + [(t, k, v) for since, t, k, v in LATER_CASES if _release(version) >= since]
    cases = [{"record_type": t, "key": k, "value_version": 0, "value": v} for t, k, v in chosen]
    cases += [{"record_type": t, "value_version": 0, "defaults": True} for t in sorted({t for t, _, _ in chosen})]
    for case in cases:
        case["name"] = RECORD_TYPE_NAMES[case["record_type"]]
    return cases


def run(libs: Path, version: str) -> list[dict[str, Any]]:
    """The cases through Kafka's classes (`GroupRecordSerde.java` compiled against `libs`, Kafka `version`)."""
    classpath = f"{libs}/*"
    with tempfile.TemporaryDirectory() as classes:
        subprocess.run(["javac", "-d", classes, "-cp", classpath, str(JAVA)], check=True)
        lines = "".join(json.dumps(case) + "\n" for case in cases_for(version))
        out = subprocess.run(["java", "-cp", f"{classes}:{classpath}", "GroupRecordSerde"], input=lines,
                             capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in out.splitlines()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--kafka-libs", type=Path, default=DEFAULT_LIBS,
                        help="a Kafka distribution's jar folder (kafka-group-coordinator-<version>.jar among them)")
    args = parser.parse_args(argv)
    jars = sorted(args.kafka_libs.glob("kafka-group-coordinator-[0-9]*.jar"))
    if not jars:
        print(f"no kafka-group-coordinator jar in {args.kafka_libs}", file=sys.stderr)
        return 1
    version = jars[0].name.removeprefix("kafka-group-coordinator-").removesuffix(".jar")
    vectors = run(args.kafka_libs, version)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    out = OUT_DIR / f"group_records_kafka_{version.replace('.', '_')}.jsonl"
    out.write_text("".join(json.dumps(v, sort_keys=True) + "\n" for v in vectors))
    print(f"{len(vectors)} vectors from Kafka {version} -> {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
