"""The job where users run it: the wheel built by `scripts/build.sh`, installed into a fresh
virtualenv outside the checkout and run there with no --config; and `scripts/spark-submit.sh` with
`--py-files dist/coordinator_audit.zip coordinator_audit/jobs/audit.py`, exactly as the README says.

The fresh virtualenvs get the project's dependencies (pyspark, pyarrow, ...) without downloading
them: a `.pth` file puts the project venv's site-packages on their path. A directory named in a
`.pth` file is added to `sys.path` without reading the `.pth` files inside it, so the project's own
editable install (a `.pth` hook in that directory) stays invisible: the code that runs is the
wheel's (the first test asserts where `coordinator_audit.jobs` is imported from), or the zip's (the
second venv has no coordinator-audit at all).

The last test installs the wheel as a cluster would, with its dependencies resolved by pip from
PyPI (`--find-links` for the wheel itself) into a fresh venv that has a pyspark of its own, a
different patch version from the project's: the wheel's dependencies leave it alone (pyspark and
delta-spark are extras), the job runs on it, and without pyspark `run` names the extra to install."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "data" / "samples"
SAMPLE_RECORDS = sum(pq.read_metadata(p).num_rows for p in SAMPLES.glob("*.parquet"))


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME", "VIRTUAL_ENV")}
    env.update(extra)
    return env


def _run(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env or _env(), capture_output=True, text=True, timeout=timeout,
                          check=False)


def _venv_with_project_deps(path: Path) -> Path:
    """A new venv (no pip) that sees the project venv's packages through a .pth file."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "_coordinator_audit_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return python


@pytest.fixture(scope="module")
def dist() -> Path:
    """`bash scripts/build.sh`, as the README says: dist/ with the wheel and the zip."""
    built = _run(["bash", "scripts/build.sh"], cwd=ROOT)
    assert built.returncode == 0, built.stdout + built.stderr
    return ROOT / "dist"


def _assert_clean_run(out: Path, result: subprocess.CompletedProcess[str], tables: Path) -> None:
    text = result.stdout + result.stderr
    assert result.returncode == 0, text[-3000:]
    assert f"records in {SAMPLE_RECORDS:,} = replayed" in result.stdout, text[-3000:]
    assert "Traceback" not in text and " INFO " not in text, text[-3000:]
    # the job's own progress stays visible, and Spark's logging is quiet: a handful of lines in all
    assert "stage write Delta tables" in text
    assert len(text.splitlines()) < 60, text
    for table in ("generations", "assignments", "quarantine", "runs"):
        assert DeltaTable(str(tables / table)).version() >= 0
    runs = DeltaTable(str(tables / "runs")).to_pyarrow_table().to_pylist()
    assert [r["records_in"] for r in runs] == [SAMPLE_RECORDS]


def test_wheel_installed_outside_the_checkout_runs_with_its_built_in_defaults(dist: Path, tmp_path: Path) -> None:
    python = _venv_with_project_deps(tmp_path / "venv")
    wheel = next(dist.glob("coordinator_audit-*.whl"))
    installed = _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                      "--disable-pip-version-check", str(wheel)], cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr
    where = _run([str(python), "-c", "import coordinator_audit.jobs, coordinator_audit.core.sim; "
                  "print(coordinator_audit.jobs.__file__); from coordinator_audit.core.sim.scenario import *"], cwd=tmp_path)
    assert where.returncode == 0 and where.stdout.startswith(str(tmp_path / "venv")), where.stdout + where.stderr
    data = tmp_path / "samples"
    shutil.copytree(SAMPLES, data)  # Parquet logs beside their .truth.json: auto-detected as Parquet
    result = _run([str(tmp_path / "venv" / "bin" / "coordinator-audit"), "run", "--input", str(data), "--output",
                   str(tmp_path / "out"), "--master", "local[2]"], cwd=tmp_path)
    _assert_clean_run(tmp_path / "out", result, tmp_path / "out")


