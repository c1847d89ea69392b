#ifndef GPUFED_SIM_SCENARIO_H_
#define GPUFED_SIM_SCENARIO_H_

// Quota scenarios (docs/scenarios.md): the live scheduling code (the control plane, its loop and
// the scheduler, on the in-memory stores) run over simulated time against a described pool with
// tenants, projects, quotas, weights and workload streams, with simulated agents that start what
// they are given at once, end it when its duration has passed, and stop what they are told to
// after a grace. `gpufedctl sim run SCENARIO.yaml` parses the file (cli/scenario_yaml.h) and
// prints the report.
//
// Deterministic for a seed: arrivals and durations come from one seeded generator, time from a
// FakeClock.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "federation/quota.h"
#include "nlohmann/json.hpp"

namespace gpufed::sim {

struct ScenarioCluster {
  std::string name;
  int nodes = 1;
  int gpus_per_node = 8;
  std::string model = "H100-80GB";
};

// A stream of workloads of one tenant and project.
struct ScenarioStream {
  std::string tenant;
  std::string project;
  // Arrivals: `count` workloads spread evenly over [start, end), or Poisson arrivals at
  // `per_hour` in that window (one of the two).
  int64_t count = 0;
  double per_hour = 0;
  std::chrono::seconds start{0};
  std::optional<std::chrono::seconds> end;  // default: the scenario's end
  // Sizes: GPUs per replica, chosen uniformly from `gpus`; `replicas` per workload (a gang).
  std::vector<uint32_t> gpus = {1};
  uint32_t replicas = 1;
  // Duration: exponential with this mean, or fixed when `fixed_duration`.
  std::chrono::seconds duration{3600};
  bool fixed_duration = false;
  int32_t priority = 0;
  // Checkpointable: the workloads save their progress this often (0: they do not).
  std::chrono::seconds checkpoint_every{0};
};

struct ScenarioProject {
  std::string name;
  int64_t weight = 1;
  std::vector<Quota> quotas;  // key.tenant and key.project filled in
};

struct ScenarioTenant {
  std::string name;
  int64_t weight = 1;
  std::vector<Quota> quotas;
  std::vector<ScenarioProject> projects;
};

struct Scenario {
  std::string name;
  uint64_t seed = 1;
  std::chrono::seconds cycle{10};         // simulated time between scheduling cycles
  std::chrono::seconds duration{86400};   // simulated time in all
  std::chrono::seconds warmup{0};         // not counted in shares and utilisation
  std::chrono::seconds half_life{86400};  // fair-share usage decay
  std::chrono::seconds stop_grace{0};     // an evicted workload stops this long after asked
  std::chrono::seconds reclaim_min_runtime{0};
  std::chrono::seconds reborrow_backoff{30};
  std::chrono::seconds starvation_bound{30 * 60};  // 0: never
  std::vector<ScenarioCluster> clusters;
  std::vector<ScenarioTenant> tenants;
  std::vector<ScenarioStream> streams;
};

struct TenantReport {
  std::string name;
  int64_t weight = 1;
  double fair_share = 0;       // weight / the weights of the tenants in the scenario
  double mean_share = 0;       // of what is allocated, mean over the cycles after warm-up
  double gpu_hours = 0;        // after warm-up
  double gpu_hours_share = 0;  // of every tenant's GPU-hours after warm-up
  int64_t submitted = 0;
  int64_t finished = 0;
  // Cycles from submission to first placement: the longest (counting those never placed as
  // waiting to the end) and the mean over those placed; and how many were never placed. A
  // starving gang shows here.
  int64_t max_wait_cycles = 0;
  double mean_wait_cycles = 0;
  int64_t never_placed = 0;
};

struct ScenarioReport {
  std::string name;
  int64_t cycles = 0;
  int64_t submitted = 0;
  int64_t finished = 0;
  // Worst tenant: |mean_share / fair_share - 1| after warm-up, at most 1, and the same for its
  // share of the GPU-hours.
  double max_deviation = 0;
  double max_gpu_hours_deviation = 0;
  // Over the owners (work within its guarantee the scheduler left waiting): cycles from the first
  // such cycle to the one that placed it, not counting cycles in which its victims were still
  // stopping.
  int64_t max_owner_wait_cycles = 0;
  int64_t reclaims = 0;
  double max_eviction_ratio = 0;  // evicted / needed GPU-equivalents, worst reclaim
  int64_t preemptions = 0;        // workloads stopped
  double gpu_seconds_lost = 0;
  // The same run with victims taken newest first, checkpoints ignored (VictimOrder::
  // kNewestFirst); run only when the scenario reclaimed anything (else 0).
  double gpu_seconds_lost_newest_first = 0;
  double mean_utilisation = 0;  // allocated / the pool's GPUs, mean after warm-up
  std::vector<TenantReport> tenants;
};

// INVALID_ARGUMENT naming what is wrong (an unknown tenant in a stream, a bad quota, ...).
absl::StatusOr<ScenarioReport> RunScenario(const Scenario& scenario);

// {"name", "cycles", ..., "tenants": [{"name", "weight", "fair_share", "mean_share", ...}]}:
// every field of the report under its own name.
nlohmann::json ToJson(const ScenarioReport& report);

}  // namespace gpufed::sim

#endif  // GPUFED_SIM_SCENARIO_H_
