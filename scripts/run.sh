#!/usr/bin/env bash
# Sets everything up, then runs the audit job on the bundled samples (data/samples/*.parquet)
# into out/delta/ and prints where each table is with its row count. Extra arguments go to the job
# (see: .venv/bin/python -m coordinator_audit run --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m coordinator_audit run --input data/samples --output out/delta --master 'local[2]' "$@"
