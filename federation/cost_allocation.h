#ifndef GPUFED_FEDERATION_COST_ALLOCATION_H_
#define GPUFED_FEDERATION_COST_ALLOCATION_H_

// Cost allocation (docs/chargeback.md#conservation): a cluster's GPU capacity cost over a window,
// split into what each tenant's workloads held (their usage records), the capacity nobody held
// (idle), and, when idle is spread, what could not be spread (unallocated):
//
//   sum of tenant charges + idle + unallocated = the cluster's capacity cost.
//
// Everything is priced at the whole GPU's price-book line (a record the book priced by its MIG
// profile counts here at its fraction of the GPU's price; the difference is the profile's
// premium, reported beside, not part of the identity).
//
// Plain functions of their arguments: the records and the cluster as stored.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "federation/metering.h"
#include "federation/types.h"

namespace gpufed {

// What happens to the cost of capacity nobody held.
enum class IdlePolicy : uint8_t {
  kSeparate = 0,  // shown as its own line
  kSpread,        // shared over the tenants in proportion to their charges per resource type
                  // (cluster, GPU model, capacity type); a type nobody used stays unallocated
};

struct CostAllocation {
  int64_t total_micros = 0;  // every GPU of the cluster over the window, at its GPU line
  // Per tenant: what its workloads held (and, kSpread, its share of the idle capacity).
  std::map<std::string, int64_t> tenant_micros;
  int64_t idle_micros = 0;         // kSeparate: the capacity nobody held; kSpread: 0
  int64_t unallocated_micros = 0;  // kSpread: idle capacity of a type no tenant used; else 0
  // Per tenant, what the MIG profiles' own price lines charged above (or below) their fraction
  // of the GPU's line: billed, but outside the capacity identity.
  std::map<std::string, int64_t> profile_premium_micros;
  // GPU-time held beyond a GPU's capacity at some moment (two records on one GPU adding up to
  // more than the whole): 0 unless metering double-counted. In GPU-microseconds.
  int64_t overheld_gpu_microseconds = 0;
};

// Allocates `cluster`'s capacity cost over [from, to) (its current nodes and GPUs, priced by its
// declaration) among `records` (the cluster's usage records; each must lie inside the window:
// callers pass records of whole hours of it).
CostAllocation AllocateCost(const Cluster& cluster, const std::vector<UsageRecord>& records,
                            Timestamp from, Timestamp to, IdlePolicy policy);

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_COST_ALLOCATION_H_
