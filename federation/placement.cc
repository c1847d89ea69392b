#include "federation/placement.h"

#include <algorithm>
#include <cstring>
#include <tuple>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "federation/mig.h"
#include "federation/placement_internal.h"

namespace gpufed {
namespace placement_internal {

Filter MakeFilter(const Pool& pool, const WorkloadSpec& spec) {
  Filter f;
  f.min_memory = spec.min_gpu_memory_mib;
  f.any_model = spec.gpu_models.empty();
  f.model_ok.assign(pool.model_count(), false);
  for (const std::string& m : spec.gpu_models) {
    const int id = pool.FindModelId(m);
    if (id >= 0) f.model_ok[id] = true;
  }
  f.demand = Demand::Of(spec);
  if (f.demand.kind == Demand::Kind::kMig) {
    for (size_t id = 0; id < pool.model_count(); ++id) {
      const MigGeometry* geo = FindMigGeometry(pool.ModelName(static_cast<uint16_t>(id)));
      f.mig_ok.push_back(geo != nullptr && geo->Find(spec.mig_profile) != nullptr);
    }
  }
  return f;
}

bool GpuEligible(const Filter& f, const NodeSlots& node, size_t g) {
  const GpuInfo& info = node.info.gpus[g];
  if (!info.healthy || info.memory_mib < f.min_memory) return false;
  const uint16_t m = node.gpus[g].model;
  if (!f.any_model && (m >= f.model_ok.size() || !f.model_ok[m])) return false;
  if (f.demand.kind == Demand::Kind::kMig) return m < f.mig_ok.size() && f.mig_ok[m];
  return true;
}

NodeView BuildView(const NodeSlots& node, const Filter& f, uint64_t mask, bool ignore_holders,
                   bool mig_off, ViewIndex* index) {
  NodeView v;
  v.cpu_total = node.info.cpu_millis;
  v.memory_total = node.info.memory_mib;
  v.cpu_free = ignore_holders && node.info.cpu_millis > 0 ? node.info.cpu_millis : node.cpu_free;
  v.memory_free =
      ignore_holders && node.info.memory_mib > 0 ? node.info.memory_mib : node.memory_free;
  bool first = true;
  const size_t n = std::min<size_t>(node.gpus.size(), 64);
  for (size_t g = 0; g < n; ++g) {
    if ((mask & (uint64_t{1} << g)) == 0 || !GpuEligible(f, node, g)) continue;
    const GpuInfo& info = node.info.gpus[g];
    const GpuSlot& slot = node.gpus[g];
    uint32_t free = slot.milli_free;
    if (ignore_holders) {
      free = kMilliPerGpu;
    } else if (info.mig_enabled) {
      // An idle MIG GPU can be turned back into a whole GPU (partitioning authority).
      if (!mig_off || !slot.Idle()) continue;
      free = kMilliPerGpu;
    }
    if (first) {
      v.model = slot.model;
      first = false;
    }
    v.milli_free.push_back(free);
    if (index != nullptr) index->push_back(static_cast<uint8_t>(g));
  }
  v.gpu_total = static_cast<uint32_t>(v.milli_free.size());
  return v;
}

absl::InlinedVector<uint8_t, 8> WholePick(const NodeSlots& node, const NodeView& v,
                                         const ViewIndex& index, uint32_t count,
                                         bool one_domain) {
  absl::InlinedVector<uint8_t, 8> free;
  for (size_t i = 0; i < v.milli_free.size(); ++i) {
    if (v.milli_free[i] == kMilliPerGpu) free.push_back(static_cast<uint8_t>(i));
  }
  absl::InlinedVector<uint8_t, 8> pick;
  if (free.size() < count) return pick;
  // Smallest NVLink domain (then PCIe switch, then NUMA node) on the node that holds them all.
  using KeyFn = std::string (*)(const GpuInfo&);
  const KeyFn keys[] = {[](const GpuInfo& g) { return g.nvlink_domain; },
                        [](const GpuInfo& g) { return g.pcie_switch; },
                        [](const GpuInfo& g) { return absl::StrCat("numa", g.numa_node); }};
  for (size_t level = 0; level < 3; ++level) {
    std::map<std::string, absl::InlinedVector<uint8_t, 8>> by_key;
    for (uint8_t i : free) {
      std::string k = keys[level](node.info.gpus[index[i]]);
      if (level < 2 && k.empty()) continue;
      by_key[k].push_back(i);
    }
    const absl::InlinedVector<uint8_t, 8>* best = nullptr;
    for (const auto& [k, gpus] : by_key) {
      if (gpus.size() >= count && (best == nullptr || gpus.size() < best->size())) best = &gpus;
    }
    if (best != nullptr) {
      pick.assign(best->begin(), best->begin() + count);
      return pick;
    }
    if (one_domain && level == 0 && count > 1) return pick;  // no domain holds it
  }
  if (one_domain && count > 1) return pick;
  pick.assign(free.begin(), free.begin() + count);
  return pick;
}

}  // namespace placement_internal

using namespace placement_internal;  // NOLINT(google-build-using-namespace): this file's own

namespace {

// One replica's place on one node.
struct Candidate {
  uint32_t node = 0;
  double score = 0;
  absl::InlinedVector<uint8_t, 8> gpus;  // node GPU indices
  uint32_t milli = kMilliPerGpu;         // per GPU (whole: 1000)
  // MIG: the instance taken, and the layout change that makes it (if any).
  MigInstance mig;
  std::optional<Repartition> repartition;
  // Whole/share on idle MIG GPUs: MIG is turned off on these first.
  std::vector<Repartition> mig_off;
};

// Picks among equal scores: the first, or (random_ties) uniformly at random by reservoir.
class Best {
 public:
  Best(bool random_ties, std::mt19937_64* rng) : random_ties_(random_ties), rng_(rng) {}
  bool Offer(double score) {
    if (!have_ || score > score_) {
      have_ = true;
      score_ = score;
      ties_ = 1;
      return true;
    }
    if (score < score_ || !random_ties_) return false;
    ++ties_;
    return std::uniform_int_distribution<uint64_t>(1, ties_)(*rng_) == 1;
  }

