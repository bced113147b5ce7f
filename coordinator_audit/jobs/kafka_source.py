"""Reading `__consumer_offsets` straight from a Kafka cluster, in batch, through Spark's Kafka source.

    read_kafka(spark, "broker:9092", options={"security.protocol": "SASL_SSL", ...},
               starting_offsets={0: 1234, 1: 987})  ->  KafkaRead(df, start, end, options)

* Needs `org.apache.spark:spark-sql-kafka-0-10_2.13:<pyspark version>` on the classpath
  (`spark-submit --packages ...`, or `scripts/jars.sh spark` for local runs and tests).
* `options` are Kafka client settings (`security.protocol`, `sasl.mechanism`, `sasl.jaas.config`,
  `ssl.truststore.location`, ...), given without Spark's `kafka.` prefix; they reach the Kafka
  source and the driver's metadata consumer. `redact_options` is what may be logged or stored:
  values of secret-looking keys (`sasl.jaas.config`, anything with password, secret, token or
  key in its name, except key.deserializer-style class names) become `***`.
* The offsets read are fixed before Spark reads anything: the driver asks the cluster for the
  topic's partitions and their end offsets (`KafkaConsumer#endOffsets`, read_committed), and the
  source reads exactly [start, end) of each partition. `starting_offsets` is the next offset to
  read per partition (what a previous run recorded as its end); a partition missing from it is
  read from its earliest offset. `ending_offsets` is "latest" (the end offsets at the start of
  the run) or an explicit {partition: offset}. `KafkaRead.end_offsets` is what the run recorded:
  a nightly run passes it to the next one as `starting_offsets`.
* The rows have the Kafka-source schema of the file inputs (`key binary, value binary, topic
  string, partition int, offset long, timestamp timestamp`).
* Spark's Admin-based offset fetching skips internal topics, so `read_kafka` turns on
  `spark.sql.streaming.kafka.useDeprecatedOffsetFetching` (the consumer-based fetching) for the
  session, and assigns the partitions explicitly.
* `__consumer_offsets` is compacted: offsets have gaps, and a starting offset may since have been
  compacted away, so the source runs with `failOnDataLoss=false` unless the options say otherwise.
* The read is bounded, so nothing can arrive that it would want: the consumers' `fetch.max.wait.ms`
  defaults to `BATCH_FETCH_MAX_WAIT_MS` (10 ms) instead of kafka-clients' 500 ms, unless the
  options set it: with the client's default every partition's task waits about that long once the
  partition's records are read (`benchmarks`' `kafka_input` measures the read).

A bad bootstrap address, an unknown topic, or a starting offset past a partition's end raises
`KafkaInputError` naming it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pyspark.sql import functions as F

from coordinator_audit.jobs.inputs import InputError
from coordinator_audit.jobs.spark_session import has_jvm
from coordinator_audit.udfs.json_lines import DEFAULT_TOPIC

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "BATCH_FETCH_MAX_WAIT_MS",
    "KafkaInputError",
    "KafkaRead",
    "kafka_source_available",
    "parse_kafka_options",
    "read_kafka",
    "redact_options",
]

BATCH_FETCH_MAX_WAIT_MS = 10
"""`fetch.max.wait.ms` of the source's consumers unless the options set it (module docstring)."""
REDACTED = "***"
_SECRET = re.compile(r"(password|secret|token|jaas|credential|(^|[._])key($|[._]))", re.IGNORECASE)
_NOT_SECRET = {"key.deserializer", "value.deserializer", "key.serializer", "value.serializer"}
# Source options that are not Kafka client settings (Spark's Kafka source reads them without the prefix).
_SOURCE_OPTIONS = {"failOnDataLoss", "minPartitions", "maxRecordsPerPartition", "fetchOffset.numRetries",
                   "fetchOffset.retryIntervalMs", "kafkaConsumer.pollTimeoutMs", "groupIdPrefix"}


class KafkaInputError(InputError):
    """The cluster cannot be read as asked; the message names the broker, topic or partition."""


