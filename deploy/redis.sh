#!/usr/bin/env bash
# Private Redis instance for local development and tests (Debian's redis-server, never the
# system service).
#
#   deploy/redis.sh start --port P --dir D [--foreground] [--timeout S]
#                         [--tls-port T --tls-cert PEM --tls-key PEM --tls-ca PEM]
#                         [--tls-auth-clients no|yes|optional] [--acl-user NAME]
#   deploy/redis.sh stop  --dir D
#   deploy/redis.sh cluster-start --ports P1,P2,P3,P4,P5,P6 --dir D [--node-timeout MS]
#                                 [--timeout S]
#   deploy/redis.sh cluster-stop  --dir D
#
# `start` prints redis://127.0.0.1:P/0 on stdout once the server answers PING; logs go to
# D/redis.log (stderr with --foreground). Persistence is off: the instance is disposable.
#
# --tls-port adds a TLS port (rediss://127.0.0.1:T/0) with the given PEM certificate, key and
# CA; client certificates per --tls-auth-clients (default no). --acl-user NAME turns the
# default user off and creates NAME with every permission; its password comes from
# REDIS_ACL_PASSWORD and is stored only as a SHA-256 hash in D/users.acl (mode 600). The
# plain port stays (readiness is checked there); with --acl-user it needs AUTH too.
#
# `cluster-start` starts a local Redis Cluster (REDIS_CLUSTER=1): one node per port (six:
# three masters, a replica each; each port + 10000 is its cluster bus and must be free too),
# in D/node-P, joined with `redis-cli --cluster create --cluster-replicas 1`, and prints
# redis://127.0.0.1:P1/0 once every node reports cluster_state:ok. --node-timeout (default
# 2000 ms) is how soon a replica takes over a master that stopped answering.
# `cluster-stop` stops every node started in D.
set -euo pipefail

die() { echo "redis.sh: error: $*" >&2; exit 1; }
log() { echo "redis.sh: $*" >&2; }
usage() { sed -n '2,27p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

parse_args() {
  PORT="" DIR="" FOREGROUND=0 TIMEOUT="${REDIS_START_TIMEOUT:-20}"
  TLS_PORT="" TLS_CERT="" TLS_KEY="" TLS_CA="" TLS_AUTH_CLIENTS="no" ACL_USER=""
  while (($#)); do
    case "$1" in
      --port) PORT="${2:?--port needs a value}"; shift 2 ;;
      --dir) DIR="${2:?--dir needs a value}"; shift 2 ;;
      --timeout) TIMEOUT="${2:?--timeout needs a value}"; shift 2 ;;
      --foreground) FOREGROUND=1; shift ;;
      --tls-port) TLS_PORT="${2:?--tls-port needs a value}"; shift 2 ;;
      --tls-cert) TLS_CERT="${2:?--tls-cert needs a value}"; shift 2 ;;
      --tls-key) TLS_KEY="${2:?--tls-key needs a value}"; shift 2 ;;
      --tls-ca) TLS_CA="${2:?--tls-ca needs a value}"; shift 2 ;;
      --tls-auth-clients) TLS_AUTH_CLIENTS="${2:?--tls-auth-clients needs a value}"; shift 2 ;;
      --acl-user) ACL_USER="${2:?--acl-user needs a value}"; shift 2 ;;
      -h|--help) usage ;;
      *) die "unknown argument: $1" ;;
    esac
  done
  [[ -n "$DIR" ]] || die "--dir is required"
  mkdir -p "$DIR"; DIR="$(cd "$DIR" && pwd)"
  PID_FILE="$DIR/redis.pid"; LOG_FILE="$DIR/redis.log"
}

# Prints the pid from the pid file if that process is alive and is a redis-server.
running_pid() {
  local pid
  [[ -f "$PID_FILE" ]] || return 1
  pid="$(cat "$PID_FILE")"
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  grep -q 'redis-server' "/proc/$pid/cmdline" 2>/dev/null || return 1
  echo "$pid"
}

# PING over bash /dev/tcp (RESP inline command), so redis-cli is not required. With
# --acl-user the server answers NOAUTH to an anonymous PING: that too means it is serving.
ping_ok() {
  local reply
  { exec 3<>"/dev/tcp/127.0.0.1/$PORT"; } 2>/dev/null || return 1
  printf 'PING\r\n' >&3
  IFS= read -r -t 1 reply <&3 || reply=""
  exec 3>&-
  [[ "$reply" == "+PONG"* ]] || { [[ -n "$ACL_USER" && "$reply" == "-NOAUTH"* ]]; }
}

