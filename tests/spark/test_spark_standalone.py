"""The job on a Spark standalone cluster, as a user outgrowing one machine runs it: a master and two
workers from pyspark's own distribution on loopback (`tests.support.standalone`), executors in JVMs
of their own with Python workers of their own, each run a driver of its own: the README's cluster
command, `scripts/spark-submit.sh --master spark://... --py-files coordinator_audit.zip coordinator_audit/jobs/audit.py`.
Every table it writes, read as stored, equals what the same command line writes in local mode (run
in the suite's local[2] session): one audit of the real broker's log, and the same log as a nightly
pair (two windows, the state carried from the first run to the second through the output).

The cluster's drivers and executors run a Python that has the project's dependencies but not the
project (a virtualenv seeing the project venv's site-packages without its editable install, as in
`tests/dist`): the code that runs there is the zip's, shipped by `--py-files`, and nothing else.
Their JVMs get the JIT thresholds the job gives a JVM it starts for one run
(`coordinator_audit.jobs.spark_session.LOCAL_JIT_OPTIONS`): less CPU compiling, the same results.

The cluster tests are `slow`: three applications, each starting a driver and two executors whose
Python workers compile the single pass's kernel afresh (numba keeps no cache for code in a zip),
take minutes on two shared cores."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from coordinator_audit.jobs.spark_session import LOCAL_JIT_OPTIONS, code_zip
from tests.support.outputs import differences
from tests.support.standalone import LOOPBACK, StandaloneCluster, standalone_cluster
from tests.support.standalone import python_without_project as make_python_without_project

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT.parent / "shared" / "real-broker-sample" / "consumer_offsets.parquet"
CUT = "2026-11-21T23:43:40Z"
"""The nightly pair's cut: grp-s02's rebalance around consumer c3's crash spans it."""


# ------------------------------------------------------------------------------------------------
# the cluster, the archive, the runs


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A master and two workers (1 core, 1 GiB each) on loopback for this module's runs."""
    if not SAMPLE.is_file():
        pytest.skip(f"the real broker's log is not at {SAMPLE}")
    with standalone_cluster(tmp_path_factory.mktemp("standalone")) as running:
        yield running


@pytest.fixture(scope="module")
def py_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The job's packages zipped for `--py-files` (`coordinator_audit.jobs.spark_session.code_zip`), without pip."""
    return code_zip(tmp_path_factory.mktemp("dist") / "coordinator_audit.zip")


@pytest.fixture(scope="module")
def python_without_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A python with the project's dependencies but not the project (`tests.support.standalone.python_without_project`)."""
    return make_python_without_project(tmp_path_factory.mktemp("venv"))


def _cli_args(output: Path, run_id: str, window: Sequence[str]) -> list[str]:
    return ["--input", str(SAMPLE), "--output", str(output), "--run-id", run_id, "--no-summary", *window]


def _submit(master: str, args: Sequence[str], *, py_files: Path, python: Path) -> None:
    """The README's cluster command (`scripts/spark-submit.sh --py-files coordinator_audit.zip
    coordinator_audit/jobs/audit.py ARGS`): driver and executors on `python`, loopback only. Its
    output holds the job's lines: no console progress bar, no Java stack trace."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "SPARK_HOME", "VIRTUAL_ENV") and not k.startswith("PYSPARK_")}
    env.update(PYSPARK_PYTHON=str(python), PYSPARK_DRIVER_PYTHON=str(python), SPARK_LOCAL_IP=LOOPBACK)
    cmd = ["bash", "scripts/spark-submit.sh", "--master", master,
           "--conf", f"spark.driver.host={LOOPBACK}", "--conf", f"spark.driver.bindAddress={LOOPBACK}",
           "--conf", "spark.ui.enabled=false", "--driver-java-options", LOCAL_JIT_OPTIONS,
           "--conf", f"spark.executor.extraJavaOptions={LOCAL_JIT_OPTIONS}",
           "--py-files", str(py_files), "coordinator_audit/jobs/audit.py", *args]
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    text = result.stdout + result.stderr
    assert result.returncode == 0, f"{' '.join(cmd)}\n{text[-4000:]}"
    assert "[Stage " not in text and "Exception" not in text and "\tat " not in text, text[-4000:]


def _run_local(spark: SparkSession, args: Sequence[str]) -> None:
    """The same command line in local mode, in the suite's local[2] session (`--master local[2]`):
    parsed by the job's own parser into the job's configuration, run by `coordinator_audit.jobs.audit.run_audit`."""
    from coordinator_audit.jobs.audit import config_from_args, parse_args, run_audit

    parsed = parse_args([*args, "--master", "local[2]"])
    run_audit(spark, config_from_args(parsed), run_id=parsed.run_id)


RUNS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "one run": (("all", ()),),
    "nightly pair": (("night-1", ("--until", CUT)), ("night-2", ("--since", CUT))),
}


@pytest.fixture(scope="module")
def outputs(spark: SparkSession, cluster: StandaloneCluster, py_files: Path, python_without_project: Path,
            tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """Each of RUNS on the cluster and in local mode: {(runs, "cluster" | "local"): output base path}."""
    base = tmp_path_factory.mktemp("outputs")
    out: dict[tuple[str, str], Path] = {}
    for name, runs in RUNS.items():
        for where in ("cluster", "local"):
            output = out[name, where] = base / f"{name.replace(' ', '-')}-{where}"
            for run_id, window in runs:
                args = _cli_args(output, run_id, window)
                if where == "cluster":
                    _submit(cluster.master_url, args, py_files=py_files, python=python_without_project)
                else:
                    _run_local(spark, args)
    return out


@pytest.mark.slow
def test_the_runs_used_both_workers_executors(cluster: StandaloneCluster, outputs: dict[tuple[str, str], Path]) -> None:
    """Every cluster run is an application of its own whose two executors, one on each worker, ran tasks."""
    apps = cluster.state()["completedapps"]
    cluster_runs = sum(len(runs) for runs in RUNS.values())
    assert len(apps) == cluster_runs and {a["name"] for a in apps} == {"coordinator-audit"}, apps
    for worker_dir in cluster.worker_dirs:
        executors = sorted(worker_dir.glob("app-*/*/stderr"))
        assert len(executors) == cluster_runs, (worker_dir, executors)
        for stderr in executors:
            assert "Finished task" in stderr.read_text(errors="replace"), stderr


@pytest.mark.slow
@pytest.mark.parametrize("name", list(RUNS))
def test_cluster_tables_equal_local_mode_tables(name: str, outputs: dict[tuple[str, str], Path]) -> None:
    cluster_out, local_out = outputs[name, "cluster"], outputs[name, "local"]
    runs = [r for r in DeltaTable(str(cluster_out / "runs")).to_pyarrow_table().to_pylist()]
    assert sorted(r["run_id"] for r in runs) == sorted(run_id for run_id, _ in RUNS[name])
    assert DeltaTable(str(cluster_out / "generations")).to_pyarrow_table().num_rows > 0
    assert differences(cluster_out, local_out) == []
