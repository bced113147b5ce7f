#!/usr/bin/env bash
# Sets everything up, then runs the whole test suite (core tier, Spark tier, and a small oracle sample),
# then the broker tier (tests/kafka) in a pytest process of its own: a real Kafka broker from Maven
# Central jars, real consumers, Spark with its Kafka source and Delta Spark (scripts/jars.sh, cached
# under .cache/). With arguments, only `pytest ARGS` runs (e.g. `--kafka tests/kafka` for the broker tier).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# headless Chromium for the report's browser test (Debian's package; the test skips outside CI without it)
bash scripts/browser.sh >/dev/null || echo "[test] no Chromium: the browser test will skip (fails under CI)" >&2
.venv/bin/python -m ruff check coordinator_audit tests scripts benchmarks tools notebooks
.venv/bin/python -m mypy
if [ $# -gt 0 ]; then
    exec .venv/bin/python -m pytest "$@"
fi
.venv/bin/python -m pytest
bash scripts/jars.sh spark kafka4 kafka44 kafka3 >/dev/null
exec .venv/bin/python -m pytest --kafka tests/kafka