# Appends the --tls-port and --acl-user settings to the server's arguments (args array).
secured_args() {
  if [[ -n "$TLS_PORT" ]]; then
    [[ "$TLS_PORT" =~ ^[0-9]+$ ]] || die "--tls-port must be a port number"
    local f
    for f in "$TLS_CERT" "$TLS_KEY" "$TLS_CA"; do
      [[ -n "$f" && -r "$f" ]] || die "--tls-port needs readable --tls-cert, --tls-key and --tls-ca"
    done
    case "$TLS_AUTH_CLIENTS" in
      no|yes|optional) ;;
      *) die "--tls-auth-clients must be no, yes or optional" ;;
    esac
    if (exec 3<>"/dev/tcp/127.0.0.1/$TLS_PORT") 2>/dev/null; then die "port $TLS_PORT is already in use"; fi
    args+=(--tls-port "$TLS_PORT" --tls-cert-file "$TLS_CERT" --tls-key-file "$TLS_KEY"
      --tls-ca-cert-file "$TLS_CA" --tls-auth-clients "$TLS_AUTH_CLIENTS")
  fi
  if [[ -n "$ACL_USER" ]]; then
    [[ "$ACL_USER" =~ ^[A-Za-z0-9._-]+$ ]] || die "--acl-user: letters, digits, '.', '_' and '-' only"
    [[ -n "${REDIS_ACL_PASSWORD:-}" ]] || die "--acl-user needs REDIS_ACL_PASSWORD in the environment"
    local digest
    digest="$(printf '%s' "$REDIS_ACL_PASSWORD" | sha256sum | cut -d' ' -f1)"
    (umask 077; printf 'user default off\nuser %s on #%s ~* &* +@all\n' "$ACL_USER" "$digest" \
      >"$DIR/users.acl")
    args+=(--aclfile "$DIR/users.acl")
  fi
}

cmd_start() {
  parse_args "$@"
  [[ "$PORT" =~ ^[0-9]+$ ]] || die "--port is required (a free TCP port)"
  if pid="$(running_pid)"; then die "redis already running from $DIR (pid $pid)"; fi
  # Otherwise the PING check below could be answered by someone else's server.
  if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then die "port $PORT is already in use"; fi
  if ! command -v redis-server >/dev/null; then
    log "redis-server not found, installing Debian's redis-server package"
    ((EUID == 0)) || die "redis-server missing; install it: sudo apt-get install -y redis-server"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server) >&2 \
      || die "apt-get install redis-server failed"
  fi

  local args=(--port "$PORT" --bind 127.0.0.1 --dir "$DIR" --save '' --appendonly no
    --pidfile "$PID_FILE")
  secured_args
  rm -f "$PID_FILE"
  if ((FOREGROUND)); then
    # Stay the parent so readiness can still be reported on stdout; logs go to stderr.
    redis-server "${args[@]}" --daemonize no --logfile '' >&2 &
    echo $! >"$PID_FILE"
    trap 'kill -TERM "$(cat "$PID_FILE")" 2>/dev/null' INT TERM
  else
    redis-server "${args[@]}" --daemonize yes --logfile "$LOG_FILE" \
      || { tail -n 20 "$LOG_FILE" >&2 2>/dev/null || true; die "redis-server failed to start"; }
  fi

  local deadline=$((SECONDS + TIMEOUT))
  until ping_ok; do
    # The daemonized child writes the pid file early; a dead pid means e.g. a bind error.
    if ((SECONDS >= deadline)) || { [[ -f "$PID_FILE" ]] && ! running_pid >/dev/null; }; then
      if [[ -f "$LOG_FILE" ]]; then log "--- last lines of $LOG_FILE ---"; tail -n 20 "$LOG_FILE" >&2; fi
      if pid="$(running_pid)"; then kill -TERM "$pid"; fi
      die "redis not answering PING on port $PORT (timeout ${TIMEOUT}s or process exited)"
    fi
    sleep 0.1
  done
  echo "redis://127.0.0.1:$PORT/0"
  if ((FOREGROUND)); then
    wait "$(cat "$PID_FILE")" || true   # returns early on a trapped signal; then wait for exit
    while running_pid >/dev/null; do sleep 0.1; done
    rm -f "$PID_FILE"
  fi
}

cmd_stop() {
  parse_args "$@"
  local pid
  if ! pid="$(running_pid)"; then
    log "no running redis for $DIR"; rm -f "$PID_FILE"; return 0
  fi
  kill -TERM "$pid"
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    log "redis (pid $pid) ignored SIGTERM for 10s, sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$PID_FILE"
  log "stopped redis (pid $pid)"
}

