#!/usr/bin/env bash
# Runs the real programs with deploy/server.example.yaml and deploy/agent.example.yaml, the way
# the systemd units do (--config FILE), and checks what an operator relies on:
#   - the server accepts the example file, flags override it, it serves /healthz, /readyz and
#     /metrics, writes the bootstrap admin token with mode 0600;
#   - an agent started from the example file registers its cluster;
#   - SIGTERM (what `systemctl stop` sends) stops both cleanly, exit status 0, and the server's
#     embedded PostgreSQL stops with it.
#
# usage: example_configs.sh SOURCE_DIR BIN_DIR
set -euo pipefail

src=${1:?usage: $0 SOURCE_DIR BIN_DIR}
bin=${2:?usage: $0 SOURCE_DIR BIN_DIR}

fail() {
  echo "FAIL: $*"
  exit 1
}

for prog in gpufed-server gpufed-agent gpufedctl; do
  [[ -x "$bin/$prog" ]] || fail "$bin/$prog is missing"
done
for tool in curl jq; do command -v "$tool" >/dev/null || fail "$tool is missing (make deps)"; done

work=$(mktemp -d)
# The server may run its embedded PostgreSQL as an unprivileged user when started as root; that
# user must be able to reach the data folder.
chmod 0755 "$work"
server_pid=""
agent_pid=""

