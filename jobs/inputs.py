"""Reading the job's input: `__consumer_offsets` records with the Kafka-source schema.

Accepted inputs:

* a path (file or directory) in Parquet, Delta or JSON lines, or a catalog table;
* format `auto` decides only where the answer is unambiguous: a directory holding `_delta_log/`
  is Delta; a `*.parquet` file, or a directory whose data files are `*.parquet`, is Parquet;
  `*.json`, `*.jsonl`, `*.ndjson` (optionally `.gz`) files or directories of them are JSON lines.
  Anything else fails and asks for `--format`;
* columns `key binary, value binary, topic string, partition int, offset long, timestamp
  timestamp` (Spark's Kafka source, Kafka Connect sinks, the simulator). Compatible types are cast
  (partition long/short -> int, offset int -> long, timestamp as epoch-ms long or timestamp_ntz ->
  timestamp); a missing `topic` is filled with `__consumer_offsets`; extra columns are dropped;
* JSON lines dumps with the same field names whose key and value are hex or base64 strings
  (`text_encoding="auto"` looks at the keys: all hex digits of even length => hex, else base64),
  timestamps as ISO-8601 strings or epoch milliseconds.

Then the `--since/--until` window is applied to the record timestamps (since inclusive, until
exclusive) and duplicates of the same (partition, offset) are dropped (re-reads of a topic overlap).
`InputData.counts()` gives the runs table's figures: records_in = duplicates_dropped +
filtered_by_window + records (the rows of `InputData.df`).

A missing path, an undecidable format or a wrong schema raises `InputError` at once, saying what
to fix.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from coordinator_core.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "InputCounts",
    "InputData",
    "InputError",
    "detect_format",
    "detect_text_encoding",
    "filter_groups",
    "normalize_schema",
    "read_input",
    "window_condition",
]

Format = Literal["auto", "parquet", "delta", "json"]
TextEncoding = Literal["auto", "hex", "base64"]

_JSON_SUFFIXES = (".json", ".jsonl", ".ndjson", ".json.gz", ".jsonl.gz", ".ndjson.gz")
DEFAULT_TOPIC = "__consumer_offsets"


class InputError(ConfigError):
    """The input cannot be read as `__consumer_offsets` records; the message says what to fix."""


@dataclass(frozen=True, slots=True)
class InputCounts:
    """What became of the input's records before the audit: records_in = duplicates_dropped +
    filtered_by_window + records."""

    records_in: int
    filtered_by_window: int
    duplicates_dropped: int
    records: int


@dataclass(frozen=True, slots=True)
class InputData:
    """The input, read and cleaned (`df`), how it was read, and its counts."""

    df: DataFrame
    """Kafka-source schema, windowed, one row per (partition, offset)."""
    raw: DataFrame
    """Kafka-source schema, as read (before window and deduplication)."""
    windowed: DataFrame
    format: str
    source: str
    text_encoding: str | None
    window: Column
    """The window condition on `raw` (true inside since <= timestamp < until)."""

    def counts(self) -> InputCounts:
        """Counts the input in one Spark job (a scan of the input plus a shuffle of (partition,
        offset) pairs within the window; the key and value bytes are not shuffled)."""
        from pyspark.sql import functions as F

        w = self.window
        agg = self.raw.agg(
            F.count(F.lit(1)).alias("records_in"),
            F.count_if(w).alias("in_window"),
        ).first()
        distinct = self.windowed.select("partition", "offset").distinct().count()
        records_in, in_window = int(agg["records_in"]), int(agg["in_window"])
        return InputCounts(records_in, records_in - in_window, in_window - distinct, distinct)


def detect_format(path: str) -> Literal["parquet", "delta", "json"]:
    """The format of a local/mounted path, when unambiguous; InputError otherwise."""
    if "://" in path and not path.startswith("file://"):
        raise InputError(f"input {path}: cannot look inside a remote path to detect its format; "
                         f"pass --format parquet|delta|json")
    p = Path(path.removeprefix("file://"))
    if not p.exists():
        raise InputError(f"input {path}: no such file or directory (check the path, or use --table for a "
                         f"catalog table)")
    name = p.name.lower()
    if p.is_file():
        if name.endswith(".parquet"):
            return "parquet"
        if name.endswith(_JSON_SUFFIXES):
            return "json"
        raise InputError(f"input {path}: cannot tell the format of this file from its name; "
                         f"pass --format parquet|json")
    if (p / "_delta_log").is_dir():
        return "delta"
    data = [f for f in p.rglob("*") if f.is_file() and not f.name.startswith(("_", "."))
            and not any(part.startswith(("_", ".")) for part in f.relative_to(p).parts[:-1])]
    kinds = {("parquet" if f.name.lower().endswith(".parquet") else
              "json" if f.name.lower().endswith(_JSON_SUFFIXES) else "other") for f in data}
    if kinds == {"parquet"}:
        return "parquet"
    if kinds == {"json"}:
        return "json"
    if not data:
        raise InputError(f"input {path}: the directory holds no data files")
    raise InputError(f"input {path}: the directory mixes file kinds ({', '.join(sorted(kinds))}); "
                     f"pass --format parquet|delta|json")


def detect_text_encoding(df: DataFrame, *, column: str = "key", sample: int = 1000) -> Literal["hex", "base64"]:
    """hex if every sampled non-empty `column` value is hex digits of even length, else base64."""
    from pyspark.sql import functions as F

    col = F.regexp_replace(F.col(column), r"^0[xX]", "")
    rows = (df.select(col.alias("s")).where(F.col("s").isNotNull() & (F.length("s") > 0)).limit(sample)
            .agg(F.count(F.lit(1)).alias("n"),
                 F.count_if(~F.col("s").rlike("^([0-9a-fA-F]{2})+$")).alias("not_hex")).first())
    if rows is None or rows["n"] == 0:
        return "hex"
    return "hex" if rows["not_hex"] == 0 else "base64"


def _decode_text(col: Column, encoding: str) -> Column:
    from pyspark.sql import functions as F

    if encoding == "hex":
        return F.unhex(F.regexp_replace(col, r"^0[xX]", ""))
    return F.unbase64(col)


def normalize_schema(df: DataFrame, *, source: str) -> DataFrame:
    """Casts a binary-keyed DataFrame to exactly the Kafka-source schema (module docstring rules);
    InputError naming the column and the fix otherwise."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import (
        BinaryType,
        ByteType,
        IntegerType,
        LongType,
        ShortType,
        StringType,
        TimestampNTZType,
        TimestampType,
    )

    types = {f.name.lower(): (f.name, f.dataType) for f in df.schema.fields}
    expected = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
    missing = [c for c in ("key", "value", "partition", "offset", "timestamp") if c not in types]
    if missing:
        raise InputError(f"input {source}: missing column(s) {', '.join(missing)}; the input must have the "
                         f"Kafka-source schema ({expected}); found {df.schema.simpleString()}")
    cols: list[Column] = []
    for name in ("key", "value"):
        actual, dtype = types[name]
        if not isinstance(dtype, BinaryType):
            hint = (" (a text dump: read it as JSON lines with --format json)" if isinstance(dtype, StringType)
                    else "")
            raise InputError(f"input {source}: column {name} is {dtype.simpleString()}, expected binary{hint}")
        cols.append(F.col(actual).alias(name))
    if "topic" in types:
        actual, dtype = types["topic"]
        if not isinstance(dtype, StringType):
            raise InputError(f"input {source}: column topic is {dtype.simpleString()}, expected string")
        cols.append(F.col(actual).alias("topic"))
    else:
        cols.append(F.lit(DEFAULT_TOPIC).alias("topic"))
    actual, dtype = types["partition"]
    if not isinstance(dtype, ByteType | ShortType | IntegerType | LongType):
        raise InputError(f"input {source}: column partition is {dtype.simpleString()}, expected int")
    cols.append(F.col(actual).cast("int").alias("partition"))
    actual, dtype = types["offset"]
    if not isinstance(dtype, ShortType | IntegerType | LongType):
        raise InputError(f"input {source}: column offset is {dtype.simpleString()}, expected long")
    cols.append(F.col(actual).cast("long").alias("offset"))
    actual, dtype = types["timestamp"]
    if isinstance(dtype, TimestampType):
        ts = F.col(actual)
    elif isinstance(dtype, TimestampNTZType):
        ts = F.to_utc_timestamp(F.col(actual).cast("timestamp"), "UTC")
    elif isinstance(dtype, IntegerType | LongType):
        ts = F.timestamp_millis(F.col(actual))
    else:
        raise InputError(f"input {source}: column timestamp is {dtype.simpleString()}, expected timestamp "
                         f"(or epoch milliseconds as long)")
    cols.append(ts.alias("timestamp"))
    return df.select(*cols)


