#ifndef GPUFED_FEDERATION_POOL_H_
#define GPUFED_FEDERATION_POOL_H_

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "federation/types.h"

namespace gpufed {

inline constexpr uint32_t kMilliPerGpu = 1000;
inline constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();

// What one replica holds on one GPU.
struct GpuHold {
  WorkloadId id = 0;
  uint32_t milli = kMilliPerGpu;  // 1000: the whole GPU
};

inline constexpr uint8_t kNoRank = 0xff;

// The live state of one GPU. A GPU without MIG is shared by milli-GPUs (whole-GPU holders take
// 1000); a MIG-enabled GPU is used only through its instances, one holder each.
struct GpuSlot {
  uint32_t milli_free = kMilliPerGpu;  // 0 when unhealthy or MIG-enabled
  absl::InlinedVector<GpuHold, 2> holders;
  std::vector<WorkloadId> mig_owners;               // parallel to GpuInfo::mig_layout; 0 = free
  uint16_t model = 0;                               // interned model id (Pool::ModelName)
  CapacityType capacity = CapacityType::kOnDemand;  // how the node's GPUs are paid for
  // The GPU's NVLink domain, PCIe switch and NUMA node ("numa<N>") as their rank in name order
  // among the node's; kNoRank for an empty name. Placement groups GPUs by these without
  // comparing strings.
  uint8_t nvlink_rank = kNoRank;
  uint8_t switch_rank = kNoRank;
  uint8_t numa_rank = 0;
  // Copies of the GpuInfo figures placement reads for every GPU it looks at, next to the rest
  // of the slot (RecountNode keeps them equal to the inventory's).
  bool healthy = true;
  bool mig_enabled = false;
  uint64_t memory_mib = 0;

  // Nothing runs on it: no holder and no bound MIG instance.
  [[nodiscard]] bool Idle() const;
};

// Free capacity of one GPU model on a node or in a cluster.
struct ModelSummary {
  uint32_t whole_free = 0;
  uint32_t max_node_whole_free = 0;
  uint32_t max_gpu_milli_free = 0;
  uint32_t mig_free_instances = 0;
  uint32_t mig_idle_capable = 0;
  uint64_t milli_free = 0;
  // MIG-enabled GPUs with a memory slot no instance covers: room for a new instance.
  uint32_t mig_open = 0;
};

// One node's GPUs and host resources, and who holds what.
struct NodeSlots {
  NodeInfo info;
  std::vector<GpuSlot> gpus;  // parallel to info.gpus
  // Host resources left; kUnlimited when the inventory does not report them.
  uint64_t cpu_free = kUnlimited;
  uint64_t memory_free = kUnlimited;
  uint32_t free = 0;  // whole GPUs free for non-MIG use (healthy, not MIG-enabled, no holder)
  // Derived like `free` (RecountNode): the largest share left on one healthy GPU without MIG;
  // healthy MIG-enabled GPUs nothing runs on; and, when the node is schedulable, its free
  // capacity per model (usually one), which the cluster's summary adds up.
  uint32_t max_milli_free = 0;
  uint32_t mig_idle = 0;
  absl::InlinedVector<std::pair<uint16_t, ModelSummary>, 1> summary;
  // Changes (to a number no node had before) whenever RecountNode runs, that is after every
  // change to the node; copies share it. Placement remembers per version what it found.
  uint64_t version = 0;
  // Its GPUs' driver and CUDA versions from its labels (PackVersion; 0: not reported).
  uint64_t driver_version = 0;
  uint64_t cuda_version = 0;

  // The workload holding GPU `g` (the first one, if it is shared); 0 if none.
  [[nodiscard]] WorkloadId HolderOf(size_t g) const;
  // Index of the GPU with this uuid; -1 if absent.
  [[nodiscard]] int FindGpu(absl::string_view uuid) const;
};

// The node figures placement checks first, side by side for a cluster's nodes so that ruling
// out full nodes reads little memory (copies of the NodeSlots fields of the same names).
struct NodeQuick {
  uint64_t cpu_free = kUnlimited;
  uint64_t memory_free = kUnlimited;
  uint64_t version = 0;
  uint32_t free = 0;
  uint32_t max_milli_free = 0;
  uint32_t mig_idle = 0;
  // Free MIG instances, idle MIG-capable GPUs and MIG GPUs with room, over all models: 0 when
  // no MIG request can go here.
  uint32_t mig_room = 0;
  bool schedulable = false;

