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
* JSON lines dumps with the same field names whose key and value are hex or base64 strings,
  timestamps as ISO-8601 strings or epoch milliseconds, read line by line in the Python workers
  (`coordinator_audit.udfs.json_lines`). `text_encoding="auto"` counts, over every line, the records whose key and
  value texts are valid hex and valid base64 (`choose_text_encoding`): the encoding every record
  fits wins (hex first), else the one most records fit, provided at least half do; otherwise the
  run stops and asks for `--text-encoding`. A record whose key or value does not decode in the
  chosen encoding, a line that is not JSON, not UTF-8 or lacks a field, and the unreadable rest
  of a truncated file are *rejected*: `InputData.rejects` holds them as quarantine rows naming the
  file, the line number, the line and what is wrong, and the job quarantines them.

Records of any format with a null partition, offset or timestamp cannot be placed in the log:
they are rejected too.

Then the `--since/--until` window is applied to the record timestamps (since inclusive, until
exclusive) and duplicates of the same (partition, offset) are dropped (re-reads of a topic overlap).
`InputData.counts()` gives the runs table's figures: records_in = duplicates_dropped +
filtered_by_window + records (the rows of `InputData.df`); rejected records are not in `raw` and
are counted apart (`InputData.window_rejects`: by the same window, those in it or that cannot be
placed are quarantined, the others are outside the window).

A Delta input is read at the version its log had when the run began, and with it what the log's
per-file statistics say of the records (`InputData.bounds`, `delta_input_bounds`): a run whose
window leaves out most of a table that keeps a year of nights then has Spark read only the files
that may hold the window's records (`coordinator_audit.jobs.offsets_path.scan_log`), and a table whose statistics
count no null position needs no Spark job to look for one.

A missing path, an undecidable format or a wrong schema raises `InputError` at once, saying what
to fix.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import DeltaTable
from pyspark.errors import AnalysisException
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
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

from coordinator_audit.core.errors import ConfigError
from coordinator_audit.jobs.delta_io import read_table
from coordinator_audit.jobs.spark_session import input_files
from coordinator_audit.udfs.json_lines import (
    DEFAULT_TOPIC,
    FIT_SCHEMA,
    JSON_READ_SCHEMA,
    iter_lines,
    make_fit_fn,
    make_json_read_fn,
    open_file,
)
from coordinator_audit.udfs.scan import POSITION_COLUMNS, RowGroupBounds, read_footer
from coordinator_audit.udfs.schemas import TABLE_SCHEMAS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "InputBounds",
    "InputCounts",
    "InputData",
    "InputError",
    "choose_text_encoding",
    "delta_input_bounds",
    "detect_format",
    "filter_groups",
    "normalize_schema",
    "read_input",
    "skipped_files",
    "window_condition",
]

Format = Literal["auto", "parquet", "delta", "json"]
TextEncoding = Literal["auto", "hex", "base64"]

_JSON_SUFFIXES = (".json", ".jsonl", ".ndjson", ".json.gz", ".jsonl.gz", ".ndjson.gz")


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


