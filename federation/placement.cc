#include "federation/placement.h"

#include <algorithm>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpufed {
namespace {

bool Eligible(const WorkloadSpec& spec, const NodeInfo& node, const GpuInfo& gpu) {
  if (!gpu.healthy || !node.schedulable) return false;
  if (gpu.memory_mib < spec.min_gpu_memory_mib) return false;
  if (spec.gpu_models.empty()) return true;
  return std::find(spec.gpu_models.begin(), spec.gpu_models.end(), gpu.model) !=
         spec.gpu_models.end();
}

// The GPUs of one node that a group may use.
struct Candidate {
  size_t node = 0;           // index into the cluster's nodes
  std::vector<size_t> gpus;  // indices into node.info.gpus, usable by this workload
};

// A set of nodes (and GPUs on them) the whole gang must fit inside.
using Group = std::vector<Candidate>;

// Builds the groups the topology requirement allows. With `ignore_owners`, pretends the cluster
// is empty (for "can it ever fit").
std::vector<Group> BuildGroups(const ClusterSlots& cluster, const WorkloadSpec& spec,
                               bool ignore_owners) {
  // key -> node index -> gpu indices
  std::map<std::string, std::map<size_t, std::vector<size_t>>> by_key;
  for (size_t n = 0; n < cluster.nodes.size(); ++n) {
    const NodeSlots& node = cluster.nodes[n];
    for (size_t g = 0; g < node.info.gpus.size(); ++g) {
      const GpuInfo& gpu = node.info.gpus[g];
      if (!Eligible(spec, node.info, gpu)) continue;
      if (!ignore_owners && node.owners[g] != 0) continue;
      std::string key;
      switch (spec.topology) {
        case Topology::kNone:
          break;
        case Topology::kSameNode:
          key = node.info.name;
          break;
        case Topology::kSameRack:
          key = node.info.rack.empty() ? absl::StrCat("node:", node.info.name) : node.info.rack;
          break;
        case Topology::kSameNvlinkDomain:
          // A GPU without NVLink peers is a domain of one.
          key = gpu.nvlink_domain.empty() ? absl::StrCat("gpu:", gpu.uuid) : gpu.nvlink_domain;
          break;
      }
      by_key[key][n].push_back(g);
    }
  }
  std::vector<Group> groups;
  groups.reserve(by_key.size());
  for (auto& [key, nodes] : by_key) {
    Group group;
    for (auto& [n, gpus] : nodes) group.push_back(Candidate{n, std::move(gpus)});
    groups.push_back(std::move(group));
  }
  return groups;
}

// Picks `count` GPUs from a candidate, preferring to keep a replica inside one NVLink domain
// (the smallest domain that holds it), then lowest index.
std::vector<size_t> ChooseGpus(const NodeSlots& node, const std::vector<size_t>& free,
                               uint32_t count) {
  std::map<std::string, std::vector<size_t>> by_domain;
  for (size_t g : free) by_domain[node.info.gpus[g].nvlink_domain].push_back(g);
  const std::vector<size_t>* best = nullptr;
  for (const auto& [domain, gpus] : by_domain) {
    if (domain.empty() || gpus.size() < count) continue;
    if (best == nullptr || gpus.size() < best->size()) best = &gpus;
  }
  std::vector<size_t> chosen;
  if (best != nullptr) {
    chosen.assign(best->begin(), best->begin() + count);
  } else {
    chosen.assign(free.begin(), free.begin() + count);
  }
  return chosen;
}

struct GroupFit {
  uint32_t replicas_placed = 0;
  uint64_t leftover = 0;  // eligible GPUs left free on touched nodes
  std::vector<std::pair<size_t, std::vector<size_t>>> replicas;  // node, gpus
};

// Greedy best-fit inside one group: each replica goes to the node with the fewest free eligible
// GPUs that still holds it. Stops at the first replica that does not fit.
GroupFit FitGroup(const ClusterSlots& cluster, Group group, const WorkloadSpec& spec) {
  GroupFit fit;
  const uint32_t need = spec.gpus_per_replica;
  std::vector<bool> touched(group.size(), false);
  for (uint32_t r = 0; r < spec.replicas; ++r) {
    size_t best = group.size();
    for (size_t c = 0; c < group.size(); ++c) {
      if (group[c].gpus.size() < need) continue;
      if (best == group.size() || group[c].gpus.size() < group[best].gpus.size()) best = c;
    }
    if (best == group.size()) break;
    Candidate& cand = group[best];
    std::vector<size_t> chosen = ChooseGpus(cluster.nodes[cand.node], cand.gpus, need);
    std::erase_if(cand.gpus, [&](size_t g) {
      return std::find(chosen.begin(), chosen.end(), g) != chosen.end();
    });
    touched[best] = true;
    fit.replicas.emplace_back(cand.node, std::move(chosen));
    ++fit.replicas_placed;
  }
  for (size_t c = 0; c < group.size(); ++c) {
    if (touched[c]) fit.leftover += group[c].gpus.size();
  }
  return fit;
}

struct ClusterFit {
  uint32_t best_replicas = 0;      // most replicas that fit in one group
  uint64_t eligible_free = 0;      // eligible free GPUs in the cluster
  uint32_t largest_node_free = 0;  // most eligible free GPUs on one node
  std::optional<GroupFit> full;    // best group holding the whole gang
};

ClusterFit FitCluster(const ClusterSlots& cluster, const WorkloadSpec& spec, bool ignore_owners) {
  ClusterFit result;
  std::map<size_t, uint32_t> per_node;
  for (Group& group : BuildGroups(cluster, spec, ignore_owners)) {
    for (const Candidate& c : group) {
      result.eligible_free += c.gpus.size();
      per_node[c.node] += static_cast<uint32_t>(c.gpus.size());
    }
    GroupFit fit = FitGroup(cluster, std::move(group), spec);
    result.best_replicas = std::max(result.best_replicas, fit.replicas_placed);
    if (fit.replicas_placed == spec.replicas &&
        (!result.full || fit.leftover < result.full->leftover)) {
      result.full = std::move(fit);
    }
  }
  for (const auto& [node, count] : per_node) {
    result.largest_node_free = std::max(result.largest_node_free, count);
  }
  return result;
}

std::string Describe(const WorkloadSpec& spec) {
  std::string s =
      spec.replicas == 1
          ? absl::StrCat(spec.gpus_per_replica, " GPU", spec.gpus_per_replica == 1 ? "" : "s")
          : absl::StrCat(spec.replicas, " replicas x ", spec.gpus_per_replica, " GPU",
                         spec.gpus_per_replica == 1 ? "" : "s");
  if (!spec.gpu_models.empty()) absl::StrAppend(&s, " of ", absl::StrJoin(spec.gpu_models, "|"));
  if (spec.min_gpu_memory_mib > 0) {
    absl::StrAppend(&s, " with >= ", spec.min_gpu_memory_mib, " MiB");
  }
  if (spec.topology != Topology::kNone) absl::StrAppend(&s, ", ", TopologyName(spec.topology));
  return s;
}

std::string Unit(const WorkloadSpec& spec) {
  switch (spec.topology) {
    case Topology::kSameNode:
      return "node";
    case Topology::kSameRack:
      return "rack";
    case Topology::kSameNvlinkDomain:
      return "NVLink domain";
    case Topology::kNone:
      break;
  }
  return "cluster";
}

}  // namespace

