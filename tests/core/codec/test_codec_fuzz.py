"""Fuzzing: truncated, extended and bit-flipped records (and consumer-protocol payloads), and
arbitrary bytes, either decode or raise `RecordDecodeError` naming the field and the byte (never
IndexError, struct.error, UnicodeDecodeError, OverflowError or MemoryError). Whatever decodes
round-trips: it re-encodes to the same bytes, or, where Kafka's readers accept more than one
spelling of a value, to the one spelling its writers use (`assert_canonical_spelling` names the
three), and the re-encoded bytes decode to the same record."""

from __future__ import annotations

import json
import random
import re
import struct
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator_audit.core.consumer_protocol import (
    decode_assignment,
    decode_cooperative_user_data,
    decode_sticky_user_data,
    decode_subscription,
    encode_assignment,
    encode_cooperative_user_data,
    encode_sticky_user_data,
    encode_subscription,
)
from coordinator_audit.core.errors import RecordDecodeError, RecordEncodeError
from coordinator_audit.core.records import (
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode,
    encode,
    offset_commit_key_fields,
    offset_commit_value_fields,
)
from tests.core.codec.test_codec_golden import (
    E1_KEY,
    E2_VALUE,
    E3_VALUE,
    E4_VALUE,
    E5_KEY,
    E7_VALUE,
    E8_VALUE,
    E9_V0,
    E10_ASSIGNMENT,
    E10_SUBSCRIPTION,
    E11_STICKY_V1,
    E12_KEY,
    E12_MEMBER_KEY,
    E12_MEMBER_VALUE,
    E12_VALUE,
)

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "samples" / "real_broker_3_9_0.parquet"
KIP848_SAMPLE = Path(__file__).resolve().parent / "data" / "real_broker_4_4_0_kip848.parquet"
KAFKA_VECTORS = Path(__file__).resolve().parent / "data" / "group_records_kafka_{}.jsonl"


def _sample_pairs() -> list[tuple[bytes, bytes]]:
    rows = pq.read_table(SAMPLE, columns=["key", "value"]).to_pylist()
    groups = [(r["key"], r["value"]) for r in rows if r["key"][:2] == b"\x00\x02"]
    offsets = [(r["key"], r["value"]) for r in rows if r["key"][:2] == b"\x00\x01"]
    return groups[:4] + offsets[:4]


def _group_pairs() -> list[tuple[bytes, bytes]]:
    """The fullest record of each consumer/share/streams group value Kafka 4.4.0's classes wrote
    (`tools.group_record_vectors`) and of share groups' 4.0 layouts (types 9, 11, 15) 4.0.0's wrote,
    and one of each group record type a real 4.4 broker wrote."""
    chosen: dict[tuple[str, int], tuple[bytes, bytes]] = {}
    for release, types in (("4_4_0", range(24)), ("4_0_0", (9, 11, 15))):
        for line in Path(str(KAFKA_VECTORS).format(release)).read_text().splitlines():
            v = json.loads(line)
            at = (release, v["record_type"])
            if v["record_type"] in types and v["value_hex"] is not None and \
                    len(v["value_hex"]) > len(chosen.get(at, (b"", b""))[1]) * 2:
                chosen[at] = (bytes.fromhex(v["key_hex"]), bytes.fromhex(v["value_hex"]))
    real: dict[bytes, tuple[bytes, bytes]] = {}
    for r in pq.read_table(KIP848_SAMPLE, columns=["key", "value"]).to_pylist():
        if r["key"][:2] not in (b"\x00\x00", b"\x00\x01") and r["value"] is not None:
            real.setdefault(r["key"][:2], (r["key"], r["value"]))
    return [*chosen.values(), *real.values()]


RECORDS = [(E1_KEY, E2_VALUE), (E1_KEY, E3_VALUE), (E1_KEY, E4_VALUE), (E5_KEY, E7_VALUE), (E5_KEY, E8_VALUE),
           (E5_KEY, E9_V0), (E12_KEY, E12_VALUE), (E12_MEMBER_KEY, E12_MEMBER_VALUE), *_sample_pairs(),
           *_group_pairs()]
PAYLOADS = [E10_SUBSCRIPTION, E10_ASSIGNMENT, E11_STICKY_V1]


