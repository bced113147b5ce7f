"""Compares two audit outputs table by table, as stored: are N nightly runs the same tables as one run?

    coordinator-audit compare BASE_A BASE_B

Every Delta table under each base path (a directory holding a `_delta_log`) is read at its current
version with delta-rs, as any reader sees it (no de-duplication), and its rows are compared as a
multiset on every column but `run_id` and `run_window`, which name the run and the window that wrote
a row. Two tables are not compared, because they record runs rather than the log: `runs` (one row
per run) and `group_state` (each run's saved state of every group, in its window). The answer is one
line per table (rows on each side, `equal` or the first rows found on one side only); exit status 0
when every compared table is equal, 1 when one differs or exists on one side only, 2 on a usage error
(a path that is no audit output).

`canonical_rows` is the one definition of a table's rows as compared; `benchmarks.output_hash`
hashes the same rows.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from coordinator_audit.cli import EXIT_CODES, PROG
from coordinator_audit.jobs.delta_read import read_arrow

__all__ = ["IGNORED_COLUMNS", "NOT_COMPARED", "TableComparison", "canonical_rows", "compare_outputs", "main",
           "output_tables"]

IGNORED_COLUMNS: tuple[str, ...] = ("run_id", "run_window")
"""Columns naming the run and the window that wrote a row: they differ between N runs and one."""

NOT_COMPARED: dict[str, str] = {
    "runs": "one row per run",
    "group_state": "each run's saved state of every group",
}
"""Tables of run bookkeeping, left out of `compare_outputs` (why, as printed)."""

SHOWN_ROWS = 3
"""Rows shown per side for a table that differs."""


def output_tables(base: Path) -> dict[str, Path]:
    """{table name: directory} of every Delta table directly under `base`."""
    return {p.name: p for p in sorted(base.iterdir()) if (p / "_delta_log").is_dir()}


def _plain(value: Any) -> Any:
    """A value in a form JSON keeps and orders: bytes as hex, a map's entries sorted, lists as lists."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, list):
        items = [_plain(v) for v in value]
        if items and all(isinstance(v, tuple) and len(v) == 2 for v in value):  # a map's (key, value) entries
            return sorted(items, key=repr)
        return items
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def canonical_rows(table: Path, *, ignore: Sequence[str] = IGNORED_COLUMNS) -> list[str]:
    """The rows of the Delta table at `table` as stored, each a JSON object with sorted keys of every
    column but `ignore` (times as ISO text, bytes as hex, a map's entries sorted), in sorted order."""
    arrow: pa.Table = read_arrow(str(table))  # (not DeltaTable.to_pyarrow_table: see coordinator_audit.jobs.delta_read)
    arrow = arrow.select([c for c in arrow.column_names if c not in ignore])
    return sorted(json.dumps({k: _plain(v) for k, v in row.items()}, sort_keys=True, default=str)
                  for row in arrow.to_pylist())


@dataclass(frozen=True, slots=True)
class TableComparison:
    """One table of two outputs: its rows on each side (None: absent there), and the rows found on
    one side more often than on the other (at most `SHOWN_ROWS` each)."""

    table: str
    rows_a: int | None
    rows_b: int | None
    only_a: tuple[str, ...] = ()
    only_b: tuple[str, ...] = ()

    @property
    def equal(self) -> bool:
        return self.rows_a is not None and self.rows_b is not None and not self.only_a and not self.only_b

    def describe(self) -> str:
        def n(rows: int | None) -> str:
            return "absent" if rows is None else f"{rows:,} rows"

        line = f"{self.table:<22} {n(self.rows_a):>14} | {n(self.rows_b):<14}"
        if self.equal:
            return line + " equal"
        if self.rows_a is None or self.rows_b is None:
            return line + " DIFFERS: the table exists on one side only"
        parts = [line + " DIFFERS"]
        parts += [f"    only in A: {r}" for r in self.only_a]
        parts += [f"    only in B: {r}" for r in self.only_b]
        return "\n".join(parts)


def _first(rows: Counter[str]) -> tuple[str, ...]:
    return tuple(sorted(rows)[:SHOWN_ROWS])


def compare_outputs(a: Path, b: Path) -> list[TableComparison]:
    """Every table of outputs `a` and `b` but `NOT_COMPARED`, compared as stored (module docstring)."""
    first, second = output_tables(a), output_tables(b)
    out = []
    for name in sorted(set(first) | set(second)):
        if name in NOT_COMPARED:
            continue
        if name not in first or name not in second:
            rows = {side: len(canonical_rows(tables[name])) if name in tables else None
                    for side, tables in (("a", first), ("b", second))}
            out.append(TableComparison(name, rows["a"], rows["b"]))
            continue
        ra, rb = Counter(canonical_rows(first[name])), Counter(canonical_rows(second[name]))
        out.append(TableComparison(name, ra.total(), rb.total(), _first(ra - rb), _first(rb - ra)))
    return out


def _is_output(base: Path) -> bool:
    return base.is_dir() and bool(output_tables(base))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=f"{PROG} compare", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXIT_CODES)
    p.add_argument("base_a", type=Path, help="an audit output's base path (e.g. N nightly runs)")
    p.add_argument("base_b", type=Path, help="another (e.g. one run over the whole log)")
    try:
        args = p.parse_args(argv)
    except SystemExit as exc:
        return 0 if exc.code == 0 else 2
    for base in (args.base_a, args.base_b):
        if not _is_output(base):
            print(f"{PROG} compare: {base} is no audit output (no directory holding a Delta table's _delta_log)",
                  file=sys.stderr)
            return 2
    results = compare_outputs(args.base_a, args.base_b)
    print(f"A = {args.base_a}\nB = {args.base_b}\n(every column but {', '.join(IGNORED_COLUMNS)}; not compared: "
          + "; ".join(f"{t} ({why})" for t, why in NOT_COMPARED.items()) + ")")
    for r in results:
        print(r.describe())
    differ = sum(not r.equal for r in results)
    print("all tables equal" if not differ else f"{differ} of {len(results)} tables differ")
    return 1 if differ else 0