dump_logs() {
  local f
  for f in "$work"/*.log; do
    [[ -s "$f" ]] || continue
    echo "---- $f (last 40 lines)"
    tail -n 40 "$f"
  done
}

cleanup() {
  local rc=$?
  set +e
  for pid in "$agent_pid" "$server_pid"; do
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  done
  wait 2>/dev/null
  [[ $rc -ne 0 ]] && dump_logs
  # A PostgreSQL orphaned by a failed run must not outlive the test.
  local pm=$work/data/postgres/pgdata/postmaster.pid
  if [[ -f "$pm" ]]; then
    local pg
    pg=$(head -n 1 "$pm")
    if [[ "$pg" =~ ^[0-9]+$ ]] && kill -0 "$pg" 2>/dev/null; then
      kill -INT "$pg"
      local deadline=$((SECONDS + 30))
      while kill -0 "$pg" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
    fi
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT

# Waits up to $1 seconds for the command in the remaining arguments to succeed.
wait_for() {
  local limit=$1
  shift
  local deadline=$((SECONDS + limit))
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

# Waits up to $2 seconds for child $1 to exit; sets exit_status. Not for $(...): only this shell
# can wait for its children.
wait_exit() {
  local pid=$1 deadline=$((SECONDS + $2))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  kill -0 "$pid" 2>/dev/null && return 1
  exit_status=0
  wait "$pid" || exit_status=$?
}

# --- Certificates: the example files name /etc/gpufed/tls; the test makes its own.
"$src/scripts/make-dev-certs.sh" "$work/tls" localhost 127.0.0.1 >/dev/null ||
  fail "scripts/make-dev-certs.sh failed"
ca=$work/tls/ca.crt

# --- Server: the example file, with the paths and ports a test needs given as flags.
"$bin/gpufed-server" --config "$src/deploy/server.example.yaml" \
  --data-dir "$work/data" --admin-token-file "$work/data/admin.token" \
  --grpc-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 --ready-file "$work/ready.json" \
  --tls-cert-file "$work/tls/server.crt" --tls-key-file "$work/tls/server.key" \
  </dev/null >"$work/server.log" 2>&1 &
server_pid=$!

server_ready() {
  kill -0 "$server_pid" 2>/dev/null || fail "gpufed-server exited during start-up"
  [[ -s "$work/ready.json" ]] && jq -e '.grpc_port > 0 and .http_port > 0' "$work/ready.json" >/dev/null 2>&1
}
wait_for 120 server_ready || fail "no ready file within 120s"
grpc=127.0.0.1:$(jq -r .grpc_port "$work/ready.json")
http=https://127.0.0.1:$(jq -r .http_port "$work/ready.json")
echo "ok: server started from server.example.yaml (gRPC $grpc, HTTP $http)"

wait_for 60 curl -fsS -o /dev/null --cacert "$ca" "$http/readyz" || fail "/readyz did not answer 200"
curl -fsS -o /dev/null --cacert "$ca" "$http/healthz" || fail "/healthz did not answer 200"
curl -fsS --cacert "$ca" "$http/metrics" >"$work/metrics.txt" || fail "/metrics did not answer 200"
curl -fsS -o /dev/null "http://${http#https://}/healthz" 2>/dev/null &&
  fail "/healthz answered plaintext HTTP"
grep -q '^# TYPE ' "$work/metrics.txt" || fail "/metrics is not Prometheus text format"
echo "ok: /healthz, /readyz, /metrics over HTTPS (plaintext refused)"

[[ -s "$work/data/admin.token" ]] || fail "no admin token in $work/data/admin.token"
mode=$(stat -c %a "$work/data/admin.token")
[[ "$mode" == 600 ]] || fail "admin token file has mode $mode, want 600"
admin_token=$(tr -d '[:space:]' <"$work/data/admin.token")
echo "ok: admin token file, mode 600"

# --- Agent: the example file; its server, token and topology given as flags, its work_dir
# rewritten into the test folder (the example points at /var/lib).
topology=$src/deploy/topologies/edge-l4.yaml
# cluster.name from the topology: the token must be issued for the name the agent registers.
cluster=$(awk '/^[^[:space:]#]/ { c = ($0 ~ /^cluster:/); next }
               c && /^[[:space:]]+name:/ { print $2; exit }' "$topology")
[[ -n "$cluster" ]] || fail "$topology: no cluster.name"
token=$("$bin/gpufedctl" --server "$grpc" --ca-file "$ca" --token "$admin_token" \
  tokens create --role agent --subject "$cluster" --cluster "$cluster" |
  grep -oE 'gpf_[A-Za-z0-9_-]+' | head -n 1) || fail "tokens create failed"
(
  umask 077
  echo "$token" >"$work/agent.token"
)
sed -e "s#^work_dir:.*#work_dir: $work/agent-work#" -e "s#^ca_file:.*#ca_file: $ca#" \
  "$src/deploy/agent.example.yaml" \
  >"$work/agent.yaml"
"$bin/gpufed-agent" --config "$work/agent.yaml" --server "$grpc" --token-file "$work/agent.token" \
  --topology "$topology" </dev/null >"$work/agent.log" 2>&1 &
agent_pid=$!

registered() {
  kill -0 "$agent_pid" 2>/dev/null || fail "gpufed-agent exited"
  "$bin/gpufedctl" --server "$grpc" --ca-file "$ca" --token "$admin_token" -o json clusters 2>/dev/null |
    jq -e --arg c "$cluster" '[.. | objects | select(.name? == $c and has("state"))] | length > 0' \
      >/dev/null 2>&1
}
wait_for 60 registered || fail "the agent's cluster $cluster did not register within 60s"
echo "ok: agent started from agent.example.yaml registered $cluster"

# --- Shutdown as systemd does it: SIGTERM, agent first.
kill -TERM "$agent_pid"
wait_exit "$agent_pid" 30 || fail "gpufed-agent did not exit within 30s of SIGTERM"
agent_pid=""
[[ "$exit_status" == 0 ]] || fail "gpufed-agent exited $exit_status after SIGTERM, want 0"
echo "ok: agent stopped on SIGTERM, exit 0"

pg_pid=""
if [[ -f "$work/data/postgres/pgdata/postmaster.pid" ]]; then
  pg_pid=$(head -n 1 "$work/data/postgres/pgdata/postmaster.pid")
fi
kill -TERM "$server_pid"
wait_exit "$server_pid" 90 || fail "gpufed-server did not exit within 90s of SIGTERM"
server_pid=""
[[ "$exit_status" == 0 ]] || fail "gpufed-server exited $exit_status after SIGTERM, want 0"
# pg_ctl stop returns when PostgreSQL removes its pid file, a moment before the process is gone
# (and a container's PID 1 may be slow to reap it): allow a few seconds, count a zombie as gone.
pg_running() {
  [[ -r "/proc/$pg_pid/stat" ]] || return 1
  local state
  state=$(awk '{ print $3 }' "/proc/$pg_pid/stat" 2>/dev/null) || return 1
  [[ -n "$state" && "$state" != Z ]]
}
if [[ "$pg_pid" =~ ^[0-9]+$ ]]; then
  pg_gone() { ! pg_running; }
  wait_for 10 pg_gone || fail "the embedded PostgreSQL (pid $pg_pid) outlived the server"
fi
echo "ok: server stopped on SIGTERM, exit 0, embedded PostgreSQL stopped"
echo "all example config checks passed"
