"""Scale-mode throughput: records/s of the simulator's scale mode, one process and `--workers` processes.

    .venv/bin/python benchmarks/bench_sim.py --records 20000000 --groups 5000 --workers 2

Prints the time spent on group metadata (real coordinator) versus offset commits (fast path), and the
records/s of the whole run when written as Parquet (tools.make_samples.write_scale).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coordinator_audit.core.sim.runner import run_scenario
from coordinator_audit.core.sim.scale import ScaleConfig, generate, metadata_scenario, plan_groups
from tools.make_samples import write_scale


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=20_000_000)
    ap.add_argument("--groups", type=int, default=5000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    config = ScaleConfig(records=args.records, groups=args.groups, seed=args.seed)
    plans = plan_groups(config)

    sample = plans[: max(1, len(plans) // 20)]
    t = time.perf_counter()
    meta_records = sum(len(run_scenario(metadata_scenario(p, config)).full_records) for p in sample)
    meta_s = time.perf_counter() - t
    print(f"group metadata via the coordinator: {len(sample)} groups in {meta_s:.2f} s "
          f"({len(sample) / meta_s:.0f} groups/s, {meta_records} records)")

    one = plans[: max(1, len(plans) // 10)]
    parts = sorted({p.partition for p in one})
    t = time.perf_counter()
    rows = sum(len(b) for b in generate(config, partitions=parts, plans=one))
    gen_s = time.perf_counter() - t
    print(f"generate() in memory, 1 process, {len(one)} groups: {rows:,} records in {gen_s:.2f} s "
          f"= {rows / gen_s:,.0f} records/s")

    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        counts = write_scale(config, Path(d), workers=args.workers)
        total_s = time.perf_counter() - t
        total = sum(counts.values())
        size = sum(f.stat().st_size for f in Path(d).iterdir())
    print(f"scale run to Parquet, {args.workers} workers: {total:,} records, {args.groups} groups in {total_s:.1f} s "
          f"= {total / total_s:,.0f} records/s ({size / 1e6:.0f} MB)")


if __name__ == "__main__":
    main()
