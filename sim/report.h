#ifndef GPUFED_SIM_REPORT_H_
#define GPUFED_SIM_REPORT_H_

// Replay results as JSON (what `gpufedctl sim replay -o json` prints) and the mean over seeds.
//
// One run: {"mode", "policy", "seed", "tie_order", "inflation", "gpus_total", "pods", "placed",
// "failed", "final_allocation_ratio", "paper_allocation_ratio", "allocation_bound",
// "bound_premise_failures", "run_allocation_bound", "unallocated_gpus", "failed_gpu_milli",
// "wall_seconds", "cpu_seconds", "curve": [{"arrived_ratio", "allocation_ratio"}]}; time mode adds
// "time":
// {"start_time", "end_time", "started", "completed", "still_running", "still_queued",
// "rejected", "wait_seconds": {"mean", "p50", "p99", "max"}, "mean_allocation_ratio",
// "utilisation": [{"time", "allocation_ratio", "queued", "running"}]}. Ratios are 0..1.
//
// Thread safety: stateless functions.

#include <cstdint>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "sim/replay.h"

namespace gpufed::sim {

nlohmann::json ToJson(const ReplayResult& result);

// The mean over the runs of one policy (with the same mode and inflation).
struct PolicySummary {
  std::string policy;
  std::vector<uint64_t> seeds;
  double mean_final_allocation_ratio = 0;
  double mean_paper_allocation_ratio = 0;
  // Standard error of that mean: sample standard deviation / sqrt(seeds); 0 for one seed.
  double stderr_paper_allocation_ratio = 0;
  double mean_allocation_bound = 0;     // snapshot mode
  uint64_t bound_premise_failures = 0;  // over all its runs
  double mean_run_allocation_bound = 0;
  double mean_unallocated_gpus = 0;
  double mean_placed = 0;
  double mean_failed = 0;
  double mean_wall_seconds = 0;
  double max_wall_seconds = 0;
  double mean_cpu_seconds = 0;
};

// One summary per policy, in the order policies first appear in `results`.
std::vector<PolicySummary> Summarise(const std::vector<ReplayResult>& results);

// {"policy", "seeds", "mean_final_allocation_ratio", ...}: the PolicySummary's fields.
nlohmann::json ToJson(const PolicySummary& summary);

}  // namespace gpufed::sim

#endif  // GPUFED_SIM_REPORT_H_
