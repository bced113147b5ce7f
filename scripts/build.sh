#!/usr/bin/env bash
# Builds what a cluster needs, into dist/ (or the directory given as $1):
#   coordinator_audit-<version>-py3-none-any.whl  pip install it (the `coordinator-audit` command,
#                                                 `from coordinator_audit.jobs.audit import run_audit` in a notebook)
#   coordinator_audit.zip                         spark-submit --py-files (the same archive: a wheel
#                                                 is a zip of the packages coordinator_audit.core, jobs, udfs)
# The job's defaults are built into the code: neither needs conf/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
out=${1:-dist}
mkdir -p "$out"
rm -rf build "$out"/coordinator_audit-*.whl "$out"/coordinator_audit.zip
.venv/bin/python -m pip wheel --quiet --disable-pip-version-check --no-deps --wheel-dir "$out" . 2>/dev/null \
    || .venv/bin/python -m pip wheel --disable-pip-version-check --no-deps --wheel-dir "$out" .
rm -rf build
wheel=$(ls "$out"/coordinator_audit-*.whl)
cp "$wheel" "$out/coordinator_audit.zip"
echo "[build] $wheel"
echo "[build] $out/coordinator_audit.zip"