  static NodeQuick Of(const NodeSlots& node) {
    uint32_t mig_room = 0;
    for (const auto& [model, s] : node.summary) {
      mig_room += s.mig_free_instances + s.mig_idle_capable + s.mig_open;
    }
    return NodeQuick{node.cpu_free,       node.memory_free, node.version, node.free,
                     node.max_milli_free, node.mig_idle,    mig_room,     node.info.schedulable};
  }
};

struct ClusterSlots {
  // What its agent reported, with the admin's declared attributes laid over it (EffectiveInfo).
  ClusterInfo info;
  ClusterInfo reported;  // what its agent reported
  // The admin's declaration: prices, round-trip times, the default capacity type.
  ClusterDeclaration declared;
  // Per interned model id: bit t set when the cluster has a GPU of that model of CapacityType t
  // (healthy or not; what the router prices).
  std::vector<uint8_t> capacity_by_model;
  // The newest driver and CUDA version of any of its nodes (PackVersion; 0: none reported).
  uint64_t max_driver_version = 0;
  uint64_t max_cuda_version = 0;
  // Unique to each inventory a pool is given (UpsertCluster), shared by copies: what depends
  // only on the inventory (topology groups) may be remembered under it.
  uint64_t inventory_id = 0;
  // Changes (to a number no cluster had before) whenever a node of the cluster changes.
  uint64_t version = 0;
  ClusterState state = ClusterState::kReady;
  uint64_t epoch = 1;
  std::vector<NodeSlots> nodes;                        // in inventory order
  absl::flat_hash_map<std::string, uint32_t> node_at;  // node name -> index in nodes
  // Per interned model id: whole GPUs free in the cluster and the most on one node; the largest
  // share left on one GPU; free MIG instances and idle MIG-capable GPUs. Kept current by the pool
  // so placement can skip clusters that cannot hold a request without looking at their nodes.
  using ModelSummary = gpufed::ModelSummary;
  std::vector<ModelSummary> summary;  // indexed by model id
  std::vector<NodeQuick> quick;       // parallel to nodes; kept current with the summary
  // Parallel to nodes: copies of each node's summary, which `summary` adds up without reading
  // the nodes themselves.
  std::vector<absl::InlinedVector<std::pair<uint16_t, ModelSummary>, 1>> node_summary;

  [[nodiscard]] const NodeSlots* FindNode(absl::string_view name) const;
};

// GPUs of a cluster (or of one model in it). `total` counts every GPU of the inventory, healthy
// or not; `allocated` those something runs on (a whole-GPU holder, a share, a bound MIG
// instance); `free` the idle, healthy GPUs on schedulable nodes. The rest (total - allocated -
// free) are idle but unusable: unhealthy, or on a node that is not schedulable.
struct ModelCount {
  uint32_t total = 0;
  uint32_t allocated = 0;
  uint32_t free = 0;
};

struct ClusterCapacity {
  uint32_t total = 0;
  uint32_t allocated = 0;
  uint32_t free = 0;
  std::map<std::string, ModelCount> by_model;
};

// Host resources one replica takes on its node.
struct HostDemand {
  uint64_t cpu_millis = 0;
  uint64_t memory_mib = 0;
};

// The clusters of a pool in name order, read-only: a vector's reading half over the clusters the
// pool shares with its copies.
class ClusterList {
 public:
  using Shared = std::vector<std::shared_ptr<ClusterSlots>>;
  class Iterator {
   public:
    using iterator_category = std::random_access_iterator_tag;
    using value_type = ClusterSlots;
    using difference_type = std::ptrdiff_t;
    using pointer = const ClusterSlots*;
    using reference = const ClusterSlots&;

