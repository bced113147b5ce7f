# Databricks notebook source
# MAGIC %md
# MAGIC # coordinator-audit
# MAGIC
# MAGIC Audits Kafka consumer groups from `__consumer_offsets` records: every generation, who owned which
# MAGIC partition when, why each rebalance happened, and every broken protocol guarantee, written as Delta
# MAGIC tables. Runs on any Databricks compute, shared-access and serverless included: it uses only the
# MAGIC notebook's `spark` session (Spark Connect or classic), never `sparkContext`.
# MAGIC
# MAGIC 1. Build the wheel on a machine with the repository (`bash scripts/build.sh`), upload
# MAGIC    `dist/coordinator_audit-<version>-py3-none-any.whl` to a volume or the workspace, and put its path in
# MAGIC    the `wheel` widget. Installed without extras, the wheel leaves the runtime's Spark, pandas and Delta
# MAGIC    Spark as they are (pyspark and delta-spark are its `[spark]` and `[delta-spark]` extras, for
# MAGIC    machines without Spark).
# MAGIC 2. Fill in the widgets: the input (a path to Parquet, Delta or JSON-lines dumps, or a catalog table with
# MAGIC    the Kafka source's schema), the output (a base path, or a catalog schema), optionally the broker's
# MAGIC    `server.log` (a file or a folder: the broker's own reasons for each rebalance), the time window and
# MAGIC    group globs.
# MAGIC 3. Run all: the last cells show every table of this run.

# COMMAND ----------

WHEEL = "/Volumes/main/default/libs/coordinator_audit-0.1.0-py3-none-any.whl"
try:
    dbutils.widgets.text("wheel", WHEEL)
    wheel = dbutils.widgets.get("wheel").strip()
except NameError:  # not on Databricks: the environment variable AUDIT_WHEEL
    import os

    wheel = os.environ.get("AUDIT_WHEEL", WHEEL).strip()

# COMMAND ----------

# MAGIC %pip install {wheel}

# COMMAND ----------

import os


def widget(name: str, default: str = "") -> str:
    """A notebook parameter: a Databricks widget, or (elsewhere) the environment variable
    AUDIT_<NAME>."""
    try:
        dbutils.widgets.text(name, default)
        return str(dbutils.widgets.get(name)).strip()
    except NameError:
        return os.environ.get(f"AUDIT_{name.upper()}", default).strip()


params = {
    "input.path": widget("input_path"),
    "input.table": widget("input_table", "raw.consumer_offsets"),
    "input.server_log": widget("server_log"),
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

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from coordinator_audit.jobs.delta_io import read_table


def table(name: str) -> DataFrame:
    """This run's rows of one output table."""
    location = summary.locations[name]
    session = spark
    df = session.table(location) if cfg.catalog_schema else read_table(session, location)
    return df.where(F.col("run_id") == summary.run_id)

# COMMAND ----------

display(table("runs"))

# COMMAND ----------

# MAGIC %md
# MAGIC The groups' health: rebalances per hour, time spent rebalancing, partition-time unowned, and a status.

# COMMAND ----------

display(table("group_health").orderBy(F.desc("flapping_score")))

# COMMAND ----------

# MAGIC %md
# MAGIC Why each generation happened (the most specific cause first; the broker's own words are in
# MAGIC `generations.broker_cause`/`broker_reason` when a server log was given), and the broken guarantees.

# COMMAND ----------

display(table("rebalance_causes").where("is_primary")
        .select("group_id", "generation_id", "cause", "member_id", "detail", "record_time")
        .orderBy("group_id", "generation_id"))

# COMMAND ----------

display(table("violations").select("group_id", "generation_id", "kind", "topic", "partition",
                                   "member_ids", "detail", "record_time"))

# COMMAND ----------

# MAGIC %md
# MAGIC Every generation and each member's assignment in it.

# COMMAND ----------

display(table("generations").select("group_id", "generation_id", "state", "protocol_name",
                                    "member_count", "record_time", "ended_at_time", "lifetime_ms",
                                    "broker_cause", "broker_reason")
        .orderBy("group_id", "generation_id"))

# COMMAND ----------

display(table("assignments").orderBy("group_id", "generation_id", "member_id"))

# COMMAND ----------

# MAGIC %md
# MAGIC Who owned each partition when (intervals; `owner_member_id` null: unowned), and each rebalance's phases.

# COMMAND ----------

display(table("partition_ownership").orderBy("group_id", "topic", "partition", "valid_from"))

# COMMAND ----------

display(table("rebalances").orderBy("group_id", "generation_id"))

# COMMAND ----------

# MAGIC %md
# MAGIC Offset commits (one row per group, topic-partition and commit stretch), and what could not be decoded.

# COMMAND ----------

display(table("offset_commits").orderBy("group_id", "topic", "partition"))

# COMMAND ----------

display(table("quarantine").select("group_id", "partition", "offset", "time", "error", "input_file",
                                   "input_line"))
