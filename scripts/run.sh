#!/usr/bin/env bash
# Sets everything up, then runs the main job on the bundled samples (data/samples/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m jobs.decode_summary data/samples/real_broker_3_9_0.parquet "$@"
