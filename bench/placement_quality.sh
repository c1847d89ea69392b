#!/usr/bin/env bash
# Placement quality on the bundled openb traces (docs/simulator.md#quality): every policy on
# every bundled pod list, the FGD paper's protocol (inflation 1.3, ties to the first node of a
# random node order drawn per seed), seeds 1-10. For each list it prints gpufedctl's summary
# table: mean allocation at 130 % arrived demand, its standard error over the seeds, the headroom
# bound beside it, and the time per replay.
#
# Usage: bench/placement_quality.sh [POLICY|all] [SEEDS]     (defaults: all, 1-10)
# Environment: GPUFED_BIN_DIR (default build/bin), JOBS (lists replayed at once, default 2).
# Nothing here passes or fails on a figure; the run fails only when a replay fails.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${GPUFED_BIN_DIR:-$ROOT/build/bin}/gpufedctl
CSV=$ROOT/data/traces/alibaba-gpu-v2023/csv
POLICY=${1:-all}
SEEDS=${2:-1-10}
JOBS=${JOBS:-2}
LISTS=(default cpu050 cpu250 gpushare40 gpushare60 gpuspec10 multigpu20)

[[ -x "$BIN" ]] || { echo "placement_quality: $BIN not found; build first: make build" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

printf '%s\n' "${LISTS[@]}" | xargs -P "$JOBS" -I{} sh -c \
  "'$BIN' sim replay --nodes '$CSV/openb_node_list_gpu_node.csv' \
     --pods '$CSV/openb_pod_list_{}.csv' --policy '$POLICY' --inflation 1.3 --seeds '$SEEDS' \
     > '$OUT/{}.txt'"
for list in "${LISTS[@]}"; do
  echo "== $list"
  # The summary: the table after the blank line.
  sed -n '/^$/,$p' "$OUT/$list.txt" | sed '1d'
  echo
done
