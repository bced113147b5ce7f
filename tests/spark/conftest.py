"""Fixtures shared by the Spark tier's modules: one audit of a few samples (derived tables included)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "data" / "samples"
DERIVED_SAMPLES = ("real_broker_3_9_0", "sim_bug-duplicate-assignment", "sim_eager-rolling-bounce")
"""The real broker's four groups, a duplicate assignment (a violation to mark) and an eager bounce."""


@pytest.fixture(scope="session")
def derived_input(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("derived-input")
    for name in DERIVED_SAMPLES:
        shutil.copy(SAMPLES / f"{name}.parquet", d / f"{name}.parquet")
    return d


@pytest.fixture(scope="session")
def derived_run(spark, derived_input: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The audit of DERIVED_SAMPLES in one run (window `all`): the output base path."""
    from coordinator_audit.jobs.audit import run_audit
    from coordinator_audit.jobs.config import load_config

    out = tmp_path_factory.mktemp("derived-run")
    run_audit(spark, load_config(None, {"input.path": str(derived_input), "input.format": "parquet",
                                        "output.path": str(out), "job.shards": 2}))
    return out


@pytest.fixture(scope="session")
def chromium() -> str:
    """The headless Chromium for the report's browser tests (`tools.report_screenshots.chromium`:
    scripts/browser.sh finds it or installs Debian's package). Skipped with its reason only outside CI
    when that cannot be done (no apt, not root); CI fails instead."""
    from tools.report_screenshots import chromium as find_chromium

    try:
        return find_chromium()
    except RuntimeError as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc))
        pytest.skip(str(exc))
