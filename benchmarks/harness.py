"""The benchmark's harness: the command line, the inputs, the Spark steps in a child process, the
assembly of their results and the least-squares fits. What each measurement does is
`benchmarks.measures` (`benchmarks.peer`, `benchmarks.memory`); the figures and targets are
`benchmarks.report`. The command and what it measures: `benchmarks/__init__.py`."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import Schema
from deltalake.transaction import AddAction, create_table_with_add_actions
from pyspark.sql import SparkSession

import benchmarks
from benchmarks import bench_whatif, kafka_input, measures, memory, peer, report
from coordinator_audit.core.sim.scale import ScaleConfig, plan_groups
from coordinator_audit.jobs.spark_session import build_session
from tools.make_samples import write_scale

__all__ = ["MEASUREMENTS", "ensure_delta_input", "ensure_input", "main", "parse_args", "scale_config",
           "scaling_fit"]

ROOT = Path(__file__).resolve().parents[1]
MEASUREMENTS: tuple[str, ...] = ("bare_scan", "offset_path", "audit", "peer", "replay", "memory", "scaling",
                                 "fixed_groups", "derived", "delta_input", "kafka_input", "whatif")
SCALING_FACTORS = (1, 2, 4, 8)
"""Multiples of `--scaling-base` (by default a quarter of `--records`): 5M, 10M, 20M and 40M records
at the default size, the 4x point being the main input."""
DELTA_FACTORS = (1, 2, 4)
"""Multiples of `--scaling-base` measured with the input as a Delta table (5M, 10M and 20M by default:
three points, so that the fit's intercept does not hang on two runs' noise)."""
KAFKA_FACTORS = (1, 2, 4)
"""Multiples of `--scaling-base` measured with the input in a Kafka broker (5M, 10M and 20M by default)."""
KAFKA_BROKER_MAX_SECONDS = 4 * 3600
"""A benchmark's brokers stop by themselves after this, whatever happens to the benchmark."""
DELTA_LAYOUT = "log-ordered: one data file per input file, pyarrow, committed with delta-rs"
"""How `ensure_delta_input` lays the table out (kept in its stamp: a copy written otherwise is rewritten)."""
DELTA_ROW_GROUP_ROWS = 262_144
"""Rows per Parquet row group of the Delta input's data files."""
RUNS_PER_POINT = 2
DEFAULT_DRIVER_MEMORY = "6g"
"""The benchmark's driver heap unless `--conf spark.driver.memory=...` says otherwise: with the
job's laptop default (2g, conf/spark-local.toml) the offset path dies of OutOfMemoryError at 20M
records (measured; the step is then recorded as failed and the run goes on in a fresh session)."""
_T0 = time.perf_counter()

Point = tuple[int, Path, int]
"""(factor, input directory, records) of one scaling point."""


