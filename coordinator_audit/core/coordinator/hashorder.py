"""Iteration order of the hash maps Kafka keeps members and votes in.

The order of the members map decides the member order inside GroupMetadata records, the member list
sent to the leader, the next leader after the leader leaves, and the leader elected when the old one
did not rejoin. Two emulations:

* `JavaHashMap` - java.util.HashMap<String, V> (Java coordinator): table of 16 buckets that doubles
  right after an insertion makes size > 0.75 * capacity, bucket = spread(hashCode) & (capacity - 1),
  insertion order inside a bucket (kept across resizes and removals). Tree bins (a bucket of 9+ keys
  with capacity >= 64) are not emulated: that needs 9 keys in one bucket, practically never seen.
* `ScalaHashMap` - scala.collection.mutable.HashMap of Scala 2.13 (Scala coordinator): same bucket
  function, chains sorted by the improved hash (signed ascending, a new key after equal hashes), and
  the table doubles *before* an insertion when size + 1 >= 0.75 * capacity. Taken from the library
  source (not run against a Scala broker).

`champ_order` gives the iteration order of a Scala 2.13 immutable.HashMap (CHAMP trie), which decides
ties in the Scala coordinator's protocol vote (`groupBy(identity).maxBy`). Also from the library
source only (Hashing.improve, payload-before-subnode iteration); S's tie order is not verified on a broker.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import Generic, TypeVar

from coordinator_audit.core.jhash import java_string_hashcode, spread

V = TypeVar("V")

_MASK32 = 0xFFFFFFFF


@lru_cache(maxsize=8192)
def _key_hash(key: str) -> int:
    """Follows java.util.HashMap#hash for a String key: spread(String#hashCode). Cached (bounded): the
    same member ids are hashed again whenever a changed map's iteration order is asked for."""
    return spread(java_string_hashcode(key))


def _signed(u: int) -> int:
    u &= _MASK32
    return u - (1 << 32) if u >= (1 << 31) else u


