"""Idle groups in a nightly run: what a window costs when most of the groups it carries read no record.

    .venv/bin/python -m benchmarks.bench_idle                   # active shares 0.1 and 1
    .venv/bin/python -m benchmarks.bench_idle --active 0.05,0.5,1 --repeats 3

A nightly audit carries every group it has seen (Kafka keeps a group's committed offsets for days
after its consumers stop: `offsets.retention.minutes`, 7 days by default), while a night's records
come from the groups that ran. The input is the main benchmark's scale-mode input (5M records,
1,250 groups by default) cut in two windows at its median record time. The first window holds
every group's records; the second only those of the active groups (the first `share` of the
groups in name order). Each share gets a copy of the input without the other groups' records after
the cut (each partition's offsets numbered again without holes, as if those groups had written
nothing), written once under the work dir.

Each repeat audits both windows into a fresh output (one session, warmed by the first repeat) and
times the second window: the figure per share is the median of the second window's seconds, its
replay stage's seconds, the records it audited and the groups it carried without records. Compare
shares within one run: the difference between a share and `1` divided by the idle groups is what an
idle group costs a run.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from benchmarks.bench_nightly import audit_window, chain_arguments, window_bounds
from benchmarks.harness import DEFAULT_DRIVER_MEMORY, ensure_input, scale_config
from benchmarks.measures import stage_seconds
from coordinator_audit.jobs.spark_session import build_session


def _key_groups(keys: pa.Array) -> pa.Array:
    """The group id of each `__consumer_offsets` key (every key type starts with a version and the
    group string: an int16 length and its UTF-8), read once per distinct key."""
    encoded = pc.dictionary_encode(keys)
    names = [int.from_bytes(k[2:4], "big", signed=True) for k in encoded.dictionary.to_pylist()]
    groups = [k[4:4 + n].decode("utf-8") if n >= 0 else None
              for k, n in zip(encoded.dictionary.to_pylist(), names, strict=True)]
    return pa.array(groups, pa.string()).take(encoded.indices)


def write_input(source: Path, target: Path, *, cut_ms: int, share: float, files: int = 8) -> tuple[int, int]:
    """`source` without the records of the inactive groups at or after `cut_ms`, into `target`
    (`files` Parquet files); (active groups, groups). Each partition's offsets are numbered again
    without holes, as in a log those groups never wrote to: a hole would be offsets never read,
    which the job reports as a `history_gap` on every group of the partition."""
    table = ds.dataset(str(source), format="parquet").to_table()
    groups = _key_groups(table.column("key").combine_chunks())
    everyone = sorted(set(pc.unique(groups).to_pylist()) - {None})
    active = pa.array(everyone[:max(1, round(share * len(everyone)))], pa.string())
    ts = pc.cast(pc.cast(table.column("timestamp"), pa.timestamp("ms", "UTC"), safe=False), pa.int64())
    table = table.filter(pc.or_(pc.less(ts, cut_ms), pc.is_in(groups, active)))
    table = table.sort_by([("partition", "ascending"), ("offset", "ascending")])
    partition = table.column("partition").to_numpy()
    offset = table.column("offset").to_numpy()
    starts = np.flatnonzero(np.concatenate([[True], partition[1:] != partition[:-1]]))
    rank = np.arange(len(offset)) - np.repeat(starts, np.diff(np.append(starts, len(offset))))
    renumbered = np.repeat(offset[starts], np.diff(np.append(starts, len(offset)))) + rank
    table = table.set_column(table.schema.get_field_index("offset"), "offset",
                             pa.array(renumbered, table.schema.field("offset").type))
    target.mkdir(parents=True)
    step = -(-table.num_rows // files)
    for i in range(files):
        pq.write_table(table.slice(i * step, step), target / f"part-{i:05d}.parquet")
    return len(active), len(everyone)


def main(argv: list[str] | None = None) -> int:
    p = chain_arguments("python -m benchmarks.bench_idle", __doc__)
    p.add_argument("--active", default="0.1,1", help="shares of groups with records in the second window (default 0.1,1)")
    p.add_argument("--repeats", type=int, default=3, help="chains per share (default 3; the first also warms up)")
    args = p.parse_args(argv)
    shares = [float(s) for s in args.active.split(",")]
    if not shares or any(not 0 < s <= 1 for s in shares):
        p.error("--active: shares in (0, 1], comma-separated")
    if args.repeats < 1:
        p.error("--repeats must be at least 1")

    source, _ = ensure_input(scale_config(args.records, args.groups, args.seed), args.cache_dir)
    (first, _), (cut, last) = window_bounds(source, 2)
    work = Path(tempfile.mkdtemp(prefix="bench-idle-", dir=args.work_dir))
    spark = build_session(master=args.master, conf={"spark.driver.memory": DEFAULT_DRIVER_MEMORY})
    spark.sparkContext.setLogLevel("ERROR")
    figures: dict[str, Any] = {}
    try:
        inputs = {}
        for share in shares:
            inputs[share] = (work / f"input-{share}", *write_input(source, work / f"input-{share}",
                                                                   cut_ms=int(cut.timestamp() * 1000), share=share))
            print(f"input for share {share}: {inputs[share][1]:,} of {inputs[share][2]:,} groups active after "
                  f"{cut.isoformat()}", flush=True)
        runs: dict[float, list[dict[str, Any]]] = {s: [] for s in shares}
        for repeat in range(args.repeats):
            for share in shares:  # alternating shares: a drift of the machine's load touches each alike
                path, active, groups = inputs[share]
                out = work / f"out-{share}-{repeat}"
                audit_window(spark, path, out, first, cut)
                summary, seconds, stages = audit_window(spark, path, out, cut, last)
                replay = stage_seconds(stages).get("replay")
                records = summary.counts.get("records_in", 0) - summary.counts.get("filtered_by_window", 0)
                runs[share].append({"seconds": round(seconds, 3), "replay_s": replay, "records": records,
                                    "idle_groups": groups - active})
                print(f"repeat {repeat} share {share}: second window {seconds:.2f} s (replay stage "
                      f"{replay} s), {records:,} records, {groups - active:,} idle groups", flush=True)
                shutil.rmtree(out, ignore_errors=True)
        for share, rows in runs.items():
            kept = rows[1:] or rows  # the first repeat warms the session up
            figures[str(share)] = {"second_window_s": float(np.median([r["seconds"] for r in kept])),
                                   "replay_stage_s": float(np.median([r["replay_s"] or 0 for r in kept])),
                                   "records": rows[0]["records"], "idle_groups": rows[0]["idle_groups"]}
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(figures, indent=1))
    if args.json is not None:
        args.json.write_text(json.dumps({"figures": figures}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
