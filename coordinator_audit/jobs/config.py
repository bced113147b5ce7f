"""The audit job's configuration: built-in defaults, overlaid by an optional TOML file, overlaid by CLI flags.

`load_config(path, overrides)` starts from the defaults declared in `SPEC` (they travel with the
code: a wheel, a `--py-files` zip or a notebook needs no file), reads `path` with `tomllib` when
one is given (its keys override the defaults), applies the overrides (dotted keys such as
``"input.path"``; ``None`` values are ignored, so argparse defaults can be passed as they are),
validates everything and returns a frozen `AuditConfig`. Every problem raises
`coordinator_audit.core.errors.ConfigError` naming the key (``input.format``), the file, and what is
allowed. Unknown sections and keys are errors too (a typo must not be silently ignored), and a key
the job no longer has (`REMOVED`) is refused with what the job now decides in its place.

The keys, their types and defaults are declared once, in `SPEC`; `conf/audit.toml` documents them
with the same values (a test holds the file to `SPEC`). The defaults other modules' signatures
repeat are named here (`DEFAULT_SHARDS`, `DEFAULT_SCAN_CHUNK_ROWS`, `DEFAULT_APP_NAME`) and
imported from here.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, get_args

from coordinator_audit.core.errors import ConfigError
from coordinator_audit.udfs.history import DEFAULT_HEALTH, HealthThresholds

__all__ = [
    "DEFAULT_APP_NAME",
    "DEFAULT_COMPRESSION",
    "DEFAULT_OUTPUT_PATH",
    "DEFAULT_SCAN_CHUNK_ROWS",
    "DEFAULT_SHARDS",
    "REMOVED",
    "SPEC",
    "AuditConfig",
    "Compression",
    "InputFormat",
    "TextEncoding",
    "WriteMode",
    "Writer",
    "load_config",
    "parse_timestamp",
]

InputFormat = Literal["auto", "parquet", "delta", "json"]
TextEncoding = Literal["auto", "hex", "base64"]
WriteMode = Literal["replace_window", "overwrite", "append"]
Writer = Literal["auto", "native", "embedded"]
Compression = Literal["zstd", "snappy", "gzip", "none"]

DEFAULT_SHARDS = 8
"""job.shards: Spark partitions of the per-group replay."""
DEFAULT_SCAN_CHUNK_ROWS = 500_000
"""job.scan_chunk_rows: rows per chunk of the single pass (a Python worker's memory is about 700
bytes per row of its chunk)."""
DEFAULT_OUTPUT_PATH = "out/delta"
"""output.path: the base path of the Delta tables when none is given."""
DEFAULT_APP_NAME = "coordinator-audit"
"""spark.app_name: the Spark application name."""
DEFAULT_COMPRESSION: Compression = "zstd"
"""output.compression: the codec of the Parquet files the job writes into its tables. zstd stores a
year of nights in much less space than snappy for a little more write time, and every reader of
Delta tables in use reads it (Spark, Databricks, delta-rs, pyarrow, DuckDB, Trino)."""

@dataclass(frozen=True, slots=True)
class _Key:
    kind: Any  # a Python type, or a Literal alias for enumerations
    default: Any
    help: str


SPEC: dict[str, dict[str, _Key]] = {
    "input": {
        "path": _Key(str, "", "input path (file or directory)"),
        "table": _Key(str, "", "input catalog table"),
        "format": _Key(InputFormat, "auto", "input format"),
        "text_encoding": _Key(TextEncoding, "auto", "key/value encoding of JSON-lines dumps"),
        "kafka_bootstrap": _Key(str, "", "read __consumer_offsets from this Kafka cluster (HOST:PORT[,...])"),
        "kafka_options": _Key(list, [], "Kafka client settings KEY=VALUE for kafka_bootstrap (secrets redacted)"),
        "kafka_partitions": _Key(int, 0, "__consumer_offsets' partition count (offsets.topic.num.partitions): "
                                         "needed on Spark Connect; 0: ask the cluster"),
        "server_log": _Key(str, "", "the broker's server.log (file or directory): Kafka's own rebalance account"),
    },
    "window": {
        "since": _Key(datetime, "", "inclusive lower bound on record timestamps"),
        "until": _Key(datetime, "", "exclusive upper bound on record timestamps"),
    },
    "groups": {
        "include": _Key(list, [], "glob patterns of group ids to audit"),
    },
    "job": {
        "shards": _Key(int, DEFAULT_SHARDS, "Spark partitions of the per-group replay"),
        "quarantine": _Key(bool, True, "write undecodable records to the quarantine table"),
        "scan_chunk_rows": _Key(int, DEFAULT_SCAN_CHUNK_ROWS, "rows per chunk of the single pass (bounds a Python worker's memory)"),
        "derived_tables": _Key(bool, True, "write partition_ownership, rebalances and group_health"),
    },
    "output": {
        "path": _Key(str, DEFAULT_OUTPUT_PATH, "base path of the Delta tables"),
        "catalog_schema": _Key(str, "", "catalog schema for managed tables"),
        "write_mode": _Key(WriteMode, "replace_window", "how a run replaces earlier rows"),
        "writer": _Key(Writer, "auto", "Delta writer"),
        "compression": _Key(Compression, DEFAULT_COMPRESSION, "codec of the tables' Parquet files"),
    },
    "health": {
        "flapping_peak_hour_rebalances": _Key(float, DEFAULT_HEALTH.peak_hour_rebalances,
                                              "completed rebalances in one clock hour that make a day flapping"),
        "flapping_rebalancing_share": _Key(float, DEFAULT_HEALTH.rebalancing_share,
                                           "share of the observed day spent rebalancing that makes it flapping"),
        "flapping_unowned_share": _Key(float, DEFAULT_HEALTH.unowned_share,
                                       "share of partition-time unowned by rebalances that makes a day flapping"),
        "unstable_score": _Key(float, DEFAULT_HEALTH.unstable_score,
                               "flapping score (1.0 = a threshold reached) from which a day is unstable"),
    },
    "spark": {
        "master": _Key(str, "", "Spark master ('' keeps spark-submit's)"),
        "app_name": _Key(str, DEFAULT_APP_NAME, "Spark application name"),
        "local_conf": _Key(str, "", "a TOML file of Spark settings overriding the built-in local ones"),
        "jars": _Key(list, [], "jars added to the session the job starts (spark.jars)"),
        "packages": _Key(list, [], "Maven coordinates added to the session the job starts (spark.jars.packages)"),
    },
}

REMOVED: dict[str, str] = {
    "job.scan_reader": "the single pass reads local Parquet files itself when the session's workers can read "
                       "this process's files (a classic session), else Spark reads the input",
    "job.replay_input": "the replay's input goes from task to task as local files when every task runs on this "
                        "machine (a local master), else through Spark's shuffle",
    "output.direct_files": "the replay's tasks write the tables' files themselves when the embedded writer writes "
                           "to a local base path and every task runs on this machine, else Spark writes them",
}
"""Keys earlier versions had, and what the job now decides itself (`coordinator_audit.jobs.audit.RunChoices`,
from what the session can do): a file or override that still sets one is refused, naming it."""


@dataclass(frozen=True, slots=True)
class AuditConfig:
    """The validated configuration. Empty strings of the file become None here."""

    input_path: str | None
    input_table: str | None
    input_format: InputFormat
    text_encoding: TextEncoding
    since: datetime | None
    until: datetime | None
    groups: tuple[str, ...]
    shards: int
    quarantine: bool
    scan_chunk_rows: int
    derived_tables: bool
    output_path: str | None
    catalog_schema: str | None
    write_mode: WriteMode
    writer: Writer
    spark_master: str | None
    app_name: str
    spark_local_conf: str
    source: str
    """Where the values came from: "defaults", the file path, plus "+ overrides" when any applied."""
    kafka_bootstrap: str | None = None
    kafka_options: tuple[str, ...] = ()
    """KEY=VALUE Kafka client settings; may hold secrets (to_dict redacts them)."""
    kafka_partitions: int | None = None
    """The partition count of `__consumer_offsets` (the cluster's offsets.topic.num.partitions): what
    a Spark Connect session reads (`coordinator_audit.jobs.kafka_source.read_kafka`); a classic
    session asks the cluster and checks it against this when given."""
    server_log: str | None = None
    compression: Compression = DEFAULT_COMPRESSION
    """The codec of every Parquet file the run writes into its tables (files written before keep theirs)."""
    health: HealthThresholds = DEFAULT_HEALTH
    """What makes a group's day flapping or unstable in `group_health` (the `[health]` keys)."""
    spark_jars: tuple[str, ...] = ()
    """Jars added to the session the job starts (`spark.jars`)."""
    spark_packages: tuple[str, ...] = ()
    """Maven coordinates added to the session the job starts (`spark.jars.packages`)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (for the runs table's config_json); secret Kafka options redacted."""
        # Imported here, not at the top: coordinator_audit.jobs.kafka_source loads pyspark (through coordinator_audit.jobs.inputs), and this
        # module is also read by coordinator_audit.jobs.query, which answers from the Delta tables without Spark.
        from coordinator_audit.jobs.kafka_source import REDACTED, is_secret

        out = dataclasses.asdict(self)
        for k in ("since", "until"):
            if out[k] is not None:
                out[k] = out[k].isoformat()
        out["groups"] = list(out["groups"])
        out["kafka_options"] = [
            f"{key}={REDACTED}" if is_secret(key.strip().removeprefix("kafka.")) else f"{key}={value}"
            for key, _, value in (o.partition("=") for o in self.kafka_options)]
        return out


def parse_timestamp(text: str, *, key: str = "timestamp") -> datetime:
    """An ISO-8601 date or date-time (a trailing Z allowed) as an aware UTC datetime; naive means UTC."""
    s = text.strip()
    try:
        dt = datetime.fromisoformat(s[:-1] + "+00:00" if s.endswith(("Z", "z")) else s)
    except ValueError:
        raise ConfigError(f"{key}: {text!r} is not an ISO-8601 date or date-time "
                          f"(e.g. 2026-11-21 or 2026-11-21T06:00:00Z)") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)


