#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <unordered_map>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "federation/policy.h"

namespace gpufed {

Demand Demand::Of(const WorkloadSpec& spec) {
  Demand d;
  d.cpu_millis = spec.cpu_millis;
  d.memory_mib = spec.memory_mib;
  if (!spec.mig_profile.empty()) {
    d.kind = Kind::kMig;
    d.gpus = 1;
    d.milli = 0;
    d.mig_profile = spec.mig_profile;
  } else if (spec.gpu_milli > 0 && spec.gpu_milli < kMilliPerGpu) {
    d.kind = Kind::kShare;
    d.gpus = 1;
    d.milli = spec.gpu_milli;
  } else if (spec.gpus_per_replica == 0) {
    d.kind = Kind::kNone;
    d.gpus = 0;
    d.milli = 0;
  } else {
    d.kind = Kind::kWhole;
    d.gpus = spec.gpus_per_replica;
    d.milli = kMilliPerGpu;
  }
  return d;
}

uint64_t NodeView::MilliFree() const {
  uint64_t sum = 0;
  for (uint32_t m : milli_free) sum += m;
  return sum;
}

uint32_t NodeView::WholeFree() const {
  return static_cast<uint32_t>(std::count(milli_free.begin(), milli_free.end(), kMilliPerGpu));
}

bool NodeView::Fits(const Demand& d) const {
  if (cpu_free != kUnlimited && cpu_free < d.cpu_millis) return false;
  if (memory_free != kUnlimited && memory_free < d.memory_mib) return false;
  switch (d.kind) {
    case Demand::Kind::kNone:
      return true;
    case Demand::Kind::kShare:
      return std::any_of(milli_free.begin(), milli_free.end(),
                         [&](uint32_t m) { return m >= d.milli; });
    case Demand::Kind::kWhole:
      return WholeFree() >= d.gpus;
    case Demand::Kind::kMig:
      return false;
  }
  return false;
}

NodeView NodeView::After(const Demand& d, absl::Span<const uint8_t> gpus) const {
  NodeView v = *this;
  if (v.cpu_free != kUnlimited) v.cpu_free -= std::min(v.cpu_free, d.cpu_millis);
  if (v.memory_free != kUnlimited) v.memory_free -= std::min(v.memory_free, d.memory_mib);
  for (uint8_t g : gpus) v.milli_free[g] -= std::min(v.milli_free[g], d.milli);
  return v;
}

namespace {

// How many replicas of `d` the node's free CPU and host memory still hold (unbounded when the
// demand asks for neither or the node does not report them).
uint64_t HostReplicas(const NodeView& node, const Demand& d) {
  uint64_t replicas = std::numeric_limits<uint64_t>::max();
  if (node.cpu_free != kUnlimited && d.cpu_millis > 0) {
    replicas = std::min(replicas, node.cpu_free / d.cpu_millis);
  }
  if (node.memory_free != kUnlimited && d.memory_mib > 0) {
    replicas = std::min(replicas, node.memory_free / d.memory_mib);
  }
  return replicas;
}

}  // namespace

double NodeFragmentation(const NodeView& node, const WorkloadMix& mix,
                         FragmentationMeasure measure) {
  const uint64_t total = node.MilliFree();
  if (total == 0) return 0;
  const bool host_aware = measure == FragmentationMeasure::kHostAware;
  // The free shares, most first, and their running sums: the GPUs a workload uses when it may
  // use only some of them.
  absl::InlinedVector<uint32_t, 8> most_first(node.milli_free.begin(), node.milli_free.end());
  std::sort(most_first.begin(), most_first.end(), std::greater<>());
  absl::InlinedVector<uint64_t, 9> sum_of_first(most_first.size() + 1, 0);
  for (size_t i = 0; i < most_first.size(); ++i) {
    sum_of_first[i + 1] = sum_of_first[i] + most_first[i];
  }
  double frag = 0;
  for (const MixEntry& e : mix) {
    const Demand& d = e.demand;
    bool usable = d.kind != Demand::Kind::kNone && d.kind != Demand::Kind::kMig;
    usable = usable && (e.models.empty() ||
                        std::find(e.models.begin(), e.models.end(), node.model) != e.models.end());
    usable = usable && (node.cpu_free == kUnlimited || node.cpu_free >= d.cpu_millis);
    usable = usable &&
             (!host_aware || node.memory_free == kUnlimited || node.memory_free >= d.memory_mib);
    uint64_t used = 0;
    if (usable) {
      // GPUs with enough share left: a prefix of most_first.
      const auto enough = static_cast<uint64_t>(
          std::upper_bound(most_first.begin(), most_first.end(), d.milli, std::greater<>()) -
          most_first.begin());
      usable = enough >= d.gpus;
      uint64_t reach = enough;
      if (usable && host_aware && d.kind == Demand::Kind::kShare) {
        const uint64_t replicas = HostReplicas(node, d);
        reach = std::min(enough, replicas);
      }
      used = sum_of_first[reach];
    }
    frag += e.weight * static_cast<double>(total - (usable ? used : 0));
  }
  return frag;
}

namespace {

// The authors' simulator scales host CPU and GPU by a fixed largest node (128 cores, 8 GPUs).
constexpr double kCpuScale = 128000;
constexpr double kGpuScale = 8000;

double CpuFree(const NodeView& v) {
  return v.cpu_free == kUnlimited ? 0 : static_cast<double>(v.cpu_free);
}

// The GPU a share goes to under the "best" selector: the smallest share left that holds it,
// lowest index on ties.
int BestShareGpu(const NodeView& v, uint32_t milli) {
  int best = -1;
  for (size_t g = 0; g < v.milli_free.size(); ++g) {
    if (v.milli_free[g] < milli) continue;
    if (best < 0 || v.milli_free[g] < v.milli_free[best]) best = static_cast<int>(g);
  }
  return best;
}

// Whether a GPU before `g` has the same share left: the node's fragmentation does not depend on
// which GPU is which, so a share on either scores the same, and the lower index is kept anyway.
bool SameShareEarlier(const NodeView& v, size_t g) {
  return std::find(v.milli_free.begin(), v.milli_free.begin() + static_cast<ptrdiff_t>(g),
                   v.milli_free[g]) != v.milli_free.begin() + static_cast<ptrdiff_t>(g);
}

// GPUs for any demand under the "best" selector.
absl::InlinedVector<uint8_t, 8> BestGpus(const NodeView& v, const Demand& d) {
  if (d.kind == Demand::Kind::kWhole) return v.whole_pick;
  absl::InlinedVector<uint8_t, 8> gpus;
  if (d.kind == Demand::Kind::kShare) {
    const int g = BestShareGpu(v, d.milli);
    if (g >= 0) gpus.push_back(static_cast<uint8_t>(g));
  }
  return gpus;
}

class RandomPolicy : public PlacementPolicy {
 public:
  [[nodiscard]] absl::string_view name() const override { return "random"; }
  // Every node draws a uniform random score, so the best is a uniformly random feasible node
  // whatever the engine's tie-break; a share goes to a random GPU that holds it.
  NodeChoice Choose(const NodeView& v, const Demand& d, uint32_t) override {
    NodeChoice c;
    c.score = std::uniform_real_distribution<double>(0, 1)(rng_);
    if (d.kind != Demand::Kind::kShare) {
      c.gpus = BestGpus(v, d);
      return c;
    }
    uint32_t seen = 0;
    for (size_t g = 0; g < v.milli_free.size(); ++g) {
      if (v.milli_free[g] < d.milli) continue;
      ++seen;
      if (std::uniform_int_distribution<uint32_t>(1, seen)(rng_) == 1) {
        c.gpus = {static_cast<uint8_t>(g)};
      }
    }
    return c;
  }
};

class FirstFitPolicy : public PlacementPolicy {
 public:
  [[nodiscard]] absl::string_view name() const override { return "first-fit"; }
  [[nodiscard]] bool Pure() const override { return true; }
  NodeChoice Choose(const NodeView& v, const Demand& d, uint32_t node_order) override {
    NodeChoice c;
    c.score = -static_cast<double>(node_order);
    // The first GPU that holds the share.
    if (d.kind == Demand::Kind::kShare) {
      for (size_t g = 0; g < v.milli_free.size(); ++g) {
        if (v.milli_free[g] >= d.milli) {
          c.gpus = {static_cast<uint8_t>(g)};
          break;
        }
      }
    } else {
      c.gpus = BestGpus(v, d);
    }
    return c;
  }
};

// The node left with the least free resources: CPU and GPU left after placement, each as a
// share of the largest node, weighted equally; scored as whole points 0..100 like the authors'
// simulator (so close nodes tie and the tie-break spreads them).
class BestFitPolicy : public PlacementPolicy {
 public:
  [[nodiscard]] absl::string_view name() const override { return "best-fit"; }
  [[nodiscard]] bool Pure() const override { return true; }
  NodeChoice Choose(const NodeView& v, const Demand& d, uint32_t) override {
    NodeChoice c;
    const double cpu_left = (CpuFree(v) - static_cast<double>(d.cpu_millis)) / kCpuScale;
    const double gpu_left =
        (static_cast<double>(v.MilliFree()) - static_cast<double>(d.TotalMilli())) / kGpuScale;
    c.score = std::trunc((1 - 0.5 * cpu_left - 0.5 * gpu_left) * 100);
    c.gpus = BestGpus(v, d);
    return c;
  }
};

// The dot product of the node's free CPU and GPU with the demand (both scaled by the largest
// node); as in the authors' simulator the smaller product scores higher.
class DotProductPolicy : public PlacementPolicy {
 public:
  [[nodiscard]] absl::string_view name() const override { return "dot-product"; }
  [[nodiscard]] bool Pure() const override { return true; }
  NodeChoice Choose(const NodeView& v, const Demand& d, uint32_t) override {
    NodeChoice c;
    const double dot = (CpuFree(v) / kCpuScale) * (static_cast<double>(d.cpu_millis) / kCpuScale) +
                       (static_cast<double>(v.MilliFree()) / kGpuScale) *
                           (static_cast<double>(d.TotalMilli()) / kGpuScale);
    c.score = std::trunc(100 * (1 - dot / 2));
    c.gpus = BestGpus(v, d);
    return c;
  }
};

// Keeps whole GPUs whole: a share goes to the partly used GPU with the least left; a demand that
// needs fresh GPUs prefers a node already in use; untouched nodes come last, smallest first.
class GpuPackingPolicy : public PlacementPolicy {
 public:
  [[nodiscard]] absl::string_view name() const override { return "gpu-packing"; }
  [[nodiscard]] bool Pure() const override { return true; }
  NodeChoice Choose(const NodeView& v, const Demand& d, uint32_t) override {
    NodeChoice c;
    c.gpus = BestGpus(v, d);
    if (d.kind == Demand::Kind::kNone) return c;  // score 0 everywhere: CPU-only goes anywhere
    const auto whole = static_cast<int>(v.WholeFree());
    if (whole == static_cast<int>(v.milli_free.size())) {
      c.score = std::max(33 - whole, whole);
      return c;
    }
    int fresh = 0;
    int left_points = 0;
    for (uint8_t g : c.gpus) {
      if (v.milli_free[g] == kMilliPerGpu) ++fresh;
      left_points += static_cast<int>(v.milli_free[g] * 100 / kMilliPerGpu);
    }
    c.score = fresh > 0 ? std::max(50 - fresh, 33) : std::max(100 - left_points / 10, 50);
    return c;
  }
};

// Memoised node fragmentation: nodes in the same state (model, CPU and memory left, free shares in
// any order) have the same fragmentation, and a pool has far fewer states than nodes.
class FragmentationCache {
 public:
  explicit FragmentationCache(FragmentationMeasure measure) : measure_(measure) {}
  double Of(const NodeView& v, const WorkloadMix& mix) {
    Key key{v.model,
            v.cpu_free,
            measure_ == FragmentationMeasure::kHostAware ? v.memory_free : 0,
            {v.milli_free.begin(), v.milli_free.end()}};
    std::sort(key.milli.begin(), key.milli.end());
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    if (cache_.size() > kMaxEntries) cache_.clear();
    const double f = NodeFragmentation(v, mix, measure_);
    cache_.emplace(std::move(key), f);
    return f;
  }
  void Clear() { cache_.clear(); }

