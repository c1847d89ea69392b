#include "federation/pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace gpufed {
namespace {

void Adjust(uint64_t& free, uint64_t amount, bool release) {
  if (free == kUnlimited) return;
  free = release ? free + amount : free - std::min(free, amount);
}

void TakeHost(NodeSlots& node, HostDemand host, bool release) {
  Adjust(node.cpu_free, host.cpu_millis, release);
  Adjust(node.memory_free, host.memory_mib, release);
}

// Sets a GPU's MIG mode and layout. Instances that stay (same profile and start) keep their
// owner; the others are free.
void SetLayout(NodeSlots& node, size_t g, bool enabled, const std::vector<MigInstance>& layout) {
  GpuInfo& info = node.info.gpus[g];
  std::vector<MigInstance> old_layout = std::move(info.mig_layout);
  std::vector<WorkloadId> old_owners = std::move(node.gpus[g].mig_owners);
  info.mig_enabled = enabled;
  info.mig_layout = enabled ? layout : std::vector<MigInstance>{};
  std::vector<WorkloadId>& owners = node.gpus[g].mig_owners;
  owners.assign(info.mig_layout.size(), 0);
  for (size_t i = 0; i < old_layout.size() && i < old_owners.size(); ++i) {
    auto it = std::find(info.mig_layout.begin(), info.mig_layout.end(), old_layout[i]);
    if (it != info.mig_layout.end()) owners[it - info.mig_layout.begin()] = old_owners[i];
  }
}

// A layout change may touch a busy GPU only when every bound MIG instance stays (the engine adds
// an instance in free space beside running ones); anything else needs an idle GPU.
bool MayRepartition(const NodeSlots& node, size_t g, const Repartition& r) {
  const GpuSlot& slot = node.gpus[g];
  if (slot.Idle()) return true;
  if (!slot.holders.empty() || !r.mig_enabled) return false;
  const std::vector<MigInstance>& layout = node.info.gpus[g].mig_layout;
  for (size_t i = 0; i < layout.size() && i < slot.mig_owners.size(); ++i) {
    if (slot.mig_owners[i] != 0 &&
        std::find(r.layout.begin(), r.layout.end(), layout[i]) == r.layout.end()) {
      return false;
    }
  }
  return true;
}

// Applies one replica to a node (or removes it, with `release`). With `strict`, refuses what
// does not fit and leaves the node half-changed (callers work on a copy); without, applies
// whatever still fits (re-applying known allocations to a new inventory).
absl::Status ApplyReplica(NodeSlots& node, WorkloadId id, const ReplicaAssignment& replica,
                          HostDemand host, bool release, bool strict) {
  if (!release && strict) {
    if (node.cpu_free != kUnlimited && node.cpu_free < host.cpu_millis) {
      return absl::FailedPreconditionError(absl::StrCat("node ", node.info.name, " has ",
                                                        node.cpu_free, " CPU millis free, needs ",
                                                        host.cpu_millis));
    }
    if (node.memory_free != kUnlimited && node.memory_free < host.memory_mib) {
      return absl::FailedPreconditionError(absl::StrCat(
          "node ", node.info.name, " has ", node.memory_free, " MiB free, needs ", host.memory_mib));
    }
  }
  TakeHost(node, host, release);
  for (const std::string& uuid : replica.gpu_uuids) {
    const int g = node.FindGpu(uuid);
    if (g < 0) continue;
    GpuSlot& slot = node.gpus[g];
    const GpuInfo& info = node.info.gpus[g];
    if (!replica.mig_profile.empty()) {
      size_t i = 0;
      while (i < info.mig_layout.size() && !(info.mig_layout[i].profile == replica.mig_profile &&
                                             info.mig_layout[i].start == replica.mig_start)) {
        ++i;
      }
      if (i == info.mig_layout.size()) {
        if (strict) {
          return absl::FailedPreconditionError(
              absl::StrCat("GPU ", uuid, " on ", node.info.name, " has no MIG instance ",
                           replica.mig_profile, " at slot ", replica.mig_start));
        }
        continue;
      }
      WorkloadId& owner = slot.mig_owners[i];
      if (release) {
        if (owner == id) owner = 0;
      } else if (owner != 0 && owner != id) {
        if (strict) {
          return absl::FailedPreconditionError(
              absl::StrCat("MIG instance ", replica.mig_profile, "@", replica.mig_start, " of GPU ",
                           uuid, " on ", node.info.name, " is held by workload ", owner));
        }
      } else {
        owner = id;
      }
      continue;
    }
    const uint32_t milli = replica.gpu_milli == 0 ? kMilliPerGpu : replica.gpu_milli;
    if (release) {
      auto it = std::find_if(slot.holders.begin(), slot.holders.end(), [&](const GpuHold& h) {
        return h.id == id && h.milli == milli;
      });
      if (it != slot.holders.end()) {
        slot.holders.erase(it);
        if (info.healthy && !info.mig_enabled) slot.milli_free += milli;
      }
      continue;
    }
    if (strict) {
      if (info.mig_enabled) {
        return absl::FailedPreconditionError(absl::StrCat(
            "GPU ", uuid, " on ", node.info.name, " is in MIG mode; only MIG instances fit"));
      }
      if (slot.milli_free < milli) {
        const WorkloadId other = slot.holders.empty() ? 0 : slot.holders.front().id;
        return absl::FailedPreconditionError(
            absl::StrCat("GPU ", uuid, " on ", node.info.name, " has ", slot.milli_free,
                         " milli-GPU free, needs ", milli,
                         other != 0 ? absl::StrCat(" (held by workload ", other, ")") : ""));
      }
    }
    slot.holders.push_back(GpuHold{id, milli});
    if (info.healthy && !info.mig_enabled) slot.milli_free -= std::min(slot.milli_free, milli);
  }
  RecountNode(node);
  return absl::OkStatus();
}

}  // namespace

