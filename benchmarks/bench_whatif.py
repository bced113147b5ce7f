"""The what-if sweep against the audit of the same groups, no Spark: on one core, and with a pool of workers.

    .venv/bin/python benchmarks/bench_whatif.py --groups 300      # also `python -m benchmarks` (measurement `whatif`)

Input: `--groups` random simulated groups (`coordinator_audit.core.sim.randomized.random_scenario`,
seeds `--seed` * 1,000,000 + i, those the simulator runs: 2-5 consumers, one assignor family, dynamic or static, living through
2-4 membership events each: crashes, closes, restarts, scale-outs, rejoins, subscription changes;
about two minutes of group life). Their logs are made first and not timed.

Measured, each the best of `--repeat` passes over all groups:

* audit: `coordinator_audit.core.audit.audit_group` over each group's records (the pure-Python audit),
  CPU seconds of this process (`time.process_time`, so that other work on the machine does not count);
* sweep, one process: what `coordinator-audit whatif --sweep` does per group
  (`coordinator_audit.jobs.whatif.sweep_groups` over the audit's rows, without the Delta reads and
  write): the history fitted to the actual configuration (`fit`), then the eight configurations
  (four assignors x static membership off and on; the one equal to the actual is not replayed
  again); CPU seconds as for the audit;
* sweep with `--workers` processes (default: one per core): the same call with its process pool,
  wall seconds (the workers' start included), and the CPU seconds of this process and its workers
  (what the pool costs, whatever else runs on the machine); its outcomes are checked equal to the
  one process's.

Printed: the times per group and in total, the sweep over the audit on one core each, the pool's
wall time over the audit's time on one core, the share of groups the actual configuration
reproduces in every generation, and the times for 5,000 such groups at the measured rates.

With `--product-groups N` (`python -m benchmarks`: 5,000), the product's two commands as a user
runs them, on N such groups (the same seeds, the first `--groups` of them those above): their logs
in one Kafka-source Parquet input (each `__consumer_offsets` partition's records in time order,
offsets renumbered), then `coordinator-audit run --input ... --output ...` (the audit, with its
Spark session's start and the Delta writes) and `coordinator-audit whatif --tables ... --sweep`
(with its default pool of workers, reading those tables and writing the `whatif` table), each a
fresh process timed on the wall clock; printed: both, and the sweep over the audit.
"""

from __future__ import annotations

import argparse
import heapq
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coordinator_audit.core.audit import (
    AssignmentRow,
    AuditRow,
    GenerationRow,
    OffsetCommitRow,
    RebalanceCauseRow,
    audit_group,
)
from coordinator_audit.core.errors import ScenarioError
from coordinator_audit.core.sim.randomized import random_scenario
from coordinator_audit.core.sim.runner import run_scenario
from coordinator_audit.jobs import whatif

Raw = tuple[int, int, int, Any, Any]


def make_groups(groups: int, seed: int) -> list[tuple[str, list[Raw]]]:
    """(group id, records in log order) of `groups` random simulated groups (a drawn scenario the
    simulator refuses, e.g. a restart that overlaps the next start of the same consumer, is left out
    and the next seed drawn)."""
    out = []
    i = 0
    while len(out) < groups:
        try:
            run = run_scenario(random_scenario(seed * 1_000_000 + i))
        except ScenarioError:
            continue
        finally:
            i += 1
        out.append((run.scenario.group, [(r.partition, r.offset, r.timestamp_ms, r.key, r.value) for r in run.records]))
    return out


def write_input(groups: list[tuple[str, list[Raw]]], directory: Path) -> int:
    """The groups' records as one Kafka-source Parquet file in `directory`: per `__consumer_offsets`
    partition, the groups' records merged in time order (each group's in its log order) and numbered
    from 0 (each simulated group's log starts at offset 0). Returns the record count."""
    from tools.make_samples import parquet_bytes, to_table

    by_partition: dict[int, list[list[Raw]]] = {}
    for _, records in groups:
        by_partition.setdefault(records[0][0], []).append(records)
    cols: tuple[list[Any], ...] = ([], [], [], [], [])
    for partition in sorted(by_partition):
        streams = [[((r[2], i, j), r) for j, r in enumerate(recs)] for i, recs in enumerate(by_partition[partition])]
        merged = heapq.merge(*streams)
        for offset, (_, r) in enumerate(merged):
            for col, v in zip(cols, (partition, offset, r[2], r[3], r[4]), strict=True):
                col.append(v)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "records.parquet").write_bytes(parquet_bytes(to_table(*cols)))
    return len(cols[0])