def _log(line: str) -> None:
    print(f"[benchmark {time.perf_counter() - _T0:7.1f}s] {line}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------
# command line


def _factors(text: str) -> tuple[int, ...]:
    try:
        out = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated whole factors, e.g. 1,4") from None
    if not out or out[0] < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: factors must be >= 1")
    return out


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=benchmarks.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=20_000_000, help="records of the main input (default 20,000,000)")
    p.add_argument("--groups", type=int, default=5000, help="consumer groups of the main input (default 5,000)")
    p.add_argument("--seed", type=int, default=0, help="simulator seed (default 0)")
    p.add_argument("--master", default="local[2]", help="Spark master of every measurement (default local[2])")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="extra Spark setting for the session (repeatable)")
    p.add_argument("--shards", type=int, help="the audit's job.shards (default: conf/audit.toml's)")
    p.add_argument("--scaling", action=argparse.BooleanOptionalAction, default=True,
                   help="run the scaling pass (default on)")
    p.add_argument("--scaling-base", type=int,
                   help="records of the 1x scaling input (default --records / 4: the 4x point is the main input)")
    p.add_argument("--scaling-factors", type=_factors, default=SCALING_FACTORS, metavar="K,K,...",
                   help="multiples of --scaling-base measured by the scaling pass (default 1,2,4,8)")
    p.add_argument("--delta-factors", type=_factors, default=DELTA_FACTORS, metavar="K,K,...",
                   help="multiples of --scaling-base measured with the input as a Delta table (default 1,4)")
    p.add_argument("--kafka-factors", type=_factors, default=KAFKA_FACTORS, metavar="K,K,...",
                   help="multiples of --scaling-base measured with the input in a Kafka broker, read through "
                        "Spark's Kafka source (default 1,4)")
    p.add_argument("--replay-commits", type=int, default=2_000_000,
                   help="about how many offset commits the pure-Python commit rate reads (default 2,000,000)")
    p.add_argument("--single-group-commits", type=int, default=5_000_000,
                   help="commit records of the single-group memory run (default 5,000,000)")
    p.add_argument("--whatif-groups", type=int, default=300,
                   help="simulated groups of the what-if measurement on one core (default 300)")
    p.add_argument("--whatif-product-groups", type=int, default=5000,
                   help="simulated groups of the what-if measurement through the product's commands, `coordinator-audit "
                        "run` then `whatif --sweep` (default 5,000; 0: not measured)")
    p.add_argument("--skip", action="append", default=[], metavar="NAME",
                   help=f"leave out a measurement (repeatable or comma-separated): {', '.join(MEASUREMENTS)}")
    p.add_argument("--cache-dir", type=Path, default=ROOT / ".cache" / "bench",
                   help="where generated inputs are kept and reused (default .cache/bench)")
    p.add_argument("--gen-workers", type=int, default=2, help="processes generating inputs (default 2)")
    p.add_argument("--out", type=Path, default=ROOT / "bench",
                   help="directory of benchmark.json (default bench/)")
    p.add_argument("--work-dir", type=Path, help="parent of the temp dir the audits write to (default: system temp)")
    p.add_argument("--keep-output", action="store_true", help="keep the audits' Delta tables")
    p.add_argument("--in-process", action="store_true",
                   help="run the Spark measurements in this process, in its active session if any (tests); by "
                        "default they run in a child process that is replaced if a step kills the JVM")
    args = p.parse_args(argv)
    skip = {s.strip() for item in args.skip for s in item.split(",") if s.strip()}
    unknown = skip - set(MEASUREMENTS)
    if unknown:
        p.error(f"--skip {sorted(unknown)[0]}: unknown measurement; choose from {', '.join(MEASUREMENTS)}")
    args.skip = skip
    for name in ("records", "groups", "replay_commits", "single_group_commits", "gen_workers"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.scaling_base is None:
        args.scaling_base = max(1, args.records // 4)
    if args.scaling_base < 1:
        p.error("--scaling-base must be >= 1")
    for item in args.conf:
        if "=" not in item:
            p.error(f"--conf {item}: expected KEY=VALUE")
    if not any(item.split("=", 1)[0] == "spark.driver.memory" for item in args.conf):
        args.conf.append(f"spark.driver.memory={DEFAULT_DRIVER_MEMORY}")
    return args


# ------------------------------------------------------------------------------------------------
# inputs


def ensure_input(config: ScaleConfig, cache_dir: Path, *, workers: int = 2) -> tuple[Path, dict[str, Any]]:
    """The scale-mode input of `config` as Kafka-source Parquet: (directory, manifest).

    Reused when `<cache_dir>/input-r<records>-g<groups>-s<seed>/_manifest.json` holds the same
    `ScaleConfig`; otherwise generated into a temporary sibling and renamed into place."""
    name = f"input-r{config.records}-g{config.groups}-s{config.seed}"
    directory = cache_dir / name
    manifest_path = directory / "_manifest.json"
    if manifest_path.is_file():
        manifest = json.loads(manifest_path.read_text())
        files_ok = all((directory / f).is_file() for f in manifest.get("files", {}))
        if manifest.get("config") == dataclasses.asdict(config) and files_ok:
            _log(f"input {directory}: reused ({manifest['rows']:,} records)")
            return directory, manifest
        _log(f"input {directory}: manifest does not match this ScaleConfig; regenerating")
    _log(f"input {directory}: generating {config.records:,} records, {config.groups:,} groups, seed "
         f"{config.seed} with {workers} process(es)")
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=cache_dir))
    t0 = time.perf_counter()
    counts = write_scale(config, staging, workers=workers)
    elapsed = time.perf_counter() - t0
    manifest = {"config": dataclasses.asdict(config), "rows": sum(counts.values()), "files": counts,
                "bytes": sum((staging / f).stat().st_size for f in counts), "generate_s": round(elapsed, 2)}
    (staging / "_manifest.json").write_text(json.dumps(manifest, indent=1))
    if directory.exists():
        shutil.rmtree(directory)
    staging.rename(directory)
    _log(f"input {directory}: {manifest['rows']:,} records, {manifest['bytes'] / 1e6:,.0f} MB in {elapsed:.1f} s")
    return directory, manifest


def ensure_delta_input(parquet_dir: Path, manifest: dict[str, Any]) -> Path:
    """The records of a Parquet input (`ensure_input`) as a Delta table beside it,
    `<parquet_dir>.delta/`, written once and reused while `<parquet_dir>.delta.json` holds the
    Parquet input's manifest. The Kafka-source timestamp (milliseconds) is stored as Delta's
    microsecond TIMESTAMP, the only precision Delta has.

    The table keeps the input's log order, as a topic's export or a Kafka-to-Delta ingest does:
    each Parquet file of the input becomes one data file (pyarrow, in its row order), committed
    with delta-rs's transaction API. (delta-rs's `write_deltalake` reorders record batches: on this
    input each Kafka partition then restarts its offsets mid-file, and the job would re-sort the
    whole table through Spark; `coordinator_audit.jobs.audit` reads a log-ordered plain Delta table with pyarrow.)"""
    directory = parquet_dir.with_name(parquet_dir.name + ".delta")
    stamp = parquet_dir.with_name(parquet_dir.name + ".delta.json")
    wanted = {**manifest, "delta_layout": DELTA_LAYOUT}
    if stamp.is_file() and (directory / "_delta_log").is_dir() and json.loads(stamp.read_text()) == wanted:
        _log(f"delta input {directory}: reused")
        return directory
    files = sorted(parquet_dir.glob("*.parquet"))
    schema = pa.schema([f.with_type(pa.timestamp("us", tz="UTC")) if f.name == "timestamp" else f
                        for f in pq.read_schema(files[0])])
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=parquet_dir.parent))
    t0 = time.perf_counter()
    adds = []
    for i, source in enumerate(files):
        name = f"part-{i:05d}-{uuid.uuid4()}.snappy.parquet"
        rows = 0
        reader = pq.ParquetFile(source)
        with pq.ParquetWriter(staging / name, schema, compression="snappy") as writer:
            for batch in reader.iter_batches(batch_size=DELTA_ROW_GROUP_ROWS, columns=schema.names,
                                             use_threads=False):
                writer.write_batch(batch.cast(schema), row_group_size=DELTA_ROW_GROUP_ROWS)
                rows += batch.num_rows
        info = (staging / name).stat()
        adds.append(AddAction(name, info.st_size, {}, int(info.st_mtime * 1000), True,
                              json.dumps({"numRecords": rows})))
    create_table_with_add_actions(str(staging), Schema.from_arrow(schema), adds, mode="error")
    if directory.exists():
        shutil.rmtree(directory)
    staging.rename(directory)
    stamp.write_text(json.dumps(wanted, indent=1))
    _log(f"delta input {directory}: {manifest['rows']:,} records written in {time.perf_counter() - t0:.1f} s")
    return directory


