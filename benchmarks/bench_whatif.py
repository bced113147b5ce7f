"""The what-if sweep against the audit of the same groups: one process, no Spark.

    .venv/bin/python benchmarks/bench_whatif.py --groups 300      # also `python -m benchmarks` (measurement `whatif`)

Input: `--groups` random simulated groups (`coordinator_audit.core.sim.randomized.random_scenario`,
seeds `--seed` * 1,000,000 + i, those the simulator runs: 2-5 consumers, one assignor family, dynamic or static, living through
2-4 membership events each: crashes, closes, restarts, scale-outs, rejoins, subscription changes;
about two minutes of group life). Their logs are made first and not timed.

Measured, each the best of `--repeat` passes over all groups (CPU seconds of this process,
`time.process_time`, so that other work on the machine does not count; wall seconds beside):

* audit: `coordinator_audit.core.audit.audit_group` over each group's records (the pure-Python audit);
* sweep: for each group, what `coordinator_audit.jobs.whatif --sweep` does per group
  (`coordinator_audit.jobs.whatif.group_rows`, from the audit's rows, without the Delta reads and
  write): the history fitted to the actual configuration (`fit`), then the eight configurations
  (four assignors x static membership off and on; the one equal to the actual is not replayed again).

Printed: both times, per group and in total, the ratio sweep / audit, the share of groups the actual
configuration reproduces in every generation, and the sweep's time for 5,000 such groups at the
measured rate (one core; the groups are independent, so cores divide it).
"""

from __future__ import annotations

import argparse
import io
import sys
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
from coordinator_audit.core.errors import CoordinatorAuditError, ScenarioError
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


def _audit(groups: list[tuple[str, list[Raw]]]) -> list[list[AuditRow]]:
    return [list(audit_group(records, group_id=group)) for group, records in groups]


def _sweep(groups: list[tuple[str, list[Raw]]], audits: list[list[AuditRow]]) -> tuple[int, int, int]:
    """(groups swept, groups reproduced in every generation, groups skipped)."""
    args = whatif.parse_args(["--tables", "(in memory)", "--sweep", "--no-write"])
    configs = whatif.configurations(args)
    done = full = skipped = 0
    for (group, _), rows in zip(groups, audits, strict=True):
        gens = [r for r in rows if isinstance(r, GenerationRow)]
        assigned = [r for r in rows if isinstance(r, AssignmentRow)]
        commits = [r for r in rows if isinstance(r, OffsetCommitRow)]
        causes = [r for r in rows if isinstance(r, RebalanceCauseRow)]
        try:
            out = whatif.group_rows("(in memory)", group, gens, assigned, commits, causes, args, configs,
                                    io.StringIO(), 0)
        except CoordinatorAuditError:
            skipped += 1
            continue
        done += 1
        full += out[0]["reproduction_score"] == 1.0
    return done, full, skipped


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


def measure(groups: int = 300, seed: int = 0, repeat: int = 2) -> dict[str, Any]:
    """The figures (module docstring) as a dict (what `python -m benchmarks` stores under `whatif`)."""
    t = time.perf_counter()
    inputs = make_groups(groups, seed)
    made = time.perf_counter() - t
    audit_cpu, audit_wall, audits = _best(lambda: _audit(inputs), max(repeat, 3))
    sweep_cpu, sweep_wall, (done, full, skipped) = _best(lambda: _sweep(inputs, audits), repeat)
    ratio = sweep_cpu / audit_cpu if audit_cpu else None
    return {
        "groups": groups, "seed": seed, "records": sum(len(r) for _, r in inputs), "input_seconds": made,
        "audit_cpu_seconds": audit_cpu, "audit_wall_seconds": audit_wall,
        "sweep_cpu_seconds": sweep_cpu, "sweep_wall_seconds": sweep_wall,
        "configurations": 8, "swept": done, "reproduced_fully": full, "skipped": skipped,
        "sweep_over_audit": ratio,
        "sweep_seconds_for_5000_groups": sweep_cpu / groups * 5000,
        "audit_seconds_for_5000_groups": audit_cpu / groups * 5000,
    }


def print_figures(f: dict[str, Any]) -> None:
    n = f["groups"]
    print(f"what-if sweep over {n} random simulated groups ({f['records']:,} records), one process:")
    print(f"  audit: {f['audit_cpu_seconds']:.3f} CPU s ({f['audit_cpu_seconds'] / n * 1000:.2f} ms per group; "
          f"wall {f['audit_wall_seconds']:.3f} s)")
    print(f"  sweep (fit + {f['configurations']} configurations): {f['sweep_cpu_seconds']:.2f} CPU s "
          f"({f['sweep_cpu_seconds'] / n * 1000:.1f} ms per group; wall {f['sweep_wall_seconds']:.2f} s)")
    ratio = f["sweep_over_audit"]
    print(f"  sweep / audit: {ratio:.0f}x" if ratio is not None else "  sweep / audit: n/a")
    print(f"  reproduced in every generation: {f['reproduced_fully']} of {f['swept']} swept "
          f"({f['skipped']} skipped)")
    print(f"  at this rate, 5,000 such groups: audit {f['audit_seconds_for_5000_groups']:.0f} s, sweep "
          f"{f['sweep_seconds_for_5000_groups']:.0f} s on one core")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks/bench_whatif.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=2, help="passes per measurement, the best kept (default 2)")
    args = ap.parse_args(argv)
    print_figures(measure(args.groups, args.seed, args.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