 private:
  static constexpr size_t kMaxEntries = 1 << 21;
  struct Key {
    uint16_t model;
    uint64_t cpu;
    uint64_t memory;
    absl::InlinedVector<uint32_t, 8> milli;
    bool operator==(const Key&) const = default;
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.model, k.cpu, k.memory, k.milli);
    }
  };
  const FragmentationMeasure measure_;
  absl::flat_hash_map<Key, double> cache_;  // open addressing: one probe per lookup
};

// Base for the fragmentation-gradient policies: the change in the node's expected fragmentation
// when the replica takes `gpus`.
class FragmentationPolicy : public PlacementPolicy {
 public:
  explicit FragmentationPolicy(FragmentationMeasure measure) : cache_(measure) {}
  void SetMix(const WorkloadMix& mix) override {
    mix_ = mix;
    cache_.Clear();
  }
  [[nodiscard]] bool Pure() const override {
    return true;
  }  // the fragmentation cache only remembers values

 protected:
  // The FGD paper's score for a change in fragmentation: floor(100 * sigmoid(-delta / 1000)),
  // whole points 0..100. Changes within a few tens of milli-GPUs score the same.
  static double GradientPoints(double delta) {
    return std::floor(100.0 / (1.0 + std::exp(delta / 1000.0)));
  }

