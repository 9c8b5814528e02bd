#!/usr/bin/env bash
# The embedded default: a local single-node Kafka and Redis, the worker, and the example
# sessions flowing in at a readable pace; updates print as they land in Redis, and the
# gateway serves them (HTTP, SSE and the context meter page; its URL is printed).
#
#   deploy/demo.sh            (what `make demo` runs; Ctrl-C stops everything)
#
# Env: DEMO_KAFKA_PORT (29092; the controller takes the next port), DEMO_REDIS_PORT (26379),
#      DEMO_RATE (events/s, 400), DEMO_SECONDS (stop N seconds after the examples are
#      produced; default: run until Ctrl-C), DEMO_DIR (.state/demo), STREAM_GATEWAY_PORT
#      (28080), STREAM_METRICS_PORT (29102). Every port is bound to 127.0.0.1.
#
# It prints the settings the operator commands need (`stream lag`, `stream watch`,
# `stream produce --reset` in a second terminal read the same environment as the worker),
# and says when it reuses an earlier run's Kafka data and worker state in DEMO_DIR. It
# prints an update only when its figures changed, and on the way out (the end of
# DEMO_SECONDS or Ctrl-C) a verdict computed by `stream compare`: whether Redis serves,
# session by session, what the offline fold of examples/ gives. Ctrl-C exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."

# On a terminal, the demo runs as a job of its own (a process group the terminal's Ctrl-C
# goes to) so that `make` above it is not interrupted too: make would report
# "Error 130" and exit 130 whatever the demo did with the signal.
if [ -z "${DEMO_JOB:-}" ] && [ -t 0 ]; then
  set -m
  DEMO_JOB=1 bash "$0" "$@" &
  fg %1 >/dev/null
  exit $?
fi
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
export STREAM_GATEWAY_BIND=127.0.0.1
# Private: the worker's /metrics, /livez and /readyz on loopback, off the default 9102.
export STREAM_METRICS_PORT=${STREAM_METRICS_PORT:-29102}
export STREAM_METRICS_BIND=127.0.0.1
# `stream produce --reset` (the printed hint) needs the worker to take reset records.
export STREAM_RESETS=${STREAM_RESETS:-1}
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
produce_pid=""
produced=""
cleanup() {
  trap - EXIT INT TERM
  if [ -n "$produce_pid" ]; then
    # Stopped mid-way: the examples are not all in, so there is nothing to compare yet.
    kill -TERM "$produce_pid" 2>/dev/null || true
    wait "$produce_pid" 2>/dev/null || true
    echo "demo: stopped while producing: no verdict (it needs every example produced; the next run reuses this state)" >&2
  fi
  if [ -n "$produced" ]; then
    # Computed, not asserted: Redis against the offline fold (waiting a little for the
    # worker's last batch).
    "$STREAM" compare examples --wait 10 >&2 || true
  fi
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
  echo "demo: stopped" >&2
}
trap cleanup EXIT
trap 'cleanup; exit 0' INT TERM

if [ -n "$reused" ]; then
  echo "demo: reusing the state of an earlier run in $DIR (Kafka's topics, offsets and table changelog, the worker's local state): the examples produced again are duplicates of what is already folded. To start clean: stop the demo, rm -rf $(printf %q "$DIR"), run it again" >&2
fi
echo "demo: starting Kafka on $KAFKA_BOOTSTRAP_SERVERS and Redis on $REDIS_URL (state in $DIR)" >&2
bash deploy/kafka.sh start --port "$KAFKA_PORT" --controller-port $((KAFKA_PORT + 1)) --data-dir "$DIR/kafka" >/dev/null
bash deploy/redis.sh start --port "$REDIS_PORT" --dir "$DIR/redis" >/dev/null

# A fresh broker creates its group-offsets topic and its producer-id block on first use,
# and answers "not available" / "load in progress" meanwhile: the worker's client logs
# that as an ERROR, librdkafka's idempotent producer as a warning, though both retry and
# succeed. Waiting here until both answer leaves a clean start clean.
"$ROOT/.venv/bin/python" - "${STREAM_APP_ID:-context-stream}" <<'PY'
import json, os, sys, time
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

group = sys.argv[1]
# log_level 0: the retries below are expected; their log lines are the noise avoided.
conf = {"bootstrap.servers": os.environ["KAFKA_BOOTSTRAP_SERVERS"], "log_level": 0}
deadline = time.monotonic() + 60
admin = AdminClient(conf)
while True:
    try:
        admin.describe_consumer_groups([group], request_timeout=5)[group].result()
        break
    except KafkaException:
        if time.monotonic() > deadline:
            sys.exit("demo: the group coordinator did not answer within 60 s")
        time.sleep(0.25)
state = {}
def stats(text):
    state["idemp"] = json.loads(text).get("eos", {}).get("idemp_state")
producer = Producer(
    conf | {"enable.idempotence": True, "statistics.interval.ms": 100, "stats_cb": stats}
)
while state.get("idemp") != "Assigned":
    if time.monotonic() > deadline:
        sys.exit("demo: the broker handed out no producer id within 60 s")
    producer.poll(0.1)
PY

echo "demo: starting the worker (log: $DIR/worker.log)" >&2
"$STREAM" worker >"$DIR/worker.log" 2>&1 &
worker_pid=$!

# One line per update whose figures changed (a later seq with the same figures, or what a
# reused Redis already holds, is not news): a redrawing display would fight with this
# script's own output.
"$STREAM" watch --lines --changed &
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
# In the background, so that Ctrl-C reaches this script's trap, not the producer. Its
# stderr goes to a file, so it draws no live progress bar: the bar would share the
# terminal with the update lines above and glue its redraws to them. Its report follows.
"$STREAM" produce examples --segment 20 --rate "$RATE" 2>"$DIR/produce.log" &
produce_pid=$!
status=0
wait "$produce_pid" || status=$?
produce_pid=""
cat "$DIR/produce.log" >&2
if [ "$status" -ne 0 ]; then
  echo "demo: stream produce failed (status $status)" >&2
  exit "$status"
fi
produced=1
echo "demo: all example events produced; the offline fold says:" >&2
"$STREAM" fold examples >&2

if [ -n "${DEMO_SECONDS:-}" ]; then
  sleep "$DEMO_SECONDS"
else
  "$STREAM" compare examples --wait 30 >&2 || true
  echo "demo: running; Ctrl-C to stop (it prints the verdict again). Try: redis-cli -p $REDIS_PORT hget ${REDIS_KEY_PREFIX:-ctx:}session:example-system-prompts update" >&2
  echo "demo: operator commands elsewhere need: $(operator_env)" >&2
  wait "$worker_pid"
fi
