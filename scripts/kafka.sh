#!/usr/bin/env bash
# A single-node KRaft Apache Kafka broker on 127.0.0.1 for tests, from Maven Central jars (scripts/jars.sh).
#
#   bash scripts/kafka.sh start DIR [4|44|3]  format KRaft storage under DIR, start the broker (Kafka 4.x,
#                                           Java group coordinator; 44: Kafka 4.4; or 3.x, Scala group
#                                           coordinator) on free loopback ports, wait until it serves; prints
#                                           "bootstrap=127.0.0.1:PORT" and "version=..."
#   bash scripts/kafka.sh stop DIR          stop it (SIGTERM, SIGKILL after 20 s); safe to repeat
#
# KAFKA_EXTRA_PROPERTIES (lines of key=value) are appended to server.properties.
# DIR receives server.properties, data/, logs/server.log (Kafka's own log format, UTC) and pid.
# The broker runs under `timeout` (KAFKA_MAX_SECONDS, default 1200): it stops by itself even if
# whoever started it dies. Listeners bind 127.0.0.1 only.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: bash scripts/kafka.sh start|stop DIR [4|44|3]" >&2; exit 2; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

stop() {
    [ -f "$dir/pid" ] || return 0
    local pid
    pid=$(cat "$dir/pid")
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$pid" 2>/dev/null; then
            echo "[kafka] broker $pid did not stop within 20 s: SIGKILL" >&2
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    rm -f "$dir/pid"
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

case "$cmd" in
    stop) stop; exit 0 ;;
    start) ;;
    *) echo "usage: bash scripts/kafka.sh start|stop DIR [4|44|3]" >&2; exit 2 ;;
esac

major=${3:-4}
case "$major" in
    4|44) lib=$(bash scripts/jars.sh "kafka$major"); logging=(-Dlog4j2.configurationFile="$ROOT/scripts/kafka/log4j2.properties") ;;
    3) lib=$(bash scripts/jars.sh kafka3); logging=(-Dlog4j.configuration="file:$ROOT/scripts/kafka/log4j.properties") ;;
    *) echo "[kafka] unknown broker version $major (4, 44 or 3)" >&2; exit 2 ;;
esac
version=$(basename "$(ls "$lib"/kafka_2.13-*.jar)" .jar); version=${version#kafka_2.13-}
stop
rm -rf "$dir/data" "$dir/logs" && mkdir -p "$dir/data" "$dir/logs"
port=$(free_port); cport=$(free_port)
while [ "$cport" = "$port" ]; do cport=$(free_port); done
cat > "$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=${KAFKA_OFFSETS_PARTITIONS:-4}
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=${KAFKA_INITIAL_REBALANCE_DELAY_MS:-1000}
group.min.session.timeout.ms=1000
${KAFKA_EXTRA_PROPERTIES:-}
PROPS
java_opts=(-Xms128m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto -Duser.timezone=UTC
           -Dkafka.logs.dir="$dir/logs" "${logging[@]}")
# a random cluster id in Kafka's Uuid form (URL-safe base64 of 16 bytes), not starting with '-' (Uuid#randomUuid)
cluster_id=$(python3 -c 'import base64, uuid
while (u := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"): pass
print(u)')
if ! java "${java_opts[@]}" -cp "$lib/*" kafka.tools.StorageTool format -t "$cluster_id" \
        -c "$dir/server.properties" >"$dir/logs/format.log" 2>&1; then
    echo "[kafka] formatting KRaft storage failed:" >&2; tail -20 "$dir/logs/format.log" >&2; exit 1
fi
setsid timeout --kill-after=10 "${KAFKA_MAX_SECONDS:-1200}" \
    java "${java_opts[@]}" -cp "$lib/*" kafka.Kafka "$dir/server.properties" \
    >"$dir/logs/stdout.log" 2>&1 < /dev/null &
echo $! > "$dir/pid"
deadline=$((SECONDS + ${KAFKA_START_TIMEOUT:-90}))
until grep -q "Kafka Server started" "$dir/logs/server.log" 2>/dev/null \
        && python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 1).close()" 2>/dev/null; do
    if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
        echo "[kafka] broker exited during startup:" >&2
        tail -30 "$dir/logs/stdout.log" "$dir/logs/server.log" 2>/dev/null >&2; rm -f "$dir/pid"; exit 1
    fi
    if [ $SECONDS -ge $deadline ]; then
        echo "[kafka] broker not serving after ${KAFKA_START_TIMEOUT:-90} s; stopping it" >&2
        tail -30 "$dir/logs/server.log" >&2 || true; stop; exit 1
    fi
    sleep 0.2
done
echo "bootstrap=127.0.0.1:$port"
echo "version=$version"
