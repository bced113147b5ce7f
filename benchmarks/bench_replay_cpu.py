"""CPU cost of the replay's body (`coordinator_audit.udfs.replay.make_replay_fn`) over the single pass's real output,
without Spark's scheduling; prints figures.

    .venv/bin/python -m benchmarks.bench_replay_cpu --input .cache/bench/input-r20221159-g5000-s0
        [--work-dir .cache/bench] [--files N] [--repeat 3] [--nightly] [--json F]
        [--only offset_path,audit,audit_files,nightly] [--instructions [--batches N]]

Input: the replay's input for a benchmark input (`python -m benchmarks`' cache, Parquet with the
Kafka-source schema): the single pass (`coordinator_audit.jobs.offsets_path.scan_log`) and `coordinator_audit.udfs.replay.replay_input`
in a local[2] Spark session, as the job's Spark path builds it (the records it did not summarise
and its stretches, sorted by group within each of 2 shards), written once under `--work-dir`
(`replay-input-<input name>`) and reused; Spark is stopped before anything is timed. Each file
(`--files`: the first N only) is cut into Arrow batches of 10,000 rows.

Measured in this one process, CPU seconds, best of `--repeat`, per configuration of the replay,
after moving the process's live objects out of the cyclic collector's reach as the job's Python
workers do (`gc.freeze`, `coordinator_audit.udfs.gc_batches.freeze_survivors`; otherwise the replay's full
collections would walk this process's imports, which the workers' do not):

* `offset_path`: what the offset path's replay runs (`tables=("offset_commits", "violations")`,
  `observe=False`);
* `audit`: what the embedded audit's replay runs on a fresh output (`derive=True`: every table,
  derived ones included, and the saved states), every row in the output batches;
* `audit_files`: the same as the job's embedded writer runs it on a local output: the tables its
  replay tasks write themselves (`coordinator_audit.jobs.audit.direct_tables`) go into Parquet files under a
  temporary directory (`coordinator_audit.udfs.table_files`), only the rest into the output batches; the hash covers
  the files' rows too (so it differs from `audit`'s: the files carry the run id and the TIMESTAMP
  columns);

* `nightly` (with `--nightly`): what a nightly run's replay runs: the input's second window (the
  input cut in two by record count, `benchmarks.bench_nightly.window_bounds`) resumed from the
  saved states of an audit of its first window (`mode="resume"`, every group's saved state and
  offset windows in the input, as the job hands them off; every row in the output, the carried rows
  included, as without the embedded writer's files, so that two versions hash the same rows); the
  replay's input for it (`replay-input-nightly-f<STATE_FORMAT>-<input name>`, and the first
  window's output it reads the states from, `nightly-base-f<STATE_FORMAT>-<input name>`) is built
  once with Spark and kept under `--work-dir` (per state format: states of another format resume
  otherwise; a new format changes the `_state` rows' JSON and so this hash);

With `--instructions`, each configuration instead replays the first file of its input (`--files`
is then 1; `--batches N`: its first N batches) once in a subprocess under Valgrind's callgrind,
and the figure is the instructions it executed less those of the same subprocess replaying no
batch (its imports and reading the file; both with `PYTHONHASHSEED=0`, so that sets and dicts of
strings are laid out alike from run to run): a count that the machine's load does not move, for
comparing two versions of the code on a shared machine where CPU seconds vary by 10-20% from run to
run (it needs `valgrind`; a run takes minutes: callgrind runs Python about 50 times slower).

Without it, each configuration has `rows_out` and `sha256`, a hash of the output rows (every column, in a canonical order,
the counts rows without their Python timings), so that two versions of the code can be compared
on the same input: the same hash, the same rows. To time another tree (e.g. a `git worktree` of an
earlier commit), run this file by its path with `PYTHONPATH` set to that tree's root:
`PYTHONPATH=OTHER .venv/bin/python benchmarks/bench_replay_cpu.py --input ...`.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file: the project's packages (a PYTHONPATH set first wins)
    sys.path.append(str(ROOT))

from coordinator_audit.core.audit import STATE_FORMAT  # noqa: E402
from coordinator_audit.udfs.replay import COUNTS_TABLE, REPLAY_DERIVED_SCHEMA, REPLAY_SCHEMA, make_replay_fn  # noqa: E402
from coordinator_audit.udfs.table_files import FILES_TABLE, DirectWrite  # noqa: E402

CONFIGURATIONS: dict[str, dict[str, Any]] = {
    "offset_path": {"tables": ("offset_commits", "violations"), "observe": False},
    "audit": {"derive": True},
    "audit_files": {"derive": True, "files": True},
}
"""Replay options per configuration; `files`: the tables the job's embedded writer has its replay
tasks write (`coordinator_audit.jobs.audit.direct_tables`) are written as the job writes them (`_with_files`)."""
NIGHTLY: dict[str, Any] = {"mode": "resume"}
"""The `nightly` configuration's replay options (its own input: `nightly_input`)."""
BATCH_ROWS = 10_000