 private:
  bool random_ties_;
  std::mt19937_64* rng_;
  bool have_ = false;
  double score_ = 0;
  uint64_t ties_ = 0;
};

// Free memory slots on a MIG GPU: slots not covered by any instance.
int FreeSlots(const MigGeometry& geo, const std::vector<MigInstance>& layout) {
  std::vector<bool> used(geo.memory_slots, false);
  for (const MigInstance& inst : layout) {
    const MigProfile* p = geo.Find(inst.profile);
    if (p == nullptr) continue;
    for (int s = inst.start; s < inst.start + p->memory_slices && s < geo.memory_slots; ++s) {
      used[s] = true;
    }
  }
  return static_cast<int>(std::count(used.begin(), used.end(), false));
}

std::string LayoutText(const std::vector<MigInstance>& layout) {
  std::vector<std::string> parts;
  for (const MigInstance& i : layout) parts.push_back(absl::StrCat(i.profile, "@", i.start));
  return parts.empty() ? "empty" : absl::StrJoin(parts, ", ");
}

// A new layout for an idle GPU: the requested profile, then as many queued instances as fit
// (the most wanted first). Among the requested profile's starts, the one serving the most queued
// compute wins.
std::vector<MigInstance> PlanLayout(const MigGeometry& geo, const std::string& profile,
                                    const MigQueue& queue, int* served) {
  const MigProfile* p = geo.Find(profile);
  std::vector<std::pair<std::string, uint32_t>> wanted;
  for (const auto& [name, count] : queue) {
    if (geo.Find(name) != nullptr && count > 0) wanted.emplace_back(name, count);
  }
  std::sort(wanted.begin(), wanted.end(), [&](const auto& a, const auto& b) {
    if (a.second != b.second) return a.second > b.second;
    return geo.Find(a.first)->memory_slices > geo.Find(b.first)->memory_slices;
  });
  std::vector<MigInstance> best;
  int best_served = -1;
  for (int start : p->starts) {
    std::vector<MigInstance> layout{{profile, start}};
    if (!ValidateMigLayout(geo, layout).ok()) continue;
    int compute = 0;
    // The request itself is already in the queue counts; do not count it twice.
    std::map<std::string, uint32_t> left;
    for (const auto& [name, count] : wanted) left[name] = count;
    if (left[profile] > 0) --left[profile];
    for (const auto& [name, count] : wanted) {
      while (left[name] > 0) {
        std::vector<int> starts = FreeMigStarts(geo, layout, name);
        if (starts.empty()) break;
        layout.push_back({name, starts.front()});
        --left[name];
        compute += geo.Find(name)->compute_slices;
      }
    }
    if (compute > best_served) {
      best_served = compute;
      best = std::move(layout);
    }
  }
  if (served != nullptr) *served = best_served;
  return best;
}

class Placer {
 public:
  Placer(const Pool& pool, const WorkloadSpec& spec, WorkloadId id, const MigQueue& queue,
         PlacementPolicy& policy, const PlacementOptions& options, std::mt19937_64& rng)
      : pool_(pool),
        spec_(spec),
        id_(id),
        queue_(queue),
        policy_(policy),
        options_(options),
        rng_(rng),
        filter_(MakeFilter(pool, spec)) {}

