"""Throughput and memory of the pure-Python audit (coordinator_core.audit); prints figures, asserts nothing.

Run from the project root: `.venv/bin/python benchmarks/bench_audit.py [--commits N] [--big N]`.

* offset commits: one group, one GroupMetadata record, then N OffsetCommitValue v3 records over 64
  partitions (offsets rising, one regression-free stream), pre-built in memory; records/s of `feed`.
* GroupMetadata: M records of one group, each a new generation of a steady cooperative group (3
  members over 6 or 48 partitions, 20 members over 120; v3 subscriptions with owned partitions, v3
  assignments); records/s of `feed`, with and without the coordinator's load-path replay.
* memory: a single group with 5,000,000 commit records streamed from a generator (the input is
  never held), peak RSS of this process (includes the interpreter and imports).
"""

from __future__ import annotations

import argparse
import collections
import resource
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coordinator_core.audit import GroupAuditor
from coordinator_core.records import CoordinatorRecord, OffsetCommitKey, OffsetCommitValue, encode
from tests.core.audit.audit_builders import LogBuilder, member, tps

GROUP = "bench-group"
PARTITIONS = 64


def _commit_value(offset: int, ts: int) -> bytes:
    # OffsetCommitValue v3 (spec §7.3): version, offset, leader epoch, metadata "", commit timestamp
    return struct.pack(">hqihq", 3, offset, 0, 0, ts)


def _keys() -> list[bytes]:
    return [encode(CoordinatorRecord.of(OffsetCommitKey(GROUP, "orders", p), OffsetCommitValue(0, 0, "", 0)))[0]
            for p in range(PARTITIONS)]


def _head() -> list[tuple[int, int, int, bytes, bytes | None]]:
    log = LogBuilder(GROUP, partition=3)
    ms = [member(f"m{i}", tps("orders", *range(i, PARTITIONS, 3)), topics=("orders",)) for i in range(3)]
    log.group(1, ms)
    return log.records


def _commit_stream(n: int, start_offset: int):
    keys = _keys()
    check = _commit_value(0, 0)
    assert encode(CoordinatorRecord.of(OffsetCommitKey(GROUP, "orders", 0), OffsetCommitValue(0, 0, "", 0)))[1] == check
    ts = 1_700_000_000_000
    for i in range(n):
        p = i % PARTITIONS
        yield (3, start_offset + i, ts + i, keys[p], _commit_value(i // PARTITIONS, ts + i))


def bench_commits(n: int) -> float:
    head = _head()
    records = head + list(_commit_stream(n, len(head)))
    auditor = GroupAuditor()
    t0 = time.perf_counter()
    collections.deque(auditor.feed(records), maxlen=0)
    elapsed = time.perf_counter() - t0
    assert auditor.counts.offset_commits == n, auditor.counts
    return n / elapsed


def _group_log(m: int, members: int, partitions: int) -> list[tuple[int, int, int, bytes, bytes | None]]:
    """m generations of a steady cooperative group: each member keeps its partitions and reports
    them as owned (the common record: a rebalance that moves nothing), generation ids rising."""
    log = LogBuilder(GROUP, partition=3)
    for gen in range(1, m + 1):
        ms = []
        for i in range(members):
            mine = tps("orders", *range(i, partitions, members))
            ms.append(member(f"consumer-{i}-0b7c2f6e-1d2a-4f7e-9a51-{i:012d}", mine, topics=("orders",),
                             owned=mine if gen > 1 else (), generation_id=gen - 1, sub_version=3))
        log.group(gen, ms, protocol="cooperative-sticky")
    return log.records


def bench_group_records(m: int, members: int, partitions: int, *, load_path: bool) -> float:
    records = _group_log(m, members, partitions)
    auditor = GroupAuditor(load_path=load_path)
    t0 = time.perf_counter()
    collections.deque(auditor.feed(records), maxlen=0)
    elapsed = time.perf_counter() - t0
    assert auditor.counts.group_records == m, auditor.counts
    return m / elapsed


def bench_memory(n: int) -> tuple[float, float]:
    auditor = GroupAuditor()
    head = _head()
    t0 = time.perf_counter()
    collections.deque(auditor.feed(head), maxlen=0)
    collections.deque(auditor.feed(_commit_stream(n, len(head))), maxlen=0)
    rows = auditor.finish()
    elapsed = time.perf_counter() - t0
    assert auditor.counts.offset_commits == n and len(rows) > 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, n / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", type=int, default=1_000_000, help="offset-commit records for the throughput run")
    ap.add_argument("--groups", type=int, default=20_000, help="GroupMetadata records for the throughput run")
    ap.add_argument("--big", type=int, default=5_000_000, help="commit records of the single-group memory run")
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, one core")
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    mem, big_rate = bench_memory(args.big)
    print(f"memory: single group, {args.big:,} commit records streamed: peak RSS {mem:,.0f} MiB "
          f"(process baseline before the run {rss0:,.0f} MiB), {big_rate:,.0f} records/s")
    best = max(bench_commits(args.commits) for _ in range(3))
    print(f"offset commits: {best:,.0f} records/s ({args.commits:,} records, best of 3)")
    for members, partitions in ((3, 6), (3, 48), (20, 120)):
        for load_path in (True, False):
            rate = max(bench_group_records(args.groups, members, partitions, load_path=load_path) for _ in range(3))
            print(f"GroupMetadata: {rate:,.0f} records/s ({args.groups:,} records, {members} members, "
                  f"{partitions} partitions, coordinator load path {'on' if load_path else 'off'}, best of 3)")


if __name__ == "__main__":
    main()
