#ifndef GPUFED_FEDERATION_PLACEMENT_INTERNAL_H_
#define GPUFED_FEDERATION_PLACEMENT_INTERNAL_H_

// Pieces shared by the placement engine (placement.cc) and its explanations (explain.cc). Not
// part of the federation's interface.

#include <array>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "federation/placement.h"

namespace gpufed::placement_internal {

// The hard filters of one request, resolved against the pool's model ids.
struct Filter {
  Demand demand;
  bool any_model = true;
  std::vector<bool> model_ok;  // by model id
  std::vector<bool> mig_ok;    // by model id: the model's geometry has the MIG profile
  uint64_t min_memory = 0;
  uint8_t capacity = 0xff;  // allowed capacity types as bits (PlacementScope::capacity)
  uint64_t min_driver = 0;  // PackVersion of the spec's minimums; 0: any
  uint64_t min_cuda = 0;
  std::vector<bool> cluster_ok;  // by cluster index; empty: every cluster

  [[nodiscard]] bool ClusterOk(size_t index) const {
    return cluster_ok.empty() || (index < cluster_ok.size() && cluster_ok[index]);
  }
  // The allowed models as bits by model id (all bits: any model); nothing when a model id
  // beyond 63 is allowed.
  [[nodiscard]] std::optional<uint64_t> ModelBits() const;
};

Filter MakeFilter(const Pool& pool, const WorkloadSpec& spec,
                  const PlacementScope* scope = nullptr);
bool GpuEligible(const Filter& f, const NodeSlots& node, size_t g);

// View index -> node GPU index.
using ViewIndex = absl::InlinedVector<uint8_t, 8>;

// The node as the policy sees it, over the eligible GPUs in `mask`. `ignore_holders` pretends
// the node is empty; `mig_off` counts idle MIG GPUs as whole GPUs.
NodeView BuildView(const NodeSlots& node, const Filter& f, uint64_t mask, bool ignore_holders,
                   bool mig_off, ViewIndex* index);

// `count` fully free GPUs of the view inside the smallest NVLink domain (then PCIe switch, then
// NUMA node) that holds them, else the lowest indices; empty if there are not enough, or with
// `one_domain` if no NVLink domain holds them.
absl::InlinedVector<uint8_t, 8> WholePick(const NodeSlots& node, const NodeView& v,
                                          const ViewIndex& index, uint32_t count, bool one_domain);

// Topology levels, smallest first.
enum class Level { kNode, kDomain, kRack, kBlock, kCluster };
absl::string_view LevelName(Level level);  // "node", "NVLink domain", ...

// Part of a node inside a group: its GPUs in `mask`.
struct Member {
  uint32_t node = 0;
  uint64_t mask = ~uint64_t{0};
};
struct Group {
  std::string key;  // domain / rack / block / node name
  std::vector<Member> members;
};

// The levels a request may use, smallest first: a gang without a requirement tries node, NVLink
// domain, rack, block, cluster; a requirement allows only its level (and smaller ones inside it).
using Levels = absl::InlinedVector<Level, 5>;
Levels LevelsFor(Topology topology, uint32_t replicas);
std::vector<Group> GroupsAt(const ClusterSlots& cluster, Level level);

// The group (at some level) holding the most replicas of a request, over some clusters.
struct GroupBest {
  uint64_t replicas = 0;
  uint64_t gpu_only = 0;  // the most replicas the GPUs alone would allow, in any group
  uint64_t units = 0;     // free units in that group
  std::string where;      // "cluster/key"
};

// What an engine keeps between calls only to go faster.
struct EngineCache {
  // Node copies for packing gangs: assigning a node to a used buffer rarely allocates.
  std::vector<NodeSlots> scratch;
  // GroupsAt for the NVLink-domain, rack and block levels, by cluster inventory: they depend on
  // nothing else.
  std::unordered_map<uint64_t, std::array<std::optional<std::vector<Group>>, 3>> groups;
  std::vector<Group> uncached;  // a cluster the pool did not build (no inventory id)

