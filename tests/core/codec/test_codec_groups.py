"""Consumer-group (3–8, 16), share-group (9–15) and streams-group (17, 19–23) records.

* Kafka's own classes: `data/group_records_kafka_4_{0_0,1_1,4_0}.jsonl` (written by
  `tools.group_record_vectors` with Kafka 4.0.0's, 4.1.1's and 4.4.0's generated record classes;
  4.0.0's with its share-group layouts, 4.4.0's with the tagged fields of 4.2-4.4 set; every type also at its
  defaults, as GroupCoordinatorRecordSerdeTest#testDeserializeAllRecordTypes builds them): the codec
  reads Kafka's bytes as Kafka reads them and writes them back byte for byte. The bytes that
  GroupCoordinatorRecordSerdeTest expects to fail fail here too, naming the field.
* A real Kafka 4.4.0 broker's log (data/real_broker_4_4_0_kip848.*: two KIP-848 groups, one with a
  regex subscription, kafka-clients 4.4.0 consumers): every record decodes
  and re-encodes byte for byte, and every group record reads as the broker's own serde read it.
* Tagged fields of 4.2–4.4 laid out by hand from the schemas, null markers and defaults among them.
* Share groups' 4.0 -> 4.1 layout changes: decoded by what the bytes prove, else an error naming
  the field.
* A Hypothesis round trip per schema, its values drawn from the schema itself.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator_audit.core import records
from coordinator_audit.core.errors import RecordDecodeError
from coordinator_audit.core.records import RECORD_TYPE_NAMES, CoordinatorRecord, decode, encode
from coordinator_audit.core.records_kip848 import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    CurrentTopicPartitions,
)
from coordinator_audit.core.records_share import (
    LEGACY_LAYOUTS,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupMetadataValue40,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupStatePartitionMetadataValue40,
    TopicInfo,
    TopicPartitionsInfo,
)
from coordinator_audit.core.records_streams import (
    CurrentTaskIds,
    KeyValue,
    StreamsGroupCurrentMemberAssignmentKey,
    StreamsGroupCurrentMemberAssignmentValue,
    StreamsGroupMetadataKey,
    StreamsGroupMetadataValue,
)
from coordinator_audit.core.wire import Array, Message, Struct, read_body
from tests.support.codec import INT8, INT16, INT32, INT64, round_trip
from tests.support.kafka_json import to_kafka_json

DATA = Path(__file__).resolve().parent / "data"
KAFKA_VECTORS = [DATA / f"group_records_kafka_{v}.jsonl" for v in ("4_0_0", "4_1_1", "4_4_0")]
SAMPLE = DATA / "real_broker_4_4_0_kip848.parquet"  # partition 3 of a 4.4.0 broker's __consumer_offsets
SAMPLE_DECODED = DATA / "real_broker_4_4_0_kip848.records.jsonl"  # its group records, as the broker's serde read them
GROUP_TYPES = [*range(3, 18), *range(19, 24)]


def _value_schema(rec: CoordinatorRecord) -> Message[Any]:
    return records._VALUE_SCHEMAS[type(rec.value)]


def _assert_reads_as_kafka(rec: CoordinatorRecord, kafka_key: dict[str, Any], kafka_value: dict[str, Any] | None,
                           where: str) -> None:
    assert to_kafka_json(records._SCHEMAS[rec.key_version][0], rec.key) == kafka_key, where
    if kafka_value is None:
        assert rec.value is None, where
    else:
        assert to_kafka_json(_value_schema(rec), rec.value) == kafka_value, where


# ---- Kafka's own serde ------------------------------------------------------------------------

def _kafka_vectors() -> list[dict[str, Any]]:
    return [{**json.loads(line), "kafka": path.stem.removeprefix("group_records_kafka_")}
            for path in KAFKA_VECTORS for line in path.read_text().splitlines()]


def test_kafka_vectors_cover_every_type_kafka_4_0_to_4_4_writes() -> None:
    types = {v["kafka"]: set() for v in _kafka_vectors()}
    for v in _kafka_vectors():
        types[v["kafka"]].add(v["record_type"])
    assert types == {"4_0_0": set(range(3, 17)),  # no streams groups yet
                     "4_1_1": set(GROUP_TYPES) - {9},  # 4.1 dropped ShareGroupPartitionMetadata (9)
                     "4_4_0": set(GROUP_TYPES) - {9}}


@pytest.mark.parametrize("vector", _kafka_vectors(), ids=lambda v: f"kafka{v['kafka']}-type{v['record_type']}"
                                                                   f"{'-defaults' if v.get('defaults') else ''}")
def test_kafka_serde_vectors(vector: dict[str, Any]) -> None:
    key = bytes.fromhex(vector["key_hex"])
    value = None if vector["value_hex"] is None else bytes.fromhex(vector["value_hex"])
    rec = decode(key, value)
    assert rec.key_version == vector["record_type"]
    assert rec.record_type_name == RECORD_TYPE_NAMES[vector["record_type"]]
    assert rec.value_version == (None if value is None else 0)
    assert rec.key_trailing == rec.value_trailing == b""
    _assert_reads_as_kafka(rec, vector["kafka_key"], vector["kafka_value"], vector["key_hex"])
    assert encode(rec) == (key, value)
    if vector["record_type"] in LEGACY_LAYOUTS and value is not None:  # the layout the bytes prove
        legacy = LEGACY_LAYOUTS[vector["record_type"]][0].root.factory
        assert (type(rec.value) is legacy) == (vector["kafka"] == "4_0_0")


@pytest.mark.parametrize(("key", "value", "field"), [
    ("0003", "0000", "group_id"),  # testDeserializeWithInvalidKeyBytes: a key of its type alone
    ("00030003666f6f", "0000", "epoch"),  # testDeserializeWithInvalidValueBytes: a value of its version alone
    ("00030003666f6f", "ffff", "<version>"),  # testDeserializeWithInvalidValueVersion: below the lowest
])
def test_what_kafkas_serde_test_refuses_is_refused(key: str, value: str, field: str) -> None:
    with pytest.raises(RecordDecodeError) as err:
        decode(bytes.fromhex(key), bytes.fromhex(value))
    assert err.value.field == field and err.value.position is not None


# ---- a real Kafka 4.4.0 broker --------------------------------------------------------------

def test_real_4_4_log_decodes_and_re_encodes_byte_for_byte() -> None:
    kinds: Counter[tuple[str, int | None]] = Counter()
    for row in pq.read_table(SAMPLE).to_pylist():
        where = f"partition {row['partition']} offset {row['offset']}"
        rec = decode(row["key"], row["value"])
        assert encode(rec) == (row["key"], row["value"]), where
        assert rec.key_trailing == rec.value_trailing == b"", where
        kinds[(rec.record_type_name, rec.value_version)] += 1
    assert kinds == {
        ("OffsetCommit", 4): 566, ("ConsumerGroupCurrentMemberAssignment", 0): 25,
        ("ConsumerGroupTargetAssignmentMember", 0): 14, ("ConsumerGroupMetadata", 0): 11,
        ("ConsumerGroupTargetAssignmentMetadata", 0): 10, ("ConsumerGroupMemberMetadata", 0): 5,
        ("ConsumerGroupRegularExpression", 0): 4, ("ConsumerGroupCurrentMemberAssignment", None): 5,
        ("ConsumerGroupTargetAssignmentMember", None): 5, ("ConsumerGroupMemberMetadata", None): 5,
        ("ConsumerGroupRegularExpression", None): 1}


def test_real_4_4_group_records_read_as_the_broker_read_them() -> None:
    rows = {r["offset"]: r for r in pq.read_table(SAMPLE).to_pylist()}
    decoded = [json.loads(line) for line in SAMPLE_DECODED.read_text().splitlines()]
    assert len(decoded) == sum(1 for r in rows.values() if r["key"][:2] not in (b"\x00\x00", b"\x00\x01"))
    epochs = 0
    for d in decoded:
        row = rows[d["offset"]]
        rec = decode(row["key"], row["value"])
        assert rec.key_version == d["record_type"] and rec.is_tombstone == d["tombstone"]
        _assert_reads_as_kafka(rec, d["key"], d["value"], f"offset {d['offset']}")
        if isinstance(rec.value, ConsumerGroupCurrentMemberAssignmentValue):
            epochs += sum(t.assignment_epochs is not None for t in rec.value.assigned_partitions)
    assert epochs > 0  # 4.3+'s AssignmentEpochs, as the broker wrote them


# ---- tagged fields of 4.2-4.4, by hand from the schemas --------------------------------------

TOPIC = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")


def test_streams_group_metadata_tagged_fields() -> None:
    value = StreamsGroupMetadataValue(5, 7, validated_topology_epoch=3,
                                      last_assignment_configs=(KeyValue("num.standby.replicas", "1"),),
                                      stored_description_topology_epoch=-2, failed_description_topology_epoch=2)
    rec = CoordinatorRecord.of(StreamsGroupMetadataKey("s"), value)
    body = bytes.fromhex(
        "0000" "00000005" "0000000000000007"
        "04"                                         # four tags, in tag order
        "00" "04" "00000003"                         # 0 ValidatedTopologyEpoch (4.2)
        "01" "19" "02" "15" + b"num.standby.replicas".hex() + "02" "31" "00"  # 1 LastAssignmentConfigs (4.2)
        "02" "04" "fffffffe"                         # 2 StoredDescriptionTopologyEpoch (4.4)
        "03" "04" "00000002")                        # 3 FailedDescriptionTopologyEpoch (4.4)
    assert encode(rec)[1] == body
    assert decode(encode(rec)[0], body) == rec
    # at their defaults nothing is written; None (not the empty default) is a tag holding a null marker
    assert encode(CoordinatorRecord.of(StreamsGroupMetadataKey("s"), StreamsGroupMetadataValue(5, 7)))[1] == \
        bytes.fromhex("0000 00000005 0000000000000007 00")
    null = StreamsGroupMetadataValue(5, 7, last_assignment_configs=None)
    assert encode(CoordinatorRecord.of(StreamsGroupMetadataKey("s"), null))[1] == \
        bytes.fromhex("0000 00000005 0000000000000007 01 01 01 00")


def test_assignment_epochs_null_empty_and_set() -> None:
    def current(epochs: tuple[int, ...] | None) -> bytes:
        v = ConsumerGroupCurrentMemberAssignmentValue(1, 0, 0, (CurrentTopicPartitions(TOPIC, (4,), epochs),), ())
        key, value = encode(CoordinatorRecord.of(ConsumerGroupCurrentMemberAssignmentKey("g", "m"), v))
        assert value is not None and decode(key, value).value == v
        return value[2 + 4 + 4 + 1 + 1 + 16:]  # from the topic's partitions on
    # partitions [4]; its tag section; no pending revocations; the value's tag section
    assert current((9,)) == bytes.fromhex("02 00000004" "01 00 05 0200000009" "01" "00")
    assert current(None) == bytes.fromhex("02 00000004" "01 00 01 00" "01" "00")
    assert current(()) == bytes.fromhex("02 00000004" "00" "01" "00")
    tasks = StreamsGroupCurrentMemberAssignmentValue(2, 1, 0, (CurrentTaskIds("0", (1, 2), (2, 2)),),
                                                     (CurrentTaskIds("1", (0,)),), (), (), (), ())
    assert round_trip(CoordinatorRecord.of(StreamsGroupCurrentMemberAssignmentKey("s", "m"), tasks)).value == tasks


# ---- share groups' 4.0 -> 4.1 layouts ----------------------------------------------------------

def _share(key: object, value_hex: str) -> CoordinatorRecord:
    return decode(encode(CoordinatorRecord.of(key))[0], bytes.fromhex(value_hex))  # type: ignore[arg-type]


def test_share_group_metadata_by_what_the_bytes_prove() -> None:
    assert _share(ShareGroupMetadataKey("s"), "0000 00000003 00").value == ShareGroupMetadataValue40(3)
    assert _share(ShareGroupMetadataKey("s"), "0000 00000003 0000000000000009 00").value == \
        ShareGroupMetadataValue(3, 9)
    for value in (ShareGroupMetadataValue40(3), ShareGroupMetadataValue(3, 9)):
        assert round_trip(CoordinatorRecord.of(ShareGroupMetadataKey("s"), value)).value == value


def test_share_group_state_partition_metadata_by_what_the_bytes_prove() -> None:
    info = TopicPartitionsInfo(TOPIC, "t", (0, 1))
    legacy = ShareGroupStatePartitionMetadataValue40((info,), (TopicInfo(TOPIC, "old"),))
    current = ShareGroupStatePartitionMetadataValue((), (info,), (TopicInfo(TOPIC, "old"),))
    for value in (legacy, current, ShareGroupStatePartitionMetadataValue40((), ()),
                  ShareGroupStatePartitionMetadataValue((), (), ())):
        assert round_trip(CoordinatorRecord.of(ShareGroupStatePartitionMetadataKey("s"), value)).value == value


@pytest.mark.parametrize(("key", "value_hex", "field", "match"), [
    # 4.0's Epoch then a tag section holding one 6-byte unknown tag 5 reads exactly as 4.1's Epoch,
    # MetadataHash (0x010506000000000000) and an empty tag section: the bytes cannot tell which wrote them
    (ShareGroupMetadataKey("s"), "0000 00000003 01 05 06 000000000000", "metadata_hash", "both"),
    (ShareGroupMetadataKey("s"), "0000 00000003 0000", "metadata_hash", "neither"),
    (ShareGroupStatePartitionMetadataKey("s"), "0000 01 01 01", "initializing_topics", "neither"),
])
def test_share_layout_errors_name_the_field(key: object, value_hex: str, field: str, match: str) -> None:
    with pytest.raises(RecordDecodeError, match=match) as err:
        _share(key, value_hex)
    assert err.value.field == field and err.value.position == 2
    assert err.value.schema == records._SCHEMAS[encode(CoordinatorRecord.of(key))[0][1]][1].name  # type: ignore[arg-type]


def test_only_share_types_11_and_15_have_two_layouts() -> None:
    assert set(LEGACY_LAYOUTS) == {11, 15}


# ---- one Hypothesis round trip per schema, drawn from the schema -----------------------------

_INTS = {"int8": INT8, "int16": INT16, "uint16": st.integers(0, 2**16 - 1), "int32": INT32, "int64": INT64}


def _raw_tags(known: set[int]) -> st.SearchStrategy[tuple[tuple[int, bytes], ...]]:
    return st.lists(st.tuples(st.integers(0, 2**20).filter(lambda t: t not in known), st.binary(max_size=6)),
                    max_size=2, unique_by=lambda t: t[0]).map(lambda tags: tuple(sorted(tags)))


def _strategy(ftype: str | Array | Struct[object], nullable: bool) -> st.SearchStrategy[Any]:
    if isinstance(ftype, Struct):
        base: st.SearchStrategy[Any] = struct_values(ftype)
    elif isinstance(ftype, Array):
        base = st.lists(_strategy(ftype.element, False), max_size=3).map(tuple)
    elif ftype in _INTS:
        base = _INTS[ftype]
    else:
        base = {"string": st.text(max_size=12), "bytes": st.binary(max_size=12),
                "uuid": st.uuids().map(lambda u: uuid.UUID(int=u.int))}[ftype]
    return st.none() | base if nullable else base


def struct_values(s: Struct[object]) -> st.SearchStrategy[Any]:
    """Values of `s` at version 0 (flexible): every field drawn by its type, tagged fields often at
    their default, unknown tags among them."""
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for f in s.fields:
        draw = _strategy(f.type, f.nullable != "none")
        fields[f.name] = draw if f.tag is None else st.just(f.default) | draw
    fields["unknown_tagged_fields"] = _raw_tags({f.tag for f in s.fields if f.tag is not None})
    return st.fixed_dictionaries(fields).map(lambda kw: s.factory(**kw))


def _value_schemas() -> list[tuple[int, Message[Any]]]:
    out = [(t, records._SCHEMAS[t][1]) for t in GROUP_TYPES]
    return out + [(t, legacy) for t, (legacy, _) in LEGACY_LAYOUTS.items()]


@pytest.mark.parametrize(("record_type", "schema"), _value_schemas(), ids=lambda x: getattr(x, "name", str(x)))
def test_schema_round_trip(record_type: int, schema: Message[Any]) -> None:
    key_schema = records._SCHEMAS[record_type][0]
    keys = st.builds(key_schema.root.factory, *(st.text(max_size=8) for _ in key_schema.root.fields))

    @given(keys, struct_values(schema.root))
    @settings(max_examples=40, deadline=None)
    def check(key: Any, value: Any) -> None:
        rec = CoordinatorRecord.of(key, value)
        assert round_trip(CoordinatorRecord.of(key)) == CoordinatorRecord.of(key)
        if record_type not in LEGACY_LAYOUTS:
            assert round_trip(rec) == rec
            return
        # a value of one share layout may also read exactly as the other: then decoding refuses it
        key_bytes, value_bytes = encode(rec)
        try:
            back = decode(key_bytes, value_bytes)
        except RecordDecodeError as e:
            other = LEGACY_LAYOUTS[record_type][0] if schema is records._SCHEMAS[record_type][1] else \
                records._SCHEMAS[record_type][1]
            assert "both" in e.reason and e.field == LEGACY_LAYOUTS[record_type][1]
            assert value_bytes is not None
            _, end = read_body(other, value_bytes, 2, 0)
            assert end == len(value_bytes)
        else:
            assert back == rec

    check()
