"""One schema-driven reader and writer for Kafka's message encodings (the generated
messages' types: org.apache.kafka.common.protocol.types, KIP-482 tagged fields).

A schema is data: a `Message` names its valid and flexible versions and holds a root `Struct`; a
`Struct` is a tuple of `Field`s plus the class its decoded values are built with. Field names are
the snake_case attribute names of those classes, so the writer reads an object back by name.

Encodings (all big-endian):
* classic versions: int16-length strings (-1 = null), int32-length bytes, int32-count arrays;
* flexible versions: unsigned-varint "N+1" strings, bytes and arrays (0 = null), and a tagged-field
  section (uvarint count, then uvarint tag, uvarint size, payload) closing every struct.

Reading follows Kafka's generated readers: a negative length reads as null when the field is
nullable; a string longer than 0x7fff, a length or count larger than the bytes left, or a varint
longer than five bytes is an error. Every failure raises `RecordDecodeError` naming the schema, the
field path (`members[0].clientId`-style, with our attribute names) and the absolute byte position.
Differences from Kafka, all on malformed input only: invalid UTF-8 is an error here (Java would
substitute U+FFFD), and a known tagged field must fill exactly the size its header declares.

Writing emits Kafka's canonical bytes: minimal varints, tagged fields in ascending tag order with
unknown (kept raw) tags merged in the way Kafka's raw-tag writer does, tagged fields equal to
their default left out (None of a nullable tagged field that defaults to something else is written
as a tag holding a null marker, as Kafka's generated writers do). A field absent from the chosen version is dropped when it is `ignorable`
(all such fields in these schemas are) and otherwise must hold its default.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Generic, NamedTuple, NoReturn, TypeVar

from coordinator_audit.core.errors import RecordDecodeError, RecordEncodeError

__all__ = [
    "REQUIRED",
    "Array",
    "Field",
    "Message",
    "Struct",
    "VersionRange",
    "read_body",
    "read_uvarint",
    "uvarint_bytes",
    "versions",
    "write_body",
]

MAX_STRING_BYTES = 0x7FFF

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class _Required:
    """Marks a field that has no default: it is present in every version the schema writes."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Final = _Required()


class VersionRange(NamedTuple):
    """An inclusive range of versions; `high` None means open-ended ("3+")."""

    low: int
    high: int | None

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and version >= self.low and (self.high is None or version <= self.high)


def versions(spec: str) -> VersionRange | None:
    """Parses Kafka's version notation: "none", "3", "0-3" or "3+"."""
    if spec == "none":
        return None
    if spec.endswith("+"):
        return VersionRange(int(spec[:-1]), None)
    if "-" in spec:
        low, high = spec.split("-", 1)
        return VersionRange(int(low), int(high))
    return VersionRange(int(spec), int(spec))


def _in(rng: VersionRange | None, version: int) -> bool:
    return rng is not None and version in rng


@dataclass(frozen=True, slots=True)
class Array:
    """An array whose elements are a primitive type name or a `Struct`."""

    element: str | Struct[object]


@dataclass(frozen=True, slots=True, eq=False)
class Field:
    """One field of a struct.

    `type` is "int8", "int16", "uint16", "int32", "int64", "uuid", "string", "bytes", an `Array` or a
    `Struct`.
    `versions`/`nullable` use Kafka's notation; `default` fills the field in versions where it is
    absent (and is what a tagged field is compared with before writing it); `tag` makes the field
    a tagged field in the versions `tagged` lists.
    """

    name: str
    type: str | Array | Struct[object]
    versions: str = "0+"
    nullable: str = "none"
    default: object = REQUIRED
    ignorable: bool = False
    tag: int | None = None
    tagged: str = "none"

    def present_in(self) -> VersionRange | None:
        return versions(self.versions)


@dataclass(frozen=True, slots=True, eq=False)
class Struct(Generic[T_co]):
    """A struct: its fields in wire order and the class its values are built with (keyword args).

    A struct used by flexible versions builds objects that accept `unknown_tagged_fields`, a tuple
    of `(tag, raw payload)` pairs kept for a byte-exact rewrite. `T_co` is what `factory` builds, so
    `read_body` of a `Message[T]` returns a `T`.
    """

    name: str
    fields: tuple[Field, ...]
    factory: Callable[..., T_co]


