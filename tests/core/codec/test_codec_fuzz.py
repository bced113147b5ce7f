"""Fuzzing: truncated, extended and bit-flipped records (and consumer-protocol payloads) only ever
decode or raise RecordDecodeError: never IndexError, struct.error, UnicodeDecodeError,
OverflowError or MemoryError. Whatever decodes also re-encodes."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator_core.consumer_protocol import (
    decode_assignment,
    decode_cooperative_user_data,
    decode_sticky_user_data,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from coordinator_core.errors import RecordDecodeError, RecordEncodeError
from coordinator_core.records import (
    GroupMetadataValue,
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


def _sample_pairs() -> list[tuple[bytes, bytes]]:
    rows = pq.read_table(SAMPLE, columns=["key", "value"]).to_pylist()
    groups = [(r["key"], r["value"]) for r in rows if r["key"][:2] == b"\x00\x02"]
    offsets = [(r["key"], r["value"]) for r in rows if r["key"][:2] == b"\x00\x01"]
    return groups[:4] + offsets[:4]


RECORDS = [(E1_KEY, E2_VALUE), (E1_KEY, E3_VALUE), (E1_KEY, E4_VALUE), (E5_KEY, E7_VALUE), (E5_KEY, E8_VALUE),
           (E5_KEY, E9_V0), (E12_KEY, E12_VALUE), (E12_MEMBER_KEY, E12_MEMBER_VALUE), *_sample_pairs()]
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


def survives(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except RecordDecodeError:
        return None


def check_record(key: bytes, value: bytes | None, *, is_control: bool = False) -> None:
    rec = survives(lambda: decode(key, value, is_control=is_control))
    if rec is None:
        return
    try:
        encode(rec)
    except RecordEncodeError as e:  # only a value version beyond the known ones may refuse
        assert "is unknown" in str(e), e
    if isinstance(rec.value, GroupMetadataValue):
        for m in rec.value.members:
            check_payload(m.subscription)
            check_payload(m.assignment)


def check_payload(data: bytes) -> None:
    sub = survives(lambda: decode_subscription(data))
    if sub is not None:
        encode_subscription(sub)
    asg = survives(lambda: decode_assignment(data))
    if asg is not None:
        encode_assignment(asg)
    decode_sticky_user_data(data)  # Kafka's reader never fails: it falls back
    decode_cooperative_user_data(data)


@pytest.mark.parametrize(("key", "value"), RECORDS, ids=[f"r{i}" for i in range(len(RECORDS))])
def test_mutated_records(key: bytes, value: bytes) -> None:
    rng = random.Random(key + value)
    for k in mutations(key, rng, flips=64):
        check_record(k, value)
        survives(lambda k=k: offset_commit_key_fields(k))
        check_record(k, None, is_control=True)
    for v in mutations(value, rng):
        check_record(key, v)
        survives(lambda v=v: offset_commit_value_fields(v))


@pytest.mark.parametrize("data", PAYLOADS, ids=["subscription", "assignment", "sticky"])
def test_mutated_payloads(data: bytes) -> None:
    for d in mutations(data, random.Random(data)):
        check_payload(d)


@given(st.binary(max_size=64), st.none() | st.binary(max_size=64), st.booleans())
@settings(max_examples=300)
def test_random_bytes(key: bytes, value: bytes | None, is_control: bool) -> None:
    check_record(key, value, is_control=is_control)
    if value is not None:
        check_payload(value)


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
