"""Hypothesis round trips, one per schema (records, consumer protocol, user data; the group records'
are in test_codec_groups), and the offset-commit fast path held equal to the generic decoder."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator_audit.core import records
from coordinator_audit.core.consumer_protocol import (
    Assignment,
    Subscription,
    TopicPartitions,
    decode_assignment,
    decode_cooperative_user_data,
    decode_sticky_user_data,
    decode_subscription,
    encode_assignment,
    encode_cooperative_user_data,
    encode_sticky_user_data,
    encode_subscription,
)
from coordinator_audit.core.errors import RecordDecodeError
from coordinator_audit.core.records import (
    ControlRecordKey,
    ControlRecordValue,
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownRecordKey,
    UnknownRecordValue,
    decode,
    encode,
    offset_commit_key_fields,
    offset_commit_value_fields,
)
from tests.support.codec import INT16, INT32, INT64, assert_record_round_trip

text = st.text(max_size=20)
opt_text = st.none() | text
blob = st.binary(max_size=40)
# unknown tags of GroupMetadataValue/OffsetCommitValue v4+ (neither has known tagged fields)
raw_tags = st.lists(st.tuples(st.integers(1, 2**20), st.binary(max_size=8)), max_size=3,
                    unique_by=lambda t: t[0]).map(lambda tags: tuple(sorted(tags)))


def tp() -> st.SearchStrategy[TopicPartitions]:
    return st.builds(TopicPartitions, text, st.lists(INT32, max_size=6).map(tuple))


# ---- records ---------------------------------------------------------------------------------

@st.composite
def offset_records(draw: Callable[..., Any]) -> CoordinatorRecord:
    version = draw(st.integers(0, 4))
    value = OffsetCommitValue(
        offset=draw(INT64),
        leader_epoch=draw(INT32) if version >= 3 else -1,
        metadata=draw(text),
        commit_timestamp=draw(INT64),
        expire_timestamp=draw(INT64) if version == 1 else -1,
        unknown_tagged_fields=draw(raw_tags) if version >= 4 else (),
    )
    key = OffsetCommitKey(draw(text), draw(text), draw(INT32))
    return CoordinatorRecord(key, value, draw(st.integers(0, 1)), version)


@given(offset_records())
def test_offset_commit_round_trip(rec: CoordinatorRecord) -> None:
    assert_record_round_trip(rec)


@st.composite
def group_records(draw: Callable[..., Any]) -> CoordinatorRecord:
    version = draw(st.integers(0, 4))
    members = draw(st.lists(st.builds(
        MemberMetadata,
        member_id=text,
        group_instance_id=opt_text if version >= 3 else st.none(),
        client_id=text,
        client_host=text,
        rebalance_timeout=INT32 if version >= 1 else st.just(-1),
        session_timeout=INT32,
        subscription=blob,
        assignment=blob,
        unknown_tagged_fields=raw_tags if version >= 4 else st.just(()),
    ), max_size=4).map(tuple))
    value = GroupMetadataValue(draw(text), draw(INT32), draw(opt_text), draw(opt_text),
                               draw(INT64) if version >= 2 else -1, members,
                               draw(raw_tags) if version >= 4 else ())
    return CoordinatorRecord(GroupMetadataKey(draw(text)), value, 2, version)


@given(group_records())
def test_group_metadata_round_trip(rec: CoordinatorRecord) -> None:
    assert_record_round_trip(rec)


@given(st.one_of(offset_records(), group_records()))
def test_tombstone_round_trip(rec: CoordinatorRecord) -> None:
    assert_record_round_trip(CoordinatorRecord(rec.key, None, rec.key_version))


@given(st.integers(-(2**15), 2**15 - 1).filter(lambda t: t not in records._SCHEMAS), blob, INT16, blob)
def test_unknown_record_round_trip(record_type: int, raw_key: bytes, version: int, raw_value: bytes) -> None:
    assert_record_round_trip(CoordinatorRecord(UnknownRecordKey(record_type, raw_key),
                                               UnknownRecordValue(raw_value), record_type, version))


@given(st.integers(0, 2**15 - 1), st.integers(0, 1), st.integers(0, 2**15 - 1), INT32)
def test_marker_round_trip(key_version: int, control_type: int, value_version: int, epoch: int) -> None:
    assert_record_round_trip(CoordinatorRecord(ControlRecordKey(control_type), ControlRecordValue(epoch),
                                               key_version, value_version))


@given(st.one_of(offset_records(), group_records()), st.binary(max_size=6), st.binary(max_size=6))
def test_trailing_bytes_round_trip(rec: CoordinatorRecord, key_tail: bytes, value_tail: bytes) -> None:
    key, value = encode(rec)
    assert value is not None
    back = decode(key + key_tail, value + value_tail)
    assert (back.key, back.value) == (rec.key, rec.value)
    assert encode(back) == (key + key_tail, value + value_tail)


# ---- the offset-commit fast path equals the generic decoder ----------------------------------

def _outcome(fn: Callable[[bytes], Any], data: bytes) -> Any:
    try:
        return fn(data)
    except RecordDecodeError as e:
        return ("error", str(e))


def _generic(fn: Callable[[bytes], Any], data: bytes) -> Any:
    with pytest.MonkeyPatch.context() as mp:  # switch the optimisation off, keep everything else
        mp.setattr(records, "_offset_key_fast", lambda _key: None)
        mp.setattr(records, "_offset_value_fast", lambda _value: None)
        return _outcome(fn, data)


def _mutations(data: bytes) -> st.SearchStrategy[bytes]:
    cut = st.integers(0, len(data)).map(lambda n: data[:n])
    flip = st.tuples(st.integers(0, max(len(data) - 1, 0)), st.integers(0, 7)).map(
        lambda p: data[:p[0]] + bytes([data[p[0]] ^ (1 << p[1])]) + data[p[0] + 1:] if data else data)
    return st.one_of(st.just(data), cut, flip, st.binary(max_size=6).map(lambda b: data + b))


@given(offset_records().flatmap(lambda rec: _mutations(encode(rec)[0])))
def test_fast_key_fields_equal_generic(key: bytes) -> None:
    assert _outcome(offset_commit_key_fields, key) == _generic(offset_commit_key_fields, key)


@given(offset_records().flatmap(lambda rec: _mutations(encode(rec)[1] or b"")))
def test_fast_value_fields_equal_generic(value: bytes) -> None:
    assert _outcome(offset_commit_value_fields, value) == _generic(offset_commit_value_fields, value)


@given(offset_records().flatmap(lambda rec: st.tuples(_mutations(encode(rec)[0]), _mutations(encode(rec)[1] or b""))))
def test_fast_decode_equals_generic(pair: tuple[bytes, bytes]) -> None:
    key, value = pair
    assert _outcome(lambda _: decode(key, value), b"") == _generic(lambda _: decode(key, value), b"")


# ---- consumer protocol and user data ---------------------------------------------------------

@st.composite
def subscriptions(draw: Callable[..., Any]) -> Subscription:
    version = draw(st.integers(0, 7))
    return Subscription(
        version=version,
        topics=tuple(draw(st.lists(text, max_size=5))),
        user_data=draw(st.none() | blob),
        owned_partitions=tuple(draw(st.lists(tp(), max_size=4))) if version >= 1 else (),
        generation_id=draw(INT32) if version >= 2 else -1,
        rack_id=draw(opt_text) if version >= 3 else None,
        trailing=draw(blob) if version > 3 else b"",
    )


@given(subscriptions())
def test_subscription_round_trip(sub: Subscription) -> None:
    data = encode_subscription(sub)
    assert decode_subscription(data) == sub
    assert encode_subscription(decode_subscription(data)) == data


@given(st.integers(0, 7), st.lists(tp(), max_size=5).map(tuple), st.none() | blob)
def test_assignment_round_trip(version: int, parts: tuple[TopicPartitions, ...], user_data: bytes | None) -> None:
    asg = Assignment(version, parts, user_data)
    data = encode_assignment(asg)
    assert decode_assignment(data) == asg


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c", "orders", "ü", "t\U0001f600"]) | text, INT32), max_size=30), INT32)
def test_sticky_user_data_round_trip(pairs: list[tuple[str, int]], generation: int) -> None:
    decoded = decode_sticky_user_data(encode_sticky_user_data(pairs, generation=generation))
    assert decoded.generation == generation
    # one entry per topic, each topic's partitions in assignment order
    topics = [g.topic for g in decoded.previous_assignment]
    assert sorted(topics) == sorted(dict.fromkeys(t for t, _ in pairs))
    for g in decoded.previous_assignment:
        assert list(g.partitions) == [p for t, p in pairs if t == g.topic]


@given(INT32)
def test_cooperative_user_data_round_trip(generation: int) -> None:
    assert decode_cooperative_user_data(encode_cooperative_user_data(generation)) == generation
