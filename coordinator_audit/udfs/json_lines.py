"""JSON-lines dumps of `__consumer_offsets`, read line by line in the Python workers, so that every
line is accounted for: it becomes a record, or a rejected line naming its file, its line number and
what is wrong with it (the job quarantines those), or it is blank (not a record).

A record line is a JSON object with the Kafka-source field names: `key` and `value` (hex or base64
strings, or null), `partition` and `offset` (integers, or strings of digits), `timestamp` (epoch
milliseconds, or an ISO-8601 string; naive means UTC), and optionally `topic`. Hex may carry a
`0x` prefix. Other fields are ignored.

* `encoding_fit(lines)` is the first pass of encoding detection: per line, whether its key and value
  texts are valid hex, valid base64 (`coordinator_audit.jobs.inputs.choose_text_encoding` decides from the totals);
* `parse_line(raw, encoding)` turns one line into a record or an error (`ParsedLine`);
* `make_json_read_fn(encoding)` is the function for `files.mapInArrow(fn, JSON_READ_SCHEMA)` over a
  DataFrame of file URIs (`coordinator_audit.jobs.inputs`): each worker opens its files with `pyarrow.fs` (local
  paths, mounts such as /dbfs, and what `pyarrow.fs.FileSystem.from_uri` opens; `.gz` is
  decompressed) and emits one row per non-blank line; a file that stops being readable (a truncated
  `.gz`) adds one rejected row saying after which line.

The functions take and return plain Python / pyarrow values and are tested without Spark.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.fs as pafs

from coordinator_audit.udfs.gc_batches import freeze_survivors

__all__ = [
    "FIT_SCHEMA",
    "JSON_READ_SCHEMA",
    "ParsedLine",
    "encoding_fit",
    "iter_lines",
    "make_fit_fn",
    "make_json_read_fn",
    "open_file",
    "parse_line",
    "read_file_rows",
]

DEFAULT_TOPIC = "__consumer_offsets"
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_HEX = re.compile(r"(?:[0-9a-fA-F]{2})*")
_B64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")
_BLOCK = 1 << 20
_BATCH_ROWS = 8192
_TEXT_LIMIT = 4096
"""Characters of a rejected line kept in `input_text` (the rest is cut, and the cut is said)."""

JSON_READ_SCHEMA = pa.schema([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("input_file", pa.string()),
    pa.field("input_line", pa.int64()),
    pa.field("input_text", pa.string()),
    pa.field("error", pa.string()),
])
"""One row per non-blank line: a record (error null; input_text null) or a rejected line (error
set, input_text the line; the fields that could be read are set)."""

FIT_SCHEMA = pa.schema([
    pa.field("lines", pa.int64()), pa.field("positioned", pa.int64()), pa.field("texts", pa.int64()),
    pa.field("hex", pa.int64()), pa.field("base64", pa.int64()),
])
"""Per file (`encoding_fit`): non-blank lines, JSON objects with partition and offset fields, those
with a key or value text, and how many of those are all valid hex / base64."""


class ParsedLine(NamedTuple):
    """What one line holds: the record's fields (those that could be read) and, when it is not a
    usable record, `error` naming the field and the problem."""

    key: bytes | None = None
    value: bytes | None = None
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    timestamp_us: int | None = None
    error: str | None = None


def _is_hex(text: str) -> bool:
    body = text[2:] if text[:2] in ("0x", "0X") else text
    return _HEX.fullmatch(body) is not None


def _is_base64(text: str) -> bool:
    return _B64.fullmatch(text) is not None


def encoding_fit(lines: Iterator[tuple[int, bytes]]) -> tuple[int, int, int, int, int]:
    """(non-blank lines, JSON objects among them with partition and offset fields, those with a key
    or value text, those whose texts are all hex, those all base64); lines that are not JSON objects
    count only as lines (the read rejects them whatever the encoding)."""
    n = positioned = texts = hex_ok = b64_ok = 0
    for _, raw in lines:
        n += 1
        try:
            obj = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            continue
        if not isinstance(obj, dict):
            continue
        positioned += "partition" in obj and "offset" in obj
        found = [v for v in (obj.get("key"), obj.get("value")) if isinstance(v, str) and v]
        if not found:
            continue
        texts += 1
        hex_ok += all(_is_hex(v) for v in found)
        b64_ok += all(_is_base64(v) for v in found)
    return n, positioned, texts, hex_ok, b64_ok


def _show(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _decode_bytes(name: str, v: Any, encoding: str) -> bytes | None:
    """The bytes of a key/value field; ValueError naming the field and the first bad character."""
    if v is None:
        return None
    if not isinstance(v, str):
        raise ValueError(f"{name}: expected a {encoding} string or null, got {type(v).__name__} {_show(str(v))}")
    if encoding == "hex":
        body = v[2:] if v[:2] in ("0x", "0X") else v
        m = re.search(r"[^0-9a-fA-F]", body)
        if m is not None:
            at = m.start() + (len(v) - len(body))
            raise ValueError(f"{name} is not valid hex: character {at} is {v[at]!r} in {_show(v)}")
        if len(body) % 2:
            raise ValueError(f"{name} is not valid hex: odd number of digits ({len(body)}) in {_show(v)}")
        return bytes.fromhex(body)
    m = re.search(r"[^A-Za-z0-9+/=]", v)
    if m is not None:
        raise ValueError(f"{name} is not valid base64: character {m.start()} is {v[m.start()]!r} in {_show(v)}")
    try:
        return base64.b64decode(v, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"{name} is not valid base64 ({exc}) in {_show(v)}") from None


def _integer(name: str, v: Any, bounds: tuple[int, int]) -> int:
    if isinstance(v, str) and re.fullmatch(r"-?[0-9]+", v.strip()):
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        shown = "null" if v is None else f"{type(v).__name__} {_show(str(v))}"
        raise ValueError(f"{name}: expected an integer, got {shown}")
    if not bounds[0] <= v <= bounds[1]:
        raise ValueError(f"{name}: {v} is out of range")
    return v


def _timestamp_us(v: Any) -> int:
    if isinstance(v, str) and not re.fullmatch(r"-?[0-9]+", v.strip()):
        text = v.strip()
        try:
            dt = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
        except ValueError:
            raise ValueError(f"timestamp: {_show(v)} is neither epoch milliseconds nor an ISO-8601 time") from None
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        # exact: float seconds (timedelta.total_seconds) would lose the last microsecond
        return (dt - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    ms = _integer("timestamp", v, (-(2**53), 2**53))
    return ms * 1000


def parse_line(raw: bytes, encoding: str) -> ParsedLine:
    """One non-blank line of a dump as a record (`encoding` "hex" or "base64"); `error` set when it
    is not one, naming why."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return ParsedLine(error=f"the line is not UTF-8 (byte {exc.start} is 0x{raw[exc.start]:02x})")
    try:
        obj = json.loads(text)
    except ValueError as exc:
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        col = f" at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        return ParsedLine(error=f"the line is not JSON ({msg}{col})")
    if not isinstance(obj, dict):
        return ParsedLine(error=f"the line is JSON but not an object (a {type(obj).__name__})")
    fields: dict[str, Any] = {}
    problems: list[str] = []
    for name, read in (
        ("partition", lambda v: _integer("partition", v, _INT32)),
        ("offset", lambda v: _integer("offset", v, _INT64)),
        ("timestamp", _timestamp_us),
        ("key", lambda v: _decode_bytes("key", v, encoding)),
        ("value", lambda v: _decode_bytes("value", v, encoding)),
    ):
        if name not in obj and name not in ("key", "value"):
            problems.append(f"no {name} field")
            continue
        try:
            fields[name] = read(obj.get(name))
        except ValueError as exc:
            problems.append(str(exc))
    topic = obj.get("topic", DEFAULT_TOPIC)
    if topic is None:
        topic = DEFAULT_TOPIC
    if not isinstance(topic, str):
        problems.append(f"topic: expected a string, got {type(topic).__name__}")
        topic = None
    return ParsedLine(fields.get("key"), fields.get("value"), topic, fields.get("partition"), fields.get("offset"),
                      fields.get("timestamp"), "; ".join(problems) or None)


