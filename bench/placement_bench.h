#ifndef GPUFED_BENCH_PLACEMENT_BENCH_H_
#define GPUFED_BENCH_PLACEMENT_BENCH_H_

// `gpufed-bench placement`: the placement engine and the capacity pool alone, in memory, on a
// generated federation (issue #3, point 9). No server, no PostgreSQL.

#include <cstdint>
#include <string>

namespace gpufed::bench {

struct PlacementBenchOptions {
  uint32_t gpus = 100000;     // GPUs in the whole federation
  uint32_t clusters = 1000;   // clusters they are spread over
  uint64_t count = 200000;    // measured placements
  uint64_t warmup = 0;        // placements before measuring, after the fill (0: count / 10)
  double utilisation = 0.80;  // target share of GPU capacity held; departures keep it there
  std::string policy = "gpufed";
  uint64_t seed = 1;
  int max_clusters_scored = 0;  // 0: the engine's default
  // Also print "decisions_digest": federation/decision_digest.h over every decision (where each
  // replica goes, MIG changes, never fits), to check that a change to the engine changes none.
  bool digest = false;
  // PlacementOptions::accelerate: false decides every request from scratch (same decisions,
  // slower), to compare digests and speed.
  bool accelerate = true;
};

// Builds the federation, fills it to the target, runs the measured stream and prints a summary
// to stderr and one JSON object as the last line of stdout. Returns the process exit code
// (non-zero when the pool refuses one of the engine's placements, or bad options).
int RunPlacementBench(const PlacementBenchOptions& options);

}  // namespace gpufed::bench

#endif  // GPUFED_BENCH_PLACEMENT_BENCH_H_
