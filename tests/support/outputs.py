"""Two outputs of the job compared as stored: `local_compare_outputs(left, right)` reads every table
a run writes (and `runs`) with delta-rs, as stored (the current version, no de-duplication), and
lists where they differ. A stand-in for the project's own comparison of two outputs, used by the
tiers that check the job elsewhere (a standalone cluster, Spark Connect) against local mode."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from jobs.audit import AUDIT_OUTPUT_TABLES

__all__ = ["RUNS_COMPARED", "local_compare_outputs"]

RUNS_COMPARED = ("status", "input", "input_format", "since", "until", "group_filter", "records_in",
                 "duplicates_dropped", "filtered_by_window", "filtered_by_group", "records_replayed", "quarantined",
                 "skipped_other_type", "table_rows", "code_version", "spark_version", "writer", "resume",
                 "base_run_id", "end_offsets", "missing_offsets", "note")
"""The columns of `runs` that say what a run read and wrote; the rest (times, duration, the settings
as JSON, which name the master) differ between any two runs."""


# ------------------------------------------------------------------------------------------------
# comparison of two outputs as stored


def _canonical(value: Any, type_: pa.DataType) -> Any:
    """A stored value in a hashable form: a map's entries sorted (their order means nothing),
    lists and structs as tuples."""
    if value is None:
        return None
    if pa.types.is_map(type_):
        return tuple(sorted(((_canonical(k, type_.key_type), _canonical(v, type_.item_type)) for k, v in value),
                            key=repr))
    if pa.types.is_list(type_) or pa.types.is_large_list(type_):
        return tuple(_canonical(v, type_.value_type) for v in value)
    if pa.types.is_struct(type_):
        return tuple((f.name, _canonical(value[f.name], f.type)) for f in type_)
    return value


def _stored_rows(path: Path, columns: Sequence[str] | None = None) -> tuple[pa.Schema, list[tuple[Any, ...]]]:
    """A Delta table's rows as stored (its current version, no de-duplication), without `run_id` and
    `run_window` (or only `columns`), each row canonical, sorted."""
    table = DeltaTable(str(path)).to_pyarrow_table()
    keep = list(columns) if columns is not None else [c for c in table.column_names
                                                       if c not in ("run_id", "run_window")]
    table = table.select(keep)
    types = [table.schema.field(c).type for c in keep]
    rows = [tuple(_canonical(row[c], t) for c, t in zip(keep, types, strict=True)) for row in table.to_pylist()]
    return table.schema, sorted(rows, key=repr)


def local_compare_outputs(left: Path, right: Path) -> list[str]:
    """Where two outputs' tables, read as stored, differ: every table a run writes on all columns but
    `run_id`/`run_window`, and `runs` on `RUNS_COMPARED`. Empty when they are equal. (A stand-in for
    the project's comparison of two outputs.)"""
    problems: list[str] = []
    for name in (*AUDIT_OUTPUT_TABLES, "runs"):
        columns = RUNS_COMPARED if name == "runs" else None
        (ls, lrows), (rs, rrows) = _stored_rows(left / name, columns), _stored_rows(right / name, columns)
        if ls != rs:
            problems.append(f"{name}: schemas differ:\n{ls}\n--- against ---\n{rs}")
        elif lrows != rrows:
            only_left = [r for r in lrows if r not in rrows][:3]
            only_right = [r for r in rrows if r not in lrows][:3]
            problems.append(f"{name}: {len(lrows)} rows against {len(rrows)}; only in {left.name}: {only_left}; "
                            f"only in {right.name}: {only_right}")
    return problems