def mutations(data: bytes, rng: random.Random, *, flips: int = 400) -> Iterator[bytes]:
    """Every truncation, a few extensions, and bit flips (all of them for short inputs)."""
    for n in range(len(data)):
        yield data[:n]
    for extra in (b"\x00", b"\xff", b"\x80" * 6, bytes(rng.getrandbits(8) for _ in range(9))):
        yield data + extra
    positions = range(len(data) * 8)
    chosen = positions if len(positions) <= flips else rng.sample(positions, flips)
    for bit in chosen:
        i, b = divmod(bit, 8)
        yield data[:i] + bytes([data[i] ^ (1 << b)]) + data[i + 1:]


T = TypeVar("T")


def decoded(fn: Callable[[], T]) -> T | None:
    """`fn()`, or None when it raises `RecordDecodeError` naming the field and the byte it stopped at."""
    try:
        return fn()
    except RecordDecodeError as e:
        assert e.field and e.position is not None and re.search(r"byte \d+: \S", str(e)), str(e)
        return None


def _varint(data: bytes, pos: int) -> tuple[int, int] | None:
    """(value as a Java int, bytes read) of the unsigned varint at `pos`, as
    ByteUtils#readUnsignedVarint reads it (bits beyond 32 dropped); None when cut off."""
    value = shift = 0
    for n, b in enumerate(data[pos:pos + 5], 1):
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            value &= 0xFFFFFFFF
            return (value - (1 << 32) if value >= 1 << 31 else value), n
    return None


def assert_canonical_spelling(read: bytes, written: bytes) -> Counter[str]:
    """Asserts that `written` (what the codec writes for what it decoded from `read`) differs from
    `read` only where Kafka's generated readers accept more than one spelling of a value, and counts
    which. The four (Kafka's MessageDataGenerator readers):
    * a negative int16/int32 length other than -1 reads as null (`if (length < 0) null`); written -1;
    * a nullable struct's int8 presence marker reads as present for any byte >= 0, null for any
      negative byte (`if (readByte() < 0) null`); written 1 / -1;
    * a varint (flexible versions' lengths, counts, tags) with redundant continuation bytes, or a
      compact length whose Java int is negative (read as null); written minimally (null as 0);
    * known tagged fields out of tag order (read in any order); written by tag."""
    found: Counter[str] = Counter()
    i = j = 0
    while i < len(read) or j < len(written):
        if i < len(read) and j < len(written) and read[i] == written[j]:
            i, j = i + 1, j + 1
            continue
        shift = j - i  # the spellings so far had equal lengths up to this field's start
        step = _null_length(read, written, i, shift)
        if step is not None:
            found[step[0]] += 1
            i, j = step[1], step[1] + shift
            continue
        tags = _reordered_tags(read, written, i, j)
        if tags is not None:
            found["tag order"] += 1
            i, j = tags
            continue
        if i < len(read) and j < len(written) and written[j] in (0x01, 0xFF) and \
                (read[i] < 0x80) == (written[j] == 0x01):
            found["nullable struct marker"] += 1
            i, j = i + 1, j + 1
            continue
        start = i
        while start > 0 and read[start - 1] & 0x80 and written[start - 1 + shift] == read[start - 1]:
            start -= 1
        r, w = _varint(read, start), _varint(written, start + shift)
        assert r is not None and w is not None and r[1] > w[1] and (r[0] == w[0] or (r[0] < 0 and w[0] == 0)), (
            f"written bytes differ from the read ones at byte {i} (read {read[max(0, i - 4):i + 8].hex()}, "
            f"written {written[max(0, j - 4):j + 8].hex()}): not a spelling Kafka's readers also accept")
        found["varint"] += 1
        i, j = start + r[1], start + shift + w[1]
    return found


def _tag_entries(data: bytes, pos: int, n: int) -> tuple[list[tuple[int, bytes]], int] | None:
    """`n` tagged fields (tag, payload) from `pos`, and the position after them; None if they are not there."""
    entries = []
    for _ in range(n):
        tag = _varint(data, pos)
        size = None if tag is None else _varint(data, pos + tag[1])
        if tag is None or size is None or tag[0] < 0 or size[0] < 0:
            return None
        start = pos + tag[1] + size[1]
        pos = start + size[0]
        if pos > len(data):
            return None
        entries.append((tag[0], data[start:pos]))
    return entries, pos


def _reordered_tags(read: bytes, written: bytes, i: int, j: int) -> tuple[int, int] | None:
    """(end in `read`, end in `written`) of a run of tagged fields from byte `i` of `read` that
    `written` holds from byte `j` in tag order, when their order is all that differs."""
    for n in range(2, 9):
        r, w = _tag_entries(read, i, n), _tag_entries(written, j, n)
        if r is None or w is None:
            return None
        if r[0] != w[0] and sorted(r[0]) == w[0]:
            return r[1], w[1]
    return None


