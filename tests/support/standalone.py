"""A Spark standalone cluster on loopback for tests: a master and workers started from the installed
pyspark's own distribution (`bin/spark-class`), each worker launching its executors as JVMs of their
own, as a user outgrowing one machine runs Spark.

`standalone_cluster(work)` starts the master, then the workers, waits until the master's JSON view
(`http://127.0.0.1:<ui port>/json/`) lists every worker ALIVE, yields the cluster, and stops every
process it started (each worker with the executors it launched) on the way out, also when starting
or the body fails. Everything binds to 127.0.0.1; logs, the workers' directories (one per
application and executor, with the executors' stdout/stderr) and Spark's scratch space live under
`work`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark

__all__ = ["StandaloneCluster", "free_port", "python_without_project", "standalone_cluster"]

SPARK_HOME = Path(pyspark.__file__).resolve().parent
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class StandaloneCluster:
    master_url: str
    """`spark://127.0.0.1:<port>`, what `--master` takes."""
    ui_url: str
    """The master's web UI; `<ui_url>/json/` is its state as JSON."""
    worker_dirs: tuple[Path, ...]
    """Each worker's `--work-dir`: `<app id>/<executor id>/` per executor it launched, with its stderr."""

    def state(self) -> dict[str, Any]:
        """The master's JSON view: workers, cores, running and completed applications."""
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=10) as response:
            state: dict[str, Any] = json.load(response)
        return state


def free_port() -> int:
    """A TCP port on loopback that nothing listens on at the moment of asking."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def python_without_project(venv: Path) -> Path:
    """A virtualenv (made in `venv`) whose python sees the project venv's packages (pyspark, pyarrow,
    numba, ...) through a .pth file but not the project: its editable install is a .pth hook inside
    that site-packages, which a directory named in a .pth file does not run. Code of the project
    that runs on it came from somewhere else (`--py-files`, a Spark Connect session's artifacts)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "_coordinator_audit_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    probe = subprocess.run([str(python), "-c", "import pyspark, deltalake, numba; import coordinator_audit.jobs"], cwd=venv,
                           capture_output=True, text=True, check=False)
    if "No module named 'coordinator_audit'" not in probe.stderr:
        raise RuntimeError(f"{python} is meant not to import the project: {probe.stderr[-2000:]}")
    return python


def _daemon_env(work: Path) -> dict[str, str]:
    """The daemons' environment: pyspark's distribution as SPARK_HOME, loopback only, and a
    configuration directory of their own (no user's spark-defaults.conf or spark-env.sh applies)."""
    conf = work / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    env.update(SPARK_HOME=str(SPARK_HOME), SPARK_CONF_DIR=str(conf), SPARK_LOCAL_IP=LOOPBACK,
               SPARK_LOCAL_DIRS=str(work / "scratch"), SPARK_LOG_DIR=str(work / "logs"),
               SPARK_DAEMON_MEMORY="256m")
    return env


def _start(cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Starts a daemon in a process group of its own (its executors join it), output to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)


def _stop(proc: subprocess.Popen[bytes], grace: float = 30.0) -> None:
    """SIGTERM to the daemon's process group (a worker kills its executors on TERM), SIGKILL after `grace`."""
    if proc.poll() is None:
        with suppress(ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=grace)
    with suppress(ProcessLookupError):  # what is left of the group: executors, their Python workers
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _tail(log: Path, lines: int = 25) -> str:
    text = log.read_text(errors="replace") if log.is_file() else "(no log)"
    return "\n".join(text.splitlines()[-lines:])


@contextmanager
def standalone_cluster(work: Path, *, workers: int = 2, cores: int = 1, memory: str = "1g",
                       timeout: float = 240.0) -> Iterator[StandaloneCluster]:
    """A master and `workers` workers of `cores` cores and `memory` each, on 127.0.0.1 (module docstring)."""
    env = _daemon_env(work)
    props = work / "conf" / "daemons.properties"
    props.write_text("spark.master.rest.enabled false\n")  # no REST submission server on a fixed port
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    port, ui_port = free_port(), free_port()
    master_url, ui_url = f"spark://{LOOPBACK}:{port}", f"http://{LOOPBACK}:{ui_port}"
    procs: list[tuple[subprocess.Popen[bytes], Path]] = []
    dirs = tuple(work / f"worker-{i}" for i in range(workers))
    try:
        log = work / "logs" / "master.out"
        procs.append((_start([spark_class, "org.apache.spark.deploy.master.Master", "--host", LOOPBACK,
                              "--port", str(port), "--webui-port", str(ui_port), "--properties-file", str(props)],
                             log, env), log))
        for i, d in enumerate(dirs):
            d.mkdir(parents=True)
            log = work / "logs" / f"worker-{i}.out"
            procs.append((_start([spark_class, "org.apache.spark.deploy.worker.Worker", "--host", LOOPBACK,
                                  "--port", "0", "--webui-port", "0", "--cores", str(cores), "--memory", memory,
                                  "--work-dir", str(d), "--properties-file", str(props), master_url], log, env), log))
        cluster = StandaloneCluster(master_url, ui_url, dirs)
        _wait_for_workers(cluster, procs, workers, timeout)
        yield cluster
    finally:
        for proc, _ in reversed(procs):  # workers (and their executors) first, then the master
            _stop(proc)


def _wait_for_workers(cluster: StandaloneCluster, procs: list[tuple[subprocess.Popen[bytes], Path]],
                      workers: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    alive = 0
    while time.monotonic() < deadline:
        for proc, log in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{log.stem} exited with {proc.returncode} while the cluster started:\n{_tail(log)}")
        try:
            alive = sum(w.get("state") == "ALIVE" for w in cluster.state().get("workers", []))
        except (urllib.error.URLError, ConnectionError, json.JSONDecodeError):
            alive = 0  # the master's UI is not up yet
        if alive == workers:
            return
        time.sleep(0.5)
    logs = "\n".join(f"--- {log.name}\n{_tail(log)}" for _, log in procs)
    raise RuntimeError(f"{alive} of {workers} workers registered with {cluster.master_url} in {timeout:.0f} s\n{logs}")