_PRIMITIVES = {"int8", "int16", "uint16", "int32", "int64", "uuid", "string", "bytes"}


class _CompiledField(NamedTuple):
    name: str
    type: str | Array | Struct[object]
    present: VersionRange | None
    nullable: VersionRange | None
    default: object
    ignorable: bool
    tag: int | None
    tagged: VersionRange | None


class Message(Generic[T_co]):
    """A top-level schema: a root struct plus the versions it knows and the flexible versions; `T_co`
    is the type its root struct's factory builds."""

    def __init__(self, root: Struct[T_co], *, valid: str, flexible: str = "none") -> None:
        self.root = root
        self.name = root.name
        valid_range = versions(valid)
        if valid_range is None or valid_range.high is None:
            raise ValueError(f"{root.name}: valid versions must be a closed range, got {valid!r}")
        self.valid = valid_range
        self.flexible = versions(flexible)
        self._compiled: dict[int, tuple[_CompiledField, ...]] = {}
        self._check(root, set())

    @property
    def lowest(self) -> int:
        return self.valid.low

    @property
    def highest(self) -> int:
        assert self.valid.high is not None
        return self.valid.high

    def is_flexible(self, version: int) -> bool:
        return _in(self.flexible, version)

    def _check(self, st: Struct[object], seen: set[int]) -> None:
        if id(st) in seen:
            return
        seen.add(id(st))
        tags: set[int] = set()
        compiled = []
        for f in st.fields:
            kind = f.type.element if isinstance(f.type, Array) else f.type
            if isinstance(kind, Struct):
                self._check(kind, seen)
            elif kind not in _PRIMITIVES:
                raise ValueError(f"{st.name}.{f.name}: unknown type {kind!r}")
            if f.tag is not None:
                if f.tag in tags:
                    raise ValueError(f"{st.name}: tag {f.tag} declared twice")
                tags.add(f.tag)
                if f.default is REQUIRED:
                    raise ValueError(f"{st.name}.{f.name}: a tagged field needs a default")
            compiled.append(_CompiledField(f.name, f.type, f.present_in(), versions(f.nullable), f.default,
                                           f.ignorable, f.tag, versions(f.tagged)))
        self._compiled[id(st)] = tuple(compiled)

    def fields_of(self, st: Struct[object]) -> tuple[_CompiledField, ...]:
        return self._compiled[id(st)]


# --------------------------------------------------------------------------------------------
# reading

_S8 = struct.Struct(">b")
_S16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_S32 = struct.Struct(">i")
_S64 = struct.Struct(">q")
_U64 = struct.Struct(">QQ")
_INTS = {"int8": _S8, "int16": _S16, "uint16": _U16, "int32": _S32, "int64": _S64}


class _Reader:
    __slots__ = ("data", "end", "message", "pos", "schema")

    def __init__(self, data: bytes, pos: int, end: int, message: Message[object]) -> None:
        self.data = data
        self.pos = pos
        self.end = end
        self.message = message
        self.schema = message.name

    def fail(self, reason: str, field: str, position: int | None = None) -> NoReturn:
        raise RecordDecodeError(reason, schema=self.schema, field=field,
                                position=self.pos if position is None else position)

    def need(self, n: int, field: str, what: str) -> None:
        left = self.end - self.pos
        if n > left:
            self.fail(f"{what} needs {n} byte(s) but only {left} remain", field)

    def fixed(self, s: struct.Struct, field: str, what: str) -> int:
        self.need(s.size, field, what)
        value: int = s.unpack_from(self.data, self.pos)[0]
        self.pos += s.size
        return value

    def uvarint(self, field: str, what: str) -> int:
        value, self.pos = read_uvarint(self.data, self.pos, self.end, schema=self.schema, field=field, what=what)
        return value