def scale_config(records: int, groups: int, seed: int) -> ScaleConfig:
    """The `ScaleConfig` whose generated input holds at least `records` records.

    Scale mode writes whole commit rounds (every partition of every group once per round), so it
    lands up to one round short of its `records`; round up to the next whole round instead."""
    config = ScaleConfig(records=records, groups=groups, seed=seed)
    per_round = sum(p.partitions for p in plan_groups(config))
    rounds = max(1, -(-records // per_round))
    return dataclasses.replace(config, records=rounds * per_round)


def _scaled_config(config: ScaleConfig, records: int, *, base_records: int) -> ScaleConfig:
    groups = max(1, round(config.groups * records / base_records))
    return scale_config(records, groups, config.seed)


# ------------------------------------------------------------------------------------------------
# fits


def scaling_fit(points: list[tuple[int, float]]) -> dict[str, Any]:
    """Least squares of seconds over records (slope in seconds per million records, intercept in
    seconds), and the marginal cost of the last segment over that of the first (1.0 = linear)."""
    n = len(points)
    xs = [p[0] / 1e6 for p in points]
    ys = [p[1] for p in points]
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else None
    out: dict[str, Any] = {"slope_s_per_million_records": slope,
                           "intercept_s": my - slope * mx if slope is not None else None}
    if slope is not None:
        ss_tot = sum((y - my) ** 2 for y in ys)
        ss_res = sum((y - (out["intercept_s"] + slope * x)) ** 2 for x, y in zip(xs, ys, strict=True))
        out["r2"] = 1 - ss_res / ss_tot if ss_tot else 1.0
    if n >= 3:
        first = (ys[1] - ys[0]) / (xs[1] - xs[0])
        last = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        out["marginal_s_per_million_first_segment"] = first
        out["marginal_s_per_million_last_segment"] = last
        out["marginal_ratio"] = last / first if first > 0 else None
        out["time_ratio_last_over_first"] = ys[-1] / ys[0] if ys[0] > 0 else None
    return out


# ------------------------------------------------------------------------------------------------
# main


def _cpu_model() -> str:
    """The processor's model name (`/proc/cpuinfo`), else `platform.processor()`."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _environment() -> dict[str, Any]:
    return {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "cpu_model": _cpu_model(), "loadavg_start": [round(x, 2) for x in os.getloadavg()]}


def _in_fresh_process(fn: Callable[..., dict[str, Any]], *args: Any, **kwargs: Any) -> dict[str, Any]:
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        return pool.submit(fn, *args, **kwargs).result()


def _points(config: ScaleConfig, path: Path, manifest: dict[str, Any], args: argparse.Namespace,
            factors: tuple[int, ...], *, scale_groups: bool = True) -> list[Point]:
    """The inputs of `factors` x `--scaling-base` records: groups scaled with the records
    (`scale_groups`: the record mix, and so the output per record, stays the same), or `--groups`
    groups at every point (the output stays the same, only the commit rounds grow)."""
    out: list[Point] = []
    for k in factors:
        c = (_scaled_config(config, args.scaling_base * k, base_records=args.records) if scale_groups
             else scale_config(args.scaling_base * k, args.groups, args.seed))
        if c == config:
            out.append((k, path, manifest["rows"]))
        else:
            p, man = ensure_input(c, args.cache_dir, workers=args.gen_workers)
            out.append((k, p, man["rows"]))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    skip = args.skip
    if args.work_dir is not None:
        args.work_dir.mkdir(parents=True, exist_ok=True)
    rep: dict[str, Any] = {"parameters": {k: (str(v) if isinstance(v, Path) else sorted(v) if isinstance(v, set)
                                              else v) for k, v in vars(args).items()},
                           "environment": _environment(), "measurements": {}}
    m = rep["measurements"]
    config = scale_config(args.records, args.groups, args.seed)
    path, manifest = ensure_input(config, args.cache_dir, workers=args.gen_workers)
    rep["input"] = {"path": str(path), **manifest}
    scale_points: list[Point] = []
    if args.scaling and "scaling" not in skip:
        scale_points = _points(config, path, manifest, args, args.scaling_factors)
    fixed_points: list[Point] = []
    if args.scaling and "fixed_groups" not in skip:
        fixed_points = _points(config, path, manifest, args, args.scaling_factors, scale_groups=False)
    delta_points: list[Point] = []
    if "delta_input" not in skip and "audit" not in skip:
        for k, p, rows in _points(config, path, manifest, args, args.delta_factors):
            man = json.loads((p / "_manifest.json").read_text())
            delta_points.append((k, ensure_delta_input(p, man), rows))
    elif "delta_input" not in skip:
        _log("delta_input: not measured: it measures the audit, which --skip audit leaves out")

    if "replay" not in skip:
        _log("replay: pure-Python audit rates (one process)")
        m["replay"] = _in_fresh_process(measures.replay_rates, str(path), commit_records=args.replay_commits)
        _log(f"replay: {m['replay']['group_metadata_per_s']:,.0f} GroupMetadata records/s, "
             f"{m['replay']['commits_per_s'] or 0:,.0f} commits/s")
    if "whatif" not in skip:
        _log(f"whatif: the what-if sweep over {args.whatif_groups} simulated groups against their audit (one process, "
             f"then a worker per core)")
        m["whatif"] = _in_fresh_process(bench_whatif.measure, args.whatif_groups, args.seed,
                                        product_groups=args.whatif_product_groups)
        w = m["whatif"]
        pooled = ("" if w["sweep_pool_over_audit"] is None else
                  f"; with {w['workers']} workers {w['sweep_pool_over_audit']:.0f}x the audit on one core")
        product = ("" if not w.get("product_groups") else
                   f"; the product's commands on {w['product_groups']:,} groups: sweep / audit "
                   f"{w['product_sweep_over_audit']:.1f}x")
        _log(f"whatif: sweep / audit {w['sweep_over_audit']:.0f}x on one core each{pooled}{product}")
    if "memory" not in skip:
        _log(f"memory: one group, {args.single_group_commits:,} commits (fresh process)")
        m["memory"] = {"single_group": _in_fresh_process(memory.single_group_memory, args.single_group_commits)}
        _log(f"memory: peak RSS {m['memory']['single_group']['peak_rss_mib']:,.0f} MiB")

    steps = _spark_steps(args, path, scale_points, delta_points, fixed_points)
    if steps:
        work = Path(tempfile.mkdtemp(prefix="coordinator-audit-bench-", dir=args.work_dir))
        try:
            results, env = _run_spark_steps(args, steps, work)
        finally:
            if args.keep_output:
                _log(f"audit outputs kept under {work}")
            else:
                shutil.rmtree(work, ignore_errors=True)
        rep["environment"].update(env)
        _collect(rep, results, path, scale_points, delta_points, fixed_points, derived="derived" not in skip)
    if "kafka_input" not in skip and "audit" not in skip:
        m["kafka_input"] = _kafka_input(args, config, path, manifest)
    elif "kafka_input" not in skip:
        _log("kafka_input: not measured: it measures the audit, which --skip audit leaves out")

    rep["environment"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    rep.setdefault("bare_scan_seconds", None)
    rep["ratios"] = report.ratios(rep)
    rep["figures"] = report.figures(rep)
    rep["targets"] = report.targets(rep)
    rep["total_seconds"] = time.perf_counter() - _T0
    out_file = report.write_report(rep, args.out)
    report.print_report(rep)
    print(f"\nbenchmark.json: {out_file}")
    return 0


# --- the Spark steps, run in a child process so that a dead JVM (an OutOfMemoryError in local mode
# kills the driver) costs one measurement, not the run: the remaining steps go on in a fresh session
# with the same settings, and the failure is recorded.


READ_FLOORS: tuple[str, ...] = ("python_read", "jvm_commit_summary")
"""The floors `measures.measure_read_floors` measures after each Parquet bare scan."""


def _main_runs(kind: str, derived: bool) -> list[str]:
    """The steps of the main input that are also its scaling point's runs of `kind`."""
    return {"bare_scan": ["bare_scan.first", "bare_scan.last"],
            "offset_path": ["offset_path"],
            "audit": ["audit", "audit.again"] if derived else ["audit"]}[kind]


def _point_runs(k: int, kind: str, *, main: bool, derived: bool, prefix: str = "scaling") -> list[str]:
    """The step names of one scaling point's `RUNS_PER_POINT` runs of `kind`. The main input's point
    reuses the main runs, and its further runs are the `scaling` series' whatever the series (the
    `fixed_groups` series shares that point with it)."""
    reused = _main_runs(kind, derived) if main else []
    prefix = "scaling" if main else prefix
    return reused + [f"{prefix}.{k}x.{kind}.{run}" for run in range(len(reused) + 1, RUNS_PER_POINT + 1)]


def _scaling_kinds(skip: set[str]) -> tuple[str, ...]:
    return tuple(k for k in ("bare_scan", "offset_path", "audit") if k not in skip)


def _spark_steps(args: argparse.Namespace, path: Path, scale_points: Sequence[Point],
                 delta_points: Sequence[Point] = (), fixed_points: Sequence[Point] = ()) -> list[dict[str, Any]]:
    skip, src = args.skip, str(path)
    sample = "memory" not in skip
    steps: list[dict[str, Any]] = []
    if "bare_scan" not in skip:
        steps.append({"name": "bare_scan.first", "kind": "bare_scan", "path": src})
    if "audit" not in skip:  # the session's first Python pass pays its warm-up, as a nightly run does
        steps.append({"name": "audit_first", "kind": "audit", "path": src, "out": "audit-first",
                      "sample_memory": False})
    if "offset_path" not in skip:
        steps.append({"name": "offset_path", "kind": "offset_path", "path": src})
    derived = "audit" not in skip and "derived" not in skip
    if derived:
        steps.append({"name": "audit_base", "kind": "audit", "path": src, "out": "audit-base",
                      "sample_memory": False, "derived_tables": False})
    if "audit" not in skip:
        steps.append({"name": "audit", "kind": "audit", "path": src, "out": "audit-main", "sample_memory": sample,
                      "output_write": True})
    if derived:
        steps.append({"name": "audit_base.again", "kind": "audit", "path": src, "out": "audit-base-again",
                      "sample_memory": False, "derived_tables": False})
        steps.append({"name": "audit.again", "kind": "audit", "path": src, "out": "audit-main-again",
                      "sample_memory": False, "output_write": True})
    if "peer" not in skip:
        steps.append({"name": "peer", "kind": "peer", "path": src})
    if "bare_scan" not in skip:
        steps.append({"name": "bare_scan.last", "kind": "bare_scan", "path": src})
    # the scaling points, interleaved (every point's first runs, then every point's second runs) so
    # that a change of the machine's load does not fall on one point only
    planned = {s["name"] for s in steps}
    extra: list[list[dict[str, Any]]] = [[] for _ in range(RUNS_PER_POINT)]
    for prefix, points in (("scaling", scale_points), ("fixed", fixed_points)):
        for k, p, _ in points:
            for kind in _scaling_kinds(skip):
                for i, name in enumerate(_point_runs(k, kind, main=p == path, derived=derived, prefix=prefix)):
                    if name in planned:
                        continue
                    planned.add(name)
                    step: dict[str, Any] = {"name": name, "kind": kind, "path": str(p)}
                    if kind == "audit":  # the fixed series' output is the same at every point: no floor to fit
                        step.update(out="audit-" + name.replace(".", "-"), sample_memory=sample and prefix == "scaling",
                                    output_write=prefix == "scaling" or p == path)
                    extra[i].append(step)
    for k, p, _ in delta_points:
        for i, batch in enumerate(_input_point_runs(k, "delta", {"path": str(p), "format": "delta"})):
            extra[i].extend(batch)
    for batch in extra:
        steps.extend(batch)
    return steps


def _input_point_runs(k: int, prefix: str, base: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """The steps of one point of an input the job reads otherwise than the Parquet files (`prefix`
    "delta" or "kafka", `base` the step fields saying how): per run, its bare scan and warm audit."""
    runs: list[list[dict[str, Any]]] = [[] for _ in range(RUNS_PER_POINT)]
    for kind in ("bare_scan", "audit"):
        for i, name in enumerate(_point_runs(k, kind, main=False, derived=True, prefix=prefix)):
            step = {**base, "name": name, "kind": kind}
            if kind == "audit":
                step.update(out="audit-" + name.replace(".", "-"), sample_memory=False)
            runs[i].append(step)
    return runs


def _spark_child(options: dict[str, Any], steps: list[dict[str, Any]], results_file: str, *,
                 stop_session: bool = True) -> None:
    """Runs `steps` in one SparkSession; appends one JSON line per step (result or error) to results_file."""
    spark = build_session(master=options["master"], app_name="coordinator-audit-benchmark", conf=options["conf"])
    spark.sparkContext.setLogLevel("ERROR")
    env = {"spark": spark.version, "master": spark.sparkContext.master,
           "spark_conf": {k: v for k, v in spark.sparkContext.getConf().getAll()
                          if k.startswith(("spark.sql.", "spark.driver.memory", "spark.default", "spark.executor"))}}
    with open(results_file, "a") as out:
        out.write(json.dumps({"env": env}) + "\n")
    spark.read.parquet(options["warm_up_path"]).limit(1).collect()  # JVM warm-up: class loading, a Parquet footer
    for step in steps:
        _log(f"{step['name']}: {step['path']}")
        line: dict[str, Any] = {"step": step["name"]}
        try:
            line["result"] = _run_step(spark, step, options)
            _log(f"{step['name']}: {line['result']['seconds']:.2f} s")
        except Exception as exc:
            alive = _session_alive(spark)
            line.update(error=f"{type(exc).__name__}: {_first_line(exc)}", session_alive=alive)
            _log(f"{step['name']}: FAILED ({line['error']}); session {'alive' if alive else 'dead'}")
        line["loadavg"] = [round(x, 2) for x in os.getloadavg()]
        with open(results_file, "a") as out:
            out.write(json.dumps(line, default=str) + "\n")
        if "error" in line and not line["session_alive"]:
            return
    if stop_session:
        spark.stop()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or repr(exc)
    for line in text.splitlines():
        if "Error" in line or "Exception" in line:
            return line.strip()[:500]
    return text.splitlines()[0][:500]


def _session_alive(spark: SparkSession) -> bool:
    try:
        return spark.range(1).count() == 1
    except Exception:
        return False


def _run_step(spark: SparkSession, step: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    kind, src, fmt = step["kind"], step["path"], step.get("format", "parquet")
    if kind == "kafka_load":
        return kafka_input.load_records(spark, src, step["bootstrap"], step["partitions"], step["interceptor"])
    if kind == "bare_scan" and fmt == "kafka":
        return kafka_input.measure_kafka_bare_scan(spark, step["bootstrap"])
    if kind == "bare_scan":
        return measures.measure_bare_scan(spark, src, fmt, floors=fmt == "parquet")
    if kind == "offset_path":
        return measures.measure_offset_path(spark, src)
    if kind == "peer":
        return peer.measure_peer(spark, src)
    if kind == "audit":
        return measures.measure_audit(spark, src, Path(options["work"]) / step["out"], master=options["master"],
                                      shards=options["shards"], sample_memory=step["sample_memory"],
                                      derived_tables=step.get("derived_tables", True), fmt=fmt,
                                      output_write=step.get("output_write", False),
                                      kafka_bootstrap=step.get("bootstrap"))
    raise ValueError(f"unknown benchmark step kind {kind!r}")


def _run_spark_steps(args: argparse.Namespace, steps: list[dict[str, Any]], work: Path,
                     extra_conf: dict[str, str] | None = None) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Runs the steps in child processes, starting a fresh one after a step kills the session.
    `extra_conf`: Spark settings beyond `--conf` (the Kafka input's jars)."""
    options = {"master": args.master, "conf": {**dict(item.split("=", 1) for item in args.conf), **(extra_conf or {})},
               "shards": args.shards, "work": str(work),
               "warm_up_path": next(s["path"] for s in steps if s.get("format", "parquet") == "parquet")
               if any(s.get("format", "parquet") == "parquet" for s in steps) else steps[0]["path"]}
    results: dict[str, dict[str, Any]] = {}
    env: dict[str, Any] = {"spark_sessions": 0}
    pending = list(steps)
    results_file = work / "steps.jsonl"
    while pending:
        env["spark_sessions"] += 1
        if args.in_process:
            _spark_child(options, pending, str(results_file), stop_session=False)
            exitcode: int | None = 0
        else:
            proc = get_context("spawn").Process(target=_spark_child, args=(options, pending, str(results_file)))
            proc.start()
            proc.join()
            exitcode = proc.exitcode
        round_lines = []
        for line in (json.loads(x) for x in results_file.read_text().splitlines()) if results_file.exists() else ():
            if "env" in line:
                env.update(line["env"])
            elif line["step"] not in results:
                results[line["step"]] = line
                round_lines.append(line)
        rest = [s for s in pending if s["name"] not in results]
        stopped_on_purpose = bool(round_lines) and "error" in round_lines[-1] and not round_lines[-1]["session_alive"]
        if rest and not stopped_on_purpose:
            # the process died inside a step without reporting it: that step failed
            failed = rest.pop(0)["name"]
            results[failed] = {"step": failed, "session_alive": False,
                               "error": f"Spark session process exited with code {exitcode}"}
            _log(f"{failed}: FAILED (Spark session process exited with code {exitcode})")
        if rest:
            _log(f"starting a fresh Spark session (same settings) for: {', '.join(s['name'] for s in rest)}")
        pending = rest
    env["spark_session_restarts"] = env.pop("spark_sessions") - 1
    loads = [line["loadavg"][0] for line in results.values() if line.get("loadavg")]
    env["loadavg_max_1min"] = max(loads, default=None)
    return results, env


def _kafka_input(args: argparse.Namespace, config: ScaleConfig, path: Path, manifest: dict[str, Any]
                 ) -> dict[str, Any]:
    """The `kafka_input` measurement (`benchmarks.kafka_input`): a broker per `--kafka-factors`
    point, loaded with that point's records, then the bare scan and the warm audit read through
    Spark's Kafka source, best of two runs each, interleaved across points, in a child session of
    their own (the only one with the Kafka source's jars). {"error": ...} when it cannot be set up."""
    points = _points(config, path, manifest, args, args.kafka_factors)
    work = Path(tempfile.mkdtemp(prefix="coordinator-audit-bench-kafka-", dir=args.work_dir))
    brokers: list[kafka_input.KafkaBroker] = []
    try:
        jars = kafka_input.kafka_source_jars()
        interceptor = kafka_input.interceptor_jar(jars)
        for k, p, _ in points:
            partitions = json.loads((p / "_manifest.json").read_text())["config"]["offsets_partitions"]
            brokers.append(kafka_input.KafkaBroker(work / f"broker-{k}x", partitions=partitions,
                                                   max_seconds=KAFKA_BROKER_MAX_SECONDS))
            brokers[-1].start()
            _log(f"kafka_input: Kafka {brokers[-1].version} broker at {brokers[-1].bootstrap} for the {k}x input")
        steps = _kafka_steps(points, brokers, interceptor)
        results, env = _run_spark_steps(args, steps, work, {"spark.jars": ",".join(jars)})
    except kafka_input.KafkaInputUnavailable as exc:
        _log(f"kafka_input: not measured: {exc}")
        return {"error": str(exc)}
    finally:
        for broker in brokers:
            broker.stop()
        if args.keep_output:
            _log(f"kafka_input: brokers and audit outputs kept under {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    out_points = []
    for (k, p, rows), broker in zip(points, brokers, strict=True):
        point: dict[str, Any] = {"factor": k, "records": rows, "input": str(p), "broker": broker.version,
                                 "load": _result(results, f"kafka.{k}x.load")}
        for kind in ("bare_scan", "audit"):
            runs = [_result(results, n) for n in _point_runs(k, kind, main=False, derived=True, prefix="kafka")]
            point[kind] = _best(runs)
            fastest = min((r for r in runs if r and r.get("seconds")), key=lambda r: r["seconds"], default=None)
            keep = ("records",) if kind == "bare_scan" else ("counts", "table_rows", "writer", "stages")
            point[kind].update({key: fastest.get(key) for key in keep} if fastest else {})
            if kind == "bare_scan":  # its floor, measured in the same runs (`measure_kafka_bare_scan`)
                reads = [(r or {}).get("python_read") for r in runs]
                point["python_read"] = {**_best(reads), "records": next((x["records"] for x in reads if x), None)}
        out_points.append(point)
    return {"points": out_points, "runs_per_point": RUNS_PER_POINT,
            "fits": _fits(out_points, ("bare_scan", "python_read", "audit")),
            "spark_session_restarts": env.get("spark_session_restarts")}


def _kafka_steps(points: Sequence[Point], brokers: Sequence[kafka_input.KafkaBroker], interceptor: str
                 ) -> list[dict[str, Any]]:
    """Every broker loaded first, then each point's first runs, then each point's second runs."""
    steps: list[dict[str, Any]] = []
    runs: list[list[dict[str, Any]]] = [[] for _ in range(RUNS_PER_POINT)]
    for (k, p, _), broker in zip(points, brokers, strict=True):
        base = {"path": str(p), "format": "kafka", "bootstrap": broker.bootstrap}
        steps.append({**base, "name": f"kafka.{k}x.load", "kind": "kafka_load", "partitions": broker.partitions,
                      "interceptor": interceptor})
        for i, batch in enumerate(_input_point_runs(k, "kafka", base)):
            runs[i].extend(batch)
    for batch in runs:
        steps.extend(batch)
    return steps


def _result(results: dict[str, dict[str, Any]], name: str) -> dict[str, Any] | None:
    """A step's result, {"error": ..., "seconds": None} if it failed, None if it did not run."""
    line = results.get(name)
    if line is None:
        return None
    return line["result"] if "result" in line else {"error": line["error"], "seconds": None}


def _best(runs: list[dict[str, Any] | None]) -> dict[str, Any]:
    """One point of one measurement: its runs' seconds and the best of them, and the errors."""
    secs = [r["seconds"] for r in runs if r is not None and r.get("seconds") is not None]
    out: dict[str, Any] = {"runs": secs, "seconds": min(secs) if len(secs) == len(runs) and secs else None}
    errors = [r["error"] for r in runs if r is not None and "error" in r]
    missing = sum(r is None for r in runs)
    if errors:
        out["errors"] = errors
    if missing:
        out["missing_runs"] = missing
    return out


def _stage_points(kind: str, runs: list[dict[str, Any] | None]) -> dict[str, dict[str, Any]]:
    """A point's stages of `kind` (`offset_path` or `audit`), each the best of its runs' times for it
    (`stage_seconds`: `measures.measure_offset_path`, `measures.stage_seconds`), as measurements of
    their own (`<kind>_<stage>`): the stages of the runs that logged them all, none when a run did not."""
    split: list[dict[str, float]] = [(r or {}).get("stage_seconds") or {} for r in runs]
    if not split or not all(split):
        return {}
    names = [name for name in split[0] if all(name in s for s in split)]
    return {f"{kind}_{name}": _best([{"seconds": s[name]} for s in split]) for name in names}


def _fits(points: list[dict[str, Any]], kinds: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """A least-squares fit per measurement, over its points; {} when a point has no best time."""
    out: dict[str, dict[str, Any]] = {}
    for kind in kinds:
        ok = [(p["records"], p[kind]["seconds"]) for p in points if p[kind]["seconds"] is not None]
        out[kind] = scaling_fit(ok) if len(ok) == len(points) and len(ok) >= 2 else {}
    return out


def _series(get: Callable[[str], dict[str, Any] | None], points: Sequence[Point], path: Path, kinds: tuple[str, ...],
            *, derived: bool, prefix: str) -> dict[str, Any]:
    """One series of scaling points (`scaling` or `fixed_groups`) from its step results: per point
    and measurement the best of its runs, the read floors of its bare scans, the rows the audit
    wrote, the `output_write` floor and the Python workers' peak where measured; the fits."""
    out_points = []
    stages: dict[str, None] = {}  # the stage measurements of any point, in order (`_stage_points`)
    for k, p, rows in points:
        point: dict[str, Any] = {"factor": k, "records": rows, "input": str(p), "reused_main": p == path}
        for kind in kinds:
            rs = [get(n) for n in _point_runs(k, kind, main=p == path, derived=derived, prefix=prefix)]
            point[kind] = _best(rs)
            if kind == "audit":
                hwm = [((r or {}).get("memory") or {}).get("python_worker_peak_hwm_mib") for r in rs]
                hwm = [h for h in hwm if h]
                point[kind]["python_worker_peak_hwm_mib"] = max(hwm, default=None)
                written = [sum(r["table_rows"].values()) for r in rs if r and r.get("table_rows")]
                point[kind]["output_rows"] = max(written, default=None)
                floors = [(r or {}).get("output_write") for r in rs]
                if any(floors):
                    point["output_write"] = {**_best(floors), "rows": next((f["rows"] for f in floors if f), None)}
                    arrow = [None if f is None else {"seconds": f.get("arrow_seconds")} for f in floors]
                    if all(a is not None and a["seconds"] is not None for a in arrow):
                        point["output_write_arrow"] = _best(arrow)
            if kind == "bare_scan":  # the read floors, measured in the same runs (`measure_read_floors`)
                for floor in READ_FLOORS:
                    point[floor] = _best([(r or {}).get(floor) for r in rs])
            if kind in ("offset_path", "audit"):
                staged = _stage_points(kind, rs)
                point.update(staged)
                stages.update(dict.fromkeys(staged))
        out_points.append(point)
    fit_kinds = (kinds + tuple(floor for floor in ("output_write", "output_write_arrow")
                               if out_points and all(floor in p for p in out_points))
                 + (READ_FLOORS if "bare_scan" in kinds else ())
                 + tuple(k for k in stages if all(k in p for p in out_points)))
    return {"points": out_points, "runs_per_point": RUNS_PER_POINT, "fits": _fits(out_points, fit_kinds)}


def _collect(rep: dict[str, Any], results: dict[str, dict[str, Any]], path: Path, scale_points: Sequence[Point],
             delta_points: Sequence[Point] = (), fixed_points: Sequence[Point] = (), *, derived: bool = True) -> None:
    """Puts the step results where the report keeps them; failures are kept as {"error": ...}."""
    m = rep["measurements"]

    def get(name: str) -> dict[str, Any] | None:
        return _result(results, name)

    firsts = {name: get(name) for name in ("bare_scan.first", "bare_scan.last")}
    if firsts["bare_scan.first"] is not None:
        m["bare_scan"] = {"first": firsts["bare_scan.first"], "last": firsts["bare_scan.last"]}
        secs = [x["seconds"] for x in firsts.values() if x is not None and x.get("seconds") is not None]
        rep["bare_scan_seconds"] = min(secs) if secs else None
    for name in ("audit_first", "offset_path", "audit", "peer"):
        r = get(name)
        if r is not None:
            m[name] = r
    runs = {name: get(name) for name in ("audit_base", "audit_base.again", "audit.again")}
    if runs["audit_base"] is not None:
        with_ = [x for x in ((m.get("audit") or {}).get("seconds"), (runs["audit.again"] or {}).get("seconds"))
                 if x is not None]
        without = [x for x in ((runs["audit_base"] or {}).get("seconds"),
                               (runs["audit_base.again"] or {}).get("seconds")) if x is not None]
        m["derived"] = {"with_seconds": with_, "without_seconds": without,
                        "best_with": min(with_, default=None), "best_without": min(without, default=None),
                        "stages_without": (runs["audit_base"] or {}).get("stages")}
    warm = [r for r in (m.get("audit"), runs["audit.again"]) if r and r.get("seconds") and
            r.get("replay_feed_seconds") is not None and r.get("cores")]
    if warm:  # the replay's share of the faster warm audit, from the job's own replay-time line
        best = min(warm, key=lambda r: r["seconds"])
        stage = best.get("replay_stage_seconds")
        m["replay_share"] = {
            "replay_feed_seconds": best["replay_feed_seconds"], "replay_merge_seconds": best["replay_merge_seconds"],
            "cores": best["cores"], "audit_seconds": best["seconds"],
            "share": best["replay_feed_seconds"] / (best["seconds"] * best["cores"]),
            "replay_stage_seconds": stage, "stage_share": stage / best["seconds"] if stage is not None else None,
            "method": "the Python time the replay spent feeding records through the groups' audits (the job's "
                      "`replay: ...` line, all workers) over the run's core-seconds (wall time x cores)"}
    elif m.get("audit"):
        m["replay_share"] = {"share": None, "note": "the job logged no replay time"}
    kinds = _scaling_kinds(set(rep["parameters"].get("skip", ())))
    if scale_points:
        m["scaling"] = _series(get, scale_points, path, kinds, derived=derived, prefix="scaling")
    if fixed_points:
        m["fixed_groups"] = _series(get, fixed_points, path, kinds, derived=derived, prefix="fixed")
    if delta_points:
        points = []
        for k, p, rows in delta_points:
            point = {"factor": k, "records": rows, "input": str(p)}
            for kind in ("bare_scan", "audit"):
                point[kind] = _best([get(n) for n in _point_runs(k, kind, main=False, derived=derived,
                                                                   prefix="delta")])
            points.append(point)
        m["delta_input"] = {"points": points, "runs_per_point": RUNS_PER_POINT,
                            "fits": _fits(points, ("bare_scan", "audit"))}
    mem = (m.get("audit") or {}).pop("memory", None)
    if mem is not None:
        m.setdefault("memory", {})["audit"] = mem
