#ifndef GPUFED_FEDERATION_PLACEMENT_INTERNAL_H_
#define GPUFED_FEDERATION_PLACEMENT_INTERNAL_H_

// Pieces shared by the placement engine (placement.cc) and its explanations (explain.cc). Not
// part of the federation's interface.

#include <string>
#include <vector>

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
};

Filter MakeFilter(const Pool& pool, const WorkloadSpec& spec);
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
std::vector<Level> LevelsFor(Topology topology, uint32_t replicas);
std::vector<Group> GroupsAt(const ClusterSlots& cluster, Level level);

// Fills decision->reason and never_fits for a request that did not fit.
void ExplainFailure(const Pool& pool, const WorkloadSpec& spec, const Filter& filter,
                    const PlacementOptions& options, PlacementDecision* decision);

}  // namespace gpufed::placement_internal

#endif  // GPUFED_FEDERATION_PLACEMENT_INTERNAL_H_
