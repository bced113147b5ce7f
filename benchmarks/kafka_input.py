"""The benchmark's Kafka input (`kafka_input`): the benchmark's records in a real broker's
`__consumer_offsets`, read by the job through Spark's Kafka source, as `--kafka-bootstrap` reads a
cluster.

* `KafkaBroker`: a single-node Kafka broker (`scripts/kafka.sh`); the benchmark starts a Kafka 4
  one per input, with as many `__consumer_offsets` partitions as the input has. It runs under `timeout`, so it stops by itself
  even if the benchmark dies.
* `kafka_source_jars`: the Kafka source's jars (`scripts/jars.sh spark`: Maven Central, cached under
  `.cache/jars`) without Delta Spark's, so that the audit writes with the embedded writer, as in
  the other measurements.
* `load_records`: the input's records appended to `__consumer_offsets` in their log order, through
  Spark's Kafka sink, one task per input file (each file holds whole partitions). The broker
  accepts writes to an internal topic only from the client id `__admin_client`
  (`KafkaApis#handleProduceRequest`). Spark's sink writes no timestamps, so each record carries its
  own in a header that a producer interceptor (`java/TimestampHeaderInterceptor.java`, compiled
  once with the JDK's javac into `.cache/bench/java/`) turns back into the record's timestamp.
  Then checked: every partition's end offset equals its record count in the input, and the count,
  the summed timestamps and the summed key and value lengths read back equal the input's. So the
  log holds the input's records, offsets and timestamps. The broker's group coordinator ignores
  them: it replays a partition when it loads it, and it loaded these while they were empty.
* `measure_kafka_bare_scan`: the floor of this input, the bare scan's aggregate over the rows that
  `coordinator_audit.jobs.kafka_source.read_kafka` returns (Spark's Kafka source, in the JVM only); then, timed
  apart, `python_read`: the same rows' columns that the single pass reads handed to the Python
  workers as Arrow batches (`mapInArrow`) and counted there, nothing else done: what any pass in
  Python over this input pays, the job's included (its kernel runs in the workers).

The audit itself is `benchmarks.measures.measure_audit` with `kafka_bootstrap`.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from benchmarks.measures import bare_scan_totals
from coordinator_audit.jobs.kafka_source import read_kafka
from coordinator_audit.udfs.gc_batches import freeze_survivors
from coordinator_audit.udfs.json_lines import DEFAULT_TOPIC

__all__ = ["KafkaBroker", "KafkaInputUnavailable", "kafka_source_jars", "load_records", "measure_kafka_bare_scan"]

ROOT = Path(__file__).resolve().parents[1]
JAVA_SRC = Path(__file__).resolve().parent / "java" / "TimestampHeaderInterceptor.java"
INTERCEPTOR = "coordinatoraudit.bench.TimestampHeaderInterceptor"
TIMESTAMP_HEADER = "coordinator-audit-timestamp"
"""The header the interceptor reads a record's timestamp from (8 bytes, big-endian epoch ms)."""
ADMIN_CLIENT_ID = "__admin_client"
"""The only client id whose produce requests may write internal topics (`KafkaApis#handleProduceRequest`)."""
BROKER_MAJOR = 4
TOPIC_WAIT_SECONDS = 60.0


class KafkaInputUnavailable(RuntimeError):
    """The Kafka input cannot be set up here (no jars from Maven Central, no broker); the message says why."""


def _run(cmd: list[str], *, env: dict[str, str] | None = None, timeout: float) -> str:
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False, timeout=timeout,
                          env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise KafkaInputUnavailable(f"{' '.join(cmd[:3])} failed ({proc.returncode}): "
                                    f"{(proc.stderr or proc.stdout).strip()[-1500:]}")
    return proc.stdout


def kafka_source_jars() -> list[str]:
    """Spark's Kafka source and kafka-clients (with their runtime dependencies), resolved by
    `scripts/jars.sh spark`; Delta Spark's jars are left out (module docstring)."""
    lib = Path(_run(["bash", "scripts/jars.sh", "spark"], timeout=1800).strip().splitlines()[-1])
    jars = sorted(str(p) for p in lib.glob("*.jar") if not p.name.startswith("delta-"))
    if not any(Path(j).name.startswith("spark-sql-kafka") for j in jars):
        raise KafkaInputUnavailable(f"{lib} holds no spark-sql-kafka jar")
    return jars