bool GpuSlot::Idle() const {
  return holders.empty() &&
         std::all_of(mig_owners.begin(), mig_owners.end(), [](WorkloadId w) { return w == 0; });
}

WorkloadId NodeSlots::HolderOf(size_t g) const {
  if (g >= gpus.size()) return 0;
  if (!gpus[g].holders.empty()) return gpus[g].holders.front().id;
  for (WorkloadId w : gpus[g].mig_owners) {
    if (w != 0) return w;
  }
  return 0;
}

int NodeSlots::FindGpu(absl::string_view uuid) const {
  for (size_t g = 0; g < info.gpus.size(); ++g) {
    if (info.gpus[g].uuid == uuid) return static_cast<int>(g);
  }
  return -1;
}

const NodeSlots* ClusterSlots::FindNode(absl::string_view name) const {
  auto it = node_at.find(std::string(name));
  return it == node_at.end() ? nullptr : &nodes[it->second];
}

void RecountNode(NodeSlots& node) {
  node.free = 0;
  for (size_t g = 0; g < node.gpus.size(); ++g) {
    const GpuInfo& info = node.info.gpus[g];
    GpuSlot& slot = node.gpus[g];
    if (!info.healthy || info.mig_enabled) {
      slot.milli_free = 0;
      continue;
    }
    uint32_t held = 0;
    for (const GpuHold& h : slot.holders) held += h.milli;
    slot.milli_free = held >= kMilliPerGpu ? 0 : kMilliPerGpu - held;
    if (held == 0 && node.info.schedulable) ++node.free;
  }
}

uint16_t Pool::ModelId(absl::string_view model) {
  auto it = model_ids_.find(std::string(model));
  if (it != model_ids_.end()) return it->second;
  const auto id = static_cast<uint16_t>(models_.size());
  models_.emplace_back(model);
  model_ids_.emplace(std::string(model), id);
  return id;
}

