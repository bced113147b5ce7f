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
* The offsets read are fixed before Spark reads the records, so that every action of the run sees
  the same records. `starting_offsets` is the next offset to read per partition (what a previous
  run recorded as its end); a partition missing from it is read from its earliest offset.
  `ending_offsets` is "latest" (the end offsets at the start of the run) or an explicit
  {partition: offset}. `KafkaRead.end_offsets` is what the run read up to (exclusive).
  - A classic session asks the cluster, in the driver's JVM, for the topic's partitions and their
    earliest and end offsets (a short-lived `KafkaConsumer`: `partitionsFor`, `beginningOffsets`,
    `endOffsets`, read_committed), and the source reads exactly [start, end) of each partition.
    A starting offset below a partition's earliest offset names records that retention or
    deletion removed (`KafkaRead.gone`).
  - A Spark Connect session has no JVM in this process: Spark itself tells the offsets, with the
    read's own options. A probe that reads nothing (`_probe`) meets the cluster first, bounded by
    `timeout_ms`; then one aggregate over the source (`read_committed`, from the starting offsets
    to "latest") gives each partition's first and last offset and record count; the read then
    ends each partition just after its last record (a safe resume point: what follows is a
    transaction marker, an aborted or still open transaction's records, or nothing), and a
    partition with no record in the range is not read (the next run reads it from the same
    start). The partitions are 0..N-1, N = `partitions` (the cluster's offsets.topic.num.partitions):
    Spark's Kafka source lists an internal topic's partitions only by subscribing, which joins a
    consumer group, and the group coordinator records that group in `__consumer_offsets`, the log
    being audited. What such a session cannot tell is stated in `KafkaRead.limits` (the job logs
    it): the log's earliest offsets are not visible, so offsets missing before a partition's first
    record (`KafkaRead.unseen`) may have been compacted away, aborted or removed by retention; and
    a partition count below the cluster's leaves the partitions above it unread.
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

A bad bootstrap address, an unknown topic, a starting offset past a partition's end, or Spark's
Kafka source missing from the session's classpath raises `KafkaInputError` naming it. On Spark
Connect the source's presence is the server's classpath, which a client cannot list: the probe
tells it (Spark's error condition for a missing source, `SOURCE_MISSING`); a starting offset past
a partition's end fails the aggregate with Spark's own message naming the partition and both
offsets.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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
    removed records a starting offset asked for: they cannot be audited (the job logs them).
    Classic session only: a Spark Connect session cannot see the earliest offsets (`unseen`)."""
    records: int
    """At most how many records `df` holds: on a classic session the offsets [start, end) of every
    partition (fewer where compaction removed some); on Spark Connect the records counted."""
    unseen: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Spark Connect: {partition: (asked start, first offset read)} where the first record read is
    past the asked start. The offsets between were compacted away, aborted, or removed by retention:
    which, the session cannot tell (`limits`). The run counts them as never read either way."""
    limits: str | None = None
    """What the read could not tell (Spark Connect; None on a classic session), for the run's log."""


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


KAFKA_SCHEMA = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
"""The rows' schema (`read_kafka`), also of a read with no records to read."""
SOURCE_MISSING = frozenset({"_LEGACY_ERROR_TEMP_1140", "DATA_SOURCE_NOT_FOUND"})
"""Spark's error conditions for a data source the session cannot find: Spark names "kafka"'s
absence with the first (DataSource#lookupDataSource, QueryCompilationErrors
#failedToFindKafkaDataSourceError), any other format's with the second."""
EARLIEST = -2
"""Spark's Kafka source's per-partition offset for "the partition's earliest offset"."""


def read_kafka(spark: SparkSession, bootstrap: str, *, options: Mapping[str, str] | None = None,
               topic: str = DEFAULT_TOPIC, starting_offsets: Mapping[int, int] | None = None,
               ending_offsets: Literal["latest"] | Mapping[int, int] = "latest",
               partitions: int | None = None, timeout_ms: int = 60_000) -> KafkaRead:
    """Reads [start, end) of every partition of `topic` in batch through Spark's Kafka source
    (module docstring); the rows have the Kafka-source schema. `partitions`: the topic's partition
    count, which a Spark Connect session needs; a classic session asks the cluster and checks it."""
    opts = dict(options or {})
    opts.setdefault("fetch.max.wait.ms", str(BATCH_FETCH_MAX_WAIT_MS))
    if not re.fullmatch(r"[^\s,]+:\d+(,[^\s,]+:\d+)*", bootstrap or ""):
        raise KafkaInputError(f"kafka bootstrap {bootstrap!r}: expected HOST:PORT[,HOST:PORT...]")
    starting = {int(p): int(o) for p, o in (starting_offsets or {}).items()}
    if has_jvm(spark):
        return _read_classic(spark, bootstrap, topic, opts, starting, ending_offsets, partitions, timeout_ms)
    return _read_connect(spark, bootstrap, topic, opts, starting, ending_offsets, partitions, timeout_ms)


def _read_classic(spark: SparkSession, bootstrap: str, topic: str, opts: dict[str, str], starting: dict[int, int],
                  ending_offsets: Literal["latest"] | Mapping[int, int], partitions: int | None,
                  timeout_ms: int) -> KafkaRead:
    """`read_kafka` on a classic session: the offsets come from the cluster (`_partition_ends`)."""
    if not kafka_source_available(spark):
        raise KafkaInputError("reading from Kafka needs Spark's Kafka source on the classpath: spark-submit "
                              "--packages org.apache.spark:spark-sql-kafka-0-10_2.13:" + spark.version
                              + " (locally: bash scripts/jars.sh spark, then spark.jars)")
    earliest, latest = _partition_ends(spark, bootstrap, topic, opts, timeout_ms)
    if partitions is not None and partitions != len(latest):
        raise KafkaInputError(f"kafka {bootstrap}: {topic} has {len(latest)} partitions, not {partitions} "
                              f"(--kafka-partitions, input.kafka_partitions)")
    _check_partitions(bootstrap, topic, starting, ending_offsets, set(latest))
    end = dict(latest) if ending_offsets == "latest" else {int(p): int(o) for p, o in ending_offsets.items()
                                                            if p in latest}
    start: dict[int, int] = {}
    gone: dict[int, tuple[int, int]] = {}
    for p in sorted(latest):
        s = starting.get(p, earliest[p])
        if s > latest[p]:
            raise KafkaInputError(f"kafka {bootstrap}: starting offset {s} of {topic}-{p} is past the partition's "
                                  f"end offset {latest[p]} (was the topic recreated?)")
        if s > end[p]:
            raise KafkaInputError(f"kafka {bootstrap}: starting offset {s} of {topic}-{p} is past its ending "
                                  f"offset {end[p]}")
        if s < earliest[p] and p in starting:
            gone[p] = (s, earliest[p])
        start[p] = max(s, earliest[p])
    df = _load(spark, bootstrap, topic, opts, start, end)
    return KafkaRead(df, start, end, redact_options(opts), gone,
                     sum(e - start[p] for p, e in end.items()))


def _read_connect(spark: SparkSession, bootstrap: str, topic: str, opts: dict[str, str], starting: dict[int, int],
                  ending_offsets: Literal["latest"] | Mapping[int, int], partitions: int | None,
                  timeout_ms: int) -> KafkaRead:
    """`read_kafka` on a Spark Connect session: the offsets come from Spark (`_spans`), the
    partitions are 0..`partitions`-1 (module docstring)."""
    if partitions is None:
        raise KafkaInputError(
            f"kafka {bootstrap}: on a Spark Connect session give the partition count of {topic} (--kafka-partitions "
            f"N, input.kafka_partitions: the brokers' offsets.topic.num.partitions, 50 unless they set it): Spark's "
            f"Kafka source lists an internal topic's partitions only by joining a consumer group, which would write "
            f"into the log being audited")
    every = set(range(partitions))
    _check_partitions(bootstrap, topic, starting, ending_offsets, every)
    ending: Literal["latest"] | dict[int, int] = (
        "latest" if ending_offsets == "latest" else {int(p): int(o) for p, o in ending_offsets.items() if p in every})
    _probe(spark, bootstrap, topic, opts, sorted(every), timeout_ms)
    spans = _spans(spark, bootstrap, topic, opts, {p: starting.get(p, EARLIEST) for p in sorted(every)}, ending)
    start = {p: starting.get(p, first) for p, (first, _, _) in spans.items()}
    end = {p: last + 1 for p, (_, last, _) in spans.items()}
    unseen = {p: (starting[p], first) for p, (first, _, _) in spans.items() if p in starting and first > starting[p]}
    df = (_load(spark, bootstrap, topic, opts, {p: starting.get(p, EARLIEST) for p in sorted(spans)}, end) if spans
          else spark.createDataFrame([], KAFKA_SCHEMA))
    limits = (f"on Spark Connect the read takes partitions 0..{partitions - 1} of {topic} as given (--kafka-partitions "
              f"{partitions}; a count below the cluster's leaves the partitions above it unread) and cannot see the "
              f"log's earliest offsets: offsets missing before a partition's first record read are counted as never "
              f"read, but whether retention removed them cannot be told")
    return KafkaRead(df, start, end, redact_options(opts), {}, sum(n for _, _, n in spans.values()), unseen, limits)


def _check_partitions(bootstrap: str, topic: str, starting: Mapping[int, int],
                      ending_offsets: Literal["latest"] | Mapping[int, int], partitions: set[int]) -> None:
    """KafkaInputError for starting offsets naming a partition `topic` does not have, or explicit
    ending offsets lacking one it has."""
    unknown = sorted(set(starting) - partitions)
    if unknown:
        raise KafkaInputError(f"kafka {bootstrap}: starting offsets name partition(s) {unknown} that {topic} "
                              f"does not have (it has {len(partitions)})")
    if ending_offsets != "latest":
        missing = sorted(partitions - set(ending_offsets))
        if missing:
            raise KafkaInputError(f"kafka {bootstrap}: ending offsets lack partition(s) {missing} of {topic}")


PROBE_GRACE_S = 5.0
"""How long `_probe` waits for an interrupted query to end before it stops the session."""


def _probe(spark: SparkSession, bootstrap: str, topic: str, opts: Mapping[str, str], partitions: Sequence[int],
           timeout_ms: int) -> None:
    """Reads nothing from every partition (from offset 0 to offset 0), so that Spark's Kafka source
    does all it does before reading: finds the source on the server's classpath, and its consumer
    in the server's driver reaches the cluster with the options (`assign` asks for the partitions'
    committed offsets). KafkaInputError when any of it fails, or when it has not answered within
    `timeout_ms`.

    That consumer waits without bound for a cluster that does not answer (a KafkaConsumer#poll
    with no timeout, in KafkaOffsetReaderConsumer#fetchTopicPartitions), and once it waits, Spark
    cannot interrupt the query: the server ends an interrupted query when its thread returns, and
    the thread then waits to close that consumer. So when the time is up the probe interrupts its
    query (`SparkSession.interruptTag`: enough while the consumer has not started waiting), and
    when the query still has not ended `PROBE_GRACE_S` later, it stops the session, which ends the
    wait here (the server's thread stays blocked: Spark's limitation); the error says so.

    This is how a Spark Connect client learns that the server lacks the source: by its error
    condition (`SOURCE_MISSING`). A client cannot list the server's classpath, and the server's
    settings (`spark.jars`, `spark.jars.packages`) do not tell either: a platform may ship the
    source in its own jars."""
    nothing = {p: 0 for p in partitions}
    tag = f"coordinator-audit-kafka-{uuid.uuid4().hex}"
    done, expired, stopped = threading.Event(), threading.Event(), threading.Event()

    def watch() -> None:
        if done.wait(timeout_ms / 1000):
            return
        expired.set()
        spark.interruptTag(tag)
        if not done.wait(PROBE_GRACE_S):
            stopped.set()
            spark.stop()

    spark.addTag(tag)
    watcher = threading.Thread(target=watch, name="coordinator-audit-kafka-probe", daemon=True)
    watcher.start()
    try:
        _collect(spark, _load(spark, bootstrap, topic, opts, nothing, nothing).agg(F.count(F.lit(1))), bootstrap,
                 topic)
    except KafkaInputError:
        if expired.is_set():
            raise KafkaInputError(
                f"kafka {bootstrap}: no answer within {timeout_ms} ms to Spark's Kafka source asking for {topic}; "
                f"check the address and the security options (--kafka-option)"
                + ("; the Spark session was stopped, as Spark cannot interrupt its Kafka source while it waits for "
                   "the cluster" if stopped.is_set() else "")) from None
        raise
    finally:
        done.set()
        watcher.join()
        spark.removeTag(tag)


def _spans(spark: SparkSession, bootstrap: str, topic: str, opts: Mapping[str, str], starting: Mapping[int, int],
           ending: Literal["latest"] | Mapping[int, int]) -> dict[int, tuple[int, int, int]]:
    """{partition: (first offset, last offset, records)} of the records Spark's Kafka source reads
    from `starting` to `ending`, read_committed (the bound a classic session's end offsets have:
    the last stable offset), in one aggregate; a partition without records has no entry."""
    counting = {**opts, "isolation.level": "read_committed"}
    df = (_load(spark, bootstrap, topic, counting, starting, ending).groupBy("partition")
          .agg(F.min("offset").alias("first"), F.max("offset").alias("last"), F.count(F.lit(1)).alias("n")))
    rows = _collect(spark, df, bootstrap, topic)
    return {int(r["partition"]): (int(r["first"]), int(r["last"]), int(r["n"])) for r in rows}


def _collect(spark: SparkSession, df: DataFrame, bootstrap: str, topic: str) -> list[Any]:
    """`df.collect()` of a query over Spark's Kafka source; KafkaInputError naming what failed."""
    try:
        return df.collect()
    except Exception as exc:
        if _condition(exc) in SOURCE_MISSING:
            raise KafkaInputError(
                f"reading from Kafka needs Spark's Kafka source on the Spark Connect server's classpath: start the "
                f"server with --packages org.apache.spark:spark-sql-kafka-0-10_2.13:{spark.version} (or its jars "
                f"in --jars)") from None
        raise KafkaInputError(f"kafka {bootstrap}: Spark's Kafka source cannot read {topic} "
                              f"({_first_line(exc)}); check the address, the security options (--kafka-option) "
                              f"and the partition count (--kafka-partitions)") from None


def _condition(exc: BaseException) -> str | None:
    """The error condition (class) of a Spark error, None for any other exception."""
    get = getattr(exc, "getCondition", None)
    return str(get()) if callable(get) and get() else None


def _load(spark: SparkSession, bootstrap: str, topic: str, opts: Mapping[str, str], starting: Mapping[int, int],
          ending: Literal["latest"] | Mapping[int, int]) -> DataFrame:
    """The Kafka-source rows of the partitions of `starting` (assigned), from `starting` (an offset,
    or `EARLIEST`) to `ending` ("latest", or an offset per partition)."""
    # Spark's Admin-based offset reader (KafkaOffsetReaderAdmin) drops internal topics (ConsumerStrategy
    # #retrieveAllPartitions filters TopicDescription#isInternal), so __consumer_offsets reads as no
    # partitions at all; the consumer-based reader assigns the partitions as given. The setting is read
    # when the scan is planned, so it stays on in this session.
    spark.conf.set("spark.sql.streaming.kafka.useDeprecatedOffsetFetching", "true")
    reader = (spark.read.format("kafka")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("assign", json.dumps({topic: sorted(starting)}))
              .option("startingOffsets", json.dumps({topic: {str(p): o for p, o in sorted(starting.items())}}))
              .option("endingOffsets", ending if isinstance(ending, str) else
                      json.dumps({topic: {str(p): o for p, o in sorted(ending.items())}}))
              .option("failOnDataLoss", "false"))
    for k, v in opts.items():
        reader = reader.option(k if k in _SOURCE_OPTIONS else f"kafka.{k}", v)
    return reader.load().select(
        F.col("key"), F.col("value"), F.col("topic"), F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("long").alias("offset"), F.col("timestamp"))


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
