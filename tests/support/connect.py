"""A Spark Connect server on loopback for tests, started from the installed pyspark's own
distribution (`bin/spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer`
with the `spark-connect` jar pyspark ships), as a user runs one next to a local Spark.

`connect_server(work)` starts the server (a `local[2]` master, gRPC on 127.0.0.1 at a free port),
waits until its port answers, yields its `sc://127.0.0.1:<port>` address, and stops the process
group it started on the way out, also when starting or the body fails. Its Python workers run the
given interpreter (`PYSPARK_PYTHON`; a python without the project, `python_without_project`, in
the tests) with an empty `PYTHONPATH`: the job's code reaches them only as the artifacts the client
adds (`coordinator_audit.jobs.spark_session.ship_code`), as on a server the user does not own.
Its log, scratch space and warehouse live under `work`."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.support.standalone import LOOPBACK, SPARK_HOME, _daemon_env, _stop, _tail, free_port

__all__ = ["connect_server"]

CONNECT_JAR = next(iter(sorted((SPARK_HOME / "jars").glob("spark-connect_*.jar"))), None)
"""The Spark Connect server pyspark ships (`pyspark/jars/spark-connect_2.13-<version>.jar`)."""


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((LOOPBACK, port)) == 0


@contextmanager
def connect_server(work: Path, *, python: Path | None = None, jars: Sequence[str] = (),
                   timeout: float = 180.0) -> Iterator[str]:
    """A Spark Connect server with a `local[2]` master on 127.0.0.1 (module docstring): yields its
    address. Its Python workers run `python` (default: this interpreter); `jars` join its classpath."""
    if CONNECT_JAR is None:
        raise RuntimeError(f"no spark-connect jar in {SPARK_HOME / 'jars'}")
    env = _daemon_env(work)
    env.pop("SPARK_DAEMON_MEMORY", None)  # (the launcher sizes this server's JVM like a daemon's with it)
    env.update(PYSPARK_PYTHON=str(python or sys.executable), PYTHONPATH="")
    port = free_port()
    conf = {
        "spark.master": "local[2]",
        "spark.connect.grpc.binding.address": LOOPBACK,
        "spark.connect.grpc.binding.port": str(port),
        "spark.driver.host": LOOPBACK,
        "spark.driver.bindAddress": LOOPBACK,
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.sql.warehouse.dir": str(work / "warehouse"),
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={work / 'derby'}",
    }
    cmd = [str(SPARK_HOME / "bin" / "spark-submit"), "--class",
           "org.apache.spark.sql.connect.service.SparkConnectServer", "--name", "coordinator-audit-connect-test",
           "--driver-memory", "1g"]
    for key, value in conf.items():
        cmd += ["--conf", f"{key}={value}"]
    if jars:
        cmd += ["--jars", ",".join(jars)]
    cmd.append(str(CONNECT_JAR))
    log = work / "logs" / "connect-server.out"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True, cwd=work)
    try:
        deadline = time.monotonic() + timeout
        while not _listening(port):
            if proc.poll() is not None:
                raise RuntimeError(f"the Spark Connect server exited with {proc.returncode} while starting:\n"
                                   f"{_tail(log)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Spark Connect server did not listen on {LOOPBACK}:{port} within "
                                   f"{timeout:.0f} s:\n{_tail(log)}")
            time.sleep(0.5)
        yield f"sc://{LOOPBACK}:{port}"
    finally:
        _stop(proc)


if __name__ == "__main__":  # a server for trying the job by hand: prints its address, runs until interrupted
    with connect_server(Path(sys.argv[1] if len(sys.argv) > 1 else os.getcwd())) as address:
        print(address, flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
