"""Shared pytest wiring: the one session-scoped SparkSession, the oracle tier switch, and the broker tier.

The broker tier (`tests/kafka/`: a real Kafka broker, real consumers, Spark's Kafka source and Delta
Spark) runs only with `--kafka`, in a pytest process of its own (`bash scripts/test.sh` starts it
after the main suite): its SparkSession carries the Maven jars (`scripts/jars.sh spark`) from the
start, and the main suite's session must not (with Delta Spark on the classpath the `auto` writer
would turn native)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings as _hypothesis_settings

# The property tests draw a fixed sequence of examples (the same on every machine and every run, so
# CI is not red by chance); HYPOTHESIS_PROFILE=random draws new ones, to look for new failures.
_hypothesis_settings.register_profile("fixed", derandomize=True, print_blob=True)
_hypothesis_settings.register_profile("random", print_blob=True)
_hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fixed"))

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--oracle",
        action="store_true",
        default=False,
        help="run the full differential tier against the genuine Kafka client jar (default: a small sample)",
    )
    parser.addoption(
        "--kafka",
        action="store_true",
        default=False,
        help="run only the broker tier (tests/kafka): a real Kafka broker, Spark's Kafka source, Delta Spark",
    )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """tests/kafka with --kafka only, and with --kafka nothing else (two sessions, two classpaths)."""
    kafka_dir = ROOT / "tests" / "kafka"
    inside = collection_path == kafka_dir or kafka_dir in collection_path.parents
    if config.getoption("--kafka"):
        if inside or collection_path in (ROOT, ROOT / "tests") or collection_path in kafka_dir.parents:
            return None
        return True
    return True if inside else None


def spark_jars() -> list[str]:
    """The jars of Spark's Kafka source and Delta Spark, resolved from Maven Central into .cache/ by
    `scripts/jars.sh spark` (run once; later calls only print the directory)."""
    import subprocess

    proc = subprocess.run(["bash", str(ROOT / "scripts" / "jars.sh"), "spark"], capture_output=True, text=True,
                          check=False, env={**os.environ, "PYTHON_BIN": sys.executable})
    if proc.returncode != 0:
        raise RuntimeError(f"scripts/jars.sh spark failed:\n{proc.stderr[-3000:]}")
    lib = Path(proc.stdout.strip().splitlines()[-1])
    return sorted(str(j) for j in lib.glob("*.jar"))


@pytest.fixture(scope="session")
def oracle_cases(request: pytest.FixtureRequest) -> int:
    """How many random cases each oracle test draws: a small sample by default, many with --oracle."""
    if request.config.getoption("--oracle") or os.environ.get("ORACLE") == "1":
        return int(os.environ.get("ORACLE_CASES", "400"))
    return int(os.environ.get("ORACLE_SAMPLE", "25"))


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"shared/ not found beside the project ({SHARED})")
    return SHARED


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest):
    """The one SparkSession of the suite: local[2], 2 shuffle partitions, UTC, UI off, never stopped by a test.
    With --kafka (the broker tier's own process) it also has Spark's Kafka source and Delta Spark."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from coordinator_audit.jobs.spark_session import LOCAL_JIT_OPTIONS

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("coordinator-audit-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "3g")  # one JVM for the whole suite: room for its cached tables
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.warehouse.dir", str(warehouse))
        # the JIT thresholds the job gives a local JVM (coordinator_audit.jobs.spark_session.LOCAL_JIT_OPTIONS)
        .config("spark.driver.extraJavaOptions", f"{LOCAL_JIT_OPTIONS} -Dderby.system.home={warehouse}")
    )
    if request.config.getoption("--kafka"):
        builder = (builder.config("spark.jars", ",".join(spark_jars()))
                   .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
                   .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
                   .config("spark.databricks.delta.snapshotPartitions", "2")  # Delta's default 50 is for clusters
                   .config("spark.ui.showConsoleProgress", "false")
                   .config("spark.driver.host", "127.0.0.1")  # loopback only, like the broker
                   .config("spark.driver.bindAddress", "127.0.0.1"))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