def _null_length(read: bytes, written: bytes, i: int, shift: int) -> tuple[str, int] | None:
    """(kind, end in `read`) of a negative int32/int16 length other than -1 around byte `i` of
    `read` that the codec wrote as -1."""
    for size, fmt in ((4, ">i"), (2, ">h")):
        for start in range(max(0, i - size + 1), i + 1):
            field = read[start:start + size]
            if (len(field) == size and written[start + shift:start + shift + size] == b"\xff" * size
                    and struct.unpack(fmt, field)[0] < -1):
                return f"int{size * 8} null length", start + size
    return None


_UNKNOWN_VERSION = re.compile(r"\w+ version (\d+) is unknown \(this codec writes v\d+–v(\d+)\)")


def check_record(key: bytes, value: bytes | None, *, is_control: bool = False) -> Counter[str]:
    """decode(bytes) either fails clearly or round-trips: encode(decode(b)) == b up to
    `assert_canonical_spelling`, and decode(encode(decode(b))) == decode(b)."""
    rec = decoded(lambda: decode(key, value, is_control=is_control))
    if rec is None:
        return Counter()
    try:
        key2, value2 = encode(rec)
    except RecordEncodeError as e:
        # KIP-915: a coordinator reads a value version newer than it knows with the newest layout it
        # knows (so a downgrade can read records written after an upgrade); writing that version
        # back is refused, naming it
        m = _UNKNOWN_VERSION.fullmatch(str(e))
        assert m is not None and int(m.group(1)) == rec.value_version > int(m.group(2)), str(e)
        return Counter({"newer value version": 1})
    spellings = assert_canonical_spelling(key, key2)
    if value is not None:
        assert value2 is not None
        spellings += assert_canonical_spelling(value, value2)
    back = decode(key2, value2, is_control=is_control)
    assert back == rec
    assert encode(back) == (key2, value2)
    if isinstance(rec.value, GroupMetadataValue):
        for m in rec.value.members:
            spellings += check_payload(m.subscription)
            spellings += check_payload(m.assignment)
    return spellings


def check_payload(data: bytes) -> Counter[str]:
    """The consumer-protocol readers of `data`: a subscription and an assignment either fail clearly
    or round-trip (as `check_record`); the assignors' user-data readers never fail (Kafka's fall
    back, below) and what they read writes back as Kafka's writers write it."""
    spellings: Counter[str] = Counter()
    sub = decoded(lambda: decode_subscription(data))
    if sub is not None:
        written = encode_subscription(sub)
        spellings += assert_canonical_spelling(data, written)
        assert decode_subscription(written) == sub
    asg = decoded(lambda: decode_assignment(data))
    if asg is not None:
        written = encode_assignment(asg)
        spellings += assert_canonical_spelling(data, written)
        assert decode_assignment(written) == asg
    # StickyAssignor#memberData reads V1, else V0, else nothing, ignoring bytes after what a version
    # needs, and its writer groups partitions by topic: what it read writes back to the same
    # partitions and generation, not to the same bytes
    sticky = decode_sticky_user_data(data)
    if sticky.generation is not None and sticky.generation != -1:
        pairs = [(t.topic, p) for t in sticky.previous_assignment for p in t.partitions]
        again = decode_sticky_user_data(encode_sticky_user_data(pairs, generation=sticky.generation))
        assert again.generation == sticky.generation
        assert sorted((t.topic, p) for t in again.previous_assignment for p in t.partitions) == sorted(pairs)
    # CooperativeStickyAssignor#memberData reads the first 4 bytes as the generation (more ignored)
    generation = decode_cooperative_user_data(data)
    if len(data) >= 4:
        assert generation is not None and encode_cooperative_user_data(generation) == data[:4]
    else:
        assert generation == -1
    return spellings


@pytest.mark.parametrize(("key", "value"), RECORDS, ids=[f"r{i}" for i in range(len(RECORDS))])
def test_mutated_records(key: bytes, value: bytes) -> None:
    assert check_record(key, value) == Counter()  # the unmutated record: byte for byte
    rng = random.Random(key + value)
    for k in mutations(key, rng, flips=64):
        check_record(k, value)
        fields = decoded(lambda k=k: offset_commit_key_fields(k))
        if fields is not None:  # the fast path's fields are the round-tripped record's
            assert OffsetCommitKey(*fields) == decode(k, None).key
        check_record(k, None, is_control=True)
    for v in mutations(value, rng):
        check_record(key, v)
        values = decoded(lambda v=v: offset_commit_value_fields(v))
        if values is not None:
            rec = decode(key, v) if key[:2] in (b"\x00\x00", b"\x00\x01") else None
            if rec is not None:
                assert isinstance(rec.value, OffsetCommitValue)
                assert values == (rec.value_version, rec.value.offset, rec.value.leader_epoch, rec.value.metadata,
                                  rec.value.commit_timestamp, rec.value.expire_timestamp)


