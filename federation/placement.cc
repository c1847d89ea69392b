#include "federation/placement.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <tuple>
#include <unordered_map>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"
#include "federation/mig.h"
#include "federation/placement_internal.h"

namespace gpufed {
namespace placement_internal {

Filter MakeFilter(const Pool& pool, const WorkloadSpec& spec, const PlacementScope* scope) {
  Filter f;
  f.min_memory = spec.min_gpu_memory_mib;
  f.any_model = spec.gpu_models.empty();
  f.model_ok.assign(pool.model_count(), f.any_model);
  for (const std::string& m : spec.gpu_models) {
    const int id = pool.FindModelId(m);
    if (id >= 0) f.model_ok[id] = true;
  }
  if (scope != nullptr) {
    if (!scope->models.empty()) {
      f.any_model = false;
      for (size_t m = 0; m < f.model_ok.size(); ++m) {
        f.model_ok[m] = f.model_ok[m] && m < scope->models.size() && scope->models[m];
      }
    }
    f.capacity = scope->capacity;
    f.cluster_ok = scope->clusters;
  }
  f.demand = Demand::Of(spec);
  f.min_driver = PackVersion(spec.placement.min_driver_version).value_or(0);
  f.min_cuda = PackVersion(spec.placement.min_cuda_version).value_or(0);
  if (f.demand.kind == Demand::Kind::kMig) {
    for (size_t id = 0; id < pool.model_count(); ++id) {
      const MigGeometry* geo = FindMigGeometry(pool.ModelName(static_cast<uint16_t>(id)));
      f.mig_ok.push_back(geo != nullptr && geo->Find(spec.mig_profile) != nullptr);
    }
  }
  return f;
}

std::optional<EngineCache::RequestKey> RequestKeyOf(const Filter& filter, const WorkloadSpec& spec,
                                                    const PlacementOptions& options,
                                                    size_t model_count) {
  const std::optional<uint64_t> models = filter.ModelBits();
  if (model_count > 64 || !models) return std::nullopt;
  const Demand& d = filter.demand;
  return EngineCache::RequestKey{d.kind,
                                 d.gpus,
                                 d.milli,
                                 d.cpu_millis,
                                 d.memory_mib,
                                 filter.min_memory,
                                 *models,
                                 d.mig_profile,
                                 spec.topology == Topology::kSameNvlinkDomain,
                                 options.partitioning,
                                 filter.capacity,
                                 filter.min_driver,
                                 filter.min_cuda};
}

std::optional<uint64_t> Filter::ModelBits() const {
  if (any_model) return ~uint64_t{0};
  uint64_t bits = 0;
  for (size_t m = 0; m < model_ok.size(); ++m) {
    if (!model_ok[m]) continue;
    if (m >= 64) return std::nullopt;
    bits |= uint64_t{1} << m;
  }
  return bits;
}

bool GpuEligible(const Filter& f, const NodeSlots& node, size_t g) {
  const GpuSlot& slot = node.gpus[g];  // its copies of the inventory's figures
  if (!slot.healthy || slot.memory_mib < f.min_memory) return false;
  if ((f.capacity & (1U << static_cast<int>(slot.capacity))) == 0) return false;
  if (node.driver_version < f.min_driver || node.cuda_version < f.min_cuda) return false;
  const uint16_t m = slot.model;
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
    const GpuSlot& slot = node.gpus[g];
    uint32_t free = slot.milli_free;
    if (ignore_holders) {
      free = kMilliPerGpu;
    } else if (slot.mig_enabled) {
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
                                          const ViewIndex& index, uint32_t count, bool one_domain) {
  absl::InlinedVector<uint8_t, 8> free;
  for (size_t i = 0; i < v.milli_free.size(); ++i) {
    if (v.milli_free[i] == kMilliPerGpu) free.push_back(static_cast<uint8_t>(i));
  }
  absl::InlinedVector<uint8_t, 8> pick;
  if (free.size() < count) return pick;
  // Smallest NVLink domain (then PCIe switch, then NUMA node) on the node that holds them all;
  // among equal sizes the first by name. The pool ranks each GPU's names in name order, so no
  // string is compared here.
  for (size_t level = 0; level < 3; ++level) {
    auto rank_of = [&](uint8_t i) {
      const GpuSlot& slot = node.gpus[index[i]];
      return level == 0 ? slot.nvlink_rank : level == 1 ? slot.switch_rank : slot.numa_rank;
    };
    absl::InlinedVector<std::pair<uint8_t, uint32_t>, 8> size;  // rank, free GPUs in it
    for (uint8_t i : free) {
      const uint8_t r = rank_of(i);
      if (r == kNoRank) continue;
      auto it = std::find_if(size.begin(), size.end(), [&](const auto& p) { return p.first == r; });
      if (it == size.end()) {
        size.emplace_back(r, 1);
      } else {
        ++it->second;
      }
    }
    int best = -1;
    uint32_t best_size = 0;
    for (const auto& [r, n] : size) {
      if (n >= count && (best < 0 || n < best_size || (n == best_size && r < best))) {
        best = r;
        best_size = n;
      }
    }
    if (best >= 0) {
      for (uint8_t i : free) {
        if (rank_of(i) == best && pick.size() < count) pick.push_back(i);
      }
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

namespace placement_internal {

// One replica's place on one node.
struct Candidate {
  uint32_t node = 0;
  double score = 0;
  absl::InlinedVector<uint8_t, 8> gpus;  // node GPU indices
  uint32_t milli = kMilliPerGpu;         // per GPU (whole: 1000)
  // MIG: the instance taken, and the layout change that makes it (if any). The change's node,
  // GPU and reason are filled in only for the chosen candidates (ToAssignment), from its class
  // (0: MIG on for an idle GPU, 1: an idle MIG GPU repartitioned, 2: a new instance at
  // `mig_new_start` beside running ones).
  MigInstance mig;
  std::optional<Repartition> repartition;
  int mig_class = -1;
  int mig_new_start = -1;
  // Whole/share on idle MIG GPUs: MIG is turned off on these first.
  std::vector<Repartition> mig_off;
};

}  // namespace placement_internal

namespace {

// The engine's tie-break draws. An attempt to fit a gang into one group that fails leaves the
// generator as it was (Begin ... End): which attempts are made, and which are skipped because
// they cannot succeed (PlacementOptions::accelerate), then changes no later draw. The state is
// copied only when an attempt first draws.
class TieDraws {
 public:
  explicit TieDraws(std::mt19937_64& rng) : rng_(rng) {}
  // 1..n, uniformly.
  uint64_t Uniform(uint64_t n) {
    if (attempt_ && !saved_) saved_ = rng_;
    return std::uniform_int_distribution<uint64_t>(1, n)(rng_);
  }
  void Begin() {
    attempt_ = true;
    saved_.reset();
  }
  void End(bool failed) {
    if (failed && saved_) rng_ = *saved_;
    attempt_ = false;
    saved_.reset();
  }

 private:
  std::mt19937_64& rng_;
  bool attempt_ = false;
  std::optional<std::mt19937_64> saved_;
};

// Picks among equal scores: the first, or (random_ties) uniformly at random by reservoir.
class Best {
 public:
  Best(bool random_ties, TieDraws* draws) : random_ties_(random_ties), draws_(draws) {}
  bool Offer(double score) {
    if (!have_ || score > score_) {
      have_ = true;
      score_ = score;
      ties_ = 1;
      return true;
    }
    if (score < score_ || !random_ties_) return false;
    ++ties_;
    return draws_->Uniform(ties_) == 1;
  }
  // Whether Offer(score) could pick it (no draw is made).
  [[nodiscard]] bool MayTake(double score) const {
    return !have_ || score > score_ || (random_ties_ && score == score_);
  }

 private:
  bool random_ties_;
  TieDraws* draws_;
  bool have_ = false;
  double score_ = 0;
  uint64_t ties_ = 0;
};

// Free memory slots on a MIG GPU: slots not covered by any instance.
int FreeSlots(const MigGeometry& geo, const std::vector<MigInstance>& layout) {
  uint64_t used = 0;  // bit per memory slot
  const int slots = std::min(geo.memory_slots, 64);
  for (const MigInstance& inst : layout) {
    const MigProfile* p = geo.Find(inst.profile);
    if (p == nullptr) continue;
    for (int s = std::max(inst.start, 0); s < inst.start + p->memory_slices && s < slots; ++s) {
      used |= uint64_t{1} << s;
    }
  }
  return slots - std::popcount(used);
}

std::string LayoutText(const std::vector<MigInstance>& layout) {
  std::vector<std::string> parts;
  parts.reserve(layout.size());
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
         PlacementPolicy& policy, const PlacementOptions& options, std::mt19937_64& rng,
         EngineCache& cache, const PlacementScope* scope)
      : pool_(pool),
        spec_(spec),
        id_(id),
        queue_(queue),
        policy_(policy),
        options_(options),
        draws_(rng),
        filter_(MakeFilter(pool, spec, scope)),
        explain_(scope == nullptr || scope->explain),
        cache_(cache),
        scratch_{cache.scratch, {}, 0} {}

  PlacementDecision Run();

 private:
  // Nodes changed by earlier replicas of a gang: copies, reused from call to call so that copying
  // a node rarely allocates.
  struct Scratch {
    std::vector<NodeSlots>& nodes;  // buffers, owned by the engine
    std::vector<uint32_t> index;    // node index in the cluster of nodes[i], for i < size
    size_t size = 0;
  };
  struct GangFit {
    absl::InlinedVector<Candidate, 1> replicas;  // most requests are one replica
    double score = 0;
    uint64_t group_free = 0;  // eligible free milli in the group (smaller: tighter)
    int level = 0;
  };

  // The summary of the request's allowed models in `c` (as Pool::RankOf adds them up).
  [[nodiscard]] ModelSummary Allowed(const ClusterSlots& c) const;
  [[nodiscard]] bool ClusterMayHold(const ClusterSlots& c) const;
  [[nodiscard]] bool ClusterMayHold(const ClusterSlots& c, const ModelSummary& allowed) const;
  // Whether `replicas` replicas may fit without turning idle MIG GPUs back into whole GPUs (the
  // first pass): a bound from the summary, so that clusters whose only room is idle MIG GPUs are
  // not searched node by node in that pass.
  [[nodiscard]] bool MayHoldAsIs(const ModelSummary& allowed, uint32_t replicas) const;
  // Whether an order's entry already shows that ClusterMayHold is false.
  [[nodiscard]] bool RuledOut(const Pool::ClusterOrder::Entry& e) const;
  // Whether an order's entry already shows that MayHoldAsIs is false.
  [[nodiscard]] bool AsIsRuledOut(const Pool::ClusterOrder::Entry& e, uint32_t replicas) const;
  [[nodiscard]] uint64_t ClusterFree(const ClusterSlots& c) const;
  // Cheap upper bounds for gangs (pruning large federations): whether some group of the cluster
  // at `level` may hold every replica, and whether `members` may.
  [[nodiscard]] bool LevelMayHold(const ModelSummary& allowed, Level level, bool mig_off) const;
  [[nodiscard]] bool GroupMayHold(const ClusterSlots& c, absl::Span<const Member> members,
                                  bool mig_off) const;
  const MigGeometry* GeometryOf(uint16_t model);
  // PlanLayout for the request's profile on `geo` (the same for every GPU of one product), and
  // the memory slots it leaves free.
  struct Planned {
    const MigGeometry* geo;
    std::vector<MigInstance> layout;
    int free_slots;
  };
  const Planned& PlannedLayout(const MigGeometry& geo);
  // The first of FreeMigStarts for the request's profile, or -1; remembered per layout (GPUs
  // share few layouts).
  int FirstFreeStart(const MigGeometry& geo, const std::vector<MigInstance>& layout);
  // The best place for one replica on one node (restricted to `mask`), given `node` state.
  std::optional<Candidate> BestOnNode(const NodeSlots& node, uint32_t index, uint64_t mask,
                                      bool mig_off);
  // The best MIG placement on a node: the GPU, its class (see BestMigOnNode) and, for a free
  // instance its index in the layout, for a new instance its start.
  struct MigPick {
    uint8_t gpu = 0;
    int16_t cls = -1;
    int16_t aux = -1;
    double score = 0;
  };
  std::optional<MigPick> BestMigOnNode(const NodeSlots& node, uint64_t mask);
  Candidate MigCandidate(const NodeSlots& node, uint32_t index, const MigPick& pick);
  [[nodiscard]] bool NodeRuledOut(const NodeQuick& node, bool mig_off) const;
  // All replicas inside one group (members: node index and GPU mask), greedily.
  // `whole_cluster`: members are every node of the cluster, in order, each with all its GPUs.
  std::optional<GangFit> FitGroup(const ClusterSlots& cluster, absl::Span<const Member> members,
                                  bool mig_off, bool whole_cluster = false);
  void Apply(NodeSlots& node, const Candidate& c) const;
  [[nodiscard]] Assignment ToAssignment(const ClusterSlots& cluster,
                                        absl::Span<const Candidate> cands) const;

  const Pool& pool_;
  const WorkloadSpec& spec_;
  const WorkloadId id_;
  const MigQueue& queue_;
  PlacementPolicy& policy_;
  const PlacementOptions& options_;
  TieDraws draws_;
  const Filter filter_;
  const bool explain_;
  std::vector<const MigGeometry*> geometry_;  // by model id; filled on first use
  std::vector<bool> geometry_known_;
  std::vector<Planned> planned_;
  struct FreeStart {
    const MigGeometry* geo;
    std::vector<MigInstance> layout;
    int start;
  };
  std::vector<FreeStart> free_starts_;
  EngineCache& cache_;
  Scratch scratch_;
  // The request's id in cache_.found, or kNoRequest when results are not remembered. Run sets
  // it.
  static constexpr uint32_t kNoRequest = ~uint32_t{0};
  uint32_t request_ = kNoRequest;
};

ModelSummary Placer::Allowed(const ClusterSlots& c) const {
  ModelSummary a;
  for (size_t m = 0; m < c.summary.size(); ++m) {
    if (!filter_.any_model && (m >= filter_.model_ok.size() || !filter_.model_ok[m])) continue;
    const ClusterSlots::ModelSummary& s = c.summary[m];
    a.whole_free += s.whole_free;
    a.max_node_whole_free += s.max_node_whole_free;  // an upper bound for mixed nodes
    a.max_gpu_milli_free = std::max(a.max_gpu_milli_free, s.max_gpu_milli_free);
    a.mig_free_instances += s.mig_free_instances;
    a.mig_idle_capable += s.mig_idle_capable;
    a.milli_free += s.milli_free;
    a.mig_open += s.mig_open;
  }
  return a;
}

bool Placer::ClusterMayHold(const ClusterSlots& c) const { return ClusterMayHold(c, Allowed(c)); }

bool Placer::ClusterMayHold(const ClusterSlots& c, const ModelSummary& allowed) const {
  const Demand& d = filter_.demand;
  if (d.kind == Demand::Kind::kNone) return true;
  uint64_t whole = allowed.whole_free;
  const uint64_t max_node_whole = allowed.max_node_whole_free;
  const uint32_t max_share = allowed.max_gpu_milli_free;
  uint64_t mig = 0;
  if (d.kind == Demand::Kind::kMig) {
    // A free instance; with partitioning also an idle MIG-capable GPU or a MIG GPU with room
    // for a new instance.
    for (size_t m = 0; m < c.summary.size(); ++m) {
      if (!filter_.any_model && (m >= filter_.model_ok.size() || !filter_.model_ok[m])) continue;
      if (m < filter_.mig_ok.size() && filter_.mig_ok[m]) {
        const ClusterSlots::ModelSummary& s = c.summary[m];
        mig += s.mig_free_instances;
        if (options_.partitioning) mig += s.mig_idle_capable + s.mig_open;
      }
    }
  } else if (options_.partitioning) {
    whole += allowed.mig_idle_capable;  // idle MIG GPUs may be turned back into whole GPUs
  }
  switch (d.kind) {
    case Demand::Kind::kWhole:
      return whole >= uint64_t{d.gpus} * spec_.replicas &&
             (options_.partitioning || max_node_whole >= d.gpus);
    case Demand::Kind::kShare:
      return max_share >= d.milli || (options_.partitioning && whole > 0);
    case Demand::Kind::kMig:
      return mig > 0;
    case Demand::Kind::kNone:
      return true;
  }
  return true;
}

bool Placer::RuledOut(const Pool::ClusterOrder::Entry& e) const {
  const Demand& d = filter_.demand;
  constexpr uint16_t kSaturated = Pool::ClusterOrder::kSaturated;
  if (e.whole_free == kSaturated || e.max_node_whole_free == kSaturated ||
      e.mig_idle_capable == kSaturated) {
    return false;  // figures too large to tell
  }
  // As ClusterMayHold decides.
  const uint64_t whole = uint64_t{e.whole_free} + (options_.partitioning ? e.mig_idle_capable : 0);
  switch (d.kind) {
    case Demand::Kind::kWhole:
      return whole < uint64_t{d.gpus} * spec_.replicas ||
             (!options_.partitioning && e.max_node_whole_free < d.gpus);
    case Demand::Kind::kShare:
      return e.max_gpu_milli_free < d.milli && !(options_.partitioning && whole > 0);
    case Demand::Kind::kMig:
    case Demand::Kind::kNone:
      return false;
  }
  return false;
}

bool Placer::AsIsRuledOut(const Pool::ClusterOrder::Entry& e, uint32_t replicas) const {
  const Demand& d = filter_.demand;
  constexpr uint16_t kSaturated = Pool::ClusterOrder::kSaturated;
  if (e.whole_free == kSaturated || e.max_node_whole_free == kSaturated) return false;
  ModelSummary allowed;  // the figures MayHoldAsIs reads
  allowed.whole_free = e.whole_free;
  allowed.max_node_whole_free = e.max_node_whole_free;
  allowed.max_gpu_milli_free = e.max_gpu_milli_free;
  return d.kind != Demand::Kind::kMig && !MayHoldAsIs(allowed, replicas);
}

bool Placer::MayHoldAsIs(const ModelSummary& allowed, uint32_t replicas) const {
  const Demand& d = filter_.demand;
  switch (d.kind) {
    case Demand::Kind::kWhole:
      return allowed.max_node_whole_free >= d.gpus &&
             allowed.whole_free >= uint64_t{d.gpus} * replicas;
    case Demand::Kind::kShare:
      return allowed.max_gpu_milli_free >= d.milli;
    case Demand::Kind::kMig:
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

bool Placer::LevelMayHold(const ModelSummary& allowed, Level level, bool mig_off) const {
  const Demand& d = filter_.demand;
  if (d.kind != Demand::Kind::kWhole || (level != Level::kNode && level != Level::kDomain)) {
    return true;
  }
  // Every replica on one node: no node has more whole GPUs of one model than the most on any
  // node, summed over the allowed models (plus idle MIG GPUs when they may be turned off).
  const uint64_t most =
      uint64_t{allowed.max_node_whole_free} + (mig_off ? allowed.mig_idle_capable : 0);
  return most >= uint64_t{d.gpus} * spec_.replicas;
}

bool Placer::GroupMayHold(const ClusterSlots& c, absl::Span<const Member> members,
                          bool mig_off) const {
  const Demand& d = filter_.demand;
  if (d.kind != Demand::Kind::kWhole && d.kind != Demand::Kind::kShare) return true;
  uint64_t replicas = 0;
  // Whole GPUs: the cluster's side-by-side figures are enough; shares need every GPU's.
  const bool quick = d.kind == Demand::Kind::kWhole && c.quick.size() == c.nodes.size();
  for (const Member& m : members) {
    const NodeQuick node = quick ? c.quick[m.node] : NodeQuick::Of(c.nodes[m.node]);
    if (!node.schedulable) continue;
    // Replicas the node's GPUs may hold (all of them, whatever the mask: an upper bound) ...
    uint64_t n = 0;
    const uint64_t idle_mig = mig_off ? node.mig_idle : 0;
    if (d.kind == Demand::Kind::kWhole) {
      n = (node.free + idle_mig) / std::max<uint32_t>(d.gpus, 1);
    } else {
      for (const GpuSlot& slot : c.nodes[m.node].gpus) n += slot.milli_free / d.milli;
      n += idle_mig * (kMilliPerGpu / d.milli);
    }
    // ... and its host resources.
    if (d.cpu_millis > 0 && node.cpu_free != kUnlimited) {
      n = std::min(n, node.cpu_free / d.cpu_millis);
    }
    if (d.memory_mib > 0 && node.memory_free != kUnlimited) {
      n = std::min(n, node.memory_free / d.memory_mib);
    }
    replicas += n;
    if (replicas >= spec_.replicas) return true;
  }
  return false;
}

const MigGeometry* Placer::GeometryOf(uint16_t model) {
  if (model >= geometry_.size()) {
    geometry_.resize(pool_.model_count(), nullptr);
    geometry_known_.resize(pool_.model_count(), false);
  }
  if (model >= geometry_.size()) return nullptr;
  if (!geometry_known_[model]) {
    geometry_[model] = FindMigGeometry(pool_.ModelName(model));
    geometry_known_[model] = true;
  }
  return geometry_[model];
}

const Placer::Planned& Placer::PlannedLayout(const MigGeometry& geo) {
  for (const Planned& p : planned_) {
    if (p.geo == &geo) return p;
  }
  int served = 0;
  std::vector<MigInstance> layout = PlanLayout(geo, filter_.demand.mig_profile, queue_, &served);
  const int free = FreeSlots(geo, layout);
  planned_.push_back({&geo, std::move(layout), free});
  return planned_.back();
}

int Placer::FirstFreeStart(const MigGeometry& geo, const std::vector<MigInstance>& layout) {
  if (!options_.accelerate) {
    const std::vector<int> starts = FreeMigStarts(geo, layout, filter_.demand.mig_profile);
    return starts.empty() ? -1 : starts.front();
  }
  for (const FreeStart& f : free_starts_) {
    if (f.geo == &geo && f.layout == layout) return f.start;
  }
  const std::vector<int> starts = FreeMigStarts(geo, layout, filter_.demand.mig_profile);
  const int start = starts.empty() ? -1 : starts.front();
  if (free_starts_.size() < 64) free_starts_.push_back({&geo, layout, start});
  return start;
}

bool Placer::NodeRuledOut(const NodeQuick& node, bool mig_off) const {
  // What BestOnNode would refuse, decided from the node's own figures before reading every
  // GPU: unschedulable, host resources, not enough whole GPUs, no GPU with a large enough share.
  if (!node.schedulable) return true;
  const Demand& d = filter_.demand;
  if ((node.cpu_free != kUnlimited && node.cpu_free < d.cpu_millis) ||
      (node.memory_free != kUnlimited && node.memory_free < d.memory_mib)) {
    return true;
  }
  const uint32_t idle_mig = mig_off ? node.mig_idle : 0;
  switch (d.kind) {
    case Demand::Kind::kWhole:
      return node.free + idle_mig < d.gpus;
    case Demand::Kind::kShare:
      return node.max_milli_free < d.milli && idle_mig == 0;
    case Demand::Kind::kMig:
      return node.mig_room == 0;  // BestMigOnNode's own check, over every model
    case Demand::Kind::kNone:
      return false;
  }
  return false;
}

std::optional<Candidate> Placer::BestOnNode(const NodeSlots& node, uint32_t index, uint64_t mask,
                                            bool mig_off) {
  // Without acceleration only what no later check covers: an unschedulable node.
  if (options_.accelerate ? NodeRuledOut(NodeQuick::Of(node), mig_off) : !node.info.schedulable) {
    return std::nullopt;
  }
  const Demand& d = filter_.demand;
  if (d.kind == Demand::Kind::kMig) {
    std::optional<MigPick> pick = BestMigOnNode(node, mask);
    if (!pick) return std::nullopt;
    return MigCandidate(node, index, *pick);
  }
  ViewIndex vi;
  NodeView view = BuildView(node, filter_, mask, /*ignore_holders=*/false, mig_off, &vi);
  if (!view.Fits(d)) return std::nullopt;
  if (d.kind == Demand::Kind::kWhole) {
    view.whole_pick =
        WholePick(node, view, vi, d.gpus, spec_.topology == Topology::kSameNvlinkDomain);
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
    if (node.gpus[gpu].mig_enabled) {
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

std::optional<Placer::MigPick> Placer::BestMigOnNode(const NodeSlots& node, uint64_t mask) {
  const Demand& d = filter_.demand;
  if ((node.cpu_free != kUnlimited && node.cpu_free < d.cpu_millis) ||
      (node.memory_free != kUnlimited && node.memory_free < d.memory_mib)) {
    return std::nullopt;
  }
  // Only nodes with a GPU of an allowed model that offers the profile, and a free instance or
  // (partitioning) an idle MIG-capable GPU or room for a new instance.
  if (options_.accelerate &&
      std::none_of(node.summary.begin(), node.summary.end(), [&](const auto& entry) {
        const uint16_t m = entry.first;
        const ModelSummary& s = entry.second;
        return (filter_.any_model || (m < filter_.model_ok.size() && filter_.model_ok[m])) &&
               m < filter_.mig_ok.size() && filter_.mig_ok[m] &&
               (s.mig_free_instances > 0 ||
                (options_.partitioning && (s.mig_idle_capable > 0 || s.mig_open > 0)));
      })) {
    return std::nullopt;
  }
  std::optional<MigPick> best;
  Best chooser(false, &draws_);
  std::vector<MigInstance> grown;  // a layout with one more instance (class 2)
  for (size_t g = 0; g < node.gpus.size() && g < 64; ++g) {
    if ((mask & (uint64_t{1} << g)) == 0 || !GpuEligible(filter_, node, g)) continue;
    const GpuInfo& info = node.info.gpus[g];
    const GpuSlot& slot = node.gpus[g];
    const MigGeometry* geo = GeometryOf(slot.model);
    if (geo == nullptr) continue;
    // Classes, best first: a free instance of the profile; a new instance beside running ones;
    // repartitioning an idle MIG GPU; turning MIG on for an idle GPU. Within a class the GPU left
    // with the fewest free memory slots (tightest) wins. The candidate (and the words of its
    // reason) is only built for the best (MigCandidate).
    double cls = -1;
    int aux = -1;
    const std::vector<MigInstance>* after = &info.mig_layout;
    if (info.mig_enabled) {
      for (size_t i = 0; i < info.mig_layout.size(); ++i) {
        if (info.mig_layout[i].profile == d.mig_profile && slot.mig_owners[i] == 0) {
          aux = static_cast<int>(i);
          cls = 3;
          break;
        }
      }
      // The other classes score at most 200 (a new instance leaving no slot free): skip the
      // work when that cannot beat this node's best.
      if (cls < 0 && options_.accelerate && !chooser.MayTake(200)) continue;
      if (cls < 0 && options_.partitioning) {
        const int start = FirstFreeStart(*geo, info.mig_layout);
        if (start >= 0) {
          aux = start;
          grown = info.mig_layout;
          grown.push_back({d.mig_profile, start});
          after = &grown;
          cls = 2;
        }
      }
    }
    // Classes 0 and 1 score at most 100.
    if (cls < 0 && options_.accelerate && !chooser.MayTake(100)) continue;
    if (cls < 0 && options_.partitioning && slot.Idle() && info.mig_capable) {
      const Planned& planned = PlannedLayout(*geo);
      const std::vector<MigInstance>& layout = planned.layout;
      // Every idle GPU of the product gets the same layout and score: skip those that tie.
      if (options_.accelerate &&
          !chooser.MayTake((info.mig_enabled ? 100 : 0) - planned.free_slots)) {
        continue;
      }
      if (!layout.empty()) {
        after = &layout;
        cls = info.mig_enabled ? 1 : 0;
      }
    }
    if (cls < 0) continue;
    const double score = cls * 100 - FreeSlots(*geo, *after);
    if (!chooser.Offer(score)) continue;
    best = MigPick{static_cast<uint8_t>(g), static_cast<int8_t>(cls), static_cast<int16_t>(aux),
                   score};
  }
  return best;
}

Candidate Placer::MigCandidate(const NodeSlots& node, uint32_t index, const MigPick& pick) {
  const GpuInfo& info = node.info.gpus[pick.gpu];
  Candidate c;
  c.node = index;
  c.gpus = {pick.gpu};
  c.milli = 0;
  c.score = pick.score;
  if (pick.cls == 3) {
    c.mig = info.mig_layout[pick.aux];
    return c;
  }
  Repartition r;
  r.mig_enabled = true;
  if (pick.cls == 2) {
    r.layout = info.mig_layout;
    r.layout.push_back({filter_.demand.mig_profile, pick.aux});
    c.mig = r.layout.back();
    c.mig_new_start = pick.aux;
  } else {
    r.layout = PlannedLayout(*GeometryOf(node.gpus[pick.gpu].model)).layout;
    c.mig = r.layout.front();
  }
  c.repartition = std::move(r);
  c.mig_class = pick.cls;
  return c;
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
                                                absl::Span<const Member> members, bool mig_off,
                                                bool whole_cluster) {
  using Found = EngineCache::Found;
  GangFit fit;
  scratch_.size = 0;  // nodes changed by earlier replicas
  auto scratch_of = [&](uint32_t node) -> NodeSlots* {
    for (size_t i = 0; i < scratch_.size; ++i) {
      if (scratch_.index[i] == node) return &scratch_.nodes[i];
    }
    return nullptr;
  };
  if (spec_.replicas > 1) {
    for (const Member& m : members) {
      NodeView v = BuildView(cluster.nodes[m.node], filter_, m.mask, false, mig_off, nullptr);
      fit.group_free += v.MilliFree();
    }
  }
  const bool quick = options_.accelerate && cluster.quick.size() == cluster.nodes.size();
  const bool remembered = !mig_off && request_ != kNoRequest;  // per node, in cache_.found
  // One replica over an unchanged cluster: offer again what the nodes offered last time.
  const bool replay =
      remembered && quick && whole_cluster && spec_.replicas == 1 && cluster.version != 0;
  absl::InlinedVector<EngineCache::Offered, 2>* offered = nullptr;
  bool recording = false;
  if (replay) {
    auto [it, added] = cache_.offered.try_emplace({cluster.version, request_});
    offered = &it->second;
    recording = added;
  }
  // The candidate a node offered, from what was remembered of it (as BestOnNode builds it: no
  // MIG change in the first pass).
  auto candidate_of = [&](uint32_t index, const Found& f) -> Candidate {
    if (filter_.demand.kind == Demand::Kind::kMig) {
      return MigCandidate(cluster.nodes[index], index,
                          MigPick{f.gpus[0], f.mig_class, f.mig_aux, f.score});
    }
    Candidate c;
    c.node = index;
    c.score = f.score;
    c.gpus.assign(f.gpus.begin(), f.gpus.begin() + f.n);
    c.milli = filter_.demand.kind == Demand::Kind::kShare ? filter_.demand.milli : kMilliPerGpu;
    return c;
  };
  for (uint32_t r = 0; r < spec_.replicas; ++r) {
    std::optional<Candidate> best;
    Best chooser(options_.random_ties, &draws_);
    if (offered != nullptr && !recording) {
      for (const EngineCache::Offered& o : *offered) {
        if (o.found.n == Found::kLarge) {  // not kept: look again (the node is unchanged)
          std::optional<Candidate> c =
              BestOnNode(cluster.nodes[o.node], o.node, ~uint64_t{0}, false);
          if (c && chooser.Offer(c->score)) best = std::move(c);
        } else if (chooser.Offer(o.found.score)) {
          best = candidate_of(o.node, o.found);
        }
      }
    } else {
      // Offers `score` from node `index` (what it offered: `f`) to the chooser.
      auto offer = [&](uint32_t index, const Found& f, double score) {
        if (recording && chooser.MayTake(score)) offered->push_back({index, f});
        return chooser.Offer(score);
      };
      for (const Member& m : members) {
        const NodeSlots* copy = scratch_.size > 0 ? scratch_of(m.node) : nullptr;
        if (copy == nullptr && quick) {
          // Most nodes are ruled out by the cluster's side-by-side figures without being read,
          // and most others were seen in the same state by a request like this one.
          const NodeQuick& q = cluster.quick[m.node];
          if (NodeRuledOut(q, mig_off)) continue;
          if (remembered) {
            auto [it, added] =
                cache_.found.try_emplace(EngineCache::NodeKey{q.version, m.mask, request_, m.node});
            Found& f = it->second;
            if (filter_.demand.kind == Demand::Kind::kMig) {
              if (added) {
                std::optional<MigPick> pick = BestMigOnNode(cluster.nodes[m.node], m.mask);
                f.n = pick ? 1 : Found::kNone;
                if (pick) {
                  f.score = pick->score;
                  f.gpus[0] = pick->gpu;
                  f.mig_class = static_cast<int8_t>(pick->cls);  // -1..3
                  f.mig_aux = pick->aux;
                }
              }
              if (f.n != Found::kNone && offer(m.node, f, f.score)) best = candidate_of(m.node, f);
              continue;
            }
            if (added || f.n == Found::kLarge) {
              std::optional<Candidate> c = BestOnNode(cluster.nodes[m.node], m.node, m.mask, false);
              if (!c) {
                f.n = Found::kNone;
              } else if (c->gpus.size() > f.gpus.size()) {
                f.n = Found::kLarge;
              } else {
                f.score = c->score;
                f.n = static_cast<int8_t>(c->gpus.size());
                std::copy(c->gpus.begin(), c->gpus.end(), f.gpus.begin());
              }
              if (c && offer(m.node, f, c->score)) best = std::move(c);
            } else if (f.n != Found::kNone && offer(m.node, f, f.score)) {
              best = candidate_of(m.node, f);
            }
            continue;
          }
        }
        const NodeSlots& node = copy == nullptr ? cluster.nodes[m.node] : *copy;
        std::optional<Candidate> c = BestOnNode(node, m.node, m.mask, mig_off);
        if (c && chooser.Offer(c->score)) best = std::move(c);
      }
    }
    if (!best) return std::nullopt;
    if (r + 1 < spec_.replicas) {  // later replicas see what this one takes
      NodeSlots* copy = scratch_of(best->node);
      if (copy == nullptr) {
        if (scratch_.nodes.size() <= scratch_.size) scratch_.nodes.emplace_back();
        if (scratch_.index.size() <= scratch_.size) scratch_.index.emplace_back();
        copy = &scratch_.nodes[scratch_.size];
        *copy = cluster.nodes[best->node];  // reuses the buffer's allocations
        scratch_.index[scratch_.size++] = best->node;
      }
      Apply(*copy, *best);
    }
    fit.score += best->score;
    fit.replicas.push_back(std::move(*best));
  }
  return fit;
}

Assignment Placer::ToAssignment(const ClusterSlots& cluster,
                                absl::Span<const Candidate> cands) const {
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
      Repartition change = *c.repartition;
      change.node = node.info.name;
      change.gpu_uuid = node.info.gpus[c.gpus.front()].uuid;
      change.reason =
          c.mig_class == 2
              ? absl::StrCat("new ", d.mig_profile, " instance at slot ", c.mig_new_start,
                             " for workload ", id_, "; layout ", LayoutText(change.layout))
              : absl::StrCat(c.mig_class == 1 ? "repartition idle GPU" : "MIG on for idle GPU",
                             " for workload ", id_, " (", d.mig_profile, "); layout ",
                             LayoutText(change.layout), " serves the queue");
      // A later replica of the gang may add an instance to a GPU an earlier one repartitioned:
      // its layout extends the earlier one, so the GPU gets one change with both reasons.
      auto same =
          std::find_if(a.repartitions.begin(), a.repartitions.end(), [&](const Repartition& p) {
            return p.node == change.node && p.gpu_uuid == change.gpu_uuid;
          });
      if (same == a.repartitions.end()) {
        a.repartitions.push_back(std::move(change));
      } else {
        same->mig_enabled = change.mig_enabled;
        same->layout = change.layout;
        absl::StrAppend(&same->reason, "; ", change.reason);
      }
    }
    a.replicas.push_back(std::move(r));
  }
  return a;
}

PlacementDecision Placer::Run() {
  PlacementDecision decision;
  // Results per node are remembered for pure policies; a MIG request's depend on the queue too
  // (the layout for an idle GPU): only without one.
  const Demand::Kind kind = filter_.demand.kind;
  if (options_.accelerate && policy_.Pure() &&
      (kind == Demand::Kind::kWhole || kind == Demand::Kind::kShare ||
       (kind == Demand::Kind::kMig && queue_.empty()))) {
    std::optional<EngineCache::RequestKey> key =
        RequestKeyOf(filter_, spec_, options_, pool_.model_count());
    if (key) request_ = cache_.RequestId(*std::move(key));
  }
  // Ready clusters that may hold it, tightest first (least free capacity of the allowed models;
  // ties in name order). The pool keeps the clusters in that order for each set of models, so
  // only as many are looked at as scoring needs; without such an order, all are ranked here.
  struct Ranked {
    const ClusterSlots* cluster;
    ModelSummary allowed;
  };
  // In a federation larger than the clusters scored per request, gangs skip clusters and groups
  // that cannot hold them by the summaries' bounds instead of trying each node. The decision is
  // the same, and so are later ones: a failed attempt draws nothing (TieDraws). Smaller pools
  // (the trace simulator's one cluster) try everything as before.
  const bool prune = options_.accelerate && spec_.replicas > 1 &&
                     pool_.clusters().size() > static_cast<size_t>(options_.max_clusters_scored);
  const uint32_t as_is_replicas = prune ? spec_.replicas : 1;
  // Per pass: the first pass (idle MIG GPUs stay as they are) only needs the clusters that may
  // hold the request as they are; the second all that may hold it.
  absl::InlinedVector<Ranked, 32> ranked[2];
  size_t next[2] = {0, 0};  // in order->entries
  const Pool::ClusterOrder* order = nullptr;
  // The orders list only clusters with free GPU capacity: a request for no GPU ranks them all.
  if (const std::optional<uint64_t> models = filter_.ModelBits();
      options_.accelerate && filter_.demand.kind != Demand::Kind::kNone && models) {
    order = pool_.ClustersByFree(*models);
  }
  // Holding it as they are needs at least this many free milli-GPUs of the allowed models (whole
  // GPUs count 1000 each; MIG GPUs none), and an order's key starts with a cluster's free
  // milli-GPUs (plus 100 per free MIG instance): the first pass starts its walk past the
  // clusters with less, which it would rule out one by one.
  if (order != nullptr && (kind == Demand::Kind::kWhole || kind == Demand::Kind::kShare)) {
    const Demand& d = filter_.demand;
    const uint64_t need = kind == Demand::Kind::kWhole
                              ? uint64_t{d.gpus} * kMilliPerGpu * as_is_replicas
                              : uint64_t{d.milli};
    const uint64_t key = need << Pool::ClusterOrder::kIndexBits;
    next[0] = static_cast<size_t>(
        std::lower_bound(order->entries.begin(), order->entries.end(), key,
                         [](const Pool::ClusterOrder::Entry& e, uint64_t k) { return e.key < k; }) -
        order->entries.begin());
  }
  if (order == nullptr) {
    std::vector<std::pair<uint64_t, const ClusterSlots*>> free;
    // Without acceleration every ready cluster is tried: the summaries' bounds are not used.
    for (size_t index = 0; index < pool_.clusters().size(); ++index) {
      const ClusterSlots& c = pool_.clusters()[index];
      if (!filter_.ClusterOk(index)) continue;
      if (c.state != ClusterState::kReady || (options_.accelerate && !ClusterMayHold(c))) continue;
      free.emplace_back(ClusterFree(c), &c);
    }
    std::stable_sort(free.begin(), free.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [f, c] : free) {
      const Ranked r{c, Allowed(*c)};
      ranked[1].push_back(r);
      if (!options_.accelerate || MayHoldAsIs(r.allowed, as_is_replicas)) ranked[0].push_back(r);
    }
  }
  // The order's entries carry the figures the filters need: most clusters are ruled out without
  // looking further, and only MIG requests look at the clusters themselves.
  auto ranked_at = [&](int pass, size_t i) -> const Ranked* {
    auto& list = ranked[pass];
    while (order != nullptr && list.size() <= i && next[pass] < order->entries.size()) {
      const Pool::ClusterOrder::Entry& e = order->entries[next[pass]++];
      if (RuledOut(e) || (pass == 0 && AsIsRuledOut(e, as_is_replicas))) continue;
      const auto index = static_cast<uint32_t>(e.key & Pool::ClusterOrder::kIndexMask);
      if (!filter_.ClusterOk(index)) continue;
      const Pool::RankedCluster& r = order->clusters[index];
      const ClusterSlots& c = pool_.clusters()[index];
      if (!ClusterMayHold(c, r.models)) continue;
      if (pass == 0 && !MayHoldAsIs(r.models, as_is_replicas)) continue;
      list.push_back({&c, r.models});
    }
    return i < list.size() ? &list[i] : nullptr;
  };
  std::vector<Member> whole;  // 0, 1, 2, ...: the first n are a group of a cluster's n nodes
  const std::vector<Group>* groups = nullptr;
  std::vector<Group> uncached;  // without acceleration: the groups of the cluster at hand

  const Levels levels = LevelsFor(spec_.topology, spec_.replicas);
  const bool gang = spec_.replicas > 1;
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
      for (size_t i = 0; scored < options_.max_clusters_scored; ++i) {
        const Ranked* r = ranked_at(pass, i);
        if (r == nullptr) break;
        const ClusterSlots* cluster = r->cluster;
        if (prune && !LevelMayHold(r->allowed, level, mig_off)) continue;
        bool any = false;
        // The node and cluster levels need no grouping by name: one group per node, or one of
        // every node.
        const auto n_nodes = static_cast<uint32_t>(cluster->nodes.size());
        size_t n_groups = 1;
        if (level == Level::kNode) {
          n_groups = n_nodes;
        } else if (level == Level::kCluster) {
          for (auto n = static_cast<uint32_t>(whole.size()); n < n_nodes; ++n) {
            whole.push_back(Member{n});
          }
        } else {
          if (options_.accelerate) {
            groups = &cache_.GroupsOf(*cluster, level);
          } else {
            uncached = GroupsAt(*cluster, level);
            groups = &uncached;
          }
          n_groups = groups->size();
        }
        for (size_t k = 0; k < n_groups; ++k) {
          const Member one{static_cast<uint32_t>(k)};
          const absl::Span<const Member> members =
              level == Level::kNode      ? absl::MakeConstSpan(&one, 1)
              : level == Level::kCluster ? absl::MakeConstSpan(whole.data(), n_nodes)
                                         : absl::MakeConstSpan((*groups)[k].members);
          if (prune && !GroupMayHold(*cluster, members, mig_off)) continue;
          // A failed attempt draws nothing, here and in the policy (TieDraws). With one replica
          // an attempt that draws has found a place: it cannot fail.
          std::optional<std::mt19937_64> policy_draws;
          if (gang && !policy_.Pure()) policy_draws = policy_.random_state();
          if (gang) draws_.Begin();
          std::optional<GangFit> fit =
              FitGroup(*cluster, members, mig_off, level == Level::kCluster);
          if (gang) draws_.End(/*failed=*/!fit);
          if (!fit) {
            if (policy_draws) policy_.RestoreRandomState(*policy_draws);
            continue;
          }
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
            if (draws_.Uniform(ties) == 1) {
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
  if (explain_) ExplainFailure(pool_, spec_, filter_, options_, cache_, &decision);
  return decision;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PlacementEngine>> PlacementEngine::Create(PlacementOptions options) {
  absl::StatusOr<std::unique_ptr<PlacementPolicy>> policy = MakePolicy(options.policy);
  if (!policy.ok()) return policy.status();
  return std::unique_ptr<PlacementEngine>(
      new PlacementEngine(std::move(options), *std::move(policy)));
}

PlacementEngine::~PlacementEngine() = default;

void PlacementEngine::SetMix(const WorkloadMix& mix) {
  mix_ = mix;
  policy_->SetMix(mix);
  cache_->found.clear();  // scores depend on the mix
  cache_->offered.clear();
}

PlacementEngine::PlacementEngine(PlacementOptions options, std::unique_ptr<PlacementPolicy> policy)
    : options_(std::move(options)),
      policy_(std::move(policy)),
      tie_rng_(options_.seed),
      cache_(std::make_unique<EngineCache>()) {
  policy_->Seed(options_.seed ^ 0x9e3779b97f4a7c15ULL);
}

PlacementDecision PlacementEngine::Place(const Pool& pool, const WorkloadSpec& spec, WorkloadId id,
                                         const MigQueue& mig_queue, const PlacementScope* scope) {
  Placer placer(pool, spec, id, mig_queue, *policy_, options_, tie_rng_, *cache_, scope);
  return placer.Run();
}

WorkloadMix MixOf(Pool& pool, const std::vector<WorkloadSpec>& specs, double coverage) {
  // Typical workloads as in the paper's simulator: group by (CPU, share per GPU, GPU count,
  // allowed models; MIG profile), most popular first until `coverage` of all workloads is
  // covered, weights renormalised over the kept ones. Host memory is not part of the key.
  using Key = std::tuple<uint64_t, uint32_t, uint32_t, std::string, std::string>;
  std::map<Key, uint64_t> counts;
  uint64_t total = 0;
  std::map<Key, double> memory;  // host memory summed over the group, for its mean
  for (const WorkloadSpec& s : specs) {
    const Demand d = Demand::Of(s);
    Key key{d.cpu_millis, d.milli, d.gpus, absl::StrJoin(s.gpu_models, "|"), d.mig_profile};
    counts[key] += s.replicas;
    memory[key] += static_cast<double>(d.memory_mib) * s.replicas;
    total += s.replicas;
  }
  std::vector<std::pair<uint64_t, Key>> ordered;
  ordered.reserve(counts.size());
  for (const auto& [k, n] : counts) ordered.emplace_back(n, k);
  std::sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second > b.second;
  });
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
    // The group's mean host memory: not part of the key (as in the paper), used only by
    // policies that count memory in fragmentation.
    e.demand.memory_mib = static_cast<uint64_t>(memory[k] / static_cast<double>(n));
    e.demand.kind = !mig.empty()           ? Demand::Kind::kMig
                    : gpus == 0            ? Demand::Kind::kNone
                    : milli < kMilliPerGpu ? Demand::Kind::kShare
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