def _read_json(spark: SparkSession, path: str, encoding: TextEncoding) -> tuple[DataFrame, str]:
    from pyspark.sql import functions as F

    text_schema = "key string, value string, topic string, partition string, offset string, timestamp string"
    raw = spark.read.schema(text_schema + ", _corrupt_record string").option(
        "columnNameOfCorruptRecord", "_corrupt_record").json(path)
    sample = raw.where(F.col("_corrupt_record").isNull()).limit(1000).cache()
    if sample.where(F.col("partition").isNotNull() & F.col("offset").isNotNull()).limit(1).count() == 0:
        sample.unpersist()
        raise InputError(f"input {path}: no JSON line with 'partition' and 'offset' fields; a text dump needs "
                         f"the fields key, value (hex or base64), topic, partition, offset, timestamp")
    enc = encoding if encoding != "auto" else detect_text_encoding(sample)
    sample.unpersist()
    ts = F.col("timestamp")
    timestamp = F.when(ts.rlike(r"^-?[0-9]+$"), F.timestamp_millis(ts.cast("long"))).otherwise(
        F.to_timestamp(ts))
    df = raw.select(
        _decode_text(F.col("key"), enc).alias("key"),
        _decode_text(F.col("value"), enc).alias("value"),
        F.coalesce(F.col("topic"), F.lit(DEFAULT_TOPIC)).alias("topic"),
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("long").alias("offset"),
        timestamp.alias("timestamp"),
    )
    return df, enc


