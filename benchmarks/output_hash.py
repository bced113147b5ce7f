"""Hashes of an audit output's tables, to check that a change to the job changes no row: one line per
table (rows, a SHA-256 of its schema and of its rows in a canonical order); asserts nothing, except
that with two outputs it exits 1 when a table differs.

    .venv/bin/python -m benchmarks.output_hash OUT [OTHER_OUT]

Every table under OUT is read with delta-rs at its current version. What differs from run to run is
left out: the `run_id` column (and `runs`' times, durations, config, versions and base run id: only its counts
and table rows are hashed). The schema is hashed by column names, types and nullability, as Delta
stores them. The rows are those `coordinator_audit.jobs.compare` compares (`canonical_rows`: JSON with sorted keys, a
map's entries sorted, in sorted order), hashed in that order. To check that N nightly runs equal one
run, use `coordinator-audit compare` (it leaves out `run_window` and the run bookkeeping tables).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

from coordinator_audit.jobs.compare import canonical_rows, output_tables

RUN_VARYING = {"run_id", "started_at", "finished_at", "duration_ms", "config_json", "code_version", "spark_version",
               "input", "base_run_id"}
"""Columns whose values differ between two runs of the same input (ids, times, where it ran; in a
nightly chain, the id of the run a run continues)."""


def table_hash(path: Path) -> tuple[int, str, str]:
    """(rows, schema SHA-256, rows SHA-256) of the Delta table at `path`: its rows as
    `coordinator_audit.jobs.compare.canonical_rows` gives them (but the `RUN_VARYING` columns), hashed in that order."""
    schema = json.dumps([(f.name, str(f.type), f.nullable) for f in pa.schema(DeltaTable(str(path)).schema()
                                                                               .to_arrow())], sort_keys=True)
    rows = canonical_rows(path, ignore=tuple(RUN_VARYING))
    h = hashlib.sha256()
    for r in rows:
        h.update(r.encode())
        h.update(b"\n")
    return len(rows), hashlib.sha256(schema.encode()).hexdigest()[:16], h.hexdigest()[:16]


def output_hashes(out: Path) -> dict[str, tuple[int, str, str]]:
    """`table_hash` of every table directory under `out` (one holding a `_delta_log`)."""
    return {name: table_hash(p) for name, p in output_tables(out).items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.output_hash", description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="an audit output's base path")
    p.add_argument("other", type=Path, nargs="?", help="a second output to compare with")
    args = p.parse_args(argv)
    first = output_hashes(args.out)
    second = output_hashes(args.other) if args.other else None
    differ = 0
    for name, (rows, schema, digest) in first.items():
        line = f"{name:<22} {rows:>10,} rows  schema {schema}  rows {digest}"
        if second is not None:
            same = second.get(name) == (rows, schema, digest)
            differ += not same
            line += "  same" if same else f"  DIFFERS: {second.get(name)}"
        print(line)
    if second is not None:
        for name in sorted(set(second) - set(first)):
            print(f"{name:<22} only in {args.other}")
            differ += 1
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
