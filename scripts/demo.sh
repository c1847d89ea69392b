#!/usr/bin/env bash
# The whole of gpufed on one machine: a server with its own embedded PostgreSQL, three simulated
# clusters (an on-prem DGX H100 site, a cloud A100 region, an edge site with L4s), a tenant with
# two projects, and a mixed batch of workloads that must all succeed. Everything talks TLS: the
# demo makes a local CA and a server certificate under its data folder (data/tls/) first, and a
# cluster CA from which each agent is enrolled: agents connect with client certificates.
#
# Run it through `make demo` (which builds first) or directly once built. It keeps running until
# Ctrl-C, or for DEMO_SECONDS seconds when set (0: stop as soon as the batch has succeeded).
#
# Environment:
#   GPUFED_GRPC_LISTEN  gRPC address (default 127.0.0.1:50051; port 0 picks a free port)
#   GPUFED_HTTP_LISTEN  health/metrics address (default 127.0.0.1:8080; port 0 picks one)
#   GPUFED_CONFIG       where to write the gpufedctl configuration
#                       (default ~/.config/gpufed/config.yaml, mode 0600)
#   GPUFED_BIN_DIR      where the programs are (default build/bin)
#   GPUFED_LOG_LEVEL    log level of the server and agents (default info)
#   DEMO_DIR            working folder: data, logs, tokens (default .demo in the source tree);
#                       its data/ folder is wiped at start, so every run begins empty
#   DEMO_SECONDS        stop after this many seconds instead of waiting for Ctrl-C
#   DEMO_TIMEOUT        seconds the batch may take before the demo fails (default 180)
set -euo pipefail
# Folders the demo creates must be enterable by the PostgreSQL user (see below); files holding
# secrets are written under umask 077 explicitly.
umask 022

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN_DIR=${GPUFED_BIN_DIR:-$ROOT/build/bin}
DEMO_DIR=${DEMO_DIR:-$ROOT/.demo}
[[ "$DEMO_DIR" == /* ]] || DEMO_DIR=$PWD/$DEMO_DIR
GRPC_LISTEN=${GPUFED_GRPC_LISTEN:-127.0.0.1:50051}
HTTP_LISTEN=${GPUFED_HTTP_LISTEN:-127.0.0.1:8080}
CONFIG_FILE=${GPUFED_CONFIG:-${HOME:?HOME is not set; set GPUFED_CONFIG}/.config/gpufed/config.yaml}
LOG_LEVEL=${GPUFED_LOG_LEVEL:-info}
DEMO_TIMEOUT=${DEMO_TIMEOUT:-180}
TOPOLOGY_DIR=$ROOT/deploy/topologies
EXAMPLES_DIR=$ROOT/examples
# The demo sites: deploy/topologies/<file>.yaml. Cluster names come from the files.
TOPOLOGY_FILES=(onprem-dgx cloud-a100 edge-l4)

SERVER=$BIN_DIR/gpufed-server
AGENT=$BIN_DIR/gpufed-agent
CTL=$BIN_DIR/gpufedctl

DATA_DIR=$DEMO_DIR/data
LOG_DIR=$DEMO_DIR/logs
RUN_DIR=$DEMO_DIR/run
ADMIN_TOKEN_FILE=$DATA_DIR/admin.token
AUDIT_KEY_FILE=$DATA_DIR/audit.key
TLS_DIR=$DATA_DIR/tls
READY_FILE=$RUN_DIR/server.ready.json

# The programs read these too. The demo decides everything itself (embedded PostgreSQL, its own
# data folder, its own tokens), so a setting meant for a real deployment must not leak in.
unset GPUFED_SERVER_CONFIG GPUFED_DATA_DIR GPUFED_DATABASE_URL GPUFED_DATABASE_URL_FILE \
  GPUFED_ADMIN_TOKEN_FILE GPUFED_TOKEN_FILE GPUFED_AGENT_TOKEN_FILE \
  GPUFED_AGENT_CONFIG GPUFED_SERVER GPUFED_AGENT_TOKEN GPUFED_TOPOLOGY GPUFED_BACKEND \
  GPUFED_WORK_DIR GPUFED_GRPC_LISTEN GPUFED_HTTP_LISTEN GPUFED_TOKEN GPUFED_CA_FILE \
  GPUFED_TLS_CERT_FILE GPUFED_TLS_KEY_FILE GPUFED_AUDIT_KEY_FILE

SERVER_PID=""
WATCH_PID=""
declare -A AGENT_PIDS=()

# Bold/coloured prefixes only on a terminal, so logs and CI output stay plain.
if [[ -t 1 ]]; then B=$'\033[1m' N=$'\033[0m'; else B="" N=""; fi
if [[ -t 2 ]]; then Y=$'\033[1;33m' R=$'\033[1;31m' E=$'\033[0m'; else Y="" R="" E=""; fi
say() { printf '%sdemo:%s %s\n' "$B" "$N" "$*"; }
warn() { printf '%sdemo: warning:%s %s\n' "$Y" "$E" "$*" >&2; }
die() {
  printf '%sdemo: error:%s %s\n' "$R" "$E" "$*" >&2
  exit 1
}

# Prints the last lines of a log so a failure explains itself without a hunt.
show_log() {
  local file=$1
  [[ -s "$file" ]] || return 0
  echo "---- last lines of $file ----" >&2
  tail -n 25 "$file" >&2
  echo "----" >&2
}

# "host:port" or "[v6]:port" -> host and port; a wildcard host is dialled on loopback.
split_addr() {
  local addr=$1
  ADDR_PORT=${addr##*:}
  ADDR_HOST=${addr%:*}
  ADDR_HOST=${ADDR_HOST#[}
  ADDR_HOST=${ADDR_HOST%]}
  case "$ADDR_HOST" in
    "" | 0.0.0.0 | "*") ADDR_HOST=127.0.0.1 ;;
    ::) ADDR_HOST=::1 ;;
  esac
  [[ "$ADDR_PORT" =~ ^[0-9]+$ ]] || die "'$addr' is not host:port"
}

# True when something accepts connections on host:port (bash's /dev/tcp: no extra tools).
port_in_use() {
  timeout 2 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null
}

dial_host() {
  if [[ "$1" == *:* ]]; then echo "[$1]"; else echo "$1"; fi
}

alive() { [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null; }

# Like alive, for a process that is not our child: a zombie waiting for PID 1 counts as gone.
running() {
  local state
  state=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n "$state" && "$state" != Z ]]
}

# cluster.name from a topology file (block style, as docs/interfaces.md shows it). The agent
# registers under this name, and its token must be issued for it.
cluster_name() {
  awk '
    /^[^[:space:]#]/ { in_cluster = ($0 ~ /^cluster:[[:space:]]*(#.*)?$/); next }
    in_cluster && /^[[:space:]]+name:/ {
      sub(/^[[:space:]]+name:[[:space:]]*/, ""); sub(/[[:space:]]*#.*$/, ""); gsub(/["\047]/, "")
      print; exit
    }' "$1"
}