  PlacementDecision Run();

 private:
  struct GangFit {
    std::vector<Candidate> replicas;
    double score = 0;
    uint64_t group_free = 0;  // eligible free milli in the group (smaller: tighter)
    int level = 0;
  };

  bool ClusterMayHold(const ClusterSlots& c) const;
  uint64_t ClusterFree(const ClusterSlots& c) const;
  // The best place for one replica on one node (restricted to `mask`), given `node` state.
  std::optional<Candidate> BestOnNode(const NodeSlots& node, uint32_t index, uint64_t mask,
                                      bool mig_off);
  std::optional<Candidate> BestMigOnNode(const NodeSlots& node, uint32_t index, uint64_t mask);
  // All replicas inside one group (members: node index and GPU mask), greedily.
  std::optional<GangFit> FitGroup(const ClusterSlots& cluster, const std::vector<Member>& members,
                                  bool mig_off);
  void Apply(NodeSlots& node, const Candidate& c) const;
  Assignment ToAssignment(const ClusterSlots& cluster, const std::vector<Candidate>& cands) const;

  const Pool& pool_;
  const WorkloadSpec& spec_;
  const WorkloadId id_;
  const MigQueue& queue_;
  PlacementPolicy& policy_;
  const PlacementOptions& options_;
  std::mt19937_64& rng_;
  const Filter filter_;
};

bool Placer::ClusterMayHold(const ClusterSlots& c) const {
  const Demand& d = filter_.demand;
  if (d.kind == Demand::Kind::kNone) return true;
  uint64_t whole = 0;
  uint64_t max_node_whole = 0;
  uint32_t max_share = 0;
  uint64_t mig = 0;
  for (size_t m = 0; m < c.summary.size(); ++m) {
    if (!filter_.any_model && (m >= filter_.model_ok.size() || !filter_.model_ok[m])) continue;
    const ClusterSlots::ModelSummary& s = c.summary[m];
    whole += s.whole_free;
    max_node_whole += s.max_node_whole_free;  // an upper bound for mixed nodes
    max_share = std::max(max_share, s.max_gpu_milli_free);
    if (m < filter_.mig_ok.size() && filter_.mig_ok[m]) {
      mig += s.mig_free_instances + s.mig_idle_capable;
    }
    // Idle MIG GPUs may be turned back into whole GPUs.
    if (options_.partitioning && d.kind != Demand::Kind::kMig) whole += s.mig_idle_capable;
  }
  switch (d.kind) {
    case Demand::Kind::kWhole:
      return whole >= uint64_t{d.gpus} * spec_.replicas &&
             (options_.partitioning || max_node_whole >= d.gpus);
    case Demand::Kind::kShare:
      return max_share >= d.milli || (options_.partitioning && whole > 0);
    case Demand::Kind::kMig:
      return mig > 0 || options_.partitioning;
    case Demand::Kind::kNone:
      return true;
  }
  return true;
}

uint64_t Placer::ClusterFree(const ClusterSlots& c) const {
  uint64_t free = 0;
  for (size_t m = 0; m < c.summary.size(); ++m) {
    if (!filter_.any_model && (m >= filter_.model_ok.size() || !filter_.model_ok[m])) continue;
    free += c.summary[m].milli_free + uint64_t{c.summary[m].mig_free_instances} * 100;
  }
  return free;
}

std::optional<Candidate> Placer::BestOnNode(const NodeSlots& node, uint32_t index, uint64_t mask,
                                            bool mig_off) {
  if (!node.info.schedulable) return std::nullopt;
  const Demand& d = filter_.demand;
  if (d.kind == Demand::Kind::kMig) return BestMigOnNode(node, index, mask);
  ViewIndex vi;
  NodeView view = BuildView(node, filter_, mask, /*ignore_holders=*/false, mig_off, &vi);
  if (!view.Fits(d)) return std::nullopt;
  if (d.kind == Demand::Kind::kWhole) {
    view.whole_pick = WholePick(node, view, vi, d.gpus,
                                spec_.topology == Topology::kSameNvlinkDomain);
    if (view.whole_pick.size() != d.gpus) return std::nullopt;
  }
  NodeChoice choice = policy_.Choose(view, d, index);
  if (d.kind != Demand::Kind::kNone && choice.gpus.empty()) return std::nullopt;
  Candidate c;
  c.node = index;
  c.score = choice.score;
  c.milli = d.kind == Demand::Kind::kShare ? d.milli : kMilliPerGpu;
  for (uint8_t g : choice.gpus) {
    const uint8_t gpu = vi[g];
    c.gpus.push_back(gpu);
    if (node.info.gpus[gpu].mig_enabled) {
      Repartition r;
      r.node = node.info.name;
      r.gpu_uuid = node.info.gpus[gpu].uuid;
      r.mig_enabled = false;
      r.reason = absl::StrCat("MIG off on an idle GPU for workload ", id_, " (",
                              d.kind == Demand::Kind::kShare ? "a GPU share" : "whole GPUs",
                              "; no GPU without MIG was free)");
      c.mig_off.push_back(std::move(r));
    }
  }
  return c;
}

std::optional<Candidate> Placer::BestMigOnNode(const NodeSlots& node, uint32_t index,
                                               uint64_t mask) {
  const Demand& d = filter_.demand;
  if ((node.cpu_free != kUnlimited && node.cpu_free < d.cpu_millis) ||
      (node.memory_free != kUnlimited && node.memory_free < d.memory_mib)) {
    return std::nullopt;
  }
  std::optional<Candidate> best;
  Best chooser(false, &rng_);
  for (size_t g = 0; g < node.gpus.size() && g < 64; ++g) {
    if ((mask & (uint64_t{1} << g)) == 0 || !GpuEligible(filter_, node, g)) continue;
    const GpuInfo& info = node.info.gpus[g];
    const GpuSlot& slot = node.gpus[g];
    const MigGeometry* geo = FindMigGeometry(info.model);
    if (geo == nullptr) continue;
    Candidate c;
    c.node = index;
    c.gpus = {static_cast<uint8_t>(g)};
    c.milli = 0;
    // Classes, best first: a free instance of the profile; a new instance beside running ones;
    // repartitioning an idle MIG GPU; turning MIG on for an idle GPU. Within a class the GPU left
    // with the fewest free memory slots (tightest) wins.
    double cls = -1;
    if (info.mig_enabled) {
      for (size_t i = 0; i < info.mig_layout.size(); ++i) {
        if (info.mig_layout[i].profile == d.mig_profile && slot.mig_owners[i] == 0) {
          c.mig = info.mig_layout[i];
          cls = 3;
          break;
        }
      }
      if (cls < 0 && options_.partitioning) {
        std::vector<int> starts = FreeMigStarts(*geo, info.mig_layout, d.mig_profile);
        if (!starts.empty()) {
          Repartition r;
          r.node = node.info.name;
          r.gpu_uuid = info.uuid;
          r.mig_enabled = true;
          r.layout = info.mig_layout;
          r.layout.push_back({d.mig_profile, starts.front()});
          r.reason = absl::StrCat("new ", d.mig_profile, " instance at slot ", starts.front(),
                                  " for workload ", id_, "; layout ", LayoutText(r.layout));
          c.mig = r.layout.back();
          c.repartition = std::move(r);
          cls = 2;
        }
      }
    }
    if (cls < 0 && options_.partitioning && slot.Idle() && info.mig_capable) {
      int served = 0;
      std::vector<MigInstance> layout = PlanLayout(*geo, d.mig_profile, queue_, &served);
      if (!layout.empty()) {
        Repartition r;
        r.node = node.info.name;
        r.gpu_uuid = info.uuid;
        r.mig_enabled = true;
        r.layout = layout;
        r.reason = absl::StrCat(info.mig_enabled ? "repartition idle GPU" : "MIG on for idle GPU",
                                " for workload ", id_, " (", d.mig_profile, "); layout ",
                                LayoutText(layout), " serves the queue");
        c.mig = layout.front();
        c.repartition = std::move(r);
        cls = info.mig_enabled ? 1 : 0;
      }
    }
    if (cls < 0) continue;
    const std::vector<MigInstance>& after =
        c.repartition ? c.repartition->layout : info.mig_layout;
    c.score = cls * 100 - FreeSlots(*geo, after);
    if (chooser.Offer(c.score)) best = std::move(c);
  }
  return best;
}

void Placer::Apply(NodeSlots& node, const Candidate& c) const {
  const Demand& d = filter_.demand;
  if (node.cpu_free != kUnlimited) node.cpu_free -= std::min(node.cpu_free, d.cpu_millis);
  if (node.memory_free != kUnlimited) node.memory_free -= std::min(node.memory_free, d.memory_mib);
  for (const Repartition& r : c.mig_off) {
    const int g = node.FindGpu(r.gpu_uuid);
    node.info.gpus[g].mig_enabled = false;
    node.info.gpus[g].mig_layout.clear();
    node.gpus[g].mig_owners.clear();
  }
  if (d.kind == Demand::Kind::kMig) {
    const uint8_t g = c.gpus.front();
    if (c.repartition) {
      GpuInfo& info = node.info.gpus[g];
      std::vector<WorkloadId> owners(c.repartition->layout.size(), 0);
      for (size_t i = 0; i < info.mig_layout.size() && i < owners.size(); ++i) {
        owners[i] = node.gpus[g].mig_owners[i];  // a new instance is appended at the end
      }
      info.mig_enabled = true;
      info.mig_layout = c.repartition->layout;
      node.gpus[g].mig_owners = std::move(owners);
    }
    const GpuInfo& info = node.info.gpus[g];
    for (size_t i = 0; i < info.mig_layout.size(); ++i) {
      if (info.mig_layout[i] == c.mig && node.gpus[g].mig_owners[i] == 0) {
        node.gpus[g].mig_owners[i] = -1;
        break;
      }
    }
  } else {
    for (uint8_t g : c.gpus) node.gpus[g].holders.push_back(GpuHold{-1, c.milli});
  }
  RecountNode(node);
}

std::optional<Placer::GangFit> Placer::FitGroup(const ClusterSlots& cluster,
                                                const std::vector<Member>& members,
                                                bool mig_off) {
  GangFit fit;
  std::unordered_map<uint32_t, NodeSlots> scratch;  // nodes changed by earlier replicas
  if (spec_.replicas > 1) {
    for (const Member& m : members) {
      NodeView v = BuildView(cluster.nodes[m.node], filter_, m.mask, false, mig_off, nullptr);
      fit.group_free += v.MilliFree();
    }
  }
  for (uint32_t r = 0; r < spec_.replicas; ++r) {
    std::optional<Candidate> best;
    Best chooser(options_.random_ties, &rng_);
    for (const Member& m : members) {
      auto it = scratch.find(m.node);
      const NodeSlots& node = it == scratch.end() ? cluster.nodes[m.node] : it->second;
      std::optional<Candidate> c = BestOnNode(node, m.node, m.mask, mig_off);
      if (c && chooser.Offer(c->score)) best = std::move(c);
    }
    if (!best) return std::nullopt;
    auto [it, inserted] = scratch.try_emplace(best->node);
    if (inserted) it->second = cluster.nodes[best->node];
    Apply(it->second, *best);
    fit.score += best->score;
    fit.replicas.push_back(std::move(*best));
  }
  return fit;
}

Assignment Placer::ToAssignment(const ClusterSlots& cluster,
                                const std::vector<Candidate>& cands) const {
  Assignment a;
  a.cluster = cluster.info.name;
  a.epoch = cluster.epoch;
  const Demand& d = filter_.demand;
  for (const Candidate& c : cands) {
    const NodeSlots& node = cluster.nodes[c.node];
    ReplicaAssignment r;
    r.node = node.info.name;
    for (uint8_t g : c.gpus) {
      r.gpu_uuids.push_back(node.info.gpus[g].uuid);
      r.gpu_indices.push_back(node.info.gpus[g].index);
    }
    if (d.kind == Demand::Kind::kShare) r.gpu_milli = d.milli;
    if (d.kind == Demand::Kind::kMig) {
      r.mig_profile = c.mig.profile;
      r.mig_start = c.mig.start;
    }
    for (const Repartition& off : c.mig_off) a.repartitions.push_back(off);
    if (c.repartition) {
      // A later replica of the gang may add an instance to a GPU an earlier one repartitioned:
      // its layout extends the earlier one, so the GPU gets one change with both reasons.
      auto same =
          std::find_if(a.repartitions.begin(), a.repartitions.end(), [&](const Repartition& p) {
            return p.node == c.repartition->node && p.gpu_uuid == c.repartition->gpu_uuid;
          });
      if (same == a.repartitions.end()) {
        a.repartitions.push_back(*c.repartition);
      } else {
        same->mig_enabled = c.repartition->mig_enabled;
        same->layout = c.repartition->layout;
        absl::StrAppend(&same->reason, "; ", c.repartition->reason);
      }
    }
    a.replicas.push_back(std::move(r));
  }
  return a;
}

PlacementDecision Placer::Run() {
  PlacementDecision decision;
  // Ready clusters that may hold it, tightest first.
  std::vector<std::pair<uint64_t, const ClusterSlots*>> ranked;
  for (const ClusterSlots& c : pool_.clusters()) {
    if (c.state != ClusterState::kReady || !ClusterMayHold(c)) continue;
    ranked.emplace_back(ClusterFree(c), &c);
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });

