#!/usr/bin/env bash
# The embedded default: a local single-node Kafka and Redis, the worker, and the example
# sessions flowing in at a readable pace; updates print as they land in Redis, and the
# gateway serves them (HTTP, SSE and the context meter page; its URL is printed).
#
#   deploy/demo.sh            (what `make demo` runs; Ctrl-C stops everything)
#
# Env: DEMO_KAFKA_PORT (29092), DEMO_REDIS_PORT (26379), DEMO_RATE (events/s, 400),
#      DEMO_SECONDS (stop after N seconds; default: run until Ctrl-C), DEMO_DIR (.state/demo),
#      STREAM_GATEWAY_PORT (28080).
#
# It prints the settings the operator commands need (`stream lag`, `stream watch`,
# `stream produce --reset` in a second terminal read the same environment as the worker),
# and says when it reuses an earlier run's Kafka data and worker state in DEMO_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIR=${DEMO_DIR:-$ROOT/.state/demo}
KAFKA_PORT=${DEMO_KAFKA_PORT:-29092}
REDIS_PORT=${DEMO_REDIS_PORT:-26379}
RATE=${DEMO_RATE:-400}
# A previous run's Kafka log dir (formatted) or worker state: both are kept and reused.
reused=""
if [ -f "$DIR/kafka/kraft-logs/meta.properties" ] || [ -d "$DIR/state" ]; then
  reused=1
fi
mkdir -p "$DIR"

export KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:$KAFKA_PORT
export REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0
export STREAM_STATE_DIR=$DIR/state
export STREAM_PARTITIONS=${STREAM_PARTITIONS:-6}
export STREAM_WEB_PORT=${STREAM_WEB_PORT:-26066}
export STREAM_GATEWAY_PORT=${STREAM_GATEWAY_PORT:-28080}
STREAM=$ROOT/.venv/bin/stream

# `export ...` of the settings an operator command needs to find this demo's group: the
# addresses set above, and the naming ones when the caller set them (never a password).
operator_env() {
  local name line="export"
  for name in KAFKA_BOOTSTRAP_SERVERS REDIS_URL STREAM_APP_ID STREAM_INPUT_TOPIC \
              STREAM_OUTPUT_TOPIC STREAM_DLQ_TOPIC REDIS_KEY_PREFIX STREAM_GENERATION; do
    if [ -n "${!name:-}" ]; then
      line+=" $name=$(printf %q "${!name}")"
    fi
  done
  echo "$line"
}

worker_pid=""
watch_pid=""
gateway_pid=""
cleanup() {
  trap - EXIT INT TERM
  echo "demo: stopping" >&2
  [ -n "$watch_pid" ] && kill "$watch_pid" 2>/dev/null || true
  if [ -n "$gateway_pid" ]; then
    kill -TERM "$gateway_pid" 2>/dev/null || true   # ends its SSE streams, then exits
    wait "$gateway_pid" 2>/dev/null || true
  fi
  if [ -n "$worker_pid" ]; then
    kill -TERM "$worker_pid" 2>/dev/null || true   # finishes the batch, flushes, commits
    wait "$worker_pid" 2>/dev/null || true
  fi
  bash deploy/redis.sh stop --dir "$DIR/redis" >/dev/null 2>&1 || true
  bash deploy/kafka.sh stop --data-dir "$DIR/kafka" >/dev/null 2>&1 || true
}
trap cleanup EXIT INT TERM

if [ -n "$reused" ]; then
  echo "demo: reusing the state of an earlier run in $DIR (Kafka's topics, offsets and table changelog, the worker's local state): the examples produced again are duplicates of what is already folded. To start clean: stop the demo, rm -rf $(printf %q "$DIR"), run it again" >&2
fi
echo "demo: starting Kafka on $KAFKA_BOOTSTRAP_SERVERS and Redis on $REDIS_URL (state in $DIR)" >&2
bash deploy/kafka.sh start --port "$KAFKA_PORT" --controller-port $((KAFKA_PORT + 1)) --data-dir "$DIR/kafka" >/dev/null
bash deploy/redis.sh start --port "$REDIS_PORT" --dir "$DIR/redis" >/dev/null

echo "demo: starting the worker (log: $DIR/worker.log)" >&2
"$STREAM" worker >"$DIR/worker.log" 2>&1 &
worker_pid=$!

# One line per update: a redrawing display would fight with this script's own output.
"$STREAM" watch --lines &
watch_pid=$!

"$STREAM" serve >"$DIR/gateway.log" 2>&1 &
gateway_pid=$!
for _ in $(seq 1 40); do   # it prints its URL once listening
  grep -q "^stream serve: http" "$DIR/gateway.log" 2>/dev/null && break
  kill -0 "$gateway_pid" 2>/dev/null || break
  sleep 0.25
done
url=$(sed -n 's/^stream serve: \(http[^ ]*\).*/\1/p' "$DIR/gateway.log" 2>/dev/null | head -n 1 || true)
if [ -n "$url" ]; then
  echo "demo: the context meter page: $url (one session: ${url}sessions/example-agent-0)" >&2
else
  # The rest of the demo works without it; say so loudly rather than stop.
  echo "demo: WARNING: the gateway did not start (port $STREAM_GATEWAY_PORT busy? set STREAM_GATEWAY_PORT):" >&2
  tail -n 5 "$DIR/gateway.log" >&2
  kill -TERM "$gateway_pid" 2>/dev/null || true
  wait "$gateway_pid" 2>/dev/null || true
  gateway_pid=""
fi

# Wait for the worker to join its group before feeding it, so the first updates show.
for _ in $(seq 1 120); do
  grep -q "Ready" "$DIR/worker.log" 2>/dev/null && break
  kill -0 "$worker_pid" 2>/dev/null || { echo "demo: the worker exited:" >&2; tail -n 30 "$DIR/worker.log" >&2; exit 1; }
  sleep 0.5
done

{
  echo "demo: for the operator commands in another terminal, use these settings:"
  echo "  cd $(printf %q "$ROOT")"
  echo "  $(operator_env)"
  echo "  .venv/bin/stream lag                              # offsets, lag and members of the group"
  echo "  .venv/bin/stream watch example-system-prompts     # or \`stream watch\` for every session"
  echo "  .venv/bin/stream produce --reset examples/example-system-prompts.jsonl"
} >&2

echo "demo: producing examples/ at $RATE events/s (segments of 20 events)" >&2
"$STREAM" produce examples --segment 20 --rate "$RATE"
echo "demo: all example events produced; the offline fold says:" >&2
"$STREAM" fold examples >&2

if [ -n "${DEMO_SECONDS:-}" ]; then
  sleep "$DEMO_SECONDS"
else
  echo "demo: running; Ctrl-C to stop. Try: redis-cli -p $REDIS_PORT hget ${REDIS_KEY_PREFIX:-ctx:}session:example-system-prompts update" >&2
  echo "demo: operator commands elsewhere need: $(operator_env)" >&2
  wait "$worker_pid"
fi
