"""Hashes of an audit output's tables, to check that a change to the job changes no row: one line per
table (rows, a SHA-256 of its schema and of its rows in a canonical order); asserts nothing, except
that with two outputs it exits 1 when a table differs.

    .venv/bin/python -m benchmarks.output_hash OUT [OTHER_OUT]

Every table under OUT is read with delta-rs at its current version. What differs from run to run is
left out: the `run_id` column (and `runs`' times, durations, config, versions and base run id: only its counts
and table rows are hashed). The schema is hashed by column names, types and nullability, as Delta
stores them. The rows are each serialized as JSON with sorted keys (and a map's entries sorted), sorted,
and hashed in that order.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

RUN_VARYING = {"run_id", "started_at", "finished_at", "duration_ms", "config_json", "code_version", "spark_version",
               "input", "base_run_id"}
"""Columns whose values differ between two runs of the same input (ids, times, where it ran; in a
nightly chain, the id of the run a run continues)."""


def table_hash(path: Path) -> tuple[int, str, str]:
    """(rows, schema SHA-256, rows SHA-256) of the Delta table at `path`."""
    table = DeltaTable(str(path)).to_pyarrow_table()
    keep = [c for c in table.column_names if c not in RUN_VARYING]
    table = table.select(keep)
    schema = json.dumps([(f.name, str(f.type), f.nullable) for f in pa.schema(DeltaTable(str(path)).schema()
                                                                               .to_arrow())], sort_keys=True)
    maps = [f.name for f in table.schema if pa.types.is_map(f.type)]  # entries in no particular order
    rows = sorted(json.dumps({**r, **{m: sorted(r[m]) if r[m] is not None else None for m in maps}},
                             sort_keys=True, default=_plain) for r in table.to_pylist())
    h = hashlib.sha256()
    for r in rows:
        h.update(r.encode())
        h.update(b"\n")
    return table.num_rows, hashlib.sha256(schema.encode()).hexdigest()[:16], h.hexdigest()[:16]


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def output_hashes(out: Path) -> dict[str, tuple[int, str, str]]:
    """`table_hash` of every table directory under `out` (one holding a `_delta_log`)."""
    return {p.name: table_hash(p) for p in sorted(out.iterdir()) if (p / "_delta_log").is_dir()}


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
