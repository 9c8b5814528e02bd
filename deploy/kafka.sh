#!/usr/bin/env bash
# Single-node Apache Kafka (KRaft, no ZooKeeper) for local development and tests,
# assembled from Maven Central jars (deploy/kafka/pom.xml) instead of the release tarball.
#
#   deploy/kafka.sh fetch
#   deploy/kafka.sh start --port P --data-dir D [--controller-port C] [--foreground] [--timeout S]
#                         [--ssl-port P2] [--sasl-ssl-port P3] [--ssl-client-auth required|requested|none]
#                         [--tls-cert PEM --tls-key PEM --tls-ca PEM] [--scram-user NAME]
#                         [--authorizer] [--no-auto-create]
#   deploy/kafka.sh stop  --data-dir D
#   deploy/kafka.sh cluster-start --ports P1,P2,P3 --data-dir D [--min-isr N] [--timeout S]
#   deploy/kafka.sh cluster-stop  --data-dir D [--node N]
#
# `start` prints the bootstrap address (127.0.0.1:P) on stdout once the broker serves metadata;
# everything else goes to stderr. Env: KAFKA_VERSION (default: 4.4.0, the current line, falling
# back to 4.1.1; 3.9.1 is the compatibility target), CONTEXT_STREAM_CACHE (default
# ~/.cache/context-stream), KAFKA_HEAP_OPTS, KAFKA_JVM_OPTS, PYTHON. Kafka 4 logs through Log4j 2,
# 3.x through Log4j 1 (reload4j): each gets a configuration of its own kind.
#
# Secured listeners, besides the PLAINTEXT one on --port (kept for readiness and local tools):
# --ssl-port adds a TLS listener (client certificates per --ssl-client-auth, default required),
# --sasl-ssl-port a SASL_SSL listener taking SCRAM-SHA-512 and SCRAM-SHA-256. Both need the
# broker's PEM certificate chain, its unencrypted PKCS#8 key and the CA that signs clients
# (--tls-cert/--tls-key/--tls-ca). --scram-user NAME creates SCRAM-SHA-256/512 credentials for
# NAME when the data dir is first formatted (KRaft: kafka-storage format --add-scram), with the
# password from KAFKA_SCRAM_PASSWORD; only its salted form (PBKDF2) reaches a command line.
#
# Locked down as managed clusters are: --authorizer turns on the StandardAuthorizer with
# allow.everyone.if.no.acl.found=false (only User:ANONYMOUS, the PLAINTEXT listener and the
# controller, is a super user: the admin's door; a SCRAM principal gets what ACLs grant it), and
# --no-auto-create sets auto.create.topics.enable=false.
#
# `cluster-start` runs a local KRaft cluster from the same jars: one combined broker+controller
# node per port (node ids 1.., each controller on its port + 1, data in D/node-N), every
# topic replicated to all nodes (default.replication.factor and the internal topics' = the
# node count) with min.insync.replicas=--min-isr (default 2). It prints the bootstrap list
# once every node serves metadata listing all of them. Run again with the same arguments,
# it starts only the nodes that are down (same data, same ports): how a killed node comes
# back. `cluster-stop` stops every node (SIGTERM: controlled shutdown), or node N only.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(dirname "$HERE")"
CACHE_ROOT="${CONTEXT_STREAM_CACHE:-$HOME/.cache/context-stream}"
VERSIONS="${KAFKA_VERSION:-4.4.0 4.1.1}"   # tried in order
DEP_PLUGIN="org.apache.maven.plugins:maven-dependency-plugin:3.6.1"

