"""A decoded record in the JSON form Kafka's generated JSON converters write (`*JsonConverter#write`):
field names as in the message schemas (camelCase), Uuids in URL-safe base64, bytes in base64, and
tagged fields left out when they hold their default. Tests compare the codec's reading of bytes
with Kafka's reading of the same bytes through it."""

from __future__ import annotations

import base64
import uuid
from typing import Any

from coordinator_audit.core.wire import Array, Message, Struct


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _value(ftype: str | Array | Struct[object], value: Any) -> Any:
    if value is None:
        return None
    if isinstance(ftype, Struct):
        return to_kafka_json(ftype, value)
    if isinstance(ftype, Array):
        return [_value(ftype.element, v) for v in value]
    if isinstance(value, uuid.UUID):
        return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value


def to_kafka_json(st: Struct[object] | Message[object], obj: object) -> dict[str, Any]:
    """`obj` (built by `st`'s factory) as Kafka's JSON converter writes it."""
    if isinstance(st, Message):
        st = st.root
    out: dict[str, Any] = {}
    for f in st.fields:
        value = getattr(obj, f.name)
        if f.tag is not None and value == f.default:
            continue
        out[camel(f.name)] = _value(f.type, value)
    return out
