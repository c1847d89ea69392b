#include "federation/pool.h"

#include <algorithm>
#include <atomic>

#include "absl/strings/str_cat.h"
#include "federation/mig.h"

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

// Whether a memory slot of the MIG-enabled GPU is covered by none of its instances.
bool HasFreeMigSlot(const GpuInfo& gpu) {
  const MigGeometry* geo = FindMigGeometry(gpu.model);
  if (geo == nullptr) return false;
  uint32_t used = 0;  // bit per memory slot
  for (const MigInstance& inst : gpu.mig_layout) {
    const MigProfile* p = geo->Find(inst.profile);
    if (p == nullptr) continue;
    for (int s = inst.start; s < inst.start + p->memory_slices && s < 32; ++s) {
      if (s >= 0) used |= uint32_t{1} << s;
    }
  }
  for (int s = 0; s < geo->memory_slots && s < 32; ++s) {
    if ((used & (uint32_t{1} << s)) == 0) return true;
  }
  return false;
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
      return absl::FailedPreconditionError(absl::StrCat("node ", node.info.name, " has ",
                                                        node.memory_free, " MiB free, needs ",
                                                        host.memory_mib));
    }
  }
  TakeHost(node, host, release);
  for (size_t k = 0; k < replica.gpu_uuids.size(); ++k) {
    const std::string& uuid = replica.gpu_uuids[k];
    // The CUDA ordinal is usually the GPU's place on the node: try it before searching.
    const size_t hint = k < replica.gpu_indices.size() ? replica.gpu_indices[k] : node.gpus.size();
    const int g = hint < node.gpus.size() && node.info.gpus[hint].uuid == uuid
                      ? static_cast<int>(hint)
                      : node.FindGpu(uuid);
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
      auto it = std::find_if(slot.holders.begin(), slot.holders.end(),
                             [&](const GpuHold& h) { return h.id == id && h.milli == milli; });
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
  auto it = node_at.find(name);
  return it == node_at.end() ? nullptr : &nodes[it->second];
}

