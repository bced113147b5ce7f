"""`coordinator-audit run` where Spark runs: the files a format skips reported in one line, a
failure after the run started exiting 1 in one line, and `--jars` joining the session the command
starts (Spark's Kafka source and Delta Spark, as `scripts/jars.sh spark` fetches them) without
making the `auto` writer native; a successful run prints no Java stack trace and no progress bar."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator_audit import cli
from tests.conftest import spark_jars

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "samples" / "sim_coop-scale-out.parquet"


def test_format_reports_every_file_it_skips(spark, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "in"
    data.mkdir()
    shutil.copy(SAMPLE, data / "log.parquet")
    (data / "more.jsonl").write_text('{"partition": 0, "offset": 1}\n')
    (data / "README.txt").write_text("notes")
    code = cli.main(["run", "--input", str(data), "--format", "parquet", "--output", str(tmp_path / "out"),
                     "--master", "local[2]", "--shards", "2", "--no-summary"])
    err = capsys.readouterr().err
    assert code == 0, err[-3000:]
    assert f"[coordinator-audit] input: format parquet skips 2 other files of {data}: README.txt, more.jsonl\n" in err


def test_a_failure_after_the_run_started_exits_1_in_one_line(spark, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The suite's session is not configured for Delta Spark: `--writer native` fails once the run
    has read its input (exit 1), saying how to configure it; nothing is written."""
    code = cli.main(["run", "--input", str(SAMPLE), "--output", str(tmp_path / "out"), "--writer", "native",
                     "--master", "local[2]", "--shards", "2"])
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert code == 1, err[-3000:]
    assert last.startswith("coordinator-audit run: writer 'native' needs a session configured for Delta Spark"), last
    assert not (tmp_path / "out" / "runs").exists()


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}


def test_jars_join_the_session_the_command_starts(tmp_path: Path) -> None:
    """`--jars` with Spark's Kafka source and Delta Spark: the command's session can load the Kafka
    source; the run's `auto` writer stays embedded (jars alone do not configure Delta), and its
    output, stopped cleanly, holds no Java stack trace and no progress bar."""
    jars = ",".join(spark_jars())
    probe = ("from coordinator_audit.jobs.spark_session import build_session\n"
             f"spark = build_session(master='local[1]', jars={jars!r}.split(','))\n"
             "try:\n"
             "    spark.read.format('kafka').load()\n"
             "except Exception as exc:\n"
             "    print(type(exc).__name__, str(exc).splitlines()[0])\n"
             "spark.stop()\n")
    found = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=_env(), capture_output=True, text=True,
                           timeout=600, check=False)
    assert found.returncode == 0, found.stderr[-3000:]
    # the source is there: it asks for its options (without the jars: DATA_SOURCE_NOT_FOUND)
    assert "DATA_SOURCE_NOT_FOUND" not in found.stdout and "subscribe" in found.stdout, found.stdout

    done = subprocess.run([sys.executable, "-m", "coordinator_audit", "run", "--jars", jars, "--input", str(SAMPLE),
                           "--output", str(tmp_path / "out"), "--master", "local[2]", "--shards", "2"],
                          cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600, check=False)
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-4000:]
    assert "writer embedded" in done.stdout, done.stdout
    assert "Exception" not in text and "\tat " not in text and "[Stage " not in text, text[-4000:]