def replay_input(input_dir: Path, work_dir: Path) -> Path:
    """The replay's input for `input_dir`, built with Spark unless `work_dir` holds it already."""
    out = work_dir / f"replay-input-{input_dir.name}"
    if (out / "_SUCCESS").exists():
        return out
    from coordinator_audit.jobs.offsets_path import scan_log
    from coordinator_audit.jobs.spark_session import build_session
    from coordinator_audit.udfs.replay import replay_input as build_input

    print(f"[bench_replay_cpu] building the replay input of {input_dir} under {out} (Spark, local[2])", flush=True)
    spark = build_session(master="local[2]")
    try:
        scan = scan_log(spark.read.parquet(str(input_dir)))
        build_input(scan.side(), scan.stretches(), shards=2).write.mode("overwrite").parquet(str(out))
    finally:
        spark.stop()
    return out


def nightly_input(input_dir: Path, work_dir: Path) -> Path:
    """The replay's input of the second of two nightly windows of `input_dir` (the module
    docstring), built with Spark unless `work_dir` holds it already."""
    out = work_dir / f"replay-input-nightly-f{STATE_FORMAT}-{input_dir.name}"
    if (out / "_SUCCESS").exists():
        return out
    from benchmarks.bench_nightly import window_bounds
    from coordinator_audit.jobs.audit import run_audit, saved_states
    from coordinator_audit.jobs.config import load_config
    from coordinator_audit.jobs.delta_io import read_table
    from coordinator_audit.jobs.offsets_path import scan_log
    from coordinator_audit.jobs.spark_session import build_session
    from coordinator_audit.udfs.replay import replay_input as build_input

    (_, mid), _ = window_bounds(input_dir, 2)
    base = work_dir / f"nightly-base-f{STATE_FORMAT}-{input_dir.name}"
    print(f"[bench_replay_cpu] building the nightly replay input of {input_dir} under {out} (Spark, local[2]; "
          f"the first window, until {mid.isoformat()}, audited into {base})", flush=True)
    spark = build_session(master="local[2]")
    try:
        if not (base / "runs").exists():
            run_audit(spark, load_config(None, {"input.path": str(input_dir), "input.format": "parquet",
                                                "input.table": "", "output.path": str(base),
                                                "output.write_mode": "overwrite", "window.until": mid}))
        scan = scan_log(spark.read.parquet(str(input_dir)), since=mid)
        states = saved_states(read_table(spark, str(base / "group_state")))
        build_input(scan.side(), scan.stretches(), states, shards=2).write.mode("overwrite").parquet(str(out))
    finally:
        spark.stop()
    return out


def _with_files(options: dict[str, Any], scratch: Path | None) -> dict[str, Any]:
    """`options` for `make_replay_fn`: with `files`, a `DirectWrite` of the tables a fresh embedded
    audit's replay tasks write (`coordinator_audit.jobs.audit.direct_tables`, derived tables included) into
    directories under `scratch`, as the job does (local files, Parquet, a run id)."""
    if not options.get("files"):
        return options
    from coordinator_audit.jobs.audit import direct_tables
    from coordinator_audit.jobs.config import load_config

    assert scratch is not None
    cfg = load_config(None, {"input.path": str(scratch), "input.format": "parquet", "input.table": "",
                             "output.path": str(scratch / "out")})
    names = direct_tables(cfg, writer="embedded", derive_in_replay=True, input_rejects=False)
    rest = {k: v for k, v in options.items() if k != "files"}
    return {**rest, "direct": DirectWrite({name: str(scratch / "out" / name) for name in names}, "bench",
                                          compression=cfg.compression)}