PlacementDecision PlaceBestFit(const Pool& pool, const WorkloadSpec& spec) {
  PlacementDecision decision;
  const ClusterSlots* best_cluster = nullptr;
  std::optional<GroupFit> best_fit;
  // For the reason when nothing fits now.
  const ClusterSlots* most_replicas_cluster = nullptr;
  ClusterFit most_replicas;
  uint64_t free_total = 0;
  std::vector<std::string> not_ready;

  for (const ClusterSlots& cluster : pool.clusters()) {
    if (cluster.state != ClusterState::kReady) {
      not_ready.push_back(
          absl::StrCat(cluster.info.name, " (", ClusterStateName(cluster.state), ")"));
      continue;
    }
    ClusterFit fit = FitCluster(cluster, spec, /*ignore_owners=*/false);
    free_total += fit.eligible_free;
    if (most_replicas_cluster == nullptr || fit.best_replicas > most_replicas.best_replicas) {
      most_replicas_cluster = &cluster;
      most_replicas = fit;
    }
    if (fit.full && (!best_fit || fit.full->leftover < best_fit->leftover)) {
      best_cluster = &cluster;
      best_fit = std::move(fit.full);
    }
  }

  if (best_fit) {
    Assignment assignment;
    assignment.cluster = best_cluster->info.name;
    assignment.epoch = best_cluster->epoch;
    for (const auto& [n, gpus] : best_fit->replicas) {
      const NodeSlots& node = best_cluster->nodes[n];
      ReplicaAssignment replica;
      replica.node = node.info.name;
      for (size_t g : gpus) {
        replica.gpu_uuids.push_back(node.info.gpus[g].uuid);
        replica.gpu_indices.push_back(node.info.gpus[g].index);
      }
      assignment.replicas.push_back(std::move(replica));
    }
    decision.assignment = std::move(assignment);
    return decision;
  }

  // Nothing fits now. Would anything fit if every cluster (in any state) were empty?
  const std::string what = Describe(spec);
  const ClusterSlots* ever_cluster = nullptr;
  ClusterFit ever_best;
  for (const ClusterSlots& cluster : pool.clusters()) {
    ClusterFit fit = FitCluster(cluster, spec, /*ignore_owners=*/true);
    if (ever_cluster == nullptr || fit.best_replicas > ever_best.best_replicas) {
      ever_cluster = &cluster;
      ever_best = fit;
    }
  }
  if (pool.clusters().empty()) {
    decision.never_fits = true;
    decision.reason = absl::StrCat("no clusters are registered; needs ", what);
    return decision;
  }
  if (ever_best.best_replicas < spec.replicas) {
    decision.never_fits = true;
    if (ever_best.eligible_free == 0) {
      decision.reason =
          absl::StrCat("no cluster can ever hold it: no cluster has GPUs matching ", what);
    } else if (ever_best.best_replicas == 0) {
      decision.reason = absl::StrCat("no cluster can ever hold it: needs ", what,
                                     ", but no node has ", spec.gpus_per_replica,
                                     " matching GPUs (largest: ", ever_best.largest_node_free,
                                     " on a node of ", ever_cluster->info.name, ")");
    } else {
      decision.reason =
          absl::StrCat("no cluster can ever hold it: needs ", what, ", but at most ",
                       ever_best.best_replicas, " of ", spec.replicas, " replicas fit in one ",
                       Unit(spec), " (best: ", ever_cluster->info.name, ")");
    }
    return decision;
  }
  if (most_replicas_cluster == nullptr) {
    decision.reason = absl::StrCat("waiting for a cluster to become ready (",
                                   absl::StrJoin(not_ready, ", "), "); needs ", what);
    return decision;
  }
  decision.reason = absl::StrCat(
      "waiting for capacity: needs ", what, "; ", free_total,
      " matching GPUs free across ready clusters, at most ", most_replicas.best_replicas, " of ",
      spec.replicas, spec.replicas == 1 ? " replica" : " replicas",
      " fit now (best: ", most_replicas_cluster->info.name,
      ", largest free on one node: ", most_replicas.largest_node_free, ")");
  if (!not_ready.empty()) {
    absl::StrAppend(&decision.reason, "; not ready: ", absl::StrJoin(not_ready, ", "));
  }
  return decision;
}

}  // namespace gpufed