  const std::vector<Level> levels = LevelsFor(spec_.topology, spec_.replicas);
  // Two passes: without, then with turning idle MIG GPUs back into whole GPUs.
  for (int pass = 0; pass < 2; ++pass) {
    const bool mig_off = pass == 1;
    if (mig_off && (!options_.partitioning || filter_.demand.kind == Demand::Kind::kMig ||
                    filter_.demand.kind == Demand::Kind::kNone)) {
      break;
    }
    for (Level level : levels) {
      std::optional<GangFit> best;
      const ClusterSlots* best_cluster = nullptr;
      uint64_t ties = 0;
      int scored = 0;
      for (const auto& [free, cluster] : ranked) {
        if (scored >= options_.max_clusters_scored) break;
        bool any = false;
        for (const Group& group : GroupsAt(*cluster, level)) {
          std::optional<GangFit> fit = FitGroup(*cluster, group.members, mig_off);
          if (!fit) continue;
          any = true;
          // Tightest group first (gangs: the smallest domain, rack or block that holds them);
          // then the policy's score; ties at random (or the first).
          int cmp = 0;
          if (best && spec_.replicas > 1 && fit->group_free != best->group_free) {
            cmp = fit->group_free < best->group_free ? 1 : -1;
          } else if (best && fit->score != best->score) {
            cmp = fit->score > best->score ? 1 : -1;
          }
          if (!best || cmp > 0) {
            best = std::move(fit);
            best_cluster = cluster;
            ties = 1;
          } else if (cmp == 0 && options_.random_ties) {
            ++ties;
            if (std::uniform_int_distribution<uint64_t>(1, ties)(rng_) == 1) {
              best = std::move(fit);
              best_cluster = cluster;
            }
          }
        }
        if (any) ++scored;
      }
      if (best) {
        decision.assignment = ToAssignment(*best_cluster, best->replicas);
        return decision;
      }
    }
  }
  ExplainFailure(pool_, spec_, filter_, options_, &decision);
  return decision;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PlacementEngine>> PlacementEngine::Create(
    PlacementOptions options) {
  absl::StatusOr<std::unique_ptr<PlacementPolicy>> policy = MakePolicy(options.policy);
  if (!policy.ok()) return policy.status();
  return std::unique_ptr<PlacementEngine>(new PlacementEngine(options, *std::move(policy)));
}

PlacementEngine::PlacementEngine(PlacementOptions options, std::unique_ptr<PlacementPolicy> policy)
    : options_(std::move(options)), policy_(std::move(policy)), tie_rng_(options_.seed) {
  policy_->Seed(options_.seed ^ 0x9e3779b97f4a7c15ULL);
}

PlacementDecision PlacementEngine::Place(const Pool& pool, const WorkloadSpec& spec, WorkloadId id,
                                         const MigQueue& mig_queue) {
  Placer placer(pool, spec, id, mig_queue, *policy_, options_, tie_rng_);
  return placer.Run();
}

WorkloadMix MixOf(Pool& pool, const std::vector<WorkloadSpec>& specs, double coverage) {
  // Typical workloads as in the paper's simulator: group by (CPU, share per GPU, GPU count,
  // allowed models; MIG profile), most popular first until `coverage` of all workloads is
  // covered, weights renormalised over the kept ones. Host memory is not part of the key.
  using Key = std::tuple<uint64_t, uint32_t, uint32_t, std::string, std::string>;
  std::map<Key, uint64_t> counts;
  uint64_t total = 0;
  for (const WorkloadSpec& s : specs) {
    const Demand d = Demand::Of(s);
    counts[Key{d.cpu_millis, d.milli, d.gpus, absl::StrJoin(s.gpu_models, "|"), d.mig_profile}] +=
        s.replicas;
    total += s.replicas;
  }
  std::vector<std::pair<uint64_t, Key>> ordered;
  for (const auto& [k, n] : counts) ordered.emplace_back(n, k);
  std::sort(ordered.begin(), ordered.end(),
            [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second > b.second; });
  WorkloadMix mix;
  uint64_t covered = 0;
  for (const auto& [n, k] : ordered) {
    if (total > 0 && static_cast<double>(covered) >= coverage * static_cast<double>(total)) break;
    const auto& [cpu, milli, gpus, models, mig] = k;
    MixEntry e;
    e.demand.cpu_millis = cpu;
    e.demand.milli = milli;
    e.demand.gpus = gpus;
    e.demand.mig_profile = mig;
    e.demand.kind = !mig.empty()              ? Demand::Kind::kMig
                    : gpus == 0               ? Demand::Kind::kNone
                    : milli < kMilliPerGpu    ? Demand::Kind::kShare
                                              : Demand::Kind::kWhole;
    if (!models.empty()) {
      for (absl::string_view m : absl::StrSplit(models, '|')) e.models.push_back(pool.ModelId(m));
    }
    e.weight = static_cast<double>(n);
    covered += n;
    mix.push_back(std::move(e));
  }
  for (MixEntry& e : mix) e.weight /= static_cast<double>(std::max<uint64_t>(covered, 1));
  return mix;
}

}  // namespace gpufed