def _timed_command(argv: list[str], log: Path) -> float:
    """Wall seconds of `python -m coordinator_audit <argv>` in a fresh process (its output to `log`)."""
    t = time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run([sys.executable, "-m", "coordinator_audit", *argv], stdout=out,
                              stderr=subprocess.STDOUT, cwd=Path(__file__).resolve().parents[1], check=False)
    wall = time.perf_counter() - t
    if done.returncode != 0:
        raise RuntimeError(f"coordinator-audit {argv[0]} exited {done.returncode}; its output: {log}")
    return wall


def measure_product(made: list[tuple[str, list[Raw]]], workers: int) -> dict[str, Any]:
    """The product's audit and sweep of the groups `made`, each command timed as a user runs it
    (module docstring)."""
    with tempfile.TemporaryDirectory(prefix="bench-whatif-") as tmp:
        work = Path(tmp)
        records = write_input(made, work / "input")
        audit = _timed_command(["run", "--input", str(work / "input"), "--output", str(work / "out")],
                               work / "run.log")
        sweep = _timed_command(["whatif", "--tables", str(work / "out"), "--sweep", "--workers", str(workers)],
                               work / "whatif.log")
        text = (work / "whatif.log").read_text()
    total = next((line for line in text.splitlines() if line.startswith("total over ")), "")
    return {"product_groups": len(made), "product_records": records, "product_workers": workers,
            "product_audit_wall_seconds": audit, "product_sweep_wall_seconds": sweep,
            "product_sweep_over_audit": sweep / audit, "product_total_line": total}


def _audit(groups: list[tuple[str, list[Raw]]]) -> list[list[AuditRow]]:
    return [list(audit_group(records, group_id=group)) for group, records in groups]


def _sweep(groups: list[tuple[str, list[Raw]]], audits: list[list[AuditRow]], workers: int
           ) -> list[whatif.GroupOutcome]:
    """Each group's what-if as `coordinator-audit whatif --sweep` computes it, with `workers` processes."""
    args = whatif.parse_args(["--tables", "(in memory)", "--sweep", "--no-write"])
    inputs = [whatif.GroupInput(group, [r for r in rows if isinstance(r, GenerationRow)],
                                [r for r in rows if isinstance(r, AssignmentRow)],
                                [r for r in rows if isinstance(r, OffsetCommitRow)],
                                [r for r in rows if isinstance(r, RebalanceCauseRow)])
              for (group, _), rows in zip(groups, audits, strict=True)]
    return list(whatif.sweep_groups(inputs, "(in memory)", args, whatif.configurations(args), 0, workers=workers))


def _best(fn: Any, repeat: int) -> tuple[float, float, Any]:
    """(CPU seconds, wall seconds, result) of the fastest of `repeat` calls of `fn` (by CPU)."""
    best: tuple[float, float, Any] | None = None
    for _ in range(repeat):
        cpu, wall = time.process_time(), time.perf_counter()
        result = fn()
        got = (time.process_time() - cpu, time.perf_counter() - wall, result)
        if best is None or got[0] < best[0]:
            best = got
    assert best is not None
    return best


def measure(groups: int = 300, seed: int = 0, repeat: int = 2, workers: int | None = None,
            product_groups: int = 0) -> dict[str, Any]:
    """The figures (module docstring) as a dict (what `python -m benchmarks` stores under `whatif`)."""
    workers = workers or os.cpu_count() or 1
    t = time.perf_counter()
    everyone = make_groups(max(groups, product_groups), seed)  # the first `groups` are measured on one core
    made = time.perf_counter() - t
    inputs = everyone[:groups]
    audit_cpu, audit_wall, audits = _best(lambda: _audit(inputs), max(repeat, 3))
    sweep_cpu, sweep_wall, outcomes = _best(lambda: _sweep(inputs, audits, 1), repeat)
    pool_wall: float | None = None
    pool_cpu: float | None = None
    if workers > 1:
        pool_wall, pool_cpu = min(_timed_pool(inputs, audits, workers, outcomes) for _ in range(repeat))
    swept = [o for o in outcomes if o.error is None]
    per_group = 5000 / groups
    product = measure_product(everyone[:product_groups], workers) if product_groups else {}
    return {**product,
        "groups": groups, "seed": seed, "records": sum(len(r) for _, r in inputs), "input_seconds": made,
        "audit_cpu_seconds": audit_cpu, "audit_wall_seconds": audit_wall,
        "sweep_cpu_seconds": sweep_cpu, "sweep_wall_seconds": sweep_wall,
        "workers": workers, "sweep_pool_wall_seconds": pool_wall, "sweep_pool_cpu_seconds": pool_cpu,
        "configurations": 8, "swept": len(swept), "skipped": len(outcomes) - len(swept),
        "reproduced_fully": sum(1 for o in swept if o.rows[0]["reproduction_score"] == 1.0),
        "sweep_over_audit": sweep_cpu / audit_cpu if audit_cpu else None,
        "sweep_pool_over_audit": pool_wall / audit_cpu if pool_wall is not None and audit_cpu else None,
        "pool_speedup": sweep_wall / pool_wall if pool_wall else None,
        "sweep_seconds_for_5000_groups": sweep_cpu * per_group,
        "sweep_pool_seconds_for_5000_groups": pool_wall * per_group if pool_wall is not None else None,
        "audit_seconds_for_5000_groups": audit_cpu * per_group,
    }