class InputBounds(NamedTuple):
    """What the input's statistics say of its records without reading them: each data file's
    bounds (`coordinator_audit.udfs.scan.RowGroupBounds`), and how many records the files hold (None: not known from
    the statistics; deletion vectors may hide some of a file's rows). Given only when the
    statistics also count no null partition, offset or timestamp."""

    units: tuple[RowGroupBounds, ...]
    records: int | None


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
    rejects: DataFrame | None = None
    """Lines and records that cannot be read (module docstring), as rows of the quarantine table;
    None when the input cannot have any."""
    bounds: InputBounds | None = None
    """A Delta input's per-file statistics (`delta_input_bounds`), None when not known."""
    bounds_note: str | None = None
    """Why a Delta input has no `bounds` (None: it has them, or the input is not Delta)."""

    def rejected(self) -> int:
        """How many lines and records were rejected (a Spark job; 0 without one when none can be)."""
        return 0 if self.rejects is None else int(self.rejects.count())

    def _marked_rejects(self, since: datetime | None, until: datetime | None,
                        start_after: Mapping[int, int] | None) -> DataFrame:
        """The rejects with `_in`: whether the run's window holds each one, by the records' rule
        (`window_condition`): true, false, or null (no position or time to place it by)."""
        assert self.rejects is not None
        cond = window_condition(since, until, start_after)
        timed = self.rejects.withColumnRenamed("timestamp", "_ms").withColumn("timestamp", F.timestamp_millis("_ms"))
        return timed.withColumn("_in", F.lit(True) if cond is None else cond).drop("timestamp").withColumnRenamed(
            "_ms", "timestamp")

    def window_rejects(self, since: datetime | None, until: datetime | None,
                       start_after: Mapping[int, int] | None = None) -> tuple[DataFrame | None, int, int]:
        """(the rejected records the run quarantines, as quarantine rows: those in its window and
        those it cannot place; how many those are; how many more are outside the window, which the
        run counts as such and leaves to the run whose window holds them). One Spark job; (None, 0,
        0) without rejects."""
        if self.rejects is None:
            return None, 0, 0
        marked = self._marked_rejects(since, until, start_after)
        kept = F.coalesce(F.col("_in"), F.lit(True))
        row = marked.agg(F.count_if(kept).alias("kept"), F.count_if(~kept).alias("outside")).collect()[0]
        return marked.where(kept).select(*self.rejects.columns), int(row["kept"]), int(row["outside"])

    def rejected_in_window(self, since: datetime | None, until: datetime | None,
                           start_after: Mapping[int, int] | None = None) -> list[tuple[int, int]]:
        """The log positions (partition, offset) of the rejected records the run's window holds
        (`window_rejects`) that no readable record holds: the run read them, though it quarantines
        them (a Spark job; none without rejects)."""
        if self.rejects is None:
            return []
        placed = self._marked_rejects(since, until, start_after).where(
            F.col("_in") & F.col("partition").isNotNull() & F.col("offset").isNotNull())
        rows = placed.select("partition", "offset").distinct().join(
            self.df.select("partition", "offset"), ["partition", "offset"], "left_anti").collect()
        return [(int(r["partition"]), int(r["offset"])) for r in rows]

    def counts(self) -> InputCounts:
        """Counts the input in one Spark job (a scan of the input plus a shuffle of (partition,
        offset) pairs within the window; the key and value bytes are not shuffled)."""
        w = self.window
        agg = self.raw.agg(
            F.count(F.lit(1)).alias("records_in"),
            F.count_if(w).alias("in_window"),
        ).collect()[0]
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
        raise InputError(f"input {path}: no such file or directory (check the path, or use --input-table for "
                         f"a catalog table)")
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
    if "parquet" in kinds and kinds <= {"parquet", "json", "other"} and not any(
            _looks_like_dump(f) for f in data if f.name.lower().endswith(_JSON_SUFFIXES)):
        # documents beside the Parquet data (data/samples: *.truth.json, the broker's server.log);
        # the Parquet reader reads *.parquet only
        return "parquet"
    raise InputError(f"input {path}: the directory mixes file kinds ({', '.join(sorted(kinds))}); "
                     f"pass --format parquet|delta|json")


def skipped_files(path: str, fmt: str) -> list[str]:
    """The files of a local input directory that the reader of `fmt` does not read, relative to
    it: beside Parquet data every file not named `*.parquet`, beside JSON-lines files named as such
    every other file (`_json_files`). Hidden and `_`-prefixed files and folders, which no reader
    reads, are not listed; nor is anything of a Delta table (its log names its files), a single
    file or a remote path."""
    if fmt not in ("parquet", "json") or ("://" in path and not path.startswith("file://")):
        return []
    root = Path(path.removeprefix("file://"))
    if not root.is_dir():
        return []
    data = [f for f in root.rglob("*") if f.is_file()
            and not any(part.startswith(("_", ".")) for part in f.relative_to(root).parts)]
    if fmt == "parquet":
        read = {f for f in data if f.name.lower().endswith(".parquet")}
    else:
        read = {f for f in data if f.name.lower().endswith(_JSON_SUFFIXES)} or set(data)
    return sorted(str(f.relative_to(root)) for f in data if f not in read)