@dataclass(frozen=True, slots=True)
class KafkaRead:
    """What `read_kafka` read: the rows, the offsets [start, end) per partition, and the redacted options."""

    df: DataFrame
    start_offsets: dict[int, int]
    end_offsets: dict[int, int]
    options: dict[str, str]
    """The options as they may be logged (`redact_options`)."""
    gone: dict[int, tuple[int, int]]
    """{partition: (asked start, earliest offset still in the log)} where retention or deletion
    removed records a starting offset asked for: they cannot be audited (the job logs them)."""

    @property
    def records(self) -> int:
        """At most how many records `df` holds: the offsets [start, end) of every partition (fewer
        where compaction removed some)."""
        return sum(end - self.start_offsets[p] for p, end in self.end_offsets.items())


def is_secret(key: str) -> bool:
    """True for keys whose values must never reach logs or tables (module docstring)."""
    return key not in _NOT_SECRET and bool(_SECRET.search(key))


def redact_options(options: Mapping[str, str]) -> dict[str, str]:
    """`options` with every secret-looking value replaced by `***`."""
    return {k: (REDACTED if is_secret(k) else v) for k, v in options.items()}


def parse_kafka_options(pairs: list[str] | tuple[str, ...]) -> dict[str, str]:
    """["key=value", ...] (a value may contain '=') as a dict; KafkaInputError naming a malformed pair
    (its value redacted when the key looks secret)."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            shown = pair if not is_secret(key) else f"{key}={REDACTED}"
            raise KafkaInputError(f"--kafka-option {shown!r}: expected KEY=VALUE (a Kafka client setting such as "
                                  f"security.protocol=SASL_SSL)")
        out[key.removeprefix("kafka.")] = value
    return out


def kafka_source_available(spark: SparkSession) -> bool:
    """True when Spark's Kafka source (spark-sql-kafka-0-10) is on the driver's classpath."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    try:
        loader = jvm.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName("org.apache.spark.sql.kafka010.KafkaSourceProvider", True, loader)
        return True
    except Exception:
        return False