def test_spark_submit_with_the_zip_as_the_readme_says(dist: Path, tmp_path: Path) -> None:
    """The README's command, run from the checkout; the driver and workers use a venv without
    coordinator-audit, so the code comes from dist/coordinator_audit.zip alone."""
    python = _venv_with_project_deps(tmp_path / "venv")
    assert _run([str(python), "-c", "import coordinator_audit"], cwd=tmp_path).returncode != 0
    documented = [line for line in (ROOT / "README.md").read_text().splitlines()
                  if line.startswith("bash scripts/spark-submit.sh ")]
    assert len(documented) == 1, "the README shows one scripts/spark-submit.sh command"
    cmd = shlex.split(documented[0])
    assert cmd[cmd.index("--py-files") + 1] == "dist/coordinator_audit.zip"
    out = tmp_path / "audit"
    cmd[cmd.index("--output") + 1] = str(out)  # the one change: write under tmp_path, not out/
    result = _run(cmd, cwd=ROOT, env=_env(PYSPARK_PYTHON=str(python)))
    _assert_clean_run(out, result, out)


CLUSTER_PYSPARK = "4.2.1"
"""The pyspark a cluster's venv already has: a patch release after the project's own (pyspark
4.2.0), beyond the `[spark]` extra's ceiling, so a wheel that required pyspark would replace it."""


def test_the_wheel_keeps_the_pyspark_a_cluster_has(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    built = _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps",
                  "--wheel-dir", str(wheels), str(ROOT)], cwd=tmp_path, timeout=900)
    assert built.returncode == 0, built.stderr[-3000:]
    venv = tmp_path / "cluster"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python, bin_dir = str(venv / "bin" / "python"), venv / "bin"
    pip = [python, "-m", "pip", "--disable-pip-version-check", "install", "--quiet"]

    def pyspark_version() -> str:
        shown = _run([python, "-c", "import pyspark; print(pyspark.__version__)"], cwd=tmp_path)
        return shown.stdout.strip() or shown.stderr.strip().splitlines()[-1]

    cluster = _run([*pip, f"pyspark[sql]=={CLUSTER_PYSPARK}"], cwd=tmp_path, timeout=1800)
    assert cluster.returncode == 0, cluster.stderr[-3000:]
    installed = _run([*pip, "--find-links", str(wheels), "coordinator-audit"], cwd=tmp_path, timeout=1800)
    assert installed.returncode == 0, installed.stderr[-3000:]
    assert pyspark_version() == CLUSTER_PYSPARK
    assert _run([python, "-c", "import delta"], cwd=tmp_path).returncode != 0, "delta-spark is an extra"

    out = tmp_path / "out"
    result = _run([str(bin_dir / "coordinator-audit"), "run", "--input", str(SAMPLES / "sim_coop-scale-out.parquet"),
                   "--output", str(out), "--master", "local[2]", "--shards", "2"], cwd=tmp_path)
    text = result.stdout + result.stderr
    assert result.returncode == 0, text[-3000:]
    assert "writer embedded" in result.stdout and "Exception" not in text and "[Stage " not in text, text[-3000:]
    runs = DeltaTable(str(out / "runs")).to_pyarrow_table().to_pylist()
    assert [r["spark_version"] for r in runs] == [CLUSTER_PYSPARK]

    # without pyspark: `run` names the extra to install, the readers still answer
    assert _run([python, "-m", "pip", "uninstall", "--yes", "--quiet", "pyspark"], cwd=tmp_path).returncode == 0
    missing = _run([str(bin_dir / "coordinator-audit"), "run", "--input", str(SAMPLES), "--output",
                    str(tmp_path / "o2")], cwd=tmp_path)
    assert missing.returncode == 2, missing.stdout + missing.stderr
    assert missing.stderr.strip().splitlines() == [
        f"coordinator-audit run: needs the Python module 'pyspark', which is not installed in {python}; install it "
        f"with: pip install 'coordinator-audit[spark]' (on a cluster that has its own Spark, run with that Spark's "
        f"Python instead)"]
    worst = _run([str(bin_dir / "coordinator-audit"), "query", "--tables", str(out), "worst"], cwd=tmp_path)
    assert worst.returncode == 0 and worst.stdout.startswith("least healthy groups on "), worst.stdout + worst.stderr
