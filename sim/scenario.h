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
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "federation/quota.h"
#include "federation/types.h"
#include "nlohmann/json.hpp"

namespace gpufed::sim {

struct ScenarioCluster {
  std::string name;
  int nodes = 1;
  int gpus_per_node = 8;
  std::string model = "H100-80GB";
  // Routing (docs/routing.md): what its agent reports ...
  std::string provider = "sim";
  std::string region;
  std::string jurisdiction;
  std::vector<std::string> compliance_labels;
  // ... and what an admin declares: the capacity type of its nodes, of which the last
  // `spot_nodes` are spot; the price of one GPU-hour of its model per capacity type (micro-units;
  // none: unpriced); the round-trip time from client regions (microseconds).
  CapacityType capacity = CapacityType::kOnDemand;
  int spot_nodes = 0;
  std::map<CapacityType, int64_t> price_micros;
  std::map<std::string, int64_t> rtt_micros;
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
  // Where they may run and what they prefer (docs/routing.md).
  PlacementConstraints placement;
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
  // Run once per objective (cost, latency, balanced, and pack: blind to price and distance),
  // every stream's objective replaced by it, and report each (ScenarioReport::objectives).
  bool compare_objectives = false;
};

// What routing cost and how far work ran from its users, in one run.
struct RoutingReport {
  std::string objective;  // "as given" for a run with the streams' own objectives
  // Every GPU-hour run, priced by the cluster's price book for the capacity it ran on
  // (committed: 0; unpriced: 0 and counted in `unpriced_gpu_hours`), in currency units.
  double total_cost = 0;
  double unpriced_gpu_hours = 0;
  // Over every placement of a workload with a client region: the median round-trip time from
  // that region to the cluster it was placed on (undeclared RTTs are left out).
  double p50_client_rtt_ms = 0;
  int64_t placements = 0;
  // Placements that broke a stream's hard rule, checked here from the clusters as described
  // (jurisdiction, compliance labels, provider, region, clusters, max RTT, spot, price cap).
  int64_t residency_violations = 0;
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
  // Routing, for the run as given; with compare_objectives, also one per objective and the
  // cost of the cost-blind one (pack) beside them.
  RoutingReport routing;
  std::vector<RoutingReport> objectives;
  double cost_blind_total_cost = 0;
};

// INVALID_ARGUMENT naming what is wrong (an unknown tenant in a stream, a bad quota, ...).
absl::StatusOr<ScenarioReport> RunScenario(const Scenario& scenario);

// {"name", "cycles", ..., "tenants": [{"name", "weight", "fair_share", "mean_share", ...}]}:
// every field of the report under its own name.
nlohmann::json ToJson(const ScenarioReport& report);

}  // namespace gpufed::sim

#endif  // GPUFED_SIM_SCENARIO_H_
