"""The job's routes, each against the one it takes without it: what each capability of the session
is worth to a run, on the benchmark's input.

    .venv/bin/python -m benchmarks.bench_routes [--records 2000000 --groups 500] [--repeat 2] [--json F]

The audit (`coordinator_audit.jobs.audit.run_audit`, every table written, the embedded writer, a
local base path) runs in one local session on the scale-mode input (`benchmarks.harness.ensure_input`,
cached in `.cache/bench/`), in four situations:

* `local`: a fresh output, the session's own capabilities (`Capabilities.of`): the single pass's
  workers read the Parquet files themselves, the replay's input goes from task to task as local
  files, the replay's tasks write the tables' files themselves, the replay derives the derived tables.
* `spark_reader`: as a session whose workers do not read this process's files
  (`Capabilities.local_files` False): Spark reads the input and feeds the pass.
* `no_local_tasks`: as a session whose tasks do not all run on this machine
  (`Capabilities.local_tasks` False): the replay's input goes through Spark's shuffle and Spark
  writes every table.
* `derived_stage`: the same run again into `local`'s output (`--mode overwrite`): the output holds
  an earlier run's tables, so the derived tables are derived in a stage of their own
  (`coordinator_audit.jobs.derived_step`), as every nightly run after the first derives them.

Each is the best of `--repeat` runs (interleaved), after one warm-up run. It prints each route's
seconds and stages, the ratio of each to `local`, and whether every route wrote the same tables
(`benchmarks.output_hash`, the run columns left out; `runs` left out, which records every run). Wall-clock seconds on whatever else the
machine is doing: compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import DEFAULT_DRIVER_MEMORY, ROOT, ensure_input, scale_config
from benchmarks.measures import StageTee, stage_seconds
from benchmarks.output_hash import output_hashes
from coordinator_audit.jobs.audit import Capabilities, run_audit
from coordinator_audit.jobs.config import load_config
from coordinator_audit.jobs.spark_session import build_session

ROUTES = ("local", "spark_reader", "no_local_tasks", "derived_stage")
"""The situations measured (module docstring), in the order each repeat runs them."""

WITHOUT: dict[str, str] = {
    "spark_reader": "Spark reads the input / the pass reads the files itself",
    "no_local_tasks": "Spark's shuffle and writer / local files between tasks, tasks write the files",
    "derived_stage": "derived in a stage of their own / derived in the replay",
}
"""What each route's ratio to `local` compares."""


def _audit(spark: Any, input_dir: Path, out: Path, route: str, run_id: str) -> tuple[float, dict[str, float]]:
    """One run of `route` into `out`: (seconds, its stages' seconds)."""
    caps = {"spark_reader": Capabilities(local_files=False, local_tasks=True),
            "no_local_tasks": Capabilities(local_files=True, local_tasks=False)}.get(route)
    cfg = load_config(None, {"input.path": str(input_dir), "input.format": "parquet", "output.path": str(out),
                             "output.write_mode": "overwrite", "output.writer": "embedded"})
    tee = StageTee(sys.stderr)
    t0 = time.perf_counter()
    with contextlib.redirect_stderr(tee):
        run_audit(spark, cfg, run_id=run_id, capabilities=caps)
    return time.perf_counter() - t0, stage_seconds(tee.lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_routes", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=2_000_000, help="records of the input (default 2,000,000)")
    p.add_argument("--groups", type=int, default=500, help="consumer groups of the input (default 500)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--master", default="local[2]", help="a local master: the routes compared need one")
    p.add_argument("--repeat", type=int, default=2, help="runs of each route; the best counts (default 2)")
    p.add_argument("--cache-dir", type=Path, default=ROOT / ".cache" / "bench")
    p.add_argument("--work-dir", type=Path, help="parent of the temp dir it works in (default: system temp)")
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args(argv)
    if not args.master.startswith("local"):
        p.error("--master must be a local master: the local routes need every task on this machine")

    input_dir, manifest = ensure_input(scale_config(args.records, args.groups, args.seed), args.cache_dir)
    spark = build_session(master=args.master, conf={"spark.driver.memory": DEFAULT_DRIVER_MEMORY})
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(tempfile.mkdtemp(prefix="bench-routes-", dir=args.work_dir))
    runs: dict[str, list[dict[str, Any]]] = {route: [] for route in ROUTES}
    hashes: dict[str, Any] = {}
    try:
        _audit(spark, input_dir, work / "warm-up", "local", "warm-up")
        for i in range(args.repeat):
            for route in ROUTES:
                out = work / ("local" if route == "derived_stage" else route) / str(i)
                seconds, stages = _audit(spark, input_dir, out, route, f"{route}-{i}")
                runs[route].append({"seconds": round(seconds, 3), "stages": stages})
                print(f"{route:15s} run {i}: {seconds:6.2f} s  "
                      f"({', '.join(f'{k} {v:.2f} s' for k, v in stages.items())})", flush=True)
                if i == 0:  # (`runs` records every run: `derived_stage`'s output holds `local`'s too)
                    hashes[route] = {t: h for t, h in output_hashes(out).items() if t != "runs"}
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    best = {route: min(r["seconds"] for r in rs) for route, rs in runs.items()}
    ratios = {route: round(best[route] / best["local"], 2) for route in WITHOUT}
    differ = {route: sorted(t for t in {*h, *hashes["local"]} if h.get(t) != hashes["local"].get(t))
              for route, h in hashes.items()}
    print(f"\ninput: {manifest['rows']:,} records, {args.groups:,} groups; best of {args.repeat}")
    print(f"local route: {best['local']:.2f} s")
    for route, what in WITHOUT.items():
        print(f"{route:15s} {best[route]:6.2f} s = {ratios[route]:.2f}x local  ({what})")
    same = not any(differ.values())
    print("every route wrote the same tables: " + ("yes" if same else "NO: " + "; ".join(
        f"{route}: {', '.join(tables)}" for route, tables in differ.items() if tables)))
    figures = {"input_records": manifest["rows"], "groups": args.groups, "repeat": args.repeat,
               "best_seconds": best, "over_local": ratios, "same_tables": same,
               "tables_differing": differ}
    if args.json is not None:
        args.json.write_text(json.dumps({"figures": figures, "runs": runs}, indent=1))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