def read_uvarint(data: bytes, pos: int, end: int, *, schema: str = "", field: str = "",
                 what: str = "unsigned varint") -> tuple[int, int]:
    """Reads an unsigned varint as Kafka's ByteUtils#readUnsignedVarint does: at most five bytes,
    the result kept to 32 bits and read as a signed int (so a huge length comes out negative).
    Returns (value, new position)."""
    start = pos
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise RecordDecodeError(f"{what} is cut off after {pos - start} byte(s)", schema=schema,
                                    field=field, position=start)
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 28:
            raise RecordDecodeError(f"{what} is longer than 5 bytes", schema=schema, field=field,
                                    position=start)
    result &= 0xFFFFFFFF
    return (result - (1 << 32) if result >= (1 << 31) else result), pos


def _read_string(r: _Reader, flexible: bool, nullable: bool, path: str) -> str | None:
    start = r.pos
    length = r.uvarint(path, "string length") - 1 if flexible else r.fixed(_S16, path, "string length")
    if length < 0:
        if nullable:
            return None
        r.fail("non-nullable string is null", path, start)
    if length > MAX_STRING_BYTES:
        r.fail(f"string length {length} exceeds {MAX_STRING_BYTES}", path, start)
    r.need(length, path, f"string of length {length}")
    raw = r.data[r.pos:r.pos + length]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        r.fail(f"string is not valid UTF-8 ({e.reason})", path, r.pos + e.start)
    r.pos += length
    return text


def _read_bytes(r: _Reader, flexible: bool, nullable: bool, path: str) -> bytes | None:
    start = r.pos
    length = r.uvarint(path, "bytes length") - 1 if flexible else r.fixed(_S32, path, "bytes length")
    if length < 0:
        if nullable:
            return None
        r.fail("non-nullable bytes field is null", path, start)
    r.need(length, path, f"bytes of length {length}")
    value = bytes(r.data[r.pos:r.pos + length])
    r.pos += length
    return value


def _read_value(r: _Reader, ftype: str | Array | Struct[object], version: int, flexible: bool, nullable: bool,
                path: str) -> object:
    if isinstance(ftype, str):
        s = _INTS.get(ftype)
        if s is not None:
            return r.fixed(s, path, ftype)
        if ftype == "string":
            return _read_string(r, flexible, nullable, path)
        if ftype == "bytes":
            return _read_bytes(r, flexible, nullable, path)
        r.need(16, path, "uuid")
        value = uuid.UUID(bytes=bytes(r.data[r.pos:r.pos + 16]))
        r.pos += 16
        return value
    if isinstance(ftype, Array):
        start = r.pos
        count = r.uvarint(path, "array count") - 1 if flexible else r.fixed(_S32, path, "array count")
        if count < 0:
            if nullable:
                return None
            r.fail("non-nullable array is null", path, start)
        left = r.end - r.pos
        if count > left:
            r.fail(f"array count {count} exceeds the {left} byte(s) remaining", path, start)
        element = ftype.element
        if element == "int32":
            r.need(4 * count, path, f"array of {count} int32")
            values = struct.unpack_from(f">{count}i", r.data, r.pos)
            r.pos += 4 * count
            return values
        return tuple(_read_value(r, element, version, flexible, False, f"{path}[{i}]") for i in range(count))
    # a struct: nullable ones carry a presence marker first
    if nullable and r.fixed(_S8, path, "presence byte") < 0:
        return None
    return _read_struct(r, ftype, version, flexible, path)


