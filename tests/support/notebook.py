"""Runs the Databricks notebook (`notebooks/coordinator_audit.py`, Databricks' source format) cell by
cell against a Spark Connect server, as a notebook on shared-access or serverless compute runs: its
`spark` is a Spark Connect session, and nothing else of Databricks is there (`dbutils` is absent, so
the notebook's widgets read `AUDIT_<NAME>` environment variables; `display` records what it was
given). Markdown cells are skipped; the `%pip` cell is expanded as IPython expands a line magic
(`{name}` from the notebook's variables) and reported, not run: the client already imports the
project.

    python -m tests.support.notebook NOTEBOOK --remote sc://HOST:PORT

prints one JSON object: `pip` (the expanded `%pip` lines), `displayed` (per `display` call: the
columns and the row count), `tables` (the names the notebook's `table()` was asked for, in order)
and `locations` (the run's tables)."""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SEPARATOR = "# COMMAND ----------"
HEADER = "# Databricks notebook source"


@dataclass(frozen=True)
class Cell:
    kind: str  # "python", "markdown" or "magic" (a `# MAGIC %<command>` cell other than %md)
    source: str


def cells(path: Path) -> list[Cell]:
    """The notebook's cells, in order."""
    text = path.read_text(encoding="utf-8")
    if not text.startswith(HEADER):
        raise ValueError(f"{path}: not a Databricks source notebook (no {HEADER!r} first line)")
    out = []
    for chunk in text[len(HEADER):].split(SEPARATOR):
        source = chunk.strip("\n")
        if not source.strip():
            continue
        lines = source.splitlines()
        if all(line.startswith("# MAGIC") for line in lines):
            body = "\n".join(line[len("# MAGIC"):].removeprefix(" ") for line in lines)
            out.append(Cell("markdown" if body.startswith("%md") else "magic", body))
        else:
            out.append(Cell("python", source))
    return out


def _expand(line: str, namespace: dict[str, Any]) -> str:
    """IPython's expansion of `{name}` in a line magic, for names only."""
    return re.sub(r"\{(\w+)\}", lambda m: str(namespace[m.group(1)]), line)


def run(path: Path, remote: str) -> dict[str, Any]:
    from pyspark.sql import DataFrame, SparkSession

    spark = SparkSession.builder.remote(remote).getOrCreate()
    displayed: list[dict[str, Any]] = []
    asked: list[str] = []
    pip: list[str] = []

    def display(df: DataFrame) -> None:
        displayed.append({"columns": list(df.columns), "rows": df.count()})

    namespace: dict[str, Any] = {"spark": spark, "display": display, "__name__": "__main__"}
    for cell in cells(path):
        if cell.kind == "markdown":
            continue
        if cell.kind == "magic":
            if not cell.source.startswith("%pip "):
                raise ValueError(f"{path}: a magic this runner does not know: {cell.source.splitlines()[0]}")
            pip.append(_expand(cell.source, namespace))
            continue
        exec(compile(cell.source, str(path), "exec"), namespace)  # the notebook's own code, as Databricks runs it
        table = namespace.get("table")
        if callable(table) and not getattr(table, "_recorded", False):
            def recorded(name: str, _table: Any = table) -> DataFrame:
                asked.append(name)
                return _table(name)  # type: ignore[no-any-return]
            recorded._recorded = True  # type: ignore[attr-defined]
            namespace["table"] = recorded
    summary = namespace["summary"]
    return {"pip": pip, "displayed": displayed, "tables": asked, "locations": dict(summary.locations)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--remote", required=True)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.notebook, args.remote)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