void RecountNode(NodeSlots& node) {
  static std::atomic<uint64_t> next_version{1};
  node.version = next_version.fetch_add(1, std::memory_order_relaxed);
  node.free = 0;
  node.max_milli_free = 0;
  node.mig_idle = 0;
  node.summary.clear();
  const bool schedulable = node.info.schedulable;
  for (size_t g = 0; g < node.gpus.size(); ++g) {
    const GpuInfo& info = node.info.gpus[g];
    GpuSlot& slot = node.gpus[g];
    slot.healthy = info.healthy;
    slot.mig_enabled = info.mig_enabled;
    slot.memory_mib = info.memory_mib;
    if (!info.healthy || info.mig_enabled) slot.milli_free = 0;
    if (!info.healthy) continue;
    // This GPU's model's entry in the node's summary (only schedulable nodes count).
    ModelSummary* s = nullptr;
    if (schedulable) {
      auto it = std::find_if(node.summary.begin(), node.summary.end(),
                             [&](const auto& p) { return p.first == slot.model; });
      s = it != node.summary.end() ? &it->second
                                   : &node.summary.emplace_back(slot.model, ModelSummary{}).second;
    }
    if (info.mig_enabled) {
      const bool idle = slot.Idle();
      node.mig_idle += idle ? 1 : 0;
      if (s != nullptr) {
        for (WorkloadId w : slot.mig_owners) s->mig_free_instances += w == 0 ? 1 : 0;
        s->mig_idle_capable += idle ? 1 : 0;
        s->mig_open += HasFreeMigSlot(info) ? 1 : 0;
      }
      continue;
    }
    uint32_t held = 0;
    for (const GpuHold& h : slot.holders) held += h.milli;
    slot.milli_free = held >= kMilliPerGpu ? 0 : kMilliPerGpu - held;
    node.max_milli_free = std::max(node.max_milli_free, slot.milli_free);
    if (held == 0 && schedulable) ++node.free;
    if (s == nullptr) continue;
    if (info.mig_capable && slot.Idle()) ++s->mig_idle_capable;
    s->milli_free += slot.milli_free;
    s->max_gpu_milli_free = std::max(s->max_gpu_milli_free, slot.milli_free);
    if (slot.milli_free == kMilliPerGpu) {
      ++s->whole_free;
      s->max_node_whole_free = s->whole_free;
    }
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

NodeSlots Pool::MakeNode(const NodeInfo& info, CapacityType default_capacity) {
  NodeSlots node;
  node.info = info;
  node.gpus.resize(info.gpus.size());
  CapacityType capacity = default_capacity;
  if (auto label = info.labels.find(std::string(kCapacityTypeLabel)); label != info.labels.end()) {
    capacity = ParseCapacityType(label->second).value_or(default_capacity);
  }
  auto version = [&](absl::string_view label) -> uint64_t {
    auto it = info.labels.find(std::string(label));
    return it == info.labels.end() ? 0 : PackVersion(it->second).value_or(0);
  };
  node.driver_version = version(kDriverVersionLabel);
  node.cuda_version = version(kCudaVersionLabel);
  for (size_t g = 0; g < info.gpus.size(); ++g) {
    node.gpus[g].model = ModelId(info.gpus[g].model);
    node.gpus[g].capacity = capacity;
    node.gpus[g].mig_owners.assign(info.gpus[g].mig_enabled ? info.gpus[g].mig_layout.size() : 0,
                                   0);
    if (!info.gpus[g].mig_enabled) node.info.gpus[g].mig_layout.clear();
  }
  if (info.cpu_millis > 0) node.cpu_free = info.cpu_millis;
  if (info.memory_mib > 0) node.memory_free = info.memory_mib;
  // Topology names as ranks in name order (the order a std::map keyed by them would have).
  auto rank = [&](auto key, auto set_rank, bool empty_has_rank) {
    std::vector<std::string> names;
    for (const GpuInfo& gpu : info.gpus) names.push_back(key(gpu));
    std::vector<std::string> sorted = names;
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    for (size_t g = 0; g < names.size(); ++g) {
      const auto r = std::lower_bound(sorted.begin(), sorted.end(), names[g]) - sorted.begin();
      const bool none = (names[g].empty() && !empty_has_rank) || r >= kNoRank;
      set_rank(node.gpus[g], none ? kNoRank : static_cast<uint8_t>(r));
    }
  };
  rank([](const GpuInfo& g) { return g.nvlink_domain; },
       [](GpuSlot& s, uint8_t r) { s.nvlink_rank = r; }, false);
  rank([](const GpuInfo& g) { return g.pcie_switch; },
       [](GpuSlot& s, uint8_t r) { s.switch_rank = r; }, false);
  rank([](const GpuInfo& g) { return absl::StrCat("numa", g.numa_node); },
       [](GpuSlot& s, uint8_t r) { s.numa_rank = r; }, true);
  RecountNode(node);
  return node;
}

int Pool::FindClusterIndex(absl::string_view name) const {
  auto it = cluster_at_.find(name);
  return it == cluster_at_.end() ? -1 : static_cast<int>(it->second);
}

const ClusterSlots* Pool::FindCluster(absl::string_view name) const {
  const int index = FindClusterIndex(name);
  return index < 0 ? nullptr : clusters_[index].get();
}

ClusterSlots& Pool::Own(uint32_t index) {
  std::shared_ptr<ClusterSlots>& cluster = clusters_[index];
  if (cluster.use_count() > 1) {
    cluster = std::make_shared<ClusterSlots>(*cluster);
  } else {
    // Sole owner: whoever held the last other reference let go of it (a release), and its reads
    // of the cluster happen before the writes that follow.
    std::atomic_thread_fence(std::memory_order_acquire);
  }
  return *cluster;
}

void Pool::UpsertCluster(const Cluster& cluster) {
  static std::atomic<uint64_t> next_inventory_id{1};
  ClusterSlots slots;
  slots.inventory_id = next_inventory_id.fetch_add(1, std::memory_order_relaxed);
  slots.reported = cluster.info;
  slots.info = EffectiveInfo(cluster.info, cluster.declared);
  slots.declared = cluster.declared;
  slots.state = cluster.state;
  slots.epoch = cluster.epoch;
  slots.nodes.reserve(cluster.nodes.size());
  for (const NodeInfo& node : cluster.nodes) {
    slots.node_at.emplace(node.name, static_cast<uint32_t>(slots.nodes.size()));
    slots.nodes.push_back(MakeNode(node, cluster.declared.default_capacity));
    slots.max_driver_version =
        std::max(slots.max_driver_version, slots.nodes.back().driver_version);
    slots.max_cuda_version = std::max(slots.max_cuda_version, slots.nodes.back().cuda_version);
    for (const GpuSlot& gpu : slots.nodes.back().gpus) {
      if (gpu.model >= slots.capacity_by_model.size()) {
        slots.capacity_by_model.resize(gpu.model + 1, 0);
      }
      slots.capacity_by_model[gpu.model] |=
          static_cast<uint8_t>(1U << static_cast<int>(gpu.capacity));
    }
  }

  int index = FindClusterIndex(cluster.info.name);
  if (index >= 0) {
    // A new object: copies of the pool keep the inventory they had.
    clusters_[index] = std::make_shared<ClusterSlots>(std::move(slots));
  } else {
    auto it = std::lower_bound(clusters_.begin(), clusters_.end(), cluster.info.name,
                               [](const std::shared_ptr<ClusterSlots>& c, absl::string_view n) {
                                 return c->info.name < n;
                               });
    index = static_cast<int>(it - clusters_.begin());
    clusters_.insert(it, std::make_shared<ClusterSlots>(std::move(slots)));
    orders_.clear();  // cluster indices moved; rebuilt on next use
    cluster_at_.clear();
    for (size_t i = 0; i < clusters_.size(); ++i) {
      cluster_at_.emplace(clusters_[i]->info.name, static_cast<uint32_t>(i));
    }
  }
  ClusterSlots& target = *clusters_[index];
  for (const auto& [id, alloc] : allocations_) {
    if (alloc->assignment.cluster == cluster.info.name) Mark(target, id, *alloc, false);
  }
  RefreshSummary(static_cast<uint32_t>(index));
}

void Pool::SetDeclaration(const ClusterDeclaration& declared) {
  const ClusterSlots* c = FindCluster(declared.cluster);
  if (c == nullptr) return;
  // The inventory again, under the new declaration: node capacity types may change with it.
  Cluster cluster;
  cluster.info = c->reported;
  cluster.state = c->state;
  cluster.epoch = c->epoch;
  cluster.declared = declared;
  cluster.nodes.reserve(c->nodes.size());
  for (const NodeSlots& node : c->nodes) cluster.nodes.push_back(node.info);
  UpsertCluster(cluster);
}

void Pool::SetClusterState(absl::string_view cluster, ClusterState state) {
  const int index = FindClusterIndex(cluster);
  if (index < 0) return;
  Own(static_cast<uint32_t>(index)).state = state;
  Rerank(static_cast<uint32_t>(index));
}

void Pool::Mark(ClusterSlots& cluster, WorkloadId id, const Allocation& alloc, bool release,
                absl::InlinedVector<uint32_t, 4>* touched) {
  if (!release) {
    for (const Repartition& r : alloc.assignment.repartitions) {
      auto it = cluster.node_at.find(r.node);
      if (it == cluster.node_at.end()) continue;
      NodeSlots& node = cluster.nodes[it->second];
      const int g = node.FindGpu(r.gpu_uuid);
      if (g < 0 || !MayRepartition(node, g, r)) continue;
      SetLayout(node, g, r.mig_enabled, r.layout);
      RecountNode(node);
      if (touched != nullptr) touched->push_back(it->second);
    }
  }
  for (const ReplicaAssignment& replica : alloc.assignment.replicas) {
    auto it = cluster.node_at.find(replica.node);
    if (it == cluster.node_at.end()) continue;
    (void)ApplyReplica(cluster.nodes[it->second], id, replica, alloc.host, release,
                       /*strict=*/false);
    if (touched != nullptr) touched->push_back(it->second);
  }
}

absl::Status Pool::Allocate(WorkloadId id, const Assignment& assignment, HostDemand host) {
  if (allocations_.contains(id)) {
    // Never silently move a workload: its resources are in use until it is released.
    return absl::FailedPreconditionError(
        absl::StrCat("workload ", id, " already holds an allocation"));
  }
  auto alloc = std::make_shared<const Allocation>(Allocation{assignment, host});
  const int index = FindClusterIndex(assignment.cluster);
  if (index < 0) {
    allocations_.emplace(id, std::move(alloc));
    return absl::OkStatus();
  }
  ClusterSlots* cluster = &Own(static_cast<uint32_t>(index));
  // Changes are made in place; the touched nodes' state is saved first so that a refusal puts it
  // back and changes nothing (cheaper than working on copies of whole nodes).
  struct Saved {
    uint32_t index;
    std::vector<GpuSlot> gpus;
    uint64_t cpu_free;
    uint64_t memory_free;
    uint64_t version;
    std::vector<std::pair<bool, std::vector<MigInstance>>> layouts;  // per GPU, if repartitioned
  };
  absl::InlinedVector<Saved, 2> saved;
  auto touch = [&](const std::string& name) -> NodeSlots* {
    auto it = cluster->node_at.find(name);
    if (it == cluster->node_at.end()) return nullptr;
    NodeSlots& node = cluster->nodes[it->second];
    if (std::none_of(saved.begin(), saved.end(),
                     [&](const Saved& s) { return s.index == it->second; })) {
      saved.push_back(
          Saved{it->second, node.gpus, node.cpu_free, node.memory_free, node.version, {}});
    }
    return &node;
  };
  auto undo = [&] {
    for (Saved& s : saved) {
      NodeSlots& node = cluster->nodes[s.index];
      node.gpus = std::move(s.gpus);
      node.cpu_free = s.cpu_free;
      node.memory_free = s.memory_free;
      for (size_t g = 0; g < s.layouts.size(); ++g) {
        node.info.gpus[g].mig_enabled = s.layouts[g].first;
        node.info.gpus[g].mig_layout = std::move(s.layouts[g].second);
      }
      RecountNode(node);
      node.version = s.version;  // exactly as before
    }
  };
  uint64_t changed_layouts = 0;
  for (const Repartition& r : assignment.repartitions) {
    NodeSlots* node = touch(r.node);
    if (node == nullptr) continue;
    const int g = node->FindGpu(r.gpu_uuid);
    if (g < 0) continue;
    const GpuInfo& info = node->info.gpus[g];
    const bool same =
        info.mig_enabled == r.mig_enabled && (!r.mig_enabled || info.mig_layout == r.layout);
    if (same) continue;
    if (!MayRepartition(*node, g, r)) {
      undo();
      return absl::FailedPreconditionError(
          absl::StrCat("cannot repartition GPU ", r.gpu_uuid, " on ", r.node,
                       ": it is in use (a new layout must keep every bound MIG instance)"));
    }
    Saved& save = *std::find_if(saved.begin(), saved.end(),
                                [&](const Saved& x) { return &cluster->nodes[x.index] == node; });
    if (save.layouts.empty()) {
      for (const GpuInfo& gpu : node->info.gpus) {
        save.layouts.emplace_back(gpu.mig_enabled, gpu.mig_layout);
      }
    }
    SetLayout(*node, g, r.mig_enabled, r.layout);
    RecountNode(*node);
    ++changed_layouts;
  }
  for (const ReplicaAssignment& replica : assignment.replicas) {
    NodeSlots* node = touch(replica.node);
    if (node == nullptr) continue;
    absl::Status s = ApplyReplica(*node, id, replica, host, /*release=*/false, /*strict=*/true);
    if (!s.ok()) {
      undo();
      return s;
    }
  }
  allocations_.emplace(id, std::move(alloc));
  repartitions_applied_ += changed_layouts;
  absl::InlinedVector<uint32_t, 4> touched;
  for (const Saved& s : saved) touched.push_back(s.index);
  RefreshSummary(static_cast<uint32_t>(index), &touched);
  return absl::OkStatus();
}

void Pool::Release(WorkloadId id) {
  auto it = allocations_.find(id);
  if (it == allocations_.end()) return;
  if (const int index = FindClusterIndex(it->second->assignment.cluster); index >= 0) {
    absl::InlinedVector<uint32_t, 4> touched;
    Mark(Own(static_cast<uint32_t>(index)), id, *it->second, /*release=*/true, &touched);
    RefreshSummary(static_cast<uint32_t>(index), &touched);
  }
  allocations_.erase(it);
}

void Pool::RefreshSummary(uint32_t index, const absl::InlinedVector<uint32_t, 4>* touched) {
  ClusterSlots& cluster = Own(index);
  // The nodes' own summaries are current (RecountNode runs after every change to a node): copy
  // the changed ones and add them all up instead of walking every GPU again.
  static std::atomic<uint64_t> next_version{1};
  cluster.version = next_version.fetch_add(1, std::memory_order_relaxed);
  const size_t n_nodes = cluster.nodes.size();
  if (touched == nullptr || cluster.quick.size() != n_nodes ||
      cluster.node_summary.size() != n_nodes) {
    cluster.quick.resize(n_nodes);
    cluster.node_summary.resize(n_nodes);
    for (size_t i = 0; i < n_nodes; ++i) {
      cluster.quick[i] = NodeQuick::Of(cluster.nodes[i]);
      cluster.node_summary[i] = cluster.nodes[i].summary;
    }
  } else {
    for (uint32_t i : *touched) {
      cluster.quick[i] = NodeQuick::Of(cluster.nodes[i]);
      cluster.node_summary[i] = cluster.nodes[i].summary;
    }
  }
  cluster.summary.assign(models_.size(), {});
  for (size_t i = 0; i < n_nodes; ++i) {
    for (const auto& [model, n] : cluster.node_summary[i]) {
      ModelSummary& s = cluster.summary[model];
      s.whole_free += n.whole_free;
      s.max_node_whole_free = std::max(s.max_node_whole_free, n.max_node_whole_free);
      s.max_gpu_milli_free = std::max(s.max_gpu_milli_free, n.max_gpu_milli_free);
      s.mig_free_instances += n.mig_free_instances;
      s.mig_idle_capable += n.mig_idle_capable;
      s.milli_free += n.milli_free;
      s.mig_open += n.mig_open;
    }
  }
  Rerank(index);
}

namespace {
// RankFree beyond this does not fit a ClusterOrder key (2^43 milli-GPUs: never in practice).
constexpr uint64_t kMaxRankFree = uint64_t{1} << (63 - Pool::ClusterOrder::kIndexBits);
}  // namespace

Pool::RankedCluster Pool::RankOf(uint32_t index, uint64_t model_mask) const {
  const ClusterSlots& c = *clusters_[index];
  RankedCluster r;
  r.key = std::min(RankFree(c, model_mask), kMaxRankFree) << ClusterOrder::kIndexBits | index;
  for (size_t m = 0; m < c.summary.size() && m < 64; ++m) {
    if ((model_mask & (uint64_t{1} << m)) == 0) continue;
    const ModelSummary& s = c.summary[m];
    r.models.whole_free += s.whole_free;
    r.models.max_node_whole_free += s.max_node_whole_free;
    r.models.max_gpu_milli_free = std::max(r.models.max_gpu_milli_free, s.max_gpu_milli_free);
    r.models.mig_free_instances += s.mig_free_instances;
    r.models.mig_idle_capable += s.mig_idle_capable;
    r.models.milli_free += s.milli_free;
    r.models.mig_open += s.mig_open;
  }
  r.listed = c.state == ClusterState::kReady &&
             (r.models.milli_free > 0 || r.models.mig_free_instances > 0 ||
              r.models.mig_idle_capable > 0 || r.models.mig_open > 0);
  return r;
}

namespace {
uint16_t Saturate(uint32_t v) {
  return static_cast<uint16_t>(std::min<uint32_t>(v, Pool::ClusterOrder::kSaturated));
}
Pool::ClusterOrder::Entry EntryOf(const Pool::RankedCluster& r) {
  return Pool::ClusterOrder::Entry{
      r.key, Saturate(r.models.whole_free), Saturate(r.models.max_node_whole_free),
      Saturate(r.models.max_gpu_milli_free), Saturate(r.models.mig_idle_capable)};
}
bool KeyBefore(const Pool::ClusterOrder::Entry& e, uint64_t key) { return e.key < key; }
}  // namespace

void Pool::Rerank(uint32_t index) {
  for (RankedOrder& o : orders_) {
    ClusterOrder& order = o.order;
    if (index >= order.clusters.size()) continue;  // a dropped order (clusters were added)
    const RankedCluster now = RankOf(index, o.mask);
    if ((now.key >> ClusterOrder::kIndexBits) >= kMaxRankFree) {
      orders_.clear();  // rebuilt (or refused) on next use
      return;
    }
    std::vector<ClusterOrder::Entry>& entries = order.entries;
    const RankedCluster& was = order.clusters[index];
    if (was.listed && now.listed) {
      // Move the entry to its new place by shifting the ones in between.
      auto at = std::lower_bound(entries.begin(), entries.end(), was.key, KeyBefore);
      auto to = std::lower_bound(entries.begin(), entries.end(), now.key, KeyBefore);
      if (to > at) {
        std::rotate(at, at + 1, to);
        --to;
      } else if (to < at) {
        std::rotate(to, at, at + 1);
      }
      *to = EntryOf(now);
    } else if (was.listed) {
      entries.erase(std::lower_bound(entries.begin(), entries.end(), was.key, KeyBefore));
    } else if (now.listed) {
      entries.insert(std::lower_bound(entries.begin(), entries.end(), now.key, KeyBefore),
                     EntryOf(now));
    }
    order.clusters[index] = now;
  }
}

uint64_t Pool::RankFree(const ClusterSlots& cluster, uint64_t model_mask) {
  uint64_t free = 0;
  for (size_t m = 0; m < cluster.summary.size() && m < 64; ++m) {
    if ((model_mask & (uint64_t{1} << m)) == 0) continue;
    free += cluster.summary[m].milli_free + uint64_t{cluster.summary[m].mig_free_instances} * 100;
  }
  return free;
}

const Pool::ClusterOrder* Pool::ClustersByFree(uint64_t model_mask) const {
  if (models_.size() > 64 || clusters_.size() > ClusterOrder::kIndexMask) return nullptr;
  for (const RankedOrder& o : orders_) {
    if (o.mask == model_mask && o.order.clusters.size() == clusters_.size()) return &o.order;
  }
  ClusterOrder order;
  for (size_t i = 0; i < clusters_.size(); ++i) {
    order.clusters.push_back(RankOf(static_cast<uint32_t>(i), model_mask));
    const RankedCluster& r = order.clusters.back();
    if ((r.key >> ClusterOrder::kIndexBits) >= kMaxRankFree) return nullptr;
    if (r.listed) order.entries.push_back(EntryOf(r));
  }
  std::sort(
      order.entries.begin(), order.entries.end(),
      [](const ClusterOrder::Entry& a, const ClusterOrder::Entry& b) { return a.key < b.key; });
  // Reuse the slot of an order dropped when clusters were added.
  auto slot = std::find_if(orders_.begin(), orders_.end(), [&](const RankedOrder& o) {
    return o.order.clusters.size() != clusters_.size();
  });
  if (slot == orders_.end()) {
    if (orders_.size() >= kMaxClusterOrders) return nullptr;
    slot = orders_.emplace(orders_.end());
  }
  slot->mask = model_mask;
  slot->order = std::move(order);
  return &slot->order;
}

ClusterCapacity Pool::CapacityOf(const ClusterSlots& cluster) {
  ClusterCapacity cap;
  for (const NodeSlots& node : cluster.nodes) {
    for (size_t g = 0; g < node.info.gpus.size(); ++g) {
      const GpuInfo& gpu = node.info.gpus[g];
      ModelCount& m = cap.by_model[gpu.model];
      ++cap.total;
      ++m.total;
      if (!node.gpus[g].Idle()) {
        ++cap.allocated;
        ++m.allocated;
      } else if (gpu.healthy && node.info.schedulable) {
        ++cap.free;
        ++m.free;
      }
    }
  }
  return cap;
}

}  // namespace gpufed