def _looks_like_dump(file: Path) -> bool:
    """Whether a JSON file's first non-blank line is a record of a dump (an object with partition
    and offset), as opposed to a JSON document such as a pretty-printed truth file."""
    try:
        with open_file(str(file)) as stream:
            for _, raw in iter_lines(stream):
                try:
                    obj = json.loads(raw)
                except ValueError:
                    return False
                return isinstance(obj, dict) and "partition" in obj and "offset" in obj
    except (OSError, EOFError):
        return True  # unreadable: let the JSON reader say so
    return False


def choose_text_encoding(texts: int, hex_fit: int, base64_fit: int, *, source: str) -> Literal["hex", "base64"]:
    """The key/value encoding of a dump from the counts of its records with key or value texts
    (`texts`) and of those whose texts are all valid hex / base64: the one every record fits (hex
    first), else the one most fit if at least half do (the others are rejected, record by record);
    else InputError."""
    if texts == 0 or hex_fit == texts:
        return "hex"
    if base64_fit == texts:
        return "base64"
    best: Literal["hex", "base64"] = "hex" if hex_fit >= base64_fit else "base64"
    if 2 * max(hex_fit, base64_fit) < texts:
        raise InputError(f"input {source}: cannot tell how keys and values are encoded: of {texts} records, "
                         f"{hex_fit} are valid hex and {base64_fit} valid base64; pass --text-encoding hex|base64 "
                         f"(records that do not decode are then quarantined)")
    return best


def normalize_schema(df: DataFrame, *, source: str) -> DataFrame:
    """Casts a binary-keyed DataFrame to exactly the Kafka-source schema (module docstring rules);
    InputError naming the column and the fix otherwise."""
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


def _json_files(path: str) -> list[str]:
    """The data files of a JSON-lines input: the file itself, or a directory's files (hidden and
    `_`-prefixed ones aside) with JSON names, or all of them when none has one."""
    if "://" in path and not path.startswith("file://"):
        try:
            fs, root = pafs.FileSystem.from_uri(path)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise InputError(f"input {path}: cannot open it to read JSON lines ({exc}); use a local or mounted "
                             f"path (e.g. /dbfs/...)") from None
        scheme = path.split("://", 1)[0] + "://"
    else:
        fs, root, scheme = pafs.LocalFileSystem(), str(Path(path.removeprefix("file://")).resolve()), ""
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.NotFound:
        raise InputError(f"input {path}: no such file or directory")
    if info.type == pafs.FileType.File:
        return [scheme + root]
    found = [f for f in fs.get_file_info(pafs.FileSelector(root, recursive=True)) if f.type == pafs.FileType.File
             and not any(part.startswith(("_", ".")) for part in f.path[len(root):].strip("/").split("/"))]
    named = [f for f in found if f.base_name.lower().endswith(_JSON_SUFFIXES)]
    files = sorted(scheme + f.path for f in (named or found))
    if not files:
        raise InputError(f"input {path}: the directory holds no data files")
    return files


def _read_json(spark: SparkSession, path: str, encoding: TextEncoding) -> tuple[DataFrame, DataFrame, str]:
    """(records, rejected lines as quarantine rows, the encoding) of a JSON-lines input."""
    uris = _json_files(path)
    # one file per task: range(n) in n partitions, each id picking its file
    files = spark.range(0, len(uris), 1, len(uris)).select(
        F.element_at(F.array(*[F.lit(u) for u in uris]), (F.col("id") + 1).cast("int")).alias("uri"))
    row = files.mapInArrow(make_fit_fn(), from_arrow_schema(FIT_SCHEMA)).agg(
        *[F.sum(c).alias(c) for c in FIT_SCHEMA.names]).collect()[0]
    fit = {c: int(row[c] or 0) for c in FIT_SCHEMA.names}
    if fit["lines"] and not fit["positioned"]:
        raise InputError(f"input {path}: no JSON line with 'partition' and 'offset' fields in {len(uris)} file(s); "
                         f"a text dump needs the fields key, value (hex or base64), topic, partition, offset, "
                         f"timestamp")
    enc: Literal["hex", "base64"] = encoding if encoding != "auto" else choose_text_encoding(
        fit["texts"], fit["hex"], fit["base64"], source=path)
    rows = files.mapInArrow(make_json_read_fn(enc), from_arrow_schema(JSON_READ_SCHEMA))
    records = rows.where(F.col("error").isNull()).select("key", "value", "topic", "partition", "offset", "timestamp")
    rejects = _quarantine_rows(rows.where(F.col("error").isNotNull()))
    return records, rejects, enc


