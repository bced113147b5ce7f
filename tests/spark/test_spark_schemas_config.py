"""coordinator_audit.udfs.schemas (dataclass -> StructType rule) and coordinator_audit.jobs.config (validation naming the key)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from coordinator_audit.core.errors import ConfigError
from coordinator_audit.jobs.config import DEFAULT_SCAN_CHUNK_ROWS, SPEC, load_config, parse_timestamp
from coordinator_audit.jobs.spark_session import (
    ALWAYS,
    LOCAL_DEFAULTS,
    is_local_master,
    load_spark_conf,
    release,
)
from coordinator_audit.udfs.schemas import (
    MILLIS_COLUMNS,
    TABLE_SCHEMAS,
    TIME_COMPANIONS,
    stored_schema,
    struct_type_from_dataclass,
    time_column_name,
    with_time_columns,
)


@dataclass(frozen=True)
class _Sample:
    group_id: str
    partition: int
    source_partition: int
    generation_id: int | None
    member_count: int
    offset: int
    commit_timestamp: int | None
    stable: bool
    key: bytes
    value: bytes | None
    member_ids: tuple[str, ...]


def test_struct_type_rule_on_a_sample_dataclass() -> None:
    assert struct_type_from_dataclass(_Sample) == StructType([
        StructField("group_id", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("source_partition", IntegerType(), False),
        StructField("generation_id", IntegerType(), True),
        StructField("member_count", IntegerType(), False),
        StructField("offset", LongType(), False),
        StructField("commit_timestamp", LongType(), True),
        StructField("stable", BooleanType(), False),
        StructField("key", BinaryType(), False),
        StructField("value", BinaryType(), True),
        StructField("member_ids", ArrayType(StringType(), False), False),
    ])


def test_struct_type_rejects_unmappable_fields() -> None:
    @dataclass
    class Bad:
        when: dict[str, int]

    with pytest.raises(TypeError, match="field 'when'"):
        struct_type_from_dataclass(Bad)
    with pytest.raises(TypeError, match="not a dataclass"):
        struct_type_from_dataclass(int)


def test_every_table_has_a_schema_and_stored_schema_appends_run_columns() -> None:
    assert set(TABLE_SCHEMAS) == {"generations", "assignments", "rebalance_causes", "violations",
                                  "offset_commits", "quarantine", "runs", "group_state",
                                  "partition_ownership", "rebalances", "group_health"}
    assert stored_schema("violations").fieldNames()[-2:] == ["run_id", "run_window"]
    assert stored_schema("runs").fieldNames().count("run_id") == 1
    assert TABLE_SCHEMAS["offset_commits"]["partition"].dataType == IntegerType()
    assert TABLE_SCHEMAS["violations"]["member_ids"].dataType == ArrayType(StringType(), False)


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "audit.toml"
    p.write_text(text)
    return p


def test_default_config_with_cli_overrides() -> None:
    cfg = load_config(None, {"input.path": "data/samples", "window.since": "2026-11-21", "job.shards": 4,
                             "groups.include": "grp-*,other", "output.write_mode": None})
    assert cfg.input_path == "data/samples" and cfg.input_table is None
    assert cfg.since is not None and cfg.since.isoformat() == "2026-11-21T00:00:00+00:00"
    assert cfg.shards == 4 and cfg.groups == ("grp-*", "other")
    assert cfg.write_mode == "replace_window" and cfg.writer == "auto"
    assert cfg.source.endswith("+ overrides")


@pytest.mark.parametrize(("text", "overrides", "message"), [
    ("[input]\npath = 'x'\nformt = 'json'\n", {}, r"input\.formt .*unknown key"),
    ("[inputs]\npath = 'x'\n", {}, r"inputs .*unknown section"),
    ("[input]\npath = 'x'\nformat = 'csv'\n", {}, r"input\.format .*'csv' is not one of"),
    ("[input]\npath = 'x'\n[job]\nshards = 0\n", {}, r"job\.shards .*at least 1"),
    ("[input]\npath = 'x'\n[job]\nshards = 'many'\n", {}, r"job\.shards .*expected an integer"),
    ("[input]\npath = 'x'\n[job]\nquarantine = 'yes'\n", {}, r"job\.quarantine .*true or false"),
    ("[input]\npath = 'x'\n[window]\nsince = 'yesterday'\n", {}, r"window\.since .*ISO-8601"),
    ("[input]\npath = 'x'\n[window]\nsince = '2026-11-22'\nuntil = '2026-11-21'\n", {}, r"since .* is not before until"),
    ("[input]\npath = ''\n", {}, r"input\.path / input\.table .*no input given"),
    ("[input]\npath = 'x'\ntable = 'db.t'\n", {}, r"set one of them, not both"),
    ("[input]\npath = 'x'\n", {"output.mode": "append"}, r"output\.mode \(override\): unknown key"),
    ("[input]\npath = 'x'\n", {"output.write_mode": "upsert"}, r"output\.write_mode \(override\)"),
    ("[input\npath = 'x'\n", {}, r"not valid TOML"),
    ("[input]\npath = 'x'\n[job]\nscan_reader = 'arrow'\n", {}, r"job\.scan_reader \(.*\): this key is gone: .*delete it"),
    ("[input]\npath = 'x'\n[job]\nreplay_input = 'spark'\n", {}, r"job\.replay_input \(.*\): this key is gone: .*shuffle"),
    ("[input]\npath = 'x'\n[output]\ndirect_files = false\n", {}, r"output\.direct_files \(.*\): this key is gone"),
    ("[input]\npath = 'x'\n", {"job.scan_reader": "spark"}, r"job\.scan_reader \(override\): this key is gone"),
])
def test_config_errors_name_the_key(tmp_path: Path, text: str, overrides: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(_write(tmp_path, text), overrides)


def test_missing_config_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.toml", {"input.path": "x"})


def test_timestamps_are_utc() -> None:
    assert parse_timestamp("2026-11-21T06:00:00+02:00").isoformat() == "2026-11-21T04:00:00+00:00"
    assert parse_timestamp("2026-11-21T06:00:00Z").isoformat() == "2026-11-21T06:00:00+00:00"


def test_spark_local_conf(tmp_path: Path) -> None:
    conf = load_spark_conf("conf/spark-local.toml")
    assert conf["spark.sql.shuffle.partitions"] == "2" and ALWAYS["spark.sql.session.timeZone"] == "UTC"
    bad = tmp_path / "s.toml"
    bad.write_text("[spark]\nshuffle = 2\n")
    with pytest.raises(ConfigError, match=r"spark\.shuffle .*start with 'spark\.'"):
        load_spark_conf(bad)
    assert is_local_master("local[2]") and not is_local_master("yarn")


def test_conf_files_document_the_built_in_defaults() -> None:
    """conf/*.toml are documentation and templates: the job runs without them (a wheel or a
    --py-files zip has none), so they must hold exactly the built-in values."""
    import tomllib

    root = Path(__file__).resolve().parents[2]
    documented = tomllib.loads((root / "conf" / "audit.toml").read_text())
    assert {s: set(keys) for s, keys in documented.items()} == {s: set(keys) for s, keys in SPEC.items()}
    for section, keys in SPEC.items():
        for key, spec in keys.items():
            assert documented[section][key] == spec.default, f"{section}.{key}"
    assert load_spark_conf(root / "conf" / "spark-local.toml") == LOCAL_DEFAULTS
    defaults = load_config(None, {"input.path": "x"})
    assert defaults.source == "defaults + overrides" and defaults.output_path == "out/delta"
    assert load_config(root / "conf" / "audit.toml", {"input.path": "x"}).to_dict() | {"source": ""} == (
        defaults.to_dict() | {"source": ""})


def test_a_config_file_overrides_only_its_keys(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, "[job]\nshards = 3\n"), {"input.path": "x"})
    assert cfg.shards == 3 and cfg.output_path == "out/delta" and cfg.scan_chunk_rows == DEFAULT_SCAN_CHUNK_ROWS


def test_every_millisecond_time_column_has_a_timestamp_companion() -> None:
    """A time in epoch ms is a long named *_timestamp, timestamp, *_at or valid_*; each is declared
    in MILLIS_COLUMNS, and its companion is stored right after the content columns."""
    from pyspark.sql.types import TimestampType

    for table, schema in TABLE_SCHEMAS.items():
        times = tuple(f.name for f in schema.fields if isinstance(f.dataType, LongType) and (
            f.name == "timestamp" or f.name.endswith(("_timestamp", "_at")) or f.name.startswith("valid_")))
        assert times == MILLIS_COLUMNS.get(table, ()), table
        stored = stored_schema(table)
        for ms, ts in TIME_COMPANIONS.get(table, ()):
            assert stored[ts].dataType == TimestampType() and stored[ts].nullable == schema[ms].nullable
    assert [time_column_name(c) for c in ("record_timestamp", "timestamp", "valid_from", "ended_at")] == [
        "record_time", "time", "valid_from_time", "ended_at_time"]


def test_with_time_columns_converts_milliseconds(spark) -> None:
    from pyspark.sql import functions as F

    df = spark.createDataFrame([(1795219200123, None, None)],
                               "valid_from long, valid_to long, pending_revocation_at long")
    row = with_time_columns(df, "assignments").select(
        F.date_format("valid_from_time", "yyyy-MM-dd HH:mm:ss.SSS").alias("text"),
        F.unix_millis("valid_from_time").alias("ms"), "valid_to_time").first()
    assert (row["text"], row["ms"], row["valid_to_time"]) == ("2026-11-21 00:00:00.123", 1795219200123, None)


def test_release_frees_the_blocks_of_a_local_checkpoint_under_a_projection(spark) -> None:
    """`unpersist` leaves a local checkpoint's blocks to the driver's garbage collector; `release`,
    given any frame over it, frees them (the audit checkpoints the replay's wide output)."""
    wide = spark.range(1000, numPartitions=2).selectExpr("id", "id % 7 AS k").localCheckpoint(eager=False)
    rdd_id = wide._jdf.queryExecution().logical().rdd().id()

    def stored() -> int:  # this checkpoint's partitions held by the block manager
        infos = spark.sparkContext._jsc.sc().getRDDStorageInfo()
        return sum(info.numCachedPartitions() for info in infos if info.id() == rdd_id)

    table = wide.where("k = 3").select("id")
    assert table.count() == 143 and stored() == 2
    table.unpersist()
    assert stored() == 2
    assert release(table) == 1 and stored() == 0


def test_the_local_jvm_runs_with_the_jit_thresholds(spark: Any) -> None:
    """A local master's JVM gets `LOCAL_JIT_OPTIONS` (the suite's session has them too): this JDK
    accepts them (an unknown -XX flag would stop the JVM from starting) and applies them."""
    from coordinator_audit.jobs.spark_session import LOCAL_JIT_OPTIONS

    assert LOCAL_DEFAULTS["spark.driver.extraJavaOptions"] == LOCAL_JIT_OPTIONS
    jvm = spark.sparkContext._jvm
    args = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    flags = LOCAL_JIT_OPTIONS.split()
    assert set(flags) <= set(args)
    bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))
    for flag in flags:
        name, value = flag.removeprefix("-XX:").split("=")
        assert str(bean.getVMOption(name).getValue()) == value, name
