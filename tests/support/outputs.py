"""Two outputs of the job compared as stored, for the tiers that check the job elsewhere (a
standalone cluster, Spark Connect) against local mode: every table `coordinator_audit.jobs.compare` compares, plus the
saved states and what each run read and wrote."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from deltalake import DeltaTable

from coordinator_audit.jobs.compare import IGNORED_COLUMNS, canonical_rows, compare_outputs

__all__ = ["RUNS_COMPARED", "differences"]

RUNS_COMPARED = ("status", "input", "input_format", "since", "until", "group_filter", "records_in",
                 "duplicates_dropped", "filtered_by_window", "filtered_by_group", "records_replayed", "quarantined",
                 "skipped_other_type", "table_rows", "code_version", "spark_version", "writer", "resume",
                 "base_run_id", "end_offsets", "missing_offsets", "note")
"""The columns of `runs` that say what a run read and wrote; the rest (times, duration, the settings
as JSON, which name the master) differ between any two runs."""


def _stored(path: Path, columns: Sequence[str]) -> list[str]:
    """Some columns of a Delta table as stored, a row a sorted entry (`coordinator_audit.jobs.compare.canonical_rows`)."""
    names = DeltaTable(str(path)).schema().to_arrow().names
    return canonical_rows(path, ignore=[c for c in names if c not in columns])


def differences(left: Path, right: Path) -> list[str]:
    """Where two outputs, read as stored, differ: every table `coordinator_audit.jobs.compare` compares, the saved
    states (`group_state`, all columns but `run_id`/`run_window`) and what each run read and wrote
    (`runs` on `RUNS_COMPARED`). Empty when they are equal."""
    problems = [r.describe() for r in compare_outputs(left, right) if not r.equal]
    for name in ("group_state", "runs"):
        columns = RUNS_COMPARED if name == "runs" else [
            c for c in DeltaTable(str(left / name)).schema().to_arrow().names if c not in IGNORED_COLUMNS]
        if _stored(left / name, columns) != _stored(right / name, columns):
            problems.append(f"{name}: the stored rows differ")
    return problems
