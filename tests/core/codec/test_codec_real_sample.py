"""The real Apache Kafka 3.9.0 broker sample (data/samples/real_broker_3_9_0.parquet): every record
decodes, re-encodes byte for byte, and sits in the partition partition_for gives its group; the
embedded consumer-protocol bytes and cooperative user data decode and re-encode too."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from coordinator_audit.core.consumer_protocol import (
    decode_assignment,
    decode_cooperative_user_data,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from coordinator_audit.core.records import (
    OFFSET_COMMIT_KEY,
    OFFSET_COMMIT_VALUE,
    CoordinatorRecord,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode,
    encode,
    offset_commit_key_fields,
    offset_commit_value_fields,
    partition_for,
)
from coordinator_audit.core.wire import read_body

SAMPLES = Path(__file__).resolve().parents[3] / "data" / "samples"
SAMPLE = SAMPLES / "real_broker_3_9_0.parquet"
TRUTH = SAMPLES / "real_broker_3_9_0.truth.json"


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(SAMPLE).to_pylist()
    return rows


def test_every_record_decodes_and_re_encodes_byte_identically(rows: list[dict[str, Any]]) -> None:
    kinds: Counter[tuple[str, int | None]] = Counter()
    for row in rows:
        where = f"partition {row['partition']} offset {row['offset']}"
        rec = decode(row["key"], row["value"])
        assert encode(rec) == (row["key"], row["value"]), where
        assert rec.key_trailing == b"" and rec.value_trailing == b"", where
        assert partition_for(rec.key.group) == row["partition"], where
        kinds[(rec.record_type_name, rec.value_version)] += 1
    # what a 3.9 broker writes (GroupCoordinatorRecordHelpers): offset commits v3, group metadata v3, key v1/v2
    assert kinds == {("OffsetCommit", 3): 1116, ("GroupMetadata", 3): 22}


def test_groups_sit_in_their_truth_partition(rows: list[dict[str, Any]]) -> None:
    truth = json.loads(TRUTH.read_text())
    expected = {g["group"]: g["consumer_offsets_partition"] for g in truth["groups"]}
    seen = {decode(r["key"], None).key.group: r["partition"] for r in rows}
    assert seen == expected
    assert {g: partition_for(g) for g in expected} == expected


def test_embedded_consumer_protocol_bytes(rows: list[dict[str, Any]]) -> None:
    protocols: Counter[tuple[str | None, int, int | None]] = Counter()
    coop_generations = []
    for row in rows:
        rec = decode(row["key"], row["value"])
        if not isinstance(rec.value, GroupMetadataValue):
            continue
        for m in rec.value.members:
            sub = decode_subscription(m.subscription)
            assert encode_subscription(sub) == m.subscription and sub.trailing == b""
            asg = decode_assignment(m.assignment) if m.assignment else None
            if asg is not None:
                assert encode_assignment(asg) == m.assignment and asg.trailing == b""
            protocols[(rec.value.protocol, sub.version, asg.version if asg else None)] += 1
            if rec.value.protocol == "cooperative-sticky":
                coop_generations.append((decode_cooperative_user_data(sub.user_data), sub.generation_id))
                assert asg is not None and asg.version == 3
    # kafka-python 3.0.12 writes Subscription/Assignment v0, the Java 3.9 client v3 (ConsumerProtocol)
    assert set(protocols) == {("range", 0, 0), ("range", 3, 3), ("cooperative-sticky", 3, 3)}
    # cooperative-sticky members send the generation twice: userData (4 bytes) and GenerationId
    assert coop_generations and all(g is not None for g, _ in coop_generations)
    assert sum(1 for g, gid in coop_generations if g == gid) >= len(coop_generations) - 1


def test_fast_path_agrees_with_generic_decoder(rows: list[dict[str, Any]]) -> None:
    """The fast path against the schema-driven reader itself (decode() uses the fast path too)."""
    for row in rows:
        key, value = row["key"], row["value"]
        if key[:2] != b"\x00\x01":
            continue
        k, _ = read_body(OFFSET_COMMIT_KEY, key, 2, 1)
        v, _ = read_body(OFFSET_COMMIT_VALUE, value, 2, 3)
        assert isinstance(k, OffsetCommitKey) and isinstance(v, OffsetCommitValue)
        assert offset_commit_key_fields(key) == (k.group, k.topic, k.partition)
        assert offset_commit_value_fields(value) == (3, v.offset, v.leader_epoch, v.metadata, v.commit_timestamp,
                                                     v.expire_timestamp)
        assert decode(key, value) == CoordinatorRecord(k, v, 1, 3)
