"""The job on a Spark Connect session, as a Databricks Connect or Spark Connect user runs it: a
Spark Connect server from pyspark's own distribution on loopback (`tests.support.connect`, a
`local[2]` master) and the job's command line as its client, `coordinator-audit run --remote
sc://127.0.0.1:<port> ...`. Every table it writes, read as stored, equals what the same command
line writes in local mode (in the suite's local[2] session): one audit of the real broker's log, and
the same log as a nightly pair (two windows, the state carried through the output).

The server's Python workers run a Python that has the project's dependencies but not the project
(`tests.support.standalone.python_without_project`): the code that runs there is what the client
shipped to its session (`coordinator_audit.jobs.spark_session.ship_code`), and nothing else. The server has Delta
Spark's and the Kafka source's jars on its classpath but is not configured for Delta: the `auto`
writer is the embedded one.

A Spark Connect client and a classic session do not share one Python process (pyspark's functions
follow the process's mode), so the client runs in a process of its own. The tests are `slow`: the
server's workers compile the single pass's kernel afresh (numba keeps no cache for code in a zip)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from tests.conftest import spark_jars
from tests.support.connect import connect_server
from tests.support.outputs import differences
from tests.support.standalone import python_without_project

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT.parent / "shared" / "real-broker-sample" / "consumer_offsets.parquet"
CUT = "2026-11-21T23:43:40Z"
"""The nightly pair's cut: grp-s02's rebalance around consumer c3's crash spans it."""

RUNS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "one run": (("all", ()),),
    "nightly pair": (("night-1", ("--until", CUT)), ("night-2", ("--since", CUT))),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark Connect server on loopback for this module's runs: its `sc://` address."""
    if not SAMPLE.is_file():
        pytest.skip(f"the real broker's log is not at {SAMPLE}")
    python = python_without_project(tmp_path_factory.mktemp("venv"))
    with connect_server(tmp_path_factory.mktemp("connect"), python=python, jars=spark_jars()) as address:
        yield address


def _cli_args(output: Path, run_id: str, window: Sequence[str]) -> list[str]:
    return ["--input", str(SAMPLE), "--output", str(output), "--run-id", run_id, "--no-summary", *window]


def _run_connect(address: str, args: Sequence[str]) -> str:
    """`coordinator-audit run --remote <address> ARGS` from the checkout: its stderr (the job's lines)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    cmd = [sys.executable, "-m", "coordinator_audit", "run", "--remote", address, *args]
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert result.returncode == 0, f"{' '.join(cmd)}\n{(result.stdout + result.stderr)[-4000:]}"
    return result.stderr


def _run_local(spark: SparkSession, args: Sequence[str]) -> None:
    """The same command line in local mode, in the suite's local[2] session (`--master local[2]`)."""
    from coordinator_audit.jobs.audit import config_from_args, parse_args, run_audit

    parsed = parse_args([*args, "--master", "local[2]"])
    run_audit(spark, config_from_args(parsed), run_id=parsed.run_id)


@pytest.fixture(scope="module")
def outputs(spark: SparkSession, server: str, tmp_path_factory: pytest.TempPathFactory
            ) -> dict[tuple[str, str], tuple[Path, str]]:
    """Each of RUNS through Spark Connect and in local mode: {(runs, "connect" | "local"): (output
    base path, the Connect runs' stderr)}."""
    base = tmp_path_factory.mktemp("outputs")
    out: dict[tuple[str, str], tuple[Path, str]] = {}
    for name, runs in RUNS.items():
        for where in ("connect", "local"):
            output = base / f"{name.replace(' ', '-')}-{where}"
            logs = []
            for run_id, window in runs:
                args = _cli_args(output, run_id, window)
                if where == "connect":
                    logs.append(_run_connect(server, args))
                else:
                    _run_local(spark, args)
            out[name, where] = (output, "\n".join(logs))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", list(RUNS))
