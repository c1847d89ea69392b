#!/usr/bin/env bash
# Runs scripts/demo.sh end to end, as `make demo` does, in a private folder and on free ports,
# stopping as soon as the batch has succeeded (DEMO_SECONDS=0). The demo fails by itself when a
# step fails or a workload does not succeed; this adds what it leaves behind: the gpufedctl
# configuration it wrote, and no process still running afterwards.
#
# usage: demo_test.sh SOURCE_DIR BIN_DIR
set -euo pipefail

src=${1:?usage: $0 SOURCE_DIR BIN_DIR}
bin=${2:?usage: $0 SOURCE_DIR BIN_DIR}

fail() {
  echo "FAIL: $*"
  exit 1
}

work=$(mktemp -d)
# The server may run its embedded PostgreSQL as an unprivileged user when started as root.
chmod 0755 "$work"
keep_on_failure() {
  local rc=$?
  if [[ $rc -ne 0 ]]; then
    for f in "$work"/demo/logs/*.log; do
      [[ -s "$f" ]] || continue
      echo "---- $f (last 40 lines)"
      tail -n 40 "$f"
    done
  fi
  rm -rf "$work"
  exit "$rc"
}
trap keep_on_failure EXIT

rc=0
DEMO_DIR=$work/demo GPUFED_CONFIG=$work/config/config.yaml GPUFED_BIN_DIR=$bin \
  GPUFED_GRPC_LISTEN=127.0.0.1:0 GPUFED_HTTP_LISTEN=127.0.0.1:0 DEMO_SECONDS=0 \
  DEMO_TIMEOUT=${DEMO_TIMEOUT:-240} "$src/scripts/demo.sh" </dev/null || rc=$?
[[ $rc -eq 0 ]] || fail "scripts/demo.sh exited $rc"

config=$work/config/config.yaml
[[ -f "$config" ]] || fail "the demo wrote no $config"
mode=$(stat -c %a "$config")
[[ "$mode" == 600 ]] || fail "$config has mode $mode, want 600"
grep -qE '^token: gpf_[A-Za-z0-9_-]+$' "$config" || fail "$config holds no token"
grep -qE '^tenant: demo$' "$config" || fail "$config does not name tenant demo"
grep -qE '^project: research$' "$config" || fail "$config does not name project research"

for pidfile in "$work"/demo/run/*.pid; do
  [[ -e "$pidfile" ]] || continue
  fail "the demo left $pidfile behind"
done
# Everything the demo started ran with its folder on the command line.
for proc in /proc/[0-9]*; do
  cmdline=$(tr '\0' ' ' <"$proc/cmdline" 2>/dev/null) || continue
  if [[ "$cmdline" == *"$work/demo"* ]]; then
    fail "a process outlived the demo: pid ${proc#/proc/}: $cmdline"
  fi
done
pm=$work/demo/data/postgres/pgdata/postmaster.pid
if [[ -f "$pm" ]] && kill -0 "$(head -n 1 "$pm")" 2>/dev/null; then
  fail "the embedded PostgreSQL outlived the demo"
fi
echo "demo test passed"