int Pool::FindModelId(absl::string_view model) const {
  auto it = model_ids_.find(std::string(model));
  return it == model_ids_.end() ? -1 : it->second;
}

NodeSlots Pool::MakeNode(const NodeInfo& info) {
  NodeSlots node;
  node.info = info;
  node.gpus.resize(info.gpus.size());
  for (size_t g = 0; g < info.gpus.size(); ++g) {
    node.gpus[g].model = ModelId(info.gpus[g].model);
    node.gpus[g].mig_owners.assign(info.gpus[g].mig_enabled ? info.gpus[g].mig_layout.size() : 0,
                                   0);
    if (!info.gpus[g].mig_enabled) node.info.gpus[g].mig_layout.clear();
  }
  if (info.cpu_millis > 0) node.cpu_free = info.cpu_millis;
  if (info.memory_mib > 0) node.memory_free = info.memory_mib;
  RecountNode(node);
  return node;
}

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
  for (const NodeInfo& node : cluster.nodes) {
    slots.node_at.emplace(node.name, static_cast<uint32_t>(slots.nodes.size()));
    slots.nodes.push_back(MakeNode(node));
  }

  ClusterSlots* target = MutableCluster(cluster.info.name);
  if (target != nullptr) {
    *target = std::move(slots);
  } else {
    auto it = std::lower_bound(
        clusters_.begin(), clusters_.end(), cluster.info.name,
        [](const ClusterSlots& c, absl::string_view n) { return c.info.name < n; });
    target = &*clusters_.insert(it, std::move(slots));
  }
  for (const auto& [id, alloc] : allocations_) {
    if (alloc.assignment.cluster == cluster.info.name) Mark(*target, id, alloc, false);
  }
  RefreshSummary(*target);
}

void Pool::SetClusterState(absl::string_view cluster, ClusterState state) {
  if (ClusterSlots* c = MutableCluster(cluster)) c->state = state;
}

void Pool::Mark(ClusterSlots& cluster, WorkloadId id, const Allocation& alloc, bool release) {
  if (!release) {
    for (const Repartition& r : alloc.assignment.repartitions) {
      auto it = cluster.node_at.find(r.node);
      if (it == cluster.node_at.end()) continue;
      NodeSlots& node = cluster.nodes[it->second];
      const int g = node.FindGpu(r.gpu_uuid);
      if (g < 0 || !MayRepartition(node, g, r)) continue;
      SetLayout(node, g, r.mig_enabled, r.layout);
      RecountNode(node);
    }
  }
  for (const ReplicaAssignment& replica : alloc.assignment.replicas) {
    auto it = cluster.node_at.find(replica.node);
    if (it == cluster.node_at.end()) continue;
    (void)ApplyReplica(cluster.nodes[it->second], id, replica, alloc.host, release,
                       /*strict=*/false);
  }
}