# Sends SIGTERM, waits up to $2 seconds for the process to go, then SIGKILL.
stop_process() {
  local pid=$1 grace=$2 name=$3
  alive "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  local deadline=$((SECONDS + grace))
  while alive "$pid" && ((SECONDS < deadline)); do sleep 0.2; done
  if alive "$pid"; then
    warn "$name (pid $pid) did not stop within ${grace}s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

# A PostgreSQL whose server was killed outright would outlive it and hold the data folder.
stop_orphan_postgres() {
  local pidfile=$DATA_DIR/postgres/pgdata/postmaster.pid pid
  [[ -f "$pidfile" ]] || return 0
  pid=$(head -n 1 "$pidfile" 2>/dev/null || true)
  [[ "$pid" =~ ^[0-9]+$ ]] || return 0
  if running "$pid" && [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == postgres* ]]; then
    warn "stopping PostgreSQL left running in $DATA_DIR/postgres (pid $pid)"
    # SIGINT is PostgreSQL's "fast" shutdown: roll back sessions, checkpoint, exit.
    kill -INT "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 30))
    while running "$pid" && ((SECONDS < deadline)); do sleep 0.2; done
    running "$pid" && die "PostgreSQL pid $pid did not stop; stop it and retry"
  fi
  return 0
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  if alive "$WATCH_PID"; then kill -TERM "$WATCH_PID" 2>/dev/null; wait "$WATCH_PID" 2>/dev/null; fi
  local stopped=0
  # Agents first, so none of them sees the server vanish and starts retrying; then the server,
  # which stops its embedded PostgreSQL itself (hence the longer grace period).
  local name
  for name in "${!AGENT_PIDS[@]}"; do
    if alive "${AGENT_PIDS[$name]}"; then
      ((stopped == 0)) && say "stopping..."
      stopped=1
      kill -TERM "${AGENT_PIDS[$name]}" 2>/dev/null
    fi
  done
  for name in "${!AGENT_PIDS[@]}"; do
    stop_process "${AGENT_PIDS[$name]}" 15 "agent $name"
  done
  if alive "$SERVER_PID"; then
    ((stopped == 0)) && say "stopping..."
    stopped=1
    stop_process "$SERVER_PID" 60 "gpufed-server"
  fi
  stop_orphan_postgres
  rm -f "$RUN_DIR"/*.pid "$RUN_DIR/admin-config.yaml" "$RUN_DIR/tokens-create.err"
  if [[ -d "$LOG_DIR" ]]; then
    say "logs: $LOG_DIR/ (server.log, agent-<cluster>.log)"
  fi
  exit "$rc"
}

# ---------------------------------------------------------------------------------------------
# Preflight: everything the demo needs, checked before anything starts.

for prog in "$SERVER" "$AGENT" "$CTL"; do
  [[ -x "$prog" ]] || die "$prog not found; build first: make build (or run: make demo)"
done
for tool in curl jq timeout setsid openssl; do
  command -v "$tool" >/dev/null || die "'$tool' is missing; run: make deps"
done
CLUSTERS=()
declare -A TOPOLOGY_OF=()
for t in "${TOPOLOGY_FILES[@]}"; do
  file=$TOPOLOGY_DIR/$t.yaml
  [[ -f "$file" ]] || die "topology $file is missing"
  name=$(cluster_name "$file")
  [[ "$name" =~ ^[a-z0-9-]{1,63}$ ]] || die "$file: cannot read cluster.name (got '$name')"
  CLUSTERS+=("$name")
  TOPOLOGY_OF[$name]=$file
done
for f in train-gang.yaml batch.yaml; do
  [[ -f "$EXAMPLES_DIR/$f" ]] || die "example workload $EXAMPLES_DIR/$f is missing"
done
[[ "$DEMO_TIMEOUT" =~ ^[0-9]+$ ]] || die "DEMO_TIMEOUT must be a number of seconds"
if [[ -n "${DEMO_SECONDS:-}" && ! "$DEMO_SECONDS" =~ ^[0-9]+$ ]]; then
  die "DEMO_SECONDS must be a number of seconds"
fi

mkdir -p "$LOG_DIR" "$RUN_DIR"
# As root, the server runs its embedded PostgreSQL as the `postgres` user (PostgreSQL refuses
# root), and that user must be able to walk down to the data folder. A checkout under /root is
# closed to it: keep the database outside then, rather than opening up /root.
if [[ $(id -u) -eq 0 ]] && id postgres >/dev/null 2>&1 &&
  ! runuser -u postgres -- test -x "$DEMO_DIR" 2>/dev/null; then
  DATA_DIR=/var/tmp/gpufed-demo-$(printf '%s' "$DEMO_DIR" | md5sum | cut -c1-8)/data
  ADMIN_TOKEN_FILE=$DATA_DIR/admin.token
  AUDIT_KEY_FILE=$DATA_DIR/audit.key
  TLS_DIR=$DATA_DIR/tls
  mkdir -p "$(dirname "$DATA_DIR")"
  chmod 0755 "$(dirname "$DATA_DIR")"
  say "the postgres user cannot enter $DEMO_DIR; the demo database goes to $DATA_DIR"
fi
if [[ -f "$RUN_DIR/server.pid" ]]; then
  old=$(cat "$RUN_DIR/server.pid")
  if [[ "$old" =~ ^[0-9]+$ ]] && [[ "$(cat "/proc/$old/comm" 2>/dev/null)" == gpufed-server ]]; then
    die "a demo is already running from $DEMO_DIR (server pid $old); stop it (Ctrl-C) first"
  fi
fi

split_addr "$GRPC_LISTEN"
GRPC_HOST=$ADDR_HOST
GRPC_PORT=$ADDR_PORT
split_addr "$HTTP_LISTEN"
HTTP_HOST=$ADDR_HOST
HTTP_PORT=$ADDR_PORT
for pair in "gRPC $GRPC_HOST $GRPC_PORT GPUFED_GRPC_LISTEN" "HTTP $HTTP_HOST $HTTP_PORT GPUFED_HTTP_LISTEN"; do
  read -r what host port var <<<"$pair"
  if [[ "$port" != 0 ]] && port_in_use "$host" "$port"; then
    die "port $port ($what, $host) is already in use. Stop what holds it or pick another:" \
      "$var=127.0.0.1:<port> make demo"
  fi
done

trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------------------------------------
# Server.

stop_orphan_postgres
# Every run starts from an empty pool: a fresh database, a fresh bootstrap admin token. The
# server creates the folder; PostgreSQL keeps its own part private (0700).
rm -rf "$DATA_DIR"
rm -f "$READY_FILE" "$LOG_DIR"/*.log

# A local CA and a server certificate for the names the demo dials (and the listen host when it
# is another), so that gRPC and HTTP serve TLS and every client verifies the server.
say "making a local CA and a server certificate in $TLS_DIR"
cert_names=(localhost 127.0.0.1 ::1)
for h in "$GRPC_HOST" "$HTTP_HOST"; do
  [[ " ${cert_names[*]} " == *" $h "* ]] || cert_names+=("$h")
done
"$ROOT/scripts/make-dev-certs.sh" "$TLS_DIR" "${cert_names[@]}" >/dev/null ||
  die "could not make the demo's certificates (openssl)"
CA_FILE=$TLS_DIR/ca.crt

# The key of the audit trail's hash chain (docs/security.md#audit): 256 random bits, readable by
# the server's user only.
(umask 077 && openssl rand -hex 32 >"$AUDIT_KEY_FILE") || die "could not make the audit key"

say "starting gpufed-server (embedded PostgreSQL in $DATA_DIR/postgres)"
# setsid: a Ctrl-C in this terminal reaches only this script, which then stops the agents and
# the server in order. Without it the server and its PostgreSQL would get SIGINT at the same
# moment as everyone else.
setsid "$SERVER" \
  --grpc-listen "$GRPC_LISTEN" \
  --http-listen "$HTTP_LISTEN" \
  --data-dir "$DATA_DIR" \
  --admin-token-file "$ADMIN_TOKEN_FILE" \
  --audit-key-file "$AUDIT_KEY_FILE" \
  --ready-file "$READY_FILE" \
  --log-level "$LOG_LEVEL" \
  --tls-cert-file "$TLS_DIR/server.crt" \
  --tls-key-file "$TLS_DIR/server.key" \
  --cluster-ca-cert-file "$TLS_DIR/cluster-ca.crt" \
  --cluster-ca-key-file "$TLS_DIR/cluster-ca.key" \
  </dev/null >"$LOG_DIR/server.log" 2>&1 &
SERVER_PID=$!
echo "$SERVER_PID" >"$RUN_DIR/server.pid"

# The ready file appears once both listeners are bound, which needs PostgreSQL initialised and
# migrated first: allow for a slow first initdb.
deadline=$((SECONDS + 120))
until [[ -s "$READY_FILE" ]] && jq -e '.grpc_port and .http_port' "$READY_FILE" >/dev/null 2>&1; do
  if ! alive "$SERVER_PID"; then
    show_log "$LOG_DIR/server.log"
    die "gpufed-server exited during start-up (log: $LOG_DIR/server.log)"
  fi
  ((SECONDS < deadline)) || {
    show_log "$LOG_DIR/server.log"
    die "gpufed-server did not become ready within 120s"
  }
  sleep 0.2
done
GRPC_PORT=$(jq -r .grpc_port "$READY_FILE")
HTTP_PORT=$(jq -r .http_port "$READY_FILE")
GRPC_ADDR="$(dial_host "$GRPC_HOST"):$GRPC_PORT"
HTTP_URL="https://$(dial_host "$HTTP_HOST"):$HTTP_PORT"

deadline=$((SECONDS + 60))
until curl -fsS -o /dev/null --max-time 2 --cacert "$CA_FILE" "$HTTP_URL/readyz"; do
  alive "$SERVER_PID" || {
    show_log "$LOG_DIR/server.log"
    die "gpufed-server exited"
  }
  ((SECONDS < deadline)) || die "$HTTP_URL/readyz did not answer 200 within 60s"
  sleep 0.2
done
say "server ready (TLS): gRPC $GRPC_ADDR, HTTPS $HTTP_URL (pid $SERVER_PID)"

[[ -s "$ADMIN_TOKEN_FILE" ]] || die "no bootstrap admin token in $ADMIN_TOKEN_FILE"
ADMIN_TOKEN=$(tr -d '[:space:]' <"$ADMIN_TOKEN_FILE")

# ---------------------------------------------------------------------------------------------
# Tenant, projects, tokens.

# gpufedctl as the platform admin. Commands are echoed (without the token) so the output doubles
# as a walkthrough. An explicit --config keeps a stale ~/.config/gpufed/config.yaml out of it;
# the token stays in that 0600 file, off the command line, where ps would show it.
ADMIN_CONFIG=$RUN_DIR/admin-config.yaml
(
  umask 077
  printf 'server: %s\ntoken: %s\nca_file: %s\n' "$GRPC_ADDR" "$ADMIN_TOKEN" "$CA_FILE" \
    >"$ADMIN_CONFIG"
)
admin() {
  echo "  \$ gpufedctl$(printf ' %q' "$@")" >&2
  "$CTL" --config "$ADMIN_CONFIG" "$@"
}
# gpufedctl as the demo user, through the configuration file the demo writes.
user() { "$CTL" --config "$CONFIG_FILE" "$@"; }

# `tokens create` prints the secret on stdout; it is the only thing there shaped like
# gpf_<base64url>. Its note on stderr ("store it now") is shown only if the call fails, since
# the demo does store it.
create_token() {
  local out err=$RUN_DIR/tokens-create.err
  echo "  \$ gpufedctl tokens create$(printf ' %q' "$@")" >&2
  if ! out=$("$CTL" --config "$ADMIN_CONFIG" tokens create "$@" 2>"$err"); then
    cat "$err" >&2
    die "gpufedctl tokens create $* failed"
  fi
  grep -oE 'gpf_[A-Za-z0-9_-]+' <<<"$out" | head -n 1
}

say "creating tenant 'demo' with projects 'research' and 'inference'"
admin tenants create demo --display-name "Demo tenant" >/dev/null
admin projects create demo research >/dev/null
admin projects create demo inference >/dev/null
USER_TOKEN=$(create_token --role tenant-user --subject demo-user --tenant demo)
[[ -n "$USER_TOKEN" ]] || die "tokens create printed no token"

mkdir -p "$(dirname "$CONFIG_FILE")"
if [[ -f "$CONFIG_FILE" ]]; then
  cp -p "$CONFIG_FILE" "$CONFIG_FILE.bak"
  say "saved the previous $CONFIG_FILE as $CONFIG_FILE.bak"
fi
(
  umask 077
  cat >"$CONFIG_FILE.tmp" <<EOF
# Written by gpufed's scripts/demo.sh for the demo user (tenant-user in tenant demo).
server: $GRPC_ADDR
ca_file: $CA_FILE
token: $USER_TOKEN
tenant: demo
project: research
EOF
)
chmod 0600 "$CONFIG_FILE.tmp"
mv -f "$CONFIG_FILE.tmp" "$CONFIG_FILE"
say "wrote $CONFIG_FILE (mode 0600)"

# ---------------------------------------------------------------------------------------------
# Agents.

mkdir -p "$DEMO_DIR/agents"
chmod 0700 "$DEMO_DIR/agents"
# Each cluster gets its client certificate from the server's cluster CA (mutual TLS): the
# certificate names the cluster, and the agent speaks for that cluster only, with no token.
for c in "${CLUSTERS[@]}"; do
  echo "  \$ gpufedctl clusters enroll $c --out-dir $DEMO_DIR/agents" >&2
  "$CTL" --config "$ADMIN_CONFIG" clusters enroll "$c" --out-dir "$DEMO_DIR/agents" >/dev/null ||
    die "gpufedctl clusters enroll $c failed"
done

say "starting three agents (simulated backends)"
for c in "${CLUSTERS[@]}"; do
  setsid "$AGENT" \
    --server "$GRPC_ADDR" \
    --ca-file "$CA_FILE" \
    --cert-file "$DEMO_DIR/agents/$c.crt" \
    --key-file "$DEMO_DIR/agents/$c.key" \
    --topology "${TOPOLOGY_OF[$c]}" \
    --backend sim \
    --work-dir "$DATA_DIR/agent-$c" \
    --log-level "$LOG_LEVEL" \
    </dev/null >"$LOG_DIR/agent-$c.log" 2>&1 &
  AGENT_PIDS[$c]=$!
  echo "$!" >"$RUN_DIR/agent-$c.pid"
done

# Every agent must have registered and the cluster be ready before the batch goes in.
check_agents() {
  local c
  for c in "${!AGENT_PIDS[@]}"; do
    if ! alive "${AGENT_PIDS[$c]}"; then
      show_log "$LOG_DIR/agent-$c.log"
      die "the agent for $c exited (log: $LOG_DIR/agent-$c.log)"
    fi
  done
  if ! alive "$SERVER_PID"; then
    show_log "$LOG_DIR/server.log"
    die "gpufed-server exited (log: $LOG_DIR/server.log)"
  fi
}

# "name state" per cluster, whatever the exact JSON nesting.
cluster_states() {
  user -o json clusters 2>/dev/null |
    jq -r '.. | objects | select(has("name") and has("state")) | "\(.name) \(.state)"' 2>/dev/null
}

deadline=$((SECONDS + 60))
while :; do
  check_agents
  states=$(cluster_states || true)
  ready=0
  for c in "${CLUSTERS[@]}"; do
    if grep -qiE "^$c [a-z_]*ready\$" <<<"$states"; then ready=$((ready + 1)); fi
  done
  ((ready == ${#CLUSTERS[@]})) && break
  if ((SECONDS >= deadline)); then
    echo "gpufedctl clusters says:" >&2
    user clusters >&2 || true
    die "not all of ${CLUSTERS[*]} became ready within 60s (logs: $LOG_DIR/agent-*.log)"
  fi
  sleep 0.5
done
say "all three clusters registered:"
user clusters
echo

# ---------------------------------------------------------------------------------------------
# The batch.

SUBMITTED=0
FIRST_ID=""

# Submits through gpufedctl (as the demo user) and counts the workloads the server acknowledged;
# a file may hold several. The command is echoed first, as a user would type it.
submit() {
  local what=$1
  shift
  echo "  \$ gpufedctl submit$(printf ' %q' "$@")" | sed "s#$ROOT/##g"
  local out n
  out=$(user -o json submit "$@") || die "submitting $what failed"
  n=$(jq -s '[.[] | .. | objects | select(has("id") and has("spec"))] | length' <<<"$out")
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "submitting $what: no workload in the reply: $out"
  SUBMITTED=$((SUBMITTED + n))
  if [[ -z "$FIRST_ID" ]]; then
    FIRST_ID=$(jq -rs 'first(.[] | .. | objects | select(has("id") and has("spec")) | .id)' \
      <<<"$out")
  fi
}

say "submitting a mixed batch (tenant demo):"
# A 2 x 8 H100-80GB training gang: both replicas start together or not at all.
submit "the training gang" -f "$EXAMPLES_DIR/train-gang.yaml"
# Single-GPU batch jobs, several YAML documents in one file, any GPU model.
submit "the batch jobs" -f "$EXAMPLES_DIR/batch.yaml"
# More single-GPU jobs, with flags; after `--` comes the command the backend would run.
for i in 1 2 3; do
  submit "single-$i" --name "single-$i" --class batch --gpus 1 --duration "$((2 + i))s" \
    -- ./preprocess.sh --shard "$i"
done
# Small inference jobs on the edge site's L4s, in the other project.
for i in 1 2 3 4; do
  submit "infer-$i" --name "infer-$i" --project inference --class inference --priority 5 \
    --gpus 1 --model L4 --duration 3s --env MODEL=llama-3-8b -- serve --port 8000
done
# A100 batch jobs, two GPUs each, either A100 size.
for i in 1 2 3; do
  submit "batch-a100-$i" --name "batch-a100-$i" --class batch --gpus 2 --model A100-80GB \
    --model A100-40GB --duration 4s -- ./etl.sh --part "$i"
done
say "$SUBMITTED workloads submitted"
echo
user clusters
echo

# Live state changes, while the loop below decides when everything is done.
say "watching (gpufedctl watch):"
# Started directly (not through `user`), so that $! is gpufedctl itself and not a subshell
# that would leave it running when killed.
"$CTL" --config "$CONFIG_FILE" watch </dev/null &
WATCH_PID=$!

# "name state" for every workload of the demo tenant: the data folder is new, so that is
# exactly what this run submitted.
workload_states() {
  user -o json list --limit 1000 2>/dev/null |
    jq -r '.. | objects | select(has("state") and has("spec")) | "\(.spec.name) \(.state)"' \
      2>/dev/null
}

deadline=$((SECONDS + DEMO_TIMEOUT))
last=""
while :; do
  check_agents
  states=$(workload_states || true)
  total=0
  succeeded=0
  failed=()
  while read -r name state; do
    [[ -n "$name" ]] || continue
    total=$((total + 1))
    case "${state^^}" in
      *SUCCEEDED) succeeded=$((succeeded + 1)) ;;
      *FAILED | *CANCELLED) failed+=("$name ($state)") ;;
    esac
  done <<<"$states"
  progress="$succeeded/$SUBMITTED succeeded"
  if [[ "$progress" != "$last" ]]; then
    say "$progress"
    last=$progress
  fi
  ((total >= SUBMITTED && succeeded == total)) && break
  if ((${#failed[@]} > 0)) || ((SECONDS >= deadline)); then
    kill -TERM "$WATCH_PID" 2>/dev/null || true
    echo >&2
    user list >&2 || true
    ((${#failed[@]} > 0)) && die "workloads did not succeed: ${failed[*]}"
    die "only $succeeded of $SUBMITTED workloads succeeded within ${DEMO_TIMEOUT}s" \
      "(logs: $LOG_DIR/)"
  fi
  sleep 0.5
done
kill -TERM "$WATCH_PID" 2>/dev/null || true
wait "$WATCH_PID" 2>/dev/null || true
WATCH_PID=""

echo
say "every workload SUCCEEDED:"
user list
echo
say "what they used, metered from each agent-confirmed start to its end (chargeback):"
user report --period whole --by cluster,gpu_model
echo

# ---------------------------------------------------------------------------------------------
# How to use it.

example_id=${FIRST_ID:-<id>}
config_hint=""
if [[ -n "${GPUFED_CONFIG:-}" ]]; then config_hint="export GPUFED_CONFIG=$CONFIG_FILE"$'\n'"  "; fi
cat <<EOF
gpufed is running over TLS: gRPC $GRPC_ADDR, metrics $HTTP_URL/metrics, 3 simulated clusters.
The demo's CA is $CA_FILE (it signed the server's certificate, $TLS_DIR/server.crt).
$CONFIG_FILE holds the demo user's server, CA file, token, tenant and project, so:

  ${config_hint}alias gpufedctl=$CTL
  gpufedctl clusters                  # the pool: clusters, state, GPUs free/total
  gpufedctl clusters --nodes          # down to nodes and GPUs
  gpufedctl list                      # your tenant's workloads, newest first
  gpufedctl get $example_id                     # one workload: spec, state, placement
  gpufedctl watch                     # stream state changes (Ctrl-C to stop)
  gpufedctl submit --name hello --gpus 1 --duration 30s -- echo hello
  gpufedctl submit --name gang --replicas 2 --gpus 8 --model H100-80GB --duration 60s
                                      # a 16-GPU gang: all replicas placed together or none
  gpufedctl submit -f $ROOT/examples/inference-small.yaml
  gpufedctl cancel <id>
  gpufedctl -o json list              # any command, as JSON
  gpufedctl report --by tenant,gpu_model --period day
                                      # GPU-hours, cost, effective GPU-hours, utilisation
  gpufedctl telemetry <id>            # a running workload's GPU telemetry, per minute
  curl --cacert $CA_FILE $HTTP_URL/metrics
                                      # Prometheus metrics; also /healthz, /readyz

Logs: $LOG_DIR/ (server.log, agent-<cluster>.log)
EOF

if [[ -n "${DEMO_SECONDS:-}" ]]; then
  say "running for ${DEMO_SECONDS}s (DEMO_SECONDS)"
  end=$((SECONDS + DEMO_SECONDS))
else
  say "running; press Ctrl-C to stop"
  end=-1
fi
while ((end < 0 || SECONDS < end)); do
  check_agents
  # `wait` on a background sleep lets Ctrl-C interrupt at once instead of after the sleep.
  sleep 1 &
  wait $! || true
done
