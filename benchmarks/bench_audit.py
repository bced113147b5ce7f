"""Throughput and memory of the pure-Python audit (coordinator_audit.core.audit); prints figures, asserts nothing.

Run from the project root: `.venv/bin/python benchmarks/bench_audit.py [--commits N] [--groups M] [--big N]
[--baseline DIR]`.

* offset commits: one group, one GroupMetadata record, then N OffsetCommitValue v3 records over 64
  partitions (offsets rising, one regression-free stream), pre-built in memory; records/s of `feed`.
* GroupMetadata: M records of one group, each a new generation of a steady cooperative group (3
  members over 6 or 48 partitions, 10 over 40, 20 over 120, 50 over 200; v3 subscriptions whose
  GenerationId changes every generation, with owned partitions; v3 assignments); records/s of
  `feed`, with and without the coordinator's load-path replay. Every row is built (6 to 200
  assignment rows per record, one generation row, one cause row).
* memory: a single group with 5,000,000 commit records streamed from a generator (the input is
  never held), peak RSS of this process (includes the interpreter and imports).

Rates are records per second of this process's CPU time ("per core"): the figure that holds on a
shared machine, where wall time also counts other processes. `--baseline DIR` (a directory holding
another version's `coordinator_audit.core`, e.g. `git archive <commit> coordinator_audit.core | tar -x -C DIR`)
also runs the GroupMetadata shapes on that version, in subprocesses alternating with this one on
the same pre-built records, and prints the ratio: before/after figures measured in one run.
"""

from __future__ import annotations

import argparse
import collections
import pickle
import resource
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from coordinator_audit.core.audit import GroupAuditor  # noqa: E402 (after the sys.path line)
from coordinator_audit.core.records import CoordinatorRecord, OffsetCommitKey, OffsetCommitValue, encode  # noqa: E402
from coordinator_audit.core.sim.builders import LogBuilder, member, tps  # noqa: E402

GROUP = "bench-group"
PARTITIONS = 64
SHAPES = ((3, 6), (3, 48), (10, 40), (20, 120), (50, 200))
"""(members, partitions) of the GroupMetadata runs."""

Records = list[tuple[int, int, int, bytes, bytes | None]]


def _commit_value(offset: int, ts: int) -> bytes:
    # OffsetCommitValue v3 (OffsetCommitValue.json): version, offset, leader epoch, metadata "", commit timestamp
    return struct.pack(">hqihq", 3, offset, 0, 0, ts)


def _keys() -> list[bytes]:
    return [encode(CoordinatorRecord.of(OffsetCommitKey(GROUP, "orders", p), OffsetCommitValue(0, 0, "", 0)))[0]
            for p in range(PARTITIONS)]


def _head() -> Records:
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
    t0 = time.process_time()
    collections.deque(auditor.feed(records), maxlen=0)
    elapsed = time.process_time() - t0
    assert auditor.counts.offset_commits == n, auditor.counts
    return n / elapsed


def _group_log(m: int, members: int, partitions: int) -> Records:
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


def _time_feed(records: Records, *, load_path: bool, repeat: int) -> float:
    """Best records/s (CPU time) of `repeat` fresh audits of `records`."""
    best = 0.0
    for _ in range(repeat):
        auditor = GroupAuditor(load_path=load_path)
        t0 = time.process_time()
        collections.deque(auditor.feed(records), maxlen=0)
        elapsed = time.process_time() - t0
        assert auditor.counts.group_records == len(records), auditor.counts
        best = max(best, len(records) / elapsed)
    return best


_CHILD = """
import collections, pickle, sys, time
sys.path.insert(0, {tree!r})
from coordinator_audit.core.audit import GroupAuditor  # noqa: E402 (after the sys.path line)
records = pickle.load(open({path!r}, "rb"))
best = 0.0
for _ in range({repeat}):
    auditor = GroupAuditor(load_path={load_path})
    t0 = time.process_time()
    collections.deque(auditor.feed(records), maxlen=0)
    best = max(best, len(records) / (time.process_time() - t0))
print(best)
"""


def _time_in(tree: Path, path: Path, *, load_path: bool, repeat: int) -> float:
    code = _CHILD.format(tree=str(tree), path=str(path), repeat=repeat, load_path=load_path)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tree, check=True)
    return float(out.stdout)


def bench_memory(n: int) -> tuple[float, float]:
    auditor = GroupAuditor()
    head = _head()
    t0 = time.process_time()
    collections.deque(auditor.feed(head), maxlen=0)
    collections.deque(auditor.feed(_commit_stream(n, len(head))), maxlen=0)
    rows = auditor.finish()
    elapsed = time.process_time() - t0
    assert auditor.counts.offset_commits == n and len(rows) > 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, n / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", type=int, default=1_000_000, help="offset-commit records for the throughput run")
    ap.add_argument("--groups", type=int, default=10_000,
                    help="GroupMetadata records per shape (a tenth of it for shapes of 20+ members)")
    ap.add_argument("--big", type=int, default=5_000_000, help="commit records of the single-group memory run")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure (the best is printed)")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="a directory with another version's coordinator_audit.core to compare with, in the same run")
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, one core; records/s of CPU time")
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    mem, big_rate = bench_memory(args.big)
    print(f"memory: single group, {args.big:,} commit records streamed: peak RSS {mem:,.0f} MiB "
          f"(process baseline before the run {rss0:,.0f} MiB), {big_rate:,.0f} records/s")
    best = max(bench_commits(args.commits) for _ in range(args.repeat))
    print(f"offset commits: {best:,.0f} records/s ({args.commits:,} records, best of {args.repeat})")
    with tempfile.TemporaryDirectory() as tmp:
        for members, partitions in SHAPES:
            m = args.groups if members < 20 else max(args.groups // 10, 1)
            records = _group_log(m, members, partitions)
            path = Path(tmp) / f"log-{members}-{partitions}.pickle"
            path.write_bytes(pickle.dumps(records))
            for load_path in (True, False):
                rate = _time_feed(records, load_path=load_path, repeat=args.repeat)
                line = (f"GroupMetadata: {rate:9,.0f} records/s ({m:,} records, {members:2d} members, "
                        f"{partitions:3d} partitions, coordinator load path {'on ' if load_path else 'off'}, "
                        f"best of {args.repeat})")
                if args.baseline is not None:
                    before = again = 0.0
                    for _ in range(args.repeat):  # alternate, so both see the same machine load
                        before = max(before, _time_in(args.baseline, path, load_path=load_path, repeat=1))
                        again = max(again, _time_in(ROOT, path, load_path=load_path, repeat=1))
                    line += f"; baseline {before:9,.0f}/s, this tree {again:9,.0f}/s: x{again / before:.2f}"
                print(line, flush=True)


if __name__ == "__main__":
    main()
