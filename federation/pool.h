#ifndef GPUFED_FEDERATION_POOL_H_
#define GPUFED_FEDERATION_POOL_H_

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "federation/types.h"

namespace gpufed {

// One node's GPUs and who holds each.
struct NodeSlots {
  NodeInfo info;
  std::vector<WorkloadId> owners;  // parallel to info.gpus; 0 = free
  uint32_t free = 0;               // free and healthy GPUs
};

struct ClusterSlots {
  ClusterInfo info;
  ClusterState state = ClusterState::kReady;
  uint64_t epoch = 1;
  std::vector<NodeSlots> nodes;  // in inventory order
};

struct ModelCount {
  uint32_t total = 0;
  uint32_t free = 0;
};

struct ClusterCapacity {
  uint32_t total = 0;
  uint32_t free = 0;
  std::map<std::string, ModelCount> by_model;
};

// The unified capacity pool held in memory by the scheduler: every cluster, node and GPU, and
// which workload holds each GPU. Rebuilt from PostgreSQL at start; kept current from committed
// changes. Not thread-safe: one owner (the scheduler) mutates it; readers get copies.
class Pool {
 public:
  // Adds or replaces a cluster's inventory and state. Allocations of workloads on that cluster
  // are re-applied to the new inventory (GPUs that disappeared are simply gone).
  void UpsertCluster(const Cluster& cluster);
  void SetClusterState(absl::string_view cluster, ClusterState state);

  // Marks the assignment's GPUs as held by `id`. FAILED_PRECONDITION if a GPU is held by another
  // workload or `id` already holds an allocation; the pool is unchanged then. GPUs unknown to the pool are remembered and applied if
  // the cluster's inventory brings them back.
  absl::Status Allocate(WorkloadId id, const Assignment& assignment);
  // Frees whatever `id` holds; no-op if nothing.
  void Release(WorkloadId id);
  bool Holds(WorkloadId id) const { return allocations_.contains(id); }
  size_t allocation_count() const { return allocations_.size(); }

  // Sorted by cluster name.
  const std::vector<ClusterSlots>& clusters() const { return clusters_; }
  const ClusterSlots* FindCluster(absl::string_view name) const;

  static ClusterCapacity CapacityOf(const ClusterSlots& cluster);

 private:
  ClusterSlots* MutableCluster(absl::string_view name);
  // Applies (or clears, with owner 0) the owner on the GPUs the assignment names.
  void Mark(const Assignment& assignment, WorkloadId owner);

  std::vector<ClusterSlots> clusters_;
  std::unordered_map<WorkloadId, Assignment> allocations_;
};

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_POOL_H_
