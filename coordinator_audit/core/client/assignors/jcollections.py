"""Just enough of java.util's ordering behaviour for the assignors to walk their collections in the
order Kafka's Java code does: HashMap/HashSet iteration, String.compareTo, and the hash
codes of the keys the assignors store (String, TopicPartition)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

from coordinator_audit.core.errors import AssignorError
from coordinator_audit.core.jhash import java_string_hashcode, spread

K = TypeVar("K")
_MASK32 = 0xFFFFFFFF
_DEFAULT_CAPACITY = 16


def _int32(n: int) -> int:
    n &= _MASK32
    return n - (1 << 32) if n >= (1 << 31) else n


def java_string_key(s: str) -> bytes:
    """A sort key ordering strings as java.lang.String#compareTo does (UTF-16 code units).

    Big-endian UTF-16 bytes compare exactly like the code-unit sequence, prefixes first."""
    return s.encode("utf-16-be", "surrogatepass")


def topic_partition_hash(topic: str, partition: int) -> int:
    """Follows org.apache.kafka.common.TopicPartition#hashCode: 31 * (31 + partition) + topic.hashCode()."""
    return _int32(31 * _int32(31 + partition) + java_string_hashcode(topic))


def topic_partition_key(tp: tuple[str, int]) -> tuple[bytes, int]:
    """Sort key of consumer.internals.Utils.TopicPartitionComparator: topic, then partition."""
    return java_string_key(tp[0]), tp[1]


class JavaHashOrder(Generic[K]):
    """The iteration order of a java.util.HashMap/HashSet built with the default constructor.

    Buckets are walked in index order, `spread(hash) & (capacity - 1)`; keys sharing a bucket come in
    insertion order, which survives resizes and removals. The table starts at 16 slots and doubles
    right after an insertion makes size > 0.75 * capacity; it never shrinks (not even on clear()).
    Known limit: a bucket that grows to 9 keys once capacity >= 64 becomes a red-black tree bin,
    whose order this class does not model (practically never seen with the assignors' key sets).
    """

    __slots__ = ("_capacity", "_entries", "_hash", "_seq")

    def __init__(self, hash_fn: Callable[[K], int], keys: Iterable[K] = ()) -> None:
        self._hash = hash_fn
        self._capacity = _DEFAULT_CAPACITY
        self._seq = 0
        self._entries: dict[K, tuple[int, int]] = {}
        for key in keys:
            self.add(key)

    def add(self, key: K) -> bool:
        """HashSet#add / HashMap#put of a new key; a key already present keeps its place."""
        if key in self._entries:
            return False
        self._entries[key] = (spread(self._hash(key)), self._seq)
        self._seq += 1
        if len(self._entries) > self._capacity * 3 // 4:
            self._capacity *= 2
        return True

    def discard(self, key: K) -> bool:
        return self._entries.pop(key, None) is not None

    def clear(self) -> None:
        self._entries.clear()

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[K]:
        mask = self._capacity - 1
        return iter(sorted(self._entries, key=lambda k: ((self._entries[k][0] & mask), self._entries[k][1])))

    def first(self) -> K:
        """What `iterator().next()` returns; raises KeyError when empty (Java: NoSuchElementException)."""
        if not self._entries:
            raise KeyError("first() of an empty Java hash collection")
        mask = self._capacity - 1
        return min(self._entries, key=lambda k: ((self._entries[k][0] & mask), self._entries[k][1]))


def string_hash_order(keys: Iterable[str]) -> list[str]:
    """The iteration order of a default HashMap<String, ?>/HashSet<String> after inserting `keys` in order."""
    return list(JavaHashOrder(java_string_hashcode, keys))


def topic_partition_hash_set() -> JavaHashOrder[tuple[str, int]]:
    """An empty default HashSet<TopicPartition>."""
    return JavaHashOrder(lambda tp: topic_partition_hash(tp[0], tp[1]))


class JavaListIterator(Generic[K]):
    """java.util.LinkedList's iterator over a Python list: next/has_next/remove with Java's rules
    (remove() drops the element last returned by next(), once)."""

    __slots__ = ("_cursor", "_items", "_last")

    def __init__(self, items: list[K]) -> None:
        self._items = items
        self._cursor = 0
        self._last = -1

    def has_next(self) -> bool:
        return self._cursor < len(self._items)

    def next(self) -> K:
        if self._cursor >= len(self._items):
            raise IndexError("iterator exhausted (Java: NoSuchElementException)")
        self._last = self._cursor
        self._cursor += 1
        return self._items[self._last]

    def remove(self) -> None:
        if self._last < 0:
            raise AssignorError("iterator remove() without a preceding next()", java_exception="IllegalStateException")
        del self._items[self._last]
        self._cursor = self._last
        self._last = -1
