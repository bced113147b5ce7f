"""Java's String.hashCode and Kafka's Utils.abs, shared by partition mapping and the HashMap
iteration-order emulation (GroupCoordinatorService#partitionFor, java.util.HashMap)."""

from __future__ import annotations

import sys
from operator import mul

_MASK32 = 0xFFFFFFFF

_UTF16_NATIVE = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"
"""UTF-16 in this machine's byte order, so that `memoryview.cast("H")` reads the code units."""

_POWERS: list[int] = [pow(31, k, 1 << 32) for k in range(128)]
"""31**k mod 2**32, k = 0, 1, ...; extended on demand for longer strings."""


def _powers(n: int) -> list[int]:
    if n > len(_POWERS):
        last = _POWERS[-1]
        for _ in range(n - len(_POWERS)):
            last = last * 31 & _MASK32
            _POWERS.append(last)
    return _POWERS


def java_string_hashcode(s: str) -> int:
    """Follows java.lang.String#hashCode: 31*h + c over UTF-16 code units, as a signed int32.

    Evaluated as the sum of unit[i] * 31**(n-1-i) mod 2**32 (the same polynomial, reduced once at
    the end) with the products and the sum done in C: an ASCII string's bytes are its code units;
    any other string is encoded to UTF-16 (lone surrogates kept, as Java holds them) and read as
    16-bit units, so a non-BMP character counts as its two surrogates, as in Java."""
    units: bytes | memoryview = (s.encode("ascii") if s.isascii()
                                 else memoryview(s.encode(_UTF16_NATIVE, "surrogatepass")).cast("H"))
    n = len(units)
    h: int = sum(map(mul, units, _powers(n)[n - 1::-1])) & _MASK32
    return h - (1 << 32) if h >= (1 << 31) else h


def kafka_abs(n: int) -> int:
    """Follows org.apache.kafka.common.utils.Utils#abs: 0 for Integer.MIN_VALUE, else |n|."""
    return 0 if n == -(1 << 31) else abs(n)


def spread(h: int) -> int:
    """Follows java.util.HashMap#hash: h ^ (h >>> 16), as a signed int32 (also Scala 2.13's improveHash)."""
    u = h & _MASK32
    v = (u ^ (u >> 16)) & _MASK32
    return v - (1 << 32) if v >= (1 << 31) else v