def _partition_ends(spark: SparkSession, bootstrap: str, topic: str, options: Mapping[str, str],
                    timeout_ms: int) -> tuple[dict[int, int], dict[int, int]]:
    """{partition: earliest offset}, {partition: end offset} of `topic`, asked by a short-lived
    KafkaConsumer in the driver's JVM (kafka-clients comes with spark-sql-kafka)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    props = jvm.java.util.Properties()
    for k, v in options.items():
        if k not in _SOURCE_OPTIONS:
            props.setProperty(k, v)
    props.setProperty("bootstrap.servers", bootstrap)
    props.setProperty("isolation.level", "read_committed")
    props.setProperty("enable.auto.commit", "false")
    deser = "org.apache.kafka.common.serialization.ByteArrayDeserializer"
    props.setProperty("key.deserializer", deser)
    props.setProperty("value.deserializer", deser)
    props.setProperty("default.api.timeout.ms", str(timeout_ms))
    props.setProperty("request.timeout.ms", str(min(timeout_ms, 30_000)))
    consumer = jvm.org.apache.kafka.clients.consumer.KafkaConsumer(props)
    try:
        duration = jvm.java.time.Duration.ofMillis(timeout_ms)
        try:
            infos = consumer.partitionsFor(topic, duration)
        except Exception as exc:
            raise KafkaInputError(f"kafka {bootstrap}: cannot list the partitions of {topic} within "
                                  f"{timeout_ms} ms ({_first_line(exc)}); check the address and the security "
                                  f"options (--kafka-option)") from None
        if infos is None or infos.isEmpty():
            raise KafkaInputError(f"kafka {bootstrap}: topic {topic} does not exist (no partitions)")
        tps = jvm.java.util.ArrayList()
        for info in infos:
            tps.add(jvm.org.apache.kafka.common.TopicPartition(topic, info.partition()))
        begin = consumer.beginningOffsets(tps, duration)
        end = consumer.endOffsets(tps, duration)
        first = {int(tp.partition()): int(begin.get(tp)) for tp in tps}
        last = {int(tp.partition()): int(end.get(tp)) for tp in tps}
        return first, last
    finally:
        consumer.close()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def read_kafka(spark: SparkSession, bootstrap: str, *, options: Mapping[str, str] | None = None,
               topic: str = DEFAULT_TOPIC, starting_offsets: Mapping[int, int] | None = None,
               ending_offsets: Literal["latest"] | Mapping[int, int] = "latest",
               timeout_ms: int = 60_000) -> KafkaRead:
    """Reads [start, end) of every partition of `topic` in batch through Spark's Kafka source
    (module docstring); the rows have the Kafka-source schema."""
    opts = dict(options or {})
    opts.setdefault("fetch.max.wait.ms", str(BATCH_FETCH_MAX_WAIT_MS))
    if not re.fullmatch(r"[^\s,]+:\d+(,[^\s,]+:\d+)*", bootstrap or ""):
        raise KafkaInputError(f"kafka bootstrap {bootstrap!r}: expected HOST:PORT[,HOST:PORT...]")
    if not has_jvm(spark):
        raise KafkaInputError("reading from Kafka (--kafka-bootstrap) needs a classic Spark session: the run asks "
                              "the partitions' offsets through the driver's JVM, which a Spark Connect session "
                              "does not expose; on Spark Connect, audit an export of __consumer_offsets (--input)")
    if not kafka_source_available(spark):
        raise KafkaInputError("reading from Kafka needs Spark's Kafka source on the classpath: spark-submit "
                              "--packages org.apache.spark:spark-sql-kafka-0-10_2.13:" + spark.version
                              + " (locally: bash scripts/jars.sh spark, then spark.jars)")
    earliest, latest = _partition_ends(spark, bootstrap, topic, opts, timeout_ms)
    unknown = sorted(set(starting_offsets or {}) - set(latest))
    if unknown:
        raise KafkaInputError(f"kafka {bootstrap}: starting offsets name partition(s) {unknown} that {topic} "
                              f"does not have (it has {len(latest)})")
    if ending_offsets == "latest":
        end = dict(latest)
    else:
        missing = sorted(set(latest) - set(ending_offsets))
        if missing:
            raise KafkaInputError(f"kafka {bootstrap}: ending offsets lack partition(s) {missing} of {topic}")
        end = {int(p): int(o) for p, o in ending_offsets.items() if p in latest}
    start: dict[int, int] = {}
    gone: dict[int, tuple[int, int]] = {}
    for p in sorted(latest):
        s = int((starting_offsets or {}).get(p, earliest[p]))
        if s > latest[p]:
            raise KafkaInputError(f"kafka {bootstrap}: starting offset {s} of {topic}-{p} is past the partition's "
                                  f"end offset {latest[p]} (was the topic recreated?)")
        if s > end[p]:
            raise KafkaInputError(f"kafka {bootstrap}: starting offset {s} of {topic}-{p} is past its ending "
                                  f"offset {end[p]}")
        if s < earliest[p] and starting_offsets and p in starting_offsets:
            gone[p] = (s, earliest[p])
        start[p] = max(s, earliest[p])
    # Spark's Admin-based offset reader (KafkaOffsetReaderAdmin) drops internal topics (ConsumerStrategy
    # #retrieveAllPartitions filters TopicDescription#isInternal), so __consumer_offsets reads as no
    # partitions at all; the consumer-based reader assigns the partitions as given. The setting is read
    # when the scan is planned, so it stays on in this session.
    spark.conf.set("spark.sql.streaming.kafka.useDeprecatedOffsetFetching", "true")
    reader = (spark.read.format("kafka")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("assign", json.dumps({topic: sorted(start)}))
              .option("startingOffsets", json.dumps({topic: {str(p): o for p, o in start.items()}}))
              .option("endingOffsets", json.dumps({topic: {str(p): o for p, o in end.items()}}))
              .option("failOnDataLoss", "false"))
    for k, v in opts.items():
        reader = reader.option(k if k in _SOURCE_OPTIONS else f"kafka.{k}", v)
    df = reader.load().select(
        F.col("key"), F.col("value"), F.col("topic"), F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("long").alias("offset"), F.col("timestamp"))
    return KafkaRead(df, start, end, redact_options(opts), gone)


def offsets_json(offsets: Mapping[int, int]) -> str:
    """{partition: offset} as the JSON text stored in `runs` (keys as strings, sorted)."""
    return json.dumps({str(p): int(o) for p, o in sorted(offsets.items())})


def parse_offsets_json(text: str, *, what: str = "offsets") -> dict[int, int]:
    """The inverse of `offsets_json`; KafkaInputError naming the bad entry."""
    try:
        raw: Any = json.loads(text)
        return {int(p): int(o) for p, o in raw.items()}
    except (ValueError, AttributeError, TypeError) as exc:
        raise KafkaInputError(f"{what} {text!r}: expected a JSON object {{\"partition\": offset}} ({exc})") from None
