#include "federation/routing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "federation/mig.h"
#include "federation/placement_internal.h"

namespace gpufed {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
constexpr int64_t kMicrosPerUnit = 1'000'000;

uint8_t Bit(CapacityType t) { return static_cast<uint8_t>(1U << static_cast<int>(t)); }

// a x num / den, rounded to the nearest micro-unit.
int64_t Scaled(int64_t a, int64_t num, int64_t den) {
  const __int128 product = static_cast<__int128>(a) * num;
  return static_cast<int64_t>((product + den / 2) / den);
}

bool Contains(const std::vector<std::string>& list, absl::string_view value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

std::string Money(int64_t micros) {
  return absl::StrFormat("%.2f", static_cast<double>(micros) / kMicrosPerUnit);
}

std::string Millis(int64_t micros) {
  return absl::StrFormat("%g ms", static_cast<double>(micros) / 1000.0);
}

// The GPU rule an offer breaks, in words; "" when none.
std::string RefusedOffer(const ClusterDeclaration& declared, const WorkloadSpec& spec,
                         absl::string_view model, CapacityType capacity, Timestamp at) {
  const PlacementConstraints& rules = spec.placement;
  if (capacity == CapacityType::kSpot && !rules.spot_tolerated) return "spot not tolerated";
  if (rules.max_price_per_gpu_hour_micros > 0 && capacity != CapacityType::kCommitted) {
    const std::optional<int64_t> price = PricePerGpuHour(declared, spec, model, capacity, at);
    if (!price) return "unpriced, and a price cap is set";
    if (*price > rules.max_price_per_gpu_hour_micros) {
      return absl::StrCat("price ", Money(*price), " per GPU-hour above ",
                          Money(rules.max_price_per_gpu_hour_micros));
    }
  }
  return "";
}

// The GPU-level rules (spot, price cap) for one offer of a cluster that passes the cluster rules.
bool OfferAllowed(const ClusterDeclaration& declared, const WorkloadSpec& spec,
                  absl::string_view model, CapacityType capacity, Timestamp at) {
  return RefusedOffer(declared, spec, model, capacity, at).empty();
}

bool ModelAllowed(const WorkloadSpec& spec, absl::string_view model) {
  return spec.gpu_models.empty() || Contains(spec.gpu_models, model);
}

// Why no offer is left: the hard rules applied one after another to the clusters that have a GPU
// the workload could use (any cluster, for a request of no GPU); the first that leaves none is
// named.
PendingReason NoClusterReason(const Pool& pool, const WorkloadSpec& spec, Timestamp at) {
  const PlacementConstraints& rules = spec.placement;
  const placement_internal::Filter filter = placement_internal::MakeFilter(pool, spec);
  const bool no_gpu = filter.demand.kind == Demand::Kind::kNone;
  std::vector<const ClusterSlots*> left;
  for (const ClusterSlots& c : pool.clusters()) {
    bool has = no_gpu;
    for (size_t m = 0; m < c.capacity_by_model.size() && !has; ++m) {
      has = c.capacity_by_model[m] != 0 && ModelAllowed(spec, pool.ModelName(m));
    }
    if (has) left.push_back(&c);
  }
  PendingReason reason(ReasonCode::kNoClusterAllowed);
  reason.Set(figure::kNeeds, placement_internal::DescribeNeeds(spec, filter.demand));
  auto apply = [&](const std::string& rule, auto keep) {
    if (left.empty()) return false;
    std::erase_if(left, [&](const ClusterSlots* c) { return !keep(*c); });
    if (!left.empty()) return false;
    reason.Set(figure::kRule, rule);
    return true;
  };
  if (!rules.clusters.empty() &&
      apply(absl::StrCat("among ", absl::StrJoin(rules.clusters, ", ")),
            [&](const ClusterSlots& c) { return Contains(rules.clusters, c.info.name); })) {
    return reason;
  }
  if (!rules.denied_clusters.empty() &&
      apply(absl::StrCat("other than ", absl::StrJoin(rules.denied_clusters, ", ")),
            [&](const ClusterSlots& c) { return !Contains(rules.denied_clusters, c.info.name); })) {
    return reason;
  }
  if (!rules.jurisdictions.empty() &&
      apply(absl::StrCat("in jurisdiction ", absl::StrJoin(rules.jurisdictions, " or ")),
            [&](const ClusterSlots& c) {
              return Contains(rules.jurisdictions, c.info.jurisdiction);
            })) {
    return reason;
  }
  for (const std::string& label : rules.compliance_labels) {
    if (apply(absl::StrCat("with compliance label ", label),
              [&](const ClusterSlots& c) { return Contains(c.info.compliance_labels, label); })) {
      return reason;
    }
  }
  if (!rules.providers.empty() &&
      apply(absl::StrCat("of provider ", absl::StrJoin(rules.providers, " or ")),
            [&](const ClusterSlots& c) { return Contains(rules.providers, c.info.provider); })) {
    return reason;
  }
  if (!rules.regions.empty() &&
      apply(absl::StrCat("in region ", absl::StrJoin(rules.regions, " or ")),
            [&](const ClusterSlots& c) { return Contains(rules.regions, c.info.region); })) {
    return reason;
  }
  if (!rules.min_driver_version.empty() &&
      apply(absl::StrCat("with driver ", rules.min_driver_version, " or newer"),
            [&](const ClusterSlots& c) {
              return c.max_driver_version >= PackVersion(rules.min_driver_version).value_or(0);
            })) {
    return reason;
  }
  if (!rules.min_cuda_version.empty() &&
      apply(absl::StrCat("with CUDA ", rules.min_cuda_version, " or newer"),
            [&](const ClusterSlots& c) {
              return c.max_cuda_version >= PackVersion(rules.min_cuda_version).value_or(0);
            })) {
    return reason;
  }
  if (rules.max_rtt_micros > 0 &&
      apply(absl::StrCat("within ", Millis(rules.max_rtt_micros), " of client region ",
                         rules.client_region),
            [&](const ClusterSlots& c) { return BrokenClusterRule(c, rules).empty(); })) {
    return reason;
  }
  // The rules that depend on the GPU: a cluster stays while one of its GPUs passes them.
  auto any_offer = [&](const ClusterSlots& c, bool price) {
    if (no_gpu) return true;
    for (size_t m = 0; m < c.capacity_by_model.size(); ++m) {
      const std::string& model = pool.ModelName(static_cast<uint16_t>(m));
      if (!ModelAllowed(spec, model)) continue;
      for (int t = 0; t < kCapacityTypes; ++t) {
        const auto capacity = static_cast<CapacityType>(t);
        if ((c.capacity_by_model[m] & Bit(capacity)) == 0) continue;
        if (capacity == CapacityType::kSpot && !rules.spot_tolerated) continue;
        if (!price || OfferAllowed(c.declared, spec, model, capacity, at)) return true;
      }
    }
    return false;
  };
  if (apply("with capacity other than spot",
            [&](const ClusterSlots& c) { return any_offer(c, false); })) {
    return reason;
  }
  if (rules.max_price_per_gpu_hour_micros > 0 &&
      apply(
          absl::StrCat("at ", Money(rules.max_price_per_gpu_hour_micros), " or less per GPU-hour"),
          [&](const ClusterSlots& c) { return any_offer(c, true); })) {
    return reason;
  }
  reason.Set(figure::kRule, "allowed by its rules");
  return reason;
}

// The placement scope of some offers: their clusters, models and capacity types.
struct Call {
  std::vector<bool> clusters;
  std::vector<bool> models;
  uint8_t capacity = 0;
};

// An offer's key under `objective` (lower is better; +inf: unpriced or no known distance).
double OfferKey(Objective objective, const RoutingWeights& weights,
                std::optional<int64_t> replica_price, std::optional<int64_t> per_gpu_hour,
                std::optional<int64_t> rtt) {
  switch (objective) {
    case Objective::kPack:
      return 0;
    case Objective::kCost:
      return replica_price ? static_cast<double>(*replica_price) : kInfinity;
    case Objective::kLatency:
      return rtt ? static_cast<double>(*rtt) : kInfinity;
    case Objective::kBalanced:
      return per_gpu_hour && rtt
                 ? weights.cost * static_cast<double>(*per_gpu_hour) / kMicrosPerUnit +
                       weights.latency * static_cast<double>(*rtt) / 1000.0
                 : kInfinity;
  }
  return kInfinity;
}

constexpr uint16_t kAnyModel = 0xffff;  // an offer of a request for no GPU

// The clusters, models and capacity types of `offers` together.
Call UnionOf(const Pool& pool, const std::vector<Offer>& offers) {
  Call all{std::vector<bool>(pool.clusters().size(), false),
           std::vector<bool>(pool.model_count(), false), 0};
  for (const Offer& o : offers) {
    all.clusters[o.cluster] = true;
    if (o.model != kAnyModel) all.models[o.model] = true;
    all.capacity |= Bit(o.capacity);
  }
  if (std::find(all.models.begin(), all.models.end(), true) == all.models.end()) {
    all.models.clear();  // a request for no GPU: models do not matter
    all.capacity = 0xff;
  }
  return all;
}

// One call for `offers` (a tier) when their clusters x models x capacity types admit nothing
// the tier lacks, else one call per (model, capacity type).
std::vector<Call> CallsFor(const Pool& pool, const std::vector<const Offer*>& offers) {
  const size_t n_clusters = pool.clusters().size();
  const size_t n_models = pool.model_count();
  std::vector<Offer> copies;
  copies.reserve(offers.size());
  std::map<std::pair<uint32_t, uint16_t>, uint8_t> in_tier;  // (cluster, model) -> capacity bits
  for (const Offer* o : offers) {
    copies.push_back(*o);
    in_tier[{o->cluster, o->model}] |= Bit(o->capacity);
  }
  Call all = UnionOf(pool, copies);
  if (all.models.empty()) return {std::move(all)};
  bool rectangle = true;
  for (size_t c = 0; c < n_clusters && rectangle; ++c) {
    if (!all.clusters[c]) continue;
    const ClusterSlots& cluster = pool.clusters()[c];
    for (size_t m = 0; m < cluster.capacity_by_model.size() && rectangle; ++m) {
      if (!all.models[m]) continue;
      const uint8_t present = cluster.capacity_by_model[m] & all.capacity;
      auto it = in_tier.find({static_cast<uint32_t>(c), static_cast<uint16_t>(m)});
      const uint8_t tier = it == in_tier.end() ? 0 : it->second;
      rectangle = (present & ~tier) == 0;
    }
  }
  if (rectangle) return {std::move(all)};
  std::map<std::pair<uint16_t, uint8_t>, Call> split;
  for (const Offer* o : offers) {
    Call& call = split[{o->model, Bit(o->capacity)}];
    if (call.clusters.empty()) {
      call.clusters.assign(n_clusters, false);
      call.models.assign(n_models, false);
      call.models[o->model] = true;
      call.capacity = Bit(o->capacity);
    }
    call.clusters[o->cluster] = true;
  }
  std::vector<Call> calls;
  calls.reserve(split.size());
  for (auto& [key, call] : split) calls.push_back(std::move(call));
  return calls;
}

}  // namespace

std::optional<int64_t> PriceAt(const ClusterDeclaration& declared, absl::string_view model,
                               absl::string_view mig_profile, CapacityType capacity, Timestamp at) {
  std::optional<int64_t> price;
  Timestamp from{};
  for (const PriceEntry& e : declared.prices) {
    if (e.gpu_model != model || e.mig_profile != mig_profile || e.capacity != capacity ||
        e.effective_from > at) {
      continue;
    }
    if (!price || e.effective_from >= from) {
      price = e.micros_per_hour;
      from = e.effective_from;
    }
  }
  return price;
}

namespace {

// The share of one GPU a replica of `d` takes on `model`, as numerator / denominator: whole GPUs
// n/1, a share of N milli-GPU N/1000, a MIG instance its compute slices over the GPU's, no GPU
// 0/1. nullopt for a MIG profile the model does not have.
std::optional<std::pair<int64_t, int64_t>> GpuFraction(const Demand& d, absl::string_view model) {
  switch (d.kind) {
    case Demand::Kind::kWhole:
      return std::pair<int64_t, int64_t>{d.gpus, 1};
    case Demand::Kind::kShare:
      return std::pair<int64_t, int64_t>{d.milli, kMilliPerGpu};
    case Demand::Kind::kMig: {
      const MigGeometry* geo = FindMigGeometry(model);
      const MigProfile* profile = geo == nullptr ? nullptr : geo->Find(d.mig_profile);
      if (profile == nullptr) return std::nullopt;
      return std::pair<int64_t, int64_t>{profile->compute_slices, geo->compute_slices};
    }
    case Demand::Kind::kNone:
      return std::pair<int64_t, int64_t>{0, 1};
  }
  return std::nullopt;
}

}  // namespace

std::optional<int64_t> ReplicaPricePerHour(const ClusterDeclaration& declared,
                                           const WorkloadSpec& spec, absl::string_view model,
                                           CapacityType capacity, Timestamp at) {
  const Demand d = Demand::Of(spec);
  if (d.kind == Demand::Kind::kNone || capacity == CapacityType::kCommitted) return 0;
  if (d.kind == Demand::Kind::kMig) {
    if (std::optional<int64_t> own = PriceAt(declared, model, d.mig_profile, capacity, at)) {
      return own;
    }
  }
  const std::optional<int64_t> gpu = PriceAt(declared, model, "", capacity, at);
  const std::optional<std::pair<int64_t, int64_t>> fraction = GpuFraction(d, model);
  if (!gpu || !fraction) return std::nullopt;
  return Scaled(*gpu, fraction->first, fraction->second);
}

std::optional<int64_t> PricePerGpuHour(const ClusterDeclaration& declared, const WorkloadSpec& spec,
                                       absl::string_view model, CapacityType capacity,
                                       Timestamp at) {
  const std::optional<int64_t> replica = ReplicaPricePerHour(declared, spec, model, capacity, at);
  const std::optional<std::pair<int64_t, int64_t>> fraction = GpuFraction(Demand::Of(spec), model);
  if (!replica || !fraction) return std::nullopt;
  if (fraction->first == 0) return 0;
  return Scaled(*replica, fraction->second, fraction->first);
}

double EstimatedHours(const WorkloadSpec& spec) {
  return spec.estimated_duration_ms > 0 ? static_cast<double>(spec.estimated_duration_ms) / 3.6e6
                                        : 1.0;
}

std::optional<int64_t> PlacementPricePerHour(const Pool& pool, const WorkloadSpec& spec,
                                             const Assignment& assignment, Timestamp at) {
  const ClusterSlots* cluster = pool.FindCluster(assignment.cluster);
  if (cluster == nullptr) return std::nullopt;
  int64_t total = 0;
  for (const ReplicaAssignment& r : assignment.replicas) {
    if (r.gpu_uuids.empty()) continue;  // no GPU: nothing to pay for
    const NodeSlots* node = cluster->FindNode(r.node);
    if (node == nullptr) return std::nullopt;
    const int g = node->FindGpu(r.gpu_uuids.front());
    if (g < 0) return std::nullopt;
    const std::optional<int64_t> price = ReplicaPricePerHour(
        cluster->declared, spec, node->info.gpus[g].model, node->gpus[g].capacity, at);
    if (!price) return std::nullopt;
    total += *price;
  }
  return total;
}

std::string BrokenClusterRule(const ClusterSlots& cluster, const PlacementConstraints& rules) {
  const ClusterInfo& info = cluster.info;
  if (Contains(rules.denied_clusters, info.name)) return "cluster denied";
  if (!rules.clusters.empty() && !Contains(rules.clusters, info.name)) {
    return "cluster not among the allowed";
  }
  if (!rules.jurisdictions.empty() && !Contains(rules.jurisdictions, info.jurisdiction)) {
    return absl::StrCat("jurisdiction ", info.jurisdiction.empty() ? "(none)" : info.jurisdiction,
                        " not in ", absl::StrJoin(rules.jurisdictions, ", "));
  }
  for (const std::string& label : rules.compliance_labels) {
    if (!Contains(info.compliance_labels, label)) {
      return absl::StrCat("no compliance label ", label);
    }
  }
  if (!rules.providers.empty() && !Contains(rules.providers, info.provider)) {
    return absl::StrCat("provider ", info.provider.empty() ? "(none)" : info.provider, " not in ",
                        absl::StrJoin(rules.providers, ", "));
  }
  if (!rules.regions.empty() && !Contains(rules.regions, info.region)) {
    return absl::StrCat("region ", info.region.empty() ? "(none)" : info.region, " not in ",
                        absl::StrJoin(rules.regions, ", "));
  }
  if (!rules.min_driver_version.empty() &&
      cluster.max_driver_version < PackVersion(rules.min_driver_version).value_or(0)) {
    return absl::StrCat("no node with driver ", rules.min_driver_version, " or newer");
  }
  if (!rules.min_cuda_version.empty() &&
      cluster.max_cuda_version < PackVersion(rules.min_cuda_version).value_or(0)) {
    return absl::StrCat("no node with CUDA ", rules.min_cuda_version, " or newer");
  }
  if (rules.max_rtt_micros > 0) {
    auto it = cluster.declared.rtt_micros.find(rules.client_region);
    if (it == cluster.declared.rtt_micros.end()) {
      return absl::StrCat("no RTT declared from ", rules.client_region);
    }
    if (it->second > rules.max_rtt_micros) {
      return absl::StrCat("RTT ", Millis(it->second), " from ", rules.client_region, " above ",
                          Millis(rules.max_rtt_micros));
    }
  }
  return "";
}

std::vector<Offer> OffersFor(const Pool& pool, const WorkloadSpec& spec, Timestamp at,
                             const RoutingWeights& weights) {
  const PlacementConstraints& rules = spec.placement;
  const bool no_gpu = Demand::Of(spec).kind == Demand::Kind::kNone;
  std::vector<Offer> offers;
  for (size_t i = 0; i < pool.clusters().size(); ++i) {
    const ClusterSlots& c = pool.clusters()[i];
    if (!BrokenClusterRule(c, rules).empty()) continue;
    std::optional<int64_t> rtt;
    if (!rules.client_region.empty()) {
      auto it = c.declared.rtt_micros.find(rules.client_region);
      if (it != c.declared.rtt_micros.end()) rtt = it->second;
    }
    auto add = [&](uint16_t model, CapacityType capacity, std::optional<int64_t> price,
                   std::optional<int64_t> per_gpu_hour) {
      Offer o;
      o.cluster = static_cast<uint32_t>(i);
      o.model = model;
      o.capacity = capacity;
      o.replica_price = price;
      o.rtt_micros = rtt;
      o.key = OfferKey(rules.objective, weights, price, per_gpu_hour, rtt);
      offers.push_back(o);
    };
    if (no_gpu) {
      add(kAnyModel, CapacityType::kOnDemand, 0, 0);
      continue;
    }
    for (size_t m = 0; m < c.capacity_by_model.size(); ++m) {
      if (c.capacity_by_model[m] == 0) continue;
      const std::string& model = pool.ModelName(static_cast<uint16_t>(m));
      if (!ModelAllowed(spec, model)) continue;
      for (int t = 0; t < kCapacityTypes; ++t) {
        const auto capacity = static_cast<CapacityType>(t);
        if ((c.capacity_by_model[m] & Bit(capacity)) == 0) continue;
        if (!OfferAllowed(c.declared, spec, model, capacity, at)) continue;
        add(static_cast<uint16_t>(m), capacity,
            ReplicaPricePerHour(c.declared, spec, model, capacity, at),
            PricePerGpuHour(c.declared, spec, model, capacity, at));
      }
    }
  }
  return offers;
}

PlacementDecision Router::Place(PlacementEngine& engine, const Pool& pool, const WorkloadSpec& spec,
                                WorkloadId id, const MigQueue& mig_queue, Timestamp at) const {
  PlacementScope scope;
  if (spec.placement.empty()) {
    // No rules and no objective: everything but spot capacity, in the engine's own order.
    scope.capacity = static_cast<uint8_t>(0xff & ~Bit(CapacityType::kSpot));
    return engine.Place(pool, spec, id, mig_queue, &scope);
  }
  const std::vector<Offer> offers = OffersFor(pool, spec, at, weights_);
  if (offers.empty()) {
    PlacementDecision decision;
    decision.reason = NoClusterReason(pool, spec, at);
    return decision;
  }
  std::vector<const Offer*> order;
  order.reserve(offers.size());
  for (const Offer& o : offers) order.push_back(&o);
  std::stable_sort(order.begin(), order.end(),
                   [](const Offer* a, const Offer* b) { return a->key < b->key; });
  // Tier by tier, cheapest (or closest) first; the first that holds it wins.
  for (size_t begin = 0; begin < order.size();) {
    size_t end = begin + 1;
    while (end < order.size() && order[end]->key == order[begin]->key) ++end;
    const std::vector<const Offer*> tier(order.begin() + static_cast<std::ptrdiff_t>(begin),
                                         order.begin() + static_cast<std::ptrdiff_t>(end));
    for (Call& call : CallsFor(pool, tier)) {
      scope.clusters = std::move(call.clusters);
      scope.models = std::move(call.models);
      scope.capacity = call.capacity;
      scope.explain = false;
      PlacementDecision decision = engine.Place(pool, spec, id, mig_queue, &scope);
      if (decision.assignment) return decision;
    }
    begin = end;
  }
  // Nothing it may take holds it now: say what keeps the allowed part of the pool busy.
  Call all = UnionOf(pool, offers);
  scope.clusters = std::move(all.clusters);
  scope.models = std::move(all.models);
  scope.capacity = all.capacity;
  scope.explain = true;
  PlacementDecision decision = engine.Place(pool, spec, id, mig_queue, &scope);
  if (decision.assignment) {
    // Only a combination no tier allowed (a model of one cluster at another's price) fits:
    // not a placement the rules allow.
    decision.assignment.reset();
    decision.reason = PendingReason(ReasonCode::kNothingFree);
    decision.reason.Set(figure::kNeeds, placement_internal::DescribeNeeds(spec, Demand::Of(spec)));
  }
  return decision;
}

RoutingExplanation Router::Explain(PlacementEngine& engine, const Pool& pool,
                                   const WorkloadSpec& spec, Timestamp at) const {
  const PlacementConstraints& rules = spec.placement;
  RoutingExplanation out;
  out.objective = rules.objective;
  out.estimated_hours = EstimatedHours(spec);
  out.decision = Place(engine, pool, spec, 0, {}, at);
  if (out.decision.assignment) {
    out.price_per_hour = PlacementPricePerHour(pool, spec, *out.decision.assignment, at);
    if (out.price_per_hour) {
      out.estimated_cost = static_cast<int64_t>(
          std::llround(static_cast<double>(*out.price_per_hour) * out.estimated_hours));
    }
  }
  const bool no_gpu = Demand::Of(spec).kind == Demand::Kind::kNone;
  for (size_t i = 0; i < pool.clusters().size(); ++i) {
    const ClusterSlots& c = pool.clusters()[i];
    const ClusterInfo& info = c.info;
    ClusterCandidate cand;
    cand.cluster = info.name;
    auto check = [&](std::string rule, bool passed, std::string detail) {
      cand.rules.push_back({std::move(rule), passed, std::move(detail)});
    };
    if (!rules.clusters.empty()) {
      check("clusters", Contains(rules.clusters, info.name), info.name);
    }
    if (!rules.denied_clusters.empty()) {
      check("denied clusters", !Contains(rules.denied_clusters, info.name), info.name);
    }
    if (!rules.jurisdictions.empty()) {
      check("jurisdiction", Contains(rules.jurisdictions, info.jurisdiction), info.jurisdiction);
    }
    for (const std::string& label : rules.compliance_labels) {
      check(absl::StrCat("compliance label ", label), Contains(info.compliance_labels, label),
            absl::StrCat("[", absl::StrJoin(info.compliance_labels, ", "), "]"));
    }
    if (!rules.providers.empty()) {
      check("provider", Contains(rules.providers, info.provider), info.provider);
    }
    if (!rules.regions.empty()) check("region", Contains(rules.regions, info.region), info.region);
    auto version = [](uint64_t packed) {
      if (packed == 0) return std::string("none reported");
      return absl::StrCat(packed >> 40, ".", (packed >> 20) & 0xfffff, ".", packed & 0xfffff);
    };
    if (!rules.min_driver_version.empty()) {
      check("min driver version",
            c.max_driver_version >= PackVersion(rules.min_driver_version).value_or(0),
            absl::StrCat("newest ", version(c.max_driver_version)));
    }
    if (!rules.min_cuda_version.empty()) {
      check("min CUDA version",
            c.max_cuda_version >= PackVersion(rules.min_cuda_version).value_or(0),
            absl::StrCat("newest ", version(c.max_cuda_version)));
    }
    std::optional<int64_t> rtt;
    if (auto it = c.declared.rtt_micros.find(rules.client_region);
        !rules.client_region.empty() && it != c.declared.rtt_micros.end()) {
      rtt = it->second;
    }
    if (rules.max_rtt_micros > 0) {
      check("max RTT", rtt && *rtt <= rules.max_rtt_micros,
            rtt ? absl::StrCat(Millis(*rtt), " from ", rules.client_region)
                : absl::StrCat("none declared from ", rules.client_region));
    }
    const bool cluster_ok = BrokenClusterRule(c, rules).empty();
    for (size_t m = 0; m < c.capacity_by_model.size() && !no_gpu; ++m) {
      if (c.capacity_by_model[m] == 0) continue;
      const std::string& model = pool.ModelName(static_cast<uint16_t>(m));
      if (!ModelAllowed(spec, model)) continue;
      for (int t = 0; t < kCapacityTypes; ++t) {
        const auto capacity = static_cast<CapacityType>(t);
        if ((c.capacity_by_model[m] & Bit(capacity)) == 0) continue;
        OfferCheck o;
        o.model = model;
        o.capacity = capacity;
        o.replica_price = ReplicaPricePerHour(c.declared, spec, model, capacity, at);
        o.rtt_micros = rtt;
        o.key = OfferKey(rules.objective, weights_, o.replica_price,
                         PricePerGpuHour(c.declared, spec, model, capacity, at), rtt);
        o.refused = RefusedOffer(c.declared, spec, model, capacity, at);
        if (cluster_ok && o.refused.empty()) {
          cand.allowed = true;
          PlacementScope scope;
          scope.clusters.assign(pool.clusters().size(), false);
          scope.clusters[i] = true;
          scope.models.assign(pool.model_count(), false);
          scope.models[m] = true;
          scope.capacity = Bit(capacity);
          scope.explain = false;
          o.fits_now = engine.Place(pool, spec, 0, {}, &scope).assignment.has_value();
        }
        cand.offers.push_back(std::move(o));
      }
    }
    if (no_gpu) cand.allowed = cluster_ok;
    cand.chosen = out.decision.assignment && out.decision.assignment->cluster == info.name;
    out.candidates.push_back(std::move(cand));
  }
  return out;
}

}  // namespace gpufed