  // after - before, in milli-GPUs.
  double Delta(const NodeView& v, double before, const Demand& d, absl::Span<const uint8_t> gpus) {
    return cache_.Of(v.After(d, gpus), mix_) - before;
  }

  WorkloadMix mix_;
  FragmentationCache cache_;
};

// Fragmentation Gradient Descent (Weng et al., USENIX ATC '23), as the authors' simulator scores
// it: floor(100 * sigmoid(-delta / 1000)); a share tries each GPU in index order and keeps the
// first with the best score; whole GPUs are the engine's pick.
class FgdPolicy : public FragmentationPolicy {
 public:
  FgdPolicy() : FragmentationPolicy(FragmentationMeasure::kFgd) {}
  [[nodiscard]] absl::string_view name() const override { return "fgd"; }
  NodeChoice Choose(const NodeView& v, const Demand& d, uint32_t) override {
    const double before = cache_.Of(v, mix_);
    auto score = [&](absl::Span<const uint8_t> gpus) {
      return GradientPoints(Delta(v, before, d, gpus));
    };
    NodeChoice c;
    if (d.kind != Demand::Kind::kShare) {
      c.gpus = BestGpus(v, d);
      c.score = score(c.gpus);
      return c;
    }
    c.score = -1;
    for (size_t g = 0; g < v.milli_free.size(); ++g) {
      if (v.milli_free[g] < d.milli || SameShareEarlier(v, g)) continue;
      const uint8_t pick[] = {static_cast<uint8_t>(g)};
      const double s = score(pick);
      if (s > c.score) {
        c.score = s;
        c.gpus = {pick[0]};
      }
    }
    return c;
  }
};