  // What BestOnNode found for a request on a node in a given state (NodeSlots::version), for
  // pure policies in the first pass (MIG requests: with an empty queue): most nodes a request
  // looks at are unchanged since a request like it last looked. Requests are interned to small
  // ids; a result is kept small (its score and GPUs; the candidate is rebuilt when chosen).
  struct RequestKey {
    Demand::Kind kind;
    uint32_t gpus;
    uint32_t milli;
    uint64_t cpu_millis;
    uint64_t memory_mib;
    uint64_t min_gpu_memory;
    uint64_t models;  // allowed model ids as bits; all bits: any
    std::string mig_profile;
    bool one_domain;
    bool partitioning;
    uint8_t capacity;
    uint64_t min_driver;
    uint64_t min_cuda;
    bool operator==(const RequestKey&) const = default;
    template <typename H>
    friend H AbslHashValue(H h, const RequestKey& k) {
      return H::combine(std::move(h), k.kind, k.gpus, k.milli, k.cpu_millis, k.memory_mib,
                        k.min_gpu_memory, k.models, k.mig_profile, k.one_domain, k.partitioning,
                        k.capacity, k.min_driver, k.min_cuda);
    }
  };
  struct NodeKey {
    uint64_t version;
    uint64_t mask;
    uint32_t request;
    uint32_t node;
    bool operator==(const NodeKey&) const = default;
    template <typename H>
    friend H AbslHashValue(H h, const NodeKey& k) {
      return H::combine(std::move(h), k.version, k.mask, k.request, k.node);
    }
  };
  struct Found {
    static constexpr int8_t kNone = -1;   // no candidate on the node
    static constexpr int8_t kLarge = -2;  // more GPUs than `gpus` holds: not remembered
    double score = 0;
    int8_t n = kNone;  // GPUs in `gpus`
    std::array<uint8_t, 8> gpus{};
    int8_t mig_class = -1;  // MIG requests: Placer::MigPick's
    int16_t mig_aux = -1;
  };
  static constexpr size_t kMaxRequests = 4096;
  static constexpr size_t kMaxFound = size_t{1} << 15;
  absl::flat_hash_map<RequestKey, uint32_t> requests;
  absl::flat_hash_map<NodeKey, Found> found;
  // What a whole cluster (ClusterSlots::version) offered one replica of a request in the first
  // pass: the nodes, in order, that were the best so far or tied with it, and what each offered.
  // Only these can be chosen or draw a tie-break, so offering them again makes the same choice,
  // with the same draws, as looking at every node of the unchanged cluster; an empty list says
  // that no node holds it.
  struct Offered {
    uint32_t node;
    Found found;
  };
  absl::flat_hash_map<std::pair<uint64_t, uint32_t>, absl::InlinedVector<Offered, 2>> offered;
  // ExplainFailure: the best group each cluster would offer a request if it were empty, by
  // inventory (ClusterSlots::inventory_id), request and level: an empty cluster's answer
  // depends on nothing else.
  struct EverKey {
    uint64_t inventory;
    uint32_t request;
    Level level;
    bool operator==(const EverKey&) const = default;
    template <typename H>
    friend H AbslHashValue(H h, const EverKey& k) {
      return H::combine(std::move(h), k.inventory, k.request, k.level);
    }
  };
  absl::flat_hash_map<EverKey, GroupBest> ever;

  uint32_t RequestId(RequestKey key) {
    if (requests.size() >= kMaxRequests) {
      requests.clear();
      found.clear();
      offered.clear();
      ever.clear();
    }
    if (found.size() >= kMaxFound) found.clear();  // stale versions: start again
    if (offered.size() >= kMaxFound) offered.clear();
    if (ever.size() >= kMaxFound) ever.clear();
    return requests.try_emplace(std::move(key), static_cast<uint32_t>(requests.size()))
        .first->second;
  }

  // The groups of a cluster at the NVLink-domain, rack or block level.
  const std::vector<Group>& GroupsOf(const ClusterSlots& cluster, Level level) {
    if (cluster.inventory_id == 0) {
      uncached = GroupsAt(cluster, level);
      return uncached;
    }
    const size_t slot = level == Level::kDomain ? 0 : level == Level::kRack ? 1 : 2;
    if (groups.size() > 65536) groups.clear();  // inventories come and go: stay bounded
    std::optional<std::vector<Group>>& g = groups[cluster.inventory_id][slot];
    if (!g) g = GroupsAt(cluster, level);
    return *g;
  }
};

// The request as a key of EngineCache::requests, or nothing when the pool has too many models
// to list the allowed ones as bits.
std::optional<EngineCache::RequestKey> RequestKeyOf(const Filter& filter, const WorkloadSpec& spec,
                                                    const PlacementOptions& options,
                                                    size_t model_count);

// What a request asks for, in words: "2 replicas x 4 GPUs of H100-80GB, same_nvlink_domain".
std::string DescribeNeeds(const WorkloadSpec& spec, const Demand& d);

// Fills decision->reason (code and figures) for a request that did not fit.
void ExplainFailure(const Pool& pool, const WorkloadSpec& spec, const Filter& filter,
                    const PlacementOptions& options, EngineCache& cache,
                    PlacementDecision* decision);

}  // namespace gpufed::placement_internal

#endif  // GPUFED_FEDERATION_PLACEMENT_INTERNAL_H_
