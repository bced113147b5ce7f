"""Kafka input options: parsing, and secrets kept out of logs and runs.config_json (no Spark)."""

from __future__ import annotations

import json

import pytest

from coordinator_audit.core.errors import ConfigError
from coordinator_audit.jobs.config import load_config
from coordinator_audit.jobs.kafka_source import (
    KafkaInputError,
    parse_kafka_options,
    parse_offsets_json,
    redact_options,
)

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="s3cr3t";'


def test_secret_looking_options_are_redacted_and_the_rest_kept() -> None:
    opts = parse_kafka_options([f"sasl.jaas.config={JAAS}", "kafka.security.protocol=SASL_SSL",
                                "ssl.truststore.password=tp", "ssl.keystore.key=PEM", "sasl.oauthbearer.token.endpoint.url=u",
                                "client.secret=x", "key.deserializer=org.X", "sasl.mechanism=PLAIN"])
    assert opts["sasl.jaas.config"] == JAAS and opts["security.protocol"] == "SASL_SSL"
    assert redact_options(opts) == {
        "sasl.jaas.config": "***", "security.protocol": "SASL_SSL", "ssl.truststore.password": "***",
        "ssl.keystore.key": "***", "sasl.oauthbearer.token.endpoint.url": "***", "client.secret": "***",
        "key.deserializer": "org.X", "sasl.mechanism": "PLAIN"}


def test_a_malformed_option_is_named_without_its_value() -> None:
    with pytest.raises(KafkaInputError, match=r"'security\.protocol'"):
        parse_kafka_options(["security.protocol"])


def test_config_json_never_holds_a_secret() -> None:
    cfg = load_config(None, {"input.path": "", "input.kafka_bootstrap": "127.0.0.1:9092",
                             "input.kafka_options": [f"sasl.jaas.config={JAAS}", "security.protocol=SASL_SSL"]})
    text = json.dumps(cfg.to_dict())
    assert "s3cr3t" not in text and "sasl.jaas.config=***" in text and "security.protocol=SASL_SSL" in text
    assert cfg.kafka_options[0].endswith(JAAS)  # the job itself still gets the real value


def test_kafka_input_excludes_a_path_and_options_must_be_pairs() -> None:
    with pytest.raises(ConfigError, match=r"excludes input\.path"):
        load_config(None, {"input.path": "data/samples", "input.kafka_bootstrap": "127.0.0.1:9092"})
    with pytest.raises(ConfigError, match="not KEY=VALUE"):
        load_config(None, {"input.path": "", "input.kafka_bootstrap": "h:1", "input.kafka_options": ["nope"]})


def test_offsets_json_round_trip_and_errors() -> None:
    assert parse_offsets_json('{"0": 12, "3": 4}') == {0: 12, 3: 4}
    with pytest.raises(KafkaInputError, match="--kafka-starting-offsets"):
        parse_offsets_json("[1, 2]", what="--kafka-starting-offsets")


def test_the_partition_count_is_a_flag_and_a_key_zero_meaning_ask_the_cluster() -> None:
    from coordinator_audit.jobs.audit import config_from_args, parse_args

    base = {"input.path": "", "input.kafka_bootstrap": "127.0.0.1:9092"}
    assert load_config(None, base).kafka_partitions is None
    assert load_config(None, {**base, "input.kafka_partitions": 4}).kafka_partitions == 4
    with pytest.raises(ConfigError, match=r"input\.kafka_partitions .*got -1"):
        load_config(None, {**base, "input.kafka_partitions": -1})
    args = parse_args(["--kafka-bootstrap", "127.0.0.1:9092", "--kafka-partitions", "7", "--output", "out"])
    assert config_from_args(args).kafka_partitions == 7