def _file_rows(scratch: Path) -> list[str]:
    """The rows of every Parquet file the replay wrote under `scratch` (each with its table)."""
    rows: list[str] = []
    for f in sorted((scratch / "out").glob("*/*.parquet")):
        table = f.parent.name
        rows.extend(repr((table, sorted(r.items()))) for r in pq.read_table(f).to_pylist())
    return rows


def _rows_hash(batches: list[pa.RecordBatch], extra: Sequence[str] = ()) -> str:
    """A hash of the wide rows (with `extra`), each over every column of the full wide schema, a
    column its batch lacks as null: a replay asked for some tables outputs only their columns
    (`coordinator_audit.udfs.replay.replay_schema`), and hashes the same rows as one asked for every table."""
    rows: list[str] = list(extra)
    for batch in batches:
        full = REPLAY_SCHEMA if set(batch.schema.names) <= set(REPLAY_SCHEMA.fieldNames()) else REPLAY_DERIVED_SCHEMA
        names = full.fieldNames()
        for found in batch.to_pylist():
            r = {name: found.get(name) for name in names}
            if r["_table"] == COUNTS_TABLE:  # its Python timings differ from run to run
                r = {k: v for k, v in r.items() if not k.startswith("double_")}
            elif r["_table"] == FILES_TABLE:  # a file's name is new each run: its rows are hashed instead
                continue
            rows.append(repr(sorted(r.items())))
    digest = hashlib.sha256()
    for row in sorted(rows):
        digest.update(row.encode())
        digest.update(b"\n")
    return digest.hexdigest()


def _frozen_as_in_a_worker() -> None:
    """This process's live objects (its imports, the input read) moved out of the cyclic collector's
    reach, as the job's task functions do in a Spark Python worker (`coordinator_audit.udfs.gc_batches.
    freeze_survivors`): the replay's collections then walk only what the replay allocates."""
    gc.collect()
    gc.freeze()


def measure(tables: list[pa.Table], options: dict[str, Any], repeat: int) -> dict[str, Any]:
    """Best CPU seconds of `repeat` replays of every table (each its own task), rows and hash (with
    `files`, the rows of the files written too: `rows_out` counts both)."""
    best = float("inf")
    out: list[pa.RecordBatch] = []
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        scratch = Path(tmp)
        replay_options = _with_files(options, scratch)  # untimed: it reads the job's config
        _frozen_as_in_a_worker()
        for _ in range(repeat):
            shutil.rmtree(scratch / "out", ignore_errors=True)
            out = []
            start = time.process_time()
            for table in tables:
                out.extend(make_replay_fn(**replay_options)(iter(table.to_batches(max_chunksize=BATCH_ROWS))))
            best = min(best, time.process_time() - start)
        written = _file_rows(scratch)
    files = sum(1 for b in out for t in b.column("_table").to_pylist() if t == FILES_TABLE)
    return {"cpu_s": round(best, 3), "rows_out": sum(b.num_rows for b in out) - files + len(written),
            "sha256": _rows_hash(out, written)}


def _replay_once(files: list[Path], options: dict[str, Any], batches: int | None) -> None:
    """One replay of the first `batches` batches (all: None) of each file (the subprocess that
    `instructions` counts)."""
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        replay_options = _with_files(options, Path(tmp))
        for f in files:
            table = pq.read_table(f)
            _frozen_as_in_a_worker()
            for _ in make_replay_fn(**replay_options)(
                    iter(table.to_batches(max_chunksize=BATCH_ROWS)[:batches])):
                pass


def instructions(files: list[Path], options: dict[str, Any], batches: int | None) -> int:
    """Instructions (callgrind's Ir) a subprocess executes replaying `batches` batches of `files`
    with `options`, less those of one replaying none (`_replay_once`)."""
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")

    def count(n: int | None) -> int:
        child = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(
            {"files": [str(f) for f in files], "options": options, "batches": n})]
        done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *child],
                              capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": _code_root(), "PYTHONHASHSEED": "0"})
        found = re.search(r"Collected : (\d+)", done.stderr)
        if done.returncode != 0 or found is None:
            raise SystemExit(f"callgrind run failed (rc {done.returncode}): {done.stderr[-2000:]}")
        return int(found.group(1))

    return count(batches) - count(0)


