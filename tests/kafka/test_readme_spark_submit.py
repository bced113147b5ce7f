"""The README's spark-submit line for native Delta, run as written (its --packages resolved by
spark-submit itself, Ivy cache under .cache/ivy) on the real-broker sample, in local mode."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kafka.truth import tables_at

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]


def readme_submit_line() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("On a cluster, with native Delta", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return shlex.split(block.replace("\\\n", " "))


def test_the_readme_packages_are_the_ones_the_tier_resolves() -> None:
    args = readme_submit_line()
    packages = args[args.index("--packages") + 1].split(",")
    lib = next((ROOT / ".cache" / "jars").glob("spark-*-delta-*/lib"))
    for coordinate in packages:
        _group, artifact, version = coordinate.split(":")
        assert (lib / f"{artifact}-{version}.jar").exists(), f"README's {coordinate} is not what scripts/jars.sh resolved"


def test_the_readme_spark_submit_line_runs_the_job_with_native_delta(spark, tmp_path: Path) -> None:
    args = readme_submit_line()
    assert args[0] == "spark-submit"
    job = args.index("coordinator_audit/jobs/audit.py")
    zip_path = tmp_path / "coordinator_audit.zip"
    staging = tmp_path / "pkg"
    shutil.copytree(ROOT / "coordinator_audit", staging / "coordinator_audit",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.make_archive(str(zip_path.with_suffix("")), "zip", staging)
    head = [str(zip_path) if a.endswith("coordinator_audit.zip") else a for a in args[1:job]]
    tail = dict(zip(args[job + 1::2], args[job + 2::2], strict=True))  # the job's --flag value pairs
    out = tmp_path / "audit"
    tail.update({"--input": str(ROOT / "data" / "samples" / "real_broker_3_9_0.parquet"), "--format": "parquet",
                 "--output": str(out)})
    for bound in ("--since", "--until"):  # the sample is from another day
        tail.pop(bound, None)
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]",
           "--conf", f"spark.jars.ivy={ROOT / '.cache' / 'ivy'}", "--conf", "spark.ui.enabled=false",
           "--conf", "spark.databricks.delta.snapshotPartitions=2", *head, "coordinator_audit/jobs/audit.py",
           *[x for pair in tail.items() for x in pair], "--no-summary"]
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert re.search(r"writer native", proc.stdout), proc.stdout
    tables = tables_at(spark, {name: str(out / name) for name in ("generations", "runs")})
    assert tables["runs"][0]["writer"] == "native" and len(tables["generations"]) > 10