    Iterator() = default;
    explicit Iterator(Shared::const_iterator it) : it_(it) {}
    reference operator*() const { return **it_; }
    pointer operator->() const { return it_->get(); }
    Iterator& operator++() {
      ++it_;
      return *this;
    }
    Iterator operator++(int) { return Iterator(it_++); }
    difference_type operator-(const Iterator& other) const { return it_ - other.it_; }
    bool operator==(const Iterator& other) const = default;

   private:
    Shared::const_iterator it_;
  };

  explicit ClusterList(const Shared& clusters) : clusters_(&clusters) {}
  [[nodiscard]] size_t size() const { return clusters_->size(); }
  [[nodiscard]] bool empty() const { return clusters_->empty(); }
  const ClusterSlots& operator[](size_t i) const { return *(*clusters_)[i]; }
  [[nodiscard]] Iterator begin() const { return Iterator(clusters_->begin()); }
  [[nodiscard]] Iterator end() const { return Iterator(clusters_->end()); }

 private:
  const Shared* clusters_;
};

// The unified capacity pool held in memory by the scheduler (and by the simulator): every
// cluster, node and GPU, and which workload holds each GPU, share of a GPU or MIG instance.
// Rebuilt from PostgreSQL at start; kept current from committed changes.
//
// Copies are cheap and share what they have in common: a copy shares every cluster (and every
// allocation) with the pool it was copied from until one of them changes it, which then changes
// its own copy of that cluster only (copy on write). So the scheduler can publish its pool after
// every cycle at the cost of the clusters that cycle changed, not of the whole federation.
//
// Thread-safety: not thread-safe; one owner mutates a Pool (and places on it: placement fills
// caches). Copies may be made by the owner and handed to other threads, which read them (or
// mutate their own copy) while the owner goes on changing the original.
class Pool {
 public:
  // Adds or replaces a cluster's inventory and state. Allocations of workloads on that cluster
  // are re-applied to the new inventory (GPUs that disappeared are simply gone).
  void UpsertCluster(const Cluster& cluster);
  void SetClusterState(absl::string_view cluster, ClusterState state);
  // Replaces a cluster's declaration (its attributes, prices, round-trip times, default capacity
  // type); no-op for a cluster the pool does not hold.
  void SetDeclaration(const ClusterDeclaration& declared);

  // Applies the assignment's repartitions, then marks what each replica takes as held by `id`:
  // whole GPUs, a share of one GPU (`gpu_milli`) or a MIG instance, plus `host` per replica.
  // FAILED_PRECONDITION if something is held by another workload, does not fit, or `id` already
  // holds an allocation; the pool is unchanged then. Parts of the assignment unknown to the pool
  // (a node or GPU the inventory lost) are remembered and applied if the inventory brings them
  // back.
  absl::Status Allocate(WorkloadId id, const Assignment& assignment, HostDemand host = {});
  // Frees whatever `id` holds; no-op if nothing. MIG layouts stay as they are.
  void Release(WorkloadId id);
  bool Holds(WorkloadId id) const { return allocations_.contains(id); }
  size_t allocation_count() const { return allocations_.size(); }

  // Sorted by cluster name.
  ClusterList clusters() const { return ClusterList(clusters_); }
  const ClusterSlots* FindCluster(absl::string_view name) const;

  // Interned GPU model ids: stable for the life of the pool.
  uint16_t ModelId(absl::string_view model);
  int FindModelId(absl::string_view model) const;  // -1 if unknown
  const std::string& ModelName(uint16_t id) const { return models_[id]; }
  size_t model_count() const { return models_.size(); }

  // Repartitions applied since the pool was built (partitioning authority, for reports).
  uint64_t repartitions_applied() const { return repartitions_applied_; }

  static ClusterCapacity CapacityOf(const ClusterSlots& cluster);

