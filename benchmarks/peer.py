"""The hand-written peer: what a Spark user writes to summarise `__consumer_offsets` without this
project (a row-at-a-time Python UDF decoding every record with `struct`, then one groupBy), and its
measurement. Its rows are not compared with the audit's: it is the speed a user starts from."""

from __future__ import annotations

import struct
import sys
import time
from typing import Any

from pyspark import cloudpickle
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, ShortType, StringType, StructField, StructType

__all__ = ["measure_peer", "peer_decode", "peer_summary"]

_PEER_FIELDS = ("record_type", "group_id", "topic", "partition", "offset", "leader_epoch", "metadata",
                "commit_timestamp", "expire_timestamp", "generation", "protocol_type", "protocol", "leader")


def peer_decode(key: bytes | None, value: bytes | None) -> tuple[Any, ...] | None:
    """What a Spark user writes to read `__consumer_offsets` without this project: `struct` over the
    documented layouts (offset commits v0-v3, GroupMetadata v0-v3 header fields). Row-at-a-time."""
    if key is None or len(key) < 4:
        return None
    rtype, glen = struct.unpack_from(">hh", key, 0)
    group = key[4:4 + glen].decode("utf-8")
    none = (None,) * (len(_PEER_FIELDS) - 2)
    if rtype in (0, 1):
        pos = 4 + glen
        (tlen,) = struct.unpack_from(">h", key, pos)
        topic = key[pos + 2:pos + 2 + tlen].decode("utf-8")
        (partition,) = struct.unpack_from(">i", key, pos + 2 + tlen)
        if value is None:
            return (rtype, group, topic, partition, *none[2:])
        version, offset = struct.unpack_from(">hq", value, 0)
        epoch, expire = -1, None
        if version == 3:
            epoch, mlen = struct.unpack_from(">ih", value, 10)
            mpos = 16
        else:
            (mlen,) = struct.unpack_from(">h", value, 10)
            mpos = 12
        metadata = value[mpos:mpos + mlen].decode("utf-8")
        (commit_ts,) = struct.unpack_from(">q", value, mpos + mlen)
        if version == 1:
            (expire,) = struct.unpack_from(">q", value, mpos + mlen + 8)
        return (rtype, group, topic, partition, offset, epoch, metadata, commit_ts, expire, None, None, None, None)
    if rtype == 2 and value is not None:
        version, plen = struct.unpack_from(">hh", value, 0)
        if version > 3:
            return (rtype, group, *none)
        protocol_type = value[4:4 + plen].decode("utf-8")
        pos = 4 + plen
        generation, n = struct.unpack_from(">ih", value, pos)
        pos += 6
        protocol = value[pos:pos + n].decode("utf-8") if n >= 0 else None
        pos += max(n, 0)
        (n,) = struct.unpack_from(">h", value, pos)
        leader = value[pos + 2:pos + 2 + n].decode("utf-8") if n >= 0 else None
        return (rtype, group, None, None, None, None, None, None, None, generation, protocol_type, protocol, leader)
    return (rtype, group, *none)

_COLUMNAR_UDF_INPUT = "spark.sql.execution.arrow.pythonUDF.columnarInput.enabled"
"""On in pyspark 4.2 by default; with it, a plain (Arrow-optimized, the 4.2 default) `F.udf` applied
straight to a Parquet scan of more than a few thousand rows hangs: the Python worker waits for its
UDF definition while the JVM waits for results. The peer runs with it off (as a user would have to)."""

def peer_summary(raw: DataFrame) -> DataFrame:
    """The peer's offset summary: a Python UDF decoding every record, then one groupBy."""
    types = {"record_type": ShortType(), "partition": IntegerType(), "leader_epoch": IntegerType(),
             "generation": IntegerType(), "offset": LongType(), "commit_timestamp": LongType(),
             "expire_timestamp": LongType()}
    schema = StructType([StructField(f, types.get(f, StringType())) for f in _PEER_FIELDS])
    # this module is not installed (the wheel holds the job only): the UDF's workers get its code
    # by value instead of importing it by name
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    decode = F.udf(lambda key, value: peer_decode(key, value), schema)
    r = raw.select(decode("key", "value").alias("r"), F.struct(F.col("partition"), F.col("offset")).alias("pos"))
    commits = r.where(F.col("r.record_type").isin(0, 1) & F.col("r.offset").isNotNull())
    return commits.groupBy(F.col("r.group_id").alias("group_id"), F.col("r.topic").alias("topic"),
                           F.col("r.partition").alias("partition")).agg(
        F.count(F.lit(1)).alias("commits"),
        F.min_by("r.offset", "pos").alias("first_offset"), F.max_by("r.offset", "pos").alias("last_offset"),
        F.min_by("r.commit_timestamp", "pos").alias("first_commit_timestamp"),
        F.max_by("r.commit_timestamp", "pos").alias("last_commit_timestamp"))

def measure_peer(spark: SparkSession, path: str) -> dict[str, Any]:
    """The peer on the Parquet input at `path`, written to Spark's `noop` sink, timed."""
    obs = Observation("peer")
    previous = spark.conf.get(_COLUMNAR_UDF_INPUT, None)
    spark.conf.set(_COLUMNAR_UDF_INPUT, "false")  # see _COLUMNAR_UDF_INPUT
    try:
        t0 = time.perf_counter()
        summary = peer_summary(spark.read.parquet(path))
        (summary.observe(obs, F.count(F.lit(1)).alias("rows"), F.sum("commits").alias("commits"))
         .write.format("noop").mode("overwrite").save())
        elapsed = time.perf_counter() - t0
    finally:
        if previous is None:
            spark.conf.unset(_COLUMNAR_UDF_INPUT)
        else:
            spark.conf.set(_COLUMNAR_UDF_INPUT, previous)
    got = obs.get
    return {"seconds": elapsed, "rows": int(got["rows"]), "commits": int(got["commits"] or 0),
            "spark.sql.execution.pythonUDF.arrow.enabled": spark.conf.get("spark.sql.execution.pythonUDF.arrow.enabled"),
            _COLUMNAR_UDF_INPUT: "false"}