// gpufed's own policy (docs/placement.md): FGD's fragmentation gradient, with three changes that
// each measured better on the openb traces (docs/simulator.md):
// - fragmentation is host-aware (FragmentationMeasure::kHostAware): a typical share workload can
//   use only as many GPUs as the node's free CPU and host memory can feed (FGD asks only whether
//   one replica fits), so work that eats a node's CPU or memory is charged for the GPUs it
//   strands; and no typical workload can use a node whose free memory is below its own;
// - among nodes with the same gradient score, the node with the fewest whole free GPUs: fill
//   nodes already in use and keep whole nodes for multi-GPU work;
// - within a node, a share goes to the GPU it fills most (then the lowest index).
class GpufedPolicy : public FragmentationPolicy {
 public:
  GpufedPolicy() : FragmentationPolicy(FragmentationMeasure::kHostAware) {}
  [[nodiscard]] absl::string_view name() const override { return "gpufed"; }
  NodeChoice Choose(const NodeView& v, const Demand& d, uint32_t) override {
    const double before = cache_.Of(v, mix_);
    const double consolidation = -static_cast<double>(v.WholeFree()) / 100.0;  // > -1
    auto score = [&](absl::Span<const uint8_t> gpus) {
      double left = 0;  // share left on the chosen GPUs, milli
      for (uint8_t g : gpus) left += v.milli_free[g] - std::min(v.milli_free[g], d.milli);
      // Whole gradient points first; the tie-breaks stay below one point.
      return GradientPoints(Delta(v, before, d, gpus)) + 1e-3 * (consolidation - left / 1e6);
    };
    NodeChoice c;
    if (d.kind != Demand::Kind::kShare) {
      c.gpus = BestGpus(v, d);
      c.score = score(c.gpus);
      return c;
    }
    bool first = true;
    for (size_t g = 0; g < v.milli_free.size(); ++g) {
      if (v.milli_free[g] < d.milli || SameShareEarlier(v, g)) continue;
      const uint8_t pick[] = {static_cast<uint8_t>(g)};
      const double s = score(pick);
      if (first || s > c.score) {
        first = false;
        c.score = s;
        c.gpus = {pick[0]};
      }
    }
    return c;
  }
};

}  // namespace

std::vector<std::string> PolicyNames() {
  return {"random", "first-fit", "best-fit", "dot-product", "gpu-packing", "fgd", "gpufed"};
}

absl::StatusOr<std::unique_ptr<PlacementPolicy>> MakePolicy(absl::string_view name) {
  if (name == "random") return std::make_unique<RandomPolicy>();
  if (name == "first-fit") return std::make_unique<FirstFitPolicy>();
  if (name == "best-fit") return std::make_unique<BestFitPolicy>();
  if (name == "dot-product") return std::make_unique<DotProductPolicy>();
  if (name == "gpu-packing") return std::make_unique<GpuPackingPolicy>();
  if (name == "fgd") return std::make_unique<FgdPolicy>();
  if (name == "gpufed") return std::make_unique<GpufedPolicy>();
  return absl::InvalidArgumentError(absl::StrCat("policy: unknown placement policy \"", name,
                                                 "\" (known: ", absl::StrJoin(PolicyNames(), ", "),
                                                 ")"));
}

}  // namespace gpufed
