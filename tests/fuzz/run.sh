#!/usr/bin/env bash
# Runs fuzz targets one after another, each for SECONDS over its corpus, and fails on the first
# finding (crash, sanitizer report, leak, timeout, out-of-memory). `make fuzz` and the short
# pass of `make test` call it; docs/fuzzing.md explains the output.
#
# Usage: tests/fuzz/run.sh [-b BUILD_DIR] SECONDS [TARGET...]
#   BUILD_DIR  the GPUFED_FUZZ=ON build (default: build-fuzz beside this checkout's root)
#   TARGET     e.g. workload_rpc (default: every target that has a corpus folder)
#
# Each target reads its seeds from tests/fuzz/corpus/<target>/ (never written) and keeps what it
# learns in BUILD_DIR/fuzz/corpus/<target>/, so later runs start from there. A finding's input
# is saved under BUILD_DIR/fuzz/artifacts/<target>/ and the log's tail is printed; the full log
# of each run is BUILD_DIR/fuzz/logs/<target>.log.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build="$root/build-fuzz"
if [[ "${1:-}" == "-b" ]]; then
  build=$(cd "$2" && pwd)
  shift 2
fi
if [[ $# -lt 1 || ! "$1" =~ ^[0-9]+$ ]]; then
  echo "usage: $0 [-b BUILD_DIR] SECONDS [TARGET...]" >&2
  exit 2
fi
seconds=$1
shift
seeds_root="$root/tests/fuzz/corpus"
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  for d in "$seeds_root"/*/; do targets+=("$(basename "$d")"); done
fi

# Readable stack traces; a leak is a finding too (ASan's default on Linux, said here for clarity).
symbolizer=/usr/lib/llvm-14/bin/llvm-symbolizer
[[ -x "$symbolizer" ]] && export ASAN_SYMBOLIZER_PATH="$symbolizer"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

mkdir -p "$build/fuzz/logs"
status=0
for t in "${targets[@]}"; do
  bin="$build/bin/${t}_fuzzer"
  if [[ ! -x "$bin" ]]; then
    echo "fuzz: $bin not built (make fuzz builds it)" >&2
    exit 2
  fi
  work="$build/fuzz/corpus/$t"
  artifacts="$build/fuzz/artifacts/$t"
  log="$build/fuzz/logs/$t.log"
  mkdir -p "$work" "$artifacts"
  # -timeout: one input taking 10 s is a finding; -rss_limit_mb: so is 2 GiB of memory.
  # -max_len: room for the largest seed (a scenario file of ~10 KiB).
  if "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
      -print_final_stats=1 -artifact_prefix="$artifacts/" "$work" "$seeds_root/$t" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
    corpus=$(find "$work" -type f | wc -l)
    printf 'fuzz: %-14s ok: %s runs in %ss (%s/s), cov %s, corpus %s\n' \
      "$t" "${runs:-?}" "$seconds" "${rate:-?}" "${cov:-?}" "$corpus"
  else
    echo "fuzz: $t FOUND something (log: $log; input under $artifacts/):" >&2
    tail -n 60 "$log" >&2
    status=1
    break
  fi
done
exit $status
