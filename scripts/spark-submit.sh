#!/usr/bin/env bash
# pyspark's spark-submit, run with the project's .venv without activating it:
#   bash scripts/spark-submit.sh --py-files dist/coordinator_audit.zip coordinator_audit/jobs/audit.py --input ... --output ...
# The venv's own bin/spark-submit fails outside an activated venv ("Could not find valid
# SPARK_HOME": it looks for pyspark with the system python3). This sets SPARK_HOME to the venv's
# pyspark and the driver's and workers' Python to the venv's (both kept when already set), and
# quiets Spark's startup INFO lines (coordinator_audit/jobs/log4j2-quiet.properties: errors only) unless the job is
# given --verbose or SPARK_SUBMIT_OPTS already names a log4j configuration. With a local master
# (`--master local[...]`, or none) the driver's JVM, which spark-submit starts itself, gets the JIT
# thresholds the job gives a local JVM it starts (`spark.driver.extraJavaOptions` of
# conf/spark-local.toml, coordinator_audit.jobs.spark_session.LOCAL_JIT_OPTIONS) unless SPARK_SUBMIT_OPTS sets some.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "${PYSPARK_PYTHON:-}" ]; then
    [ -x "$root/.venv/bin/python" ] || bash "$root/scripts/setup.sh" >&2
    export PYSPARK_PYTHON="$root/.venv/bin/python"
fi
export PYSPARK_DRIVER_PYTHON=${PYSPARK_DRIVER_PYTHON:-$PYSPARK_PYTHON}
if [ -z "${SPARK_HOME:-}" ]; then
    SPARK_HOME=$("$PYSPARK_PYTHON" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')
    export SPARK_HOME
fi
quiet=1
for arg in "$@"; do [ "$arg" = "--verbose" ] && quiet=0; done
if [ "$quiet" = 1 ] && [[ "${SPARK_SUBMIT_OPTS:-}" != *log4j* ]]; then
    export SPARK_SUBMIT_OPTS="${SPARK_SUBMIT_OPTS:-} -Dlog4j2.configurationFile=file:$root/coordinator_audit/jobs/log4j2-quiet.properties"
fi
master=local
prev=
for arg in "$@"; do
    [ "$prev" = "--master" ] && master=$arg
    [[ "$arg" == --master=* ]] && master=${arg#--master=}
    prev=$arg
done
if [[ "$master" == local* ]] && [[ "${SPARK_SUBMIT_OPTS:-}" != *Tier4* ]]; then
    jit=$("$PYSPARK_PYTHON" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["spark"]["spark.driver.extraJavaOptions"])' "$root/conf/spark-local.toml")
    export SPARK_SUBMIT_OPTS="${SPARK_SUBMIT_OPTS:-} $jit"
fi
exec "$SPARK_HOME/bin/spark-submit" "$@"