die() { echo "kafka.sh: error: $*" >&2; exit 1; }
log() { echo "kafka.sh: $*" >&2; }
usage() { sed -n '2,39p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

# True when something accepts TCP connections on 127.0.0.1:$1 (bash /dev/tcp, no extra tools).
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# True for a version that logs through Log4j 1 (3.x and older); 4.x logs through Log4j 2.
log4j1() { [[ "$1" =~ ^[0-3]\. ]]; }

# Sets LIBS to a directory holding the broker's runtime classpath, assembling it if needed.
# The marker holds the POM's digest: libs another POM assembled are assembled again.
fetch() {
  local v pom_digest
  pom_digest="$(sha256sum "$HERE/kafka/pom.xml" | cut -d' ' -f1)"
  for v in $VERSIONS; do   # a cached version wins: no mvn, no network
    if [[ "$(cat "$CACHE_ROOT/kafka-$v/libs/.complete" 2>/dev/null)" == "$pom_digest" ]]; then
      KAFKA_VER="$v"; LIBS="$CACHE_ROOT/kafka-$v/libs"; return 0
    fi
  done
  command -v mvn >/dev/null || die "mvn not found (needed once to download Kafka jars)"
  command -v java >/dev/null || die "java not found"
  for v in $VERSIONS; do
    local dest="$CACHE_ROOT/kafka-$v/libs" tmp
    mkdir -p "$CACHE_ROOT/kafka-$v"
    tmp="$(mktemp -d "$CACHE_ROOT/kafka-$v/libs.tmp.XXXXXX")"
    log "assembling Kafka $v from Maven Central into $dest"
    # Run on a copy of the POM so mvn never writes target/ into the repo. Its output is kept
    # for errors only (Debian's mvn 3.8 emits stray ANSI codes even with -q -B).
    cp "$HERE/kafka/pom.xml" "$tmp/pom.xml"
    local logging=()
    if log4j1 "$v"; then logging=(-Dkafka.log4j1); fi
    if (cd "$tmp" && mvn -q -B -Dkafka.version="$v" ${logging[@]+"${logging[@]}"} \
          "$DEP_PLUGIN:copy-dependencies" \
          -DincludeScope=runtime -DoutputDirectory="$tmp/jars" >"$tmp/mvn.log" 2>&1); then
      rm "$tmp/pom.xml" "$tmp/mvn.log"
      mv "$tmp/jars"/*.jar "$tmp/" && rmdir "$tmp/jars"
      echo "$pom_digest" >"$tmp/.complete"
      # Atomic publish; if a concurrent fetch already published, keep theirs.
      [[ "$(cat "$dest/.complete" 2>/dev/null)" == "$pom_digest" ]] || rm -rf "$dest"
      mv -T "$tmp" "$dest" 2>/dev/null || rm -rf "$tmp"
      KAFKA_VER="$v"; LIBS="$dest"; return 0
    fi
    grep -m1 '\[ERROR\]' "$tmp/mvn.log" | sed 's/^.*\[ERROR\]/[ERROR]/' >&2 || tail -n 20 "$tmp/mvn.log" >&2
    rm -rf "$tmp"; rmdir "$CACHE_ROOT/kafka-$v" 2>/dev/null || true
    log "Kafka $v could not be assembled, trying the next candidate"
  done
  die "could not assemble any Kafka version from: $VERSIONS"
}

# Writes the broker's logging configuration into directory $1 for KAFKA_VER (Log4j 1 for 3.x,
# Log4j 2 for 4.x) and sets LOG_OPTION, the JVM option naming it. INFO to stdout; the clients'
# and the request logger's chatter at WARN.
log_config() {
  if log4j1 "$KAFKA_VER"; then
    cat >"$1/log4j.properties" <<'EOF'
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.kafka.clients=WARN
log4j.logger.kafka.request.logger=WARN
EOF
    LOG_OPTION="-Dlog4j.configuration=file:$1/log4j.properties"
  else
    cat >"$1/log4j2.properties" <<'EOF'
status = warn
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
EOF
    LOG_OPTION="-Dlog4j2.configurationFile=file:$1/log4j2.properties"
  fi
}

# Parses --port/--data-dir/--controller-port/--foreground/--timeout and the secured-listener
# options into globals.
parse_args() {
  PORT="" DATA_DIR="" CONTROLLER_PORT="" FOREGROUND=0 TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
  SSL_PORT="" SASL_SSL_PORT="" SSL_CLIENT_AUTH="required" TLS_CERT="" TLS_KEY="" TLS_CA=""
  SCRAM_USER="" AUTHORIZER=0 AUTO_CREATE=true
  while (($#)); do
    case "$1" in
      --port) PORT="${2:?--port needs a value}"; shift 2 ;;
      --data-dir) DATA_DIR="${2:?--data-dir needs a value}"; shift 2 ;;
      --controller-port) CONTROLLER_PORT="${2:?--controller-port needs a value}"; shift 2 ;;
      --timeout) TIMEOUT="${2:?--timeout needs a value}"; shift 2 ;;
      --foreground) FOREGROUND=1; shift ;;
      --ssl-port) SSL_PORT="${2:?--ssl-port needs a value}"; shift 2 ;;
      --sasl-ssl-port) SASL_SSL_PORT="${2:?--sasl-ssl-port needs a value}"; shift 2 ;;
      --ssl-client-auth) SSL_CLIENT_AUTH="${2:?--ssl-client-auth needs a value}"; shift 2 ;;
      --tls-cert) TLS_CERT="${2:?--tls-cert needs a value}"; shift 2 ;;
      --tls-key) TLS_KEY="${2:?--tls-key needs a value}"; shift 2 ;;
      --tls-ca) TLS_CA="${2:?--tls-ca needs a value}"; shift 2 ;;
      --scram-user) SCRAM_USER="${2:?--scram-user needs a value}"; shift 2 ;;
      --authorizer) AUTHORIZER=1; shift ;;
      --no-auto-create) AUTO_CREATE=false; shift ;;
      -h|--help) usage ;;
      *) die "unknown argument: $1" ;;
    esac
  done
  [[ -n "$DATA_DIR" ]] || die "--data-dir is required"
  mkdir -p "$DATA_DIR"; DATA_DIR="$(cd "$DATA_DIR" && pwd)"
  PID_FILE="$DATA_DIR/kafka.pid"; LOG_FILE="$DATA_DIR/kafka.log"
}

# Prints the pid from the pid file if that process is alive and is our broker.
running_pid() {
  local pid
  [[ -f "$PID_FILE" ]] || return 1
  pid="$(cat "$PID_FILE")"
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  # Guard against pid reuse: only accept a JVM running kafka.Kafka.
  grep -qa 'kafka\.Kafka' "/proc/$pid/cmdline" 2>/dev/null || return 1
  echo "$pid"
}

# Returns 0 once the broker answers a metadata request listing itself. Port-open alone is not
# enough: the socket can be bound before the broker is unfenced and serving requests.
broker_ready() {
  port_open "$PORT" || return 1
  local py="${PYTHON:-$REPO_ROOT/.venv/bin/python}"
  [[ -x "$py" ]] && "$py" -c 'import confluent_kafka' 2>/dev/null || return 0  # no client: port is all we can check
  "$py" - "$PORT" 2>/dev/null <<'EOF'
import sys
from confluent_kafka.admin import AdminClient
md = AdminClient({"bootstrap.servers": f"127.0.0.1:{sys.argv[1]}", "log_level": 0}).list_topics(timeout=2)
sys.exit(0 if md.brokers else 1)
EOF
}

# Sets LISTENERS/ADVERTISED/PROTOCOLS (appended to the PLAINTEXT ones) and SECURED_PROPERTIES
# for --ssl-port/--sasl-ssl-port (all empty when neither is given). The broker reads its key
# and trust material from copies in the data dir.
secured_listeners() {
  LISTENERS="" ADVERTISED="" PROTOCOLS="" SECURED_PROPERTIES=""
  [[ -n "$SSL_PORT$SASL_SSL_PORT" ]] || return 0
  local f
  for f in "$TLS_CERT" "$TLS_KEY" "$TLS_CA"; do
    [[ -n "$f" && -r "$f" ]] || die "--ssl-port/--sasl-ssl-port need readable --tls-cert, --tls-key and --tls-ca"
  done
  case "$SSL_CLIENT_AUTH" in
    required|requested|none) ;;
    *) die "--ssl-client-auth must be required, requested or none" ;;
  esac
  mkdir -p "$DATA_DIR/tls"; chmod 700 "$DATA_DIR/tls"
  # A PEM key store: the private key (PKCS#8, unencrypted) followed by the certificate chain.
  (umask 077; cat "$TLS_KEY" "$TLS_CERT" >"$DATA_DIR/tls/keystore.pem")
  cp "$TLS_CA" "$DATA_DIR/tls/truststore.pem"
  SECURED_PROPERTIES="ssl.keystore.type=PEM
ssl.keystore.location=$DATA_DIR/tls/keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$DATA_DIR/tls/truststore.pem"
  if [[ -n "$SSL_PORT" ]]; then
    [[ "$SSL_PORT" =~ ^[0-9]+$ ]] || die "--ssl-port must be a port number"
    LISTENERS+=",SSL://127.0.0.1:$SSL_PORT"; ADVERTISED+=",SSL://127.0.0.1:$SSL_PORT"
    PROTOCOLS+=",SSL:SSL"
    SECURED_PROPERTIES+="
listener.name.ssl.ssl.client.auth=$SSL_CLIENT_AUTH"
  fi
  if [[ -n "$SASL_SSL_PORT" ]]; then
    [[ "$SASL_SSL_PORT" =~ ^[0-9]+$ ]] || die "--sasl-ssl-port must be a port number"
    LISTENERS+=",SASL_SSL://127.0.0.1:$SASL_SSL_PORT"; ADVERTISED+=",SASL_SSL://127.0.0.1:$SASL_SSL_PORT"
    PROTOCOLS+=",SASL_SSL:SASL_SSL"
    SECURED_PROPERTIES+="
listener.name.sasl_ssl.ssl.client.auth=none
sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;"
  fi
}

# Prints the `--add-scram` arguments (one a line) creating SCRAM-SHA-512/256 credentials for
# SCRAM_USER, salted here (PBKDF2, 8192 iterations) from KAFKA_SCRAM_PASSWORD, so the password
# itself is never on a command line.
scram_arguments() {
  [[ -n "${KAFKA_SCRAM_PASSWORD:-}" ]] || die "--scram-user needs KAFKA_SCRAM_PASSWORD in the environment"
  [[ "$SCRAM_USER" =~ ^[A-Za-z0-9._-]+$ ]] || die "--scram-user: letters, digits, '.', '_' and '-' only"
  local py="${PYTHON:-$REPO_ROOT/.venv/bin/python}"
  [[ -x "$py" ]] || py="$(command -v python3)" || die "python3 is needed to salt SCRAM credentials"
  SCRAM_USER="$SCRAM_USER" "$py" -c '
import base64, hashlib, os
user, password = os.environ["SCRAM_USER"], os.environ["KAFKA_SCRAM_PASSWORD"].encode()
for mechanism, digest in (("SCRAM-SHA-512", "sha512"), ("SCRAM-SHA-256", "sha256")):
    salt, iterations = os.urandom(16), 8192
    salted = hashlib.pbkdf2_hmac(digest, password, salt, iterations)
    print("--add-scram")
    print(f"{mechanism}=[name={user},iterations={iterations},"
          f"salt=\"{base64.b64encode(salt).decode()}\","
          f"saltedpassword=\"{base64.b64encode(salted).decode()}\"]")
'
}

cmd_start() {
  parse_args "$@"
  [[ "$PORT" =~ ^[0-9]+$ ]] || die "--port is required (a free TCP port)"
  CONTROLLER_PORT="${CONTROLLER_PORT:-$((PORT + 1))}"
  if pid="$(running_pid)"; then die "a broker is already running from $DATA_DIR (pid $pid)"; fi
  # Otherwise the readiness check below could be satisfied by someone else's server.
  for p in "$PORT" "$CONTROLLER_PORT" $SSL_PORT $SASL_SSL_PORT; do
    if port_open "$p"; then die "port $p is already in use"; fi
  done
  secured_listeners
  fetch

  # Single node: every replication factor/ISR is 1. The internal offsets/transaction topics get
  # 1 partition instead of 50, which cuts the first consumer-group join from ~3.5 s to ~1 s.
  cat >"$DATA_DIR/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT$LISTENERS
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT$ADVERTISED
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT$PROTOCOLS
log.dirs=$DATA_DIR/kraft-logs
num.partitions=1
default.replication.factor=1
auto.create.topics.enable=$AUTO_CREATE
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
group.initial.rebalance.delay.ms=0
EOF
  if [[ -n "$SECURED_PROPERTIES" ]]; then
    printf '%s\n' "$SECURED_PROPERTIES" >>"$DATA_DIR/server.properties"
  fi
  if ((AUTHORIZER)); then
    # ANONYMOUS is whoever comes through a PLAINTEXT listener: the controller, the broker
    # itself and the local admin's tools. Everyone else needs ACLs.
    cat >>"$DATA_DIR/server.properties" <<'EOF'
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:ANONYMOUS
EOF
  fi
  log_config "$DATA_DIR"

  local java_cmd=(java ${KAFKA_HEAP_OPTS:--Xmx512m -Xms256m} ${KAFKA_JVM_OPTS:-}
    -XX:+UseG1GC -Djava.awt.headless=true "$LOG_OPTION" -cp "$LIBS/*")

  # Format once; meta.properties marks an already formatted log dir. The cluster id is a Kafka
  # Uuid (16 random bytes, base64url without padding), generated here to save a JVM start.
  if [[ ! -f "$DATA_DIR/kraft-logs/meta.properties" ]]; then
    local cluster_id
    # An id may begin with '-'; redraw rather than have the CLI parse it as an option.
    cluster_id="-"
    while [[ "$cluster_id" == -* ]]; do
      cluster_id="$(head -c16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"
    done
    local scram=()
    if [[ -n "$SCRAM_USER" ]]; then
      local salted
      salted="$(scram_arguments)" || exit 1
      mapfile -t scram <<<"$salted"
    fi
    "${java_cmd[@]}" kafka.tools.StorageTool format --ignore-formatted \
      -t "$cluster_id" -c "$DATA_DIR/server.properties" ${scram[@]+"${scram[@]}"} >>"$LOG_FILE" 2>&1 \
      || { tail -n 30 "$LOG_FILE" >&2; die "storage format failed (log: $LOG_FILE)"; }
  elif [[ -n "$SCRAM_USER" ]]; then
    log "$DATA_DIR is already formatted: SCRAM credentials stay as formatted"
  fi

  log "starting Kafka $KAFKA_VER on 127.0.0.1:$PORT (controller $CONTROLLER_PORT, data $DATA_DIR)"
  if ((FOREGROUND)); then
    # Logs to stderr so stdout carries only the bootstrap address; we stay the parent so we can
    # still report readiness, and forward Ctrl-C/SIGTERM to the JVM.
    "${java_cmd[@]}" kafka.Kafka "$DATA_DIR/server.properties" >&2 &
    echo $! >"$PID_FILE"
    trap 'kill -TERM "$(cat "$PID_FILE")" 2>/dev/null' INT TERM
  else
    # setsid: detach from the caller's process group so its Ctrl-C doesn't kill the broker.
    # The inner shell records its own pid, then execs, so the pid file holds the JVM's pid.
    setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$PID_FILE" \
      "${java_cmd[@]}" kafka.Kafka "$DATA_DIR/server.properties" >>"$LOG_FILE" 2>&1 </dev/null &
    for _ in $(seq 1 50); do [[ -s "$PID_FILE" ]] && break; sleep 0.1; done
  fi

  local deadline=$((SECONDS + TIMEOUT))
  until broker_ready; do
    if ((SECONDS >= deadline)) || ! { sleep 0.2; running_pid >/dev/null; }; then
      ((FOREGROUND)) || { log "--- last lines of $LOG_FILE ---"; tail -n 40 "$LOG_FILE" >&2; }
      if running_pid >/dev/null; then
        local t="$TIMEOUT"
        cmd_stop --data-dir "$DATA_DIR"
        die "broker not ready after ${t}s"
      fi
      die "broker process exited during startup"
    fi
  done
  echo "127.0.0.1:$PORT"
  if ((FOREGROUND)); then
    wait "$(cat "$PID_FILE")" || true   # returns early on a trapped signal; then wait for the JVM
    while running_pid >/dev/null; do sleep 0.2; done
    rm -f "$PID_FILE"
  fi
}

cmd_stop() {
  parse_args "$@"
  local pid
  if ! pid="$(running_pid)"; then
    log "no running broker for $DATA_DIR"; rm -f "$PID_FILE"; return 0
  fi
  kill -TERM "$pid"
  # Controlled shutdown of a combined broker+controller usually takes a few seconds.
  for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then
    log "broker (pid $pid) ignored SIGTERM for 30s, sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$PID_FILE"
  log "stopped broker (pid $pid)"
}

parse_cluster_args() {
  PORTS="" DATA_DIR="" MIN_ISR=2 NODE="" TIMEOUT="${KAFKA_START_TIMEOUT:-120}"
  while (($#)); do
    case "$1" in
      --ports) PORTS="${2:?--ports needs a value}"; shift 2 ;;
      --data-dir) DATA_DIR="${2:?--data-dir needs a value}"; shift 2 ;;
      --min-isr) MIN_ISR="${2:?--min-isr needs a value}"; shift 2 ;;
      --node) NODE="${2:?--node needs a value}"; shift 2 ;;
      --timeout) TIMEOUT="${2:?--timeout needs a value}"; shift 2 ;;
      -h|--help) usage ;;
      *) die "unknown argument: $1" ;;
    esac
  done
  [[ -n "$DATA_DIR" ]] || die "--data-dir is required"
  mkdir -p "$DATA_DIR"; DATA_DIR="$(cd "$DATA_DIR" && pwd)"
}

# Returns 0 once every node's port answers a metadata request listing all the nodes (a
# restarted node is listed once it has caught up with the metadata log and is unfenced).
cluster_ready() {
  local port
  for port in "${PORT_LIST[@]}"; do port_open "$port" || return 1; done
  local py="${PYTHON:-$REPO_ROOT/.venv/bin/python}"
  [[ -x "$py" ]] && "$py" -c 'import confluent_kafka' 2>/dev/null || return 0
  "$py" - "${#PORT_LIST[@]}" "${PORT_LIST[@]}" 2>/dev/null <<'PYEOF'
import sys
from confluent_kafka.admin import AdminClient
count, ports = int(sys.argv[1]), sys.argv[2:]
for port in ports:
    client = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "log_level": 0})
    if len(client.list_topics(timeout=2).brokers) != count:
        sys.exit(1)
PYEOF
}

# Writes node $1's server.properties and logging configuration into NODE_DIR; $2 is its port.
node_properties() {
  local id="$1" port="$2" count="${#PORT_LIST[@]}" voters="" i
  for i in "${!PORT_LIST[@]}"; do
    voters+="${voters:+,}$((i + 1))@127.0.0.1:$((PORT_LIST[i] + 1))"
  done
  # Every replication factor is the node count and the ISR floor MIN_ISR, as in production
  # (docs/deploy.md, "Production Kafka settings"). No unclean election: a replica that fell
  # out of the ISR never becomes leader, so an acknowledged record is never lost.
  cat >"$NODE_DIR/server.properties" <<EOF
process.roles=broker,controller
node.id=$id
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$((port + 1))
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$NODE_DIR/kraft-logs
num.partitions=1
default.replication.factor=$count
min.insync.replicas=$MIN_ISR
unclean.leader.election.enable=false
auto.create.topics.enable=true
offsets.topic.replication.factor=$count
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=$count
transaction.state.log.min.isr=$MIN_ISR
transaction.state.log.num.partitions=3
group.initial.rebalance.delay.ms=0
EOF
  log_config "$NODE_DIR"
}

cmd_cluster_start() {
  parse_cluster_args "$@"
  IFS=, read -r -a PORT_LIST <<<"$PORTS"
  ((${#PORT_LIST[@]} >= 1)) || die "--ports needs one port per node, comma-separated"
  [[ "$MIN_ISR" =~ ^[0-9]+$ ]] && ((MIN_ISR >= 1 && MIN_ISR <= ${#PORT_LIST[@]})) \
    || die "--min-isr must be between 1 and the node count"
  local i id port p base="$DATA_DIR" started=0
  for port in "${PORT_LIST[@]}"; do
    [[ "$port" =~ ^[0-9]+$ ]] && ((port + 1 <= 65535)) || die "port $port: not a port number"
  done
  fetch
  # One cluster id for every node, drawn once and kept beside them (a Kafka Uuid that
  # does not begin with '-').
  if [[ ! -s "$base/cluster.id" ]]; then
    local cluster_id="-"
    while [[ "$cluster_id" == -* ]]; do
      cluster_id="$(head -c16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"
    done
    echo "$cluster_id" >"$base/cluster.id"
  fi
  for i in "${!PORT_LIST[@]}"; do
    id=$((i + 1)) port="${PORT_LIST[i]}"
    NODE_DIR="$base/node-$id" PID_FILE="$base/node-$id/kafka.pid" LOG_FILE="$base/node-$id/kafka.log"
    mkdir -p "$NODE_DIR"
    if running_pid >/dev/null; then continue; fi
    # Otherwise the readiness check below could be satisfied by someone else's server.
    for p in "$port" $((port + 1)); do
      if port_open "$p"; then die "port $p (node $id) is already in use"; fi
    done
    node_properties "$id" "$port"
    local java_cmd=(java ${KAFKA_HEAP_OPTS:--Xmx384m -Xms128m} ${KAFKA_JVM_OPTS:-}
      -XX:+UseG1GC -Djava.awt.headless=true "$LOG_OPTION" -cp "$LIBS/*")
    if [[ ! -f "$NODE_DIR/kraft-logs/meta.properties" ]]; then
      "${java_cmd[@]}" kafka.tools.StorageTool format --ignore-formatted \
        -t "$(cat "$base/cluster.id")" -c "$NODE_DIR/server.properties" >>"$LOG_FILE" 2>&1 \
        || { tail -n 30 "$LOG_FILE" >&2; die "storage format of node $id failed (log: $LOG_FILE)"; }
    fi
    log "starting Kafka $KAFKA_VER node $id on 127.0.0.1:$port (controller $((port + 1)))"
    rm -f "$PID_FILE"
    # Detached as `start` does; every node is launched before waiting: a quorum needs a majority.
    setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$PID_FILE" \
      "${java_cmd[@]}" kafka.Kafka "$NODE_DIR/server.properties" >>"$LOG_FILE" 2>&1 </dev/null &
    for _ in $(seq 1 50); do [[ -s "$PID_FILE" ]] && break; sleep 0.1; done
    started=$((started + 1))
  done
  local deadline=$((SECONDS + TIMEOUT))
  until cluster_ready; do
    for i in "${!PORT_LIST[@]}"; do
      PID_FILE="$base/node-$((i + 1))/kafka.pid"
      if ! running_pid >/dev/null; then
        tail -n 40 "$base/node-$((i + 1))/kafka.log" >&2
        die "node $((i + 1)) is not running"
      fi
    done
    ((SECONDS < deadline)) || die "the cluster was not ready after ${TIMEOUT}s ($started nodes started)"
    sleep 0.3
  done
  local bootstrap=""
  for port in "${PORT_LIST[@]}"; do bootstrap+="${bootstrap:+,}127.0.0.1:$port"; done
  echo "$bootstrap"
}

cmd_cluster_stop() {
  parse_cluster_args "$@"
  local node pid pids=() base="$DATA_DIR"
  for node in "$base"/node-*; do
    [[ -d "$node" ]] || continue
    [[ -z "$NODE" || "$node" == "$base/node-$NODE" ]] || continue
    PID_FILE="$node/kafka.pid"
    if pid="$(running_pid)"; then pids+=("$pid"); else rm -f "$PID_FILE"; fi
  done
  ((${#pids[@]})) || { log "no running node in $base"; return 0; }
  # All at once: one by one, the last nodes would wait for a controller quorum that is gone.
  kill -TERM "${pids[@]}"
  local alive
  for _ in $(seq 1 150); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.2
  done
  for pid in "${pids[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
      log "node (pid $pid) ignored SIGTERM for 30s, sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  for node in "$base"/node-*; do
    [[ -z "$NODE" || "$node" == "$base/node-$NODE" ]] || continue
    rm -f "$node/kafka.pid"
  done
  log "stopped ${#pids[@]} node(s) (pids ${pids[*]})"
}

case "${1:-}" in
  fetch) fetch; log "Kafka $KAFKA_VER libs ready in $LIBS" ;;
  start) shift; cmd_start "$@" ;;
  stop) shift; cmd_stop "$@" ;;
  cluster-start) shift; cmd_cluster_start "$@" ;;
  cluster-stop) shift; cmd_cluster_stop "$@" ;;
  *) usage ;;
esac