  // Placement ranks clusters tightest first by this: free milli-GPUs plus 100 per free MIG
  // instance, over the models whose bit is set in `model_mask` (bit m: model id m).
  static uint64_t RankFree(const ClusterSlots& cluster, uint64_t model_mask);
  // A cluster as a ClusterOrder sees it: its summary over the order's models (counts summed;
  // max_gpu_milli_free the largest; max_node_whole_free summed, an upper bound when nodes mix
  // models), so that walking an order does not visit the clusters.
  struct RankedCluster {
    uint64_t key = 0;     // RankFree << kIndexBits | index into clusters()
    bool listed = false;  // in ClusterOrder::entries
    ModelSummary models;
  };
  struct ClusterOrder {
    static constexpr int kIndexBits = 20;
    static constexpr uint64_t kIndexMask = (uint64_t{1} << kIndexBits) - 1;
    static constexpr uint16_t kSaturated = 0xffff;
    // A listed cluster: its key and, saturated at kSaturated, the figures that most often rule
    // it out, so that a walk rarely leaves this vector.
    struct Entry {
      uint64_t key = 0;
      uint16_t whole_free = 0;
      uint16_t max_node_whole_free = 0;
      uint16_t max_gpu_milli_free = 0;
      uint16_t mig_idle_capable = 0;
    };
    // The ready clusters with some free capacity of the order's models (a free share or MIG
    // instance, an idle MIG-capable GPU, room for a new MIG instance), by key ascending:
    // tightest first, ties in name order. Others can hold no request for a GPU.
    std::vector<Entry> entries;
    std::vector<RankedCluster> clusters;  // every cluster, by index into clusters()
  };
  // The clusters ordered by RankFree for `model_mask`, kept current as allocations change, so
  // that placing one request in a federation of thousands of clusters does not rank them all.
  // Built on first use of a mask (a cache: the pool's contents are unchanged, but this is why
  // two threads may not place on one Pool at once). nullptr when the pool has more than 64
  // models, or 2^20 clusters, or already keeps kMaxClusterOrders orders; callers then rank by
  // themselves.
  const ClusterOrder* ClustersByFree(uint64_t model_mask) const;
  static constexpr size_t kMaxClusterOrders = 64;

 private:
  struct Allocation {
    Assignment assignment;
    HostDemand host;
  };

  // The cluster at `index`, this pool's own (copied first when a copy of the pool shares it).
  ClusterSlots& Own(uint32_t index);
  int FindClusterIndex(absl::string_view name) const;  // -1 if absent
  NodeSlots MakeNode(const NodeInfo& info, CapacityType default_capacity);
  // Checks that the allocation fits (ignoring what `id` itself holds); OK or why not.
  absl::Status CheckFits(WorkloadId id, const ClusterSlots& cluster, const Allocation& alloc) const;
  // Applies (or, with `release`, removes) the allocation on the cluster's slots; adds the indices
  // of the nodes it changed to `touched`, if given.
  void Mark(ClusterSlots& cluster, WorkloadId id, const Allocation& alloc, bool release,
            absl::InlinedVector<uint32_t, 4>* touched = nullptr);
  // After nodes of the cluster at `index` (owned) changed: refreshes the cluster's copies of
  // their figures (`touched`; nullptr: every node), then its summary and its place in the cluster
  // orders.
  void RefreshSummary(uint32_t index, const absl::InlinedVector<uint32_t, 4>* touched = nullptr);

  struct RankedOrder {
    uint64_t mask = 0;
    ClusterOrder order;
  };
  RankedCluster RankOf(uint32_t index, uint64_t model_mask) const;
  // Moves the cluster to its place in every order after its summary or state changed.
  void Rerank(uint32_t index);

  // Shared with copies of the pool until written (Own); an allocation never changes once made.
  ClusterList::Shared clusters_;
  absl::flat_hash_map<std::string, uint32_t> cluster_at_;  // name -> index in clusters_
  absl::flat_hash_map<WorkloadId, std::shared_ptr<const Allocation>> allocations_;
  std::vector<std::string> models_;
  std::unordered_map<std::string, uint16_t> model_ids_;
  uint64_t repartitions_applied_ = 0;
  mutable std::vector<RankedOrder> orders_;
};

// Recomputes a node's `free` count, `milli_free` per GPU and the other derived figures from its
// holders (after an edit).
void RecountNode(NodeSlots& node);

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_POOL_H_
