#!/usr/bin/env bash
# Sets everything up, then runs the whole test suite (core tier, Spark tier, and a small oracle sample).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m ruff check coordinator_core jobs udfs tests scripts benchmarks notebooks
.venv/bin/python -m mypy
exec .venv/bin/python -m pytest "$@"
