#!/usr/bin/env bash
# Creates .venv (Python >= 3.11) and installs the project with its test extras (which bring the
# optional Spark, Delta Spark and Spark Connect client extras: the suite runs every subcommand).
# Idempotent: a second run only checks that everything is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "[setup] creating .venv with $($PY --version)"
    "$PY" -m venv .venv
fi
stamp=.venv/.installed-$(cat pyproject.toml | sha1sum | cut -c1-12)
if [ ! -f "$stamp" ]; then
    echo "[setup] installing coordinator-audit and its dependencies into .venv"
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
    rm -f .venv/.installed-* && touch "$stamp"
fi
command -v java >/dev/null || { echo "[setup] Java 17 is required (java not on PATH)" >&2; exit 1; }