def _quarantine_rows(df: DataFrame) -> DataFrame:
    """Rejected input rows as rows of the quarantine table (its content schema): `df` has the
    Kafka-source columns (those it lacks are null), `error`, and optionally `input_file`,
    `input_line`, `input_text`."""
    cols = set(df.columns)
    key = F.col("key") if "key" in cols else F.lit(None).cast("binary")
    values = {
        "group_id": F.lit(None),
        "partition": F.col("partition"), "offset": F.col("offset"),
        "timestamp": F.unix_millis(F.col("timestamp")),
        "key": key, "value": F.col("value"), "error": F.col("error"), "replayed": F.lit(False),
        "key_type": F.when(F.length(key) >= 2, F.conv(F.hex(F.substring(key, 1, 2)), 16, 10)),
    }
    for name in ("input_file", "input_line", "input_text"):
        values[name] = F.col(name) if name in cols else F.lit(None)
    schema = TABLE_SCHEMAS["quarantine"]
    return df.select(*[values[f.name].cast(f.dataType).alias(f.name) for f in schema.fields])


def _null_positions(df: DataFrame) -> Column:
    return F.col("partition").isNull() | F.col("offset").isNull() | F.col("timestamp").isNull()


def _position_rejects(df: DataFrame, *, source: str) -> tuple[DataFrame, DataFrame | None]:
    """(records with partition, offset and timestamp, rejected records without one as quarantine
    rows); (df, None) when Parquet footers show no nulls in those columns."""
    if not _may_have_null_positions(df):
        return df, None
    missing = F.concat_ws(", ", *[F.when(F.col(c).isNull(), F.lit(c)) for c in ("partition", "offset", "timestamp")])
    file = F.input_file_name()
    rejects = df.where(_null_positions(df)).select(
        "*", F.concat(F.lit("the record has no "), missing, F.lit(" (null in the input): it cannot be placed in "
                                                                   "the log")).alias("error"),
        F.when(file != "", file).alias("input_file"))
    return df.where(~_null_positions(df)), _quarantine_rows(rejects)


def _may_have_null_positions(df: DataFrame) -> bool:
    """False when every input file is a local Parquet file whose footer statistics count no null
    partition, offset or timestamp (no Spark job); True otherwise."""
    try:
        uris = input_files(df)
    except Exception:  # not a file-based source
        return True
    for uri in uris or [""]:
        parsed = urlparse(uri)
        if not uri or parsed.scheme not in ("", "file") or not uri.endswith(".parquet"):
            return True
        try:
            if read_footer(unquote(parsed.path)).null_positions:
                return True
        except Exception:
            return True
    return False


def _check_parquet_files(source: str) -> None:
    """InputError naming the first local Parquet file of `source` whose footer does not read (a
    truncated or corrupt file), before Spark meets it."""
    if "://" in source and not source.startswith("file://"):
        return
    root = Path(source.removeprefix("file://"))
    files = [root] if root.is_file() else sorted(
        f for f in root.rglob("*.parquet") if f.is_file()
        and not any(part.startswith(("_", ".")) for part in f.relative_to(root).parts))
    for f in files:
        try:
            read_footer(str(f))
        except Exception as exc:
            raise InputError(f"input {f}: not a readable Parquet file ({str(exc).splitlines()[0]}); "
                             f"a truncated or corrupt file?") from None


