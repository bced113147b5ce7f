"""Java's String.hashCode and Kafka's Utils.abs, shared by partition mapping and the HashMap
iteration-order emulation (spec §8.2, §2.5)."""

from __future__ import annotations

_MASK32 = 0xFFFFFFFF


def java_string_hashcode(s: str) -> int:
    """Follows java.lang.String#hashCode: 31*h + c over UTF-16 code units, as a signed int32."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & _MASK32
    return h - (1 << 32) if h >= (1 << 31) else h


def kafka_abs(n: int) -> int:
    """Follows org.apache.kafka.common.utils.Utils#abs: 0 for Integer.MIN_VALUE, else |n|."""
    return 0 if n == -(1 << 31) else abs(n)


def spread(h: int) -> int:
    """Follows java.util.HashMap#hash: h ^ (h >>> 16), as a signed int32 (also Scala 2.13's improveHash)."""
    u = h & _MASK32
    v = (u ^ (u >> 16)) & _MASK32
    return v - (1 << 32) if v >= (1 << 31) else v