ensure_redis_server() {
  command -v redis-server >/dev/null && return 0
  log "redis-server not found, installing Debian's redis-server package"
  ((EUID == 0)) || die "redis-server missing; install it: sudo apt-get install -y redis-server"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server) >&2 \
    || die "apt-get install redis-server failed"
}

parse_cluster_args() {
  PORTS="" DIR="" NODE_TIMEOUT=2000 TIMEOUT="${REDIS_START_TIMEOUT:-30}"
  while (($#)); do
    case "$1" in
      --ports) PORTS="${2:?--ports needs a value}"; shift 2 ;;
      --dir) DIR="${2:?--dir needs a value}"; shift 2 ;;
      --node-timeout) NODE_TIMEOUT="${2:?--node-timeout needs a value}"; shift 2 ;;
      --timeout) TIMEOUT="${2:?--timeout needs a value}"; shift 2 ;;
      -h|--help) usage ;;
      *) die "unknown argument: $1" ;;
    esac
  done
  [[ -n "$DIR" ]] || die "--dir is required"
  mkdir -p "$DIR"; DIR="$(cd "$DIR" && pwd)"
}

cluster_ok() {  # every node answers and sees the cluster as ok
  local port
  for port in "${PORT_LIST[@]}"; do
    redis-cli -p "$port" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
  done
}

cmd_cluster_start() {
  parse_cluster_args "$@"
  local port
  IFS=, read -r -a PORT_LIST <<<"$PORTS"
  ((${#PORT_LIST[@]} == 6)) || die "--ports needs six ports, comma-separated"
  [[ "$NODE_TIMEOUT" =~ ^[0-9]+$ ]] || die "--node-timeout must be milliseconds"
  ensure_redis_server
  command -v redis-cli >/dev/null || die "redis-cli missing (Debian's redis-tools)"
  for port in "${PORT_LIST[@]}"; do
    [[ "$port" =~ ^[0-9]+$ ]] && ((port + 10000 <= 65535)) \
      || die "port $port: a number with port + 10000 (its cluster bus) a valid port"
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then die "port $port is already in use"; fi
  done
  local base="$DIR" nodes=()
  for port in "${PORT_LIST[@]}"; do
    DIR="$base/node-$port"; mkdir -p "$DIR"; PORT="$port" ACL_USER=""
    PID_FILE="$DIR/redis.pid"; LOG_FILE="$DIR/redis.log"
    if pid="$(running_pid)"; then die "redis already running from $DIR (pid $pid)"; fi
    rm -f "$PID_FILE" "$DIR/nodes.conf"
    redis-server --port "$port" --bind 127.0.0.1 --dir "$DIR" --save '' --appendonly no \
      --pidfile "$PID_FILE" --cluster-enabled yes --cluster-config-file "$DIR/nodes.conf" \
      --cluster-node-timeout "$NODE_TIMEOUT" --daemonize yes --logfile "$LOG_FILE" \
      || { tail -n 20 "$LOG_FILE" >&2 2>/dev/null || true; die "redis-server on $port failed to start"; }
    local deadline=$((SECONDS + TIMEOUT))
    until ping_ok; do
      ((SECONDS < deadline)) || { tail -n 20 "$LOG_FILE" >&2; die "node $port not answering PING"; }
      sleep 0.1
    done
    nodes+=("127.0.0.1:$port")
  done
  DIR="$base"
  redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes >"$DIR/create.log" 2>&1 \
    || { tail -n 20 "$DIR/create.log" >&2; die "redis-cli --cluster create failed"; }
  local deadline=$((SECONDS + TIMEOUT))
  until cluster_ok; do
    ((SECONDS < deadline)) || die "the cluster did not reach cluster_state:ok within ${TIMEOUT}s"
    sleep 0.2
  done
  echo "redis://127.0.0.1:${PORT_LIST[0]}/0"
}

cmd_cluster_stop() {
  parse_cluster_args "$@"
  local node base="$DIR"
  for node in "$base"/node-*; do
    [[ -d "$node" ]] || continue
    cmd_stop --dir "$node"
  done
}

case "${1:-}" in
  start) shift; cmd_start "$@" ;;
  stop) shift; cmd_stop "$@" ;;
  cluster-start) shift; cmd_cluster_start "$@" ;;
  cluster-stop) shift; cmd_cluster_stop "$@" ;;
  *) usage ;;
esac