def read_input(spark: SparkSession, source: str, *, format: Format = "auto", is_table: bool = False,
               text_encoding: TextEncoding = "auto", since: datetime | None = None,
               until: datetime | None = None, deduplicate: bool = True) -> InputData:
    """Reads `source` (a path, or a catalog table with `is_table=True`) as Kafka-source records,
    windowed on timestamps (since <= ts < until) and deduplicated on (partition, offset)."""
    encoding: str | None = None
    rejects: DataFrame | None = None
    bounds: InputBounds | None = None
    bounds_note: str | None = None
    if is_table:
        try:
            df = spark.table(source)
        except AnalysisException as exc:
            raise InputError(f"input table {source}: cannot be read ({str(exc).splitlines()[0]}); check the "
                             f"name, or pass a path instead") from None
        fmt = "table"
        df, bounds, bounds_note = _catalog_delta(spark, source, df)
        df = normalize_schema(df, source=source)
    else:
        fmt = detect_format(source) if format == "auto" else format
        if format != "auto" and "://" not in source and not Path(source).exists():
            raise InputError(f"input {source}: no such file or directory")
        try:
            if fmt == "json":
                df, rejects, encoding = _read_json(spark, source, text_encoding)
            elif fmt == "delta":
                df, bounds, bounds_note = _read_delta(spark, source)
                df = normalize_schema(df, source=source)
            elif fmt == "parquet":
                _check_parquet_files(source)
                reader = spark.read
                if "://" not in source and Path(source).is_dir():
                    # a directory may hold other files beside the data (e.g. data/samples/*.truth.json)
                    reader = reader.option("pathGlobFilter", "*.parquet")
                df = normalize_schema(reader.parquet(source), source=source)
            else:
                raise InputError(f"input {source}: unknown format {fmt!r}; use parquet, delta or json")
        except AnalysisException as exc:
            raise InputError(f"input {source}: cannot be read as {fmt} ({str(exc).splitlines()[0]})") from None

    if fmt != "json" and bounds is None:  # (bounds: the log's statistics count no null position)
        df, rejects = _position_rejects(df, source=source)
    bounded = window_condition(since, until)
    cond = bounded if bounded is not None else F.lit(True)
    windowed = df.where(cond) if bounded is not None else df
    clean = windowed.dropDuplicates(["partition", "offset"]) if deduplicate else windowed
    return InputData(df=clean, raw=df, windowed=windowed, format=fmt, source=source, text_encoding=encoding,
                     window=F.coalesce(cond, F.lit(False)), rejects=rejects, bounds=bounds, bounds_note=bounds_note)


def window_condition(since: datetime | None, until: datetime | None,
                     start_after: Mapping[int, int] | None = None) -> Column | None:
    """since <= timestamp < until on the Kafka-source `timestamp` column (null when a bound is
    given and the timestamp is null); None when both bounds are open.

    `start_after` (the previous run's last offset per `__consumer_offsets` partition) replaces the
    lower bound on those partitions by an offset bound: a record is in the window iff its offset is
    above the previous run's last one, whatever its timestamp (runs continue exactly where the
    previous one stopped, even when timestamps are not monotonic)."""
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


def _read_delta(spark: SparkSession, path: str) -> tuple[DataFrame, InputBounds | None, str | None]:
    """A Delta table through Delta Spark when present, else the files of its current version; with
    `delta_input_bounds` of that version (the read pinned to it: a table appended to while the run
    reads it keeps one version), or None and why not."""
    version, bounds, why = _delta_log(path)
    return read_table(spark, path, version=version), bounds, why


def _catalog_delta(spark: SparkSession, name: str, df: DataFrame
                   ) -> tuple[DataFrame, InputBounds | None, str | None]:
    """A catalog table that is a Delta table (`DESCRIBE DETAIL`, Delta Spark): read at its log's
    current version, with `delta_input_bounds` when delta-rs can read the log at its location (else
    None and why); any other table: (`df`, None, None)."""
    try:
        detail = spark.sql(f"DESCRIBE DETAIL {name}").collect()[0].asDict()
    except Exception:  # no Delta Spark, or not a table it describes: read as it is
        return df, None, None
    if str(detail.get("format") or "").lower() != "delta" or not detail.get("location"):
        return df, None, None
    version, bounds, why = _delta_log(str(detail["location"]))
    return (df if version is None else spark.read.option("versionAsOf", version).table(name)), bounds, why