@pytest.mark.parametrize("data", PAYLOADS, ids=["subscription", "assignment", "sticky"])
def test_mutated_payloads(data: bytes) -> None:
    assert check_payload(data) == Counter()  # the unmutated payload: byte for byte
    for d in mutations(data, random.Random(data)):
        check_payload(d)


def test_every_canonical_spelling_is_reached() -> None:
    """The mutations reach each spelling that `assert_canonical_spelling` allows (so none of its
    exceptions is dead) and a newer value version."""
    seen: Counter[str] = Counter()
    for key, value in RECORDS:
        rng = random.Random(key + value)
        for v in mutations(value, rng):
            seen += check_record(key, v)
    for data in PAYLOADS:
        for d in mutations(data, random.Random(data)):
            seen += check_payload(d)
    assert set(seen) == {"int16 null length", "int32 null length", "nullable struct marker", "varint",
                         "tag order", "newer value version"}, seen


@given(st.binary(max_size=64), st.none() | st.binary(max_size=64), st.booleans())
@settings(max_examples=300)
def test_random_bytes(key: bytes, value: bytes | None, is_control: bool) -> None:
    check_record(key, value, is_control=is_control)
    if value is not None:
        check_payload(value)


@given(st.sampled_from([t.to_bytes(2, "big") for t in (*range(18), *range(19, 24))]), st.binary(max_size=40),
       st.none() | st.binary(max_size=64))
@settings(max_examples=300)
def test_random_bytes_of_known_record_types(key_type: bytes, key_rest: bytes, value: bytes | None) -> None:
    """Arbitrary bytes behind a known record type, so the schema readers (not only the type check)
    meet them."""
    check_record(key_type + key_rest, value)


@pytest.mark.parametrize(("key", "value", "match"), [
    # a member count of 2**31-1 with 4 bytes left: refused before anything is allocated
    ("0002 0001 67", "0003 0000 00000000 ffff ffff 0000000000000000 7fffffff 00000000",
     r"GroupMetadataValue.members, byte 20: array count 2147483647 exceeds the 4 byte\(s\) remaining"),
    ("0002 0001 67", "0003 0000 00000000 ffff ffff 0000000000000000 00000001 0001 6d ffff 0000 0000 "
                     "00000000 00000000 7ffffff0",
     r"members\[0\].subscription, byte \d+: bytes of length 2147483632 needs"),
    # a flexible string whose varint length never ends
    ("0001 0001 67 0001 74 00000000", "0004 0000000000000000 00000000 ffffffffff7f",
     r"OffsetCommitValue.metadata, byte 14: string length is longer than 5 bytes"),
    # a 5-byte varint that wraps to a negative Java int: read as null, so an error for a non-null string
    ("0001 0001 67 0001 74 00000000", "0004 0000000000000000 00000000 ffffffff0f",
     r"metadata, byte 14: non-nullable string is null"),
    # a string length beyond Kafka's 0x7fff limit
    ("0001 0001 67 0001 74 00000000", "0004 0000000000000000 00000000 818002",
     r"metadata, byte 14: string length 32768 exceeds 32767"),
    # invalid UTF-8 names the byte where it starts
    ("0001 0003 61c328 0001 74 00000000", None, r"OffsetCommitKey.group, byte 5: string is not valid UTF-8"),
    # a tagged field whose declared size disagrees with its content (7 bytes: 01 00000001 01 00)
    ("0005 0001 67 0001 6d", "0000 00 00 0263 0268 01 00 00000001 00 01 00 05 01 00000001 01 00",
     r"classic_member_metadata.supported_protocols, byte 23: array count is cut off"),
    ("0005 0001 67 0001 6d", "0000 00 00 0263 0268 01 00 00000001 00 01 00 09 01 00000001 01 00 0000",
     r"classic_member_metadata, byte 16: tag 0 declares 9 byte\(s\) but its value used 7"),
])
def test_absurd_lengths_and_bad_encodings(key: str, value: str | None, match: str) -> None:
    with pytest.raises(RecordDecodeError, match=match):
        decode(bytes.fromhex(key.replace(" ", "")), None if value is None else bytes.fromhex(value.replace(" ", "")))