def _read_struct(r: _Reader, st: Struct[T], version: int, flexible: bool, path: str) -> T:
    values: dict[str, object] = {}
    tagged: dict[int, _CompiledField] = {}
    prefix = f"{path}." if path else ""
    for f in r.message.fields_of(st):
        if f.tag is not None and _in(f.tagged, version):
            values[f.name] = f.default
            if flexible and _in(f.present, version):
                tagged[f.tag] = f
            continue
        if not _in(f.present, version):
            values[f.name] = f.default
            continue
        values[f.name] = _read_value(r, f.type, version, flexible, _in(f.nullable, version), prefix + f.name)
    if flexible:
        unknown: list[tuple[int, bytes]] = []
        where = prefix + "<tagged fields>"
        count = r.uvarint(where, "tagged field count")
        if count < 0 or count > r.end - r.pos:
            r.fail(f"tagged field count {count} is impossible with {r.end - r.pos} byte(s) remaining", where)
        for _ in range(count):
            tag_pos = r.pos
            tag = r.uvarint(where, "tag")
            size = r.uvarint(where, f"size of tag {tag}")
            if size < 0:
                r.fail(f"tag {tag} has negative size {size}", where, tag_pos)
            r.need(size, where, f"tag {tag} payload")
            known = tagged.get(tag)
            if known is None:
                unknown.append((tag, bytes(r.data[r.pos:r.pos + size])))
                r.pos += size
                continue
            fpath = prefix + known.name
            outer_end, r.end = r.end, r.pos + size
            try:
                if isinstance(known.type, Struct):
                    present = r.uvarint(fpath, "presence marker") if _in(known.nullable, version) else 1
                    values[known.name] = (None if present <= 0 else
                                          _read_struct(r, known.type, version, True, fpath))
                else:
                    values[known.name] = _read_value(r, known.type, version, True,
                                                     _in(known.nullable, version), fpath)
                if r.pos != r.end:
                    r.fail(f"tag {tag} declares {size} byte(s) but its value used {size - (r.end - r.pos)}",
                           fpath, tag_pos)
            finally:
                r.end = outer_end
        values["unknown_tagged_fields"] = tuple(unknown)
    return st.factory(**values)


def read_body(message: Message[T], data: bytes, pos: int, version: int) -> tuple[T, int]:
    """Decodes `message` laid out as `version`, starting at `pos` (after the int16 version prefix).

    Returns the decoded object and the position just after it; callers decide what trailing bytes
    mean (Kafka's readers ignore them)."""
    r = _Reader(data, pos, len(data), message)
    value = _read_struct(r, message.root, version, message.is_flexible(version), "")
    return value, r.pos


# --------------------------------------------------------------------------------------------
# writing