def _delta_log(location: str) -> tuple[int | None, InputBounds | None, str | None]:
    """(the current version, `delta_input_bounds`, why there are none) of the Delta table at
    `location` as delta-rs reads its log; (None, None, why) when it cannot (e.g. a store whose
    credentials only Spark or the catalog holds: Spark still reads the table, whole)."""
    try:
        dt = DeltaTable(location)
    except Exception as exc:
        return None, None, f"its log at {location} cannot be read here ({str(exc).splitlines()[0]})"
    bounds, why = delta_input_bounds(dt)
    return dt.version(), bounds, why


def _bound(values: Any, column: str, partition_values: Any) -> Any:
    """A file's statistic of `column` (`values`: its add action's `min` or `max`), or the column's
    value in the file's partition values when the table is partitioned by it."""
    if partition_values is not None and column in partition_values:
        return partition_values[column]
    return (values or {}).get(column)


def _ms(t: Any) -> int | None:
    """A timestamp statistic as epoch ms (floored); a naive one is UTC, as the session reads it; an
    integer one is epoch ms already (`normalize_schema`); anything else is unknown."""
    if isinstance(t, datetime):
        return ((t if t.tzinfo is not None else t.replace(tzinfo=UTC)) - _EPOCH) // _ONE_MS
    return t if isinstance(t, int) else None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)


def delta_input_bounds(dt: DeltaTable) -> tuple[InputBounds | None, str | None]:
    """(`InputBounds` of the current version's data files from their add actions' statistics,
    None) or (None, why not): a file has no record count, or a partition, offset or timestamp may
    be null (a file's statistics count some, or none). A bound a file's statistics lack is None
    (unknown). With deletion vectors enabled the bounds still hold (a file's live rows are some of
    those its statistics describe) but the record count is not given: delta-rs does not tell how
    many rows each vector deletes."""
    deletions = "deletionVectors" in (dt.protocol().reader_features or [])
    partitioned = set(dt.metadata().partition_columns)
    units = []
    records = 0
    for a in pa.table(dt.get_add_actions(flatten=False)).to_pylist():
        rows = a.get("num_records")
        if rows is None:
            return None, f"{a['path']}: no record count in the log"
        pvals = a.get("partition") if partitioned else None
        for c in POSITION_COLUMNS:
            if c in partitioned:
                null = (pvals or {}).get(c) is None
            else:
                count = (a.get("null_count") or {}).get(c)
                null = count is None or count > 0
            if null:
                return None, f"{a['path']}: {c} may be null"
        records += rows
        if rows == 0:
            continue
        low, high = (_bound(a.get(k), "partition", pvals) for k in ("min", "max"))
        t_min, t_max = (_ms(_bound(a.get(k), "timestamp", pvals)) for k in ("min", "max"))
        o_max = _bound(a.get("max"), "offset", pvals)
        # widened by a millisecond each way, as Parquet footers' bounds are (`coordinator_audit.udfs.scan.RowGroupBounds`)
        units.append(RowGroupBounds(None if low is None else int(low), None if high is None else int(high),
                                    None if o_max is None else int(o_max), None if t_min is None else t_min - 1,
                                    None if t_max is None else t_max + 1))
    return InputBounds(tuple(units), None if deletions else records), None


def filter_groups(df: DataFrame, patterns: Sequence[str], *, column: str = "group_id") -> DataFrame:
    """Keeps rows whose `column` matches one of the glob `patterns` (fnmatch syntax); no patterns keeps all."""
    if not patterns:
        return df
    cond = F.lit(False)
    for pattern in patterns:
        cond = cond | F.col(column).rlike("^" + fnmatch.translate(pattern))  # rlike finds; anchor the start
    return df.where(cond)