def test_connect_tables_equal_local_mode_tables(name: str, outputs: dict[tuple[str, str], tuple[Path, str]]) -> None:
    (connect_out, _), (local_out, _) = outputs[name, "connect"], outputs[name, "local"]
    runs = DeltaTable(str(connect_out / "runs")).to_pyarrow_table().to_pylist()
    assert sorted(r["run_id"] for r in runs) == sorted(run_id for run_id, _ in RUNS[name])
    assert DeltaTable(str(connect_out / "generations")).to_pyarrow_table().num_rows > 0
    assert differences(connect_out, local_out) == []  # (`runs.writer` included: embedded on both)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(RUNS))
def test_connect_runs_take_the_spark_routes(name: str, outputs: dict[tuple[str, str], tuple[Path, str]]) -> None:
    """On Spark Connect, Spark reads the input, the replay's input goes through Spark's shuffle and
    Spark writes the tables' files; the server has Delta Spark's classes but is not configured for
    it, so `auto` chose the embedded writer."""
    (connect_out, logs) = outputs[name, "connect"]
    assert "single pass: Spark reads the input (the session's workers may not see this process's files)" in logs, logs
    assert "handed from task to task" not in logs and "themselves (embedded writer" not in logs, logs
    writers = {r["writer"] for r in DeltaTable(str(connect_out / "runs")).to_pyarrow_table().to_pylist()}
    assert writers == {"embedded"}


def test_a_remote_address_and_a_master_together_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A Spark Connect server has its own master: both on one command line is a usage error (exit 2)
    found before any session is made."""
    from coordinator_audit.jobs.audit import main

    code = main(["--remote", "sc://127.0.0.1:1", "--master", "local[2]", "--input", str(ROOT / "data" / "samples"),
                 "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "spark.master local[2] and the Spark Connect address sc://127.0.0.1:1: give one" in err, err
    assert not (tmp_path / "out").exists()


NOTEBOOK = ROOT / "notebooks" / "coordinator_audit.py"
SERVER_LOG = SAMPLE.parent / "server_log_groupcoordinator.txt"


@pytest.mark.slow
def test_the_databricks_notebook_runs_cell_by_cell_on_spark_connect(spark: SparkSession, server: str,
                                                                   tmp_path: Path) -> None:
    """The notebook as a shared-access or serverless notebook runs it (`tests.support.notebook`: its
    `spark` a Spark Connect session, its widgets from the environment), with a server log: it shows
    every table of the run, derived ones included, and its tables equal the same audit's in local mode."""
    import json

    from coordinator_audit.jobs.audit import run_audit
    from coordinator_audit.jobs.config import load_config
    from coordinator_audit.udfs.schemas import TABLE_SCHEMAS

    wheel = "/Volumes/main/default/libs/coordinator_audit-0.1.0-py3-none-any.whl"
    widgets = {"input_path": str(SAMPLE), "output_path": str(tmp_path / "notebook"), "server_log": str(SERVER_LOG),
               "wheel": wheel}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_", "AUDIT_"))}
    env.update({f"AUDIT_{k.upper()}": v for k, v in widgets.items()})
    cmd = [sys.executable, "-m", "tests.support.notebook", str(NOTEBOOK), "--remote", server]
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    ran = json.loads(result.stdout.strip().splitlines()[-1])

    assert ran["pip"] == [f"%pip install {wheel}"]
    assert set(TABLE_SCHEMAS) <= set(ran["locations"])
    assert set(ran["tables"]) == set(TABLE_SCHEMAS) - {"group_state"}, ran["tables"]  # the job's saved state
    shown = dict(zip(ran["tables"], ran["displayed"], strict=True))
    for name in ("runs", "generations", "assignments", "rebalance_causes", "offset_commits", "partition_ownership",
                 "rebalances", "group_health"):
        assert shown[name]["rows"] > 0, name
    assert "broker_cause" in shown["generations"]["columns"]

    local = tmp_path / "local"
    run_audit(spark, load_config(None, {"input.path": str(SAMPLE), "output.path": str(local),
                                        "input.server_log": str(SERVER_LOG), "input.table": ""}))
    assert differences(tmp_path / "notebook", local) == []
