"""Throughput of the offset-commit fast path and of the generic decoder (run by hand, not by pytest):

    .venv/bin/python benchmarks/bench_codec.py [--records N]

Decodes the offset-commit records of the real broker sample (repeated to N records) in one
process on one core and prints records/s for: the fast-path field functions, `decode` (builds the
dataclasses, also fast-path backed), and `decode` + `encode` round trips.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pyarrow.parquet as pq

from coordinator_audit.core.records import (
    decode,
    encode,
    offset_commit_key_fields,
    offset_commit_value_fields,
)

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "samples" / "real_broker_3_9_0.parquet"


def _timed(label: str, n: int, fn) -> None:
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    print(f"{label:<48} {n / best:>12,.0f} records/s  ({best * 1e6 / n:.2f} µs/record, best of 3)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    args = parser.parse_args()
    rows = pq.read_table(SAMPLE, columns=["key", "value"]).to_pylist()
    pairs = [(r["key"], r["value"]) for r in rows if r["key"][:2] in (b"\x00\x00", b"\x00\x01")
             and r["value"] is not None]
    pairs = (pairs * (args.records // len(pairs) + 1))[: args.records]
    keys = [k for k, _ in pairs]
    values = [v for _, v in pairs]
    n = len(pairs)
    print(f"{n:,} offset-commit records (value versions: {sorted({v[:2].hex() for v in values})})")

    def fast() -> None:
        for k, v in pairs:
            offset_commit_key_fields(k)
            offset_commit_value_fields(v)

    def full() -> None:
        for k, v in pairs:
            decode(k, v)

    def round_trip() -> None:
        for k, v in pairs:
            encode(decode(k, v))

    _timed("fast path: key fields + value fields", n, fast)
    _timed("decode(key, value) -> CoordinatorRecord", n, full)
    _timed("encode(decode(key, value))", n, round_trip)
    del keys, values


if __name__ == "__main__":
    main()
