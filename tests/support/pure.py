"""The pure audit (`coordinator_audit.core.audit.audit_group`) of a Kafka-source Parquet log, group by
group, and a table's rows as the job stored them beside those rows: how the Spark tier holds the
job's tables against the core, row for row."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from coordinator_audit.core.audit import audit_group
from coordinator_audit.core.records import decode
from coordinator_audit.jobs.delta_io import read_table
from coordinator_audit.udfs.schemas import AUDIT_TABLES

__all__ = ["pure_rows", "stored_and_pure"]


def pure_rows(log: Path) -> list[Any]:
    """Every row the pure audit gives for the groups of `log`, in log order per group."""
    table = sorted(pq.read_table(log).to_pylist(), key=lambda r: (r["partition"], r["offset"]))
    by_group: dict[str, list[Any]] = defaultdict(list)
    for r in table:
        key = decode(r["key"], None).key
        group = getattr(key, "group_id", None) or key.group  # type: ignore[union-attr]
        by_group[group].append((r["partition"], r["offset"], int(r["timestamp"].timestamp() * 1000), r["key"],
                                r["value"]))
    return [row for records in by_group.values() for row in audit_group(records)]


def stored_and_pure(spark: Any, out: Path, table: str, log: Path) -> tuple[list[str], list[str]]:
    """The content columns of base table `table` under the output `out`, as stored, and as the pure
    audit of `log` gives them: each a sorted list of one canonical text per row."""
    cls = AUDIT_TABLES[table]
    cols = [f.name for f in dataclasses.fields(cls)]

    def norm(values: Any) -> str:
        return repr(tuple(tuple(v) if isinstance(v, list | tuple) else v for v in values))

    pure = sorted(norm(getattr(r, c) for c in cols) for r in pure_rows(log) if isinstance(r, cls))
    got = sorted(norm(r) for r in read_table(spark, str(out / table)).select(*cols).collect())
    return got, pure