def open_file(uri: str) -> Any:
    """A binary stream over a local path or a URI pyarrow opens; `*.gz` is decompressed with
    Python's gzip, which raises on a truncated file (pyarrow's own decompressor ends quietly)."""
    if "://" in uri and not uri.startswith("file://"):
        fs, path = pafs.FileSystem.from_uri(uri)
    else:
        fs, path = pafs.LocalFileSystem(), uri.removeprefix("file://")
    stream = fs.open_input_stream(path, compression=None)
    return gzip.GzipFile(fileobj=stream, mode="rb") if path.lower().endswith(".gz") else stream


def iter_lines(stream: Any) -> Iterator[tuple[int, bytes]]:
    """(line number from 1, line without its end of line) of every non-blank line of a stream; a
    read error (a truncated compressed file) propagates after the lines before it."""
    number = 0
    rest = b""
    read = getattr(stream, "read1", stream.read)  # gzip: what is decompressed so far, before a truncation
    while True:
        block = read(_BLOCK)
        if not block:
            break
        parts = (rest + block).split(b"\n")
        rest = parts.pop()
        for part in parts:
            number += 1
            line = part[:-1] if part.endswith(b"\r") else part
            if line.strip():
                yield number, line
    if rest:
        number += 1
        line = rest[:-1] if rest.endswith(b"\r") else rest
        if line.strip():
            yield number, line