absl::Status Pool::Allocate(WorkloadId id, const Assignment& assignment, HostDemand host) {
  if (allocations_.contains(id)) {
    // Never silently move a workload: its resources are in use until it is released.
    return absl::FailedPreconditionError(
        absl::StrCat("workload ", id, " already holds an allocation"));
  }
  Allocation alloc{assignment, host};
  ClusterSlots* cluster = MutableCluster(assignment.cluster);
  if (cluster == nullptr) {
    allocations_.emplace(id, std::move(alloc));
    return absl::OkStatus();
  }
  // Work on copies of the touched nodes so that a refusal changes nothing.
  std::map<uint32_t, NodeSlots> touched;
  auto copy_of = [&](const std::string& name) -> NodeSlots* {
    auto it = cluster->node_at.find(name);
    if (it == cluster->node_at.end()) return nullptr;
    auto [pos, inserted] = touched.try_emplace(it->second);
    if (inserted) pos->second = cluster->nodes[it->second];
    return &pos->second;
  };
  uint64_t changed_layouts = 0;
  for (const Repartition& r : assignment.repartitions) {
    NodeSlots* node = copy_of(r.node);
    if (node == nullptr) continue;
    const int g = node->FindGpu(r.gpu_uuid);
    if (g < 0) continue;
    const GpuInfo& info = node->info.gpus[g];
    const bool same = info.mig_enabled == r.mig_enabled && (!r.mig_enabled || info.mig_layout == r.layout);
    if (same) continue;
    if (!MayRepartition(*node, g, r)) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot repartition GPU ", r.gpu_uuid, " on ", r.node,
                       ": it is in use (a new layout must keep every bound MIG instance)"));
    }
    SetLayout(*node, g, r.mig_enabled, r.layout);
    RecountNode(*node);
    ++changed_layouts;
  }
  for (const ReplicaAssignment& replica : assignment.replicas) {
    NodeSlots* node = copy_of(replica.node);
    if (node == nullptr) continue;
    absl::Status s = ApplyReplica(*node, id, replica, host, /*release=*/false, /*strict=*/true);
    if (!s.ok()) return s;
  }
  for (auto& [index, node] : touched) cluster->nodes[index] = std::move(node);
  allocations_.emplace(id, std::move(alloc));
  repartitions_applied_ += changed_layouts;
  RefreshSummary(*cluster);
  return absl::OkStatus();
}

void Pool::Release(WorkloadId id) {
  auto it = allocations_.find(id);
  if (it == allocations_.end()) return;
  if (ClusterSlots* cluster = MutableCluster(it->second.assignment.cluster)) {
    Mark(*cluster, id, it->second, /*release=*/true);
    RefreshSummary(*cluster);
  }
  allocations_.erase(it);
}

void Pool::RefreshSummary(ClusterSlots& cluster) {
  cluster.summary.assign(models_.size(), {});
  for (const NodeSlots& node : cluster.nodes) {
    if (!node.info.schedulable) continue;
    // Whole free per model on this node (usually one model per node).
    absl::InlinedVector<std::pair<uint16_t, uint32_t>, 2> node_whole;
    for (size_t g = 0; g < node.gpus.size(); ++g) {
      const GpuSlot& slot = node.gpus[g];
      const GpuInfo& info = node.info.gpus[g];
      if (!info.healthy) continue;
      ClusterSlots::ModelSummary& s = cluster.summary[slot.model];
      if (info.mig_enabled) {
        for (WorkloadId w : slot.mig_owners) s.mig_free_instances += w == 0 ? 1 : 0;
        if (slot.Idle()) ++s.mig_idle_capable;
        continue;
      }
      if (info.mig_capable && slot.Idle()) ++s.mig_idle_capable;
      s.milli_free += slot.milli_free;
      s.max_gpu_milli_free = std::max(s.max_gpu_milli_free, slot.milli_free);
      if (slot.milli_free == kMilliPerGpu) {
        ++s.whole_free;
        auto nw = std::find_if(node_whole.begin(), node_whole.end(),
                               [&](const auto& p) { return p.first == slot.model; });
        if (nw == node_whole.end()) {
          node_whole.emplace_back(slot.model, 1);
        } else {
          ++nw->second;
        }
      }
    }
    for (const auto& [model, count] : node_whole) {
      uint32_t& m = cluster.summary[model].max_node_whole_free;
      m = std::max(m, count);
    }
  }
}

ClusterCapacity Pool::CapacityOf(const ClusterSlots& cluster) {
  ClusterCapacity cap;
  for (const NodeSlots& node : cluster.nodes) {
    for (size_t g = 0; g < node.info.gpus.size(); ++g) {
      const GpuInfo& gpu = node.info.gpus[g];
      ModelCount& m = cap.by_model[gpu.model];
      ++cap.total;
      ++m.total;
      if (node.gpus[g].Idle() && gpu.healthy && node.info.schedulable) {
        ++cap.free;
        ++m.free;
      }
    }
  }
  return cap;
}

}  // namespace gpufed
