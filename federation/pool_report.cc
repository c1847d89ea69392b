#include "federation/pool_report.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"

namespace gpufed {
namespace {

// Nodes in the same state (model, CPU left, free shares in any order) have the same
// fragmentation, and a pool has far fewer states than nodes (most nodes of a large pool are
// empty or full): each state is measured once per report.
class Fragmentation {
 public:
  explicit Fragmentation(const WorkloadMix& mix) : mix_(mix) {}
  double Of(const NodeView& v) {
    Key key{v.model, v.cpu_free, {v.milli_free.begin(), v.milli_free.end()}};
    std::sort(std::get<2>(key).begin(), std::get<2>(key).end());
    auto [it, added] = cache_.try_emplace(std::move(key), 0);
    if (added) it->second = NodeFragmentation(v, mix_, FragmentationMeasure::kFgd);
    return it->second;
  }

 private:
  using Key = std::tuple<uint16_t, uint64_t, absl::InlinedVector<uint32_t, 8>>;
  const WorkloadMix& mix_;
  absl::flat_hash_map<Key, double> cache_;
};

}  // namespace

std::vector<PoolModelReport> ReportPool(const Pool& pool, const WorkloadMix& mix) {
  Fragmentation fragmentation(mix);
  std::vector<PoolModelReport> out;
  for (const ClusterSlots& cluster : pool.clusters()) {
    const ClusterCapacity capacity = Pool::CapacityOf(cluster);
    std::map<std::string, PoolModelReport> by_model;  // model name order
    for (const auto& [model, count] : capacity.by_model) {
      PoolModelReport& r = by_model[model];
      r.cluster = cluster.info.name;
      r.model = model;
      r.gpus = count;
    }
    for (const NodeSlots& node : cluster.nodes) {
      // Capacity on a node placement may not use is not free, fragmented or not.
      if (!node.info.schedulable) continue;
      // One view per model on the node (usually one), as placement sees a node for a request
      // of that model: healthy GPUs without MIG (a MIG GPU is used only through its instances).
      std::map<uint16_t, NodeView> views;
      for (size_t g = 0; g < node.gpus.size(); ++g) {
        const GpuSlot& slot = node.gpus[g];
        if (!slot.healthy || slot.mig_enabled) continue;
        auto [it, added] = views.try_emplace(slot.model);
        NodeView& v = it->second;
        if (added) {
          v.model = slot.model;
          v.cpu_total = node.info.cpu_millis;
          v.memory_total = node.info.memory_mib;
          v.cpu_free = node.cpu_free;
          v.memory_free = node.memory_free;
        }
        v.milli_free.push_back(slot.milli_free);
        ++v.gpu_total;
      }
      for (const auto& [model, view] : views) {
        auto it = by_model.find(pool.ModelName(model));
        if (it == by_model.end()) continue;  // cannot happen: CapacityOf saw the same GPUs
        it->second.fragmented_milli += fragmentation.Of(view);
        it->second.free_milli += view.MilliFree();
      }
    }
    for (auto& [model, r] : by_model) out.push_back(std::move(r));
  }
  return out;
}

}  // namespace gpufed
