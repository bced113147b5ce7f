"""Shared pytest wiring: the one session-scoped SparkSession, and the oracle tier switch."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--oracle",
        action="store_true",
        default=False,
        help="run the full differential tier against the genuine Kafka client jar (default: a small sample)",
    )


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
def spark(tmp_path_factory: pytest.TempPathFactory):
    """The one SparkSession of the suite: local[2], 2 shuffle partitions, UTC, UI off, never stopped by a test."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("coordinator-audit-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={warehouse}")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