def _uris(batches: Iterator[pa.RecordBatch]) -> Iterator[str]:
    for b in batches:
        yield from b.column("uri").to_pylist()


def make_fit_fn() -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """For `files.mapInArrow(fn, FIT_SCHEMA)`: each file's `encoding_fit` (unreadable files count as
    nothing here; the read reports them)."""

    def fit(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_survivors()
        for uri in _uris(batches):
            fit = (0, 0, 0, 0, 0)
            try:
                with open_file(uri) as stream:
                    fit = encoding_fit(iter_lines(stream))
            except (OSError, pa.ArrowException, EOFError):
                pass
            yield pa.RecordBatch.from_pylist([dict(zip(FIT_SCHEMA.names, fit, strict=True))], schema=FIT_SCHEMA)

    return fit


def _line_text(raw: bytes) -> str:
    text = raw.decode("utf-8", "backslashreplace")
    return text if len(text) <= _TEXT_LIMIT else text[:_TEXT_LIMIT] + f"... ({len(text)} characters)"


def read_file_rows(uri: str, encoding: str) -> Iterator[dict[str, Any]]:
    """The rows (`JSON_READ_SCHEMA`, as dicts) of one file."""
    last = 0
    try:
        with open_file(uri) as stream:
            for number, raw in iter_lines(stream):
                last = number
                p = parse_line(raw, encoding)
                yield {"key": p.key, "value": p.value, "topic": p.topic, "partition": p.partition,
                       "offset": p.offset, "timestamp": p.timestamp_us, "input_file": uri, "input_line": number,
                       "input_text": None if p.error is None else _line_text(raw), "error": p.error}
    except (OSError, pa.ArrowException, EOFError) as exc:
        where = f"after line {last}" if last else "before its first line"
        detail = str(exc).splitlines()[0] if str(exc) else "no detail"
        yield {"key": None, "value": None, "topic": None, "partition": None, "offset": None, "timestamp": None,
               "input_file": uri, "input_line": last + 1, "input_text": None,
               "error": f"the file cannot be read {where} ({type(exc).__name__}: {detail})"
                        + ("; is it truncated?" if isinstance(exc, EOFError) else "")}


def make_json_read_fn(encoding: str) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """For `files.mapInArrow(fn, JSON_READ_SCHEMA)` over a DataFrame with a `uri` column."""
    if encoding not in ("hex", "base64"):
        raise ValueError(f"make_json_read_fn: encoding must be hex or base64, got {encoding!r}")

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_survivors()
        rows: list[dict[str, Any]] = []
        for uri in _uris(batches):
            for row in read_file_rows(uri, encoding):
                rows.append(row)
                if len(rows) >= _BATCH_ROWS:
                    yield pa.RecordBatch.from_pylist(rows, schema=JSON_READ_SCHEMA)
                    rows = []
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=JSON_READ_SCHEMA)

    return read
