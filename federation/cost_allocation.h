#ifndef GPUFED_FEDERATION_COST_ALLOCATION_H_
#define GPUFED_FEDERATION_COST_ALLOCATION_H_

// Cost allocation (docs/chargeback.md#cost-allocation): a cluster's GPU capacity cost over a
// window, split into what each tenant's workloads held (their usage records), the capacity
// nobody held (idle), and, when idle is spread, what could not be spread (unallocated):
//
//   sum of tenant charges + idle + unallocated = the cluster's capacity cost.
//
// Everything is priced at the whole GPU's price-book line (a record the book priced by its MIG
// profile counts here at its fraction of the GPU's line -- UsageRecord::gpu_line_cost_micros;
// the difference is the profile's premium, reported beside, not part of the identity).
//
// Plain functions of their arguments: the cluster as stored and what its records held, summed
// per tenant and resource type (HeldCost), which the stores keep in their report rollup.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "federation/metering.h"
#include "federation/types.h"

namespace gpufed {

// What happens to the cost of capacity nobody held.
enum class IdlePolicy : uint8_t {
  kSeparate = 0,  // shown as its own line
  kSpread,        // shared over the tenants in proportion to their charges per resource type
                  // (cluster, GPU model, capacity type); a type nobody used stays unallocated
};
absl::string_view IdlePolicyName(IdlePolicy policy);  // "separate", "spread"
std::optional<IdlePolicy> ParseIdlePolicy(absl::string_view name);

// A resource type of one cluster: its GPUs of one model and capacity type.
using ResourceType = std::pair<std::string, CapacityType>;

// What one tenant's records held of one resource type of one cluster over a window.
struct HeldCost {
  std::string cluster;
  std::string tenant;
  std::string gpu_model;  // "" for GPUs the cluster no longer listed when metered
  CapacityType capacity = CapacityType::kOnDemand;
  int64_t gpu_line_micros = 0;  // the records' gpu_line_cost_micros, summed
  int64_t billed_micros = 0;    // their cost_micros, summed
  bool operator==(const HeldCost&) const = default;
};

// `records` summed by (cluster, tenant, GPU model, capacity type), in that order.
std::vector<HeldCost> SumHeldCosts(const std::vector<UsageRecord>& records);

// The cost of every GPU `cluster` lists now, whole, at its GPU line in force at each moment of
// [from, to), per resource type. A type without a price line costs 0 (and is not listed).
std::map<ResourceType, int64_t> CapacityCost(const Cluster& cluster, Timestamp from, Timestamp to);

struct CostAllocation {
  // Every GPU of the cluster over the window at its GPU line; plus, for a resource type whose
  // records held more than the cluster lists of it now (GPUs removed inside the window), what
  // they held beyond it.
  int64_t total_micros = 0;
  // Per tenant, its charge: what its workloads held, and under kSpread its share of the idle
  // capacity (also in idle_share_micros).
  std::map<std::string, int64_t> tenant_micros;
  std::map<std::string, int64_t> idle_share_micros;
  int64_t idle_micros = 0;         // kSeparate: the capacity nobody held; kSpread: 0
  int64_t unallocated_micros = 0;  // kSpread: idle capacity of a type no tenant used; else 0
  // Per tenant, what the MIG profiles' own price lines charged above (or below) their fraction
  // of the GPU's line: billed, but outside the capacity identity.
  std::map<std::string, int64_t> profile_premium_micros;
  // GPU-time held beyond a GPU's capacity in some hour (two records on one GPU adding up to more
  // than the whole): 0 unless metering double-counted. In GPU-microseconds; only the
  // record-level AllocateCost computes it.
  int64_t overheld_gpu_microseconds = 0;
};

// Allocates one cluster's capacity cost (`capacity`, as CapacityCost gives it) among what its
// tenants held (`held`: that cluster's rows).
CostAllocation AllocateCost(const std::map<ResourceType, int64_t>& capacity,
                            const std::vector<HeldCost>& held, IdlePolicy policy);

// The same from `cluster` and its usage records over [from, to) (each must lie inside the
// window: callers pass records of whole hours of it), with overheld GPU-time checked per GPU and
// hour.
CostAllocation AllocateCost(const Cluster& cluster, const std::vector<UsageRecord>& records,
                            Timestamp from, Timestamp to, IdlePolicy policy);

// A cost-allocation question: the clusters' capacity cost over [from, to) (whole days, as a
// usage report's window), split by `policy` (nullopt: the server's).
struct CostQuery {
  Timestamp from{};
  Timestamp to{};
  std::string cluster;  // "" for every cluster
  std::optional<IdlePolicy> policy;
};

// One cluster's allocation.
struct ClusterCost {
  std::string cluster;
  CostAllocation allocation;
};

// The answer to a CostQuery: the policy applied and each cluster's allocation, by name.
struct CostReport {
  IdlePolicy policy = IdlePolicy::kSeparate;
  std::vector<ClusterCost> clusters;
};

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_COST_ALLOCATION_H_
