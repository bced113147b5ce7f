#!/usr/bin/env bash
# Sets everything up, then runs the whole test suite (core tier, Spark tier, and a small oracle sample).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# headless Chromium for the report's browser test (Debian's package; the test skips outside CI without it)
bash scripts/browser.sh >/dev/null || echo "[test] no Chromium: the browser test will skip (fails under CI)" >&2
.venv/bin/python -m ruff check coordinator_core jobs udfs tests scripts benchmarks
.venv/bin/python -m mypy
exec .venv/bin/python -m pytest "$@"