def interceptor_jar(jars: list[str]) -> str:
    """`TimestampHeaderInterceptor` compiled against the kafka-clients of `jars`, as a jar under
    `.cache/bench/java/<source digest>/` (compiled once per source version)."""
    digest = hashlib.sha1(JAVA_SRC.read_bytes()).hexdigest()[:12]
    out = ROOT / ".cache" / "bench" / "java" / digest / "timestamp-interceptor.jar"
    if out.exists():
        return str(out)
    clients = [j for j in jars if Path(j).name.startswith("kafka-clients")]
    if not clients:
        raise KafkaInputUnavailable("no kafka-clients jar among the Kafka source's jars")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as classes:
        _run(["javac", "-nowarn", "-cp", clients[0], "-d", classes, str(JAVA_SRC)], timeout=300)
        _run(["jar", "cf", str(out.with_suffix(".tmp")), "-C", classes, "."], timeout=120)
    out.with_suffix(".tmp").replace(out)
    return str(out)


@dataclass
class KafkaBroker:
    """A single-node KRaft broker of `scripts/kafka.sh` under `directory`: Kafka `major` (4, 44: Kafka
    4.4, or 3), `partitions` `__consumer_offsets` partitions, a lifetime of `max_seconds` (None: the
    script's defaults) and `properties` added to its server.properties. `start` sets `bootstrap` and
    `version`. The broker tier's `tests/kafka/cluster.Broker` is this class with its test helpers."""

    directory: Path
    major: int = BROKER_MAJOR
    partitions: int | None = None
    max_seconds: int | None = None
    properties: dict[str, str] | None = None
    bootstrap: str = ""
    version: str = ""

    def start(self) -> KafkaBroker:
        env = {name: str(value) for name, value in (("KAFKA_OFFSETS_PARTITIONS", self.partitions),
                                                     ("KAFKA_MAX_SECONDS", self.max_seconds)) if value is not None}
        if self.properties:
            env["KAFKA_EXTRA_PROPERTIES"] = "\n".join(f"{k}={v}" for k, v in self.properties.items())
        out = _run(["bash", "scripts/kafka.sh", "start", str(self.directory), str(self.major)], env=env, timeout=900)
        info = dict(line.split("=", 1) for line in out.split() if "=" in line)
        self.bootstrap, self.version = info["bootstrap"], info["version"]
        return self

    def stop(self) -> None:
        subprocess.run(["bash", "scripts/kafka.sh", "stop", str(self.directory)], cwd=ROOT, capture_output=True,
                       check=False, timeout=60)


def input_partition_counts(path: str) -> dict[int, int]:
    """{partition: records} of a Parquet input (its partition column only)."""
    table = ds.dataset(path, format="parquet").to_table(columns=["partition"])
    counts = table.group_by("partition").aggregate([("partition", "count")])
    return dict(zip(counts["partition"].to_pylist(), counts["partition_count"].to_pylist(), strict=True))