class _OrderedHashMap(Generic[V]):
    """Common part: values in a dict (insertion order), the emulated iteration order derived from it.

    Both emulated tables keep, in every bucket, an order that depends only on the keys present and the
    order they were (last) inserted in: Java appends to a bucket's chain, removal unlinks, and a resize
    walks the old chains in order, so a bucket lists its keys in insertion order; Scala keeps each chain
    sorted by hash, a new key after equal hashes, which is insertion order among equal hashes. The
    table's capacity only ever grows (`clear` keeps it). So the map holds the keys in a dict, tracks the
    capacity on insertion, and computes the iteration order (bucket index, then Java: insertion order /
    Scala: hash then insertion order) only when it is asked for, caching it until the next change.
    Nothing is hashed while a map is only filled and read by key (the coordinator's load path)."""

    __slots__ = ("_capacity", "_order", "_values")

    def __init__(self, capacity: int = 16) -> None:
        self._capacity = capacity
        self._values: dict[str, V] = {}
        self._order: list[str] | None = None

    def _index(self, key: str) -> int:
        return _key_hash(key) & (self._capacity - 1)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __len__(self) -> int:
        return len(self._values)

    def __getitem__(self, key: str) -> V:
        return self._values[key]

    def get(self, key: str, default: V | None = None) -> V | None:
        return self._values.get(key, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def keys(self) -> list[str]:
        """The keys in the emulated iteration order (a new list)."""
        return list(self._ordered())

    def _ordered(self) -> list[str]:
        """The cached iteration order (not to be changed by the caller)."""
        order = self._order
        if order is None:
            order = self._order = self._compute_order()
        return order

    def _compute_order(self) -> list[str]:
        raise NotImplementedError

    def values(self) -> list[V]:
        values = self._values
        return [values[k] for k in self._ordered()]

    def values_any_order(self) -> list[V]:
        """The values in insertion order, not the emulated one: for callers whose result does not
        depend on the order (cheaper than `values`)."""
        return list(self._values.values())

    def items(self) -> list[tuple[str, V]]:
        values = self._values
        return [(k, values[k]) for k in self._ordered()]

    def first_key(self) -> str | None:
        if not self._values:
            return None
        return self._ordered()[0]

    def pop(self, key: str) -> V | None:
        if key not in self._values:
            return None
        self._order = None
        return self._values.pop(key)

    def put(self, key: str, value: V) -> None:
        raise NotImplementedError

    def clear(self) -> None:
        """Removes every key; like Java's HashMap#clear and Scala's mutable.HashMap#clear the table keeps its
        size, so later iteration orders still depend on how large the map once was."""
        self._values.clear()
        self._order = None


class JavaHashMap(_OrderedHashMap[V]):
    """Follows java.util.HashMap (put/remove/iteration order, without tree bins): the table doubles right
    after an insertion that makes size > 0.75 * capacity; a bucket lists its keys in insertion order."""

    __slots__ = ()

    def put(self, key: str, value: V) -> None:
        values = self._values
        if key not in values:
            self._order = None
            if len(values) >= self._capacity * 3 // 4:  # size after this insertion > threshold
                self._capacity *= 2
        values[key] = value

    def _compute_order(self) -> list[str]:
        keys = list(self._values)
        if len(keys) < 2:
            return keys
        mask = self._capacity - 1
        return sorted(keys, key=lambda k: _key_hash(k) & mask)  # stable: insertion order inside a bucket


class ScalaHashMap(_OrderedHashMap[V]):
    """Follows scala.collection.mutable.HashMap of Scala 2.13 (put/remove/iteration order): the table
    doubles before an insertion when size + 1 >= 0.75 * capacity; a chain is sorted by hash, a new key
    after the keys of equal hash."""

    __slots__ = ()

    def put(self, key: str, value: V) -> None:
        values = self._values
        if key not in values:
            self._order = None
            if len(values) + 1 >= int(self._capacity * 0.75):
                self._capacity *= 2
        values[key] = value

    def _compute_order(self) -> list[str]:
        keys = list(self._values)
        if len(keys) < 2:
            return keys
        mask = self._capacity - 1

        def position(k: str) -> tuple[int, int]:
            h = _key_hash(k)
            return h & mask, h

        return sorted(keys, key=position)  # stable: insertion order among equal hashes


class HashSetOrder:
    """A hash set that iterates in the emulated order of java.util.HashSet (J) or Scala 2.13's
    mutable.HashSet (S), both backed by the hash maps above (Kafka's `pendingSyncMembers`)."""

    __slots__ = ("_java", "_map")

    def __init__(self, *, java: bool = True) -> None:
        self._java = java
        # created by the first add: a set that never held a key iterates like a fresh one (every group
        # replayed by the load path has one, most never use it)
        self._map: JavaHashMap[None] | ScalaHashMap[None] | None = None

    def add(self, key: str) -> None:
        if self._map is None:
            self._map = JavaHashMap() if self._java else ScalaHashMap()
        self._map.put(key, None)

    def discard(self, key: str) -> None:
        if self._map is not None:
            self._map.pop(key)

    def clear(self) -> None:
        if self._map is not None:
            self._map.clear()

    def __contains__(self, key: object) -> bool:
        return self._map is not None and key in self._map

    def __len__(self) -> int:
        return 0 if self._map is None else len(self._map)

    def __bool__(self) -> bool:
        return self._map is not None and len(self._map) > 0

    def __iter__(self) -> Iterator[str]:
        return iter(() if self._map is None else self._map.keys())


def scala_immutable_set_order(keys: Iterable[str]) -> list[str]:
    """Iteration order of a Scala 2.13 immutable Set/Map built from `keys` in that order (`toSet`, `toMap`,
    `Set.from`): Set1..Set4 / Map1..Map4 keep insertion order, larger ones are CHAMP tries."""
    items = list(dict.fromkeys(keys))
    return items if len(items) <= 4 else champ_order(items)


def scala_hashmap_order(keys: Iterable[str]) -> list[str]:
    """The iteration order of a fresh scala.collection.mutable.HashMap after putting `keys` in order."""
    m: ScalaHashMap[None] = ScalaHashMap()
    for k in keys:
        m.put(k, None)
    return m.keys()


def java_hashmap_order(keys: Iterable[str], *, capacity: int = 16) -> list[str]:
    """The iteration order of a fresh java.util.HashMap after putting `keys` in order (duplicates kept once)."""
    m: JavaHashMap[None] = JavaHashMap(capacity)
    for k in keys:
        m.put(k, None)
    return m.keys()


def java_hashset_copy_order(keys: Iterable[str]) -> list[str]:
    """Iteration order of `new HashSet<>(collection)`: capacity max(size/.75 + 1, 16) rounded to a power of 2."""
    items = list(keys)
    wanted = max(int(len(items) / 0.75) + 1, 16)
    capacity = 1
    while capacity < wanted:
        capacity *= 2
    return java_hashmap_order(items, capacity=capacity)


def scala_improve(h: int) -> int:
    """Follows scala.collection.Hashing#improve (the CHAMP hash mixer), as a signed int32."""
    h = _signed(h + ~(h << 9))
    h = _signed(h ^ ((h & _MASK32) >> 14))
    h = _signed(h + (h << 4))
    return _signed(h ^ ((h & _MASK32) >> 10))


def champ_order(keys: Iterable[str]) -> list[str]:
    """Iteration order of a Scala 2.13 immutable.HashMap holding `keys` (distinct strings).

    A CHAMP node keeps the keys alone in their 5-bit slot as payload (iterated first, by slot) and
    pushes slots shared by several keys down to a sub-node (iterated afterwards, by slot, recursively).
    Keys with the same full 32-bit hash stay in insertion order (collision node).
    """
    distinct = list(dict.fromkeys(keys))
    hashed = [(k, scala_improve(java_string_hashcode(k)) & _MASK32) for k in distinct]

    def walk(entries: list[tuple[str, int]], shift: int) -> list[str]:
        if shift >= 32:
            return [k for k, _ in entries]
        slots: dict[int, list[tuple[str, int]]] = {}
        for k, h in entries:
            slots.setdefault((h >> shift) & 31, []).append((k, h))
        payload = [group[0][0] for _slot, group in sorted(slots.items()) if len(group) == 1]
        nodes: list[str] = []
        for _slot, group in sorted(slots.items()):
            if len(group) > 1:
                if len({h for _, h in group}) == 1:
                    nodes.extend(k for k, _ in group)
                else:
                    nodes.extend(walk(group, shift + 5))
        return payload + nodes

    return walk(hashed, 0)
