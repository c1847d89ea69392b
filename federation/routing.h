#ifndef GPUFED_FEDERATION_ROUTING_H_
#define GPUFED_FEDERATION_ROUTING_H_

// Routing: which clusters a workload may use, and which of them serves its objective
// (docs/routing.md). The hard rules (jurisdiction, compliance labels, provider, region, clusters
// allowed and denied, round-trip time from the client region, spot tolerated, price cap) decide
// the offers a workload may take: an offer is a (cluster, GPU model, capacity type) with its
// price. The objective orders the offers into tiers of equal key (the price of the placement per
// hour for `cost`, the client region's RTT for `latency`, a weighted sum for `balanced`, one
// tier for `pack`); the placement engine then places inside the first tier that holds the
// workload, with its own placement quality deciding between the nodes and clusters of a tier.
// So no offer of a lower key held it at the moment of the decision, and no hard rule is broken.
//
// Plain C++: no gRPC, protobuf or SQL. Not thread-safe (as the engine it drives).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "federation/placement.h"
#include "federation/pool.h"
#include "federation/types.h"

namespace gpufed {

// `balanced` ranks offers by cost x (price per GPU-hour, in currency units) + latency x (RTT in
// milliseconds): with the defaults, 1 currency unit per GPU-hour weighs as much as 50 ms.
struct RoutingWeights {
  double cost = 1.0;
  double latency = 0.02;
};

// The price line of `declared` in force at `at` for (model, profile, capacity): the latest whose
// effective_from is not after `at`. nullopt when there is none.
std::optional<int64_t> PriceAt(const ClusterDeclaration& declared, absl::string_view model,
                               absl::string_view mig_profile, CapacityType capacity, Timestamp at);

// What one replica of `spec` costs per hour on a GPU of `model` and `capacity` in a cluster
// with this declaration, in micro-units: 0 on committed capacity and for requests of no GPU;
// whole GPUs count the GPU's price each, a share of N milli-GPUs N/1000 of it, a MIG instance
// its profile's own price if the book has one, else its compute slices' fraction of the GPU's.
// nullopt when the book has no price for it.
std::optional<int64_t> ReplicaPricePerHour(const ClusterDeclaration& declared,
                                           const WorkloadSpec& spec, absl::string_view model,
                                           CapacityType capacity, Timestamp at);

// The same as a price per GPU-hour (what max_price_per_gpu_hour caps): the replica's price
// divided by the GPUs (or the fraction of one) it takes. nullopt when unpriced; 0 when the
// replica takes no GPU.
std::optional<int64_t> PricePerGpuHour(const ClusterDeclaration& declared, const WorkloadSpec& spec,
                                       absl::string_view model, CapacityType capacity,
                                       Timestamp at);

// What the placement costs per hour (every replica, micro-units) on `pool` as it is, or nullopt
// when a GPU it takes is unpriced. The hours of a workload: its estimated duration, or one hour
// when it has none.
std::optional<int64_t> PlacementPricePerHour(const Pool& pool, const WorkloadSpec& spec,
                                             const Assignment& assignment, Timestamp at);
double EstimatedHours(const WorkloadSpec& spec);

// The first hard rule of `spec` the cluster breaks, as words for a reason ("jurisdiction eu",
// "compliance label hipaa", "cluster denied", "max RTT 20 ms from eu-west"); "" when it
// breaks none. The rules that depend on the GPU (spot, price) are not checked here.
std::string BrokenClusterRule(const ClusterSlots& cluster, const PlacementConstraints& rules);

// One (cluster, model, capacity type) a workload may take, and its key under the objective.
struct Offer {
  uint32_t cluster = 0;  // index into Pool::clusters()
  uint16_t model = 0;    // interned model id
  CapacityType capacity = CapacityType::kOnDemand;
  std::optional<int64_t> replica_price;  // per hour, micro-units; nullopt: unpriced
  std::optional<int64_t> rtt_micros;     // from the client region; nullopt: not declared
  double key = 0;                        // lower is better; +inf: unpriced or unknown distance
};

// The offers of `pool` that `spec` may take at `at`, in pool order, each with its key.
std::vector<Offer> OffersFor(const Pool& pool, const WorkloadSpec& spec, Timestamp at,
                             const RoutingWeights& weights);

// ---- Explain and what-if ----

// One hard rule of a workload as one cluster meets it.
struct RuleCheck {
  std::string rule;  // "jurisdiction", "compliance label gdpr", "provider", "region", "clusters",
                     // "denied clusters", "max RTT"
  bool passed = false;
  std::string detail;  // what the cluster has: "eu", "[gdpr, hipaa]", "12 ms from eu-west"
};

// One (model, capacity type) of a cluster as the workload sees it.
struct OfferCheck {
  std::string model;
  CapacityType capacity = CapacityType::kOnDemand;
  std::optional<int64_t> replica_price;  // per hour, micro-units; nullopt: unpriced
  std::optional<int64_t> rtt_micros;     // from the client region; nullopt: not declared
  double key = 0;                        // under the objective; +inf: last
  std::string refused;                   // the GPU rule it breaks ("spot not tolerated", ...)
  bool fits_now = false;                 // allowed and would hold the workload now, alone
};

struct ClusterCandidate {
  std::string cluster;
  std::vector<RuleCheck> rules;  // every rule the workload sets, passed or not
  std::vector<OfferCheck> offers;
  bool allowed = false;  // every rule passed and some offer is allowed
  bool chosen = false;
};

struct RoutingExplanation {
  Objective objective = Objective::kPack;
  std::vector<ClusterCandidate> candidates;  // every cluster of the pool, in name order
  PlacementDecision decision;                // what the router decides now
  // Set when it fits now: the price of the placement per hour (every replica) and over its
  // estimated duration (EstimatedHours), in micro-units; nullopt when something it takes is
  // unpriced.
  std::optional<int64_t> price_per_hour;
  std::optional<int64_t> estimated_cost;
  double estimated_hours = 1;
};

class Router {
 public:
  explicit Router(RoutingWeights weights = {}) : weights_(weights) {}

  // Places `spec` as PlacementEngine::Place does, inside the workload's hard rules and in the
  // first tier of its objective that holds it. When nothing it may take holds it, the reason
  // names the rule that leaves no cluster (kNoClusterAllowed) or, when some cluster is allowed,
  // what keeps those busy.
  PlacementDecision Place(PlacementEngine& engine, const Pool& pool, const WorkloadSpec& spec,
                          WorkloadId id, const MigQueue& mig_queue, Timestamp at) const;

  // Place, and beside it every cluster's rules and offers as the workload meets them. Costs an
  // engine call per allowed offer: for explain and what-if, not the scheduling cycle.
  RoutingExplanation Explain(PlacementEngine& engine, const Pool& pool, const WorkloadSpec& spec,
                             Timestamp at) const;

  [[nodiscard]] const RoutingWeights& weights() const { return weights_; }

 private:
  RoutingWeights weights_;
};

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_ROUTING_H_