def _timed_pool(inputs: list[tuple[str, list[Raw]]], audits: list[list[AuditRow]], workers: int,
                alone: list[whatif.GroupOutcome]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process and its workers) of the sweep with `workers`
    processes, whose outcomes must be those of one process."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu, wall = time.process_time(), time.perf_counter()
    got = _sweep(inputs, audits, workers)
    wall = time.perf_counter() - wall
    done = resource.getrusage(resource.RUSAGE_CHILDREN)  # the workers, ended with the pool
    cpu = time.process_time() - cpu + (done.ru_utime + done.ru_stime) - (children.ru_utime + children.ru_stime)
    if got != alone:
        raise AssertionError(f"the sweep with {workers} workers differs from the sweep in one process")
    return wall, cpu


def print_figures(f: dict[str, Any]) -> None:
    n = f["groups"]
    print(f"what-if sweep over {n} random simulated groups ({f['records']:,} records):")
    print(f"  audit, one core: {f['audit_cpu_seconds']:.3f} CPU s ({f['audit_cpu_seconds'] / n * 1000:.2f} ms per "
          f"group; wall {f['audit_wall_seconds']:.3f} s)")
    print(f"  sweep (fit + {f['configurations']} configurations), one core: {f['sweep_cpu_seconds']:.2f} CPU s "
          f"({f['sweep_cpu_seconds'] / n * 1000:.1f} ms per group; wall {f['sweep_wall_seconds']:.2f} s)")
    ratio = f["sweep_over_audit"]
    print(f"  sweep / audit, one core each: {ratio:.0f}x" if ratio is not None else "  sweep / audit: n/a")
    if f["sweep_pool_wall_seconds"] is not None:
        print(f"  sweep with {f['workers']} workers: wall {f['sweep_pool_wall_seconds']:.2f} s ("
              f"{f['pool_speedup']:.2f}x one process's wall, the same outcomes); over the audit on one core: "
              f"{f['sweep_pool_over_audit']:.0f}x; CPU of the workers and this process "
              f"{f['sweep_pool_cpu_seconds']:.2f} s ({f['sweep_pool_cpu_seconds'] / f['sweep_cpu_seconds']:.2f}x one "
              f"process's: the wall time divides by the cores free)")
    print(f"  reproduced in every generation: {f['reproduced_fully']} of {f['swept']} swept "
          f"({f['skipped']} skipped)")
    pool = (f", {f['sweep_pool_seconds_for_5000_groups']:.0f} s with {f['workers']} workers"
            if f["sweep_pool_seconds_for_5000_groups"] is not None else "")
    print(f"  at these rates, 5,000 such groups: audit {f['audit_seconds_for_5000_groups']:.1f} s on one core; "
          f"sweep {f['sweep_seconds_for_5000_groups']:.0f} s on one core{pool}")
    if f.get("product_groups"):
        print(f"the product's commands on {f['product_groups']:,} such groups ({f['product_records']:,} records), "
              f"wall clock, each a fresh process:")
        print(f"  coordinator-audit run (the audit): {f['product_audit_wall_seconds']:.1f} s")
        print(f"  coordinator-audit whatif --sweep ({f['product_workers']} workers): "
              f"{f['product_sweep_wall_seconds']:.1f} s")
        print(f"  sweep / audit: {f['product_sweep_over_audit']:.1f}x")
        print(f"  {f['product_total_line']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks/bench_whatif.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=2, help="passes per measurement, the best kept (default 2)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                    help="processes of the pooled sweep (default: one per core; 1: no pooled pass)")
    ap.add_argument("--product-groups", type=int, default=0,
                    help="also time `coordinator-audit run` and `whatif --sweep` on this many groups (default 0: not)")
    args = ap.parse_args(argv)
    print_figures(measure(args.groups, args.seed, args.repeat, args.workers, args.product_groups))
    return 0


if __name__ == "__main__":
    sys.exit(main())
