"""The broker's own account of each generation (`coordinator_audit.core.broker_log`) as Spark columns of
`generations`.

`broker_account_frame(spark, path)` parses the server.log file or directory on the driver (only
GroupCoordinator lines are kept: a day of a busy broker's log is a few MB of them) into one row per
(group_id, generation_id, group_type) with `BROKER_ACCOUNT_COLUMNS`: a classic generation's
rebalance, or a KIP-848 consumer group's epoch (`group_type` "consumer"); `attach_broker_account(
generations, account)` left-joins it on those three columns (a migrated group's classic generation
and consumer epoch of the same number are two generations), nulls when `account` is None.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from coordinator_audit.core.broker_log import broker_account, read_server_log
from coordinator_audit.udfs.schemas import BROKER_ACCOUNT_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["ACCOUNT_SCHEMA", "attach_broker_account", "broker_account_frame"]

ACCOUNT_SCHEMA = StructType([StructField("group_id", StringType(), False),
                             StructField("generation_id", IntegerType(), False),
                             StructField("group_type", StringType(), False),
                             *BROKER_ACCOUNT_COLUMNS.fields])


def broker_account_frame(spark: SparkSession, path: str, *, utc_offset_minutes: int = 0) -> DataFrame:
    """One row per (group, generation) the server log accounts for (the last account wins when the
    log shows a generation twice, e.g. after a coordinator moved and the group restarted)."""
    rows: dict[tuple[str, int, str], tuple[object, ...]] = {}
    for g in broker_account(read_server_log(path, utc_offset_minutes=utc_offset_minutes)):
        group_type = "consumer" if g.broker_state == "consumer" else "classic"
        rows[(g.group_id, g.generation_id, group_type)] = (
            g.group_id, g.generation_id, group_type, g.broker_reason, g.broker_cause, g.broker_client_reason,
            g.rebalance_started_at, g.stabilized_at, g.rebalance_duration_ms, g.broker_member_count)
    return spark.createDataFrame(list(rows.values()), ACCOUNT_SCHEMA)


def attach_broker_account(generations: DataFrame, account: DataFrame | None) -> DataFrame:
    """`generations` with the broker account columns appended (left join on group, generation and
    group type)."""
    if account is None:
        return generations.selectExpr("*", *[f"CAST(NULL AS {f.dataType.simpleString()}) AS `{f.name}`"
                                             for f in BROKER_ACCOUNT_COLUMNS.fields])
    return generations.join(account, on=["group_id", "generation_id", "group_type"], how="left").select(
        *generations.columns, *BROKER_ACCOUNT_COLUMNS.fieldNames())
