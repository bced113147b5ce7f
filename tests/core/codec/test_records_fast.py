"""The codec's byte-level readers (`coordinator_audit.core.records_fast`) agree with the codec field for field, or step aside."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator_audit.core.consumer_protocol import (
    Assignment,
    Subscription,
    TopicPartitions,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from coordinator_audit.core.errors import RecordDecodeError
from coordinator_audit.core.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    decode,
    encode,
)
from coordinator_audit.core.records_fast import (
    GroupRecordReader,
    assignment_fast,
    group_metadata_header,
    group_record_fast,
    subscription_fast,
)
from tests.support.codec import INT32

TEXT = st.text(max_size=12)
PARTS = st.lists(st.builds(TopicPartitions, TEXT, st.lists(INT32, max_size=5).map(tuple)), max_size=3).map(tuple)


def member_for(version: int) -> st.SearchStrategy[MemberMetadata]:
    return st.builds(
        MemberMetadata, TEXT, st.none() | TEXT if version >= 3 else st.none(), TEXT, TEXT,
        INT32 if version >= 1 else st.just(-1), INT32, st.binary(max_size=20), st.binary(max_size=20))


@st.composite
def group_records(draw) -> CoordinatorRecord:
    version = draw(st.integers(0, 4))
    value = GroupMetadataValue(
        draw(TEXT), draw(INT32), draw(st.none() | TEXT), draw(st.none() | TEXT),
        draw(st.integers(-1, 2**62)) if version >= 2 else -1, tuple(draw(st.lists(member_for(version), max_size=3))))
    key = GroupMetadataKey(draw(TEXT))
    if draw(st.booleans()):
        return CoordinatorRecord(key, None, 2)
    return CoordinatorRecord.of(key, value, value_version=version)


@settings(max_examples=300, deadline=None)
@given(group_records())
def test_group_record_fast_equals_codec(rec: CoordinatorRecord) -> None:
    key, value = encode(rec)
    fast = group_record_fast(key, value)
    if rec.value_version == 4:
        assert fast is None  # flexible: the codec's job
    else:
        assert fast == decode(key, value)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=60), st.none() | st.binary(max_size=120))
def test_group_record_fast_on_arbitrary_bytes(key: bytes, value: bytes | None) -> None:
    fast = group_record_fast(b"\x00\x02" + key, value)
    if fast is None:
        return
    assert fast == decode(b"\x00\x02" + key, value)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 3), st.lists(TEXT, max_size=4), st.none() | st.binary(max_size=8), PARTS, INT32,
       st.none() | TEXT)
def test_subscription_fast_equals_codec(version, topics, user_data, owned, generation, rack) -> None:
    sub = Subscription(version, tuple(topics), user_data, owned if version >= 1 else (),
                       generation if version >= 2 else -1, rack if version >= 3 else None)
    raw = encode_subscription(sub)
    got = subscription_fast(raw)
    d = decode_subscription(raw)
    assert got == (d.version, d.topics, d.user_data,
                   tuple((tp.topic, p) for tp in d.owned_partitions for p in tp.partitions), d.generation_id,
                   d.rack_id)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 3), PARTS, st.none() | st.binary(max_size=8))
def test_assignment_fast_equals_codec(version, parts, user_data) -> None:
    raw = encode_assignment(Assignment(version, parts, user_data))
    d = decode_assignment(raw)
    assert assignment_fast(raw) == (d.version, tuple((tp.topic, p) for tp in d.assigned_partitions
                                                     for p in tp.partitions), d.user_data)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=50))
def test_embedded_fast_paths_on_arbitrary_bytes(raw: bytes) -> None:
    for fast, codec in ((subscription_fast, decode_subscription), (assignment_fast, decode_assignment)):
        got = fast(raw)
        if got is None:
            continue
        try:
            d = codec(raw)
        except RecordDecodeError as exc:  # the fast path must never accept what the codec rejects
            raise AssertionError(f"{fast.__name__} accepted {raw.hex()} which the codec rejects: {exc}") from exc
        assert got[0] == d.version


SMALL_TEXT = st.sampled_from(["", "a", "m-1", "m-2", "é"])


@st.composite
def group_histories(draw) -> list[tuple[bytes, bytes | None]]:
    """Successive records of one group that often repeat members or parts of them (what the reader
    reuses), sometimes change the value version, and sometimes are corrupted."""
    pool = [MemberMetadata(draw(SMALL_TEXT), draw(st.none() | SMALL_TEXT), draw(SMALL_TEXT), draw(SMALL_TEXT),
                           draw(st.integers(-1, 3)), draw(st.integers(0, 3)), draw(st.binary(max_size=4)),
                           draw(st.binary(max_size=4)))
            for _ in range(draw(st.integers(1, 4)))]
    out = []
    for _ in range(draw(st.integers(1, 8))):
        version = draw(st.integers(0, 3))
        members = []
        for m in draw(st.lists(st.sampled_from(pool), max_size=4)):
            members.append(MemberMetadata(
                m.member_id, m.group_instance_id if version >= 3 else None, m.client_id, m.client_host,
                m.rebalance_timeout if version >= 1 else -1, m.session_timeout,
                draw(st.sampled_from([m.subscription, m.subscription + b"x"])),
                draw(st.sampled_from([m.assignment, b""]))))
        value = GroupMetadataValue("consumer", draw(st.integers(0, 3)), "range", None,
                                   500 if version >= 2 else -1, tuple(members))
        key, raw = encode(CoordinatorRecord.of(GroupMetadataKey("g"), value, value_version=version))
        if raw is not None and draw(st.booleans()) and draw(st.booleans()):
            cut = draw(st.integers(0, len(raw)))
            raw = raw[:cut] + draw(st.binary(max_size=3)) + raw[cut + 1:]
        out.append((key, None if draw(st.integers(0, 9)) == 0 else raw))
    return out


@settings(max_examples=300, deadline=None)
@given(group_histories())
def test_reader_equals_the_stateless_reader_over_a_history(history) -> None:
    reader = GroupRecordReader()
    for key, value in history:
        got = reader.read(key, value)
        assert got == group_record_fast(key, value)
        if got is not None:
            assert got == decode(key, value)


def test_reader_reuses_unchanged_members_and_headers() -> None:
    a = MemberMetadata("m-1", "i-1", "c", "/h", 10, 20, b"\x00\x01", b"\x00\x02")
    b = MemberMetadata("m-2", None, "c", "/h", 10, 20, b"\x00\x03", b"")
    first = encode(CoordinatorRecord.of(GroupMetadataKey("g"), GroupMetadataValue("consumer", 1, "range", "m-1", 5,
                                                                                  (a, b))))
    changed_b = MemberMetadata("m-2", None, "c", "/h", 10, 20, b"\x00\x04", b"")
    second = encode(CoordinatorRecord.of(GroupMetadataKey("g"), GroupMetadataValue("consumer", 2, "range", "m-1", 6,
                                                                                   (a, changed_b))))
    reader = GroupRecordReader()
    r1, r2 = reader.read(*first), reader.read(*second)
    assert r1 is not None and r2 is not None
    assert r2.value.members[0] is r1.value.members[0]  # type: ignore[union-attr]
    assert r2.value.members[1] is not r1.value.members[1]  # type: ignore[union-attr]
    assert r2 == decode(*second)


@settings(max_examples=300, deadline=None)
@given(group_records())
def test_group_metadata_header_reads_generation_and_member_count(rec: CoordinatorRecord) -> None:
    key, value = encode(rec)
    header = group_metadata_header(key, value)
    if rec.value is None:
        assert header is None
    else:
        assert header == (rec.value.generation, len(rec.value.members))  # v4 too: through the codec


def test_group_metadata_header_is_none_for_other_records_and_bad_bytes() -> None:
    key, value = encode(CoordinatorRecord.of(OffsetCommitKey("g", "t", 0), OffsetCommitValue(5, -1, "", 1)))
    assert group_metadata_header(key, value) is None
    key, value = encode(CoordinatorRecord.of(GroupMetadataKey("g"), GroupMetadataValue("consumer", 3, "range", "m",
                                                                                       -1, ())))
    assert group_metadata_header(key, value) == (3, 0)
    assert group_metadata_header(key, value[:-3]) is None
