"""The compiled loops of the single pass (`coordinator_audit.udfs.scan`): numba functions over Arrow buffers.

They read `__consumer_offsets` key and value bytes in place (offsets + data buffers of a binary
Arrow array, as numpy views) and never build a Python object per record:

* `intern_keys`: classifies each key (an offset-commit key with a complete layout, a GroupMetadata
  key whose group string is readable, anything else) and gives each offset-commit key's
  topic-partition (its group, topic and partition bytes: type 0 and type 1 keys, and keys with
  trailing bytes, of one topic-partition are one) a dense id from an open-addressing hash table
  that lives as long as the task (`KeyTable`), and each group one from a second table (the group
  of any other key whose group string is complete too);
* `window_ms` (the file reader's input batches): each record's time in epoch ms and whether it is
  in the run's window, from the Parquet timestamps of any unit;
* `prepare`: one input batch's columns (log position, time, window, and its keys' classes, gathered
  from their dictionary entries' when the key column is dictionary-encoded) into the chunk's
  arrays, null masks applied, in one loop instead of a numpy pass per column;
* `commit_status`: per record in log order, whether it is an offset commit the pass summarises
  (with its committed offset, commitTimestamp and, Kafka 4.1+, topic id read from the value), an
  offset tombstone, a record for the replay, or a v4+ value with other tagged fields for the codec
  to judge;
* `summarise`: one partial summary per (topic-partition, stretch between two records of its group
  the replay reads, Kafka partition), with the first and last topic id its commits carry, kept open across the task's chunks until the stretch ends,
  and every backwards step inside one: the columnar form of the offset-commit rules, whose one
  scalar definition is `coordinator_audit.core.audit.offsets.OffsetSummary` (`tests/spark/
  test_spark_scan_rules.py::test_kernel_partials_merged_are_the_core_fold` holds the two equal);
* `copy_ranges`: the names of newly learnt keys out of the key table, as an Arrow string column.

Two numba costs they avoid in their per-record loops: a row of a 2-D array taken as a view (numba
builds the view, reference counts included, every time: `summarise` indexes the field in place),
and signed indices into byte arrays where several bytes make one number (numba checks each for a
negative index, which keeps LLVM from loading the word at once: `_be_int64`, `commit_status`).

The layout rules are those of Kafka's `OffsetCommitKey` (versions 0-1) and `OffsetCommitValue`
(versions 0-4, any later version read as 4, as `GroupCoordinatorRecordSerde` reads it) schemas, as
`coordinator_audit.core.records` decodes them: `tests/spark/test_spark_scan.py` holds the two equal on
arbitrary bytes.

Compilation: each function is compiled on its first call in a Python worker (about 3-5 s for all
of them) and cached on disk under `NUMBA_CACHE_DIR` (the job points it at `.cache/numba` or a
temporary directory) or next to this file; where no cache can be written (the module inside a
`--py-files` zip) they compile once per worker process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import numpy as np

__all__ = ["KIND_COMMIT_KEY", "KIND_GROUP_METADATA_KEY", "KIND_OTHER", "STATUS_CHECK", "STATUS_COMMIT",
           "STATUS_FILTERED", "STATUS_SIDE", "STATUS_TOMBSTONE", "STRETCH_FIELDS", "S_COMMITS", "S_FC_CTS",
           "S_FC_OFF", "S_FC_RTS", "S_FC_SRC", "S_FIRST_SRC", "S_FT_HI", "S_FT_LO", "S_LAST_SRC", "S_LC_CTS",
           "S_LC_OFF", "S_LC_SRC", "S_LT_HI", "S_LT_LO", "S_PART", "S_REGS", "S_STRETCH", "S_TOMBS", "TS_MICROS",
           "TS_MILLIS", "TS_NANOS", "TS_SECONDS", "KeyTable",
           "commit_status", "copy_ranges", "open_partitions", "prepare", "summarise", "window_ms"]

KIND_OTHER, KIND_COMMIT_KEY, KIND_GROUP_METADATA_KEY = 0, 1, 2
STATUS_SIDE, STATUS_COMMIT, STATUS_TOMBSTONE, STATUS_CHECK, STATUS_FILTERED = 0, 1, 2, 3, 4


def _jit(fn: Callable[..., Any], *, inline: Literal["never", "always"] = "never") -> Any:
    """`numba.njit(cache=True)`, or without the disk cache where numba finds no place for it.
    `inline="always"`: numba inlines the function into its callers (the key table's steps: a call
    that is not inlined passes every array as a struct and counts its references, which cost an
    insert into the key table more than the insert's own work)."""
    import numba

    try:
        return numba.njit(cache=True, nogil=True, inline=inline)(fn)
    except RuntimeError:  # "cannot cache function ...: no locator available" (e.g. source in a zip)
        return numba.njit(cache=False, nogil=True, inline=inline)(fn)


def _be_signed(data: Any, at: int, size: int) -> int:
    a = np.uint64(at)  # unsigned indices: see _be_int64
    v = 0
    for i in range(size):
        v = (v << 8) | int(data[a + np.uint64(i)])
    if v >= 1 << (8 * size - 1):
        v -= 1 << (8 * size)
    return v


be_signed = _jit(_be_signed)


def _be_int64(data: Any, at: int) -> Any:
    """The big-endian int64 at `data[at:at + 8]`. Indexed with unsigned integers: a signed index
    makes numba check for a negative one (Python's wraparound) at every byte, which keeps LLVM from
    reading the eight bytes as one word."""
    a = np.uint64(at)
    return np.int64((np.uint64(data[a]) << np.uint64(56)) | (np.uint64(data[a + np.uint64(1)]) << np.uint64(48))
                    | (np.uint64(data[a + np.uint64(2)]) << np.uint64(40))
                    | (np.uint64(data[a + np.uint64(3)]) << np.uint64(32))
                    | (np.uint64(data[a + np.uint64(4)]) << np.uint64(24))
                    | (np.uint64(data[a + np.uint64(5)]) << np.uint64(16))
                    | (np.uint64(data[a + np.uint64(6)]) << np.uint64(8)) | np.uint64(data[a + np.uint64(7)]))


be_int64 = _jit(_be_int64)


def _utf8_valid(data: Any, start: int, end: int) -> bool:
    """Strict UTF-8, as Python's codec decodes it: no overlong forms, no surrogates, nothing above
    U+10FFFF."""
    i = start
    while i < end:
        b = data[i]
        if b < 0x80:
            i += 1
            continue
        if 0xC2 <= b <= 0xDF:
            n, lo, hi = 1, 0x80, 0xBF
        elif b == 0xE0:
            n, lo, hi = 2, 0xA0, 0xBF
        elif 0xE1 <= b <= 0xEC or 0xEE <= b <= 0xEF:
            n, lo, hi = 2, 0x80, 0xBF
        elif b == 0xED:
            n, lo, hi = 2, 0x80, 0x9F
        elif b == 0xF0:
            n, lo, hi = 3, 0x90, 0xBF
        elif 0xF1 <= b <= 0xF3:
            n, lo, hi = 3, 0x80, 0xBF
        elif b == 0xF4:
            n, lo, hi = 3, 0x80, 0x8F
        else:
            return False
        if i + n >= end:
            return False
        c = data[i + 1]
        if c < lo or c > hi:
            return False
        for k in range(2, n + 1):
            c = data[i + k]
            if c < 0x80 or c > 0xBF:
                return False
        i += n + 1
    return True


utf8_valid = _jit(_utf8_valid)


def _le_word(data: Any, at: int) -> Any:
    """The little-endian uint64 at `data[at:at + 8]` (unsigned indices: one load, as `_be_int64`)."""
    a = np.uint64(at)
    return (np.uint64(data[a]) | (np.uint64(data[a + np.uint64(1)]) << np.uint64(8))
            | (np.uint64(data[a + np.uint64(2)]) << np.uint64(16)) | (np.uint64(data[a + np.uint64(3)]) << np.uint64(24))
            | (np.uint64(data[a + np.uint64(4)]) << np.uint64(32)) | (np.uint64(data[a + np.uint64(5)]) << np.uint64(40))
            | (np.uint64(data[a + np.uint64(6)]) << np.uint64(48)) | (np.uint64(data[a + np.uint64(7)]) << np.uint64(56)))


le_word = _jit(_le_word)


def _hash_bytes(data: Any, s: int, blen: int) -> Any:
    """A 63-bit hash of `data[s:s + blen]`, eight bytes at a time (a multiply-xorshift mix per word
    and a final avalanche): a word per step where FNV-1a takes a byte."""
    h = np.uint64(blen) * np.uint64(0x9E3779B97F4A7C15)
    i = s
    end = s + blen
    while i + 8 <= end:
        h = (h ^ le_word(data, i)) * np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(31)
        i += 8
    tail = np.uint64(0)
    shift = np.uint64(0)
    while i < end:
        tail |= np.uint64(data[np.uint64(i)]) << shift
        shift += np.uint64(8)
        i += 1
    h = (h ^ tail) * np.uint64(0x94D049BB133111EB)
    h ^= h >> np.uint64(29)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(32)
    return np.int64(h & np.uint64(0x7FFFFFFFFFFFFFFF))


hash_bytes = _jit(_hash_bytes)


def _same_bytes(a_data: Any, a: int, b_data: Any, b: int, n: int) -> bool:
    """Whether `a_data[a:a + n]` equals `b_data[b:b + n]`, compared a word at a time."""
    i = 0
    while i + 8 <= n:
        if le_word(a_data, a + i) != le_word(b_data, b + i):
            return False
        i += 8
    while i < n:
        if a_data[np.uint64(a + i)] != b_data[np.uint64(b + i)]:
            return False
        i += 1
    return True


same_bytes = _jit(_same_bytes)

_TAG = np.int64(-1) << np.int64(32)
"""A slot's upper 32 bits: the upper bits of its entry's hash (a probe compares them before the
bytes); its lower 32 bits are the entry's id."""
_SPAN_BITS = 20
"""A slot's second word: the entry's start in the arena, shifted by this, and its length (keys
of at most 8 + 2 * 32,767 bytes: an int16 length prefixes each name)."""
_SPAN_LENGTH = (1 << _SPAN_BITS) - 1


def _lookup(data: Any, s: int, blen: int, hv: int, slots: Any, arena: Any) -> Any:
    """The id of `data[s:s + blen]` (hash `hv`) in a table's `slots`, or -1 - the free slot where it
    goes. A slot holds the entry's hash tag and id, and where its bytes are: a probe that finds
    the entry reads its slot and its bytes, not three arrays indexed by its id."""
    mask = len(slots) - 1
    pos = hv & mask
    tag = hv & _TAG
    while slots[pos, 0] >= 0:
        v = slots[pos, 0]
        if v & _TAG == tag:
            span = slots[pos, 1]
            if (span & _SPAN_LENGTH) == blen and same_bytes(arena, span >> _SPAN_BITS, data, s, blen):
                return v & 0xFFFFFFFF
        pos = (pos + 1) & mask
    return -1 - pos


lookup = _jit(_lookup, inline="always")


def _intern(data: Any, s: int, blen: int, slots: Any, e_hash: Any, e_start: Any, e_len: Any, arena: Any,
            counts: Any) -> Any:
    """The id of the bytes `data[s:s + blen]` in a table (`slots`, `e_*`, `arena`, `counts` =
    [entries, arena bytes used]), added when new; -1 when the table is too full to add it."""
    hv = hash_bytes(data, s, blen)
    found = lookup(data, s, blen, hv, slots, arena)
    if found >= 0:
        return found
    return insert(data, s, blen, hv, -1 - found, slots, e_hash, e_start, e_len, arena, counts)


intern = _jit(_intern, inline="always")


def _insert(data: Any, s: int, blen: int, hv: int, pos: int, slots: Any, e_hash: Any, e_start: Any, e_len: Any,
            arena: Any, counts: Any) -> Any:
    """`intern`'s new entry: `data[s:s + blen]` (hash `hv`) added at the free slot `pos` that
    `lookup` found; -1 when the table is too full to add it."""
    e = counts[0]
    if 2 * (e + 1) > len(slots) or e >= len(e_hash) or counts[1] + blen > len(arena):
        return -1
    a = counts[1]
    for i in range(blen):
        arena[a + i] = data[s + i]
    e_hash[e], e_start[e], e_len[e] = hv, a, blen
    slots[pos, 0] = (hv & _TAG) | e
    slots[pos, 1] = (a << _SPAN_BITS) | blen
    counts[0] = e + 1
    counts[1] = a + blen
    return e


insert = _jit(_insert, inline="always")


def _intern_keys(offsets: Any, data: Any, null: Any, first: int, kind: Any, ids: Any,
                 k_slots: Any, k_hash: Any, k_start: Any, k_len: Any, k_arena: Any, k_counts: Any, k_group: Any,
                 g_slots: Any, g_hash: Any, g_start: Any, g_len: Any, g_arena: Any, g_counts: Any) -> int:
    """Classifies keys `first..` of a binary array (`offsets`, `data`, `null`) into `kind`: 1 an
    offset-commit key (type 0 or 1, group and topic strings and the int32 partition complete; trailing
    bytes allowed), 2 a GroupMetadata key (type 2) whose group string is complete, 0 anything else.
    `ids`: for kind 1 the id of the key's topic-partition (its group, topic and partition bytes) in
    the key table `k_*` (`k_group`: the id of each entry's group); for any other key of 4 bytes or
    more whose int16 group length fits (of any type: the replay reads its group the same way) its
    group's id in the group table `g_*`, else -1. Returns the index of the first key a full table
    stopped (len(null) when done): the caller grows the tables and calls again from there."""
    n = len(null)
    for r in range(first, n):
        kind[r] = 0
        ids[r] = -1
        if null[r]:
            continue
        s = offsets[r]
        klen = offsets[r + 1] - s
        if klen < 4:
            continue
        glen = be_signed(data, s + 2, 2)
        tlen = -1
        if data[s] == 0 and data[s + 1] <= 1 and glen >= 0 and klen >= 6 + glen:
            tlen = be_signed(data, s + 4 + glen, 2)
        if tlen < 0 or klen < 10 + glen + tlen:  # not an offset-commit key: its group, when complete
            if 0 <= glen <= klen - 4:
                g = intern(data, s + 4, glen, g_slots, g_hash, g_start, g_len, g_arena, g_counts)
                if g < 0:
                    return r
                kind[r] = 2 if data[s] == 0 and data[s + 1] == 2 else 0
                ids[r] = g
            continue
        blen = 8 + glen + tlen
        hv = hash_bytes(data, s + 2, blen)
        e = lookup(data, s + 2, blen, hv, k_slots, k_arena)
        if e < 0:  # a new topic-partition. The common case, a key seen before, is the lookup alone.
            # `hash_bytes`, the slots' layout (each slot holds its entry's hash tag, id and bytes'
            # place) and the steps inlined keep a new entry's cost low: a task learns a dictionary of
            # keys afresh (`benchmarks.bench_pass` measures the pass)
            free = -1 - e
            e = insert(data, s + 2, blen, hv, free, k_slots, k_hash, k_start, k_len, k_arena, k_counts)
            if e < 0:
                return r
            g = intern(data, s + 4, glen, g_slots, g_hash, g_start, g_len, g_arena, g_counts)
            if g < 0:  # undo (the entry is the last added, at the slot the lookup found free): it is
                # added again after the tables grow
                k_counts[0] = e
                k_counts[1] -= blen
                k_slots[free, 0] = -1
                k_slots[free, 1] = -1
                return r
            k_group[e] = g
        kind[r] = 1
        ids[r] = e
    return n


intern_keys = _jit(_intern_keys)


def _entry_fields(arena: Any, e_start: Any, first: int, last: int, glen: Any, tlen: Any, part: Any,
                  valid: Any) -> None:
    """Group and topic lengths, partition and whether both names are UTF-8, of key-table entries
    `first..last` (each: int16 group length, group, int16 topic length, topic, int32 partition)."""
    for e in range(first, last):
        a = e_start[e]
        g = be_signed(arena, a, 2)
        t = be_signed(arena, a + 2 + g, 2)
        glen[e - first] = g
        tlen[e - first] = t
        part[e - first] = be_signed(arena, a + 4 + g + t, 4)
        valid[e - first] = utf8_valid(arena, a + 2, a + 2 + g) and utf8_valid(arena, a + 4 + g, a + 4 + g + t)


entry_fields = _jit(_entry_fields)


def _rehash(slots: Any, e_hash: Any, e_start: Any, e_len: Any, count: int) -> None:
    mask = len(slots) - 1
    slots[:, :] = -1
    for e in range(count):
        pos = e_hash[e] & mask
        while slots[pos, 0] >= 0:
            pos = (pos + 1) & mask
        slots[pos, 0] = (e_hash[e] & _TAG) | e
        slots[pos, 1] = (e_start[e] << _SPAN_BITS) | e_len[e]


rehash = _jit(_rehash)


class KeyTable:
    """Byte strings with dense ids (`intern`), grown by doubling; `aux` is one int64 per entry for
    the caller. `clear()` empties it (ids restart at 0). Open addressing: `slots` has two words a
    slot (the hash's tag and the entry's id, `_TAG`; where its bytes are in `arena` and their
    length, `_SPAN_BITS`), -1 when free; `e_hash`, `e_start`, `e_len` per entry, by id."""

    def __init__(self, slots: int = 1 << 16, arena: int = 1 << 20) -> None:
        self.slots = np.full((slots, 2), -1, dtype=np.int64)
        self.e_hash = np.zeros(slots // 2, dtype=np.int64)
        self.e_start = np.zeros(slots // 2, dtype=np.int64)
        self.e_len = np.zeros(slots // 2, dtype=np.int64)
        self.aux = np.zeros(slots // 2, dtype=np.int64)
        self.arena = np.zeros(arena, dtype=np.uint8)
        self.counts = np.zeros(2, dtype=np.int64)

    def __len__(self) -> int:
        return int(self.counts[0])

    def arrays(self) -> tuple[np.ndarray, ...]:
        return self.slots, self.e_hash, self.e_start, self.e_len, self.arena, self.counts

    def clear(self) -> None:
        self.slots[:] = -1
        self.counts[:] = 0

    def make_room(self, need_bytes: int) -> None:
        """Room for one more entry of `need_bytes` bytes."""
        count, used = int(self.counts[0]), int(self.counts[1])
        if used + need_bytes > len(self.arena):
            self.arena = np.concatenate([self.arena, np.zeros(max(len(self.arena), need_bytes), dtype=np.uint8)])
        if 2 * (count + 1) > len(self.slots) or count >= len(self.e_hash):
            size = 2 * len(self.slots)
            extra = size // 2 - len(self.e_hash)
            grow = np.zeros(extra, dtype=np.int64)
            self.e_hash = np.concatenate([self.e_hash, grow])
            self.e_start = np.concatenate([self.e_start, grow])
            self.e_len = np.concatenate([self.e_len, grow])
            self.aux = np.concatenate([self.aux, grow])
            self.slots = np.full((size, 2), -1, dtype=np.int64)
            rehash(self.slots, self.e_hash, self.e_start, self.e_len, count)


def classify_keys(offsets: np.ndarray, data: np.ndarray, null: np.ndarray, keys: KeyTable, groups: KeyTable
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(kind, id) of every key of a binary array (`intern_keys`), growing the tables as needed."""
    n = len(null)
    kind = np.zeros(n, dtype=np.int8)
    ids = np.full(n, -1, dtype=np.int64)
    at = 0
    while True:
        at = int(intern_keys(offsets, data, null, at, kind, ids, *keys.arrays(), keys.aux, *groups.arrays()))
        if at >= n:
            return kind, ids
        size = int(offsets[at + 1] - offsets[at])
        keys.make_room(size)
        groups.make_room(size)


def _copy_ranges(arena: Any, start: Any, length: Any, offsets: Any, data: Any) -> None:
    """The byte ranges (`start`, `length`) of `arena`, one after another, into `data`, and where
    each begins into `offsets` (one more than the ranges: Arrow's offsets of a binary array)."""
    at = 0
    offsets[0] = 0
    for k in range(len(start)):
        a = start[k]
        for i in range(length[k]):
            data[at + i] = arena[a + i]
        at += length[k]
        offsets[k + 1] = at


copy_ranges = _jit(_copy_ranges)


TS_SECONDS, TS_MILLIS, TS_MICROS, TS_NANOS = 0, 1, 2, 3
"""Units of `window_ms`'s raw timestamps (Arrow's s, ms, us, ns)."""


def _window_ms(raw: Any, unit: int, ts_null: Any, part: Any, offs: Any, off_null: Any, since: int, has_since: bool,
               until: int, has_until: bool, sa_part: Any, sa_last: Any, ms: Any, inside: Any) -> None:
    """Each record's time in epoch ms (`ms`, floored, as Spark's unix_millis; 0 where `ts_null`)
    and whether it is inside the run's window (`inside`): at or after `since` (a null time is not),
    or, on a Kafka partition of `sa_part` (ascending), after the offset `sa_last` gives it; and
    before `until` (a null time is not; nor is a null offset on a partition of `sa_part`, as Spark
    evaluates `coordinator_audit.jobs.inputs.window_condition`). `ts_null`, `part`, `offs` and `off_null` may be empty:
    no nulls, no `sa_part`."""
    lp = 0
    known = False
    last = 0
    have = False
    for i in range(len(raw)):
        v = raw[i]
        if unit == 0:
            m = v * 1000
        elif unit == 1:
            m = v
        elif unit == 2:
            m = v // 1000
        else:
            m = v // 1000000
        valid = len(ts_null) == 0 or not ts_null[i]
        if not valid:
            m = 0
        ms[i] = m
        ins = True
        if has_since:
            ins = valid and m >= since
        if len(sa_part):
            p = part[i]
            if not have or p != lp:  # records come in runs of one partition: look it up once per run
                at = np.searchsorted(sa_part, p)
                known = at < len(sa_part) and sa_part[at] == p
                last = sa_last[at] if known else 0
                lp = p
                have = True
            if known:
                ins = (len(off_null) == 0 or not off_null[i]) and offs[i] > last
        if has_until:
            ins = ins and valid and m < until
        inside[i] = ins


window_ms = _jit(_window_ms)


def _prepare(at: int, p: Any, p_null: Any, o: Any, o_null: Any, t: Any, t_null: Any, w_bits: Any, w_bit: int,
             w_null: Any, k_idx: Any, k_null: Any, e_kind: Any, e_name: Any, e_group: Any, e_ok: Any, part: Any,
             off: Any, ts: Any, inw: Any, positioned: Any, kind: Any, name: Any, group: Any, key_ok: Any) -> None:
    """One input batch's columns into a chunk's arrays, from row `at`: partition, offset and time
    as int64 (0 where null), whether the record is in the window (`w_bits`: the Arrow bitmap of
    in_window values from bit `w_bit`; null is not) and has a log position (partition and offset
    not null), and its key's classes (`TaskKeys.classes`): the entry of each key is `k_idx[i]` (a
    dictionary's indices, null: no key) or, with `k_idx` empty, `i`; an entry's kind, its
    topic-partition id (offset-commit keys, else -1), its group id (other keys whose group is complete, else -1) and
    whether it is a commit key with UTF-8 names. A null mask may be empty: no nulls."""
    for i in range(len(p)):
        r = at + i
        pv = len(p_null) == 0 or not p_null[i]
        ov = len(o_null) == 0 or not o_null[i]
        part[r] = p[i] if pv else 0
        off[r] = o[i] if ov else 0
        positioned[r] = pv and ov
        ts[r] = t[i] if len(t_null) == 0 or not t_null[i] else 0
        b = w_bit + i
        inw[r] = (w_bits[b >> 3] >> (b & 7)) & 1 == 1 and (len(w_null) == 0 or not w_null[i])
        if len(k_idx) == 0:
            e = i
        elif len(k_null) == 0 or not k_null[i]:
            e = k_idx[i]
        else:
            kind[r] = 0
            name[r] = -1
            group[r] = -1
            key_ok[r] = False
            continue
        kind[r] = e_kind[e]
        name[r] = e_name[e]
        group[r] = e_group[e]
        key_ok[r] = e_ok[e]


prepare = _jit(_prepare)


def _in_log_order(part: Any, off: Any) -> bool:
    """Whether the rows are in log order: (partition, offset) ascending."""
    for i in range(1, len(part)):
        if part[i] < part[i - 1] or (part[i] == part[i - 1] and off[i] < off[i - 1]):
            return False
    return True


in_log_order = _jit(_in_log_order)


def _keep_rows(order: Any, part: Any, off: Any, inw: Any, positioned: Any, keep: Any, seed: Any) -> Any:
    """The rows to summarise, in log order (`order`, or the rows' own order when `order` is empty):
    those inside the run's window (`inw`), each (partition, offset) once (a positioned row equal to
    the previous in-window one is a repeat, the first one also when it equals `seed`: the position
    the task's previous chunk ended on, (partition, offset, 1), or (0, 0, 0) for none). Fills `keep`;
    returns (kept, in window, repeats)."""
    n = len(order) if len(order) else len(part)
    nk = nw = nd = 0
    have = seed[2] == 1
    pp = seed[0]
    po = seed[1]
    ppos = have
    for i in range(n):
        r = order[i] if len(order) else i
        if not inw[r]:
            continue
        nw += 1
        if have and ppos and positioned[r] and part[r] == pp and off[r] == po:
            nd += 1
            continue
        keep[nk] = r
        nk += 1
        have = True
        pp, po, ppos = part[r], off[r], positioned[r]
    return nk, nw, nd


keep_rows = _jit(_keep_rows)


def _commit_status(keep: Any, kind: Any, key_ok: Any, positioned: Any, v_offsets: Any, v_data: Any,
                   v_null: Any, status: Any, offset: Any, commit_ts: Any, topic_id: Any) -> None:
    """For each record `keep[j]` (log order): `status[j]`, and for commits the committed offset and
    commitTimestamp. A commit is an offset-commit key (`kind` 1, `key_ok`: its names are UTF-8)
    at a known log position with a null value (a tombstone) or a value of version >= 0 whose layout
    is complete: v0/v2 20 + m bytes, v1 28 + m, v3 24 + m, v4+ 23 + varint + m, m the metadata
    length (v4+: a compact length in one or two varint bytes), the metadata UTF-8. A v4+ value whose
    tagged fields are the topic id alone (one tag: 0, 16 bytes, the value's last bytes: what Kafka
    4.1+ writes) is a commit with its id in `topic_id[j]` (two big-endian int64; 0, 0: none, as for
    every other commit); a v4+ value with other tagged fields is `STATUS_CHECK` (the codec decides)."""
    for j in range(len(keep)):
        r = np.uint64(keep[j])  # unsigned: see _be_int64
        status[j] = 0
        if kind[r] != 1 or not key_ok[r] or not positioned[r]:
            continue
        if v_null[r]:
            status[j] = 2
            continue
        s = v_offsets[r]
        vlen = v_offsets[r + np.uint64(1)] - s
        if vlen < 2:
            continue
        ver = be_signed(v_data, s, 2)
        if ver < 0:
            continue
        vl = 0
        if ver <= 2:
            if vlen < 12:
                continue
            m = be_signed(v_data, s + 10, 2)
            need = 28 + m if ver == 1 else 20 + m
            ts_at = 12 + m
        elif ver == 3:
            if vlen < 16:
                continue
            m = be_signed(v_data, s + 14, 2)
            need = 24 + m
            ts_at = 16 + m
        else:
            if vlen < 15:
                continue
            b14 = int(v_data[s + 14])
            if b14 < 128:
                m, vl = b14 - 1, 1
            else:
                if vlen < 16:
                    continue
                b15 = int(v_data[s + 15])
                if b15 >= 128:
                    continue
                m, vl = (b14 - 128) + b15 * 128 - 1, 2
            need = 23 + vl + m
            ts_at = 14 + vl + m
        if m < 0 or vlen < need:
            continue
        if m > 0 and not utf8_valid(v_data, s + ts_at - m, s + ts_at):
            continue
        offset[j] = be_int64(v_data, s + 2)
        commit_ts[j] = be_int64(v_data, s + ts_at)
        topic_id[j, 0] = 0
        topic_id[j, 1] = 0
        if ver < 4 or v_data[s + ts_at + 8] == 0:
            status[j] = 1
        elif (vlen == ts_at + 27 and v_data[s + ts_at + 8] == 1 and v_data[s + ts_at + 9] == 0
              and v_data[s + ts_at + 10] == 16):
            status[j] = 1
            topic_id[j, 0] = be_int64(v_data, s + ts_at + 11)
            topic_id[j, 1] = be_int64(v_data, s + ts_at + 19)
        else:
            status[j] = 3


commit_status = _jit(_commit_status)


# The fields of a stretch's summary, as the kernel keeps an open one per topic-partition (a row of
# `coordinator_audit.udfs.scan.TaskKeys.open`) and returns the closed ones; a row is an open stretch while S_STRETCH >= 0.
# S_FT_* / S_LT_*: the first and the last topic id (two int64 halves; 0, 0: none) among its commits.
(S_STRETCH, S_PART, S_FIRST_SRC, S_LAST_SRC, S_COMMITS, S_TOMBS, S_REGS, S_FC_SRC, S_FC_RTS, S_FC_OFF,
 S_FC_CTS, S_LC_SRC, S_LC_OFF, S_LC_CTS, S_FT_HI, S_FT_LO, S_LT_HI, S_LT_LO) = range(18)
STRETCH_FIELDS = 18


def _summarise(keep: Any, status: Any, kind: Any, name: Any, group: Any, name_group: Any, part: Any,
               off: Any, ts: Any, commit_offset: Any, commit_ts: Any, topic_id: Any, breaks: Any, open_: Any,
               closed: Any, c_name: Any, r_cur: Any, r_name: Any, r_prev: Any) -> Any:
    """Summaries of the commits and tombstones among `keep` (positions j in log order, `status` 1/2):
    one per (topic-partition `name`, Kafka partition, stretch between two records of the name's
    group that the replay reads), with the first and last topic id among its commits (`topic_id`,
    from `commit_status`: what names a consumer group's topics). Those are the side records (`status` 0) of a known group: a
    GroupMetadata record, a commit whose value does not decode (its key's group, `name_group`), a
    record of another type (its key's `group`). A stretch holds none of them, so the replay, which
    takes the stretches among the group's side records in log order, reads the group's records in
    log order. A stretch stays open in `open_` (one row of `STRETCH_FIELDS` per name; its
    values, not positions, so it carries over to the task's next chunk) until a record of its name
    opens the next one; the closed ones are copied to `closed`/`c_name`. `breaks` counts each
    group's side records over the task. Every backwards step inside a stretch is also
    returned as (position j, name, previous commit's offset, commitTimestamp and log offset).
    Returns (closed stretches, regressions). The open row's fields are indexed in place
    (`open_[nm, F]`), never taken as a row view: numba builds a view, reference counts included, at
    every record."""
    nc = 0
    nr = 0
    for j in range(len(keep)):
        r = keep[j]
        st = status[j]
        if st == 0:
            g = name_group[name[r]] if kind[r] == 1 else group[r]
            if g >= 0:
                breaks[g] += 1
            continue
        if st != 1 and st != 2:
            continue
        nm = name[r]
        g = name_group[nm]
        stretch = breaks[g] if g >= 0 else 0
        if open_[nm, S_STRETCH] != stretch or open_[nm, S_PART] != part[r]:
            if open_[nm, S_STRETCH] >= 0:
                for f in range(STRETCH_FIELDS):
                    closed[nc, f] = open_[nm, f]
                c_name[nc] = nm
                nc += 1
            open_[nm, S_STRETCH] = stretch
            open_[nm, S_PART] = part[r]
            open_[nm, S_FIRST_SRC] = off[r]
            open_[nm, S_COMMITS] = 0
            open_[nm, S_TOMBS] = 0
            open_[nm, S_REGS] = 0
            open_[nm, S_FT_HI] = 0
            open_[nm, S_FT_LO] = 0
            open_[nm, S_LT_HI] = 0
            open_[nm, S_LT_LO] = 0
        open_[nm, S_LAST_SRC] = off[r]
        if st == 2:
            open_[nm, S_TOMBS] += 1
            continue
        if open_[nm, S_COMMITS] == 0:
            open_[nm, S_FC_SRC] = off[r]
            open_[nm, S_FC_RTS] = ts[r]
            open_[nm, S_FC_OFF] = commit_offset[j]
            open_[nm, S_FC_CTS] = commit_ts[j]
        elif commit_offset[j] < open_[nm, S_LC_OFF]:
            open_[nm, S_REGS] += 1
            r_cur[nr] = j
            r_name[nr] = nm
            r_prev[nr, 0] = open_[nm, S_LC_OFF]
            r_prev[nr, 1] = open_[nm, S_LC_CTS]
            r_prev[nr, 2] = open_[nm, S_LC_SRC]
            nr += 1
        if topic_id[j, 0] != 0 or topic_id[j, 1] != 0:
            if open_[nm, S_FT_HI] == 0 and open_[nm, S_FT_LO] == 0:
                open_[nm, S_FT_HI] = topic_id[j, 0]
                open_[nm, S_FT_LO] = topic_id[j, 1]
            open_[nm, S_LT_HI] = topic_id[j, 0]
            open_[nm, S_LT_LO] = topic_id[j, 1]
        open_[nm, S_COMMITS] += 1
        open_[nm, S_LC_SRC] = off[r]
        open_[nm, S_LC_OFF] = commit_offset[j]
        open_[nm, S_LC_CTS] = commit_ts[j]
    return nc, nr


summarise = _jit(_summarise)


def _open_partitions(open_: Any, n: int) -> Any:
    """The distinct Kafka partitions (S_PART, in no particular order) of the rows of `open_[:n]`
    holding an open stretch: one pass over the rows, in which interning left runs of one partition."""
    seen = set()
    last = np.int64(-1)
    have = False
    for i in range(n):
        if open_[i, S_STRETCH] < 0:
            continue
        p = open_[i, S_PART]
        if have and p == last:
            continue
        have = True
        last = p
        seen.add(p)
    out = np.empty(len(seen), dtype=np.int64)
    for k, p in enumerate(seen):
        out[k] = p
    return out


open_partitions = _jit(_open_partitions)
