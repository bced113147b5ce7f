"""Offset path benchmark: bare scan vs the offset path (the single pass and the replay that merges its stretches) vs alternatives (prints a table).

    .venv/bin/python benchmarks/bench_offsets.py --records 10000000

Input: N synthetic `__consumer_offsets` records in Parquet (Kafka-source schema, cached under
/tmp keyed by the parameters): offset commits (28-byte type-1 keys, 24-byte v3 values) for
`--groups` groups x 10 partitions, in log order per `__consumer_offsets` partition, plus one
GroupMetadata record (built with the codec's `encode`) at the start of each group, so every
commit falls in a Stable window. Each measurement forces full execution (`noop` sink or an
aggregate), best of `--repeat`; the bare scan is measured first and last (the machine may be
shared: compare the two).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coordinator_audit.core.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    encode,
    partition_for,
)


def generate(path: Path, n: int, groups: int, seed: int = 1) -> None:
    rng = np.random.default_rng(seed)
    kpg = 10
    names = [f"grp-{i:05d}" for i in range(groups)]
    gpart = np.array([partition_for(g) for g in names])
    keys = np.zeros((groups * kpg, 28), np.uint8)
    for gi, g in enumerate(names):
        for j in range(kpg):
            k = (b"\x00\x01" + len(g).to_bytes(2, "big") + g.encode() + (9).to_bytes(2, "big")
                 + f"tp-{gi % 300:06d}".encode() + j.to_bytes(4, "big"))
            keys[gi * kpg + j] = np.frombuffer(k, np.uint8)
    kidx = rng.integers(0, groups * kpg, n)
    part = gpart[kidx // kpg].astype(np.int32)
    order = np.argsort(part, kind="stable")
    kidx, part = kidx[order], part[order]
    counts = np.bincount(part, minlength=50)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    offs = np.arange(n) - np.repeat(starts, counts) + groups  # room for the GroupMetadata records
    ts = 1_700_000_000_000 + np.arange(n) // 10
    vals = np.zeros((n, 24), np.uint8)
    vals[:, 1] = 3
    vals[:, 2:10] = (np.arange(n) * 3 + kidx).astype(">i8").view(np.uint8).reshape(n, 8)
    vals[:, 10:14] = np.full(n, 5, ">i4").view(np.uint8).reshape(n, 4)
    vals[:, 16:24] = ts.astype(">i8").view(np.uint8).reshape(n, 8)

    def binarr(flat: np.ndarray, width: int, rows: int) -> pa.Array:
        offsets = pa.py_buffer((np.arange(rows + 1, dtype=np.int32) * width).tobytes())
        return pa.Array.from_buffers(pa.binary(), rows, [None, offsets, pa.py_buffer(flat.tobytes())])

    commits = pa.table({
        "key": binarr(keys[kidx].reshape(-1), 28, n), "value": binarr(vals.reshape(-1), 24, n),
        "topic": pa.array(["__consumer_offsets"] * n), "partition": pa.array(part),
        "offset": pa.array(offs.astype(np.int64)),
        "timestamp": pa.array(ts).cast(pa.timestamp("ms", tz="UTC")),
    })
    gm_rows = {"key": [], "value": [], "partition": [], "offset": []}
    next_off = np.zeros(50, np.int64)
    for gi, g in enumerate(names):
        member = MemberMetadata("m-1", None, "c", "/h", 300000, 45000, b"", b"")
        rec = CoordinatorRecord.of(GroupMetadataKey(g), GroupMetadataValue("consumer", 1, "range", "m-1",
                                                                           1_700_000_000_000, (member,)))
        k, v = encode(rec)
        p = int(gpart[gi])
        gm_rows["key"].append(k)
        gm_rows["value"].append(v)
        gm_rows["partition"].append(p)
        gm_rows["offset"].append(int(next_off[p]))
        next_off[p] += 1
    m = len(names)
    gms = pa.table({"key": pa.array(gm_rows["key"], pa.binary()), "value": pa.array(gm_rows["value"], pa.binary()),
                    "topic": pa.array(["__consumer_offsets"] * m), "partition": pa.array(gm_rows["partition"], pa.int32()),
                    "offset": pa.array(gm_rows["offset"], pa.int64()),
                    "timestamp": pa.array([1_700_000_000_000] * m).cast(pa.timestamp("ms", tz="UTC"))})
    pq.write_table(pa.concat_tables([gms, commits]), path, row_group_size=1_000_000)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--groups", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args(argv)

    path = Path(f"/tmp/coordinator-audit-bench/offsets-{args.records}-{args.groups}.parquet")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        generate(path, args.records, args.groups)
        print(f"generated {path} in {time.perf_counter() - t0:.1f} s", flush=True)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import functions as F

    from coordinator_audit.jobs import offsets_path as op
    from coordinator_audit.jobs.spark_session import build_session

    spark = build_session(master=args.master, conf={"spark.driver.memory": "4g"})
    spark.sparkContext.setLogLevel("ERROR")
    raw = spark.read.parquet(str(path))

    def bare() -> None:
        raw.agg(F.count(F.lit(1)), F.sum(F.length("key") + F.length("value"))).collect()

    def conv_offset() -> None:
        raw.agg(F.max(F.expr("cast(conv(hex(substring(value, 3, 8)), 16, -10) as bigint)"))).collect()

    def offset_path() -> None:
        oc, violations, scan = op.offset_path(raw)
        oc.write.format("noop").mode("overwrite").save()
        violations.write.format("noop").mode("overwrite").save()
        scan.unpersist()

    def scan_only() -> None:
        op.scan_log(raw).unpersist()

    def arrow_transfer() -> None:
        # the floor of any Python-side pass: key and value bytes moved to Python workers as Arrow
        # batches, each batch only counted there
        import pyarrow as pa

        def count(batches):
            n = 0
            for b in batches:
                n += b.num_rows
            yield pa.RecordBatch.from_pydict({"n": [n]})

        raw.select("key", "value", "partition", "offset", F.unix_millis("timestamp").alias("ts")) \
            .mapInArrow(count, "n long").agg(F.sum("n")).collect()

    def unordered_summary() -> None:
        # what the summary costs without ordering (no windows, no first/last, no regressions): the floor
        # of any design that keeps commits off a sort
        c = raw.where(F.substring("key", 1, 2).isin(b"\x00\x00", b"\x00\x01"))
        c.groupBy(F.expr("substring(key, 3)")).agg(F.count(F.lit(1)), F.min("offset"), F.max("offset")) \
            .write.format("noop").mode("overwrite").save()

    def timed(fn) -> float:
        best = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        return best

    results: list[tuple[str, float]] = [("bare scan (first)", timed(bare))]
    for name, fn in [("conv offset decode (anchor)", conv_offset),
                     ("unordered summary (no windows/regressions)", unordered_summary),
                     ("Arrow transfer to Python (count only)", arrow_transfer),
                     ("the single pass alone (scan_log)", scan_only),
                     ("offset path (both outputs, exact)", offset_path)]:
        results.append((name, timed(fn)))
    results.append(("bare scan (last)", timed(bare)))
    base = min(results[0][1], results[-1][1])
    n = raw.count()
    print(f"\n{n:,} records, {args.master}, best of {args.repeat}; ratio = time / best bare scan")
    print(f"{'measure':46s} {'seconds':>8s} {'x bare':>7s}")
    for name, secs in results:
        print(f"{name:46s} {secs:8.2f} {secs / base:7.2f}")


if __name__ == "__main__":
    main()