def _check(name: str, spec: _Key, value: Any, where: str) -> Any:
    kind = spec.kind
    if kind is datetime:
        if isinstance(value, datetime):
            return value if value.tzinfo else value.replace(tzinfo=UTC)
        if not isinstance(value, str):
            raise ConfigError(f"{name} ({where}): expected an ISO-8601 string, got {type(value).__name__} {value!r}")
        return parse_timestamp(value, key=f"{name} ({where})") if value.strip() else None
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{name} ({where}): expected true or false, got {value!r}")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{name} ({where}): expected an integer, got {value!r}")
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ConfigError(f"{name} ({where}): expected a positive number, got {value!r}")
        return float(value)
    if kind is list:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(f"{name} ({where}): expected a list of non-empty strings, got {value!r}")
        return tuple(value)
    if kind is str:
        if not isinstance(value, str):
            raise ConfigError(f"{name} ({where}): expected a string, got {type(value).__name__} {value!r}")
        return value
    allowed = get_args(kind)  # a Literal enumeration
    if value not in allowed:
        raise ConfigError(f"{name} ({where}): {value!r} is not one of {', '.join(map(repr, allowed))}")
    return value


def load_config(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> AuditConfig:
    """The built-in defaults, overridden by the TOML file `path` (when given) and by `overrides`
    ({"section.key": value}; None values skipped), validated. Raises ConfigError naming the key for
    anything wrong."""
    raw, where = _read_file(path)
    values = _file_values(raw, where)
    applied = _apply_overrides(values, overrides or {})
    return _validated(_Values(values), where, source=where + (" + overrides" if applied else ""))


def _read_file(path: str | Path | None) -> tuple[dict[str, Any], str]:
    """The TOML file's sections (none without `path`) and the name errors give it ("defaults" without one)."""
    if path is None:
        return {}, "defaults"
    file = Path(path)
    where = str(file)
    if not file.is_file():
        raise ConfigError(f"config file {where} not found (pass an existing TOML file, or no --config for "
                          f"the built-in defaults)")
    try:
        return tomllib.loads(file.read_text(encoding="utf-8")), where
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {where} is not valid TOML: {exc}") from None


def _file_values(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The file's values, checked, by dotted key; an unknown section or key is an error."""
    values: dict[str, Any] = {}
    for section, keys in raw.items():
        if section not in SPEC:
            raise ConfigError(f"{section} ({where}): unknown section; known sections: {', '.join(SPEC)}")
        if not isinstance(keys, dict):
            raise ConfigError(f"{section} ({where}): expected a [{section}] table, got {keys!r}")
        for key, value in keys.items():
            _refuse_removed(f"{section}.{key}", where)
            if key not in SPEC[section]:
                raise ConfigError(f"{section}.{key} ({where}): unknown key; known keys of [{section}]: "
                                  f"{', '.join(SPEC[section])}")
            values[f"{section}.{key}"] = _check(f"{section}.{key}", SPEC[section][key], value, where)
    return values


def _refuse_removed(dotted: str, where: str) -> None:
    """A ConfigError for a key of `REMOVED`: what the job decides in its place, and to delete the key."""
    if dotted in REMOVED:
        raise ConfigError(f"{dotted} ({where}): this key is gone: {REMOVED[dotted]}; delete it from the "
                          f"configuration")


def _apply_overrides(values: dict[str, Any], overrides: Mapping[str, Any]) -> bool:
    """Puts the checked `overrides` (None values skipped) into `values`; True when any applied."""
    applied = False
    for dotted, value in overrides.items():
        if value is None:
            continue
        section, _, key = dotted.partition(".")
        _refuse_removed(dotted, "override")
        if section not in SPEC or key not in SPEC[section]:
            known = ", ".join(f"{s}.{k}" for s, ks in SPEC.items() for k in ks)
            raise ConfigError(f"{dotted} (override): unknown key; known keys: {known}")
        values[dotted] = _check(dotted, SPEC[section][key], value, "override")
        applied = True
    return applied


@dataclass(frozen=True, slots=True)
class _Values:
    """The values given (file, overrides) by dotted key; a key not given reads as its default."""

    given: Mapping[str, Any]

    def get(self, dotted: str) -> Any:
        if dotted in self.given:
            return self.given[dotted]
        section, _, key = dotted.partition(".")
        spec = SPEC[section][key]
        return _check(dotted, spec, spec.default, "default")

    def text(self, dotted: str) -> str | None:
        v = self.get(dotted)
        return v.strip() or None


def _validated(v: _Values, where: str, *, source: str) -> AuditConfig:
    """The `AuditConfig` of `v`, after the checks that span keys (`where`: the file, for errors)."""
    input_path, input_table, kafka_bootstrap, kafka_options = _checked_input(v, where)
    kafka_partitions = v.get("input.kafka_partitions")
    if kafka_partitions < 0:
        raise ConfigError(f"input.kafka_partitions ({where}): must be 0 (ask the cluster) or the partition count "
                          f"of __consumer_offsets, got {kafka_partitions}")
    since, until = v.get("window.since"), v.get("window.until")
    if since is not None and until is not None and since >= until:
        raise ConfigError(f"window.since / window.until: since {since.isoformat()} is not before until "
                          f"{until.isoformat()}")
    shards = v.get("job.shards")
    if shards < 1:
        raise ConfigError(f"job.shards ({where}): must be at least 1, got {shards}")
    chunk_rows = v.get("job.scan_chunk_rows")
    if chunk_rows < 1:
        raise ConfigError(f"job.scan_chunk_rows ({where}): must be at least 1, got {chunk_rows}")
    output_path, catalog_schema = _checked_output(v, where)
    unstable = v.get("health.unstable_score")
    if unstable > 1.0:
        raise ConfigError(f"health.unstable_score ({where}): must be at most 1.0 (the score of a flapping day), "
                          f"got {unstable:g}")
    health = HealthThresholds(
        peak_hour_rebalances=v.get("health.flapping_peak_hour_rebalances"),
        rebalancing_share=v.get("health.flapping_rebalancing_share"),
        unowned_share=v.get("health.flapping_unowned_share"), unstable_score=unstable)
    return AuditConfig(
        input_path=input_path, input_table=input_table, input_format=v.get("input.format"),
        text_encoding=v.get("input.text_encoding"), since=since, until=until, groups=v.get("groups.include"),
        shards=shards, quarantine=v.get("job.quarantine"), scan_chunk_rows=chunk_rows,
        derived_tables=v.get("job.derived_tables"), output_path=output_path,
        catalog_schema=catalog_schema, write_mode=v.get("output.write_mode"), writer=v.get("output.writer"),
        spark_master=v.text("spark.master"), app_name=v.get("spark.app_name"),
        spark_local_conf=v.get("spark.local_conf"), source=source,
        kafka_bootstrap=kafka_bootstrap, kafka_options=kafka_options, kafka_partitions=kafka_partitions or None,
        server_log=v.text("input.server_log"),
        compression=v.get("output.compression"), health=health,
        spark_jars=v.get("spark.jars"), spark_packages=_checked_packages(v.get("spark.packages")),
    )


def _checked_packages(packages: tuple[str, ...]) -> tuple[str, ...]:
    """spark.packages: Maven coordinates GROUP:ARTIFACT:VERSION."""
    for coordinate in packages:
        if len(coordinate.split(":")) != 3 or not all(coordinate.split(":")):
            raise ConfigError(f"spark.packages: {coordinate!r} is not a Maven coordinate "
                              f"GROUP:ARTIFACT:VERSION (e.g. org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0)")
    return packages


def _checked_input(v: _Values, where: str) -> tuple[str | None, str | None, str | None, tuple[str, ...]]:
    """(input.path, input.table, input.kafka_bootstrap, input.kafka_options): exactly one source, options KEY=VALUE."""
    input_path, input_table = v.text("input.path"), v.text("input.table")
    kafka_bootstrap = v.text("input.kafka_bootstrap")
    if kafka_bootstrap and (input_path or input_table):
        raise ConfigError(f"input.kafka_bootstrap ({where}): reading from Kafka excludes input.path and "
                          f"input.table (path {input_path!r}, table {input_table!r})")
    if input_path and input_table:
        raise ConfigError(f"input.path / input.table ({where}): set one of them, not both "
                          f"(path {input_path!r}, table {input_table!r})")
    if not input_path and not input_table and not kafka_bootstrap:
        raise ConfigError(f"input.path / input.table ({where}): no input given; set input.path (a file or "
                          f"directory) or input.table (a catalog table), e.g. --input data/samples/")
    kafka_options = v.get("input.kafka_options")
    for option in kafka_options:
        if "=" not in option or not option.partition("=")[0].strip():
            raise ConfigError(f"input.kafka_options ({where}): {option.partition('=')[0]!r}... is not KEY=VALUE")
    return input_path, input_table, kafka_bootstrap, kafka_options


def _checked_output(v: _Values, where: str) -> tuple[str | None, str | None]:
    """(output.path, output.catalog_schema): at least one, the schema a schema name."""
    output_path, catalog_schema = v.text("output.path"), v.text("output.catalog_schema")
    if not output_path and not catalog_schema:
        raise ConfigError(f"output.path / output.catalog_schema ({where}): no output given; set a base path "
                          f"or a catalog schema")
    if catalog_schema is not None and not all(part.replace("_", "").isalnum() for part in catalog_schema.split(".")):
        raise ConfigError(f"output.catalog_schema ({where}): {catalog_schema!r} is not a schema name "
                          f"(letters, digits, underscores; catalog.schema allowed)")
    return output_path, catalog_schema
