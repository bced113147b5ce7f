"""The job's SparkSession, and per-stage progress (Spark UI job descriptions plus one log line).

`build_session` is the only place a session is made for the job:

* local masters (`local`, `local[N]`, `local[*]`) get `LOCAL_DEFAULTS` (2 shuffle partitions,
  Arrow on, UI off, ...; documented in `conf/spark-local.toml`), overridden by the file named by
  `spark.local_conf` when one is given; on a cluster the cluster's settings stand;
* every classic session: no console progress bar (`CLASSIC`: it would interleave with the job's
  own lines, on a local and a `spark://` master alike), and the jars and Maven packages the run
  asks for (`jars`, `packages`: `spark.jars`, `spark.jars.packages`) when this process starts the
  JVM (under spark-submit, give them to spark-submit);
* everywhere: UTC session time zone, Arrow for pandas conversions, Parquet timestamps written as
  TIMESTAMP_MICROS (what Delta expects, not Spark's legacy INT96), and Python workers running this
  interpreter (`PYSPARK_PYTHON` = `sys.executable`, unless the environment already names one);
* no implicit `spark-warehouse/` or `metastore_db/` in the working directory: the warehouse and
  Derby's home default to a per-user cache directory (`$XDG_CACHE_HOME/coordinator-audit/` or
  `~/.cache/coordinator-audit/`).

`build_session(remote="sc://host:port")` (or `SPARK_REMOTE` in the environment) connects to a Spark
Connect server instead: the server's settings stand, and only the runtime settings of `ALWAYS` are set.

A classic session (its JVM in this process: `has_jvm`) and a Spark Connect session run the same
job; the job asks the session what it can do (`has_jvm`, `local_tasks`) rather than trying and
catching the failure, and only a classic session takes the local-only shortcuts (job descriptions
in the UI, one JVM call for an input's file list). On a Spark Connect session the job ships its own
code to the server (`ship_code`), as the server's Python workers run its functions.

`stage(spark, "read input")` is a context manager naming the Spark jobs it runs (UI job
description, on a classic session) and printing ``stage read input: 1,138 rows in 0.42 s`` when it ends.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
import tomllib
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import DataFrame, SparkSession

from coordinator_audit.core.errors import ConfigError
from coordinator_audit.jobs.config import DEFAULT_APP_NAME

__all__ = [
    "ALWAYS",
    "CLASSIC",
    "CODE_PACKAGES",
    "LOCAL_DEFAULTS",
    "LOCAL_JIT_OPTIONS",
    "ROOT",
    "Stage",
    "build_session",
    "cache_dir",
    "code_zip",
    "default_parallelism",
    "has_jvm",
    "input_files",
    "is_local_master",
    "job_description",
    "load_spark_conf",
    "local_tasks",
    "release",
    "ship_code",
    "stage",
]

ROOT = Path(__file__).resolve().parents[2]

LOCAL_JIT_OPTIONS = ("-XX:Tier4InvocationThreshold=50000 -XX:Tier4MinInvocationThreshold=6000 "
                     "-XX:Tier4CompileThreshold=150000 -XX:Tier4BackEdgeThreshold=400000")
"""HotSpot's thresholds for its optimizing compiler (C2) at ten times their JDK 17 defaults, for a
local master's JVM, which the job starts for one run. In a local audit whose Python workers read
the input themselves, the JVM mostly plans and schedules, and C2 spent most of the JVM's CPU
compiling lukewarm Spark code, method after method, run after run; a hot loop (Spark reading a
table or a Kafka topic, Arrow transfers) still reaches the raised thresholds within moments and is
compiled as before, so inputs the JVM reads itself are not slower
(`benchmarks.bench_worker_cpu.session_cpu` measures the JVM's CPU). Stopping at C1 instead
(`-XX:TieredStopAtLevel=1`) would slow exactly those inputs, whose hot loops need C2. It applies
where the job starts the JVM (the `coordinator-audit run` command, a notebook's
first SparkSession); `scripts/spark-submit.sh` passes it for a local master, and under another
`spark-submit` pass it as `--driver-java-options`."""

LOCAL_DEFAULTS: dict[str, str] = {
    "spark.master": "local[2]",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.driver.memory": "2g",
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "10000",
    "spark.driver.extraJavaOptions": LOCAL_JIT_OPTIONS,
}
"""Spark settings of a local master (a laptop or CI), built in so that they travel with the code;
`conf/spark-local.toml` lists the same values (a test holds them equal) and is a template for a
`spark.local_conf` file overriding them. The settings of every master (`ALWAYS`) are not repeated here.

The listing threshold: Spark lists more than 32 paths with a Spark job of its own, which on local
disks costs far more than listing them in the driver, and a nightly output's history is read as a
list of data files (`coordinator_audit.jobs.delta_io.read_table`) that grows by a window every night."""

CLASSIC: dict[str, str] = {
    "spark.ui.showConsoleProgress": "false",
}
"""Settings of every classic session the job builds, whatever its master (set before its
SparkContext starts: they are not runtime settings). The console progress bar would interleave
`[Stage 3:>  (0 + 2) / 2]` lines with the job's own progress lines."""

ALWAYS: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    # pyspark 4.2: with Arrow-optimized Python UDFs on (its default), columnar UDF input makes a plain
    # `F.udf` over a Parquet scan of a few thousand rows hang (the worker waits for its UDF, the JVM
    # for results; seen with jstack/py-spy in the benchmark, benchmarks/). Off, so notebook users' UDFs work.
    "spark.sql.execution.arrow.pythonUDF.columnarInput.enabled": "false",
}