def uvarint_bytes(value: int) -> bytes:
    """The minimal unsigned-varint encoding of a non-negative int below 2**32."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class _Writer:
    __slots__ = ("message", "out")

    def __init__(self, message: Message[object]) -> None:
        self.message = message
        self.out = bytearray()

    def fail(self, reason: str, path: str) -> NoReturn:
        raise RecordEncodeError(f"{self.message.name}.{path}: {reason}")


_INT_BOUNDS = {"int8": (-(1 << 7), 1 << 7), "int16": (-(1 << 15), 1 << 15), "uint16": (0, 1 << 16),
               "int32": (-(1 << 31), 1 << 31), "int64": (-(1 << 63), 1 << 63)}


def _write_value(w: _Writer, ftype: str | Array | Struct[object], value: object, version: int, flexible: bool,
                 nullable: bool, path: str) -> None:
    out = w.out
    if value is None:
        if not nullable:
            w.fail("is None but the field is not nullable at this version", path)
        if isinstance(ftype, Struct):
            out += b"\xff"
        elif flexible:
            out.append(0)
        elif ftype == "string":
            out += b"\xff\xff"
        else:
            out += b"\xff\xff\xff\xff"
        return
    if isinstance(ftype, str):
        s = _INTS.get(ftype)
        if s is not None:
            if not isinstance(value, int) or isinstance(value, bool):
                w.fail(f"expected an int for {ftype}, got {type(value).__name__}", path)
            low, high = _INT_BOUNDS[ftype]
            if not low <= value < high:
                w.fail(f"{value} does not fit in {ftype}", path)
            out += s.pack(value)
        elif ftype == "string":
            if not isinstance(value, str):
                w.fail(f"expected str, got {type(value).__name__}", path)
            try:
                raw = value.encode("utf-8")
            except UnicodeEncodeError as e:
                w.fail(f"cannot be written as UTF-8 ({e.reason})", path)
            if len(raw) > MAX_STRING_BYTES:
                w.fail(f"is {len(raw)} UTF-8 bytes, more than {MAX_STRING_BYTES}", path)
            out += uvarint_bytes(len(raw) + 1) if flexible else _S16.pack(len(raw))
            out += raw
        elif ftype == "bytes":
            if not isinstance(value, bytes | bytearray | memoryview):
                w.fail(f"expected bytes, got {type(value).__name__}", path)
            raw = bytes(value)
            if len(raw) >= (1 << 31) - 1:
                w.fail("is too long", path)
            out += uvarint_bytes(len(raw) + 1) if flexible else _S32.pack(len(raw))
            out += raw
        else:  # uuid
            if not isinstance(value, uuid.UUID):
                w.fail(f"expected uuid.UUID, got {type(value).__name__}", path)
            out += value.bytes
        return
    if isinstance(ftype, Array):
        if not isinstance(value, list | tuple):
            w.fail(f"expected a tuple or list, got {type(value).__name__}", path)
        out += uvarint_bytes(len(value) + 1) if flexible else _S32.pack(len(value))
        for i, item in enumerate(value):
            _write_value(w, ftype.element, item, version, flexible, False, f"{path}[{i}]")
        return
    if nullable:
        out.append(1)
    _write_struct(w, ftype, value, version, flexible, path)


def _write_struct(w: _Writer, st: Struct[object], obj: object, version: int, flexible: bool, path: str) -> None:
    factory = st.factory
    if isinstance(factory, type) and not isinstance(obj, factory):
        w.fail(f"expected {factory.__name__}, got {type(obj).__name__}", path or st.name)
    prefix = f"{path}." if path else ""
    tagged: list[tuple[int, _CompiledField, object]] = []
    for f in w.message.fields_of(st):
        try:
            value = getattr(obj, f.name)
        except AttributeError:
            w.fail(f"{type(obj).__name__} has no attribute {f.name!r}", prefix + f.name)
        if f.tag is not None and _in(f.tagged, version):
            if _in(f.present, version) and flexible and value != f.default:
                tagged.append((f.tag, f, value))
            continue
        if not _in(f.present, version):
            if not f.ignorable and value != f.default:
                w.fail(f"holds {value!r} but does not exist at version {version}", prefix + f.name)
            continue
        _write_value(w, f.type, value, version, flexible, _in(f.nullable, version), prefix + f.name)
    if not flexible:
        return
    raw_tags: Sequence[tuple[int, bytes]] = getattr(obj, "unknown_tagged_fields", ())
    known_tags = {f.tag for f in w.message.fields_of(st) if f.tag is not None and _in(f.tagged, version)}
    for item in raw_tags:
        if (not isinstance(item, tuple) or len(item) != 2 or not isinstance(item[0], int)
                or not isinstance(item[1], bytes) or not 0 <= item[0] < (1 << 31)):
            w.fail(f"unknown tagged field {item!r} is not a (tag, bytes) pair", prefix + "unknown_tagged_fields")
        if item[0] in known_tags:
            w.fail(f"tag {item[0]} is a known field here, not an unknown one", prefix + "unknown_tagged_fields")
    out = w.out
    out += uvarint_bytes(len(tagged) + len(raw_tags))
    i = 0
    for tag, f, value in tagged:  # declared in ascending tag order
        while i < len(raw_tags) and raw_tags[i][0] < tag:
            _write_raw_tag(out, raw_tags[i])
            i += 1
        sub = _Writer(w.message)
        if isinstance(f.type, Struct):
            if value is None:  # a null tagged struct: its presence marker alone
                if not _in(f.nullable, version):
                    w.fail("is None but the field is not nullable at this version", prefix + f.name)
                sub.out.append(0)
            else:
                if _in(f.nullable, version):
                    sub.out.append(1)
                _write_struct(sub, f.type, value, version, True, prefix + f.name)
        else:
            _write_value(sub, f.type, value, version, True, _in(f.nullable, version), prefix + f.name)
        out += uvarint_bytes(tag) + uvarint_bytes(len(sub.out)) + sub.out
    for item in raw_tags[i:]:
        _write_raw_tag(out, item)


def _write_raw_tag(out: bytearray, item: tuple[int, bytes]) -> None:
    tag, payload = item
    out += uvarint_bytes(tag) + uvarint_bytes(len(payload)) + payload


def write_body(message: Message[object], obj: object, version: int) -> bytes:
    """Encodes `obj` as `message` at `version` (without the int16 version prefix)."""
    w = _Writer(message)
    _write_struct(w, message.root, obj, version, message.is_flexible(version), "")
    return bytes(w.out)
