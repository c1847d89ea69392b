#ifndef GPUFED_AGENT_TOPOLOGY_H_
#define GPUFED_AGENT_TOPOLOGY_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "gpufed/v1/types.pb.h"

namespace gpufed::agent {

// A cluster as its agent describes it in Register: the name, the static facts and the full
// inventory. Every node is schedulable and every GPU healthy unless the file says otherwise.
struct ClusterTopology {
  std::string cluster;
  v1::ClusterInfo info;
  v1::Inventory inventory;
};

// Parses the topology YAML of docs/interfaces.md (`cluster`, `node_groups`, `nodes`).
//
// Generated nodes are named <name_prefix><NN> with the number zero-padded to two digits (or more
// when the group has 100 nodes or more); "{n}" in `rack` and `block` is replaced by that same
// padded number. Generated GPU UUIDs are GPU-<cluster>-<node>-<index>; NVLink domains are
// <node>-nvl (`nvlink: node`) or <node>-nvl<k> for the k-th pair (`nvlink: pairs`).
//
// Errors are INVALID_ARGUMENT of the form `<source>:<line>: <field path>: <problem>`, e.g.
// `onprem.yaml:12: node_groups[0].gpus.model: unknown GPU model "H900" (known: ...)`. Checked:
// YAML syntax, unknown keys, names, identifiers and labels by the rules and limits of
// federation/validation.h (the ones the server applies to Register), counts > 0, GPU models against
// the catalogue (federation/gpu_catalog.h), MIG capability, MIG mode and layout (`mig_enabled`,
// `mig_layout: [{profile, start}]`, valid for the model's geometry in federation/mig.h),
// duplicate node names, GPU indices and UUIDs, and that the cluster has at least one node.
// `source` only labels messages.
absl::StatusOr<ClusterTopology> ParseClusterTopology(std::string_view yaml,
                                                     std::string_view source);

// For a cluster one of whose nodes the agent discovers from nvidia-smi (agent/discovery.h)
// rather than reads from the file.
struct TopologyOptions {
  // The discovered node's name; empty: none. The file may then have no nodes at all, and may
  // list this node under `nodes` without `gpus` (its rack, block, cpu_millis, memory_mib,
  // labels and schedulable then apply to the discovered node); listing GPUs for it, or a node
  // group generating its name, is an error.
  std::string discovered_node;
};
absl::StatusOr<ClusterTopology> ParseClusterTopology(std::string_view yaml, std::string_view source,
                                                     const TopologyOptions& options);

// Reads `path` and parses it as above. NOT_FOUND when the file cannot be read.
absl::StatusOr<ClusterTopology> LoadClusterTopology(const std::string& path);
absl::StatusOr<ClusterTopology> LoadClusterTopology(const std::string& path,
                                                    const TopologyOptions& options);

// Counts GPUs across the inventory.
int CountGpus(const v1::Inventory& inventory);

}  // namespace gpufed::agent

#endif  // GPUFED_AGENT_TOPOLOGY_H_
