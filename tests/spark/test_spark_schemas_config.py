"""udfs.schemas (dataclass -> StructType rule) and jobs.config (validation naming the key)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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

from coordinator_core.errors import ConfigError
from jobs.config import load_config, parse_timestamp
from jobs.spark_session import is_local_master, load_spark_conf
from udfs.schemas import TABLE_SCHEMAS, stored_schema, struct_type_from_dataclass


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
                                  "offset_commits", "quarantine", "runs",
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
    assert conf["spark.sql.shuffle.partitions"] == "2" and conf["spark.sql.session.timeZone"] == "UTC"
    bad = tmp_path / "s.toml"
    bad.write_text("[spark]\nshuffle = 2\n")
    with pytest.raises(ConfigError, match=r"spark\.shuffle .*start with 'spark\.'"):
        load_spark_conf(bad)
    assert is_local_master("local[2]") and not is_local_master("yarn")
