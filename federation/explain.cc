// Why a request does not fit: the nearest blocker, as a reason code and the figures that go with
// it (federation/pending_reason.h renders the words), and the topology groups the engine packs
// gangs into.

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "federation/mig.h"
#include "federation/placement_internal.h"

namespace gpufed::placement_internal {

absl::string_view LevelName(Level level) {
  switch (level) {
    case Level::kNode:
      return "node";
    case Level::kDomain:
      return "NVLink domain";
    case Level::kRack:
      return "rack";
    case Level::kBlock:
      return "block";
    case Level::kCluster:
      return "cluster";
  }
  return "group";
}

Levels LevelsFor(Topology topology, uint32_t replicas) {
  if (replicas <= 1) return {Level::kCluster};  // one replica sits on one node anyway
  switch (topology) {
    case Topology::kNone:
      return {Level::kNode, Level::kDomain, Level::kRack, Level::kBlock, Level::kCluster};
    case Topology::kSameNode:
      return {Level::kNode};
    case Topology::kSameNvlinkDomain:
      return {Level::kDomain};
    case Topology::kSameRack:
      return {Level::kNode, Level::kDomain, Level::kRack};
  }
  return {Level::kCluster};
}

std::vector<Group> GroupsAt(const ClusterSlots& cluster, Level level) {
  std::vector<Group> groups;
  const auto n_nodes = static_cast<uint32_t>(cluster.nodes.size());
  if (level == Level::kCluster) {
    Group g;
    g.key = cluster.info.name;
    g.members.reserve(n_nodes);
    for (uint32_t n = 0; n < n_nodes; ++n) g.members.push_back(Member{n});
    groups.push_back(std::move(g));
    return groups;
  }
  if (level == Level::kNode) {
    groups.reserve(n_nodes);
    for (uint32_t n = 0; n < n_nodes; ++n) {
      groups.push_back(Group{cluster.nodes[n].info.name, {Member{n}}});
    }
    return groups;
  }
  // key -> node -> GPU mask
  std::map<std::string, std::map<uint32_t, uint64_t>> by_key;
  for (uint32_t n = 0; n < n_nodes; ++n) {
    const NodeInfo& info = cluster.nodes[n].info;
    if (level == Level::kDomain) {
      for (size_t g = 0; g < info.gpus.size() && g < 64; ++g) {
        const GpuInfo& gpu = info.gpus[g];
        // A GPU without NVLink peers is a domain of one.
        std::string key =
            gpu.nvlink_domain.empty() ? absl::StrCat(info.name, "/", gpu.uuid) : gpu.nvlink_domain;
        by_key[key][n] |= uint64_t{1} << g;
      }
      continue;
    }
    std::string key = level == Level::kBlock && !info.block.empty() ? info.block : info.rack;
    if (key.empty()) key = info.name;
    by_key[key][n] = ~uint64_t{0};
  }
  groups.reserve(by_key.size());
  for (auto& [key, nodes] : by_key) {
    Group g;
    g.key = key;
    for (const auto& [n, mask] : nodes) g.members.push_back(Member{n, mask});
    groups.push_back(std::move(g));
  }
  return groups;
}

namespace {

constexpr uint64_t kMany = std::numeric_limits<uint32_t>::max();

std::string Plural(uint64_t n, absl::string_view one, absl::string_view many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

// How many replicas one node (GPUs in `mask`) holds now, or when empty; and how many its GPUs
// alone would hold (ignoring CPU and memory).
struct NodeCount {
  uint64_t replicas = 0;
  uint64_t gpu_only = 0;
  uint64_t free_units = 0;  // free whole GPUs / milli / MIG instances, for the totals
};

// `accelerate`: PlacementOptions::accelerate (false: no shortcut).
NodeCount CountOnNode(const NodeSlots& node, const Filter& f, uint64_t mask, bool empty,
                      bool partitioning, bool accelerate) {
  NodeCount c;
  if (!node.info.schedulable) return c;
  const Demand& d = f.demand;
  // As the node is now, its own counters may show that nothing on it is free for the request:
  // no whole GPU, no share left on any GPU, no idle MIG GPU that could be turned back.
  const uint32_t idle_mig = partitioning ? node.mig_idle : 0;
  if (accelerate && !empty &&
      ((d.kind == Demand::Kind::kWhole && node.free + idle_mig == 0) ||
       (d.kind == Demand::Kind::kShare && node.max_milli_free + idle_mig == 0))) {
    return c;
  }
  if (d.kind == Demand::Kind::kMig) {
    for (size_t g = 0; g < node.gpus.size() && g < 64; ++g) {
      if ((mask & (uint64_t{1} << g)) == 0 || !GpuEligible(f, node, g)) continue;
      const GpuInfo& info = node.info.gpus[g];
      const MigGeometry* geo = FindMigGeometry(info.model);
      const MigProfile* p = geo == nullptr ? nullptr : geo->Find(d.mig_profile);
      if (p == nullptr) continue;
      uint64_t n = 0;
      // Only a MIG-capable GPU (or one already in MIG mode) can ever get the profile.
      const bool can_partition = info.mig_capable || info.mig_enabled;
      if (can_partition && (empty || (partitioning && node.gpus[g].Idle()))) {
        n = static_cast<uint64_t>(p->max_count);
      } else if (info.mig_enabled) {
        for (size_t i = 0; i < info.mig_layout.size(); ++i) {
          n += info.mig_layout[i].profile == d.mig_profile && node.gpus[g].mig_owners[i] == 0;
        }
        if (partitioning) n += FreeMigStarts(*geo, info.mig_layout, d.mig_profile).empty() ? 0 : 1;
      }
      c.gpu_only += n;
    }
    c.free_units = c.gpu_only;
  } else {
    ViewIndex vi;
    const NodeView v = BuildView(node, f, mask, empty, partitioning, &vi);
    switch (d.kind) {
      case Demand::Kind::kWhole:
        c.free_units = v.WholeFree();
        c.gpu_only = v.WholeFree() / d.gpus;
        break;
      case Demand::Kind::kShare:
        for (uint32_t m : v.milli_free) {
          c.gpu_only += m / d.milli;
          c.free_units += m;
        }
        break;
      case Demand::Kind::kNone:
        c.gpu_only = kMany;
        break;
      case Demand::Kind::kMig:
        break;
    }
  }
  c.replicas = c.gpu_only;
  const uint64_t cpu = empty && node.info.cpu_millis > 0 ? node.info.cpu_millis : node.cpu_free;
  const uint64_t mem = empty && node.info.memory_mib > 0 ? node.info.memory_mib : node.memory_free;
  if (d.cpu_millis > 0 && cpu != kUnlimited) c.replicas = std::min(c.replicas, cpu / d.cpu_millis);
  if (d.memory_mib > 0 && mem != kUnlimited) c.replicas = std::min(c.replicas, mem / d.memory_mib);
  return c;
}

// The group of one cluster (at `level`) holding the most replicas; `where` is empty when the
// cluster has no group at that level (no nodes).
GroupBest BestIn(const ClusterSlots& cluster, const Filter& f, Level level, bool empty,
                 const PlacementOptions& options, EngineCache& cache) {
  const bool partitioning = options.partitioning;
  GroupBest best;
  const std::string* best_key = nullptr;
  std::vector<Group> uncached;  // without acceleration: the groups at `level`
  auto offer = [&](const std::string& key, uint64_t replicas, uint64_t gpu_only, uint64_t units) {
    best.gpu_only = std::max(best.gpu_only, gpu_only);
    if (best_key == nullptr || replicas > best.replicas ||
        (replicas == best.replicas && units > best.units)) {
      best_key = &key;
      best.replicas = replicas;
      best.units = units;
    }
  };
  auto add_up = [&](const std::vector<Member>& members, const std::string& key) {
    uint64_t replicas = 0;
    uint64_t gpu_only = 0;
    uint64_t units = 0;
    for (const Member& m : members) {
      const NodeCount c =
          CountOnNode(cluster.nodes[m.node], f, m.mask, empty, partitioning, options.accelerate);
      replicas = std::min(kMany, replicas + c.replicas);
      gpu_only = std::min(kMany, gpu_only + c.gpu_only);
      units += c.free_units;
    }
    offer(key, replicas, gpu_only, units);
  };
  switch (level) {
    case Level::kNode:
      for (const NodeSlots& node : cluster.nodes) {
        const NodeCount c =
            CountOnNode(node, f, ~uint64_t{0}, empty, partitioning, options.accelerate);
        offer(node.info.name, c.replicas, c.gpu_only, c.free_units);
      }
      break;
    case Level::kCluster: {
      std::vector<Member> all(cluster.nodes.size());
      for (size_t n = 0; n < all.size(); ++n) all[n].node = static_cast<uint32_t>(n);
      add_up(all, cluster.info.name);
      break;
    }
    default:
      // best_key points into the groups: they must outlive the loop.
      uncached = options.accelerate ? std::vector<Group>{} : GroupsAt(cluster, level);
      for (const Group& g : options.accelerate ? cache.GroupsOf(cluster, level) : uncached) {
        add_up(g.members, g.key);
      }
      break;
  }
  if (best_key != nullptr) {
    best.where = level == Level::kCluster ? cluster.info.name
                                          : absl::StrCat(cluster.info.name, "/", *best_key);
  }
  return best;
}

// The group (at `level`) holding the most replicas, over the given clusters. What an empty
// cluster offers is remembered by inventory for `request` (MIG requests excepted: the MIG
// capability of a GPU follows its layout, which the engine itself changes).
GroupBest BestGroup(const std::vector<const ClusterSlots*>& clusters, const Filter& f, Level level,
                    bool empty, const PlacementOptions& options, EngineCache& cache,
                    std::optional<uint32_t> request) {
  GroupBest best;
  bool have = false;
  const bool remember = empty && request.has_value() && f.demand.kind != Demand::Kind::kMig;
  for (const ClusterSlots* cluster : clusters) {
    GroupBest b;
    if (remember && cluster->inventory_id != 0) {
      const EngineCache::EverKey key{cluster->inventory_id, *request, level};
      auto it = cache.ever.find(key);
      if (it == cache.ever.end()) {
        it = cache.ever.emplace(key, BestIn(*cluster, f, level, empty, options, cache)).first;
      }
      b = it->second;
    } else {
      b = BestIn(*cluster, f, level, empty, options, cache);
    }
    best.gpu_only = std::max(best.gpu_only, b.gpu_only);
    if (b.where.empty()) continue;
    if (!have || b.replicas > best.replicas ||
        (b.replicas == best.replicas && b.units > best.units)) {
      have = true;
      best.replicas = b.replicas;
      best.units = b.units;
      best.where = std::move(b.where);
    }
  }
  return best;
}

// The unit free capacity is counted in (figure::kUnit): "GPU", "milli-GPU" or the MIG profile.
std::string Unit(const Demand& d) {
  switch (d.kind) {
    case Demand::Kind::kWhole:
      return "GPU";
    case Demand::Kind::kShare:
      return "milli-GPU";
    case Demand::Kind::kMig:
      return d.mig_profile;
    case Demand::Kind::kNone:
      break;
  }
  return "";
}

int64_t Figure(uint64_t n) { return static_cast<int64_t>(n); }

}  // namespace

std::string DescribeNeeds(const WorkloadSpec& spec, const Demand& d) {
  std::string per;
  switch (d.kind) {
    case Demand::Kind::kWhole:
      per = Plural(d.gpus, "GPU", "GPUs");
      break;
    case Demand::Kind::kShare:
      per = absl::StrCat(d.milli, " milli-GPU");
      break;
    case Demand::Kind::kMig:
      per = absl::StrCat("MIG ", d.mig_profile);
      break;
    case Demand::Kind::kNone:
      per = "no GPU";
      break;
  }
  std::string s = spec.replicas == 1 ? per : absl::StrCat(spec.replicas, " replicas x ", per);
  if (!spec.gpu_models.empty()) absl::StrAppend(&s, " of ", absl::StrJoin(spec.gpu_models, "|"));
  if (spec.min_gpu_memory_mib > 0) {
    absl::StrAppend(&s, " with >= ", spec.min_gpu_memory_mib, " MiB");
  }
  if (d.cpu_millis > 0) absl::StrAppend(&s, ", ", d.cpu_millis, " CPU millis");
  if (d.memory_mib > 0) absl::StrAppend(&s, ", ", d.memory_mib, " MiB host memory");
  if (spec.topology != Topology::kNone) absl::StrAppend(&s, ", ", TopologyName(spec.topology));
  return s;
}

void ExplainFailure(const Pool& pool, const WorkloadSpec& spec, const Filter& f,
                    const PlacementOptions& options, EngineCache& cache,
                    PlacementDecision* decision) {
  const Demand& d = f.demand;
  PendingReason& reason = decision->reason;
  reason = PendingReason();
  reason.Set(figure::kNeeds, DescribeNeeds(spec, d));
  if (pool.clusters().empty()) {
    reason.code = ReasonCode::kNoClusters;
    return;
  }
  std::vector<const ClusterSlots*> all;
  std::vector<const ClusterSlots*> ready;
  std::vector<std::string> not_ready;
  for (size_t index = 0; index < pool.clusters().size(); ++index) {
    const ClusterSlots& c = pool.clusters()[index];
    if (!f.ClusterOk(index)) continue;
    all.push_back(&c);
    if (c.state == ClusterState::kReady) {
      ready.push_back(&c);
    } else {
      not_ready.push_back(absl::StrCat(c.info.name, " (", ClusterStateName(c.state), ")"));
    }
  }
  const Levels levels = LevelsFor(spec.topology, spec.replicas);
  // One replica sits on one node, but with same_nvlink_domain its GPUs must share a domain.
  const Level unit = spec.replicas <= 1 && spec.topology == Topology::kSameNvlinkDomain
                         ? Level::kDomain
                         : levels.back();
  const uint64_t per_node_need = d.kind == Demand::Kind::kWhole ? d.gpus : 1;
  std::optional<uint32_t> request;  // set: what empty clusters offer is remembered
  if (std::optional<EngineCache::RequestKey> key =
          RequestKeyOf(f, spec, options, pool.model_count());
      key && options.accelerate) {
    request = cache.RequestId(*std::move(key));
  }

  // Would it fit if every cluster were empty?
  const GroupBest ever = BestGroup(all, f, unit, /*empty=*/true, options, cache, request);
  if (ever.replicas < spec.replicas) {
    const GroupBest ever_node = BestGroup(all, f, Level::kNode, true, options, cache, request);
    if (ever_node.units == 0 && d.kind != Demand::Kind::kNone) {
      std::set<std::string> present;
      for (const ClusterSlots* c : all) {
        for (const NodeSlots& node : c->nodes) {
          for (const GpuInfo& gpu : node.info.gpus) present.insert(gpu.model);
        }
      }
      reason.Set(figure::kPoolModels, absl::StrJoin(present, ", "));
      if (d.kind == Demand::Kind::kMig) {
        std::vector<absl::string_view> offering;
        for (absl::string_view model : MigModels()) {
          if (FindMigGeometry(model)->Find(d.mig_profile) != nullptr) offering.push_back(model);
        }
        reason.code = ReasonCode::kMigProfileUnavailable;
        reason.Set(figure::kProfile, d.mig_profile);
        reason.Set(figure::kMigModels, absl::StrJoin(offering, ", "));
      } else {
        reason.code = ReasonCode::kNoMatchingGpu;
      }
    } else if (ever_node.gpu_only == 0) {
      reason.code = ReasonCode::kGpuCountUnsatisfiable;
      reason.Set(figure::kLevel, std::string(LevelName(Level::kNode)));
      reason.Set(figure::kGpus, Figure(per_node_need));
      reason.Set(figure::kLargest, Figure(ever_node.units));
      reason.Set(figure::kWhere, ever_node.where);
    } else if (ever.gpu_only >= spec.replicas) {
      // The GPUs would do; the hosts with them are too small. Name the resource if one is.
      uint64_t max_cpu = 0;
      uint64_t max_mem = 0;
      std::string cpu_at;
      std::string mem_at;
      for (const ClusterSlots* c : all) {
        for (const NodeSlots& node : c->nodes) {
          const NodeCount empty =
              CountOnNode(node, f, ~uint64_t{0}, true, options.partitioning, options.accelerate);
          if (empty.gpu_only == 0) continue;
          const uint64_t cpu = node.info.cpu_millis > 0 ? node.info.cpu_millis : kUnlimited;
          const uint64_t mem = node.info.memory_mib > 0 ? node.info.memory_mib : kUnlimited;
          if (cpu_at.empty() || cpu > max_cpu) {
            max_cpu = cpu;
            cpu_at = absl::StrCat(c->info.name, "/", node.info.name);
          }
          if (mem_at.empty() || mem > max_mem) {
            max_mem = mem;
            mem_at = absl::StrCat(c->info.name, "/", node.info.name);
          }
        }
      }
      if (d.cpu_millis > max_cpu) {
        reason.code = ReasonCode::kHostCpuUnsatisfiable;
        reason.Set(figure::kCpuMillis, Figure(d.cpu_millis));
        reason.Set(figure::kLargest, Figure(max_cpu));
        reason.Set(figure::kWhere, cpu_at);
      } else if (d.memory_mib > max_mem) {
        reason.code = ReasonCode::kHostMemoryUnsatisfiable;
        reason.Set(figure::kMemoryMib, Figure(d.memory_mib));
        reason.Set(figure::kLargest, Figure(max_mem));
        reason.Set(figure::kWhere, mem_at);
      } else {
        reason.code = ReasonCode::kHostResourcesUnsatisfiable;
        reason.Set(figure::kLevel,
                   std::string(LevelName(spec.replicas <= 1 ? Level::kNode : unit)));
      }
    } else if (spec.replicas <= 1 && ever.gpu_only == 0) {
      // Only with same_nvlink_domain: the node has the GPUs, no domain does.
      reason.code = ReasonCode::kGpuCountUnsatisfiable;
      reason.Set(figure::kLevel, std::string(LevelName(unit)));
      reason.Set(figure::kGpus, Figure(per_node_need));
      reason.Set(figure::kLargest, Figure(ever.units));
      reason.Set(figure::kWhere, ever.where);
    } else {
      reason.code = ReasonCode::kTopologyUnsatisfiable;
      reason.Set(figure::kFit, Figure(ever.replicas));
      reason.Set(figure::kReplicas, Figure(spec.replicas));
      reason.Set(figure::kLevel, std::string(LevelName(unit)));
      reason.Set(figure::kWhere, ever.where);
    }
    return;
  }
  if (!not_ready.empty()) reason.Set(figure::kNotReady, absl::StrJoin(not_ready, ", "));
  if (ready.empty()) {
    reason.code = ReasonCode::kNoReadyCluster;
    return;
  }

  // It would fit an empty pool: what is in the way now? A cluster with nothing free of the
  // allowed models adds nothing to what is free (nor is it the largest group, unless nothing
  // is free anywhere): the pool's summaries say which clusters have something, and only those
  // are looked at node by node.
  std::vector<const ClusterSlots*> looked = ready;
  const std::optional<uint64_t> models = f.ModelBits();
  if (options.accelerate && d.kind != Demand::Kind::kNone && models) {
    if (const Pool::ClusterOrder* order = pool.ClustersByFree(*models)) {
      looked.clear();
      for (size_t i = 0; i < order->clusters.size(); ++i) {
        if (order->clusters[i].listed && f.ClusterOk(i)) looked.push_back(&pool.clusters()[i]);
      }
    }
  }
  uint64_t free_units = 0;
  int clusters_with_free = 0;
  std::map<std::string, uint64_t> free_by_model;
  for (const ClusterSlots* c : looked) {
    uint64_t in_cluster = 0;
    for (const NodeSlots& node : c->nodes) {
      const NodeCount nc =
          CountOnNode(node, f, ~uint64_t{0}, false, options.partitioning, options.accelerate);
      in_cluster += nc.free_units;
      if (nc.free_units > 0 && !node.info.gpus.empty()) {
        free_by_model[node.info.gpus.front().model] += nc.free_units;
      }
    }
    free_units += in_cluster;
    clusters_with_free += in_cluster > 0 ? 1 : 0;
  }
  const GroupBest now = BestGroup(looked, f, unit, false, options, cache, request);
  if (d.kind == Demand::Kind::kNone) {
    reason.code = ReasonCode::kHostResourcesBusy;
    return;
  }
  reason.Set(figure::kUnit, Unit(d));
  if (free_units == 0 && d.kind == Demand::Kind::kMig && !options.partitioning) {
    reason.code = ReasonCode::kMigPartitioningOff;
    reason.Set(figure::kProfile, d.mig_profile);
    return;
  }
  if (free_units == 0) {
    reason.code = ReasonCode::kNothingFree;
    return;
  }
  std::vector<std::string> free_models;
  free_models.reserve(free_by_model.size());
  for (const auto& [m, n] : free_by_model) {
    free_models.push_back(absl::StrCat(n, d.kind == Demand::Kind::kWhole ? " " : " on ", m));
  }
  reason.Set(figure::kFree, Figure(free_units));
  reason.Set(figure::kFreeByModel, absl::StrJoin(free_models, ", "));
  reason.Set(figure::kClusters, clusters_with_free);
  if (now.gpu_only >= spec.replicas) {
    reason.code = ReasonCode::kHostResourcesBusy;
    reason.Set(figure::kLevel,
               std::string(LevelName(unit == Level::kCluster ? Level::kNode : unit)));
  } else if (spec.replicas == 1) {
    const bool domain = spec.topology == Topology::kSameNvlinkDomain;
    const GroupBest node_now = BestGroup(looked, f, domain ? Level::kDomain : Level::kNode, false,
                                         options, cache, request);
    switch (d.kind) {
      case Demand::Kind::kWhole:
        reason.code = ReasonCode::kGpusBusy;
        reason.Set(figure::kLevel, domain ? "NVLink domain" : "node");
        reason.Set(figure::kGpus, d.gpus);
        reason.Set(figure::kLargest, Figure(node_now.units));
        reason.Set(figure::kWhere, node_now.where);
        break;
      case Demand::Kind::kShare: {
        uint32_t most = 0;
        for (const ClusterSlots* c : looked) {
          for (const NodeSlots& node : c->nodes) {
            if (!node.info.schedulable) continue;
            for (size_t g = 0; g < node.gpus.size(); ++g) {
              if (GpuEligible(f, node, g)) most = std::max(most, node.gpus[g].milli_free);
            }
          }
        }
        reason.code = ReasonCode::kGpuShareBusy;
        reason.Set(figure::kMilli, d.milli);
        reason.Set(figure::kMost, most);
        break;
      }
      default:
        reason.code = ReasonCode::kMigInstanceBusy;
        reason.Set(figure::kProfile, d.mig_profile);
        reason.Set(figure::kPartitioning, options.partitioning ? 1 : 0);
        break;
    }
  } else {
    reason.code = ReasonCode::kGangBusy;
    reason.Set(figure::kLevel, std::string(LevelName(unit)));
    reason.Set(figure::kReplicas, Figure(spec.replicas));
    reason.Set(figure::kFit, Figure(now.replicas));
    reason.Set(figure::kWhere, now.where);
  }
}

}  // namespace gpufed::placement_internal
