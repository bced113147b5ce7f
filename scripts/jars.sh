#!/usr/bin/env bash
# Resolves the JVM pieces the broker tier needs from Maven Central into .cache/ (git-ignored), once:
#   bash scripts/jars.sh kafka4|kafka44|streams44|kafka3|spark ...   prints, per set, the directory holding its jars.
# Sets (versions overridable by environment):
#   kafka4  org.apache.kafka:kafka_2.13:$KAFKA4_VERSION  (the broker, Java group coordinator) + log4j2
#   kafka44 org.apache.kafka:kafka_2.13:$KAFKA44_VERSION (Kafka 4.4: KIP-848 consumer groups as the newest
#           broker writes them, and its kafka-clients) + log4j2
#   kafka3  org.apache.kafka:kafka_2.13:$KAFKA3_VERSION  (the broker, Scala group coordinator) + reload4j
#   streams44 org.apache.kafka:kafka-streams:$KAFKA44_VERSION (a Kafka Streams application with
#           group.protocol=streams, KIP-1071) + log4j2
#   spark   org.apache.spark:spark-sql-kafka-0-10_2.13:<pyspark version> and
#           io.delta:delta-spark_2.13:<delta-spark version>, both read from .venv, runtime scope only
#           (Spark's own jars, scope "provided", come with pyspark)
# Maven's local repository is .cache/m2; each set's jars are copied to .cache/jars/<set>-<versions>/lib
# and a stamp file marks a complete resolution, so later calls print the directory at once.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
KAFKA4_VERSION=${KAFKA4_VERSION:-4.1.1}
KAFKA44_VERSION=${KAFKA44_VERSION:-4.4.0}
KAFKA3_VERSION=${KAFKA3_VERSION:-3.9.1}
PY=${PYTHON_BIN:-.venv/bin/python}

dep() {  # groupId artifactId version
    printf '    <dependency><groupId>%s</groupId><artifactId>%s</artifactId><version>%s</version></dependency>\n' "$1" "$2" "$3"
}

delta_jar_version() {  # the newest delta-spark_2.13 in Maven Central with the pip package's major.minor, <= it
    local want=$1 mm=${1%.*} patch=${1##*.} p memo="$ROOT/.cache/jars/delta-for-pip-$1"
    if [ -f "$memo" ]; then cat "$memo"; return; fi
    mkdir -p "$ROOT/.cache/jars"
    for ((p = patch; p >= 0; p--)); do
        if [ -f "$ROOT/.cache/m2/io/delta/delta-spark_2.13/$mm.$p/delta-spark_2.13-$mm.$p.jar" ] \
                || mvn -B -q -Dmaven.repo.local="$ROOT/.cache/m2" \
                    org.apache.maven.plugins:maven-dependency-plugin:3.8.1:get \
                    -Dartifact="io.delta:delta-spark_2.13:$mm.$p" -Dtransitive=false >/dev/null 2>&1; then
            [ "$mm.$p" = "$want" ] || echo "[jars] io.delta:delta-spark_2.13:$want is not in Maven Central; using $mm.$p" >&2
            echo "$mm.$p" | tee "$memo"; return
        fi
    done
    echo "$want"
}

resolve() {  # name, then dependency lines on stdin
    local name=$1 dir="$ROOT/.cache/jars/$1" deps
    deps=$(cat)  # read all of stdin first: a writer left with a closed pipe would fail the pipeline (pipefail)
    if [ -f "$dir/.complete" ]; then echo "$dir/lib"; return; fi
    command -v mvn >/dev/null || { echo "[jars] mvn (Maven) is required to resolve $name" >&2; exit 1; }
    rm -rf "$dir" && mkdir -p "$dir"
    {
        echo '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        echo "  <groupId>local.coordinator-audit</groupId><artifactId>jars-$name</artifactId><version>0</version>"
        echo '  <packaging>pom</packaging><dependencies>'
        echo "$deps"
        echo '  </dependencies></project>'
    } > "$dir/pom.xml"
    echo "[jars] resolving $name from Maven Central into .cache/" >&2
    if ! mvn -B -q -f "$dir/pom.xml" -Dmaven.repo.local="$ROOT/.cache/m2" \
            org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
            -DincludeScope=runtime -DoutputDirectory="$dir/lib" >"$dir/mvn.log" 2>&1; then
        echo "[jars] Maven could not resolve $name (see $dir/mvn.log):" >&2
        tail -20 "$dir/mvn.log" >&2
        exit 1
    fi
    touch "$dir/.complete"
    echo "$dir/lib"
}

drop_shipped() {  # lib dir, pyspark's jars dir: removes jars whose artifact pyspark already ships (any version): Spark's win
    local lib=$1 shipped=$2 jar base
    for jar in "$lib"/*.jar; do
        base=$(basename "$jar" | sed -E 's/-[0-9][^-]*(-[0-9][^-]*)*\.jar$//')
        if compgen -G "$shipped/$base-[0-9]*.jar" >/dev/null; then rm -f "$jar"; fi
    done
}

[ $# -gt 0 ] || { echo "usage: bash scripts/jars.sh kafka4|kafka44|streams44|kafka3|spark ..." >&2; exit 2; }
for set in "$@"; do
    case "$set" in
        kafka4|kafka44)
            [ "$set" = kafka4 ] && version=$KAFKA4_VERSION || version=$KAFKA44_VERSION
            { dep org.apache.kafka kafka_2.13 "$version"
              # kafka_2.13's POM names slf4j-api 1.7 while its distribution ships 2.x with log4j2's binding
              dep org.slf4j slf4j-api 2.0.17
              dep org.apache.logging.log4j log4j-core 2.24.3
              dep org.apache.logging.log4j log4j-slf4j2-impl 2.24.3
            } | resolve "kafka-$version" ;;
        streams44)
            { dep org.apache.kafka kafka-streams "$KAFKA44_VERSION"
              dep org.slf4j slf4j-api 2.0.17
              dep org.apache.logging.log4j log4j-core 2.24.3
              dep org.apache.logging.log4j log4j-slf4j2-impl 2.24.3
            } | resolve "kafka-streams-$KAFKA44_VERSION" ;;
        kafka3)
            { dep org.apache.kafka kafka_2.13 "$KAFKA3_VERSION"
              dep org.slf4j slf4j-reload4j 1.7.36
            } | resolve "kafka-$KAFKA3_VERSION" ;;
        spark)
            read -r spark_v delta_pip < <("$PY" -c 'import importlib.metadata as m; print(m.version("pyspark"), m.version("delta-spark"))')
            # delta-spark on PyPI can be a patch release ahead of Maven Central (4.4.1 on PyPI, 4.4.0 the
            # newest delta-spark_2.13 on Central): the jar of the same major.minor, DELTA_SPARK_VERSION to override.
            delta_v=${DELTA_SPARK_VERSION:-$(delta_jar_version "$delta_pip")}
            { dep org.apache.spark spark-sql-kafka-0-10_2.13 "$spark_v"
              dep io.delta delta-spark_2.13 "$delta_v"
            } | resolve "spark-$spark_v-delta-$delta_v" > "$ROOT/.cache/jars/.last"
            lib=$(cat "$ROOT/.cache/jars/.last")
            drop_shipped "$lib" "$("$PY" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
            echo "$lib" ;;
        *) echo "[jars] unknown set $set (kafka4, kafka44, streams44, kafka3, spark)" >&2; exit 2 ;;
    esac
done