def read_input(spark: SparkSession, source: str, *, format: Format = "auto", is_table: bool = False,
               text_encoding: TextEncoding = "auto", since: datetime | None = None,
               until: datetime | None = None, deduplicate: bool = True) -> InputData:
    """Reads `source` (a path, or a catalog table with `is_table=True`) as Kafka-source records,
    windowed on timestamps (since <= ts < until) and deduplicated on (partition, offset)."""
    from pyspark.sql import functions as F
    from pyspark.sql.utils import AnalysisException

    encoding: str | None = None
    if is_table:
        try:
            df = spark.table(source)
        except AnalysisException as exc:
            raise InputError(f"input table {source}: cannot be read ({str(exc).splitlines()[0]}); check the "
                             f"name, or pass a path instead") from None
        fmt = "table"
        df = normalize_schema(df, source=source)
    else:
        fmt = detect_format(source) if format == "auto" else format
        if format != "auto" and "://" not in source and not Path(source).exists():
            raise InputError(f"input {source}: no such file or directory")
        try:
            if fmt == "json":
                df, encoding = _read_json(spark, source, text_encoding)
            elif fmt == "delta":
                df = _read_delta(spark, source)
                df = normalize_schema(df, source=source)
            elif fmt == "parquet":
                reader = spark.read
                if "://" not in source and Path(source).is_dir():
                    # a directory may hold other files beside the data (e.g. data/samples/*.truth.json)
                    reader = reader.option("pathGlobFilter", "*.parquet")
                df = normalize_schema(reader.parquet(source), source=source)
            else:
                raise InputError(f"input {source}: unknown format {fmt!r}; use parquet, delta or json")
        except AnalysisException as exc:
            raise InputError(f"input {source}: cannot be read as {fmt} ({str(exc).splitlines()[0]})") from None

    bounded = window_condition(since, until)
    cond = bounded if bounded is not None else F.lit(True)
    windowed = df.where(cond) if bounded is not None else df
    clean = windowed.dropDuplicates(["partition", "offset"]) if deduplicate else windowed
    return InputData(df=clean, raw=df, windowed=windowed, format=fmt, source=source, text_encoding=encoding,
                     window=F.coalesce(cond, F.lit(False)))


def window_condition(since: datetime | None, until: datetime | None,
                     start_after: Mapping[int, int] | None = None) -> Column | None:
    """since <= timestamp < until on the Kafka-source `timestamp` column (null when a bound is
    given and the timestamp is null); None when both bounds are open.

    `start_after` (the previous run's last offset per `__consumer_offsets` partition) replaces the
    lower bound on those partitions by an offset bound: a record is in the window iff its offset is
    above the previous run's last one, whatever its timestamp (runs continue exactly where the
    previous one stopped, even when timestamps are not monotonic)."""
    from pyspark.sql import functions as F

    cond = None
    if since is not None:
        cond = F.col("timestamp") >= F.lit(since)
    if start_after:
        keys = sorted(start_after)
        last = F.try_element_at(F.create_map(*[x for p in keys for x in (F.lit(p), F.lit(int(start_after[p])))]),
                                F.col("partition").cast("int"))
        cond = F.when(last.isNotNull(), F.col("offset") > last).otherwise(F.lit(True) if cond is None else cond)
    if until is not None:
        upper = F.col("timestamp") < F.lit(until)
        cond = upper if cond is None else cond & upper
    return cond


def _read_delta(spark: SparkSession, path: str) -> DataFrame:
    """A Delta table through Delta Spark when present, else the files of its current version."""
    from jobs.delta_io import read_table

    return read_table(spark, path)


def filter_groups(df: DataFrame, patterns: tuple[str, ...] | list[str], *, column: str = "group_id") -> DataFrame:
    """Keeps rows whose `column` matches one of the glob `patterns` (fnmatch syntax); no patterns keeps all."""
    from pyspark.sql import functions as F

    if not patterns:
        return df
    cond = F.lit(False)
    for pattern in patterns:
        cond = cond | F.col(column).rlike("^" + fnmatch.translate(pattern))  # rlike finds; anchor the start
    return df.where(cond)