def _code_root() -> str:
    """The tree whose packages this run imports (a PYTHONPATH set first wins), for the subprocess."""
    return os.environ.get("PYTHONPATH") or str(ROOT)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_replay_cpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--input", type=Path, help="a benchmark input (Kafka-source Parquet; required)")
    p.add_argument("--work-dir", type=Path, default=ROOT / ".cache" / "bench", help="where the replay input is kept")
    p.add_argument("--files", type=int, default=None, help="replay only the first N files of the replay input")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--nightly", action="store_true", help="also time a nightly window's replay (module docstring)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    p.add_argument("--instructions", action="store_true",
                   help="count instructions under callgrind instead of timing (module docstring)")
    p.add_argument("--batches", type=int, default=None, help="with --instructions: the first N batches only")
    p.add_argument("--only", default=None,
                   help="comma-separated configurations to measure (offset_path, audit, audit_files, and nightly with --nightly; "
                        "default all)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child is not None:
        spec = json.loads(args.child)
        _replay_once([Path(f) for f in spec["files"]], spec["options"], spec["batches"])
        return 0
    if args.input is None:
        p.error("the following arguments are required: --input")
    if not args.input.is_dir():
        p.error(f"--input {args.input}: no such directory (python -m benchmarks writes them under .cache/bench)")
    if args.repeat < 1 or any(n is not None and n < 1 for n in (args.files, args.batches)):
        p.error("--repeat, --files and --batches must be >= 1")
    args.work_dir.mkdir(parents=True, exist_ok=True)
    source = replay_input(args.input, args.work_dir)
    if args.instructions:
        return _count_instructions(args, source)
    files = sorted(source.glob("part-*.parquet"))[:args.files]
    tables = [pq.read_table(f) for f in files]
    figures: dict[str, Any] = {"input": str(args.input), "replay_input_rows": sum(t.num_rows for t in tables),
                               "files": len(files)}
    print(f"replay input: {figures['replay_input_rows']:,} rows in {len(files)} files of {source}", flush=True)
    chosen = _chosen(args.only, {**CONFIGURATIONS, **({"nightly": NIGHTLY} if args.nightly else {})})
    for name, options in CONFIGURATIONS.items():
        if name not in chosen:
            continue
        figures[name] = measure(tables, options, args.repeat)
        f = figures[name]
        print(f"{name:12s} {f['cpu_s']:8.3f} s CPU  {f['rows_out']:>10,} rows out  sha256 {f['sha256'][:16]}", flush=True)
    if "nightly" in chosen:
        nightly = sorted(nightly_input(args.input, args.work_dir).glob("part-*.parquet"))[:args.files]
        f = figures["nightly"] = measure([pq.read_table(f) for f in nightly], NIGHTLY, args.repeat)
        print(f"{'nightly':12s} {f['cpu_s']:8.3f} s CPU  {f['rows_out']:>10,} rows out  sha256 {f['sha256'][:16]}",
              flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


def _chosen(only: str | None, known: dict[str, Any]) -> set[str]:
    """The configurations `--only` names (all of `known` without it)."""
    if only is None:
        return set(known)
    names = {name.strip() for name in only.split(",") if name.strip()}
    unknown = sorted(names - set(known))
    if unknown:
        raise SystemExit(f"--only: unknown configuration(s) {unknown}; choose from {sorted(known)}")
    return names


def _count_instructions(args: argparse.Namespace, source: Path) -> int:
    """`--instructions`: each configuration's count on the first file of its input."""
    configurations = {**CONFIGURATIONS, **({"nightly": NIGHTLY} if args.nightly else {})}
    chosen = _chosen(args.only, configurations)
    figures: dict[str, Any] = {"input": str(args.input), "batches": args.batches, "instructions": {}}
    for name, options in configurations.items():
        if name not in chosen:
            continue
        replayed = nightly_input(args.input, args.work_dir) if name == "nightly" else source
        first = sorted(replayed.glob("part-*.parquet"))[:1]
        n = figures["instructions"][name] = instructions(first, options, args.batches)
        print(f"{name:12s} {n:>16,} instructions  ({first[0].name}, {args.batches or 'all'} batches)", flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
