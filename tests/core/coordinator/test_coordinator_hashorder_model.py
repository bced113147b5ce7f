"""The hash-map order emulation and String#hashCode against direct models of what Java and Scala do.

`coordinator_audit.core.coordinator.hashorder` derives the iteration order from insertion order and the
tracked capacity instead of keeping buckets; the models below keep explicit bucket chains (Java:
append to the chain, resize after the insertion that passes 0.75 * capacity, re-walk the chains in
order; Scala: resize before an insertion when size + 1 >= 0.75 * capacity, chains sorted by hash with
a new key after equal hashes) and random operation sequences must give the same order at every step.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator_audit.core.coordinator.hashorder import JavaHashMap, ScalaHashMap
from coordinator_audit.core.jhash import java_string_hashcode, spread


def _reference_hashcode(s: str) -> int:
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= (1 << 31) else h


class _BucketModel:
    def __init__(self, *, java: bool) -> None:
        self.java = java
        self.capacity = 16
        self.buckets: list[list[str]] = [[] for _ in range(16)]
        self.size = 0

    @staticmethod
    def _hash(key: str) -> int:
        return spread(_reference_hashcode(key))

    def _resize(self) -> None:
        old, self.capacity = self.buckets, self.capacity * 2
        self.buckets = [[] for _ in range(self.capacity)]
        for bucket in old:
            for key in bucket:
                self.buckets[self._hash(key) & (self.capacity - 1)].append(key)

    def put(self, key: str) -> None:
        if key in self.keys():
            return
        if not self.java and self.size + 1 >= int(self.capacity * 0.75):
            self._resize()
        h = self._hash(key)
        bucket = self.buckets[h & (self.capacity - 1)]
        if self.java:
            bucket.append(key)
        else:
            pos = next((i for i, other in enumerate(bucket) if self._hash(other) > h), len(bucket))
            bucket.insert(pos, key)
        self.size += 1
        if self.java and self.size > self.capacity * 3 // 4:
            self._resize()

    def pop(self, key: str) -> None:
        for bucket in self.buckets:
            if key in bucket:
                bucket.remove(key)
                self.size -= 1

    def clear(self) -> None:
        self.buckets = [[] for _ in range(self.capacity)]
        self.size = 0

    def keys(self) -> list[str]:
        return [k for bucket in self.buckets for k in bucket]


# few distinct short keys (so that keys collide in buckets, and pops and re-puts hit present keys),
# plus keys with an equal String#hashCode ("Aa" and "BB") for Scala's tie rule
_KEYS = st.one_of(st.text(alphabet="abcAB", min_size=1, max_size=3), st.sampled_from(["Aa", "BB", "AaAa", "BBBB", "AaBB"]))
_OPS = st.lists(st.tuples(st.sampled_from(["put", "put", "put", "pop", "clear", "read"]), _KEYS), max_size=120)


@settings(max_examples=300, deadline=None)
@given(ops=_OPS, java=st.booleans())
def test_order_matches_the_bucket_model(ops: list[tuple[str, str]], java: bool) -> None:
    fast: JavaHashMap[int] | ScalaHashMap[int] = JavaHashMap() if java else ScalaHashMap()
    model = _BucketModel(java=java)
    for i, (op, key) in enumerate(ops):
        if op == "put":
            fast.put(key, i)
            model.put(key)
        elif op == "pop":
            fast.pop(key)
            model.pop(key)
        elif op == "clear" and i % 7 == 0:
            fast.clear()
            model.clear()
        else:
            assert fast.keys() == model.keys()
            assert fast.first_key() == (model.keys() or [None])[0]
    assert fast.keys() == model.keys()
    assert [k for k, _ in fast.items()] == model.keys()
    assert len(fast) == len(model.keys())


def test_order_matches_the_bucket_model_when_growing_large() -> None:
    for java in (True, False):
        fast: JavaHashMap[int] | ScalaHashMap[int] = JavaHashMap() if java else ScalaHashMap()
        model = _BucketModel(java=java)
        for i in range(300):
            fast.put(f"member-{i * 7919 % 1000}", i)
            model.put(f"member-{i * 7919 % 1000}")
            if i % 5 == 4:
                fast.pop(f"member-{i * 31 % 1000}")
                model.pop(f"member-{i * 31 % 1000}")
            assert fast.keys() == model.keys(), i
        assert fast.keys() == model.keys()


@settings(max_examples=500, deadline=None)
@given(s=st.text(max_size=200) | st.text(alphabet=st.characters(min_codepoint=0xD000, max_codepoint=0x10FFFF)))
def test_string_hashcode_matches_the_per_unit_loop(s: str) -> None:
    assert java_string_hashcode(s) == _reference_hashcode(s)


def test_string_hashcode_long_and_surrogate_strings() -> None:
    for s in ("x" * 1000, "\ud800", "\udfff\ud800", "\U0001f600" * 300, "é" * 129, "a\U0010ffffb"):
        assert java_string_hashcode(s) == _reference_hashcode(s)