def _create_offsets_topic(spark: SparkSession, bootstrap: str, partitions: int) -> None:
    """`__consumer_offsets` exists once a client asks for a group coordinator (the broker creates the
    topic then, with `offsets.topic.num.partitions`); an Admin call that needs one asks."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    props = jvm.java.util.Properties()
    props.setProperty("bootstrap.servers", bootstrap)
    admin = jvm.org.apache.kafka.clients.admin.Admin.create(props)
    try:
        admin.listConsumerGroupOffsets("coordinator-audit-benchmark").all().get()
        deadline = time.monotonic() + TOPIC_WAIT_SECONDS
        names = jvm.java.util.List.of(DEFAULT_TOPIC)
        while True:
            got = admin.describeTopics(names).allTopicNames().get().get(DEFAULT_TOPIC).partitions().size()
            if got == partitions:
                return
            if time.monotonic() > deadline:
                raise KafkaInputUnavailable(f"kafka {bootstrap}: {DEFAULT_TOPIC} has {got} partitions, not the "
                                            f"input's {partitions}, after {TOPIC_WAIT_SECONDS:.0f} s")
            time.sleep(0.2)
    finally:
        admin.close()


def _checksums(df: Any) -> dict[str, int]:
    row = df.agg(F.count(F.lit(1)).alias("records"), F.sum(F.unix_millis("timestamp").cast("decimal(38,0)")).alias("timestamp_ms_sum"),
                 F.sum(F.length("key") + F.coalesce(F.length("value"), F.lit(0))).alias("key_value_bytes")).first()
    return {k: int(row[k] or 0) for k in ("records", "timestamp_ms_sum", "key_value_bytes")}


def load_records(spark: SparkSession, path: str, bootstrap: str, partitions: int, interceptor: str, *,
                 append: bool = False) -> dict[str, Any]:
    """Appends the Parquet input at `path` (records of `__consumer_offsets` partitions 0 to
    `partitions` - 1) to the broker's `__consumer_offsets` and checks what it holds then (module
    docstring); `interceptor` is `interceptor_jar`'s jar. The topic must be empty unless `append`
    (then the check covers the records after the ones it held). Returns the records and the
    seconds the produce took."""
    counts = input_partition_counts(path)
    if set(counts) - set(range(partitions)):
        raise KafkaInputUnavailable(f"{path}: partitions {sorted(set(counts) - set(range(partitions)))[:5]} are "
                                    f"outside 0..{partitions - 1}")
    _create_offsets_topic(spark, bootstrap, partitions)
    before = read_kafka(spark, bootstrap).end_offsets
    if any(before.values()) and not append:
        raise KafkaInputUnavailable(f"kafka {bootstrap}: {DEFAULT_TOPIC} is not empty ({sum(before.values())} "
                                    f"records): the benchmark loads a fresh broker only")
    expected = {p: before.get(p, 0) + counts.get(p, 0) for p in range(partitions)}
    # one task per input file, so every partition's records are sent by one producer, in file order
    previous = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(1 << 40))
    spark.sparkContext._jsc.sc().addJar(interceptor)  # type: ignore[union-attr]  # the tasks load it from there
    source = spark.read.parquet(path)
    stamp = F.unhex(F.lpad(F.hex(F.unix_millis("timestamp")), 16, "0"))
    t0 = time.perf_counter()
    try:
        (source.select("key", "value", "partition",
                       F.array(F.struct(F.lit(TIMESTAMP_HEADER).alias("key"), stamp.alias("value"))).alias("headers"))
         .write.format("kafka")
         .option("kafka.bootstrap.servers", bootstrap).option("topic", DEFAULT_TOPIC)
         .option("kafka.client.id", ADMIN_CLIENT_ID).option("kafka.interceptor.classes", INTERCEPTOR)
         .option("kafka.linger.ms", "20").option("kafka.batch.size", str(1 << 20))
         .save())
    finally:
        spark.conf.set("spark.sql.files.maxPartitionBytes", previous)
    seconds = time.perf_counter() - t0
    read = read_kafka(spark, bootstrap, starting_offsets=before)
    wrong = {p: (read.end_offsets.get(p), n) for p, n in expected.items() if read.end_offsets.get(p) != n}
    if wrong:
        raise KafkaInputUnavailable(f"kafka {bootstrap}: end offsets differ from the input's record counts "
                                    f"(partition: (end offset, records)): {dict(list(wrong.items())[:5])}")
    held, wanted = _checksums(read.df), _checksums(source)
    if held != wanted:
        raise KafkaInputUnavailable(f"kafka {bootstrap}: the loaded log differs from the input: {held} != {wanted} "
                                    f"(records, summed timestamps, key and value bytes)")
    return {"seconds": seconds, "records": sum(counts.values()), "partitions": len(expected)}


def measure_kafka_bare_scan(spark: SparkSession, bootstrap: str) -> dict[str, Any]:
    """`benchmarks.measures.bare_scan_totals` of everything the broker holds, read through
    `read_kafka` (the job's reader: its offsets asked first, then Spark's Kafka source), timed."""
    t0 = time.perf_counter()
    totals = bare_scan_totals(read_kafka(spark, bootstrap).df)
    t1 = time.perf_counter()
    rows = (read_kafka(spark, bootstrap).df.select("key", "value", "partition", "offset", "timestamp")
            .mapInArrow(_count_batches, "rows long").agg(F.sum("rows").alias("rows")).first())
    t2 = time.perf_counter()
    assert rows is not None
    return {"seconds": t1 - t0, **totals, "format": "kafka",
            "python_read": {"seconds": t2 - t1, "records": int(rows["rows"] or 0)}}


def _count_batches(batches: Any) -> Any:
    """mapInArrow body of the Kafka input's `python_read`: the batches' rows counted, nothing else
    (the worker's long-lived objects frozen, as in the job's tasks: `coordinator_audit.udfs.gc_batches.freeze_survivors`)."""
    import pyarrow as pa

    freeze_survivors()
    n = 0
    for b in batches:
        n += b.num_rows
    yield pa.RecordBatch.from_pydict({"rows": [n]})
