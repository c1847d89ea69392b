#include "federation/pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace gpufed {
namespace {

NodeSlots MakeNode(const NodeInfo& info) {
  NodeSlots node;
  node.info = info;
  node.owners.assign(info.gpus.size(), 0);
  for (const GpuInfo& gpu : info.gpus) {
    if (gpu.healthy) ++node.free;
  }
  return node;
}

}  // namespace

const ClusterSlots* Pool::FindCluster(absl::string_view name) const {
  auto it =
      std::lower_bound(clusters_.begin(), clusters_.end(), name,
                       [](const ClusterSlots& c, absl::string_view n) { return c.info.name < n; });
  if (it == clusters_.end() || it->info.name != name) return nullptr;
  return &*it;
}

ClusterSlots* Pool::MutableCluster(absl::string_view name) {
  return const_cast<ClusterSlots*>(FindCluster(name));
}

void Pool::UpsertCluster(const Cluster& cluster) {
  ClusterSlots slots;
  slots.info = cluster.info;
  slots.state = cluster.state;
  slots.epoch = cluster.epoch;
  slots.nodes.reserve(cluster.nodes.size());
  for (const NodeInfo& node : cluster.nodes) slots.nodes.push_back(MakeNode(node));

  ClusterSlots* existing = MutableCluster(cluster.info.name);
  if (existing != nullptr) {
    *existing = std::move(slots);
  } else {
    auto it = std::lower_bound(
        clusters_.begin(), clusters_.end(), cluster.info.name,
        [](const ClusterSlots& c, absl::string_view n) { return c.info.name < n; });
    clusters_.insert(it, std::move(slots));
  }
  for (const auto& [id, assignment] : allocations_) {
    if (assignment.cluster == cluster.info.name) Mark(assignment, id);
  }
}

void Pool::SetClusterState(absl::string_view cluster, ClusterState state) {
  if (ClusterSlots* c = MutableCluster(cluster)) c->state = state;
}

void Pool::Mark(const Assignment& assignment, WorkloadId owner) {
  ClusterSlots* cluster = MutableCluster(assignment.cluster);
  if (cluster == nullptr) return;
  for (const ReplicaAssignment& replica : assignment.replicas) {
    for (NodeSlots& node : cluster->nodes) {
      if (node.info.name != replica.node) continue;
      for (const std::string& uuid : replica.gpu_uuids) {
        for (size_t g = 0; g < node.info.gpus.size(); ++g) {
          if (node.info.gpus[g].uuid != uuid) continue;
          WorkloadId& slot = node.owners[g];
          bool healthy = node.info.gpus[g].healthy;
          if (slot == 0 && owner != 0 && healthy) --node.free;
          if (slot != 0 && owner == 0 && healthy) ++node.free;
          slot = owner;
        }
      }
    }
  }
}

absl::Status Pool::Allocate(WorkloadId id, const Assignment& assignment) {
  if (const ClusterSlots* cluster = FindCluster(assignment.cluster)) {
    for (const ReplicaAssignment& replica : assignment.replicas) {
      for (const NodeSlots& node : cluster->nodes) {
        if (node.info.name != replica.node) continue;
        for (size_t g = 0; g < node.info.gpus.size(); ++g) {
          const WorkloadId owner = node.owners[g];
          if (owner == 0 || owner == id) continue;
          for (const std::string& uuid : replica.gpu_uuids) {
            if (node.info.gpus[g].uuid == uuid) {
              return absl::FailedPreconditionError(
                  absl::StrCat("GPU ", uuid, " on ", assignment.cluster, "/", node.info.name,
                               " is held by workload ", owner));
            }
          }
        }
      }
    }
  }
  if (allocations_.contains(id)) {
    // Never silently move a workload: its GPUs are in use until it is released.
    return absl::FailedPreconditionError(
        absl::StrCat("workload ", id, " already holds an allocation"));
  }
  allocations_[id] = assignment;
  Mark(assignment, id);
  return absl::OkStatus();
}

void Pool::Release(WorkloadId id) {
  auto it = allocations_.find(id);
  if (it == allocations_.end()) return;
  Mark(it->second, 0);
  allocations_.erase(it);
}

ClusterCapacity Pool::CapacityOf(const ClusterSlots& cluster) {
  ClusterCapacity cap;
  for (const NodeSlots& node : cluster.nodes) {
    for (size_t g = 0; g < node.info.gpus.size(); ++g) {
      const GpuInfo& gpu = node.info.gpus[g];
      ModelCount& m = cap.by_model[gpu.model];
      ++cap.total;
      ++m.total;
      if (node.owners[g] == 0 && gpu.healthy && node.info.schedulable) {
        ++cap.free;
        ++m.free;
      }
    }
  }
  return cap;
}

}  // namespace gpufed
