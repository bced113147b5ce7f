# Databricks notebook source
# MAGIC %md
# MAGIC # coordinator-audit
# MAGIC
# MAGIC Audits Kafka classic consumer groups from `__consumer_offsets` records: every generation, who
# MAGIC owned which partition when, why each rebalance happened, and every broken protocol guarantee,
# MAGIC written as Delta tables.
# MAGIC
# MAGIC 1. Build the wheel on a machine with the repository (`bash scripts/build.sh`) and upload
# MAGIC    `dist/coordinator_audit-<version>-py3-none-any.whl` to the workspace (or a volume); set the
# MAGIC    path in the next cell. Installed without extras, the wheel leaves the runtime's Spark, pandas and
# MAGIC    Delta Spark as they are (pyspark and delta-spark are its `[spark]` and `[delta-spark]` extras,
# MAGIC    for machines without Spark).
# MAGIC 2. Fill in the widgets: the input (a path to Parquet, Delta or JSON-lines dumps, or a table with
# MAGIC    the Kafka-source schema), the output (a base path, or a catalog schema), and optionally the
# MAGIC    time window and group globs.
# MAGIC 3. Run all: the last cells show the tables of this run.

# COMMAND ----------

# MAGIC %pip install /Workspace/Shared/coordinator_audit/coordinator_audit-0.1.0-py3-none-any.whl

# COMMAND ----------

import os


def widget(name: str, default: str = "") -> str:
    """A notebook parameter: a Databricks widget, or (elsewhere) the environment variable
    AUDIT_<NAME>."""
    try:
        dbutils.widgets.text(name, default)
        return dbutils.widgets.get(name).strip()
    except NameError:
        return os.environ.get(f"AUDIT_{name.upper()}", default).strip()


params = {
    "input.path": widget("input_path"),
    "input.table": widget("input_table", "raw.consumer_offsets"),
    "output.path": widget("output_path"),
    "output.catalog_schema": widget("catalog_schema", "audit"),
    "window.since": widget("since"),
    "window.until": widget("until"),
    "groups.include": widget("groups"),
}
if params["input.path"]:
    params["input.table"] = ""
if params["output.path"]:
    params["output.catalog_schema"] = ""
params

# COMMAND ----------

from coordinator_audit.jobs.audit import print_summary, run_audit
from coordinator_audit.jobs.config import load_config

cfg = load_config(None, params)
summary = run_audit(spark, cfg)  # spark: the notebook's session
print_summary(summary)

# COMMAND ----------

from pyspark.sql import functions as F

from coordinator_audit.jobs.delta_io import read_table


def table(name: str):
    """This run's rows of one output table."""
    location = summary.locations[name]
    df = spark.table(location) if cfg.catalog_schema else read_table(spark, location)
    return df.where(F.col("run_id") == summary.run_id)


display(table("runs"))

# COMMAND ----------

# MAGIC %md
# MAGIC Why each generation happened (the most specific cause), and the broken guarantees.

# COMMAND ----------

display(table("rebalance_causes").where("is_primary")
        .select("group_id", "generation_id", "cause", "member_id", "detail", "record_time")
        .orderBy("group_id", "generation_id"))

# COMMAND ----------

display(table("violations").select("group_id", "generation_id", "kind", "topic", "partition", "member_ids",
                                   "detail", "record_time"))

# COMMAND ----------

display(table("generations").select("group_id", "generation_id", "state", "protocol_name", "member_count",
                                    "record_time", "ended_at_time", "lifetime_ms")
        .orderBy("group_id", "generation_id"))

# COMMAND ----------

display(table("quarantine").select("group_id", "partition", "offset", "time", "error", "input_file",
                                   "input_line"))
