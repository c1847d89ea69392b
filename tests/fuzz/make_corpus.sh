#!/usr/bin/env bash
# (Re)writes the seed corpora under tests/fuzz/corpus/ from the project's own files: the RPC
# targets' seeds with fuzz_make_seeds (make_seeds.cc), the file targets' by copying examples,
# topologies and the first rows of each bundled openb CSV. Files saved from findings
# (regress-*) are left alone.
#
# Usage: tests/fuzz/make_corpus.sh [BUILD_DIR]   (default build-fuzz; built by make fuzz)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build-fuzz}
corpus="$root/tests/fuzz/corpus"

"$build/bin/fuzz_make_seeds" "$root" "$corpus"

mkdir -p "$corpus"/{workload_yaml,clusters_yaml,topology,scenario_yaml,openb}
for f in "$root"/examples/*.yaml; do
  [[ "$(basename "$f")" == clusters.yaml ]] && continue
  cp "$f" "$corpus/workload_yaml/"
done
cp "$root/examples/clusters.yaml" "$corpus/clusters_yaml/"
cp "$root"/deploy/topologies/*.yaml "$corpus/topology/"
cp "$root"/examples/scenarios/*.yaml "$corpus/scenario_yaml/"
for f in "$root"/data/traces/alibaba-gpu-v2023/csv/*.csv; do
  head -n 12 "$f" >"$corpus/openb/$(basename "$f")"
done
# Pods that name GPU models (gpu_spec), which the first rows of a pod list rarely do.
pods="$root/data/traces/alibaba-gpu-v2023/csv/openb_pod_list_gpuspec10.csv"
{ head -n 1 "$pods"; grep -m 8 -E '^([^,]*,){5}[^,]+' "$pods"; } >"$corpus/openb/gpu_spec_pods.csv"
