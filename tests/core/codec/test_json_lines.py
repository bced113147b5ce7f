"""coordinator_audit.udfs.json_lines without Spark: each line becomes a record or an error naming the field and the
problem, and a record written back as a line reads back the same; encoding detection counts; a
truncated .gz keeps the lines before the cut."""

from __future__ import annotations

import base64
import gzip
import json
import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator_audit.jobs.inputs import InputError, choose_text_encoding
from coordinator_audit.udfs.json_lines import (
    ParsedLine,
    encoding_fit,
    iter_lines,
    open_file,
    parse_line,
    read_file_rows,
)

KEY = b"\x00\x02\x00\x03grp"
LINE = {"key": KEY.hex(), "value": None, "partition": 3, "offset": 7, "timestamp": 1_700_000_000_123}


def _line(**changes) -> bytes:
    return json.dumps({**LINE, **changes}).encode()


def test_a_record_line() -> None:
    assert parse_line(_line(), "hex") == ParsedLine(KEY, None, "__consumer_offsets", 3, 7, 1_700_000_000_123_000)
    b64 = parse_line(_line(key=base64.b64encode(KEY).decode(), timestamp="2023-11-14T22:13:20.123Z"), "base64")
    assert (b64.key, b64.timestamp_us, b64.error) == (KEY, 1_700_000_000_123_000, None)
    assert parse_line(_line(key="0x" + KEY.hex(), partition="3", offset="7"), "hex").error is None


@pytest.mark.parametrize(("line", "error"), [
    (b"not json", "the line is not JSON (Expecting value at column 1)"),
    (b"[1, 2]", "the line is JSON but not an object (a list)"),
    (b'{"key": "\xff"}', "the line is not UTF-8 (byte 9 is 0xff)"),
    (_line(key="0g" + KEY.hex()), "key is not valid hex: character 1 is 'g'"),
    (_line(key=KEY.hex() + "0"), "key is not valid hex: odd number of digits (15)"),
    (_line(value=12), "value: expected a hex string or null, got int"),
    (_line(partition="x"), "partition: expected an integer, got str 'x'"),
    (_line(partition=2**31), "partition: 2147483648 is out of range"),
    (_line(offset=1.5), "offset: expected an integer, got float"),
    (_line(timestamp="yesterday"), "timestamp: 'yesterday' is neither epoch milliseconds nor an ISO-8601 time"),
    (json.dumps({"key": KEY.hex(), "partition": 1}).encode(), "no offset field; no timestamp field"),
])
def test_lines_that_are_no_record_say_why(line: bytes, error: str) -> None:
    got = parse_line(line, "hex").error
    assert got is not None and got.startswith(error), got


def test_base64_errors_name_the_character() -> None:
    assert parse_line(_line(key="AA*A"), "base64").error == "key is not valid base64: character 2 is '*' in 'AA*A'"


def test_encoding_fit_and_choice() -> None:
    lines = [(1, _line()), (2, b"garbage"), (3, _line(key="zz"))]
    assert encoding_fit(iter(lines)) == (3, 2, 2, 1, 0)  # "zz" is neither hex nor (unpadded) base64
    assert choose_text_encoding(10, 10, 9, source="x") == "hex"
    assert choose_text_encoding(10, 2, 10, source="x") == "base64"
    assert choose_text_encoding(10, 9, 3, source="x") == "hex"  # one bad record: quarantined, not reinterpreted
    assert choose_text_encoding(0, 0, 0, source="x") == "hex"
    with pytest.raises(InputError, match="of 10 records, 4 are valid hex and 3 valid base64"):
        choose_text_encoding(10, 4, 3, source="x")


def _written(p: ParsedLine, encoding: str) -> bytes:
    """`p` written as a dump line in `encoding` (the timestamp as epoch milliseconds when it is
    whole milliseconds, else as an ISO-8601 time with its microseconds)."""
    def text(b: bytes | None) -> str | None:
        return None if b is None else b.hex() if encoding == "hex" else base64.b64encode(b).decode()

    assert p.timestamp_us is not None
    ts: int | str = (p.timestamp_us // 1000 if p.timestamp_us % 1000 == 0 else
                     (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=p.timestamp_us)).isoformat())
    return json.dumps({"key": text(p.key), "value": text(p.value), "topic": p.topic, "partition": p.partition,
                       "offset": p.offset, "timestamp": ts}).encode()


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.sampled_from(["hex", "base64"]))
def test_any_bytes_become_a_record_or_an_error(raw: bytes, encoding: str) -> None:
    for line in raw.split(b"\n"):
        if line.strip():
            p = parse_line(line, encoding)
            if p.error is None:  # a record: it round-trips
                assert p.partition is not None and p.offset is not None and p.timestamp_us is not None
                assert parse_line(_written(p, encoding), encoding) == p
            else:
                assert p.key is None or isinstance(p.key, bytes)


_ISO_RANGE_US = (-62_135_596_800_000_000, 253_402_300_799_999_999)
"""Microseconds since the epoch of datetime's years 1-9999 (what an ISO-8601 time can say)."""


@settings(max_examples=300, deadline=None)
@given(st.none() | st.binary(max_size=40), st.none() | st.binary(max_size=60), st.text(max_size=12),
       st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1),
       st.integers(-(2**53), 2**53).map(lambda ms: ms * 1000) | st.integers(*_ISO_RANGE_US),
       st.sampled_from(["hex", "base64"]))
def test_a_written_record_reads_back(key: bytes | None, value: bytes | None, topic: str, partition: int,
                                     offset: int, timestamp_us: int, encoding: str) -> None:
    """parse_line(write(record)) == record, the timestamp as epoch ms or as an ISO time with
    microseconds."""
    record = ParsedLine(key, value, topic, partition, offset, timestamp_us)
    assert parse_line(_written(record, encoding), encoding) == record


def test_iter_lines_numbers_every_line_and_skips_blank_ones(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_bytes(b"one\r\n\n  \ntwo\nthree")
    with open_file(str(tmp_path / "a.jsonl")) as stream:
        assert list(iter_lines(stream)) == [(1, b"one"), (4, b"two"), (5, b"three")]


def test_a_truncated_gz_keeps_its_readable_lines_and_says_where_it_stops(tmp_path: Path) -> None:
    text = b"".join(_line(offset=i) + b"\n" for i in range(2000))
    packed = gzip.compress(text)
    (tmp_path / "d.jsonl.gz").write_bytes(packed[: len(packed) // 2])
    rows = list(read_file_rows(str(tmp_path / "d.jsonl.gz"), "hex"))
    readable = zlib.decompressobj(wbits=31).decompress(packed[: len(packed) // 2]).count(b"\n")
    assert len(rows) == readable + 1 and all(r["error"] is None for r in rows[:-1])
    assert rows[-1]["input_line"] == readable + 1
    assert rows[-1]["error"].startswith(f"the file cannot be read after line {readable} (EOFError")
