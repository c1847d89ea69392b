#!/usr/bin/env bash
# Runs gpufed's headline benchmarks and prints their closing figures:
#
#   gpufed-bench submit --clients 8 --count 20000   durable, acknowledged submissions against a
#                                                   real server and its PostgreSQL
#   gpufed-bench e2e --jobs 5000                    first submit to last SUCCEEDED, through a real
#                                                   agent with the process backend
#   gpufed-bench placement --gpus 100000 --clusters 1000
#                                                   the placement engine and capacity pool alone,
#                                                   in memory, on a generated federation
#
# submit and e2e start their own server (embedded PostgreSQL in a temporary folder). Each prints
# its figures as one JSON object on its last line, which is what the summary shows.
#
# Figures depend on the machine and whatever else runs on it; nothing here passes or fails on
# speed. A run fails only when a benchmark itself fails.
#
# Environment:
#   GPUFED_BIN_DIR   where gpufed-bench is (default build/bin)
#   BENCH_LOG_DIR    where the full output goes (default build/bench)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN_DIR=${GPUFED_BIN_DIR:-$ROOT/build/bin}
BENCH=$BIN_DIR/gpufed-bench
LOG_DIR=${BENCH_LOG_DIR:-$(dirname "$BIN_DIR")/bench}

[[ -x "$BENCH" ]] || {
  echo "bench: $BENCH not found; build first: make build" >&2
  exit 1
}
mkdir -p "$LOG_DIR"

runs=(
  "submit --clients 8 --count 20000"
  "e2e --jobs 5000"
  "placement --gpus 100000 --clusters 1000"
)

summary=()
status=0
for args in "${runs[@]}"; do
  name=${args%% *}
  log=$LOG_DIR/$name.log
  echo "== gpufed-bench $args   (full output: $log)"
  # Output streams live so a long run shows progress; the log keeps all of it.
  # shellcheck disable=SC2086  # $args is a list of words on purpose
  if "$BENCH" $args 2>&1 | tee "$log"; then
    summary+=("$name: $(grep -v '^[[:space:]]*$' "$log" | tail -n 1)")
  else
    status=1
    summary+=("$name: FAILED (see $log)")
  fi
  echo
done

echo "== summary"
printf '%s\n' "${summary[@]}"
exit "$status"
