#ifndef GPUFED_FEDERATION_PLACEMENT_H_
#define GPUFED_FEDERATION_PLACEMENT_H_

// The placement engine: one code path for the live scheduler and the trace simulator.
//
// For one workload it applies the hard filters (cluster ready, GPU model, memory, MIG profile,
// host CPU and memory), enumerates where each replica could go (whole GPUs kept inside the
// smallest NVLink domain that holds them, a share of one GPU, a free MIG instance, or an idle
// GPU repartitioned for the profile), lets the policy score each candidate, and packs gangs all
// or nothing into the smallest topology group — node, NVLink domain, rack, block, cluster — that
// holds them. When nothing fits it says why, naming the nearest blocker.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "federation/pending_reason.h"
#include "federation/policy.h"
#include "federation/pool.h"
#include "federation/types.h"

namespace gpufed {

namespace placement_internal {
struct EngineCache;
}  // namespace placement_internal

// Narrows one Place call to part of the pool (the router's tiers, docs/routing.md): some
// clusters, some GPU models, some capacity types. Every field's default allows everything.
struct PlacementScope {
  std::vector<bool> clusters;  // by index into Pool::clusters(); empty: every cluster
  std::vector<bool> models;    // by interned model id, and-ed with the spec's; empty: any
  uint8_t capacity = 0xff;     // bit t: CapacityType t allowed
  // false: a request that does not fit gets no reason (the router tries the next tier, and
  // explains only once).
  bool explain = true;
};

struct PlacementDecision {
  // Set when the whole gang fits now; carries any MIG repartitions it needs.
  std::optional<Assignment> assignment;
  // When it does not fit: why (the nearest blocker), as a code and its figures; RenderReason
  // turns it into words a person can act on. reason.never_fits(): no cluster could hold it
  // even if it were empty, so waiting will not help. Empty (kNone) when it fits.
  PendingReason reason;
};

struct PlacementOptions {
  std::string policy = "gpufed";
  uint64_t seed = 1;
  // Among equally good candidates, pick one at random (seeded) instead of the first. The
  // paper's simulator (kube-scheduler) breaks ties at random; the live scheduler does too so
  // that equal nodes wear evenly.
  bool random_ties = true;
  // Clusters whose nodes are scored for one request, tightest first (all of them when the pool
  // has fewer). Bounds the work per placement in a federation of thousands of clusters.
  int max_clusters_scored = 16;
  // Partitioning authority: may change the MIG layout of idle MIG-capable GPUs.
  bool partitioning = true;
  // For tests and benchmarks: false computes every decision from scratch (no remembered
  // per-node or per-cluster results, no cached topology groups or cluster orders, no bounds that
  // skip clusters, groups or nodes, no shortcuts in explanations). Decisions must not change:
  // tests/unit/federation/determinism_test.cc compares both ways on many random pools.
  bool accelerate = true;
};

// MIG demand still queued, per profile name: feeds the layout chosen when a GPU is
// repartitioned ("serve the queue").
using MigQueue = std::map<std::string, uint32_t>;

class PlacementEngine {
 public:
  // INVALID_ARGUMENT for an unknown policy.
  static absl::StatusOr<std::unique_ptr<PlacementEngine>> Create(PlacementOptions options);
  ~PlacementEngine();

  // Places `spec` on `pool` (not modified). `id` names the workload in repartition reasons.
  // With `scope`, only what it allows is considered (the reason too).
  PlacementDecision Place(const Pool& pool, const WorkloadSpec& spec, WorkloadId id = 0,
                          const MigQueue& mig_queue = {}, const PlacementScope* scope = nullptr);

  // The workload distribution fragmentation-aware policies measure against. Model names are
  // interned through `pool`.
  void SetMix(const WorkloadMix& mix);
  [[nodiscard]] const WorkloadMix& mix() const { return mix_; }
  PlacementPolicy& policy() { return *policy_; }
  [[nodiscard]] const PlacementOptions& options() const { return options_; }

 private:
  explicit PlacementEngine(PlacementOptions options, std::unique_ptr<PlacementPolicy> policy);

  PlacementOptions options_;
  std::unique_ptr<PlacementPolicy> policy_;
  WorkloadMix mix_;
  std::mt19937_64 tie_rng_;
  // What the engine keeps between calls only to go faster (node copies, topology groups).
  std::unique_ptr<placement_internal::EngineCache> cache_;
};

// The typical workloads of a list of specs, as the FGD paper's simulator derives them: specs
// grouped by (CPU, share per GPU, GPU count, allowed models, MIG profile), the most common first
// until `coverage` of all replicas is covered, weights renormalised to sum to 1; each entry
// carries its group's mean host memory. Models are interned through `pool`.
WorkloadMix MixOf(Pool& pool, const std::vector<WorkloadSpec>& specs, double coverage = 0.95);

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_PLACEMENT_H_