def cache_dir() -> Path:
    """The per-user cache directory of the project (warehouse, Derby home)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "coordinator-audit"


def is_local_master(master: str | None) -> bool:
    """True for `local`, `local[N]`, `local[*]`, `local[N,F]`."""
    return master is not None and (master == "local" or master.startswith("local["))


def load_spark_conf(path: str | Path) -> dict[str, str]:
    """The `[spark]` table of a TOML file as {key: string value}; ConfigError naming the key otherwise."""
    file = Path(path)
    if not file.is_absolute() and not file.exists():
        file = ROOT / file
    if not file.is_file():
        raise ConfigError(f"spark.local_conf: Spark settings file {path} not found")
    try:
        raw = tomllib.loads(file.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"spark.local_conf: {file} is not valid TOML: {exc}") from None
    unknown = set(raw) - {"spark"}
    if unknown:
        raise ConfigError(f"{sorted(unknown)[0]} ({file}): unknown section; only [spark] is allowed")
    out: dict[str, str] = {}
    for key, value in raw.get("spark", {}).items():
        if not key.startswith("spark."):
            raise ConfigError(f"spark.{key} ({file}): Spark settings start with 'spark.' (write \"spark.{key}\")")
        if isinstance(value, dict | list):
            raise ConfigError(f"{key} ({file}): expected a scalar value, got {value!r}")
        out[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


def build_session(*, master: str | None = None, app_name: str = DEFAULT_APP_NAME,
                  local_conf: str | Path | None = None,
                  conf: Mapping[str, str] | None = None, remote: str | None = None,
                  jars: Sequence[str] = (), packages: Sequence[str] = (), quiet: bool = False) -> SparkSession:
    """Builds (or returns the active) SparkSession with the project's settings (module docstring).

    `master` None keeps what spark-submit set (or `local[2]` from the local defaults when nothing
    did). `local_conf` (a TOML file with a `[spark]` table; None or "": none) overrides
    `LOCAL_DEFAULTS`. `conf` entries win over everything else. `remote` (else `SPARK_REMOTE` from
    the environment), a Spark Connect address such as `sc://host:15002`: a session of that server,
    with `ALWAYS` and `conf` as its runtime settings; `master` and `local_conf` do not apply.
    `jars` (paths or URLs) and `packages` (Maven coordinates) join the session's classpath: only
    where this process starts the JVM (a ConfigError under spark-submit, beside a running session, or
    on Spark Connect, whose classpath is set where it starts). `quiet`: where this process starts
    the JVM, what the JVM prints while it starts is held back, and shown only if the start fails
    (`_start_context_quietly`)."""
    remote = remote or os.environ.get("SPARK_REMOTE") or None
    if jars or packages:
        _check_classpath_additions(remote)
    if remote:
        if master:
            raise ConfigError(f"spark.master {master} and the Spark Connect address {remote}: give one of them "
                              f"(a Spark Connect server has its own master)")
        session = SparkSession.builder.remote(remote).appName(app_name).getOrCreate()
        for key, value in {**ALWAYS, **(conf or {})}.items():
            session.conf.set(key, value)
        return session
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    settings: dict[str, str] = {}
    effective_master = master or os.environ.get("MASTER") or _submitted_master()
    local_settings = {**LOCAL_DEFAULTS, **(load_spark_conf(local_conf) if local_conf else {})}
    if effective_master is None or is_local_master(effective_master):
        settings.update(local_settings)
    if effective_master is not None:
        settings["spark.master"] = effective_master
    settings.update(CLASSIC)
    settings.update(ALWAYS)
    if jars:
        settings["spark.jars"] = ",".join(jars)
    if packages:
        settings["spark.jars.packages"] = ",".join(packages)
    home = cache_dir()
    settings.setdefault("spark.sql.warehouse.dir", str(home / "spark-warehouse"))
    derby = f"-Dderby.system.home={home / 'derby'}"
    settings["spark.driver.extraJavaOptions"] = " ".join(
        x for x in (settings.get("spark.driver.extraJavaOptions"), derby) if x)
    settings.update(conf or {})
    home.mkdir(parents=True, exist_ok=True)

    if quiet and "PYSPARK_GATEWAY_PORT" not in os.environ and SparkContext._active_spark_context is None:
        _start_context_quietly(settings, app_name)
    builder = SparkSession.builder.appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    for key, value in ALWAYS.items():  # runtime settings also hold on a session that already existed
        session.conf.set(key, value)
    return session


def _start_context_quietly(settings: Mapping[str, str], app_name: str) -> None:
    """Starts this process's Spark JVM and its SparkContext (`settings`, `app_name`) with what the
    JVM prints while it starts held back (its notices, Ivy's resolution report for
    `spark.jars.packages`, Spark's log-level hint): a start that succeeds prints none of it, one
    that fails prints all of it before the error. Once the context is up, the JVM's output reaches
    this process's stderr as it comes. (pyspark's `launch_gateway` takes the JVM's output streams:
    `popen_kwargs`; a pipe read from before the JVM starts, so a long resolution report cannot
    fill it.)"""
    read_end, write_end = os.pipe()
    held: list[str] = []
    started = threading.Event()

    def relay() -> None:
        with os.fdopen(read_end, "rb") as pipe:
            for raw in pipe:
                line = raw.decode("utf-8", "replace")
                if started.is_set():
                    sys.stderr.write(line)
                    sys.stderr.flush()
                else:
                    held.append(line)

    relay_thread = threading.Thread(target=relay, name="spark-jvm-output", daemon=True)
    relay_thread.start()
    spark_conf = SparkConf().setAll(list(settings.items())).setAppName(app_name)
    try:
        gateway = launch_gateway(  # type: ignore[no-untyped-call]  # (pyspark leaves it unannotated)
            spark_conf, popen_kwargs={"stdout": write_end, "stderr": write_end})
        SparkContext(conf=spark_conf, gateway=gateway)
    except BaseException:
        os.close(write_end)
        relay_thread.join(timeout=10)  # the JVM exited: the pipe ends once what it wrote is read
        sys.stderr.write("".join(held))
        raise
    started.set()
    os.close(write_end)


def _check_classpath_additions(remote: str | None) -> None:
    """ConfigError when jars or packages cannot join the session's classpath: a Spark Connect
    session, or a JVM that runs already (spark-submit started it, or a session exists)."""
    if remote:
        raise ConfigError(f"spark.jars / spark.packages: a Spark Connect server ({remote}) has its own classpath; "
                          f"start the server with them (its --jars / --packages)")
    if "PYSPARK_GATEWAY_PORT" in os.environ or SparkContext._active_spark_context is not None:
        raise ConfigError("spark.jars / spark.packages: Spark's JVM runs already (spark-submit, or an existing "
                          "session); give them to spark-submit as --jars / --packages instead")


def _submitted_master() -> str | None:
    """The master spark-submit passed to this driver, if any (it travels in a system property)."""
    args = os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    parts = args.split()
    if "--master" in parts:
        i = parts.index("--master")
        if i + 1 < len(parts):
            return parts[i + 1]
    return None


@dataclass(slots=True)
class Stage:
    """What a `stage` block reports: set `rows` (or call `count(df)`) inside the block."""

    name: str
    rows: int | None = None
    started: float = 0.0
    elapsed: float = 0.0

    def count(self, df: Any) -> int:
        """Counts `df` (a Spark action, named after the stage) and records it."""
        self.rows = int(df.count())
        return self.rows


def has_jvm(spark: SparkSession) -> bool:
    """True for a classic session, whose JVM this process drives (`sparkContext`, Py4J); False for a
    Spark Connect session (`SparkSession.builder.remote`), which has neither."""
    return getattr(spark, "_jsparkSession", None) is not None


def local_tasks(spark: SparkSession) -> bool:
    """Whether every task of the session runs on this machine and sees its files: a classic session
    with a `local` master. Files one task writes to a local directory, another task or this process
    can then read (`coordinator_audit.udfs.handoff`, `coordinator_audit.udfs.table_files`). A Spark Connect session's tasks run where its
    server runs, which this process cannot know to be here."""
    return has_jvm(spark) and str(spark.sparkContext.master).startswith("local")


def default_parallelism(spark: SparkSession) -> int:
    """The session's default parallelism: `SparkContext.defaultParallelism` on a classic session
    (the cluster's cores unless `spark.default.parallelism` says otherwise); on Spark Connect the
    server's `spark.default.parallelism`, else its `spark.sql.shuffle.partitions`."""
    if has_jvm(spark):
        return int(spark.sparkContext.defaultParallelism)
    value = spark.conf.get("spark.default.parallelism", None) or spark.conf.get("spark.sql.shuffle.partitions")
    return max(1, int(str(value)))


def job_description(spark: SparkSession, text: str | None) -> None:
    """Names the Spark jobs this thread runs next in the UI (None: clears it), on a classic session;
    a Spark Connect server names its jobs itself."""
    if has_jvm(spark):
        spark.sparkContext.setJobDescription(text)  # type: ignore[arg-type]  # None clears it


CODE_PACKAGES = ("coordinator_audit",)
"""The job's packages: what `ship_code` sends to a Spark Connect server."""

_shipped: set[str] = set()
"""The Spark Connect sessions (by session id) that hold the job's code already."""


def ship_code(spark: SparkSession) -> None:
    """On a Spark Connect session, adds the job's packages (`CODE_PACKAGES`, from where this process
    imports them) to the session as a zip on the Python path of its workers (`addArtifacts(...,
    pyfile=True)`), once per session: the job's functions run in the server's Python workers,
    which need not have the job installed. A classic session's workers import the job as this
    process does (a local master), or from `--py-files` (a cluster): nothing to do."""
    if has_jvm(spark):
        return
    session_id = str(getattr(spark, "session_id", id(spark)))
    if session_id in _shipped:
        return
    with tempfile.TemporaryDirectory(prefix="coordinator-audit-code-") as tmp:
        spark.addArtifacts(str(code_zip(Path(tmp) / "coordinator_audit_code.zip")), pyfile=True)
    _shipped.add(session_id)


def code_zip(archive: Path) -> Path:
    """Writes the job's packages (`CODE_PACKAGES`, from where this process imports them, with their
    data files, without bytecode) into the zip `archive`, for a Python path: `ship_code`'s archive,
    and what `--py-files` takes."""
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        for package in CODE_PACKAGES:
            root = Path(__import__(package).__file__ or "").resolve().parent
            for file in sorted(root.rglob("*")):
                if file.is_file() and "__pycache__" not in file.parts and file.suffix != ".pyc":
                    z.write(file, Path(package) / file.relative_to(root))
    return archive


def input_files(df: DataFrame) -> list[str]:
    """`df.inputFiles()`, in one call to the JVM on a classic session: PySpark's own walks the Java
    array an element at a time, two Py4J calls per file, and an export directory holds thousands of
    files."""
    if not has_jvm(df.sparkSession):
        return list(df.inputFiles())
    jdf = df._jdf
    files = df.sparkSession._jvm.scala.collection.immutable.ArraySeq.unsafeWrapArray(  # type: ignore[union-attr]
        jdf.inputFiles())
    joined = str(files.mkString("\0"))  # no path holds a NUL
    return joined.split("\0") if joined else []


def release(df: DataFrame) -> int:
    """Frees the executor memory `df` holds: its cache (`unpersist`), and the blocks of every local
    checkpoint it reads (`Dataset#localCheckpoint` keeps them until the driver's garbage collector
    drops the RDD, which `unpersist` does not touch). Returns how many checkpoints it released.
    Call it once nothing reads `df` or another frame over the same checkpoint any more."""
    df.unpersist()
    if not has_jvm(df.sparkSession):  # Spark Connect: no JVM handle here; the server frees them with the session
        return 0
    leaves = df._jdf.queryExecution().logical().collectLeaves().iterator()
    released = 0
    while leaves.hasNext():
        leaf = leaves.next()
        if leaf.getClass().getSimpleName() == "LogicalRDD":
            leaf.rdd().unpersist(False)
            released += 1
    return released


@contextmanager
def stage(spark: SparkSession, name: str, *, log: Callable[[str], None] | None = None) -> Iterator[Stage]:
    """Names the Spark jobs run inside the block after the stage and logs
    ``stage <name>: <rows> rows in <seconds> s`` when it ends (also when it fails)."""
    emit = log or (lambda line: print(line, file=sys.stderr, flush=True))
    previous = spark.sparkContext.getLocalProperty("spark.job.description") if has_jvm(spark) else None
    job_description(spark, f"coordinator-audit: {name}")
    current = Stage(name, started=time.perf_counter())
    ok = False
    try:
        yield current
        ok = True
    finally:
        current.elapsed = time.perf_counter() - current.started
        job_description(spark, previous)  # None (no description before) clears it
        rows = f"{current.rows:,} rows" if current.rows is not None else "done"
        emit(f"stage {name}: {rows} in {current.elapsed:.2f} s" + ("" if ok else " (failed)"))
